"""The ``.snapshot`` file: producer state at one offset (Kafka's ``ProducerStateManager.writeSnapshot``/
``readSnapshot``, schema ``ProducerSnapshot.json`` version 1, not flexible).

Named ``<offset, 20 digits>.snapshot``: the offset is the (exclusive) end of the log the state describes, not
necessarily a segment base. Big-endian::

    offset size field
       0    2   version                  int16 = 1 (any other: corrupt)
       2    4   crc                      uint32 CRC-32C of every byte from offset 6 to the end
       6    4   entry count              int32
      10   46   per producer:
                  producer_id              int64
                  epoch                    int16
                  last_sequence            int32  last sequence of the producer's last data batch
                  last_offset              int64  last offset of that batch; < 0: the entry has no batch
                  offset_delta             int32  last_sequence - first sequence of that batch
                  timestamp                int64  max timestamp of the producer's last write
                  coordinator_epoch        int32
                  current_txn_first_offset int64  first offset of the open transaction, -1 if none

A file whose version is not 1, that does not parse to exactly its length, or whose CRC does not match is a
:class:`~storage_engine.errors.CorruptSnapshotError`; the loader then deletes it and tries the next older one.
Kafka writes the file in place; this engine writes it atomically (``<name>.tmp``, fsync, rename), because other
processes read snapshots while one writes them, so a reader never sees half a file. Entries are written in
ascending producer id order (Kafka's order is its hash map's; readers do not depend on it).
"""
from __future__ import annotations

import os
import struct
from typing import NamedTuple

from crc32c import crc32c

from storage_engine.durable import atomic_write, read_regular_file
from storage_engine.errors import CorruptSnapshotError, StorageIOError, UnsafeFileError

VERSION = 1
HEADER = struct.Struct(">hIi")
CRC_OFFSET = 2
ENTRIES_OFFSET = 6           # the CRC covers the count and the entries
ENTRY = struct.Struct(">qhiqiqiq")
ENTRY_SIZE = ENTRY.size      # 46


class SnapshotEntry(NamedTuple):
    producer_id: int
    epoch: int
    last_sequence: int
    last_offset: int
    offset_delta: int
    timestamp: int
    coordinator_epoch: int
    current_txn_first_offset: int


def encode_snapshot(entries: list[SnapshotEntry]) -> bytes:
    out = bytearray(HEADER.size + ENTRY_SIZE * len(entries))
    HEADER.pack_into(out, 0, VERSION, 0, len(entries))
    pos = HEADER.size
    for e in sorted(entries, key=lambda e: e.producer_id):
        ENTRY.pack_into(out, pos, *e)
        pos += ENTRY_SIZE
    struct.pack_into(">I", out, CRC_OFFSET, crc32c(memoryview(out)[ENTRIES_OFFSET:]))
    return bytes(out)


def decode_snapshot(data: bytes, path: object = None) -> list[SnapshotEntry]:
    if len(data) < 2:
        raise CorruptSnapshotError("snapshot failed schema validation: the file holds no version", path, 0)
    (version,) = struct.unpack_from(">h", data, 0)
    if version != VERSION:
        raise CorruptSnapshotError(f"snapshot contained an unknown file version {version}", path, 0)
    if len(data) < HEADER.size:
        raise CorruptSnapshotError(f"snapshot failed schema validation: {len(data)} bytes are shorter than the "
                                   f"{HEADER.size}-byte header", path, 0)
    _v, crc, count = HEADER.unpack_from(data, 0)
    if count < 0 or HEADER.size + count * ENTRY_SIZE != len(data):
        raise CorruptSnapshotError(f"snapshot failed schema validation: {count} entries do not fill the "
                                   f"{len(data)}-byte file", path, ENTRIES_OFFSET)
    computed = crc32c(memoryview(data)[ENTRIES_OFFSET:])
    if crc != computed:
        raise CorruptSnapshotError(f"snapshot is corrupt (CRC is no longer valid). Stored crc: {crc}. "
                                   f"Computed crc: {computed}", path, CRC_OFFSET)
    return [SnapshotEntry(*ENTRY.unpack_from(data, HEADER.size + i * ENTRY_SIZE)) for i in range(count)]


# Millions of producers' entries; a larger file, or one that is no regular file, is corrupt (deleted at the load).
MAX_SNAPSHOT_BYTES = 256 * 1024 * 1024


def read_snapshot(path: str) -> list[SnapshotEntry]:
    try:
        data = read_regular_file(path, MAX_SNAPSHOT_BYTES)
    except OSError as exc:
        raise StorageIOError("cannot read producer snapshot", path, exc) from exc
    except UnsafeFileError as exc:
        raise CorruptSnapshotError(f"snapshot is {exc.reason}", path, 0) from None
    return decode_snapshot(data, path)


def write_snapshot(path: str, entries: list[SnapshotEntry], *, sync: bool = True, unless_equal: bool = False) -> bool:
    """Write the snapshot atomically; with ``unless_equal``, not when the file already holds exactly its bytes.
    Returns whether it was written."""
    data = encode_snapshot(entries)
    if unless_equal:
        try:
            fd = os.open(path, os.O_RDONLY)
            try:
                if os.read(fd, len(data) + 1) == data:
                    return False
            finally:
                os.close(fd)
        except OSError:
            pass  # missing or unreadable: written below
    atomic_write(path, data, sync=sync)
    return True
