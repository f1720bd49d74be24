"""Kill -9 torture of transactional consume-transform-produce through the broker (``python -m torture --txn``).

A trial (:func:`run_trial`):

1. a fresh store of two log dirs (segments of 32 KiB, 64 KiB or 256 KiB for every topic, ``__consumer_offsets``
   and ``__transaction_state`` included, 32 KiB when a roll step is armed, so that rolls happen while
   transactions are open) and one broker
   (:class:`torture.server.Broker`) with 5 partitions of each internal topic and no initial rebalance delay; an
   input topic of 2 or 3 partitions and an output topic of 2 or 3, created through the admin API; 2,000-5,000
   numbered records (``in:0``, ``in:1``, ...) written to the input by an idempotent producer;
2. 1 or 2 worker processes (:mod:`torture.txn_worker`), each a confluent-kafka consumer in one group
   (``read_committed``, no auto commit; static membership in about half the trials) and a transactional
   producer with the ``transactional.id`` of its slot, looping: poll a batch, begin a transaction, produce one
   output record naming each input record, send the consumer's positions with its group metadata, commit; an
   abortable error aborts and rewinds the consumer to the committed offsets;
3. while they work, the broker dies 1-3 times (:func:`torture.server.plan_deaths`: about half a SIGKILL at a
   random moment, a point of the workers' progress or soon after a restart, the others a start armed with
   ``STORAGE_ENGINE_CRASH_AT`` dying at a named step: an append of a produce, an offset commit, a transaction
   state record or a marker, a segment roll, the recovery of the killed store, an atomic file write), and is
   restarted on the same port after 0-1 s; and 1 or 2 workers are disrupted at random points of the progress:
   most by a SIGKILL followed by a restart in the same slot after 0-1 s (its InitProducerId aborts what the
   killed one left open and fences it), the others, once their InitProducerId is done, made zombies: SIGSTOP, a
   new worker started in the slot at once, SIGCONT 1-3 s later; a zombie must not get any output committed (its
   epoch is fenced; with static membership its group.instance.id is taken too) and ends with a fatal error, or
   finds the work done (with static membership a resumed zombie's consumer may rejoin with the slot's
   group.instance.id first, which fences the newer worker's consumer, as Kafka does: that worker is started
   again). A worker's consumer whose own session timed out while the broker was away or slow to restart is fenced
   too, by its next heartbeat (librdkafka sends it with an empty member id and the instance id while the
   coordinator still holds the instance's member, and Kafka's rule fences it): such a worker is started again in
   its slot as well, once its stderr shows the session timeout before the fence (:func:`fenced_after_session_timeout`);
4. once the workers are done (the group's committed offsets reached the input's end offsets), the output is read
   by a read_committed confluent consumer; the broker is stopped with SIGTERM (exit 0 expected) and
   ``python -m storage_engine --config CFG verify`` must pass;
5. the checks (:func:`check_output`), on the stopped store through the engine: the input holds the records
   written, once each; every input record's output is in the output read ``read_committed`` exactly once, and
   nothing else is there; the consumer's read equals the engine's; no transaction is left open (last stable
   offset = log end offset in the output and in ``__consumer_offsets``). A worker that exits with an error
   without having been killed or made a zombie (other than the two fences above), or does not finish, a broker that dies on its own, fails to
   start or to stop clean, a failed ``verify`` or a traceback in the broker's log is a violation too.

The totals count the aborted output records (read_uncommitted minus read_committed), the transactions
committed and aborted as the workers reported them, the broker's deaths and the workers killed and fenced. A
failing trial's dir (store, config, broker log, worker outputs) is kept under ``--keep``.
"""
from __future__ import annotations

import dataclasses
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from torture.server import (CRASH_ENV, FORCED_STEP_TIMEOUT_S, REPO, Broker, ProducerChild, create_topic,
                            plan_deaths)

INPUT, OUTPUT, GROUP = "input", "output", "txn-torture"
OFFSETS_TOPIC, TXN_TOPIC = "__consumer_offsets", "__transaction_state"
INTERNAL_PARTITIONS = 5
EXIT_FATAL = 3                    # torture.txn_worker.EXIT_FATAL
WORKERS_DEADLINE_S = 240.0        # every worker done within this after the last disruption
ZOMBIE_DEADLINE_S = 20.0          # a resumed zombie ends (fenced, or done) within this, or is killed
INSTANCE_FENCED = "FENCED_INSTANCE_ID"
FENCED_ERRORS = ("PRODUCER_FENCED", "INVALID_PRODUCER_EPOCH", INSTANCE_FENCED, "_FENCED")

CONFIG = """broker:
  log.dirs: [logs-0, logs-1]
  log.segment.bytes: {segment_bytes}
  listeners: PLAINTEXT://127.0.0.1:0
  offsets.topic.num.partitions: {internal}
  offsets.topic.segment.bytes: {segment_bytes}
  transaction.state.log.num.partitions: {internal}
  transaction.state.log.segment.bytes: {segment_bytes}
  group.initial.rebalance.delay.ms: 0
  group.min.session.timeout.ms: 1000
  transaction.abort.timed.out.transaction.cleanup.interval.ms: 1000
"""


@dataclasses.dataclass
class TrialResult:
    trial: int
    seed: int
    inputs: int
    committed: int
    aborted: int
    txns_committed: int
    txns_aborted: int
    kills: int
    kills_before_serving: int
    steps_reached: Counter[str]
    steps_missed: Counter[str]
    worker_kills: int
    zombies: int
    zombie_ends: Counter[str]
    instance_fenced: int
    session_fenced: int
    violations: list[str]
    seconds: float
    kept: str | None = None


class _Abort(Exception):
    """The trial cannot go on (the broker does not start or died on its own)."""


# -- the checks -------------------------------------------------------------------------------------------------

def check_output(inputs: dict[tuple[int, int], bytes | None], expected: int,
                 committed: Iterable[tuple[int, int, bytes | None]]) -> list[str]:
    """The checks of a trial's output. ``inputs``: {(partition, offset): value} of every input record (the engine's
    read); ``expected``: how many records were written to the input; ``committed``: (partition, offset, value)
    of the output as read ``read_committed``. Every input record must have its output exactly once, nothing
    else may be there."""
    out: list[str] = []
    values = Counter(inputs.values())
    twice = [v for v, n in values.items() if n > 1]
    if len(inputs) != expected or twice:
        out.append(f"the input holds {len(inputs)} records ({len(twice)} value(s) more than once, e.g. "
                   f"{twice[:3]}), {expected} were written")
    seen: dict[tuple[int, int], list[tuple[int, int]]] = defaultdict(list)
    foreign: list[str] = []
    for partition, offset, value in committed:
        text = (value or b"").decode(errors="replace")
        topic, p, o, v = (text.split(":", 3) + ["", "", ""])[:4]
        key = (int(p), int(o)) if p.isdigit() and o.isdigit() else None
        if topic != INPUT or key is None or key not in inputs or (inputs[key] or b"").decode() != v:
            foreign.append(f"{text!r} at {partition}/{offset}")
            continue
        seen[key].append((partition, offset))
    if foreign:
        out.append(f"{len(foreign)} output record(s) naming no input record, e.g. {foreign[:3]}")
    dups = {k: v for k, v in seen.items() if len(v) > 1}
    if dups:
        out.append(f"{len(dups)} input record(s) with more than one committed output, e.g. "
                   + ", ".join(f"{INPUT}-{k[0]}@{k[1]} at {v}" for k, v in list(dups.items())[:5]))
    lost = sorted(k for k in inputs if k not in seen)
    if lost:
        out.append(f"{len(lost)} input record(s) without a committed output, e.g. "
                   + ", ".join(f"{INPUT}-{p}@{o}" for p, o in lost[:5]))
    return out


def read_store(cfg_path: Path, partitions: dict[str, int]) -> dict[str, Any]:
    """Through the engine (the broker stopped), per topic of ``partitions`` ({topic: count}): every record
    read_uncommitted and read_committed as (partition, offset, value), and the partitions whose last stable
    offset is below the log end offset (an open transaction). Also the ``__consumer_offsets`` partitions with an
    open transaction."""
    from storage_engine.config_file import load_config
    from storage_engine.log.manager import LogManager
    out: dict[str, Any] = {"open": []}
    with LogManager.open(load_config(str(cfg_path))) as mgr:
        for topic, count in partitions.items():
            every, committed = [], []
            for p in range(count):
                log = mgr.get_log(topic, p)
                if log is None:
                    raise RuntimeError(f"partition {topic}-{p} is not in the store")
                every += [(p, r.offset, r.value) for r in log.read_records(log.log_start_offset)]
                committed += [(p, r.offset, r.value) for r in
                              log.read_records(log.log_start_offset, isolation_level="read_committed")]
                if log.last_stable_offset != log.log_end_offset:
                    out["open"].append(f"{topic}-{p} (last stable offset {log.last_stable_offset}, log end "
                                       f"{log.log_end_offset})")
            out[topic] = (every, committed)
        for p in range(INTERNAL_PARTITIONS):
            log = mgr.get_log(OFFSETS_TOPIC, p)
            if log is not None and log.last_stable_offset != log.log_end_offset:
                out["open"].append(f"{OFFSETS_TOPIC}-{p} (last stable offset {log.last_stable_offset}, log end "
                                   f"{log.log_end_offset})")
    return out


def consume_committed(bootstrap: str, topic: str, partitions: int, timeout_s: float = 60.0
                      ) -> list[tuple[int, int, bytes | None]]:
    """The whole topic as a read_committed confluent consumer reads it from the start (to the end of each
    partition)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "txn-torture-check", "enable.auto.commit": False,
                  "isolation.level": "read_committed", "enable.partition.eof": True, "fetch.wait.max.ms": 50,
                  "log_level": 4})
    out: list[tuple[int, int, bytes | None]] = []
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        at_end: set[int] = set()
        deadline = time.monotonic() + timeout_s
        while len(at_end) < partitions:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the read_committed consumer did not reach the end of {sorted(at_end)} of "
                                   f"{partitions} partitions in {timeout_s:.0f} s")
            for m in c.consume(500, 0.1):
                err = m.error()
                partition, offset = m.partition(), m.offset()
                if err is None:
                    assert partition is not None and offset is not None, "a consumed record has its position"
                    out.append((partition, offset, m.value()))
                    at_end.discard(partition)
                elif err.code() == KafkaError._PARTITION_EOF:
                    assert partition is not None, "a partition EOF names its partition"
                    at_end.add(partition)
    finally:
        c.close()
    return out


def fill_input(bootstrap: str, records: int, partitions: int, rng: random.Random) -> list[int]:
    """``in:0`` .. ``in:<records-1>`` to random partitions of the input, idempotent; returns the end offsets."""
    from confluent_kafka import KafkaError, Message, Producer
    ends = [0] * partitions
    failed: list[str] = []

    def report(err: KafkaError | None, msg: Message) -> None:
        partition, offset = msg.partition(), msg.offset()
        if err is None:
            assert partition is not None and offset is not None, "a delivered record has its position"
            ends[partition] = max(ends[partition], offset + 1)
        else:
            failed.append(err.name())

    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all", "linger.ms": 5,
                  "batch.size": 16384, "log_level": 4})
    for i in range(records):
        while True:
            try:
                p.produce(INPUT, value=f"in:{i}".encode(), partition=rng.randrange(partitions), on_delivery=report)
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
    if p.flush(60) or failed:
        raise RuntimeError(f"the input was not written: {failed[:3]}")
    if sum(ends) != records:
        raise RuntimeError(f"the input's end offsets {ends} do not add up to {records}")
    return ends


# -- the workers ------------------------------------------------------------------------------------------------

class Slot:
    """A worker slot: its transactional id, and the worker processes that ran in it, the last one current."""

    def __init__(self, k: int, start: Callable[[str], ProducerChild]):
        self.k = k
        self._start = start
        self.children: list[ProducerChild] = []
        self.killed: set[int] = set()             # indexes of children killed by the harness
        self.zombies: dict[int, float] = {}       # index of a stopped child -> when it is resumed
        self.resumed: set[int] = set()
        self.done = False
        self.spawn()

    def spawn(self) -> None:
        self.children.append(self._start(f"{self.k}.{len(self.children)}"))

    @property
    def current(self) -> ProducerChild:
        return self.children[-1]

    def running(self) -> bool:
        return not self.done and self.current.proc.poll() is None


def fenced_after_session_timeout(stderr: str) -> bool:
    """Whether a worker's consumer was fenced after its own session had timed out: in the worker's stderr,
    librdkafka's ``SESSTMOUT`` warning of that consumer instance comes before its ``FATAL`` line (the consumer then
    heartbeats with an empty member id and the instance id until its revocation is served, and the coordinator
    answers FENCED_INSTANCE_ID while it holds the instance's member, as Kafka's ``isStaticMemberFenced`` does).
    A fence with no such timeout before it is not explained by that, and stays a violation."""
    timed_out: set[str] = set()
    for line in stderr.splitlines():
        fields = line.split("|", 4)          # %<level>|<time>|<facility>|<client instance>| <text>
        if len(fields) < 5 or "#consumer-" not in fields[3]:
            continue
        if fields[2] == "SESSTMOUT":
            timed_out.add(fields[3])
        elif fields[2] == "FATAL":
            return fields[3] in timed_out
    return False


def committed_records(slots: list[Slot]) -> int:
    """Output records in committed transactions, as the workers reported them."""
    total = 0
    for slot in slots:
        for child in slot.children:
            total += sum(int(line.split()[1]) for line in list(child.lines) if line.startswith("TXN "))
    return total


def worker_lines(slots: list[Slot], kind: str) -> list[str]:
    return [line for slot in slots for child in slot.children for line in list(child.lines)
            if line.startswith(kind + " ")]


# -- a trial ----------------------------------------------------------------------------------------------------

def run_trial(trial: int, seed: int, keep_root: Path | None) -> TrialResult:
    rng = random.Random(seed)
    t0 = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix=f"txn-torture-{trial}-"))
    in_parts, out_parts = rng.choice((2, 3)), rng.choice((2, 3))
    records = rng.randint(2000, 5000)
    workers = rng.choice((1, 2))
    static = rng.random() < 0.5
    max_batch = rng.choice((20, 50, 100, 200))
    count = rng.choices((1, 2, 3), weights=(40, 40, 20))[0]
    plan = plan_deaths(rng, count, in_parts + out_parts + 2 * INTERNAL_PARTITIONS)
    # a trial with a forced roll step has the smallest segments, so that the step comes while the workers work
    segment_bytes = 32 * 1024 if any((st or "").startswith("roll.") for st, _ in plan) else \
        rng.choice((32 * 1024, 64 * 1024, 256 * 1024))
    # the workers' disruptions: at a fraction of the progress, a kill (restart in the slot) or a zombie
    disruptions = sorted((rng.uniform(0.05, 0.85), rng.randrange(workers), "zombie" if rng.random() < 0.3 else "kill")
                         for _ in range(rng.choice((1, 2))))
    # the random kills of the broker: at a fraction of the progress, or (not the first) soon after a restart
    kill_at = sorted(rng.uniform(0.05, 0.85) for _ in plan)
    soon = [k > 0 and rng.random() < 0.3 for k in range(len(plan))]
    cfg_path = work / "storage.yaml"
    cfg_path.write_text(CONFIG.format(segment_bytes=segment_bytes, internal=INTERNAL_PARTITIONS))
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               PYTHONFAULTHANDLER="1", PYTHONUNBUFFERED="1")
    env.pop(CRASH_ENV, None)
    violations: list[str] = []
    kills = kills_before_serving = worker_kills = 0
    steps_reached: Counter[str] = Counter()
    steps_missed: Counter[str] = Counter()
    broker = Broker(cfg_path, work, env)
    slots: list[Slot] = []
    inputs_written = committed_out = aborted_out = 0
    zombie_ends: Counter[str] = Counter()
    instance_fenced = session_fenced = 0
    info: dict[str, Any] = {"partitions": [in_parts, out_parts], "records": records, "workers": workers,
                            "static": static, "max_batch": max_batch, "segment_bytes": segment_bytes,
                            "plan": plan, "disruptions": list(disruptions)}

    def armed(k: int) -> str | None:
        step, nth = plan[k] if k < len(plan) else (None, 0)
        return f"{step}:{nth}" if step else None

    def check_broker() -> None:
        if broker.died() is not None:
            raise _Abort(f"the broker exited on its own ({broker.died()}): {broker.log_text()[-3000:]}")

    def working() -> bool:
        return any(not s.done for s in slots)

    try:
        broker.spawn()
        if not broker.wait_ready():
            raise _Abort(f"the broker did not start: {broker.log_text()[-3000:]}")
        create_topic(broker.address, INPUT, in_parts)
        create_topic(broker.address, OUTPUT, out_parts)
        ends = fill_input(broker.address, records, in_parts, rng)
        inputs_written = records
        if plan[0][0] is not None:
            # the first death is at a named step: a clean restart with the step armed
            rc = broker.stop()
            if rc != 0:
                violations.append(f"the broker's clean stop (SIGTERM) after the input was written ended with {rc}")
            broker.spawn(armed(0))
            if not broker.wait_ready():
                check_broker()
                raise _Abort(f"the broker did not start again: {broker.log_text()[-3000:]}")
        bootstrap = broker.address
        worker_args = ["--bootstrap", bootstrap, "--group", GROUP, "--input", INPUT, "--output", OUTPUT,
                       "--out-partitions", str(out_parts), "--ends", ",".join(f"{p}:{e}" for p, e in enumerate(ends)),
                       "--batch", str(max_batch), "--session-timeout-ms", "3000", "--deadline", "400"]
        if static:
            worker_args.append("--static")

        def starter(k: int) -> Callable[[str], ProducerChild]:
            return lambda name: ProducerChild(name, work, [
                "--slot", str(k), "--seed", str(rng.randrange(2**31)), *worker_args], env,
                module="torture.txn_worker", role="worker")

        slots = [Slot(k, starter(k)) for k in range(workers)]
        k = 0                          # the next death of the broker
        armed_since = time.monotonic()
        restarted_at = time.monotonic()
        soon_at = restarted_at + rng.uniform(0.0, 1.5)
        jitter = rng.uniform(0.0, 0.3)
        crossed_at: float | None = None
        deadline = time.monotonic() + WORKERS_DEADLINE_S
        while working() or k < len(plan):
            now = time.monotonic()
            if now > deadline:
                violations.append(f"the workers did not finish within {WORKERS_DEADLINE_S:.0f} s of the last "
                                  f"disruption ({committed_records(slots)} of {records} outputs committed)")
                break
            progress = committed_records(slots) / records
            died = False
            # the broker's deaths
            if k < len(plan):
                step = plan[k][0]
                if broker.died() is not None:
                    if step is None or broker.crash_step() != step:
                        check_broker()
                    assert step is not None, "check_broker raised: the broker died where no step was armed"
                    steps_reached[step] += 1
                    broker.killed = True
                    died = True
                elif step is None:
                    due = (now >= soon_at) if soon[k] else (progress >= kill_at[k] or not working())
                    if due and not soon[k]:
                        crossed_at = now if crossed_at is None else crossed_at
                        due = now >= crossed_at + jitter
                    if due:
                        kills += 1
                        kills_before_serving += broker.kill9()
                        died = True
                elif now - armed_since > FORCED_STEP_TIMEOUT_S or (
                        not working() and not (step.startswith("load.") and not broker.ready.is_set())):
                    steps_missed[step] += 1             # not reached while they worked: a random kill instead
                    kills += 1
                    kills_before_serving += broker.kill9()
                    died = True
                if died:
                    k += 1
                    deadline = time.monotonic() + WORKERS_DEADLINE_S
                    time.sleep(rng.uniform(0.0, 1.0))
                    broker.spawn(armed(k))
                    armed_since = restarted_at = time.monotonic()
                    soon_at = restarted_at + rng.uniform(0.0, 1.5)
                    crossed_at, jitter = None, rng.uniform(0.0, 0.3)
                    continue
            else:
                check_broker()
                if not broker.ready.is_set() and not broker.wait_ready():
                    check_broker()
                    raise _Abort(f"the broker did not start after {len(plan)} deaths: {broker.log_text()[-3000:]}")
            # the workers' disruptions
            while disruptions and progress >= disruptions[0][0]:
                _, which, kind = disruptions.pop(0)
                slot = slots[which]
                if not slot.running():
                    continue
                time.sleep(rng.uniform(0.0, 0.3))
                index = len(slot.children) - 1
                if not any(line.startswith("READY ") for line in slot.current.lines):
                    # stopped before its InitProducerId completed, it would be the newest producer of the slot
                    # once resumed (fencing the one started after it, rightly): a zombie only once initialised
                    kind = "kill"
                if kind == "kill":
                    slot.killed.add(index)
                    slot.current.proc.kill()
                    slot.current.wait(30)
                    worker_kills += 1
                    time.sleep(rng.uniform(0.0, 1.0))
                else:
                    slot.current.proc.send_signal(signal.SIGSTOP)
                    slot.zombies[index] = time.monotonic() + rng.uniform(1.0, 3.0)
                slot.spawn()
                deadline = time.monotonic() + WORKERS_DEADLINE_S
            # zombies resumed; the workers' exits
            for slot in slots:
                for index, when in list(slot.zombies.items()):
                    if index not in slot.resumed and time.monotonic() >= when:
                        slot.children[index].proc.send_signal(signal.SIGCONT)
                        slot.resumed.add(index)
                if slot.done:
                    continue
                rc = slot.current.proc.poll()
                if rc is None:
                    continue
                slot.current.wait(30)
                last = slot.current.lines[-1] if slot.current.lines else ""
                if rc == 0:
                    slot.done = True
                elif rc == EXIT_FATAL and slot.resumed and last.startswith("FATAL ") and INSTANCE_FENCED in last:
                    # a resumed zombie's consumer rejoined with the slot's group.instance.id, which fences the
                    # newer member (static membership): the slot's worker is started again
                    instance_fenced += 1
                    slot.spawn()
                elif rc == EXIT_FATAL and last.startswith("FATAL ") and INSTANCE_FENCED in last and \
                        fenced_after_session_timeout(slot.current.stderr()):
                    # its consumer's session timed out first (the broker away or slow): librdkafka's heartbeats
                    # with an empty member id are fenced while the coordinator holds the instance's member, as
                    # Kafka's are; the slot's worker is started again, as a supervisor restarts an application
                    session_fenced += 1
                    slot.spawn()
                else:
                    violations.append(f"worker {slot.current.name} exited {rc} on its own: "
                                      f"{slot.current.lines[-3:]} {slot.current.stderr()[-1500:]}")
                    slot.done = True
            time.sleep(0.01)
        if not broker.wait_ready():               # restarted after the workers were done: not serving yet
            check_broker()
            raise _Abort(f"the broker did not start after {len(plan)} deaths: {broker.log_text()[-3000:]}")
        # the zombies: resumed, each must end (any way: fenced, or done) or is killed
        zombie_deadline = time.monotonic() + ZOMBIE_DEADLINE_S
        for slot in slots:
            for index in slot.zombies:
                child = slot.children[index]
                if index not in slot.resumed:
                    child.proc.send_signal(signal.SIGCONT)
                    slot.resumed.add(index)
                rc = child.wait(max(1.0, zombie_deadline - time.monotonic()))
                if rc is None:
                    child.close()
                last = child.lines[-1] if child.lines else ""
                if rc == EXIT_FATAL and last.startswith("FATAL ") and any(e in last for e in FENCED_ERRORS):
                    zombie_ends["fenced"] += 1
                elif rc == 0:
                    zombie_ends["done"] += 1        # resumed after the work was done: nothing left to fence
                else:
                    zombie_ends[f"exit {rc}: {last[:120]}" if rc is not None else "killed"] += 1
        if broker.died() is not None:
            violations.append(f"the broker exited on its own ({broker.died()})")
        consumed = consume_committed(broker.address, OUTPUT, out_parts)
        rc = broker.stop()
        if rc != 0:
            violations.append(f"the broker's clean stop (SIGTERM) ended with {rc}")
        log_text = broker.log_text()
        if "Traceback" in log_text:
            at = log_text.index("Traceback")
            violations.append(f"a traceback in the broker's log: {log_text[max(0, at - 300):at + 2500]}")
        verify = subprocess.run([sys.executable, "-m", "storage_engine", "--config", str(cfg_path), "verify"],
                                cwd=str(REPO), env=env, capture_output=True, text=True, timeout=300)
        (work / "verify.out").write_text(verify.stdout + verify.stderr)
        if verify.returncode != 0:
            violations.append(f"verify exited {verify.returncode}: {(verify.stdout + verify.stderr)[-2000:]}")
        store = read_store(cfg_path, {INPUT: in_parts, OUTPUT: out_parts})
        inputs = {(p, o): v for p, o, v in store[INPUT][0]}
        every, committed = store[OUTPUT]
        committed_out, aborted_out = len(committed), len(every) - len(committed)
        violations += check_output(inputs, records, committed)
        if sorted(consumed) != sorted(committed):
            violations.append(f"the read_committed consumer read {len(consumed)} output records, the engine "
                              f"{len(committed)} (first difference: "
                              f"{sorted(set(consumed) ^ set(committed))[:3]})")
        if store["open"]:
            violations.append(f"a transaction left open at the end in {store['open']}")
        reported = committed_records(slots)
        if reported != len(committed):
            # a worker's TXN line is printed after commit_transaction returned: a worker killed between the
            # commit and its line reports fewer; more than committed would be a commit acknowledged but lost
            if reported > len(committed):
                violations.append(f"the workers reported {reported} output records committed, the output holds "
                                  f"{len(committed)}")
    except _Abort as exc:
        violations.append(str(exc))
    except Exception as exc:  # noqa: BLE001 - any failure of the trial is the finding
        violations.append(f"the trial failed: {type(exc).__name__}: {exc}")
    finally:
        for slot in slots:
            for child in slot.children:
                if child.proc.poll() is None:
                    child.proc.send_signal(signal.SIGCONT)
                child.close()
        broker.close()
    zombies = sum(len(s.zombies) for s in slots)
    result = TrialResult(trial, seed, inputs_written, committed_out, aborted_out, len(worker_lines(slots, "TXN")),
                         len(worker_lines(slots, "ABORT")), kills, kills_before_serving, steps_reached,
                         steps_missed, worker_kills, zombies, zombie_ends, instance_fenced, session_fenced,
                         violations, round(time.monotonic() - t0, 2))
    if violations and keep_root is not None:
        dest = keep_root / f"txn-trial-{trial}-seed-{seed}"
        shutil.copytree(work, dest, dirs_exist_ok=True)
        (dest / "violations.json").write_text(json.dumps(
            {"trial": trial, "seed": seed, **info, "kills": kills, "steps_reached": dict(steps_reached),
             "worker_kills": worker_kills, "zombies": zombies, "violations": violations}, indent=2))
        result.kept = str(dest)
    shutil.rmtree(work, ignore_errors=True)
    return result


def run(trials: int, seed: int, keep_root: Path | None, *, out: Callable[[str], Any] = print) -> dict[str, Any]:
    """Run ``trials`` transaction trials; returns the totals."""
    started = time.monotonic()
    totals: dict[str, Any] = {"trials": 0, "inputs": 0, "committed": 0, "aborted": 0, "txns_committed": 0,
                              "txns_aborted": 0, "kills": 0, "kills_before_serving": 0,
                              "steps_reached": Counter(), "steps_missed": Counter(), "worker_kills": 0,
                              "zombies": 0, "zombie_ends": Counter(), "instance_fenced": 0, "session_fenced": 0,
                              "violations": 0,
                              "failed_trials": []}
    rng = random.Random(seed)
    for trial in range(trials):
        trial_seed = rng.randrange(2**31)
        res = run_trial(trial, trial_seed, keep_root)
        totals["trials"] += 1
        for key in ("inputs", "committed", "aborted", "txns_committed", "txns_aborted", "kills",
                    "kills_before_serving", "worker_kills", "zombies", "instance_fenced", "session_fenced"):
            totals[key] += getattr(res, key)
        totals["steps_reached"].update(res.steps_reached)
        totals["steps_missed"].update(res.steps_missed)
        totals["zombie_ends"].update(res.zombie_ends)
        if res.violations:
            totals["violations"] += len(res.violations)
            totals["failed_trials"].append({"trial": trial, "seed": trial_seed, "violations": res.violations,
                                            "kept": res.kept})
            out(f"trial {trial} (seed {trial_seed}): {len(res.violations)} violation(s), kept in {res.kept}")
            for v in res.violations:
                out(f"    {v[:2000]}")
        elif (trial + 1) % 10 == 0:
            out(f"trial {trial + 1}/{trials}: ok ({res.inputs} inputs, {res.committed} committed outputs, "
                f"{res.aborted} aborted, {res.kills + sum(res.steps_reached.values())} broker deaths, "
                f"{res.worker_kills} worker kills, {res.zombies} zombies, {res.seconds} s)")
    totals["seconds"] = round(time.monotonic() - started, 1)
    return totals


def summary(totals: dict[str, Any]) -> str:
    """The totals in one line (then the named steps the broker died at, and those never reached)."""
    reached: Counter[str] = totals["steps_reached"]
    deaths = totals["kills"] + sum(reached.values())
    line = (f"txn torture: {totals['trials']} trials, {totals['inputs']} input records, {totals['committed']} "
            f"committed outputs checked ({totals['txns_committed']} transactions), {totals['aborted']} aborted "
            f"outputs ({totals['txns_aborted']} transactions aborted by the workers), {deaths} broker kills "
            f"({totals['kills']} SIGKILL at random moments, {totals['kills_before_serving']} of them before the "
            f"restarted broker served; {sum(reached.values())} at a named step), {totals['worker_kills']} worker "
            f"kills, {totals['zombies']} zombie workers ({totals['zombie_ends']['fenced']} ended fenced; "
            f"{totals['instance_fenced']} workers started again after a zombie took their group.instance.id, "
            f"{totals['session_fenced']} after their consumer was fenced following its own session timeout), "
            f"{totals['violations']} violations, {totals['seconds']} s")
    line += "\n  died at: " + (", ".join(f"{k} {v}" for k, v in sorted(reached.items())) or "-")
    line += "\n  zombies ended: " + (", ".join(f"{k} {v}" for k, v in sorted(totals["zombie_ends"].items())) or "-")
    if totals["steps_missed"]:
        line += "\n  armed but not reached while the workers worked (killed at random instead): " + ", ".join(
            f"{k} {v}" for k, v in sorted(totals["steps_missed"].items()))
    return line


def main(trials: int, seed: int, keep_root: Path) -> int:
    """``python -m torture --txn``: prints failing trials as they happen and the summary; 1 if any violation."""
    keep_root.mkdir(parents=True, exist_ok=True)
    totals = run(trials, seed, keep_root, out=lambda s: print(s, flush=True))
    print(summary(totals), flush=True)
    return 1 if totals["violations"] else 0
