"""Test helper: tier one partition now, as the tiering job does (its copy step and its local retention), through
the real parts: the segment's files uploaded and verified by the object store, COPY_SEGMENT_STARTED and
COPY_SEGMENT_FINISHED published to ``__remote_log_metadata`` around the upload, then the engine's local retention
with the highest offset copied. Used by the read tests until the tiering job itself can run them."""
from __future__ import annotations

import os
import time
import uuid

from storage_engine import layout
from storage_engine.config import StorageConfig
from storage_engine.log.manager import LogManager
from storage_engine.log.topic_id import ensure_topic_id
from storage_engine.maintenance import retention
from storage_engine.tiered.keys import segment_keys
from storage_engine.tiered.metadata import COPY_SEGMENT_FINISHED, RemoteSegment
from storage_engine.tiered.object_store import ObjectStore
from storage_engine.tiered.remote_log import RemoteLogMetadata, RemoteLogView
from storage_engine.tiered.settings import RemoteStorageSettings

PARTS = {"log": layout.LOG_SUFFIX, "index": layout.INDEX_SUFFIX, "timeindex": layout.TIME_INDEX_SUFFIX,
         "txnindex": layout.TXN_INDEX_SUFFIX}


def tier_partition(config: StorageConfig, topic: str, partition: int, now_ms: int | None = None) -> int:
    """Copy the sealed segments of ``topic``-``partition`` below its last stable offset, then delete the local
    copies local retention allows; returns the local log start offset after."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    settings = RemoteStorageSettings.of(config)
    store = ObjectStore(settings)
    metadata = RemoteLogMetadata(settings.metadata_partitions)
    with LogManager.open(config) as mgr:
        log = mgr.get_log(topic, partition)
        assert log is not None, f"{topic}-{partition} does not exist"
        topic_id = ensure_topic_id(log.dir, config.log_dirs)
        view = RemoteLogView.load(mgr)
        highest = view.highest_offset(topic, partition, topic_id=topic_id)
        segments = list(log.segments)
        bound = min(log.last_stable_offset, log.high_watermark)
        for seg, nxt in zip(segments, segments[1:]):
            end = nxt.base_offset - 1
            if end <= highest:
                continue
            if end >= bound:
                break
            remote = RemoteSegment(topic, topic_id, partition, uuid.uuid4(), seg.base_offset, end,
                                   seg.max_timestamp_so_far, now, 0, {0: seg.base_offset}, seg.size)
            metadata.publish(mgr, remote, view)
            keys = segment_keys(settings.key_prefix, topic, topic_id, partition, seg.base_offset, remote.segment_id)
            for part, suffix in PARTS.items():
                path = seg.file_path(suffix)
                if os.path.exists(path) and os.path.getsize(path):
                    uploaded = store.upload(keys[part], path)
                    store.verify(keys[part], uploaded.size, uploaded.checksum)
            metadata.publish(mgr, remote.update(COPY_SEGMENT_FINISHED, now), view)
            highest = end
        retention.run(log, now, remote_upper=highest)
        mgr.checkpoint([log.log_dir])
        return log.local_log_start_offset
