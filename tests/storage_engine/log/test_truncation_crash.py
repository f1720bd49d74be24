"""A truncation by rewrite (storage_engine.log.rewrite) killed at every step (real SIGKILL through
``STORAGE_ENGINE_CRASH_AT``) while a second process holds the log dir open; then maintenance from a third process
(``flush``, ``checkpoint --flush``: each opens a view, and the first to sync resolves the dead truncation), then a
restart (a full load).

Also killed at the steps that keep the dir's checkpoint entries (``truncation.*``): before the first rename, once the
recovery-point entry is lowered (the log is whole), and after the truncation completed, before and between the
checkpoint files' writes.

The outcome is exact: killed before the new ``.log`` became ``.swap`` the truncation is rolled back (the segment
it cut is whole again; the segments above it, deleted before the rewrite began, stay deleted), from then on it is
completed (the log ends at the cut). Either way every record below that end is there with its value, ``verify``
finds nothing (right after the kill too: no checkpoint entry is past the log end), no loss is recorded, no
temporary file is left and appends go on from the end."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from storage_engine import crashpoints, layout
from storage_engine.config_file import load_config
from storage_engine.inspection.verify import verify_log_dirs
from storage_engine.log import intent
from storage_engine.log.manager import LogManager
from storage_engine.record.records import SimpleRecord
from storage_engine.segment.checkpoint import OffsetCheckpointFile
from tests.paths import REPO
from tests.storage_engine.kernels import split_by_process_fixture
from tests.storage_engine.log.test_swap_crash import Holder, cli, env

pytestmark = pytest.mark.slow

kernels = split_by_process_fixture()     # once: the work is in child processes

TOPIC = "plain"
TIMEOUT_S = 120
REWRITE_STEPS = [s for s, (protocol, _) in crashpoints.STEPS.items() if protocol == "rewrite"]
ROLLED_BACK = ("rewrite.copied", "rewrite.intent")      # the new .log never became .swap
# The dir's checkpoint entries: lowered before the first rename (nothing renamed yet: the log is whole), written
# after the truncation completed (published: done).
CHECKPOINT_STEPS = [s for s, (protocol, _) in crashpoints.STEPS.items() if protocol == "truncation"]
UNTOUCHED = ("truncation.checkpoint-lowered",)
CUT = 403           # inside the batch 400-404 of a sealed segment: the log ends at 400 once truncated

# argv: config, topic, offset, "to" (truncate_to) or "start-at" (truncate_fully_and_start_at)
TRUNCATE = """
import sys
from storage_engine.config_file import load_config
from storage_engine.log.manager import LogManager
with LogManager.open(load_config(sys.argv[1]), partitions=[(sys.argv[2], 0)]) as mgr:
    log = mgr.get_log(sys.argv[2], 0)
    if sys.argv[4] == "to":
        assert log.truncate_to(int(sys.argv[3]))
    else:
        log.truncate_fully_and_start_at(int(sys.argv[3]))
"""


def outcome(step: str, kind: str, base: int, segment_end: int) -> tuple[int, int]:
    """(log start, log end) once the truncation killed at ``step`` is resolved. Killed before any rename, a full
    truncation has published its new log start offset (the segments below it go at the next retention)."""
    start = 0 if kind == "to" else base
    if step in UNTOUCHED:
        return start, 600
    return start, segment_end if step in ROLLED_BACK else 400 if kind == "to" else base


def checkpoint_entries(log_dir: str) -> list[int]:
    """The partition's entries in the dir's recovery-point and log-start-offset checkpoints."""
    found = []
    for name in (layout.RECOVERY_POINT_CHECKPOINT, layout.LOG_START_OFFSET_CHECKPOINT):
        entry = OffsetCheckpointFile(os.path.join(log_dir, name)).read().get((TOPIC, 0))
        found += [entry] if entry is not None else []
    return found


def write_config(tmp_path) -> str:
    path = tmp_path / "storage.yaml"
    path.write_text("broker:\n  log.dirs: [logs]\n  log.segment.bytes: 4096\n  log.index.interval.bytes: 256\n"
                    f"topics:\n  {TOPIC}: {{cleanup.policy: delete, retention.ms: -1}}\n", encoding="utf-8")
    return str(path)


def value(i: int) -> bytes:
    return f"value-{i}-".encode() + b"x" * (i % 37)


def fill(cfg: str) -> tuple[int, int]:
    """600 records in batches of 5; returns (the base of the segment holding CUT, the base of the next one)."""
    with LogManager.open(load_config(cfg)) as mgr:
        log = mgr.get_or_create_log(TOPIC, 0)
        for start in range(0, 600, 5):
            log.append_records([SimpleRecord(f"k{i}".encode(), value(i)) for i in range(start, start + 5)])
        bases = [s.base_offset for s in log.segments]
    i = max(n for n, b in enumerate(bases) if b <= CUT)
    assert 0 < i < len(bases) - 1 and bases[i] < 400, bases
    return bases[i], bases[i + 1]


# Every step with the holder killed, for both truncations; with the holder closing cleanly (the last user trims and
# checkpoints from its own view) a step of each outcome: rolled back, completed from .swap, completed from final names.
CASES = ([pytest.param(step, "to", True, id=f"truncate-to-holder-killed-{step}") for step in REWRITE_STEPS]
         + [pytest.param(step, "start-at", True, id=f"start-at-holder-killed-{step}") for step in REWRITE_STEPS]
         + [pytest.param(step, "to", False, id=f"truncate-to-holder-closes-{step}")
            for step in ("rewrite.intent", "rewrite.old-deleted", "rewrite.done")]
         + [pytest.param(step, kind, True, id=f"{name}-holder-killed-{step}") for step in CHECKPOINT_STEPS
            for kind, name in (("to", "truncate-to"), ("start-at", "start-at"))
            # (between the two files' writes a full truncation is the same as before them: no log start entry here)
            if kind == "to" or step != "truncation.recovery-point-checkpointed"])


@pytest.mark.parametrize(("step", "kind", "kill_holder"), CASES)
def test_a_truncation_killed_at_each_step_of_its_rewrite_is_rolled_back_or_completed_exactly(tmp_path, step, kind,
                                                                                              kill_holder):
    """``truncate_to(403)`` cuts the segment holding 403 at the batch 400-404 (the later segments go first);
    ``truncate_fully_and_start_at(base)`` of that segment's base empties it (the others go first)."""
    cfg = write_config(tmp_path)
    base, segment_end = fill(cfg)
    log_dir = load_config(cfg).log_dirs[0]
    folder = os.path.join(log_dir, layout.partition_dir_name(TOPIC, 0))
    holder = Holder(cfg, clean=not kill_holder)
    try:
        res = subprocess.run([sys.executable, "-c", TRUNCATE, cfg, TOPIC, str(CUT if kind == "to" else base), kind],
                             cwd=str(REPO),
                             env=env(**{crashpoints.ENV_VAR: step}), capture_output=True, text=True, timeout=TIMEOUT_S)
        assert res.returncode == -signal.SIGKILL, (res.returncode, res.stderr)
        assert f"CRASHPOINT {step}" in res.stderr
        recorded = intent.exists(log_dir, f"{TOPIC}-0")
        assert recorded == (step in REWRITE_STEPS and step != "rewrite.copied"), \
            "the rewrite is recorded before its first rename, not sooner, and cleared once done"
        if step == "rewrite.copied":
            assert os.path.exists(layout.segment_file(folder, base, layout.LOG_SUFFIX, layout.CLEANED_SUFFIX))
        start, end = outcome(step, kind, base, segment_end)
        if kill_holder:    # a read-only open plans the resolution without applying it
            out = cli(cfg, "verify")
            report = json.loads(out.stdout)
            plan = " ".join(p["message"] for p in report["pending"])
            if kind == "to":
                assert ("rolled back the rewrite of segment" in plan) == (step == "rewrite.intent"), plan
                assert ("completed the rewrite of segment" in plan) == (step in REWRITE_STEPS
                                                                        and step not in ROLLED_BACK), plan
                assert report["partitions"][0]["log_end_offset"] == end
            # The dir's checkpoint entries, lowered before the first rename, are at or below the log end whatever
            # step the truncation died at: verify finds nothing, before any checkpoint run.
            assert out.returncode == 0 and report["problems"] == [], report["problems"]
            leo = report["partitions"][0]["log_end_offset"]
            assert all(entry <= leo for entry in checkpoint_entries(log_dir)), (checkpoint_entries(log_dir), leo)
            assert intent.exists(log_dir, f"{TOPIC}-0") == recorded
        for args in (["flush"], ["checkpoint", "--flush"]):
            out = cli(cfg, *args)
            assert out.returncode == 0, out.stderr
        assert not intent.exists(log_dir, f"{TOPIC}-0"), "the first view to sync resolved the dead truncation"
        out = cli(cfg, "verify")
        assert out.returncode == 0, out.stdout
        holder.stop(kill=kill_holder)
    finally:
        holder.close()

    with LogManager.open(load_config(cfg)) as mgr:     # a restart: the first opener's full load
        log = mgr.get_log(TOPIC, 0)
        assert log is not None
        found = [(r.offset, r.value) for r in log.read_records(log.log_start_offset)]
        assert found == [(i, value(i)) for i in range(start, end)], (step, len(found), end)
        assert log.log_start_offset == start and log.log_end_offset == end
        assert (log.active_segment.base_offset == base) == (step not in UNTOUCHED)
        log.append_records([SimpleRecord(b"after", b"the-crash")])
        assert [(r.offset, r.value) for r in log.read_records(end)] == [(end, b"the-crash")]
    if kind == "start-at":      # the segments below the new log start offset go at the next retention
        assert cli(cfg, "retention").returncode == 0
        with LogManager.open(load_config(cfg)) as mgr:
            log = mgr.get_log(TOPIC, 0)
            assert log is not None and log.segments[0].base_offset == base
            assert (len(log.segments) == 1) == (step not in UNTOUCHED)
    names = os.listdir(folder)
    assert not [n for n in names if n.endswith((layout.CLEANED_SUFFIX, layout.SWAP_SUFFIX))], names
    assert not any(n.startswith(".engine+loss+") for n in os.listdir(log_dir))
    report = verify_log_dirs(load_config(cfg))
    assert not report["damaged"], report["problems"]
