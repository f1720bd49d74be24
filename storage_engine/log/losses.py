"""Offsets a partition lost: found by a load, reported by ``verify``, refused by reads, until an operator accepts.

The log start offset moves only by retention, ``delete-records`` or an operator's ``accept-loss``; a load never
derives it from the files left (Kafka's load raises it to the first segment's base, which turns a deleted first
segment into a log that looks whole). A full load (:mod:`storage_engine.log.loader`) looks for positive evidence
that data the log held is gone, before it repairs anything that would erase the evidence:

* an ``.index``/``.timeindex`` holding entries whose ``.log`` is gone (below the last segment, at or above the
  recorded log start offset, with no ``.log.deleted``/``.swap``/``.cleaned`` at its base: the engine's own
  deletions rename the ``.log`` first and keep it as ``.deleted``): offsets [its base, the next segment) lost;
* the recorded log start offset (the partition's shared state, which every process keeps; a Kafka broker's
  checkpoint may lag behind the retention it did before a crash, so it is no evidence) below the first segment
  present: [recorded, first base) lost, unless the topic is compacted and the cleaner's
  checkpoint reaches the first base (cleaning deletes a group whose records all went and leaves the log start
  offset where it was) or ``.log.deleted`` files lie in between (a deletion the engine is making);
* a sealed segment whose ``.log`` is empty although its range [base, next base) is not: with index entries
  naming the data it held, or in a topic without compaction (nothing else empties a segment there);
* a segment the partition's segment manifest (:mod:`storage_engine.log.manifest`) names that is gone while a
  segment above it is present, in a topic of any policy, compacted included (where the files alone cannot tell
  it from a cleaned group): [its base, the next segment present) lost. Without a manifest (a dir a Kafka broker
  or an earlier version wrote), only the rules above apply.

The ranges go to a small record, ``layout.loss_record_file`` (``.engine+loss+<topic>-<partition>`` in the log
dir root, outside the partition folder, which stays pure Kafka layout), written durably before the orphan index
files go, and merged with what it already holds: after any number of loads ``verify`` reports the same ranges
and the log start offset stays where it was recorded (below the first segment, as Kafka keeps it with remote
storage). Reads of a lost range, or across it, raise :class:`DataLossError` instead of skipping it; the cleaner
neither cleans across it nor moves its checkpoint past it, and retention deletes nothing at or past it
(:func:`barrier`). ``accept-loss``
(:func:`accept`) moves the log start offset past the lost ranges (removing the segments wholly below it, as
retention would) and clears the record. Deleting the partition removes the record; moving it carries the record
to its new dir.
"""
from __future__ import annotations

import json
import logging
import os
import weakref
from collections.abc import Iterable, Sequence
from typing import Protocol, TypedDict

from storage_engine import layout
from storage_engine.config import LogConfig
from storage_engine.durable import atomic_write, durable_remove, read_regular_file
from storage_engine.errors import DataLossError, StorageIOError, UnsafeFileError
from storage_engine.log import manifest, truncation
from storage_engine.log.local_log import LocalLog
from storage_engine.segment.checkpoint import OffsetCheckpointFile

logger = logging.getLogger(__name__)
VERSION = 1
MAX_RECORD_BYTES = 1024 * 1024
# How much of an orphan index is read to see whether it holds entries (entries are at its start).
_EVIDENCE_BYTES = 1 << 16


class LostRange(TypedDict):
    start: int          # first lost offset
    end: int            # the offset after the last lost one
    reason: str
    found_ms: int       # when a load found it


def path_of(log_dir: str, folder: str) -> str:
    return layout.loss_record_file(log_dir, folder)


def read(log_dir: str, folder: str) -> tuple[list[LostRange], str | None]:
    """The partition's recorded losses, sorted: ``(ranges, None)``, or ``([], why)`` for a record that cannot be
    read (damaged: it is written atomically). Read-only."""
    path = path_of(log_dir, folder)
    try:
        raw = read_regular_file(path, MAX_RECORD_BYTES)
    except FileNotFoundError:
        return [], None
    except UnsafeFileError as exc:
        return [], f"{path}: unreadable loss record ({exc.reason})"
    except OSError as exc:
        raise StorageIOError("cannot read the loss record", path, exc) from exc
    try:
        doc = json.loads(raw.decode("utf-8"))
        ranges: list[LostRange] = [{"start": int(r["start"]), "end": int(r["end"]), "reason": str(r["reason"]),
                                    "found_ms": int(r["found_ms"])} for r in doc["lost"]]
    except (UnicodeDecodeError, ValueError, TypeError, KeyError) as exc:
        return [], f"{path}: unreadable loss record ({type(exc).__name__}: {exc})"
    return sorted(ranges, key=lambda r: (r["start"], r["end"])), None


def record(log_dir: str, folder: str, found: Iterable[LostRange]) -> list[LostRange]:
    """Add ``found`` to the partition's record (durably; caller holds the partition lock); returns the ranges
    that were not recorded yet."""
    known, _err = read(log_dir, folder)
    new = [r for r in found if r["end"] > r["start"]
           and not any(k["start"] <= r["start"] and r["end"] <= k["end"] for k in known)]
    if new:
        ranges = sorted(known + new, key=lambda r: (r["start"], r["end"]))
        atomic_write(path_of(log_dir, folder),
                     json.dumps({"version": VERSION, "folder": folder, "lost": ranges}, indent=1).encode())
    return new


def clear(log_dir: str, folder: str) -> bool:
    """Remove the record durably; returns whether there was one."""
    return durable_remove(path_of(log_dir, folder), "the loss record")


def describe(r: LostRange) -> str:
    return f"offsets [{r['start']}, {r['end']}) were lost ({r['reason']})"


def note(dir_path: str, found: list[LostRange], messages: list[str]) -> None:
    """Record what a load found (durably, before it repairs anything) and say so in its messages."""
    if not found:
        return
    log_dir, folder = os.path.split(os.path.abspath(dir_path))
    for r in record(log_dir, folder, found):
        logger.error("%s: %s", dir_path, describe(r))
        messages.append(f"{describe(r)}: recorded in {os.path.basename(path_of(log_dir, folder))}; the log start "
                        "offset stays where it was recorded and verify reports the loss until an operator accepts "
                        "it (accept-loss)")


def recorded(dir_path: str) -> list[LostRange]:
    """The losses recorded for the partition folder ``dir_path`` (an unreadable record counts as none)."""
    log_dir, folder = os.path.split(os.path.abspath(dir_path))
    return read(log_dir, folder)[0]


# -- evidence ------------------------------------------------------------------------------------------------------

def remote_below(cfg: LogConfig) -> bool:
    """Whether the offsets below the first local segment may be in remote storage, so that a log start offset below
    it is no evidence of loss: a tiered topic (``remote.storage.enable``), or one whose remote storage was turned
    off with ``remote.log.delete.on.disable`` (its remote segments exist until the tiering job deletes them and
    raises the log start offset)."""
    return cfg.remote_storage_enable or cfg.remote_log_delete_on_disable


def _holds_entries(path: str) -> bool:
    """Whether an index file holds an entry (a nonzero byte near its start; a preallocated tail is zeros)."""
    try:
        with open(path, "rb") as f:
            return any(f.read(_EVIDENCE_BYTES))
    except OSError:
        return False


def _explained(names: Iterable[str], removed: Iterable[str]) -> set[int]:
    """Bases whose ``.log`` the engine itself is replacing or deleting: a ``.log.deleted``, ``.log.swap`` or
    ``.log.cleaned`` is in the folder (``names``) or was just removed by the load (``removed``, where a plain
    ``.log`` is one a completed swap replaced)."""
    removed = list(removed)
    return {o for n in list(names) + removed
            if n.endswith((layout.LOG_SUFFIX + layout.DELETED_SUFFIX, layout.LOG_SUFFIX + layout.SWAP_SUFFIX,
                           layout.LOG_SUFFIX + layout.CLEANED_SUFFIX))
            and (o := layout.named_offset(n)) is not None} | {
        o for n in removed if n.endswith(layout.LOG_SUFFIX) and (o := layout.named_offset(n)) is not None}


def orphan_index_losses(dir_path: str, names: Sequence[str], removed: Iterable[str], recorded_start: int | None,
                        now_ms: int, *, tiered: bool = False) -> list[LostRange]:
    """Ranges whose ``.log`` is gone while an index holding entries is left (see the module docstring). ``names``:
    the folder's names; ``removed``: names a load removed just before (``.deleted`` files past their delay).
    ``tiered`` (``remote.storage.enable``): below the first ``.log`` local retention deleted it (its offsets are
    in remote storage; the log start offset stays below them), which is no loss."""
    logs = sorted(o for n in names if n.endswith(layout.LOG_SUFFIX) and (o := layout.named_offset(n)) is not None)
    if not logs:
        return []
    explained = _explained(names, removed)
    out: list[LostRange] = []
    seen: set[int] = set()
    for n in names:
        if not n.endswith((layout.INDEX_SUFFIX, layout.TIME_INDEX_SUFFIX)):
            continue
        base = layout.named_offset(n)
        if base is None or base in seen or base in logs or base in explained or base > logs[-1]:
            continue
        if recorded_start is not None and base < recorded_start:
            continue     # below the log start offset: retention deleted it (a kill between its renames)
        if tiered and base < logs[0]:
            continue     # below the local log start offset: local retention deleted it (likewise)
        if not _holds_entries(os.path.join(dir_path, n)):
            continue
        seen.add(base)
        nxt = next(b for b in logs if b > base)
        out.append({"start": base, "end": nxt, "found_ms": now_ms,
                    "reason": f"the .log of segment {base} is gone, its index was left"})
    return out


class SegmentLike(Protocol):
    @property
    def base_offset(self) -> int: ...

    @property
    def size(self) -> int: ...


def emptied_segment_losses(dir_path: str, bases_and_sizes: Sequence[tuple[int, int]], cfg: LogConfig,
                           now_ms: int) -> list[LostRange]:
    """Sealed segments (all but the last) whose ``.log`` is empty while their range is not, with index entries
    naming data or in a topic without compaction. ``bases_and_sizes``: (base offset, .log size), in order."""
    out: list[LostRange] = []
    for (base, size), (nxt, _) in zip(bases_and_sizes, bases_and_sizes[1:]):
        if size != 0 or nxt <= base:
            continue
        indexed = any(_holds_entries(layout.segment_file(dir_path, base, s))
                      for s in (layout.INDEX_SUFFIX, layout.TIME_INDEX_SUFFIX))
        if indexed or not cfg.compact:
            out.append({"start": base, "end": nxt, "found_ms": now_ms,
                        "reason": f"sealed segment {base} was emptied"
                                  + (" (its indexes name the data it held)" if indexed else "")})
    return out


def start_losses(dir_path: str, cfg: LogConfig, names: Iterable[str], first_base: int, recorded_start: int | None,
                 now_ms: int, removed: Iterable[str] = ()) -> list[LostRange]:
    """[recorded log start, first segment) when the recorded log start offset lies below the first segment present
    and neither compaction nor a deletion or swap in progress explains it (module docstring). ``removed``: names
    the load's swap resolution just removed: a swap of the first group whose output was empty and dropped (its
    ``.log.swap`` or the ``.log`` it replaced is among them) explains the range, as the finished swap would have
    moved the log start past it."""
    if recorded_start is None or recorded_start >= first_base or remote_below(cfg):
        return []   # a tiered topic's offsets below its first local segment are in remote storage
    removed = list(removed)
    going = [n for n in names if n.endswith((layout.LOG_SUFFIX + layout.DELETED_SUFFIX,
                                             layout.LOG_SUFFIX + layout.SWAP_SUFFIX))]
    going += [n for n in removed if n.endswith((layout.LOG_SUFFIX, layout.LOG_SUFFIX + layout.SWAP_SUFFIX,
                                                layout.LOG_SUFFIX + layout.DELETED_SUFFIX))]
    if any(o is not None and recorded_start <= o < first_base for o in map(layout.named_offset, going)):
        return []
    if cfg.compact:
        log_dir, folder = os.path.split(os.path.abspath(dir_path))
        try:
            tp = layout.parse_partition_dir(folder)
            cleaned, _ = OffsetCheckpointFile(os.path.join(log_dir, layout.CLEANER_OFFSET_CHECKPOINT)).read_or_empty()
        except (ValueError, StorageIOError):
            cleaned, tp = {}, ("", -1)
        if cleaned.get(tp, -1) >= first_base:
            return []
    return [{"start": recorded_start, "end": first_base, "found_ms": now_ms,
             "reason": f"the log start offset {recorded_start} was recorded, but the first segment present starts "
                       f"at {first_base}: the segment(s) below it are gone"}]


def manifest_losses(dir_path: str, present: Sequence[int], log_start: int | None, now_ms: int,
                    names: Iterable[str], removed: Iterable[str] = (),
                    bases: Sequence[int] | None = None) -> list[LostRange]:
    """Ranges of segments the manifest names that are gone below the last segment present (module docstring).
    ``present``: the bases of the segments present; ``log_start``: the log start offset the partition recorded
    (ranges wholly below it are none); ``names``/``removed``: the folder's names and those the load just removed
    (a segment whose ``.log`` is ``.deleted`` or ``.swap`` there went by a swap or a deletion, not by loss, e.g. a
    swap without a record completed by Kafka's rules); ``bases``: the manifest's, when already read."""
    if bases is None:
        log_dir, folder = os.path.split(os.path.abspath(dir_path))
        bases, _why = manifest.read(log_dir, folder)
    if not bases:
        return []
    explained = _explained(names, removed)
    bases = [b for b in bases if b not in explained]
    have = set(present)
    out: list[LostRange] = []
    for start, end in manifest.missing(bases, present, log_start):
        floor = max([b for b in bases if b <= start], default=start)   # the gone segment holding ``start``
        gone = [b for b in bases if b not in have and floor <= b < end]
        out.append({"start": start, "end": end, "found_ms": now_ms,
                    "reason": f"segment{'s' if len(gone) > 1 else ''} {', '.join(map(str, gone))} named by the "
                              f"segment manifest {'are' if len(gone) > 1 else 'is'} gone from the folder, the next "
                              f"segment present starts at {end}"})
    return out


def barrier(log_dir: str, folder: str, log_start_offset: int) -> LostRange | None:
    """The first recorded lost range not wholly below ``log_start_offset``: maintenance stops below its start
    (the cleaner cleans nothing at or past it and never moves its checkpoint past it; retention deletes no
    segment reaching it) until an operator accepts the loss. Read-only; an unreadable record is no barrier
    (``verify`` reports it)."""
    ranges, _err = read(log_dir, folder)
    return next((r for r in ranges if r["end"] > log_start_offset), None)


def kept_log_start(kafka_start: int, recorded_start: int, ranges: Iterable[LostRange]) -> int:
    """The log start offset of a load: Kafka's (``kafka_start``, the checkpoint raised to the first segment), or,
    when a lost range reaches up to where Kafka's rule would start, where the log start was recorded (never below
    it, never below the lost range's start)."""
    lead = [r["start"] for r in ranges if r["start"] < kafka_start <= r["end"]]
    return max(recorded_start, min(lead)) if lead else kafka_start


def audit(log_dir: str, folder: str, cfg: LogConfig, names: Sequence[str], bases_and_sizes: Sequence[tuple[int, int]],
          recorded_start: int | None, now_ms: int,
          named: Sequence[int] | None = None) -> tuple[list[LostRange], list[LostRange], str | None]:
    """Read-only (``verify``): (the recorded losses, those the next load would record, an unreadable record's
    error). ``names``: the folder's names; ``bases_and_sizes``: its segments, in order; ``named``: the segment
    manifest's bases read with ``names`` (None: read it now)."""
    dir_path = os.path.join(log_dir, folder)
    known, err = read(log_dir, folder)
    found = orphan_index_losses(dir_path, names, (), recorded_start, now_ms, tiered=remote_below(cfg))
    if bases_and_sizes:
        found += emptied_segment_losses(dir_path, bases_and_sizes, cfg, now_ms)
        found += start_losses(dir_path, cfg, names, bases_and_sizes[0][0], recorded_start, now_ms)
        found += manifest_losses(dir_path, [b for b, _ in bases_and_sizes], recorded_start, now_ms, names,
                                 bases=named)
    new: list[LostRange] = []
    for r in found:
        if not any(k["start"] <= r["start"] and r["end"] <= k["end"] for k in known + new):
            new.append(r)
    return known, new, err


# -- reads --------------------------------------------------------------------------------------------------------

class _ReadLog(Protocol):
    log_dir: str
    folder: str
    name: str
    log_start_offset: int

    @property
    def generation(self) -> int: ...


_cache: weakref.WeakKeyDictionary[object, tuple[tuple[str, str, int], list[LostRange]]] = weakref.WeakKeyDictionary()


def ranges_of(log: _ReadLog) -> list[LostRange]:
    """The log's recorded losses, read again only when its generation moved (a load that records one and an
    ``accept-loss`` both move it) or it followed its partition to another dir; plus, for a log opened read-only,
    those its open found and could not record (``unrecorded_losses``)."""
    unrecorded = list(getattr(log, "unrecorded_losses", ()))
    key = (log.log_dir, log.folder, log.generation)
    hit = _cache.get(log)
    if hit is not None and hit[0] == key:
        return hit[1] + unrecorded
    ranges, _err = read(log.log_dir, log.folder)
    _cache[log] = (key, ranges)
    return ranges + unrecorded


def check_read(log: _ReadLog, offset: int) -> None:
    """Raise :class:`DataLossError` if ``offset`` lies in a lost range at or above the log start offset."""
    for r in ranges_of(log):
        if r["start"] <= offset < r["end"] and offset >= log.log_start_offset:
            raise loss_error(log, r)


def next_loss(log: _ReadLog, offset: int) -> LostRange | None:
    """The first lost range above ``offset`` (a read from ``offset`` must stop before it)."""
    return next((r for r in ranges_of(log) if r["start"] > offset and r["end"] > log.log_start_offset), None)


def loss_error(log: _ReadLog, r: LostRange) -> DataLossError:
    topic, partition = layout.parse_partition_dir(log.name)
    return DataLossError(f"{describe(r)} from {log.name}: they cannot be read; an operator accepts the loss with "
                         f"accept-loss --topic {topic} --partition {partition}")


# -- accepting ----------------------------------------------------------------------------------------------------

def accept(log: LocalLog, now_ms: int) -> dict:
    """``accept-loss``: move the log start offset past the recorded lost ranges (at most to the log end), delete
    the segments wholly below it as retention would, then clear the record. Returns what was done.

    In a compacted topic, a range with records of the log below it whose segment is gone from the middle of the
    folder is accepted in place: the log start offset stays, the segment manifest is rewritten to the segments present (so the next load
    does not find the range again), and the records below it stay readable. Gaps are normal there, and moving the
    log start past the range would delete the latest value of every key whose value lies below it. In a topic
    without compaction the log start offset moves past every range: its offsets must be contiguous from the log
    start (``verify`` reports a gap as damage), as in Kafka, where the log start offset is the only way to skip."""
    with log.locked():
        ranges, err = read(log.log_dir, log.folder)
        before = log.log_start_offset
        in_place: list[LostRange] = []
        if log.config.compact:
            present = [s.base_offset for s in log.segments]
            leading_end = before
            for r in sorted(ranges, key=lambda r: r["start"]):
                if r["start"] <= leading_end:
                    leading_end = max(leading_end, r["end"])
                elif any(r["start"] <= b < r["end"] for b in present):
                    leading_end = max(leading_end, r["end"])   # a segment emptied in place: the start moves past
                else:
                    in_place.append(r)
        moving = [r for r in ranges if r not in in_place]
        target = min(max([before] + [r["end"] for r in moving]), log.log_end_offset)
        if in_place:    # before the record goes: a crash in between finds the range again, never loses track of it
            manifest.grown(log)
        deleted: list[int] = []
        if target > before:
            log.log_start_offset = target
            segments = log.segments
            below = [s for s, n in zip(segments, segments[1:]) if n.base_offset <= target]
            deleted = [s.base_offset for s in truncation.delete_segments_locked(log, below, now_ms)] if below else []
            if not deleted:
                log.publish(bump=True)
        cleared = clear(log.log_dir, log.folder) if ranges or err else False
        if cleared and target <= before:
            log.publish(bump=True)      # every process reads the record again
    return {"accepted": ranges, "accepted_in_place": in_place, "unreadable_record": err,
            "log_start_offset_before": before, "log_start_offset": log.log_start_offset, "segments_deleted": deleted,
            "cleared": cleared}
