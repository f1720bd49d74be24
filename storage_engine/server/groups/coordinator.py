"""The classic group protocol's coordinator (Kafka's ``GroupCoordinator`` / ``ClassicGroup``), for every group:
this node is the coordinator of all of them.

States: **Empty** (no members; committed offsets may exist) -> a JoinGroup -> **PreparingRebalance** (known
members have up to the largest rebalance timeout to rejoin; a group's first rebalance waits
``group.initial.rebalance.delay.ms`` for more members) -> **CompletingRebalance** (JoinGroup answered: the leader
gets the members and their metadata; the group waits for the leader's SyncGroup) -> **Stable** (assignments handed
out; heartbeats keep members alive). A join, a leave or a member whose session expired sends the group back to
PreparingRebalance; **Dead** is a deleted group. The generation grows with each completed join.

Committed offsets and the group's metadata are appended to ``__consumer_offsets`` (:mod:`.records`, Kafka's
schemas) before a commit or a completed rebalance is answered, and the coordinator's state is rebuilt from that
topic when the broker starts (the last record of a key wins; a null value deletes), members included: a group
whose last record has members is loaded Stable with them, as Kafka loads it, and they keep their place if they
go on heartbeating. Appends go through the
engine, so the topic is a compacted topic like any other, cleaned by the ``log_compaction`` DAG.

Everything here runs on the event loop; only appends and the load run in the broker's thread pool.
"""
from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from storage_engine.record.records import SimpleRecord
from storage_engine.server.catalog import TopicError, create_topic
from storage_engine.server.errors import error_code
from storage_engine.server.groups import records as rec
from storage_engine.server.groups.replay import replay

logger = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"
EMPTY, PREPARING, COMPLETING, STABLE, DEAD = "Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead"
EXPIRY_CHECK_S = 0.5

# Kafka's error codes used here
NONE, UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, INCONSISTENT_GROUP_PROTOCOL = 0, 25, 22, 23
REBALANCE_IN_PROGRESS, INVALID_SESSION_TIMEOUT, MEMBER_ID_REQUIRED, FENCED_INSTANCE_ID = 27, 26, 79, 82
OFFSET_METADATA_TOO_LARGE, NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND, INVALID_GROUP_ID = 12, 68, 69, 24
COORDINATOR_NOT_AVAILABLE, UNKNOWN_TOPIC_OR_PARTITION = 15, 3


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class Member:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    join_waiter: asyncio.Future[dict[str, Any]] | None = None
    sync_waiter: asyncio.Future[dict[str, Any]] | None = None
    deadline: float = 0.0

    def touch(self) -> None:
        self.deadline = time.monotonic() + self.session_timeout_ms / 1000

    def metadata(self, protocol: str | None) -> bytes:
        return next((m for name, m in self.protocols if name == protocol), b"")


@dataclass
class Group:
    group_id: str
    state: str = EMPTY
    protocol_type: str | None = None
    protocol: str | None = None
    generation: int = 0
    leader: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    pending: set[str] = field(default_factory=set)           # member ids handed out with MEMBER_ID_REQUIRED
    offsets: dict[tuple[str, int], rec.OffsetValue] = field(default_factory=dict)
    # the __consumer_offsets offset of the record each committed offset came from: a transaction's offset commit
    # counts at its COMMIT marker only if no later plain commit of the partition came first (Kafka's rule)
    positions: dict[tuple[str, int], int] = field(default_factory=dict)
    state_ms: int = field(default_factory=now_ms)
    rebalance: asyncio.Task[None] | None = None
    not_before: float = 0.0                                   # the initial rebalance delay's end (monotonic)

    def set_state(self, state: str) -> None:
        self.state = state
        self.state_ms = now_ms()

    def describe(self) -> dict[str, Any]:
        return {"group_id": self.group_id, "state": self.state, "protocol_type": self.protocol_type or "",
                "protocol": self.protocol or "", "generation": self.generation, "leader": self.leader,
                "members": [{"member_id": m.member_id, "group_instance_id": m.instance_id, "client_id": m.client_id,
                             "client_host": m.client_host, "assignment": m.assignment}
                            for m in self.members.values()],
                "offsets": {f"{t}-{p}": v.offset for (t, p), v in sorted(self.offsets.items())}}


class GroupCoordinator:
    def __init__(self, broker: Any):
        self.broker = broker
        s = broker.config.server
        self.partitions: int = s["offsets.topic.num.partitions"]
        self.initial_delay_ms: int = s["group.initial.rebalance.delay.ms"]
        self.min_session_ms: int = s["group.min.session.timeout.ms"]
        self.max_session_ms: int = s["group.max.session.timeout.ms"]
        self.max_metadata: int = s["offset.metadata.max.bytes"]
        self.retention_ms: int = s["offsets.retention.minutes"] * 60_000
        self.retention_check_s: float = s["offsets.retention.check.interval.ms"] / 1000
        self.groups: dict[str, Group] = {}
        self._expiry: asyncio.Task[None] | None = None
        self._retention: asyncio.Task[None] | None = None
        self._topic_ready = False
        self._append_locks: dict[int, asyncio.Lock] = {}     # per partition of the offsets topic
        # TxnOffsetCommit offsets waiting for their transaction's marker, with the offset of their record:
        # producer id -> group -> (topic, partition) -> (value, position)
        self.txn_offsets: dict[int, dict[str, dict[tuple[str, int], tuple[rec.OffsetValue, int]]]] = {}
        # while loading: the leader and members of each group's last record
        self._loaded_members: dict[str, tuple[str | None, list[rec.MemberRecord]]] = {}

    # -- the offsets topic ------------------------------------------------------------------------------------
    def load(self) -> int:
        """Rebuild groups and offsets from ``__consumer_offsets`` (blocking; at start). Returns records read.
        Transactional offset commits count once their COMMIT marker is read; those of a transaction still open
        stay pending until its marker is written."""
        catalog = self.broker.topics(fresh=True)
        parts = catalog.get(OFFSETS_TOPIC)
        if not parts:
            return 0
        self._topic_ready = True
        self.partitions = max(parts) + 1
        count = 0
        for p in parts:
            log = self.broker.manager.get_log(OFFSETS_TOPIC, p)
            if log is None:
                continue
            read, open_txns = replay(log, self._replay)
            count += read
            for producer_id, held in open_txns.items():
                for k, v, at in held:
                    self._replay_pending(producer_id, k, v, at)
        for g in self.groups.values():
            g.members.clear()
            recorded = self._loaded_members.pop(g.group_id, None)
            if recorded is not None and recorded[1] and g.protocol:
                self._restore_members(g, recorded)
            else:
                g.state = EMPTY         # empty since its last recorded change or commit (offsets expire from then)
                g.state_ms = max([g.state_ms] + [v.commit_ms for v in g.offsets.values()])
        self._loaded_members.clear()
        logger.info("loaded %d groups (%d records) from %s", len(self.groups), count, OFFSETS_TOPIC)
        return count

    def _restore_members(self, g: Group, recorded: tuple[str | None, list[rec.MemberRecord]]) -> None:
        """The members of the group's last record, Stable at its generation with their assignments, as Kafka's
        ``GroupMetadataManager`` loads a group: each keeps its session from now, so a member that goes on
        heartbeating stays (its TxnOffsetCommits with the generation it has are accepted, no rebalance), and one
        that is gone expires after its session timeout and the group rebalances."""
        leader, members = recorded
        for r in members:
            m = Member(r.member_id, r.group_instance_id, r.client_id, r.client_host, r.rebalance_timeout_ms,
                       r.session_timeout_ms, g.protocol_type or "", [(g.protocol or "", r.subscription)],
                       r.assignment)
            m.touch()
            g.members[m.member_id] = m
        g.leader = leader if leader in g.members else next(iter(g.members))
        g.state = STABLE

    def _replay_pending(self, producer_id: int, key: bytes, value: bytes | None, offset: int) -> None:
        try:
            parsed = rec.parse_key(key)
            if isinstance(parsed, rec.OffsetKey) and value is not None:
                self.txn_offsets.setdefault(producer_id, {}).setdefault(parsed.group, {})[
                    (parsed.topic, parsed.partition)] = (rec.parse_offset_value(value), offset)
        except (rec.RecordFormatError, UnicodeDecodeError) as exc:
            logger.warning("skipping an unreadable %s record: %s", OFFSETS_TOPIC, exc)

    def _replay(self, key: bytes, value: bytes | None, offset: int = -1) -> None:
        try:
            parsed = rec.parse_key(key)
            if isinstance(parsed, rec.OffsetKey):
                g = self.groups.setdefault(parsed.group, Group(parsed.group))
                tp = (parsed.topic, parsed.partition)
                if value is None:
                    g.offsets.pop(tp, None)
                    g.positions.pop(tp, None)
                elif offset >= g.positions.get(tp, -1):       # a committed transaction's older offset loses
                    g.offsets[tp] = rec.parse_offset_value(value)
                    g.positions[tp] = offset
            elif isinstance(parsed, rec.GroupKey):
                if value is None:
                    self._loaded_members.pop(parsed.group, None)
                    gone = self.groups.get(parsed.group)
                    if gone is not None and not gone.offsets:
                        del self.groups[parsed.group]
                    return
                meta = rec.parse_group_value(value)
                g = self.groups.setdefault(parsed.group, Group(parsed.group))
                g.protocol_type, g.protocol, g.generation = meta.protocol_type, meta.protocol, meta.generation
                self._loaded_members[parsed.group] = (meta.leader, meta.members)
                g.state_ms = meta.state_timestamp_ms if meta.state_timestamp_ms >= 0 else 0
        except (rec.RecordFormatError, UnicodeDecodeError) as exc:
            logger.warning("skipping an unreadable %s record: %s", OFFSETS_TOPIC, exc)

    def ensure_topic(self) -> None:
        if self._topic_ready:
            return
        s = self.broker.config.server
        try:
            create_topic(self.broker, OFFSETS_TOPIC, self.partitions,
                         {"cleanup.policy": "compact", "segment.bytes": str(s["offsets.topic.segment.bytes"])})
        except TopicError as exc:
            if exc.code != "topic_already_exists":
                raise
            self.partitions = max(self.broker.topics(fresh=True)[OFFSETS_TOPIC]) + 1
        self._topic_ready = True

    def _append(self, group_id: str, records: list[SimpleRecord], producer: tuple[int, int] | None) -> int:
        """Append ``records`` as one batch; returns the offset of the first."""
        self.ensure_topic()
        p = rec.partition_for(group_id, self.partitions)
        log = self.broker.manager.get_or_create_log(OFFSETS_TOPIC, p)
        if producer is None:
            return log.append_records(records).first_offset
        # a transactional offset commit: the producer's batch, its epoch checked (Kafka's rule)
        return log.append_records(records, producer_id=producer[0], producer_epoch=producer[1], base_sequence=0,
                                  is_transactional=True, coordinator=True).first_offset

    def partition_of(self, group_id: str) -> int:
        return rec.partition_for(group_id, self.partitions)

    async def persist(self, group_id: str, records: list[SimpleRecord],
                      producer: tuple[int, int] | None = None) -> int:
        """Append in the order of the calls: appends run in a thread pool, where a later one could otherwise land
        first (a later commit overwritten by an earlier one, a group's record after its tombstone). A caller
        that updates its state right after this returns does so before the next append of the partition.
        Returns the offset of the first record."""
        lock = self._append_locks.setdefault(self.partition_of(group_id), asyncio.Lock())
        async with lock:
            first = await self.broker.call(self._append, group_id, records, producer)
        self.broker.notify_append()
        return first

    async def write_marker(self, partition: int, producer_id: int, producer_epoch: int, commit: bool) -> None:
        """The transaction coordinator's marker on an offsets partition, in order with that partition's
        appends; then the producer's pending offsets for the groups of this partition count (commit) or are
        dropped (abort)."""
        def append() -> None:
            log = self.broker.manager.get_log(OFFSETS_TOPIC, partition)
            if log is not None:
                log.append_end_txn(producer_id, producer_epoch, commit=commit)
        async with self._append_locks.setdefault(partition, asyncio.Lock()):
            await self.broker.call(append)
            pending = self.txn_offsets.get(producer_id, {})
            for group_id in [g for g in pending if self.partition_of(g) == partition]:
                offsets = pending.pop(group_id)
                if commit:
                    g = self.groups.get(group_id)
                    if g is None or g.state == DEAD:
                        g = self.groups[group_id] = Group(group_id)
                    for tp, (value, position) in offsets.items():
                        if position > g.positions.get(tp, -1):    # not overtaken by a later plain commit
                            g.offsets[tp], g.positions[tp] = value, position
            if not pending:
                self.txn_offsets.pop(producer_id, None)
        self.broker.notify_append()

    def pending_offset(self, group_id: str, topic: str, partition: int) -> bool:
        """Whether an open transaction holds an offset commit for it (OffsetFetch's UNSTABLE_OFFSET_COMMIT)."""
        return any((topic, partition) in groups.get(group_id, {}) for groups in self.txn_offsets.values())

    def group_record(self, g: Group) -> SimpleRecord:
        if g.state == DEAD:
            return SimpleRecord(rec.group_key(g.group_id), None)
        members = [rec.MemberRecord(m.member_id, m.instance_id, m.client_id, m.client_host, m.rebalance_timeout_ms,
                                    m.session_timeout_ms, m.metadata(g.protocol), m.assignment)
                   for m in g.members.values()]
        value = rec.group_value(rec.GroupRecord(g.protocol_type or "", g.generation, g.protocol, g.leader,
                                                g.state_ms, members))
        return SimpleRecord(rec.group_key(g.group_id), value)

    # -- session expiry ----------------------------------------------------------------------------------------
    def start(self) -> None:
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
            now = time.monotonic()
            for g in list(self.groups.values()):
                expired = [m for m in g.members.values()
                           if m.deadline < now and m.join_waiter is None and m.sync_waiter is None]
                for m in expired:
                    logger.info("group %s: member %s left (no heartbeat within %d ms)", g.group_id, m.member_id,
                                m.session_timeout_ms)
                    self._remove(g, m.member_id)
                if expired:
                    self._after_members_left(g)

    # -- offsets retention (Kafka's offsets.retention.minutes, KIP-211) ------------------------------------------
    async def _retention_loop(self) -> None:
        while True:
            await asyncio.sleep(self.retention_check_s)
            await self.expire_offsets(now_ms())

    async def expire_offsets(self, at_ms: int) -> list[str]:
        """Delete the offsets of every group that has been empty for ``offsets.retention.minutes`` (since it
        became empty, or since its last commit for a group that never had members): tombstones for each offset
        and for the group are appended, so compaction removes them from ``__consumer_offsets``. Returns the
        groups expired."""
        expired = []
        for g in list(self.groups.values()):
            if g.state != EMPTY or g.members or at_ms - g.state_ms < self.retention_ms:
                continue
            before = dict(g.offsets)
            tombstones = [SimpleRecord(rec.offset_key(g.group_id, t, p), None) for (t, p) in sorted(before)]
            tombstones.append(SimpleRecord(rec.group_key(g.group_id), None))
            try:
                await self.persist(g.group_id, tombstones)
            except Exception as exc:   # noqa: BLE001 - tried again at the next check
                logger.warning("group %s: cannot write the tombstones of its expired offsets: %s", g.group_id, exc)
                continue
            if g.offsets != before or g.members or g.state != EMPTY:
                # a commit or a join came in while the tombstones were written (its records follow them on
                # disk): the group lives on with what came after, only the expired offsets go
                for key, value in before.items():
                    if g.offsets.get(key) is value:
                        del g.offsets[key]
                        g.positions.pop(key, None)
                continue
            if self.groups.get(g.group_id) is g:
                del self.groups[g.group_id]
            expired.append(g.group_id)
            logger.info("group %s: %d offset(s) expired (empty for %d min, offsets.retention.minutes)", g.group_id,
                        len(tombstones) - 1, self.retention_ms // 60_000)
        return expired

    # -- membership --------------------------------------------------------------------------------------------
    def _remove(self, g: Group, member_id: str, error: int = UNKNOWN_MEMBER_ID) -> None:
        m = g.members.pop(member_id, None)
        if m is None:
            return
        for waiter in (m.join_waiter, m.sync_waiter):
            if waiter is not None and not waiter.done():
                waiter.set_result({"error_code": error})
        if g.leader == member_id:
            g.leader = next(iter(g.members), None)

    def _after_members_left(self, g: Group) -> None:
        if g.state == PREPARING:
            self._maybe_complete_join(g)
        elif g.state in (STABLE, COMPLETING):
            if g.members:
                self._prepare_rebalance(g)
            else:
                g.generation += 1
                g.protocol = None
                g.set_state(EMPTY)
                asyncio.get_running_loop().create_task(self._persist_quietly(g))

    async def _persist_quietly(self, g: Group) -> None:
        try:
            await self.persist(g.group_id, [self.group_record(g)])
        except Exception as exc:   # noqa: BLE001 - the in-memory state stands; the next change writes again
            logger.warning("group %s: cannot write its metadata: %s", g.group_id, exc)

    def _prepare_rebalance(self, g: Group) -> None:
        for m in g.members.values():     # a pending SyncGroup learns the group moved on
            if m.sync_waiter is not None and not m.sync_waiter.done():
                m.sync_waiter.set_result({"error_code": REBALANCE_IN_PROGRESS})
            m.sync_waiter = None
        first = g.state == EMPTY
        g.set_state(PREPARING)
        timeout = max((m.rebalance_timeout_ms for m in g.members.values()), default=0) / 1000
        g.not_before = time.monotonic() + (self.initial_delay_ms / 1000 if first else 0)
        if g.rebalance is not None:
            g.rebalance.cancel()
        g.rebalance = asyncio.get_running_loop().create_task(self._rebalance_timer(g, max(timeout, 0.0)))

    async def _rebalance_timer(self, g: Group, timeout: float) -> None:
        loop_start = time.monotonic()
        while g.state == PREPARING:
            now = time.monotonic()
            if now >= loop_start + timeout and now >= g.not_before:
                for m in [m for m in g.members.values() if m.join_waiter is None]:
                    logger.info("group %s: member %s did not rejoin within the rebalance timeout", g.group_id,
                                m.member_id)
                    self._remove(g, m.member_id)
                self._complete_join(g)
                return
            if now >= g.not_before and self._all_joined(g):
                self._complete_join(g)
                return
            await asyncio.sleep(min(0.05, max(0.0, g.not_before - now) or 0.05))

    def _all_joined(self, g: Group) -> bool:
        return bool(g.members) and all(m.join_waiter is not None for m in g.members.values())

    def _maybe_complete_join(self, g: Group) -> None:
        if g.state == PREPARING and time.monotonic() >= g.not_before and self._all_joined(g):
            self._complete_join(g)
        elif g.state == PREPARING and not g.members:
            self._complete_join(g)

    def _complete_join(self, g: Group) -> None:
        if g.rebalance is not None and g.rebalance is not asyncio.current_task():
            g.rebalance.cancel()
        g.rebalance = None
        g.generation += 1
        if not g.members:
            g.protocol, g.leader = None, None
            g.set_state(EMPTY)
            asyncio.get_running_loop().create_task(self._persist_quietly(g))
            return
        g.protocol = self._select_protocol(g)
        if g.leader not in g.members:
            g.leader = next(iter(g.members))
        g.set_state(COMPLETING)
        everyone = tuple({"member_id": m.member_id, "group_instance_id": m.instance_id,
                          "metadata": m.metadata(g.protocol)} for m in g.members.values())
        for m in g.members.values():
            m.touch()
            waiter, m.join_waiter = m.join_waiter, None
            if waiter is not None and not waiter.done():
                waiter.set_result({"error_code": NONE, "generation_id": g.generation, "protocol_type": g.protocol_type,
                                   "protocol_name": g.protocol, "leader": g.leader, "member_id": m.member_id,
                                   "members": everyone if m.member_id == g.leader else ()})
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
        """Every group for the listener's status (the Storage view): state, members and what each is assigned,
        committed offsets."""
        out = []
        for g in sorted(self.groups.values(), key=lambda g: g.group_id):
            if g.state == DEAD:
                continue
            offsets: dict[str, dict[str, int]] = {}
            for (topic, p), v in sorted(g.offsets.items()):
                offsets.setdefault(topic, {})[str(p)] = v.offset
            out.append({"group_id": g.group_id, "state": g.state, "protocol_type": g.protocol_type or "",
                        "protocol": g.protocol or "", "generation": g.generation,
                        "members": [{"member_id": m.member_id, "client_id": m.client_id, "client_host": m.client_host,
                                     "group_instance_id": m.instance_id,
                                     "assignment": rec.assigned_partitions(m.assignment)}
                                    for m in g.members.values()],
                        "offsets": offsets})
        return out

    # -- the APIs ----------------------------------------------------------------------------------------------
    @staticmethod
    def _fenced(g: Group | None, member_id: str, instance_id: str | None) -> bool:
        """Kafka's ``isStaticMemberFenced``: the request names a static instance that another member id holds now
        (a later start of the same instance took its place). FENCED_INSTANCE_ID stops the older process; an
        UNKNOWN_MEMBER_ID would make it rejoin and take the place back, and the two would alternate for ever."""
        if g is None or instance_id is None:
            return False
        holder = next((m.member_id for m in g.members.values() if m.instance_id == instance_id), None)
        return holder is not None and holder != member_id

    def group(self, group_id: str) -> Group | None:
        g = self.groups.get(group_id)
        return None if g is None or g.state == DEAD else g

    async def join(self, group_id: str, member_id: str, instance_id: str | None, client_id: str, client_host: str,
                   session_ms: int, rebalance_ms: int, protocol_type: str, protocols: list[tuple[str, bytes]],
                   require_known_member: bool) -> dict[str, Any]:
        if not group_id:
            return {"error_code": INVALID_GROUP_ID}
        if not self.min_session_ms <= session_ms <= self.max_session_ms:
            return {"error_code": INVALID_SESSION_TIMEOUT}
        g = self.groups.get(group_id)
        if g is None or g.state == DEAD:
            g = self.groups[group_id] = Group(group_id)
        if g.members and (protocol_type != g.protocol_type or
                          not any({n for n, _ in protocols} & {n for n, _ in m.protocols} for m in g.members.values())):
            return {"error_code": INCONSISTENT_GROUP_PROTOCOL}
        if not member_id:
            if instance_id is not None:
                old = next((m for m in g.members.values() if m.instance_id == instance_id), None)
                if old is not None:      # a static member's restart takes over its place
                    self._remove(g, old.member_id, FENCED_INSTANCE_ID)
            member_id = f"{client_id or 'member'}-{uuid.uuid4()}"
            if require_known_member and instance_id is None:
                g.pending.add(member_id)
                return {"error_code": MEMBER_ID_REQUIRED, "member_id": member_id}
        elif self._fenced(g, member_id, instance_id):
            return {"error_code": FENCED_INSTANCE_ID, "member_id": member_id}
        elif member_id not in g.members and member_id not in g.pending:
            return {"error_code": UNKNOWN_MEMBER_ID, "member_id": member_id}
        g.pending.discard(member_id)
        m = g.members.get(member_id)
        if m is None:
            m = Member(member_id, instance_id, client_id, client_host, rebalance_ms, session_ms, protocol_type,
                       protocols)
            g.members[member_id] = m
        else:
            m.protocols, m.session_timeout_ms, m.rebalance_timeout_ms = protocols, session_ms, rebalance_ms
            if m.join_waiter is not None and not m.join_waiter.done():
                m.join_waiter.set_result({"error_code": UNKNOWN_MEMBER_ID})    # superseded by this join
        g.protocol_type = protocol_type
        m.touch()
        waiter: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        m.join_waiter = waiter
        if g.state != PREPARING:
            self._prepare_rebalance(g)
        else:
            self._maybe_complete_join(g)
        return await waiter

    async def sync(self, group_id: str, generation: int, member_id: str,
                   assignments: dict[str, bytes], instance_id: str | None = None) -> dict[str, Any]:
        g = self.group(group_id)
        if self._fenced(g, member_id, instance_id):
            return {"error_code": FENCED_INSTANCE_ID}
        if g is None or member_id not in g.members:
            return {"error_code": UNKNOWN_MEMBER_ID}
        if generation != g.generation:
            return {"error_code": ILLEGAL_GENERATION}
        m = g.members[member_id]
        m.touch()
        if g.state == PREPARING:
            return {"error_code": REBALANCE_IN_PROGRESS}
        if g.state == STABLE:
            return {"error_code": NONE, "protocol_type": g.protocol_type, "protocol_name": g.protocol,
                    "assignment": m.assignment}
        waiter: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        m.sync_waiter = waiter
        if member_id == g.leader:
            for other in g.members.values():
                other.assignment = assignments.get(other.member_id, b"")
            gen = g.generation
            try:
                await self.persist(group_id, [self.group_record(g)])
            except Exception as exc:   # noqa: BLE001 - the group cannot be made stable without its record
                logger.warning("group %s: cannot write its metadata: %s", group_id, exc)
                for other in g.members.values():
                    if other.sync_waiter is not None and not other.sync_waiter.done():
                        other.sync_waiter.set_result({"error_code": COORDINATOR_NOT_AVAILABLE})
                return await waiter
            if g.state == COMPLETING and g.generation == gen:
                g.set_state(STABLE)
                for other in g.members.values():
                    if other.sync_waiter is not None and not other.sync_waiter.done():
                        other.sync_waiter.set_result({"error_code": NONE, "protocol_type": g.protocol_type,
                                                      "protocol_name": g.protocol, "assignment": other.assignment})
                    other.sync_waiter = None
        return await waiter

    def heartbeat(self, group_id: str, generation: int, member_id: str, instance_id: str | None = None) -> int:
        g = self.group(group_id)
        if self._fenced(g, member_id, instance_id):
            return FENCED_INSTANCE_ID
        if g is None or member_id not in g.members:
            return UNKNOWN_MEMBER_ID
        if generation != g.generation:
            return ILLEGAL_GENERATION
        g.members[member_id].touch()
        return REBALANCE_IN_PROGRESS if g.state == PREPARING else NONE

    def leave(self, group_id: str, member_id: str, instance_id: str | None) -> int:
        g = self.group(group_id)
        if g is None:
            return UNKNOWN_MEMBER_ID
        if not member_id and instance_id is not None:
            member_id = next((m.member_id for m in g.members.values() if m.instance_id == instance_id), "")
        if self._fenced(g, member_id, instance_id):
            return FENCED_INSTANCE_ID
        if member_id not in g.members:
            return UNKNOWN_MEMBER_ID
        logger.info("group %s: member %s left", group_id, member_id)
        self._remove(g, member_id)
        self._after_members_left(g)
        return NONE

    def _offset_records(self, group_id: str, offsets: list[tuple[str, int, int, int, str | None]], stamp: int
                        ) -> tuple[list[int], list[SimpleRecord], list[tuple[tuple[str, int], rec.OffsetValue]]]:
        """Per entry its error code (OFFSET_METADATA_TOO_LARGE above ``offset.metadata.max.bytes``); the records
        of the accepted ones and their values."""
        codes, records, values = [], [], []
        for topic, p, offset, epoch, metadata in offsets:
            meta = metadata or ""
            if len(meta.encode("utf-8")) > self.max_metadata:
                codes.append(OFFSET_METADATA_TOO_LARGE)
                continue
            records.append(SimpleRecord(rec.offset_key(group_id, topic, p),
                                        rec.offset_value(offset, epoch, meta, stamp)))
            values.append(((topic, p), rec.OffsetValue(offset, epoch, meta, stamp)))
            codes.append(NONE)
        return codes, records, values

    async def commit(self, group_id: str, generation: int, member_id: str,
                     offsets: list[tuple[str, int, int, int, str | None]], instance_id: str | None = None) -> list[int]:
        """Commit (topic, partition, offset, leader epoch, metadata) entries; one error code per entry."""
        g = self.groups.get(group_id)
        if member_id and self._fenced(g, member_id, instance_id):
            return [FENCED_INSTANCE_ID] * len(offsets)
        if generation < 0 and not member_id:
            if g is not None and g.members:
                return [UNKNOWN_MEMBER_ID] * len(offsets)    # a standalone commit needs an empty group
        else:
            if g is None or member_id not in g.members:
                return [UNKNOWN_MEMBER_ID] * len(offsets)
            if generation != g.generation:
                return [ILLEGAL_GENERATION] * len(offsets)
            if g.state == COMPLETING:
                return [REBALANCE_IN_PROGRESS] * len(offsets)
            g.members[member_id].touch()
        if g is None or g.state == DEAD:
            g = self.groups[group_id] = Group(group_id)
        stamp = now_ms()
        codes, records, values = self._offset_records(group_id, offsets, stamp)
        if records:
            try:
                first = await self.persist(group_id, records)
            except Exception as exc:   # noqa: BLE001 - nothing committed: the client retries
                logger.warning("group %s: cannot write committed offsets: %s", group_id, exc)
                return [COORDINATOR_NOT_AVAILABLE if c == NONE else c for c in codes]
            for i, (key, value) in enumerate(values):
                g.offsets[key], g.positions[key] = value, first + i
            if g.state == EMPTY:
                g.state_ms = stamp          # an empty group's offsets expire counting from its last commit
        return codes

    async def txn_commit(self, group_id: str, producer_id: int, producer_epoch: int, generation: int,
                         member_id: str, instance_id: str | None,
                         offsets: list[tuple[str, int, int, int, str | None]]) -> list[int]:
        """TxnOffsetCommit: the offsets are written as the producer's transactional batch and count once the
        transaction commits. A consumer's group metadata, when sent (v3+), must be current (KIP-447 fencing)."""
        g = self.groups.get(group_id)
        if member_id:
            if self._fenced(g, member_id, instance_id):
                return [FENCED_INSTANCE_ID] * len(offsets)
            if g is None or member_id not in g.members:
                return [UNKNOWN_MEMBER_ID] * len(offsets)
            if generation != g.generation:
                return [ILLEGAL_GENERATION] * len(offsets)
        codes, records, values = self._offset_records(group_id, offsets, now_ms())
        if records:
            try:
                first = await self.persist(group_id, records, (producer_id, producer_epoch))
            except Exception as exc:   # noqa: BLE001 - the producer's error (fenced epoch) or a storage failure
                code = int(error_code(exc))
                logger.warning("group %s: cannot write transactional offsets: %s", group_id, exc)
                return [(code if code != -1 else COORDINATOR_NOT_AVAILABLE) if c == NONE else c for c in codes]
            pending = self.txn_offsets.setdefault(producer_id, {}).setdefault(group_id, {})
            for i, (key, value) in enumerate(values):
                pending[key] = (value, first + i)
        return codes

    def fetch_offsets(self, group_id: str, wanted: list[tuple[str, list[int]]] | None
                      ) -> list[tuple[str, list[tuple[int, rec.OffsetValue | None]]]]:
        g = self.groups.get(group_id)
        offsets = g.offsets if g is not None else {}
        if wanted is None:
            by_topic: dict[str, list[int]] = {}
            for (t, p) in sorted(offsets):
                by_topic.setdefault(t, []).append(p)
            wanted = list(by_topic.items())
        return [(t, [(p, offsets.get((t, p))) for p in parts]) for t, parts in wanted]

    async def delete(self, group_id: str) -> int:
        g = self.group(group_id)
        if g is None:
            return GROUP_ID_NOT_FOUND
        if g.members:
            return NON_EMPTY_GROUP
        tombstones = [SimpleRecord(rec.offset_key(group_id, t, p), None) for (t, p) in sorted(g.offsets)]
        g.set_state(DEAD)
        tombstones.append(self.group_record(g))
        try:
            await self.persist(group_id, tombstones)
        except Exception as exc:   # noqa: BLE001 - not deleted: the client retries
            g.set_state(EMPTY)
            logger.warning("group %s: cannot write its tombstones: %s", group_id, exc)
            return COORDINATOR_NOT_AVAILABLE
        if self.groups.get(group_id) is g:     # not a group of the same name begun while the tombstones were written
            del self.groups[group_id]
        return NONE
