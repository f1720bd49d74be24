"""A real broker for the tests: ``python -m storage_engine --config CFG serve`` in its own process, on free
ports, with its log dirs under the test's tmp dir. ``stop()`` is SIGTERM (a clean stop, exit 0 expected),
``kill()`` is SIGKILL; ``restart()`` starts a new process on the same ports and dirs. The process itself is
:class:`include.broker_launcher.BrokerLauncher`'s, as for the benchmarks, the torture trials and the demo."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import yaml

from include.broker_launcher import BrokerLauncher

ROOT = Path(__file__).resolve().parents[2]


class BrokerProcess(BrokerLauncher):
    def __init__(self, tmp_path: Path, *, broker: dict[str, Any] | None = None,
                 topics: dict[str, Any] | None = None, listeners: str = "PLAINTEXT://127.0.0.1:0",
                 log_dirs: int = 2):
        self.tmp = tmp_path
        self.log_dirs = [str(tmp_path / f"dir-{i}") for i in range(log_dirs)]
        config_path = tmp_path / "storage.yaml"
        conf = {"broker": {"log.dirs": self.log_dirs, "listeners": listeners, **(broker or {})},
                "topics": topics or {}}
        config_path.write_text(yaml.safe_dump(conf))
        # the first start listens as the config file says; later ones on the ports it got
        super().__init__(config_path, tmp_path / "broker.log", cwd=ROOT)

    @property
    def env(self) -> dict[str, str]:
        """Added to the next starts' environment (e.g. STORAGE_ENGINE_CRASH_AT)."""
        return self.extra_env

    @env.setter
    def env(self, value: dict[str, str]) -> None:
        self.extra_env = dict(value)

    @property
    def runs(self) -> int:
        return self.starts

    def address(self, protocol: str) -> str:
        return self.addresses[protocol]

    def stop(self, timeout: float = 30.0) -> int | None:
        return super().stop(timeout)

    def kill(self) -> None:
        assert self.proc is not None
        self.kill9()
        self.proc = None

    def restart(self) -> "BrokerProcess":
        return self.start()

    def close(self) -> None:
        super().close()
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
