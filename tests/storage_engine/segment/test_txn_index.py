"""The .txnindex format and invariants (Kafka's TransactionIndexTest), on real files."""
from __future__ import annotations

import os
import struct

import pytest

from storage_engine.errors import CorruptIndexError, InvalidOffsetError
from storage_engine.segment.txn_index import ENTRY_SIZE, AbortedTxn, TransactionIndex, decode_entries

pytestmark = pytest.mark.unit

TXNS = [AbortedTxn(0, 0, 10, 11), AbortedTxn(1, 5, 15, 13), AbortedTxn(2, 18, 35, 25), AbortedTxn(3, 32, 50, 40)]


@pytest.fixture
def index(tmp_path):
    return TransactionIndex(str(tmp_path / "00000000000000000000.txnindex"), 0)


def test_entry_is_34_bytes_in_kafkas_layout(index):
    index.append(AbortedTxn(983493, 137, 299, 200))
    data = open(index.path, "rb").read()
    assert ENTRY_SIZE == 34 and len(data) == 34
    assert data == struct.pack(">hqqqq", 0, 983493, 137, 299, 200)
    assert data.hex() == "0000" "00000000000f01c5" "0000000000000089" "000000000000012b" "00000000000000c8"


def test_file_is_created_by_the_first_append_only(index):
    assert not os.path.exists(index.path)
    index.flush()
    assert index.all_aborted_txns() == [] and not os.path.exists(index.path)
    index.append(TXNS[0])
    index.flush()
    assert os.path.getsize(index.path) == 34


def test_position_set_correctly_when_opened(index):
    for t in TXNS:
        index.append(t)
    reopened = TransactionIndex(index.path, 0)
    another = AbortedTxn(3, 50, 60, 55)
    reopened.append(another)
    assert reopened.all_aborted_txns() == TXNS + [another]


def test_sanity_check(index):
    for t in TXNS:
        index.append(t)
    index.sanity_check()
    with pytest.raises(CorruptIndexError, match="less than start offset 100"):
        TransactionIndex(index.path, 100).sanity_check()


@pytest.mark.parametrize("last", [15, 10])
def test_last_offset_must_increase(index, last):
    index.append(AbortedTxn(1, 5, 15, 13))
    with pytest.raises(InvalidOffsetError, match="must increase"):
        index.append(AbortedTxn(0, 0, last, 11))
    assert index.all_aborted_txns() == [AbortedTxn(1, 5, 15, 13)]


def test_collect_aborted_transactions(index):
    for t in TXNS:
        index.append(t)
    assert index.collect_aborted_txns(0, 100) == (TXNS, False)
    assert index.collect_aborted_txns(0, 32) == (TXNS[:3], True)
    assert index.collect_aborted_txns(0, 35) == (TXNS, True)
    assert index.collect_aborted_txns(10, 35) == (TXNS, True)
    assert index.collect_aborted_txns(11, 35) == (TXNS[1:], True)
    assert index.collect_aborted_txns(20, 41) == (TXNS[2:], False)


def test_truncate_and_reset(index):
    txns = [AbortedTxn(0, 0, 10, 2), AbortedTxn(1, 5, 15, 16), AbortedTxn(2, 18, 35, 25), AbortedTxn(3, 32, 50, 40)]
    for t in txns:
        index.append(t)
    index.truncate_to(51)
    assert index.collect_aborted_txns(0, 100).aborted == txns
    index.truncate_to(50)
    assert index.collect_aborted_txns(0, 100).aborted == txns[:3]
    index.append(AbortedTxn(4, 40, 45, 46))  # appending after a truncation continues from the new end
    assert index.all_aborted_txns() == txns[:3] + [AbortedTxn(4, 40, 45, 46)]
    index.reset()
    assert index.collect_aborted_txns(0, 100).aborted == [] and os.path.getsize(index.path) == 0


def test_rename_keeps_appending_to_the_new_file(index, tmp_path):
    index.append(AbortedTxn(0, 0, 10, 2))
    index.rename_to(str(tmp_path / "renamed.txnindex"))
    index.append(AbortedTxn(1, 5, 15, 16))
    assert [t.first_offset for t in index.collect_aborted_txns(0, 100).aborted] == [0, 5]
    assert not os.path.exists(tmp_path / "00000000000000000000.txnindex")


def test_torn_tail_is_ignored_and_overwritten(index):
    index.append(TXNS[0])
    with open(index.path, "ab") as f:
        f.write(TXNS[1].encode()[:20])  # a writer died mid-append
    assert index.all_aborted_txns() == [TXNS[0]]
    index.append(TXNS[1])
    assert index.all_aborted_txns() == TXNS[:2] and os.path.getsize(index.path) == 68


def test_version_is_read_from_the_first_byte_only():
    entry = bytearray(TXNS[0].encode())
    entry[1] = 7  # Kafka reads the version as a byte: the second byte of the int16 is ignored
    assert decode_entries(bytes(entry))[0][:4] == TXNS[0][:4]
    entry[0] = 1
    with pytest.raises(CorruptIndexError, match="unexpected aborted transaction version 1"):
        decode_entries(bytes(entry))
