"""Read-only status of the log dirs for operators: what the Storage view in Airflow and ``describe`` show.

Nothing here takes a lock, opens a file for writing, creates a file or repairs anything, so it may run in any
process (Airflow's api-server) while applications append and maintenance tasks run. Figures come from the
files as they are: folder listings and ``stat`` for sizes, the checkpoint files and each partition's shared
state (the first 32 bytes of its lock file, read without taking the lock) for offsets, the segments' index and
time-index tails for log end offsets and timestamps.

Cost is proportional to what is asked: :func:`list_partition_status` lists and stats every partition folder
that matches the filter (about 10 us per file), and computes offsets, dirty ratios and segment timestamps
only for the page it returns; :func:`partition_detail` reads one partition.

Plans (:func:`plan`) run the engine's own rules, :func:`storage_engine.maintenance.retention.plan` and
:func:`storage_engine.maintenance.cleaner_manager.log_to_clean`, on a read-only snapshot of each partition
(:class:`LogSnapshot` offers the attributes those functions read from a ``Log``), so the view and the
maintenance jobs cannot disagree about what a run would do.
"""
from __future__ import annotations

import os
import struct
from collections.abc import Collection
from typing import Self, TypedDict

from storage_engine import layout
from storage_engine.config import StorageConfig
from storage_engine.errors import PartitionNotFoundError, StorageError
from storage_engine.log.locks import UNKNOWN
from storage_engine.segment.checkpoint import OffsetCheckpointFile
from storage_engine.segment.segment import LogSegment

_STATE = struct.Struct(">qqqq")          # see storage_engine.log.locks: generation, log start, recovery point, flush
                                         # (a status follows them; unread here)
SORT_KEYS = ("name", "size", "segments", "deleted")


class LogDirStatus(TypedDict):
    path: str
    online: bool
    error: str | None               # why the dir is offline, or the first damage found in it
    capacity_bytes: int | None      # of the file system holding it
    free_bytes: int | None
    partitions: int
    size_bytes: int                 # bytes of live segments (.log files)
    deleted_bytes: int              # bytes of .deleted files waiting for file.delete.delay.ms
    damaged: list[str]              # checkpoint files that do not parse
    uncleanable: int
    moves_in_progress: list[dict]   # -future copies being made here: topic, partition, folder, bytes, source
    deleting: int                   # -delete folders (deleted or moved-away partitions) awaiting removal
    deleting_bytes: int
    foreign: list[str]              # stray and foreign folders (never loaded, never deleted by maintenance)


class SegmentStatus(TypedDict):
    base_offset: int
    size_bytes: int
    largest_timestamp: int          # ms; the file's mtime when the segment holds no timestamp
    index_bytes: int
    time_index_bytes: int
    active: bool


class PartitionStatus(TypedDict, total=False):
    topic: str
    partition: int
    log_dir: str
    cleanup_policy: str
    size_bytes: int
    segments: int
    deleted_bytes: int
    deleted_files: int
    pending_files: list[str]        # .cleaned/.swap left by an interrupted cleaning (completed at next load)
    # Computed for a page of partitions only:
    log_start_offset: int
    log_end_offset: int
    recovery_point: int
    cleaner_checkpoint: int | None
    dirty_ratio: float | None       # compacted topics: cleanable bytes / (clean + cleanable), as the cleaner sees it
    uncleanable: str | None         # why cleaning failed; cleared with ``compact --clear-uncleanable``
    error: str | None               # the partition could not be read


class PartitionPage(TypedDict):
    total: int
    offset: int
    limit: int
    sort: str
    partitions: list[PartitionStatus]


class PartitionDetail(PartitionStatus, total=False):
    segment_list: list[SegmentStatus]
    deleted: list[dict]


# -- listing ------------------------------------------------------------------------------------------------

# Per partition folder: (folder mtime, live .log files but the active one: count and bytes, the active .log's
# name, .deleted bytes and files, pending files). A folder's mtime changes whenever a file in it is created,
# renamed or removed (a roll, a deletion, a swap), so until it changes only the active segment can have
# grown: one stat of the folder and one of the active .log instead of a listing and a stat per file.
_SCAN_CACHE: dict[str, tuple] = {}
_SCAN_CACHE_MAX = 200_000


def _offset_named_log(n: str) -> bool:
    return len(n) == 24 and n.endswith(layout.LOG_SUFFIX) and n[:20].isdigit()


def _scan_folder(pdir: str) -> tuple:
    sealed_size = count = deleted_bytes = deleted_files = 0
    pending, logs = [], []
    with os.scandir(pdir) as it:
        for entry in it:
            n = entry.name
            if _offset_named_log(n):
                logs.append((n, entry))
            elif n.endswith(layout.DELETED_SUFFIX):
                deleted_bytes += entry.stat().st_size
                deleted_files += 1
            elif n.endswith((layout.CLEANED_SUFFIX, layout.SWAP_SUFFIX)):
                pending.append(n)
    logs.sort(key=lambda x: x[0])
    for _n, entry in logs[:-1]:
        sealed_size += entry.stat().st_size
    count = len(logs)
    active = logs[-1][0] if logs else None
    return sealed_size, count, active, deleted_bytes, deleted_files, sorted(pending)


def _scan_partition(log_dir: str, name: str, topic: str, partition: int, config: StorageConfig) -> PartitionStatus:
    pdir = os.path.join(log_dir, name)
    mtime = os.stat(pdir).st_mtime_ns
    cached = _SCAN_CACHE.get(pdir)
    if cached is None or cached[0] != mtime:
        if len(_SCAN_CACHE) > _SCAN_CACHE_MAX:
            _SCAN_CACHE.clear()
        cached = (mtime, *_scan_folder(pdir))
        _SCAN_CACHE[pdir] = cached
    _mtime, sealed_size, count, active, deleted_bytes, deleted_files, pending = cached
    size = sealed_size
    if active is not None:
        try:
            size += os.stat(os.path.join(pdir, active)).st_size
        except FileNotFoundError:           # rolled away between the two stats: read the folder again
            _SCAN_CACHE.pop(pdir, None)
            return _scan_partition(log_dir, name, topic, partition, config)
    return {"topic": topic, "partition": partition, "log_dir": log_dir,
            "cleanup_policy": ",".join(config.log_config(topic).cleanup_policy), "size_bytes": size,
            "segments": count, "deleted_bytes": deleted_bytes, "deleted_files": deleted_files,
            "pending_files": list(pending)}


def _matching(config: StorageConfig, topics: Collection[str] | None = None, log_dir: str | None = None,
              search: str | None = None) -> list[tuple[str, str, str, int]]:
    """[(log_dir, folder name, topic, partition)] of the matching partitions, in dir then name order."""
    out = []
    wanted = set(topics) if topics else None
    for d in config.log_dirs:
        if log_dir is not None and d != log_dir:
            continue
        for name, (topic, partition) in layout.partition_dirs(d):
            if wanted is not None and topic not in wanted:
                continue
            if search and search not in name:
                continue
            out.append((d, name, topic, partition))
    return out


def list_partition_status(config: StorageConfig, *, topics: Collection[str] | None = None, log_dir: str | None = None,
                          search: str | None = None, sort: str = "name", descending: bool = False,
                          offset: int = 0, limit: int = 100, now_ms: int | None = None) -> PartitionPage:
    """One page of partitions with their figures. ``sort``: name, size, segments or deleted (bytes awaiting
    purge); ``search`` keeps names containing it. Offsets and dirty ratios are read for the page's rows only."""
    if sort not in SORT_KEYS:
        raise ValueError(f"sort must be one of {SORT_KEYS}, got {sort!r}")
    if offset < 0 or limit < 1:
        raise ValueError(f"offset must be >= 0 and limit >= 1, got offset={offset}, limit={limit}")
    rows = []
    for d, name, topic, partition in _matching(config, topics, log_dir, search):
        try:
            rows.append(_scan_partition(d, name, topic, partition, config))
        except OSError as exc:          # removed while listing, or unreadable: still listed, with the reason
            rows.append({"topic": topic, "partition": partition, "log_dir": d, "size_bytes": 0, "segments": 0,
                         "deleted_bytes": 0, "deleted_files": 0, "pending_files": [],
                         "cleanup_policy": ",".join(config.log_config(topic).cleanup_policy),
                         "error": f"{type(exc).__name__}: {exc}"})
    if sort == "name":
        rows.sort(key=lambda r: (r["topic"], r["partition"]), reverse=descending)
    else:
        measure = {"size": lambda r: r["size_bytes"], "segments": lambda r: r["segments"],
                   "deleted": lambda r: r["deleted_bytes"]}[sort]
        rows.sort(key=lambda r: (measure(r), r["topic"], r["partition"]), reverse=descending)
    page = rows[offset:offset + limit]
    _add_offsets(config, page, now_ms)
    return {"total": len(rows), "offset": offset, "limit": limit, "sort": sort, "partitions": page}


BROKER_STATUS_FILE = layout.ENGINE_PREFIX + "broker-status.json"   # written by ``serve`` every few seconds


def listener_status(config: StorageConfig, now_ms: int | None = None) -> dict | None:
    """What the Kafka-protocol listener (``serve``) last wrote about itself: listeners, connections, request and
    record counts and rates; ``state`` is ``running``, ``stopped`` (a clean stop) or ``not responding`` (no update
    for three intervals: killed or hung). None when no listener ever ran on these log dirs."""
    import json
    import time
    from storage_engine.durable import read_regular_file
    if not config.log_dirs:
        return None
    try:
        data = json.loads(read_regular_file(os.path.join(config.log_dirs[0], BROKER_STATUS_FILE), 1 << 20))
    except (OSError, StorageError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    now = int(time.time() * 1000) if now_ms is None else now_ms
    age_ms = now - int(data.get("updated_ms", 0))
    if not data.get("running"):
        state = "stopped"
    elif age_ms > 3 * 1000 * float(data.get("interval_s", 5)):
        state = "not responding"
    else:
        state = "running"
    return {**data, "state": state, "age_ms": age_ms}


def consumer_groups(config: StorageConfig, listener: dict | None) -> list[dict]:
    """The consumer groups the listener last reported (state, members and their assignments, committed offsets),
    each committed partition with its lag: the log end offset as the files show it minus the committed offset."""
    groups = (listener or {}).get("groups") or []
    topics = {t for g in groups for t in g.get("offsets", {})}
    ends: dict[tuple[str, int], int] = {}
    if topics:
        page = list_partition_status(config, topics=topics, limit=1_000_000)
        ends = {(r["topic"], r["partition"]): r["log_end_offset"] for r in page["partitions"] if "log_end_offset" in r}
    out = []
    for g in groups:
        parts = []
        for topic, by_partition in sorted(g.get("offsets", {}).items()):
            for p, committed in sorted(by_partition.items(), key=lambda kv: int(kv[0])):
                end = ends.get((topic, int(p)))
                parts.append({"topic": topic, "partition": int(p), "committed": committed, "log_end_offset": end,
                              "lag": None if end is None else max(0, end - committed)})
        out.append({**g, "partitions": parts, "lag": sum(x["lag"] or 0 for x in parts)})
    return out


def groups_losing_unread(groups: list[dict], retention_rows: list[dict]) -> list[dict]:
    """For a retention plan: the groups whose committed offset on a partition lies below the log start offset the
    plan would leave, i.e. records they have not read yet would be deleted."""
    after = {(r["topic"], r["partition"]): r.get("log_start_after", r["log_start_offset"]) for r in retention_rows}
    out = []
    for g in groups:
        for x in g.get("partitions", []):
            start = after.get((x["topic"], x["partition"]))
            if start is not None and x["committed"] < start:
                out.append({"group_id": g["group_id"], "topic": x["topic"], "partition": x["partition"],
                            "committed": x["committed"], "log_start_after": start,
                            "unread_records_lost": start - x["committed"]})
    return out


def log_dir_status(config: StorageConfig) -> list[LogDirStatus]:
    """Capacity, use and health of each log dir (every partition folder is listed and stat'ed)."""
    out = []
    for d in config.log_dirs:
        status: LogDirStatus = {"path": d, "online": os.path.isdir(d), "error": None, "capacity_bytes": None,
                                "free_bytes": None, "partitions": 0, "size_bytes": 0, "deleted_bytes": 0,
                                "damaged": [], "uncleanable": 0, "moves_in_progress": [], "deleting": 0,
                                "deleting_bytes": 0, "foreign": []}
        if not status["online"]:
            try:
                os.stat(d)
                status["error"] = "log dir is not a directory"
            except OSError as exc:
                status["error"] = ("log dir does not exist" if isinstance(exc, FileNotFoundError)
                                   else f"{type(exc).__name__}: {exc}")
            out.append(status)
            continue
        try:
            fs = os.statvfs(d)
            status["capacity_bytes"] = fs.f_blocks * fs.f_frsize
            status["free_bytes"] = fs.f_bavail * fs.f_frsize
            listing = layout.scan_log_dir(d)
            status["foreign"] = listing.strays + [f"{name} ({reason})" for name, reason in listing.foreign]
            status["deleting"] = len(listing.deleting)
            status["deleting_bytes"] = sum(_tree_size(os.path.join(d, name)) for name in listing.deleting)
            for name, (topic, partition) in listing.futures:
                source = next((other for other in config.log_dirs if other != d and os.path.isdir(
                    os.path.join(other, layout.partition_dir_name(topic, partition)))), None)
                status["moves_in_progress"].append({
                    "topic": topic, "partition": partition, "folder": name, "size_bytes": _tree_size(os.path.join(d, name)),
                    "source_dir": source, "source_size_bytes": _tree_size(os.path.join(
                        source, layout.partition_dir_name(topic, partition))) if source else None})
            for name, (topic, partition) in listing.partitions:
                try:
                    row = _scan_partition(d, name, topic, partition, config)
                except OSError as exc:
                    status["damaged"].append(f"{name}: {exc}")
                    continue
                status["partitions"] += 1
                status["size_bytes"] += row["size_bytes"]
                status["deleted_bytes"] += row["deleted_bytes"]

            for cp in (layout.RECOVERY_POINT_CHECKPOINT, layout.LOG_START_OFFSET_CHECKPOINT,
                       layout.CLEANER_OFFSET_CHECKPOINT):
                _entries, err = OffsetCheckpointFile(os.path.join(d, cp)).read_or_empty()
                if err:
                    status["damaged"].append(str(err))
            status["uncleanable"] = len(_uncleanable(d))
        except OSError as exc:
            status["online"] = False
            status["error"] = f"{type(exc).__name__}: {exc}"
        if status["damaged"] and status["error"] is None:
            status["error"] = status["damaged"][0]
        out.append(status)
    return out


# -- offsets, dirty ratios: a read-only snapshot of one partition -----------------------------------------------

def _uncleanable(log_dir: str) -> dict:
    from storage_engine.maintenance.cleaner_manager import read_uncleanable
    return read_uncleanable(log_dir)


def peek_state(log_dir: str, name: str) -> tuple[int, int] | None:
    """(log start offset, recovery point) a process published in the partition's lock file (-1 = unknown),
    or None when there is no such file. Read without the lock and without creating the file."""
    try:
        fd = os.open(layout.partition_state_file(log_dir, name), os.O_RDONLY)
    except OSError:
        return None
    try:
        data = os.pread(fd, _STATE.size, 0)
    finally:
        os.close(fd)
    if len(data) < 24:
        return None
    _generation, log_start, recovery_point = struct.unpack(">qqq", data[:24])
    return log_start, recovery_point


class LogSnapshot:
    """The parts of a :class:`~storage_engine.log.log.Log` that the retention and cleaner rules read, from the
    files as they are (segments opened lazily and read-only). Close it to release the files it read."""

    def __init__(self, config: StorageConfig, log_dir: str, topic: str, partition: int, *,
                 checkpoints: dict | None = None):
        self.topic, self.partition, self.log_dir = topic, partition, log_dir
        self.name = layout.partition_dir_name(topic, partition)
        self.dir = os.path.join(log_dir, self.name)
        self.config = config.log_config(topic)
        bases = sorted(layout.offset_from_filename(n) for n in os.listdir(self.dir)
                       if n.endswith(layout.LOG_SUFFIX) and layout.is_offset_named(n))
        if not bases:
            raise StorageError(f"partition {self.name} has no segments in {self.dir}")
        self.segments = [LogSegment.open(self.dir, b, self.config, now_ms=0, file_already_exists=True, lazy=True,
                                         writable=False) for b in bases]
        cps = checkpoints if checkpoints is not None else read_checkpoints(log_dir)
        tp = (topic, partition)
        start = cps[layout.LOG_START_OFFSET_CHECKPOINT].get(tp, 0)
        recovery = cps[layout.RECOVERY_POINT_CHECKPOINT].get(tp, 0)
        state = peek_state(log_dir, self.name)
        if state is not None:
            if state[0] != UNKNOWN:
                start = max(start, state[0])
            if state[1] != UNKNOWN:
                recovery = state[1]
        self.log_start_offset = max(start, bases[0])
        self.log_end_offset = self.segments[-1].read_next_offset()
        self.high_watermark = self.log_end_offset
        self.recovery_point = min(recovery, self.log_end_offset)
        self.cleaner_checkpoint = cps[layout.CLEANER_OFFSET_CHECKPOINT].get(tp)
        self._lso: int | None = None

    def size_in_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    @property
    def last_stable_offset(self) -> int:
        """The LSO, from the producer snapshots and a replay of the batches after the newest (read-only)."""
        if self._lso is None:
            from storage_engine.log.producer_state_manager import rebuild
            from storage_engine.log.producer_state_manager import ProducerStateManager
            psm = ProducerStateManager(self.dir, self.name)
            rebuild(psm, self.segments, self.log_start_offset, self.log_end_offset, exclusive=False)
            first = psm.first_unstable_offset()
            self._lso = self.high_watermark if first is None else min(first, self.high_watermark)
        return self._lso

    def close(self) -> None:
        for s in self.segments:
            s.close(trim=False)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_checkpoints(log_dir: str) -> dict:
    """The three offset checkpoint files of a log dir, {file name: {(topic, partition): offset}}; a file that
    does not parse reads as empty (:func:`log_dir_status` reports it)."""
    return {name: OffsetCheckpointFile(os.path.join(log_dir, name)).read_or_empty()[0]
            for name in (layout.RECOVERY_POINT_CHECKPOINT, layout.LOG_START_OFFSET_CHECKPOINT,
                         layout.CLEANER_OFFSET_CHECKPOINT)}


def _add_offsets(config: StorageConfig, rows: list[PartitionStatus], now_ms: int | None) -> None:
    from storage_engine.maintenance.cleaner_manager import log_to_clean
    per_dir: dict[str, tuple[dict, dict]] = {}
    for row in rows:
        if row.get("error"):
            continue
        d = row["log_dir"]
        if d not in per_dir:
            per_dir[d] = (read_checkpoints(d), _uncleanable(d))
        cps, uncleanable = per_dir[d]
        name = layout.partition_dir_name(row["topic"], row["partition"])
        bad = uncleanable.get(name) or uncleanable.get("<unreadable>")
        row["uncleanable"] = bad.get("reason") if bad else None
        try:
            with LogSnapshot(config, d, row["topic"], row["partition"], checkpoints=cps) as snap:
                row["log_start_offset"] = snap.log_start_offset
                row["log_end_offset"] = snap.log_end_offset
                row["recovery_point"] = snap.recovery_point
                row["cleaner_checkpoint"] = snap.cleaner_checkpoint
                row["dirty_ratio"] = None
                if snap.config.compact:
                    now = now_ms if now_ms is not None else _wall_clock_ms()
                    row["dirty_ratio"] = round(log_to_clean(snap, snap.cleaner_checkpoint, now).cleanable_ratio, 6)
        except (StorageError, OSError) as exc:
            row["error"] = f"{type(exc).__name__}: {exc}"


def _wall_clock_ms() -> int:
    import time
    return int(time.time() * 1000)


def _find(config: StorageConfig, topic: str, partition: int) -> str:
    name = layout.partition_dir_name(topic, partition)
    for d in config.log_dirs:
        if os.path.isdir(os.path.join(d, name)):
            return d
    raise PartitionNotFoundError(f"partition {name} does not exist in any log dir {list(config.log_dirs)}")


def partition_detail(config: StorageConfig, topic: str, partition: int,
                     now_ms: int | None = None) -> PartitionDetail:
    """Everything about one partition: the page figures plus its segments and the files awaiting purge."""
    d = _find(config, topic, partition)
    name = layout.partition_dir_name(topic, partition)
    row: PartitionDetail = _scan_partition(d, name, topic, partition, config)    # type: ignore[assignment]
    _add_offsets(config, [row], now_ms)
    segments: list[SegmentStatus] = []
    deleted = []
    pdir = os.path.join(d, name)
    if not row.get("error"):
        with LogSnapshot(config, d, topic, partition) as snap:
            for i, s in enumerate(snap.segments):
                segments.append({"base_offset": s.base_offset, "size_bytes": s.size,
                                 "largest_timestamp": s.largest_timestamp(),
                                 "index_bytes": _size(layout.segment_file(pdir, s.base_offset, layout.INDEX_SUFFIX)),
                                 "time_index_bytes": _size(layout.segment_file(pdir, s.base_offset,
                                                                               layout.TIME_INDEX_SUFFIX)),
                                 "active": i == len(snap.segments) - 1})
    for n in sorted(os.listdir(pdir)):
        if n.endswith(layout.DELETED_SUFFIX):
            st = os.stat(os.path.join(pdir, n))
            deleted.append({"file": n, "size_bytes": st.st_size, "deleted_at_ms": int(st.st_mtime * 1000)})
    row["segment_list"] = segments
    row["deleted"] = deleted
    return row


def _tree_size(path: str) -> int:
    """Bytes of the segment ``.log`` files in a partition folder (live or awaiting deletion): its log data, as
    ``size_bytes`` counts it (index files are preallocated sparse files)."""
    total = 0
    try:
        with os.scandir(path) as it:
            for entry in it:
                if layout.LOG_SUFFIX not in entry.name:
                    continue
                try:
                    total += entry.stat().st_size
                except OSError:
                    pass
    except OSError:
        return 0
    return total


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


# -- plans --------------------------------------------------------------------------------------------------

def plan(config: StorageConfig, now_ms: int, *, topics: Collection[str] | None = None, offset: int = 0,
         limit: int = 100) -> dict:
    """What retention and compaction would do as of ``now_ms``, read-only.

    ``retention``: for one page of partitions (name order, ``offset``/``limit``), the segments
    :func:`storage_engine.maintenance.retention.plan` would delete and why. ``compaction``: every compacted
    partition ranked by dirty ratio as the cleaner's selection would rank it with ``now_ms`` as the upper
    time bound (a DAG run's interval end), those above ``min.cleanable.dirty.ratio`` (or forced by
    ``max.compaction.lag.ms``) marked ``eligible``; uncleanable partitions are listed as skipped."""
    from storage_engine.maintenance import cleaner_manager, retention
    matched = _matching(config, topics)
    retention_rows, unreadable = [], []
    cps_by_dir: dict[str, dict] = {}
    for d, _name, topic, partition in matched[offset:offset + limit]:
        cps = cps_by_dir[d] if d in cps_by_dir else cps_by_dir.setdefault(d, read_checkpoints(d))
        try:
            with LogSnapshot(config, d, topic, partition, checkpoints=cps) as snap:
                deletions, future = retention.plan(snap, now_ms)
                start_after = snap.log_start_offset
                if deletions:
                    last = deletions[-1].segment.base_offset
                    later = [seg.base_offset for seg in snap.segments if seg.base_offset > last]
                    start_after = max(start_after, min(later) if later else snap.log_end_offset)
                retention_rows.append({
                    "log_start_after": start_after,
                    "topic": topic, "partition": partition, "log_dir": d,
                    "segments": [x.as_dict() for x in deletions],
                    "segments_deleted": len(deletions), "bytes_reclaimed": sum(x.segment.size for x in deletions),
                    "log_start_offset": snap.log_start_offset, "future_segments": future})
        except (StorageError, OSError) as exc:
            unreadable.append({"topic": topic, "partition": partition, "error": f"{type(exc).__name__}: {exc}"})
    ranked, skipped = [], []
    uncleanable_by_dir: dict[str, dict] = {}
    for d, name, topic, partition in matched:
        if not config.log_config(topic).compact:
            continue
        cps = cps_by_dir[d] if d in cps_by_dir else cps_by_dir.setdefault(d, read_checkpoints(d))
        if d not in uncleanable_by_dir:
            uncleanable_by_dir[d] = _uncleanable(d)
        bad = uncleanable_by_dir[d].get(name)
        if bad:
            skipped.append({"topic": topic, "partition": partition, "reason": f"uncleanable: {bad.get('reason')}"})
            continue
        try:
            with LogSnapshot(config, d, topic, partition, checkpoints=cps) as snap:
                ltc = cleaner_manager.log_to_clean(snap, snap.cleaner_checkpoint, now_ms, upper_time_bound_ms=now_ms)
                row = ltc.as_dict()
                row["eligible"] = cleaner_manager.is_eligible(ltc)
                row["size_bytes"] = snap.size_in_bytes()
                ranked.append(row)
        except (StorageError, OSError) as exc:
            skipped.append({"topic": topic, "partition": partition,
                            "reason": f"cannot be read: {type(exc).__name__}: {exc}"})
    ranked.sort(key=lambda r: (not r["eligible"], -r["dirty_ratio"], r["topic"], r["partition"]))
    return {"now_ms": now_ms, "retention": {"total": len(matched), "offset": offset, "limit": limit,
                                            "partitions": retention_rows, "unreadable": unreadable,
                                            "segments_deleted": sum(r["segments_deleted"] for r in retention_rows),
                                            "bytes_reclaimed": sum(r["bytes_reclaimed"] for r in retention_rows)},
            "compaction": {"partitions": ranked, "skipped": skipped,
                           "eligible": sum(1 for r in ranked if r["eligible"])}}
