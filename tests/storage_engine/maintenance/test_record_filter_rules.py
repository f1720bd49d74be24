"""The record filter at its edges (Kafka's ``MemoryRecords.filterTo`` with the cleaner's ``RecordFilter``), run with
the compiled record filter and with its Python twin (the package's conftest): the round's written-message count summed
over several rebuilt compressed batches, the delete horizon capped at Long.MAX, and a batch whose compressed records
section cannot be decompressed."""
from __future__ import annotations

import pytest

from storage_engine.errors import CompressionError
from storage_engine.maintenance import record_filter
from storage_engine.maintenance.cleaner import CleanerStats
from storage_engine.maintenance.offset_map import InProcessOffsetMap
from storage_engine.record import codecs
from storage_engine.record.record_batch import (ATTRIBUTES_OFFSET, CRC_OFFSET, RecordBatch, build_batch)
from storage_engine.record.records import SimpleRecord

pytestmark = pytest.mark.unit

LONG_MAX = 2**63 - 1
NOW = 1_700_000_000_000


def key_map(latest: int, **offsets: int) -> InProcessOffsetMap:
    m = InProcessOffsetMap(24 * 64)
    for key, offset in offsets.items():
        m.put(key.encode(), offset)
    m.latest_offset = latest
    return m


def batch(keys_values, base_offset: int, codec: int = codecs.NONE) -> RecordBatch:
    recs = [SimpleRecord(k, v, 1000 + i, ()) for i, (k, v) in enumerate(keys_values)]
    return RecordBatch(build_batch(recs, base_offset=base_offset, codec=codec), 0)


def test_messages_written_sums_the_records_kept_over_the_rounds_batches():
    """LogCleaner's stats: each rebuilt batch adds the records it keeps to the round's messages written (the
    compressed batches below are rebuilt: some of their records are superseded by later offsets of their key)."""
    m = key_map(5, a=1, b=4, c=5)
    stats = CleanerStats()
    first = batch([(b"a", b"0"), (b"a", b"1"), (b"b", b"2")], 0, codecs.GZIP)       # keeps a@1
    second = batch([(b"c", b"3"), (b"b", b"4"), (b"c", b"5")], 3, codecs.GZIP)      # keeps b@4, c@5
    kept = []
    for b in (first, second):
        survived = record_filter.filter_batch(b, m, NOW, 1000, True, False, stats)
        assert survived is not None, "the batch keeps records"
        data, _max_ts = survived
        kept.append([(r.offset, r.key, r.value) for r in RecordBatch(bytes(data), 0).records()])
    assert kept == [[(1, b"a", b"1")], [(4, b"b", b"4"), (5, b"c", b"5")]]
    assert (stats.messages_read, stats.messages_written, stats.invalid_messages_read, stats.tombstones_removed) == \
        (6, 3, 0, 0)


@pytest.mark.parametrize("codec", [codecs.NONE, codecs.GZIP])
def test_a_new_delete_horizon_is_capped_at_long_max(codec):
    """KIP-534: a batch that first retains a tombstone gets delete horizon = now + delete.retention.ms; a round run
    so late that the sum passes Long.MAX stamps Long.MAX (the field cannot hold more), not a wrapped value."""
    m = key_map(3, a=1, b=2)
    b = batch([(b"a", b"x"), (b"a", None), (b"b", None)], 0, codec)                 # a@0 superseded
    stats = CleanerStats()
    survived = record_filter.filter_batch(b, m, LONG_MAX - 1000, 86_400_000, True, False, stats)
    assert survived is not None, "the batch keeps records"
    data, max_ts = survived
    out = RecordBatch(bytes(data), 0)
    assert (out.has_delete_horizon, out.delete_horizon_ms, max_ts) == (True, LONG_MAX, 1002)
    assert [(r.offset, r.key, r.value, r.timestamp) for r in out.records()] == \
        [(1, b"a", None, 1001), (2, b"b", None, 1002)]
    assert (stats.messages_read, stats.messages_written) == (3, 2)


def test_a_batch_whose_compressed_records_cannot_be_decompressed_is_refused():
    """A batch whose attributes name gzip but whose records section is not gzip data (its CRC is valid) is corrupt:
    Kafka's decompression throws and the cleaner stops on the log. Neither filling the map nor filtering reads its
    records as if they were uncompressed."""
    plain = bytearray(build_batch([SimpleRecord(b"a", b"1", 1000, ())], base_offset=0))
    plain[ATTRIBUTES_OFFSET + 1] |= codecs.GZIP
    plain[CRC_OFFSET:CRC_OFFSET + 4] = RecordBatch(bytes(plain), 0).compute_crc().to_bytes(4, "big")
    data = bytes(plain)
    assert RecordBatch(data, 0).is_valid()
    with pytest.raises(CompressionError) as err:
        record_filter.filter_batch(RecordBatch(data, 0), key_map(0, a=0), NOW, 1000, True, False, CleanerStats())
    message = str(err.value)
    assert message == ("cannot decompress batch at offset 0: gzip: Error -3 while decompressing data: incorrect "
                       "header check (byte position 61)")                        # the records section starts at 61
    m = InProcessOffsetMap(24 * 64)
    with pytest.raises(CompressionError) as err:
        record_filter.map_batch(RecordBatch(data, 0), m, 0, 10)
    assert str(err.value) == message
    assert (m.size, m.latest_offset, m.get(b"a")) == (0, -1, -1)
