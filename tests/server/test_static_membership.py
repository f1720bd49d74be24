"""Static membership (KIP-345) as Kafka's classic group coordinator does it (``GroupMetadataManager
.updateStaticMemberThenRebalanceOrCompleteJoin``, ``ClassicGroup.replaceStaticMember``), in process on a real log
manager with a ManualClock (no test sleeps for a timeout), then with real librdkafka consumers on the wire:

* a known group.instance.id that joins a Stable group with no member id (its process restarted) takes its old
  place under a new member id: no rebalance, the same generation, the other members untouched, its old
  assignment back in SyncGroup, the group's record rewritten with the new id; the old id is fenced
  (FENCED_INSTANCE_ID), and a JoinGroup or SyncGroup of the old id still waiting is answered so;
* the leader's restart: v9+ answers it with the members and ``skip_assignment``; older versions name the old
  leader id, so the client syncs as a follower and keeps its assignment;
* a record that cannot be written puts the old member back (COORDINATOR_NOT_AVAILABLE);
* a rejoin in CompletingRebalance, or one that changes the group's protocol, rebalances;
* a static member that does not rejoin within the rebalance timeout keeps its place (a dynamic one is dropped);
* a known follower rejoining a Stable group with the same metadata gets the current generation, the leader's
  JoinGroup always rebalances.
"""
from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from storage_engine.clock import ManualClock
from storage_engine.config_file import config_from_mapping
from storage_engine.errors import StorageIOError
from storage_engine.log.manager import LogManager
from storage_engine.server.broker import Broker
from storage_engine.server.groups import records as grec
from storage_engine.server.groups.state import GroupState, JoinResult
from storage_engine.server.groups.store import OFFSETS_TOPIC
from tests.typed import present

NOW = 1_700_000_000_000
SESSION_MS, REBALANCE_MS, INITIAL_DELAY_MS = 10_000, 30_000, 3000
FENCED, UNKNOWN_MEMBER, REBALANCING, NOT_AVAILABLE = 82, 25, 27, 15


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


async def _join(broker: Broker, member_id: str = "", instance: str | None = None, protocols: Any = None,
                v9: bool = True) -> asyncio.Task[JoinResult]:
    task = asyncio.get_running_loop().create_task(broker.groups.join(
        "g", member_id, instance, "client", "127.0.0.1", SESSION_MS, REBALANCE_MS, "consumer",
        protocols or [("range", b"meta")], require_known_member=False, skip_assignment_ok=v9))
    for _ in range(3):
        await asyncio.sleep(0)
    return task


async def _stable(broker: Broker, clock: ManualClock, instances: list[str | None]) -> list[str]:
    """A Stable group at generation 1 with one member per entry (``None``: dynamic); member i is assigned
    ``b"assignment-<i>"``. Returns the member ids, the leader first."""
    c = broker.groups
    joins = [await _join(broker, instance=i) for i in instances]
    clock.advance(INITIAL_DELAY_MS)
    assert c.check_rebalances() == ["g"]
    answers = [await j for j in joins]
    assert {a["generation_id"] for a in answers} == {1}
    ids = [str(a["member_id"]) for a in answers]
    leader = answers[0]["leader"]
    assert leader == ids[0]
    syncs = [asyncio.get_running_loop().create_task(c.sync("g", 1, m, {} if m != leader else {
        mid: f"assignment-{n}".encode() for n, mid in enumerate(ids)}, i)) for m, i in zip(ids, instances)]
    assert [(await s)["error_code"] for s in syncs] == [0] * len(ids)
    assert c.groups["g"].state == GroupState.STABLE
    return ids


def _group_records(broker: Broker) -> list[grec.GroupRecord]:
    log = present(broker.manager.get_log(OFFSETS_TOPIC, 0))
    return [grec.parse_group_value(r.value) for r in log.read_records()
            if r.key is not None and r.value is not None and isinstance(grec.parse_key(r.key), grec.GroupKey)]


@pytest.mark.unit
def test_a_restarted_static_follower_takes_its_place_back_with_no_rebalance(tmp_path):
    clock = ManualClock(NOW)

    async def scenario(broker: Broker) -> None:
        c = broker.groups
        a, b = await _stable(broker, clock, ["inst-a", "inst-b"])
        written = len(_group_records(broker))
        answer = await (await _join(broker, instance="inst-b"))     # the restarted process: no member id
        new_b = answer["member_id"]
        assert answer["error_code"] == 0 and new_b != b
        assert (answer["generation_id"], answer["leader"], answer["members"]) == (1, a, ())
        g = c.groups["g"]
        assert (g.state, g.generation, g.leader) == (GroupState.STABLE, 1, a), "no rebalance"
        assert list(g.members) == [a, new_b]
        assert c.heartbeat("g", 1, a, "inst-a") == 0, "the other member is not asked to rejoin"
        synced = await c.sync("g", 1, new_b, {}, "inst-b")
        assert (synced["error_code"], synced["assignment"]) == (0, b"assignment-1"), "its old assignment back"
        assert c.heartbeat("g", 1, b, "inst-b") == FENCED, "the old member id is fenced"
        assert (await c.sync("g", 1, b, {}, "inst-b"))["error_code"] == FENCED
        assert c.leave("g", b, "inst-b") == FENCED
        records = _group_records(broker)
        assert len(records) == written + 1, "the group's record is written with the new member id"
        assert [(m.member_id, m.group_instance_id, m.assignment) for m in records[-1].members] == [
            (a, "inst-a", b"assignment-0"), (new_b, "inst-b", b"assignment-1")]
        assert records[-1].generation == 1

    _run(tmp_path, clock, scenario)


@pytest.mark.unit
@pytest.mark.parametrize("v9", [True, False])
def test_a_restarted_static_leader_keeps_the_assignment(tmp_path, v9):
    """v9+: the leader gets the members and skip_assignment; before, the answer names the old leader id so the
    client does not assign (it syncs as a follower and gets its assignment back)."""
    clock = ManualClock(NOW)

    async def scenario(broker: Broker) -> None:
        c = broker.groups
        a, b = await _stable(broker, clock, ["inst-a", "inst-b"])
        answer = await (await _join(broker, instance="inst-a", v9=v9))
        new_a = answer["member_id"]
        g = c.groups["g"]
        assert (g.state, g.generation, g.leader) == (GroupState.STABLE, 1, new_a)
        if v9:
            assert (answer["leader"], answer["skip_assignment"]) == (new_a, True)
            assert sorted(m["member_id"] for m in answer["members"]) == sorted([new_a, b])
        else:
            assert (answer["leader"], answer.get("skip_assignment", False), answer["members"]) == (a, False, ())
        synced = await c.sync("g", 1, new_a, {}, "inst-a")
        assert (synced["error_code"], synced["assignment"]) == (0, b"assignment-0")
        assert c.heartbeat("g", 1, b, "inst-b") == 0

    _run(tmp_path, clock, scenario)


@pytest.mark.unit
def test_a_static_rejoin_whose_record_cannot_be_written_puts_the_old_member_back(tmp_path):
    clock = ManualClock(NOW)

    async def scenario(broker: Broker) -> None:
        c = broker.groups
        a, b = await _stable(broker, clock, ["inst-a", "inst-b"])

        def failing_append(group_id: str, records: list[Any], producer: Any) -> int:
            raise StorageIOError("the disk is gone")

        real, c._append = c._append, failing_append          # type: ignore[method-assign]
        answer = await (await _join(broker, instance="inst-b"))
        c._append = real                                      # type: ignore[method-assign]
        assert (answer["error_code"], answer["member_id"]) == (NOT_AVAILABLE, "")
        assert list(c.groups["g"].members) == [a, b], "the old member holds the instance again"
        assert c.heartbeat("g", 1, b, "inst-b") == 0
        synced = await c.sync("g", 1, b, {}, "inst-b")
        assert synced["assignment"] == b"assignment-1"

    _run(tmp_path, clock, scenario)


@pytest.mark.unit
def test_a_static_rejoin_while_completing_rebalances_and_fences_the_old_ids_wait(tmp_path):
    clock = ManualClock(NOW)

    async def scenario(broker: Broker) -> None:
        c = broker.groups
        a, b = await _stable(broker, clock, ["inst-a", "inst-b"])
        # the leader rejoins: a rebalance; both rejoin, the group is CompletingRebalance at generation 2
        ja, jb = await _join(broker, a, "inst-a"), await _join(broker, b, "inst-b")
        assert c.groups["g"].state == GroupState.COMPLETING_REBALANCE
        assert ((await ja)["generation_id"], (await jb)["generation_id"]) == (2, 2)
        waiting = asyncio.get_running_loop().create_task(c.sync("g", 2, b, {}, "inst-b"))
        await asyncio.sleep(0)
        restarted = await _join(broker, instance="inst-b")
        assert (await waiting)["error_code"] == FENCED, "the old id's SyncGroup is answered FENCED_INSTANCE_ID"
        assert c.groups["g"].state == GroupState.PREPARING_REBALANCE, "the leader may be assigning to the old id"
        ja = await _join(broker, a, "inst-a")
        answer, leader = await restarted, await ja
        assert (answer["error_code"], answer["generation_id"], leader["generation_id"]) == (0, 3, 3)
        assert sorted(m["member_id"] for m in leader["members"]) == sorted([a, answer["member_id"]])

    _run(tmp_path, clock, scenario)


@pytest.mark.unit
def test_a_static_rejoin_that_changes_the_protocol_rebalances(tmp_path):
    clock = ManualClock(NOW)

    async def scenario(broker: Broker) -> None:
        c = broker.groups
        (a,) = await _stable(broker, clock, ["inst-a"])
        restarted = await _join(broker, instance="inst-a", protocols=[("roundrobin", b"m"), ("range", b"m")])
        g = c.groups["g"]
        answer = await restarted         # a new generation: its only member rejoined, so the join completes at once
        assert g.state == GroupState.COMPLETING_REBALANCE
        assert (answer["error_code"], answer["generation_id"], answer["protocol_name"]) == (0, 2, "roundrobin")
        assert list(g.members) == [answer["member_id"]] and answer["member_id"] != a

    _run(tmp_path, clock, scenario)


@pytest.mark.unit
def test_a_silent_static_member_keeps_its_place_through_a_rebalance_until_its_session_ends(tmp_path):
    clock = ManualClock(NOW)

    async def scenario(broker: Broker) -> None:
        c = broker.groups
        a, s, d = await _stable(broker, clock, ["inst-a", "inst-s", None])
        rejoin = await _join(broker, a, "inst-a")                # the leader's rejoin starts a rebalance
        for _ in range(3):
            clock.advance(SESSION_MS - 1)
            assert c.heartbeat("g", 1, s, "inst-s") == REBALANCING    # s stays alive but does not rejoin
        clock.advance(REBALANCE_MS - 3 * (SESSION_MS - 1))
        assert c.check_rebalances() == ["g"]
        answer = await rejoin
        g = c.groups["g"]
        assert (answer["generation_id"], list(g.members)) == (2, [a, s]), "the dynamic member is dropped"
        assert [m["member_id"] for m in answer["members"]] == [a, s]
        assert c.heartbeat("g", 1, s, "inst-s") == 22, "ILLEGAL_GENERATION: the silent member must rejoin"
        assert c.heartbeat("g", 2, d) == UNKNOWN_MEMBER
        clock.advance(SESSION_MS - 1)
        assert c.heartbeat("g", 2, a, "inst-a") == 0
        clock.advance(2)
        assert c.expire_sessions() == [s], "its session ends: now it goes"

    _run(tmp_path, clock, scenario)


@pytest.mark.unit
def test_a_known_follower_rejoining_a_stable_group_gets_the_current_generation(tmp_path):
    clock = ManualClock(NOW)

    async def scenario(broker: Broker) -> None:
        c = broker.groups
        a, b = await _stable(broker, clock, [None, None])
        answer = await (await _join(broker, b))
        assert (answer["error_code"], answer["generation_id"], answer["members"]) == (0, 1, ())
        assert c.groups["g"].state == GroupState.STABLE
        changed = await _join(broker, b, protocols=[("range", b"other topics")])
        assert c.groups["g"].state == GroupState.PREPARING_REBALANCE, "changed metadata rebalances"
        assert c.heartbeat("g", 1, a) == REBALANCING
        await _join(broker, a)
        assert (await changed)["generation_id"] == 2
        # the instance id of a member that has none (or of nobody) is unknown
        assert (await (await _join(broker, a, "inst-x")))["error_code"] == UNKNOWN_MEMBER

    _run(tmp_path, clock, scenario)


# -- with librdkafka on the wire -----------------------------------------------------------------------------------

def _last_group_record(broker: Any, group: str) -> grec.GroupRecord:
    config = config_from_mapping({"broker": {"log.dirs": broker.log_dirs}})
    found: list[grec.GroupRecord] = []
    with LogManager.open(config) as mgr:
        for p in range(3):
            log = mgr.get_log(OFFSETS_TOPIC, p)
            if log is None:
                continue
            for r in log.read_records():
                key = grec.parse_key(r.key) if r.key is not None else None
                if isinstance(key, grec.GroupKey) and key.group == group and r.value is not None:
                    found.append(grec.parse_group_value(r.value))
    return found[-1]


@pytest.mark.e2e
def test_a_restarted_static_leader_with_librdkafka_gets_its_partitions_back_with_no_rebalance(broker_factory):
    from confluent_kafka import Consumer
    from confluent_kafka.admin import AdminClient, NewTopic

    from tests.server.broker_proc import wait_until

    broker = broker_factory(broker={"offsets.topic.num.partitions": 3, "group.initial.rebalance.delay.ms": 0})
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("st", 4, 1)])["st"].result(60)
    events: dict[str, list[str]] = {}

    def consumer(instance: str) -> Any:
        c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "statics", "group.instance.id": instance,
                      "session.timeout.ms": 30_000, "auto.offset.reset": "earliest", "enable.auto.commit": False,
                      "partition.assignment.strategy": "range"})
        events[instance] = []
        c.subscribe(["st"], on_assign=lambda _c, ps: events[instance].append(
            "assign " + ",".join(str(p.partition) for p in ps)),
            on_revoke=lambda _c, ps: events[instance].append("revoke"))
        return c

    live = {"a": consumer("a"), "b": consumer("b")}

    def poll_all() -> None:
        for c in live.values():
            c.poll(0.05)

    def settled() -> bool:
        poll_all()
        got = {i: c.assignment() for i, c in live.items()}
        if not all(got.values()) or sum(len(v) for v in got.values()) != 4:
            return False
        record = _last_group_record(broker, "statics")
        return len(record.members) == 2 and all(m.assignment for m in record.members)

    try:
        wait_until("both members assigned", settled)
        before = _last_group_record(broker, "statics")
        leader = next(m for m in before.members if m.member_id == before.leader)
        restarted, other = present(leader.group_instance_id), "b" if leader.group_instance_id == "a" else "a"
        partitions = sorted(p.partition for p in live[restarted].assignment())
        other_events = list(events[other])
        live.pop(restarted).close()           # a static member's close sends no LeaveGroup: it keeps its place
        live[restarted] = consumer(restarted)
        def assigned() -> bool:
            poll_all()
            return bool(live[restarted].assignment())

        wait_until("the restarted leader's partitions", assigned)
        assert sorted(p.partition for p in live[restarted].assignment()) == partitions
        after = _last_group_record(broker, "statics")
        assert after.generation == before.generation, "no rebalance: the same generation"
        ids = {m.group_instance_id: m.member_id for m in after.members}
        old = {m.group_instance_id: m.member_id for m in before.members}
        assert ids[other] == old[other] and ids[restarted] != old[restarted]
        assert after.leader == ids[restarted], "the leader's place went to its new member id"
        for _ in range(20):
            poll_all()
        assert events[other] == other_events, "the other member saw no revoke and no new assignment"
        assert events[restarted] == [f"assign {','.join(str(p) for p in partitions)}"]
    finally:
        for c in live.values():
            c.close()
