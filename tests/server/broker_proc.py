"""A real broker for the tests: ``python -m storage_engine --config CFG serve`` in its own process, on free
ports, with its log dirs under the test's tmp dir. ``stop()`` is SIGTERM (a clean stop, exit 0 expected),
``kill()`` is SIGKILL; ``restart()`` starts a new process on the same ports and dirs."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
_SERVING = re.compile(r"serving (.*)")


class BrokerProcess:
    def __init__(self, tmp_path: Path, *, broker: dict[str, Any] | None = None,
                 topics: dict[str, Any] | None = None, listeners: str = "PLAINTEXT://127.0.0.1:0",
                 log_dirs: int = 2):
        self.tmp = tmp_path
        self.log_dirs = [str(tmp_path / f"dir-{i}") for i in range(log_dirs)]
        self.config_path = tmp_path / "storage.yaml"
        conf = {"broker": {"log.dirs": self.log_dirs, "listeners": listeners, **(broker or {})},
                "topics": topics or {}}
        self.config_path.write_text(yaml.safe_dump(conf))
        self.listeners_arg: str | None = None
        self.proc: subprocess.Popen[str] | None = None
        self.addresses: dict[str, str] = {}
        self.log_path = tmp_path / "broker.log"
        self.runs = 0
        self.env: dict[str, str] = {}    # added to the next starts' environment (e.g. STORAGE_ENGINE_CRASH_AT)

    @property
    def bootstrap(self) -> str:
        return next(iter(self.addresses.values()))

    def address(self, protocol: str) -> str:
        return self.addresses[protocol]

    def start(self, timeout: float = 60.0) -> "BrokerProcess":
        cmd = [sys.executable, "-m", "storage_engine", "--config", str(self.config_path), "serve"]
        if self.listeners_arg:
            cmd += ["--listeners", self.listeners_arg]
        self.runs += 1
        log = open(self.log_path, "a")
        self.proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=log, text=True,
                                     env={**os.environ, "PYTHONUNBUFFERED": "1", **self.env})
        deadline = time.monotonic() + timeout
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line or time.monotonic() > deadline:
            self.proc.wait(5)
            raise RuntimeError(f"broker did not start (exit {self.proc.returncode}):\n{self.log_path.read_text()}")
        match = _SERVING.search(line)
        assert match, line
        self.addresses = {}
        for url in match.group(1).split(", "):
            proto, hostport = url.split("://")
            self.addresses[proto] = hostport
        # later starts reuse the same ports, so clients keep their bootstrap address across restarts
        self.listeners_arg = ",".join(f"{p}://{a}" for p, a in self.addresses.items())
        return self

    def stop(self, timeout: float = 30.0) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        rc = self.proc.wait(timeout)
        self.proc = None
        return rc

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(30)
        self.proc = None

    def restart(self) -> "BrokerProcess":
        return self.start()

    def log_text(self) -> str:
        return self.log_path.read_text() if self.log_path.exists() else ""

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)
        self.proc = None


def wait_until(what: str, check, timeout: float = 60.0):
    """``check()``'s first truthy result, polled every 0.1 s; fails naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)
