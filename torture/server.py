"""Kill -9 torture of the Kafka wire-protocol broker with idempotent producers (``python -m torture --server``).

A trial (:func:`run_trial`):

1. a fresh store of two log dirs (segments of 64 KiB, 256 KiB or 1 MiB, 32 KiB when a roll step is armed, so
   that many trials roll, and write producer snapshots, while batches are in flight) and one broker,
   ``python -m storage_engine --config CFG serve``, on a free port; a topic of 2 or 3 partitions created through
   the Kafka admin API;
2. 2 or 3 producer processes (:mod:`torture.producer`): idempotent librdkafka producers (``acks=all``, retries
   without limit, ``message.timeout.ms`` 60 s) sending the numbered values ``<name>:0``, ``<name>:1``, ... in
   order, each to a random partition, 3,000-8,000 records each at 1,500-4,000 records a second; each prints a line
   per delivery report;
3. the broker dies 1-3 times while they produce (:data:`DEATHS`), and is restarted on the same port after 0-1 s:
   about half the deaths are a SIGKILL from the harness at a random moment (a later one sometimes within 1.5 s
   of the previous restart, so it may land while the broker recovers the killed store, before it serves), the
   others a start armed with ``STORAGE_ENGINE_CRASH_AT`` (:mod:`storage_engine.crashpoints`) dying by SIGKILL at
   a named step: ``append.written`` (a batch is in the log and its producer never gets the response, so it
   resends the batch to the next broker), ``append.torn`` (half a batch written), a step of a segment roll (the
   producer snapshot written at the roll), of the recovery of the killed store (``load.*``) or of an atomic file
   write; an armed step the broker does not reach while the producers produce is replaced by a random kill;
4. the producers finish (every record has a delivery report), then the broker is stopped with SIGTERM (a clean
   stop, exit 0 expected) and ``python -m storage_engine --config CFG verify`` must pass;
5. the checks, on the store through the engine (:func:`check_records`): every record whose delivery report was a
   success is in the log exactly once, at the partition and offset the report gave; no value is in the log twice
   (acknowledged or not); within a partition each producer's sequence numbers rise with the offsets; every value
   is one a producer sent. A producer that fails or gives a record up (a ``FAIL`` report), a broker that dies
   on its own or fails to start or to stop clean, or a broker log line of a failed produce is a violation too.

Metadata operations (:mod:`torture.server_topics`): beside the producers, a topic admin process
(:mod:`torture.topic_admin`) creates topics of 1-40 partitions, adds partitions to them and deletes them through
the admin API, resending an operation whose answer died with the broker, while polling Metadata for any topic seen
short of partitions. The broker is also armed at every named step of those operations (``topic.create.*``,
``topic.extend.*``, ``topic.delete.*``, and ``topic.resolve.partial`` while a restart completes what a death left
half done), and the random kills often land during one (counted). After the clean stop the store's folders must
hold every topic whole, every acknowledged create, extension and delete, and no topic-change record.

A failing trial's dir (store, config, broker log, producer outputs) is kept under ``--keep``. The totals count
the retried batches the broker answered from its producer state (``retried batch ... already at offsets`` in its
log): batches written before a kill whose response the producer never got.
"""
from __future__ import annotations

import dataclasses
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from torture import server_fetch, server_topics
from torture.processes import CRASH_ENV, REPO, Broker, ProducerChild

TOPIC = "numbered"
PRODUCER_TIMEOUT_MS = 60_000
# every producer has its reports within message.timeout.ms of the last broker start, plus its flush margin
PRODUCERS_DEADLINE_S = PRODUCER_TIMEOUT_MS / 1000 + 90
RETRIED = "retried batch of sequences"
FAILED_PRODUCE = "produce to "

CONFIG = """broker:
  log.dirs: [logs-0, logs-1]
  log.segment.bytes: {segment_bytes}
  listeners: PLAINTEXT://127.0.0.1:0
"""


@dataclasses.dataclass
class TrialResult:
    trial: int
    seed: int
    acked: int
    produced: int
    kills: int
    kills_before_serving: int
    steps_reached: Counter[str]
    steps_missed: Counter[str]
    retried_batches: int
    topic_ops: int
    kills_in_topic_ops: int
    violations: list[str]
    seconds: float
    kept: str | None = None


def parse_reports(lines: Iterable[str]) -> tuple[dict[int, tuple[int, int]], list[str], tuple[int, ...] | None]:
    """A producer's output: ({seq: (partition, offset)} of the acknowledged records, the FAIL lines, the numbers of
    its DONE line (produced, acknowledged, failed, still queued) or None)."""
    acked: dict[int, tuple[int, int]] = {}
    failed: list[str] = []
    done = None
    for line in lines:
        parts = line.split()
        if parts[:1] == ["ACK"]:
            acked[int(parts[3])] = (int(parts[1]), int(parts[2]))
        elif parts[:1] == ["FAIL"]:
            failed.append(line)
        elif parts[:1] == ["DONE"]:
            done = tuple(int(x) for x in parts[1:5])
    return acked, failed, done


def check_records(acked: dict[str, dict[int, tuple[int, int]]], produced: dict[str, int],
                  records: Iterable[tuple[int, int, bytes | None]]) -> list[str]:
    """The checks of a trial's log. ``acked``: {producer: {seq: (partition, offset) its delivery report gave}};
    ``produced``: {producer: how many records it sent (seqs 0 .. n-1)}; ``records``: (partition, offset, value) of
    every record in the log. Returns the violations: an acknowledged record missing or at another place, a value
    twice in the log, a producer's sequence numbers not rising with the offsets within a partition, a value no
    producer sent."""
    out: list[str] = []
    where: dict[tuple[str, int], list[tuple[int, int]]] = defaultdict(list)
    last_seq: dict[tuple[int, str], tuple[int, int]] = {}
    disorder: list[str] = []
    foreign: list[str] = []
    for partition, offset, value in sorted(records, key=lambda r: (r[0], r[1])):
        text = (value or b"").decode(errors="replace")
        name, _, seq_text = text.rpartition(":")
        if name not in produced or not seq_text.isdigit() or int(seq_text) >= produced[name]:
            foreign.append(f"{text!r} at {partition}/{offset}")
            continue
        seq = int(seq_text)
        where[(name, seq)].append((partition, offset))
        prev = last_seq.get((partition, name))
        if prev is not None and seq <= prev[0]:
            disorder.append(f"{name}:{seq} at {partition}/{offset} after {name}:{prev[0]} at {partition}/{prev[1]}")
        last_seq[(partition, name)] = (seq, offset)
    if foreign:
        out.append(f"{len(foreign)} record(s) no producer sent, e.g. {foreign[:3]}")
    dups = {k: v for k, v in where.items() if len(v) > 1}
    if dups:
        acked_dups = sum(1 for (name, seq) in dups if seq in acked.get(name, {}))
        out.append(f"{len(dups)} value(s) in the log more than once ({acked_dups} of them acknowledged), e.g. "
                   + ", ".join(f"{n}:{s} at {v}" for (n, s), v in list(dups.items())[:5]))
    if disorder:
        out.append(f"{len(disorder)} record(s) out of their producer's order within a partition, e.g. {disorder[:3]}")
    lost, moved = [], []
    for name, reports in acked.items():
        for seq, place in reports.items():
            found = where.get((name, seq))
            if not found:
                lost.append(f"{name}:{seq} (acknowledged at {place[0]}/{place[1]})")
            elif place not in found:
                moved.append(f"{name}:{seq} acknowledged at {place[0]}/{place[1]}, in the log at {found}")
    if lost:
        out.append(f"{len(lost)} acknowledged record(s) missing from the log, e.g. {lost[:5]}")
    if moved:
        out.append(f"{len(moved)} acknowledged record(s) at another partition/offset than acknowledged, "
                   f"e.g. {moved[:5]}")
    return out


def read_store(cfg_path: Path, topic: str, partitions: int) -> list[tuple[int, int, bytes | None]]:
    """Every record of ``topic`` through the engine (the broker stopped): (partition, offset, value)."""
    from storage_engine.config_file import load_config
    from storage_engine.log.manager import LogManager
    out: list[tuple[int, int, bytes | None]] = []
    with LogManager.open(load_config(str(cfg_path))) as mgr:
        for p in range(partitions):
            log = mgr.get_log(topic, p)
            if log is None:
                raise RuntimeError(f"partition {topic}-{p} is not in the store")
            out += [(p, r.offset, r.value) for r in log.read_records(log.log_start_offset)]
    return out


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 4})
    for fut in admin.create_topics([NewTopic(topic, partitions, 1)], operation_timeout=30).values():
        fut.result(60)


# Named steps (storage_engine.crashpoints) a broker start may be armed to die at, with their weights; None: a
# SIGKILL from the harness at a random moment. append.written: the batch is in the .log, nothing else done, so the
# producer never gets its response and resends it to the next broker.
DATA_DEATHS: dict[str | None, int] = {
    None: 45, "append.written": 20, "append.torn": 7, "roll.published": 3, "roll.sealed": 2, "roll.created": 2,
    "roll.flushed": 3, "load.resolved": 5, "load.recovered": 5, "atomic.tmp-written": 4, "atomic.renamed": 4,
}
# the server trials' deaths: those, and the steps of the topic admin's operations (torture.txn draws DATA_DEATHS)
DEATHS: dict[str | None, int] = {**DATA_DEATHS}
DEATHS.update(server_topics.TOPIC_DEATHS.items())
ADMIN_OPS = (4, 10)      # topic operations of a trial's admin (torture.topic_admin)
FORCED_STEP_TIMEOUT_S = 20.0


def plan_deaths(rng: random.Random, count: int, partitions: int,
                deaths: dict[str | None, int] = DATA_DEATHS) -> list[tuple[str | None, int]]:
    """``count`` deaths of the broker: (None, 0) for a SIGKILL at a random moment, or (step, n) for the broker
    start armed to die the n-th time it reaches that step. The first start recovers nothing and must live until the
    topic exists: only a random kill, an append, a roll or a topic step (the hits of that topic's own create
    skipped, :func:`torture.server_topics.nth_for`)."""
    plan: list[tuple[str | None, int]] = []
    for k in range(count):
        step = rng.choices(list(deaths), weights=list(deaths.values()))[0]
        if step is not None and step.startswith("topic.") and step != "topic.resolve.partial":
            plan.append((step, server_topics.nth_for(step, k == 0, partitions, rng.randint(1, 2))))
        elif step is None or (k == 0 and not step.startswith(("append.", "roll."))):
            plan.append((None, 0))
        elif step.startswith("append."):
            plan.append((step, rng.randint(1, 300)))     # one per batch: hundreds a second
        elif step.startswith("load."):
            plan.append((step, rng.randint(1, partitions)))
        else:
            plan.append((step, rng.randint(1, 2)))
    return plan


def run_trial(trial: int, seed: int, keep_root: Path | None) -> TrialResult:
    rng = random.Random(seed)
    t0 = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix=f"server-torture-{trial}-"))
    partitions = rng.choice((2, 3))
    count = rng.choices((1, 2, 3), weights=(50, 35, 15))[0]
    plan = plan_deaths(rng, count, partitions, DEATHS)
    # a trial with a forced roll step has small segments, so that the step comes while the producers produce
    segment_bytes = 32 * 1024 if any((s or "").startswith("roll.") for s, _ in plan) else \
        rng.choice((64 * 1024, 256 * 1024, 1024 * 1024))
    cfg_path = work / "storage.yaml"
    cfg_path.write_text(CONFIG.format(segment_bytes=segment_bytes))
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               PYTHONFAULTHANDLER="1", PYTHONUNBUFFERED="1")
    env.pop(CRASH_ENV, None)
    names = [f"p{trial}{chr(ord('a') + i)}" for i in range(rng.choice((2, 3)))]
    violations: list[str] = []
    kills = kills_before_serving = 0
    steps_reached: Counter[str] = Counter()
    steps_missed: Counter[str] = Counter()
    produced: dict[str, int] = {}
    acked: dict[str, dict[int, tuple[int, int]]] = {}
    broker = Broker(cfg_path, work, env)
    producers: list[ProducerChild] = []
    admin: ProducerChild | None = None
    admin_name = f"m{trial}"
    admin_out: dict[str, Any] = {"ops": []}
    kills_in_topic_ops = 0
    retried = 0
    zero_copy: server_fetch.ZeroCopyChecks | None = None

    def armed(k: int) -> str | None:
        step, nth = plan[k] if k < len(plan) else (None, 0)
        return f"{step}:{nth}" if step else None

    def producing() -> bool:
        return any(c.proc.poll() is None for c in producers) or (admin is not None and admin.proc.poll() is None)

    def in_topic_op() -> bool:
        tail = [line for line in (admin.lines[-5:] if admin is not None else []) if not line.startswith("BAD")]
        return bool(tail) and tail[-1].startswith("TRY")

    try:
        broker.spawn(armed(0))
        if not broker.wait_ready():
            raise _Abort(f"the broker did not start: {broker.log_text()[-3000:]}")
        create_topic(broker.address, TOPIC, partitions)
        if server_fetch.fits(plan[0][0]):
            zero_copy = server_fetch.ZeroCopyChecks(work, broker.address, cfg_path, TOPIC, partitions, env, rng,
                                                    trial)
        longest = 0.0
        for name in names:
            produced[name] = rng.randint(3000, 8000)
            rate = rng.uniform(1500, 4000)
            longest = max(longest, produced[name] / rate)
            producers.append(ProducerChild(name, work, [
                "--bootstrap", broker.address, "--topic", TOPIC, "--partitions", str(partitions),
                "--records", str(produced[name]), "--rate", f"{rate:.0f}", "--seed", str(rng.randrange(2**31)),
                "--timeout-ms", str(PRODUCER_TIMEOUT_MS)], env))
        admin = ProducerChild(admin_name, work, ["--bootstrap", broker.address, "--ops", str(rng.randint(*ADMIN_OPS)),
                                                 "--seed", str(rng.randrange(2**31))],
                              env, module="torture.topic_admin", role="admin")
        # the deaths, while they produce; a random kill sometimes soon after the restart (maybe before it serves)
        at = time.monotonic() + rng.uniform(0.2, max(0.3, longest * 0.8))
        for k, (step, _) in enumerate(plan):
            if step is None:
                while time.monotonic() < at:
                    if broker.died() is not None:
                        raise _Abort(f"the broker exited on its own ({broker.died()}): {broker.log_text()[-3000:]}")
                    time.sleep(0.01)
                kills += 1
                kills_in_topic_ops += in_topic_op()
                kills_before_serving += broker.kill9()
            else:
                deadline = time.monotonic() + FORCED_STEP_TIMEOUT_S
                # a load step comes during the start, whether or not the producers are still at work
                during_start = step.startswith("load.") or step == "topic.resolve.partial"
                while broker.died() is None and time.monotonic() < deadline and (
                        producing() or (during_start and not broker.ready.is_set())):
                    time.sleep(0.01)
                if broker.died() is None:       # not reached while they produced: a random kill instead
                    steps_missed[step] += 1
                    kills += 1
                    kills_in_topic_ops += in_topic_op()
                    kills_before_serving += broker.kill9()
                elif broker.crash_step() == step:
                    steps_reached[step] += 1
                    broker.killed = True
                else:
                    raise _Abort(f"the broker exited on its own ({broker.died()}): {broker.log_text()[-3000:]}")
            time.sleep(rng.uniform(0.0, 1.0))
            broker.spawn(armed(k + 1))
            at = time.monotonic() + (rng.uniform(0.0, 1.5) if rng.random() < 0.4 else rng.uniform(0.5, 3.0))
        if not broker.wait_ready():
            raise _Abort(f"the broker did not start after {len(plan)} deaths: {broker.log_text()[-3000:]}")
        deadline = time.monotonic() + PRODUCERS_DEADLINE_S
        for child in producers:
            rc = child.wait(max(1.0, deadline - time.monotonic()))
            if rc is None:
                violations.append(f"producer {child.name} did not finish within {PRODUCERS_DEADLINE_S:.0f} s")
                child.close()
            elif rc != 0:
                violations.append(f"producer {child.name} exited {rc}: {child.stderr()[-2000:]}")
            acks, fails, done = parse_reports(child.lines)
            acked[child.name] = acks
            if fails:
                violations.append(f"producer {child.name} gave {len(fails)} record(s) up, e.g. {fails[:3]}")
            if done is None or done[3]:
                violations.append(f"producer {child.name} ended without every delivery report: {done}")
        rc = admin.wait(max(1.0, deadline - time.monotonic()))
        if rc != 0:
            violations.append(f"the topic admin exited {rc}: {admin.stderr()[-2000:]}")
            admin.close()
        admin_out = server_topics.parse_admin(admin.lines)
        if admin_out["end"] is None:
            violations.append("the topic admin did not finish its operations")
        if broker.died() is not None:
            violations.append(f"the broker exited on its own ({broker.died()})")
        if zero_copy is not None:
            violations += zero_copy.stop_and_check()
        rc = broker.stop()
        if rc != 0:
            violations.append(f"the broker's clean stop (SIGTERM) ended with {rc}")
        violations += server_topics.check_topics([work / "logs-0", work / "logs-1"], admin_name + "-", admin_out)
        log_text = broker.log_text()
        retried = log_text.count(RETRIED)
        failed_produce = [line for line in log_text.splitlines() if FAILED_PRODUCE in line and "failed" in line]
        if failed_produce:
            violations.append(f"the broker logged {len(failed_produce)} failed produce(s), e.g. {failed_produce[:3]}")
        verify = subprocess.run([sys.executable, "-m", "storage_engine", "--config", str(cfg_path), "verify"],
                                cwd=str(REPO), env=env, capture_output=True, text=True, timeout=300)
        (work / "verify.out").write_text(verify.stdout + verify.stderr)
        if verify.returncode != 0:
            violations.append(f"verify exited {verify.returncode}: {(verify.stdout + verify.stderr)[-2000:]}")
        violations += check_records(acked, produced, read_store(cfg_path, TOPIC, partitions))
    except _Abort as exc:
        violations.append(str(exc))
    except Exception as exc:  # noqa: BLE001 - any failure of the trial is the finding
        violations.append(f"the trial failed: {type(exc).__name__}: {exc}")
    finally:
        for child in producers + ([admin] if admin is not None else []):
            child.close()
        if zero_copy is not None:
            zero_copy.close()
        broker.close()
    topic_ops = sum(1 for kind, *_ in admin_out["ops"] if kind in ("ACK", "DONE"))
    result = TrialResult(trial, seed, sum(len(a) for a in acked.values()), sum(produced.values()), kills,
                         kills_before_serving, steps_reached, steps_missed, retried, topic_ops, kills_in_topic_ops,
                         violations,
                         round(time.monotonic() - t0, 2))
    if violations and keep_root is not None:
        dest = keep_root / f"server-trial-{trial}-seed-{seed}"
        shutil.copytree(work, dest, dirs_exist_ok=True)
        (dest / "violations.json").write_text(json.dumps(
            {"trial": trial, "seed": seed, "plan": plan, "kills": kills, "steps_reached": dict(steps_reached),
             "violations": violations}, indent=2))
        result.kept = str(dest)
    shutil.rmtree(work, ignore_errors=True)
    return result


class _Abort(Exception):
    """The trial cannot go on (the broker does not start or died on its own)."""


def run(trials: int, seed: int, keep_root: Path | None, *, out: Callable[[str], Any] = print) -> dict[str, Any]:
    """Run ``trials`` server trials; returns the totals."""
    started = time.monotonic()
    totals: dict[str, Any] = {"trials": 0, "acknowledged": 0, "produced": 0, "kills": 0, "kills_before_serving": 0,
                              "steps_reached": Counter(), "steps_missed": Counter(), "retried_batches": 0,
                              "topic_ops": 0, "kills_in_topic_ops": 0,
                              "violations": 0, "failed_trials": []}
    rng = random.Random(seed)
    server_fetch.TOTALS.clear()
    for trial in range(trials):
        trial_seed = rng.randrange(2**31)
        res = run_trial(trial, trial_seed, keep_root)
        totals["trials"] += 1
        totals["acknowledged"] += res.acked
        totals["produced"] += res.produced
        totals["kills"] += res.kills
        totals["kills_before_serving"] += res.kills_before_serving
        totals["steps_reached"].update(res.steps_reached)
        totals["steps_missed"].update(res.steps_missed)
        totals["retried_batches"] += res.retried_batches
        totals["topic_ops"] += res.topic_ops
        totals["kills_in_topic_ops"] += res.kills_in_topic_ops
        if res.violations:
            totals["violations"] += len(res.violations)
            totals["failed_trials"].append({"trial": trial, "seed": trial_seed, "violations": res.violations,
                                            "kept": res.kept})
            out(f"trial {trial} (seed {trial_seed}): {len(res.violations)} violation(s), kept in {res.kept}")
            for v in res.violations:
                out(f"    {v[:2000]}")
        elif (trial + 1) % 10 == 0:
            out(f"trial {trial + 1}/{trials}: ok ({res.acked} acknowledged, "
                f"{res.kills + sum(res.steps_reached.values())} deaths, "
                f"{res.retried_batches} retried batches answered from the log, {res.seconds} s)")
        if (trial + 1) % 25 == 0 and trial + 1 < trials:   # the totals so far, should the run be cut short
            totals["seconds"] = round(time.monotonic() - started, 1)
            out("so far: " + summary(totals))
    totals["seconds"] = round(time.monotonic() - started, 1)
    return totals


def summary(totals: dict[str, Any]) -> str:
    """The totals in one line (then the named steps the broker died at, and those never reached)."""
    reached: Counter[str] = totals["steps_reached"]
    deaths = totals["kills"] + sum(reached.values())
    line = (f"server torture: {totals['trials']} trials, {totals['acknowledged']} acknowledged records checked "
            f"(of {totals['produced']} produced), {deaths} kills ({totals['kills']} SIGKILL at random moments, "
            f"{totals['kills_before_serving']} of them before the restarted broker served; {sum(reached.values())} "
            f"at a named step), {totals['retried_batches']} retried batches answered with their first offsets, "
            f"{totals['topic_ops']} topic operations answered ({totals['kills_in_topic_ops']} random kills while one "
            f"was in flight), "
            f"{totals['violations']} violations, {totals['seconds']} s")
    line += "\n" + server_fetch.summary()
    line += "\n  died at: " + (", ".join(f"{k} {v}" for k, v in sorted(reached.items())) or "-")
    if totals["steps_missed"]:
        line += "\n  armed but not reached while producing (killed at random instead): " + ", ".join(
            f"{k} {v}" for k, v in sorted(totals["steps_missed"].items()))
    return line


def main(trials: int, seed: int, keep_root: Path) -> int:
    """``python -m torture --server``: prints failing trials as they happen and the summary line; 1 if any
    violation."""
    keep_root.mkdir(parents=True, exist_ok=True)
    totals = run(trials, seed, keep_root, out=lambda s: print(s, flush=True))
    print(summary(totals), flush=True)
    return 1 if totals["violations"] else 0
