"""Tiered storage's configs: Kafka's topic and broker keys with Kafka's defaults, Kafka's rules on their combination
(wherever topic configs are checked: the config file, CreateTopics, IncrementalAlterConfigs), the store's settings,
the secret never shown, object keys, and topic ids given to partitions that have none."""
from __future__ import annotations

import dataclasses
import multiprocessing
import os
import uuid

import pytest

from storage_engine import layout
from storage_engine.config import LogConfig
from storage_engine.config_file import config_from_mapping, load_config
from storage_engine.config_keys import BROKER_KEYS, TOPIC_KEYS, is_sensitive
from storage_engine.errors import ConfigError, StorageError
from storage_engine.inspection import topics as inspection
from storage_engine.log import topic_id
from storage_engine.server import identity
from storage_engine.server.catalog import check_configs
from storage_engine.server.errors import ErrorCode, TopicError
from storage_engine.tiered.keys import REQUIRED_SUFFIXES, SUFFIXES, parse_key, partition_prefix, segment_keys
from storage_engine.tiered.settings import RemoteStorageSettings

SECRET = "s3cr3t-Never-Shown"
STORE = {"remote.log.storage.system.enable": True, "rsm.config.storage.s3.endpoint.url": "http://127.0.0.1:8333",
         "rsm.config.storage.s3.bucket.name": "tiered", "rsm.config.storage.aws.access.key.id": "key-id",
         "rsm.config.storage.aws.secret.access.key": SECRET}


def config(broker: dict | None = None, topics: dict | None = None, tiered: bool = True):
    keys = {**(STORE if tiered else {}), **(broker or {})}
    return config_from_mapping({"broker": {"log.dirs": "/nonexistent-logs", **keys}, "topics": topics or {}},
                               base_dir="/")


def refused(broker: dict | None = None, topics: dict | None = None, tiered: bool = True) -> str:
    with pytest.raises(ConfigError) as err:
        config(broker, topics, tiered)
    return str(err.value)


# ---------------------------------------------------------------------------------------------- keys and defaults

@pytest.mark.unit
def test_the_keys_have_kafkas_names_types_and_defaults():
    log = config(tiered=False).default_log
    assert (log.remote_storage_enable, log.local_retention_ms, log.local_retention_bytes, log.remote_log_copy_disable,
            log.remote_log_delete_on_disable) == (False, -2, -2, False, False)
    assert {n: TOPIC_KEYS[n].kind.name for n in ("remote.storage.enable", "local.retention.ms",
                                                 "local.retention.bytes", "remote.log.copy.disable",
                                                 "remote.log.delete.on.disable")} == {
        "remote.storage.enable": "BOOLEAN", "local.retention.ms": "LONG", "local.retention.bytes": "LONG",
        "remote.log.copy.disable": "BOOLEAN", "remote.log.delete.on.disable": "BOOLEAN"}
    defaults = {name: BROKER_KEYS[name].default for name in (
        "log.local.retention.ms", "log.local.retention.bytes", "remote.log.storage.system.enable",
        "rlmm.config.remote.log.metadata.topic.num.partitions", "remote.log.index.file.cache.total.size.bytes",
        "rsm.config.storage.s3.region", "rsm.config.storage.s3.path.style.access.enabled", "rsm.config.key.prefix",
        "rsm.config.fetch.chunk.cache.size")}
    assert defaults == {"log.local.retention.ms": -2, "log.local.retention.bytes": -2,
                        "remote.log.storage.system.enable": False,
                        "rlmm.config.remote.log.metadata.topic.num.partitions": 50,
                        "remote.log.index.file.cache.total.size.bytes": 1073741824,
                        "rsm.config.storage.s3.region": "us-east-1",
                        "rsm.config.storage.s3.path.style.access.enabled": True, "rsm.config.key.prefix": "",
                        "rsm.config.fetch.chunk.cache.size": 268435456}


@pytest.mark.unit
def test_local_retention_follows_retention_at_minus_two_and_its_broker_synonym_sets_the_default():
    c = config({"log.retention.ms": 600_000, "log.retention.bytes": 10_000},
               topics={"own": {"remote.storage.enable": True, "local.retention.ms": 60_000,
                               "local.retention.bytes": "4000"},
                       "follows": {"remote.storage.enable": "true"}})
    own, follows = c.log_config("own"), c.log_config("follows")
    assert (own.effective_local_retention_ms, own.effective_local_retention_bytes) == (60_000, 4000)
    assert (follows.local_retention_ms, follows.effective_local_retention_ms) == (-2, 600_000)
    assert follows.effective_local_retention_bytes == 10_000
    broker_level = config({"log.local.retention.ms": 1000, "log.local.retention.bytes": 500}).default_log
    assert (broker_level.local_retention_ms, broker_level.effective_local_retention_bytes) == (1000, 500)
    assert LogConfig(retention_ms=-1).effective_local_retention_ms == -1     # unlimited follows unlimited


@pytest.mark.unit
@pytest.mark.parametrize("topic_configs, named", [
    ({"local.retention.ms": -3}, "local.retention.ms = -3: must be >= -2"),
    ({"local.retention.bytes": "lots"}, "local.retention.bytes = 'lots': must be an integer"),
    ({"remote.storage.enable": "yes"}, "remote.storage.enable = 'yes': must be true or false"),
    ({"remote.log.copy.disable": 1}, "remote.log.copy.disable = 1: must be true or false"),
    ({"remote.log.delete.on.disable": "maybe"}, "remote.log.delete.on.disable = 'maybe': must be true or false"),
])
def test_a_bad_topic_value_is_named(topic_configs, named):
    assert named in refused(topics={"t": topic_configs})


@pytest.mark.unit
@pytest.mark.parametrize("broker, named", [
    ({"log.local.retention.ms": -5}, "log.local.retention.ms = -5: must be >= -2"),
    ({"rlmm.config.remote.log.metadata.topic.num.partitions": 0},
     "rlmm.config.remote.log.metadata.topic.num.partitions = 0: must be >= 1"),
    ({"remote.log.storage.system.enable": "on"}, "remote.log.storage.system.enable = 'on': must be true or false"),
    ({"rsm.config.fetch.chunk.cache.size": 0}, "rsm.config.fetch.chunk.cache.size = 0: must be >= 1"),
    ({"remote.log.metadata.topic.num.partitions": 3},      # Kafka passes it under rlmm.config.
     "did you mean rlmm.config.remote.log.metadata.topic.num.partitions,"),
    ({"remote.storage.enable": True}, "remote.storage.enable is a topic key and has no broker key"),
])
def test_a_bad_broker_value_is_named(broker, named):
    assert named in refused(broker)


# ---------------------------------------------------------------------------------------------- Kafka's rules

@pytest.mark.unit
@pytest.mark.parametrize("policy", ["compact", "compact,delete", ["delete", "compact"]])
def test_a_compacted_topic_cannot_enable_remote_storage(policy):
    text = refused(topics={"t": {"cleanup.policy": policy, "remote.storage.enable": True}})
    assert "topic 't'" in text and "remote.storage.enable" in text and "cleanup.policy = compact" in text
    assert "remote log storage is unsupported for compacted topics" in text
    config(topics={"t": {"cleanup.policy": "compact", "remote.storage.enable": False}})   # off: allowed


@pytest.mark.unit
@pytest.mark.parametrize("topic_configs, named", [
    ({"retention.ms": 600_000, "local.retention.ms": 600_001},
     "local.retention.ms = 600001: must not be more than retention.ms = 600000"),
    ({"retention.bytes": 1000, "local.retention.bytes": 1001},
     "local.retention.bytes = 1001: must not be more than retention.bytes = 1000"),
    ({"retention.ms": 600_000, "local.retention.ms": -1}, "local.retention.ms = -1: must not be -1 (unlimited)"),
    ({"retention.bytes": 1000, "local.retention.bytes": -1}, "local.retention.bytes = -1: must not be -1"),
    ({"remote.log.copy.disable": True, "retention.ms": 600_000, "local.retention.ms": 1000},
     "local.retention.ms = 1000: must equal retention.ms = 600000 (or be -2) while remote.log.copy.disable = true"),
])
def test_local_retention_must_stay_within_retention(topic_configs, named):
    text = refused(topics={"t": {"remote.storage.enable": True, **topic_configs}})
    assert named in text and "topic 't'" in text


@pytest.mark.unit
def test_what_kafka_accepts_of_local_retention():
    c = config(topics={
        "equal": {"remote.storage.enable": True, "retention.ms": 1000, "local.retention.ms": 1000},
        "unlimited": {"remote.storage.enable": True, "retention.ms": -1, "retention.bytes": -1,
                      "local.retention.ms": 5_000_000_000, "local.retention.bytes": -1},
        "not-tiered": {"retention.ms": 1000, "local.retention.ms": 9000},     # Kafka checks only tiered topics
        "copy-off": {"remote.storage.enable": True, "remote.log.copy.disable": True},
    })
    assert c.log_config("unlimited").effective_local_retention_ms == 5_000_000_000
    assert c.log_config("copy-off").remote_log_copy_disable


@pytest.mark.unit
def test_with_the_store_tiered_the_broker_local_retention_stays_within_the_broker_retention():
    text = refused({"log.retention.hours": 1, "log.local.retention.ms": 3_600_001})
    assert "log.local.retention.ms = 3600001: must not be more than log.retention.ms = 3600000" in text
    config({"log.retention.hours": 1, "log.local.retention.ms": 3_600_001}, tiered=False)   # Kafka: checked if on


@pytest.mark.unit
def test_a_topic_cannot_enable_remote_storage_while_the_store_has_it_disabled():
    text = refused(topics={"t": {"remote.storage.enable": True}}, tiered=False)
    assert "topic 't' has remote.storage.enable = true" in text
    assert "remote.log.storage.system.enable = false" in text


@pytest.mark.unit
def test_create_and_alter_check_the_combination_as_the_file_does():
    c = config(topics={"tiered": {"remote.storage.enable": True}})
    with pytest.raises(TopicError) as err:
        check_configs({"cleanup.policy": "compact", "remote.storage.enable": "true"}, c, "new")
    assert err.value.error_code == ErrorCode.invalid_config and "compacted topics" in str(err.value)
    with pytest.raises(TopicError) as err:       # one key alone is fine; its combination with the rest is not
        check_configs({"local.retention.ms": "999999999999"}, c, "tiered", creating=False)
    assert "local.retention.ms = 999999999999: must not be more than retention.ms = 604800000" in str(err.value)
    with pytest.raises(TopicError) as err:
        check_configs({"remote.storage.enable": "false"}, c, "tiered", creating=False)
    assert "invalid to disable remote storage without deleting remote data" in str(err.value)
    assert check_configs({"remote.storage.enable": "false", "remote.log.delete.on.disable": "true"}, c, "tiered",
                         creating=False)
    with pytest.raises(TopicError) as err:
        check_configs({"remote.storage.enable": "true"}, config(tiered=False), "new")
    assert "tiered storage is disabled for this store" in str(err.value)
    with pytest.raises(TopicError) as err:       # the compaction lags were only checked one key at a time before
        check_configs({"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"}, c, "new")
    assert "min.compaction.lag.ms = 10: must be <= max.compaction.lag.ms = 5" in str(err.value)


# ---------------------------------------------------------------------------------------------- settings and secret

@pytest.mark.unit
def test_settings_of_a_config(tmp_path):
    s = RemoteStorageSettings.of(config({"rsm.config.key.prefix": "cluster-a/", "rsm.config.storage.s3.region": "eu-1",
                                         "rlmm.config.remote.log.metadata.topic.num.partitions": 3}))
    assert (s.enabled, s.endpoint_url, s.bucket, s.region, s.path_style, s.access_key_id, s.secret_access_key,
            s.key_prefix, s.metadata_partitions, s.cache_bytes, s.index_cache_bytes) == (
        True, "http://127.0.0.1:8333", "tiered", "eu-1", True, "key-id", SECRET, "cluster-a/", 3, 256 << 20, 1 << 30)
    assert s.cache_dir == os.path.join("/nonexistent-logs", layout.REMOTE_LOG_INDEX_CACHE_DIR)
    assert SECRET not in repr(s) and "key-id" not in repr(s)
    off = RemoteStorageSettings.of(config(tiered=False))
    assert not off.enabled and off.bucket == "" and off.endpoint_url is None
    path = tmp_path / "storage.yaml"
    path.write_text("broker:\n  log.dirs: logs\n  rsm.config.fetch.chunk.cache.path: cache/chunks\n")
    assert RemoteStorageSettings.of(load_config(path)).cache_dir == str(tmp_path / "cache" / "chunks")


@pytest.mark.unit
@pytest.mark.parametrize("change, named", [
    ({"rsm.config.storage.s3.endpoint.url": None}, "rsm.config.storage.s3.endpoint.url is not set"),
    ({"rsm.config.storage.s3.endpoint.url": "127.0.0.1:8333"},
     "rsm.config.storage.s3.endpoint.url = '127.0.0.1:8333': must be an http:// or https:// URL"),
    ({"rsm.config.storage.s3.endpoint.url": "http://host:99999"}, "the port is not valid"),
    ({"rsm.config.storage.s3.bucket.name": None}, "rsm.config.storage.s3.bucket.name is not set"),
    ({"rsm.config.storage.s3.bucket.name": "Bad_Bucket"},
     "rsm.config.storage.s3.bucket.name = 'Bad_Bucket': not a valid S3 bucket name"),
    ({"rsm.config.storage.aws.secret.access.key": None},
     "rsm.config.storage.aws.access.key.id is set but rsm.config.storage.aws.secret.access.key is not"),
])
def test_enabled_settings_name_the_key_at_fault(change, named):
    """Refused when the config is loaded (a broker or job never starts with a store it cannot reach), and by
    RemoteStorageSettings.of for a config built otherwise."""
    broker = {k: v for k, v in {**STORE, **change}.items() if v is not None}
    with pytest.raises(ConfigError) as err:
        config_from_mapping({"broker": {"log.dirs": "/nonexistent-logs", **broker}}, base_dir="/")
    assert named in str(err.value) and SECRET not in str(err.value)
    built = dataclasses.replace(config(), remote={**config().remote, **change})
    with pytest.raises(ConfigError, match=named.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        RemoteStorageSettings.of(built)


@pytest.mark.unit
def test_the_credentials_are_never_shown():
    assert is_sensitive("rsm.config.storage.aws.secret.access.key")
    assert is_sensitive("rsm.config.storage.aws.access.key.id") and is_sensitive("ssl.key.password")
    assert not is_sensitive("rsm.config.storage.s3.bucket.name")
    with pytest.raises(ConfigError) as err:       # a bad secret is not echoed either
        config({"rsm.config.storage.aws.secret.access.key": 12345678})
    assert "rsm.config.storage.aws.secret.access.key = (hidden): must be a string" in str(err.value)
    assert "12345678" not in str(err.value)


@pytest.mark.unit
def test_the_console_leaves_the_credentials_out(tmp_path):
    path = tmp_path / "storage.yaml"
    path.write_text("broker:\n  log.dirs: logs\n" + "".join(f"  {k}: {v!r}\n" for k, v in STORE.items()))
    shown = {c["name"]: c for c in inspection.broker_configs(load_config(path))}
    for name in ("rsm.config.storage.aws.secret.access.key", "rsm.config.storage.aws.access.key.id"):
        assert shown[name]["value"] is None and shown[name]["secret"]
    assert shown["rsm.config.storage.s3.bucket.name"]["value"] == "tiered"
    assert SECRET not in repr(shown)


@pytest.mark.e2e
def test_describe_configs_hides_the_secret_and_create_topics_applies_kafkas_rules(broker_factory):
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic
    broker = broker_factory(broker=STORE)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    [future] = admin.describe_configs([ConfigResource("broker", "1")]).values()
    described = future.result(60)
    secret = described["rsm.config.storage.aws.secret.access.key"]
    assert secret.value is None and secret.is_sensitive
    assert described["rsm.config.storage.s3.bucket.name"].value == "tiered"
    assert described["remote.log.storage.system.enable"].value == "true"

    [future] = admin.create_topics([NewTopic("compacted", 1, 1, config={
        "cleanup.policy": "compact", "remote.storage.enable": "true"})]).values()
    with pytest.raises(Exception) as err:
        future.result(60)
    assert "INVALID_CONFIG" in str(err.value) and "compacted topics" in str(err.value)
    [future] = admin.create_topics([NewTopic("tiered", 1, 1, config={"remote.storage.enable": "true"})]).values()
    future.result(60)
    [future] = admin.incremental_alter_configs([ConfigResource("topic", "tiered", incremental_configs=[
        ConfigEntry("local.retention.ms", "999999999999", incremental_operation=AlterConfigOpType.SET)])]).values()
    with pytest.raises(Exception) as err:
        future.result(60)
    assert "must not be more than retention.ms" in str(err.value)
    [future] = admin.describe_configs([ConfigResource("topic", "tiered")]).values()
    topic = future.result(60)
    assert (topic["remote.storage.enable"].value, topic["local.retention.ms"].value) == ("true", "-2")


@pytest.fixture
def broker_factory(tmp_path):
    from tests.server.broker_proc import BrokerProcess
    made: list[BrokerProcess] = []

    def make(**kwargs) -> BrokerProcess:
        sub = tmp_path / f"broker-{len(made)}"
        sub.mkdir()
        b = BrokerProcess(sub, **kwargs)
        made.append(b)
        return b.start()

    yield make
    for b in made:
        b.close()


# ---------------------------------------------------------------------------------------------- object keys

@pytest.mark.unit
def test_object_keys_name_topic_id_partition_offset_and_segment_and_parse_back():
    tid, sid = identity.random_uuid(), identity.random_uuid()
    keys = segment_keys("pre/", "orders.v-2", tid, 7, 1234, sid)
    assert set(keys) == set(SUFFIXES) and set(REQUIRED_SUFFIXES) < set(SUFFIXES)
    assert keys["log"] == f"pre/orders.v-2-{identity.uuid_text(tid)}/7/00000000000000001234-{identity.uuid_text(sid)}.log"
    assert keys["leader-epoch-checkpoint"].endswith(".leader-epoch-checkpoint")
    assert all(k.startswith(partition_prefix("pre/", "orders.v-2", tid, 7)) for k in keys.values())
    for suffix, key in keys.items():
        assert parse_key(key, "pre/") == ("orders.v-2", tid, 7, 1234, sid, suffix)
    assert parse_key(keys["log"]) is None                       # another prefix
    good = keys["log"][len("pre/"):]
    for bad in (good.replace(".log", ".json"), good.replace("/7/", "/07/"), good.replace("/7/", "/x/"),
                good.replace("00000000000000001234", "0000000000000001234"), good + "/more", "stray-object",
                good.replace(identity.uuid_text(sid), "!" * 22)):
        assert parse_key(bad) is None, bad


# ---------------------------------------------------------------------------------------------- topic ids

@pytest.mark.unit
def test_identity_still_offers_the_topic_id_functions():
    assert identity.read_topic_id is topic_id.read_topic_id and identity.uuid_text is topic_id.uuid_text


@pytest.mark.unit
def test_ensure_topic_id_writes_one_keeps_it_and_shares_it_across_partitions(tmp_path):
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    p0, p1, other = (os.path.join(dirs[0], "t-0"), os.path.join(dirs[1], "t-1"), os.path.join(dirs[1], "u-0"))
    for folder in (p0, p1, other):
        os.makedirs(folder)
    first = topic_id.ensure_topic_id(p0, dirs)
    assert topic_id.read_topic_id(p0) == first == topic_id.ensure_topic_id(p0, dirs)
    assert topic_id.ensure_topic_id(p1, dirs) == first                   # the topic's id, from another log dir
    assert topic_id.ensure_topic_id(other, dirs) not in (first, None)     # another topic, another id
    assert sorted(os.listdir(p0)) == [layout.PARTITION_METADATA]          # no temp file left behind
    with open(os.path.join(p1, layout.PARTITION_METADATA), "w") as f:
        f.write("version: 0\ntopic_id: damaged\n")
    with pytest.raises(StorageError, match="holds no readable topic id"):
        topic_id.ensure_topic_id(p1, dirs)
    assert "damaged" in open(os.path.join(p1, layout.PARTITION_METADATA)).read()     # kept, not replaced


def _ensure(args: tuple[str, list[str]]) -> str:
    return str(topic_id.ensure_topic_id(*args))


@pytest.mark.slow
def test_processes_giving_ids_to_partitions_of_one_topic_at_once_agree(tmp_path):
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    folders = [os.path.join(dirs[p % 2], f"t-{p}") for p in range(8)]
    for folder in folders:
        os.makedirs(folder)
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        ids = pool.map(_ensure, [(f, dirs) for f in folders])
    assert len(set(ids)) == 1 and uuid.UUID(ids[0]) == topic_id.read_topic_id(folders[5])


@pytest.mark.unit
def test_the_log_config_fields_are_declared_once():
    attrs = {f.name for f in dataclasses.fields(LogConfig)}
    assert {k.attr for k in TOPIC_KEYS.values()} <= attrs
