"""The Kafka-protocol listener (``serve``) as it last reported itself in the log dir, and the consumer groups it
reported, each committed partition with its lag as the files show the log end. Read-only."""
from __future__ import annotations

import os

from storage_engine import layout
from storage_engine.config import StorageConfig
from storage_engine.errors import StorageError
from storage_engine.inspection.listing import list_partition_status

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
