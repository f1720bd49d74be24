"""The checks of a tiered torture trial (:mod:`torture.tiered`) after its one clean tier run, and the bucket
helpers they use: the log dir reopens; every acknowledged record is readable at its offset with its bytes, locally
or from the object store; both topics read contiguously and intact; the bucket holds exactly the objects of the
finished remote segments; ``verify`` reports nothing, nor does its remote half with ``--deep`` (every object
downloaded and checked)."""
from __future__ import annotations

import datetime
import json
import random
from pathlib import Path
from typing import Any

from include.seaweedfs import WeedServer
from storage_engine.config_file import load_config
from storage_engine.inspection.verify import verify_log_dirs
from storage_engine.inspection.verify_remote import verify_remote
from storage_engine.log.manager import LogManager
from torture.child import digest, payload, payload_ok
from torture.tiered_child import TIERED, TOPICS, RemoteRange, read_range

PREFILL_BYTES = 100 * 1024

def s3(weed: WeedServer) -> Any:
    import boto3
    return boto3.client("s3", endpoint_url=weed.endpoint_url, aws_access_key_id=weed.access_key,
                        aws_secret_access_key=weed.secret_key, region_name="us-east-1")


def list_bucket(weed: WeedServer, bucket: str) -> list[dict]:
    out: list[dict] = []
    for page in s3(weed).get_paginator("list_objects_v2").paginate(Bucket=bucket):
        out += page.get("Contents", [])
    return out


def drop_bucket(weed: WeedServer, bucket: str) -> None:
    try:
        client = s3(weed)
        keys = [o["Key"] for o in list_bucket(weed, bucket)]
        for i in range(0, len(keys), 1000):
            client.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": k} for k in keys[i:i + 1000]]})
        client.delete_bucket(Bucket=bucket)
    except Exception:  # noqa: BLE001 - a leftover bucket costs space, not correctness
        pass


def prefill(cfg_path: Path, rng: random.Random, acks: dict[str, list[tuple[int, str]]]) -> None:
    from storage_engine.record.records import SimpleRecord
    with LogManager.open(load_config(str(cfg_path))) as mgr:
        for topic in TOPICS:
            log = mgr.get_or_create_log(topic, 0)
            written = n = 0
            while written < PREFILL_BYTES:
                values = [payload("prefill", n + j, rng, 200) for j in range(20)]
                info = log.append_records([SimpleRecord(f"p{n + j}".encode(), v) for j, v in enumerate(values)])
                acks[topic] += [(info.first_offset + j, digest(v)) for j, v in enumerate(values)]
                written += sum(len(v) for v in values)
                n += 20



def first_tier_run(cfg_path: Path) -> str | None:
    """One tier run over the prefill before the processes start, so that every round of the consumers crosses
    the part that lives only in the object store from the first; the failure, if any."""
    from storage_engine.jobs import tiering
    result = tiering.tier(load_config(str(cfg_path)))
    if result["failures"] or result["errors"]:
        return f"the tier run over the prefill failed: {result['failures']} {result['errors']}"
    return None


def check(cfg_path: Path, acks: dict[str, list[tuple[int, str]]], weed: WeedServer, bucket: str,
          work: Path) -> tuple[list[str], int, int]:
    """One clean tier run, then the checks of the module docstring; returns (violations, records read from the
    object store, segments of ``tiered`` the looping tier job copied during the trial: its finished remote
    segments less those the clean run copied)."""
    from storage_engine.jobs import tiering
    config = load_config(str(cfg_path))
    out: list[str] = []
    clean_run_at = datetime.datetime.now(datetime.timezone.utc)
    try:
        result = tiering.tier(config)
        (work / "final-tier.json").write_text(json.dumps(result, indent=1, default=str))
    except Exception as exc:  # noqa: BLE001 - the clean run failing is the finding
        return [f"the clean tier run after the trial failed: {type(exc).__name__}: {exc}"], 0, 0
    if result["failures"] or result["errors"]:
        return [f"the clean tier run after the trial failed: {result['failures']} {result['errors']}"], 0, 0
    clean_copies = sum(p["copied_segments"] for p in result["partitions"] if p["topic"] == TIERED)
    loop_copies = 0
    remote_records = 0
    try:
        mgr = LogManager.open(config)
    except Exception as exc:  # noqa: BLE001
        return [f"reopening the log dir failed: {type(exc).__name__}: {exc}"], 0, 0
    try:
        rr = RemoteRange(config, mgr)
        for topic in TOPICS:
            log = mgr.get_log(topic, 0)
            if log is None:
                out.append(f"{topic}: the partition is gone, {len(acks.get(topic, []))} records were acknowledged")
                continue
            start, end = log.log_start_offset, log.log_end_offset
            try:
                records = list(read_range(rr, log, start, end))
            except Exception as exc:  # noqa: BLE001 - a failed read of a tracked segment is a loss
                out.append(f"{topic}: reading [{start}, {end}) failed: {type(exc).__name__}: {exc}")
                continue
            remote_records += sum(1 for remote, _, _ in records if remote)
            out += check_topic(topic, start, end, records, acks.get(topic, []))
        out += check_bucket(rr, weed, bucket, clean_run_at)
        loop_copies = len(rr.view.segments(TIERED, 0)) - clean_copies
    finally:
        mgr.close()
    for problem in verify_log_dirs(config)["problems"]:
        out.append(f"verify: {problem}")
    # verify's remote half, deep: every finished segment's objects downloaded and checked as a read checks them
    # (sizes, ETags, each batch's CRC and offsets), and no offset between the log start and the first local one
    # that no finished remote segment holds
    remote = verify_remote(config, deep=True)
    if not remote["checked"]:
        out.append(f"verify --deep (remote) did not check: {remote['error']}")
    for problem in remote["problems"]:
        out.append(f"verify --deep (remote): {problem}")
    if remote_records == 0 and not out:
        out.append("no record was read from the object store: the trial did not test tiered reads")
    return out, remote_records, loop_copies


def check_topic(topic: str, start: int, end: int, records: list[tuple[bool, int, bytes | None]],
                acked: list[tuple[int, str]]) -> list[str]:
    out = []
    offsets = [o for _, o, _ in records]
    if offsets != list(range(start, start + len(offsets))) or (offsets and offsets[-1] != end - 1) or \
            (not offsets and end > start):
        gaps = [(a, b) for a, b in zip(offsets, offsets[1:]) if b != a + 1][:3]
        out.append(f"{topic}: [{start}, {end}) read as {len(offsets)} records "
                   f"({offsets[:1]}..{offsets[-1:]}, gaps {gaps})")
    damaged = [(o, remote) for remote, o, v in records if not payload_ok(v)]
    if damaged:
        out.append(f"{topic}: {len(damaged)} value(s) that no writer wrote (damaged), e.g. (offset, remote) "
                   f"{damaged[:3]}")
    by_offset = {o: digest(v) for _, o, v in records if v is not None}
    remote = {o for r, o, _ in records if r}
    missing = [(o, d[:12], "remote" if o in remote else "local") for o, d in acked
               if o >= start and by_offset.get(o) != d]
    if missing:
        out.append(f"{topic}: {len(missing)} of {len(acked)} acknowledged records are missing or differ, e.g. "
                   f"{missing[:3]} (log start {start}, log end {end})")
    if topic == TIERED and start != 0:
        out.append(f"{topic}: log start offset {start}, but nothing may expire in this topic")
    return out


def check_bucket(rr: RemoteRange, weed: WeedServer, bucket: str, clean_run_at: datetime.datetime) -> list[str]:
    """No object the metadata does not track as a finished segment; every finished segment whole; no copy or
    delete left half done after the clean run."""
    from storage_engine.tiered import keys as remote_keys
    out = []
    view = rr.view
    view.refresh(rr.mgr)
    finished: dict[str, dict[str, str]] = {}
    for topic in TOPICS:
        for seg in view.segments(topic, 0):
            finished[str(seg.segment_id)] = remote_keys.segment_keys(rr.settings.key_prefix, seg.topic,
                                                                     seg.topic_id, seg.partition,
                                                                     seg.start_offset, seg.segment_id)
        unfinished = list(view.copy_started_unfinished(topic, 0)) + list(view.delete_started_unfinished(topic, 0))
        if unfinished:
            out.append(f"{topic}: {len(unfinished)} remote segment(s) left started but unfinished after the clean "
                       f"run, e.g. {unfinished[:2]}")
    objects = list_bucket(weed, bucket)
    listed = {o["Key"]: o["Size"] for o in objects}
    written = {o["Key"]: o["LastModified"] for o in objects}
    tracked = {key for parts in finished.values() for key in parts.values()}
    untracked = sorted(k for k in listed if k not in tracked)
    if untracked:
        out.append(f"{len(untracked)} object(s) in the bucket that no finished remote segment names, e.g. "
                   f"{[(k, written[k].isoformat()) for k in untracked[:3]]} (the clean run started at "
                   f"{clean_run_at.isoformat()})")
    absent = []
    for segment_id, parts in finished.items():
        for suffix, key in parts.items():
            if key not in listed and suffix in remote_keys.REQUIRED_SUFFIXES:
                absent.append(key)
    if absent:
        out.append(f"{len(absent)} object(s) of finished remote segments missing from the bucket, e.g. {absent[:3]}")
    return out
