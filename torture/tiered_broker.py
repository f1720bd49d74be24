"""The ``serve`` broker of a tiered torture trial (:mod:`torture.tiered`): ``python -m storage_engine --config CFG
serve`` on the trial's log dir with the trial's tiered config (the same object store and bucket), on a port of its
own (the first start binds port 0, every restart the same port), killed with SIGKILL at random moments and
restarted after 0-1 s while the appender appends, the tier job copies and expires, and a Kafka client
(:mod:`torture.tiered_kafka`) reads both topics from offset 0 through it.

What its log says is checked after the trial (:meth:`TrialBroker.log_violations`): a remote read the broker
failed because an object was damaged, or was missing from ``tiered`` (nothing of it is ever deleted), is a
violation, as the engine-side consumer's checks have it; a read failed because the object store was down or
failing (killed: connection refused, or an S3 ``InternalError`` while its processes die or start again; the
client retries), or because remote retention deleted an object of ``tiered-retained`` while the fetch read it, is
counted. Any traceback in its log (an error no handler expected) is a violation. A broker that exits on its own, does not start within 60 s or
does not stop cleanly on SIGTERM (exit 0) is a violation too.
"""
from __future__ import annotations

import random
import re
import time
from pathlib import Path

from torture.processes import Broker
from torture.tiered_child import TIERED

REMOTE_FAILED = re.compile(r"fetch of (?P<topic>\S+)-(?P<partition>\d+) at offset (?P<offset>\d+) from remote "
                           r"storage failed: (?P<error>.*)$")
START_TIMEOUT_S = 60.0


class TrialBroker:
    """The broker process of one trial, its deaths and its restarts."""

    def __init__(self, cfg_path: Path, work: Path, env: dict[str, str]):
        self.broker = Broker(cfg_path, work, env)
        self.restart_at: float | None = None
        self.kill_again: float | None = None    # seconds after the restart: a kill that may come before it serves
        self.kill_at: float | None = None
        self.kills = 0
        self.kills_before_serving = 0
        self.violations: list[str] = []

    @property
    def address(self) -> str:
        return self.broker.address

    def start(self) -> bool:
        """The first start, waited for; False (and a violation) if it does not serve."""
        self.broker.spawn()
        if self.broker.wait_ready(START_TIMEOUT_S):
            return True
        self.violations.append(f"the broker did not start: {self.broker.log_tail()}")
        return False

    def running(self) -> bool:
        return self.broker.proc is not None and self.broker.proc.poll() is None

    def kill9(self, rng: random.Random) -> None:
        """SIGKILL now (possibly before a restart served), restart after 0-1 s (:meth:`tick`); one kill in three
        (not itself such a second kill) is followed by another 0-1.5 s after the restart, which often lands while
        the restarted broker opens the log dir and rebuilds its remote view, before it serves."""
        if not self.running():
            return
        self.kills += 1
        self.kills_before_serving += self.broker.kill9()
        self.restart_at = time.monotonic() + rng.uniform(0.0, 1.0)
        again = self.kill_at is None and self.kill_again is None and rng.random() < 1 / 3
        self.kill_again = rng.uniform(0.0, 1.5) if again else None
        self.kill_at = None

    def tick(self, rng: random.Random) -> None:
        """A due restart or second kill; a broker that exited on its own is a violation, and is restarted."""
        rc = self.broker.died()
        if rc is not None:
            self.violations.append(f"the broker exited on its own ({rc}): {self.broker.log_tail()}")
            self.broker.killed = True
            self.restart_at = time.monotonic()
        now = time.monotonic()
        if self.restart_at is not None and now >= self.restart_at:
            self.restart_at = None
            self.broker.spawn()
            if self.kill_again is not None:
                self.kill_at, self.kill_again = now + self.kill_again, None
        elif self.kill_at is not None and now >= self.kill_at:
            self.kill9(rng)

    def end(self, kill: bool) -> bool:
        """The end of the trial: SIGKILL (True if it was running), or SIGTERM and a clean exit expected."""
        self.restart_at = self.kill_at = self.kill_again = None
        if not self.running():
            return False
        if kill:
            self.broker.kill9()
            return True
        if not self.broker.wait_ready(START_TIMEOUT_S):
            self.violations.append(f"a restarted broker did not serve within {START_TIMEOUT_S:.0f} s: "
                                   f"{self.broker.log_tail()}")
        rc = self.broker.stop()
        if rc != 0:
            self.violations.append(f"the broker's clean stop (SIGTERM) ended with {rc}: {self.broker.log_tail()}")
        return False

    def close(self) -> None:
        self.broker.close()

    def log_violations(self) -> tuple[list[str], int]:
        """(violations in the broker's log, remote fetches that failed because the object store was down or failing,
        or remote retention deleted the object)."""
        bad, down = [], 0
        text = self.broker.log_text()
        lines = text.splitlines()
        tracebacks = [i for i, line in enumerate(lines) if line.startswith("Traceback ")]
        for line in lines:
            match = REMOTE_FAILED.search(line)
            if match is None:
                continue
            error = match["error"]
            if " is damaged" in error or (" is missing" in error and match["topic"] == TIERED):
                bad.append(line)
            else:       # the store down or failing (killed, or answering 500 while its processes die or start),
                down += 1       # or an object of tiered-retained deleted by remote retention while the fetch read

        out = []
        if tracebacks:
            first = tracebacks[0]
            out.append(f"the broker logged {len(tracebacks)} traceback(s), the first: "
                       + "\n".join(lines[max(0, first - 2):first + 30]))
        if bad:
            out.append(f"the broker found {len(bad)} remote object(s) damaged, or of '{TIERED}' missing, e.g. "
                       f"{bad[:2]}")
        return out, down
