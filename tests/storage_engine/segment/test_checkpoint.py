"""Offset checkpoint files (Kafka's text format) and the clean-shutdown marker of a log dir."""
from __future__ import annotations

import json
import logging
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage_engine import layout
from storage_engine.segment.checkpoint import OffsetCheckpointFile, format_offset_checkpoint, parse_offset_checkpoint
from storage_engine.segment.clean_shutdown import (
    consume_clean_shutdown, has_clean_shutdown, read_broker_epoch, write_clean_shutdown,
)
from storage_engine.errors import CorruptCheckpointError, InvalidOffsetError, InvalidTopicError

pytestmark = pytest.mark.unit


@pytest.fixture
def checkpoint(log_dir):
    return OffsetCheckpointFile(str(log_dir / layout.RECOVERY_POINT_CHECKPOINT))


def corrupt(checkpoint: OffsetCheckpointFile, data: bytes) -> CorruptCheckpointError:
    with open(checkpoint.path, "wb") as f:
        f.write(data)
    with pytest.raises(CorruptCheckpointError) as err:
        checkpoint.read()
    assert err.value.path == checkpoint.path
    assert checkpoint.path in str(err.value)
    return err.value


# ---------------------------------------------------------------------------------------------- format

def test_round_trip_and_exact_bytes(checkpoint):
    entries = {("foo", 1): 5, ("bar", 2): 10, ("foo", 0): 2**63 - 1}
    checkpoint.write(entries)
    assert checkpoint.read() == entries
    with open(checkpoint.path, "rb") as f:
        assert f.read() == b"0\n3\nbar 2 10\nfoo 0 9223372036854775807\nfoo 1 5\n"


def test_entries_are_sorted_by_topic_then_partition_number():
    data = format_offset_checkpoint({("t", 10): 1, ("t", 9): 2, ("a.b-c_d", 0): 3})
    assert data == b"0\n3\na.b-c_d 0 3\nt 9 2\nt 10 1\n"


# Kafka's OffsetCheckpointFileWithFailureHandlerTest

def test_should_persist_and_overwrite_and_reload_file(checkpoint):
    offsets = {("foo", 1): 5, ("bar", 2): 10}
    checkpoint.write(offsets)
    assert checkpoint.read() == offsets
    offsets2 = {("foo", 2): 15, ("bar", 3): 20}
    checkpoint.write(offsets2)
    assert checkpoint.read() == offsets2
    assert OffsetCheckpointFile(checkpoint.path).read() == offsets2     # reload from disk


def test_should_handle_multiple_lines(checkpoint):
    offsets = {("foo", 1): 5, ("bar", 6): 10, ("foo", 2): 5, ("bar", 2): 10, ("foo", 4): 5, ("bar", 5): 10,
               ("foo", 8): 5, ("bar", 7): 10, ("foo", 10): 5, ("bar", 9): 10}
    checkpoint.write(offsets)
    assert checkpoint.read() == offsets


def test_should_return_empty_map_for_empty_file(checkpoint):
    open(checkpoint.path, "wb").close()
    assert checkpoint.read() == {}
    checkpoint.write({})
    assert checkpoint.read() == {}
    with open(checkpoint.path, "rb") as f:
        assert f.read() == b"0\n0\n"


def test_should_throw_if_version_is_not_recognised(checkpoint):
    err = corrupt(checkpoint, b"1\n1\nfoo 5 10\n")
    assert "line 1: unrecognised version 1, expected version 0" in str(err)


def test_missing_file_reads_as_empty_and_is_not_created(checkpoint):
    assert checkpoint.read() == {}
    assert not os.path.exists(checkpoint.path)


@pytest.mark.parametrize("data, expected", [
    (b"0\n1\nfoo  5\t\t10 \n", {("foo", 5): 10}),           # split on whitespace, trailing blanks dropped
    (b"0\r\n1\r\nfoo 5 10\r\n", {("foo", 5): 10}),            # readLine also ends lines at \r\n
    (b"+0\n1\nfoo 5 -1\n", {("foo", 5): -1}),                 # Integer.parseInt / Long.parseLong syntax
])
def test_accepts_what_kafkas_reader_accepts(checkpoint, data, expected):
    with open(checkpoint.path, "wb") as f:
        f.write(data)
    assert checkpoint.read() == expected


# ---------------------------------------------------------------------------------------------- corruption

CORRUPT = [
    # data, line named in the error, what the error says
    (b"x\n0\n", 1, "malformed version line"),
    (b" 0\n0\n", 1, "malformed version line"),
    (b"\n", 1, "malformed version line"),
    (b"0\n", 2, "missing entry count line"),
    (b"0\nzero\n", 2, "malformed entry count line"),
    (b"0\n1\nfoo 5\n", 3, "malformed line, expected '<topic> <partition> <offset>'"),
    (b"0\n1\nfoo 5 10 11\n", 3, "malformed line"),
    (b"0\n1\n foo 5 10\n", 3, "malformed line"),
    (b"0\n2\nfoo 5 10\n\n", 4, "malformed line"),
    (b"0\n1\nfoo x 10\n", 3, "malformed partition"),
    (b"0\n1\nfoo -1 10\n", 3, "malformed partition"),
    (b"0\n1\nfoo 2147483648 10\n", 3, "malformed partition"),
    (b"0\n1\nfoo 5 1.5\n", 3, "malformed offset"),
    (b"0\n1\nfoo 5 9223372036854775808\n", 3, "malformed offset"),
    (b"0\n1\nfoo 5 \xd9\xa3\n", 3, "malformed offset"),                 # a non-ASCII digit
    (b"0\n2\nfoo 5 10\n", 2, "expected 2 entries but found 1"),
    (b"0\n1\nfoo 5 10\nbar 1 1\n", 2, "expected 1 entries but found 2"),
    (b"0\n2\nfoo 5 10\nfoo 5 11\n", 4, "duplicate entry for foo-5 (first on line 3)"),
    (b"0\n1\n../x 0 10\n", 3, "illegal topic name"),
    (b"0\n1\n.. 0 10\n", 3, "illegal topic name"),
    (b"0\n1\nfo/o 0 10\n", 3, "illegal topic name"),
    (b"0\n1\nfo\xffo 0 10\n", 3, "not UTF-8 text"),
    (b"0\n\xfe\n", 2, "not UTF-8 text"),
    (b"0\n1\nfoo 5 1234", 3, "is not terminated by a newline"),
]


@pytest.mark.parametrize("data, line, reason", CORRUPT, ids=[repr(d) for d, _, _ in CORRUPT])
def test_corrupt_content_names_file_and_line(checkpoint, data, line, reason):
    err = corrupt(checkpoint, data)
    assert f"line {line}: " in str(err)
    assert reason in str(err)
    assert err.position is not None and 0 <= err.position <= len(data)


def test_truncated_last_line_is_not_a_smaller_offset(checkpoint):
    # "t 0 12" cut from "t 0 1234": the count still matches, so the missing final newline is what tells.
    good = format_offset_checkpoint({("a", 0): 5, ("t", 0): 1234})
    assert good.endswith(b"t 0 1234\n")
    err = corrupt(checkpoint, good[: good.index(b"1234") + 2])
    assert "line 4" in str(err) and "not terminated by a newline" in str(err)


def test_error_position_is_the_start_of_the_bad_line(checkpoint):
    data = b"0\n2\nfoo 5 10\nbar x 1\n"
    assert corrupt(checkpoint, data).position == data.index(b"bar")


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(
    st.tuples(st.text(alphabet="abcXYZ019._-", min_size=1, max_size=12).filter(lambda t: t not in (".", "..")),
              st.integers(0, 2**31 - 1)),
    st.integers(-(2**63), 2**63 - 1), max_size=6))
def test_every_truncation_is_detected(entries):
    data = format_offset_checkpoint(entries)
    assert parse_offset_checkpoint(data) == entries
    for cut in range(1, len(data)):
        with pytest.raises(CorruptCheckpointError):
            parse_offset_checkpoint(data[:cut], "f")


# ---------------------------------------------------------------------------------------------- writing

@pytest.mark.parametrize("entries, error", [
    ({("../x", 0): 1}, InvalidTopicError),
    ({("a b", 0): 1}, InvalidTopicError),
    ({("t", -1): 1}, InvalidTopicError),
    ({("t", 0): "1"}, InvalidOffsetError),
    ({("t", 0): True}, InvalidOffsetError),
    ({("t", 0): 2**63}, InvalidOffsetError),
])
def test_write_rejects_what_kafka_could_not_read_and_keeps_the_old_file(checkpoint, entries, error):
    checkpoint.write({("t", 0): 7})
    with pytest.raises(error):
        checkpoint.write(entries)
    assert checkpoint.read() == {("t", 0): 7}


def test_stale_tmp_file_from_a_crash_is_ignored_and_replaced(checkpoint):
    checkpoint.write({("t", 0): 100})
    tmp = checkpoint.path + layout.TMP_SUFFIX
    with open(tmp, "wb") as f:          # a crash after writing part of the next checkpoint's temp file
        f.write(b"0\n2\nt 0 2")
    assert checkpoint.read() == {("t", 0): 100}
    checkpoint.write({("t", 0): 200, ("u", 1): 3})
    assert not os.path.exists(tmp)
    assert checkpoint.read() == {("t", 0): 200, ("u", 1): 3}
    assert sorted(os.listdir(os.path.dirname(checkpoint.path))) == [layout.RECOVERY_POINT_CHECKPOINT]


def test_read_or_empty_falls_back_with_a_warning(checkpoint, caplog):
    assert checkpoint.read_or_empty() == ({}, None)
    checkpoint.write({("t", 0): 9})
    assert checkpoint.read_or_empty() == ({("t", 0): 9}, None)
    with open(checkpoint.path, "wb") as f:
        f.write(b"0\n1\nt 0 nine\n")
    with caplog.at_level(logging.WARNING):
        entries, reason = checkpoint.read_or_empty()
    assert entries == {} and "line 3" in reason and "malformed offset" in reason
    assert any(r.levelno == logging.WARNING and checkpoint.path in r.getMessage() for r in caplog.records)

    caplog.clear()
    mine = logging.getLogger("test.checkpoint.caller")
    with caplog.at_level(logging.WARNING, logger="test.checkpoint.caller"):
        checkpoint.read_or_empty(log=mine)
    assert [r.name for r in caplog.records] == ["test.checkpoint.caller"]


# ---------------------------------------------------------------------------------------------- clean shutdown
# Kafka's CleanShutdownFileHandlerTest

def test_clean_shutdown_file_basic(log_dir):
    write_clean_shutdown(str(log_dir), 10)
    assert has_clean_shutdown(str(log_dir))
    assert read_broker_epoch(str(log_dir)) == 10
    with open(log_dir / layout.CLEAN_SHUTDOWN_FILE, "rb") as f:
        assert json.loads(f.read()) == {"version": 0, "brokerEpoch": 10}
    assert consume_clean_shutdown(str(log_dir)) is True
    assert not has_clean_shutdown(str(log_dir))
    assert read_broker_epoch(str(log_dir)) is None


def test_clean_shutdown_file_non_exist(log_dir):
    assert not has_clean_shutdown(str(log_dir))
    assert read_broker_epoch(str(log_dir)) is None
    assert consume_clean_shutdown(str(log_dir)) is False


def test_clean_shutdown_file_can_parse_with_unknown_fields(log_dir):
    with open(log_dir / layout.CLEAN_SHUTDOWN_FILE, "w") as f:
        json.dump({"version": 0, "brokerEpoch": 1, "unknownField": 1}, f)
    assert read_broker_epoch(str(log_dir)) == 1


def test_clean_shutdown_default_epoch_and_exact_bytes(log_dir):
    write_clean_shutdown(log_dir)
    with open(log_dir / layout.CLEAN_SHUTDOWN_FILE, "rb") as f:
        assert f.read() == b'{"version":0,"brokerEpoch":-1}'
    assert read_broker_epoch(log_dir) == -1
    assert os.listdir(log_dir) == [layout.CLEAN_SHUTDOWN_FILE]       # no temp file left behind


@pytest.mark.parametrize("content", [b"", b"{", b"[1]", b'{"version":0}', b'{"brokerEpoch":"7"}', b"\xff"])
def test_unreadable_marker_has_no_epoch_but_still_counts_as_present(log_dir, content):
    with open(log_dir / layout.CLEAN_SHUTDOWN_FILE, "wb") as f:
        f.write(content)
    assert read_broker_epoch(log_dir) is None
    assert has_clean_shutdown(log_dir)
    assert consume_clean_shutdown(log_dir) is True
    assert consume_clean_shutdown(log_dir) is False      # consumed once only (KAFKA-10471)


def test_write_clean_shutdown_rejects_a_non_integer_epoch(log_dir):
    with pytest.raises(TypeError):
        write_clean_shutdown(log_dir, "5")  # type: ignore[arg-type]  # deliberately a str: the test checks it is refused
    assert not has_clean_shutdown(log_dir)
