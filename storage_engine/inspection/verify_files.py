"""The files of one partition as ``verify`` audits them (:mod:`storage_engine.inspection.verify` holds the audit):
what is not plain segments, each explained (a swap left half done, ``.swap``, ``.cleaned`` and ``.deleted``
files, orphan indexes, temp files, producer snapshots and transaction indexes, files that are no part of Kafka's
layout), and every segment: each batch passes Kafka's size/magic/CRC checks and its records decode, offsets rise
and fit the segment, and the offset and time index entries point at real batches. Read-only: nothing is renamed,
repaired or created.
"""
from __future__ import annotations

import fcntl
import os
from typing import TypeVar

from storage_engine import layout
from storage_engine.config import LogConfig
from storage_engine.errors import StorageError, StorageIOError
from storage_engine.log import intent, swap
from storage_engine.segment.file_records import FileRecords
from storage_engine.segment.leader_epoch import LeaderEpochCheckpointFile
from storage_engine.segment.offset_index import OffsetIndex
from storage_engine.segment.time_index import TimeIndex


class Changed(Exception):
    """A file vanished while it was read: another process changed the partition; read it again."""


def _cleaning_in_progress(log_dir: str, name: str) -> bool:
    """Whether a cleaner holds the partition's claim, probed without creating the claim file (without one, no
    cleaner has claimed the partition, so none is cleaning it)."""
    path = layout.cleaning_claim_file(log_dir, name)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise StorageIOError("cannot open cleaning claim", path, exc) from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)      # releases the probe's shared lock
    return False


# -- leftovers ---------------------------------------------------------------------------------------------------

def explain_leftovers(log_dir: str, name: str, path: str, cfg: LogConfig, problems: list[dict],
                       pending: list[dict]) -> dict[str, str]:
    """Report what is not plain segments; return {name after pending changes: name now}."""
    names = sorted(os.listdir(path))
    plan, messages, _ = swap.pending_plan(log_dir, name, path)
    for m in messages:
        damaged = plan is not None and m in plan.damage
        (problems if damaged else pending).append(
            {"file": intent.path_of(log_dir, name), "message": f"{m} (by the next process to use the partition)"})
    files = plan.effective_names(names) if plan is not None else {n: n for n in names}
    cleaning = _cleaning_in_progress(log_dir, name)
    visible = [n for n in files if not (cleaning and n.endswith(layout.CLEANED_SUFFIX))]
    orphans = swap.plan_orphans(path, visible)
    for m in orphans.messages:
        (problems if m in orphans.damage else pending).append({"file": path, "message": f"{m} (at the next load)"})
    if orphans.actions:
        renamed = orphans.effective_names(visible)
        files = {k: files[v] for k, v in renamed.items()}
        if cleaning:
            files.update({n: n for n in names if n.endswith(layout.CLEANED_SUFFIX)})
    logs = {layout.offset_from_filename(f) for f in files
            if f.endswith(layout.LOG_SUFFIX) and layout.is_offset_named(f)}
    for f, now in sorted(files.items()):
        full = os.path.join(path, now)
        if f.endswith(layout.CLEANED_SUFFIX):
            pending.append({"file": full, "message": "being written by a running cleaner" if cleaning else
                            "left by a cleaner that died before its swap; removed at the next load"})
        elif f.endswith(layout.DELETED_SUFFIX):
            try:
                at = int(os.stat(full).st_mtime * 1000) + cfg.file_delete_delay_ms
            except FileNotFoundError:
                continue
            pending.append({"file": full, "message": f"scheduled for removal at {at} ms "
                                                     f"(file.delete.delay.ms {cfg.file_delete_delay_ms})"})
        elif f.endswith(layout.SWAP_SUFFIX):
            pending.append({"file": full, "message": "part of a swap that will be completed"})
        elif layout.is_partition_file(f):
            _verify_partition_file(full, problems, pending)
        elif not layout.is_offset_named(f) or not f.endswith(layout.SEGMENT_SUFFIXES + (layout.SNAPSHOT_SUFFIX,)):
            pending.append({"file": full, "message": "not a file of Kafka's partition layout; ignored"})
        elif f.endswith(layout.INDEX_SUFFIXES) and layout.offset_from_filename(f) not in logs:
            pending.append({"file": full, "message": "orphan index file (no .log); deleted at the next load"})
        elif f.endswith((layout.SNAPSHOT_SUFFIX, layout.TXN_INDEX_SUFFIX)):
            _verify_producer_file(full, pending)
    return files


def _verify_partition_file(full: str, problems: list, pending: list) -> None:
    """Kafka's per-partition files: a ``leader-epoch-checkpoint`` must parse (a damaged one is rebuilt from the
    segments by the next load); a temp file is what a writer that died before its rename left."""
    if full.endswith(layout.TMP_SUFFIX):
        pending.append({"file": full, "message": "left by a writer that died before renaming it; replaced at the "
                                                 "next write"})
        return
    if os.path.basename(full) != layout.LEADER_EPOCH_CHECKPOINT:
        return
    try:
        LeaderEpochCheckpointFile(full).read()
    except StorageError as exc:
        problems.append({"file": full, "message": f"{exc}; the next load rebuilds it from the segments"})


def _verify_producer_file(full: str, pending: list) -> None:
    """A corrupt producer snapshot or transaction index is derived data: the next load deletes the snapshot
    (falling back to an older one) or rebuilds the index, so it is reported as pending, not as damage."""
    from storage_engine.errors import CorruptIndexError, CorruptSnapshotError
    from storage_engine.segment import producer_snapshot
    from storage_engine.segment.txn_index import TransactionIndex
    try:
        if full.endswith(layout.SNAPSHOT_SUFFIX):
            producer_snapshot.read_snapshot(full)
        else:
            TransactionIndex(full, layout.offset_from_filename(full), writable=False).sanity_check()
    except CorruptSnapshotError as exc:
        pending.append({"file": full, "message": f"{exc.reason}; deleted at the next load (an older snapshot or "
                                                 "a replay of the log takes its place)"})
    except CorruptIndexError as exc:
        pending.append({"file": full, "message": f"{exc.reason}; rebuilt at the next load"})


# -- segments ----------------------------------------------------------------------------------------------------

class Segment:
    __slots__ = ("records", "batches", "size", "first", "next", "gaps")

    def __init__(self) -> None:
        self.records = self.batches = self.size = 0
        self.first: int | None = None  # the first batch's first offset
        self.next: int | None = None   # the offset after the last batch
        self.gaps: list[tuple[int, int, int]] = []  # (position, expected offset, found offset) between batches


def verify_segment(path: str, files: dict[str, str], base: int, upper: int | None, problems: list[dict],
                    pending: list[dict]) -> Segment:
    name = layout.filename_prefix(base) + layout.LOG_SUFFIX
    log_path = os.path.join(path, files[name])
    out = Segment()
    positions: dict[int, int] = {}
    try:
        fr = FileRecords(log_path, writable=False)
    except StorageError as exc:
        if not os.path.exists(log_path):
            raise Changed(log_path) from None
        problems.append({"file": log_path, "message": str(exc)})
        return out
    try:
        try:
            for batch in fr.read_batches(0, strict=True):
                batch.ensure_valid()
                recs = batch.records()
                where = f"batch at position {batch.file_position}"
                last = batch.last_offset
                first = batch.base_offset if batch.magic >= 2 else (recs[0].offset if recs else last)
                expected = base if out.next is None else out.next
                if first < expected or last < first:
                    problems.append({"file": log_path, "position": batch.file_position,
                                     "message": f"{where}: offsets [{first}, {last}] are out of order (expected "
                                                f">= {expected})"})
                elif first > expected and out.next is not None:
                    out.gaps.append((batch.file_position, expected, first))
                if last - base > 2**31 - 1 or (upper is not None and last >= upper):
                    problems.append({"file": log_path, "position": batch.file_position,
                                     "message": f"{where}: offsets [{first}, {last}] do not fit the segment "
                                                f"[{base}, {upper if upper is not None else 'log end'})"})
                positions[batch.file_position] = last
                out.first = first if out.first is None else out.first
                out.next = max(last + 1, out.next or 0)
                out.batches += 1
                out.records += len(recs)
        except StorageError as exc:
            problems.append({"file": log_path, "position": getattr(exc, "position", None), "message": str(exc)})
        out.size = fr.size
    finally:
        fr.close()
    _verify_indexes(path, files, base, positions, problems, pending)
    return out


def _verify_indexes(path: str, files: dict[str, str], base: int, positions: dict[int, int], problems: list[dict],
                    pending: list[dict]) -> None:
    prefix = layout.filename_prefix(base)
    ipath = os.path.join(path, files.get(prefix + layout.INDEX_SUFFIX, prefix + layout.INDEX_SUFFIX))
    tpath = os.path.join(path, files.get(prefix + layout.TIME_INDEX_SUFFIX, prefix + layout.TIME_INDEX_SUFFIX))
    last_offsets = set(positions.values())
    if not os.path.exists(ipath):
        pending.append({"file": ipath, "message": "missing offset index; rebuilt at the next load"})
    else:
        try:
            idx = _open_index(OffsetIndex, ipath, base, 8)
            try:
                idx.sanity_check()
                for n in range(idx.entries):
                    off, pos = idx.entry(n)
                    if positions.get(pos) != off:
                        problems.append({"file": ipath, "position": n * 8,
                                         "message": f"entry {n} maps offset {off} to position {pos}, where the "
                                                    f"log has batch ending at {positions.get(pos)}"})
                        break
            finally:
                idx.close(trim=False)
        except StorageError as exc:
            problems.append({"file": ipath, "message": str(exc)})
    if os.path.exists(tpath):
        try:
            tidx = _open_index(TimeIndex, tpath, base, 12)
            try:
                tidx.sanity_check()
                for n in range(tidx.entries):
                    _ts, off = tidx.entry(n)
                    if off not in last_offsets:
                        problems.append({"file": tpath, "position": n * 12,
                                         "message": f"entry {n} names offset {off}, not the last offset of a batch"})
                        break
            finally:
                tidx.close(trim=False)
        except StorageError as exc:
            problems.append({"file": tpath, "message": str(exc)})


_Index = TypeVar("_Index", OffsetIndex, TimeIndex)


def _open_index(cls: type[_Index], path: str, base: int, entry_size: int) -> _Index:
    try:
        return cls(path, base, max(os.path.getsize(path), entry_size), writable=False)
    except (FileNotFoundError, StorageError):
        if not os.path.exists(path):
            raise Changed(path) from None
        raise
