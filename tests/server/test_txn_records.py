"""``__transaction_state`` records (:mod:`storage_engine.server.transactions.records`) against Kafka's
``TransactionLogKey`` v0 and ``TransactionLogValue`` v0/v1 schemas: the exact bytes of known transactions written by
hand from the schema, round trips, the flexible v1 value a newer Kafka writes, truncated and garbage values, and the
partition of a transactional id (``Utils.abs(transactionalId.hashCode) % transaction.state.log.num.partitions``,
Java's ``String.hashCode`` computed here on its own). Also, the coordinator in process: its replay of the topic
skips unreadable records, applies tombstones and forgets Dead ids; a request that waited for a transactional id
while it expired finds it unknown and writes nothing."""
from __future__ import annotations

import asyncio
import random
import struct

import pytest

from storage_engine.clock import ManualClock
from storage_engine.config_file import config_from_mapping
from storage_engine.log.manager import LogManager
from storage_engine.server.broker import Broker
from storage_engine.server.catalog import create_topic
from storage_engine.server.groups.records import RecordFormatError, partition_for
from storage_engine.server.transactions import records as rec
from storage_engine.server.transactions.coordinator import TXN_TOPIC, TxnCoordinator

pytestmark = pytest.mark.unit


def i8(v: int) -> bytes:
    return struct.pack(">b", v)


def i16(v: int) -> bytes:
    return struct.pack(">h", v)


def i32(v: int) -> bytes:
    return struct.pack(">i", v)


def i64(v: int) -> bytes:
    return struct.pack(">q", v)


def string(s: str) -> bytes:
    raw = s.encode("utf-8")
    return i16(len(raw)) + raw


def uvarint(v: int) -> bytes:
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def compact_string(s: str) -> bytes:
    raw = s.encode("utf-8")
    return uvarint(len(raw) + 1) + raw


LAST_UPDATE, START = 1_700_000_000_123, 1_700_000_000_000


# -- key ----------------------------------------------------------------------------------------------------------

def test_key_is_version_0_and_the_transactional_id_as_an_int16_length_string():
    assert rec.key("payments-1") == b"\x00\x00" + b"\x00\x0a" + b"payments-1"
    assert rec.key("\u00e9t\u00e9") == b"\x00\x00\x00\x05\xc3\xa9t\xc3\xa9"       # length in UTF-8 bytes
    assert rec.parse_key(b"\x00\x00\x00\x0apayments-1") == "payments-1"
    assert rec.parse_key(rec.key("\u00e9t\u00e9")) == "\u00e9t\u00e9"


@pytest.mark.parametrize("data", [b"", b"\x00", b"\x00\x00", b"\x00\x00\x00", b"\x00\x00\x00\x05abc",
                                  b"\x00\x01\x00\x01a",            # key version 1 is not a transaction log key
                                  b"\x00\x00\xff\xff",             # a null transactional id
                                  b"\x00\x00\xff\xfe"])            # a negative length
def test_unreadable_keys_raise_record_format_error(data):
    with pytest.raises(RecordFormatError):
        rec.parse_key(data)


# -- value v0: exact bytes --------------------------------------------------------------------------------------------

def test_ongoing_transaction_value_bytes_match_kafkas_v0_layout():
    r = rec.TxnRecord(producer_id=4001, producer_epoch=3, timeout_ms=60_000, state=rec.ONGOING,
                      partitions={"orders": [0, 2]}, last_update_ms=LAST_UPDATE, start_ms=START)
    expected = (b"\x00\x00"                                  # value version 0
                + b"\x00\x00\x00\x00\x00\x00\x0f\xa1"        # ProducerId 4001
                + b"\x00\x03"                                # ProducerEpoch 3
                + b"\x00\x00\xea\x60"                        # TransactionTimeoutMs 60000
                + b"\x01"                                    # TransactionStatus Ongoing
                + b"\x00\x00\x00\x01"                        # TransactionPartitions: one topic
                + b"\x00\x06orders"                          # Topic
                + b"\x00\x00\x00\x02" + b"\x00\x00\x00\x00" + b"\x00\x00\x00\x02"   # PartitionIds [0, 2]
                + b"\x00\x00\x01\x8b\xcf\xe5\x68\x7b"        # TransactionLastUpdateTimestampMs
                + b"\x00\x00\x01\x8b\xcf\xe5\x68\x00")       # TransactionStartTimestampMs
    assert i64(LAST_UPDATE) == b"\x00\x00\x01\x8b\xcf\xe5\x68\x7b"     # the constants above, checked once
    assert rec.value(r) == expected
    assert rec.parse_value(expected) == r


def test_empty_state_writes_a_null_partition_list_and_complete_states_an_empty_one():
    empty = rec.TxnRecord(7, 0, 900_000, rec.EMPTY, {}, LAST_UPDATE, -1)
    assert rec.value(empty) == (i16(0) + i64(7) + i16(0) + i32(900_000) + i8(0) + i32(-1)
                                + i64(LAST_UPDATE) + i64(-1))
    done = rec.TxnRecord(7, 2, 900_000, rec.COMPLETE_COMMIT, {}, LAST_UPDATE, -1)
    assert rec.value(done) == (i16(0) + i64(7) + i16(2) + i32(900_000) + i8(4) + i32(0)
                               + i64(LAST_UPDATE) + i64(-1))
    assert rec.parse_value(rec.value(empty)) == empty
    assert rec.parse_value(rec.value(done)) == done


def test_prepare_commit_with_two_topics_and_the_offsets_partition():
    r = rec.TxnRecord(2**40 + 5, 32766, 1, rec.PREPARE_COMMIT,
                      {"__consumer_offsets": [17], "t\u00e9": [3, 1, 2]}, LAST_UPDATE, START)
    value = rec.value(r)
    head = i16(0) + i64(2**40 + 5) + i16(32766) + i32(1) + i8(2) + i32(2)
    # Kafka's topic order comes from a hash map: either order is a valid record.
    offsets = string("__consumer_offsets") + i32(1) + i32(17)
    other = string("t\u00e9") + i32(3) + i32(1) + i32(2) + i32(3)         # partition ids written sorted
    tail = i64(LAST_UPDATE) + i64(START)
    assert value in (head + offsets + other + tail, head + other + offsets + tail)
    unsorted = string("t\u00e9") + i32(3) + i32(3) + i32(1) + i32(2)      # any order is read
    for order in ((offsets, other), (other, offsets), (unsorted, offsets)):
        parsed = rec.parse_value(head + b"".join(order) + tail)
        assert parsed.producer_id == 2**40 + 5 and parsed.producer_epoch == 32766 and parsed.timeout_ms == 1
        assert parsed.state == rec.PREPARE_COMMIT and (parsed.last_update_ms, parsed.start_ms) == (LAST_UPDATE, START)
        assert {t: sorted(ps) for t, ps in parsed.partitions.items()} == {"__consumer_offsets": [17],
                                                                          "t\u00e9": [1, 2, 3]}


@pytest.mark.parametrize("state", range(8))
def test_every_status_round_trips(state):
    parts = {} if state == rec.EMPTY else {"a": [0], "b": [4, 9]}
    r = rec.TxnRecord(123456789, state, 30_000 + state, state, parts, LAST_UPDATE + state, START - state)
    assert rec.parse_value(rec.value(r)) == r
    assert rec.value(r)[:2] == b"\x00\x00" and rec.value(r)[16] == state


def test_random_records_round_trip():
    rng = random.Random(20240611)
    for _ in range(300):
        state = rng.randrange(8)
        parts = {} if state == rec.EMPTY and rng.random() < 0.5 else {
            "".join(rng.choice("abc-_.\u00fc") for _ in range(rng.randint(1, 30))):
                sorted(rng.sample(range(1000), rng.randint(1, 5))) for _ in range(rng.randint(1, 4))}
        r = rec.TxnRecord(rng.randint(0, 2**63 - 1), rng.randint(0, 32767), rng.randint(1, 2**31 - 1), state,
                          parts, rng.randint(-1, 2**45), rng.randint(-1, 2**45))
        assert rec.parse_value(rec.value(r)) == r


# -- value v1 (flexible), as a newer Kafka writes it ------------------------------------------------------------

def test_flexible_v1_value_with_tagged_fields_is_read():
    long_topic = "x" * 200                            # its compact length (201) takes a two-byte varint
    value = (i16(1) + i64(99) + i16(5) + i32(60_000) + i8(rec.PREPARE_ABORT)
             + uvarint(2 + 1)                          # compact array: two topics
             + compact_string("orders") + uvarint(2 + 1) + i32(0) + i32(3) + uvarint(0)
             + compact_string(long_topic) + uvarint(1 + 1) + i32(7) + b"\x01" + uvarint(9) + uvarint(2) + b"zz"
             + i64(LAST_UPDATE) + i64(START)
             # struct tagged fields: PreviousProducerId (0), NextProducerId (1), ClientTransactionVersion (2)
             + uvarint(3) + uvarint(0) + uvarint(8) + i64(98) + uvarint(1) + uvarint(8) + i64(-1)
             + uvarint(2) + uvarint(2) + i16(2))
    assert uvarint(201) == b"\xc9\x01"
    r = rec.parse_value(value)
    assert (r.producer_id, r.producer_epoch, r.timeout_ms, r.state) == (99, 5, 60_000, rec.PREPARE_ABORT)
    assert r.partitions == {"orders": [0, 3], long_topic: [7]}
    assert (r.last_update_ms, r.start_ms) == (LAST_UPDATE, START)


def test_flexible_v1_value_with_a_null_partition_list():
    value = i16(1) + i64(5) + i16(0) + i32(1000) + i8(rec.EMPTY) + uvarint(0) + i64(LAST_UPDATE) + i64(-1) + uvarint(0)
    assert rec.parse_value(value) == rec.TxnRecord(5, 0, 1000, rec.EMPTY, {}, LAST_UPDATE, -1)


# -- unreadable values --------------------------------------------------------------------------------------------

def test_every_truncation_of_a_value_raises_record_format_error():
    for value in (rec.value(rec.TxnRecord(4001, 3, 60_000, rec.ONGOING, {"orders": [0, 2], "o2": [1]},
                                          LAST_UPDATE, START)),
                  rec.value(rec.TxnRecord(1, 0, 10, rec.EMPTY, {}, 0, -1))):
        for cut in range(len(value)):
            with pytest.raises(RecordFormatError):
                rec.parse_value(value[:cut])


@pytest.mark.parametrize("value", [
    i16(2) + bytes(40),                                                        # unknown value version
    i16(-1) + bytes(40),
    i16(0) + i64(1) + i16(0) + i32(1) + i8(8) + i32(-1) + i64(0) + i64(0),   # status 8 does not exist
    i16(0) + i64(1) + i16(0) + i32(1) + i8(-3) + i32(-1) + i64(0) + i64(0),
    i16(0) + i64(1) + i16(0) + i32(1) + i8(1) + i32(1) + i16(-1) + i32(0) + i64(0) + i64(0),   # null topic
    i16(0) + i64(1) + i16(0) + i32(1) + i8(1) + i32(2**31 - 1) + string("t") + i32(0),        # count past the end
    i16(0) + i64(1) + i16(0) + i32(1) + i8(1) + i32(1) + string("t") + i32(1000) + i32(0),    # ids past the end
    i16(1) + i64(1) + i16(0) + i32(1) + i8(1) + b"\x02" + b"\x00",                              # v1 null topic
    i16(1) + i64(1) + i16(0) + i32(1) + i8(1) + b"\xff\xff\xff\xff\xff\x01",                    # a 6-byte varint
])
def test_garbage_values_raise_record_format_error(value):
    with pytest.raises(RecordFormatError):
        rec.parse_value(value)


def test_random_bytes_never_raise_anything_but_a_format_error():
    rng = random.Random(7)
    good = rec.value(rec.TxnRecord(4001, 3, 60_000, rec.ONGOING, {"orders": [0, 2]}, LAST_UPDATE, START))
    for _ in range(2000):
        data = bytearray(good)
        for _ in range(rng.randint(1, 6)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        try:
            rec.parse_value(bytes(data[:rng.randint(0, len(data))]))
        except (RecordFormatError, UnicodeDecodeError):
            pass


# -- the partition of a transactional id -------------------------------------------------------------------------

def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode``: s[0]*31^(n-1) + ... + s[n-1] over UTF-16 code units, as a signed int32."""
    raw = text.encode("utf-16-be")
    units = [int.from_bytes(raw[i:i + 2], "big") for i in range(0, len(raw), 2)]
    n = len(units)
    h = sum(u * pow(31, n - 1 - i, 2**32) for i, u in enumerate(units)) % 2**32
    return h - 2**32 if h >= 2**31 else h


@pytest.mark.parametrize("txn_id, java_hash", [
    ("", 0), ("a", 97), ("hello", 99162322), ("Aa", 2112), ("BB", 2112),
    ("polygenelubricants", -2**31),                   # Integer.MIN_VALUE: Utils.abs gives 0
    ("my-transactional-id", None), ("txn-\U0001F600", None), ("payments-1", None),
])
def test_partition_of_a_transactional_id_is_abs_java_hash_modulo_n(txn_id, java_hash):
    h = java_string_hash(txn_id)
    if java_hash is not None:
        assert h == java_hash
    for n in (1, 5, 50, 7):
        assert partition_for(txn_id, n) == (h & 0x7FFFFFFF) % n
    assert partition_for("hello", 50) == 22 and partition_for("polygenelubricants", 50) == 0



# -- the coordinator's replay of the topic -----------------------------------------------------------------------

class _Broker:
    clock = ManualClock(LAST_UPDATE)

    class config:      # noqa: N801 - the attribute shape the coordinator reads
        server = {"transaction.state.log.num.partitions": 5, "transaction.state.log.segment.bytes": 1 << 20,
                  "transaction.max.timeout.ms": 900_000,
                  "transaction.abort.timed.out.transaction.cleanup.interval.ms": 10_000,
                  "transactional.id.expiration.ms": 604_800_000}


def test_replay_applies_records_in_order_skips_unreadable_ones_and_forgets_tombstoned_and_dead_ids():
    c = TxnCoordinator(_Broker(), None)       # type: ignore[arg-type]
    ongoing = rec.TxnRecord(10, 1, 60_000, rec.ONGOING, {"orders": [0, 1]}, LAST_UPDATE, START)
    c._replay(rec.key("a"), rec.value(rec.TxnRecord(10, 0, 60_000, rec.EMPTY, {}, LAST_UPDATE, -1)))
    c._replay(rec.key("a"), rec.value(ongoing))
    c._replay(rec.key("a"), rec.value(ongoing)[:-3])                 # unreadable: skipped, "a" stays Ongoing
    c._replay(b"\x00\x00\x00\x02\xff\xfe", rec.value(ongoing))       # a key that is not UTF-8: skipped
    c._replay(rec.key("b"), rec.value(rec.TxnRecord(11, 4, 1000, rec.COMPLETE_ABORT, {}, LAST_UPDATE, -1)))
    c._replay(rec.key("c"), rec.value(rec.TxnRecord(12, 0, 1000, rec.EMPTY, {}, LAST_UPDATE, -1)))
    c._replay(rec.key("c"), None)                                    # tombstone: expired
    c._replay(rec.key("d"), rec.value(rec.TxnRecord(13, 0, 1000, rec.EMPTY, {}, LAST_UPDATE, -1)))
    c._replay(rec.key("d"), rec.value(rec.TxnRecord(13, 0, 1000, rec.DEAD, {}, LAST_UPDATE, -1)))
    assert sorted(c.txns) == ["a", "b"]
    a = c.txns["a"]
    assert (a.producer_id, a.epoch, a.timeout_ms, a.state) == (10, 1, 60_000, rec.ONGOING)
    assert a.partitions == {("orders", 0), ("orders", 1)} and (a.start_ms, a.update_ms) == (START, LAST_UPDATE)
    b = c.txns["b"]
    assert (b.producer_id, b.epoch, b.state, b.partitions) == (11, 4, rec.COMPLETE_ABORT, set())


@pytest.mark.parametrize("request_kind", ["AddPartitionsToTxn", "EndTxn"])
def test_a_request_waiting_while_its_transactional_id_expires_finds_it_unknown(tmp_path, request_kind):
    config = config_from_mapping({"broker": {"log.dirs": [str(tmp_path / "logs")],
                                             "transaction.state.log.num.partitions": 2}})

    async def scenario(broker: Broker) -> int:
        c = broker.transactions
        await broker.call(create_topic, broker, "orders", 1, {})
        code, pid, epoch = await c.init_producer_id("t", 60_000, -1, -1, 4)
        assert code == 0
        if request_kind == "EndTxn":        # a committed transaction: an idle id in CompleteCommit
            assert await c.add_partitions("t", pid, epoch, [("orders", 0)], 3) == {("orders", 0): 0}
            assert await c.end_txn("t", pid, epoch, True, 3) == 0
        # the expiration takes the id's lock and writes the tombstone; the request arrives meanwhile
        sweep = asyncio.get_running_loop().create_task(c.sweep(broker.clock.milliseconds() + 10 ** 10))
        await asyncio.sleep(0)
        assert c.txns["t"].lock.locked()
        if request_kind == "EndTxn":
            answer = await c.end_txn("t", pid, epoch, True, 3)
        else:
            answer = (await c.add_partitions("t", pid, epoch, [("orders", 0)], 3))[("orders", 0)]
        await sweep
        assert "t" not in c.txns
        return answer

    with LogManager.open(config) as mgr:
        broker = Broker(config, mgr)
        try:
            assert asyncio.run(scenario(broker)) == 49                 # INVALID_PRODUCER_ID_MAPPING
        finally:
            broker.close()
        log = mgr.get_log(TXN_TOPIC, partition_for("t", 2))
        assert log is not None
        values = [r.value for r in log.read_records()]
    assert values[-1] is None                                          # the tombstone stays the last word
    reloaded = TxnCoordinator(_Broker(), None)       # type: ignore[arg-type]
    for v in values:
        reloaded._replay(rec.key("t"), v)
    assert reloaded.txns == {}
