"""The demo's sample-data generator (include/sample_data.py), end to end into temporary log dirs.

A small config (16 KiB segments) and scale 0.05 keep it to a few seconds while every partition still rolls
several segments. Records are read back through the engine.
"""
from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import yaml

from include import sample_data
from storage_engine.clock import ManualClock
from storage_engine.jobs import housekeeping as maintenance
from storage_engine.config_file import load_config
from storage_engine.log.manager import LogManager

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parent.parent
NOW_MS = 1_795_305_600_000            # 2026-11-22T00:00:00Z
DAY_MS = 86_400_000
SCALE = 0.05
EXPECTED = {(t.name, p) for t in sample_data.TOPICS for p in range(t.partitions)}


def write_config(root: Path) -> Path:
    """The demo's topics with 16 KiB segments, log dirs under ``root``."""
    default = yaml.safe_load((REPO / "include" / "config" / "storage.yaml").read_text())
    topics = {name: {**overrides, "segment.bytes": 16384} for name, overrides in default["topics"].items()}
    cfg = {"broker": {"log.dirs": [str(root / "dir-a"), str(root / "dir-b")], "log.segment.bytes": 16384},
           "topics": topics}
    root.mkdir(parents=True, exist_ok=True)
    path = root / "storage.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def read_all(config) -> dict:
    """(topic, partition) -> [Record] through the engine."""
    with LogManager.open(config, clock=ManualClock(NOW_MS)) as mgr:
        return {tp: list(log.read_records()) for tp, log in mgr.logs.items()}


def segment_bytes(config) -> dict:
    """(partition folder, file name) -> bytes of every .log file."""
    out = {}
    for d in config.log_dirs:
        for part in sorted(os.listdir(d)):
            pdir = os.path.join(d, part)
            if os.path.isdir(pdir):
                for f in sorted(os.listdir(pdir)):
                    if f.endswith(".log"):
                        out[(part, f)] = Path(pdir, f).read_bytes()
    return out


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    root = tmp_path_factory.mktemp("sample")
    config = load_config(write_config(root))
    summary = sample_data.generate(config, seed=7, now_ms=NOW_MS, scale=SCALE)
    return config, summary, read_all(config)


def test_every_topic_and_partition_exists_across_both_log_dirs(generated):
    config, summary, records = generated
    assert set(records) == EXPECTED
    assert {(r["topic"], r["partition"]) for r in summary["partitions"]} == EXPECTED
    # New partitions go to the log dir with the fewest partitions: both dirs are used, evenly.
    counts = Counter(r["log_dir"] for r in summary["partitions"])
    assert set(counts) == set(config.log_dirs) and max(counts.values()) - min(counts.values()) <= 1
    for r in summary["partitions"]:
        assert r["records"] == len(records[(r["topic"], r["partition"])]) == r["log_end_offset"] > 0
        assert r["log_start_offset"] == 0


def test_every_partition_rolled_several_segments(generated):
    config, summary, _ = generated
    for r in summary["partitions"]:
        assert r["segments"] >= 3, r
        assert r["size_bytes"] > 2 * 16384, r
    logs = segment_bytes(config)
    assert len(logs) == summary["totals"]["segments"]


def test_user_emails_keys_are_skewed_and_some_are_deleted(generated):
    _, _, records = generated
    recs = [r for (t, _), rs in records.items() if t == "user-emails" for r in rs]
    assert all(r.key is not None for r in recs)
    versions = Counter(r.key for r in recs)
    counts = sorted(versions.values(), reverse=True)
    median = counts[len(counts) // 2]
    assert counts[0] >= 20 and counts[0] >= 10 * median, counts[:10]
    assert sum(1 for c in counts if c > 1) >= 0.3 * len(counts)
    assert len(versions) >= 200
    tombstones = [r for r in recs if r.value is None]
    assert 0.01 * len(recs) <= len(tombstones) <= 0.1 * len(recs)
    # A tombstone deletes a user that had a value before it, in the same partition.
    for (t, _), rs in records.items():
        if t != "user-emails":
            continue
        seen = set()
        for r in rs:
            if r.value is None:
                assert r.key in seen
            seen.add(r.key)
    # Keyed records are partitioned like Kafka's default partitioner.
    for (t, p), rs in records.items():
        if t == "user-emails":
            assert all(sample_data.partition_for_key(r.key, 3) == p for r in rs)


def test_access_log_is_keyless_or_session_keyed_and_sessions_have_tombstones(generated):
    _, _, records = generated
    access = [r for (t, _), rs in records.items() if t == "access-log" for r in rs]
    keyless = sum(1 for r in access if r.key is None)
    assert 0.2 * len(access) < keyless < 0.6 * len(access)
    assert all(r.key.startswith(b"sess-") for r in access if r.key is not None)
    assert all(b'"GET ' in r.value or b'"POST ' in r.value or b'"PUT ' in r.value for r in access)
    assert all(dict(r.headers).get("trace-id") for r in access)
    sessions = [r for (t, _), rs in records.items() if t == "user-sessions" for r in rs]
    assert any(r.value is None for r in sessions)
    assert max(Counter(r.key for r in sessions).values()) >= 3


def test_timestamps_span_the_week_before_now_in_order(generated):
    config, _, records = generated
    for (topic, p), rs in records.items():
        ts = [r.timestamp for r in rs]
        assert ts == sorted(ts), f"{topic}-{p}: timestamps go backwards"
        assert NOW_MS - 7 * DAY_MS <= ts[0] and ts[-1] < NOW_MS
        assert ts[-1] - ts[0] >= 6 * DAY_MS, f"{topic}-{p} spans only {(ts[-1] - ts[0]) / DAY_MS:.1f} days"
    # So retention as of now has expired segments to delete, for the delete policies only.
    plans = maintenance.retention_all(config, NOW_MS, dry_run=True)
    deleted: Counter[str] = Counter()
    for plan in plans:
        deleted[plan["topic"]] += plan["segments_deleted"]
    assert deleted["access-log"] >= 3 and deleted["user-sessions"] >= 1 and deleted["user-emails"] == 0


def test_same_seed_gives_identical_logs_and_another_seed_does_not(generated, tmp_path):
    config, summary, _ = generated
    again = load_config(write_config(tmp_path / "again"))
    sample_data.generate(again, seed=7, now_ms=NOW_MS, scale=SCALE)
    first, second = segment_bytes(config), segment_bytes(again)
    assert first.keys() == second.keys()
    assert all(first[k] == second[k] for k in first), "same seed, different segment bytes"
    other = load_config(write_config(tmp_path / "other"))
    sample_data.generate(other, seed=8, now_ms=NOW_MS, scale=SCALE)
    assert segment_bytes(other) != first


def test_existing_data_is_refused_unless_reset(tmp_path):
    path = write_config(tmp_path)
    config = load_config(path)
    sample_data.generate(config, seed=1, now_ms=NOW_MS, scale=0.01)
    with pytest.raises(FileExistsError, match="already hold data"):
        sample_data.generate(config, seed=1, now_ms=NOW_MS, scale=0.01)
    summary = sample_data.generate(config, seed=2, now_ms=NOW_MS, scale=0.01, reset=True)
    assert {(r["topic"], r["partition"]) for r in summary["partitions"]} == EXPECTED
    assert all(r["log_start_offset"] == 0 for r in summary["partitions"])
    assert len(read_all(config)) == len(EXPECTED)


def test_reset_removes_exactly_the_files_layout_names(tmp_path):
    """After a reset no partition may still be marked uncleanable or claimed, whatever version wrote the marks;
    files the engine does not own are left alone."""
    from storage_engine import layout
    from storage_engine.log.locks import CleaningClaim
    from storage_engine.maintenance import cleaner_manager
    config = load_config(write_config(tmp_path))
    sample_data.generate(config, seed=1, now_ms=NOW_MS, scale=0.01)
    d = Path(config.log_dirs[0])
    name = sorted(n for n in os.listdir(d) if (d / n).is_dir())[0]
    cleaner_manager.mark_uncleanable(str(d), name, "CorruptRecordError: test", NOW_MS)
    claim = CleaningClaim(str(d), name)
    assert claim.try_acquire()
    claim.release()
    for legacy in (".uncleanable-partitions.json", f".cleaning.{name}", f".lock.{name}", ".create.lock"):
        (d / legacy).write_bytes(b"{}")
    (d / "operator-notes.txt").write_text("keep me")
    (d / "lost+found").mkdir()
    (d / layout.REMOTE_LOG_INDEX_CACHE_DIR / "ab").mkdir(parents=True)     # cached bytes of the deleted logs' objects
    (d / layout.REMOTE_LOG_INDEX_CACHE_DIR / "ab" / "chunk").write_bytes(b"cached")
    engine_files = {n for n in os.listdir(d) if (d / n).is_file() and n != "operator-notes.txt"}
    assert {layout.UNCLEANABLE_FILE, os.path.basename(claim.path), layout.RECOVERY_POINT_CHECKPOINT} <= engine_files
    assert all(layout.is_engine_file(n) or layout.is_legacy_engine_file(n) for n in engine_files), engine_files

    sample_data.generate(config, seed=2, now_ms=NOW_MS, scale=0.01, reset=True)
    assert cleaner_manager.read_uncleanable(str(d)) == {}
    sample_data.reset_log_dirs(config)
    assert sorted(os.listdir(d)) == ["lost+found", "operator-notes.txt"]


def test_command_line(tmp_path):
    path = write_config(tmp_path)
    cmd = [sys.executable, "-m", "include.sample_data", "--config", str(path), "--seed", "3",
           "--now-ms", str(NOW_MS), "--scale", "0.01"]
    first = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr
    assert "user-emails-0" in first.stdout and "total" in first.stdout
    refused = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert refused.returncode == 1 and "already hold data" in refused.stderr and "--reset" in refused.stderr
    kept = subprocess.run(cmd + ["--skip-existing"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert kept.returncode == 0 and "keeping them" in kept.stderr
    reset = subprocess.run(cmd + ["--reset", "--json"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert reset.returncode == 0, reset.stderr
    import json
    assert json.loads(reset.stdout)["totals"]["segments"] >= len(EXPECTED)


def test_murmur2_matches_kafka():
    kafka_partitioner = pytest.importorskip("kafka.partitioner.default")
    for key in (b"", b"a", b"ab", b"abc", b"user-00042", b"sess-0123456789ab", bytes(range(200))):
        assert sample_data.murmur2(key) & 0xFFFFFFFF == kafka_partitioner.murmur2(key) & 0xFFFFFFFF, key
