"""Kafka's own Java producer (kafka-clients 3.9.1) as a latency client: one JVM running
``benchmarks/java/ProduceLatency.java`` (compiled on first use by include/java_clients.py), one command per line.

:class:`JavaProducer` keeps the JVM for a whole latency section, so the peak runs warm its JIT before the paced
runs; :meth:`JavaProducer.peak` and :meth:`JavaProducer.paced` return the program's figures (records, errors,
p50 / p99 / p99.9 / max in ms of send callback minus ``send()`` per record, records/s) with the JVM's CPU over the
command added as ``client_cpu_s``. A command the program could not run, a record that failed, or callbacks whose
offsets are not exactly 1..N (offset 0 is the program's warm-up record) raise :class:`RuntimeError` naming it.

Alone, against a broker of its own (default configuration, a log dir under ``var/bench/tmp``), with producer
settings beyond the client's defaults (e.g. the OpenMessaging Benchmark's ``kafka-latency.yaml``: ``--set
linger.ms=1 --set batch.size=131072``)::

    python -m benchmarks.java_latency [--acks 1,all] [--rounds N] [--seconds S] [--peak-records N] [--rate R]
                                      [--set KEY=VALUE ...]

prints, per acks, each unpaced round (its peak; skipped with ``--rate``) and each round paced at half the best
peak (or at ``--rate``), the rounds alternating acks: records/s, p50 / p99 / p99.9 / max, produce requests, the
broker's and the JVM's CPU and the load average.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, TextIO

from include import java_clients

from .harness import process_cpu_s

SOURCES = Path(__file__).resolve().parent / "java"
MAIN_CLASS = "ProduceLatency"
ANSWER_S = 600.0       # a command not answered by then is a hung client, not a slow one


def _words(settings: dict[str, str] | None) -> str:
    words = [f"{k}={v}" for k, v in (settings or {}).items()]
    bad = [w for w in words if not w.split("=", 1)[0] or any(c.isspace() for c in w)]
    if bad:
        raise ValueError(f"producer settings must be KEY=VALUE without spaces: {bad}")
    return "".join(f" {w}" for w in words)


class JavaProducer:
    """The JVM, for ``bootstrap``; its stderr (the client's log) goes to ``log_path``."""

    def __init__(self, bootstrap: str, log_path: Path):
        self.log_path = log_path
        self._log: TextIO = open(log_path, "w")
        self.proc = subprocess.Popen(java_clients.command(SOURCES, MAIN_CLASS, bootstrap), stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self._log, text=True, bufsize=1)

    def __enter__(self) -> "JavaProducer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def peak(self, topic: str, acks: str, records: int, value_bytes: int,
             settings: dict[str, str] | None = None) -> dict[str, Any]:
        """``records`` records to the fresh topic ``topic``, unpaced; ``settings``: producer configs beyond the
        client's defaults (none in the benchmark's rows)."""
        return self._call(f"peak {topic} {acks} {records} {value_bytes}{_words(settings)}", records)

    def paced(self, topic: str, acks: str, rate: float, seconds: float, value_bytes: int,
              settings: dict[str, str] | None = None) -> dict[str, Any]:
        """``rate * seconds`` records to the fresh topic ``topic`` at ``rate`` records/s."""
        return self._call(f"paced {topic} {acks} {rate!r} {seconds!r} {value_bytes}{_words(settings)}",
                          max(1, int(rate * seconds)))

    def _call(self, line: str, expected: int) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        cpu_before = process_cpu_s(self.proc.pid)
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        got: list[str] = []
        stdout = self.proc.stdout
        reader = threading.Thread(target=lambda: got.append(stdout.readline()), daemon=True)
        reader.start()
        reader.join(ANSWER_S)
        if not got or not got[0]:
            self.proc.kill()
            raise RuntimeError(f"the Java producer gave no answer to {line!r} in {ANSWER_S:.0f} s: "
                               f"{self.stderr()[-3000:]}")
        answer: dict[str, Any] = json.loads(got[0])
        if "error" in answer:
            raise RuntimeError(f"the Java producer failed {line!r}: {answer['error']}\n{self.stderr()[-3000:]}")
        if answer["errors"] or answer["records"] != expected or not answer["offsets_exact"]:
            raise RuntimeError(f"the Java producer's {line!r}: {answer['records']} records sent of {expected}, "
                               f"{answer['errors']} failed (first: {answer['first_error']}), callbacks' offsets "
                               f"{'' if answer['offsets_exact'] else 'not '}exactly 1..{answer['records']}")
        answer["client_cpu_s"] = process_cpu_s(self.proc.pid) - cpu_before
        return answer

    def stderr(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors="replace")

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.write("exit\n")
                self.proc.stdin.close()
                self.proc.wait(60)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._log.close()


def _setting(text: str) -> tuple[str, str]:
    key, eq, value = text.partition("=")
    if not key or not eq:
        raise argparse.ArgumentTypeError(f"a producer setting is KEY=VALUE, got {text!r}")
    return key, value


def parser() -> argparse.ArgumentParser:
    """The command line of ``python -m benchmarks.java_latency``."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.java_latency", description=__doc__.splitlines()[0])
    p.add_argument("--acks", default="1,all")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--peak-records", type=int, default=200_000)
    p.add_argument("--rate", type=float, default=0.0, help="records/s (default: half the best unpaced round)")
    p.add_argument("--value-bytes", type=int, default=1024)
    p.add_argument("--set", action="append", default=[], type=_setting, metavar="KEY=VALUE",
                   help="a producer setting beyond the client's defaults (repeatable)")
    return p


def main(argv: list[str] | None = None) -> int:
    from confluent_kafka.admin import AdminClient

    from . import wire
    from .harness import TMP_ROOT, Context, scratch_dir

    args = parser().parse_args(argv)
    settings = dict(args.set)
    acks_list = args.acks.split(",")
    with scratch_dir(Context(quick=False, repeats=1, tmp_root=TMP_ROOT), "java-latency") as work:
        os.makedirs(os.path.join(work, "logs"))
        with wire.BrokerProcess(work, os.path.join(work, "logs")) as broker, \
                JavaProducer(broker.bootstrap, Path(work) / "java.log") as java:
            admin: Any = AdminClient(wire._client_config(broker))
            n = 0

            def one(kind: str, acks: str, rate: float) -> dict[str, Any]:
                nonlocal n
                n += 1
                topic, load = f"java-{kind}-{n}", os.getloadavg()[0]
                wire._create_topic(admin, topic)
                before = broker.cpu_s()
                if kind == "peak":
                    f = java.peak(topic, acks, args.peak_records, args.value_bytes, settings)
                else:
                    f = java.paced(topic, acks, rate, args.seconds, args.value_bytes, settings)
                cpu = broker.cpu_s() - before
                batches = broker.partition_batches(topic)
                if wire._count(batches) != f["records"] + 1:
                    raise RuntimeError(f"{topic}: the log holds {wire._count(batches)} records, expected "
                                       f"{f['records'] + 1}")
                wire._delete_topic(admin, topic)
                print(f"{kind:5} acks={acks:3} {f['records_per_s']:9,.0f} records/s (sent at "
                      f"{f['achieved_records_per_s']:,.0f}) p50 {f['p50_ms']:8.2f} p99 {f['p99_ms']:8.2f} p99.9 "
                      f"{f['p999_ms']:8.2f} max {f['max_ms']:8.2f} ms, {len(batches) - 1:,} requests, broker CPU "
                      f"{cpu:.2f} s, JVM CPU {f['client_cpu_s']:.2f} s, load {load:.2f}", flush=True)
                return f

            print(f"kafka-clients, settings beyond its defaults: {settings or 'none'}; load average "
                  f"{os.getloadavg()[0]:.2f}", flush=True)
            rates = {acks: args.rate for acks in acks_list}
            if not args.rate:
                peaks: dict[str, list[float]] = {}
                for _ in range(args.rounds):
                    for acks in acks_list:
                        peaks.setdefault(acks, []).append(one("peak", acks, 0.0)["records_per_s"])
                rates = {acks: max(v) / 2 for acks, v in peaks.items()}
            for _ in range(args.rounds):
                for acks in acks_list:
                    one("paced", acks, rates[acks])
            admin = None        # its client handle goes before the broker does
    return 0


if __name__ == "__main__":
    sys.exit(main())
