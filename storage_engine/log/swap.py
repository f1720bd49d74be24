"""The cleaner's swap of segments, crash-safe and visible to every process (Kafka's ``replaceSegments`` with a
pending-change record), and how a half-done swap is resolved.

Swap (:func:`storage_engine.log.replace.replace_segments`; the cleaner holds the partition lock from step 0 to step 5):

0. record the intent (:mod:`storage_engine.log.intent`), op ``swap``: ``new_base`` (the cleaned segment's base,
   the first old segment's), ``new`` (the inode of each of its files; null for a missing index), ``old``
   (``[base, {suffix: inode}]`` of each replaced segment, its ``.snapshot`` included unless it is at
   ``new_base``), ``range_end`` (the base of the segment after the
   group), ``new_last_offset`` and ``new_size`` (the last offset and the size of the cleaned ``.log``; an empty
   one's last offset is ``new_base - 1``) and
   ``delete_after``; bump the generation, so every other process reloads, under the lock, once it is done;
1. ``.cleaned`` -> ``.swap``, the ``.log`` first; fsync the dir;
2. every old segment -> ``.deleted`` (stamped now: purged after ``file.delete.delay.ms``), then the producer
   snapshot named by its base unless that is ``new_base`` (Kafka's ``replaceSegments``: the state as of the new
   segment's base stays true);
3. ``.swap`` -> final names, the indexes (``.index``, ``.timeindex``, ``.txnindex``) first, the ``.log`` last;
   fsync the dir;
4. with ``delete_after`` (a group whose records all went): the new segment -> ``.deleted``, the ``.log`` first;
5. remove the record; bump the generation.

A truncation that cuts a segment's ``.log`` uses the same steps and the same record for one segment replaced by
its kept prefix at the same base (:mod:`storage_engine.log.rewrite`; the record adds a ``reason``, which the
resolution's messages name), so everything below covers it too.

Resolution (:func:`resolve`): a process that holds the partition lock and finds a swap record knows the cleaner
died between steps 0 and 5. Files are told apart by inode (a rename keeps it), so every stage is recognised:

* the new ``.log`` is ``.swap`` or final and **validates** (every batch passes its CRC; offsets rise, start at or
  above ``new_base`` and stay below ``range_end``; the last is ``new_last_offset``; the size is ``new_size``):
  the swap is completed (steps 2-4);
* the new ``.log`` is still ``.cleaned``, missing, or does not validate: the swap is rolled back: the new files
  are removed and every old file this swap renamed ``.deleted`` (producer snapshots included) gets its name back;
* the new ``.log`` is already ``.deleted`` (step 4 began): step 4 is finished.

Either way the record is removed and the event reported. A record none of whose inodes matches a file (the log
dir was copied elsewhere) is dropped and the loader's file-based rules apply.

Without a record (a ``.swap`` left by a Kafka broker, or damage) the loader follows Kafka (``LogLoader`` steps
1-2: every ``.swap`` at or above the smallest ``.cleaned`` is discarded, then each remaining ``.swap`` replaces
the files of [its base, its next offset)), but first **validates** each ``.swap`` (:func:`plan_orphans`): every
batch passes its CRC, offsets rise from its base, and every segment it would replace ends inside it (a ``.swap``
holding half a segment would lose the rest). Producer snapshots in the replaced range are kept (Kafka's
``replaceSegments`` of a recovered swap leaves them; the load's stray-snapshot rule applies). One that fails is discarded and reported, and ``.deleted`` segments
of its range whose final name is free get it back (never two that overlap).

A resolution is first planned (:class:`Plan`: renames and removals computed without changing anything, which
``verify`` reports) and then applied.
"""
from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass, field

from storage_engine import crashpoints, layout
from storage_engine.durable import durable_rename, fsync_dir
from storage_engine.errors import CorruptRecordError, StorageError, StorageIOError
from storage_engine.log import intent
from storage_engine.segment.file_records import FileRecords

logger = logging.getLogger(__name__)

LOG, INDEX, TIME_INDEX = layout.LOG_SUFFIX, layout.INDEX_SUFFIX, layout.TIME_INDEX_SUFFIX
TXN_INDEX, SNAPSHOT = layout.TXN_INDEX_SUFFIX, layout.SNAPSHOT_SUFFIX
SUFFIXES = (LOG, INDEX, TIME_INDEX, TXN_INDEX)   # a segment's files; the .txnindex exists once one was written
INDEXES = (INDEX, TIME_INDEX, TXN_INDEX)          # renamed to their final names before the .log
SWAP, CLEANED, DELETED = layout.SWAP_SUFFIX, layout.CLEANED_SUFFIX, layout.DELETED_SUFFIX
_EXTRAS = ("", SWAP, CLEANED, DELETED)
OP = "swap"


# -- plans -------------------------------------------------------------------------------------------------------

@dataclass
class Plan:
    """What a resolution does: ``actions`` are ("rename", src, dst) and ("remove", path), in order; ``messages``
    say what and why, ``damage`` those of them that report a damaged file."""
    outcome: str
    actions: list = field(default_factory=list)
    messages: list = field(default_factory=list)
    damage: list = field(default_factory=list)

    def rename(self, src: str, dst: str) -> None:
        self.actions.append(("rename", src, dst))

    def remove(self, path: str) -> None:
        self.actions.append(("remove", path))

    def apply(self, dir_path: str, now_ms: int) -> None:
        for i, action in enumerate(self.actions):
            if action[0] == "rename":
                if durable_rename(action[1], action[2], sync=False, missing_ok=True) and \
                        action[2].endswith(DELETED):
                    _stamp(action[2], now_ms)
            else:
                try:
                    os.remove(action[1])
                except FileNotFoundError:
                    pass
                except OSError as exc:
                    raise StorageIOError("cannot remove a file while resolving a swap", action[1], exc) from exc
            if i == 0:
                crashpoints.reached("resolve.partial")
        if self.actions:
            fsync_dir(dir_path)

    def effective_names(self, names: Iterable[str]) -> dict[str, str]:
        """{name after the plan: name now} for a folder holding ``names`` (what ``verify`` inspects)."""
        out = {n: n for n in names}
        for action in self.actions:
            src = os.path.basename(action[1])
            current = out.pop(src, None)
            if action[0] == "rename" and current is not None:
                out[os.path.basename(action[2])] = current
        return out


def _stamp(path: str, now_ms: int) -> None:
    """The mtime of a ``.deleted`` file is when it was scheduled for removal (the purge counts from it)."""
    try:
        os.utime(path, (now_ms / 1000.0, now_ms / 1000.0))
    except FileNotFoundError:
        pass


def inode_of(path: str) -> int | None:
    try:
        return os.stat(path).st_ino
    except FileNotFoundError:
        return None


def scan_log(path: str, base: int, range_end: int | None = None) -> tuple[int, int | None, int, str | None]:
    """(next offset, last offset or None, size, error or None) of a ``.log`` read strictly: every batch passes
    its CRC, offsets rise from ``base`` and stay below ``range_end``."""
    try:
        fr = FileRecords(path, writable=False)
    except StorageError as exc:
        return base, None, 0, str(exc)
    nxt, last = base, None
    try:
        for batch in fr.read_batches(0, strict=True):
            batch.ensure_valid()
            first = batch.base_offset if batch.magic >= 2 else batch.last_offset
            if first < nxt or batch.last_offset < first:
                return nxt, last, fr.size, (f"batch at position {batch.file_position} with offsets "
                                            f"[{first}, {batch.last_offset}] is out of order (expected >= {nxt})")
            if range_end is not None and batch.last_offset >= range_end:
                return nxt, last, fr.size, (f"batch at position {batch.file_position} holds offset "
                                            f"{batch.last_offset}, beyond the replaced range's end {range_end}")
            last, nxt = batch.last_offset, batch.last_offset + 1
        return nxt, last, fr.size, None
    except CorruptRecordError as exc:
        return nxt, last, fr.size, str(exc)
    finally:
        fr.close()


# -- a swap recorded by its cleaner ------------------------------------------------------------------------------

def _locate(dir_path: str, base: int, suffix: str, inode: int | None) -> str | None:
    """Under which extra suffix ("", .swap, .cleaned, .deleted) the file with ``inode`` now is, or None."""
    if inode is None:
        return None
    for extra in _EXTRAS:
        if inode_of(layout.segment_file(dir_path, base, suffix, extra)) == inode:
            return extra
    return None


def plan_intent(dir_path: str, rec: dict) -> Plan | None:
    """The resolution of a swap record (see the module docstring); None for a record matching no file."""
    try:
        b0, new, olds = int(rec["new_base"]), dict(rec["new"]), [(int(b), dict(i)) for b, i in rec["old"]]
        range_end, last_offset, size = int(rec["range_end"]), int(rec["new_last_offset"]), int(rec["new_size"])
        delete_after = bool(rec.get("delete_after"))
    except (KeyError, TypeError, ValueError):
        return None
    path = lambda base, suffix, extra="": layout.segment_file(dir_path, base, suffix, extra)  # noqa: E731
    new_at = {s: _locate(dir_path, b0, s, new.get(s)) for s in SUFFIXES}
    old_at = [(base, s, _locate(dir_path, base, s, inodes.get(s))) for base, inodes in olds
              for s in SUFFIXES + (SNAPSHOT,) if s in inodes]
    if all(v is None for v in new_at.values()) and all(v is None for _, _, v in old_at):
        return None
    rewrite = isinstance(rec.get("reason"), str)
    what = (f"rewrite of segment {b0} for a {rec['reason']}" if rewrite
            else f"swap of segments {[b for b, _ in olds]} into a cleaned segment at {b0}")
    log_at = new_at[LOG]
    reason = None
    if log_at in ("", SWAP):
        nxt, last, actual_size, err = scan_log(path(b0, LOG, log_at), b0, range_end)
        if err is None and ((b0 - 1 if last is None else last) != last_offset or actual_size != size):
            err = (f"it holds {actual_size} bytes ending at offset {last}; the cleaner wrote {size} bytes "
                   f"ending at {last_offset}")
        if err is not None:
            reason = f"the cleaned segment {os.path.basename(path(b0, LOG, log_at))} does not validate: {err}"
    elif log_at != DELETED:
        reason = ("the cleaned segment never became .swap" if log_at == CLEANED
                  else "the cleaned segment's .log is missing")
    if reason is None:
        plan = Plan("complete", messages=[f"completed the {what}, left half done by a "
                                                     f"{'process' if rewrite else 'cleaner'} that died"])
        moved = set()
        for base, s, at in old_at:
            if at == "":
                plan.rename(path(base, s), path(base, s, DELETED))
                moved.add(path(base, s))
        if log_at != DELETED:
            for s in INDEXES + (LOG,):
                if new_at[s] in (SWAP, CLEANED):
                    plan.rename(path(b0, s, new_at[s]), path(b0, s))
                elif new_at[s] is None and os.path.exists(path(b0, s)) and path(b0, s) not in moved:
                    plan.remove(path(b0, s))  # not the new segment's own index: rebuilt when needed
            if delete_after:
                for s in SUFFIXES:
                    if new_at[s] is not None:
                        plan.rename(path(b0, s), path(b0, s, DELETED))
        else:
            for s in INDEXES:
                if new_at[s] in ("", SWAP, CLEANED):
                    plan.rename(path(b0, s, new_at[s]), path(b0, s, DELETED))
        return plan
    plan = Plan("roll back", messages=[f"rolled back the {what}: {reason}; the old segments are kept"])
    if log_at in ("", SWAP):
        plan.damage.append(plan.messages[0])
    for s in SUFFIXES:
        if new_at[s] in ("", SWAP, CLEANED):
            plan.remove(path(b0, s, new_at[s]))
    for base, s, at in old_at:
        if at == DELETED:
            plan.rename(path(base, s, DELETED), path(base, s))
        elif at is None and s == LOG:
            plan.messages.append(f"segment {base} of the rolled back swap is gone from {dir_path}: its records "
                                 "are lost")
    return plan


# -- swaps without a record (Kafka's load rules, validated) -------------------------------------------------------

def list_folder(dir_path: str) -> list[str]:
    try:
        return sorted(os.listdir(dir_path))
    except OSError as exc:
        raise StorageIOError("cannot list partition folder", dir_path, exc) from exc


def plan_orphans(dir_path: str, names: list[str] | None = None) -> Plan:
    """Kafka's ``.cleaned``/``.swap`` handling at load, each ``.swap`` validated first (module docstring)."""
    names = list_folder(dir_path) if names is None else names
    plan = Plan("nothing to do")
    path = lambda base, suffix, extra="": layout.segment_file(dir_path, base, suffix, extra)  # noqa: E731
    cleaned = [n for n in names if n.endswith(CLEANED) and layout.is_offset_named(n)]
    swaps = [n for n in names if n.endswith(SWAP) and layout.is_offset_named(n)]
    if cleaned:
        min_cleaned = min(layout.offset_from_filename(n) for n in cleaned)
        for n in list(swaps):
            if layout.offset_from_filename(n) >= min_cleaned:
                plan.remove(os.path.join(dir_path, n))
                plan.messages.append(f"discarded incomplete swap {n}")
                swaps.remove(n)
        for n in cleaned:
            plan.remove(os.path.join(dir_path, n))
            plan.messages.append(f"removed {n}, left by a cleaner that died before its swap")
    finals = sorted(layout.offset_from_filename(n) for n in names
                    if n.endswith(LOG) and layout.is_offset_named(n)) if swaps else []
    valid = []
    for n in sorted(n for n in swaps if n.endswith(LOG + SWAP)):
        base = layout.offset_from_filename(n)
        nxt, _last, _size, err = scan_log(os.path.join(dir_path, n), base)
        if err is None:
            for fb in (b for b in finals if base <= b < nxt):
                fnxt = scan_log(path(fb, LOG), fb)[0]
                if fnxt > nxt:
                    err = (f"it ends at offset {nxt - 1} but would replace segment {fb}, which holds offsets up "
                           f"to {fnxt - 1}")
                    break
        if err is None:
            valid.append((base, nxt))
            continue
        for s in SUFFIXES:
            if f"{layout.filename_prefix(base)}{s}{SWAP}" in names:
                plan.remove(path(base, s, SWAP))
        plan.messages.append(f"discarded {n}, which does not validate: {err}")
        plan.damage.append(plan.messages[-1])
        _restore_deleted(dir_path, names, base, finals, plan)
    if valid:
        lo, hi = min(b for b, _ in valid), max(n for _, n in valid)
        keep = {layout.filename_prefix(b) for b, _ in valid}
        for n in names:
            if n.endswith(SWAP) or not layout.is_offset_named(n) or n.endswith(CLEANED) or SNAPSHOT in n:
                continue
            if lo <= layout.offset_from_filename(n) < hi:
                plan.remove(os.path.join(dir_path, n))
        for n in swaps:
            if n.split(".", 1)[0] in keep:
                plan.rename(os.path.join(dir_path, n), os.path.join(dir_path, n[:-len(SWAP)]))
                if n.endswith(LOG + SWAP):
                    plan.messages.append(f"completed swap {n}")
    if plan.actions:
        plan.outcome = "resolve"
    return plan


def _restore_deleted(dir_path: str, names: list[str], base: int, finals: list[int], plan: Plan) -> None:
    """Give ``.deleted`` segments of [base, next final base) their names back, if free and not overlapping."""
    upper = next((b for b in finals if b > base), None)
    below = [b for b in finals if b < base]
    prev_next = scan_log(layout.segment_file(dir_path, below[-1], LOG), below[-1])[0] if below else 0
    candidates = sorted(layout.offset_from_filename(n) for n in names
                        if n.endswith(LOG + DELETED) and layout.is_offset_named(n))
    for b in candidates:
        if b < base or (upper is not None and b >= upper) or b in finals:
            continue
        src = layout.segment_file(dir_path, b, LOG, DELETED)
        nxt, _last, _size, err = scan_log(src, b, upper)
        if err is not None or b < prev_next:
            continue
        for s in SUFFIXES:
            if f"{layout.filename_prefix(b)}{s}{DELETED}" in names:
                plan.rename(layout.segment_file(dir_path, b, s, DELETED), layout.segment_file(dir_path, b, s))
        plan.messages.append(f"restored segment {b} from its .deleted files")
        prev_next = nxt


# -- resolution --------------------------------------------------------------------------------------------------

def pending_plan(log_dir: str, partition_dir: str, dir_path: str) -> tuple[Plan | None, list[str], bool]:
    """(plan for the partition's swap record or None, messages, whether the record goes once the plan is
    applied); reads only."""
    rec, err = intent.read(log_dir, partition_dir)
    if err:
        return None, [err], True
    if rec is None:
        return None, [], False
    if rec.get("op") != OP:
        return None, [f"pending change {rec.get('op')!r} of {partition_dir} is not one this version knows; "
                      "left in place"], False
    plan = plan_intent(dir_path, rec)
    if plan is None:
        return None, [f"the swap record of {partition_dir} matches no file (the log dir was copied?): dropped; "
                      "the load's file-based rules apply"], True
    return plan, list(plan.messages), True


def resolve(log_dir: str, partition_dir: str, dir_path: str, now_ms: int, *, orphans: bool,
            listing: list[str] | None = None) -> list[str]:
    """Complete or roll back a swap whose cleaner died (caller holds the partition lock); with ``orphans`` (a
    load) also handle ``.swap``/``.cleaned`` files without a record. Returns what was done. ``listing``: the
    folder's sorted names, if the caller has them; updated in place to what the folder holds afterwards."""
    messages: list[str] = []
    if intent.exists(log_dir, partition_dir):
        plan, messages, clear = pending_plan(log_dir, partition_dir, dir_path)
        if plan is not None:
            plan.apply(dir_path, now_ms)
            if listing is not None and plan.actions:
                listing[:] = list_folder(dir_path)
        if clear:
            intent.clear(log_dir, partition_dir)
    if orphans:
        plan = plan_orphans(dir_path, listing)
        plan.apply(dir_path, now_ms)
        messages += plan.messages
        if listing is not None and plan.actions:
            listing[:] = sorted(plan.effective_names(listing))
    for m in messages:
        logger.warning("%s: %s", partition_dir, m)
    return messages
