"""Topic and log-dir lifecycle as whole jobs (the CLI and the Airflow DAGs call these): deleting topics, purging
deleted folders, moving partitions between log dirs and planning those moves, reporting what a log dir holds.

Each opens the logs it needs, acts as of ``now_ms`` (default: the wall clock), closes and returns a JSON-able
summary; each is safe while other processes use the same log dirs. Log dirs that are offline (an I/O error while
opening them) are skipped and named in the summary under ``offline_dirs``.

Balancing (:func:`balance_plan`): a log dir is *over* when its usage is above the threshold, and partitions move
from it to the least-used dir, largest first, while that brings the source under the threshold without taking the
target over it. Usage is measured one of two ways:

* ``max_used_percent``: the filesystem's used space in percent, as ``df`` counts it (:func:`filesystem_usage`:
  used / (used + available to unprivileged writers), so the blocks reserved for root count neither way). Dirs on
  one filesystem share it, so moving between them changes nothing: such moves are never planned;
* ``max_dir_bytes``: the bytes of log data the dir holds (its partitions' segment ``.log`` files).
"""
from __future__ import annotations

import os
from collections.abc import Collection, Iterable
from typing import TypedDict

from storage_engine import layout
from storage_engine.clock import clock_at
from storage_engine.config import StorageConfig
from storage_engine.errors import InvalidRequestError, PartitionNotFoundError, StorageIOError
from storage_engine.log import deletion, health, topic_changes
from storage_engine.log.health import MissingPartition
from storage_engine.jobs.partition import open_partition
from storage_engine.log.manager import LogManager


def _offline(mgr: LogManager) -> dict[str, str]:
    return mgr.offline_dirs()


def delete_topic(config: StorageConfig, topic: str, partitions: Iterable[int] | None = None,
                 now_ms: int | None = None) -> dict:
    """Delete every partition of ``topic`` (or only ``partitions``): each folder becomes ``-delete`` at once and
    leaves the checkpoints; the name is free for a new topic immediately. One recorded change
    (:mod:`storage_engine.log.topic_changes`): a kill part-way is completed at the next open, so the topic is never
    left with some of its partitions. Unknown topic: PartitionNotFoundError."""
    layout.validate_topic(topic)
    clock = clock_at(now_ms)
    now = clock.milliseconds()
    wanted = _listed(config, topic) if partitions is None else sorted(set(partitions))
    if not wanted:
        raise PartitionNotFoundError(f"topic {topic!r} has no partitions in {list(config.log_dirs)}")
    with LogManager.open(config, clock=clock, partitions=[(topic, p) for p in wanted]) as mgr:
        if mgr.resolved_topic_changes and partitions is None:   # a change left half done, completed at the open
            wanted = _listed(config, topic)
            if not wanted:
                raise PartitionNotFoundError(f"topic {topic!r} has no partitions in {list(config.log_dirs)} (a "
                                             "delete of it left half done was completed)")
        deleted = topic_changes.delete(mgr, topic, wanted, whole=partitions is None)
        offline = _offline(mgr)
    return {"topic": topic, "now_ms": now, "deleted": deleted, "partitions": [d["partition"] for d in deleted],
            "offline_dirs": offline}


def _listed(config: StorageConfig, topic: str) -> list[int]:
    return sorted({tp[1] for d in config.log_dirs if os.path.isdir(d)
                   for _n, tp in _partition_dirs_or_empty(d) if tp[0] == topic}
                  | {m["partition"] for m in _missing(config) if m["topic"] == topic})


def accept_loss(config: StorageConfig, topic: str, partition: int, now_ms: int | None = None) -> dict:
    """An operator's acceptance of the offsets a partition lost (:mod:`storage_engine.log.losses`): its log start
    offset moves past the recorded lost ranges (segments wholly below it go, as retention would remove them), the
    dir's checkpoints are written and the record is cleared, so ``verify`` stops reporting the loss."""
    from storage_engine.log import losses
    clock = clock_at(now_ms)
    now = clock.milliseconds()
    with open_partition(config, clock, topic, partition) as (mgr, log):
        done = losses.accept(log, now)
        mgr.checkpoint([log.log_dir])
        log_dir = log.log_dir
    return {"topic": topic, "partition": partition, "log_dir": log_dir, "now_ms": now, **done}


def _missing(config: StorageConfig) -> list[MissingPartition]:
    """The partitions whose folder vanished or became a file (:mod:`storage_engine.log.health`), of every dir."""
    out: list[MissingPartition] = []
    for d in config.log_dirs:
        try:
            out += health.missing_partitions(d)
        except OSError:
            continue
    return out


def _partition_dirs_or_empty(log_dir: str) -> list[tuple[str, tuple[str, int]]]:
    try:
        return layout.partition_dirs(log_dir)
    except OSError:
        return []


def purge_delete_dirs(config: StorageConfig, now_ms: int | None = None, *, dry_run: bool = False) -> dict:
    """Remove the ``-delete`` folders whose ``file.delete.delay.ms`` has passed (the folders of deleted
    partitions and of partitions moved away). A dir that cannot be listed is reported, not fatal."""
    now = clock_at(now_ms).milliseconds()
    removed, waiting, freed, offline = [], [], 0, {}
    for d in config.log_dirs:
        try:
            res = deletion.purge_delete_dirs([d], now, lambda t: config.log_config(t).file_delete_delay_ms,
                                             dry_run=dry_run)
        except (OSError, StorageIOError) as exc:
            offline[d] = f"{type(exc).__name__}: {exc}"
            continue
        removed += res["removed"]
        waiting += res["waiting"]
        freed += res["bytes_freed"]
    return {"now_ms": now, "dry_run": dry_run, "dirs_removed": len(removed), "removed": removed,
            "waiting": waiting, "bytes_freed": freed, "nothing_to_do": not removed, "offline_dirs": offline}


def move_partition(config: StorageConfig, topic: str, partition: int, target_dir: str,
                   now_ms: int | None = None, **options: float) -> dict:
    """Move one partition to ``target_dir`` while it keeps serving (see :mod:`storage_engine.log.mover`)."""
    clock = clock_at(now_ms)
    with LogManager.open(config, clock=clock, partitions=[(topic, partition)]) as mgr:
        result = mgr.move_log(topic, partition, target_dir, **options)
        result["offline_dirs"] = _offline(mgr)
    result["now_ms"] = clock.milliseconds()
    return result


def cancel_move(config: StorageConfig, topic: str, partition: int, now_ms: int | None = None) -> dict:
    """Give up the copy being made of a partition for a move (the partition stays where it is)."""
    with LogManager.open(config, clock=clock_at(now_ms), partitions=[(topic, partition)]) as mgr:
        return mgr.cancel_move(topic, partition)


# -- usage and balance ----------------------------------------------------------------------------------------

def _tree_bytes(path: str, *, logs_only: bool = False) -> int:
    """Bytes of the files under ``path``; ``logs_only``: of the segment ``.log`` files (the log data: index files
    are preallocated sparse files whose length says little about the disk they take)."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            if logs_only and not f.endswith(layout.LOG_SUFFIX):
                continue
            try:
                total += os.stat(os.path.join(root, f)).st_size
            except OSError:
                pass
    return total


class FilesystemUsage(TypedDict):
    total_bytes: int            # df's "Size": every block of the filesystem
    used_bytes: int             # df's "Used": total - free (``f_blocks - f_bfree``)
    available_bytes: int        # df's "Avail": free to unprivileged writers (``f_bavail``; the root reserve left out)
    used_percent: float         # df's "Use%" before df rounds it up: used / (used + available)


def filesystem_usage(path: str) -> FilesystemUsage:
    """The filesystem holding ``path`` as ``df`` reports it (``statvfs``); ``OSError`` when it cannot be read.

    ``df`` leaves the root reserve out of the percentage, so a log dir is full (100%) when unprivileged writers
    (the engine) can write no more, not when the last reserved block is gone: ``used / total`` would read 12%
    where ``df`` reads 30% on a filesystem with a large reserve."""
    fs = os.statvfs(path)
    total = fs.f_blocks * fs.f_frsize
    used = (fs.f_blocks - fs.f_bfree) * fs.f_frsize
    available = fs.f_bavail * fs.f_frsize
    usable = used + available
    return {"total_bytes": total, "used_bytes": used, "available_bytes": available,
            "used_percent": round(100.0 * used / usable, 3) if usable else 0.0}


def log_dir_usage(config: StorageConfig) -> list[dict]:
    """Per log dir, read-only (names and sizes, no log opened): its partitions with their bytes, the copies
    being made for moves, the filesystem's size and use. A dir that cannot be read is ``"offline"``."""
    out = []
    for d in config.log_dirs:
        entry: dict = {"log_dir": d, "status": "online"}
        try:
            listing = layout.scan_log_dir(d)
            fs = filesystem_usage(d) if os.path.isdir(d) else None
            device = os.stat(d).st_dev if os.path.isdir(d) else None
        except OSError as exc:
            entry.update(status="offline", error=f"{type(exc).__name__}: {exc}")
            out.append(entry)
            continue
        parts = [{"topic": tp[0], "partition": tp[1],
                  "size_bytes": _tree_bytes(os.path.join(d, name), logs_only=True)} for name, tp in listing.partitions]
        futures = [{"topic": tp[0], "partition": tp[1], "folder": name,
                    "size_bytes": _tree_bytes(os.path.join(d, name), logs_only=True)} for name, tp in listing.futures]
        entry.update(partitions=parts, moves_in=futures,
                     data_bytes=sum(p["size_bytes"] for p in parts) + sum(f["size_bytes"] for f in futures),
                     fs_total_bytes=fs["total_bytes"] if fs else 0, fs_used_bytes=fs["used_bytes"] if fs else 0,
                     fs_available_bytes=fs["available_bytes"] if fs else 0,
                     fs_used_percent=fs["used_percent"] if fs else 0.0, device=device)
        out.append(entry)
    return out


def balance_plan(config: StorageConfig, *, max_used_percent: float | None = None, max_dir_bytes: int | None = None,
                 max_moves: int | None = None, topics: Collection[str] | None = None) -> dict:
    """Which partitions to move so that no log dir stays above the threshold (see the module docstring).
    Exactly one of ``max_used_percent`` and ``max_dir_bytes`` is given. Read-only."""
    if (max_used_percent is None) == (max_dir_bytes is None):
        raise InvalidRequestError("give exactly one of max_used_percent and max_dir_bytes")
    if max_used_percent is not None and not (isinstance(max_used_percent, (int, float))
                                             and not isinstance(max_used_percent, bool)
                                             and 0 < max_used_percent <= 100):
        raise InvalidRequestError(f"max_used_percent must be a number in (0, 100], got {max_used_percent!r}")
    if max_dir_bytes is not None and (isinstance(max_dir_bytes, bool) or not isinstance(max_dir_bytes, int)
                                      or max_dir_bytes < 0):
        raise InvalidRequestError(f"max_dir_bytes must be an integer >= 0, got {max_dir_bytes!r}")
    if max_moves is not None and (isinstance(max_moves, bool) or not isinstance(max_moves, int) or max_moves < 1):
        raise InvalidRequestError(f"max_moves must be an integer >= 1, got {max_moves!r}")
    usage = log_dir_usage(config)
    online = [u for u in usage if u["status"] == "online"]
    by_percent = max_used_percent is not None

    def load(u: dict) -> float:
        return u["fs_used_bytes"] if by_percent else u["data_bytes"]

    def usable(u: dict) -> int:
        """The bytes a percentage is of, as df counts it: used + available."""
        return u["fs_used_bytes"] + u["fs_available_bytes"]

    def limit(u: dict) -> float:
        return max_used_percent / 100.0 * usable(u) if by_percent else max_dir_bytes  # type: ignore

    state = {u["log_dir"]: float(load(u)) for u in online}
    moving = {(f["topic"], f["partition"]) for u in online for f in u["moves_in"]}
    moves: list[dict] = []
    over = [u for u in online if state[u["log_dir"]] > limit(u)]
    for src in sorted(over, key=lambda u: state[u["log_dir"]] - limit(u), reverse=True):
        candidates = sorted((p for p in src["partitions"] if (p["topic"], p["partition"]) not in moving
                             and (not topics or p["topic"] in topics)),
                            key=lambda p: (-p["size_bytes"], p["topic"], p["partition"]))
        for part in candidates:
            if state[src["log_dir"]] <= limit(src) or (max_moves is not None and len(moves) >= max_moves):
                break
            targets = [u for u in online if u["log_dir"] != src["log_dir"]
                       and not (by_percent and u["device"] == src["device"])
                       and state[u["log_dir"]] + part["size_bytes"] <= limit(u)]
            if not targets:
                continue
            target = min(targets, key=lambda u: (state[u["log_dir"]] / max(limit(u), 1), u["log_dir"]))
            moves.append({"topic": part["topic"], "partition": part["partition"], "from_dir": src["log_dir"],
                          "to_dir": target["log_dir"], "size_bytes": part["size_bytes"]})
            state[src["log_dir"]] -= part["size_bytes"]
            state[target["log_dir"]] += part["size_bytes"]
    dirs = [{"log_dir": u["log_dir"], "status": u["status"],
             "usage": (u.get("fs_used_percent") if by_percent else u.get("data_bytes")),
             "limit": (max_used_percent if by_percent else max_dir_bytes),
             "over": u in over, "usage_after": (round(100.0 * state[u["log_dir"]] / usable(u), 3)
                                                if by_percent and u.get("fs_total_bytes") and usable(u) else
                                                state.get(u["log_dir"])),
             "moves_in_progress": len(u.get("moves_in", [])), "error": u.get("error")} for u in usage]
    unresolved = [d["log_dir"] for d in dirs if d["status"] == "online" and d["over"]
                  and (d["usage_after"] or 0) > (d["limit"] or 0)]
    return {"measure": "fs_used_percent" if by_percent else "data_bytes", "dirs": dirs, "moves": moves,
            "still_over": unresolved, "in_progress": sorted(f"{t}-{p}" for t, p in moving),
            "offline_dirs": {u["log_dir"]: u["error"] for u in usage if u["status"] == "offline"},
            "nothing_to_do": not moves}


def remove_folder(config: StorageConfig, log_dir: str, name: str, *, dry_run: bool = False) -> dict:
    """Remove a folder of a log dir that is no partition: a ``-stray`` folder, a folder whose name is not a
    partition's, a ``-delete`` folder before its delay. The explicit command for what ``describe`` and ``verify``
    report under ``strays``/``foreign``; refuses partitions and copies being made for moves."""
    dirs = {os.path.abspath(d): d for d in config.log_dirs}
    if os.path.abspath(log_dir) not in dirs:
        raise InvalidRequestError(f"{log_dir!r} is not one of the log dirs {list(config.log_dirs)}")
    log_dir = dirs[os.path.abspath(log_dir)]
    if not isinstance(name, str) or not name or name in (".", "..") or os.sep in name or "\0" in name \
            or (os.altsep and os.altsep in name):
        raise InvalidRequestError(f"folder name must be one name inside the log dir, got {name!r}")
    listing = layout.scan_log_dir(log_dir)
    kinds = {**{n: "stray" for n in listing.strays}, **{n: "foreign" for n, _ in listing.foreign},
             **{n: "deleted" for n in listing.deleting}}
    if name not in kinds:
        if any(n == name for n, _ in listing.partitions):
            raise InvalidRequestError(f"{name} in {log_dir} is a partition: delete it with delete-topic")
        if any(n == name for n, _ in listing.futures):
            raise InvalidRequestError(f"{name} in {log_dir} is a copy being made for a move: give it up with "
                                      "move-partition --cancel")
        raise InvalidRequestError(f"{log_dir} has no stray or foreign folder named {name!r}")
    path = os.path.join(log_dir, name)
    size = _tree_bytes(path)
    if not dry_run:
        deletion.remove_tree(path)
    return {"log_dir": log_dir, "name": name, "kind": kinds[name], "bytes_freed": size, "dry_run": dry_run}
