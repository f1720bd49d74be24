"""Reads of a whole log, its local and its remote tier together: what the CLI's ``consume``, the broker's Fetch
and ListOffsets and the message browser call for offsets that may lie below the local log start.

* :func:`read_records`: :meth:`Log.read_records` over the whole log (remote part, then local);
* :func:`aborted_transactions`: the remote ``.txnindex`` objects, then the local ones (Kafka's
  ``RemoteLogManager.collectAbortedTransactions``);
* :func:`offset_for_timestamp`: remote segments first, then the local log (Kafka's ``fetchOffsetByTimestamp``);
* :func:`open_reader`: the :class:`~storage_engine.tiered.reads.RemoteReader` of a process that has no broker
  (the CLI, an inspection): the object store of the config and the remote view read from
  ``__remote_log_metadata`` through the process's log manager.
"""
from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Protocol

from storage_engine.errors import DataLossError, InvalidRecordError, OffsetInRemoteStorageError, OffsetOutOfRangeError
from storage_engine.log.aborted_filter import AbortedFilter
from storage_engine.log.reads import ISOLATION_LEVELS, READ_COMMITTED
from storage_engine.log.topic_id import read_topic_id
from storage_engine.record.records import Record
from storage_engine.segment.txn_index import AbortedTxn
from storage_engine.tiered.reads import RemoteReader

if TYPE_CHECKING:
    from storage_engine.config import StorageConfig
    from storage_engine.log.manager import LogManager


def open_reader(config: StorageConfig, mgr: LogManager) -> RemoteReader | None:
    """The remote reader of ``config``'s store, or None when ``remote.log.storage.system.enable`` is off."""
    from storage_engine.tiered.settings import RemoteStorageSettings
    settings = RemoteStorageSettings.of(config)
    if not settings.enabled:
        return None
    from storage_engine.tiered.object_store import ObjectStore
    from storage_engine.tiered.remote_log import RemoteLogView
    return RemoteReader(settings, ObjectStore(settings), RemoteLogView.load(mgr))


def topic_id_of(log: Any) -> uuid.UUID | None:
    """The topic id in the partition's ``partition.metadata``: the remote view keeps the segments of a topic
    deleted and created again under the same name apart by it (None: the view takes the latest it knows)."""
    return read_topic_id(log.dir)


class LocalReads(Protocol):
    """What the joint reads use of a :class:`~storage_engine.log.log.Log`."""

    @property
    def log_start_offset(self) -> int: ...

    @property
    def local_log_start_offset(self) -> int: ...

    @property
    def dir(self) -> str: ...

    def aborted_transactions(self, start_offset: int, upper_bound_offset: int) -> list[AbortedTxn]: ...


def aborted_transactions(log: LocalReads, reader: RemoteReader, topic: str, partition: int, start: int,
                         upper: int) -> list[AbortedTxn]:
    """Aborted transactions overlapping [start, upper) for a read that begins below the local log start: the
    remote ``.txnindex`` objects, then the local ones if the remote search is not complete (a transaction begun
    in a remote segment and aborted in a local one is indexed locally), as Kafka's ``RemoteLogManager`` does."""
    result = reader.aborted_transactions(topic, partition, start, upper, topic_id=topic_id_of(log))
    found = list(result.aborted)
    if not result.complete:
        seen = set(found)
        found.extend(t for t in log.aborted_transactions(max(start, log.local_log_start_offset), upper)
                     if t not in seen)
    return found


def offset_for_timestamp(log: Any, reader: RemoteReader | None, topic: str, partition: int,
                         timestamp: int) -> tuple[int, int] | None:
    """(timestamp, offset) of the first record with timestamp >= ``timestamp``: the remote segments first when the
    log has offsets below its local start, then the local log (Kafka's ``fetchOffsetByTimestamp``)."""
    if reader is not None and log.log_start_offset < log.local_log_start_offset:
        found = reader.offset_for_timestamp(topic, partition, timestamp, log.log_start_offset,
                                            topic_id=topic_id_of(log))
        if found is not None:
            return found
    found_local: tuple[int, int] | None = log.offset_for_timestamp(timestamp)
    return found_local


def read_records(log: Any, reader: RemoteReader | None, topic: str, partition: int, start_offset: int | None,
                 max_records: int | None, isolation_level: str) -> Iterator[Record]:
    """:meth:`Log.read_records` over the whole log: offsets below the local log start from the remote segments
    (with the same ``read_committed`` filter: no marker, no record of an aborted transaction, nothing at or past
    the last stable offset), the rest from the local log. Without a ``reader`` an offset below the local start
    raises :class:`OffsetInRemoteStorageError` as the local read does. If local retention moves the local start
    up during the read, the offsets it took are read from the remote segments."""
    if isolation_level not in ISOLATION_LEVELS:
        raise InvalidRecordError(f"isolation level must be one of {ISOLATION_LEVELS}, got {isolation_level!r}")
    offset = log.log_start_offset if start_offset is None else start_offset
    left = max_records
    while left is None or left > 0:
        local_start = log.local_log_start_offset
        if offset >= local_start or reader is None:
            try:
                for rec in log.read_records(offset, left, isolation_level=isolation_level):
                    yield rec
                    offset = rec.offset + 1
                    if left is not None:
                        left -= 1
                return
            except OffsetInRemoteStorageError:
                if reader is None:
                    raise
                continue                # local retention removed what we were about to read: read it remotely
        if offset < log.log_start_offset:
            raise OffsetOutOfRangeError(f"offset {offset} is out of range for {topic}-{partition}: log start offset "
                                        f"{log.log_start_offset}, log end offset {log.log_end_offset}")
        for rec in _remote_records(log, reader, topic, partition, offset, local_start, left, isolation_level):
            yield rec
            if left is not None:
                left -= 1
        if (log.last_stable_offset if isolation_level == READ_COMMITTED else log.log_end_offset) <= local_start:
            return
        offset = local_start


def _remote_records(log: Any, reader: RemoteReader, topic: str, partition: int, offset: int, local_start: int,
                    max_records: int | None, isolation_level: str) -> Iterator[Record]:
    """The records of [offset, local_start) from the remote segments (:func:`read_records`' remote part)."""
    committed = isolation_level == READ_COMMITTED
    end = min(local_start, log.last_stable_offset if committed else log.log_end_offset)
    aborted = AbortedFilter(aborted_transactions(log, reader, topic, partition, offset, end) if committed else ())
    produced = 0
    topic_id = topic_id_of(log)
    remote = reader.segments_from(topic, partition, offset, topic_id=topic_id)
    if not remote or remote[-1].end_offset < local_start - 1:
        held = remote[-1].end_offset if remote else None
        raise DataLossError(f"offsets of {topic}-{partition} below the local log start {local_start} are in no "
                            f"finished remote segment (the remote segments end at {held}); reading from {offset}")
    for batch in reader.batches(topic, partition, offset, topic_id=topic_id):
        if batch.base_offset >= end:
            return
        if aborted.is_aborted(batch):   # the rule of the local read (storage_engine.log.aborted_filter)
            continue
        if batch.is_control:
            continue
        for rec in batch.records():
            if rec.offset < offset:
                continue
            if rec.offset >= end:
                return
            yield rec
            produced += 1
            if max_records is not None and produced >= max_records:
                return


class RemotePart:
    """The remote part of one partition for a read-only reader (the message browser): the offsets from the log
    start up to the local log start, read through ``reader``."""

    def __init__(self, reader: RemoteReader, topic: str, partition: int, topic_id: uuid.UUID | None, log_start: int,
                 local_start: int):
        self.reader, self.topic, self.partition, self.topic_id = reader, topic, partition, topic_id
        self.log_start, self.local_start = log_start, local_start

    def batches(self, start: int) -> Iterator[Any]:
        """The checked remote batches from the one holding ``start`` to the local log start."""
        if start >= self.local_start:
            return
        for batch in self.reader.batches(self.topic, self.partition, max(start, self.log_start),
                                         topic_id=self.topic_id):
            if batch.base_offset >= self.local_start:
                return
            yield batch

    def aborted_transactions(self, start: int, upper: int) -> list[AbortedTxn]:
        """The aborted transactions overlapping [start, min(upper, local start)) whose markers lie in the remote
        part; the local ``.txnindex`` files hold the others (a segment in both tiers is searched locally)."""
        upper = min(upper, self.local_start)
        found = self.reader.aborted_transactions(self.topic, self.partition, start, upper, topic_id=self.topic_id)
        return [t for t in found.aborted if t.last_offset < self.local_start]

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        return self.reader.offset_for_timestamp(self.topic, self.partition, timestamp, self.log_start,
                                                topic_id=self.topic_id)


@contextlib.contextmanager
def remote_part(config: StorageConfig, partition_dir: str, topic: str, partition: int, log_start: int,
                local_start: int) -> Iterator[RemotePart | None]:
    """The remote part of a partition (in ``partition_dir``) whose log start lies below its local log start, for a reader
    without a broker: None unless the topic is tiered, the broker's remote storage is on and finished remote
    segments hold offsets below ``local_start``. The remote view is read through a read-only log manager (no file
    of the log dirs is changed)."""
    if log_start >= local_start or not config.log_config(topic).remote_storage_enable:
        yield None
        return
    from storage_engine.log.manager import LogManager
    with LogManager.open(config, partitions=[], read_only=True) as mgr:
        reader = open_reader(config, mgr)
        topic_id = read_topic_id(partition_dir)
        segments = reader.view.segments(topic, partition, topic_id=topic_id) if reader is not None else []
        if reader is None or not segments or segments[0].start_offset >= local_start:
            yield None
            return
        yield RemotePart(reader, topic, partition, topic_id, max(log_start, segments[0].start_offset), local_start)
