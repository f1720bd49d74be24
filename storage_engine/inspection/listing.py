"""The partitions of the log dirs as a sorted page: what each folder listing shows (size, segments, ``.deleted``
files, damage), and for the page the figures read from the files (offsets, recovery point, cleaner checkpoint,
dirty ratio). Read-only, as all of :mod:`storage_engine.inspection`.

Cost is proportional to what is asked: :func:`list_partition_status` lists and stats every partition folder
that matches the filter (about 10 us per file), and computes offsets, dirty ratios and segment timestamps
only for the page it returns (for every matching partition when it is sorted by one of those figures).

**Damage** the files show is reported where it is found, per partition (``damage``: a list of
``{"kind", "message"}``), until the files no longer show it:

* ``unreadable``: a segment file (``.log``, an index, a snapshot) that is no regular file, e.g. a directory in
  place of a ``.log`` (:func:`storage_engine.log.health.unreadable_files`); maintenance leaves such a partition
  alone, and its figures are not read;
* ``missing``: a partition the dir's checkpoint files list whose folder vanished or became a file
  (:func:`storage_engine.log.health.missing_partitions`); listed as a partition with its reason;
* ``lost``: offsets a load found lost, recorded until an operator accepts them (:mod:`storage_engine.log.losses`);
* ``uncleanable``: a partition the cleaner gave up on (damage found while cleaning), until it is cleared.
"""
from __future__ import annotations

import os
from collections.abc import Collection, Mapping
from typing import Any, TypedDict

from storage_engine import layout
from storage_engine.config import StorageConfig
from storage_engine.errors import StorageError
from storage_engine.inspection.snapshot import LogSnapshot, read_checkpoints, uncleanable_marks
from storage_engine.log import health, losses

# The columns a partition page sorts by: those known from the listing, and those read from each partition's files
# (sorting by one reads every matching partition). A caller may also sort by a field it added with ``extra``.
LISTING_SORT_KEYS = ("name", "log_dir", "size", "segments", "deleted", "uncleanable", "damage")
FIGURE_SORT_KEYS = ("log_start_offset", "log_end_offset", "recovery_point", "dirty_ratio", "cleaner_checkpoint")
SORT_KEYS = LISTING_SORT_KEYS + FIGURE_SORT_KEYS
_SORT_FIELDS = {"size": "size_bytes", "deleted": "deleted_bytes"}


class Damage(TypedDict, total=False):
    kind: str                       # unreadable, missing, lost, uncleanable (see the module docstring)
    message: str


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
    local_log_start_offset: int     # the first local offset (below it and above the log start: remote storage)
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


# Per partition folder: (folder mtime, live .log files but the active one: count and bytes, the active .log's
# name, .deleted bytes and files, pending files, segment files that are no regular file). A folder's mtime
# changes whenever a file in it is created, renamed or removed (a roll, a deletion, a swap), so until it changes
# only the active segment can have grown: one stat of the folder and one of the active .log instead of a listing
# and a stat per file.
_SCAN_CACHE: dict[str, tuple] = {}
_SCAN_CACHE_MAX = 200_000
_SEGMENT_FILE_SUFFIXES = layout.SEGMENT_SUFFIXES + (layout.SNAPSHOT_SUFFIX,)


def offset_named_log(n: str) -> bool:
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
            if offset_named_log(n):
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
        self.uncleanable = uncleanable_marks(log_dir)
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


def scan_partition(log_dir: str, name: str, topic: str, partition: int, config: StorageConfig,
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
            return scan_partition(log_dir, name, topic, partition, config, markers)
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


def error_row(config: StorageConfig, log_dir: str, topic: str, partition: int, error: str,
               damage: list[Damage] | None = None) -> PartitionStatus:
    """A partition listed although nothing of it can be read: its folder is gone, a file, or unreadable."""
    return {"topic": topic, "partition": partition, "log_dir": log_dir, "size_bytes": 0, "segments": 0,
            "deleted_bytes": 0, "deleted_files": 0, "pending_files": [], "unreadable_files": [],
            "cleanup_policy": ",".join(config.log_config(topic).cleanup_policy), "uncleanable": None,
            "damage": damage if damage is not None else [{"kind": "unreadable", "message": error}], "error": error}


def matching_partitions(config: StorageConfig, topics: Collection[str] | None = None, log_dir: str | None = None,
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


def missing_partitions(config: StorageConfig, topics: Collection[str] | None = None, log_dir: str | None = None,
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
    for d, name, topic, partition in matching_partitions(config, topics, log_dir, search):
        if d not in markers:
            markers[d] = _DirMarkers(d)
        try:
            rows.append(scan_partition(d, name, topic, partition, config, markers[d]))
        except OSError as exc:          # removed while listing, or unreadable: still listed, with the reason
            rows.append(error_row(config, d, topic, partition, f"{type(exc).__name__}: {exc}"))
    for m in missing_partitions(config, topics, log_dir, search):
        rows.append(error_row(config, m["log_dir"], m["topic"], m["partition"], m["reason"],
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


def merge_extra(rows: list[PartitionStatus], extra: Mapping[tuple[str, int], Mapping[str, Any]] | None) -> None:
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
    merge_extra(rows, extra)
    if sort in FIGURE_SORT_KEYS:
        add_figures(config, rows, now_ms)
    sort_rows(rows, sort, descending)
    page = rows[offset:offset + limit]
    if sort not in FIGURE_SORT_KEYS:
        add_figures(config, page, now_ms)
    return {"total": len(rows), "offset": offset, "limit": limit, "sort": sort, "partitions": page}


def add_figures(config: StorageConfig, rows: list[PartitionStatus], now_ms: int | None) -> None:
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
                row["local_log_start_offset"] = snap.local_log_start_offset
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
