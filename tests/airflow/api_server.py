"""A real ``airflow api-server`` for the Storage view tests, on the tests' metadata DB, with two users.

SimpleAuthManager users: ``admin`` (role admin) and ``viewer`` (role viewer); their generated passwords are
read from the server's password file. :meth:`ApiServer.token` logs in through ``POST /auth/token``.
"""
from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

from .conftest import DAGS_FOLDER, PLUGINS_FOLDER, REPO, free_port


class ApiServer:
    def __init__(self, home: pathlib.Path, storage_config: pathlib.Path, log_path: pathlib.Path):
        self.home = home
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
        env.pop("AIRFLOW__CORE__UNIT_TEST_MODE", None)
        env.update({
            "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS_FOLDER),
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(PLUGINS_FOLDER),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin,viewer:viewer",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(home / "passwords.json"),
            "AIRFLOW__API__BASE_URL": self.url,
            "STORAGE_ENGINE_CONFIG": str(storage_config),
            "PYTHONPATH": os.pathsep.join(p for p in [str(REPO), env.get("PYTHONPATH", "")] if p),
        })
        self.env = env
        self.proc: subprocess.Popen | None = None

    def start(self, timeout_s: float = 120) -> "ApiServer":
        airflow = pathlib.Path(sys.executable).parent / "airflow"
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([str(airflow), "api-server", "--host", "127.0.0.1", "--port", str(self.port),
                                      "--workers", "1"], env=self.env, stdout=self._log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True, cwd=REPO)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"api-server exited with {self.proc.returncode}; see {self.log_path}")
            try:
                with urllib.request.urlopen(f"{self.url}/api/v2/monitor/health", timeout=2):
                    if self.password("admin"):
                        return self
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"api-server did not answer within {timeout_s} s; see {self.log_path}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        if getattr(self, "_log", None):
            self._log.close()

    def password(self, user: str) -> str | None:
        try:
            return json.loads((self.home / "passwords.json").read_text()).get(user)
        except (OSError, ValueError):
            return None

    def token(self, user: str = "admin") -> str:
        req = urllib.request.Request(f"{self.url}/auth/token", method="POST", headers={"Content-Type": "application/json"},
                                     data=json.dumps({"username": user, "password": self.password(user)}).encode())
        with urllib.request.urlopen(req, timeout=30) as resp:
            return json.loads(resp.read())["access_token"]

    def request(self, path: str, *, token: str | None = None, method: str = "GET", body=None,
                content_type: str = "application/json") -> tuple[int, bytes, dict]:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        data = None
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            headers["Content-Type"] = content_type
        req = urllib.request.Request(self.url + path, method=method, headers=headers, data=data)
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                return resp.status, resp.read(), dict(resp.headers)
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read(), dict(exc.headers)

    def get_json(self, path: str, token: str):
        status, body, _ = self.request(path, token=token)
        assert status == 200, (path, status, body[:500])
        return json.loads(body)
