"""Offset checkpoint files: Kafka's ``OffsetCheckpointFile`` text format, read and written byte-compatibly.

The container (version line, count line, entry lines; :func:`parse_checkpoint`, :func:`format_checkpoint`) is
Kafka's ``CheckpointFile`` and is shared with the partition's ``leader-epoch-checkpoint``
(:mod:`storage_engine.segment.leader_epoch`).

A log dir holds three of them: ``recovery-point-offset-checkpoint``, ``log-start-offset-checkpoint`` and
``cleaner-offset-checkpoint`` (names in :mod:`layout`). UTF-8 text, every line ended by ``\\n``::

    0                  version; offset checkpoints only have version 0
    2                  number of entries that follow
    my-topic 0 1234    <topic> <partition> <offset>, single spaces
    other 3 17

On write, entries are sorted by (topic, partition) so equal maps give equal files (Kafka writes map
order), and the file is replaced atomically (:func:`durable.atomic_write`: ``<file>.tmp``, fsync, rename,
fsync dir), so a reader sees the old or the new file and a leftover ``<file>.tmp`` is never read.

On read, as Kafka's ``CheckpointFile``: a missing or empty file has no entries; entry lines are split on
whitespace into exactly three fields; integers are Java ints (partition) and longs (offset); the number of
entries must equal the count line. A violation raises :class:`CorruptCheckpointError` naming the file,
the line number and the byte position of that line. Stricter than Kafka, so that damage never yields a
wrong offset silently: the last line must end with ``\\n`` (Kafka always writes one; a file cut inside
its last line, "t 0 12" from "t 0 1234", would otherwise pass the count check), a version line without a
count line is an error (Kafka reads it as empty), topic names must pass :func:`layout.validate_topic`
(``../x`` is corruption, not a topic), partitions must be >= 0, and a (topic, partition) may appear once. The
file must be a regular file of at most :data:`MAX_CHECKPOINT_BYTES`; anything else in its place is corrupt too.
"""
from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

from storage_engine.durable import atomic_write, read_regular_file
from storage_engine.errors import (CorruptCheckpointError, InvalidOffsetError, InvalidTopicError, StorageIOError,
                                   UnsafeFileError)
from storage_engine.layout import validate_partition, validate_topic

CURRENT_VERSION = 0
# An offset entry is at most 249 + 1 + 10 + 1 + 20 + 1 bytes: 64 MiB holds over 200,000 of the longest. A larger
# file, or one that is no regular file (a FIFO would block the reader, /dev/zero never ends), is corrupt.
MAX_CHECKPOINT_BYTES = 64 * 1024 * 1024

_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1
_INT_MAX = 2**31 - 1
_JAVA_INTEGER = re.compile(r"[+-]?[0-9]+")    # Integer.parseInt / Long.parseLong syntax
_WHITESPACE = re.compile(r"[ \t\x0b\f]+")   # Java's \s, within a line
_LINE_END = re.compile(rb"\r\n|\r|\n")         # BufferedReader.readLine line terminators

_log = logging.getLogger(__name__)
T = TypeVar("T")


def _java_int(text: str, lo: int, hi: int) -> int | None:
    if not _JAVA_INTEGER.fullmatch(text):
        return None
    value = int(text)
    return value if lo <= value <= hi else None


def parse_java_int(text: str, lo: int, hi: int) -> int | None:
    """``text`` as Java's ``Integer.parseInt``/``Long.parseLong`` reads it, if within [lo, hi]; else None."""
    return _java_int(text, lo, hi)


def parse_checkpoint(data: bytes, path: str | None, parse_entry: Callable[[list[str], int], T]) -> list[T]:
    """The entries of a checkpoint container (Kafka's ``CheckpointFile``): a version line (must be
    :data:`CURRENT_VERSION`), a count line, then one entry per line, each split on whitespace into fields and
    handed to ``parse_entry(fields, line number)``, which returns the entry or raises ``ValueError(reason)``.
    Empty data has no entries. Raises :class:`CorruptCheckpointError` (with ``path``, line number and byte
    position) on any damage, with the stricter rules of the module docstring."""
    if not data:
        return []
    # Split into (line number, byte position, text) keeping each line's terminator out of the text.
    lines: list[tuple[int, int, bytes]] = []
    start = 0
    for number, match in enumerate(_LINE_END.finditer(data), start=1):
        lines.append((number, start, data[start:match.start()]))
        start = match.end()
    if start < len(data):
        raise CorruptCheckpointError(
            f"line {len(lines) + 1}: last line {data[start:start + 40]!r} is not terminated by a newline "
            "(file truncated?)", path, start)

    def fail(line: tuple[int, int, bytes], reason: str) -> CorruptCheckpointError:
        number, position, raw = line
        return CorruptCheckpointError(f"line {number}: {reason}: {raw[:80]!r}", path, position)

    def text(line: tuple[int, int, bytes]) -> str:
        try:
            return line[2].decode("utf-8")
        except UnicodeDecodeError as exc:
            number, position, _ = line
            raise CorruptCheckpointError(f"line {number}: not UTF-8 text", path, position + exc.start) from None

    version = _java_int(text(lines[0]), -(2**31), _INT_MAX)
    if version is None:
        raise fail(lines[0], "malformed version line")
    if version != CURRENT_VERSION:
        raise fail(lines[0], f"unrecognised version {version}, expected version {CURRENT_VERSION}")
    if len(lines) < 2:
        raise CorruptCheckpointError("line 2: missing entry count line (file truncated?)", path, len(data))
    expected = _java_int(text(lines[1]), -(2**31), _INT_MAX)
    if expected is None:
        raise fail(lines[1], "malformed entry count line")

    entries: list[T] = []
    for line in lines[2:]:
        parts = _WHITESPACE.split(text(line))
        while parts and parts[-1] == "":    # String.split drops trailing empty strings, not leading ones
            parts.pop()
        try:
            entries.append(parse_entry(parts, line[0]))
        except ValueError as exc:
            raise fail(line, str(exc)) from None
    if len(entries) != expected:
        raise fail(lines[1], f"expected {expected} entries but found {len(entries)}")
    return entries


def format_checkpoint(entry_lines: Sequence[str]) -> bytes:
    """The bytes of a checkpoint container holding ``entry_lines`` (each without its newline), as Kafka's
    ``CheckpointFile`` writes them: version, count, the entries, every line ended by ``\\n``."""
    return ("\n".join([str(CURRENT_VERSION), str(len(entry_lines)), *entry_lines]) + "\n").encode("utf-8")


def read_checkpoint_bytes(path: str) -> bytes | None:
    """The bytes of a checkpoint file; None if it is missing. Raises :class:`StorageIOError`, and
    :class:`CorruptCheckpointError` for a file that is no regular file or larger than :data:`MAX_CHECKPOINT_BYTES`."""
    try:
        return read_regular_file(path, MAX_CHECKPOINT_BYTES)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StorageIOError("cannot read checkpoint file", path, exc) from exc
    except UnsafeFileError as exc:   # a FIFO or a device in its place, or not a checkpoint: its content is lost
        raise CorruptCheckpointError(exc.reason, path, 0) from None


def parse_offset_checkpoint(data: bytes, path: str | None = None) -> dict[tuple[str, int], int]:
    """Parse the bytes of an offset checkpoint file into {(topic, partition): offset}.

    Raises :class:`CorruptCheckpointError` (with ``path``, line number and byte position) on any damage.
    """
    first_line: dict[tuple[str, int], int] = {}

    def entry(parts: list[str], number: int) -> tuple[tuple[str, int], int]:
        if len(parts) != 3:
            raise ValueError("malformed line, expected '<topic> <partition> <offset>'")
        topic, partition_text, offset_text = parts
        try:
            validate_topic(topic)
        except InvalidTopicError as exc:
            raise ValueError(f"illegal topic name ({exc})") from None
        partition = _java_int(partition_text, 0, _INT_MAX)
        if partition is None:
            raise ValueError("malformed partition, expected an integer in [0, 2147483647]")
        offset = _java_int(offset_text, _LONG_MIN, _LONG_MAX)
        if offset is None:
            raise ValueError("malformed offset, expected a 64-bit integer")
        key = (topic, partition)
        if key in first_line:
            raise ValueError(f"duplicate entry for {topic}-{partition} (first on line {first_line[key]})")
        first_line[key] = number
        return key, offset

    return dict(parse_checkpoint(data, path, entry))


def format_offset_checkpoint(entries: Mapping[tuple[str, int], int]) -> bytes:
    """The bytes of an offset checkpoint file holding ``entries``, sorted by (topic, partition).

    Raises :class:`InvalidTopicError` / :class:`InvalidOffsetError` for keys or offsets Kafka could not read.
    """
    lines: list[str] = []
    for (topic, partition), offset in sorted(entries.items()):
        validate_topic(topic)
        validate_partition(partition)
        if isinstance(offset, bool) or not isinstance(offset, int) or not _LONG_MIN <= offset <= _LONG_MAX:
            raise InvalidOffsetError(f"checkpoint offset for {topic}-{partition} must be a 64-bit integer, "
                                     f"got {offset!r}")
        lines.append(f"{topic} {partition} {offset}")
    return format_checkpoint(lines)


class OffsetCheckpointFile:
    """One offset checkpoint file. ``read`` and ``write`` are safe against crashes of the writer;
    concurrent writers must be serialised by the caller (the last rename wins)."""

    def __init__(self, path: str | os.PathLike):
        self.path = os.fspath(path)

    def __repr__(self) -> str:
        return f"OffsetCheckpointFile({self.path!r})"

    def read(self) -> dict[tuple[str, int], int]:
        """The entries; {} if the file is missing or empty. Raises CorruptCheckpointError, StorageIOError."""
        data = read_checkpoint_bytes(self.path)
        return {} if data is None else parse_offset_checkpoint(data, self.path)

    def write(self, entries: Mapping[tuple[str, int], int]) -> None:
        """Replace the file with ``entries`` atomically and durably."""
        atomic_write(self.path, format_offset_checkpoint(entries))

    def read_or_empty(self, log: logging.Logger | None = None) -> tuple[dict[tuple[str, int], int], str | None]:
        """``(entries, None)``, or ``({}, reason)`` with a WARNING if the content is corrupt.

        For callers whose safe fallback is "as if absent" (recover from 0, clean from the log start), as
        Kafka's LogManager does at startup. OS errors still raise :class:`StorageIOError`.
        """
        try:
            return self.read(), None
        except CorruptCheckpointError as exc:
            (log or _log).warning("Ignoring corrupt checkpoint file %s, treating it as empty: %s", self.path, exc)
            return {}, str(exc)
