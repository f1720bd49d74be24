"""Bad input gets a clear error naming what was wrong, and loses nothing already stored (ARCHITECTURE.md section 6).

Through the API a typed exception; through the CLI (``main.main`` in this process) exit code 2, a message on
stderr and no traceback. After every rejection the records stored before are all still readable, nothing was
appended and no folder appeared.
"""
from __future__ import annotations

import io
import json
import re
import os
import sys
import types

import pytest

from storage_engine.log.loader import open_log
from storage_engine.clock import ManualClock
from storage_engine.cli import main
from storage_engine.config_file import load_config
from storage_engine.errors import (ConfigError, InvalidRecordForTopicError, InvalidTopicError, LogDirOfflineError,
                                   OffsetOutOfRangeError, RecordTooLargeError)
from storage_engine.log.manager import LogManager
from storage_engine.record.records import SimpleRecord
from tests.storage_engine.helpers import get_log, manual_clock

pytestmark = pytest.mark.unit

MAX_MESSAGE_BYTES = 2000
HOSTILE_TOPICS = ["../etc", "a/b", "/abs", ".", "..", "x" * 300, "", "with space", "nul\x00byte", "new\nline",
                  "ünïcode", "..\\x"]


@pytest.fixture
def env(tmp_path):
    """A log dir with a plain topic ``t`` and a compacted topic ``kv``, each holding a few records, in
    ``tmp_path/env``: the tests that look for directories a hostile name created above the log dir's folder walk
    ``env.tmp.parent``, which then holds this test's files only (``tmp_path``'s parent holds every earlier test's
    folders, a walk of 13 s late in a run)."""
    tmp = tmp_path / "env"
    tmp.mkdir()
    cfg = tmp / "storage.yaml"
    cfg.write_text(json.dumps({
        "broker": {"log.dirs": [str(tmp / "logs")], "log.segment.bytes": 4096},
        "topics": {"t": {"max.message.bytes": MAX_MESSAGE_BYTES}, "kv": {"cleanup.policy": "compact"}},
    }), encoding="utf-8")
    config = load_config(str(cfg))
    with LogManager.open(config) as mgr:
        for i in range(10):
            mgr.get_or_create_log("t", 0).append_records([SimpleRecord(f"k{i}".encode(), f"v{i}".encode(), 1000 + i)])
        mgr.get_or_create_log("kv", 0).append_records([SimpleRecord(b"a", b"1", 5), SimpleRecord(b"b", b"2", 6)])
    return types.SimpleNamespace(tmp=tmp, cfg=str(cfg), config=config, baseline=stored(config))


def stored(config) -> dict:
    """Every record of every partition, and each partition's offsets."""
    out = {}
    with LogManager.open(config) as mgr:
        for tp in mgr.partitions():
            log = mgr.logs[tp]
            out[tp] = (log.log_start_offset, log.log_end_offset, list(log.read_records()))
    return out


def tree(root) -> set[str]:
    return {os.path.relpath(os.path.join(d, n), root) for d, dirs, files in os.walk(root) for n in dirs}


def assert_nothing_lost(env) -> None:
    assert stored(env.config) == env.baseline


def run_cli(capsys, monkeypatch, argv, stdin: bytes = b""):
    monkeypatch.setattr(sys, "stdin", types.SimpleNamespace(buffer=io.BytesIO(stdin)))
    try:
        rc: int | str | None = main.main([str(a) for a in argv])
    except SystemExit as exc:        # argparse usage errors
        rc = exc.code
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return rc, out, err


def produce(capsys, monkeypatch, env, topic, lines: bytes, *extra, partition=0):
    return run_cli(capsys, monkeypatch, ["--config", env.cfg, "produce", "--topic", topic, "--partition", partition,
                                         *extra], lines)


# -- topic names and partitions ------------------------------------------------------------------------------------

@pytest.mark.parametrize("topic", HOSTILE_TOPICS, ids=repr)
def test_hostile_topic_names_are_refused_by_the_api(env, topic):
    before = tree(env.tmp.parent)
    with LogManager.open(env.config) as mgr:
        with pytest.raises(InvalidTopicError, match="topic name"):
            mgr.get_or_create_log(topic, 0)
        with pytest.raises(InvalidTopicError, match="topic name"):
            mgr.get_log(topic, 0)
    assert tree(env.tmp.parent) == before
    assert_nothing_lost(env)


@pytest.mark.parametrize("topic", HOSTILE_TOPICS, ids=repr)
def test_hostile_topic_names_are_refused_by_the_cli(env, capsys, monkeypatch, topic):
    before = tree(env.tmp.parent)
    rc, out, err = produce(capsys, monkeypatch, env, topic, b'{"value": "x"}\n')
    assert rc == 2 and out == "" and "topic name" in err
    rc, out, err = run_cli(capsys, monkeypatch, ["--config", env.cfg, "consume", "--topic", topic, "--partition", 0])
    assert rc == 2 and "topic name" in err
    assert tree(env.tmp.parent) == before
    assert_nothing_lost(env)


def test_a_300_character_name_is_refused_with_the_limit(env):
    with LogManager.open(env.config) as mgr, pytest.raises(InvalidTopicError, match="longer than 249"):
        mgr.get_or_create_log("x" * 300, 0)


@pytest.mark.parametrize("partition", [-1, -2**31, 2**31, True, "0"])
def test_bad_partition_numbers_are_refused_by_the_api(env, partition):
    with LogManager.open(env.config) as mgr, pytest.raises(InvalidTopicError, match="partition"):
        mgr.get_or_create_log("t", partition)
    assert_nothing_lost(env)


@pytest.mark.parametrize("partition", ["-1", "abc", "1.5", ""])
def test_bad_partition_numbers_are_refused_by_the_cli(env, capsys, monkeypatch, partition):
    rc, out, err = produce(capsys, monkeypatch, env, "t", b'{"value": "x"}\n', partition=partition)
    assert rc == 2 and "--partition" in err
    assert_nothing_lost(env)


# -- configuration ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("broker,topics,needles", [
    ({"log.segment.bytes": 5}, {}, ["log.segment.bytes", "5", ">= 14"]),
    ({"log.segment.bytes": 1.5}, {}, ["log.segment.bytes", "1.5"]),
    ({"log.cleaner.min.cleanable.ratio": 2}, {}, ["log.cleaner.min.cleanable.ratio", "2", "[0, 1]"]),
    ({}, {"t": {"min.cleanable.dirty.ratio": 2}}, ["min.cleanable.dirty.ratio", "2", "[0, 1]", "'t'"]),
    ({}, {"t": {"segment.bytes": -1}}, ["segment.bytes", "-1", ">= 14"]),
    ({"log.segmnt.bytes": 100}, {}, ["unknown", "log.segmnt.bytes", "log.segment.bytes"]),
    ({}, {"t": {"retention.msec": 1}}, ["retention.msec"]),
    ({}, {"../x": {"retention.ms": 1}}, ["../x"]),
    ({"log.cleanup.policy": "shred"}, {}, ["log.cleanup.policy", "shred"]),
], ids=["segment-bytes-5", "float-for-int", "ratio-2", "topic-ratio-2", "negative-segment", "unknown-key",
        "unknown-topic-key", "hostile-topic", "bad-policy"])
def test_invalid_config_names_the_key_the_value_and_the_range(env, capsys, monkeypatch, broker, topics, needles):
    bad = env.tmp / "bad.yaml"
    bad.write_text(json.dumps({"broker": {"log.dirs": [str(env.tmp / "logs")], **broker}, "topics": topics}))
    with pytest.raises(ConfigError) as exc:
        load_config(str(bad))
    for needle in needles:
        assert needle in str(exc.value)
    rc, out, err = run_cli(capsys, monkeypatch, ["--config", str(bad), "describe"])
    assert rc == 2 and out == ""
    for needle in needles:
        assert needle in err
    assert_nothing_lost(env)


# -- records the topic refuses ----------------------------------------------------------------------------------------

def test_an_oversized_record_is_refused_and_nothing_is_written(env, capsys, monkeypatch):
    with LogManager.open(env.config) as mgr:
        log = mgr.get_log("t", 0)
        assert log is not None
        with pytest.raises(RecordTooLargeError, match="max.message.bytes"):
            log.append_records([SimpleRecord(b"k", b"ok"), SimpleRecord(b"big", b"x" * MAX_MESSAGE_BYTES)])
        assert log.log_end_offset == 10
    lines = (json.dumps({"key": "fine", "value": "small"}) + "\n" +
             json.dumps({"key": "big", "value": "x" * (MAX_MESSAGE_BYTES * 2)}) + "\n").encode()
    rc, out, err = produce(capsys, monkeypatch, env, "t", lines)
    assert rc == 2 and out == "" and "max.message.bytes" in err and str(MAX_MESSAGE_BYTES) in err
    # A new partition is not even created for an input that is refused.
    rc, out, err = produce(capsys, monkeypatch, env, "t", lines, partition=5)
    assert rc == 2 and not os.path.exists(env.tmp / "logs" / "t-5")
    assert_nothing_lost(env)


def test_a_keyless_record_on_a_compacted_topic_is_refused_and_nothing_is_written(env, capsys, monkeypatch):
    with LogManager.open(env.config) as mgr:
        log = mgr.get_log("kv", 0)
        assert log is not None
        with pytest.raises(InvalidRecordForTopicError, match="without a key"):
            log.append_records([SimpleRecord(b"c", b"3"), SimpleRecord(None, b"no key")])
        assert log.log_end_offset == 2
    lines = b'{"key": "c", "value": "3"}\n{"key": "d", "value": "4"}\n{"value": "no key"}\n'
    rc, out, err = produce(capsys, monkeypatch, env, "kv", lines)
    assert rc == 2 and out == "" and "compacted topic kv" in err and "without a key" in err
    rc, out, err = produce(capsys, monkeypatch, env, "kv", lines, partition=3)
    assert rc == 2 and not os.path.exists(env.tmp / "logs" / "kv-3")
    assert_nothing_lost(env)


# -- malformed JSON lines ---------------------------------------------------------------------------------------------

GOOD = b'{"key": "g1", "value": "good"}\n{"key": "g2", "value": "good", "timestamp": 5}\n'

MALFORMED = [
    (b"{not json}\n", [], "line 3: malformed JSON"),
    (b'{"value": "unterminated\n', [], "line 3: malformed JSON"),
    (b"[1, 2]\n", [], "line 3: expected a JSON object"),
    (b'"just a string"\n', [], "line 3: expected a JSON object"),
    (b"42\n", [], "line 3: expected a JSON object"),
    (b"null\n", [], "line 3: expected a JSON object"),
    (b'{"key": 5, "value": "x"}\n', [], "line 3: key must be a string or null, got int"),
    (b'{"value": {"nested": 1}}\n', [], "line 3: value must be a string or null, got dict"),
    (b'{"value": "x", "timestamp": "yesterday"}\n', [], "line 3: timestamp"),
    (b'{"value": "x", "timestamp": 1.5}\n', [], "line 3: timestamp"),
    (b'{"value": "x", "timestamp": -5}\n', [], "line 3: timestamp"),
    (b'{"value": "x", "timestamp": true}\n', [], "line 3: timestamp"),
    (b'{"value": "x", "timestamp": 99999999999999999999}\n', [], "line 3: timestamp"),
    (b'{"value": "x", "headers": ["h", "v"]}\n', [], "line 3: headers must be an object"),
    (b'{"value": "x", "headers": "h=v"}\n', [], "line 3: headers must be an object"),
    (b'{"value": "x", "headers": 0}\n', [], "line 3: headers must be an object"),
    (b'{"value": "x", "headers": {"h": 5}}\n', [], "line 3: header 'h' must be a string or null"),
    (b'{"vaule": "typo"}\n', [], "line 3: unknown fields ['vaule']"),
    (b'{"value": "\\ud800"}\n', [], "line 3: value is not valid Unicode"),
    (b'{"value": "x", "headers": {"\\udc80": "v"}}\n', [], "line 3: header key"),
    (b'{"value": "\xff\xfe"}\n', [], "line 3: not UTF-8"),
    (b'{"value": "!!not base64!!"}\n', ["--encoding", "base64"], "line 3: value is not valid base64"),
    (b'{"key": "a2V5", "value": "dmFsdWU"}\n', ["--encoding", "base64"], "line 3: value is not valid base64"),
    (b'{"value": "eA==", "headers": {"h": "***"}}\n', ["--encoding", "base64"],
     "line 3: header 'h' is not valid base64"),
]


@pytest.mark.parametrize("bad,extra,needle", MALFORMED, ids=[m[2].split(": ", 1)[1][:30] + f"-{i}"
                                                              for i, m in enumerate(MALFORMED)])
def test_a_malformed_line_names_its_number_and_nothing_of_the_input_is_appended(env, capsys, monkeypatch,
                                                                                bad, extra, needle):
    good = GOOD if "base64" not in extra else b'{"key": "ZzE=", "value": "Z29vZA=="}\n{"value": "Z29vZA=="}\n'
    rc, out, err = produce(capsys, monkeypatch, env, "t", good + bad + GOOD, *extra)
    assert rc == 2 and out == "", err
    assert needle in err, err
    assert_nothing_lost(env)        # not even the two valid lines before the bad one


def test_empty_input_is_refused(env, capsys, monkeypatch):
    rc, out, err = produce(capsys, monkeypatch, env, "t", b"\n  \n")
    assert rc == 2 and "no records" in err
    assert_nothing_lost(env)


def test_the_same_input_without_the_bad_line_is_accepted(env, capsys, monkeypatch):
    """The control for the cases above: the valid lines on their own do get appended."""
    rc, out, err = produce(capsys, monkeypatch, env, "t", GOOD + GOOD)
    assert rc == 0 and json.loads(out) == {"topic": "t", "partition": 0, "base_offset": 10, "last_offset": 13,
                                           "count": 4}


# -- offsets and partitions that do not exist -----------------------------------------------------------------------

def test_consume_of_a_missing_partition(env, capsys, monkeypatch):
    before = tree(env.tmp)
    for topic, partition in [("t", 1), ("nosuch", 0)]:
        rc, out, err = run_cli(capsys, monkeypatch, ["--config", env.cfg, "consume", "--topic", topic, "--partition",
                                                     partition])
        assert rc == 2 and out == "" and f"partition {topic}-{partition} does not exist" in err
    with LogManager.open(env.config) as mgr:
        assert mgr.get_log("nosuch", 0) is None
    assert tree(env.tmp) == before
    assert_nothing_lost(env)


def test_consume_outside_the_log(env, capsys, monkeypatch):
    rc, out, err = run_cli(capsys, monkeypatch, ["--config", env.cfg, "consume", "--topic", "t", "--partition", 0,
                                                 "--from-offset", 11])
    assert rc == 2 and out == "" and "offset 11 is out of range" in err and "log end offset 10" in err
    with LogManager.open(env.config) as mgr:
        with pytest.raises(OffsetOutOfRangeError, match="out of range"):
            list(get_log(mgr, "t", 0).read_records(11))
    assert_nothing_lost(env)


@pytest.mark.parametrize("offset", [11, 10**12])
def test_delete_records_beyond_the_high_watermark(env, capsys, monkeypatch, offset):
    rc, out, err = run_cli(capsys, monkeypatch, ["--config", env.cfg, "delete-records", "--topic", "t", "--partition",
                                                 0, "--offset", offset])
    assert rc == 2 and out == "" and f"to {offset}" in err and "high watermark 10" in err
    with LogManager.open(env.config) as mgr:
        log = mgr.get_log("t", 0)
        assert log is not None
        with pytest.raises(OffsetOutOfRangeError, match="high watermark"):
            log.delete_records(offset)
        assert log.log_start_offset == 0
    assert_nothing_lost(env)


@pytest.mark.parametrize("offset", ["-2", "ten", "1e3"])
def test_delete_records_with_an_offset_that_is_not_one(env, capsys, monkeypatch, offset):
    rc, out, err = run_cli(capsys, monkeypatch, ["--config", env.cfg, "delete-records", "--topic", "t", "--partition",
                                                 0, "--offset", offset])
    assert rc == 2 and "--offset" in err
    assert_nothing_lost(env)


def test_delete_records_of_a_missing_partition(env, capsys, monkeypatch):
    rc, out, err = run_cli(capsys, monkeypatch, ["--config", env.cfg, "delete-records", "--topic", "t", "--partition",
                                                 4, "--offset", 0])
    assert rc == 2 and "t-4" in err and "does not exist" in err
    assert not os.path.exists(env.tmp / "logs" / "t-4")


@pytest.mark.parametrize("bad, field", [
    (("k", b"v"), "key must be bytes"),
    ((b"k", 5), "value must be bytes"),
    ((b"k", b"v", "soon"), "timestamp must be an integer"),
    ((b"k", b"v", -7), "timestamp must be an integer"),
    ((b"k", b"v", 1, ((1, b"x"),)), "headers must be"),
    ((b"k", b"v", 1, (("\udc80", b""),)), "not valid Unicode"),
    ((1,), "must be (key, value"),
])
def test_records_of_the_wrong_type_are_rejected_by_the_api(tmp_path, bad, field):
    from storage_engine.config import LogConfig
    from storage_engine.errors import InvalidRecordError
    log, _ = open_log(str(tmp_path), "typed", 0, LogConfig(), clock=ManualClock(1), exclusive=True, create=True)
    log.append_records([(b"good", b"record", 1)])  # type: ignore[list-item]  # a plain tuple, accepted as a SimpleRecord is
    with pytest.raises(InvalidRecordError, match=re.escape(field)):
        manual_clock(log).set(2)
        log.append_records([(b"also-good", b"x", 2), bad])  # type: ignore[list-item]  # plain tuples, one of them malformed: refused
    assert [(r.offset, r.key) for r in log.read_records()] == [(0, b"good")]
    log.close(clean=True)


# -- files read whole: regular files only, with a size bound (ARCHITECTURE.md section 3) -------------------------

def one_error_line(err: str) -> str:
    """The one line a failing command prints on stderr."""
    assert err.count("\n") == 1 and err.startswith("storage-engine: error: "), err
    return err


@pytest.fixture
def fifo(tmp_path):
    path = tmp_path / "a-fifo"
    os.mkfifo(path)
    return str(path)


@pytest.mark.parametrize("kind", ["dev-zero", "fifo", "directory", "too-large"])
def test_a_config_that_is_no_regular_file_or_too_large_is_refused_at_once(capsys, monkeypatch, tmp_path, fifo, kind):
    big = tmp_path / "big.yaml"
    big.write_bytes(b"#" * (1024 * 1024 + 1))   # a comment: valid YAML, one byte over the bound
    path, reason = {"dev-zero": ("/dev/zero", "not a regular file (a character device)"),
                    "fifo": (fifo, "not a regular file (a FIFO)"),
                    "directory": (str(tmp_path), "Is a directory"),
                    "too-large": (str(big), "too large (1048577 bytes, limit 1048576)")}[kind]
    with pytest.raises(ConfigError) as exc:
        load_config(path)
    assert str(exc.value) == f"cannot read config file {path}: {reason}"
    rc, out, err = run_cli(capsys, monkeypatch, ["--config", path, "describe"])
    assert rc == 2 and out == "" and one_error_line(err) == f"storage-engine: error: {exc.value}\n"


def test_read_regular_file_stops_at_its_bound(tmp_path, fifo):
    from storage_engine.durable import read_regular_file
    from storage_engine.errors import UnsafeFileError
    path = tmp_path / "f"
    path.write_bytes(b"x" * 10)
    assert read_regular_file(str(path), 10) == b"x" * 10
    with pytest.raises(UnsafeFileError, match=r"too large \(10 bytes, limit 9\)"):
        read_regular_file(str(path), 9)
    with pytest.raises(UnsafeFileError, match=r"a-fifo: not a regular file \(a FIFO\)"):
        read_regular_file(fifo, 10)          # the open does not wait for a writer
    with pytest.raises(FileNotFoundError):
        read_regular_file(str(tmp_path / "gone"), 10)


def test_a_checkpoint_that_is_no_regular_file_counts_as_corrupt_and_is_replaced(env, monkeypatch, tmp_path):
    from storage_engine import layout
    from storage_engine.errors import CorruptCheckpointError
    from storage_engine.inspection.verify import verify_log_dirs
    from storage_engine.segment import checkpoint
    from storage_engine.segment.checkpoint import OffsetCheckpointFile
    log_dir = env.config.log_dirs[0]
    rp = os.path.join(log_dir, layout.RECOVERY_POINT_CHECKPOINT)
    os.remove(rp)
    os.mkfifo(rp)
    with pytest.raises(CorruptCheckpointError, match=r"not a regular file \(a FIFO\)"):
        OffsetCheckpointFile(rp).read()
    report = verify_log_dirs(env.config)
    assert report["damaged"] and [p["file"] for p in report["problems"]] == [rp]
    assert_nothing_lost(env)             # the load recovered from offset 0 instead of blocking on the FIFO
    with LogManager.open(env.config) as mgr:
        mgr.checkpoint()
    assert OffsetCheckpointFile(rp).read() == {("kv", 0): 2, ("t", 0): 10}   # replaced by a regular file
    lso = os.path.join(log_dir, layout.LOG_START_OFFSET_CHECKPOINT)
    monkeypatch.setattr(checkpoint, "MAX_CHECKPOINT_BYTES", 8)
    with open(lso, "wb") as f:
        f.write(b"0\n1\nt 0 1\n")            # 10 bytes: over the (patched) bound
    with pytest.raises(CorruptCheckpointError, match=r"too large \(10 bytes, limit 8\)"):
        OffsetCheckpointFile(lso).read()


def test_state_records_that_are_no_regular_files_are_ignored_or_reported(tmp_path, fifo):
    from storage_engine import layout
    from storage_engine.errors import CorruptSnapshotError
    from storage_engine.log import intent
    from storage_engine.maintenance.cleaner_manager import read_uncleanable
    from storage_engine.segment.clean_shutdown import clean_shutdown_path, read_broker_epoch
    from storage_engine.segment.producer_snapshot import read_snapshot
    d = str(tmp_path)
    os.rename(fifo, clean_shutdown_path(d))
    assert read_broker_epoch(d) is None
    os.mkfifo(intent.path_of(d, "t-0"))
    record, why = intent.read(d, "t-0")
    assert why is not None
    assert record is None and "not a regular file (a FIFO)" in why and why.endswith("ignored")
    os.mkfifo(os.path.join(d, layout.UNCLEANABLE_FILE))
    assert "not a regular file (a FIFO)" in read_uncleanable(d)["<unreadable>"]["reason"]
    snap = os.path.join(d, "00000000000000000005.snapshot")
    os.mkfifo(snap)
    with pytest.raises(CorruptSnapshotError, match=r"snapshot is not a regular file \(a FIFO\)"):
        read_snapshot(snap)


# -- a log dir that is a file, or cannot be read, is offline; the others serve (ARCHITECTURE.md section 6) ---------

def test_a_log_dir_that_is_a_file_is_valid_config_and_only_a_device_is_refused(tmp_path):
    from storage_engine.config_file import config_from_mapping
    plain = tmp_path / "plain-file"
    plain.write_text("not a dir")
    good = str(tmp_path / "good")
    for entry in (str(plain), str(plain / "sub")):
        assert config_from_mapping({"broker": {"log.dirs": [good, entry]}}).log_dirs == (good, entry)
    for entry in ("/dev/null", "/dev/null/sub"):
        with pytest.raises(ConfigError, match="a device; a log dir must be a directory"):
            config_from_mapping({"broker": {"log.dirs": [good, entry]}})
    with pytest.raises(ConfigError, match="must not be nested"):
        config_from_mapping({"broker": {"log.dirs": [good, good + "/t-0"]}})


@pytest.mark.parametrize("kind", ["regular-file", "file-on-the-path", "link-loop"])
def test_a_log_dir_that_is_a_file_or_unreadable_is_offline_and_the_other_serves(capsys, monkeypatch, tmp_path,
                                                                               kind):
    plain = tmp_path / "plain-file"
    plain.write_text("not a dir")
    loop = tmp_path / "loop"
    os.symlink("loop", loop)        # every access fails with ELOOP, whoever the process runs as
    bad = {"regular-file": str(plain), "file-on-the-path": str(plain / "sub"), "link-loop": str(loop)}[kind]
    good = str(tmp_path / "good")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(json.dumps({"broker": {"log.dirs": [good, bad]}}), encoding="utf-8")
    config = load_config(str(cfg))
    with LogManager.open(config.replace_log_dirs([good])) as mgr:
        mgr.get_or_create_log("t", 0).append_records([SimpleRecord(b"k", b"v0")])
    with LogManager.open(config) as mgr:
        assert list(mgr.offline_dirs()) == [bad]
        get_log(mgr, "t", 0).append_records([SimpleRecord(b"k", b"v0+")])
        if kind == "link-loop":      # a dir that cannot be read may hold any partition: none is created meanwhile
            with pytest.raises(LogDirOfflineError, match="may hold it"):
                mgr.get_or_create_log("t", 1)
            with LogManager.open(config.replace_log_dirs([good])) as other:
                for p in (1, 2, 3):
                    other.get_or_create_log("t", p)
        for p in (1, 2):             # a file holds nothing: new partitions go to the dir that serves
            mgr.get_or_create_log("t", p).append_records([SimpleRecord(b"k", f"v{p}".encode())])
            assert mgr.dir_of(("t", p)) == good
    base = ["--config", cfg]
    rc, out, err = run_cli(capsys, monkeypatch, [*base, "produce", "--topic", "t", "--partition", 3],
                           b'{"value": "w"}\n')
    assert rc == 0 and json.loads(out)["base_offset"] == 0
    rc, out, err = run_cli(capsys, monkeypatch, [*base, "consume", "--topic", "t", "--partition", 1])
    assert rc == 0 and [json.loads(x)["value"] for x in out.splitlines()] == ["v1"]
    rc, out, err = run_cli(capsys, monkeypatch, [*base, "describe"])
    dirs = {d["path"]: d for d in json.loads(out)["log_dirs"]}
    assert rc == 0 and dirs[bad]["status"] == "offline" and dirs[good]["status"] == "online"
    assert ("Too many levels" if kind == "link-loop" else "NotADirectoryError") in dirs[bad]["offline_reason"]
    rc, out, err = run_cli(capsys, monkeypatch, [*base, "verify"])
    report = json.loads(out)
    assert rc == 0 and not report["damaged"] and list(report["offline_dirs"]) == [bad]
    assert len(report["partitions"]) == 4
    rc, out, err = run_cli(capsys, monkeypatch, [*base, "verify", "--strict"])
    assert rc == 1                    # --strict: an offline dir fails the audit, as documented
    assert plain.read_text() == "not a dir"


def test_no_usable_log_dir_is_exit_2_in_one_line(capsys, monkeypatch, tmp_path):
    plain = tmp_path / "plain-file"
    plain.write_text("not a dir")
    loop = tmp_path / "loop"
    os.symlink("loop", loop)
    cfg = tmp_path / "c.yaml"
    cfg.write_text(json.dumps({"broker": {"log.dirs": [str(plain), str(loop)]}}), encoding="utf-8")
    for command in (["describe"], ["verify"], ["consume", "--topic", "t", "--partition", "0"], ["retention"],
                    ["log-dirs"]):
        rc, out, err = run_cli(capsys, monkeypatch, ["--config", cfg, *command])
        assert rc == 2 and out == ""
        line = one_error_line(err)
        assert f"no usable log dir in {cfg}: every entry of log.dirs is offline: {plain} (NotADirectoryError" in line
        assert f"{loop} (OSError: [Errno 40] Too many levels" in line


# -- read-only commands write nothing (ARCHITECTURE.md section 4.4) ----------------------------------------------------

def listing(*roots) -> dict:
    """Every folder and file under ``roots`` (the engine's lock and state files included): kind, size, mtime, inode."""
    out = {}
    for root in roots:
        for d, dirs, files in os.walk(root):
            for n in [".", *dirs, *files]:
                p = os.path.normpath(os.path.join(d, n))
                st = os.lstat(p)
                out[p] = (st.st_mode, st.st_size, st.st_mtime_ns, st.st_ino)
    return out


@pytest.fixture
def populated(tmp_path):
    """Two log dirs: plain and compacted topics (compacted once: a cleaner checkpoint, cleaning claims), a partition
    folder written by Kafka (no engine lock file), a deleted partition waiting for removal, a foreign folder."""
    import shutil
    from storage_engine import layout
    from storage_engine.jobs import compaction
    dirs = [str(tmp_path / "dir-a"), str(tmp_path / "dir-b")]
    cfg = tmp_path / "storage.yaml"
    cfg.write_text(json.dumps({"broker": {"log.dirs": dirs, "log.segment.bytes": 1024},
                               "topics": {"kv": {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": 0.01}}}),
                   encoding="utf-8")
    config = load_config(str(cfg))
    with LogManager.open(config, clock=ManualClock(1_000)) as mgr:
        for topic in ("t", "kv", "gone", "kafka"):
            for p in range(2):
                log = mgr.get_or_create_log(topic, p)
                for i in range(60):
                    log.append_records([SimpleRecord(f"k{i % 5}".encode(), f"value-{i}".encode() * 4, 1_000 + i)])
    result = compaction.compact(config, 10**12)
    assert not result["failed"] and any(r.get("end_offset") for r in result["results"])
    with LogManager.open(config) as mgr:
        mgr.delete_log("gone", 0)
    kafka_folder = next(os.path.join(d, "kafka-1") for d in dirs if os.path.isdir(os.path.join(d, "kafka-1")))
    for engine_file in (layout.partition_state_file(os.path.dirname(kafka_folder), "kafka-1"),
                        layout.cleaning_claim_file(os.path.dirname(kafka_folder), "kafka-1"),
                        layout.segment_manifest_file(os.path.dirname(kafka_folder), "kafka-1")):
        if os.path.exists(engine_file):
            os.remove(engine_file)       # as if Kafka wrote it: no engine process has opened it
    os.mkdir(os.path.join(dirs[0], "lost+found"))
    assert any(layout.CLEANER_OFFSET_CHECKPOINT in os.listdir(d) for d in dirs)
    shutil.copy(cfg, tmp_path / "copy.yaml")
    return types.SimpleNamespace(cfg=str(cfg), dirs=dirs, config=config, kafka_folder=kafka_folder)


def read_only_commands(store) -> list[tuple[list, int]]:
    """The commands the README calls read-only, with their exit codes on the populated store."""
    folder = next(os.path.join(d, "t-0") for d in store.dirs if os.path.isdir(os.path.join(d, "t-0")))
    files = [os.path.join(folder, n) for n in sorted(os.listdir(folder))
             if n.endswith((".log", ".index", ".timeindex", ".snapshot"))]
    cfg = ["--config", store.cfg]
    return [([*cfg, "verify"], 0), ([*cfg, "verify", "--strict"], 1),      # --strict: the foreign folder
            (["dump-log", "--files", *files, "--print-data-log"], 0),
            (["dump-log", "--files", *files, "--index-sanity-check"], 0),
            (["dump-log", "--files", *files, "--verify-index-only"], 0),
            ([*cfg, "log-dirs"], 0), ([*cfg, "log-dirs", "--max-dir-bytes", 1], 0),
            ([*cfg, "purge-deleted", "--dry-run"], 0),
            ([*cfg, "remove-folder", "--log-dir", store.dirs[0], "--name", "lost+found", "--dry-run"], 0)]


def test_read_only_commands_create_and_change_nothing(capsys, monkeypatch, populated):
    before = listing(*populated.dirs)
    assert not [p for p in before if "kafka-1" in p and ".engine+" in p]
    assert [p for p in before if ".engine+cleaning+" in p] and [p for p in before if ".engine+partition+" in p]
    for argv, code in read_only_commands(populated):
        rc, out, err = run_cli(capsys, monkeypatch, argv)
        assert rc == code and out, (argv, out[-2000:], err)
        assert listing(*populated.dirs) == before, f"{argv} wrote to the log dirs"
    report = json.loads(run_cli(capsys, monkeypatch, ["--config", populated.cfg, "verify"])[1])
    assert not report["damaged"] and {(p["topic"], p["partition"]) for p in report["partitions"]} >= {
        ("kafka", 1), ("kv", 0), ("kv", 1), ("t", 0), ("t", 1)}


def test_verify_sees_a_running_cleaner_without_taking_its_claim(populated):
    """The audit probes the cleaning claim read-only: a .cleaned file of a cleaner at work is pending, and the claim
    stays the cleaner's."""
    from storage_engine.inspection.verify import verify_log_dirs
    from storage_engine.log.locks import CleaningClaim
    d = next(d for d in populated.dirs if os.path.isdir(os.path.join(d, "kv-0")))
    cleaned = os.path.join(d, "kv-0", "00000000000000000000.log.cleaned")
    with open(cleaned, "wb"):
        pass
    claim = CleaningClaim(d, "kv-0")
    assert claim.try_acquire()
    try:
        pending = {p["file"]: p["message"] for p in verify_log_dirs(populated.config)["pending"]}
        assert pending[cleaned] == "being written by a running cleaner"
        assert not CleaningClaim(d, "kv-0").try_acquire()     # still held by the cleaner
    finally:
        claim.release()
    pending = verify_log_dirs(populated.config)["pending"]      # no cleaner at work: a dead cleaner's leftover
    assert cleaned not in {p["file"] for p in pending}
    assert [p for p in pending if "00000000000000000000.log.cleaned, left by a cleaner that died" in p["message"]]


# -- every CLI error is one line on stderr, exit 2; the usage is for --help -------------------------------------------

@pytest.mark.parametrize("argv, needle", [
    (["produce", "--topic", "t", "--partition", "x"], "argument --partition: expected an integer, got 'x'"),
    (["consume", "--topic", "t"], "the following arguments are required: --partition"),
    ([], "the following arguments are required: <command>"),
    (["nosuch"], "argument <command>: invalid choice: 'nosuch'"),
    (["--bogus", "verify"], "unrecognized arguments: --bogus"),
    (["end-txn", "--topic", "t", "--partition", "0", "--producer-id", "1", "--epoch", "0"],
     "one of the arguments --commit --abort is required"),
    (["end-txn", "--topic", "t", "--partition", "0", "--producer-id", "1", "--epoch", "99999", "--commit"],
     "argument --epoch: producer epoch must be in [0, 32767], got 99999"),
    (["log-dirs", "--max-used-percent", "x"], "argument --max-used-percent: invalid float value: 'x'"),
    (["delete-records", "--topic", "t", "--partition", "0", "--offset", "-5"], "argument --offset: offset must be"),
])
def test_a_usage_error_is_one_line_without_the_usage_block(capsys, monkeypatch, argv, needle):
    rc, out, err = run_cli(capsys, monkeypatch, argv)
    assert rc == 2 and out == ""
    line = one_error_line(err)
    assert needle in line and "usage:" not in line and line.rstrip().endswith("--help)")
    assert line.startswith(f"storage-engine: error: {needle}")


def test_the_usage_block_stays_for_help(capsys, monkeypatch):
    rc, out, err = run_cli(capsys, monkeypatch, ["produce", "--help"])
    assert rc == 0 and out.startswith("usage: python -m storage_engine produce") and "--partition" in out


def test_every_command_error_is_one_line(env, capsys, monkeypatch):
    """Each branch of main's error handling (bad input, the producer state, a storage error, an OS error): one line
    on stderr, even for a message that spans lines."""
    from storage_engine.cli import main as main_mod
    from storage_engine.errors import InvalidProducerEpochError, StorageError
    cases = [(ConfigError("bad\nconfig"), 2), (ValueError("bad value\n  indented"), 2),
             (InvalidProducerEpochError("fenced\nepoch"), 2), (StorageError("damaged\n\nsegment"), 1),
             (OSError(5, "Input/output error"), 1)]
    for exc, code in cases:
        def fail(args, config, exc=exc):
            raise exc
        monkeypatch.setitem(main_mod.COMMANDS, "describe", fail)
        rc, out, err = run_cli(capsys, monkeypatch, ["--config", env.cfg, "describe"])
        assert rc == code and "\n" not in err.rstrip("\n"), err
        one_error_line(err)
    rc, out, err = run_cli(capsys, monkeypatch, ["--config", env.cfg, "consume", "--topic", "t", "--partition", 0,
                                                 "--from-offset", 99])
    assert rc == 2 and "out of range" in one_error_line(err)


# -- a damaged cleaner-offset-checkpoint is ignored, as Kafka ignores it, and replaced (ARCHITECTURE.md section 6) --

GARBAGE = b"\x00\xffnot a checkpoint\n"


def test_a_garbage_cleaner_checkpoint_in_a_dir_of_delete_policy_topics_leaves_verify_green(env, capsys, monkeypatch):
    from storage_engine import layout
    path = os.path.join(env.config.log_dirs[0], layout.CLEANER_OFFSET_CHECKPOINT)
    with open(path, "wb") as f:
        f.write(GARBAGE)
    for strict in ([], ["--strict"]):
        rc, out, err = run_cli(capsys, monkeypatch, ["--config", env.cfg, "verify", *strict])
        report = json.loads(out)
        assert rc == 0 and not report["damaged"] and report["problems"] == []
        [entry] = [p for p in report["pending"] if p["file"] == path]
        assert "ignored, as Kafka's cleaner ignores it" in entry["message"] and "line 1" in entry["message"]
    rc, out, err = run_cli(capsys, monkeypatch, ["--config", env.cfg, "describe"])
    assert rc == 0 and "line 1" in json.loads(out)["log_dirs"][0]["cleaner_checkpoint_error"]
    assert_nothing_lost(env)


def test_a_garbage_cleaner_checkpoint_is_ignored_with_one_warning_and_replaced_by_compaction(env, caplog):
    from storage_engine import layout
    from storage_engine.jobs import compaction
    from storage_engine.inspection.verify import verify_log_dirs
    from storage_engine.segment.checkpoint import OffsetCheckpointFile
    path = os.path.join(env.config.log_dirs[0], layout.CLEANER_OFFSET_CHECKPOINT)
    with open(path, "wb") as f:
        f.write(GARBAGE)
    with caplog.at_level("WARNING", logger="storage_engine.maintenance.cleaner_manager"):
        compaction.compact(env.config, 10**12, dry_run=True)       # a dry run writes nothing
        compaction.compact(env.config, 10**12, dry_run=True)
        with open(path, "rb") as f:
            assert f.read() == GARBAGE
        ignoring = [r for r in caplog.records if "Ignoring corrupt cleaner checkpoint" in r.getMessage()]
        assert len(ignoring) == 1, "reported once"
        compaction.compact(env.config, 10**12)
    OffsetCheckpointFile(path).read()      # parses again: replaced by the run's selection or its cleaning
    report = verify_log_dirs(env.config)
    assert not report["damaged"] and not [p for p in report["pending"] if p["file"] == path]
    assert_nothing_lost(env)


def test_produce_reads_each_line_with_a_bound(env, capsys, monkeypatch):
    """``produce < /dev/zero`` is one endless line: refused at 8 x max.message.bytes (+ 64 KiB), nothing written."""
    limit = 8 * MAX_MESSAGE_BYTES + 65536
    endless = b'{"value": "' + b"x" * (limit + 10)
    rc, out, err = produce(capsys, monkeypatch, env, "t", GOOD + endless)
    assert rc == 2 and out == "" and f"line 3: longer than {limit} bytes" in one_error_line(err)
    fits = b'{"value": "' + b"y" * (limit - 13) + b'"}\n'       # exactly the bound, then its newline
    assert len(fits) == limit + 1
    rc, out, err = produce(capsys, monkeypatch, env, "t", fits)
    assert rc == 2 and "max.message.bytes" in err and "longer than" not in err   # read whole, refused as a record
    assert_nothing_lost(env)
