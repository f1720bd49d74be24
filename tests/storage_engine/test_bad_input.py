"""Bad input gets a clear error naming what was wrong, and loses nothing already stored (DESIGN.md section 8).

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
from storage_engine.errors import (ConfigError, InvalidRecordForTopicError, InvalidTopicError,
                                   OffsetOutOfRangeError, RecordTooLargeError)
from storage_engine.log.manager import LogManager
from storage_engine.record.records import SimpleRecord

pytestmark = pytest.mark.unit

MAX_MESSAGE_BYTES = 2000
HOSTILE_TOPICS = ["../etc", "a/b", "/abs", ".", "..", "x" * 300, "", "with space", "nul\x00byte", "new\nline",
                  "ünïcode", "..\\x"]


@pytest.fixture
def env(tmp_path):
    """A log dir with a plain topic ``t`` and a compacted topic ``kv``, each holding a few records."""
    cfg = tmp_path / "storage.yaml"
    cfg.write_text(json.dumps({
        "broker": {"log.dirs": [str(tmp_path / "logs")], "log.segment.bytes": 4096},
        "topics": {"t": {"max.message.bytes": MAX_MESSAGE_BYTES}, "kv": {"cleanup.policy": "compact"}},
    }), encoding="utf-8")
    config = load_config(str(cfg))
    with LogManager.open(config) as mgr:
        for i in range(10):
            mgr.get_or_create_log("t", 0).append_records([SimpleRecord(f"k{i}".encode(), f"v{i}".encode(), 1000 + i)])
        mgr.get_or_create_log("kv", 0).append_records([SimpleRecord(b"a", b"1", 5), SimpleRecord(b"b", b"2", 6)])
    return types.SimpleNamespace(tmp=tmp_path, cfg=str(cfg), config=config, baseline=stored(config))


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
        rc = main.main([str(a) for a in argv])
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
            list(mgr.get_log("t", 0).read_records(11))
    assert_nothing_lost(env)


@pytest.mark.parametrize("offset", [11, 10**12])
def test_delete_records_beyond_the_high_watermark(env, capsys, monkeypatch, offset):
    rc, out, err = run_cli(capsys, monkeypatch, ["--config", env.cfg, "delete-records", "--topic", "t", "--partition",
                                                 0, "--offset", offset])
    assert rc == 2 and out == "" and f"to {offset}" in err and "high watermark 10" in err
    with LogManager.open(env.config) as mgr:
        log = mgr.get_log("t", 0)
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
    from storage_engine.log.log import Log
    log, _ = open_log(str(tmp_path), "typed", 0, LogConfig(), clock=ManualClock(1), exclusive=True, create=True)
    log.append_records([(b"good", b"record", 1)])
    with pytest.raises(InvalidRecordError, match=re.escape(field)):
        log.clock.set(2)
        log.append_records([(b"also-good", b"x", 2), bad])
    assert [(r.offset, r.key) for r in log.read_records()] == [(0, b"good")]
    log.close(clean=True)
