"""Kafka's own Java producer (kafka-clients 3.9.1) as a latency client: one JVM running
``benchmarks/java/ProduceLatency.java`` (compiled on first use by include/java_clients.py), one command per line.

:class:`JavaProducer` keeps the JVM for a whole latency section, so the peak runs warm its JIT before the paced
runs; :meth:`JavaProducer.peak` and :meth:`JavaProducer.paced` return the program's figures (records, errors,
p50 / p99 / p99.9 / max in ms of send callback minus ``send()`` per record, records/s) with the JVM's CPU over the
command added as ``client_cpu_s``. A command the program could not run, a record that failed, or callbacks whose
offsets are not exactly 1..N (offset 0 is the program's warm-up record) raise :class:`RuntimeError` naming it.
"""
from __future__ import annotations

import json
import os
import subprocess
import threading
from pathlib import Path
from typing import Any, TextIO

from include import java_clients

SOURCES = Path(__file__).resolve().parent / "java"
MAIN_CLASS = "ProduceLatency"
ANSWER_S = 600.0       # a command not answered by then is a hung client, not a slow one
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (every thread)."""
    with open(f"/proc/{pid}/stat") as f:
        text = f.read()
    fields = text[text.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS


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

    def peak(self, topic: str, acks: str, records: int, value_bytes: int) -> dict[str, Any]:
        """``records`` records to the fresh topic ``topic``, unpaced."""
        return self._call(f"peak {topic} {acks} {records} {value_bytes}", records)

    def paced(self, topic: str, acks: str, rate: float, seconds: float, value_bytes: int) -> dict[str, Any]:
        """``rate * seconds`` records to the fresh topic ``topic`` at ``rate`` records/s."""
        return self._call(f"paced {topic} {acks} {rate!r} {seconds!r} {value_bytes}", max(1, int(rate * seconds)))

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
