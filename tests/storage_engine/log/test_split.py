"""Legacy segments whose offsets overflow their base are split on load (Kafka's LogLoaderTest
testRecoveryOfSegmentWithOffsetOverflow and testRecoveryAfterCrashDuringSplitPhase1..5).

The segments are written with kafka-python's legacy builder (``LegacyRecordBatchBuilder``, magic 0 and 1), as an
0.10 broker's compaction could leave them: one segment holding offsets more than 2^31 - 1 above its base. A crash
at each step of the split is a real child process killed by SIGKILL at that step.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
from kafka.record.legacy_records import LegacyRecordBatchBuilder

from storage_engine import layout
from storage_engine.clock import ManualClock
from storage_engine.config_file import config_from_mapping
from storage_engine.log.manager import LogManager
from storage_engine.inspection.verify import verify_log_dirs
from tests.paths import REPO
from tests.storage_engine.kernels import child_processes_once

pytestmark = pytest.mark.unit
T0 = 1_700_000_000_000
INT_MAX = 2**31 - 1
PROCS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "procs")


def legacy_messages(offsets, magic: int) -> bytes:
    """One uncompressed legacy message per offset, each built by kafka-python (key = value = the offset)."""
    out = b""
    for offset in offsets:
        builder = LegacyRecordBatchBuilder(magic=magic, compression_type=0, batch_size=1 << 20)
        data = str(offset).encode()
        builder.append(offset, timestamp=T0 + offset % 1000 if magic else None, key=data, value=data)
        out += bytes(builder.build())
    return out


def sample(base: int) -> list[int]:
    """LogTestUtils.writeSampleBatches: base, base+1, base+2, base+Int.MAX-1."""
    return [base, base + 1, base + 2, base + INT_MAX - 1]


def write_overflowed_log(folder: str, magic: int) -> list[int]:
    """LogTestUtils.initializeLogDirWithOverflowedSegment: three segments, the middle one holding offsets that
    do not fit its base; empty index files so that a clean load would not recover them. Returns every offset."""
    os.makedirs(folder, exist_ok=True)
    segments = {0: sample(0)}
    second = INT_MAX
    segments[second] = sample(second) + sample(second + INT_MAX)
    third = second + 2 * INT_MAX
    segments[third] = sample(third)
    for base, offsets in segments.items():
        with open(layout.segment_file(folder, base, layout.LOG_SUFFIX), "wb") as f:
            f.write(legacy_messages(offsets, magic))
        for suffix in (layout.INDEX_SUFFIX, layout.TIME_INDEX_SUFFIX):
            open(layout.segment_file(folder, base, suffix), "wb").close()
    return [o for offsets in segments.values() for o in offsets]


def _config(tmp_path):
    # Compacted, as the topics whose segments overflow are (KAFKA-6264: the cleaner's output of old versions);
    # the offset gaps of the test data would be damage in a delete-policy topic.
    return config_from_mapping({"broker": {"log.dirs": str(tmp_path / "logs"), "log.cleanup.policy": "compact"}})


def _check_split(cfg, offsets, log_dir):
    with LogManager.open(cfg, clock=ManualClock(T0)) as mgr:
        log = mgr.get_log("t", 0)
        assert log is not None
        records = list(log.read_records())
        assert [r.offset for r in records] == offsets
        assert [r.key for r in records] == [str(o).encode() for o in offsets]
        for seg in log.segments:
            for batch in seg.batches(0):
                assert 0 <= batch.last_offset - seg.base_offset <= INT_MAX, (seg.base_offset, batch.last_offset)
        # Lookups through the rebuilt indexes land on the right record.
        for o in offsets:
            assert next(log.read_records(o, 1)).offset == o
        names = os.listdir(log.dir)
        assert not [n for n in names if n.endswith((".cleaned", ".swap"))], names
        bases = [s.base_offset for s in log.segments]
        messages = mgr.dirs[log_dir].load_messages
    report = verify_log_dirs(cfg)
    assert not report["damaged"], report["problems"]
    return bases, messages


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("clean", [False, True], ids=["after-a-crash", "after-a-clean-shutdown"])
def test_a_segment_with_offset_overflow_is_split_on_load(tmp_path, magic, clean):
    cfg = _config(tmp_path)
    log_dir = cfg.log_dirs[0]
    folder = os.path.join(log_dir, "t-0")
    offsets = write_overflowed_log(folder, magic)
    if clean:
        with open(os.path.join(log_dir, layout.CLEAN_SHUTDOWN_FILE), "w") as f:
            f.write('{"version":0,"brokerEpoch":-1}')
    original = open(layout.segment_file(folder, INT_MAX, layout.LOG_SUFFIX), "rb").read()
    bases, messages = _check_split(cfg, offsets, log_dir)
    # The overflowed segment became two: the old base, and the base of the first batch that did not fit.
    assert bases == [0, INT_MAX, 2 * INT_MAX + 1, 3 * INT_MAX]
    split_bytes = b"".join(open(layout.segment_file(folder, b, layout.LOG_SUFFIX), "rb").read()
                           for b in (INT_MAX, 2 * INT_MAX + 1))
    assert split_bytes == original, "the same messages, byte for byte"
    assert any("overflow its base" in m for m in messages), messages
    # Loading again changes nothing.
    assert _check_split(cfg, offsets, log_dir)[0] == bases


def test_split_output_parses_with_kafka_python(tmp_path):
    cfg = _config(tmp_path)
    folder = os.path.join(cfg.log_dirs[0], "t-0")
    offsets = write_overflowed_log(folder, 1)
    _check_split(cfg, offsets, cfg.log_dirs[0])
    from kafka.record.memory_records import MemoryRecords
    seen = []
    for name in sorted(n for n in os.listdir(folder) if n.endswith(".log")):
        records = MemoryRecords(open(os.path.join(folder, name), "rb").read())
        while records.has_next():
            batch = records.next_batch()
            seen += [r.offset for r in batch]
    assert seen == offsets


def _split_in_child(cfg_path: str, stop_at: int) -> int:
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, os.path.join(PROCS, "open_dirs.py"), "--config", cfg_path,
                           "--stop-at", str(stop_at)], env=env, cwd=str(REPO), capture_output=True, timeout=120)
    assert proc.returncode in (0, -signal.SIGKILL), proc.stderr.decode()[-3000:]
    return proc.returncode


@pytest.mark.kills
@child_processes_once
def test_a_crash_at_every_step_of_a_split_loads_to_the_same_records(tmp_path):
    """testRecoveryAfterCrashDuringSplitPhase1..5, with a real process killed at each rename and fsync."""
    step = 0
    while True:
        step += 1
        base = tmp_path / f"step{step}"
        cfg_path = base / "storage.yaml"
        base.mkdir()
        cfg_path.write_text(f"broker:\n  log.dirs: [{base / 'logs'}]\n  log.cleanup.policy: compact\n")
        cfg = config_from_mapping({"broker": {"log.dirs": str(base / "logs"), "log.cleanup.policy": "compact"}})
        offsets = write_overflowed_log(os.path.join(cfg.log_dirs[0], "t-0"), 1)
        rc = _split_in_child(str(cfg_path), step)
        bases, _ = _check_split(cfg, offsets, cfg.log_dirs[0])
        assert bases == [0, INT_MAX, 2 * INT_MAX + 1, 3 * INT_MAX]
        if rc == 0:
            break
    assert step > 6, f"only {step - 1} steps were seen"
