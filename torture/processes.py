"""The child processes of the server torture trials (:mod:`torture.server`, :mod:`torture.txn`): the broker
(``python -m storage_engine serve``, started, killed and restarted on one port) and a client child process whose
stdout lines are collected as they arrive."""
from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path
from typing import IO

from include.broker_launcher import BrokerLauncher

REPO = Path(__file__).resolve().parent.parent
CRASH_ENV = "STORAGE_ENGINE_CRASH_AT"   # storage_engine.crashpoints.ENV_VAR


class Broker(BrokerLauncher):
    """``python -m storage_engine serve`` on the trial's store (:class:`include.broker_launcher.BrokerLauncher`):
    the first start takes a free port, every later one the same; stderr goes to ``broker.log`` (all starts, one
    after the other, each after a ``--- start N`` line)."""

    def __init__(self, cfg_path: Path, work: Path, env: dict[str, str]):
        super().__init__(cfg_path, work / "broker.log", listeners="PLAINTEXT://127.0.0.1:0", env=env, cwd=REPO)
        self.cfg_path = cfg_path

    @property
    def address(self) -> str:
        return self.addresses.get("PLAINTEXT", "")

    def spawn(self, crash_at: str | None = None) -> None:  # type: ignore[override]
        """Start a broker; ``crash_at`` (``<step>:<n>``) arms it to die at that step (SIGKILL by itself)."""
        banner = f"--- start {self.starts + 1}{f' ({CRASH_ENV}={crash_at})' if crash_at else ''}"
        super().spawn({CRASH_ENV: crash_at} if crash_at else None, banner=banner)

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
