"""The cluster side of tests/cluster: the constants of the module, the cluster's processes (free ports, the
environment, waits that fail with the components' output, kills of a service's session, the processes of the
services), the api-server's REST API (:class:`Api`), the PostgreSQL metadata DB (:class:`MetadataDb`), the
:class:`Ctx` the tests get from the ``ctx`` fixture, and the copy of the artifacts. The Kafka client, the background
writer and socket sampler, and the records the tests write are in :mod:`tests.cluster.clients`.
"""
from __future__ import annotations

import atexit
import dataclasses
import importlib.util
import ipaddress
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from include.cluster.run import Cluster, session_members
from tests.airflow.test_local_airflow import is_loopback
from tests.paths import REPO

if TYPE_CHECKING:
    from tests.cluster.clients import Kafka

# Importing those helpers ran tests/airflow's conftest, which makes a temporary AIRFLOW_HOME that only its
# pytest_unconfigure removes, and only when pytest loads it for that folder's own tests: removed at exit either way.
atexit.register(shutil.rmtree, sys.modules["tests.airflow.conftest"]._AIRFLOW_HOME, True)


def _maintenance_dags() -> tuple[str, ...]:
    """The plugin's list of the maintenance DAGs, read from its file (which imports nothing: no Airflow here)."""
    spec = importlib.util.spec_from_file_location(
        "maintenance_dags", REPO / "plugins" / "storage_maintenance" / "maintenance_dags.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return tuple(module.MAINTENANCE_DAGS)


MAINTENANCE_DAGS = _maintenance_dags()      # in the order the demo runs them
ARTIFACTS = REPO / "var" / "test-artifacts" / "cluster"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
RUN_DEADLINE = 900          # s a DAG run may take on a loaded machine (a retry after a kill included)
HEARTBEAT_TIMEOUT = 30      # s without a task heartbeat before the scheduler fails (retries) the task
GROUPS = ("storage-a", "storage-b")
SUMMARY: dict = {}          # what each step saw, written to ARTIFACTS/summary.json


def q(value: str) -> str:
    return urllib.parse.quote(value, safe="")


# -- the cluster -----------------------------------------------------------------------------------------------------

def cluster_env(health_port: int) -> dict:
    """This process's environment without the settings of other tests or clusters, plus the test-only ones."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("AIRFLOW", "PYTEST", "STORAGE_MAINTENANCE_", "CLUSTER_"))
           and k not in ("STORAGE_ENGINE_CONFIG", "STORAGE_ENGINE_KEYMAP_DIR", "SPARK_CONF_DIR")}
    env.update({
        "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": str(HEARTBEAT_TIMEOUT),
        "AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE": "False",
        "AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_SERVER_PORT": str(health_port),
    })
    return env


def on_loopback(address: str) -> bool:
    """``is_loopback``, also for an IPv4 address in IPv6 form (``::ffff:127.0.0.1``, where Java listens)."""
    mapped = getattr(ipaddress.ip_address(address), "ipv4_mapped", None)
    return is_loopback(str(mapped) if mapped else address)


def tail(cluster: Cluster, name: str, lines: int = 40) -> str:
    try:
        text = (cluster.logs / f"{name}.log").read_text(errors="replace")
    except OSError as exc:
        return f"({exc})"
    return "\n".join(text.splitlines()[-lines:])


def tails(cluster: Cluster, *names: str, lines: int = 40) -> str:
    return "".join(f"\n--- last lines of {cluster.logs / (name + '.log')} ---\n{tail(cluster, name, lines)}"
                   for name in names)


def wait_for(what: str, check, timeout: float, cluster: Cluster, services=(), interval: float = 1.0, detail=None):
    """``check()``'s first truthy value, polled until ``timeout``; else fail naming ``what`` with ``detail()``
    and the last lines of ``services``' output."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not so after {timeout:.0f} s\n{detail() if detail else ''}"
                        f"{tails(cluster, *services)}")
        time.sleep(interval)


def kill_session(sid: int) -> list[str]:
    """SIGKILL every process of session ``sid`` at once (as a container dies): all are stopped first, so none
    forks, exits or notices the others dying in between. Returns what was killed."""
    stopped: dict[int, str] = {}
    while True:
        new = [p for p in session_members(sid) if p not in stopped]
        if not new:
            break
        for pid in new:
            try:
                stopped[pid] = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
                os.kill(pid, signal.SIGSTOP)
            except (ProcessLookupError, FileNotFoundError):
                stopped.pop(pid, None)
    for pid in stopped:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return list(stopped.values())


def kill_session_leftovers(sessions: list[int]) -> list[str]:
    """What is still running in the services' sessions after ``down()``, killed."""
    left = []
    for sid in sessions:
        if session_members(sid):
            left += [short(c) for c in kill_session(sid)]
    return left


def short(cmdline: str) -> str:
    """A killed process as the summary names it."""
    for tag in ("CoarseGrainedExecutorBackend", "deploy.worker.Worker", "pyspark.daemon", "SparkSubmit"):
        if tag in cmdline:
            return tag
    return cmdline[:80]


def service_pids(cluster: Cluster) -> set[int]:
    """Every live process of the cluster's services: their sessions (task processes and Spark's drivers, executors
    and daemons make process groups of their own in them) and their descendants (PostgreSQL's backends start
    sessions of their own)."""
    procs: dict[int, tuple[int, int]] = {}          # pid: (parent, session)
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[0] != "Z":
                procs[int(entry)] = (int(fields[1]), int(fields[3]))
    leaders = {e["pid"] for e in cluster.state["processes"].values()}
    out = {pid for pid, (_, sid) in procs.items() if pid in leaders or sid in leaders}
    while True:
        more = {pid for pid, (parent, _) in procs.items() if parent in out and pid not in out}
        if not more:
            return out
        out |= more


def session_cmdlines(sid: int) -> list[str]:
    out = []
    for pid in session_members(sid):
        try:
            out.append(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode())
        except OSError:
            pass
    return out


class Api:
    """The api-server's REST API, logged in as admin."""

    def __init__(self, cluster: Cluster):
        self.cluster = cluster
        self.url = f"http://127.0.0.1:{cluster.ports.airflow}"
        self._token: str | None = None

    @property
    def token(self) -> str:
        if self._token is None:
            self._token = self.call("POST", "/auth/token",
                                    {"username": "admin", "password": self.cluster.password()},
                                    auth=False)["access_token"]
        return self._token

    def call(self, method: str, path: str, body=None, *, auth: bool = True):
        headers = {"Content-Type": "application/json"}
        if auth:
            headers["Authorization"] = f"Bearer {self.token}"
        req = urllib.request.Request(self.url + path, method=method, headers=headers,
                                     data=None if body is None else json.dumps(body).encode())
        attempts = 5 if method in ("GET", "PATCH") else 1     # a loaded machine may drop a connection
        for attempt in range(attempts):
            try:
                with urllib.request.urlopen(req, timeout=60) as resp:
                    return json.loads(resp.read() or b"null")
            except urllib.error.HTTPError as exc:
                raise AssertionError(f"{method} {path}: HTTP {exc.code}: {exc.read()[:2000]!r}") from None
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                if attempt == attempts - 1:
                    raise
                time.sleep(2)

    def get(self, path: str):
        return self.call("GET", path)

    def trigger(self, dag_id: str, conf: dict) -> str:
        return self.call("POST", f"/api/v2/dags/{dag_id}/dagRuns", {"logical_date": None, "conf": conf})["dag_run_id"]

    def run(self, dag_id: str, run_id: str) -> dict:
        return self.get(f"/api/v2/dags/{dag_id}/dagRuns/{q(run_id)}")

    def xcom(self, dag_id: str, run_id: str, task_id: str, map_index: int = -1):
        path = (f"/api/v2/dags/{dag_id}/dagRuns/{q(run_id)}/taskInstances/{q(task_id)}/xcomEntries/return_value"
                + (f"?map_index={map_index}" if map_index >= 0 else ""))
        value = self.get(path)["value"]
        return json.loads(value) if isinstance(value, str) else value


class MetadataDb:
    """The cluster's PostgreSQL metadata DB, read as the api-server reads it."""

    def __init__(self, cluster: Cluster):
        import sqlalchemy
        from sqlalchemy.pool import NullPool

        self.sa = sqlalchemy
        url = cluster.services["airflow-scheduler"].environment["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]
        self.engine = sqlalchemy.create_engine(url, poolclass=NullPool)

    def tries(self, dag_id: str, run_id: str) -> list[dict]:
        """Every try of every task instance of the run: the current ones and those in the history."""
        sql = self.sa.text(
            "SELECT task_id, map_index, try_number, state, hostname, queue, 'current' AS kind FROM task_instance "
            "WHERE dag_id = :dag AND run_id = :run UNION ALL "
            "SELECT task_id, map_index, try_number, state, hostname, queue, 'history' FROM task_instance_history "
            "WHERE dag_id = :dag AND run_id = :run ORDER BY 1, 2, 3")
        with self.engine.connect() as conn:
            return [dict(r._mapping) for r in conn.execute(sql, {"dag": dag_id, "run": run_id})]

    def ti(self, dag_id: str, run_id: str, task_id: str, map_index: int = -1) -> dict | None:
        found = [t for t in self.tries(dag_id, run_id)
                 if (t["task_id"], t["map_index"], t["kind"]) == (task_id, map_index, "current")]
        return found[0] if found else None

    def dispose(self) -> None:
        self.engine.dispose()


@dataclasses.dataclass
class Ctx:
    cluster: Cluster
    api: Api
    db: MetadataDb
    kafka: Kafka
    config_path: Path
    seen: dict          # what the steps leave for the later ones (run ids, the damaged partition)

    def log_dir(self, group: str) -> Path:
        from storage_engine.config_file import load_config

        (only,) = load_config(self.config_path).hosts[group]
        return Path(only)

    def worker_of(self, group: str) -> str:
        """The compose service (and hostname) of the Celery worker of storage host ``group``."""
        (name,) = [n for n in self.cluster.workers()
                   if self.cluster.services[n].environment.get("STORAGE_MAINTENANCE_HOST") == group]
        return name

    def partition_dir(self, topic: str, partition: int) -> Path:
        found = [self.log_dir(g) / f"{topic}-{partition}" for g in GROUPS
                 if (self.log_dir(g) / f"{topic}-{partition}").is_dir()]
        assert len(found) == 1, f"{topic}-{partition} is in {found}"
        return found[0]

    def place(self, topic: str, groups: dict[int, str]) -> None:
        """Each partition of ``topic`` in the log dir of the storage host ``groups`` names (moved there online if
        the broker created it in the other one)."""
        import storage_engine

        config = storage_engine.load_config(str(self.config_path))
        for partition, group in groups.items():
            if self.partition_dir(topic, partition).parent != self.log_dir(group):
                storage_engine.move_partition(config, topic, partition, str(self.log_dir(group)))
            assert self.partition_dir(topic, partition).parent == self.log_dir(group)

    # -- runs ---------------------------------------------------------------------------------------------------

    def story(self, dag_id: str, run_id: str) -> str:
        """Every try of the run's tasks, and the end of the log of each that failed."""
        lines = [f"{dag_id} run {run_id}:"]
        for t in self.db.tries(dag_id, run_id):
            lines.append(f"  {t['task_id']}[{t['map_index']}] try {t['try_number']}: {t['state']} on "
                         f"{t['hostname'] or '-'} (queue {t['queue']}, {t['kind']})")
            if t["state"] in ("failed", "up_for_retry") and t["try_number"]:
                lines.append(self.task_log(dag_id, run_id, t["task_id"], t["map_index"], t["try_number"]))
        return "\n".join(lines)

    def task_log(self, dag_id: str, run_id: str, task_id: str, map_index: int, attempt: int, lines: int = 25) -> str:
        path = (self.cluster.dir / "airflow" / "logs" / f"dag_id={dag_id}" / f"run_id={run_id}" / f"task_id={task_id}"
                / (f"map_index={map_index}" if map_index >= 0 else "") / f"attempt={attempt}.log")
        try:
            raw = path.read_text(errors="replace").splitlines()
        except OSError as exc:
            return f"    (no task log: {exc})"
        out = []
        for line in raw:
            try:
                event = json.loads(line)
            except ValueError:
                out.append(line)
                continue
            text = str(event.get("event", ""))
            for detail in event.get("error_detail") or []:
                text += f" | {detail.get('exc_type')}: {detail.get('exc_value')}"
            out.append(text)
        return "\n".join("    " + s[:600] for s in out[-lines:])

    def wait_run(self, dag_id: str, run_id: str, timeout: float = RUN_DEADLINE) -> dict:
        holder: dict = {}

        def done():
            holder["run"] = self.api.run(dag_id, run_id)
            return holder["run"]["state"] in ("success", "failed")

        wait_for(f"{dag_id} run {run_id} finished", done, timeout, self.cluster,
                 services=("airflow-scheduler", *self.cluster.workers()), interval=2,
                 detail=lambda: self.story(dag_id, run_id))
        return holder["run"]

    def run_ok(self, dag_id: str, conf: dict) -> str:
        run_id = self.api.trigger(dag_id, conf)
        run = self.wait_run(dag_id, run_id)
        assert run["state"] == "success", self.story(dag_id, run_id) + tails(self.cluster, *self.cluster.workers())
        return run_id

    def check_routing(self, dag_id: str, run_id: str) -> None:
        """Every try that ran did so on a Celery worker of the compose file; the tasks of each storage host's
        group on that host's worker and queue; the ungrouped ones (the run's end) on ``default``; both groups ran."""
        tries = self.db.tries(dag_id, run_id)
        assert tries, f"{dag_id} run {run_id} has no task instances"
        ran = [t for t in tries if t["hostname"]]          # a skipped or not-run task has no hostname
        workers = set(self.cluster.workers())
        wrong = [t for t in ran if t["hostname"] not in workers]
        assert not wrong, f"tries that ran elsewhere than on {sorted(workers)}:\n{self.story(dag_id, run_id)}"
        for t in tries:
            group, _, _step = t["task_id"].rpartition(".")
            if group:
                assert group in GROUPS, t
                assert t["queue"] == group, f"{t} is not on queue {group}"
                if t["hostname"]:
                    assert t["hostname"] == self.worker_of(group), (
                        f"{t['task_id']}[{t['map_index']}] try {t['try_number']} of group {group} ran on "
                        f"{t['hostname']}, not {self.worker_of(group)}\n{self.story(dag_id, run_id)}")
            else:
                assert t["queue"] == "default", f"ungrouped {t} is not on the default queue"
        groups_ran = {t["task_id"].rpartition(".")[0] for t in ran} - {""}
        assert groups_ran == set(GROUPS), (f"{dag_id}: tasks ran in groups {sorted(groups_ran)}, not in both "
                                           f"{GROUPS}:\n{self.story(dag_id, run_id)}")

    # -- the other components -----------------------------------------------------------------------------------

    def mail(self) -> list[dict]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.cluster.ports.mail_http}/api/v1/messages",
                                    timeout=30) as resp:
            body = json.loads(resp.read())
        assert body["total"] == len(body["messages"])
        return body["messages"]

    def alerts_for(self, run_id: str) -> list[dict]:
        return [m for m in self.mail() if run_id in m["Subject"]]

    def spark_master(self) -> dict:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.cluster.ports.spark_master_ui}/json/", timeout=10) as r:
            return json.loads(r.read())

    def verify(self) -> dict:
        """The engine's read-only audit of every log dir (the CLI, as an operator runs it)."""
        proc = subprocess.run([sys.executable, "-m", "storage_engine", "--config", str(self.config_path), "verify"],
                              cwd=REPO, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, f"verify exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        return json.loads(proc.stdout)


def keep_artifacts(cluster: Cluster) -> None:
    """The components' output and the task logs, for a look after the run (the cluster dir is deleted)."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    if cluster.logs.is_dir():
        shutil.copytree(cluster.logs, ARTIFACTS / "logs", dirs_exist_ok=True)
    task_logs = cluster.dir / "airflow" / "logs"
    if task_logs.is_dir():
        shutil.copytree(task_logs, ARTIFACTS / "task-logs", ignore=shutil.ignore_patterns("dag_processor*"),
                        dirs_exist_ok=True)
    (ARTIFACTS / "summary.json").write_text(json.dumps(SUMMARY, indent=1, default=str))
