"""What the tiering tests share: a store config pointing at a real ``weed``, filling a topic, running ``tier`` (in
process, or as the CLI in its own process, optionally killed at a crash step), and looking at the bucket and the
remote view behind the job's back."""
from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
from typing import Any

from include.seaweedfs import WeedServer
from storage_engine import crashpoints
from storage_engine.config_file import load_config
from storage_engine.log.manager import LogManager
from storage_engine.record.records import SimpleRecord
from storage_engine.segment.file_records import iter_batches
from storage_engine.tiered import metadata as md
from storage_engine.tiered.remote_log import RemoteLogView
from tests.paths import REPO
from tests.tiered.conftest import s3_client

TOPIC = "tiered"
T0 = 1_700_000_000_000
TIMEOUT_S = 120


def write_config(tmp_path: pathlib.Path, server: WeedServer, bucket: str, *, topic: str = TOPIC,
                 segment_bytes: int = 2048, prefix: str = "", secret: str | None = None,
                 endpoint: str | None = None, **topic_cfg: Any) -> str:
    """A store config with remote storage on (``topic_cfg``: topic keys with ``_`` for ``.``)."""
    keys = {"remote.storage.enable": True, "retention.ms": -1, "retention.bytes": -1}
    keys.update({k.replace("_", "."): v for k, v in topic_cfg.items()})
    topic_line = ", ".join(f"{k}: {json.dumps(v)}" for k, v in keys.items())
    path = tmp_path / "storage.yaml"
    path.write_text(
        "broker:\n"
        f"  log.dirs: [{tmp_path / 'logs'}]\n"
        f"  log.segment.bytes: {segment_bytes}\n"
        "  log.index.interval.bytes: 256\n"
        "  remote.log.storage.system.enable: true\n"
        f"  rsm.config.storage.s3.endpoint.url: {endpoint or server.endpoint_url}\n"
        f"  rsm.config.storage.s3.bucket.name: {bucket}\n"
        f"  rsm.config.storage.aws.access.key.id: {server.access_key}\n"
        f"  rsm.config.storage.aws.secret.access.key: {secret or server.secret_key}\n"
        f"  rsm.config.key.prefix: {json.dumps(prefix)}\n"
        "  rlmm.config.remote.log.metadata.topic.num.partitions: 3\n"
        f"topics:\n  {topic}: {{{topic_line}}}\n", encoding="utf-8")
    return str(path)


def fill(cfg: str, count: int, *, topic: str = TOPIC, partition: int = 0, first: int = 0,
         ts: int = T0) -> list[tuple[int, bytes]]:
    """Append ``count`` records (one batch each, timestamps ``ts + i``); returns (offset, value) of each."""
    out = []
    with LogManager.open(load_config(cfg)) as mgr:
        log = mgr.get_or_create_log(topic, partition)
        for i in range(first, first + count):
            value = f"record-{i:06d}-".encode() * 6
            info = log.append_records([SimpleRecord(None, value, ts + i)])
            out.append((info.first_offset, value))
        log.flush()
    return out


def env(**extra: str) -> dict[str, str]:
    out = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""), **extra)
    if crashpoints.ENV_VAR not in extra:
        out.pop(crashpoints.ENV_VAR, None)
    return out


def cli(cfg: str, *args: str, crash_at: str | None = None) -> subprocess.CompletedProcess[str]:
    extra = {crashpoints.ENV_VAR: crash_at} if crash_at else {}
    return subprocess.run([sys.executable, "-m", "storage_engine", "--config", cfg, *args], cwd=str(REPO),
                          env=env(**extra), capture_output=True, text=True, timeout=TIMEOUT_S)


def tier_cli(cfg: str, *args: str) -> dict:
    done = cli(cfg, "tier", *args)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def remote_segments(cfg: str, topic: str = TOPIC, partition: int = 0,
                    states: tuple[int, ...] | None = (md.COPY_SEGMENT_FINISHED,)) -> list[md.RemoteSegment]:
    """The remote view as a fresh process rebuilds it from ``__remote_log_metadata``."""
    with LogManager.open(load_config(cfg)) as mgr:
        view = RemoteLogView.load(mgr)
        return sorted(view.segments(topic, partition, states=states), key=lambda s: s.start_offset)


def bucket_objects(server: WeedServer, bucket: str) -> dict[str, int]:
    """{key: size} of every object in the bucket."""
    s3 = s3_client(server)
    out: dict[str, int] = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        out.update({o["Key"]: o["Size"] for o in page.get("Contents", [])})
    return out


def object_bytes(server: WeedServer, bucket: str, key: str) -> bytes:
    body: bytes = s3_client(server).get_object(Bucket=bucket, Key=key)["Body"].read()
    return body


def records_of(data: bytes) -> list[tuple[int, bytes | None]]:
    """(offset, value) of every record of a ``.log``'s bytes, every batch CRC-checked."""
    out: list[tuple[int, bytes | None]] = []
    for batch in iter_batches(data, strict=True):
        out.extend((r.offset, r.value) for r in batch)
    return out


def assert_every_object_tracked(cfg: str, server: WeedServer, bucket: str, topic: str = TOPIC,
                                partition: int = 0) -> list[md.RemoteSegment]:
    """No object the metadata does not name as a finished segment, no finished segment without its objects, and
    the finished segments contiguous. Returns the finished segments."""
    finished = remote_segments(cfg, topic, partition)
    unfinished = remote_segments(cfg, topic, partition,
                                 states=(md.COPY_SEGMENT_STARTED, md.DELETE_SEGMENT_STARTED))
    assert unfinished == [], f"states left open: {unfinished}"
    objects = bucket_objects(server, bucket)
    ids = {seg_id_text(s): s for s in finished}
    for key in objects:
        assert any(sid in key for sid in ids), f"untracked object {key}"
    for sid, seg in ids.items():
        mine = {k: size for k, size in objects.items() if sid in k}
        assert {k.rsplit(".", 1)[1] for k in mine} >= {"log", "index", "timeindex", "snapshot",
                                                         "leader-epoch-checkpoint"}, mine
        log_key = next(k for k in mine if k.endswith(".log"))
        assert mine[log_key] == seg.size_bytes
    for a, b in zip(finished, finished[1:]):
        assert b.start_offset == a.end_offset + 1, (a, b)
    return finished


def seg_id_text(seg: md.RemoteSegment) -> str:
    from storage_engine.log.topic_id import uuid_text
    return uuid_text(seg.segment_id)
