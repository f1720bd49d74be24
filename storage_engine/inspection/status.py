"""Read-only status of the log dirs for operators: what the Storage view in Airflow and ``status`` show.

Nothing here takes a lock, opens a file for writing, creates a file or repairs anything, so it may run in any
process (Airflow's api-server) while applications append and maintenance tasks run. Figures come from the
files as they are: folder listings and ``stat`` for sizes, the checkpoint files and each partition's shared
state (the first 32 bytes of its lock file, read without taking the lock) for offsets, the segments' index and
time-index tails for log end offsets and timestamps.

Cost is proportional to what is asked: :func:`list_partition_status` lists and stats every partition folder
that matches the filter (about 10 us per file), and computes offsets, dirty ratios and segment timestamps
only for the page it returns (for every matching partition when it is sorted by one of those figures);
:func:`partition_detail` reads one partition; :func:`overview` reads the figures of the compacted partitions
(to rank the dirtiest) and lists the rest.

**Damage** the files show is reported where it is found, per partition (``damage``: a list of
``{"kind", "message"}``), until the files no longer show it:

* ``unreadable``: a segment file (``.log``, an index, a snapshot) that is no regular file, e.g. a directory in
  place of a ``.log`` (:func:`storage_engine.log.health.unreadable_files`); maintenance leaves such a partition
  alone, and its figures are not read;
* ``missing``: a partition the dir's checkpoint files list whose folder vanished or became a file
  (:func:`storage_engine.log.health.missing_partitions`); listed as a partition with its reason;
* ``lost``: offsets a load found lost, recorded until an operator accepts them (:mod:`storage_engine.log.losses`);
* ``uncleanable``: a partition the cleaner gave up on (damage found while cleaning), until it is cleared.

Log-dir space is reported as ``df`` reports it (:func:`storage_engine.jobs.lifecycle.filesystem_usage`), and
foreign entries of a log dir (folders and files that are no partition) are listed with the dir.

Plans (:func:`plan`) run the engine's own rules, :func:`storage_engine.maintenance.retention.plan` and
:func:`storage_engine.maintenance.cleaner_manager.log_to_clean`, on a read-only snapshot of each partition
(:class:`LogSnapshot` offers the attributes those functions read from a ``Log``), so the view and the
maintenance jobs cannot disagree about what a run would do.
"""
from __future__ import annotations

import os
import stat
import struct
from collections.abc import Collection, Mapping
from typing import Any, Self, TypedDict

from storage_engine import layout
from storage_engine.config import StorageConfig
from storage_engine.errors import PartitionNotFoundError, StorageError
from storage_engine.jobs.lifecycle import filesystem_usage
from storage_engine.log import health, losses
from storage_engine.log.locks import UNKNOWN
from storage_engine.log.read_only import dir_condition, effective_segments
from storage_engine.segment.checkpoint import OffsetCheckpointFile
from storage_engine.segment.offset_index import OffsetIndex
from storage_engine.segment.segment import LogSegment
from storage_engine.segment.time_index import TimeIndex

_STATE = struct.Struct(">qqqq")          # see storage_engine.log.locks: generation, log start, recovery point, flush
                                         # (a status follows them; unread here)
# The columns a partition page sorts by: those known from the listing, and those read from each partition's files
# (sorting by one reads every matching partition). A caller may also sort by a field it added with ``extra``.
LISTING_SORT_KEYS = ("name", "log_dir", "size", "segments", "deleted", "uncleanable", "damage")
FIGURE_SORT_KEYS = ("log_start_offset", "log_end_offset", "recovery_point", "dirty_ratio", "cleaner_checkpoint")
SORT_KEYS = LISTING_SORT_KEYS + FIGURE_SORT_KEYS
_SORT_FIELDS = {"size": "size_bytes", "deleted": "deleted_bytes"}


class Damage(TypedDict, total=False):
    kind: str                       # unreadable, missing, lost, uncleanable (see the module docstring)
    message: str


class LogDirStatus(TypedDict):
    path: str
    online: bool
    error: str | None               # why the dir is offline, or the first damage found in it
    # The filesystem holding it, as df counts it (storage_engine.jobs.lifecycle.filesystem_usage):
    capacity_bytes: int | None      # df's Size
    used_bytes: int | None          # df's Used
    free_bytes: int | None          # df's Avail: what unprivileged writers can still use
    used_percent: float | None      # df's Use%: used / (used + avail)
    partitions: int                 # partition folders, and partitions whose folder is missing
    size_bytes: int                 # bytes of live segments (.log files)
    deleted_bytes: int              # bytes of .deleted files waiting for file.delete.delay.ms
    damaged: list[str]              # every problem: checkpoint files that do not parse, damaged partitions
    damaged_partitions: int         # partitions with damage (see the module docstring)
    uncleanable: int
    moves_in_progress: list[dict]   # -future copies being made here: topic, partition, folder, bytes, source
    deleting: int                   # -delete folders (deleted or moved-away partitions) awaiting removal
    deleting_bytes: int
    foreign: list[str]              # stray and foreign folders (never loaded, never deleted by maintenance)
    foreign_files: list[str]        # files in the dir that neither Kafka nor the engine keeps there
    # How the dir was left (storage_engine.log.read_only.dir_condition): the clean-shutdown marker is there; a
    # process has it open (None: cannot be told); neither: the last process died and recovery is pending.
    clean_shutdown: bool | None
    in_use: bool | None
    recovery_pending: bool


class SegmentStatus(TypedDict, total=False):
    base_offset: int
    size_bytes: int | None          # None: the .log is no regular file
    largest_timestamp: int | None   # ms; the file's mtime when the segment holds no timestamp
    index_bytes: int | None         # the entries written (entries x 8), not the file's preallocated length
    time_index_bytes: int | None    # the entries written (entries x 12)
    index_file_bytes: int | None    # the files' lengths (an active segment's indexes are preallocated)
    time_index_file_bytes: int | None
    active: bool
    problem: str | None             # why the segment cannot be read (its .log is a directory, ...)


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
    unreadable_files: list[str]     # segment files that are no regular file ("<path> (<what it is>)")
    uncleanable: str | None         # why cleaning failed; cleared with ``compact --clear-uncleanable``
    damage: list[Damage]            # see the module docstring
    # Computed for a page of partitions only:
    log_start_offset: int
    log_end_offset: int
    recovery_point: int
    cleaner_checkpoint: int | None
    dirty_ratio: float | None       # compacted topics: cleanable bytes / (clean + cleanable), as the cleaner sees it
    min_cleanable_dirty_ratio: float | None
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
# name, .deleted bytes and files, pending files, segment files that are no regular file). A folder's mtime
# changes whenever a file in it is created, renamed or removed (a roll, a deletion, a swap), so until it changes
# only the active segment can have grown: one stat of the folder and one of the active .log instead of a listing
# and a stat per file.
_SCAN_CACHE: dict[str, tuple] = {}
_SCAN_CACHE_MAX = 200_000
_SEGMENT_FILE_SUFFIXES = layout.SEGMENT_SUFFIXES + (layout.SNAPSHOT_SUFFIX,)


def _offset_named_log(n: str) -> bool:
    return len(n) == 24 and n.endswith(layout.LOG_SUFFIX) and n[:20].isdigit()


def _scan_folder(pdir: str) -> tuple:
    sealed_size = count = deleted_bytes = deleted_files = 0
    pending, logs = [], []
    odd = False
    with os.scandir(pdir) as it:
        for entry in it:
            n = entry.name
            if n.endswith(_SEGMENT_FILE_SUFFIXES) and layout.named_offset(n) is not None and not entry.is_file():
                odd = True              # a directory (or a broken link) where a segment file belongs
                continue
            if _offset_named_log(n):
                logs.append((n, entry))
            elif n.endswith(layout.DELETED_SUFFIX):
                deleted_bytes += entry.stat().st_size
                deleted_files += 1
            elif n.endswith((layout.CLEANED_SUFFIX, layout.SWAP_SUFFIX)):
                pending.append(n)
    # What maintenance reports for such a partition, word for word (it leaves the partition alone).
    unreadable = health.unreadable_files(pdir) if odd else []
    logs.sort(key=lambda x: x[0])
    for _n, entry in logs[:-1]:
        sealed_size += entry.stat().st_size
    count = len(logs)
    active = logs[-1][0] if logs else None
    return sealed_size, count, active, deleted_bytes, deleted_files, sorted(pending), unreadable


class _DirMarkers:
    """What the engine records about the partitions of one log dir outside their folders: the cleaner's
    uncleanable marks and the loss records (read once per dir and listing)."""

    def __init__(self, log_dir: str):
        self.log_dir = log_dir
        self.uncleanable = _uncleanable(log_dir)
        try:
            with os.scandir(log_dir) as it:
                self.loss_folders = {e.name[len(layout.LOSS_RECORD_PREFIX):] for e in it
                                     if e.name.startswith(layout.LOSS_RECORD_PREFIX)}
        except OSError:
            self.loss_folders = set()

    def uncleanable_reason(self, name: str) -> str | None:
        bad = self.uncleanable.get(name) or self.uncleanable.get("<unreadable>")
        return str(bad.get("reason")) if isinstance(bad, dict) else None

    def damage(self, name: str, unreadable: list[str]) -> list[Damage]:
        out: list[Damage] = [{"kind": "unreadable", "message": f"{u}: no regular file; the partition is not "
                                                               "maintained until it is"} for u in unreadable]
        if name in self.loss_folders:
            try:
                ranges, err = losses.read(self.log_dir, name)
            except StorageError as exc:
                ranges, err = [], str(exc)
            out += [{"kind": "lost", "message": losses.describe(r) + "; accept-loss accepts it"} for r in ranges]
            if err:
                out.append({"kind": "lost", "message": err})
        reason = self.uncleanable_reason(name)
        if reason:
            out.append({"kind": "uncleanable", "message": f"cleaning failed: {reason}"})
        return out


def _scan_partition(log_dir: str, name: str, topic: str, partition: int, config: StorageConfig,
                    markers: _DirMarkers | None = None) -> PartitionStatus:
    pdir = os.path.join(log_dir, name)
    mtime = os.stat(pdir).st_mtime_ns
    cached = _SCAN_CACHE.get(pdir)
    if cached is None or cached[0] != mtime:
        if len(_SCAN_CACHE) > _SCAN_CACHE_MAX:
            _SCAN_CACHE.clear()
        cached = (mtime, *_scan_folder(pdir))
        _SCAN_CACHE[pdir] = cached
    _mtime, sealed_size, count, active, deleted_bytes, deleted_files, pending, unreadable = cached
    size = sealed_size
    if active is not None:
        try:
            size += os.stat(os.path.join(pdir, active)).st_size
        except FileNotFoundError:           # rolled away between the two stats: read the folder again
            _SCAN_CACHE.pop(pdir, None)
            return _scan_partition(log_dir, name, topic, partition, config, markers)
    markers = markers or _DirMarkers(log_dir)
    row: PartitionStatus = {
        "topic": topic, "partition": partition, "log_dir": log_dir,
        "cleanup_policy": ",".join(config.log_config(topic).cleanup_policy), "size_bytes": size,
        "segments": count, "deleted_bytes": deleted_bytes, "deleted_files": deleted_files,
        "pending_files": list(pending), "unreadable_files": list(unreadable),
        "uncleanable": markers.uncleanable_reason(name), "damage": markers.damage(name, unreadable)}
    if unreadable:
        row["error"] = (f"PartitionUnreadableError: partition {name} has {len(unreadable)} unreadable segment "
                        f"file(s), not maintained: {'; '.join(unreadable[:5])}")
    return row


def _error_row(config: StorageConfig, log_dir: str, topic: str, partition: int, error: str,
               damage: list[Damage] | None = None) -> PartitionStatus:
    """A partition listed although nothing of it can be read: its folder is gone, a file, or unreadable."""
    return {"topic": topic, "partition": partition, "log_dir": log_dir, "size_bytes": 0, "segments": 0,
            "deleted_bytes": 0, "deleted_files": 0, "pending_files": [], "unreadable_files": [],
            "cleanup_policy": ",".join(config.log_config(topic).cleanup_policy), "uncleanable": None,
            "damage": damage if damage is not None else [{"kind": "unreadable", "message": error}], "error": error}


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


def _missing(config: StorageConfig, topics: Collection[str] | None = None, log_dir: str | None = None,
             search: str | None = None) -> list[health.MissingPartition]:
    """The matching partitions whose folder vanished or became a file (listed, with why)."""
    out = []
    for d in config.log_dirs:
        if log_dir is not None and d != log_dir:
            continue
        try:
            found = health.missing_partitions(d)
        except OSError:
            continue
        out += [m for m in found if (not topics or m["topic"] in topics)
                and (not search or search in layout.partition_dir_name(m["topic"], m["partition"]))]
    return out


def partition_rows(config: StorageConfig, *, topics: Collection[str] | None = None, log_dir: str | None = None,
                   search: str | None = None) -> list[PartitionStatus]:
    """Every matching partition with what its folder listing shows (size, segments, ``.deleted`` files, damage;
    no figure read from its files), in dir then name order; the partitions whose folder is missing last."""
    rows: list[PartitionStatus] = []
    markers: dict[str, _DirMarkers] = {}
    for d, name, topic, partition in _matching(config, topics, log_dir, search):
        if d not in markers:
            markers[d] = _DirMarkers(d)
        try:
            rows.append(_scan_partition(d, name, topic, partition, config, markers[d]))
        except OSError as exc:          # removed while listing, or unreadable: still listed, with the reason
            rows.append(_error_row(config, d, topic, partition, f"{type(exc).__name__}: {exc}"))
    for m in _missing(config, topics, log_dir, search):
        rows.append(_error_row(config, m["log_dir"], m["topic"], m["partition"], m["reason"],
                               [{"kind": "missing", "message": m["reason"]}]))
    return rows


def _sort_value(row: PartitionStatus, sort: str) -> Any:
    if sort == "damage":
        return len(row.get("damage") or [])
    value = row.get(_SORT_FIELDS.get(sort, sort))
    if isinstance(value, (list, dict)):
        return len(value)
    return value


def sort_rows(rows: list[PartitionStatus], sort: str, descending: bool = False) -> None:
    """Sort in place by a column (``SORT_KEYS``, or a field of the rows); rows without a value come first
    (last when descending); ties in topic, partition order."""
    if sort == "name":
        rows.sort(key=lambda r: (r["topic"], r["partition"]), reverse=descending)
        return

    def key(r: PartitionStatus) -> tuple:
        v = _sort_value(r, sort)
        return (v is not None, v if v is not None else 0, r["topic"], r["partition"])

    rows.sort(key=key, reverse=descending)


def _merge(rows: list[PartitionStatus], extra: Mapping[tuple[str, int], Mapping[str, Any]] | None) -> None:
    """Set the fields a caller knows about partitions on their rows; a list extends the row's list."""
    for row in rows:
        for k, v in (extra or {}).get((row["topic"], row["partition"]), {}).items():
            mine = row.get(k)
            row[k] = mine + list(v) if isinstance(v, list) and isinstance(mine, list) else v  # type: ignore


def list_partition_status(config: StorageConfig, *, topics: Collection[str] | None = None, log_dir: str | None = None,
                          search: str | None = None, sort: str = "name", descending: bool = False,
                          offset: int = 0, limit: int = 100, now_ms: int | None = None,
                          extra: Mapping[tuple[str, int], Mapping[str, Any]] | None = None,
                          extra_sorts: Collection[str] = ()) -> PartitionPage:
    """One page of partitions with their figures. ``sort``: one of ``SORT_KEYS`` (name, log dir, size, segments,
    ``.deleted`` bytes, uncleanable reason, damage count; log start and end offsets, recovery point, dirty ratio,
    cleaner checkpoint, which read every matching partition's files) or one of ``extra_sorts``, fields given in
    ``extra``; ``search`` keeps names containing it. ``extra``: fields a caller knows about partitions
    (``{(topic, partition): {field: value}}``), set on the rows before they are sorted; a list extends the row's
    list of the same name (``damage``). Offsets and dirty ratios are read for the page's rows only (unless
    sorted by one)."""
    if sort not in SORT_KEYS and sort not in extra_sorts:
        raise ValueError(f"sort must be one of {SORT_KEYS + tuple(extra_sorts)}, got {sort!r}")
    if offset < 0 or limit < 1:
        raise ValueError(f"offset must be >= 0 and limit >= 1, got offset={offset}, limit={limit}")
    rows = partition_rows(config, topics=topics, log_dir=log_dir, search=search)
    _merge(rows, extra)
    if sort in FIGURE_SORT_KEYS:
        _add_offsets(config, rows, now_ms)
    sort_rows(rows, sort, descending)
    page = rows[offset:offset + limit]
    if sort not in FIGURE_SORT_KEYS:
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


def log_dir_status(config: StorageConfig, rows: list[PartitionStatus] | None = None) -> list[LogDirStatus]:
    """Capacity, use and health of each log dir (every partition folder is listed and stat'ed; ``rows``: the
    listing of every partition, :func:`partition_rows`, when the caller has it already)."""
    if rows is None:
        rows = partition_rows(config)
    by_dir: dict[str, list[PartitionStatus]] = {}
    for row in rows:
        by_dir.setdefault(row["log_dir"], []).append(row)
    out = []
    for d in config.log_dirs:
        status: LogDirStatus = {"path": d, "online": os.path.isdir(d), "error": None, "capacity_bytes": None,
                                "used_bytes": None, "free_bytes": None, "used_percent": None, "partitions": 0,
                                "size_bytes": 0, "deleted_bytes": 0, "damaged": [], "damaged_partitions": 0,
                                "uncleanable": 0, "moves_in_progress": [], "deleting": 0, "deleting_bytes": 0,
                                "foreign": [], "foreign_files": [], "clean_shutdown": None, "in_use": None,
                                "recovery_pending": False}
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
            status.update(dir_condition(d))     # type: ignore[typeddict-item]
            fs = filesystem_usage(d)
            status["capacity_bytes"], status["used_bytes"] = fs["total_bytes"], fs["used_bytes"]
            status["free_bytes"], status["used_percent"] = fs["available_bytes"], fs["used_percent"]
            listing = layout.scan_log_dir(d)
            status["foreign"] = listing.strays + [f"{name} ({reason})" for name, reason in listing.foreign]
            status["foreign_files"] = list(listing.foreign_files)
            status["deleting"] = len(listing.deleting)
            status["deleting_bytes"] = sum(_tree_size(os.path.join(d, name)) for name in listing.deleting)
            for name, (topic, partition) in listing.futures:
                source = next((other for other in config.log_dirs if other != d and os.path.isdir(
                    os.path.join(other, layout.partition_dir_name(topic, partition)))), None)
                status["moves_in_progress"].append({
                    "topic": topic, "partition": partition, "folder": name, "size_bytes": _tree_size(os.path.join(d, name)),
                    "source_dir": source, "source_size_bytes": _tree_size(os.path.join(
                        source, layout.partition_dir_name(topic, partition))) if source else None})
            for cp in (layout.RECOVERY_POINT_CHECKPOINT, layout.LOG_START_OFFSET_CHECKPOINT,
                       layout.CLEANER_OFFSET_CHECKPOINT):
                _entries, err = OffsetCheckpointFile(os.path.join(d, cp)).read_or_empty()
                if err:
                    status["damaged"].append(str(err))
            for row in by_dir.get(d, []):
                status["partitions"] += 1
                status["size_bytes"] += row["size_bytes"]
                status["deleted_bytes"] += row["deleted_bytes"]
                status["uncleanable"] += 1 if row.get("uncleanable") else 0
                if row.get("damage"):
                    status["damaged_partitions"] += 1
                    name = layout.partition_dir_name(row["topic"], row["partition"])
                    status["damaged"] += [f"{name}: {x['message']}" for x in row["damage"]]
        except OSError as exc:
            status["online"] = False
            status["error"] = f"{type(exc).__name__}: {exc}"
        if status["damaged"] and status["error"] is None:
            status["error"] = status["damaged"][0]
        out.append(status)
    return out


class Overview(TypedDict):
    log_dirs: list[LogDirStatus]
    partitions: int
    dirtiest: list[PartitionStatus]     # compacted partitions, dirtiest first (figures read)
    compacted: int                      # how many compacted partitions were ranked
    damaged: list[PartitionStatus]      # every partition with damage (no figures read)
    listener: dict | None
    groups: list[dict]


def overview(config: StorageConfig, *, now_ms: int | None = None, top: int = 10,
             extra: Mapping[tuple[str, int], Mapping[str, Any]] | None = None) -> Overview:
    """What an operator looks at first, read-only: each log dir's space (as ``df`` counts it), partitions,
    bytes, ``.deleted`` bytes awaiting purge, damage, foreign entries and moves in progress; the ``top``
    dirtiest compacted partitions (dirty ratio as the cleaner sees it at ``now_ms``); every damaged partition;
    the Kafka listener and its consumer groups. The Storage view's first page and ``status`` show it.
    ``extra``: as for :func:`list_partition_status` (damage a caller knows of counts with the files')."""
    rows = partition_rows(config)
    _merge(rows, extra)
    compacted = [r for r in rows if not r.get("error") and config.log_config(r["topic"]).compact]
    _add_offsets(config, compacted, now_ms)
    ranked = [r for r in compacted if r.get("dirty_ratio") is not None]
    sort_rows(ranked, "dirty_ratio", descending=True)
    listener = listener_status(config, now_ms)
    return {"log_dirs": log_dir_status(config, rows), "partitions": len(rows), "dirtiest": ranked[:top],
            "compacted": len(ranked), "damaged": [r for r in rows if r.get("damage")], "listener": listener,
            "groups": consumer_groups(config, listener)}


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
        health.check_partition(self)        # a segment file that is no regular file: not read, as maintenance
        # The segments as the next writable open will name them (a swap a dead cleaner left half done resolved
        # on the names only), each read from the file that will bear its name; nothing is renamed.
        self.segments: list[LogSegment] = list(effective_segments(log_dir, self.name, self.config, []))
        if not self.segments:
            raise StorageError(f"partition {self.name} has no segments in {self.dir}")
        bases = [s.base_offset for s in self.segments]
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
    """Read each row's figures from its files (offsets, recovery point, cleaner checkpoint, dirty ratio)."""
    from storage_engine.maintenance.cleaner_manager import log_to_clean
    per_dir: dict[str, dict] = {}
    for row in rows:
        if row.get("error"):
            continue
        d = row["log_dir"]
        if d not in per_dir:
            per_dir[d] = read_checkpoints(d)
        try:
            with LogSnapshot(config, d, row["topic"], row["partition"], checkpoints=per_dir[d]) as snap:
                row["log_start_offset"] = snap.log_start_offset
                row["log_end_offset"] = snap.log_end_offset
                row["recovery_point"] = snap.recovery_point
                row["cleaner_checkpoint"] = snap.cleaner_checkpoint
                row["dirty_ratio"] = row["min_cleanable_dirty_ratio"] = None
                if snap.config.compact:
                    now = now_ms if now_ms is not None else _wall_clock_ms()
                    row["dirty_ratio"] = round(log_to_clean(snap, snap.cleaner_checkpoint, now).cleanable_ratio, 6)
                    row["min_cleanable_dirty_ratio"] = snap.config.min_cleanable_dirty_ratio
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
    """Everything about one partition: the page figures plus its segments and the files awaiting purge. A
    partition whose folder is missing is described by its reason; a segment whose ``.log`` is no regular file
    is listed with the problem instead of a size."""
    name = layout.partition_dir_name(topic, partition)
    try:
        d = _find(config, topic, partition)
    except PartitionNotFoundError:
        gone = [m for m in _missing(config, [topic]) if m["partition"] == partition]
        if not gone:
            raise
        m = gone[0]
        missing: PartitionDetail = {**_error_row(config, m["log_dir"], topic, partition, m["reason"],
                                                 [{"kind": "missing", "message": m["reason"]}]),
                                    "segment_list": [], "deleted": []}
        return missing
    row: PartitionDetail = _scan_partition(d, name, topic, partition, config)    # type: ignore[assignment]
    _add_offsets(config, [row], now_ms)
    segments: list[SegmentStatus] = []
    deleted = []
    pdir = os.path.join(d, name)
    if not row.get("error"):
        try:
            with LogSnapshot(config, d, topic, partition) as snap:
                last = len(snap.segments) - 1
                segments = [_segment_status(pdir, s.base_offset, s.size, s.largest_timestamp(), i == last)
                            for i, s in enumerate(snap.segments)]
        except (StorageError, OSError) as exc:
            row["error"] = f"{type(exc).__name__}: {exc}"
    if row.get("error"):
        segments = _segments_by_name(pdir, row.get("unreadable_files") or [])
    for n in sorted(os.listdir(pdir)):
        if n.endswith(layout.DELETED_SUFFIX):
            st = os.stat(os.path.join(pdir, n))
            deleted.append({"file": n, "size_bytes": st.st_size, "deleted_at_ms": int(st.st_mtime * 1000)})
    row["segment_list"] = segments
    row["deleted"] = deleted
    return row


def _segment_status(pdir: str, base: int, size: int | None, largest_timestamp: int | None,
                    active: bool) -> SegmentStatus:
    index = layout.segment_file(pdir, base, layout.INDEX_SUFFIX)
    time_index = layout.segment_file(pdir, base, layout.TIME_INDEX_SUFFIX)
    return {"base_offset": base, "size_bytes": size, "largest_timestamp": largest_timestamp,
            "index_bytes": index_used_bytes(index, OffsetIndex, base), "index_file_bytes": _file_size(index),
            "time_index_bytes": index_used_bytes(time_index, TimeIndex, base),
            "time_index_file_bytes": _file_size(time_index), "active": active, "problem": None}


def _segments_by_name(pdir: str, unreadable: list[str]) -> list[SegmentStatus]:
    """The segments of a partition that cannot be read as a log, from the names of its ``.log`` files: sizes of
    the regular ones, and the problem of each that is none (what :func:`storage_engine.log.health.unreadable_files`
    says of it)."""
    out: list[SegmentStatus] = []
    try:
        entries = sorted((e for e in os.scandir(pdir) if _offset_named_log(e.name)), key=lambda e: e.name)
    except OSError:
        return out
    for i, e in enumerate(entries):
        base = layout.offset_from_filename(e.name)
        if e.is_file():
            out.append(_segment_status(pdir, base, _file_size(e.path), None, i == len(entries) - 1))
        else:
            problem = next((u[len(e.path):].strip(" ()") for u in unreadable if u.startswith(e.path + " ")),
                           "no regular file")
            out.append({"base_offset": base, "size_bytes": None, "largest_timestamp": None, "index_bytes": None,
                        "time_index_bytes": None, "index_file_bytes": None, "time_index_file_bytes": None,
                        "active": i == len(entries) - 1, "problem": f"{e.name} is {problem}"})
    return out


def index_used_bytes(path: str, index_class: type[OffsetIndex] | type[TimeIndex], base_offset: int) -> int | None:
    """The bytes of the entries written to an index file (entries x entry size), not its length: an active
    segment's ``.index``/``.timeindex`` is preallocated (``segment.index.bytes``, 10 MiB by default) and trimmed
    when the segment is rolled. None when there is no regular file. Read-only.

    A file whose last slot holds an entry is full (one ``pread``; a rolled segment's trimmed index); otherwise
    the index class counts its valid entries as every reader does (:mod:`storage_engine.segment.index_file`)."""
    entry = index_class.ENTRY_SIZE
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        slots = st.st_size // entry
        if slots == 0:
            return 0
        last = os.pread(fd, entry, (slots - 1) * entry)
    except OSError:
        return None
    finally:
        os.close(fd)
    if len(last) == entry and any(last):
        return slots * entry
    try:
        with index_class(path, base_offset, writable=False) as index:
            return index.size_in_bytes
    except StorageError:
        return None


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


def _file_size(path: str) -> int | None:
    try:
        return os.stat(path).st_size
    except OSError:
        return None


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
    if offset == 0:                     # partitions whose folder is missing: maintenance fails them too
        unreadable += [{"topic": m["topic"], "partition": m["partition"], "error": m["reason"]}
                       for m in _missing(config, topics)]
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
