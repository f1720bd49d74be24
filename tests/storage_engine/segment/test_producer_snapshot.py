"""The .snapshot format (Kafka's ProducerStateManagerTest read/write and corrupt-file cases)."""
from __future__ import annotations

import struct

import pytest
from crc32c import crc32c

from storage_engine.errors import CorruptSnapshotError
from storage_engine.segment.producer_snapshot import (ENTRY_SIZE, SnapshotEntry, decode_snapshot, encode_snapshot,
                                                      read_snapshot, write_snapshot)

pytestmark = pytest.mark.unit

E1 = SnapshotEntry(producer_id=1, epoch=0, last_sequence=4, last_offset=14, offset_delta=4, timestamp=1000,
                   coordinator_epoch=-1, current_txn_first_offset=-1)
E2 = SnapshotEntry(2, 5, 0, 20, 0, 2000, 3, 18)


def test_layout_is_kafkas_version_1_schema():
    data = encode_snapshot([E2, E1])
    assert ENTRY_SIZE == 46 and len(data) == 10 + 2 * 46
    version, crc, count = struct.unpack_from(">hIi", data, 0)
    assert (version, count) == (1, 2)
    assert crc == crc32c(data[6:])  # CRC-32C from the count to the end
    # entries in producer id order, fields in ProducerSnapshot.json order
    assert data[10:56] == struct.pack(">qhiqiqiq", 1, 0, 4, 14, 4, 1000, -1, -1)
    assert data[56:] == struct.pack(">qhiqiqiq", 2, 5, 0, 20, 0, 2000, 3, 18)


def test_empty_snapshot_is_ten_bytes():
    data = encode_snapshot([])
    assert data == struct.pack(">hIi", 1, crc32c(b"\x00\x00\x00\x00"), 0)
    assert decode_snapshot(data) == []


def test_read_write_round_trip(tmp_path):
    path = str(tmp_path / "00000000000000000021.snapshot")
    write_snapshot(path, [E1, E2])
    assert read_snapshot(path) == [E1, E2]
    assert not (tmp_path / "00000000000000000021.snapshot.tmp").exists()


@pytest.mark.parametrize("mutate,match", [
    (lambda d: d[:5], "shorter than the 10-byte header"),
    (lambda d: b"", "holds no version"),
    (lambda d: d[:-1], "do not fill"),
    (lambda d: d + b"\x00", "do not fill"),
    (lambda d: struct.pack(">h", 2) + d[2:], "unknown file version 2"),
    (lambda d: struct.pack(">h", 0) + d[2:], "unknown file version 0"),
    (lambda d: d[:20] + bytes([d[20] ^ 1]) + d[21:], "CRC is no longer valid"),
    (lambda d: d[:6] + struct.pack(">i", -1) + d[10:], "do not fill"),
])
def test_corrupt_files_are_refused(mutate, match):
    with pytest.raises(CorruptSnapshotError, match=match):
        decode_snapshot(mutate(encode_snapshot([E1, E2])), "x.snapshot")
