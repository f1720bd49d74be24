"""Kill -9 torture of tiered storage (``python -m torture --tiered``): the tier job, the appender, the ``serve``
broker and the object store killed while records are appended, tiered, expired locally and read back from offset
0, through the engine and through the broker by a Kafka client.

One SeaweedFS (``weed server -s3``, :class:`include.seaweedfs.WeedServer`) serves every trial of a run, each
trial in a bucket of its own. A trial (:func:`run_trial`):

1. a fresh log dir (16 KiB segments, index entries every 1 KiB) with two tiered topics
   (``remote.storage.enable``, ``local.retention.bytes`` 32 KiB, so every sealed segment is deleted locally once
   its remote copy is finished): ``tiered`` (nothing ever expires: every acknowledged record must stay readable,
   locally or remotely) and ``tiered-retained`` (``retention.bytes`` 256 KiB over local and remote, so remote
   retention deletes objects and raises the log start offset); both prefilled with ~100 KiB, then tiered by one
   run in the harness, so every read from offset 0 crosses the remote part from the first round;
2. five processes (:mod:`torture.tiered_child`): the **appender** (a long-lived manager appending acknowledged
   records, as a broker's produce does), the **tier** job in a loop (copy, local retention, remote retention,
   orphans: ``storage_engine.jobs.tiering.tier``, a whole job per run as the CLI and the DAG run it; a run the
   object store fails is retried) and a **consumer** reading both topics from their log start over and over, the
   offsets below the local log start from the object store, checking what it reads; the **broker**
   (:mod:`torture.tiered_broker`: ``serve`` on the trial's log dir and tiered config, its own port) and a **Kafka
   client** (:mod:`torture.tiered_kafka`: librdkafka reading both topics from offset 0 through the broker, round
   after round, checking offsets, values and out-of-range answers itself);
3. deaths: in most trials a **forced step** (:mod:`storage_engine.crashpoints`): the tier process armed to die at
   a step of the copy, expiry or orphan protocols (or of the local retention and checkpoint writes it makes), or
   the appender at a step of an append or a roll; a forced role killed at random before its step comes back armed
   again; a trial runs 1.5-4 s, longer until its forced step is reached (at most 12 s) and until the looping tier
   job finished a run and the Kafka client read remote records through the broker (at most 30 s); plus 1-3
   ``kill -9`` at random moments of one of (:data:`KILLABLE`): the broker (restarted on its port after 0-1 s; a third of its
   kills followed by a second one soon after the restart, often before it serves), the
   tier process, the appender, the object store (``WeedServer.kill9``, then started again on the same folder and
   ports after 0-1 s), the consumer or the Kafka client; every killed process is restarted;
4. the end: every process killed, the broker too (half the trials), or stopped cleanly (the broker by SIGTERM,
   exit 0 expected); the object store started if it is down;
   then, 2 s after the last kill and the store's last start (a PUT of a killed process can still be completing
   inside the store: weed holds a write until a volume server takes it), **one more clean tier run** in the
   harness;
5. the checks: the log dir reopens; every acknowledged record of ``tiered`` is readable at its offset with the same
   bytes (locally, or from the object store below the local log start) and the log start offset is 0; in
   ``tiered-retained`` every acknowledged record from the log start offset on is; both topics read contiguously
   from the log start to the end, every value an intact self-checking payload (nothing handed out that was not
   written); some records were read from the object store; no object in the bucket that the remote log metadata
   does not track as a finished segment, every finished segment has all its objects, and no copy or delete is
   left started but unfinished; ``verify`` reports no problem; no process failed other than by a kill (a
   traceback, a ``BAD`` line of either consumer, killed or not); the broker never exited on its own and failed no
   remote read because an object was damaged or missing from ``tiered``
   (:meth:`torture.tiered_broker.TrialBroker.log_violations`).

A failing trial's dir (log dir, config, process outputs, a listing of the bucket) is kept under ``--keep``.
"""
from __future__ import annotations

import dataclasses
import json
import os
import random
import shutil
import tempfile
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, Callable

from include.seaweedfs import WeedServer
from storage_engine import crashpoints
from torture.harness import Child, _collect_exit
from torture.tiered_broker import TrialBroker
from torture.tiered_checks import check, drop_bucket, first_tier_run, list_bucket, prefill, s3
from torture.tiered_child import RETAINED, TIERED

REPO = Path(__file__).resolve().parent.parent
ROLES = ("appender", "tier", "consumer", "kafka-consumer")
# who a random kill hits, with its weight: the broker and the object store more often than a client process
KILLABLE = {"appender": 2, "tier": 2, "consumer": 1, "kafka-consumer": 1, "weed": 2, "broker": 3}
SEGMENT_BYTES = 16 * 1024
LOCAL_RETENTION_BYTES = 32 * 1024
RETENTION_BYTES = 256 * 1024
FORCED_STEP_TIMEOUT_S = 12.0
MIN_RUN_WAIT_S = 30.0   # a trial goes on until the looping tier job finished a run, at most this long
SETTLE_S = 2.0          # after the last kill and the store's last start, before the clean run
MODULE = "torture.tiered_child"
KAFKA_MODULE = "torture.tiered_kafka"

CONFIG = """broker:
  log.dirs: [logs]
  log.segment.bytes: {segment_bytes}
  log.index.interval.bytes: 1024
  log.segment.delete.delay.ms: 300
  remote.log.storage.system.enable: true
  rsm.config.storage.s3.endpoint.url: {endpoint}
  rsm.config.storage.s3.bucket.name: {bucket}
  rsm.config.storage.aws.access.key.id: {access_key}
  rsm.config.storage.aws.secret.access.key: {secret_key}
  rsm.config.fetch.chunk.cache.path: {cache}
  rlmm.config.remote.log.metadata.topic.num.partitions: 5
topics:
  {tiered}: {{remote.storage.enable: true, retention.ms: -1, retention.bytes: -1,
             local.retention.bytes: {local_bytes}}}
  {retained}: {{remote.storage.enable: true, retention.ms: -1, retention.bytes: {retention_bytes},
               local.retention.bytes: {local_bytes}}}
"""

# The protocols each role reaches (its forced steps): the tier job's own steps (any ``tier.*``/``remote.*``
# protocol the tier job declares in crashpoints.STEPS), the local retention and checkpoint writes it makes, and the
# appender's appends and rolls.
TIER_PROTOCOLS = ("retention", "checkpoint")
APPENDER_PROTOCOLS = ("append", "roll")


def tier_steps() -> list[str]:
    return sorted(name for name, (protocol, _) in crashpoints.STEPS.items()
                  if protocol.startswith(("tier", "remote")) or protocol in TIER_PROTOCOLS)


def appender_steps() -> list[str]:
    return sorted(name for name, (protocol, _) in crashpoints.STEPS.items() if protocol in APPENDER_PROTOCOLS)


def pick_step(rng: random.Random) -> tuple[str | None, str | None]:
    """(role, step) for 80% of the trials, three in four of them in the tier process; else (None, None)."""
    if rng.random() < 0.2:
        return None, None
    if rng.random() < 0.75 and tier_steps():
        return "tier", rng.choice(tier_steps())
    return "appender", rng.choice(appender_steps())


@dataclasses.dataclass
class TrialResult:
    trial: int
    seed: int
    step: str | None
    kills: Counter
    steps_reached: list
    acked: int
    remote_read: int
    copied: int
    violations: list
    broker: Counter
    seconds: float
    kept: str | None = None


class _Weed:
    """The run's object store and its restarts (a restart runs in a thread: the other processes go on)."""

    def __init__(self, server: WeedServer):
        self.server = server
        self.lock = threading.Lock()
        self.thread: threading.Thread | None = None
        self.errors: list[str] = []
        self.up_since = time.monotonic()

    def kill_and_restart(self, pause_s: float) -> None:
        self.wait()
        with self.lock:
            self.server.kill9()

        def restart() -> None:
            time.sleep(pause_s)
            try:
                self.server.start()
                self.up_since = time.monotonic()
            except Exception as exc:  # noqa: BLE001 - a store that does not come back is the finding
                self.errors.append(f"weed did not restart: {type(exc).__name__}: {exc}")
        self.thread = threading.Thread(target=restart, daemon=True)
        self.thread.start()

    def wait(self) -> None:
        if self.thread is not None:
            self.thread.join(120)
            self.thread = None

    def ensure_up(self) -> None:
        self.wait()
        if self.server.proc is None or self.server.proc.poll() is not None:
            self.server.start()
            self.up_since = time.monotonic()


def run_trial(trial: int, seed: int, keep_root: Path | None, weed: WeedServer) -> TrialResult:
    rng = random.Random(seed)
    forced_role, step = pick_step(rng)
    duration = rng.uniform(1.5, 4.0)
    work = Path(tempfile.mkdtemp(prefix=f"tiered-torture-{trial}-"))
    bucket = f"torture-{trial}-{seed}"[:63]
    store = _Weed(weed)
    store.ensure_up()
    s3(weed).create_bucket(Bucket=bucket)
    cfg_path = work / "storage.yaml"
    cfg_path.write_text(CONFIG.format(segment_bytes=SEGMENT_BYTES, endpoint=weed.endpoint_url, bucket=bucket,
                                      access_key=weed.access_key, secret_key=weed.secret_key, cache=work / "cache",
                                      tiered=TIERED, retained=RETAINED, local_bytes=LOCAL_RETENTION_BYTES,
                                      retention_bytes=RETENTION_BYTES), encoding="utf-8")
    stop_file = work / "stop"
    base_env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
                    PYTHONFAULTHANDLER="1")
    base_env.pop(crashpoints.ENV_VAR, None)
    t0 = time.monotonic()
    children: list[Child] = []
    kills: Counter = Counter()
    violations: list[str] = []
    serial = 0
    broker = TrialBroker(cfg_path, work, base_env)
    served: Counter = Counter()     # what the Kafka client read through the broker (see summary())

    def nth(name: str) -> str:
        return f"{name}:{rng.randint(20, 300)}" if name.startswith("append.") else f"{name}:{rng.randint(1, 3)}"

    def tier_ran() -> bool:
        return any(line.startswith(("RUN ", "STORE-DOWN ", "FAIL ")) for c in children if c.role == "tier"
                   for line in c.lines)

    def broker_read_remote() -> bool:
        return any(line.startswith("ROUND ") and line.split()[2] != "0" for c in children
                   if c.role == "kafka-consumer" for line in c.lines)

    def reached_forced() -> bool:
        return any(c.crash_step() == step for c in children)

    def start(role: str, armed: bool) -> Child:
        nonlocal serial
        serial += 1
        env = dict(base_env)
        if armed and step is not None:
            env[crashpoints.ENV_VAR] = nth(step)
        args = ["--stop-file", str(stop_file), "--seconds", str(duration + 60), "--tag", f"{role[0]}{serial}",
                "--pause-s", "0.002" if role == "appender" else "0.05"]
        if role == "kafka-consumer":
            args += ["--bootstrap", broker.address, "--log-dir", str(work / "logs")]
        else:
            args += ["--config", str(cfg_path), "--seed", str(rng.randrange(2**31))]
        child = Child(role, work, args, env, serial, module=KAFKA_MODULE if role == "kafka-consumer" else MODULE)
        children.append(child)
        return child

    acks: dict[str, list[tuple[int, str]]] = defaultdict(list)
    remote_read = copied = 0
    last_kill = [0.0]
    try:
        prefill(cfg_path, rng, acks)
        first_failed = first_tier_run(cfg_path)
        if first_failed:
            raise _Abort(first_failed)
        live = {"appender": start("appender", forced_role == "appender")}
        _wait_ready(live["appender"])
        if not broker.start():
            raise _Abort("the broker did not start")
        for role in ROLES[1:]:
            live[role] = start(role, forced_role == role)
        started = time.monotonic()
        kill_times = sorted(rng.uniform(0.3, duration) for _ in range(rng.randint(1, 3)))
        deadline = started + (FORCED_STEP_TIMEOUT_S if step is not None else duration)
        checked, extended = 0.0, False
        # the trial lasts until the looping tier job finished a run and the Kafka client read records of the
        # remote part through the broker (at most MIN_RUN_WAIT_S), so the kills and the consumers meet copies and
        # expiries made while the appender appends, not only the clean run's
        while time.monotonic() < deadline or ((not tier_ran() or not broker_read_remote())
                                              and time.monotonic() < started + MIN_RUN_WAIT_S):
            now = time.monotonic() - started
            if step is not None and not extended and now - checked > 0.1:
                checked = now
                if reached_forced():
                    extended = True
                    deadline = max(started + duration, time.monotonic() + rng.uniform(0.3, 2.0))
            if kill_times and now >= kill_times[0]:
                kill_times.pop(0)
                victim = rng.choices(list(KILLABLE), weights=list(KILLABLE.values()))[0]
                last_kill[0] = time.monotonic()
                if victim == "weed":
                    store.kill_and_restart(rng.uniform(0.0, 1.0))
                elif victim == "broker":
                    broker.kill9(rng)       # counted by the broker (a broker not running is not killed)
                else:
                    live[victim].kill9()
                if victim != "broker":
                    kills[victim] += 1
            for role, child in list(live.items()):
                if child.proc.poll() is not None:
                    _collect_exit(child, violations)
                    rearm = role == forced_role and not reached_forced()
                    live[role] = start(role, rearm)
            broker.tick(rng)
            time.sleep(0.01)
        kill_all = rng.random() < 0.5
        if kill_all:
            for child in live.values():
                if child.proc.poll() is None:
                    child.kill9()
                    kills["all at the end"] += 1
            kills["all at the end"] += broker.end(kill=True)
            last_kill[0] = time.monotonic()
        else:
            stop_file.write_text("stop")
        for child in live.values():
            if child.wait(90) is None:
                violations.append(f"{child.role} did not stop within 90 s after the trial ended")
                child.kill9()
                child.wait(10)
            _collect_exit(child, violations)
        if not kill_all:
            broker.end(kill=False)
        kills["broker"] += broker.kills
        for child in children:
            child.wait(10)
            if child.crash_step():
                kills[child.role] += 1
            remote_read += sum(int(line.split()[1]) for line in child.lines if line.startswith("REMOTE "))
            if child.killed or child.crash_step():   # its exit is not checked (_collect_exit): what it read is
                violations += [f"{child.role} (pid {child.proc.pid}) read {line}" for line in child.lines
                               if line.startswith("BAD ")]
            for line in child.lines:
                if line.startswith("ROUND "):
                    served["rounds"] += 1
                    served["read"] += int(line.split()[1])
                    served["remote"] += int(line.split()[2])
                elif line.startswith("RESET "):
                    served["resets"] += 1
            failed = [line for line in child.lines if line.startswith("FAIL ")]
            if failed:
                violations.append(f"{child.role} (pid {child.proc.pid}): {len(failed)} failed tier run(s) other "
                                  f"than the store being down, e.g. {failed[:3]}")
        store.ensure_up()
        violations += store.errors
        # A PUT a killed tier process sent may still be completing inside the store (weed holds a write until a
        # volume server can take it, e.g. just after its own restart): the clean run comes once that has settled,
        # else such an object can appear after the run's orphan sweep (the next run's sweep would delete it).
        settle = max(store.up_since, last_kill[0]) + SETTLE_S - time.monotonic()
        if settle > 0:
            time.sleep(settle)
        for line in (line for c in children if c.role == "appender" for line in c.lines):
            if line.startswith("ACK "):
                _, topic, offset, dig = line.split()
                acks[topic].append((int(offset), dig))
        found, remote_checked, copied = check(cfg_path, acks, weed, bucket, work)
        violations += found
        remote_read += remote_checked
        found, served["remote_failed_store_down"] = broker.log_violations()
        violations += found
        violations += broker.violations
    except _Abort as exc:
        violations.append(str(exc))
        violations += broker.violations
    except Exception as exc:  # noqa: BLE001 - any failure of the trial itself is the finding
        import traceback
        violations.append(f"the trial failed: {type(exc).__name__}: {exc}\n{traceback.format_exc()[-3000:]}")
    finally:
        for child in children:
            if child.proc.poll() is None:
                child.kill9()
                child.wait(10)
        broker.close()
    reached = [s for s in (c.crash_step() for c in children) if s]
    served["kills_before_serving"] = broker.kills_before_serving
    result = TrialResult(trial, seed, step, kills, reached, sum(len(v) for v in acks.values()), remote_read,
                         copied, violations, served, round(time.monotonic() - t0, 2))
    if violations and keep_root is not None:
        for child in children:
            child.stderr_path.with_suffix(".stdout").write_text("".join(line + "\n" for line in child.lines))
        dest = keep_root / f"tiered-trial-{trial}-seed-{seed}"
        shutil.copytree(work, dest, dirs_exist_ok=True)
        try:
            listing = [(o["Key"], o["Size"]) for o in list_bucket(weed, bucket)]
        except Exception as exc:  # noqa: BLE001
            listing = [(f"listing failed: {exc}", 0)]
        (dest / "bucket.json").write_text(json.dumps(listing, indent=1))
        (dest / "violations.json").write_text(json.dumps(
            {"trial": trial, "seed": seed, "step": step, "bucket": bucket, "kills": dict(kills),
             "steps_reached": reached, "violations": violations}, indent=2))
        result.kept = str(dest)
    shutil.rmtree(work, ignore_errors=True)
    if not violations:
        drop_bucket(weed, bucket)
    return result


class _Abort(Exception):
    """The trial cannot go on (the broker does not start)."""


def _wait_ready(child: Child, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while "READY" not in child.lines and child.proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)


def run(trials: int, seed: int, keep_root: Path | None, *, out: Callable[[str], Any] = print,
        weed_dir: Path | None = None) -> dict[str, Any]:
    """Run ``trials`` tiered trials against one ``weed`` (started in ``weed_dir`` or a temporary folder)."""
    started = time.monotonic()
    totals: dict[str, Any] = {"trials": 0, "violations": 0, "failed_trials": [], "kills": Counter(),
                              "steps_forced": Counter(), "steps_reached": Counter(), "acknowledged": 0,
                              "remote_read": 0, "copied": 0, "broker": Counter()}
    rng = random.Random(seed)
    folder = weed_dir or Path(tempfile.mkdtemp(prefix="tiered-torture-weed-"))
    weed = WeedServer(folder).start()
    try:
        for trial in range(trials):
            trial_seed = rng.randrange(2**31)
            res = run_trial(trial, trial_seed, keep_root, weed)
            totals["trials"] += 1
            totals["kills"].update(res.kills)
            totals["acknowledged"] += res.acked
            totals["remote_read"] += res.remote_read
            totals["copied"] += res.copied
            totals["broker"].update(res.broker)
            if res.step:
                totals["steps_forced"][res.step] += 1
            totals["steps_reached"].update(res.steps_reached)
            if res.violations:
                totals["violations"] += len(res.violations)
                totals["failed_trials"].append({"trial": trial, "seed": trial_seed, "step": res.step,
                                                "violations": res.violations, "kept": res.kept})
                out(f"trial {trial} (seed {trial_seed}, step {res.step}): {len(res.violations)} violation(s), "
                    f"kept in {res.kept}")
                for v in res.violations:
                    out(f"    {v[:3000]}")
            elif (trial + 1) % 10 == 0:
                out(f"trial {trial + 1}/{trials}: ok ({res.acked} acknowledged, {sum(res.kills.values())} kills, "
                    f"{res.remote_read} records read remotely, {res.seconds} s)")
            if (trial + 1) % 10 == 0 and trial + 1 < trials:
                totals["seconds"] = round(time.monotonic() - started, 1)
                out("so far: " + summary(totals))
    finally:
        weed.kill9()
        if weed_dir is None:
            shutil.rmtree(folder, ignore_errors=True)
    totals["seconds"] = round(time.monotonic() - started, 1)
    return totals


def summary(totals: dict[str, Any]) -> str:
    kills = totals["kills"]
    line = (f"tiered torture: {totals['trials']} trials, {totals['acknowledged']} acknowledged records checked, "
            f"{totals['remote_read']} records read from the object store, {totals['copied']} segments of "
            f"'{TIERED}' copied by the looping tier job during the trials, {sum(kills.values())} kills ("
            + ", ".join(f"{k} {v}" for k, v in sorted(kills.items())) + f"), {totals['violations']} violations, "
            f"{totals['seconds']} s")
    served = totals["broker"]
    line += (f"\n  broker: {served['read']} records read through it by the Kafka client in {served['rounds']} rounds "
             f"from offset 0, {served['remote']} of them below the local log start (from the object store), "
             f"{served['resets']} out-of-range answers past the log start followed; {kills['broker']} broker kills "
             f"({served['kills_before_serving']} before a restart served), {served['remote_failed_store_down']} "
             f"remote reads failed while the object store was down or failing (answered KAFKA_STORAGE_ERROR)")
    line += "\n  forced: " + (", ".join(f"{k} {v}" for k, v in sorted(totals["steps_forced"].items())) or "-")
    line += "\n  died at: " + (", ".join(f"{k} {v}" for k, v in sorted(totals["steps_reached"].items())) or "-")
    return line


def main(trials: int, seed: int, keep_root: Path) -> int:
    """``python -m torture --tiered``: failing trials as they happen, then the summary; 1 if any violation."""
    import logging
    logging.getLogger("storage_engine").setLevel(logging.ERROR)
    keep_root.mkdir(parents=True, exist_ok=True)
    totals = run(trials, seed, keep_root, out=lambda s: print(s, flush=True))
    print(summary(totals), flush=True)
    return 1 if totals["violations"] else 0
