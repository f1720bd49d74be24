"""The storage config's ``hosts:`` section: which storage host has which log dir, checked against ``log.dirs``."""
from __future__ import annotations

import pytest

from storage_engine.config_file import config_from_mapping, load_config
from storage_engine.config import StorageConfig
from storage_engine.errors import ConfigError

pytestmark = pytest.mark.unit

DIRS = ["/data/dir-a", "/data/dir-b", "/data/dir-c"]


def with_hosts(hosts, dirs=DIRS, base_dir="/") -> StorageConfig:
    return config_from_mapping({"broker": {"log.dirs": dirs}, "hosts": hosts}, base_dir=base_dir)


def test_no_hosts_section_declares_no_host():
    assert dict(with_hosts(None).hosts) == {}
    assert dict(config_from_mapping({"broker": {"log.dirs": DIRS}}, base_dir="/").hosts) == {}


def test_hosts_map_each_host_to_its_log_dirs_in_the_files_order():
    config = with_hosts({"storage-a": ["/data/dir-c", "/data/dir-a"], "storage_b": "/data/dir-b"})
    assert dict(config.hosts) == {"storage-a": ("/data/dir-c", "/data/dir-a"), "storage_b": ("/data/dir-b",)}
    assert list(config.hosts) == ["storage-a", "storage_b"]
    with pytest.raises(TypeError):
        config.hosts["x"] = ("/data/dir-a",)     # type: ignore[index]


def test_relative_host_dirs_resolve_as_log_dirs_do(tmp_path):
    (tmp_path / "storage.yaml").write_text(
        "broker:\n  log.dirs: [logs/dir-a, logs/dir-b]\n"
        "hosts:\n  storage-a: [logs/dir-a]\n  storage-b: [./logs/../logs/dir-b]\n")
    config = load_config(tmp_path / "storage.yaml")
    assert dict(config.hosts) == {"storage-a": (str(tmp_path / "logs" / "dir-a"),),
                                  "storage-b": (str(tmp_path / "logs" / "dir-b"),)}


def test_a_host_dir_is_spelled_as_log_dirs_spells_it():
    config = with_hosts({"a": ["/data//dir-a/", "/data/x/../dir-b"], "c": ["/data/dir-c"]})
    assert config.hosts["a"] == ("/data/dir-a", "/data/dir-b")


def test_for_host_keeps_only_that_hosts_log_dirs():
    config = with_hosts({"storage-a": ["/data/dir-a", "/data/dir-c"], "storage-b": ["/data/dir-b"]})
    part = config.for_host("storage-a")
    assert part.log_dirs == ("/data/dir-a", "/data/dir-c")
    assert dict(part.hosts) == {"storage-a": ("/data/dir-a", "/data/dir-c")}
    assert part.default_log == config.default_log and part.topic_overrides == config.topic_overrides
    with pytest.raises(ConfigError, match=r"storage host 'storage-c' is not declared under 'hosts:' "
                                          r"\(declared: 'storage-a', 'storage-b'\)"):
        config.for_host("storage-c")
    with pytest.raises(ConfigError, match=r"\(declared: none\)"):
        with_hosts(None).for_host("storage-a")


def test_replacing_the_log_dirs_drops_the_hosts(tmp_path):
    config = with_hosts({"storage-a": DIRS})
    assert dict(config.replace_log_dirs([str(tmp_path / "x")]).hosts) == {}


@pytest.mark.parametrize("name", ["", "a.b", "a b", "storage/a", "é", "x" * 201, 1, True])
def test_a_host_name_must_fit_a_celery_queue_and_a_task_group_id(name):
    with pytest.raises(ConfigError, match=r"hosts: .* is not a valid host name.*letters, digits, '-' or '_'"):
        with_hosts({name: DIRS})


def test_a_non_string_host_name_gets_a_quoting_hint():
    with pytest.raises(ConfigError, match=r"hosts: 1 is not a valid host name \(quote it in YAML\)"):
        with_hosts({1: DIRS})


def test_a_host_cannot_be_named_after_the_default_queue():
    with pytest.raises(ConfigError, match="a host cannot be named 'default': that is the Celery queue every worker"):
        with_hosts({"default": DIRS})


@pytest.mark.parametrize("dirs, expected", [
    ([], "hosts.storage-a = []: must name at least one directory"),
    ("", "hosts.storage-a = '': must name at least one directory"),
    (None, "hosts.storage-a = None: must be a list or a comma-separated string"),
    ({"dirs": DIRS}, "must be a list or a comma-separated string"),
    ([5], "hosts.storage-a = [5]: must be a list of strings, 5 is not a string"),
    (["/data/dir-a", "/data/./dir-a"], "'/data/dir-a' are the same directory"),
])
def test_a_hosts_dirs_must_be_a_non_empty_list(dirs, expected):
    with pytest.raises(ConfigError) as err:
        with_hosts({"storage-a": dirs, "storage-b": DIRS})
    assert expected in str(err.value)


def test_a_host_dir_must_be_one_of_log_dirs():
    with pytest.raises(ConfigError) as err:
        with_hosts({"storage-a": ["/data/dir-a", "/data/dir-d"], "storage-b": ["/data/dir-b", "/data/dir-c"]})
    assert str(err.value) == ("hosts.storage-a: '/data/dir-d' (/data/dir-d) is not one of log.dirs (/data/dir-a, "
                              "/data/dir-b, /data/dir-c); a host lists its log dirs as log.dirs names them")


def test_a_log_dir_listed_under_two_hosts_is_named():
    with pytest.raises(ConfigError) as err:
        with_hosts({"storage-a": ["/data/dir-a", "/data/dir-b"], "storage-b": ["/data/dir-c", "/data/dir-b/"]})
    assert str(err.value) == ("hosts: log dir /data/dir-b is listed under both 'storage-a' and 'storage-b'; "
                              "a log dir is on one host")


def test_every_log_dir_must_be_on_a_host():
    with pytest.raises(ConfigError) as err:
        with_hosts({"storage-a": ["/data/dir-b"]})
    assert str(err.value) == ("hosts: log dirs /data/dir-a, /data/dir-c of log.dirs are on no host; list each log "
                              "dir under the host that has it")
    with pytest.raises(ConfigError, match="hosts: log dir /data/dir-c of log.dirs is on no host"):
        with_hosts({"storage-a": ["/data/dir-b", "/data/dir-a"]})


def test_hosts_must_be_a_mapping_and_errors_name_the_file(tmp_path):
    path = tmp_path / "storage.yaml"
    path.write_text("broker:\n  log.dirs: [/data/dir-a]\nhosts: [storage-a]\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value) == f"{path}: 'hosts:' must be a mapping, got list"


def test_an_empty_hosts_section_declares_none():
    assert dict(with_hosts({}).hosts) == {}


def test_a_file_without_log_dirs_reports_that_before_its_hosts():
    with pytest.raises(ConfigError, match="no log.dirs"):
        config_from_mapping({"hosts": {"storage-a": ["/data/dir-a"]}}, base_dir="/")


def _store_with_topic_on_b(tmp_path):
    from storage_engine.clock import ManualClock
    from storage_engine.log.loader import open_log

    a, b = tmp_path / "dir-a", tmp_path / "dir-b"
    a.mkdir()
    b.mkdir()
    config = config_from_mapping({"broker": {"log.dirs": [str(a), str(b)]},
                                  "hosts": {"storage-a": [str(a)], "storage-b": [str(b)]}})
    for d, topic in ((a, "both"), (b, "both"), (b, "only-b")):
        log, _ = open_log(str(d), topic, 0 if d == a else 1, config.log_config(topic), clock=ManualClock(0),
                          exclusive=True, create=True)
        log.close(clean=True)
    return config, b


def test_a_topic_filter_naming_a_topic_of_another_host_gives_this_host_nothing_to_do(tmp_path):
    """A run's `topics` filter is checked against the whole store: each host's tasks maintain the named topics
    they hold, a topic only another host holds is nothing to do here, and a name no host holds is refused."""
    from storage_engine.errors import PartitionNotFoundError
    from storage_engine.jobs.housekeeping import list_partitions

    config, _ = _store_with_topic_on_b(tmp_path)
    host_a = config.for_host("storage-a")
    assert list_partitions(host_a, topics=["only-b"]) == []
    assert [p["topic"] for p in list_partitions(host_a, topics=["only-b", "both"])] == ["both"]
    assert [p["topic"] for p in list_partitions(config.for_host("storage-b"), topics=["only-b"])] == ["only-b"]
    with pytest.raises(PartitionNotFoundError, match=r"unknown topic\(s\) \['typo'\]; existing topics: "
                                                     r"\['both', 'only-b'\]"):
        list_partitions(host_a, topics=["only-b", "typo"])
    with pytest.raises(PartitionNotFoundError, match="typo"):     # without hosts, as before
        list_partitions(config, topics=["typo"])


def test_when_another_hosts_dirs_are_not_on_this_machine_any_topic_may_be_there(tmp_path):
    import shutil

    from storage_engine.jobs.housekeeping import list_partitions

    config, b = _store_with_topic_on_b(tmp_path)
    shutil.rmtree(b)                                   # storage-b's disk is on its own machine
    assert list_partitions(config.for_host("storage-a"), topics=["only-b", "typo"]) == []
