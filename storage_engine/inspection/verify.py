"""``verify``: a read-only audit of every log dir, of each file and of each log's state (diskcache's
``check(fix=False)``).

It never repairs: what a process or a load would repair is reported as damage (``problems``, exit 1) or as a
pending action (``pending``). Checked, per log dir and partition:

* files: checkpoint files parse (the log dir's, and each partition's ``leader-epoch-checkpoint``); partition
  folder names are valid; every batch of every segment passes Kafka's
  size/magic/CRC checks and its records decode; offsets rise within and across segments and fit their segment;
  offset/time index entries point at real batches;
* the log's state: the log start offset (the partition's shared state, else its checkpoint entry) and the
  recovery point lie within the log; checkpoint entries lie within [first segment base, log end] (a
  log-start or recovery-point entry past the end is damage; the next load clamps it); a delete-policy topic has
  no offset gap, from its log start offset through every segment (compaction is the only thing that removes
  offsets, so a gap there means a segment or a batch went missing);
* offsets the partition lost (:mod:`storage_engine.log.losses`): recorded by a load, until ``accept-loss``, or
  found now (a first segment gone, a sealed segment emptied, a segment the partition's segment manifest names
  gone from the middle, in a topic of any policy), with the lost range; and per log dir the partitions
  its checkpoint files list whose folder vanished or became a file (:mod:`storage_engine.log.health`);
* leftovers, each explained: a swap left half done by a cleaner that died (what the next process to use the
  partition will do: complete it, or roll it back and why); ``.swap`` files without a record (validated as the
  next load would: completed, or discarded as damage); ``.cleaned`` files (a running cleaner's, or a dead one's);
  ``.deleted`` files (when they are purged); orphan index files; files that are no part of Kafka's layout.

The partition is read as the next process would see it once the pending swap is resolved: the plan
(:func:`storage_engine.log.swap.pending_plan`) is applied to the file names, not to the files. The listing, the
plan and the active segment are read under the partition lock (its file opened read-only, never created: the
audit creates and writes no file, lock files included), so a change in flight is never mistaken for damage; sealed segments are read without it, and a partition that changes meanwhile is read again. A partition
deleted or moved while it is verified is reported as pending, not as damage. The checks of each file of a
partition (leftovers, segments, indexes) are :mod:`storage_engine.inspection.verify_files`'s; this module runs
them per log dir and partition and checks the log's state across them.

Per log dir it also reports: a dir that cannot be read (``offline_dirs``: what an opening process would take
offline); the copies being made for moves (``-future`` folders, verified like partitions and marked
``future``; the dir's checkpoint entries are the current log's, so they are not checked against a copy);
deleted folders waiting for removal (``-delete``, pending); and folders that are no partition the engine knows
(``foreign``: ``-stray`` folders, names that are not ``<topic>-<partition>``), which are never loaded and never
deleted except by an explicit ``remove-folder``. Neither offline dirs nor foreign folders count as damage to
stored data; ``verify`` exits 1 for them only with ``--strict``.
"""
from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from storage_engine import layout
from storage_engine.clock import clock_at
from storage_engine.config import LogConfig, StorageConfig
from storage_engine.errors import CorruptCheckpointError, PartitionNotFoundError, StorageError, StorageIOError
from storage_engine.inspection.verify_files import Changed, Segment, explain_leftovers, verify_segment
from storage_engine.log import health, losses, manifest
from storage_engine.log.failure import is_dir_failure, os_error_of
from storage_engine.log.locks import LIVE, MOVED, UNKNOWN, PartitionState, lock_path, peek_state
from storage_engine.jobs.batches import BatchResult, SkippedPartition, as_topic_partitions, partition_failure
from storage_engine.segment.checkpoint import OffsetCheckpointFile

_CHECKPOINTS = (layout.RECOVERY_POINT_CHECKPOINT, layout.LOG_START_OFFSET_CHECKPOINT,
                layout.CLEANER_OFFSET_CHECKPOINT)
_NO_CHECKPOINTS: dict = {name: {} for name in _CHECKPOINTS}
_ATTEMPTS = 3

TopicPartition = tuple[str, int]
# The dir's offset checkpoints: {checkpoint file name: {(topic, partition): offset}}.
Checkpoints = dict[str, dict[TopicPartition, int]]


class _Gone(Exception):
    """The partition was deleted or moved away while it was verified."""


def verify_log_dirs(config: StorageConfig, *, partitions: bool = True) -> dict:
    """The whole audit (``partitions=False``: the log dirs' own files and folders only)."""
    problems: list[dict] = []
    pending: list[dict] = []
    verified: list[dict] = []
    foreign: list[dict] = []
    check_partitions = partitions
    offline: dict[str, str] = {}
    for d in config.log_dirs:
        try:
            if not os.path.isdir(os.path.realpath(d)) and os.path.exists(d):
                raise NotADirectoryError(20, "not a directory", d)
            os.stat(d)
            listing = layout.scan_log_dir(d)
        except FileNotFoundError:
            if not os.path.lexists(d):
                pending.append({"file": d, "message": "log dir does not exist yet"})
                continue
            offline[d] = f"FileNotFoundError: {d} is a link to nothing"
            continue
        except OSError as exc:
            offline[d] = f"{type(exc).__name__}: {exc}"
            continue
        checkpoints = _read_checkpoints(d, problems, pending)
        for m in health.missing_partitions(d):     # a partition folder that vanished or became a file
            problems.append({"file": m["path"], "message": m["reason"]})
        for name in listing.deleting:
            pending.append({"file": os.path.join(d, name), "message": "deleted partition; removed after "
                                                                      "file.delete.delay.ms"})
        for name in listing.strays:
            foreign.append({"file": os.path.join(d, name), "kind": "stray",
                            "message": "stray partition folder; kept until removed explicitly"})
        for name, reason in listing.foreign:
            foreign.append({"file": os.path.join(d, name), "kind": "foreign",
                            "message": f"not a partition folder ({reason}); never loaded, and Kafka would refuse "
                                       "to load this log dir while it is there"})
        for name in listing.foreign_files:
            foreign.append({"file": os.path.join(d, name), "kind": "foreign-file",
                            "message": "a file that neither Kafka nor this engine keeps in a log dir"})
        for name, (topic, partition) in (listing.partitions + listing.futures) if check_partitions else []:
            path = os.path.join(d, name)
            future = name != layout.partition_dir_name(topic, partition)
            try:
                summary = _verify_partition_retrying(d, name, path, config.log_config(topic), (topic, partition),
                                                     _NO_CHECKPOINTS if future else checkpoints, problems,
                                                     pending)
            except _Gone as exc:
                pending.append({"file": path, "message": str(exc)})
                continue
            except (OSError, StorageIOError) as exc:
                if isinstance(os_error_of(exc), FileNotFoundError):
                    pending.append({"file": path, "message": "files renamed while they were verified (a roll, "
                                                             "retention, a deletion or a move)"})
                    continue
                if not is_dir_failure(exc):
                    raise
                offline.setdefault(d, f"{type(exc).__name__}: {exc}")
                continue
            summary.update(topic=topic, partition=partition, future=future)
            verified.append(summary)
    return {"damaged": bool(problems), "problems": problems, "pending": pending, "partitions": verified,
            "foreign": foreign, "offline_dirs": offline}


def verify_partition(config: StorageConfig, topic: str, partition: int) -> dict:
    """The audit of one partition: ``{"topic", "partition", "log_dir", "damaged", "problems", "pending",
    "segments", "batches", "records", "size_bytes", "log_start_offset", "log_end_offset"}``.
    Raises ``PartitionNotFoundError``, or ``LogDirOfflineError`` when a log dir that may hold it cannot be read.
    (The log dir's own files are :func:`verify_dir_files`'s.)"""
    from storage_engine.errors import LogDirOfflineError
    name = layout.partition_dir_name(topic, partition)
    unreadable = None
    for d in config.log_dirs:
        path = os.path.join(d, name)
        try:
            os.stat(path)
        except FileNotFoundError:
            continue
        except OSError as exc:
            if not is_dir_failure(exc):
                raise
            unreadable = unreadable or LogDirOfflineError(
                f"partition {name} is unavailable: log dir {d} is offline ({type(exc).__name__}: {exc})", d)
            continue
        if os.path.isdir(path):
            problems: list[dict] = []
            pending: list[dict] = []
            try:
                summary = _verify_partition_retrying(d, name, path, config.log_config(topic), (topic, partition),
                                                     _read_checkpoints(d, None), problems, pending)
            except _Gone:
                continue    # deleted or moved meanwhile: look in the other dirs
            except (OSError, StorageIOError) as exc:
                if not is_dir_failure(exc):
                    raise
                raise LogDirOfflineError(f"partition {name} is unavailable: log dir {d} is offline "
                                         f"({type(exc).__name__}: {exc})", d) from exc
            summary.update(topic=topic, partition=partition, log_dir=d, damaged=bool(problems),
                           problems=problems, pending=pending)
            return summary
    if unreadable is not None:
        raise unreadable
    # its folder vanished or became a file: say so
    raise health.why_missing(config.log_dirs, (topic, partition)) or PartitionNotFoundError(
        f"partition {name} does not exist in any log dir {list(config.log_dirs)}")


def verify_dir_files(config: StorageConfig) -> dict:
    """The log-dir half of the audit: checkpoint files parse; which dirs are offline; deleted, stray and
    foreign folders (see the module docstring)."""
    report = verify_log_dirs(config, partitions=False)
    report["online_dirs"] = [d for d in config.log_dirs if d not in report["offline_dirs"]]
    return report


def _verify_partition_retrying(log_dir: str, name: str, path: str, cfg: LogConfig, tp: TopicPartition,
                               checkpoints: Checkpoints, problems: list[dict], pending: list[dict]) -> dict:
    """Sealed segments are read without the lock: if that attempt found damage (or lost a file) while another
    process changed the partition (its generation moved), what it saw may be two states mixed: read again.
    Raises :class:`_Gone` for a partition deleted or moved meanwhile (its lock retired or removed)."""
    before = peek_state(lock_path(log_dir, name))
    if before is not None and before.status != LIVE:
        raise _Gone(f"{name} is being deleted or moved; not verified")
    lock = _ReadOnlyLock(lock_path(log_dir, name))
    try:
        for attempt in range(_ATTEMPTS):
            p: list[dict] = []
            q: list[dict] = []
            generation = lock.read_state().generation
            try:
                summary = _verify_partition(lock, log_dir, name, path, cfg, tp, checkpoints, p, q)
            except Changed as exc:
                if attempt + 1 < _ATTEMPTS:
                    continue
                p.append({"file": str(exc), "message": "the file vanished while being read, three times: files "
                                                        "of the partition are being removed outside the engine"})
                summary = {}
            if p and attempt + 1 < _ATTEMPTS and lock.read_state().generation != generation:
                continue
            problems.extend(p)
            pending.extend(q)
            return summary
        return {}
    finally:
        lock.close()


class _ReadOnlyLock:
    """The partition lock as the audit takes it, creating and writing nothing: the lock file is opened read-only
    (``flock`` needs no write access), and a partition without one (no engine process has opened it: a folder
    Kafka wrote) is read without a lock. The state is read from the file at the path; once that is no longer the
    file this lock opened (retired and removed by a move or a deletion), the state says *moved*."""

    def __init__(self, path: str):
        self.path = path
        try:
            self._fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            self._fd = -1
        except OSError as exc:
            raise StorageIOError("cannot open partition lock file", path, exc) from exc

    def __enter__(self) -> "_ReadOnlyLock":
        if self._fd >= 0:
            fcntl.flock(self._fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fd >= 0:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def read_state(self) -> PartitionState:
        if self._fd >= 0:
            try:
                now = os.stat(self.path)
            except FileNotFoundError:
                return PartitionState(status=MOVED)
            except OSError as exc:
                raise StorageIOError("cannot open partition lock file", self.path, exc) from exc
            mine = os.fstat(self._fd)
            if (now.st_dev, now.st_ino) != (mine.st_dev, mine.st_ino):
                return PartitionState(status=MOVED)
        return peek_state(self.path) or PartitionState()

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def _verify_partition(lock: _ReadOnlyLock, log_dir: str, name: str, path: str, cfg: LogConfig, tp: TopicPartition,
                      checkpoints: Checkpoints, problems: list[dict], pending: list[dict]) -> dict:
    with lock:
        state = lock.read_state()
        if state.status != LIVE or not os.path.isdir(path):
            raise _Gone(f"{name} was deleted or moved while it was verified")
        files = explain_leftovers(log_dir, name, path, cfg, problems, pending)
        logs = sorted(layout.offset_from_filename(f) for f in files
                      if f.endswith(layout.LOG_SUFFIX) and layout.is_offset_named(f))
        active = verify_segment(path, files, logs[-1], None, problems, pending) if logs else Segment()
        named = manifest.read(log_dir, name)[0] or []    # as the listing, under the lock (a roll changes both)
    walk = _Walk(cfg.delete and not cfg.compact)
    sizes: list[tuple[int, int]] = []
    for i, base in enumerate(logs):
        upper = logs[i + 1] if i + 1 < len(logs) else None
        seg = active if upper is None else verify_segment(path, files, base, upper, problems, pending)
        walk.add(base, seg, problems)
        sizes.append((base, seg.size))
    _report_losses(log_dir, name, tp, cfg, list(files), sizes, state, problems, named)
    if not logs:
        pending.append({"file": path, "message": "partition has no segment; one is created at the next load"})
        return {"segments": 0, "batches": 0, "records": 0, "size_bytes": 0, "log_end_offset": None}
    return _check_state(path, tp, cfg, state, logs, walk, checkpoints, problems, pending)


def _report_losses(log_dir: str, name: str, tp: TopicPartition, cfg: LogConfig, names: list[str],
                   sizes: list[tuple[int, int]], state: PartitionState, problems: list[dict],
                   named: list[int]) -> None:
    """Offsets the partition lost (:mod:`storage_engine.log.losses`): those a load recorded, until an operator
    accepts them, and those the next load will record (a first segment gone, a sealed segment emptied, a segment
    the segment manifest ``named`` gone from the middle)."""
    recorded_start = state.log_start_offset if state.generation != 0 and state.log_start_offset != UNKNOWN else None
    kept, found, err = losses.audit(log_dir, name, cfg, names, sizes, recorded_start, clock_at(None).milliseconds(),
                                    named)
    accept = f"accept-loss --topic {tp[0]} --partition {tp[1]}"
    where = losses.path_of(log_dir, name)
    if err:
        problems.append({"file": where, "message": f"{err}: the offsets it names cannot be told"})
    for r in kept:
        problems.append({"file": where, "message": f"{losses.describe(r)}; reads of them fail until an operator "
                                                   f"accepts the loss ({accept})"})
    for r in found:
        problems.append({"file": os.path.join(log_dir, name), "message": f"{losses.describe(r)}; the next load "
                         f"records it and reads of them fail until an operator accepts the loss ({accept})"})


def _read_checkpoints(log_dir: str, problems: list | None, pending: list | None = None) -> Checkpoints:
    """The dir's three offset checkpoints; an unreadable one counts as empty and is a problem, except a corrupt
    cleaner checkpoint, which is pending: derived state (where the last cleaning ended) that Kafka's cleaner
    ignores and the engine's too (compacted partitions are cleaned from their log start), replaced by the next
    update of the file, so no stored data depends on it."""
    checkpoints: Checkpoints = {}
    for name in _CHECKPOINTS:
        path = os.path.join(log_dir, name)
        try:
            checkpoints[name] = OffsetCheckpointFile(path).read()
        except CorruptCheckpointError as exc:
            if name == layout.CLEANER_OFFSET_CHECKPOINT:
                if pending is not None:
                    pending.append({"file": path, "message": f"{exc}; ignored, as Kafka's cleaner ignores it (the "
                                                             "dir's compacted partitions are cleaned from their log "
                                                             "start), until a compaction run in this dir replaces "
                                                             "it; no stored data depends on it"})
            elif problems is not None:
                problems.append({"file": path, "message": str(exc)})
            checkpoints[name] = {}
        except StorageError as exc:
            if problems is not None:
                problems.append({"file": path, "message": str(exc)})
            checkpoints[name] = {}
    return checkpoints


# -- the log's state ---------------------------------------------------------------------------------------------

class _Walk:
    """Offsets across segments: the end, the totals, and the gaps of a delete-policy topic."""

    def __init__(self, contiguous: bool) -> None:
        self.contiguous = contiguous
        self.next: int | None = None
        self.first_base: int | None = None
        self.first_offset: int | None = None
        self.records = self.batches = self.size = 0

    def add(self, base: int, seg: Segment, problems: list[dict]) -> None:
        self.first_base = base if self.first_base is None else self.first_base
        if self.first_offset is None:
            self.first_offset = seg.first
        self.records += seg.records
        self.batches += seg.batches
        self.size += seg.size
        if self.contiguous:
            if self.next is not None and seg.first is not None and seg.first > self.next:
                problems.append({"file": f"segment {base}", "message": f"offsets [{self.next}, {seg.first}) are "
                                 "missing between segments of a delete-policy topic (a segment or batches are gone)"})
            for position, expected, found in seg.gaps:
                problems.append({"file": f"segment {base}", "position": position,
                                 "message": f"offsets [{expected}, {found}) are missing inside a segment of a "
                                            "delete-policy topic"})
        if seg.next is not None:
            self.next = seg.next
        elif self.next is None or base > self.next:
            self.next = base


def _check_state(path: str, tp: TopicPartition, cfg: LogConfig, state: PartitionState, logs: list[int], walk: _Walk,
                 checkpoints: Checkpoints, problems: list[dict], pending: list[dict]) -> dict:
    leo = walk.next
    first = walk.first_base
    assert leo is not None and first is not None, "the walk has seen a segment (logs is not empty)"
    in_use = state.generation != 0
    lso_cp = checkpoints[layout.LOG_START_OFFSET_CHECKPOINT].get(tp)
    rp_cp = checkpoints[layout.RECOVERY_POINT_CHECKPOINT].get(tp)
    cleaner_cp = checkpoints[layout.CLEANER_OFFSET_CHECKPOINT].get(tp)
    if in_use and state.log_start_offset != UNKNOWN:
        lso = state.log_start_offset
    else:  # as the next load would set it (a checkpoint past the end is reported below); tiered: as is
        lso = min((lso_cp or 0) if cfg.remote_storage_enable else max(lso_cp or 0, first), leo)
    first_offset = walk.first_offset if walk.first_offset is not None else leo
    if lso > leo:
        problems.append({"file": path, "message": f"log start offset {lso} is past the log end offset {leo}"})
    elif walk.contiguous and lso < first_offset and not losses.remote_below(cfg):
        # (a tiered topic's offsets below its first local segment are in remote storage)
        problems.append({"file": path, "message": f"offsets [{lso}, {first_offset}) are missing at the start of "
                                                  "a delete-policy topic (its first segment or batches are gone)"})
    for what, value in (("log-start-offset checkpoint", lso_cp), ("recovery-point checkpoint", rp_cp)):
        if value is not None and value > leo:
            problems.append({"file": os.path.dirname(path), "message": f"{what} entry {tp[0]} {tp[1]} {value} is "
                             f"past the log end offset {leo} (the next load clamps or recovers it)"})
    if in_use and state.recovery_point != UNKNOWN and state.recovery_point > leo:
        problems.append({"file": path, "message": f"recovery point {state.recovery_point} is past the log end "
                                                  f"offset {leo}: flushed records are missing"})
    if cleaner_cp is not None and not lso <= cleaner_cp <= leo:
        pending.append({"file": os.path.dirname(path), "message": f"cleaner checkpoint {cleaner_cp} lies outside "
                        f"[{lso}, {leo}]; the next cleaning resets it to the log start offset"})
    return {"segments": len(logs), "batches": walk.batches, "records": walk.records, "size_bytes": walk.size,
            "log_start_offset": lso, "log_end_offset": leo}


def verify_batch(config: StorageConfig, partitions: Iterable[Sequence[Any] | Mapping[str, Any]]) -> BatchResult:
    """The audit of each partition of a batch (see :mod:`storage_engine.jobs.batches` for batches).
    A damaged partition is a failure (permanent: a retry reads the same bytes) carrying its problems."""
    from storage_engine.errors import LogDirOfflineError
    t0 = time.monotonic()
    results: list[dict] = []
    failures: list = []
    skipped: list[SkippedPartition] = []
    offline: dict[str, str] = {}
    for tp in as_topic_partitions(partitions):
        started = time.monotonic()
        try:
            report = verify_partition(config, *tp)
        except LogDirOfflineError as exc:
            skipped.append({"topic": tp[0], "partition": tp[1], "reason": str(exc)})
            offline[exc.log_dir or "?"] = str(exc)
            continue
        except Exception as exc:   # noqa: BLE001 - any other failure is the partition's, the others go on
            failures.append(partition_failure(tp, exc))
            continue
        report["duration_s"] = round(time.monotonic() - started, 4)
        results.append(report)
        if report["problems"]:
            first = report["problems"][0]
            failures.append({"topic": tp[0], "partition": tp[1], "error_type": "DamageFound",
                             "error": f"{len(report['problems'])} problem(s); first: {first['file']}: "
                                      f"{first['message']}", "permanent": True})
    return {"now_ms": clock_at(None).milliseconds(), "dry_run": True, "partitions": len(results) + len(
        [f for f in failures if f["error_type"] != "DamageFound"]), "results": results, "failures": failures,
        "errors": [], "duration_s": round(time.monotonic() - t0, 3), "skipped": skipped, "offline_dirs": offline}
