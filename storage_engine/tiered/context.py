"""What a tiering run works with (:class:`TierContext`): the manager of its partitions, the remote-storage settings,
the object store, the remote view rebuilt from ``__remote_log_metadata``, the time it acts as of, and the
publishing of each state change (every record fsynced into the metadata topic before the action it announces).

Every step of :mod:`~storage_engine.tiered.copy`, :mod:`~storage_engine.tiered.expire` and
:mod:`~storage_engine.tiered.orphans` goes through it, so the records and object keys are made in one place.
"""
from __future__ import annotations

import os
import uuid
from dataclasses import dataclass, field, replace

from storage_engine import layout

from storage_engine.log import topic_id as topic_ids
from storage_engine.log.locks import FileLock
from storage_engine.log.log import Log
from storage_engine.log.manager import LogManager
from storage_engine.tiered import keys as remote_keys
from storage_engine.tiered import metadata as md
from storage_engine.tiered.object_store import ObjectStore
from storage_engine.tiered.remote_log import RemoteLogMetadata, RemoteLogView
from storage_engine.tiered.settings import RemoteStorageSettings


@dataclass
class TierContext:
    mgr: LogManager
    settings: RemoteStorageSettings
    store: ObjectStore
    view: RemoteLogView
    now_ms: int
    broker_id: int = 0
    dry_run: bool = False
    sweep_orphans: bool = False     # list every partition's objects for ones no record announced
    dirty_dirs: set[str] = field(default_factory=set)   # log dirs whose checkpoint files are to be written
    _topic_ids: dict[str, uuid.UUID] = field(default_factory=dict)       # partition folder -> topic id
    _by_topic: dict[str, uuid.UUID] = field(default_factory=dict)        # topic -> its id, as found this run
    metadata: RemoteLogMetadata = field(init=False)

    def __post_init__(self) -> None:
        self.metadata = RemoteLogMetadata(self.settings.metadata_partitions)

    # -- identities ---------------------------------------------------------------------------------------------
    def topic_id(self, log: Log) -> uuid.UUID | None:
        """The partition's topic id (``partition.metadata``): written when missing, except in a dry run (None)."""
        if log.dir in self._topic_ids:
            return self._topic_ids[log.dir]
        tid = topic_ids.read_topic_id(log.dir)
        if tid is None and not self.dry_run:
            tid = self._give_topic_id(log)
        if tid is not None:
            self._topic_ids[log.dir] = tid
            self._by_topic.setdefault(log.topic, tid)
        return tid

    def _give_topic_id(self, log: Log) -> uuid.UUID:
        """A topic id for a folder without one: the one another partition of the topic showed this run (written
        under the store's creation lock, as ``ensure_topic_id`` writes it), else ``ensure_topic_id``'s search of
        the log dirs, made once per topic (a search per partition would list every log dir per partition)."""
        known = self._by_topic.get(log.topic)
        dirs = self.mgr.config.log_dirs
        if known is None or os.path.lexists(os.path.join(log.dir, layout.PARTITION_METADATA)):
            return topic_ids.ensure_topic_id(log.dir, dirs)     # (a damaged file is refused there, not replaced)
        with FileLock(os.path.join(dirs[0], layout.CREATE_LOCK_FILE)):
            found = topic_ids.read_topic_id(log.dir)
            if found is None:
                topic_ids.write_topic_id(log.dir, known)
                found = known
        return found

    def topic_id_text(self, log: Log) -> str:
        tid = self.topic_id(log)
        assert tid is not None, "a copy needs the topic id (never in a dry run)"
        return topic_ids.uuid_text(tid)

    @staticmethod
    def segment_id_text(seg: md.RemoteSegment) -> str:
        return topic_ids.uuid_text(seg.segment_id)

    def keys_of(self, seg: md.RemoteSegment) -> dict[str, str]:
        """Every object key a segment may have (the txnindex only exists for some: deleting a missing key is
        harmless)."""
        return remote_keys.segment_keys(self.settings.key_prefix, seg.topic, seg.topic_id, seg.partition,
                                        seg.start_offset, seg.segment_id)

    def partition_prefix(self, log: Log, tid: uuid.UUID) -> str:
        """The object-key prefix of one partition (every object of its segments is under it)."""
        return remote_keys.partition_prefix(self.settings.key_prefix, log.topic, tid, log.partition)

    # -- the view -----------------------------------------------------------------------------------------------
    def refresh(self) -> None:
        self.view.refresh(self.mgr)

    def segments(self, log: Log, tid: uuid.UUID | None, states: tuple[int, ...] = (md.COPY_SEGMENT_FINISHED,)
                 ) -> list[md.RemoteSegment]:
        """The partition's segments in ``states`` (of its topic id: a re-created topic does not see the old one's)."""
        if tid is None:
            return []
        return self.view.segments(log.topic, log.partition, states, topic_id=tid)

    def highest_offset(self, log: Log, tid: uuid.UUID | None) -> int:
        return -1 if tid is None else self.view.highest_offset(log.topic, log.partition, topic_id=tid)

    # -- records ------------------------------------------------------------------------------------------------
    def new_segment(self, log: Log, start: int, end: int, max_timestamp_ms: int, size: int,
                    leader_epochs: dict[int, int]) -> md.RemoteSegment:
        tid = self.topic_id(log)
        assert tid is not None
        return md.RemoteSegment(topic=log.topic, topic_id=tid, partition=log.partition,
                                segment_id=topic_ids.random_uuid(), start_offset=start, end_offset=end,
                                max_timestamp_ms=max_timestamp_ms, event_timestamp_ms=self.now_ms,
                                broker_id=self.broker_id, segment_leader_epochs=dict(leader_epochs),
                                size_bytes=size, state=md.COPY_SEGMENT_STARTED)

    def _publish(self, record: md.MetadataRecord) -> None:
        """Append ``record`` to ``__remote_log_metadata``, fsynced, after checking it against Kafka's transition
        rules in the view brought up to date (the view is refreshed after)."""
        self.metadata.publish(self.mgr, record, self.view)

    def _publish_state(self, seg: md.RemoteSegment, state: int, custom_metadata: bytes | None = None
                       ) -> md.RemoteSegment:
        update = replace(seg.update(state, self.now_ms, self.broker_id), custom_metadata=custom_metadata)
        self._publish(update)
        return seg.updated(update)

    def copy_started(self, seg: md.RemoteSegment) -> None:
        self._publish(seg)

    def copy_finished(self, seg: md.RemoteSegment, custom_metadata: bytes | None = None) -> md.RemoteSegment:
        """``custom_metadata``: the copy's parts manifest (:mod:`storage_engine.tiered.parts`), kept in the FINISHED
        record as Kafka keeps what its storage plugin returns."""
        return self._publish_state(seg, md.COPY_SEGMENT_FINISHED, custom_metadata)

    def delete_started(self, seg: md.RemoteSegment) -> md.RemoteSegment:
        return self._publish_state(seg, md.DELETE_SEGMENT_STARTED)

    def delete_finished(self, seg: md.RemoteSegment) -> md.RemoteSegment:
        return self._publish_state(seg, md.DELETE_SEGMENT_FINISHED)

    def partition_state(self, log: Log, tid: uuid.UUID, state: int) -> None:
        self._publish(md.PartitionDelete(log.topic, tid, log.partition, self.broker_id, self.now_ms, state))

    def delete_objects(self, seg: md.RemoteSegment, *, started: bool = False) -> md.RemoteSegment:
        """Delete a segment's objects between ``DELETE_SEGMENT_STARTED`` (published here unless ``started``) and
        ``DELETE_SEGMENT_FINISHED``."""
        from storage_engine import crashpoints
        if not started:
            seg = self.delete_started(seg)
        crashpoints.reached("tier.delete-started")
        self.store.delete(list(self.keys_of(seg).values()))
        crashpoints.reached("tier.objects-deleted")
        return self.delete_finished(seg)

    def abandon(self, seg: md.RemoteSegment) -> None:
        """A copy whose local segment went during the upload: its objects are deleted, its states closed."""
        self.delete_objects(seg)
