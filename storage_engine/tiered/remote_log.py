"""The internal topic ``__remote_log_metadata`` through the engine: publishing a state of a remote segment
(:class:`RemoteLogMetadata`) and the remote log every process rebuilds from it (:class:`RemoteLogView`), as Kafka's
``TopicBasedRemoteLogMetadataManager`` keeps them.

Publishing: the record (:mod:`.metadata`, Kafka's schemas) goes to its partition of the topic (Kafka's partitioner)
with a null key, and is fsynced before :meth:`RemoteLogMetadata.publish` returns, so a state is durable before the
action it announces: COPY_SEGMENT_STARTED before the first byte is uploaded, COPY_SEGMENT_FINISHED after every
object is verified, DELETE_SEGMENT_STARTED before the first object is deleted. The topic is created on first use
through the engine's topic creation (:func:`storage_engine.log.topic_changes.create`: whole or not at all after a
crash) with ``cleanup.policy=delete``, ``retention.ms=-1`` and ``retention.bytes=-1`` (nothing expires) and the
configured partition count; an existing topic keeps its count. One writer per tiered partition at a time (the
tiering job holds a per-partition lock), so checking a transition against the view and then appending is not raced.

The view: :meth:`RemoteLogView.load` reads every partition of the topic, :meth:`RemoteLogView.refresh` only what was
appended since (a partition whose log end offset did not move costs a look at its shared state), of every partition
or of those named; :meth:`RemoteLogView.refresh_partition` of the one that holds a tiered partition's records (a
tiering run refreshes one metadata partition per partition it tiers, not the whole topic). The topic's partitions
are listed once a first one exists, then every ``RESCAN_S``; the listing the manager took of its log dirs as it
opened them is used when it is that recent, so a batch lists its dirs once. Records apply in
each metadata partition's order, and every record of one tiered partition is in one metadata partition, so its
states apply in the order they were published. Kafka's rules hold when a record is applied (Kafka's
``RemoteLogMetadataCache``): a segment record must be COPY_SEGMENT_STARTED, an update must name a known segment and
be an allowed transition, DELETE_SEGMENT_FINISHED forgets the segment, DELETE_PARTITION_FINISHED forgets the
partition's segments (a later COPY_SEGMENT_STARTED starts it afresh). A record that breaks a rule, or that this
engine cannot decode, is skipped and kept in :attr:`RemoteLogView.rejected`; bytes the engine finds damaged stop the
load (:class:`~storage_engine.errors.CorruptRecordError`): a view missing records could take a tracked object for an
orphan.

Partitions are keyed by topic name and topic id: a topic deleted and created again has a new id and does not see
the old one's segments. Queries take ``topic_id``; without it, the id of that name seen with the latest event time.
"""
from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from storage_engine import crashpoints
from storage_engine.errors import StorageError
from storage_engine.log import topic_changes
from storage_engine.log.manager import LogManager
from storage_engine.log.topic_id import random_uuid
from storage_engine.record.records import SimpleRecord
from storage_engine.tiered.metadata import (COPY_SEGMENT_FINISHED, COPY_SEGMENT_STARTED, DELETE_PARTITION_FINISHED,
                                            DELETE_SEGMENT_FINISHED, DELETE_SEGMENT_STARTED, PARTITION_STATES,
                                            SEGMENT_STATES, MetadataFormatError, MetadataRecord, PartitionDelete,
                                            RemoteSegment, decode, encode, metadata_partition,
                                            partition_transition_ok, segment_transition_ok)

__all__ = ["TOPIC", "TOPIC_CONFIGS", "RemoteLogMetadata", "RemoteLogView", "InvalidRemoteStateError"]

logger = logging.getLogger(__name__)

TOPIC = "__remote_log_metadata"
TOPIC_CONFIGS = {"cleanup.policy": "delete", "retention.ms": "-1", "retention.bytes": "-1"}
MAX_REJECTED = 1000
RESCAN_S = 10.0
Key = tuple[str, uuid.UUID, int]          # topic, topic id, partition


class InvalidRemoteStateError(StorageError):
    """A record that Kafka's rules refuse in the current state of the remote log (a bug of the caller)."""


def _describe(record: MetadataRecord) -> str:
    where = f"{record.topic}-{record.partition} (topic id {record.topic_id})"
    if isinstance(record, PartitionDelete):
        return f"{PARTITION_STATES.get(record.state, record.state)} of {where}"
    return f"{SEGMENT_STATES.get(record.state, record.state)} of segment {record.segment_id} of {where}"


class RemoteLogMetadata:
    """Publishing to ``__remote_log_metadata`` (created on first use with ``num_partitions`` partitions)."""

    def __init__(self, num_partitions: int = 50) -> None:
        if num_partitions < 1:
            raise ValueError(f"num_partitions must be >= 1, got {num_partitions}")
        self.num_partitions = num_partitions
        self._count: int | None = None
        self._mutex = threading.Lock()

    def partition_count(self, mgr: LogManager) -> int:
        """The topic's partition count, creating the topic first if it does not exist (whole, crash-safe)."""
        with self._mutex:
            if self._count is None:
                try:
                    topic_changes.create(mgr, TOPIC, self.num_partitions, TOPIC_CONFIGS, topic_id=random_uuid())
                    logger.info("created %s with %d partitions", TOPIC, self.num_partitions)
                except topic_changes.TopicChangeError as exc:
                    if exc.code != "topic_already_exists":
                        raise
                # A create of another process may be under way: create() resolved every change left half done
                # and the partitions present are the topic's (it is created whole and never extended).
                found = topic_changes.existing_partitions(mgr, TOPIC)
                if not found:
                    raise StorageError(f"{TOPIC} has no partition after its creation")
                self._count = max(found) + 1
                if self._count != self.num_partitions:
                    logger.warning("%s has %d partitions, not the %d configured: the existing count is used",
                                   TOPIC, self._count, self.num_partitions)
            return self._count

    def partition_for(self, mgr: LogManager, record: MetadataRecord) -> int:
        return metadata_partition(record.topic_id, record.partition, self.partition_count(mgr))

    def publish(self, mgr: LogManager, record: MetadataRecord, view: RemoteLogView | None = None) -> tuple[int, int]:
        """Append ``record`` to its partition and fsync it; returns ``(metadata partition, offset)``. With ``view``,
        the record is first checked against Kafka's transition rules in the view brought up to date (raises
        :class:`InvalidRemoteStateError`), and the view is refreshed after."""
        if view is not None:
            # Every earlier record of the record's partition is in one metadata partition: only that one is read,
            # once the topic's count is known (the topic is not created for a record that is refused).
            view.refresh(mgr, metadata_partitions=None if self._count is None else [self.partition_for(mgr, record)])
            problem = view.problem(record)
            if problem is not None:
                raise InvalidRemoteStateError(f"cannot publish {_describe(record)}: {problem}")
        partition = self.partition_for(mgr, record)
        log = mgr.get_or_create_log(TOPIC, partition)
        info = log.append_records([SimpleRecord(None, encode(record), record.event_timestamp_ms)])
        crashpoints.reached("remote.metadata.appended")
        log.flush()
        crashpoints.reached("remote.metadata.flushed")
        if view is not None:
            view.refresh(mgr, metadata_partitions=[partition])
        return partition, info.first_offset


@dataclass
class _Partition:
    segments: dict[uuid.UUID, RemoteSegment] = field(default_factory=dict)
    delete_state: int | None = None


class RemoteLogView:
    """The remote log of every tiered partition, rebuilt from ``__remote_log_metadata``. Thread-safe."""

    def __init__(self) -> None:
        self._partitions: dict[Key, _Partition] = {}
        self._positions: dict[int, int] = {}           # metadata partition -> next offset to read
        # The topic's partitions as last listed: it is created whole and never extended, so a refresh lists the log
        # dirs only once a first partition folder exists, then again every RESCAN_S (a creation another process
        # had half done when they were listed); a listing per refresh made a run over N partitions cost N listings
        # of N folders.
        self._metadata_partitions: list[int] = []
        self._listed_at = 0.0
        self._ids: dict[str, dict[uuid.UUID, int]] = {}  # topic -> {topic id: latest event time seen}
        self.rejected: deque[str] = deque(maxlen=MAX_REJECTED)
        self.records_applied = 0
        self._mutex = threading.RLock()

    @classmethod
    def load(cls, mgr: LogManager) -> "RemoteLogView":
        view = cls()
        view.refresh(mgr)
        return view

    # -- reading the topic ------------------------------------------------------------------------------------

    def refresh(self, mgr: LogManager, *, metadata_partitions: Iterable[int] | None = None) -> int:
        """Apply what was appended to the topic since the last load or refresh; returns the records applied.
        ``metadata_partitions``: only those partitions of the topic (the others are brought up to date by a later
        refresh of theirs)."""
        applied = 0
        with self._mutex:
            asked = None if metadata_partitions is None else set(metadata_partitions)
            if asked and not asked <= set(self._metadata_partitions):   # one not listed yet: list the dirs now
                self._list(mgr, reuse=False)
            elif (time.monotonic() - self._listed_at > RESCAN_S if self._metadata_partitions
                    else any(os.path.isdir(os.path.join(d, f"{TOPIC}-0")) for d in mgr.online_dirs())):
                self._list(mgr, reuse=True)
            wanted = self._metadata_partitions if asked is None else sorted(asked & set(self._metadata_partitions))
            for p in wanted:
                log = mgr.get_log(TOPIC, p)
                if log is None:
                    continue
                position = self._positions.get(p, 0)
                log.refresh()
                end = log.log_end_offset
                if end <= position:
                    continue
                if position < log.log_start_offset:
                    self._reject(f"{TOPIC}-{p}: offsets {position} to {log.log_start_offset - 1} are gone "
                                 "(below the log start offset); the view may miss states")
                    position = log.log_start_offset
                for rec in log.read_records(position):
                    position = rec.offset + 1
                    if rec.value is None:
                        continue
                    try:
                        record = decode(rec.value)
                    except MetadataFormatError as exc:
                        self._reject(f"{TOPIC}-{p} offset {rec.offset}: {exc}")
                        continue
                    applied += self.apply(record, f"{TOPIC}-{p} offset {rec.offset}")
                self._positions[p] = max(position, end)   # read_records read at least to ``end``
            self.records_applied += applied
        return applied

    def _list(self, mgr: LogManager, *, reuse: bool) -> None:
        """List the topic's partitions; ``reuse``: the listing the manager took of its dirs as it opened them will
        do if it is recent (a batch then lists each dir once, not once more for its view)."""
        listed = mgr.listed_partitions(TOPIC, RESCAN_S) if reuse else None
        if listed is None or not listed[0]:
            listed = topic_changes.existing_partitions(mgr, TOPIC), time.monotonic()
        self._metadata_partitions, self._listed_at = listed

    def refresh_partition(self, mgr: LogManager, topic_id: uuid.UUID, partition: int, expected_count: int) -> int:
        """Bring the view up to date for one tiered partition: :meth:`refresh` of the one metadata partition that
        holds every record of ``topic_id``-``partition`` (Kafka's partitioner over the topic's partition count),
        when the topic's partitions are listed as exactly ``0 .. expected_count - 1`` (the count it is created
        with); otherwise (a topic with another count, or listed while another process was creating it) of every
        partition. Returns the records applied."""
        with self._mutex:
            applied = self.refresh(mgr, metadata_partitions=())    # (lists the topic when due)
            if self._metadata_partitions != list(range(expected_count)):
                return applied + self.refresh(mgr)
            return applied + self.refresh(mgr, metadata_partitions=[
                metadata_partition(topic_id, partition, expected_count)])

    def _reject(self, text: str) -> None:
        logger.warning("remote log metadata: %s", text)
        self.rejected.append(text)

    # -- applying a record (Kafka's RemoteLogMetadataCache) ---------------------------------------------------

    def problem(self, record: MetadataRecord) -> str | None:
        """Why Kafka's rules refuse ``record`` in the current state (None: it applies)."""
        with self._mutex:
            state = self._partitions.get((record.topic, record.topic_id, record.partition))
            if isinstance(record, PartitionDelete):
                current = state.delete_state if state is not None else None
                if current == DELETE_PARTITION_FINISHED and record.state != DELETE_PARTITION_FINISHED:
                    current = None          # deleted before: a new deletion starts afresh
                if not partition_transition_ok(current, record.state):
                    now = PARTITION_STATES.get(current, str(current)) if current is not None else "not marked"
                    return f"the partition's deletion is {now}, which cannot move to " \
                           f"{PARTITION_STATES.get(record.state, record.state)}"
                return None
            known = state.segments.get(record.segment_id) if state is not None else None
            if isinstance(record, RemoteSegment):
                if record.state != COPY_SEGMENT_STARTED:
                    return "a new segment's record must be COPY_SEGMENT_STARTED"
                if record.end_offset < record.start_offset or record.start_offset < 0:
                    return f"its offsets {record.start_offset} to {record.end_offset} are not a range"
                if known is not None and known.state != COPY_SEGMENT_STARTED:
                    return f"the segment is already {SEGMENT_STATES[known.state]}"
                return None
            if known is None:
                return "no such segment (never started, or its deletion finished)"
            if not segment_transition_ok(known.state, record.state):
                return f"the segment is {SEGMENT_STATES[known.state]}, which cannot move to " \
                       f"{SEGMENT_STATES.get(record.state, record.state)}"
            return None

    def apply(self, record: MetadataRecord, where: str = "") -> int:
        """Apply one record (1), or skip it and keep why in :attr:`rejected` (0)."""
        with self._mutex:
            problem = self.problem(record)
            if problem is not None:
                self._reject(f"{where + ': ' if where else ''}skipped {_describe(record)}: {problem}")
                return 0
            key = (record.topic, record.topic_id, record.partition)
            state = self._partitions.setdefault(key, _Partition())
            seen = self._ids.setdefault(record.topic, {})
            seen[record.topic_id] = max(seen.get(record.topic_id, record.event_timestamp_ms),
                                        record.event_timestamp_ms)
            if isinstance(record, PartitionDelete):
                state.delete_state = record.state
                if record.state == DELETE_PARTITION_FINISHED:
                    state.segments.clear()
            elif isinstance(record, RemoteSegment):
                if state.delete_state == DELETE_PARTITION_FINISHED:
                    state.delete_state = None
                state.segments[record.segment_id] = record
            else:
                segment = state.segments[record.segment_id]
                if record.state == DELETE_SEGMENT_FINISHED:
                    del state.segments[record.segment_id]
                else:
                    state.segments[record.segment_id] = segment.updated(record)
            return 1

    # -- queries ----------------------------------------------------------------------------------------------

    def topic_id_of(self, topic: str) -> uuid.UUID | None:
        """The topic id of ``topic`` seen with the latest event time (None if the view has none)."""
        with self._mutex:
            seen = self._ids.get(topic)
            return max(seen, key=lambda i: (seen[i], i.int)) if seen else None

    def _state(self, topic: str, partition: int, topic_id: uuid.UUID | None) -> _Partition | None:
        tid = topic_id if topic_id is not None else self.topic_id_of(topic)
        return None if tid is None else self._partitions.get((topic, tid, partition))

    def segments(self, topic: str, partition: int, states: Iterable[int] | None = (COPY_SEGMENT_FINISHED,), *,
                 topic_id: uuid.UUID | None = None) -> list[RemoteSegment]:
        """The partition's segments in ``states`` (None: every state), by start offset."""
        wanted = None if states is None else set(states)
        with self._mutex:
            state = self._state(topic, partition, topic_id)
            found = [] if state is None else [s for s in state.segments.values() if wanted is None or s.state in wanted]
        return sorted(found, key=lambda s: (s.start_offset, s.end_offset, s.event_timestamp_ms))

    def segment(self, topic: str, partition: int, segment_id: uuid.UUID, *,
                topic_id: uuid.UUID | None = None) -> RemoteSegment | None:
        with self._mutex:
            state = self._state(topic, partition, topic_id)
            return None if state is None else state.segments.get(segment_id)

    def copy_started_unfinished(self, topic: str, partition: int, *,
                                topic_id: uuid.UUID | None = None) -> list[RemoteSegment]:
        """Segments whose copy started and never finished (an interrupted copy: their objects are orphans)."""
        return self.segments(topic, partition, (COPY_SEGMENT_STARTED,), topic_id=topic_id)

    def delete_started_unfinished(self, topic: str, partition: int, *,
                                  topic_id: uuid.UUID | None = None) -> list[RemoteSegment]:
        """Segments whose deletion started and never finished (to be deleted again)."""
        return self.segments(topic, partition, (DELETE_SEGMENT_STARTED,), topic_id=topic_id)

    def remote_log_start_offset(self, topic: str, partition: int, *,
                                topic_id: uuid.UUID | None = None) -> int | None:
        """The first offset held remotely (of a COPY_SEGMENT_FINISHED segment), or None."""
        finished = self.segments(topic, partition, topic_id=topic_id)
        return finished[0].start_offset if finished else None

    def highest_offset(self, topic: str, partition: int, *, topic_id: uuid.UUID | None = None) -> int:
        """The highest offset held remotely (Kafka's highest offset in remote storage: what LATEST_TIERED
        answers), -1 if none."""
        return max((s.end_offset for s in self.segments(topic, partition, topic_id=topic_id)), default=-1)

    def segment_for(self, topic: str, partition: int, offset: int, *,
                    topic_id: uuid.UUID | None = None) -> RemoteSegment | None:
        """The finished segment holding ``offset`` (the one starting last, if copies overlap), or None."""
        holding = [s for s in self.segments(topic, partition, topic_id=topic_id)
                   if s.start_offset <= offset <= s.end_offset]
        return holding[-1] if holding else None

    def remote_bytes(self, topic: str, partition: int, *, topic_id: uuid.UUID | None = None) -> int:
        return sum(s.size_bytes for s in self.segments(topic, partition, topic_id=topic_id))

    def partition_delete_state(self, topic: str, partition: int, *,
                               topic_id: uuid.UUID | None = None) -> int | None:
        with self._mutex:
            state = self._state(topic, partition, topic_id)
            return None if state is None else state.delete_state

    def partitions(self) -> list[Key]:
        """``(topic, topic id, partition)`` of every partition with a record, sorted."""
        with self._mutex:
            return sorted(self._partitions, key=lambda k: (k[0], k[2], k[1].int))

    def positions(self) -> dict[int, int]:
        """{metadata partition: next offset to read}: how far this view has read."""
        with self._mutex:
            return dict(self._positions)

