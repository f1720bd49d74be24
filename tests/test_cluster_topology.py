"""`make cluster` and docker-compose.yaml cannot drift apart: every compose service runs here, with compose's
command and environment, rewritten only by the address and path tables and the local-only settings that
include/cluster/topology.py names with their reasons. A service, a hostname, a path or a variable added to
compose without its local counterpart fails here."""
from __future__ import annotations

import dataclasses
import re
import socket
from pathlib import Path

import pytest
import yaml

from include.cluster import topology
from include.cluster.topology import LOCAL_FLAGS, LOCAL_ONLY, NATIVE, Ports
from storage_engine.config_file import config_from_mapping, load_config
from tests.paths import REPO

pytestmark = pytest.mark.unit

PORTS = Ports(airflow=18080, postgres=15432, redis=16379, smtp=11025, mail_http=18025, spark_master=17077,
              spark_master_ui=18081, spark_master_rest=16066, spark_worker=17080, spark_worker_ui=18082, spark_driver=17078, spark_block_manager=17079,
              broker=19092, seaweedfs_master=19333, seaweedfs_master_grpc=29333, seaweedfs_volume_1=18083,
              seaweedfs_volume_1_grpc=28083, seaweedfs_volume_2=18084, seaweedfs_volume_2_grpc=28084,
              seaweedfs_filer=18888, seaweedfs_filer_grpc=28888, seaweedfs_s3=18333, seaweedfs_s3_grpc=28333)
BASE = {"PATH": "/usr/bin", "HOME": "/root"}


@pytest.fixture(scope="module")
def compose() -> dict:
    return topology.load_compose()


@pytest.fixture(scope="module")
def local(compose, tmp_path_factory) -> tuple[Path, dict[str, topology.Service]]:
    cdir = tmp_path_factory.mktemp("cluster")
    return cdir, topology.services(PORTS, cluster_dir=cdir, compose=compose, base=BASE)


def _compose_names(compose) -> set[str]:
    """Every name a container can reach another by: service names and hostnames."""
    names = set(compose["services"])
    names |= {svc["hostname"] for svc in compose["services"].values() if svc.get("hostname")}
    return names


def _leftover_names(value: str, names: set[str]) -> list[str]:
    return [n for n in names if re.search(rf"(?<![\w.-]){re.escape(n)}(?=[:/\"])(?!://)", value)]


def test_every_compose_service_runs_here(compose, local):
    _, services = local
    assert list(services) == list(compose["services"]), "every compose service, in compose's order"
    for name, svc in services.items():
        if name in NATIVE:
            assert not compose["services"][name].get("build"), f"{name} is built from this project: run it"
            continue
        assert svc.command, f"{name} has no local command"


def test_commands_are_composes_with_local_addresses_paths_and_executables(compose, local):
    cdir, services = local
    for name, svc in services.items():
        if svc.native:
            continue
        original = topology.compose_command(compose["services"][name])
        command = [a for a in svc.command if a not in LOCAL_FLAGS]
        assert Path(command[0]).name == Path(original[0]).name or (original[0], Path(command[0]).name) in (
            ("python", Path(topology.sys.executable).name),), f"{name}: {command[0]} is not compose's {original[0]}"
        assert len(command) >= len(original), f"{name}: {command} drops arguments of {original}"
        for a in command[1:]:
            leftover = _leftover_names(a, _compose_names(compose))
            assert not leftover, f"{name}: argument {a!r} still names compose host(s) {leftover}"
            assert "/opt/" not in a, f"{name}: argument {a!r} still names a container path"
        # every compose flag is still there (its value may be made local)
        flags = [a for a in original if a.startswith("--")]
        assert all(f in command for f in flags), f"{name}: {command} lacks flags of {original}"
        extra = [a for a in svc.command if a in LOCAL_FLAGS]
        assert all(a not in original for a in extra)


def test_environment_is_composes_plus_the_named_local_settings(compose, local):
    cdir, services = local
    names = _compose_names(compose)
    for name, svc in services.items():
        if svc.native:
            continue
        compose_env = topology.compose_environment(compose["services"][name])
        missing = set(compose_env) - set(svc.environment)
        assert not missing, f"{name}: compose sets {sorted(missing)}, the local service does not"
        unexplained = set(svc.environment) - set(compose_env) - set(BASE) - set(LOCAL_ONLY)
        assert not unexplained, f"{name}: local-only variables without a reason in LOCAL_ONLY: {sorted(unexplained)}"
        for key, value in svc.environment.items():
            if key in compose_env and key not in LOCAL_ONLY:
                expected = (topology.translate_connection(compose_env[key], PORTS, cdir)
                            if key.startswith("AIRFLOW_CONN_") else topology.translate(compose_env[key], PORTS, cdir))
                assert value == expected, f"{name}: {key}={value!r} is not compose's {compose_env[key]!r} made local"
            leftover = _leftover_names(value, names)
            assert not leftover, f"{name}: {key}={value!r} still names compose host(s) {leftover}"
            assert "/opt/" not in value, f"{name}: {key}={value!r} still names a container path"


def test_every_address_is_loopback_and_every_port_distinct(local):
    _, services = local
    ports = list(vars(PORTS).values())
    assert len(set(ports)) == len(ports)
    for name, svc in services.items():
        for value in [*svc.command, *svc.environment.values()]:
            for host in re.findall(r"(?:\w+://|@)(?:[^/@\s:\"]*:?[^/@\s:\"]*@)?([\w.-]+):\d+", value):
                assert host in ("127.0.0.1", "localhost"), f"{name}: {value!r} reaches {host}, not loopback"


def test_every_port_can_be_moved_from_the_environment():
    env = {"AIRFLOW_PORT": "18090", **{f"CLUSTER_{k.upper()}_PORT": str(20000 + i)
                                        for i, k in enumerate(vars(Ports()).keys()) if k != "airflow"}}
    ports = Ports.from_env(env)
    assert ports.airflow == 18090 and ports.broker == int(env["CLUSTER_BROKER_PORT"])
    with pytest.raises(SystemExit, match="CLUSTER_REDIS_PORT"):
        Ports.from_env({"CLUSTER_REDIS_PORT": "http"})
    with pytest.raises(SystemExit, match="1-65535"):
        Ports.from_env({"AIRFLOW_PORT": "70000"})


def test_the_storage_config_is_composes_with_local_log_dirs(compose, local, tmp_path):
    cdir, _ = local
    data = topology.storage_config(PORTS, cdir, compose)
    original = load_config(REPO / "include" / "config" / "storage.compose.yaml")
    config = config_from_mapping(data, base_dir=str(tmp_path))
    assert [Path(d) for d in config.log_dirs] == [cdir / "storage" / Path(d).relative_to("/opt/storage")
                                                 for d in original.log_dirs]
    assert set(config.hosts) == set(original.hosts)
    assert config.server["advertised.listeners"] == f"PLAINTEXT://127.0.0.1:{PORTS.broker}"
    assert config.remote["rsm.config.storage.s3.endpoint.url"] == f"http://127.0.0.1:{PORTS.seaweedfs_s3}"
    for topic in original.topic_overrides:
        assert config.log_config(topic) == original.log_config(topic), topic


def test_spark_client_settings_are_the_images_with_local_paths(local):
    cdir, _ = local
    ours = yaml.safe_load("{}") or {}
    for line in (REPO / "include" / "spark" / "spark-defaults.conf").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            key, value = line.split(None, 1)
            ours[key] = value.strip()
    local_conf = dict(ln.split(None, 1) for ln in topology.spark_defaults(cdir, PORTS).splitlines()
                      if ln.strip() and not ln.startswith("#"))
    assert set(local_conf) == set(ours)
    assert local_conf["spark.driver.bindAddress"].strip() == "127.0.0.1"
    assert local_conf["spark.executorEnv.PYTHONPATH"].strip() == str(REPO)


def test_spark_daemons_listen_on_their_local_ports_only(local):
    """Every port the Spark master and worker open is one of :class:`Ports`: the master's REST submission server
    through ``spark.master.rest.port`` (the master has no flag for it), the worker's RPC port through ``--port``
    (Spark picks a random one without it). tests/cluster/test_cluster.py checks what they listen on."""
    _, services = local

    def flag(command: list[str], name: str) -> str:
        return command[command.index(name) + 1]

    master, worker = services["spark-master"], services["spark-worker"]
    assert (flag(master.command, "--port"), flag(master.command, "--webui-port")) == ("17077", "18081")
    assert master.environment["SPARK_MASTER_OPTS"] == "-Dspark.master.rest.port=16066"
    assert (flag(worker.command, "--port"), flag(worker.command, "--webui-port")) == ("17080", "18082")
    assert "SPARK_MASTER_OPTS" not in worker.environment
    kept = topology.services(PORTS, compose=topology.load_compose(), base={**BASE, "SPARK_MASTER_OPTS": "-Xmx1g"})
    assert kept["spark-master"].environment["SPARK_MASTER_OPTS"] == "-Xmx1g -Dspark.master.rest.port=16066"


def test_make_cluster_runs_this_module():
    makefile = (REPO / "Makefile").read_text()
    assert re.search(r"^cluster: .*\n\t\$\(BIN\)/python -m include\.cluster up", makefile, re.M)
    assert re.search(r"^cluster-stop: .*\n\t\$\(BIN\)/python -m include\.cluster down", makefile, re.M)


def test_seaweedfs_servers_listen_and_meet_on_their_local_ports(local):
    """Each weed server binds to and advertises loopback on its own local HTTP and gRPC ports, and the others
    reach it there (weed's host:port.grpcPort addresses carry both)."""
    _, services = local
    own = {"seaweedfs-master": (PORTS.seaweedfs_master, PORTS.seaweedfs_master_grpc),
           "seaweedfs-volume-1": (PORTS.seaweedfs_volume_1, PORTS.seaweedfs_volume_1_grpc),
           "seaweedfs-volume-2": (PORTS.seaweedfs_volume_2, PORTS.seaweedfs_volume_2_grpc),
           "seaweedfs-filer": (PORTS.seaweedfs_filer, PORTS.seaweedfs_filer_grpc),
           "seaweedfs-s3": (PORTS.seaweedfs_s3, PORTS.seaweedfs_s3_grpc)}
    assert set(own) == set(topology.SEAWEEDFS)
    master = f"-master=127.0.0.1:{PORTS.seaweedfs_master}.{PORTS.seaweedfs_master_grpc}"
    for name, (http, grpc) in own.items():
        cmd = services[name].command
        assert Path(cmd[0]).name == "weed"
        assert {"-ip=127.0.0.1", "-ip.bind=127.0.0.1", f"-port={http}", f"-port.grpc={grpc}"} <= set(cmd), cmd
        if name in ("seaweedfs-volume-1", "seaweedfs-volume-2", "seaweedfs-filer"):
            assert master in cmd, cmd
    assert f"-filer=127.0.0.1:{PORTS.seaweedfs_filer}.{PORTS.seaweedfs_filer_grpc}" in services["seaweedfs-s3"].command
    assert services["seaweedfs-init"].command[:2] == ["/bin/sh", "-c"]
    assert services["seaweedfs-init"].command[2].count(f"{master} -filer=127.0.0.1:{PORTS.seaweedfs_filer}.") == 2


def test_the_readme_ports_table_names_every_port_with_its_default_and_variable():
    readme = (REPO / "README.md").read_text()
    section = readme[readme.index("\n## Ports\n"):]
    rows = [r for r in section.splitlines() if r.startswith("| `make cluster` |")]
    defaults = Ports()
    for f in dataclasses.fields(Ports):
        variable = Ports.variable(f.name)
        row = [r for r in rows if re.search(rf"`{variable}`", r)]
        assert len(row) == 1, f"the README's Ports table has no single make cluster row naming {variable}"
        cells = [c.strip() for c in row[0].strip("|").split("|")]
        assert f"`{getattr(defaults, f.name)}`" in cells[2], f"{variable}: the table's default {cells[2]!r}"


def test_make_cluster_refuses_a_port_in_use_before_starting_anything(tmp_path):
    """A port something else listens on fails `make cluster` at once, naming the variable that moves it; without
    the check a readiness probe would reach the other server and pass."""
    from include.broker_launcher import free_ports
    from include.cluster.run import Cluster

    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        taken = other.getsockname()[1]
        ports = dataclasses.replace(Ports(*free_ports(len(dataclasses.fields(Ports)))), seaweedfs_s3_grpc=taken)
        assert ports.in_use() == [f"CLUSTER_SEAWEEDFS_S3_GRPC_PORT={taken}"]
        cluster = Cluster(tmp_path, ports, base_env=BASE)
        with pytest.raises(RuntimeError, match=f"CLUSTER_SEAWEEDFS_S3_GRPC_PORT={taken}"):
            cluster.up(timeout=5)
    assert cluster.state["processes"] == {}
    assert not (tmp_path / "logs").exists() or not any((tmp_path / "logs").iterdir())
