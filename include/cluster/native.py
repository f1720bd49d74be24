"""The services compose runs from other projects' images, started from Debian's packages here: PostgreSQL (the
metadata DB and Celery's result backend) and Redis (Celery's broker), both on 127.0.0.1 only.

PostgreSQL refuses to run as root. Run as root (CI, a container), its data lives under
``/var/lib/postgresql/storage-maintenance-<id>`` owned by the ``postgres`` user the package creates, and it is
started as that user (``setpriv``); otherwise under ``var/cluster/postgres``. The ``airflow`` role and database
are compose's (``POSTGRES_USER``/``POSTGRES_PASSWORD``/``POSTGRES_DB`` of its ``postgres`` service).
"""
from __future__ import annotations

import hashlib
import os
import pwd
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import IO, Callable

LOOPBACK = "127.0.0.1"


class MissingPackage(SystemExit):
    pass


def postgres_bin() -> Path:
    """The newest installed PostgreSQL's bin dir (Debian keeps them under /usr/lib/postgresql/<major>/bin)."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/postgres"), key=lambda p: int(p.parent.parent.name))
    if not found:
        raise MissingPackage("PostgreSQL is not installed: `make cluster` installs Debian's postgresql "
                             "(apt-get install postgresql)")
    return found[-1].parent


def redis_server() -> str:
    path = shutil.which("redis-server")
    if path is None:
        raise MissingPackage("redis-server is not installed: `make cluster` installs Debian's redis-server "
                             "(apt-get install redis-server)")
    return path


def as_root() -> bool:
    return os.geteuid() == 0


def postgres_data_dir(cluster_dir: Path) -> Path:
    if as_root():
        key = hashlib.sha256(str(cluster_dir.resolve()).encode()).hexdigest()[:12]
        return Path("/var/lib/postgresql") / f"storage-maintenance-{key}"
    return cluster_dir / "postgres"


def _as_postgres(args: list[str]) -> list[str]:
    if not as_root():
        return args
    return ["setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups", "--", *args]


def init_postgres(cluster_dir: Path, user: str, password: str, log: IO[bytes]) -> Path:
    """initdb once (local socket: trust; TCP: scram-sha-256)."""
    data = postgres_data_dir(cluster_dir)
    if (data / "PG_VERSION").exists():
        return data
    data.mkdir(parents=True, exist_ok=True)
    if as_root():
        pw = pwd.getpwnam("postgres")
        os.chown(data, pw.pw_uid, pw.pw_gid)
    data.chmod(0o700)
    pwfile = data.parent / f".{data.name}.pw"
    pwfile.write_text(password + "\n")
    if as_root():
        os.chown(pwfile, pwd.getpwnam("postgres").pw_uid, -1)
    try:
        subprocess.run(_as_postgres([str(postgres_bin() / "initdb"), "-D", str(data), "-U", user,
                                     f"--pwfile={pwfile}", "--auth-local=trust", "--auth-host=scram-sha-256",
                                     "-E", "UTF8", "--no-instructions"]),
                       check=True, stdout=log, stderr=subprocess.STDOUT)
    finally:
        pwfile.unlink(missing_ok=True)
    return data


def postgres_command(data: Path, port: int) -> list[str]:
    return _as_postgres([str(postgres_bin() / "postgres"), "-D", str(data), "-h", LOOPBACK, "-p", str(port),
                         "-k", str(data)])


def create_database(data: Path, port: int, user: str, db: str) -> None:
    """``POSTGRES_DB`` as the image's entrypoint creates it (once)."""
    psql = [str(postgres_bin() / "psql"), "-h", str(data), "-p", str(port), "-U", user, "-d", "postgres",
            "-tAc"]
    exists = subprocess.run(_as_postgres([*psql, f"SELECT 1 FROM pg_database WHERE datname = '{db}'"]),
                            capture_output=True, text=True, check=True).stdout.strip()
    if not exists:
        subprocess.run(_as_postgres([*psql, f'CREATE DATABASE "{db}" OWNER "{user}"']), check=True,
                       capture_output=True)


def redis_command(cluster_dir: Path, port: int) -> list[str]:
    (cluster_dir / "redis").mkdir(parents=True, exist_ok=True)
    return [redis_server(), "--bind", LOOPBACK, "--port", str(port), "--dir", str(cluster_dir / "redis"),
            "--save", "", "--appendonly", "no", "--daemonize", "no", "--protected-mode", "yes"]


def wait_for_port(port: int, timeout: float, alive: Callable[[], bool] = lambda: True) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and alive():
        with socket.socket() as s:
            s.settimeout(0.5)
            if s.connect_ex((LOOPBACK, port)) == 0:
                return True
        time.sleep(0.2)
    return False


def http_answers(url: str) -> bool:
    """An HTTP server answers ``url`` with a status below 500."""
    import urllib.error
    import urllib.request

    try:
        urllib.request.urlopen(url, timeout=2).close()
        return True
    except urllib.error.HTTPError as exc:
        return exc.code < 500
    except OSError:
        return False


def redis_ping(port: int) -> bool:
    try:
        with socket.create_connection((LOOPBACK, port), timeout=2) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False
