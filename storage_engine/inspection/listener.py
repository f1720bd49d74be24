"""The Kafka-protocol listener (``serve``) as it last reported itself in the log dir, the consumer groups it
reported, with the lag of every partition of every topic they read as the files show the log (from the committed
offset, or from the log start where the group has committed none), and the history of that lag the listener keeps
(:mod:`storage_engine.server.groups.lag_history` writes it). Read-only."""
from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from storage_engine import layout
from storage_engine.config import StorageConfig
from storage_engine.errors import StorageError
from storage_engine.inspection.listing import list_partition_status

BROKER_STATUS_FILE = layout.ENGINE_PREFIX + "broker-status.json"   # written by ``serve`` every few seconds
LAG_HISTORY_FILE = layout.ENGINE_PREFIX + "lag-history.json"        # written by ``serve`` with its status
LAG_HISTORY_VERSION = 1
MAX_HISTORY_BYTES = 64 << 20


def listener_status(config: StorageConfig, now_ms: int | None = None) -> dict | None:
    """What the Kafka-protocol listener (``serve``) last wrote about itself: listeners, connections, request and
    record counts and rates; ``state`` is ``running``, ``stopped`` (a clean stop) or ``not responding`` (no update
    for three intervals: killed or hung). None when no listener ever ran on these log dirs."""
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


def group_topics(group: Mapping[str, Any]) -> set[str]:
    """The topics a group reads (a group of the listener's status): those it committed offsets on, those its members
    are assigned and those they subscribe to."""
    topics = set(group.get("offsets") or {})
    for member in group.get("members") or []:
        topics.update(member.get("assignment") or {})
        topics.update(member.get("subscription") or [])
    return topics


def consumer_groups(config: StorageConfig, listener: dict | None) -> list[dict]:
    """The consumer groups the listener last reported (state, members and their assignments, committed offsets),
    with the lag of every partition of every topic the group reads (:func:`group_topics`) as the files show it:
    ``partitions`` the committed ones (log end offset minus the committed offset), ``uncommitted`` the others (no
    commit: ``committed`` None and the lag from the log start, ``lag_from`` "log start"). ``lag`` sums the committed
    partitions' lag (what Kafka's tools call the group's lag), ``uncommitted_lag`` the others'."""
    groups = (listener or {}).get("groups") or []
    topics = set().union(*(group_topics(g) for g in groups)) if groups else set()
    known: dict[str, list[int]] = {}
    bounds: dict[tuple[str, int], tuple[int | None, int | None]] = {}
    if topics:
        page = list_partition_status(config, topics=topics, limit=1_000_000)
        for r in page["partitions"]:
            known.setdefault(r["topic"], []).append(r["partition"])
            bounds[(r["topic"], r["partition"])] = (r.get("log_start_offset"), r.get("log_end_offset"))
    out = []
    for g in groups:
        parts, uncommitted = [], []
        offsets = g.get("offsets", {})
        for topic, by_partition in sorted(offsets.items()):
            for p, committed in sorted(by_partition.items(), key=lambda kv: int(kv[0])):
                end = bounds.get((topic, int(p)), (None, None))[1]
                parts.append({"topic": topic, "partition": int(p), "committed": committed, "log_end_offset": end,
                              "lag": None if end is None else max(0, end - committed)})
        for topic in sorted(group_topics(g)):
            for p in sorted(known.get(topic, [])):
                if str(p) in (offsets.get(topic) or {}):
                    continue
                start, end = bounds[(topic, p)]
                uncommitted.append({"topic": topic, "partition": p, "committed": None, "log_start_offset": start,
                                    "log_end_offset": end, "lag_from": "log start",
                                    "lag": None if start is None or end is None else max(0, end - start)})
        out.append({**g, "partitions": parts, "uncommitted": uncommitted, "lag": sum(x["lag"] or 0 for x in parts),
                    "uncommitted_lag": sum(x["lag"] or 0 for x in uncommitted)})
    return out


def is_lag_sample(value: object) -> bool:
    return isinstance(value, dict) and isinstance(value.get("t"), int) and isinstance(value.get("groups"), dict)


def lag_history(config: StorageConfig, group_id: str) -> list[dict[str, Any]]:
    """The lag history of ``group_id`` the listener kept (:mod:`storage_engine.server.groups.lag_history`):
    ``[{"t": epoch ms, "lag": total, "partitions": {(topic, partition): lag}}]``, oldest first (the 5-minute samples,
    then the recent ones); empty when there is none or the file cannot be read."""
    from storage_engine.durable import read_regular_file
    if not config.log_dirs:
        return []
    try:
        data = json.loads(read_regular_file(os.path.join(config.log_dirs[0], LAG_HISTORY_FILE), MAX_HISTORY_BYTES))
    except (OSError, StorageError, ValueError):
        return []
    if not isinstance(data, dict) or data.get("version") != LAG_HISTORY_VERSION:
        return []
    recent = [s for s in data.get("recent") or [] if is_lag_sample(s)]
    first_recent = recent[0]["t"] if recent else None
    older = [s for s in data.get("older") or [] if is_lag_sample(s) and (first_recent is None or s["t"] < first_recent)]
    out = []
    for s in older + recent:
        g = s["groups"].get(group_id)
        if isinstance(g, dict):
            parts = {(str(r[0]), int(r[1])): int(r[2]) for r in g.get("partitions") or []
                     if isinstance(r, list) and len(r) >= 3}
            out.append({"t": s["t"], "lag": int(g.get("lag", 0)), "partitions": parts})
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
