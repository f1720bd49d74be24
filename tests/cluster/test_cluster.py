"""``make cluster`` for real: docker-compose.yaml's deployment as local processes (include/cluster), one cluster
for the whole module, used the way an operator uses it and broken the way machines break.

1. The topology comes up: every service alive, every listening socket of their processes on 127.0.0.1, both
   Celery workers answering, the Spark master with one alive worker.
2. Every maintenance DAG runs once on Celery and succeeds; log_compaction builds its key maps with spark-submit on
   the standalone master and leaves exactly the latest value of every key. Every task of a storage host's group
   ran on that host's worker, on the host's queue; the run's end ran on ``default``.
3. A backfill of three intervals creates three runs, each acting as of its interval's end.
4. A byte flipped in a segment fails log_verify; the SMTP catcher gets exactly one alert for the run, naming the
   partition.
5. The Storage view, over the PostgreSQL metadata DB, in Debian's chromium: the runs of 2-4 and the damaged
   partition.
6. kill -9 of a Celery worker in the middle of a compaction clean while the broker acknowledges writes to that
   partition; the worker is started again as compose's ``restart: unless-stopped`` would. The task is retried
   (or the run fails with one alert), every acknowledged record is read back through the broker, and the next run
   cleans the same partition (nothing left claimed or locked) with verify finding no damage.
7. kill -9 of the Spark worker (and its executors) while a key-map job's tasks run, then started again: the run
   either cleans with the complete map (exactly the latest value of every key) or fails before cleaning (the
   segments byte-identical); never a partition cleaned with a partial map.

Every wait has a deadline and fails with the last lines of the components' output (``<cluster>/logs/<service>.log``);
nothing asserts a duration. The cluster's process output and task logs are copied to ``var/test-artifacts/cluster/``
when the module ends, with ``summary.json`` (what each step saw).

Test-only Airflow settings, which compose does not set: a 30 s task heartbeat timeout (a task whose worker died is
found in seconds, not 5 minutes), no runs from the DAGs' schedules (only this module's runs and backfills exist),
and the scheduler's health server on a free port (its default, 8974, would clash with another cluster).
"""
from __future__ import annotations

import atexit
import dataclasses
import functools
import hashlib
import importlib.util
import ipaddress
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from include.cluster.run import Cluster, session_members
from include.cluster.topology import Ports
from tests.airflow.test_local_airflow import is_loopback, listening_sockets
from tests.paths import REPO

# Importing those helpers ran tests/airflow's conftest, which makes a temporary AIRFLOW_HOME that only its
# pytest_unconfigure removes, and only when pytest loads it for that folder's own tests: removed at exit either way.
atexit.register(shutil.rmtree, sys.modules["tests.airflow.conftest"]._AIRFLOW_HOME, True)

pytestmark = [pytest.mark.slow, pytest.mark.airflow, pytest.mark.spark, pytest.mark.kills]


def _maintenance_dags() -> tuple[str, ...]:
    """The plugin's list of the maintenance DAGs, read from its file (which imports nothing: no Airflow here)."""
    spec = importlib.util.spec_from_file_location(
        "maintenance_dags", REPO / "plugins" / "storage_maintenance" / "maintenance_dags.py")
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

def free_ports(n: int) -> list[int]:
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


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


class Kafka:
    """confluent-kafka (librdkafka) against the cluster's broker."""

    def __init__(self, port: int):
        self.bootstrap = f"127.0.0.1:{port}"

    def create_topic(self, name: str, partitions: int, config: dict) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        for future in admin.create_topics([NewTopic(name, partitions, 1, config=config)]).values():
            future.result(60)

    def producer(self):
        from confluent_kafka import Producer

        return Producer({"bootstrap.servers": self.bootstrap, "acks": "all", "enable.idempotence": False,
                         "linger.ms": 20, "batch.size": 65536, "queue.buffering.max.messages": 2_000_000,
                         "queue.buffering.max.kbytes": 1_048_576, "message.timeout.ms": 300_000})

    def produce(self, topic: str, partition: int, records: list[tuple[bytes, bytes]]) -> list[int]:
        """Send every (key, value) with acks=all; the offset each was acknowledged at, in order. Fails on any
        record not acknowledged."""
        producer = self.producer()
        offsets: list[int | None] = [None] * len(records)
        errors: list[str] = []

        def delivered(i, err, msg):
            if err is None:
                offsets[i] = msg.offset()
            else:
                errors.append(str(err))

        for i, (key, value) in enumerate(records):
            while True:
                try:
                    producer.produce(topic, key=key, value=value, partition=partition,
                                     on_delivery=functools.partial(delivered, i))
                    break
                except BufferError:
                    producer.poll(0.1)
            producer.poll(0)
        left = producer.flush(300)
        assert left == 0 and not errors and None not in offsets, (
            f"{topic}-{partition}: {left} record(s) unsent, errors {errors[:5]}")
        return offsets

    def read(self, topic: str, partition: int, timeout: float = 300) -> dict[int, tuple[bytes, bytes]]:
        """Every record of the partition, from its start to its end as of the read: {offset: (key, value)}."""
        from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": f"cluster-test-{uuid.uuid4().hex}",
                             "enable.auto.commit": False, "enable.partition.eof": True,
                             "auto.offset.reset": "earliest"})
        out: dict[int, tuple[bytes, bytes]] = {}
        try:
            consumer.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
            deadline = time.monotonic() + timeout
            while True:
                assert time.monotonic() < deadline, f"{topic}-{partition}: read {len(out)} records in {timeout} s"
                msg = consumer.poll(1.0)
                if msg is None:
                    continue
                if msg.error():
                    if msg.error().code() == KafkaError._PARTITION_EOF:
                        return out
                    raise AssertionError(f"reading {topic}-{partition}: {msg.error()}")
                out[msg.offset()] = (msg.key(), msg.value())
        finally:
            consumer.close()


class LiveWriter(threading.Thread):
    """Writes one record every 20 ms to a partition through the broker (acks=all) until stopped; ``acked``:
    {offset: (key, value)} of what the broker acknowledged."""

    def __init__(self, kafka: Kafka, topic: str, partition: int, prefix: str):
        super().__init__(daemon=True)
        self.kafka, self.topic, self.partition, self.prefix = kafka, topic, partition, prefix
        self.acked: dict[int, tuple[bytes, bytes]] = {}
        self.errors: list[str] = []
        self.halt = threading.Event()

    def run(self) -> None:
        producer = self.kafka.producer()

        def delivered(err, msg):
            if err is None:
                self.acked[msg.offset()] = (msg.key(), msg.value())
            else:
                self.errors.append(str(err))

        i = 0
        try:
            while not self.halt.is_set():
                key = f"{self.prefix}-{i:07d}".encode()
                producer.produce(self.topic, key=key, value=key + b":live", partition=self.partition,
                                 on_delivery=delivered)
                producer.poll(0.02)
                i += 1
        except Exception as exc:      # noqa: BLE001 - reported by the test, which checks ``errors``
            self.errors.append(repr(exc))
        left = producer.flush(300)
        if left:
            self.errors.append(f"{left} record(s) never acknowledged")

    def stop(self) -> None:
        self.halt.set()
        self.join(330)


class SocketWatch(threading.Thread):
    """Samples, every second until stopped, the listening TCP sockets of every process of the cluster's services
    (:func:`service_pids`). ``seen``: {(address, port): command}."""

    def __init__(self, cluster: Cluster):
        super().__init__(daemon=True)
        self.cluster = cluster
        self.seen: dict[tuple[str, int], str] = {}
        self.halt = threading.Event()

    def sample(self) -> None:
        for pid, address, port in listening_sockets(service_pids(self.cluster)):
            try:
                command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                command = "?"
            self.seen.setdefault((address, port), command)

    def run(self) -> None:
        while not self.halt.wait(1.0):
            self.sample()

    def stop(self) -> dict[tuple[str, int], str]:
        self.halt.set()
        self.join(60)
        return self.seen


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


@pytest.fixture(scope="module")
def ctx(tmp_path_factory):
    cdir = tmp_path_factory.mktemp("cluster")
    shutil.rmtree(ARTIFACTS, ignore_errors=True)           # this run's only
    *ports, health = free_ports(len(dataclasses.fields(Ports)) + 1)
    cluster = Cluster(cdir, Ports(*ports), base_env=cluster_env(health))
    t0 = time.monotonic()
    db = None
    try:
        cluster.up(timeout=600)
        SUMMARY["up_s"] = round(time.monotonic() - t0, 1)
        api = Api(cluster)
        db = MetadataDb(cluster)
        c = Ctx(cluster, api, db, Kafka(cluster.ports.broker), cdir / "storage.yaml", {})

        def parsed():                       # the dag-processor parses dags/ after it starts
            try:
                return all(api.get(f"/api/v2/dags/{dag}")["dag_id"] == dag for dag in MAINTENANCE_DAGS)
            except AssertionError:          # 404 until parsed
                return False

        wait_for("every maintenance DAG parsed", parsed, 600, cluster, services=("airflow-dag-processor",),
                 interval=3)
        for dag in MAINTENANCE_DAGS:        # unpaused: runs only from this module (no schedule here)
            api.call("PATCH", f"/api/v2/dags/{dag}", {"is_paused": False})
        yield c
    finally:
        SUMMARY["module_s"] = round(time.monotonic() - t0, 1)
        if db is not None:
            db.dispose()
        sessions = [entry["pid"] for entry in cluster.state["processes"].values()]
        cluster.down()
        left = kill_session_leftovers(sessions)
        keep_artifacts(cluster)
        cluster.delete_data()
    assert not left, f"`make cluster-stop` left processes running (killed now): {left}"


# -- the data --------------------------------------------------------------------------------------------------------

def keyed(prefix: str, keys: int, versions: int, size: int) -> list[tuple[bytes, bytes]]:
    """``versions`` rounds over ``keys`` keys (the last round holds every key's latest value), each value
    ``size`` bytes and naming its key and version."""
    out = []
    for version in range(versions):
        for k in range(keys):
            key = f"{prefix}-{k:07d}"
            head = f"{key}@{version}:"
            out.append((key.encode(), (head + "x" * (size - len(head))).encode()))
    return out


def latest_per_key(records: list[tuple[bytes, bytes]], offsets: list[int]) -> dict[int, tuple[bytes, bytes]]:
    """{offset: (key, value)} of the last record of each key: what compaction must leave."""
    last: dict[bytes, tuple[int, bytes]] = {}
    for (key, value), offset in zip(records, offsets):
        last[key] = (offset, value)
    return {offset: (key, value) for key, (offset, value) in last.items()}


def compare(what: str, read: dict, expected: dict) -> None:
    missing = sorted(set(expected) - set(read))
    extra = sorted(set(read) - set(expected))
    changed = sorted(o for o in set(read) & set(expected) if read[o] != expected[o])
    assert not (missing or extra or changed), (
        f"{what}: {len(missing)} record(s) missing (first offsets {missing[:5]}), {len(extra)} not expected "
        f"(first {extra[:5]}: {[read[o][0] for o in extra[:5]]}), {len(changed)} changed (first {changed[:5]})")


def segment_hashes(partition_dir: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(partition_dir.glob("*.log"))}


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


# -- 1. the topology -------------------------------------------------------------------------------------------------

def test_the_topology_comes_up_on_loopback(ctx):
    cluster = ctx.cluster
    expected = set(cluster.services) - {"airflow-init"}          # the one-off job has exited
    assert set(cluster.state["processes"]) == expected
    dead = [name for name in expected if cluster.pid(name) is None]
    assert not dead, f"not running: {dead}" + tails(cluster, *dead)

    sockets = listening_sockets(service_pids(cluster))
    assert [s for s in sockets if not on_loopback(s[1])] == [], sockets
    listening = {port for _, _, port in sockets}
    ports = dataclasses.asdict(cluster.ports)
    for field in ("spark_driver", "spark_block_manager"):        # a driver's, while a Spark job runs
        ports.pop(field)
    assert set(ports.values()) <= listening, {k: v for k, v in ports.items() if v not in listening}

    workers = sorted(f"celery@{cluster._celery_hostname(n)}" for n in cluster.workers())
    assert workers == ["celery@airflow-worker-a", "celery@airflow-worker-b"]
    assert cluster.celery_nodes() == workers
    assert ctx.spark_master()["aliveworkers"] == 1
    SUMMARY["1_topology"] = {"services": sorted(expected), "listening": sorted(listening)}


# -- 2. every maintenance DAG once -----------------------------------------------------------------------------------

def test_every_maintenance_dag_runs_on_celery_with_spark_key_maps(ctx):
    topic = "cluster-compacted"
    ctx.kafka.create_topic(topic, 2, {"cleanup.policy": "compact", "segment.bytes": "262144"})
    ctx.place(topic, {0: "storage-a", 1: "storage-b"})
    expected = {}
    for partition in (0, 1):
        # 3 versions of 2,000 keys, then unique fillers past one segment: every keyed record lies in a sealed,
        # cleanable segment
        records = keyed(f"k{partition}", 2000, 3, 120) + keyed(f"filler{partition}", 2500, 1, 120)
        offsets = ctx.kafka.produce(topic, partition, records)
        expected[partition] = latest_per_key(records, offsets)

    runs = {}
    sockets = SocketWatch(ctx.cluster)       # the task processes, the Spark drivers and executors listen too
    sockets.start()
    try:
        for dag in MAINTENANCE_DAGS:
            conf = {"map_strategy": "spark", "topics": [topic]} if dag == "log_compaction" else {}
            runs[dag] = ctx.run_ok(dag, conf)
            ctx.check_routing(dag, runs[dag])
    finally:
        seen = sockets.stop()
    ctx.seen["runs"] = runs
    assert {k: v for k, v in seen.items() if not on_loopback(k[0])} == {}
    drivers = {port for (_, port), command in seen.items() if "SparkSubmit" in command}
    assert drivers, seen                                             # the drivers listened too, on loopback

    # The key maps were built by spark-submit on the standalone master, one application per partition.
    apps = {a["name"]: a["state"] for a in ctx.spark_master()["completedapps"]}
    for partition in (0, 1):
        assert apps.get(f"build-key-map {topic}-{partition}") == "FINISHED", apps
        ti = ctx.db.ti("log_compaction", runs["log_compaction"], f"{GROUPS[partition]}.build_key_map", 0)
        assert ti is not None and ti["state"] == "success", ctx.story("log_compaction", runs["log_compaction"])
        # Read back through the broker: the latest value of every key, at the offset it was written at.
        compare(f"{topic}-{partition} after compaction", ctx.kafka.read(topic, partition), expected[partition])
    SUMMARY["2_every_dag"] = {"runs": runs, "spark_apps": apps,
                              "listening_during_runs": sorted(f"{a}:{p} {short(c)}" for (a, p), c in seen.items())}


# -- 3. a backfill ---------------------------------------------------------------------------------------------------

def test_a_backfill_of_three_intervals_creates_three_successful_runs(ctx):
    dag = "log_retention"                                          # */5: a 5-minute interval
    start = datetime.now(timezone.utc).replace(second=0, microsecond=0) - timedelta(hours=2)
    start -= timedelta(minutes=start.minute % 5)
    intervals = [(start + timedelta(minutes=5 * i), start + timedelta(minutes=5 * (i + 1))) for i in range(3)]
    backfill = ctx.api.call("POST", "/api/v2/backfills", {
        "dag_id": dag, "from_date": intervals[0][0].isoformat(), "to_date": intervals[-1][0].isoformat(),
        "reprocess_behavior": "completed", "max_active_runs": 1})

    def when(value: str) -> datetime:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))

    def backfill_runs():
        listed = ctx.api.get(f"/api/v2/dags/{dag}/dagRuns?limit=100")["dag_runs"]
        return [r for r in listed if r["run_type"] == "backfill"]

    def finished():
        found = backfill_runs()
        return len(found) == 3 and all(r["state"] in ("success", "failed") for r in found)

    wait_for(f"backfill {backfill['id']}'s three runs finished", finished, 3 * RUN_DEADLINE, ctx.cluster,
             services=("airflow-scheduler", "airflow-apiserver"), interval=3,
             detail=lambda: json.dumps(backfill_runs(), indent=1)[-4000:])
    found = sorted(backfill_runs(), key=lambda r: r["logical_date"])
    assert [(when(r["data_interval_start"]), when(r["data_interval_end"])) for r in found] == intervals
    for r in found:
        assert r["state"] == "success", ctx.story(dag, r["dag_run_id"])
        ctx.check_routing(dag, r["dag_run_id"])
        report = ctx.api.xcom(dag, r["dag_run_id"], "run_report")
        assert (when(report["as_of"]), report["as_of_source"]) == (when(r["data_interval_end"]), "data interval end")
    ctx.seen["backfill"] = [r["dag_run_id"] for r in found]
    SUMMARY["3_backfill"] = {"backfill": backfill["id"], "runs": ctx.seen["backfill"]}


# -- 4. an alert -----------------------------------------------------------------------------------------------------

def test_a_damaged_batch_fails_log_verify_and_sends_one_alert_naming_the_partition(ctx):
    topic, partition = "cluster-damaged", 0
    ctx.kafka.create_topic(topic, 2, {"segment.bytes": "262144"})
    ctx.place(topic, {0: "storage-a", 1: "storage-b"})
    for p in (0, 1):
        ctx.kafka.produce(topic, p, keyed(f"d{p}", 3000, 1, 200))
    pdir = ctx.partition_dir(topic, partition)
    segments = sorted(pdir.glob("*.log"))
    assert len(segments) >= 2, segments
    sealed = segments[0]
    good = sealed.read_bytes()

    def put(byte: int) -> None:          # in place, as a disk flips a bit
        with open(sealed, "r+b") as f:
            f.seek(70)                   # inside the first batch's records: its CRC no longer matches
            f.write(bytes([byte]))
            f.flush()
            os.fsync(f.fileno())

    before = len(ctx.mail())
    try:
        put(good[70] ^ 0xFF)
        run_id = ctx.api.trigger("log_verify", {"topics": [topic]})
        run = ctx.wait_run("log_verify", run_id)
        assert run["state"] == "failed", ctx.story("log_verify", run_id)
    finally:
        put(good[70])                    # the later steps read this topic's dir as undamaged
    assert sealed.read_bytes() == good
    ctx.check_routing("log_verify", run_id)
    group = next(g for g in GROUPS if ctx.log_dir(g) == pdir.parent)
    failed = [t for t in ctx.db.tries("log_verify", run_id) if t["state"] == "failed"]
    assert {t["task_id"] for t in failed} == {f"{group}.verify", "fail_run_if_upstream_failed"}, \
        ctx.story("log_verify", run_id)

    name = f"{topic}-{partition}"
    messages = wait_for("the alert of the failed run in the SMTP catcher", lambda: ctx.alerts_for(run_id), 120,
                        ctx.cluster, services=("mailpit", *ctx.cluster.workers()), interval=2)
    assert len(ctx.mail()) == before + 1, [m["Subject"] for m in ctx.mail()[before:]]
    (alert,) = messages
    assert alert["Subject"].startswith(f"[storage maintenance] FAILED log_verify run {run_id}"), alert["Subject"]
    assert name in alert["Subject"] and name in alert["Snippet"], alert
    assert f"{topic}-1" not in alert["Subject"]
    assert alert["To"] == "storage-oncall@example.com"             # compose's STORAGE_MAINTENANCE_ALERT_EMAILS
    ctx.seen["damaged"] = {"run_id": run_id, "topic": topic, "partition": partition}
    SUMMARY["4_alert"] = {"run": run_id, "subject": alert["Subject"]}


# -- 5. the Storage view ---------------------------------------------------------------------------------------------

def test_the_storage_view_shows_the_runs_and_the_damage(ctx):
    from playwright import sync_api as playwright

    if not os.path.exists(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is missing: `make browser` (or .ci/run) installs Debian's chromium")
    runs, backfill, damaged = ctx.seen.get("runs"), ctx.seen.get("backfill"), ctx.seen.get("damaged")
    if not (runs and backfill and damaged):
        pytest.skip("needs the runs of the three steps before it")
    expected = {(dag, run_id): "success" for dag, run_id in runs.items()}
    expected.update({("log_retention", run_id): "success" for run_id in backfill})
    expected[("log_verify", damaged["run_id"])] = "failed"
    name = f"{damaged['topic']}-{damaged['partition']}"
    base = ctx.api.url + "/storage-maintenance"
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            context = browser.new_context(viewport={"width": 1500, "height": 1000})
            context.add_cookies([{"name": "_token", "value": ctx.api.token, "url": ctx.api.url}])
            page = context.new_page()
            page.set_default_timeout(120_000)

            # The first page: the runs (all of them on one page) and the damaged partition with the run that found it.
            page.goto(base + "/?runs_limit=200")
            for (dag, run_id), state in expected.items():
                row = page.locator(f'#runs tr[data-run="{run_id}"][data-dag="{dag}"]')
                assert row.count() == 1, (dag, run_id, page.locator("#runs").inner_text()[:3000])
                assert row.locator("td").nth(2).inner_text().strip() == state, (dag, run_id, row.inner_text())
            damage = page.locator(f'#damage tr[data-partition="{name}"]')
            assert damage.count() >= 1, page.locator("#damage").inner_text()
            assert damage.first.get_attribute("data-kind") == "damaged"
            assert "record batch is corrupt" in damage.first.inner_text()
            assert damaged["run_id"] in damage.first.inner_text()
            page.screenshot(path=str(ARTIFACTS / "01-overview.png"), full_page=True)

            # The failed run's page names the partition; the compaction run's page lists what it cleaned.
            page.goto(base + f"/runs/log_verify/{q(damaged['run_id'])}")
            assert "failed" in page.locator("#as-of").inner_text()
            assert name in page.locator("#failed").inner_text()
            page.screenshot(path=str(ARTIFACTS / "02-failed-run.png"), full_page=True)
            page.goto(base + f"/runs/log_compaction/{q(runs['log_compaction'])}")
            assert "success" in page.locator("#as-of").inner_text()
            cleaned = {r.get_attribute("data-partition") for r in page.locator("#rows tr[data-partition]").all()}
            assert {"cluster-compacted-0", "cluster-compacted-1"} <= cleaned, cleaned
            page.screenshot(path=str(ARTIFACTS / "03-compaction-run.png"), full_page=True)
            for run_id in backfill:
                page.goto(base + f"/runs/log_retention/{q(run_id)}")
                assert "(data interval end)" in page.locator("#as-of").inner_text()

            # The partition page marks the damage and the run that found it.
            page.goto(base + f"/partitions/{damaged['topic']}/{damaged['partition']}")
            text = page.locator("#damage").inner_text()
            assert "record batch is corrupt" in text and damaged["run_id"] in text, text
            page.screenshot(path=str(ARTIFACTS / "04-damaged-partition.png"), full_page=True)
        finally:
            browser.close()
    SUMMARY["5_storage_view"] = {"runs_shown": len(expected), "damaged": name}


# -- 6. a Celery worker killed mid-task ------------------------------------------------------------------------------

def test_a_celery_worker_killed_mid_clean_loses_no_acknowledged_record(ctx):
    cluster, topic, group = ctx.cluster, "cluster-acked", "storage-a"
    victim = ctx.worker_of(group)
    ctx.kafka.create_topic(topic, 2, {"cleanup.policy": "compact", "segment.bytes": "1048576",
                                      "min.cleanable.dirty.ratio": "0.01"})
    ctx.place(topic, {0: group, 1: "storage-b"})
    pdir = ctx.partition_dir(topic, 0)
    # Unique keys, so compaction keeps every record: about 48 MB in 1 MiB segments for a clean that takes a while;
    # partition 1 only an active segment (nothing to clean on the other host).
    records = [(f"w-{i:07d}".encode(), f"w-{i:07d}:".encode() + b"y" * 390) for i in range(120_000)]
    acked = dict(zip(ctx.kafka.produce(topic, 0, records), records))
    other = dict(zip(ctx.kafka.produce(topic, 1, records[:20]), records[:20]))

    writer = LiveWriter(ctx.kafka, topic, 0, "live")
    writer.start()
    conf = {"topics": [topic], "map_strategy": "local"}
    run_id = ctx.api.trigger("log_compaction", conf)
    task = f"{group}.clean"
    try:
        asked = [time.monotonic()]

        def cleaning():            # the clean has written part of a replacement segment
            names = [n for n in os.listdir(pdir) if n.endswith((".cleaned", ".swap"))]
            if not names and time.monotonic() - asked[0] > 2:
                asked[0] = time.monotonic()
                if ctx.api.run("log_compaction", run_id)["state"] in ("success", "failed"):
                    pytest.fail(f"the run ended before its clean could be killed:\n"
                                f"{ctx.story('log_compaction', run_id)}")
            return names

        seen = wait_for(f"{task} writing a cleaned segment in {pdir}", cleaning, RUN_DEADLINE, cluster,
                        services=("airflow-scheduler", victim), interval=0.01)
        sid = cluster.state["processes"][victim]["pid"]
        killed = kill_session(sid)
        wait_for(f"every process of {victim} gone", lambda: not session_members(sid), 30, cluster,
                 detail=lambda: "\n".join(session_cmdlines(sid)))
        assert any("airflow worker" in k for k in killed), killed          # the task process itself
        ti = ctx.db.ti("log_compaction", run_id, task, 0)
        assert ti is not None and (ti["state"], ti["try_number"], ti["hostname"]) == ("running", 1, victim), ti

        # compose's restart: unless-stopped
        cluster.start_service(victim)
        wait_for(f"{victim} answering again", lambda: f"celery@{victim}" in cluster.celery_nodes(), 300, cluster,
                 services=(victim,), interval=2)
        run = ctx.wait_run("log_compaction", run_id)
    finally:
        writer.stop()
    assert not writer.errors, writer.errors[:5]
    final = ctx.db.ti("log_compaction", run_id, task, 0)
    if run["state"] == "success":
        assert final["try_number"] >= 2 and final["hostname"] == victim, ctx.story("log_compaction", run_id)
        outcome = f"retried: try {final['try_number']} succeeded on {final['hostname']}"
    else:
        alerts = wait_for("the alert of the failed run", lambda: ctx.alerts_for(run_id), 120, cluster,
                          services=("mailpit",), interval=2)
        assert len(alerts) == 1, [a["Subject"] for a in alerts]
        outcome = f"failed ({final['state']} after {final['try_number']} tries), one alert"
    ctx.check_routing("log_compaction", run_id)

    # Every acknowledged record reads back through the broker, at its offset (unique keys: compaction keeps all).
    acked.update(writer.acked)
    read = ctx.kafka.read(topic, 0)
    missing = [o for o in acked if read.get(o) != acked[o]]
    assert not missing, f"{len(missing)} acknowledged record(s) not read back, first offsets {sorted(missing)[:5]}"
    compare(f"{topic}-1", ctx.kafka.read(topic, 1), other)

    # Nothing is left claimed or locked: a new run cleans the same partition (made dirty again) at its first try.
    more = [(f"x-{i:07d}".encode(), f"x-{i:07d}:".encode() + b"z" * 390) for i in range(6000)]
    acked.update(zip(ctx.kafka.produce(topic, 0, more), more))
    again = ctx.run_ok("log_compaction", conf)
    ctx.check_routing("log_compaction", again)
    selection = ctx.api.xcom("log_compaction", again, f"{group}.select_dirtiest_logs")
    assert (topic, 0) in {(s["topic"], s["partition"]) for s in selection["selected"]}, selection
    assert not [s for s in selection["skipped"] if s["topic"] == topic], selection["skipped"]
    clean = ctx.db.ti("log_compaction", again, task, 0)
    assert (clean["state"], clean["try_number"]) == ("success", 1), ctx.story("log_compaction", again)
    read = ctx.kafka.read(topic, 0)
    missing = [o for o in acked if read.get(o) != acked[o]]
    assert not missing, f"after the next run: {len(missing)} acknowledged record(s) missing"
    audit = ctx.verify()
    assert audit["damaged"] is False and audit["problems"] == [], audit["problems"][:5]
    SUMMARY["6_celery_worker_killed"] = {
        "run": run_id, "killed_at": seen, "killed": [short(k) for k in killed], "outcome": outcome,
        "acknowledged": len(acked), "live_writes_during_kill": len(writer.acked), "next_run": again,
        "tries": ctx.db.tries("log_compaction", run_id)}


# -- 7. the Spark worker killed mid-job ------------------------------------------------------------------------------

def test_a_spark_worker_killed_mid_job_never_leaves_a_partial_clean(ctx):
    cluster, topic, group = ctx.cluster, "cluster-spark", "storage-a"
    ctx.kafka.create_topic(topic, 2, {"cleanup.policy": "compact", "segment.bytes": "1048576"})
    ctx.place(topic, {0: group, 1: "storage-b"})
    pdir = ctx.partition_dir(topic, 0)
    # 5 versions of 50,000 keys (about 50 MB, for a job whose tasks run for seconds), then fillers past a segment
    records = keyed("s", 50_000, 5, 200) + keyed("sfill", 6000, 1, 200)
    expected = latest_per_key(records, ctx.kafka.produce(topic, 0, records))
    ctx.kafka.produce(topic, 1, keyed("t", 10, 1, 50))              # an active segment only: nothing to clean
    before = segment_hashes(pdir)
    app_name = f"build-key-map {topic}-0"

    run_id = ctx.api.trigger("log_compaction", {"topics": [topic], "map_strategy": "spark"})
    sid = cluster.state["processes"]["spark-worker"]["pid"]

    asked = [time.monotonic()]

    def tasks_running():         # the application runs and its Python tasks execute on the worker's executor
        executing = any("pyspark.daemon" in c for c in session_cmdlines(sid))
        if not executing and time.monotonic() - asked[0] < 2:
            return False
        asked[0] = time.monotonic()
        master = ctx.spark_master()
        if any(a["name"] == app_name for a in master["completedapps"]):
            pytest.fail(f"{app_name} finished before the Spark worker could be killed:\n"
                        f"{ctx.story('log_compaction', run_id)}")
        return executing and any(a["name"] == app_name and a["state"] == "RUNNING" for a in master["activeapps"])

    wait_for(f"{app_name} running tasks on the Spark worker", tasks_running, RUN_DEADLINE, cluster,
             services=("spark-master", "spark-worker", ctx.worker_of(group)), interval=0.05)
    killed = kill_session(sid)
    wait_for("every process of spark-worker gone", lambda: not session_members(sid), 30, cluster,
             detail=lambda: "\n".join(session_cmdlines(sid)))
    assert any("CoarseGrainedExecutorBackend" in k for k in killed), killed      # its executor died with it
    stage = sorted(str(p.relative_to(cluster.dir)) for p in (cluster.dir / "storage" / "keymaps").rglob("*.rows"))

    cluster.start_service("spark-worker")                             # compose's restart: unless-stopped
    wait_for("a Spark worker alive again", lambda: ctx.spark_master()["aliveworkers"] >= 1, 300, cluster,
             services=("spark-worker", "spark-master"), interval=2)
    run = ctx.wait_run("log_compaction", run_id)
    ctx.check_routing("log_compaction", run_id)
    build = ctx.db.ti("log_compaction", run_id, f"{group}.build_key_map", 0)
    clean = ctx.db.ti("log_compaction", run_id, f"{group}.clean", 0)
    apps = [(a["id"], a["state"]) for a in ctx.spark_master()["completedapps"] if a["name"] == app_name]
    if run["state"] == "success":
        assert build["state"] == clean["state"] == "success", ctx.story("log_compaction", run_id)
        compare(f"{topic}-0 cleaned after the Spark worker was killed", ctx.kafka.read(topic, 0), expected)
        outcome = (f"success: build_key_map try {build['try_number']}, Spark applications {apps}; the partition "
                   "holds exactly the latest value of every key")
    else:
        assert build["state"] == "failed", ctx.story("log_compaction", run_id)
        assert clean["state"] != "success" and not clean["hostname"], ctx.story("log_compaction", run_id)
        assert segment_hashes(pdir) == before, "the partition changed although its key map failed"
        alerts = wait_for("the alert of the failed run", lambda: ctx.alerts_for(run_id), 120, cluster,
                          services=("mailpit",), interval=2)
        assert len(alerts) == 1, [a["Subject"] for a in alerts]
        outcome = f"failed cleanly: build_key_map {build['state']} after {build['try_number']} tries, no clean"
    assert ctx.spark_master()["aliveworkers"] == 1
    SUMMARY["7_spark_worker_killed"] = {"run": run_id, "killed": [short(k) for k in killed],
                                        "stage_files_at_kill": stage,
                                        "outcome": outcome, "tries": ctx.db.tries("log_compaction", run_id)}
