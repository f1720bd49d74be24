"""The transaction coordinator over the raw Kafka wire protocol, against a real broker process (5 partitions of
``__transaction_state`` and of ``__consumer_offsets``), with Kafka's error codes:

* InitProducerId with a transactional id: a new id gets epoch 0, each init bumps it; timeouts outside
  (0, transaction.max.timeout.ms] give INVALID_TRANSACTION_TIMEOUT (50), an empty id INVALID_REQUEST (42); KIP-360
  (v3+) with a stale producer id and epoch gives PRODUCER_FENCED (90) on v4, INVALID_PRODUCER_EPOCH (47) before;
* AddPartitionsToTxn v0 and v3: UNKNOWN_TOPIC_OR_PARTITION (3) and OPERATION_NOT_ATTEMPTED (55) for the rest, a
  wrong epoch 47 (v0/v1) or 90 (v2+), an unknown producer id INVALID_PRODUCER_ID_MAPPING (49); transactional
  Produce only to added partitions (else INVALID_TXN_STATE 48), never without the transactional id
  (TRANSACTIONAL_ID_AUTHORIZATION_FAILED 53, as Kafka's handleProduceRequest answers it even without an authorizer);
* EndTxn: INVALID_TXN_STATE on an Empty transaction and for an abort after a commit; a retried commit is NONE;
  COMMIT/ABORT markers in every partition (read back by the engine after a clean stop), the ``.txnindex`` entry of
  an abort, the last stable offset and read_committed Fetch's aborted_transactions;
* fencing by a second InitProducerId while a transaction is open (aborted with the epoch bumped once, the new
  producer at epoch + 2; the old one's own KIP-360 bump is fenced); the coordinator's abort of a transaction past
  its timeout, which fences its producer (Kafka's prepareFenceProducerEpoch: no last epoch), while a producer's own
  bump is answered again when retried; idle transactional ids tombstoned after transactional.id.expiration.ms;
* TxnOffsetCommit: pending (UNSTABLE_OFFSET_COMMIT 88 for OffsetFetch require_stable) until the commit, dropped by
  an abort, refused without AddOffsetsToTxn;
* recovery: a transaction open at a SIGKILL is committed by its producer after the restart; one found in
  PrepareCommit at start (written into the stopped broker's logs with the engine) is completed; compaction of
  ``__transaction_state`` and ``__consumer_offsets`` changes no coordinator state.

The stored logs are read with the engine (``LogManager``) after a clean stop; markers and ``.txnindex`` entries are
decoded by hand from Kafka's layouts.
"""
from __future__ import annotations

import dataclasses
import datetime
import json
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any, NamedTuple, cast

import pytest

from storage_engine.config_file import load_config
from storage_engine.log.manager import LogManager
from storage_engine.log.reads import READ_COMMITTED
from storage_engine.record.records import SimpleRecord
from storage_engine.segment.file_records import iter_batches
from storage_engine.server.groups import records as grec
from storage_engine.server.groups.records import partition_for
from storage_engine.server.transactions import records as trec
from tests.server import wire
from tests.server.broker_proc import wait_until
from tests.typed import present

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
PARTS = 5
BROKER = {"transaction.state.log.num.partitions": PARTS, "offsets.topic.num.partitions": PARTS}
TXN_TOPIC, OFFSETS_TOPIC = "__transaction_state", "__consumer_offsets"

NONE, UNKNOWN_TOPIC_OR_PARTITION, INVALID_REQUEST = 0, 3, 42
INVALID_PRODUCER_EPOCH, INVALID_TXN_STATE, INVALID_PRODUCER_ID_MAPPING, INVALID_TRANSACTION_TIMEOUT = 47, 48, 49, 50
OPERATION_NOT_ATTEMPTED, INVALID_RECORD, UNSTABLE_OFFSET_COMMIT, PRODUCER_FENCED = 55, 87, 88, 90
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53


# -- the wire ---------------------------------------------------------------------------------------------------

class Client:
    """One connection; every call builds a request with :func:`wire.build_request` and returns the response."""

    def __init__(self, broker):
        self.conn = wire.Conn(broker.bootstrap)
        self.corr = 0

    def __call__(self, key: int, version: int, **fields: Any) -> Any:
        self.corr += 1
        return self.conn.request(wire.build_request(key, version, **fields), self.corr)

    def send(self, body: Any) -> Any:
        self.corr += 1
        return self.conn.request(body, self.corr)

    def close(self) -> None:
        self.conn.close()

    # -- the APIs ---------------------------------------------------------------------------------------------
    def create_topic(self, name: str, partitions: int) -> None:
        resp = self(19, 4, topics=[{"name": name, "num_partitions": partitions, "replication_factor": 1,
                                    "assignments": [], "configs": []}],
                    timeout=datetime.timedelta(seconds=30), validate_only=False)
        assert resp.topics[0].error_code == NONE, resp

    def init(self, txn_id: str, timeout_ms: int = 60_000, version: int = 4, producer_id: int = -1,
             epoch: int = -1) -> tuple[int, int, int]:
        fields: dict[str, Any] = {"transactional_id": txn_id,
                                  "transaction_timeout": datetime.timedelta(milliseconds=timeout_ms)}
        if version >= 3:
            fields.update(producer_id=producer_id, producer_epoch=epoch)
        resp = self(22, version, **fields)
        return int(resp.error_code), int(resp.producer_id), int(resp.producer_epoch)

    def add_partitions(self, txn_id: str, pid: int, epoch: int, parts: dict[str, list[int]],
                       version: int = 3) -> dict[tuple[str, int], int]:
        resp = self(24, version, v3_and_below_transactional_id=txn_id, v3_and_below_producer_id=pid,
                    v3_and_below_producer_epoch=epoch,
                    v3_and_below_topics=[{"name": t, "partitions": ps} for t, ps in parts.items()])
        return {(t.name, int(p.partition_index)): int(p.partition_error_code)
                for t in resp.results_by_topic_v3_and_below for p in t.results_by_partition}

    def add_offsets(self, txn_id: str, pid: int, epoch: int, group: str, version: int = 3) -> int:
        return int(self(25, version, transactional_id=txn_id, producer_id=pid, producer_epoch=epoch,
                        group_id=group).error_code)

    def end(self, txn_id: str, pid: int, epoch: int, commit: bool, version: int = 3) -> int:
        return int(self(26, version, transactional_id=txn_id, producer_id=pid, producer_epoch=epoch,
                        committed=commit).error_code)

    def produce(self, txn_id: str | None, topic: str, partition: int, records: bytes) -> tuple[int, int]:
        resp = self.send(wire.txn_produce_request(9, txn_id, topic, partition, records))
        part = resp.responses[0].partition_responses[0]
        return int(part.error_code), int(part.base_offset)

    def txn_offset_commit(self, txn_id: str, group: str, pid: int, epoch: int,
                          offsets: dict[tuple[str, int], int], version: int = 3) -> dict[tuple[str, int], int]:
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for (t, p), o in offsets.items():
            by_topic.setdefault(t, []).append({"partition_index": p, "committed_offset": o,
                                               "committed_metadata": f"m{o}"})
        fields: dict[str, Any] = {"transactional_id": txn_id, "group_id": group, "producer_id": pid,
                                  "producer_epoch": epoch,
                                  "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}
        if version >= 3:
            fields.update(generation_id=-1, member_id="", group_instance_id=None)
        resp = self(28, version, **fields)
        return {(t.name, int(p.partition_index)): int(p.error_code) for t in resp.topics for p in t.partitions}

    def offset_fetch(self, group: str, parts: dict[str, list[int]], stable: bool = True,
                     version: int = 8) -> dict[tuple[str, int], tuple[int, int]]:
        """(committed offset, error code) per partition."""
        topics = [{"name": t, "partition_indexes": ps} for t, ps in parts.items()]
        if version >= 8:
            resp = self(9, version, groups=[{"group_id": group, "topics": topics}], require_stable=stable)
            [g] = resp.groups
            assert g.error_code == NONE
            found = g.topics
        else:
            resp = self(9, version, group_id=group, topics=topics, require_stable=stable)
            assert resp.error_code == NONE
            found = resp.topics
        return {(t.name, int(p.partition_index)): (int(p.committed_offset), int(p.error_code))
                for t in found for p in t.partitions}

    def fetch(self, topic: str, partition: int, offset: int, committed: bool = True) -> Any:
        resp = self(1, 4, max_wait=datetime.timedelta(0), min_bytes=0, max_bytes=1 << 20,
                    isolation_level=1 if committed else 0,
                    topics=[{"topic": topic, "partitions": [{"partition": partition, "fetch_offset": offset,
                                                             "partition_max_bytes": 1 << 20}]}])
        part = resp.responses[0].partitions[0]
        assert part.error_code == NONE, part
        return part

    def offsets(self, topic: str, partition: int) -> tuple[int, int]:
        """(latest offset for read_uncommitted = high watermark, for read_committed = last stable offset)."""
        out = []
        for isolation in (0, 1):
            body = dataclasses.replace(wire.list_offsets_request(5, topic, [partition], -1), isolation_level=isolation)
            part = self.send(body).topics[0].partitions[0]
            assert part.error_code == NONE, part
            out.append(int(part.offset))
        return out[0], out[1]

    def committed_view(self, topic: str, partition: int) -> list[bytes | None]:
        """The values a read_committed consumer gets from offset 0: fetched up to the last stable offset, the
        batches of the aborted transactions the responses name left out (the Java consumer's rule)."""
        offset = 0
        out: list[bytes | None] = []
        while True:
            part = self.fetch(topic, partition, offset)
            data = bytes(part.records or b"")
            if not data:
                assert offset >= part.last_stable_offset, (offset, part)
                return out
            aborted = sorted((int(a.first_offset), int(a.producer_id)) for a in part.aborted_transactions or ())
            skipping: set[int] = set()
            for b in iter_batches(data, 0, len(data)):
                while aborted and aborted[0][0] <= b.last_offset:
                    skipping.add(aborted.pop(0)[1])
                if b.base_offset >= offset:
                    if b.is_control:
                        if marker(b.records())[0] == "ABORT":
                            skipping.discard(b.producer_id)
                    elif not (b.is_transactional and b.producer_id in skipping):
                        out += [r.value for r in b.records()]
                offset = max(offset, b.last_offset + 1)


class Producer:
    """A transactional producer: its id and epoch, and the next sequence per partition."""

    def __init__(self, client: Client, txn_id: str, timeout_ms: int = 60_000):
        self.c, self.txn_id = client, txn_id
        code, self.pid, self.epoch = client.init(txn_id, timeout_ms)
        assert code == NONE and self.pid >= 0
        self.seq: dict[tuple[str, int], int] = {}

    def add(self, parts: dict[str, list[int]]) -> None:
        codes = self.c.add_partitions(self.txn_id, self.pid, self.epoch, parts)
        assert set(codes.values()) == {NONE}, codes

    def send(self, topic: str, partition: int, values: list[bytes], epoch: int | None = None) -> tuple[int, int]:
        seq = self.seq.get((topic, partition), 0)
        records = wire.producer_batch(values, self.pid, self.epoch if epoch is None else epoch, seq)
        code, offset = self.c.produce(self.txn_id, topic, partition, records)
        if code == NONE:
            self.seq[(topic, partition)] = seq + len(values)
        return code, offset

    def end(self, commit: bool) -> int:
        return self.c.end(self.txn_id, self.pid, self.epoch, commit)


# -- the stored logs (the broker stopped) ------------------------------------------------------------------------

class Batch(NamedTuple):
    base_offset: int
    last_offset: int
    producer_id: int
    producer_epoch: int
    transactional: bool
    control: bool
    records: list[tuple[int, bytes | None, bytes | None]]     # (offset, key, value)


def marker(records: list) -> tuple[str, int]:
    """(COMMIT or ABORT, coordinator epoch) of a control batch's record, decoded by hand: key int16 version 0 +
    int16 type, value int16 version 0 + int32 coordinator epoch."""
    [r] = records
    key, value = (r.key, r.value) if hasattr(r, "key") else (r[1], r[2])
    version, ctype = struct.unpack(">hh", key)
    value_version, coordinator_epoch = struct.unpack(">hi", value)
    assert version == 0 and value_version == 0 and ctype in (0, 1), (key, value)
    return ("ABORT", "COMMIT")[ctype], coordinator_epoch


def stored(broker, topic: str, partition: int) -> list[Batch]:
    with LogManager.open(load_config(broker.config_path)) as mgr:
        log = mgr.get_log(topic, partition)
        assert log is not None, f"{topic}-{partition}"
        out: list[Batch] = []
        offset = log.log_start_offset
        while True:
            data = log.read(offset, 1 << 20)
            if data is None:
                return out
            for b in iter_batches(data.data, 0, len(data.data)):
                if b.last_offset < offset:
                    continue
                out.append(Batch(b.base_offset, b.last_offset, b.producer_id, b.producer_epoch, b.is_transactional,
                                 b.is_control, [(r.offset, r.key, r.value) for r in b.records()]))
                offset = b.last_offset + 1


def committed_records(broker, topic: str, partition: int) -> list[bytes | None]:
    """Values of ``topic-partition`` as the engine reads them with read_committed."""
    with LogManager.open(load_config(broker.config_path)) as mgr:
        log = mgr.get_log(topic, partition)
        assert log is not None
        return [r.value for r in log.read_records(isolation_level=READ_COMMITTED)]


def markers(batches: list[Batch]) -> list[tuple[int, str, int, int]]:
    """(offset, type, producer id, producer epoch) of every control batch."""
    out = []
    for b in batches:
        if b.control:
            assert b.transactional, b
            out.append((b.base_offset, marker(b.records)[0], b.producer_id, b.producer_epoch))
    return out


def txn_states(broker, txn_id: str) -> list[trec.TxnRecord | None]:
    """The ``__transaction_state`` values of ``txn_id`` in log order (None: a tombstone); they are all in its
    partition, none in the others."""
    mine = partition_for(txn_id, PARTS)
    out: list[trec.TxnRecord | None] = []
    with LogManager.open(load_config(broker.config_path)) as mgr:
        for p in range(PARTS):
            log = mgr.get_log(TXN_TOPIC, p)
            if log is None:
                continue
            for r in log.read_records():
                if trec.parse_key(present(r.key)) == txn_id:
                    assert p == mine, (txn_id, p, mine)
                    out.append(None if r.value is None else trec.parse_value(r.value))
    return out


def states(records: list[trec.TxnRecord | None]) -> list[str]:
    return ["tombstone" if r is None else trec.STATE_NAMES[r.state] for r in records]


def txn_index_entries(broker, topic: str, partition: int) -> list[tuple[int, int, int, int, int]]:
    """(version, producer id, first offset, last offset, last stable offset) of every 34-byte ``.txnindex`` entry."""
    out = []
    for path in sorted(broker.tmp.glob(f"dir-*/{topic}-{partition}/*.txnindex")):
        data = path.read_bytes()
        out += [struct.unpack_from(">hqqqq", data, pos) for pos in range(0, len(data) - 33, 34)]
    return out


def engine(broker, *args: str) -> list[dict]:
    proc = subprocess.run([sys.executable, "-m", "storage_engine", "--config", str(broker.config_path), *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"{args}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


@pytest.fixture
def client_of():
    made: list[Client] = []

    def make(broker) -> Client:
        made.append(Client(broker))
        return made[-1]

    yield make
    for c in made:
        c.close()


# -- InitProducerId -------------------------------------------------------------------------------------------------

def test_init_producer_id_allocates_bumps_and_checks_its_arguments(broker_factory, client_of):
    broker = broker_factory(broker=BROKER)
    c = client_of(broker)
    code, pid, epoch = c.init("init-a", version=0)
    assert (code, epoch) == (NONE, 0) and pid >= 0
    for version in (1, 2, 3, 4):
        assert c.init("init-a", version=version) == (NONE, pid, version)           # the same id, one epoch more
    code, other, _ = c.init("init-b")
    assert code == NONE and other != pid

    assert c.init("init-a", timeout_ms=0) == (INVALID_TRANSACTION_TIMEOUT, -1, -1)
    assert c.init("init-a", timeout_ms=900_001) == (INVALID_TRANSACTION_TIMEOUT, -1, -1)
    assert c.init("fresh", timeout_ms=900_001)[0] == INVALID_TRANSACTION_TIMEOUT
    assert c.init("", version=4)[0] == INVALID_REQUEST
    assert c.init("", version=0)[0] == INVALID_REQUEST
    assert c.init("init-a", timeout_ms=900_000) == (NONE, pid, 5)                 # the maximum is allowed
    assert c.init("odd", timeout_ms=1001)[0] == NONE           # a timeout kept to the millisecond

    # KIP-360: the producer's own (id, epoch) bumps; a stale pair is fenced (v4) or an old epoch (v3)
    assert c.init("init-a", version=4, producer_id=pid, epoch=5) == (NONE, pid, 6)
    assert c.init("init-a", version=4, producer_id=pid, epoch=5) == (NONE, pid, 6)   # a retry: not bumped again
    assert c.init("init-a", version=4, producer_id=pid, epoch=3) == (PRODUCER_FENCED, -1, -1)
    assert c.init("init-a", version=3, producer_id=pid, epoch=3) == (INVALID_PRODUCER_EPOCH, -1, -1)
    assert c.init("init-a", version=4, producer_id=other, epoch=6) == (PRODUCER_FENCED, -1, -1)
    assert c.init("init-a", version=3, producer_id=pid, epoch=6) == (NONE, pid, 7)
    c.close()

    assert broker.stop() == 0
    records = txn_states(broker, "init-a")
    assert states(records) == ["Empty"] * 8
    assert [(r.producer_id, r.producer_epoch) for r in map(present, records)] == [(pid, e) for e in range(8)]
    assert [r.timeout_ms for r in map(present, records)] == [60_000] * 5 + [900_000] + [60_000] * 2
    assert all(r.partitions == {} and r.start_ms == -1 for r in map(present, records))
    assert [(r.producer_id, r.producer_epoch) for r in map(present, txn_states(broker, "init-b"))] == [(other, 0)]
    assert txn_states(broker, "fresh") == []
    assert [r.timeout_ms for r in map(present, txn_states(broker, "odd"))] == [1001]


# -- AddPartitionsToTxn and transactional Produce -------------------------------------------------------------------

@pytest.mark.parametrize("version", [0, 3])
def test_add_partitions_errors_and_transactional_produce(broker_factory, client_of, version):
    broker = broker_factory(broker=BROKER)
    c = client_of(broker)
    c.create_topic("orders", 2)
    p = Producer(c, "adder")
    fenced = INVALID_PRODUCER_EPOCH if version < 2 else PRODUCER_FENCED

    assert c.add_partitions("adder", p.pid, p.epoch, {"orders": [0, 1, 9], "nope": [0]}, version) == {
        ("orders", 0): OPERATION_NOT_ATTEMPTED, ("orders", 1): OPERATION_NOT_ATTEMPTED,
        ("orders", 9): UNKNOWN_TOPIC_OR_PARTITION, ("nope", 0): UNKNOWN_TOPIC_OR_PARTITION}
    assert c.add_partitions("adder", p.pid, p.epoch + 1, {"orders": [0]}, version) == {("orders", 0): fenced}
    assert c.add_partitions("adder", p.pid + 1000, p.epoch, {"orders": [0]}, version) == {
        ("orders", 0): INVALID_PRODUCER_ID_MAPPING}
    assert c.add_partitions("no-such-id", p.pid, p.epoch, {"orders": [0]}, version) == {
        ("orders", 0): INVALID_PRODUCER_ID_MAPPING}
    # nothing was added: a transactional batch is refused, and nothing is in the log
    assert p.send("orders", 0, [b"early"])[0] == INVALID_TXN_STATE

    assert c.add_partitions("adder", p.pid, p.epoch, {"orders": [0]}, version) == {("orders", 0): NONE}
    assert c.add_partitions("adder", p.pid, p.epoch, {"orders": [0]}, version) == {("orders", 0): NONE}  # again
    assert p.send("orders", 1, [b"elsewhere"])[0] == INVALID_TXN_STATE
    assert p.send("orders", 0, [b"in-1", b"in-2"]) == (NONE, 0)
    assert p.send("orders", 0, [b"in-3"]) == (NONE, 2)
    # the same batch in a Produce request without the transactional id
    batch = wire.producer_batch([b"sneaky"], p.pid, p.epoch, p.seq[("orders", 0)])
    assert c.produce(None, "orders", 0, batch)[0] == TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert c.produce("other-id", "orders", 0, batch)[0] == INVALID_PRODUCER_ID_MAPPING
    assert c.offsets("orders", 0) == (3, 0) and c.offsets("orders", 1) == (0, 0)

    # after a bump, the old epoch is fenced here too
    assert c.init("adder")[:2] == (NONE, p.pid)          # the open transaction is aborted
    assert c.add_partitions("adder", p.pid, p.epoch, {"orders": [1]}, version) == {("orders", 1): fenced}
    c.close()
    assert broker.stop() == 0
    assert [(m[1], m[2]) for m in markers(stored(broker, "orders", 0))] == [("ABORT", p.pid)]
    assert stored(broker, "orders", 1) == []


# -- EndTxn ---------------------------------------------------------------------------------------------------------

def test_end_txn_commits_with_markers_in_every_partition_and_answers_retries(broker_factory, client_of):
    broker = broker_factory(broker=BROKER)
    c = client_of(broker)
    c.create_topic("orders", 2)
    p = Producer(c, "ender")
    assert p.end(commit=True) == INVALID_TXN_STATE           # Empty: nothing to commit
    assert p.end(commit=False) == INVALID_TXN_STATE
    assert c.produce(None, "orders", 1, wire.batch([b"plain"]))[0] == NONE      # offset 0 of orders-1

    p.add({"orders": [0, 1]})
    assert p.send("orders", 0, [b"a0", b"a1"]) == (NONE, 0)
    assert p.send("orders", 1, [b"b1"]) == (NONE, 1)
    assert p.send("orders", 0, [b"a2"]) == (NONE, 2)
    # open: the last stable offset stays at the transaction's first offset, read_committed sees nothing of it
    assert c.offsets("orders", 0) == (3, 0) and c.offsets("orders", 1) == (2, 1)
    assert c.committed_view("orders", 0) == [] and c.committed_view("orders", 1) == [b"plain"]

    assert p.end(commit=True) == NONE
    assert c.offsets("orders", 0) == (4, 4) and c.offsets("orders", 1) == (3, 3)
    assert c.committed_view("orders", 0) == [b"a0", b"a1", b"a2"]
    assert c.committed_view("orders", 1) == [b"plain", b"b1"]
    part = c.fetch("orders", 0, 0)
    assert part.last_stable_offset == 4 and list(part.aborted_transactions) == []

    assert p.end(commit=True) == NONE                       # a retry of the commit: no second marker
    assert p.end(commit=False) == INVALID_TXN_STATE
    assert c.end("ender", p.pid, p.epoch + 1, True) == PRODUCER_FENCED
    assert c.end("ender", p.pid, p.epoch + 1, True, version=1) == INVALID_PRODUCER_EPOCH
    assert c.end("ender", p.pid + 1000, p.epoch, True) == INVALID_PRODUCER_ID_MAPPING
    assert c.offsets("orders", 0) == (4, 4)
    c.close()

    assert broker.stop() == 0
    data0, data1 = stored(broker, "orders", 0), stored(broker, "orders", 1)
    assert markers(data0) == [(3, "COMMIT", p.pid, p.epoch)]
    assert markers(data1) == [(2, "COMMIT", p.pid, p.epoch)]
    assert all(b.transactional and b.producer_id == p.pid for b in data0)
    assert [marker(data0[-1].records)[1]] == [0]                          # coordinator epoch 0
    assert committed_records(broker, "orders", 0) == [b"a0", b"a1", b"a2"]
    assert txn_index_entries(broker, "orders", 0) == []
    records = txn_states(broker, "ender")
    assert states(records) == ["Empty", "Ongoing", "PrepareCommit", "CompleteCommit"]
    assert present(records[1]).partitions == present(records[2]).partitions == {"orders": [0, 1]}
    assert present(records[3]).partitions == {} and present(records[3]).start_ms == -1
    assert present(records[1]).start_ms == present(records[2]).start_ms > 0
    assert {(r.producer_id, r.producer_epoch) for r in map(present, records)} == {(p.pid, p.epoch)}


def test_an_abort_is_indexed_and_read_committed_fetch_names_it(broker_factory, client_of):
    broker = broker_factory(broker=BROKER)
    c = client_of(broker)
    c.create_topic("orders", 1)
    p = Producer(c, "aborter")
    assert c.produce(None, "orders", 0, wire.batch([b"plain-0"])) == (NONE, 0)
    p.add({"orders": [0]})
    assert p.send("orders", 0, [b"gone-1", b"gone-2"]) == (NONE, 1)
    assert p.end(commit=False) == NONE
    assert c.produce(None, "orders", 0, wire.batch([b"plain-4"])) == (NONE, 4)
    assert p.end(commit=False) == NONE                      # a retried abort
    assert p.end(commit=True) == INVALID_TXN_STATE

    part = c.fetch("orders", 0, 0)
    assert (part.high_watermark, part.last_stable_offset) == (5, 5)
    assert [(a.producer_id, a.first_offset) for a in part.aborted_transactions] == [(p.pid, 1)]
    assert c.committed_view("orders", 0) == [b"plain-0", b"plain-4"]
    assert list(c.fetch("orders", 0, 4).aborted_transactions) == []          # the range read is past it
    # read_uncommitted: every record, no aborted list
    assert c.fetch("orders", 0, 0, committed=False).aborted_transactions is None
    c.close()

    assert broker.stop() == 0
    assert markers(stored(broker, "orders", 0)) == [(3, "ABORT", p.pid, p.epoch)]
    assert txn_index_entries(broker, "orders", 0) == [(0, p.pid, 1, 3, 4)]
    assert committed_records(broker, "orders", 0) == [b"plain-0", b"plain-4"]
    assert states(txn_states(broker, "aborter")) == ["Empty", "Ongoing", "PrepareAbort", "CompleteAbort"]


# -- fencing --------------------------------------------------------------------------------------------------------

def test_a_second_init_aborts_the_open_transaction_and_fences_the_old_producer(broker_factory, client_of):
    broker = broker_factory(broker=BROKER)
    c = client_of(broker)
    c.create_topic("orders", 1)
    old = Producer(c, "zombie")
    old.add({"orders": [0]})
    assert old.send("orders", 0, [b"doomed"]) == (NONE, 0)

    new = Producer(c, "zombie")                 # a new instance with the same transactional id
    assert (new.pid, new.epoch) == (old.pid, old.epoch + 2)
    assert c.offsets("orders", 0) == (2, 2)      # the ABORT marker is written: nothing is unstable
    part = c.fetch("orders", 0, 0)
    assert [(a.producer_id, a.first_offset) for a in part.aborted_transactions] == [(old.pid, 0)]
    assert c.committed_view("orders", 0) == []

    assert old.send("orders", 0, [b"late"])[0] == INVALID_PRODUCER_EPOCH
    assert old.end(commit=True) == PRODUCER_FENCED
    assert c.end("zombie", old.pid, old.epoch, True, version=1) == INVALID_PRODUCER_EPOCH
    assert c.add_partitions("zombie", old.pid, old.epoch, {"orders": [0]}) == {("orders", 0): PRODUCER_FENCED}
    assert c.add_offsets("zombie", old.pid, old.epoch, "g") == PRODUCER_FENCED
    assert c.add_offsets("zombie", old.pid, old.epoch, "g", version=1) == INVALID_PRODUCER_EPOCH

    new.add({"orders": [0]})
    assert new.send("orders", 0, [b"kept"]) == (NONE, 2)
    assert old.send("orders", 0, [b"late"])[0] == INVALID_PRODUCER_EPOCH      # even with the partition added
    assert new.end(commit=True) == NONE
    assert c.committed_view("orders", 0) == [b"kept"]
    c.close()

    assert broker.stop() == 0
    assert markers(stored(broker, "orders", 0)) == [(1, "ABORT", old.pid, old.epoch + 1),
                                                    (3, "COMMIT", new.pid, new.epoch)]
    assert committed_records(broker, "orders", 0) == [b"kept"]
    records = txn_states(broker, "zombie")
    assert [(trec.STATE_NAMES[r.state], r.producer_epoch) for r in map(present, records)] == [
        ("Empty", 0), ("Ongoing", 0), ("PrepareAbort", 1), ("CompleteAbort", 1), ("Empty", 2),
        ("Ongoing", 2), ("PrepareCommit", 2), ("CompleteCommit", 2)]


# -- the coordinator's own aborts and expirations ----------------------------------------------------------------

def test_a_transaction_past_its_timeout_is_aborted_and_its_producer_fenced(broker_factory, client_of):
    broker = broker_factory(broker={**BROKER,
                                    "transaction.abort.timed.out.transaction.cleanup.interval.ms": 200})
    c = client_of(broker)
    c.create_topic("orders", 1)
    p = Producer(c, "slowpoke", timeout_ms=3000)
    p.add({"orders": [0]})
    assert p.send("orders", 0, [b"too-late"]) == (NONE, 0)
    wait_until("the coordinator to abort the timed-out transaction", lambda: c.offsets("orders", 0) == (2, 2))
    part = c.fetch("orders", 0, 0)
    assert [(a.producer_id, a.first_offset) for a in part.aborted_transactions] == [(p.pid, 0)]
    assert c.committed_view("orders", 0) == []

    # the epoch was bumped: the producer is fenced
    assert p.end(commit=True) == PRODUCER_FENCED
    assert p.send("orders", 0, [b"later"])[0] == INVALID_PRODUCER_EPOCH
    # a fencing abort leaves no last epoch (Kafka's prepareFenceProducerEpoch): the timed-out producer's own
    # KIP-360 bump is fenced too, and only a new instance (no producer id) goes on
    assert c.init("slowpoke", version=4, producer_id=p.pid, epoch=p.epoch) == (PRODUCER_FENCED, -1, -1)
    assert c.init("slowpoke", version=3, producer_id=p.pid, epoch=p.epoch) == (INVALID_PRODUCER_EPOCH, -1, -1)
    assert c.init("slowpoke", version=4) == (NONE, p.pid, p.epoch + 2)
    # the producer's own bump (KIP-360) is answered again with its result when retried
    assert c.init("slowpoke", version=4, producer_id=p.pid, epoch=p.epoch + 2) == (NONE, p.pid, p.epoch + 3)
    assert c.init("slowpoke", version=4, producer_id=p.pid, epoch=p.epoch + 2) == (NONE, p.pid, p.epoch + 3)
    c.close()

    assert broker.stop() == 0
    assert markers(stored(broker, "orders", 0)) == [(1, "ABORT", p.pid, p.epoch + 1)]
    assert txn_index_entries(broker, "orders", 0) == [(0, p.pid, 0, 1, 2)]
    records = txn_states(broker, "slowpoke")
    assert [(trec.STATE_NAMES[r.state], r.producer_epoch) for r in map(present, records)] == [
        ("Empty", 0), ("Ongoing", 0), ("PrepareAbort", 1), ("CompleteAbort", 1), ("Empty", 2), ("Empty", 3)]


def test_a_zombie_gets_no_epoch_back_from_its_successors_init(broker_factory, client_of):
    """Producer A is fenced by a new instance B of the same transactional id (no producer id given); A's own
    KIP-360 bump with its old epoch is then PRODUCER_FENCED: it never gets B's epoch back."""
    broker = broker_factory(broker=BROKER)
    c = client_of(broker)
    assert c.init("zombie") == (NONE, 0, 0)
    code, pid, epoch = c.init("zombie")
    assert (code, epoch) == (NONE, 1)
    assert c.init("zombie", version=4, producer_id=pid, epoch=0) == (PRODUCER_FENCED, -1, -1)
    assert c.add_partitions("zombie", pid, 0, {"orders": [0]}) == {("orders", 0): PRODUCER_FENCED}
    c.close()


def test_an_idle_transactional_id_is_tombstoned_and_forgotten(broker_factory, client_of):
    broker = broker_factory(broker={**BROKER, "transactional.id.expiration.ms": 3000,
                                    "transaction.abort.timed.out.transaction.cleanup.interval.ms": 200})
    c = client_of(broker)
    c.create_topic("orders", 1)
    idle = Producer(c, "idle")
    idle.add({"orders": [0]})
    assert idle.send("orders", 0, [b"x"]) == (NONE, 0)
    assert idle.end(commit=True) == NONE
    busy = Producer(c, "busy")                 # a transaction open for longer than the expiration: kept
    busy.add({"orders": [0]})
    wait_until("the idle transactional id to expire", lambda: "transactional id idle expired" in broker.log_text())

    assert c.end("idle", idle.pid, idle.epoch, True) == INVALID_PRODUCER_ID_MAPPING      # forgotten
    code, pid, epoch = c.init("idle")
    assert code == NONE and pid != idle.pid and epoch == 0
    assert busy.send("orders", 0, [b"y"]) == (NONE, 2)
    assert busy.end(commit=True) == NONE
    assert c.committed_view("orders", 0) == [b"x", b"y"]
    c.close()

    assert broker.stop() == 0
    records = txn_states(broker, "idle")
    assert states(records)[:6] == ["Empty", "Ongoing", "PrepareCommit", "CompleteCommit", "tombstone", "Empty"]
    assert present(records[5]).producer_id == pid
    assert "tombstone" not in states(txn_states(broker, "busy"))[:4]


# -- TxnOffsetCommit --------------------------------------------------------------------------------------------------

def test_txn_offset_commits_are_pending_until_the_commit_and_dropped_by_an_abort(broker_factory, client_of):
    broker = broker_factory(broker=BROKER)
    c = client_of(broker)
    c.create_topic("orders", 1)
    c.create_topic("in", 2)         # offsets of a topic that does not exist are UNKNOWN_TOPIC_OR_PARTITION (Kafka)
    p = Producer(c, "offsets")
    wanted = {"in": [0, 1]}
    assert c.txn_offset_commit("offsets", "g1", p.pid, p.epoch, {("in", 0): 5}) == {("in", 0): INVALID_TXN_STATE}
    p.add({"orders": [0]})                                      # Ongoing, but the group's partition not added
    assert c.txn_offset_commit("offsets", "g1", p.pid, p.epoch, {("in", 0): 5}) == {("in", 0): INVALID_TXN_STATE}
    assert c.add_offsets("offsets", p.pid, p.epoch, "g1") == NONE
    elsewhere = next(g for g in ("g2", "g3", "g4", "g5", "g6") if partition_for(g, PARTS) != partition_for("g1", PARTS))
    assert c.txn_offset_commit("offsets", elsewhere, p.pid, p.epoch, {("in", 0): 5}) == {
        ("in", 0): INVALID_TXN_STATE}
    assert c.txn_offset_commit("offsets", "g1", p.pid, p.epoch, {("in", 0): 5, ("in", 1): 7}) == {
        ("in", 0): NONE, ("in", 1): NONE}
    assert c.txn_offset_commit("offsets", "g1", p.pid, p.epoch, {("in", 0): 6}, version=0) == {("in", 0): NONE}
    assert c.offset_fetch("g1", wanted) == {("in", 0): (-1, UNSTABLE_OFFSET_COMMIT),
                                            ("in", 1): (-1, UNSTABLE_OFFSET_COMMIT)}
    assert c.offset_fetch("g1", wanted, version=7) == {("in", 0): (-1, UNSTABLE_OFFSET_COMMIT),
                                                       ("in", 1): (-1, UNSTABLE_OFFSET_COMMIT)}
    assert c.offset_fetch("g1", wanted, stable=False) == {("in", 0): (-1, NONE), ("in", 1): (-1, NONE)}
    assert p.send("orders", 0, [b"consumed"]) == (NONE, 0)
    assert p.end(commit=True) == NONE
    assert c.offset_fetch("g1", wanted) == {("in", 0): (6, NONE), ("in", 1): (7, NONE)}
    assert c.offset_fetch("g1", wanted, version=7) == {("in", 0): (6, NONE), ("in", 1): (7, NONE)}

    # a second transaction moves in-0 to 9, then aborts: 6 stays
    assert c.add_offsets("offsets", p.pid, p.epoch, "g1") == NONE
    assert c.txn_offset_commit("offsets", "g1", p.pid, p.epoch, {("in", 0): 9}) == {("in", 0): NONE}
    assert c.offset_fetch("g1", wanted) == {("in", 0): (6, UNSTABLE_OFFSET_COMMIT), ("in", 1): (7, NONE)}
    assert c.offset_fetch("g1", wanted, stable=False) == {("in", 0): (6, NONE), ("in", 1): (7, NONE)}
    assert p.end(commit=False) == NONE
    assert c.offset_fetch("g1", wanted) == {("in", 0): (6, NONE), ("in", 1): (7, NONE)}
    assert c.txn_offset_commit("offsets", "g1", p.pid, p.epoch, {("in", 0): 10}) == {("in", 0): INVALID_TXN_STATE}
    c.close()

    assert broker.stop() == 0
    offsets_partition = partition_for("g1", PARTS)
    batches = stored(broker, OFFSETS_TOPIC, offsets_partition)
    assert [m[1:] for m in markers(batches)] == [("COMMIT", p.pid, p.epoch), ("ABORT", p.pid, p.epoch)]
    txn_commits = [(cast(grec.OffsetKey, grec.parse_key(present(k))).partition, grec.parse_offset_value(present(v)).offset)
                   for b in batches if b.transactional and not b.control for _, k, v in b.records]
    assert txn_commits == [(0, 5), (1, 7), (0, 6), (0, 9)]
    assert [e[1:3] for e in txn_index_entries(broker, OFFSETS_TOPIC, offsets_partition)] == [
        (p.pid, batches[-2].base_offset)]


# -- restarts -------------------------------------------------------------------------------------------------------

@pytest.mark.kills
def test_a_transaction_open_at_a_sigkill_is_committed_after_the_restart(broker_factory, client_of):
    broker = broker_factory(broker=BROKER)
    c = client_of(broker)
    c.create_topic("orders", 2)
    c.create_topic("in", 4)         # the consumed topic the offsets are for (an unknown one is refused)
    p = Producer(c, "survivor")
    p.add({"orders": [0, 1]})
    assert c.add_offsets("survivor", p.pid, p.epoch, "readers") == NONE
    assert p.send("orders", 0, [b"a0", b"a1"]) == (NONE, 0)
    assert p.send("orders", 1, [b"b0"]) == (NONE, 0)
    assert c.txn_offset_commit("survivor", "readers", p.pid, p.epoch, {("in", 0): 41, ("in", 3): 43}) == {
        ("in", 0): NONE, ("in", 3): NONE}
    c.close()

    broker.kill()
    broker.restart()
    c = client_of(broker)
    # still open after the restart: nothing stable, the offsets pending
    assert c.offsets("orders", 0) == (2, 0) and c.offsets("orders", 1) == (1, 0)
    assert c.offset_fetch("readers", {"in": [0, 3]}) == {("in", 0): (-1, UNSTABLE_OFFSET_COMMIT),
                                                         ("in", 3): (-1, UNSTABLE_OFFSET_COMMIT)}
    p.c = c
    assert p.send("orders", 0, [b"a2"]) == (NONE, 2)          # the producer goes on where it was
    assert p.send("orders", 0, [b"a3"]) == (NONE, 3)
    assert p.end(commit=True) == NONE
    assert c.offsets("orders", 0) == (5, 5) and c.offsets("orders", 1) == (2, 2)
    assert c.committed_view("orders", 0) == [b"a0", b"a1", b"a2", b"a3"]
    assert c.committed_view("orders", 1) == [b"b0"]
    assert c.offset_fetch("readers", {"in": [0, 3]}) == {("in", 0): (41, NONE), ("in", 3): (43, NONE)}
    c.close()

    assert broker.stop() == 0
    broker.restart()
    c = client_of(broker)
    assert c.offset_fetch("readers", {"in": [0, 3]}) == {("in", 0): (41, NONE), ("in", 3): (43, NONE)}
    assert c.end("survivor", p.pid, p.epoch, True) == NONE                 # the commit, retried
    assert c.init("survivor", version=4, producer_id=p.pid, epoch=p.epoch) == (NONE, p.pid, p.epoch + 1)
    c.close()
    assert broker.stop() == 0
    assert markers(stored(broker, "orders", 0)) == [(4, "COMMIT", p.pid, p.epoch)]
    assert committed_records(broker, "orders", 1) == [b"b0"]


def write_prepared(broker, txn_id: str, pid: int, epoch: int, commit: bool, partitions: dict[str, list[int]],
                   data: dict[tuple[str, int], list[tuple[list[SimpleRecord], int]]]) -> None:
    """Into the stopped broker's logs, with the engine: the transactional batches ``data`` ((records, base
    sequence) per partition) of ``pid``/``epoch``, then a PrepareCommit (or PrepareAbort) record of ``txn_id`` in
    ``__transaction_state``: what a broker that died after recording the prepare leaves behind."""
    with LogManager.open(load_config(broker.config_path)) as mgr:
        for (topic, partition), batches in data.items():
            log = mgr.get_log(topic, partition)
            assert log is not None, (topic, partition)
            for records, seq in batches:
                log.append_records(records, producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                                   is_transactional=True)
        state = mgr.get_log(TXN_TOPIC, partition_for(txn_id, PARTS))
        assert state is not None
        now = 1_700_000_000_000
        state.append_records([SimpleRecord(trec.key(txn_id), trec.value(trec.TxnRecord(
            pid, epoch, 60_000, trec.PREPARE_COMMIT if commit else trec.PREPARE_ABORT, partitions, now, now)))])


@pytest.mark.parametrize("commit", [True, False], ids=["PrepareCommit", "PrepareAbort"])
def test_a_transaction_found_prepared_at_start_is_completed(broker_factory, client_of, commit):
    broker = broker_factory(broker=BROKER)
    c = client_of(broker)
    c.create_topic("orders", 1)
    code, pid, epoch = c.init("crafted")
    assert code == NONE
    # the group's offsets partition is created by the first AddOffsetsToTxn (the transaction then Ongoing)
    assert c.add_offsets("crafted", pid, epoch, "crafted-group") == NONE
    c.close()
    assert broker.stop() == 0

    group_partition = partition_for("crafted-group", PARTS)
    offset_record = SimpleRecord(grec.offset_key("crafted-group", "orders", 0),
                                 grec.offset_value(3, -1, "", 1_700_000_000_000))
    write_prepared(broker, "crafted", pid, epoch, commit, {"orders": [0], OFFSETS_TOPIC: [group_partition]}, {
        ("orders", 0): [([SimpleRecord(None, b"c0"), SimpleRecord(None, b"c1")], 0), ([SimpleRecord(None, b"c2")], 2)],
        (OFFSETS_TOPIC, group_partition): [([offset_record], 0)]})
    kind = "COMMIT" if commit else "ABORT"
    want_view = [b"c0", b"c1", b"c2"] if commit else []
    want_offset = {("orders", 0): (3 if commit else -1, NONE)}

    broker.restart()
    c = client_of(broker)
    wait_until(f"the {kind} marker of the prepared transaction", lambda: c.offsets("orders", 0) == (4, 4))
    assert c.committed_view("orders", 0) == want_view
    assert c.offset_fetch("crafted-group", {"orders": [0]}) == want_offset
    assert c.end("crafted", pid, epoch, commit) == NONE                  # already ended: a retry
    assert c.end("crafted", pid, epoch, not commit) == INVALID_TXN_STATE
    c.close()
    assert broker.stop() == 0

    assert markers(stored(broker, "orders", 0)) == [(3, kind, pid, epoch)]
    assert [m[1:] for m in markers(stored(broker, OFFSETS_TOPIC, group_partition))] == [(kind, pid, epoch)]
    assert committed_records(broker, "orders", 0) == want_view
    assert txn_index_entries(broker, "orders", 0) == ([] if commit else [(0, pid, 0, 3, 4)])
    records = txn_states(broker, "crafted")
    assert states(records) == ["Empty", "Ongoing", f"Prepare{kind.title()}", f"Complete{kind.title()}"]
    last = records[-1]
    assert last is not None and (last.producer_id, last.producer_epoch, last.partitions) == (pid, epoch, {})

    # died again after the markers, before recording Complete*: the markers are written again, which changes
    # nothing a reader sees
    write_prepared(broker, "crafted", pid, epoch, commit, {"orders": [0], OFFSETS_TOPIC: [group_partition]}, {})
    broker.restart()
    c = client_of(broker)
    wait_until(f"a second {kind} marker", lambda: c.offsets("orders", 0) == (5, 5))
    assert c.committed_view("orders", 0) == want_view
    assert c.offset_fetch("crafted-group", {"orders": [0]}) == want_offset
    assert c.init("crafted", version=4, producer_id=pid, epoch=epoch) == (NONE, pid, epoch + 1)
    c.close()
    assert broker.stop() == 0
    assert [m[:2] for m in markers(stored(broker, "orders", 0))] == [(3, kind), (4, kind)]
    assert committed_records(broker, "orders", 0) == want_view
    assert states(txn_states(broker, "crafted"))[4:] == [f"Prepare{kind.title()}", f"Complete{kind.title()}",
                                                         "Empty"]


# -- compaction -----------------------------------------------------------------------------------------------------

def test_compacting_the_coordinator_topics_changes_no_coordinator_state(broker_factory, client_of):
    broker = broker_factory(broker={**BROKER, "transaction.state.log.segment.bytes": 1024,
                                    "offsets.topic.segment.bytes": 1024})
    c = client_of(broker)
    c.create_topic("orders", 1)
    c.create_topic("in", 2)         # the consumed topic the offsets are for (an unknown one is refused)
    p = Producer(c, "compacted")
    for i in range(12):
        p.add({"orders": [0]})
        assert c.add_offsets("compacted", p.pid, p.epoch, "cg") == NONE
        assert p.send("orders", 0, [b"v%d" % i])[0] == NONE
        assert c.txn_offset_commit("compacted", "cg", p.pid, p.epoch, {("in", 0): i, ("in", 1): 100 + i}) == {
            ("in", 0): NONE, ("in", 1): NONE}
        assert p.end(commit=i not in (7, 11)) == NONE          # the 8th and the last transaction abort
    other = Producer(c, "bystander")
    for _ in range(5):
        other = Producer(c, "bystander")
    want_offsets = {("in", 0): (10, NONE), ("in", 1): (110, NONE)}
    assert c.offset_fetch("cg", {"in": [0, 1]}) == want_offsets
    want_view = [b"v%d" % i for i in range(12) if i not in (7, 11)]
    assert c.committed_view("orders", 0) == want_view
    c.close()

    for topic in (TXN_TOPIC, OFFSETS_TOPIC):
        [report] = engine(broker, "compact", "--topic", topic)
        assert report["failed"] == [], report
        removed = sum(r["stats"]["records_removed"] for r in report["results"] if "stats" in r)
        assert removed > 0, (topic, report)

    assert broker.stop() == 0
    broker.restart()
    c = client_of(broker)
    assert c.offset_fetch("cg", {"in": [0, 1]}) == want_offsets
    assert c.committed_view("orders", 0) == want_view
    assert c.end("compacted", p.pid, p.epoch, False) == NONE            # still CompleteAbort at this epoch
    assert c.end("compacted", p.pid, p.epoch, True) == INVALID_TXN_STATE
    assert c.init("compacted", version=4, producer_id=p.pid, epoch=p.epoch) == (NONE, p.pid, p.epoch + 1)
    assert c.init("bystander", version=4, producer_id=other.pid, epoch=other.epoch) == (
        NONE, other.pid, other.epoch + 1)
    c.close()


def test_a_plain_commit_made_after_a_transactions_offset_commit_wins_live_and_after_a_restart(broker_factory,
                                                                                              client_of):
    """Kafka's rule (``completePendingTxnOffsetCommit``): a transaction's offset counts at its COMMIT marker only
    if it was written after the partition's committed offset; here a plain OffsetCommit of 20 lands between the
    transaction's TxnOffsetCommit of 5 and its commit, so 20 stays, in memory and when read back at start. A later
    transaction's commit (written after 20) counts."""
    broker = broker_factory(broker=BROKER)
    c = client_of(broker)
    c.create_topic("orders", 1)
    c.create_topic("in", 1)         # the consumed topic the offsets are for (an unknown one is refused)
    p = Producer(c, "overtaken")
    wanted = {"in": [0]}

    def plain_commit(offset: int) -> None:
        resp = c(8, 8, group_id="g1", generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
                 topics=[{"name": "in", "partitions": [{"partition_index": 0, "committed_offset": offset,
                                                        "committed_leader_epoch": -1, "committed_metadata": ""}]}])
        assert int(resp.topics[0].partitions[0].error_code) == NONE, resp

    assert c.add_offsets("overtaken", p.pid, p.epoch, "g1") == NONE
    assert c.txn_offset_commit("overtaken", "g1", p.pid, p.epoch, {("in", 0): 5}) == {("in", 0): NONE}
    plain_commit(20)
    assert p.end(commit=True) == NONE
    assert c.offset_fetch("g1", wanted) == {("in", 0): (20, NONE)}
    c.close()
    broker.kill()
    broker.restart()
    c = client_of(broker)
    assert c.offset_fetch("g1", wanted) == {("in", 0): (20, NONE)}
    code, p.pid, p.epoch = c.init("overtaken")
    p.c = c
    assert code == NONE
    assert c.add_offsets("overtaken", p.pid, p.epoch, "g1") == NONE
    assert c.txn_offset_commit("overtaken", "g1", p.pid, p.epoch, {("in", 0): 30}) == {("in", 0): NONE}
    assert p.end(commit=True) == NONE
    assert c.offset_fetch("g1", wanted) == {("in", 0): (30, NONE)}
    c.close()
    broker.kill()
    broker.restart()
    c = client_of(broker)
    assert c.offset_fetch("g1", wanted) == {("in", 0): (30, NONE)}
    c.close()


def test_a_produce_of_two_batches_for_one_partition_is_refused(broker_factory, client_of):
    """Produce v3+ takes one batch per partition (Kafka's ``validateRecords``): a plain batch followed by another
    producer's transactional batch would otherwise open a transaction no coordinator ever ends, and the last
    stable offset would stay behind it for good."""
    broker = broker_factory(broker=BROKER)
    c = client_of(broker)
    c.create_topic("orders", 1)
    p = Producer(c, "two-batches")
    p.add({"orders": [0]})
    own = wire.producer_batch([b"mine"], p.pid, p.epoch, 0)
    foreign = wire.producer_batch([b"not added"], p.pid + 1000, 0, 0)
    for txn_id, records in ((None, wire.batch([b"plain"]) + foreign), ("two-batches", own + foreign)):
        code, _ = c.produce(txn_id, "orders", 0, records)
        assert code == INVALID_RECORD
    assert c.offsets("orders", 0) == (0, 0)
    assert p.send("orders", 0, [b"mine"]) == (NONE, 0)
    assert p.end(commit=True) == NONE
    assert c.offsets("orders", 0) == (2, 2)
    c.close()
