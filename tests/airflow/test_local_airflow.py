"""``make airflow`` (``python -m include.airflow_standalone``) for real: the api-server, scheduler, dag-processor and
triggerer started on a temporary AIRFLOW_HOME, every listening socket of every process they run read from
``/proc`` (loopback only by default; ``AIRFLOW_HOST=0.0.0.0`` opens the api-server and nothing else), and a run
triggered the way the trigger form triggers it (a logical date filled in, the interval the timetable aligns to an
earlier boundary) acting as of the moment it was triggered."""
from __future__ import annotations

import datetime
import ipaddress
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from .conftest import REPO, free_port
from .storage_fixtures import old_then_recent

pytestmark = [pytest.mark.e2e, pytest.mark.kills]     # stopping it ends its processes by signals


def children(pid: int) -> set[int]:
    """Every live descendant of ``pid`` (from /proc/<pid>/stat's parent field)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            parents[int(entry)] = int(stat[stat.rindex(")") + 2:].split()[1])
    out, todo = set(), [pid]
    while todo:
        p = todo.pop()
        for child, parent in parents.items():
            if parent == p and child not in out:
                out.add(child)
                todo.append(child)
    return out


def _address(hex_addr: str) -> str:
    if len(hex_addr) == 8:
        return str(ipaddress.IPv4Address(bytes.fromhex(hex_addr)[::-1]))
    words = [bytes.fromhex(hex_addr[i:i + 8])[::-1] for i in range(0, 32, 8)]
    return str(ipaddress.IPv6Address(b"".join(words)))


def listening_sockets(pids: set[int]) -> list[tuple[int, str, int]]:
    """(pid, address, port) of every TCP socket in LISTEN state that one of ``pids`` holds."""
    listen = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                if fields[3] == "0A":                                   # TCP_LISTEN
                    addr, port = fields[1].split(":")
                    listen[fields[9]] = (_address(addr), int(port, 16))
    out = []
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:[") and target[8:-1] in listen:
                out.append((pid, *listen[target[8:-1]]))
    return out


def is_loopback(address: str) -> bool:
    return ipaddress.ip_address(address).is_loopback


class Launcher:
    """``python -m include.airflow_standalone`` in a clean environment (none of the tests' Airflow settings)."""

    def __init__(self, tmp_path, storage, **env):
        self.home = tmp_path / "airflow-home"
        self.port = free_port()
        clean = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "PYTEST"))}
        clean.update(STORAGE_ENGINE_CONFIG=str(storage.config_path), **env)
        self.proc = subprocess.Popen([sys.executable, "-m", "include.airflow_standalone", "--home", str(self.home),
                                      "--port", str(self.port), "--timeout", "300"], cwd=REPO, env=clean,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.output: list[str] = []

    def wait_until_up(self) -> None:
        assert self.proc.stdout is not None   # stdout=PIPE
        for line in self.proc.stdout:
            self.output.append(line)
            if line.startswith("Airflow is up"):
                return
        raise AssertionError("the launcher exited before Airflow was up:\n" + "".join(self.output))

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGINT)                       # what Ctrl-C sends
        try:
            code = self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait(10)
        assert self.proc.stdout is not None
        self.output.extend(self.proc.stdout.readlines())
        return code

    def token(self) -> str:
        from include.airflow_standalone import api_token, read_password
        return api_token(self.port, "admin", read_password(self.home) or "")

    def api(self, method: str, path: str, token: str, body: dict | None = None, headers: dict | None = None):
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", method=method,
                                     data=None if body is None else json.dumps(body).encode(),
                                     headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json",
                                              **(headers or {})})
        with urllib.request.urlopen(req, timeout=30) as resp:
            return json.loads(resp.read())


@pytest.fixture
def partitions(storage):
    storage.produce("events", 0, old_then_recent(10, 5))
    storage.produce("events", 1, old_then_recent(10, 5))
    return storage


def epoch_ms(iso: str) -> int:
    when = datetime.datetime.fromisoformat(iso.replace("Z", "+00:00"))
    return int(when.timestamp()) * 1000 + when.microsecond // 1000


def test_nothing_listens_beyond_loopback_and_a_run_from_the_form_acts_as_of_its_trigger(tmp_path, partitions):
    from storage_maintenance.tasks.hooks import iso_ms

    airflow = Launcher(tmp_path, partitions)
    try:
        airflow.wait_until_up()
        assert any(f"api-server on 127.0.0.1:{airflow.port} (this machine only" in line for line in airflow.output)
        sockets = listening_sockets(children(airflow.proc.pid))
        assert any(port == airflow.port for _, _, port in sockets), sockets
        assert [s for s in sockets if not is_loopback(s[1])] == [], sockets

        token = airflow.token()
        deadline = time.monotonic() + 120
        while True:                                                 # the dag-processor parses dags/ first
            try:
                airflow.api("GET", "/api/v2/dags/log_flush", token)
                break
            except urllib.error.HTTPError:
                assert time.monotonic() < deadline, "log_flush was not parsed within 120 s"
                time.sleep(2)
        # What the trigger form sends: a logical date (filled in when the form opened) and the conf; the API
        # server stamps the trigger time (run_after) when the request arrives.
        filled_in = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(minutes=4)
        run = airflow.api("POST", "/api/v2/dags/log_flush/dagRuns", token,
                          {"logical_date": filled_in.isoformat(), "conf": {}},
                          headers={"Referer": f"http://localhost:{airflow.port}/dags/log_flush/trigger"})
        airflow.api("PATCH", "/api/v2/dags/log_flush", token, {"is_paused": False})
        run_id = run["dag_run_id"]
        deadline = time.monotonic() + 300
        while True:
            state = airflow.api("GET", f"/api/v2/dags/log_flush/dagRuns/{run_id}", token)["state"]
            if state in ("success", "failed"):
                break
            assert time.monotonic() < deadline, f"the run is still {state} after 300 s"
            sockets = listening_sockets(children(airflow.proc.pid))      # task processes included
            assert [s for s in sockets if not is_loopback(s[1])] == [], sockets
            time.sleep(2)
        assert state == "success"
        entry = airflow.api("GET", f"/api/v2/dags/log_flush/dagRuns/{run_id}/taskInstances/flush/xcomEntries/"
                                   "return_value?map_index=0", token)
        batch = json.loads(entry["value"]) if isinstance(entry["value"], str) else entry["value"]
        pressed_ms = epoch_ms(run["run_after"])
        assert (batch["as_of"], batch["as_of_source"]) == (iso_ms(pressed_ms), "trigger time (manual run)")
        assert batch["now_ms"] == pressed_ms
        # The interval the timetable gave the filled-in logical date ends earlier: that is not what it acted on.
        assert epoch_ms(run["data_interval_end"]) <= epoch_ms(filled_in.isoformat()) < pressed_ms
    finally:
        tree = children(airflow.proc.pid)
        code = airflow.stop()
    assert code == 0, "".join(airflow.output)
    time.sleep(1)
    assert not [p for p in tree if os.path.exists(f"/proc/{p}") and not _zombie(p)], "components left running"


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return True
    return stat[stat.rindex(")") + 2] == "Z"


def test_airflow_host_opens_the_api_server_and_nothing_else(tmp_path, partitions):
    airflow = Launcher(tmp_path, partitions, AIRFLOW_HOST="0.0.0.0")
    try:
        airflow.wait_until_up()
        assert any(f"api-server on 0.0.0.0:{airflow.port} (reachable from the network)" in line
                   for line in airflow.output)
        sockets = listening_sockets(children(airflow.proc.pid))
        assert [(addr, port) for _, addr, port in sockets if not is_loopback(addr)] == [("0.0.0.0", airflow.port)]
    finally:
        code = airflow.stop()
    assert code == 0, "".join(airflow.output)
