"""The entries a ``.txnindex`` keeps from its last read (storage_engine.segment.txn_index): served again without
opening the file while its identity is the same, read again after any change (by this process or another, a
same-size rewrite within a clock tick included), never read inside ``nonblocking()`` (the broker's event loop);
and one object per segment while its path stays. On real files."""
from __future__ import annotations

import builtins
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from storage_engine.config import LogConfig
from storage_engine.segment import txn_index as txn_index_mod
from storage_engine.segment.segment import LogSegment
from storage_engine.segment.slice_read import WouldBlock, nonblocking
from storage_engine.segment.txn_index import AbortedTxn, TransactionIndex

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[3]
A, B, C = AbortedTxn(1, 0, 10, 11), AbortedTxn(2, 5, 15, 16), AbortedTxn(3, 12, 20, 21)

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


def _settle_at_once(monkeypatch) -> None:
    """Entries are kept when the file changed before the read began (no settling time), for the tests that need
    the kept entries without waiting a second."""
    monkeypatch.setattr(txn_index_mod, "SETTLED_NS", 0)


def test_settled_entries_are_served_again_without_opening_the_file(tmp_path, monkeypatch, opens):
    _settle_at_once(monkeypatch)
    index = TransactionIndex(str(tmp_path / "00000000000000000000.txnindex"), 0)
    index.append(A)
    index.append(B)
    opens.clear()
    assert index.all_aborted_txns() == [A, B] and len(opens) == 1
    assert index.all_aborted_txns() == [A, B]
    assert index.collect_aborted_txns(12, 30).aborted == [B]
    with nonblocking():
        assert index.collect_aborted_txns(0, 30).aborted == [A, B]
    assert len(opens) == 1


def test_an_entry_another_process_appends_is_in_the_next_read(tmp_path, monkeypatch, opens):
    _settle_at_once(monkeypatch)
    path = str(tmp_path / "00000000000000000000.txnindex")
    index = TransactionIndex(path, 0)
    index.append(A)
    opens.clear()
    assert index.all_aborted_txns() == [A]
    subprocess.run([sys.executable, "-c", APPEND, path, *map(str, B[:4])], cwd=ROOT, check=True, timeout=60,
                   env={**os.environ, "PYTHONPATH": str(ROOT)})
    with nonblocking(), pytest.raises(WouldBlock, match="changed since it was last read"):
        index.all_aborted_txns()
    assert index.all_aborted_txns() == [A, B] and len(opens) == 2
    # and a truncation by another object (the cleaner's, recovery's) too
    TransactionIndex(path, 0).truncate_to(15)
    assert index.all_aborted_txns() == [A]


def test_a_same_size_rewrite_right_after_a_read_is_read_again(tmp_path):
    """A truncation and an append of the same size within one tick of the file system's clock leave the inode, the
    size and both times as they were: entries read so recently are not kept, so the rewrite is seen. (Kernels
    with multigrain timestamps, Linux 6.13 on, give a change right after a ``stat`` a fine-grained time, which
    alone would show it; older ones do not.)"""
    index = TransactionIndex(str(tmp_path / "00000000000000000000.txnindex"), 0)
    other = TransactionIndex(index.path, 0)           # another writer: this object forgets nothing itself
    other.append(A)
    for txn in (B, C, A, B) * 10:
        index.all_aborted_txns()
        other.reset()
        other.append(txn)
        assert index.all_aborted_txns() == [txn]


def test_on_the_event_loop_an_unread_index_would_block_and_a_missing_one_is_empty(tmp_path, monkeypatch):
    _settle_at_once(monkeypatch)
    index = TransactionIndex(str(tmp_path / "00000000000000000000.txnindex"), 0)
    with nonblocking():
        assert index.all_aborted_txns() == []            # no aborted transaction: no file
    index.append(A)
    with nonblocking(), pytest.raises(WouldBlock):
        index.all_aborted_txns()
    assert index.all_aborted_txns() == [A]
    with nonblocking():
        assert index.all_aborted_txns() == [A]


def test_a_segment_keeps_one_index_object_while_its_path_stays(tmp_path):
    seg = LogSegment.open(str(tmp_path), 0, LogConfig(), now_ms=0)
    first = seg.txn_index
    assert seg.txn_index is first
    seg.change_file_suffixes("", ".deleted")
    assert seg.txn_index is not first and seg.txn_index.path.endswith(".txnindex.deleted")
    seg.close()
