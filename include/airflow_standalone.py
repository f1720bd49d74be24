"""``make airflow``: the project's DAGs in ``airflow standalone`` on this machine (SQLite, LocalExecutor).

``python -m include.airflow_standalone [--port 8080] [--check] [--timeout 180]``

Runs ``airflow standalone`` (api-server, scheduler, dag-processor, triggerer) with ``AIRFLOW_HOME=var/airflow``,
the project's ``dags/`` and ``plugins/``, ``core.parallelism`` 4 (the default 32 starts 32 worker processes)
and ``STORAGE_ENGINE_CONFIG`` naming the storage config, so the DAGs maintain the demo's log dirs. When the
log dirs are empty, sample data is generated first. Once the health endpoint reports every component healthy
it prints the URL and the login: user ``admin``, password from
``var/airflow/simple_auth_manager_passwords.json.generated``. The components' output goes to
``var/airflow/standalone.log``; Ctrl-C stops everything.

``--check`` starts it, waits until it is healthy, logs in through the API (``POST /auth/token``), lists the
DAGs the dag-processor has loaded, then stops it: a smoke test of the local set-up.

:func:`airflow_env` is the environment every local Airflow command of the project uses (the demo's too).
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
VAR = REPO / "var"
AIRFLOW_HOME = VAR / "airflow"
DAGS_FOLDER = REPO / "dags"
PLUGINS_FOLDER = REPO / "plugins"
DEFAULT_STORAGE_CONFIG = REPO / "include" / "config" / "storage.yaml"
PASSWORD_FILE_NAME = "simple_auth_manager_passwords.json.generated"
HEALTH_PATH = "/api/v2/monitor/health"
PARALLELISM = 4


def venv_bin() -> Path:
    """The bin dir of the Python running this (the project's venv under ``make``)."""
    return Path(sys.executable).parent


def airflow_executable() -> str:
    candidate = venv_bin() / "airflow"
    return str(candidate) if candidate.exists() else "airflow"


def airflow_env(*, storage_config: str | os.PathLike | None = None, port: int | None = None,
                home: str | os.PathLike = AIRFLOW_HOME, base: dict | None = None) -> dict[str, str]:
    """Environment for local Airflow commands: SQLite metadata DB in ``home``, the project's dags/ and plugins/,
    no example DAGs, parallelism 4, the storage config, Spark in local mode from the venv."""
    env = dict(os.environ if base is None else base)
    home = Path(home).resolve()
    config = storage_config or env.get("STORAGE_ENGINE_CONFIG") or DEFAULT_STORAGE_CONFIG
    env.update({
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS_FOLDER),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(PLUGINS_FOLDER),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__PARALLELISM": str(PARALLELISM),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
        "STORAGE_ENGINE_CONFIG": str(Path(config).resolve()),
        # Spark in local mode with the venv's spark-submit and python (the JSON form: a URI such as
        # spark://local[*] does not parse and the hook would silently submit to YARN).
        "PYSPARK_PYTHON": sys.executable,
        "PATH": os.pathsep.join([str(venv_bin()), env.get("PATH", "")]),
        "PYTHONPATH": os.pathsep.join(p for p in [str(REPO), env.get("PYTHONPATH", "")] if p),
    })
    env.setdefault("AIRFLOW_CONN_SPARK_DEFAULT", '{"conn_type":"spark","host":"local[*]"}')
    if port is not None:
        env["AIRFLOW__API__PORT"] = str(port)
        env["AIRFLOW__API__BASE_URL"] = f"http://localhost:{port}"
    return env


def port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def health(port: int) -> dict | None:
    """The health endpoint's JSON, or None while the api-server does not answer."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{HEALTH_PATH}", timeout=3) as resp:
            return json.loads(resp.read())
    except (urllib.error.URLError, OSError, ValueError):
        return None


def all_healthy(h: dict | None) -> bool:
    if not h:
        return False
    components = ("metadatabase", "scheduler", "triggerer", "dag_processor")
    return all((h.get(c) or {}).get("status") == "healthy" for c in components)


def read_password(home: Path = AIRFLOW_HOME, user: str = "admin") -> str | None:
    try:
        with open(home / PASSWORD_FILE_NAME) as f:
            return json.load(f).get(user)
    except (OSError, ValueError):
        return None


def api_token(port: int, user: str, password: str) -> str:
    req = urllib.request.Request(f"http://127.0.0.1:{port}/auth/token", method="POST",
                                 data=json.dumps({"username": user, "password": password}).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())["access_token"]


def api_get(port: int, path: str, token: str) -> dict:
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())


def _tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def _ensure_sample_data(env: dict) -> None:
    """Generate sample logs when the configured log dirs hold none (never touches existing data)."""
    from include.sample_data import existing_partitions
    from storage_engine import load_config

    config = load_config(env["STORAGE_ENGINE_CONFIG"])
    if existing_partitions(config):
        return
    print("The log dirs are empty: generating sample data first (python -m include.sample_data).", flush=True)
    subprocess.run([sys.executable, "-m", "include.sample_data", "--config", env["STORAGE_ENGINE_CONFIG"],
                    "--skip-existing"], cwd=REPO, env=env, check=True)


def prepare_metadata_db(env: dict) -> None:
    """``airflow db migrate``, then SQLite's write-ahead log: with four task processes writing XComs and states
    at once, the default rollback journal made writers wait for readers until "database is locked" failed
    tasks (seen with 20 batch tasks over 10,000 partitions). WAL lets readers and one writer work together;
    the setting is kept in the database file."""
    subprocess.run([airflow_executable(), "db", "migrate"], cwd=REPO, env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    import sqlite3

    conn = sqlite3.connect(str(AIRFLOW_HOME / "airflow.db"))
    try:
        conn.execute("PRAGMA journal_mode=WAL")
    finally:
        conn.close()


def _stop(proc: subprocess.Popen, timeout: float = 6) -> int:
    """Stop the standalone we started and every component it runs, within about ``timeout`` + 2 s.

    The components live in the process group the standalone leads (start_new_session), so SIGTERM goes to
    the whole group at once (``airflow standalone`` relaying a SIGINT to its components one after the other
    took about 35 s), then SIGKILL to whatever is left after ``timeout``."""
    def signal_group(sig) -> bool:
        try:
            os.killpg(proc.pid, sig)
            return True
        except (ProcessLookupError, PermissionError):
            return False

    if signal_group(signal.SIGTERM):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and _group_alive(proc.pid):
            proc.poll()
            time.sleep(0.2)
        signal_group(signal.SIGKILL)
    try:
        proc.wait(2)
    except subprocess.TimeoutExpired:
        pass
    return proc.returncode if proc.returncode is not None else -9


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m include.airflow_standalone", description=__doc__.split("\n\n")[0])
    p.add_argument("--port", type=int, default=int(os.environ.get("AIRFLOW_PORT", "8080")),
                   help="api-server port (default: $AIRFLOW_PORT or 8080)")
    p.add_argument("--check", action="store_true", help="start, wait until healthy, log in, list DAGs, stop")
    p.add_argument("--timeout", type=float, default=180, help="seconds to wait for health (default 180)")
    args = p.parse_args(argv)

    if port_in_use(args.port):
        print(f"port {args.port} is already in use: stop what listens there or run "
              f"`AIRFLOW_PORT=<free port> make airflow`", file=sys.stderr)
        return 1
    env = airflow_env(port=args.port)
    AIRFLOW_HOME.mkdir(parents=True, exist_ok=True)
    _ensure_sample_data(env)
    prepare_metadata_db(env)
    log_path = AIRFLOW_HOME / "standalone.log"
    url = f"http://localhost:{args.port}"
    print(f"Starting airflow standalone (AIRFLOW_HOME={os.path.relpath(AIRFLOW_HOME)}, dags={os.path.relpath(DAGS_FOLDER)}, "
          f"plugins={os.path.relpath(PLUGINS_FOLDER)}, parallelism {PARALLELISM}, "
          f"STORAGE_ENGINE_CONFIG={os.path.relpath(env['STORAGE_ENGINE_CONFIG'])})", flush=True)
    print(f"Component output: {os.path.relpath(log_path)}", flush=True)
    log = open(log_path, "ab")
    started = time.monotonic()
    proc = subprocess.Popen([airflow_executable(), "standalone"], cwd=REPO, env=env, stdout=log,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    interrupted = False
    no_login = env.get("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS", "").lower() == "true"

    def on_signal(signum, _frame):
        nonlocal interrupted
        interrupted = True

    old_int = signal.signal(signal.SIGINT, on_signal)
    old_term = signal.signal(signal.SIGTERM, on_signal)
    try:
        h = None
        while not interrupted:
            if proc.poll() is not None:
                print(f"airflow standalone exited with code {proc.returncode} before it was healthy; last lines of "
                      f"{os.path.relpath(log_path)}:\n{_tail(log_path)}", file=sys.stderr)
                return 1
            h = health(args.port)
            if all_healthy(h) and (read_password() is not None or no_login):
                break
            if time.monotonic() - started > args.timeout:
                print(f"airflow standalone was not healthy after {args.timeout:.0f} s (last health: {h}); last lines "
                      f"of {os.path.relpath(log_path)}:\n{_tail(log_path)}", file=sys.stderr)
                _stop(proc)
                return 1
            time.sleep(1)
        if interrupted:
            _stop(proc)
            return 130
        password = read_password()
        print(f"\nAirflow is up after {time.monotonic() - started:.0f} s:  {url}", flush=True)
        if no_login:
            print("  login:    none (AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS=True)", flush=True)
        else:
            print(f"  login:    admin / {password}", flush=True)
            print(f"  password: {os.path.relpath(AIRFLOW_HOME / PASSWORD_FILE_NAME)}", flush=True)
        print(f"  health:   {url}{HEALTH_PATH} -> " +
              ", ".join(f"{k} {v.get('status')}" for k, v in h.items() if isinstance(v, dict)), flush=True)
        if args.check and not no_login:
            token = api_token(args.port, "admin", password)
            dag_ids = []
            deadline = time.monotonic() + 60
            expected = {f.stem for f in DAGS_FOLDER.glob("*.py") if not f.name.startswith("_")}
            while time.monotonic() < deadline:        # the dag-processor parses dags/ shortly after start
                dags = api_get(args.port, "/api/v2/dags?limit=100", token)
                dag_ids = sorted(d["dag_id"] for d in dags.get("dags", []))
                if dag_ids or not expected:
                    break
                time.sleep(2)
            print(f"  API login ok (POST /auth/token); DAGs loaded: {', '.join(dag_ids) or 'none'}", flush=True)
            print("Stopping (--check).", flush=True)
            code = _stop(proc)
            print(f"airflow standalone stopped (exit code {code}).", flush=True)
            return 0
        print("New DAGs start paused: unpause them in the UI. Ctrl-C stops Airflow.", flush=True)
        while not interrupted and proc.poll() is None:
            time.sleep(0.5)
        if proc.poll() is not None and not interrupted:
            print(f"airflow standalone exited with code {proc.returncode}; see {os.path.relpath(log_path)}",
                  file=sys.stderr)
            return 1
        print("\nStopping airflow standalone ...", flush=True)
        _stop(proc)
        return 0
    except Exception:
        _stop(proc)
        raise
    finally:
        signal.signal(signal.SIGINT, old_int)
        signal.signal(signal.SIGTERM, old_term)
        log.close()


if __name__ == "__main__":
    sys.exit(main())
