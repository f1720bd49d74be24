"""The child processes of the server torture trials (:mod:`torture.server`, :mod:`torture.txn`): the broker
(``python -m storage_engine serve``, started, killed and restarted on one port) and a client child process whose
stdout lines are collected as they arrive."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO

REPO = Path(__file__).resolve().parent.parent
SERVING = re.compile(r"serving PLAINTEXT://(\S+)")
START_TIMEOUT_S = 60.0
CRASH_ENV = "STORAGE_ENGINE_CRASH_AT"   # storage_engine.crashpoints.ENV_VAR


class Broker:
    """``python -m storage_engine serve`` on the trial's store: the first start takes a free port, every later one
    the same; stderr goes to ``broker.log`` (all starts, one after the other)."""

    def __init__(self, cfg_path: Path, work: Path, env: dict[str, str]):
        self.cfg_path = cfg_path
        self.env = env
        self.listeners = "PLAINTEXT://127.0.0.1:0"
        self.address = ""
        self.log_path = work / "broker.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.ready = threading.Event()
        self.starts = 0
        self.mark = 0
        self.killed = False

    def spawn(self, crash_at: str | None = None) -> None:
        """Start a broker; ``crash_at`` (``<step>:<n>``) arms it to die at that step (SIGKILL by itself)."""
        self.starts += 1
        env = dict(self.env, **{CRASH_ENV: crash_at}) if crash_at else self.env
        with open(self.log_path, "ab") as log:
            log.write(f"--- start {self.starts}{f' ({CRASH_ENV}={crash_at})' if crash_at else ''}\n".encode())
            log.flush()
            self.mark = log.tell()
            proc = subprocess.Popen(
                [sys.executable, "-m", "storage_engine", "--config", str(self.cfg_path), "serve",
                 "--listeners", self.listeners],
                cwd=str(REPO), env=env, stdout=subprocess.PIPE, stderr=log)
        self.proc, self.killed = proc, False
        ready = self.ready = threading.Event()
        threading.Thread(target=self._pump, args=(proc, ready), daemon=True).start()

    def _pump(self, proc: subprocess.Popen[bytes], ready: threading.Event) -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            match = SERVING.search(raw.decode(errors="replace"))
            if match and not ready.is_set():
                self.address = match.group(1).split(",")[0]
                self.listeners = f"PLAINTEXT://{self.address}"   # later starts reuse the port
                ready.set()

    def wait_ready(self, timeout: float = START_TIMEOUT_S) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.ready.wait(0.05):
                return True
            if self.proc is None or self.proc.poll() is not None:
                return False
        return False

    def crash_step(self) -> str | None:
        """The step the current start died at by itself (its ``CRASHPOINT`` line), if any."""
        with open(self.log_path, "rb") as log:
            log.seek(self.mark)
            for line in log.read().decode(errors="replace").splitlines():
                if line.startswith("CRASHPOINT "):
                    return line.split()[1]
        return None

    def died(self) -> int | None:
        """The exit status if the broker exited without being killed by the harness."""
        if self.proc is None or self.killed:
            return None
        return self.proc.poll()

    def kill9(self) -> bool:
        """SIGKILL; True if it had not printed its ``serving`` line yet (killed during its start)."""
        assert self.proc is not None
        before_serving = not self.ready.is_set()
        self.killed = True
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)
        return before_serving

    def stop(self, timeout: float = 60.0) -> int | None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill9()
            return None

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.kill9()

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


class ProducerChild:
    """A :mod:`torture.producer` process (or another ``module`` taking ``--name``, its files named after
    ``role``); its stdout lines are collected as they arrive."""

    def __init__(self, name: str, work: Path, args: list[str], env: dict[str, str], *,
                 module: str = "torture.producer", role: str = "producer"):
        self.name = name
        self.stderr_path = work / f"{role}-{name}.stderr"
        self.stdout_path = work / f"{role}-{name}.stdout"
        self._stderr: IO[bytes] = open(self.stderr_path, "wb")
        self.proc = subprocess.Popen([sys.executable, "-m", module, "--name", name, *args],
                                     cwd=str(REPO), env=env, stdout=subprocess.PIPE, stderr=self._stderr)
        self.lines: list[str] = []
        self._pump = threading.Thread(target=self._read, daemon=True)
        self._pump.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            if raw.endswith(b"\n"):
                self.lines.append(raw.decode(errors="replace").rstrip("\n"))

    def wait(self, timeout: float) -> int | None:
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None
        self._pump.join(10)
        self._stderr.close()
        self.stdout_path.write_text("".join(line + "\n" for line in self.lines))
        return rc

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.wait(30)
        if not self._stderr.closed:
            self._stderr.close()

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")
