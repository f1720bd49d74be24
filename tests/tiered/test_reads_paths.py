"""Every read path outside the broker reads a partition whose first segments are only in the object store (a real
SeaweedFS) exactly as it read the same partition before they were tiered: the CLI's ``consume`` (both isolation
levels), the engine's whole-log ``read_records``, the Storage view's message browser (from an offset, from a
timestamp, read_committed) and the Spark segment source (its rows, read without launching Spark as its tasks read
them). A remote object damaged behind the store's back ends the browser's page with an error naming it."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from storage_engine.clock import ManualClock
from storage_engine.config_file import load_config
from storage_engine.inspection import browse
from storage_engine.log.manager import LogManager
from storage_engine.record import codecs
from storage_engine.record.records import SimpleRecord
from storage_engine.tiered import whole_log
from tests.tiered.conftest import s3_client
from tests.tiered.tiering import tier_partition

pytestmark = [pytest.mark.tiered]

ROOT = Path(__file__).resolve().parents[2]
TOPIC = "tiered"
PID = 5000
T0 = 1_700_000_000_000


def _write_config(tmp_path: Path, weed, bucket) -> Path:
    path = tmp_path / "storage.yaml"
    path.write_text(yaml.safe_dump({
        "broker": {"log.dirs": [str(tmp_path / "logs")], "remote.log.storage.system.enable": True,
                   "rsm.config.storage.s3.endpoint.url": weed.endpoint_url,
                   "rsm.config.storage.s3.bucket.name": bucket,
                   "rsm.config.storage.aws.access.key.id": weed.access_key,
                   "rsm.config.storage.aws.secret.access.key": weed.secret_key},
        "topics": {TOPIC: {"segment.bytes": 4096, "index.interval.bytes": 300, "remote.storage.enable": True,
                           "retention.ms": -1,
                           "local.retention.bytes": 4096}}}))
    return path


def _fill(log) -> None:
    seq = 0
    for i in range(300):
        recs = [SimpleRecord(b"k%d" % ((i + j) % 9), b"v-%d-%d-" % (i, j) + b"y" * (i % 30), T0 + 10 * i)
                for j in range(1 + i % 4)]
        if i in (40, 41, 42, 120, 121):          # an aborted transaction, then a committed one
            log.append_records(recs, producer_id=PID, producer_epoch=0, base_sequence=seq, is_transactional=True)
            seq += len(recs)
            if i in (42, 121):
                log.append_end_txn(PID, 0, commit=(i == 121))
        else:
            log.append_records(recs, codec=codecs.ZSTD if i % 4 == 0 else codecs.NONE)


def _consume(config_path: Path, *args: str) -> list[dict]:
    proc = subprocess.run([sys.executable, "-m", "storage_engine", "--config", str(config_path), "consume",
                           "--topic", TOPIC, "--partition", "0", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines()]


def _pages(config) -> dict[str, Any]:
    out = {}
    asks: dict[str, dict[str, Any]] = {"from-0": {"offset": 0, "limit": 200}, "from-31": {"offset": 31, "limit": 50},
                                       "committed": {"offset": 0, "limit": 300, "isolation": "read_committed"},
                                       "timestamp": {"timestamp_ms": T0 + 10 * 95, "limit": 20}}
    for name, kw in asks.items():
        page = browse.browse(config, TOPIC, 0, **kw)
        out[name] = {k: page[k] for k in ("records", "next_offset", "error", "log_start_offset", "start_offset")}
    return out


def _spark_rows(pdir: str, config_path: Path | None) -> list[tuple]:
    from spark_jobs.segment_source import SegmentReader
    options = {"path": pdir} | ({"storageConfig": str(config_path)} if config_path else {})
    reader = SegmentReader(options)
    rows: list[tuple] = []
    for part in reader.partitions():
        for arrow in reader.read(part):
            table = arrow.to_pydict()
            rows.extend(zip(table["offset"], table["timestamp"], table["key"], table["value_size"]))
    return sorted(rows)


@pytest.fixture(scope="module")
def before_and_after(tmp_path_factory, weed):
    """What each path read before and after the partition's first segments were tiered and deleted locally."""
    tmp = tmp_path_factory.mktemp("paths")
    bucket = f"paths-{os.getpid()}"
    s3_client(weed).create_bucket(Bucket=bucket)
    config_path = _write_config(tmp, weed, bucket)
    config = load_config(config_path)
    with LogManager.open(config, clock=ManualClock(T0)) as mgr:
        log = mgr.get_or_create_log(TOPIC, 0)
        _fill(log)
        timestamps = {ts: log.offset_for_timestamp(ts) for ts in (T0 - 5, T0 + 10 * 95, T0 + 10 * 95 + 3,
                                                                  T0 + 10 * 299, T0 + 10 * 400)}
    pdir = str(tmp / "logs" / f"{TOPIC}-0")
    before = {"uncommitted": _consume(config_path, "--from-offset", "0"),
              "committed": _consume(config_path, "--isolation-level", "read_committed"),
              "pages": _pages(config), "spark": _spark_rows(pdir, None), "timestamps": timestamps}
    local_start = tier_partition(config, TOPIC, 0)
    assert local_start > 200, local_start          # most of the partition is remote only now
    after = {"uncommitted": _consume(config_path, "--from-offset", "0"),
             "committed": _consume(config_path, "--isolation-level", "read_committed"),
             "pages": _pages(config), "spark": _spark_rows(pdir, config_path)}
    return before, after, config, config_path, bucket, local_start


def test_the_cli_consume_reads_the_remote_part(before_and_after):
    before, after, *_ = before_and_after
    assert after["uncommitted"] == before["uncommitted"] and len(before["uncommitted"]) > 500
    assert after["committed"] == before["committed"]
    assert len(after["committed"]) < len(after["uncommitted"])      # the aborted transaction is left out


def test_whole_log_reads_equal_the_local_reads_before(before_and_after):
    before, _, config, _, _, local_start = before_and_after
    with LogManager.open(config, read_only=True) as mgr:
        log = mgr.get_log(TOPIC, 0)
        assert log is not None and log.local_log_start_offset == local_start
        reader = whole_log.open_reader(config, mgr)
        for start, count in ((0, None), (17, 40), (local_start - 3, 10)):
            got = [(r.offset, r.value) for r in whole_log.read_records(log, reader, TOPIC, 0, start, count,
                                                                      "read_uncommitted")]
            want = [(r["offset"], r["value"].encode()) for r in before["uncommitted"] if r["offset"] >= start]
            assert got == want[:count], start
        for ts, found in before["timestamps"].items():
            assert whole_log.offset_for_timestamp(log, reader, TOPIC, 0, ts) == found, ts
        assert before["timestamps"][T0 + 10 * 95][1] < local_start      # found in the remote part


def test_the_message_browser_pages_equal_the_local_ones(before_and_after):
    before, after, *_ = before_and_after
    assert after["pages"] == before["pages"]
    assert after["pages"]["from-0"]["records"][0]["offset"] == 0


def test_the_spark_source_reads_the_remote_segments(before_and_after):
    before, after, *_ = before_and_after
    assert after["spark"] == before["spark"] and len(before["spark"]) > 500


def test_a_damaged_remote_object_ends_the_browser_page_with_its_name(before_and_after, weed, tmp_path):
    _, _, config, _, bucket, _ = before_and_after
    s3 = s3_client(weed)
    logs = sorted(o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"] if o["Key"].endswith(".log"))
    raw = bytearray(s3.get_object(Bucket=bucket, Key=logs[0])["Body"].read())
    raw[len(raw) // 2] ^= 0x01
    s3.put_object(Bucket=bucket, Key=logs[0], Body=bytes(raw))
    cache = config.log_dirs[0] + "/remote-log-index-cache"      # the page must read the object, not the cache
    for name in os.listdir(cache):
        os.remove(os.path.join(cache, name))
    page = browse.browse(config, TOPIC, 0, offset=0, limit=200)
    assert page["error"] is not None and page["error"]["path"] == logs[0]
    assert "damaged (offsets 0 to" in page["error"]["message"]
    assert all(r["offset"] < 200 for r in page["records"])
