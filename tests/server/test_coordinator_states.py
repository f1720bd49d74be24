"""The coordinators' state machines and their timeouts, in process on a real log manager with the broker's clock
a ManualClock: time passes only when a test moves it, so no test sleeps for a timeout.

* Every move between two group states, and between two transaction states, is allowed exactly when Kafka's
  ``ClassicGroupState`` / ``TransactionState`` list the first among the second's valid previous states; any
  other move raises, naming both states.
* A transaction's change is prepared (the state in memory unchanged), written, then applied; one whose record
  cannot be written leaves the transactional id as it was.
* A member whose session ends is removed and its group rebalances; a member that does not rejoin within the
  rebalance timeout is dropped from the new generation; a transaction open past its timeout is aborted with
  its producer's epoch bumped.
* A static member restored by the load is fenced as Kafka's ``isStaticMemberFenced`` fences: a request naming its
  group.instance.id with another member id (an empty one included) is answered FENCED_INSTANCE_ID while the
  member holds the instance; a JoinGroup with an empty member id takes the instance over under a new member id;
  once the member has expired nothing is fenced.
"""
from __future__ import annotations

import asyncio
import itertools
import threading
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from storage_engine.clock import ManualClock
from storage_engine.config_file import config_from_mapping
from storage_engine.errors import StorageIOError
from storage_engine.log.manager import LogManager
from storage_engine.server.broker import Broker
from storage_engine.server.catalog import create_topic
from storage_engine.server.groups import records as grec
from storage_engine.server.groups.state import Group, GroupState, IllegalStateTransition, JoinResult
from storage_engine.server.groups.store import OFFSETS_TOPIC
from storage_engine.server.transactions.coordinator import TXN_TOPIC
from storage_engine.server.transactions.state import Txn, TxnState
from tests.typed import present

pytestmark = pytest.mark.unit

NOW = 1_700_000_000_000
SESSION_MS, REBALANCE_MS, INITIAL_DELAY_MS = 10_000, 30_000, 3000

# Kafka's tables, written out here independently of the code under test
KAFKA_GROUP_PREVIOUS = {
    "Empty": {"PreparingRebalance"},
    "PreparingRebalance": {"Empty", "Stable", "CompletingRebalance"},
    "CompletingRebalance": {"PreparingRebalance"},
    "Stable": {"CompletingRebalance"},
    "Dead": {"Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead"},
}
KAFKA_TXN_PREVIOUS = {
    "EMPTY": {"EMPTY", "COMPLETE_COMMIT", "COMPLETE_ABORT"},
    "ONGOING": {"ONGOING", "EMPTY", "COMPLETE_COMMIT", "COMPLETE_ABORT"},
    "PREPARE_COMMIT": {"ONGOING"},
    "PREPARE_ABORT": {"ONGOING", "PREPARE_EPOCH_FENCE"},
    "COMPLETE_COMMIT": {"PREPARE_COMMIT"},
    "COMPLETE_ABORT": {"PREPARE_ABORT"},
    "DEAD": {"EMPTY", "COMPLETE_COMMIT", "COMPLETE_ABORT"},
    "PREPARE_EPOCH_FENCE": {"ONGOING"},
}


@pytest.mark.parametrize(("source", "target"), list(itertools.product(GroupState, GroupState)))
def test_a_group_moves_only_where_kafka_allows(source, target):
    g = Group("g", source)
    if source.value in KAFKA_GROUP_PREVIOUS[target.value]:
        g.transition_to(target, NOW)
        assert (g.state, g.state_ms) == (target, NOW)
    else:
        with pytest.raises(IllegalStateTransition, match=f"group 'g' cannot move from {source.value} to "
                                                         f"{target.value}"):
            g.transition_to(target, NOW)
        assert (g.state, g.state_ms) == (source, 0)


@pytest.mark.parametrize(("source", "target"), list(itertools.product(TxnState, TxnState)))
def test_a_transaction_moves_only_where_kafka_allows_and_only_once_written(source, target):
    t = Txn("t", 7, 3, 60_000, source, {("orders", 0)}, NOW - 5, NOW - 5)
    if source.name not in KAFKA_TXN_PREVIOUS[target.name]:
        with pytest.raises(IllegalStateTransition, match=f"transactional id 't' cannot move from {source.display} "
                                                         f"to {target.display}"):
            t.prepare_transition(target, NOW)
        assert (t.state, t.pending) == (source, None)
        return
    transit = t.prepare_transition(target, NOW, epoch=4, partitions=set())
    assert (t.state, t.epoch, t.partitions, t.update_ms) == (source, 3, {("orders", 0)}, NOW - 5), \
        "nothing changes before the record is written"
    assert transit.record().state == target.value and transit.record().producer_epoch == 4
    with pytest.raises(IllegalStateTransition, match="already moving"):
        t.prepare_transition(target, NOW)
    t.complete_transition(transit)
    assert (t.state, t.epoch, t.partitions, t.update_ms, t.pending) == (target, 4, set(), NOW, None)


def test_a_transition_that_was_not_prepared_is_refused_and_an_aborted_one_leaves_nothing():
    t = Txn("t", 7, 3, 60_000, TxnState.ONGOING, {("orders", 0)}, NOW, NOW)
    other = Txn("u", 7, 3, 60_000, TxnState.ONGOING).prepare_transition(TxnState.PREPARE_COMMIT, NOW)
    with pytest.raises(IllegalStateTransition, match="no move to PrepareCommit was prepared"):
        t.complete_transition(other)
    t.prepare_transition(TxnState.PREPARE_ABORT, NOW + 1, epoch=4)
    assert not t.accepts_appends() and t.fences(3), "appends are refused while the abort is written"
    t.abort_transition()
    assert (t.state, t.epoch, t.update_ms, t.accepts_appends(), t.fences(3)) == (TxnState.ONGOING, 3, NOW, True,
                                                                                  False)


# -- in process, on the broker's clock -----------------------------------------------------------------------------

def _run(tmp_path, clock: ManualClock, scenario: Callable[[Broker], Coroutine[Any, Any, Any]]) -> Any:
    config = config_from_mapping({"broker": {
        "log.dirs": [str(tmp_path / "logs")], "offsets.topic.num.partitions": 1,
        "transaction.state.log.num.partitions": 1, "group.initial.rebalance.delay.ms": INITIAL_DELAY_MS}})
    with LogManager.open(config) as mgr:
        broker = Broker(config, mgr, clock=clock)
        try:
            return asyncio.run(scenario(broker))
        finally:
            broker.close()


async def _join(broker: Broker, member_id: str = "", instance: str | None = None) -> asyncio.Task[JoinResult]:
    task = asyncio.get_running_loop().create_task(broker.groups.join(
        "g", member_id, instance, "client", "127.0.0.1", SESSION_MS, REBALANCE_MS, "consumer",
        [("range", b"meta")], require_known_member=False))
    for _ in range(3):
        await asyncio.sleep(0)          # the join is registered and waits for the rebalance
    return task


def _group_records(broker: Broker) -> list[grec.GroupRecord | None]:
    log = present(broker.manager.get_log(OFFSETS_TOPIC, 0))
    return [None if r.value is None else grec.parse_group_value(r.value) for r in log.read_records()
            if r.key is not None and isinstance(grec.parse_key(r.key), grec.GroupKey)]


def test_a_member_whose_session_ends_is_removed_and_the_group_left_empty(tmp_path):
    clock = ManualClock(NOW)

    async def scenario(broker: Broker) -> None:
        c = broker.groups
        joining = await _join(broker)
        assert c.groups["g"].state == GroupState.PREPARING_REBALANCE and not joining.done()
        clock.advance(INITIAL_DELAY_MS - 1)
        assert c.check_rebalances() == [], "the first rebalance waits group.initial.rebalance.delay.ms"
        clock.advance(1)
        assert c.check_rebalances() == ["g"]
        joined = await joining
        assert (joined["error_code"], joined["generation_id"]) == (0, 1)
        member = joined["member_id"]
        synced = await c.sync("g", 1, member, {member: b"assignment"})
        assert synced["error_code"] == 0 and c.groups["g"].state == GroupState.STABLE
        assert c.groups["g"].state_ms == NOW + INITIAL_DELAY_MS

        clock.advance(SESSION_MS - 1000)
        assert c.heartbeat("g", 1, member) == 0                 # the session starts again from here
        clock.advance(SESSION_MS)
        assert c.expire_sessions() == []                        # at its deadline, not past it
        clock.advance(1)
        assert c.expire_sessions() == [member]
        g = c.groups["g"]
        assert (g.state, g.generation, g.members, g.state_ms) == (GroupState.EMPTY, 2, {}, clock.milliseconds())
        await asyncio.gather(*(t for t in asyncio.all_tasks() if t is not asyncio.current_task()
                               and t.get_coro().__qualname__.endswith("_persist_quietly")))
        written = _group_records(broker)
        assert [(r.generation, [m.member_id for m in r.members]) for r in written if r is not None] == [
            (1, [member]), (2, [])], "the Stable generation with its member, then the Empty one"
        assert c.heartbeat("g", 1, member) == 25                # UNKNOWN_MEMBER_ID

    _run(tmp_path, clock, scenario)


def test_restored_members_sessions_begin_when_the_coordinator_starts_serving(tmp_path):
    """A Stable group's member is restored by the load; time spent before the listener starts (transactions
    recovered, a loaded machine) does not end its session: it starts when the coordinator serves."""
    clock = ManualClock(NOW)

    async def stable(broker: Broker) -> str:
        c = broker.groups
        joining = await _join(broker)
        clock.advance(INITIAL_DELAY_MS)
        assert c.check_rebalances() == ["g"]
        member = (await joining)["member_id"]
        assert (await c.sync("g", 1, member, {member: b"assignment"}))["error_code"] == 0
        assert c.groups["g"].state == GroupState.STABLE
        return str(member)

    member = _run(tmp_path, clock, stable)

    async def restart(broker: Broker) -> None:
        c = broker.groups
        c.load()
        assert list(c.groups["g"].members) == [member]
        clock.advance(SESSION_MS + 5000)                        # a slow start: longer than the session
        c.start()
        try:
            assert c.expire_sessions() == [], "the session starts when the coordinator serves"
            clock.advance(SESSION_MS)
            assert c.expire_sessions() == []
            clock.advance(1)
            assert c.expire_sessions() == [member], "a member that does not come back still expires"
        finally:
            await c.stop()

    _run(tmp_path, clock, restart)


def test_a_restored_static_member_is_fenced_only_by_another_member_id_while_it_holds_the_instance(tmp_path):
    clock = ManualClock(NOW)

    async def stable(broker: Broker) -> str:
        c = broker.groups
        joining = await _join(broker, instance="static-1")
        clock.advance(INITIAL_DELAY_MS)
        assert c.check_rebalances() == ["g"]
        member = (await joining)["member_id"]
        assert (await c.sync("g", 1, member, {member: b"assignment"}, "static-1"))["error_code"] == 0
        return str(member)

    member = _run(tmp_path, clock, stable)

    async def restart(broker: Broker) -> None:
        c = broker.groups
        c.load()
        c.start()
        try:
            assert c.heartbeat("g", 1, member, "static-1") == 0, "the restored member keeps its place"
            # a client whose own session ended heartbeats with no member id: the instance is still held
            assert c.heartbeat("g", 1, "", "static-1") == 82                  # FENCED_INSTANCE_ID
            assert c.heartbeat("g", 1, "other", "static-1") == 82
            assert c.heartbeat("g", 1, member, "static-1") == 0, "the fenced requests took nothing from it"
            # a JoinGroup with no member id takes the instance over
            answer = await (await _join(broker, instance="static-1"))
            assert answer["error_code"] == 0 and answer["member_id"] != member
            assert list(c.groups["g"].members) == [answer["member_id"]]
            assert c.heartbeat("g", answer["generation_id"], member, "static-1") == 82
            clock.advance(SESSION_MS + 1)
            assert c.expire_sessions() == [answer["member_id"]]
            assert c.heartbeat("g", 1, "", "static-1") == 25, "no member holds the instance: UNKNOWN_MEMBER_ID"
        finally:
            await c.stop()

    _run(tmp_path, clock, restart)


def test_a_member_that_does_not_rejoin_within_the_rebalance_timeout_is_dropped(tmp_path):
    clock = ManualClock(NOW)

    async def scenario(broker: Broker) -> None:
        c = broker.groups
        first, second = await _join(broker), await _join(broker)
        clock.advance(INITIAL_DELAY_MS)
        assert c.check_rebalances() == ["g"]
        a, b = (await first)["member_id"], (await second)["member_id"]
        leader = present(c.groups["g"].leader)
        assert (await c.sync("g", 1, leader, {a: b"A", b: b"B"}))["error_code"] == 0

        rejoining = await _join(broker, member_id=a)             # a rejoins; b keeps heartbeating, never rejoins
        assert c.groups["g"].state == GroupState.PREPARING_REBALANCE
        clock.advance(REBALANCE_MS - 1)
        assert c.heartbeat("g", 1, b) == 27                     # REBALANCE_IN_PROGRESS
        assert c.check_rebalances() == []
        clock.advance(1)
        assert c.check_rebalances() == ["g"]
        answer = await rejoining
        assert (answer["error_code"], answer["generation_id"], answer["leader"]) == (0, 2, a)
        assert [m["member_id"] for m in answer["members"]] == [a]
        g = c.groups["g"]
        assert (g.state, list(g.members)) == (GroupState.COMPLETING_REBALANCE, [a])
        assert c.heartbeat("g", 1, b) == 25                     # UNKNOWN_MEMBER_ID: b is gone

    _run(tmp_path, clock, scenario)


def test_a_transaction_past_its_timeout_is_aborted_and_its_producer_fenced(tmp_path):
    clock = ManualClock(NOW)

    async def scenario(broker: Broker) -> None:
        c = broker.transactions
        await broker.call(create_topic, broker, "orders", 1, {})
        code, pid, epoch = await c.init_producer_id("t", 5000, -1, -1, 4)
        assert (code, epoch) == (0, 0)
        clock.advance(100)
        assert await c.add_partitions("t", pid, epoch, [("orders", 0)], 3) == {("orders", 0): 0}
        t = c.txns["t"]
        assert (t.state, t.start_ms) == (TxnState.ONGOING, NOW + 100)
        clock.advance(5000)
        await c.sweep(clock.milliseconds())
        assert t.state == TxnState.ONGOING, "not past its timeout yet"
        clock.advance(1)
        await c.sweep(clock.milliseconds())
        assert (t.state, t.epoch, t.partitions, t.update_ms) == (TxnState.COMPLETE_ABORT, 1, set(),
                                                                 clock.milliseconds())
        assert c.begin_append("t", pid, epoch, "orders", 0) == 47            # INVALID_PRODUCER_EPOCH
        assert await c.end_txn("t", pid, epoch, True, 3) == 90               # PRODUCER_FENCED

    _run(tmp_path, clock, scenario)


def test_a_change_whose_record_cannot_be_written_leaves_the_transaction_as_it_was(tmp_path):
    clock = ManualClock(NOW)

    async def scenario(broker: Broker) -> None:
        c = broker.transactions
        await broker.call(create_topic, broker, "orders", 1, {})
        _, pid, epoch = await c.init_producer_id("t", 60_000, -1, -1, 4)
        assert await c.add_partitions("t", pid, epoch, [("orders", 0)], 3) == {("orders", 0): 0}
        t = c.txns["t"]
        before = (t.state, t.epoch, t.partitions, t.start_ms, t.update_ms)
        records = len(list(present(broker.manager.get_log(TXN_TOPIC, 0)).read_records()))

        def failing_append(txn_id: str, value: bytes | None) -> None:
            raise StorageIOError("the disk is gone")
        writer, c._append = c._append, failing_append     # type: ignore[method-assign]
        clock.advance(10)
        assert await c.end_txn("t", pid, epoch, True, 3) == 15              # COORDINATOR_NOT_AVAILABLE
        assert (t.state, t.epoch, t.partitions, t.start_ms, t.update_ms) == before and t.pending is None
        code, _, _ = await c.init_producer_id("t", 60_000, pid, epoch, 4)  # a fencing abort cannot be written
        assert code == 51                                                  # CONCURRENT_TRANSACTIONS
        assert (t.state, t.epoch, t.last_epoch) == (TxnState.ONGOING, epoch, -1), "the producer is not fenced"
        assert len(list(present(broker.manager.get_log(TXN_TOPIC, 0)).read_records())) == records

        c._append = writer                                # type: ignore[method-assign]
        assert await c.end_txn("t", pid, epoch, True, 3) == 0
        assert t.state == TxnState.COMPLETE_COMMIT and t.update_ms == NOW + 10

    _run(tmp_path, clock, scenario)


def test_a_group_deletion_whose_tombstones_cannot_be_written_leaves_the_group_as_it_was(tmp_path):
    clock = ManualClock(NOW)

    async def scenario(broker: Broker) -> None:
        c = broker.groups
        assert await c.commit("g", -1, "", [("orders", 0, 42, -1, None)]) == [0]
        g = c.groups["g"]
        assert (g.state, g.state_ms) == (GroupState.EMPTY, NOW)

        def failing_append(group_id: str, records: list[Any], producer: Any) -> int:
            raise StorageIOError("the disk is gone")
        writer, c._append = c._append, failing_append     # type: ignore[method-assign]
        clock.advance(10)
        assert await c.delete("g") == 15                                    # COORDINATOR_NOT_AVAILABLE
        assert c.groups["g"] is g and c.group("g") is g
        assert (g.state, g.pending_state, g.state_ms, g.offsets[("orders", 0)].offset) == (
            GroupState.EMPTY, None, NOW, 42), "nothing changed, not even the state's timestamp"

        c._append = writer                                # type: ignore[method-assign]
        assert await c.delete("g") == 0
        assert "g" not in c.groups and g.state == GroupState.DEAD
        assert await c.delete("g") == 69                                    # GROUP_ID_NOT_FOUND

    _run(tmp_path, clock, scenario)


def test_appends_to_added_partitions_go_on_while_another_partition_is_being_added(tmp_path):
    """A producer adds a partition while its appends to the partitions already added are in flight (librdkafka
    does): those are admitted while the Ongoing -> Ongoing record is written; the new partition only once it is;
    nothing once PrepareCommit is pending."""
    clock = ManualClock(NOW)

    async def scenario(broker: Broker) -> None:
        c = broker.transactions
        await broker.call(create_topic, broker, "orders", 2, {})
        _, pid, epoch = await c.init_producer_id("t", 60_000, -1, -1, 4)
        assert await c.add_partitions("t", pid, epoch, [("orders", 0)], 3) == {("orders", 0): 0}
        t = c.txns["t"]
        writing, release = threading.Event(), threading.Event()
        writer = c._append

        def held_append(txn_id: str, value: bytes | None) -> None:
            writing.set()
            release.wait(30)
            writer(txn_id, value)
        c._append = held_append                           # type: ignore[method-assign]
        adding = asyncio.get_running_loop().create_task(c.add_partitions("t", pid, epoch, [("orders", 1)], 3))
        while not writing.is_set():
            await asyncio.sleep(0.01)
        assert (t.state, t.pending_state) == (TxnState.ONGOING, TxnState.ONGOING)
        assert c.begin_append("t", pid, epoch, "orders", 0) == 0            # admitted
        c.end_append("t")
        assert c.begin_append("t", pid, epoch, "orders", 1) == 48           # INVALID_TXN_STATE: not added yet
        release.set()
        assert await adding == {("orders", 1): 0}
        assert c.begin_append("t", pid, epoch, "orders", 1) == 0
        c.end_append("t")

        writing.clear()
        release.clear()
        ending = asyncio.get_running_loop().create_task(c.end_txn("t", pid, epoch, True, 3))
        while not writing.is_set():
            await asyncio.sleep(0.01)
        assert (t.state, t.pending_state) == (TxnState.ONGOING, TxnState.PREPARE_COMMIT)
        assert c.begin_append("t", pid, epoch, "orders", 0) == 48           # the transaction is ending
        release.set()
        assert await ending == 0 and t.state == TxnState.COMPLETE_COMMIT

    _run(tmp_path, clock, scenario)
