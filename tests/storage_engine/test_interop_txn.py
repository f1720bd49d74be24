"""Interop: batches built by kafka-python and aiokafka with producer ids, epochs, sequences, the transactional flag
and control batches load (with recovery rebuilding producer state and .txnindex), read at both isolation levels and
compact as Kafka would; what the engine writes parses with both clients' readers."""
from __future__ import annotations

import os
import struct

import pytest
from aiokafka.record.default_records import DefaultRecordBatch as AioBatch
from aiokafka.record.default_records import DefaultRecordBatchBuilder as AioBuilder
from aiokafka.record.default_records import calc_crc32c as aio_crc32c
from aiokafka.record.control_record import ABORT_MARKER, COMMIT_MARKER, ControlRecord
from kafka.record.default_records import DefaultRecordBatchBuilder as KpBuilder
from kafka.record.memory_records import MemoryRecords as KpMemoryRecords

from storage_engine import layout
from storage_engine.config import CleanerConfig, LogConfig
from storage_engine.log.reads import READ_COMMITTED
from storage_engine.maintenance.cleaner import Cleaner
from storage_engine.maintenance.cleaner_manager import LogToClean
from storage_engine.record.record_batch import build_control_batch, set_base_offset
from storage_engine.segment.txn_index import AbortedTxn

from . import helpers

pytestmark = pytest.mark.unit

T0 = 1_700_000_000_000
NO_CODEC = 0


def aio_batch(pid, epoch, seq, pairs, *, transactional=True, ts=T0):
    b = AioBuilder(2, NO_CODEC, 1 if transactional else 0, pid, epoch, seq, 1 << 20)
    for i, (k, v) in enumerate(pairs):
        b.append(i, timestamp=ts, key=k, value=v, headers=[])
    return bytearray(b.build())


def kp_batch(pid, epoch, seq, pairs, *, transactional=True, ts=T0):
    b = KpBuilder(2, NO_CODEC, 1 if transactional else 0, pid, epoch, seq, 1 << 20)
    for i, (k, v) in enumerate(pairs):
        b.append(i, timestamp=ts, key=k, value=v, headers=[])
    return bytearray(b.build())


def aio_marker(pid, epoch, marker: ControlRecord, coordinator_epoch=0, ts=T0):
    """A transaction marker made with aiokafka's builder: one control record (key: version, type; value: version,
    coordinator epoch), then the control flag set and the CRC redone as a coordinator's writer does."""
    data = aio_batch(pid, epoch, -1, [(struct.pack(">hh", marker.version, marker.type_),
                                       struct.pack(">hi", 0, coordinator_epoch))], ts=ts)
    data[22] |= 0x20
    struct.pack_into(">I", data, 17, aio_crc32c(bytes(data[21:])))
    return data


def at(offset: int, data: bytearray) -> bytes:
    set_base_offset(data, 0, offset)
    return bytes(data)


def test_client_built_marker_equals_the_engines():
    theirs = at(4, aio_marker(10, 0, COMMIT_MARKER, coordinator_epoch=3))
    ours = build_control_batch(1, base_offset=4, timestamp=T0, producer_id=10, producer_epoch=0, coordinator_epoch=3)
    # identical but for the leader epoch the builder leaves at -1 for the broker to stamp (outside the CRC)
    assert theirs[:12] == ours[:12] and theirs[16:] == ours[16:]
    parsed = AioBatch(ours)
    assert parsed.is_control_batch and parsed.is_transactional and parsed.producer_id == 10
    assert ControlRecord.parse(next(iter(parsed)).key) == COMMIT_MARKER


def client_log() -> bytes:
    """Offsets 0-9: two transactional producers (10 aiokafka commits twice, 20 kafka-python aborts), an idempotent
    producer 30, a plain batch, markers built with aiokafka."""
    return b"".join([
        at(0, aio_batch(10, 0, 0, [(b"k1", b"a1"), (b"k2", b"a2")])),
        at(2, kp_batch(20, 0, 0, [(b"k1", b"b1")])),
        at(3, aio_batch(30, 0, 0, [(b"k3", b"c1")], transactional=False)),
        at(4, aio_marker(10, 0, COMMIT_MARKER, coordinator_epoch=1)),
        at(5, kp_batch(20, 0, 1, [(b"k2", b"b2")])),
        at(6, aio_marker(20, 0, ABORT_MARKER, coordinator_epoch=1)),
        at(7, kp_batch(-1, -1, -1, [(b"k3", b"d1")], transactional=False)),
        at(8, aio_batch(10, 0, 2, [(b"k1", b"a3")])),
        at(9, aio_marker(10, 0, COMMIT_MARKER, coordinator_epoch=1)),
    ])


def load_client_log(log_dir, cfg: LogConfig):
    pdir = helpers.partition_dir(log_dir)
    os.makedirs(pdir)
    with open(layout.segment_file(pdir, 0, layout.LOG_SUFFIX), "wb") as f:
        f.write(client_log())
    open(layout.segment_file(pdir, 10, layout.LOG_SUFFIX), "wb").close()   # an empty active segment
    # no index files, no snapshot, no clean shutdown: the load recovers everything, as Kafka's would
    log, res = helpers.open_log(log_dir, cfg, now_ms=T0, create=False, had_clean_shutdown=False)
    return log, res


def read(log, **kw):
    return [(r.offset, r.key, r.value) for r in log.read_records(**kw)]


def test_client_batches_load_read_and_compact_like_kafka(log_dir):
    log, res = load_client_log(log_dir, helpers.config(cleanup_policy="compact"))
    try:
        assert res.recovered_segments >= 1
        assert log.log_end_offset == 10 and log.last_stable_offset == 10
        assert [t for s in log.segments for t in s.txn_index.all_aborted_txns()] == [AbortedTxn(20, 2, 6, 7)]
        psm = log.producer_state
        assert {pid: (e.producer_epoch, e.last_seq, e.last_data_offset, e.coordinator_epoch)
                for pid, e in psm.producers.items()} == {10: (0, 2, 8, 1), 20: (0, 1, 5, 1), 30: (0, 0, 3, -1)}
        committed = [(0, b"k1", b"a1"), (1, b"k2", b"a2"), (3, b"k3", b"c1"), (7, b"k3", b"d1"), (8, b"k1", b"a3")]
        assert read(log, isolation_level=READ_COMMITTED) == committed
        assert [o for o, _, _ in read(log)] == [0, 1, 2, 3, 5, 7, 8]     # markers never come back
        # a retry of producer 30's batch (built by aiokafka) is recognised; its next batch goes on
        dup = log.append_batches(bytes(aio_batch(30, 0, 0, [(b"k3", b"c1")], transactional=False)))
        assert dup.duplicate and dup.first_offset == 3
        nxt = log.append_batches(bytes(aio_batch(30, 0, 1, [(b"k4", b"c2")], transactional=False)))
        assert nxt.first_offset == 10 and not nxt.duplicate
        log.roll()

        now = T0 + 1000
        Cleaner(CleanerConfig()).clean(LogToClean(log, 0, log.active_segment.base_offset, 0, 0, False), now)
        # aborted data gone; the latest committed value of each key; producers' last batches kept empty
        assert read(log, isolation_level=READ_COMMITTED) == [(1, b"k2", b"a2"), (7, b"k3", b"d1"),
                                                              (8, b"k1", b"a3"), (10, b"k4", b"c2")]
        assert read(log) == read(log, isolation_level=READ_COMMITTED)
        batches = [b for s in log.segments for b in s.batches()]
        # (producer 30's batch at 3 goes: its last batch is now the one at 10)
        assert [(b.last_offset, b.records_count, b.is_control) for b in batches] == [
            (1, 1, False), (4, 1, True), (5, 0, False), (6, 1, True), (7, 1, False), (8, 1, False), (9, 1, True),
            (10, 1, False)]
        # the ABORT marker stays while producer 20's empty batch remains; the txn index says so
        assert [t for s in log.segments for t in s.txn_index.all_aborted_txns()] == [AbortedTxn(20, 2, 6, 7)]
        # both clients read every batch the cleaner wrote
        raw = b"".join(s.log.read(0, s.size) for s in log.segments)
        kp = KpMemoryRecords(raw)
        kp_batches = []
        while kp.has_next():
            kp_batches.append(kp.next_batch())
        assert [(b.base_offset, b.is_control_batch, b.is_transactional, b.producer_id) for b in kp_batches] == \
            [(b.base_offset, b.is_control, b.is_transactional, b.producer_id) for b in batches]
        pos = 0
        for b in batches:
            aio = AioBatch(raw[pos:pos + b.size_in_bytes])
            assert aio.validate_crc() and aio.is_control_batch == b.is_control
            pos += b.size_in_bytes
    finally:
        log.close(clean=False)


def test_engine_written_transactions_parse_with_both_clients(logs):
    log = logs()
    from storage_engine.record.records import SimpleRecord
    log.append_records([SimpleRecord(b"k", b"v")], producer_id=5, producer_epoch=2, base_sequence=0,
                       is_transactional=True)
    log.append_end_txn(5, 2, commit=False, coordinator_epoch=7)
    raw = log.active_segment.log.read(0, log.active_segment.size)
    kp = KpMemoryRecords(raw)
    data = kp.next_batch()
    marker = kp.next_batch()
    assert (data.producer_id, data.producer_epoch, data.base_sequence, data.is_transactional) == (5, 2, 0, True)
    assert marker.is_control_batch and marker.is_transactional and marker.producer_id == 5
    first_len = struct.unpack_from(">i", raw, 8)[0] + 12
    aio = AioBatch(raw[first_len:])
    assert aio.validate_crc()
    rec = next(iter(aio))
    assert ControlRecord.parse(rec.key) == ABORT_MARKER and struct.unpack(">hi", rec.value) == (0, 7)
