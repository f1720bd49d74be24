"""Kill -9 torture trials: real processes on one log dir, killed at random moments and at every named step of the
engine's protocols; then a reopen, ``verify``, and a check of every acknowledged record.

A trial (:func:`run_trial`):

1. a fresh log dir (16 KiB segments, small index interval; topics ``plain`` (delete policy, nothing expires),
   ``keyed`` (compacted, every segment cleanable), ``retained`` (delete policy, ``retention.bytes`` 64 KiB)),
   filled as the swap-crash reproduction is: 500 unique keys, then 2,500 records over 300 keys, and as many
   records in the two other topics, so the cleaner and retention have work from the first second;
2. four processes (:mod:`torture.child`): a writer appending to the three topics, a cleaner compacting in a loop,
   a maintenance loop (retention, checkpoint with flush, flush, purge) and a reader, so maintenance always runs
   while other processes hold the partitions open;
3. kills: with a forced step (most trials) one role runs with ``STORAGE_ENGINE_CRASH_AT=<step>`` and dies there
   (a ``resolve.*`` step: the cleaner dies mid-swap and the next process to resolve it dies mid-resolution;
   ``load.*``: after the trial an opener dies inside the full load); plus 1-3 ``kill -9`` of random roles at
   random moments; every killed role is restarted;
4. the end: all processes killed (half the trials) or stopped cleanly (the last one writes the clean-shutdown
   marker);
5. the checks, in this process: the log dirs reopen (the full load of a first opener); every acknowledged
   record of ``plain`` is there with its offset and value; the latest acknowledged value of every key of
   ``keyed`` is the latest value of that key in the log (or an unacknowledged later append of the key is); in
   ``retained`` every acknowledged record from the log start offset on is there, offsets are contiguous, and
   retention never kept less than ``retention.bytes``; every value read is an intact payload; ``verify``
   reports no damage; no process failed (a traceback, a SIGBUS, a reader's BAD line) other than by our kills.

A violation is printed, and the trial's log dir, configuration and process outputs are kept under
``--keep`` for inspection.
"""
from __future__ import annotations

import dataclasses
import io
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, Callable

from storage_engine import crashpoints
from storage_engine.config_file import load_config
from storage_engine.log.log import Log
from storage_engine.log.manager import LogManager
from storage_engine.inspection.verify import verify_log_dirs
from torture.child import KEYED, PLAIN, RETAINED, TOPICS, digest, payload_ok

REPO = Path(__file__).resolve().parent.parent
ROLES = ("writer", "cleaner", "maintenance", "reader")
SEGMENT_BYTES = 16 * 1024
RETENTION_BYTES = 64 * 1024
KEYS = 300

CONFIG = f"""broker:
  log.dirs: [logs]
  log.segment.bytes: {SEGMENT_BYTES}
  log.index.interval.bytes: 1024
  log.segment.delete.delay.ms: 300
  log.cleaner.dedupe.buffer.size: 4194304
topics:
  {PLAIN}: {{cleanup.policy: delete, retention.ms: -1, retention.bytes: -1}}
  {KEYED}: {{cleanup.policy: compact, min.cleanable.dirty.ratio: 0.01, retention.ms: -1}}
  {RETAINED}: {{cleanup.policy: delete, retention.ms: -1, retention.bytes: {RETENTION_BYTES}}}
"""

# Which role runs each protocol step (the one that dies there when the step is forced).
STEP_ROLES = {
    "roll": ("writer",), "append": ("writer",), "flush": ("maintenance",), "swap": ("cleaner",),
    "retention": ("maintenance",), "checkpoint": ("maintenance", "cleaner"), "purge": ("maintenance",),
    "truncate": ("maintenance", "reader", "cleaner", "writer"),
    "resolve": ("maintenance", "reader", "cleaner", "writer"), "load": ("opener",),
}
ENGINE_STEPS = sorted(name for name, (protocol, _) in crashpoints.STEPS.items() if protocol in STEP_ROLES)
# Steps only reached after another process died at an earlier one: (role that dies first, its steps).
SETUP = {
    "resolve": ("cleaner", ("swap.swap-ready", "swap.old-partial", "swap.old-deleted", "swap.index-final",
                            "swap.log-final")),
    "truncate": ("writer", ("append.torn",)),
}
FORCED_STEP_TIMEOUT_S = 20.0


@dataclasses.dataclass
class TrialResult:
    trial: int
    seed: int
    step: str | None
    kills: Counter
    steps_reached: list
    acked: int
    violations: list
    seconds: float
    kept: str | None = None


class Child:
    """A role process whose stdout lines are collected by a thread as they arrive."""

    def __init__(self, role: str, workdir: Path, args: list[str], env: dict, n: int, *,
                 module: str = "torture.child"):
        self.role = role
        self.stderr_path = workdir / f"{n:02d}-{role}.stderr"
        self._stderr = open(self.stderr_path, "wb")
        self.proc = subprocess.Popen([sys.executable, "-m", module, role, *args], cwd=str(REPO), env=env,
                                     stdout=subprocess.PIPE, stderr=self._stderr)
        self.lines: list[str] = []
        self.killed = False
        self._collected = False         # its exit was checked (_collect_exit)
        self._pump = threading.Thread(target=self._read, daemon=True)
        self._pump.start()

    def _read(self) -> None:
        buf = b""
        stdout = self.proc.stdout
        assert isinstance(stdout, io.BufferedReader), "started with stdout=PIPE"
        while True:
            chunk = stdout.read1(65536)
            if not chunk:
                break
            buf += chunk
            *complete, buf = buf.split(b"\n")
            self.lines.extend(c.decode(errors="replace") for c in complete)
        # A line cut by SIGKILL has no newline: never acknowledged, dropped.

    def kill9(self) -> None:
        if self.proc.poll() is None:
            self.killed = True
            os.kill(self.proc.pid, signal.SIGKILL)

    def wait(self, timeout: float) -> int | None:
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None
        self._pump.join(10)
        if not self._stderr.closed:
            self._stderr.close()
        return rc

    def stderr(self) -> str:
        if not self._stderr.closed:
            self._stderr.flush()
        return self.stderr_path.read_text(errors="replace")

    def crash_step(self) -> str | None:
        for line in self.stderr().splitlines():
            if line.startswith("CRASHPOINT "):
                return line.split()[1]
        return None


def pick_step(rng: random.Random) -> str | None:
    """A forced step for 80% of the trials: every step these processes reach equally likely (the topic changes'
    steps are the broker's: ``python -m torture --server`` kills at those); else random kills only."""
    if rng.random() < 0.2:
        return None
    return rng.choice(ENGINE_STEPS)


def run_trial(trial: int, seed: int, keep_root: Path | None, *, seconds: float | None = None,
              step: str | None = "random", soak: bool = False, threads: int = 0) -> TrialResult:
    rng = random.Random(seed)
    if step == "random":
        step = pick_step(rng)
    duration = seconds if seconds is not None else rng.uniform(1.5, 3.5)
    work = Path(tempfile.mkdtemp(prefix=f"torture-{trial}-"))
    cfg_path = work / "storage.yaml"
    cfg_path.write_text(CONFIG, encoding="utf-8")
    stop_file = work / "stop"
    base_env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
                    PYTHONFAULTHANDLER="1")
    base_env.pop(crashpoints.ENV_VAR, None)
    protocol = crashpoints.STEPS[step][0] if step else None
    forced_role = rng.choice(STEP_ROLES[protocol]) if protocol is not None else None
    t0 = time.monotonic()
    children: list[Child] = []
    kills: Counter = Counter()
    violations: list[str] = []
    serial = 0

    setup = SETUP.get(protocol) if protocol is not None else None
    setup_role, setup_step = (setup[0], rng.choice(setup[1])) if setup is not None else (None, None)

    def nth(name: str) -> str:
        # appends happen hundreds of times a second: die at a later one, once the other processes run
        return f"{name}:{rng.randint(20, 300)}" if name.startswith("append.") else f"{name}:{rng.randint(1, 2)}"

    def env_for(role: str, first: bool) -> dict:
        env = dict(base_env)
        if step is None or protocol == "load":
            return env
        if setup_step is not None:
            # e.g. the first cleaner dies mid-swap; then whoever resolves that swap dies mid-resolution
            env[crashpoints.ENV_VAR] = nth(setup_step) if role == setup_role and first else step
        elif role == forced_role and first:
            env[crashpoints.ENV_VAR] = nth(step)
        return env

    def reached_forced() -> bool:
        return any(c.crash_step() == step for c in children)

    def start(role: str, first: bool) -> Child:
        nonlocal serial
        serial += 1
        args = ["--config", str(cfg_path), "--stop-file", str(stop_file), "--seconds", str(duration + 30),
                "--seed", str(rng.randrange(2**31)), "--tag", f"{role[0]}{serial}", "--keys", str(KEYS),
                "--pause-s", "0.002" if role == "writer" else "0.02"]
        if role == "writer" and threads:
            args += ["--threads", str(threads)]
        child = Child(role, work, args, env_for(role, first), serial)
        children.append(child)
        return child

    acks = _prefill(cfg_path, rng)
    live = {"writer": start("writer", True)}
    _wait_ready(live["writer"])
    for role in ROLES[1:]:
        live[role] = start(role, True)
    started = time.monotonic()
    kill_times = sorted(rng.uniform(0.3, duration) for _ in range(0 if soak else rng.randint(1, 3)))
    if soak:
        kill_times = [t for t in (rng.uniform(5, 25) * k for k in range(1, 1000)) if t < duration]
    deadline = started + duration
    if step is not None and protocol != "load":
        # run until the step is reached (then a little longer, so other processes meet its aftermath)
        deadline = started + FORCED_STEP_TIMEOUT_S
        checked, extended = 0.0, False
    while time.monotonic() < deadline:
        now = time.monotonic() - started
        if step is not None and protocol != "load" and now - checked > 0.1:
            checked = now
            if not extended and reached_forced():
                extended = True
                deadline = time.monotonic() + rng.uniform(0.3, 2.0)
        if kill_times and now >= kill_times[0]:
            kill_times.pop(0)
            role = rng.choice(ROLES)
            live[role].kill9()
            kills[role] += 1
        for role, child in list(live.items()):
            if child.proc.poll() is not None:  # killed by us, died at its step, or failed
                _collect_exit(child, violations)
                # a forced role killed at random before its step comes back armed again, so whether the step is
                # reached does not depend on how fast the machine runs the processes
                rearm = setup_step is None and role == forced_role and not reached_forced()
                live[role] = start(role, rearm)
        time.sleep(0.01)
    if (rng.random() < 0.5 or protocol == "load") and not soak:
        for child in live.values():
            if child.proc.poll() is None:
                child.kill9()
                kills["all at the end"] += 1
    else:
        stop_file.write_text("stop")
    for child in live.values():
        if child.wait(60) is None:
            violations.append(f"{child.role} did not stop within 60 s after the trial ended")
            child.kill9()
            child.wait(10)
        _collect_exit(child, violations)
    for child in children:
        child.wait(10)
    reached = [s for s in (c.crash_step() for c in children) if s]
    for child in children:
        if child.crash_step():
            kills[child.role] += 1
    if protocol == "load":
        opener = Child("opener", work, ["--config", str(cfg_path), "--stop-file", str(stop_file)],
                       dict(base_env, **{crashpoints.ENV_VAR: step}), 99)
        opener.wait(120)
        opener_step = opener.crash_step()
        if opener_step:
            reached.append(opener_step)
            kills["opener"] += 1
    for topic, items in _acks(children).items():
        acks[topic] += items
    violations += _check(cfg_path, acks)
    result = TrialResult(trial, seed, step, kills, reached, sum(len(v) for v in acks.values()), violations,
                         round(time.monotonic() - t0, 2))
    if (violations or os.environ.get("TORTURE_KEEP_ALL")) and keep_root is not None:
        dest = keep_root / f"trial-{trial}-seed-{seed}"
        shutil.copytree(work, dest, dirs_exist_ok=True)
        (dest / "violations.json").write_text(json.dumps(
            {"trial": trial, "seed": seed, "step": step, "kills": dict(kills), "steps_reached": reached,
             "violations": violations}, indent=2))
        result.kept = str(dest)
    shutil.rmtree(work, ignore_errors=True)
    return result


def _prefill(cfg_path: Path, rng: random.Random) -> dict[str, list]:
    """The swap-crash reproduction's fill: 500 unique keys, then 2,500 records over 300 keys (and as many records in the
    other topics); returns their acknowledgements."""
    from storage_engine.record.records import SimpleRecord
    from torture.child import payload
    acks: dict[str, list] = defaultdict(list)
    keys = [f"u{i}" for i in range(500)] + [f"k{rng.randrange(KEYS)}" for _ in range(2500)]
    with LogManager.open(load_config(str(cfg_path))) as mgr:
        for topic in TOPICS:
            log = mgr.get_or_create_log(topic, 0)
            for start in range(0, len(keys), 50):
                chunk = keys[start:start + 50] if topic == KEYED else [f"p{start + j}" for j in range(50)]
                values = [payload("prefill", start + j, rng, 40) for j in range(len(chunk))]
                info = log.append_records([SimpleRecord(k.encode(), v) for k, v in zip(chunk, values)])
                acks[topic] += [(info.first_offset + j, k if topic == KEYED else "-", digest(v))
                                for j, (k, v) in enumerate(zip(chunk, values))]
    return acks


def _wait_ready(child: Child, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while "READY" not in child.lines and child.proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)


def _collect_exit(child: Child, violations: list[str]) -> None:
    if child._collected:
        return
    rc = child.wait(60)
    child._collected = True
    if rc is None:
        violations.append(f"{child.role} (pid {child.proc.pid}) did not exit")
        return
    if child.killed or child.crash_step():
        return
    if rc != 0:
        what = f"signal {signal.Signals(-rc).name}" if rc < 0 else f"exit code {rc}"
        violations.append(f"{child.role} (pid {child.proc.pid}) failed with {what}: {child.stderr()[-3000:]}")
    for line in child.lines:
        if line.startswith("BAD "):
            violations.append(f"{child.role} (pid {child.proc.pid}) read {line}")


def _acks(children: list[Child]) -> dict[str, list[tuple[int, str, str]]]:
    acks: dict[str, list] = defaultdict(list)
    for child in children:
        if child.role != "writer":
            continue
        for line in child.lines:
            if line.startswith("ACK "):
                _, topic, offset, key, dig = line.split()
                acks[topic].append((int(offset), key, dig))
    return acks


def _check(cfg_path: Path, acks: dict) -> list[str]:
    """Reopen (a first opener's full load), read every topic, check every acknowledged record, verify."""
    violations = []
    config = load_config(str(cfg_path))
    try:
        mgr = LogManager.open(config)
    except Exception as exc:  # noqa: BLE001 - any failure to reopen is the finding
        return [f"reopening the log dirs failed: {type(exc).__name__}: {exc}"]
    try:
        for topic in TOPICS:
            log = mgr.get_log(topic, 0)
            if log is None:
                if acks.get(topic):
                    violations.append(f"{topic}: the partition is gone, {len(acks[topic])} records were acknowledged")
                continue
            try:
                records = [(r.offset, r.key, r.value) for r in log.read_records(log.log_start_offset)]
            except Exception as exc:  # noqa: BLE001
                violations.append(f"{topic}: reading failed: {type(exc).__name__}: {exc}")
                continue
            violations += _check_topic(topic, log, records, acks.get(topic, []))
    finally:
        mgr.close()
    report = verify_log_dirs(config)
    for problem in report["problems"]:
        violations.append(f"verify: {problem}")
    return violations


def _check_topic(topic: str, log: Log, records: list[tuple[int, bytes | None, bytes | None]],
                 acked: list[tuple[int, Any, str]]) -> list[str]:
    out = []
    offsets = [o for o, _, _ in records]
    if offsets != sorted(set(offsets)):
        out.append(f"{topic}: offsets do not strictly rise")
    for o, _, v in records:
        if not payload_ok(v):
            out.append(f"{topic}: damaged value at offset {o}")
            break
    if topic == KEYED:
        latest_acked: dict[str, tuple[int, str]] = {}
        for o, k, d in acked:
            if k not in latest_acked or o > latest_acked[k][0]:
                latest_acked[k] = (o, d)
        latest_in_log = {}
        for o, k, v in records:
            if k is not None and v is not None:     # valueless: damage reported above; keyless: holds no key's value
                latest_in_log[k.decode()] = (o, digest(v))
        lost = []
        for k, (o, d) in latest_acked.items():
            found = latest_in_log.get(k)
            if found is None or found[0] < o or (found[0] == o and found[1] != d):
                lost.append((k, o, found))
        if lost:
            out.append(f"{topic}: {len(lost)} of {len(latest_acked)} keys lost their latest acknowledged value, "
                       f"e.g. {lost[:3]} (log start {log.log_start_offset}, segments "
                       f"{[s.base_offset for s in log.segments][:8]})")
        return out
    by_offset = {o: digest(v) for o, _, v in records if v is not None}   # a valueless one: reported above
    start = log.log_start_offset
    missing = [(o, d) for o, _, d in acked if o >= start and by_offset.get(o) != d]
    if missing:
        out.append(f"{topic}: {len(missing)} of {len(acked)} acknowledged records are missing or differ, e.g. "
                   f"{missing[:3]} (log start {start}, log end {log.log_end_offset})")
    if topic == PLAIN and start != 0:
        out.append(f"{topic}: log start offset {start}, but nothing may expire in this topic")
    if offsets and offsets != list(range(offsets[0], offsets[0] + len(offsets))):
        out.append(f"{topic}: offsets are not contiguous in a delete-policy topic")
    if topic == RETAINED and start > 0 and log.size_in_bytes() < RETENTION_BYTES:
        out.append(f"{topic}: retention kept {log.size_in_bytes()} bytes, less than retention.bytes "
                   f"{RETENTION_BYTES} (log start {start})")
    return out


def run(trials: int, seed: int, keep_root: Path | None, *, out: Callable[[str], object] = print, soak_seconds: float | None = None,
        threads: int = 0) -> dict:
    """Run ``trials`` trials (or one soak of ``soak_seconds``); returns the totals. ``threads``: the writer
    process runs that many writer threads, with reader, cleaner and maintenance threads, on one manager."""
    started = time.monotonic()
    totals: dict[str, Any] = {"trials": 0, "violations": 0, "failed_trials": [], "kills": Counter(), "steps_forced": Counter(),
              "steps_reached": Counter(), "acknowledged": 0}
    rng = random.Random(seed)
    count = 1 if soak_seconds else trials
    for trial in range(count):
        trial_seed = rng.randrange(2**31)
        if soak_seconds:
            res = run_trial(trial, trial_seed, keep_root, seconds=soak_seconds, step=None, soak=True,
                            threads=threads)
        else:
            res = run_trial(trial, trial_seed, keep_root, threads=threads)
        totals["trials"] += 1
        totals["kills"].update(res.kills)
        totals["acknowledged"] += res.acked
        if res.step:
            totals["steps_forced"][res.step] += 1
        totals["steps_reached"].update(res.steps_reached)
        if res.violations:
            totals["violations"] += len(res.violations)
            totals["failed_trials"].append({"trial": trial, "seed": trial_seed, "step": res.step,
                                            "violations": res.violations, "kept": res.kept})
            out(f"trial {trial} (seed {trial_seed}, step {res.step}): {len(res.violations)} violation(s), kept "
                f"in {res.kept}")
            for v in res.violations:
                out(f"    {v[:2000]}")
        elif (trial + 1) % 25 == 0 or soak_seconds:
            out(f"trial {trial + 1}/{count}: ok ({res.acked} acknowledged, {sum(res.kills.values())} kills, "
                f"{res.seconds} s)")
    totals["seconds"] = round(time.monotonic() - started, 1)
    return totals
