"""The cleaner's swap of a cleaned segment into a live log (Kafka's ``replaceSegments``), step by step as
:mod:`storage_engine.log.swap` specifies it: the pending-change record first, then the renames, each stage one a
process that finds it half done completes or rolls back. Runs under the partition lock of the ``LocalLog``.
"""
from __future__ import annotations

import logging

from storage_engine import crashpoints, layout
from storage_engine.durable import durable_rename, fsync_dir
from storage_engine.log import intent, manifest
from storage_engine.log.local_log import LocalLog
from storage_engine.log.swap import CLEANED, INDEXES, OP, SNAPSHOT, SUFFIXES, SWAP, inode_of
from storage_engine.segment.segment import LogSegment

logger = logging.getLogger(__name__)


def replace_segments(log: LocalLog, new_segment: LogSegment | None, old_segments: list[LogSegment],
                     identity: list[tuple[int, int]], now_ms: int, *, delete_after: bool = False) -> bool:
    """The swap (:mod:`storage_engine.log.swap`, steps 0-5) for ``Log.replace_segments``: ``new_segment`` (named ``.cleaned``, complete and
    flushed) replaces ``old_segments``; ``identity`` ((base, inode of the .log) of each old segment when cleaning
    began) must still match, else another process changed them and the swap is abandoned (False). ``new_segment``
    None (old segments without data) only deletes the old segments."""
    with log.locked():
        current = {s.base_offset: s for s in log.segment_list}
        still_there = []
        for base, inode in identity:
            seg = current.get(base)
            if seg is None or inode_of(seg.path) != inode or seg is log.active_segment:
                if new_segment is not None:
                    new_segment.delete_files()
                logger.warning("abandoning cleaned segment for %s at %d: segment %d changed meanwhile",
                               log.name, identity[0][0], base)
                return False
            still_there.append(seg)
        if new_segment is None:
            log.publish(bump=True)
            manifest.keep(log, still_there)     # before the first rename (storage_engine.log.manifest)
            crashpoints.reached("swap.manifest")
            for seg in still_there:
                log.delete_segment_files(seg, now_ms, sync=False, snapshot=True)
            fsync_dir(log.dir)
            log.publish(bump=True)
            return True
        group_end = log.segment_list.base_after(still_there[-1])
        new_base = new_segment.base_offset
        last_batch = None
        for last_batch in new_segment.log.read_batches(new_segment.last_index_position()):
            pass
        record = {
            "new_base": new_segment.base_offset,
            "new": {s: inode_of(layout.segment_file(log.dir, new_segment.base_offset, s, CLEANED)) for s in SUFFIXES},
            "old": [[s.base_offset, {x: inode_of(layout.segment_file(log.dir, s.base_offset, x))
                                     for x in SUFFIXES + ((SNAPSHOT,) if s.base_offset != new_base else ())}]
                    for s in still_there],
            "range_end": group_end,
            "new_last_offset": last_batch.last_offset if last_batch is not None else new_segment.base_offset - 1,
            "new_size": new_segment.size,
            "delete_after": delete_after,
        }
        intent.write(log.log_dir, log.folder, OP, record)
        log.publish(bump=True)
        crashpoints.reached("swap.intent")
        # Before the first rename: the manifest names the group's first base only if the cleaned segment takes it
        # and stays (storage_engine.log.manifest); a rollback's old segments are adopted again by the next load.
        manifest.keep(log, [s for s in still_there if s.base_offset != new_base or delete_after])
        crashpoints.reached("swap.manifest")
        new_segment.change_file_suffixes(CLEANED, SWAP, after_log="swap.swap-partial")
        fsync_dir(log.dir)
        crashpoints.reached("swap.swap-ready")
        for i, seg in enumerate(still_there):
            log.delete_segment_files(seg, now_ms, sync=False, snapshot=seg.base_offset != new_base)
            if i == 0:
                crashpoints.reached("swap.old-partial")
        crashpoints.reached("swap.old-deleted")
        base = new_segment.base_offset
        for suffix in INDEXES:
            durable_rename(layout.segment_file(log.dir, base, suffix, SWAP), layout.segment_file(log.dir, base, suffix),
                           sync=False, missing_ok=True)
        crashpoints.reached("swap.index-final")
        new_segment.change_file_suffixes(SWAP, "")
        log.segment_list.add(new_segment)
        crashpoints.reached("swap.log-final")
        fsync_dir(log.dir)
        if delete_after:
            log.delete_segment_files(new_segment, now_ms, after_log="swap.delete-after")
        crashpoints.reached("swap.done")
        intent.clear(log.log_dir, log.folder)
        log.publish(bump=True)
        return True
