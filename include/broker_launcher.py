"""Starting the broker as a child process, and free loopback ports: the one way the tests, the benchmarks, the
torture trials and the demo run ``python -m storage_engine --config CFG serve``.

:class:`BrokerLauncher` starts the process with its stdout on a pipe and its stderr appended to a log file. The
broker prints ``serving <protocol>://<host>:<port>, ...`` once every listener is bound; a thread reads stdout
for as long as the process lives (so the pipe never fills), and the first such line makes the broker *ready*:
its addresses are recorded, and every later start of the same launcher passes them as ``--listeners``, so a
restarted broker keeps its ports and clients keep their bootstrap address. ``stop()`` is SIGTERM (a clean close
of every log, exit 0 expected), ``kill9()`` is SIGKILL (a crash, for the tests and trials that kill it).

:func:`free_port` and :func:`free_ports` ask the kernel for unused loopback ports (bound to port 0, then
released). Another process may take such a port before its user binds it; for the broker, listening on port 0
itself (``PLAINTEXT://127.0.0.1:0``, the default here) avoids that race entirely.
"""
from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Self

REPO = Path(__file__).resolve().parent.parent
SERVING = re.compile(r"^serving (.+)$")
START_TIMEOUT_S = 60.0


def free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    """``n`` distinct ports free on ``host`` now: all are held at once while they are chosen."""
    socks: list[socket.socket] = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind((host, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def free_port(host: str = "127.0.0.1") -> int:
    """One port free on ``host`` now."""
    return free_ports(1, host)[0]


def parse_serving(line: str) -> dict[str, str] | None:
    """``{protocol: "host:port"}`` from the broker's ``serving ...`` line, in its order; None for another line."""
    match = SERVING.match(line.strip())
    if not match:
        return None
    out: dict[str, str] = {}
    for url in match.group(1).split(","):
        protocol, _, hostport = url.strip().partition("://")
        out[protocol] = hostport
    return out


class BrokerLauncher:
    """``python -m storage_engine --config CONFIG serve [--listeners ...]`` as a child process.

    ``listeners``: the ``--listeners`` of the first start (None: the config file's); later starts reuse the bound
    addresses. ``env``: the child's environment (None: this process's), plus ``extra_env`` (set between starts,
    e.g. ``STORAGE_ENGINE_CRASH_AT``) and ``PYTHONUNBUFFERED=1``. ``command``: what runs before ``--config``
    (a profiler's bootstrap, say). The log file collects the stderr of every start, one after the other."""

    def __init__(self, config_path: str | Path, log_path: str | Path, *, listeners: str | None = None,
                 env: Mapping[str, str] | None = None, cwd: str | Path = REPO,
                 command: Sequence[str] | None = None):
        self.config_path = Path(config_path)
        self.log_path = Path(log_path)
        self.listeners = listeners
        self.base_env = dict(env) if env is not None else None
        self.extra_env: dict[str, str] = {}
        self.cwd = Path(cwd)
        self.command = list(command) if command is not None else [sys.executable, "-m", "storage_engine"]
        self.proc: subprocess.Popen[bytes] | None = None
        self.ready = threading.Event()
        self.addresses: dict[str, str] = {}
        self.starts = 0
        self.mark = 0               # where the current start's stderr begins in the log file
        self.killed = False

    @property
    def bootstrap(self) -> str:
        """The first listener's ``host:port``."""
        return next(iter(self.addresses.values()))

    def argv(self) -> list[str]:
        argv = [*self.command, "--config", str(self.config_path), "serve"]
        return argv + ["--listeners", self.listeners] if self.listeners else argv

    def spawn(self, env: Mapping[str, str] | None = None, banner: str | None = None) -> None:
        """Start the process and return at once (:meth:`wait_ready` waits for it); ``env`` adds to this start's
        environment; ``banner`` is written to the log file first (a line naming the start)."""
        self.starts += 1
        environ = dict(os.environ if self.base_env is None else self.base_env)
        environ.update({"PYTHONUNBUFFERED": "1", **self.extra_env, **(env or {})})
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            if banner is not None:
                log.write(banner.rstrip("\n").encode() + b"\n")
                log.flush()
            self.mark = log.tell()
            proc = subprocess.Popen(self.argv(), cwd=str(self.cwd), env=environ, stdout=subprocess.PIPE,
                                    stderr=log)
        self.proc, self.killed = proc, False
        ready = self.ready = threading.Event()
        threading.Thread(target=self._pump, args=(proc, ready), daemon=True,
                         name=f"broker-stdout-{proc.pid}").start()

    def _pump(self, proc: subprocess.Popen[bytes], ready: threading.Event) -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            if ready.is_set():
                continue
            addresses = parse_serving(raw.decode(errors="replace"))
            if addresses:
                self.addresses = addresses
                self.listeners = ",".join(f"{p}://{a}" for p, a in addresses.items())   # later starts: same ports
                ready.set()

    def wait_ready(self, timeout: float = START_TIMEOUT_S) -> bool:
        """True once the current start printed its ``serving`` line; False if it exited first or ``timeout``
        seconds passed."""
        ready, proc = self.ready, self.proc
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if ready.wait(0.05):
                return True
            if proc is None or proc.poll() is not None:
                return ready.is_set()
        return False

    def start(self, timeout: float = START_TIMEOUT_S) -> Self:
        """Start and wait until ready; a start that fails is killed and raises, with the log's tail."""
        self.spawn()
        if not self.wait_ready(timeout):
            rc = self.proc.poll() if self.proc is not None else None
            self.kill9()
            raise RuntimeError(f"the broker did not start (exit {rc}, after up to {timeout:.0f} s); "
                               f"{self.log_path}:\n{self.log_tail()}")
        return self

    def stop(self, timeout: float = 60.0) -> int | None:
        """SIGTERM and wait: the exit status, or None when it did not stop within ``timeout`` (then SIGKILL)."""
        assert self.proc is not None, "the broker is not running"
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill9()
            return None
        self.proc = None
        return rc

    def kill9(self) -> bool:
        """SIGKILL and reap; True if the current start had not printed its ``serving`` line yet."""
        if self.proc is None:
            return False
        before_serving = not self.ready.is_set()
        self.killed = True
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)
        return before_serving

    def close(self) -> None:
        """Kill a process still running (a test's cleanup)."""
        if self.proc is not None and self.proc.poll() is None:
            self.kill9()

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])
