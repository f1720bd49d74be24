"""Truncation by rewrite: a truncation that cuts bytes of a segment's ``.log`` writes the kept prefix to a new
file and swaps it in, so the old file (its inode) is never changed.

Why: a fetch sends verified bytes straight from the segment file (``sendfile``, :mod:`storage_engine.segment.verified`),
and ``sendfile`` queues page-cache pages by reference. Were a file cut and then written again in place, bytes a
send had already queued could change before they left. A file that is only ever renamed and unlinked keeps its
bytes for whoever holds it open, exactly as the cleaner's swap, retention and ``delete-records`` already leave
them; an in-flight send from the old file completes with the old bytes. The new file is a new inode, so every
verified range of the old one (keyed by ``(st_dev, st_ino)``) is left behind by itself.

The steps (:func:`truncate_segment`; the caller holds the partition lock and bumped the generation first, as every
truncation does) are the cleaner's swap (:mod:`storage_engine.log.swap`) with one old segment and a new one at the
same base offset, so the same record and the same resolution cover a process that dies at any of them:

0. write the kept prefix to ``.cleaned`` files, fsynced (:func:`storage_engine.segment.truncated_copy.truncated_copy`);
   step ``rewrite.copied``. A process dying here leaves ``.cleaned`` files and no record: the next load removes
   them, and the log is as it was (a later truncation writes them afresh);
1. record the intent, op ``swap``: ``new_base`` = ``old`` = the segment's base, the inodes of the new and old files,
   ``range_end`` = the truncation offset (every kept batch ends below it), ``new_last_offset`` and ``new_size``
   of the kept prefix (``base - 1`` and 0 when nothing is kept); ``rewrite.intent``;
2. ``.cleaned`` -> ``.swap``, the ``.log`` first (``rewrite.swap-partial``); fsync the dir (``rewrite.swap-ready``);
3. the old segment's files -> ``.deleted`` (purged after ``file.delete.delay.ms``; a holder keeps reading them);
   ``rewrite.old-deleted``;
4. ``.swap`` -> final names, the indexes first (``rewrite.index-final``), the ``.log`` last
   (``rewrite.log-final``); fsync the dir (``rewrite.done``);
5. remove the record (the caller publishes the change with a generation bump).

A process that finds the record (a view's reload or a load, under the lock) completes the truncation when the new
``.log`` is ``.swap`` or final and validates against the record (every batch's CRC, offsets below the truncation
offset, the recorded size and last offset), and otherwise rolls it back: the old segment gets its name back,
whole. Either is a log the caller could have left: a truncation cut short by a crash is one that did not happen
(the segments above the cut, already deleted by then, stay deleted: the log is a prefix of what it was, and a
caller that needs the truncation, such as a follower, truncates again).

Not rewritten: a cut that removes no ``.log`` byte (only index entries go, in place: indexes are never sent),
and the cuts of bytes that were never verified or sent: a torn tail cut by the next lock holder
(:func:`storage_engine.log.view.validate_active_tail`) and a load's recovery (:mod:`storage_engine.segment.recovery`)
cut at the first batch that fails the checks every fetch makes, so no fetch ever verified or sent a byte past it;
a load also runs only when no other process has the partition open.
"""
from __future__ import annotations

from storage_engine import crashpoints, layout
from storage_engine.durable import durable_rename, fsync_dir
from storage_engine.log import intent
from storage_engine.log.local_log import LocalLog
from storage_engine.log.swap import CLEANED, INDEXES, OP, SUFFIXES, SWAP, inode_of
from storage_engine.segment.segment import LogSegment
from storage_engine.segment.truncated_copy import cut_position, truncated_copy


def truncate_segment(log: LocalLog, seg: LogSegment, offset: int, now: int) -> int:
    """Remove every batch of ``seg`` (a segment of ``log``, which becomes or is its active segment) whose last
    offset is >= ``offset``; returns the bytes removed. Cuts of ``.log`` bytes go through the rewrite (module
    docstring); the caller holds the lock and bumped the generation. Returns with ``seg`` replaced in
    ``log.segment_list`` by the new segment when it rewrote."""
    cut = cut_position(seg, offset)
    if cut is None or cut >= seg.size:
        return seg.truncate_to(offset, now)     # no .log byte goes: index entries only
    removed = seg.size - cut
    base = seg.base_offset
    new = truncated_copy(seg, offset, cut, log.config, CLEANED, now)
    crashpoints.reached("rewrite.copied")
    last_batch = None
    for last_batch in new.log.read_batches(new.last_index_position()):
        pass
    record = {
        "new_base": base,
        "new": {s: inode_of(layout.segment_file(log.dir, base, s, CLEANED)) for s in SUFFIXES},
        "old": [[base, {s: inode_of(layout.segment_file(log.dir, base, s)) for s in SUFFIXES}]],
        "range_end": offset,
        "new_last_offset": last_batch.last_offset if last_batch is not None else base - 1,
        "new_size": new.size,
        "delete_after": False,
        "reason": f"truncation to offset {offset}",
    }
    intent.write(log.log_dir, log.folder, OP, record)
    crashpoints.reached("rewrite.intent")
    new.change_file_suffixes(CLEANED, SWAP, after_log="rewrite.swap-partial")
    fsync_dir(log.dir)
    crashpoints.reached("rewrite.swap-ready")
    log.delete_segment_files(seg, now, sync=False)
    crashpoints.reached("rewrite.old-deleted")
    for suffix in INDEXES:
        durable_rename(layout.segment_file(log.dir, base, suffix, SWAP), layout.segment_file(log.dir, base, suffix),
                       sync=False, missing_ok=True)
    crashpoints.reached("rewrite.index-final")
    new.change_file_suffixes(SWAP, "")
    log.segment_list.add(new)
    crashpoints.reached("rewrite.log-final")
    fsync_dir(log.dir)
    crashpoints.reached("rewrite.done")
    intent.clear(log.log_dir, log.folder)
    return removed
