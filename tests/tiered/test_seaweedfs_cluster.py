"""`make cluster`'s object store: SeaweedFS as separate services (master, two volume servers, filer, S3 gateway, and
``seaweedfs-init`` creating the bucket), started by :class:`include.cluster.run.Cluster` from docker-compose.yaml's
commands, alone (no Airflow, Spark or PostgreSQL). Replication ``001`` is proved where it lives: each volume of an
object written through the S3 API is on both volume servers (the master's ``/dir/lookup``), each server hands out
the same bytes for it, and with one server killed the object still reads back whole through the gateway."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import signal
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config

from include.broker_launcher import free_ports
from include.cluster.run import Cluster
from include.cluster.topology import Ports

pytestmark = [pytest.mark.tiered, pytest.mark.kills]

KEY = "cluster/access-log-AAAAAAAAAAAAAAAAAAAAAA/0/00000000000000000000-BBBBBBBBBBBBBBBBBBBBBB.log"


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    # A short folder, not tmp_path: the filer's unix socket lives in it, and a socket path may not exceed 107
    # bytes (pytest's tmp_path for this test is 108 once its run number has four digits).
    folder = Path(tempfile.mkdtemp(prefix="swc-"))
    ports = Ports(*free_ports(len(dataclasses.fields(Ports))))
    cluster = Cluster(folder / "cluster", ports, base_env={"PATH": os.environ["PATH"]})
    cluster.prepare()
    try:
        cluster.start_seaweedfs(timeout=120)
        yield cluster
    finally:
        cluster.down(timeout=0)       # SIGKILL at once: the data is thrown away (a clean stop takes ~30 s)
        shutil.rmtree(folder, ignore_errors=True)


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return json.loads(resp.read())


def get_bytes(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return resp.read()


def s3(cluster: Cluster) -> Any:
    identity = json.loads((Path(__file__).parents[2] / "include" / "config" / "seaweedfs-s3.json").read_text())
    creds = identity["identities"][0]["credentials"][0]
    return boto3.client("s3", endpoint_url=f"http://127.0.0.1:{cluster.ports.seaweedfs_s3}",
                        aws_access_key_id=creds["accessKey"], aws_secret_access_key=creds["secretKey"],
                        region_name="us-east-1", config=Config(s3={"addressing_style": "path"}))


def bucket_of(cluster: Cluster) -> str:
    """The bucket seaweedfs-init creates (docker-compose.yaml's command names it)."""
    script = cluster.services["seaweedfs-init"].command[-1]
    return script.split("s3.bucket.create -name ", 1)[1].split("'", 1)[0].strip()


def test_an_object_is_on_both_volume_servers_and_reads_with_one_killed(cluster: Cluster) -> None:
    p = cluster.ports
    volume_servers = {"seaweedfs-volume-1": f"127.0.0.1:{p.seaweedfs_volume_1}",
                      "seaweedfs-volume-2": f"127.0.0.1:{p.seaweedfs_volume_2}"}
    topology = get_json(f"http://127.0.0.1:{p.seaweedfs_master}/dir/status")["Topology"]
    racks = {(dc["Id"], rack["Id"]): sorted(n["Url"] for n in rack["DataNodes"])
             for dc in topology["DataCenters"] for rack in dc["Racks"]}
    assert racks == {("dc1", "rack1"): sorted(volume_servers.values())}, racks

    client = s3(cluster)
    bucket = bucket_of(cluster)
    client.head_bucket(Bucket=bucket)                 # created by seaweedfs-init, not by this test
    data = os.urandom(5 * 1024 * 1024 + 12345)
    client.put_object(Bucket=bucket, Key=KEY, Body=data)

    # The filer's entry names the object's chunks (volume id, file key); the master says where each volume is.
    entry = get_json(f"http://127.0.0.1:{p.seaweedfs_filer}/buckets/{bucket}/{KEY}?metadata=true")
    chunks = entry["chunks"]
    assert chunks and sum(int(c["size"]) for c in chunks) == len(data), chunks
    for chunk in chunks:
        volume_id = chunk["file_id"].split(",")[0]
        lookup = get_json(f"http://127.0.0.1:{p.seaweedfs_master}/dir/lookup?volumeId={volume_id}")
        assert sorted(loc["url"] for loc in lookup["locations"]) == sorted(volume_servers.values()), lookup
        start = int(chunk.get("offset", 0))
        for server in volume_servers.values():        # each replica, read from its own server, is the data
            assert get_bytes(f"http://{server}/{chunk['file_id']}") == data[start:start + int(chunk["size"])]
    volumes = get_json(f"http://{volume_servers['seaweedfs-volume-1']}/status")["Volumes"]
    assert volumes and all(v["ReplicaPlacement"] == {"node": 1} for v in volumes), volumes    # 001

    # Kill -9 the server the master names first for the object's first volume (the one a reader would try).
    first = get_json(f"http://127.0.0.1:{p.seaweedfs_master}/dir/lookup?volumeId="
                     f"{chunks[0]['file_id'].split(',')[0]}")["locations"][0]["url"]
    victim = next(name for name, url in volume_servers.items() if url == first)
    pid = cluster.pid(victim)
    assert pid is not None
    os.killpg(pid, signal.SIGKILL)
    deadline = time.monotonic() + 60
    while first in [n for n in racks_nodes(p.seaweedfs_master)] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert first not in racks_nodes(p.seaweedfs_master), "the master still lists the killed volume server"

    body = client.get_object(Bucket=bucket, Key=KEY)["Body"].read()
    assert hashlib.sha256(body).hexdigest() == hashlib.sha256(data).hexdigest()


def racks_nodes(master_port: int) -> list[str]:
    topology = get_json(f"http://127.0.0.1:{master_port}/dir/status")["Topology"]
    return [n["Url"] for dc in topology["DataCenters"] for rack in dc["Racks"] for n in rack["DataNodes"]]
