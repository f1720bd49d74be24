"""Kafka's exact rules for offset checkpoint files, at their boundaries (MUTATION.md: what the mutants of
checkpoint.py showed the other tests let through). Rules quoted from the reference (section 3): the version and
count lines are read with Java's ``Integer.parseInt``, offsets are Java longs; a violation names the file, the
line and the byte position of the line."""
from __future__ import annotations

import logging

import pytest

from storage_engine import layout
from storage_engine.errors import CorruptCheckpointError, InvalidOffsetError, StorageIOError
from storage_engine.segment.checkpoint import OffsetCheckpointFile, format_offset_checkpoint, parse_offset_checkpoint

pytestmark = pytest.mark.unit

INT_MIN, LONG_MIN, LONG_MAX = -(2**31), -(2**63), 2**63 - 1


def corrupt(data: bytes) -> CorruptCheckpointError:
    with pytest.raises(CorruptCheckpointError) as err:
        parse_offset_checkpoint(data, "cp")
    return err.value


# CheckpointFile: "line 1 = version (int); line 2 = entry count (int)": Integer.parseInt takes every Java int,
# Integer.MIN_VALUE included, and nothing beyond it.

def test_version_line_is_a_java_int_down_to_its_minimum():
    assert str(corrupt(f"{INT_MIN}\n0\n".encode())) == (
        f"line 1: unrecognised version {INT_MIN}, expected version 0: b'{INT_MIN}' (file cp, byte position 0)")
    assert str(corrupt(f"{INT_MIN - 1}\n0\n".encode())) == (
        f"line 1: malformed version line: b'{INT_MIN - 1}' (file cp, byte position 0)")


def test_count_line_is_a_java_int_down_to_its_minimum():
    assert str(corrupt(f"0\n{INT_MIN}\n".encode())) == (
        f"line 2: expected {INT_MIN} entries but found 0: b'{INT_MIN}' (file cp, byte position 2)")
    assert str(corrupt(f"0\n{INT_MIN - 1}\n".encode())) == (
        f"line 2: malformed entry count line: b'{INT_MIN - 1}' (file cp, byte position 2)")


def test_offsets_are_java_longs_both_ways_including_long_min():
    data = format_offset_checkpoint({("t", 0): LONG_MIN, ("t", 1): LONG_MAX})
    assert data == f"0\n2\nt 0 {LONG_MIN}\nt 1 {LONG_MAX}\n".encode()
    assert parse_offset_checkpoint(data) == {("t", 0): LONG_MIN, ("t", 1): LONG_MAX}
    for bad in (LONG_MIN - 1, LONG_MAX + 1):
        with pytest.raises(InvalidOffsetError) as err:
            format_offset_checkpoint({("t", 3): bad})
        assert str(err.value) == f"checkpoint offset for t-3 must be a 64-bit integer, got {bad}"


# Every violation says what is wrong with which line, exactly.

@pytest.mark.parametrize("data, message", [
    (b"x\n0\n", "line 1: malformed version line: b'x' (file cp, byte position 0)"),
    (b"0\n", "line 2: missing entry count line (file truncated?) (file cp, byte position 2)"),
    (b"0\nzero\n", "line 2: malformed entry count line: b'zero' (file cp, byte position 2)"),
    (b"0\n1\nt 5\n", "line 3: malformed line, expected '<topic> <partition> <offset>': b't 5' "
                     "(file cp, byte position 4)"),
    (b"0\n1\nt x 10\n", "line 3: malformed partition, expected an integer in [0, 2147483647]: b't x 10' "
                        "(file cp, byte position 4)"),
    (b"0\n1\nt 5 1.5\n", "line 3: malformed offset, expected a 64-bit integer: b't 5 1.5' "
                         "(file cp, byte position 4)"),
    (b"0\n1\nt 5 1234", "line 3: last line b't 5 1234' is not terminated by a newline (file truncated?) "
                        "(file cp, byte position 4)"),
])
def test_messages_name_the_line_and_what_is_wrong(data, message):
    assert str(corrupt(data)) == message


def test_a_long_bad_line_is_quoted_by_its_first_80_bytes_and_an_unterminated_one_by_its_first_40():
    long_line = b"t 5 " + b"9" * 96
    err = corrupt(b"0\n1\n" + long_line + b"\n")
    assert str(err) == (f"line 3: malformed offset, expected a 64-bit integer: {long_line[:80]!r} "
                        "(file cp, byte position 4)")
    err = corrupt(b"0\n1\n" + long_line)
    assert str(err) == (f"line 3: last line {long_line[:40]!r} is not terminated by a newline (file truncated?) "
                        "(file cp, byte position 4)")


def test_bytes_that_are_not_utf8_are_located_at_the_bad_byte():
    data = b"0\n1\nfo\xffo 0 10\n"
    err = corrupt(data)
    assert err.position == data.index(b"\xff") == 6
    assert str(err) == "line 3: not UTF-8 text (file cp, byte position 6)"


def test_an_unreadable_file_is_a_storage_error_naming_the_file_and_the_cause(log_dir):
    path = log_dir / layout.CLEANER_OFFSET_CHECKPOINT
    path.mkdir()     # a directory where the checkpoint file should be: reading it fails with EISDIR
    with pytest.raises(StorageIOError) as err:
        OffsetCheckpointFile(path).read()
    cause = err.value.__cause__
    assert isinstance(cause, IsADirectoryError)
    assert err.value.path == str(path)
    assert str(err.value) == f"cannot read checkpoint file: {path}: {cause}"


def test_read_or_empty_warns_with_the_file_and_the_reason(log_dir, caplog):
    cp = OffsetCheckpointFile(log_dir / layout.RECOVERY_POINT_CHECKPOINT)
    with open(cp.path, "wb") as f:
        f.write(b"0\n1\nt 0 nine\n")
    with caplog.at_level(logging.WARNING):
        entries, reason = cp.read_or_empty()
    assert entries == {}
    assert reason == (f"line 3: malformed offset, expected a 64-bit integer: b't 0 nine' "
                      f"(file {cp.path}, byte position 4)")
    [record] = caplog.records
    assert record.getMessage() == f"Ignoring corrupt checkpoint file {cp.path}, treating it as empty: {reason}"
