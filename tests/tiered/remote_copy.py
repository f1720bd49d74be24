"""Test helper for the reader's own tests: copy a partition's sealed segments to the object store under the
object-key layout, as the tiering job does (without its metadata records), and describe them as the remote view
would. The end-to-end tests use the tiering job and the remote view themselves."""
from __future__ import annotations

import dataclasses
import os
import uuid

from storage_engine import layout
from storage_engine.log.log import Log
from storage_engine.tiered.keys import segment_keys
from storage_engine.tiered.settings import RemoteStorageSettings
from storage_engine.tiered.object_store import ObjectStore

SUFFIXES = {"log": layout.LOG_SUFFIX, "index": layout.INDEX_SUFFIX, "timeindex": layout.TIME_INDEX_SUFFIX,
            "txnindex": layout.TXN_INDEX_SUFFIX}
FINISHED = 1


@dataclasses.dataclass(frozen=True)
class CopiedSegment:
    """A copied segment as the remote view describes one (:class:`storage_engine.tiered.metadata.RemoteSegment`'s
    fields)."""
    topic: str
    topic_id: uuid.UUID
    partition: int
    segment_id: uuid.UUID
    start_offset: int
    end_offset: int
    max_timestamp_ms: int
    event_timestamp_ms: int
    broker_id: int
    segment_leader_epochs: dict[int, int]
    size_bytes: int
    state: int


class StaticView:
    """The segments a test copied, answered as :class:`RemoteLogView` answers ``segments``."""

    def __init__(self, segments: list[CopiedSegment]):
        self.copied = sorted(segments, key=lambda s: s.start_offset)

    def segments(self, topic: str, partition: int, *, topic_id: uuid.UUID | None = None) -> list[CopiedSegment]:
        return [s for s in self.copied if (s.topic, s.partition) == (topic, partition)]


def copy_sealed(log: Log, settings: RemoteStorageSettings, store: ObjectStore, topic_id: uuid.UUID,
                upto: int | None = None) -> list[CopiedSegment]:
    """Upload every sealed segment of ``log`` (those ending below ``upto``, if given) and return them as
    FINISHED remote segments."""
    segs = list(log.segments)
    out = []
    for seg, nxt in zip(segs, segs[1:]):
        end = nxt.base_offset - 1
        if upto is not None and end >= upto:
            break
        segment_id = uuid.uuid4()
        keys = segment_keys(settings.key_prefix, log.topic, topic_id, log.partition, seg.base_offset, segment_id)
        for part, suffix in SUFFIXES.items():
            path = seg.file_path(suffix)
            if part in keys and os.path.exists(path) and (part != "txnindex" or os.path.getsize(path)):
                store.upload(keys[part], path)
        out.append(CopiedSegment(topic=log.topic, topic_id=topic_id, partition=log.partition, segment_id=segment_id,
                                 start_offset=seg.base_offset, end_offset=end,
                                 max_timestamp_ms=seg.max_timestamp_so_far, event_timestamp_ms=0, broker_id=0,
                                 segment_leader_epochs={0: seg.base_offset}, size_bytes=seg.size,
                                 state=FINISHED))
    return out
