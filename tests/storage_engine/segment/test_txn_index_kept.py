"""The entries a ``.txnindex`` search keeps from its last read (storage_engine.segment.txn_index): served again
without opening the file while its identity is the same; read again after any change, by this process or another
(a same-size rewrite included), after the clock stepped back, and while the file has not settled; never read inside
``nonblocking()`` (the broker's event loop), nor past 16 segments there; large files not kept; one object per
segment while its path stays. On real files."""
from __future__ import annotations

import builtins
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from storage_engine.config import LogConfig
from storage_engine.log.reads import NOW_TXN_INDEXES
from storage_engine.record.records import SimpleRecord
from storage_engine.segment import txn_index as txn_index_mod
from storage_engine.segment.segment import LogSegment
from storage_engine.segment.slice_read import WouldBlock, nonblocking
from storage_engine.segment.txn_index import AbortedTxn, TransactionIndex

from .. import helpers

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[3]
A, B, C = AbortedTxn(1, 0, 10, 11), AbortedTxn(2, 5, 15, 16), AbortedTxn(3, 12, 20, 21)
SECOND = 1_000_000_000

APPEND = """
import sys
from storage_engine.segment.txn_index import AbortedTxn, TransactionIndex
TransactionIndex(sys.argv[1], 0).append(AbortedTxn(*map(int, sys.argv[2:6])))
"""


@pytest.fixture
def opens(monkeypatch) -> list[str]:
    """The paths the module opens (its ``open`` shadowed by a counting one)."""
    seen: list[str] = []

    def counting(path: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append(str(path))
        return builtins.open(path, *args, **kwargs)
    monkeypatch.setattr(txn_index_mod, "open", counting, raising=False)
    return seen


class Clock:
    """``time.time_ns`` for the module, set by the test."""

    def __init__(self, monkeypatch) -> None:
        self.ns = 0

        class Time:
            @staticmethod
            def time_ns() -> int:
                return self.ns
        monkeypatch.setattr(txn_index_mod, "time", Time)


def _index(tmp_path, *txns: AbortedTxn) -> TransactionIndex:
    index = TransactionIndex(str(tmp_path / "00000000000000000000.txnindex"), 0)
    for txn in txns:
        index.append(txn)
    return index


def _search(index: TransactionIndex) -> list[AbortedTxn]:
    return index.collect_aborted_txns(0, 1 << 40).aborted


def _changed_ns(path: str) -> int:
    st = os.stat(path)
    return max(st.st_mtime_ns, st.st_ctime_ns)


def test_settled_entries_are_served_again_without_opening_the_file(tmp_path, monkeypatch, opens):
    index = _index(tmp_path, A, B)
    clock = Clock(monkeypatch)
    clock.ns = _changed_ns(index.path) + SECOND
    opens.clear()
    assert _search(index) == [A, B] and len(opens) == 1
    assert _search(index) == [A, B]
    assert index.collect_aborted_txns(12, 30).aborted == [B]
    with nonblocking():
        assert _search(index) == [A, B]
    assert len(opens) == 1
    # the other reads (the loader's check, the cleaner, the tools) read the file
    assert index.all_aborted_txns() == [A, B] and len(opens) == 2


def test_a_file_changed_less_than_a_second_before_the_read_is_not_kept(tmp_path, monkeypatch, opens):
    index = _index(tmp_path, A)
    clock = Clock(monkeypatch)
    clock.ns = _changed_ns(index.path) + SECOND - 1
    opens.clear()
    assert _search(index) == [A] and _search(index) == [A] and len(opens) == 2
    with nonblocking(), pytest.raises(WouldBlock):
        _search(index)
    clock.ns += 1
    assert _search(index) == [A] and _search(index) == [A] and len(opens) == 3


def test_the_kept_entries_are_read_again_after_the_clock_stepped_back(tmp_path, monkeypatch, opens):
    index = _index(tmp_path, A)
    clock = Clock(monkeypatch)
    clock.ns = _changed_ns(index.path) + 5 * SECOND
    opens.clear()
    assert _search(index) == [A]
    clock.ns -= 1
    with nonblocking(), pytest.raises(WouldBlock):
        _search(index)
    assert _search(index) == [A] and len(opens) == 2


def test_an_entry_another_process_appends_is_in_the_next_search(tmp_path, monkeypatch):
    index = _index(tmp_path, A)
    clock = Clock(monkeypatch)
    clock.ns = _changed_ns(index.path) + SECOND
    assert _search(index) == [A]
    subprocess.run([sys.executable, "-c", APPEND, index.path, *map(str, B[:4])], cwd=ROOT, check=True, timeout=60,
                   env={**os.environ, "PYTHONPATH": str(ROOT)})
    with nonblocking(), pytest.raises(WouldBlock, match="changed since it was last read"):
        _search(index)
    assert _search(index) == [A, B]


def test_a_same_size_rewrite_by_another_writer_is_seen(tmp_path, monkeypatch):
    """Kept entries, then another writer (recovery's, the cleaner's) truncates the file and appends one entry of
    the same size: the change time moves (no user can set it), so the rewrite is read."""
    index = _index(tmp_path, A)
    past = _changed_ns(index.path) - 10 * SECOND
    os.utime(index.path, ns=(past, past))          # an old modification time, unlike any new write's
    clock = Clock(monkeypatch)
    clock.ns = _changed_ns(index.path) + SECOND
    assert _search(index) == [A]
    other = TransactionIndex(index.path, 0)
    other.reset()
    other.append(C)
    clock.ns = _changed_ns(index.path) + SECOND
    assert os.path.getsize(index.path) == 34 and _search(index) == [C]


def test_a_rewrite_right_after_a_search_is_seen_with_the_real_clock(tmp_path):
    index = _index(tmp_path, A)
    other = TransactionIndex(index.path, 0)
    for txn in (B, C, A, B) * 10:
        _search(index)
        other.reset()
        other.append(txn)
        assert _search(index) == [txn]


def test_on_the_event_loop_an_unread_index_would_block_a_missing_one_is_empty(tmp_path, monkeypatch):
    index = TransactionIndex(str(tmp_path / "00000000000000000000.txnindex"), 0)
    with nonblocking():
        assert _search(index) == []                    # no aborted transaction: no file
    index.append(A)
    clock = Clock(monkeypatch)
    clock.ns = _changed_ns(index.path) + SECOND
    with nonblocking(), pytest.raises(WouldBlock):
        _search(index)
    assert _search(index) == [A]
    with nonblocking():
        assert _search(index) == [A]


def test_a_large_index_is_not_kept(tmp_path, monkeypatch, opens):
    txns = [AbortedTxn(1, i * 10, i * 10 + 5, i * 10 + 6) for i in range(txn_index_mod.KEPT_BYTES // 34 + 1)]
    index = _index(tmp_path)
    with open(index.path, "wb") as f:
        f.write(b"".join(t.encode() for t in txns))
    clock = Clock(monkeypatch)
    clock.ns = _changed_ns(index.path) + SECOND
    opens.clear()
    assert _search(index) == txns and _search(index) == txns and len(opens) == 2
    with nonblocking(), pytest.raises(WouldBlock):
        _search(index)


def test_a_segment_keeps_one_index_object_while_its_path_stays(tmp_path):
    seg = LogSegment.open(str(tmp_path), 0, LogConfig(), now_ms=0)
    first = seg.txn_index
    assert seg.txn_index is first and first.writable
    seg.change_file_suffixes("", ".deleted")
    assert seg.txn_index is not first and seg.txn_index.path.endswith(".txnindex.deleted")
    seg.close()


def test_on_the_event_loop_the_search_stops_past_its_segments(log_dir, monkeypatch):
    """A read_committed fetch far behind the log end searches every segment up to one that proves the search
    complete: on the event loop at most NOW_TXN_INDEXES of them (a stat each), else the read threads do it."""
    log, _ = helpers.open_log(log_dir, helpers.config(segment_bytes=200))
    try:
        for i in range(NOW_TXN_INDEXES + 4):
            log.append_records([SimpleRecord(None, b"v" * 100)])
        log.append_records([SimpleRecord(None, b"t")], producer_id=5, producer_epoch=0, base_sequence=0,
                           is_transactional=True)
        log.append_end_txn(5, 0, commit=False)
        assert len(log.segments) > NOW_TXN_INDEXES + 1
        aborted = [AbortedTxn(5, NOW_TXN_INDEXES + 4, NOW_TXN_INDEXES + 5, NOW_TXN_INDEXES + 6)]
        assert log.aborted_transactions(0, log.log_end_offset) == aborted
        with nonblocking(), pytest.raises(WouldBlock, match=f"over {NOW_TXN_INDEXES} transaction indexes"):
            log.aborted_transactions(0, log.log_end_offset)
    finally:
        log.close(clean=True)
