"""``read_committed`` fetches (librdkafka's default isolation) on the broker's event loop: each answer carries the
aborted transactions of its range, taken from the ``.txnindex`` entries kept in memory while the file is unchanged;
an abort written by another process while the broker runs is in the next answers; and, the index settled, the
fetches are read on the loop (the broker's status counts them), as ``read_uncommitted`` ones are. A change another
process begins between a read's bytes and its aborted transactions (looked up by path) makes the read start again,
so the answer never pairs old bytes with the new files' aborted transactions."""
from __future__ import annotations

import datetime
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from storage_engine.config_file import config_from_mapping
from storage_engine.log.manager import LogManager
from storage_engine.record.records import SimpleRecord
from storage_engine.segment.file_records import iter_batches
from storage_engine.segment.slice_read import WouldBlock, nonblocking
from storage_engine.segment.txn_index import SETTLED_NS
from storage_engine.server.broker import Broker
from storage_engine.server.handlers import fetch as fetch_handler
from storage_engine.server.handlers.context import Ctx
from storage_engine.server.protocol import Request
from tests.server import wire
from tests.server.broker_proc import BrokerProcess
from tests.server.fetch_wire import status

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]
TOPIC = "rc"
READ_COMMITTED = 1

# producer ``pid`` appends ``n`` transactional records and ends its transaction (commit or abort), in any process
TRANSACTION = """
import sys
from storage_engine.config_file import config_from_mapping
from storage_engine.log.manager import LogManager
from storage_engine.record.records import SimpleRecord
log_dir, topic, pid, n, commit = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] == "1"
mgr = LogManager.open(config_from_mapping({"broker": {"log.dirs": [log_dir]}, "topics": {topic: {}}}))
log = mgr.get_or_create_log(topic, 0)
log.append_records([SimpleRecord(None, b"%d-%d" % (pid, i)) for i in range(n)], producer_id=pid, producer_epoch=0,
                   base_sequence=0, is_transactional=True)
log.append_end_txn(pid, 0, commit=commit)
log.flush()
mgr.close()
"""


def _transaction(log_dir: str, pid: int, n: int, commit: bool) -> None:
    subprocess.run([sys.executable, "-c", TRANSACTION, log_dir, TOPIC, str(pid), str(n), "1" if commit else "0"],
                   cwd=ROOT, check=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})


def _fetch(conn: wire.Conn, offset: int, max_bytes: int) -> tuple[int, list[tuple[int, int]], int, list[tuple[int, int]]]:
    """(error code, aborted transactions as (producer id, first offset), last stable offset, (base, last) offsets of
    the batches) of a read_committed fetch from ``offset``."""
    request = wire.build_request(
        1, 12, replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=1, max_bytes=max_bytes,
        isolation_level=READ_COMMITTED, session_id=0, session_epoch=-1, forgotten_topics_data=[], rack_id="",
        topics=[{"topic": TOPIC, "partitions": [{"partition": 0, "current_leader_epoch": -1, "fetch_offset": offset,
                                                 "last_fetched_epoch": -1, "log_start_offset": -1,
                                                 "partition_max_bytes": max_bytes}]}])
    part: Any = conn.request(request, 11).responses[0].partitions[0]
    aborted = [(int(a.producer_id), int(a.first_offset)) for a in (part.aborted_transactions or ())]
    batches = [(b.base_offset, b.last_offset) for b in iter_batches(bytes(part.records or b""), strict=True)]
    return int(part.error_code), aborted, int(part.last_stable_offset), batches


def _consume(conn: wire.Conn, end: int) -> list[tuple[int, list[tuple[int, int]], list[tuple[int, int]]]]:
    """A consumer's pass from offset 0 to ``end``, one batch per fetch (each fetch from where the last ended):
    (fetch offset, aborted transactions, batches) per fetch."""
    offset, out = 0, []
    while offset < end:
        code, aborted, lso, batches = _fetch(conn, offset, 100)
        assert code == 0 and lso == end and len(batches) == 1, (offset, code, lso, batches)
        out.append((offset, aborted, batches))
        offset = batches[-1][1] + 1
    return out


# (fetch offset, aborted transactions, batches) of each fetch, one batch each: plain 0-1, producer 7's committed
# transaction 2-4 and its marker 5, producer 8's aborted one 6-7 and its marker 8
BEFORE = [(0, [], [(0, 1)]), (2, [], [(2, 4)]), (5, [], [(5, 5)]), (6, [(8, 6)], [(6, 7)]), (8, [(8, 6)], [(8, 8)])]


def test_read_committed_fetches_are_read_on_the_event_loop_with_every_aborted_transaction(tmp_path):
    broker = BrokerProcess(tmp_path, log_dirs=1)
    log_dir = broker.log_dirs[0]
    mgr = LogManager.open(config_from_mapping({"broker": {"log.dirs": [log_dir]}, "topics": {TOPIC: {}}}))
    mgr.get_or_create_log(TOPIC, 0).append_records([SimpleRecord(None, b"plain-%d" % i) for i in range(2)])
    mgr.close()
    _transaction(log_dir, 7, 3, commit=True)
    _transaction(log_dir, 8, 2, commit=False)
    time.sleep(SETTLED_NS / 1e9 + 0.2)                  # the .txnindex settles: its entries can be kept
    broker.start()
    try:
        _passes(broker, log_dir)
        assert broker.stop() == 0
    finally:
        broker.close()                                  # a failed pass leaves no broker running
    counted = status(broker)
    inline, pooled = counted["fetch_reads_inline"], counted["fetch_reads_pooled"]
    assert inline + pooled == 5 + 5 + 7 and inline >= 4 and pooled >= 5 + 1 + 1, counted


def _passes(broker: BrokerProcess, log_dir: str) -> None:
    conn = wire.Conn(broker.bootstrap)
    try:
        # the first pass checks the bytes (the read threads); the second is read on the event loop, all but its
        # first fetch (its offset's position comes from the offset index, checked in the threads), each answer
        # with the aborted transactions of its range, from the .txnindex entries the first pass kept
        assert _consume(conn, 9) == BEFORE
        assert _consume(conn, 9) == BEFORE
        # another process aborts a transaction while the broker runs: its entry is in the next answers
        _transaction(log_dir, 9, 1, commit=False)       # 9, its abort marker 10
        assert _consume(conn, 11) == BEFORE + [(9, [(9, 9)], [(9, 9)]), (10, [(9, 9)], [(10, 10)])]
    finally:
        conn.close()


# another process truncates the partition to offset 2 (cutting producer 8's aborted transaction) and writes a
# committed transaction of producer 9 in its place
REWRITE = """
import sys
from storage_engine.config_file import config_from_mapping
from storage_engine.log.manager import LogManager
from storage_engine.record.records import SimpleRecord
log_dir, topic = sys.argv[1], sys.argv[2]
with LogManager.open(config_from_mapping({"broker": {"log.dirs": [log_dir]}}), partitions=[(topic, 0)]) as mgr:
    log = mgr.get_log(topic, 0)
    assert log.truncate_to(2)
    log.append_records([SimpleRecord(None, b"9-0"), SimpleRecord(None, b"9-1")], producer_id=9, producer_epoch=0,
                       base_sequence=0, is_transactional=True)
    log.append_end_txn(9, 0, commit=True)
    log.flush()
"""


class Part:
    """A fetch's partition entry."""

    def __init__(self, fetch_offset: int, partition_max_bytes: int = 1 << 20) -> None:
        self.partition, self.fetch_offset, self.partition_max_bytes = 0, fetch_offset, partition_max_bytes


def _batches(entry: Any) -> list[tuple[int, int]]:
    records = entry["records"]
    data = bytes(records) if not hasattr(records, "pieces") else b"".join(records.pieces())
    return [(b.base_offset, b.producer_id) for b in iter_batches(data, strict=True)]


@pytest.mark.parametrize("on_the_loop", [False, True])
def test_a_change_by_another_process_under_a_read_committed_read_starts_it_again(tmp_path, monkeypatch, on_the_loop):
    log_dir = str(tmp_path / "logs")
    config = config_from_mapping({"broker": {"log.dirs": [log_dir]}, "topics": {TOPIC: {}}})
    with LogManager.open(config) as mgr:
        log = mgr.get_or_create_log(TOPIC, 0)
        log.append_records([SimpleRecord(None, b"plain-%d" % i) for i in range(2)])            # 0-1
        log.append_records([SimpleRecord(None, b"8-0"), SimpleRecord(None, b"8-1")], producer_id=8,
                           producer_epoch=0, base_sequence=0, is_transactional=True)           # 2-3
        log.append_end_txn(8, 0, commit=False)                                                 # 4
        broker = Broker(config, mgr)
        ctx = Ctx(broker, Request(1, 12, 1, "rc-test", None, 0), "localhost", 9092, "127.0.0.1:1", "User:ANONYMOUS",
                  "127.0.0.1")
        try:
            def read(offset: int, max_bytes: int = 1 << 20, now: bool = False) -> Any:
                return fetch_handler._read_partition(ctx, TOPIC, Part(offset, max_bytes), READ_COMMITTED, 1 << 20,
                                                     True, False, now)[0]
            # every byte verified, then a consumer's first fetch of one batch: its next offset (2) remembered, so a
            # read from there on the loop gets as far as the aborted transactions
            entry = read(0)
            assert _batches(entry) == [(0, -1), (2, 8), (4, 8)]
            assert entry["aborted_transactions"] == ({"producer_id": 8, "first_offset": 2},)
            assert _batches(read(0, 10)) == [(0, -1)]
            searched = fetch_handler._aborted
            calls: list[int] = []

            def another_process_rewrites_first(*args: Any, **kwargs: Any) -> Any:
                if not calls:     # between the bytes read and the .txnindex looked up: the truncation and rewrite
                    subprocess.run([sys.executable, "-c", REWRITE, log_dir, TOPIC], cwd=ROOT, check=True, timeout=120,
                                   env={**os.environ, "PYTHONPATH": str(ROOT)})
                calls.append(1)
                return searched(*args, **kwargs)
            monkeypatch.setattr(fetch_handler, "_aborted", another_process_rewrites_first)
            if on_the_loop:
                with nonblocking(), pytest.raises(WouldBlock):
                    read(2, now=True)
                assert calls == [1]
            # in the read threads: read again on the changed partition, its bytes and aborted transactions together
            entry = read(2)
            assert _batches(entry) == [(2, 9), (4, 9)] and entry["aborted_transactions"] == ()
            assert len(calls) == (3 if on_the_loop else 2)   # the first search on the loop, then the threads' two
        finally:
            broker.close()
