"""The group coordinator's storage: ``__consumer_offsets`` written and read back (Kafka's
``GroupMetadataManager``).

Committed offsets and the groups' metadata are appended to ``__consumer_offsets`` (:mod:`.records`, Kafka's
schemas) before a commit or a completed rebalance is answered, and the coordinator's state is rebuilt from that
topic when the broker starts (the last record of a key wins; a null value deletes), members included: a group
whose last record has members is loaded Stable with them, as Kafka loads it, and they keep their place if they
go on heartbeating. Appends go through the engine, so the topic is a compacted topic like any other, cleaned by
the ``log_compaction`` DAG. Appends of one partition are made in the order they were asked for (a lock per
partition), and a transaction's COMMIT or ABORT marker is written in that order too.

Appends and the load run in the broker's thread pool; everything else on the event loop.
"""
from __future__ import annotations

import asyncio
import dataclasses
import logging
from typing import Any

from storage_engine.clock import Clock
from storage_engine.record.records import SimpleRecord
from storage_engine.server.groups import records as rec
from storage_engine.server.groups.replay import create_internal_topic, load_topic
from storage_engine.server.groups.state import STABLE, Group, Member

logger = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"


class GroupStore:
    """The groups in memory and their records in ``__consumer_offsets``."""

    def __init__(self, broker: Any):
        self.broker = broker
        self.clock: Clock = broker.clock
        s = broker.config.server
        self.partitions: int = s["offsets.topic.num.partitions"]
        self.initial_delay_ms: int = s["group.initial.rebalance.delay.ms"]
        self.min_session_ms: int = s["group.min.session.timeout.ms"]
        self.max_session_ms: int = s["group.max.session.timeout.ms"]
        self.max_metadata: int = s["offset.metadata.max.bytes"]
        self.retention_ms: int = s["offsets.retention.minutes"] * 60_000
        self.retention_check_s: float = s["offsets.retention.check.interval.ms"] / 1000
        self.groups: dict[str, Group] = {}
        self._topic_ready = False
        self._append_locks: dict[int, asyncio.Lock] = {}     # per partition of the offsets topic
        # TxnOffsetCommit offsets waiting for their transaction's marker, with the offset of their record:
        # producer id -> group -> (topic, partition) -> (value, position)
        self.txn_offsets: dict[int, dict[str, dict[tuple[str, int], tuple[rec.OffsetValue, int]]]] = {}
        # while loading: the leader and members of each group's last record
        self._loaded_members: dict[str, tuple[str | None, list[rec.MemberRecord]]] = {}

    def now_ms(self) -> int:
        return self.clock.milliseconds()

    def new_group(self, group_id: str) -> Group:
        """A new group, Empty since now."""
        return Group(group_id, state_ms=self.now_ms())

    def group(self, group_id: str) -> Group | None:
        """The group, unless it does not exist or is (being) deleted."""
        g = self.groups.get(group_id)
        return None if g is None or g.gone else g

    def live_group(self, group_id: str) -> Group:
        """The group, begun anew if it does not exist or is (being) deleted."""
        g = self.groups.get(group_id)
        if g is None or g.gone:
            g = self.groups[group_id] = self.new_group(group_id)
        return g

    @staticmethod
    def fenced(g: Group | None, member_id: str, instance_id: str | None) -> bool:
        """Kafka's ``isStaticMemberFenced``: the request names a static instance that another member id holds now
        (a later start of the same instance took its place). FENCED_INSTANCE_ID stops the older process; an
        UNKNOWN_MEMBER_ID would make it rejoin and take the place back, and the two would alternate for ever."""
        if g is None or instance_id is None:
            return False
        holder = next((m.member_id for m in g.members.values() if m.instance_id == instance_id), None)
        return holder is not None and holder != member_id

    # -- loading ------------------------------------------------------------------------------------------------
    def load(self) -> int:
        """Rebuild groups and offsets from ``__consumer_offsets`` (blocking; at start). Returns records read.
        Transactional offset commits count once their COMMIT marker is read; those of a transaction still open
        stay pending until its marker is written."""
        loaded = load_topic(self.broker, OFFSETS_TOPIC, self._replay)
        if loaded is None:
            return 0
        self._topic_ready = True
        self.partitions, count = loaded.partitions, loaded.records
        for producer_id, held in loaded.open_txns.items():
            for k, v, at in held:
                self._replay_pending(producer_id, k, v, at)
        for g in list(self.groups.values()):
            g.members.clear()
            recorded = self._loaded_members.pop(g.group_id, None)
            if recorded is not None and recorded[1] and g.protocol:
                self.groups[g.group_id] = self._restored(g, recorded)
            else:
                # Empty (as replayed) since its last recorded change or commit (offsets expire from then)
                g.state_ms = max([g.state_ms] + [v.commit_ms for v in g.offsets.values()])
        self._loaded_members.clear()
        logger.info("loaded %d groups (%d records) from %s", len(self.groups), count, OFFSETS_TOPIC)
        return count

    def _restored(self, g: Group, recorded: tuple[str | None, list[rec.MemberRecord]]) -> Group:
        """The group loaded Stable with the members of its last record, at its generation with their assignments,
        as Kafka's ``GroupMetadataManager`` loads a group: each keeps its session from now, so a member that goes
        on heartbeating stays (its TxnOffsetCommits with the generation it has are accepted, no rebalance), and
        one that is gone expires after its session timeout and the group rebalances."""
        leader, records = recorded
        now = self.now_ms()
        members: dict[str, Member] = {}
        for r in records:
            m = Member(r.member_id, r.group_instance_id, r.client_id, r.client_host, r.rebalance_timeout_ms,
                       r.session_timeout_ms, g.protocol_type or "", [(g.protocol or "", r.subscription)],
                       r.assignment)
            m.touch(now)
            members[m.member_id] = m
        return dataclasses.replace(g, _state=STABLE, members=members,
                                   leader=leader if leader in members else next(iter(members)))

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
                g = self.groups.setdefault(parsed.group, self.new_group(parsed.group))
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
                g = self.groups.setdefault(parsed.group, self.new_group(parsed.group))
                g.protocol_type, g.protocol, g.generation = meta.protocol_type, meta.protocol, meta.generation
                self._loaded_members[parsed.group] = (meta.leader, meta.members)
                g.state_ms = meta.state_timestamp_ms if meta.state_timestamp_ms >= 0 else 0
        except (rec.RecordFormatError, UnicodeDecodeError) as exc:
            logger.warning("skipping an unreadable %s record: %s", OFFSETS_TOPIC, exc)

    # -- appending ----------------------------------------------------------------------------------------------
    def ensure_topic(self) -> None:
        if self._topic_ready:
            return
        self.partitions = create_internal_topic(self.broker, OFFSETS_TOPIC, self.partitions,
                                                self.broker.config.server["offsets.topic.segment.bytes"])
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
        self.broker.purgatory.appended(OFFSETS_TOPIC, self.partition_of(group_id))
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
                    g = self.live_group(group_id)
                    for tp, (value, position) in offsets.items():
                        if position > g.positions.get(tp, -1):    # not overtaken by a later plain commit
                            g.offsets[tp], g.positions[tp] = value, position
            if not pending:
                self.txn_offsets.pop(producer_id, None)
        self.broker.purgatory.appended(OFFSETS_TOPIC, partition)

    def pending_offset(self, group_id: str, topic: str, partition: int) -> bool:
        """Whether an open transaction holds an offset commit for it (OffsetFetch's UNSTABLE_OFFSET_COMMIT)."""
        return any((topic, partition) in groups.get(group_id, {}) for groups in self.txn_offsets.values())

    @staticmethod
    def group_record(g: Group) -> SimpleRecord:
        """The group's metadata record: a tombstone for a group that is (being) deleted."""
        if g.gone:
            return SimpleRecord(rec.group_key(g.group_id), None)
        members = [rec.MemberRecord(m.member_id, m.instance_id, m.client_id, m.client_host, m.rebalance_timeout_ms,
                                    m.session_timeout_ms, m.metadata(g.protocol), m.assignment)
                   for m in g.members.values()]
        value = rec.group_value(rec.GroupRecord(g.protocol_type or "", g.generation, g.protocol, g.leader,
                                                g.state_ms, members))
        return SimpleRecord(rec.group_key(g.group_id), value)

