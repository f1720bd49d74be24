"""``verify``: a read-only integrity audit of every log dir (diskcache's ``check(fix=False)``).

It opens files read-only and never repairs; what a load would repair is reported as damage or as a pending
action. Checked: checkpoint files parse; every partition folder name is valid; every batch of every segment
passes Kafka's size/magic/CRC checks and its records decode; offsets increase within and across segments and
fit their segment; offset/time indexes pass the sanity check and point at real batches; leftovers of
interrupted operations (``.cleaned``, ``.swap``, ``.deleted``) and orphan index files are listed. The active
segment is read under the partition lock so an append in flight is not mistaken for a torn tail.

Per log dir it also reports: a dir that cannot be read (``offline_dirs``: what an opening process would take
offline); the copies being made for moves (``-future`` folders, verified like partitions and marked
``future``); deleted folders waiting for removal (``-delete``, pending); and folders that are no partition the
engine knows (``foreign``: ``-stray`` folders, names that are not ``<topic>-<partition>``), which are never
loaded and never deleted except by an explicit ``remove-folder``. Neither offline dirs nor foreign folders count
as damage to stored data; ``verify`` exits 1 for them only with ``--strict``.
"""
from __future__ import annotations

import os
import time

from storage_engine import layout
from storage_engine.segment.checkpoint import OffsetCheckpointFile
from storage_engine.clock import clock_at
from storage_engine.errors import StorageError, StorageIOError
from storage_engine.log.failure import is_dir_failure, os_error_of
from storage_engine.maintenance.jobs import BatchResult, SkippedPartition, as_topic_partitions, partition_failure
from storage_engine.segment.file_records import FileRecords
from storage_engine.segment.offset_index import OffsetIndex
from storage_engine.log.locks import PartitionLock, lock_path
from storage_engine.segment.time_index import TimeIndex


def verify_log_dirs(config, *, partitions: bool = True) -> dict:
    """The whole audit (``partitions=False``: the log dirs' own files and folders only)."""
    problems, pending, verified, foreign = [], [], [], []
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
        for name in (layout.RECOVERY_POINT_CHECKPOINT, layout.LOG_START_OFFSET_CHECKPOINT,
                     layout.CLEANER_OFFSET_CHECKPOINT):
            try:
                OffsetCheckpointFile(os.path.join(d, name)).read()
            except StorageError as exc:
                problems.append({"file": os.path.join(d, name), "message": str(exc)})
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
            try:
                summary = _verify_partition(d, name, path, config.log_config(topic), problems, pending)
            except (OSError, StorageIOError) as exc:
                if isinstance(os_error_of(exc), FileNotFoundError):
                    pending.append({"file": path, "message": "files renamed while they were verified (a roll, "
                                                             "retention, a deletion or a move)"})
                    continue
                if not is_dir_failure(exc):
                    raise
                offline.setdefault(d, f"{type(exc).__name__}: {exc}")
                continue
            summary.update(topic=topic, partition=partition, future=name != layout.partition_dir_name(topic,
                                                                                                     partition))
            verified.append(summary)
    return {"damaged": bool(problems), "problems": problems, "pending": pending, "partitions": verified,
            "foreign": foreign, "offline_dirs": offline}


def verify_partition(config, topic: str, partition: int) -> dict:
    """The audit of one partition: ``{"topic", "partition", "log_dir", "damaged", "problems", "pending",
    "segments", "batches", "records", "size_bytes", "log_end_offset"}``. Raises ``PartitionNotFoundError``, or
    ``LogDirOfflineError`` when a log dir that may hold it cannot be read."""
    from storage_engine.errors import LogDirOfflineError, PartitionNotFoundError
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
                summary = _verify_partition(d, name, path, config.log_config(topic), problems, pending)
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
    raise PartitionNotFoundError(f"partition {name} does not exist in any log dir {list(config.log_dirs)}")


def verify_dir_files(config) -> dict:
    """The log-dir half of the audit: checkpoint files parse; which dirs are offline; deleted, stray and
    foreign folders (see the module docstring)."""
    report = verify_log_dirs(config, partitions=False)
    report["online_dirs"] = [d for d in config.log_dirs if d not in report["offline_dirs"]]
    return report


def _verify_partition(log_dir, name, path, cfg, problems, pending) -> dict:
    files = sorted(os.listdir(path))
    logs = sorted(layout.offset_from_filename(f) for f in files
                  if f.endswith(layout.LOG_SUFFIX) and layout.is_offset_named(f))
    for f in files:
        full = os.path.join(path, f)
        if f.endswith((layout.CLEANED_SUFFIX, layout.SWAP_SUFFIX, layout.DELETED_SUFFIX)):
            pending.append({"file": full, "message": "left by an interrupted or pending operation; "
                                                     "handled at the next exclusive load"})
        elif layout.is_offset_named(f) and f.endswith(layout.INDEX_SUFFIXES) and \
                layout.offset_from_filename(f) not in logs:
            pending.append({"file": full, "message": "orphan index file (no .log); deleted at the next load"})
        elif layout.is_offset_named(f) and f.endswith((layout.SNAPSHOT_SUFFIX, layout.TXN_INDEX_SUFFIX)):
            _verify_producer_file(full, pending)
    prev_next = None
    records = batches = size = 0
    lock = PartitionLock(lock_path(log_dir, name))
    try:
        for i, base in enumerate(logs):
            active = i == len(logs) - 1
            if active:
                lock.acquire()
            try:
                r, b, s, prev_next = _verify_segment(path, base, cfg, prev_next, problems, pending)
            finally:
                if active:
                    lock.release()
            records += r
            batches += b
            size += s
    finally:
        lock.close()
    if not logs:
        pending.append({"file": path, "message": "partition has no segment; one is created at the next load"})
    return {"segments": len(logs), "batches": batches, "records": records, "size_bytes": size,
            "log_end_offset": prev_next}


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


def _verify_segment(path, base, cfg, prev_next, problems, pending):
    log_path = layout.segment_file(path, base, layout.LOG_SUFFIX)
    fr = FileRecords(log_path, writable=False)
    records = batches = 0
    positions = {}
    try:
        try:
            for batch in fr.batches(0, strict=True):
                batch.ensure_valid()
                recs = batch.records()
                where = f"batch at position {batch.file_position}"
                last = batch.last_offset
                first = recs[0].offset if recs else batch.base_offset
                if prev_next is not None and first < prev_next:
                    problems.append({"file": log_path, "position": batch.file_position,
                                     "message": f"{where}: offset {first} is not above the previous {prev_next - 1}"})
                if first < base or last - base > 2**31 - 1:
                    problems.append({"file": log_path, "position": batch.file_position,
                                     "message": f"{where}: offsets [{first}, {last}] do not fit segment base {base}"})
                positions[batch.file_position] = last
                prev_next = last + 1
                batches += 1
                records += len(recs)
        except StorageError as exc:
            problems.append({"file": log_path, "position": getattr(exc, "position", None), "message": str(exc)})
        size = fr.size
    finally:
        fr.close()
    _verify_indexes(path, base, cfg, positions, problems, pending)
    return records, batches, size, prev_next


def _verify_indexes(path, base, cfg, positions, problems, pending):
    ipath = layout.segment_file(path, base, layout.INDEX_SUFFIX)
    tpath = layout.segment_file(path, base, layout.TIME_INDEX_SUFFIX)
    last_offsets = set(positions.values())
    if not os.path.exists(ipath):
        pending.append({"file": ipath, "message": "missing offset index; rebuilt at the next load"})
    else:
        try:
            idx = OffsetIndex(ipath, base, max(os.path.getsize(ipath), 8), writable=False)
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
            tidx = TimeIndex(tpath, base, max(os.path.getsize(tpath), 12), writable=False)
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


def verify_batch(config, partitions) -> BatchResult:
    """The audit of each partition of a batch (see :mod:`storage_engine.maintenance.jobs` for batches).
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
        except Exception as exc:
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
