"""The operators' status of the log dirs: what ``status`` and the first page of the Storage view in Airflow show
(:func:`overview`): each log dir's space, use and health (:func:`log_dir_status`), the dirtiest compacted
partitions, every damaged partition, and the Kafka listener with its consumer groups.

Nothing in :mod:`storage_engine.inspection` takes a lock, opens a file for writing, creates a file or repairs
anything, so it may run in any process (Airflow's api-server) while applications append and maintenance tasks
run. Figures come from the files as they are: folder listings and ``stat`` for sizes, the checkpoint files and
each partition's shared state for offsets, the segments' index and time-index tails for log end offsets and
timestamps. The parts, each answering one question:

* which partitions there are, with what their folders show and the damage found, as a sorted page
  (:mod:`.listing`);
* everything about one partition, its segments included (:mod:`.detail`);
* a partition's offsets as its files show them, and the read-only snapshot the engine's rules run on
  (:mod:`.snapshot`);
* what retention and compaction would do (:mod:`.plans`);
* the Kafka listener and its consumer groups (:mod:`.listener`).

:func:`overview` reads the figures of the compacted partitions (to rank the dirtiest) and lists the rest.
Log-dir space is reported as ``df`` reports it (:func:`storage_engine.jobs.lifecycle.filesystem_usage`), and
foreign entries of a log dir (folders and files that are no partition) are listed with the dir.
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, TypedDict

from storage_engine import layout
from storage_engine.config import StorageConfig
from storage_engine.inspection.listener import consumer_groups, listener_status
from storage_engine.inspection.listing import PartitionStatus, add_figures, merge_extra, partition_rows, sort_rows
from storage_engine.jobs.lifecycle import filesystem_usage
from storage_engine.log.read_only import dir_condition
from storage_engine.segment.checkpoint import OffsetCheckpointFile


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
    merge_extra(rows, extra)
    compacted = [r for r in rows if not r.get("error") and config.log_config(r["topic"]).compact]
    add_figures(config, compacted, now_ms)
    ranked = [r for r in compacted if r.get("dirty_ratio") is not None]
    sort_rows(ranked, "dirty_ratio", descending=True)
    listener = listener_status(config, now_ms)
    return {"log_dirs": log_dir_status(config, rows), "partitions": len(rows), "dirtiest": ranked[:top],
            "compacted": len(ranked), "damaged": [r for r in rows if r.get("damage")], "listener": listener,
            "groups": consumer_groups(config, listener)}
