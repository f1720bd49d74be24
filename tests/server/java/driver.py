"""One JVM running Kafka's own Java client for a whole test file: java/Driver.java reads one JSON command per line
on stdin and answers each with one JSON line on stdout. :class:`JavaDriver` keeps that process and turns each
answer into a result or a :class:`JavaError` naming the Java exception's class (e.g.
``UnsupportedVersionException``, ``TopicAuthorizationException``), so tests assert what the Java client itself
raised. Clients are named: ``driver.call("admin", name="admin", config={...})`` makes one, later commands name it
(``client=`` for Admin calls, ``name=`` for producers and consumers). The commands are those of Clients.java and
AdminOps.java and AdminGroupOps.java (Admin calls carry the Admin method's name)."""
from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.server.broker_proc import BrokerProcess
from tests.server.java import build

ANSWER_S = 180.0     # a call the Java client has not answered by then is a hung client, not a slow one


class JavaError(Exception):
    """A command the Java client failed: ``kind`` is the exception's simple class name."""

    def __init__(self, kind: str, message: str):
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.message = message


class JavaDriver:
    def __init__(self, log_path: Path):
        self.log_path = log_path
        self._log = open(log_path, "wb")
        self.proc = subprocess.Popen(build.command("Driver"), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self._log, text=True, bufsize=1)

    def call(self, op: str, **args: Any) -> Any:
        """The command's result; JavaError if the Java client raised."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"op": op, **args}) + "\n")
        self.proc.stdin.flush()
        line: list[str] = []
        stdout = self.proc.stdout
        reader = threading.Thread(target=lambda: line.append(stdout.readline()), daemon=True)
        reader.start()
        reader.join(ANSWER_S)
        if not line or not line[0]:
            self.proc.kill()
            raise AssertionError(f"the Java driver gave no answer to {op} {args}: {self.stderr()[-3000:]}")
        answer = json.loads(line[0])
        if "error" in answer:
            raise JavaError(answer["error"], answer["message"])
        return answer["ok"]

    def error(self, op: str, **args: Any) -> JavaError:
        """The JavaError the command raises (an AssertionError if it succeeds)."""
        try:
            got = self.call(op, **args)
        except JavaError as exc:
            return exc
        raise AssertionError(f"{op} {args} succeeded ({got!r}) where an error was expected")

    def stderr(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors="replace")

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.write(json.dumps({"op": "exit"}) + "\n")
                self.proc.stdin.close()
                self.proc.wait(60)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        self._log.close()


def started(log_path: Path) -> JavaDriver:
    """A driver process, the sources compiled first if they changed; a missing JDK or jar fails (never skips)."""
    build.tools()
    build.build()
    return JavaDriver(log_path)


@contextmanager
def serving(tmp: Path, **broker_args: Any) -> Iterator[tuple[BrokerProcess, JavaDriver]]:
    """A broker (BrokerProcess's arguments) and a driver process beside it; both stopped at the end."""
    broker = BrokerProcess(tmp, **broker_args)
    broker.start()
    try:
        driver = started(tmp / "java.log")
        try:
            yield broker, driver
        finally:
            driver.close()
        assert broker.stop() == 0
    finally:
        broker.close()
