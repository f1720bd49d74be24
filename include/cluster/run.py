"""``make cluster`` / ``make cluster-stop``: docker-compose.yaml's deployment as processes on this machine.

``python -m include.cluster up [--host 127.0.0.1] [--timeout 300]`` starts, in compose's order, PostgreSQL,
Redis and the SMTP catcher, SeaweedFS (master, two volume servers, filer, S3 gateway, then ``seaweedfs-init``
creates the bucket), then ``airflow-init`` (``airflow db migrate`` and the sample logs), the Spark master
and worker, the Airflow api-server, scheduler, dag-processor, triggerer and the two Celery workers (one per
storage host), and the Kafka-protocol broker; waits until each is up; prints the URLs and the login; and returns,
leaving them running. ``python -m include.cluster down`` stops every process it started (``--delete-data``
also removes the metadata DB and the logs). ``python -m include.cluster status`` lists them.

Everything lives under ``var/cluster`` (``CLUSTER_DIR`` moves it): ``airflow/`` (AIRFLOW_HOME), ``storage/``
(the log dirs and key maps: compose's ``storage`` volume), ``logs/<service>.log`` (each process's output),
``mail/`` (the alerts), ``seaweedfs/`` (the object store's servers' data), ``state.json`` (what runs). Commands and environment come from docker-compose.yaml
(:mod:`include.cluster.topology`). Every port is on 127.0.0.1; ``AIRFLOW_HOST=0.0.0.0`` opens the api-server
alone, as for ``make airflow``.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import asdict
from pathlib import Path
from typing import Callable, Mapping

from include.cluster import native, topology
from include.cluster.topology import LOOPBACK, Ports, Service

CELERY_APP = "airflow.providers.celery.executors.celery_executor.app"


def cluster_dir(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    return Path(env.get("CLUSTER_DIR") or topology.CLUSTER_DIR).resolve()


def _state_path(cdir: Path) -> Path:
    return cdir / "state.json"


def read_state(cdir: Path) -> dict:
    try:
        return json.loads(_state_path(cdir).read_text())
    except (OSError, ValueError):
        return {}


def _write_state(cdir: Path, state: dict) -> None:
    tmp = _state_path(cdir).with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=1))
    os.replace(tmp, _state_path(cdir))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:                                   # a zombie (our child, exited) is not alive
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def session_members(sid: int) -> list[int]:
    """The live processes of session ``sid``. Every service is started in a session of its own, and its processes
    stay in it even when they make process groups of their own, as Airflow's task processes (with the
    spark-submit under them) and PySpark's daemons do: signalling the service's process group does not reach
    those."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[3]) == sid and fields[0] != "Z":
                out.append(int(entry))
    return out


class Cluster:
    """The processes of one cluster dir."""

    def __init__(self, cdir: Path, ports: Ports, host: str = LOOPBACK, base_env: dict | None = None,
                 broker_overrides: dict | None = None):
        """``broker_overrides``: broker keys set over compose's storage config (a measurement's retention)."""
        self.dir, self.ports, self.host = cdir, ports, host
        self.broker_overrides = dict(broker_overrides or {})
        self.logs = cdir / "logs"
        self.base_env = dict(os.environ if base_env is None else base_env)
        self.compose = topology.load_compose()
        self.services = topology.services(ports, host=host, cluster_dir=cdir, compose=self.compose,
                                          base=self.base_env)
        self.state = read_state(cdir)
        self.state.setdefault("processes", {})

    # -- processes ----------------------------------------------------------------------------------------

    def _spawn(self, name: str, args: list[str], env: dict | None = None) -> subprocess.Popen:
        self.logs.mkdir(parents=True, exist_ok=True)
        with open(self.logs / f"{name}.log", "ab") as out:
            proc = subprocess.Popen(args, cwd=topology.REPO, env=env or self.base_env, stdout=out,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        self.state["processes"][name] = {"pid": proc.pid, "args": args}
        _write_state(self.dir, self.state)
        return proc

    def pid(self, name: str) -> int | None:
        entry = self.state["processes"].get(name)
        return entry["pid"] if entry and _alive(entry["pid"]) else None

    def _tail(self, name: str, lines: int = 30) -> str:
        try:
            return "\n".join((self.logs / f"{name}.log").read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def _wait(self, name: str, ready: Callable[[], object], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if ready():
                return
            if self.pid(name) is None:
                raise RuntimeError(f"{name} exited before it was ready; last lines of "
                                   f"{self.logs / (name + '.log')}:\n{self._tail(name)}")
            time.sleep(0.5)
        raise RuntimeError(f"{name} was not ready after {timeout:.0f} s; see {self.logs / (name + '.log')}:\n"
                           f"{self._tail(name)}")

    # -- the services ----------------------------------------------------------------------------------------

    def start_postgres(self, timeout: float) -> None:
        pg = topology.compose_environment(self.compose["services"]["postgres"])
        user, password, db = pg["POSTGRES_USER"], pg["POSTGRES_PASSWORD"], pg["POSTGRES_DB"]
        self.logs.mkdir(parents=True, exist_ok=True)
        with open(self.logs / "postgres.log", "ab") as log:
            data = native.init_postgres(self.dir, user, password, log)
        self.state["postgres_data"] = str(data)
        self._spawn("postgres", native.postgres_command(data, self.ports.postgres))
        self._wait("postgres", lambda: native.wait_for_port(self.ports.postgres, 0.5), timeout)
        deadline = time.monotonic() + timeout
        while True:             # accepting connections is not yet accepting logins during recovery
            try:
                native.create_database(data, self.ports.postgres, user, db)
                return
            except subprocess.CalledProcessError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    def start_redis(self, timeout: float) -> None:
        self._spawn("redis", native.redis_command(self.dir, self.ports.redis))
        self._wait("redis", lambda: native.redis_ping(self.ports.redis), timeout)

    def start_mail(self, timeout: float) -> None:
        self._spawn("mailpit", [sys.executable, "-m", "include.cluster.mail_sink", "--dir", str(self.dir / "mail"),
                                "--smtp-port", str(self.ports.smtp), "--http-port", str(self.ports.mail_http)])
        self._wait("mailpit", lambda: native.wait_for_port(self.ports.mail_http, 0.5), timeout)

    def start_seaweedfs(self, timeout: float) -> None:
        """The object store, each server once the ones it needs answer: the master, both volume servers (up when
        the master lists two data nodes: replication 001 needs both), the filer, the S3 gateway; then
        ``seaweedfs-init`` creates the bucket."""
        p = self.ports
        self.start_service("seaweedfs-master")
        self._wait("seaweedfs-master", lambda: native.wait_for_port(p.seaweedfs_master, 0.5), timeout)
        for name in ("seaweedfs-volume-1", "seaweedfs-volume-2"):
            self.start_service(name)
        for name in ("seaweedfs-volume-1", "seaweedfs-volume-2"):
            self._wait(name, lambda: len(self.seaweedfs_data_nodes()) >= 2, timeout)
        self.start_service("seaweedfs-filer")
        self._wait("seaweedfs-filer", lambda: native.wait_for_port(p.seaweedfs_filer, 0.5), timeout)
        self.start_service("seaweedfs-s3")
        self._wait("seaweedfs-s3", lambda: native.http_answers(f"http://{LOOPBACK}:{p.seaweedfs_s3}/healthz"),
                   timeout)
        self.run_once("seaweedfs-init", timeout)

    def seaweedfs_data_nodes(self) -> list[str]:
        """The volume servers the SeaweedFS master knows (``host:port``)."""
        try:
            with urllib.request.urlopen(f"http://{LOOPBACK}:{self.ports.seaweedfs_master}/dir/status",
                                        timeout=3) as resp:
                topo = json.loads(resp.read()).get("Topology") or {}
        except (OSError, ValueError):
            return []
        return [node["Url"] for dc in topo.get("DataCenters") or [] for rack in dc.get("Racks") or []
                for node in rack.get("DataNodes") or []]

    def prepare(self) -> None:
        """The files the containers get from the image or their volumes: the storage config with local paths,
        Spark's client config, the dirs of the ``storage`` volume."""
        import yaml

        self.dir.mkdir(parents=True, exist_ok=True)
        config = topology.storage_config(self.ports, self.dir, self.compose)
        config["broker"].update(self.broker_overrides)
        (self.dir / "storage.yaml").write_text(
            "# Generated by `make cluster` from include/config/storage.compose.yaml (local paths and ports).\n"
            + yaml.safe_dump(config, sort_keys=False))
        (self.dir / "spark-conf").mkdir(exist_ok=True)
        (self.dir / "spark-conf" / "spark-defaults.conf").write_text(topology.spark_defaults(self.dir, self.ports))
        (self.dir / "airflow" / "auth").mkdir(parents=True, exist_ok=True)
        for name in topology.SEAWEEDFS:       # the servers' data dirs (compose: their named volumes)
            for arg in self.services[name].command:
                flag, eq, path = arg.partition("=")
                if eq and flag in ("-dir", "-mdir", "-defaultStoreDir"):
                    Path(path).mkdir(parents=True, exist_ok=True)

    def run_init(self, timeout: float) -> None:
        self.run_once("airflow-init", timeout)

    def run_once(self, name: str, timeout: float) -> None:
        """A compose service that runs to completion (``restart: "no"``), which must succeed."""
        svc = self.services[name]
        proc = self._spawn(name, svc.command, svc.environment)
        try:
            code = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise RuntimeError(f"{name} did not finish in {timeout:.0f} s:\n{self._tail(name)}")
        if code != 0:
            raise RuntimeError(f"{name} failed (exit {code}):\n{self._tail(name)}")
        self.state["processes"].pop(name, None)

    def start_service(self, name: str) -> subprocess.Popen:
        svc: Service = self.services[name]
        return self._spawn(name, svc.command, svc.environment)

    def workers(self) -> list[str]:
        return [n for n, s in self.services.items()
                if s.command[1:3] == ["celery", "worker"] and s.is_airflow]

    # -- readiness -------------------------------------------------------------------------------------------

    def airflow_health(self) -> dict | None:
        try:
            with urllib.request.urlopen(f"http://{LOOPBACK}:{self.ports.airflow}/api/v2/monitor/health",
                                        timeout=3) as resp:
                return json.loads(resp.read())
        except (OSError, ValueError):
            return None

    def airflow_healthy(self) -> bool:
        h = self.airflow_health() or {}
        return all((h.get(c) or {}).get("status") == "healthy"
                   for c in ("metadatabase", "scheduler", "triggerer", "dag_processor"))

    def celery_nodes(self) -> list[str]:
        """The Celery workers that answer a ping."""
        env = self.services[self.workers()[0]].environment
        out = subprocess.run([str(topology.venv_bin() / "celery"), "--app", CELERY_APP, "inspect", "ping",
                              "--json", "--timeout", "3"], env=env, capture_output=True, text=True, timeout=60)
        nodes = []
        for line in out.stdout.splitlines():
            try:
                reply = json.loads(line)
            except ValueError:
                continue
            if isinstance(reply, dict):
                nodes += list(reply)
        return sorted(nodes)

    def spark_workers_alive(self) -> int:
        try:
            with urllib.request.urlopen(f"http://{LOOPBACK}:{self.ports.spark_master_ui}/json/", timeout=3) as r:
                return int(json.loads(r.read()).get("aliveworkers", 0))
        except (OSError, ValueError):
            return 0

    def password(self) -> str | None:
        try:
            return json.loads((self.dir / "airflow" / "auth" / "passwords.json").read_text()).get("admin")
        except (OSError, ValueError):
            return None

    # -- up / down -------------------------------------------------------------------------------------------

    def up(self, timeout: float = 300) -> None:
        running = [n for n in self.state["processes"] if self.pid(n)]
        if running:
            raise RuntimeError(f"a cluster already runs from {self.dir} ({', '.join(running)}): "
                               f"`make cluster-stop` first")
        taken = self.ports.in_use()
        if taken:
            raise RuntimeError(f"already in use on {LOOPBACK}: {', '.join(taken)}; stop what listens there or move "
                               f"the port (e.g. {taken[0].split('=')[0]}=<free port> make cluster)")
        self.state = {"processes": {}, "ports": asdict(self.ports), "host": self.host}
        self.prepare()
        _write_state(self.dir, self.state)
        self.start_postgres(timeout)
        self.start_redis(timeout)
        self.start_mail(timeout)
        self.start_seaweedfs(timeout)
        self.run_init(timeout)
        self.start_service("spark-master")
        self._wait("spark-master", lambda: native.wait_for_port(self.ports.spark_master_ui, 0.5), timeout)
        self.start_service("spark-worker")
        self._wait("spark-worker", lambda: self.spark_workers_alive() >= 1, timeout)
        for name in ("airflow-apiserver", "airflow-scheduler", "airflow-dag-processor", "airflow-triggerer",
                     *self.workers()):
            self.start_service(name)
        self._wait("airflow-apiserver", self.airflow_healthy, timeout)
        expected = sorted(f"celery@{self._celery_hostname(n)}" for n in self.workers())
        self._wait(self.workers()[0], lambda: all(n in self.celery_nodes() for n in expected), timeout)
        self.start_service("kafka-broker")
        self._wait("kafka-broker", lambda: native.wait_for_port(self.ports.broker, 0.5), timeout)

    def _celery_hostname(self, name: str) -> str:
        cmd = self.services[name].command
        return cmd[cmd.index("--celery-hostname") + 1] if "--celery-hostname" in cmd else name

    def down(self, timeout: float = 30) -> list[str]:
        """SIGTERM every process group started, newest first (PostgreSQL: SIGINT, its fast shutdown), SIGKILL
        what is left of their sessions after ``timeout``. Returns the names stopped."""
        stopped = []
        for name, entry in reversed(list(self.state["processes"].items())):
            pid = entry["pid"]
            if not _alive(pid):
                continue
            sig = signal.SIGINT if name == "postgres" else signal.SIGTERM
            try:
                os.killpg(pid, sig)
            except ProcessLookupError:
                continue
            except PermissionError:
                os.kill(pid, sig)
            stopped.append(name)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and any(_alive(e["pid"]) or session_members(e["pid"])
                                                  for e in self.state["processes"].values()):
            time.sleep(0.2)
        for entry in self.state["processes"].values():
            if _alive(entry["pid"]):
                try:
                    os.killpg(entry["pid"], signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            for pid in session_members(entry["pid"]):      # task processes in process groups of their own
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        self.state["processes"] = {}
        _write_state(self.dir, self.state)
        return stopped

    def delete_data(self) -> None:
        data = self.state.get("postgres_data") or str(native.postgres_data_dir(self.dir))
        shutil.rmtree(data, ignore_errors=True)
        shutil.rmtree(self.dir, ignore_errors=True)

    def summary(self) -> str:
        base = f"http://{'localhost' if self.host in (LOOPBACK, '0.0.0.0') else self.host}"
        lines = [f"Airflow (CeleryExecutor on PostgreSQL and Redis) is up: {base}:{self.ports.airflow}",
                 f"  login:       admin / {self.password()}   ({self.dir / 'airflow' / 'auth' / 'passwords.json'})",
                 "  workers:     " + ", ".join(
                     f"{n} (queues {self.services[n].command[self.services[n].command.index('--queues') + 1]})"
                     for n in self.workers()),
                 f"  Spark:       spark://{LOOPBACK}:{self.ports.spark_master} (UI http://{LOOPBACK}:"
                 f"{self.ports.spark_master_ui}), the spark_default connection",
                 f"  alerts:      http://{LOOPBACK}:{self.ports.mail_http}/ (SMTP {LOOPBACK}:{self.ports.smtp})",
                 f"  broker:      PLAINTEXT://{LOOPBACK}:{self.ports.broker}",
                 f"  object store: S3 http://{LOOPBACK}:{self.ports.seaweedfs_s3} (SeaweedFS; bucket, key and "
                 f"secret: {self.dir / 'storage.yaml'}'s rsm.config.*), master http://{LOOPBACK}:"
                 f"{self.ports.seaweedfs_master} (replication 001 over two volume servers)",
                 f"  metadata DB: postgresql://airflow@{LOOPBACK}:{self.ports.postgres}/airflow",
                 f"  log dirs:    {self.dir / 'storage' / 'logs'}; process output: {self.logs}/<service>.log",
                 "Every port listens on 127.0.0.1 only. DAGs start paused. `make cluster-stop` stops it all."]
        return "\n".join(lines)
