"""The classic group protocol's coordinator (Kafka's ``GroupCoordinator`` / ``ClassicGroup``), for every group:
this node is the coordinator of all of them. This module holds membership and rebalances (JoinGroup, SyncGroup,
Heartbeat, LeaveGroup, session expiry); committed offsets are :mod:`.offsets`, the ``__consumer_offsets`` records
and the load at start :mod:`.store`, the states and their allowed moves :mod:`.state`.

States: **Empty** (no members; committed offsets may exist) -> a JoinGroup -> **PreparingRebalance** (known
members have up to the largest rebalance timeout to rejoin; a group's first rebalance waits
``group.initial.rebalance.delay.ms`` for more members) -> **CompletingRebalance** (JoinGroup answered: the leader
gets the members and their metadata; the group waits for the leader's SyncGroup) -> **Stable** (assignments
written, then handed out; heartbeats keep members alive). A join, a leave or a member whose session expired
sends the group back to PreparingRebalance, and a rebalance that ends with no member leaves it Empty; **Dead**
is a deleted group. The generation grows with each completed join. A known member's JoinGroup is answered as
Kafka's ``classicGroupJoinExistingMember`` answers it: a follower rejoining a Stable (or CompletingRebalance)
group with unchanged metadata gets the current generation back, the leader's JoinGroup or changed metadata
rebalances.

Static members (``group.instance.id``, KIP-345): a known instance that joins with no member id (its process
restarted) takes its old member's place under a new id, with the old one's assignment; in a Stable group whose
protocol would not change this is no rebalance at all (the group's record is written with the new id first),
in CompletingRebalance it rebalances. The old id is fenced (FENCED_INSTANCE_ID), and a static member that does
not rejoin in time keeps its place until its session ends.

Time is the broker's clock (:mod:`storage_engine.clock`): session deadlines, the initial delay and the
rebalance timeout are epoch milliseconds from it, checked every :data:`EXPIRY_CHECK_S` (sessions) and
:data:`REBALANCE_POLL_S` (a rebalance under way); :meth:`GroupCoordinator.expire_sessions` and
:meth:`GroupCoordinator.check_rebalances` run the same checks on demand.

A group that becomes Empty is written after the change: its members are gone whatever the write does, so the
state in memory stands and a failed write is logged (the next change writes again).

Everything here runs on the event loop; only appends and the load run in the broker's thread pool.
"""
from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Any

from kio.schema.errors import ErrorCode

from storage_engine.server.groups import records as rec
from storage_engine.server.groups.offsets import GroupOffsets
from storage_engine.server.groups.state import (COMPLETING, DEAD, EMPTY, PREPARING, STABLE, Group, JoinResult, Member,
                                                SyncResult)
from storage_engine.server.responses.groups import JoinGroupResponseMember
from storage_engine.server.groups.store import OFFSETS_TOPIC

logger = logging.getLogger(__name__)

__all__ = ["OFFSETS_TOPIC", "GroupCoordinator"]

EXPIRY_CHECK_S = 0.5
REBALANCE_POLL_S = 0.05


def present_holder(g: Group, instance_id: str | None) -> str:
    m = g.static_member(instance_id)
    return m.member_id if m is not None else "nobody"


class GroupCoordinator(GroupOffsets):
    def __init__(self, broker: Any):
        super().__init__(broker)
        self._expiry: asyncio.Task[None] | None = None
        self._retention: asyncio.Task[None] | None = None

    # -- running ------------------------------------------------------------------------------------------------
    def start(self) -> None:
        """Begin serving: the sessions of the members :meth:`load` restored start now, as Kafka schedules their
        heartbeat expiry when the coordinator's load completes and it answers; the time spent between the load
        and the listener's start (transactions recovered, a slow machine) is not counted against clients that
        could not reach the broker yet."""
        now = self.now_ms()
        for g in self.groups.values():
            for m in g.members.values():
                m.touch(now)
        loop = asyncio.get_running_loop()
        self._expiry = loop.create_task(self._expire_loop())
        self._retention = loop.create_task(self._retention_loop())

    async def stop(self) -> None:
        for task in (self._expiry, self._retention):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        for g in self.groups.values():
            if g.rebalance is not None:
                g.rebalance.cancel()

    async def _expire_loop(self) -> None:
        while True:
            await asyncio.sleep(EXPIRY_CHECK_S)
            self.expire_sessions()

    def expire_sessions(self) -> list[str]:
        """Remove every member whose session ended (no heartbeat within its session timeout) and that is not
        waiting in a JoinGroup or SyncGroup; their groups rebalance. Returns the members removed."""
        now = self.now_ms()
        removed = []
        for g in list(self.groups.values()):
            expired = [m for m in g.members.values()
                       if m.deadline_ms < now and m.join_waiter is None and m.sync_waiter is None]
            for m in expired:
                logger.info("group %s: member %s left (no heartbeat within %d ms)", g.group_id, m.member_id,
                            m.session_timeout_ms)
                self._remove(g, m.member_id)
                removed.append(m.member_id)
            if expired:
                self._after_members_left(g)
        return removed

    # -- membership --------------------------------------------------------------------------------------------
    def _remove(self, g: Group, member_id: str, error: ErrorCode = ErrorCode.unknown_member_id) -> None:
        m = g.members.pop(member_id, None)
        if m is None:
            return
        if m.join_waiter is not None and not m.join_waiter.done():
            m.join_waiter.set_result({"error_code": error})
        if m.sync_waiter is not None and not m.sync_waiter.done():
            m.sync_waiter.set_result({"error_code": error})
        if g.leader == member_id:
            g.leader = next(iter(g.members), None)

    def _after_members_left(self, g: Group) -> None:
        if g.state == PREPARING:
            self._maybe_complete_join(g)
        elif g.state in (STABLE, COMPLETING):
            if g.members:
                self._prepare_rebalance(g)
            else:
                # as Kafka: to PreparingRebalance, where a join with nobody left completes at once, to Empty
                g.transition_to(PREPARING, self.now_ms())
                self._complete_join(g)

    async def _persist_quietly(self, g: Group) -> None:
        try:
            await self.persist(g.group_id, [self.group_record(g)])
        except Exception as exc:   # noqa: BLE001 - the in-memory state stands; the next change writes again
            logger.warning("group %s: cannot write its metadata: %s", g.group_id, exc)

    def _prepare_rebalance(self, g: Group) -> None:
        for m in g.members.values():     # a pending SyncGroup learns the group moved on
            if m.sync_waiter is not None and not m.sync_waiter.done():
                m.sync_waiter.set_result({"error_code": ErrorCode.rebalance_in_progress})
            m.sync_waiter = None
        first = g.state == EMPTY
        now = self.now_ms()
        g.transition_to(PREPARING, now)
        g.rebalance_deadline_ms = now + max((m.rebalance_timeout_ms for m in g.members.values()), default=0)
        g.not_before_ms = now + (self.initial_delay_ms if first else 0)
        if g.rebalance is not None:
            g.rebalance.cancel()
        g.rebalance = asyncio.get_running_loop().create_task(self._rebalance_timer(g))

    async def _rebalance_timer(self, g: Group) -> None:
        while g.state == PREPARING and not self._check_rebalance(g):
            wait_ms = g.not_before_ms - self.now_ms()
            await asyncio.sleep(min(REBALANCE_POLL_S, max(0.0, wait_ms / 1000) or REBALANCE_POLL_S))

    def check_rebalances(self) -> list[str]:
        """Complete every rebalance that is due now (all members rejoined after the initial delay, or the
        rebalance timeout passed); returns the groups whose join completed."""
        return [g.group_id for g in list(self.groups.values()) if g.state == PREPARING and self._check_rebalance(g)]

    def _check_rebalance(self, g: Group) -> bool:
        """Complete the join of a PreparingRebalance group if it is due; True if it was."""
        now = self.now_ms()
        if now < g.not_before_ms:
            return False
        if now >= g.rebalance_deadline_ms:
            # Kafka's completeClassicGroupJoin: dynamic members that did not rejoin are dropped; a static one
            # keeps its place (and its assignment) until its session ends
            for m in [m for m in g.members.values() if m.join_waiter is None and m.instance_id is None]:
                logger.info("group %s: member %s did not rejoin within the rebalance timeout", g.group_id,
                            m.member_id)
                self._remove(g, m.member_id)
            if g.members and not any(m.join_waiter is not None for m in g.members.values()):
                # nobody rejoined (only static members, silent): wait another rebalance timeout, as Kafka
                # reschedules, until their sessions end
                logger.info("group %s: no member rejoined; the rebalance waits", g.group_id)
                g.rebalance_deadline_ms = now + max(m.rebalance_timeout_ms for m in g.members.values())
                return False
            self._complete_join(g)
            return True
        if self._all_joined(g):
            self._complete_join(g)
            return True
        return False

    @staticmethod
    def _all_joined(g: Group) -> bool:
        return bool(g.members) and all(m.join_waiter is not None for m in g.members.values())

    def _maybe_complete_join(self, g: Group) -> None:
        if g.state == PREPARING and self.now_ms() >= g.not_before_ms and self._all_joined(g):
            self._complete_join(g)
        elif g.state == PREPARING and not g.members:
            self._complete_join(g)

    def _complete_join(self, g: Group) -> None:
        if g.rebalance is not None and g.rebalance is not asyncio.current_task():
            g.rebalance.cancel()
        g.rebalance = None
        g.generation += 1
        now = self.now_ms()
        if not g.members:
            g.protocol, g.leader = None, None
            g.transition_to(EMPTY, now)
            asyncio.get_running_loop().create_task(self._persist_quietly(g))
            return
        g.protocol = self._select_protocol(g)
        leader = g.members.get(g.leader) if g.leader is not None else None
        if leader is None or leader.join_waiter is None:
            # Kafka's maybeElectNewJoinedLeader: a leader that did not rejoin gives its place to one that did
            g.leader = next((m.member_id for m in g.members.values() if m.join_waiter is not None),
                            next(iter(g.members)))
        g.transition_to(COMPLETING, now)
        everyone = tuple(JoinGroupResponseMember(member_id=m.member_id, group_instance_id=m.instance_id,
                                                 metadata=m.metadata(g.protocol)) for m in g.members.values())
        for m in g.members.values():
            m.touch(now)
            waiter, m.join_waiter = m.join_waiter, None
            if waiter is not None and not waiter.done():
                waiter.set_result({"error_code": ErrorCode.none, "generation_id": g.generation,
                                   "protocol_type": g.protocol_type, "protocol_name": g.protocol, "leader": g.leader,
                                   "member_id": m.member_id, "members": everyone if m.member_id == g.leader else ()})
        logger.info("group %s: generation %d with %d member(s), protocol %s, leader %s", g.group_id, g.generation,
                    len(g.members), g.protocol, g.leader)

    @staticmethod
    def _select_protocol(g: Group) -> str | None:
        """Kafka's vote: the protocols every member supports, each member voting for its first such one."""
        common = None
        for m in g.members.values():
            names = {name for name, _ in m.protocols}
            common = names if common is None else common & names
        if not common:
            return None
        votes: dict[str, int] = {}
        for m in g.members.values():
            choice = next(name for name, _ in m.protocols if name in common)
            votes[choice] = votes.get(choice, 0) + 1
        return max(votes, key=lambda n: votes[n])

    def summary(self) -> list[dict[str, Any]]:
        """Every group for the listener's status (the Storage view): state, members, the topics each subscribes
        to and what each is assigned, committed offsets."""
        out = []
        for g in sorted(self.groups.values(), key=lambda g: g.group_id):
            if g.state == DEAD:
                continue
            offsets: dict[str, dict[str, int]] = {}
            for (topic, p), v in sorted(g.offsets.items()):
                offsets.setdefault(topic, {})[str(p)] = v.offset
            out.append({"group_id": g.group_id, "state": g.state.value, "protocol_type": g.protocol_type or "",
                        "protocol": g.protocol or "", "generation": g.generation,
                        "members": [{"member_id": m.member_id, "client_id": m.client_id, "client_host": m.client_host,
                                     "group_instance_id": m.instance_id,
                                     "assignment": rec.assigned_partitions(m.assignment),
                                     "subscription": (rec.subscribed_topics(m.metadata(g.protocol))
                                                      if g.protocol_type == "consumer" else [])}
                                    for m in g.members.values()],
                        "offsets": offsets})
        return out

    # -- the APIs ----------------------------------------------------------------------------------------------
    async def join(self, group_id: str, member_id: str, instance_id: str | None, client_id: str, client_host: str,
                   session_ms: int, rebalance_ms: int, protocol_type: str, protocols: list[tuple[str, bytes]],
                   require_known_member: bool, skip_assignment_ok: bool = False) -> JoinResult:
        """Kafka's ``classicGroupJoinToClassicGroup``. ``skip_assignment_ok``: the request is v9+, so a static
        leader that takes its place back in a Stable group is told so (``skip_assignment``) with the members."""
        if not group_id:
            return {"error_code": ErrorCode.invalid_group_id}
        if not self.min_session_ms <= session_ms <= self.max_session_ms:
            return {"error_code": ErrorCode.invalid_session_timeout}
        if member_id and self.group(group_id) is None:
            return {"error_code": ErrorCode.unknown_member_id, "member_id": member_id}
        g = self.live_group(group_id)
        if not g.supports_protocols(protocol_type, {n for n, _ in protocols}):
            return {"error_code": ErrorCode.inconsistent_group_protocol, "member_id": member_id}
        if not member_id:
            member_id = f"{client_id or 'member'}-{uuid.uuid4()}"
            if instance_id is not None:
                old = g.static_member(instance_id)
                if old is not None:
                    return await self._rejoin_static(g, old, member_id, session_ms, rebalance_ms, protocols,
                                                     skip_assignment_ok)
            elif require_known_member:
                g.pending.add(member_id)
                return {"error_code": ErrorCode.member_id_required, "member_id": member_id}
            return await self._add_member(g, Member(member_id, instance_id, client_id, client_host, rebalance_ms,
                                                    session_ms, protocol_type, protocols))
        if member_id in g.pending:
            g.pending.discard(member_id)
            return await self._add_member(g, Member(member_id, instance_id, client_id, client_host, rebalance_ms,
                                                    session_ms, protocol_type, protocols))
        if self.fenced(g, member_id, instance_id):
            logger.info("group %s: member %s of instance %s fenced by member %s", group_id, member_id, instance_id,
                        present_holder(g, instance_id))
            return {"error_code": ErrorCode.fenced_instance_id, "member_id": member_id}
        m = g.members.get(member_id)
        if m is None or (instance_id is not None and g.static_member(instance_id) is None):
            return {"error_code": ErrorCode.unknown_member_id, "member_id": member_id}
        m.touch(self.now_ms())
        if g.state == PREPARING:
            return await self._update_member(g, m, session_ms, rebalance_ms, protocols)
        if g.state == COMPLETING:
            if m.matches(protocols):       # the JoinGroup answer was lost: this generation's answer again
                return self._current(g, m, with_members=m.member_id == g.leader)
            return await self._update_member(g, m, session_ms, rebalance_ms, protocols)
        if g.state == STABLE:
            if m.member_id == g.leader or not m.matches(protocols):
                # the leader's JoinGroup always rebalances: it may have seen a change the metadata does not show
                return await self._update_member(g, m, session_ms, rebalance_ms, protocols)
            return self._current(g, m, with_members=False)
        logger.warning("group %s: member %s rejoins in state %s", group_id, member_id, g.state)
        return {"error_code": ErrorCode.unknown_member_id, "member_id": member_id}

    @staticmethod
    def _current(g: Group, m: Member, with_members: bool, skip_assignment: bool = False) -> JoinResult:
        """The current generation's JoinGroup answer for ``m``, with no rebalance."""
        members = tuple(JoinGroupResponseMember(member_id=o.member_id, group_instance_id=o.instance_id,
                                                metadata=o.metadata(g.protocol)) for o in g.members.values())
        return {"error_code": ErrorCode.none, "generation_id": g.generation, "protocol_type": g.protocol_type,
                "protocol_name": g.protocol, "leader": g.leader, "member_id": m.member_id,
                "members": members if with_members else (), "skip_assignment": skip_assignment}

    def _await_join(self, g: Group, m: Member) -> asyncio.Future[JoinResult]:
        if m.join_waiter is not None and not m.join_waiter.done():
            m.join_waiter.set_result({"error_code": ErrorCode.unknown_member_id})    # superseded by this join
        waiter: asyncio.Future[JoinResult] = asyncio.get_running_loop().create_future()
        m.join_waiter = waiter
        return waiter

    def _rebalance_or_complete(self, g: Group) -> None:
        """Kafka's ``maybePrepareRebalanceOrCompleteJoin``."""
        if g.state == PREPARING:
            self._maybe_complete_join(g)
        else:
            self._prepare_rebalance(g)

    async def _add_member(self, g: Group, m: Member) -> JoinResult:
        m.touch(self.now_ms())
        g.members[m.member_id] = m
        g.protocol_type = m.protocol_type
        waiter = self._await_join(g, m)
        self._rebalance_or_complete(g)
        return await waiter

    async def _update_member(self, g: Group, m: Member, session_ms: int, rebalance_ms: int,
                             protocols: list[tuple[str, bytes]]) -> JoinResult:
        m.protocols, m.session_timeout_ms, m.rebalance_timeout_ms = protocols, session_ms, rebalance_ms
        waiter = self._await_join(g, m)
        self._rebalance_or_complete(g)
        return await waiter

    def _replace_static(self, g: Group, old_id: str, new_id: str) -> Member:
        """Kafka's ``replaceStaticMember``: the instance's member under a new id, with the old one's client,
        timeouts, protocols and assignment (and its place as leader); a JoinGroup or SyncGroup of the old id
        still waiting is answered FENCED_INSTANCE_ID."""
        old = g.members.pop(old_id)
        for waiter in (old.join_waiter, old.sync_waiter):
            if waiter is not None and not waiter.done():
                waiter.set_result({"error_code": ErrorCode.fenced_instance_id})
        new = Member(new_id, old.instance_id, old.client_id, old.client_host, old.rebalance_timeout_ms,
                     old.session_timeout_ms, old.protocol_type, old.protocols, old.assignment)
        new.deadline_ms = old.deadline_ms
        g.members[new_id] = new
        if g.leader == old_id:
            g.leader = new_id
        return new

    async def _rejoin_static(self, g: Group, old: Member, new_id: str, session_ms: int, rebalance_ms: int,
                             protocols: list[tuple[str, bytes]], skip_assignment_ok: bool) -> JoinResult:
        """Kafka's ``updateStaticMemberThenRebalanceOrCompleteJoin`` (KIP-345): a known group.instance.id joins
        with no member id (its process restarted). It takes the old member's place under a new id; the old id is
        fenced. In a Stable group whose protocol would not change, nothing rebalances: the group's record is
        written with the new member id, and the member gets the current generation back (its assignment follows
        in SyncGroup); if the record cannot be written, the old member is put back. In CompletingRebalance the
        leader may already be assigning to the old id, so the group rebalances; in PreparingRebalance the member
        simply counts as rejoined."""
        old_id, leader_before = old.member_id, g.leader
        logger.info("group %s: static member %s (instance %s) rejoins in state %s as %s", g.group_id, old_id,
                    old.instance_id, g.state, new_id)
        m = self._replace_static(g, old_id, new_id)
        before = (m.protocols, m.rebalance_timeout_ms, m.session_timeout_ms)
        m.protocols, m.session_timeout_ms, m.rebalance_timeout_ms = protocols, session_ms, rebalance_ms
        m.touch(self.now_ms())
        if g.state == STABLE:
            if self._select_protocol(g) != g.protocol:
                waiter = self._await_join(g, m)
                self._prepare_rebalance(g)
                return await waiter
            try:
                await self.persist(g.group_id, [self.group_record(g)])
            except Exception as exc:   # noqa: BLE001 - the old member id stands; the client retries
                logger.warning("group %s: cannot write static member %s (instance %s): %s; member %s stays",
                               g.group_id, new_id, m.instance_id, exc, old_id)
                if g.members.get(new_id) is m:
                    m.protocols, m.rebalance_timeout_ms, m.session_timeout_ms = before
                    self._replace_static(g, new_id, old_id)
                return {"error_code": ErrorCode.coordinator_not_available, "member_id": "",
                        "generation_id": g.generation, "protocol_type": g.protocol_type, "protocol_name": g.protocol,
                        "leader": leader_before}
            if g.members.get(new_id) is not m:     # fenced in turn while the record was written
                return {"error_code": ErrorCode.fenced_instance_id, "member_id": new_id}
            if skip_assignment_ok:
                leader = m.member_id == g.leader
                return self._current(g, m, with_members=leader, skip_assignment=leader)
            answer = self._current(g, m, with_members=False)
            answer["leader"] = leader_before
            return answer
        waiter = self._await_join(g, m)
        if g.state == COMPLETING:
            self._prepare_rebalance(g)
        else:
            self._maybe_complete_join(g)
        return await waiter

    async def sync(self, group_id: str, generation: int, member_id: str,
                   assignments: dict[str, bytes], instance_id: str | None = None) -> SyncResult:
        g = self.group(group_id)
        if self.fenced(g, member_id, instance_id):
            return {"error_code": ErrorCode.fenced_instance_id}
        if g is None or member_id not in g.members:
            return {"error_code": ErrorCode.unknown_member_id}
        if generation != g.generation:
            return {"error_code": ErrorCode.illegal_generation}
        m = g.members[member_id]
        m.touch(self.now_ms())
        if g.state == PREPARING:
            return {"error_code": ErrorCode.rebalance_in_progress}
        if g.state == STABLE:
            return {"error_code": ErrorCode.none, "protocol_type": g.protocol_type, "protocol_name": g.protocol,
                    "assignment": m.assignment}
        waiter: asyncio.Future[SyncResult] = asyncio.get_running_loop().create_future()
        m.sync_waiter = waiter
        if member_id == g.leader:
            for other in g.members.values():
                other.assignment = assignments.get(other.member_id, b"")
            gen = g.generation
            try:        # the assignment is written first; Stable follows once it is on disk
                await self.persist(group_id, [self.group_record(g)])
            except Exception as exc:   # noqa: BLE001 - the group cannot be made stable without its record
                logger.warning("group %s: cannot write its metadata: %s", group_id, exc)
                for other in g.members.values():
                    if other.sync_waiter is not None and not other.sync_waiter.done():
                        other.sync_waiter.set_result({"error_code": ErrorCode.coordinator_not_available})
                return await waiter
            if g.state == COMPLETING and g.generation == gen:
                g.transition_to(STABLE, self.now_ms())
                for other in g.members.values():
                    if other.sync_waiter is not None and not other.sync_waiter.done():
                        other.sync_waiter.set_result({"error_code": ErrorCode.none, "protocol_type": g.protocol_type,
                                                      "protocol_name": g.protocol, "assignment": other.assignment})
                    other.sync_waiter = None
        return await waiter

    def heartbeat(self, group_id: str, generation: int, member_id: str, instance_id: str | None = None
                  ) -> ErrorCode:
        g = self.group(group_id)
        if self.fenced(g, member_id, instance_id):
            return ErrorCode.fenced_instance_id
        if g is None or member_id not in g.members:
            return ErrorCode.unknown_member_id
        if generation != g.generation:
            return ErrorCode.illegal_generation
        g.members[member_id].touch(self.now_ms())
        return ErrorCode.rebalance_in_progress if g.state == PREPARING else ErrorCode.none

    def leave(self, group_id: str, member_id: str, instance_id: str | None) -> ErrorCode:
        g = self.group(group_id)
        if g is None:
            return ErrorCode.unknown_member_id
        if not member_id and instance_id is not None:
            member_id = next((m.member_id for m in g.members.values() if m.instance_id == instance_id), "")
        if self.fenced(g, member_id, instance_id):
            return ErrorCode.fenced_instance_id
        if member_id not in g.members:
            return ErrorCode.unknown_member_id
        logger.info("group %s: member %s left", group_id, member_id)
        self._remove(g, member_id)
        self._after_members_left(g)
        return ErrorCode.none

