"""Broker restarts under a transactional consume-transform-produce worker: does ``sendOffsetsToTransaction``
stall, and does exactly-once hold? Run outside the suite (tests/server/test_txn_java.py is its small version):

    python -m tests.server.java.restarts --client java --trials 3 --restarts 5
    python -m tests.server.java.restarts --client librdkafka --trials 3 --restarts 5 [--recovery none]

A trial: a broker process (tests/server/broker_proc.py) on a fresh dir, ``--partitions`` input partitions holding
``--records`` records, one worker (``java``: java/TxnWorker.java on kafka-clients; ``librdkafka``:
tests/server/txn_worker.py on confluent-kafka, with ``metadata.recovery.strategy`` set by ``--recovery``, default
librdkafka's own ``rebootstrap``, and ``debug=eos,protocol,broker`` to its stderr). Each restart waits for a
commit after the previous one, then stops the broker, by SIGKILL and SIGTERM in turn, and starts it again on the
same port after 0-1 s. A restart is a stall when the worker commits nothing within ``--stall-s`` seconds of the
broker serving again; the stalled worker is then made to print its stack (the Python one only), killed and
started again, so the trial goes on. At the end the output is read ``read_committed``: each input record must be
there exactly once. One JSON line per restart and a summary per trial go to stdout; each trial's dir (broker
log, worker stderr) is kept under ``--keep``.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.server.broker_proc import BrokerProcess
from tests.server.java import build
from tests.typed import present

ROOT = Path(__file__).resolve().parents[3]
BROKER = {"transaction.state.log.num.partitions": 5, "offsets.topic.num.partitions": 5,
          "group.initial.rebalance.delay.ms": 0}
TIMEOUT = 60.0


class Worker:
    """A worker process of either client; its stdout events collected by a thread, stderr in a file per run."""

    def __init__(self, command: Callable[[], list[str]], tmp: Path, env: dict[str, str] | None = None):
        self.command, self.tmp, self.env = command, tmp, env
        self.proc: subprocess.Popen[str] | None = None
        self.events: list[dict] = []
        self.runs = 0
        self.committed: dict[int, int] = {}
        self.lock = threading.Lock()

    def start(self) -> None:
        self.runs += 1
        with open(self.err_path, "w") as err:
            self.proc = subprocess.Popen(self.command(), cwd=ROOT, stdout=subprocess.PIPE, stderr=err, text=True,
                                         env={**os.environ, **(self.env or {})})
        threading.Thread(target=self._read, args=(self.proc, self.runs), daemon=True).start()

    @property
    def err_path(self) -> Path:
        return self.tmp / f"worker-{self.runs}.err"

    def _read(self, proc: subprocess.Popen[str], run: int) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if not line.startswith("{"):
                continue
            event = {**json.loads(line), "run": run, "t": time.monotonic()}
            with self.lock:
                if event["event"] == "committed":
                    for p, o in event["offsets"].items():
                        self.committed[int(p)] = max(self.committed.get(int(p), 0), o)
                self.events.append(event)

    def commits(self) -> int:
        with self.lock:
            return sum(1 for e in self.events if e["event"] == "committed")

    def commits_since(self, t: float) -> list[dict]:
        with self.lock:
            return [e for e in self.events if e["event"] == "committed" and e["t"] >= t]

    def aborts_between(self, t0: float, t1: float) -> list[str]:
        """The reasons of the transactions aborted from ``t0`` to ``t1``."""
        with self.lock:
            return [e["reason"][:160] for e in self.events if e["event"] == "aborted" and t0 <= e["t"] <= t1]

    def exited(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def alive(self) -> bool:
        code = self.exited()
        assert code is None, f"the worker exited with {code} by itself: {self.report()}"
        return True

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)

    def report(self) -> str:
        with self.lock:
            tail = [e for e in self.events if e["event"] != "committed"][-8:]
        err = self.err_path.read_text(errors="replace")[-3000:] if self.err_path.exists() else ""
        return f"last events {tail}; stderr of run {self.runs} (end):\n{err}"


_LINE = re.compile(r"^%\d\|(?P<ts>[\d.]+)\|(?P<fac>[A-Z]+)\|(?P<client>[^|]+)\| \[thrd:(?P<thrd>[^\]]*)\]: (?P<msg>.*)$")
_SENT = re.compile(r"(?P<name>\S+): Sent (?P<req>\w+)Request \(.*CorrId (?P<corr>\d+)\)")
_RECV = re.compile(r"(?P<name>\S+): Received (?P<req>\w+)Response \(.*CorrId (?P<corr>\d+)")


def _requests(lines: list[re.Match[str]]) -> tuple[dict[str, int], list[str]]:
    """The requests sent in ``lines``, by type, and the types of those without a response there."""
    sent: dict[str, int] = {}
    waiting: dict[tuple[str, str], str] = {}
    for m in lines:
        if (x := _SENT.search(m["msg"])):
            sent[x["req"]] = sent.get(x["req"], 0) + 1
            waiting[(x["name"], x["corr"])] = x["req"]
        elif (x := _RECV.search(m["msg"])):
            waiting.pop((x["name"], x["corr"]), None)
    return sent, sorted(set(waiting.values()))


def librdkafka_stall(err_path: Path) -> dict:
    """What librdkafka's producer did (its ``debug=eos,protocol,broker`` log) in a ``send_offsets_to_transaction``
    call that never returned (the last one): the requests it sent once it had reconnected to the restarted broker
    (after its last refused or lost connection), by type, and those left without a response; whether it sent a
    TxnOffsetCommit, or a FindCoordinator other than its transaction coordinator queries; the re-bootstraps it
    made; and how many times a decommissioned broker handle logged that it was terminating."""
    lines = []
    for raw in err_path.read_text(errors="replace").splitlines():
        m = _LINE.match(raw)
        if m and "producer" in m["client"]:
            lines.append(m)
    calls = [i for i, m in enumerate(lines) if "Transactional API called: send_offsets_to_transaction" in m["msg"]]
    returns = [i for i, m in enumerate(lines) if "send_offsets_to_transaction return" in m["msg"]]
    if not calls or (returns and returns[-1] > calls[-1]):
        return {"send_offsets_blocked": False}
    lost = [i for i, m in enumerate(lines) if m["fac"] == "FAIL" and
            ("Connection refused" in m["msg"] or "Disconnected" in m["msg"])]
    start = max([calls[-1]] + lost)
    tail = lines[start:]
    sent, unanswered = _requests(tail)
    txn_queries = sum("Querying for transaction coordinator" in m["msg"] for m in tail)
    return {"send_offsets_blocked": True, "called_at": lines[calls[-1]]["ts"],
            "reconnected_at": lines[start]["ts"], "log_until": lines[-1]["ts"],
            "requests_sent_after_reconnect": sent, "unanswered_after_reconnect": unanswered,
            "add_offsets_ok": any("AddOffsetsToTxn response" in m["msg"] and "NO_ERROR" in m["msg"]
                                  for m in lines[calls[-1]:]),
            "txn_offset_commit_sent": any("Sent TxnOffsetCommitRequest" in m["msg"] for m in lines[calls[-1]:]),
            "find_coordinator_beyond_txn_queries": sent.get("FindCoordinator", 0) - txn_queries,
            "rebootstraps": sum("Starting re-bootstrap sequence" in m["msg"] for m in lines),
            "terminating_handle_lines": sum(m["fac"] == "TERMINATE" for m in lines[calls[-1]:])}


def create_topics(bootstrap: str, **partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    for future in admin.create_topics([NewTopic(t, n, 1) for t, n in partitions.items()]).values():
        future.result(TIMEOUT)


def fill_input(bootstrap: str, topic: str, partitions: int, records: int) -> dict[int, int]:
    """Record n (key and value ``n``) to partition n % partitions; the end offsets."""
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 20, "log_level": 3})
    for n in range(records):
        p.produce(topic, key=str(n).encode(), value=str(n).encode(), partition=n % partitions)
    assert p.flush(TIMEOUT) == 0
    return {q: len(range(q, records, partitions)) for q in range(partitions)}


def read_committed(bootstrap: str, topic: str, partitions: int) -> dict[int, list[str]]:
    """Every value of every partition of ``topic``, read ``read_committed`` from 0 to the last stable offset."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "checker", "isolation.level": "read_committed",
                  "enable.auto.commit": False, "enable.partition.eof": True, "log_level": 3})
    out: dict[int, list[str]] = {p: [] for p in range(partitions)}
    at_end: set[int] = set()
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        deadline = time.monotonic() + TIMEOUT
        while len(at_end) < partitions:
            assert time.monotonic() < deadline, f"{topic}: only partitions {sorted(at_end)} read to the end"
            msg = c.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                assert present(msg.error()).code() == KafkaError._PARTITION_EOF, msg.error()
                at_end.add(present(msg.partition()))
                continue
            at_end.discard(msg.partition())
            out[present(msg.partition())].append(present(msg.value()).decode())
    finally:
        c.close()
    return out


def exactly_once(output: dict[int, list[str]], ends: dict[int, int], partitions: int) -> dict:
    """Lost and duplicated input records in the committed output (value ``<p>:<offset>:<n>``)."""
    lost = duplicated = 0
    for q in range(partitions):
        expected = [f"{q}:{o}:{o * partitions + q}" for o in range(ends[q])]
        got = output[q]
        lost += len(set(expected) - set(got))
        duplicated += len(got) - len(set(got))
        assert set(got) <= set(expected), f"partition {q}: records that name no input record"
    return {"lost": lost, "duplicated": duplicated,
            "in_order": all(output[q] == [f"{q}:{o}:{o * partitions + q}" for o in range(ends[q])]
                            for q in range(partitions))}


def worker_for(client: str, spec: dict, recovery: str | None, tmp: Path) -> Worker:
    if client == "java":
        args = [f"{k}={v}" for k, v in spec.items() if k != "ends"]
        args.append("ends=" + ",".join(f"{p}:{o}" for p, o in sorted(spec["ends"].items())))
        args.append(f"work_ms={int(spec['work_s'] * 1000)}")
        return Worker(lambda: build.command("TxnWorker", *args), tmp)
    extra = {"debug": "eos,protocol,broker", "log_level": 7}
    if recovery is not None:
        extra["metadata.recovery.strategy"] = recovery
    else:
        extra["metadata.recovery.strategy"] = "rebootstrap"       # librdkafka's default, stated
    full = {**spec, "producer": extra, "consumer": {"metadata.recovery.strategy": extra["metadata.recovery.strategy"]}}
    return Worker(lambda: [sys.executable, str(ROOT / "tests" / "server" / "txn_worker.py"), json.dumps(full)], tmp)


def trial(args, n: int, rng: random.Random, out: Path) -> dict:
    tmp = out / f"{args.client}-{n}"
    tmp.mkdir(parents=True, exist_ok=True)
    broker = BrokerProcess(tmp, broker=BROKER).start()
    worker: Worker | None = None
    restarts: list[dict] = []
    try:
        create_topics(broker.bootstrap, **{"in": args.partitions, "out": args.partitions})
        ends = fill_input(broker.bootstrap, "in", args.partitions, args.records)
        spec = {"bootstrap": broker.bootstrap, "input": "in", "output": "out", "ends": ends, "group": "g",
                "instance": "w", "transactional_id": "w", "commit_every": args.commit_every,
                "work_s": args.work_ms / 1000}
        worker = worker_for(args.client, spec, args.recovery, tmp)
        w = worker
        w.start()
        stalls: list[dict] = []

        def next_commit(since: float, where: str) -> dict | None:
            """The worker's first commit after ``since``; None when it is done. A wait of ``--stall-s`` without
            one is a stall: the worker's stacks go to its stderr, it is killed and started again."""
            while True:
                deadline = time.monotonic() + args.stall_s
                while time.monotonic() < deadline:
                    got = w.commits_since(since)
                    if got:
                        return got[0]
                    if w.exited() is not None:
                        assert w.exited() == 0, f"the worker exited with {w.exited()}: {w.report()}"
                        return None
                    time.sleep(0.1)
                stall = {"trial": n, "stall": where, "stalled_s": args.stall_s, "stderr": str(w.err_path),
                         "last_events": [e["event"] for e in w.events[-3:]]}
                if args.client == "librdkafka" and w.proc is not None:
                    w.proc.send_signal(signal.SIGUSR1)          # the worker's stacks on its stderr
                    time.sleep(1)
                    stall["librdkafka"] = librdkafka_stall(w.err_path)
                elif w.proc is not None and shutil.which("jstack"):
                    with open(w.err_path, "a") as err:          # the Java threads' stacks
                        subprocess.run(["jstack", str(w.proc.pid)], stdout=err, stderr=err, timeout=60)
                stalls.append(stall)
                print(json.dumps(stall), flush=True)
                w.kill()
                w.start()

        for i in range(args.restarts):
            # a commit since the previous restart's first one (or the start)
            if next_commit(time.monotonic() if i else 0.0, f"before restart {i}") is None:
                break                       # done before every restart was made: --records too small
            time.sleep(rng.uniform(0, 0.5))
            how = "SIGKILL" if i % 2 == 0 else "SIGTERM"
            killed_at = time.monotonic()
            if how == "SIGKILL":
                broker.kill()
            else:
                assert broker.stop() == 0, "the broker's SIGTERM stop did not exit 0"
            time.sleep(rng.uniform(0, 1.0))
            stopped_s = round(time.monotonic() - killed_at, 2)
            broker.restart()
            served = time.monotonic()
            before = len(stalls)
            first = next_commit(served, f"after restart {i}")
            record = {"trial": n, "restart": i, "how": how, "stopped_s": stopped_s,
                      "down_s": round(served - killed_at, 2), "stalled": len(stalls) > before}
            if first is not None:
                record.update(first_commit_after_s=round(first["t"] - served, 2),
                              send_offsets_ms=first.get("send_offsets_ms"),
                              aborts=w.aborts_between(killed_at, first["t"]))
            restarts.append(record)
            print(json.dumps(record), flush=True)
        while next_commit(time.monotonic(), "after the last restart") is not None:
            pass
        result = exactly_once(read_committed(broker.bootstrap, "out", args.partitions), ends, args.partitions)
        assert broker.stop() == 0
    finally:
        if worker is not None:
            worker.kill()
        broker.close()
    summary = {"trial": n, "client": args.client, "restarts": len(restarts), "stalls": len(stalls),
               "stalls_right_after_a_restart": sum(r["stalled"] for r in restarts), "worker_runs": worker.runs,
               **result,
               "records": args.records}
    print(json.dumps(summary), flush=True)
    return summary


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--client", choices=["java", "librdkafka"], required=True)
    ap.add_argument("--recovery", choices=["none", "rebootstrap"], default=None,
                    help="librdkafka's metadata.recovery.strategy (default: its own default, rebootstrap)")
    ap.add_argument("--trials", type=int, default=1)
    ap.add_argument("--restarts", type=int, default=5)
    ap.add_argument("--records", type=int, default=20000)
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--commit-every", type=int, default=50)
    ap.add_argument("--work-ms", type=int, default=1)
    ap.add_argument("--stall-s", type=float, default=45.0)
    ap.add_argument("--seed", type=int, default=37)
    ap.add_argument("--keep", type=Path, default=ROOT / "var" / "txn-restarts")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    args.keep.mkdir(parents=True, exist_ok=True)
    out = Path(args.keep) / time.strftime("%Y%m%dT%H%M%S")
    sums = [trial(args, n, rng, out) for n in range(args.trials)]
    total = {"client": args.client, "recovery": args.recovery, "trials": len(sums),
             "restarts": sum(s["restarts"] for s in sums), "stalls": sum(s["stalls"] for s in sums),
             "lost": sum(s["lost"] for s in sums), "duplicated": sum(s["duplicated"] for s in sums),
             "records": sum(s["records"] for s in sums), "dir": str(out)}
    print(json.dumps(total), flush=True)
    return 0 if total["lost"] == total["duplicated"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
