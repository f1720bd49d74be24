"""The ``tier`` process killed (SIGKILL through ``STORAGE_ENGINE_CRASH_AT``) at every step of its copy and of its
remote deletion, while another process keeps appending to the partition; then a second run. After it: no object
in the bucket that the metadata does not name as a finished segment, no state left open, the finished segments
contiguous, and every acknowledged record still readable, from the local log or byte for byte from its remote
``.log`` object (every batch CRC-checked)."""
from __future__ import annotations

import hashlib
import pathlib
import subprocess
import sys
import threading

import pytest

from storage_engine import crashpoints
from storage_engine.config_file import load_config
from storage_engine.jobs import tiering
from storage_engine.log.manager import LogManager
from tests.paths import REPO
from tests.tiered.tier_helpers import (TOPIC, assert_every_object_tracked, bucket_objects, cli, env, fill,
                                       object_bytes, records_of, seg_id_text, write_config)

pytestmark = [pytest.mark.tiered, pytest.mark.kills]

APPENDER = pathlib.Path(REPO) / "tests" / "storage_engine" / "procs" / "appender.py"
COPY_STEPS = ["tier.copy-started", "tier.uploaded-part", "tier.uploaded-part:4", "tier.verified",
              "tier.copy-finished"]
# each remote deletion step, reached by retention.bytes (the log start offset raised past the doomed segments) or
# by delete-records (the log start offset already past them)
DELETE_STEPS = [("tier.log-start-raised", "retention-bytes"), ("tier.delete-started", "delete-records"),
                ("tier.delete-started", "retention-bytes"), ("tier.objects-deleted", "retention-bytes")]


def test_the_crash_steps_are_the_tier_protocol():
    assert sorted({s.split(":")[0] for s in COPY_STEPS + [step for step, _ in DELETE_STEPS]}) == sorted(
        s for s, (protocol, _) in crashpoints.STEPS.items() if protocol == "tier")


class Appender:
    """The appender child (tests/storage_engine/procs/appender.py), its acknowledgements read as they come (a full
    pipe would stall it)."""

    def __init__(self, cfg: str) -> None:
        self.proc = subprocess.Popen([sys.executable, str(APPENDER), "--config", cfg, "--topic", TOPIC, "--tag", "w",
                                      "--appends", "300", "--records-per-append", "2", "--payload-bytes", "120",
                                      "--max-seconds", "60", "--pause-s", "0.01"],
                                     cwd=str(REPO), env=env(), stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None and self.proc.stdout.readline().strip() == "READY"
        self.lines: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)

    def stop(self) -> dict[int, str]:
        """Stop it; {offset: sha256 of the value} of every acknowledged record."""
        self.proc.terminate()
        self.proc.wait(timeout=60)
        self.reader.join(timeout=60)
        acked = {}
        for line in self.lines:
            if line.startswith("ACK "):
                _, offset, digest, _tag, _n = line.split()
                acked[int(offset)] = digest
        return acked


def _tier(cfg: str) -> dict:
    """The next run, in this process: the partition's figures."""
    result = tiering.tier(load_config(cfg))
    assert result["failures"] == [] and result["errors"] == [], result
    (part,) = result["partitions"]
    return part


def _readable(cfg: str, weed, bucket: str) -> tuple[int, dict[int, bytes | None]]:
    """(log start offset, every record from it: local ones from the log, the rest from the remote objects)."""
    finished = assert_every_object_tracked(cfg, weed, bucket)
    keys = bucket_objects(weed, bucket)
    found: dict[int, bytes | None] = {}
    for seg in finished:
        key = next(k for k in keys if seg_id_text(seg) in k and k.endswith(".log"))
        found.update(records_of(object_bytes(weed, bucket, key)))
    with LogManager.open(load_config(cfg)) as mgr:
        log = mgr.get_log(TOPIC, 0)
        assert log is not None
        start = log.log_start_offset
        local_start = max(start, log.segments[0].base_offset)
        assert not finished or finished[0].start_offset <= max(start, local_start)
        assert not finished or finished[-1].end_offset + 1 >= local_start, "a gap between remote and local"
        found.update((r.offset, r.value) for r in log.read_records(local_start))
    return start, {o: v for o, v in found.items() if o >= start}


def _check(cfg: str, weed, bucket: str, acked: dict[int, str], fixed: list[tuple[int, bytes]]) -> None:
    start, found = _readable(cfg, weed, bucket)
    for offset, value in fixed:
        if offset >= start:
            assert found.get(offset) == value, offset
    for offset, digest in acked.items():
        if offset >= start:
            got = found.get(offset)
            assert got is not None and hashlib.sha256(got).hexdigest() == digest, offset


@pytest.mark.parametrize("step", COPY_STEPS)
def test_a_copy_killed_at_each_step_leaves_nothing_untracked(tmp_path, weed, bucket, step):
    cfg = write_config(tmp_path, weed, bucket, segment_bytes=4096, local_retention_bytes=8192)
    fixed = fill(cfg, 200)
    appender = Appender(cfg)
    try:
        died = cli(cfg, "tier", crash_at=step)
        assert died.returncode == -9 and f"CRASHPOINT {step.split(':')[0]}" in died.stderr, died.stderr
        result = _tier(cfg)
        if step != "tier.copy-finished":
            assert result["orphan_segments"] == 1, result
    finally:
        acked = appender.stop()
    assert acked, "the appender acknowledged records during the run"
    _tier(cfg)      # the records appended meanwhile are sealed by now or stay local
    _check(cfg, weed, bucket, acked, fixed)


@pytest.mark.parametrize(("step", "cause"), DELETE_STEPS)
def test_a_remote_deletion_killed_at_each_step_is_finished_by_the_next_run(tmp_path, weed, bucket, step, cause):
    cfg = write_config(tmp_path, weed, bucket, segment_bytes=4096, local_retention_bytes=8192)
    fixed = fill(cfg, 200)
    copied = _tier(cfg)
    assert copied["copied_segments"] >= 5
    if cause == "delete-records":
        cut = fixed[60][0]
        with LogManager.open(load_config(cfg)) as mgr:
            log = mgr.get_log(TOPIC, 0)
            assert log is not None and log.delete_records(cut) == cut
            mgr.checkpoint([log.log_dir])
    else:   # keep about half of what is there: the oldest remote segments go
        cut = 1
        write_config(tmp_path, weed, bucket, segment_bytes=4096, local_retention_bytes=8192,
                     retention_bytes=(copied["remote_bytes"] + 8192) // 2)
    appender = Appender(cfg)
    try:
        died = cli(cfg, "tier", crash_at=step)
        assert died.returncode == -9 and f"CRASHPOINT {step}" in died.stderr, died.stderr
        _tier(cfg)
    finally:
        acked = appender.stop()
    start, _found = _readable(cfg, weed, bucket)
    assert start >= cut
    remaining = assert_every_object_tracked(cfg, weed, bucket)
    assert all(s.end_offset >= start for s in remaining)
    assert not remaining or remaining[0].start_offset <= start
    if cause == "delete-records":
        assert remaining, "the remote segments above the new log start offset stay"
    _check(cfg, weed, bucket, acked, fixed)


# (the log start offset of a topic no longer tiered is its first local offset as soon as it is loaded: nothing to raise)
@pytest.mark.parametrize("step", ["tier.delete-started", "tier.delete-started:2", "tier.objects-deleted"])
def test_a_partition_delete_killed_midway_is_finished_by_the_next_run(tmp_path, weed, bucket, step):
    cfg = write_config(tmp_path, weed, bucket, segment_bytes=4096, local_retention_bytes=8192)
    fixed = fill(cfg, 120)
    first = _tier(cfg)
    assert first["copied_segments"] >= 3 and first["local_segments_deleted"] >= 1
    write_config(tmp_path, weed, bucket, segment_bytes=4096, remote_storage_enable=False,
                 remote_log_delete_on_disable=True)
    died = cli(cfg, "tier", crash_at=step)
    assert died.returncode == -9 and f"CRASHPOINT {step.split(':')[0]}" in died.stderr, died.stderr
    assert _tier(cfg)["remote_partition_deleted"] is True
    assert bucket_objects(weed, bucket) == {}
    assert assert_every_object_tracked(cfg, weed, bucket) == []
    with LogManager.open(load_config(cfg)) as mgr:
        log = mgr.get_log(TOPIC, 0)
        assert log is not None
        assert log.log_start_offset == log.local_log_start_offset
        kept = [(r.offset, r.value) for r in log.read_records(log.log_start_offset)]
    assert kept == [r for r in fixed if r[0] >= log.log_start_offset]
