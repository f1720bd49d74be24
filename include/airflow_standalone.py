"""``make airflow``: the project's DAGs in Airflow on this machine (SQLite, LocalExecutor), on loopback only.

``python -m include.airflow_standalone [--host 127.0.0.1] [--port 8080] [--check] [--timeout 180]``

Runs what ``airflow standalone`` runs (api-server, scheduler, dag-processor, triggerer) with
``AIRFLOW_HOME=var/airflow``, the project's ``dags/`` and ``plugins/``, ``core.parallelism`` 4 (the default 32
starts 32 worker processes) and ``STORAGE_ENGINE_CONFIG`` naming the storage config, so the DAGs maintain the
demo's log dirs. When the log dirs are empty, sample data is generated first. Once the health endpoint reports
every component healthy it prints the URL and the login: user ``admin``, password from
``var/airflow/simple_auth_manager_passwords.json.generated``. Each component's output goes to
``var/airflow/components/<component>.log``; Ctrl-C stops everything.

**What listens where.** ``airflow standalone`` listens on every interface: the api-server on ``0.0.0.0``
(``[api] host``), and the scheduler's and the triggerer's log servers on ``[::]``/``0.0.0.0`` ports 8793 and
8794, an address Airflow 3.3 has no setting for. This runs the four components itself instead: the api-server
on ``--host`` (default ``127.0.0.1``, from ``$AIRFLOW_HOST``; ``AIRFLOW_HOST=0.0.0.0 make airflow`` opens it to
the network) and the scheduler and triggerer with ``--skip-serve-logs``. On one machine the log servers serve
nothing the api-server cannot read itself: every task log is a local file. Spark in local mode binds to
``SPARK_LOCAL_IP``, set to ``127.0.0.1`` unless given. Nothing else listens.

``--check`` starts it, waits until it is healthy, logs in through the API (``POST /auth/token``), lists the
DAGs the dag-processor has loaded, then stops it: a smoke test of the local set-up.

:func:`airflow_env` is the environment every local Airflow command of the project uses (the demo's too).
"""
from __future__ import annotations

import argparse
import json
import os
import signal
from types import FrameType
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
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
DEFAULT_HOST = "127.0.0.1"
LOCAL_SPARK = '{"conn_type":"spark","host":"local[*]"}'
# The components `airflow standalone` runs, with the flags that keep the log servers from starting: their address
# cannot be set (Airflow 3.3 binds them to every interface), and on one machine every task log is a local file.
COMPONENTS: tuple[tuple[str, list[str]], ...] = (("api-server", []), ("scheduler", ["--skip-serve-logs"]), ("dag-processor", []),
              ("triggerer", ["--skip-serve-logs"]))


def venv_bin() -> Path:
    """The bin dir of the Python running this (the project's venv under ``make``)."""
    return Path(sys.executable).parent


def airflow_executable() -> str:
    candidate = venv_bin() / "airflow"
    return str(candidate) if candidate.exists() else "airflow"


def url_host(host: str) -> str:
    """The address to reach a server bound to ``host`` from this machine (in a URL)."""
    if host in ("", "0.0.0.0", "::", "localhost"):
        return "127.0.0.1"
    return f"[{host}]" if ":" in host else host


def is_loopback(host: str) -> bool:
    return host in ("localhost", "::1") or host.startswith("127.")


def airflow_env(*, storage_config: str | os.PathLike | None = None, port: int | None = None,
                home: str | os.PathLike = AIRFLOW_HOME, base: dict | None = None,
                host: str = DEFAULT_HOST) -> dict[str, str]:
    """Environment for local Airflow commands: SQLite metadata DB in ``home``, the project's dags/ and plugins/,
    no example DAGs, parallelism 4, the storage config, Spark in local mode from the venv (bound to loopback),
    and the api-server on ``host`` (loopback unless asked)."""
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
    env.setdefault("AIRFLOW_CONN_SPARK_DEFAULT", LOCAL_SPARK)
    if env["AIRFLOW_CONN_SPARK_DEFAULT"] == LOCAL_SPARK:
        # The local driver's RPC and block-manager ports bind to the machine's address unless told otherwise (a
        # spark:// master needs them reachable, so only the local default is pinned to loopback).
        env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    env["AIRFLOW__API__HOST"] = host
    # The scheduler's health server is off by default; if turned on, it stays on the same address.
    env.setdefault("AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_SERVER_HOST", host)
    if port is not None:
        env["AIRFLOW__API__PORT"] = str(port)
        env["AIRFLOW__API__BASE_URL"] = f"http://{'localhost' if url_host(host) == '127.0.0.1' else url_host(host)}:{port}"
        # Task processes report to the api-server's execution API: the address it listens on, not a name that
        # may resolve to ::1 first.
        env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"] = f"http://{url_host(host)}:{port}/execution/"
    return env


def port_in_use(port: int, host: str = DEFAULT_HOST) -> bool:
    with socket.socket(socket.AF_INET6 if ":" in url_host(host) else socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex((url_host(host).strip("[]"), port)) == 0


def health(port: int, host: str = DEFAULT_HOST) -> dict | None:
    """The health endpoint's JSON, or None while the api-server does not answer."""
    try:
        with urllib.request.urlopen(f"http://{url_host(host)}:{port}{HEALTH_PATH}", timeout=3) as resp:
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


# The simple auth manager's alphabet and length for the passwords it generates (no look-alike characters).
PASSWORD_ALPHABET = "abcdefghkmnpqrstuvwxyzABCDEFGHKMNPQRSTUVWXYZ23456789"
STORAGE_VIEW_PATH = "/plugin/storage"


def ensure_password(home: Path = AIRFLOW_HOME, user: str = "admin") -> str:
    """``user``'s password in ``home``'s password file, written first if missing: a random one of the kind the
    api-server generates at its first start (which keeps a password the file already holds), so ``make demo`` can
    print the login before Airflow's api-server has ever run. The file is readable by its owner only."""
    import secrets

    existing = read_password(home, user)
    if existing is not None:
        return existing
    path = home / PASSWORD_FILE_NAME
    try:
        passwords = json.loads(path.read_text()) if path.exists() else {}
    except ValueError:
        raise SystemExit(f"{path} is not JSON: fix or delete it (the api-server writes a new one)") from None
    passwords[user] = "".join(secrets.choice(PASSWORD_ALPHABET) for _ in range(16))
    home.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(json.dumps(passwords) + "\n")
    os.replace(tmp, path)
    return passwords[user]


def where_to_look(home: Path = AIRFLOW_HOME, host: str | None = None, port: int | None = None) -> list[str]:
    """The lines that tell where ``make airflow`` serves: its URL, the login and the Storage view's address
    (``AIRFLOW_HOST`` and ``AIRFLOW_PORT`` as ``make airflow`` reads them, unless given)."""
    host = host or os.environ.get("AIRFLOW_HOST") or DEFAULT_HOST
    port = port if port is not None else int(os.environ.get("AIRFLOW_PORT") or 8080)
    url = airflow_env(port=port, home=home, host=host)["AIRFLOW__API__BASE_URL"]
    return [f"  Airflow:  {url}",
            f"  login:    admin / {ensure_password(home)}  (in {os.path.relpath(home / PASSWORD_FILE_NAME)})",
            f"  Storage:  {url}{STORAGE_VIEW_PATH}  (the Storage view: \"Storage\" in Airflow's navigation)"]


def api_token(port: int, user: str, password: str, host: str = DEFAULT_HOST) -> str:
    req = urllib.request.Request(f"http://{url_host(host)}:{port}/auth/token", method="POST",
                                 data=json.dumps({"username": user, "password": password}).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())["access_token"]


def api_get(port: int, path: str, token: str, host: str = DEFAULT_HOST) -> dict:
    req = urllib.request.Request(f"http://{url_host(host)}:{port}{path}", headers={"Authorization": f"Bearer {token}"})
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


def prepare_metadata_db(env: dict, home: Path = AIRFLOW_HOME) -> None:
    """``airflow db migrate``, then SQLite's write-ahead log: with four task processes writing XComs and states
    at once, the default rollback journal made writers wait for readers until "database is locked" failed
    tasks (seen with 20 batch tasks over 10,000 partitions). WAL lets readers and one writer work together;
    the setting is kept in the database file."""
    subprocess.run([airflow_executable(), "db", "migrate"], cwd=REPO, env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    import sqlite3

    conn = sqlite3.connect(str(home / "airflow.db"))
    try:
        conn.execute("PRAGMA journal_mode=WAL")
    finally:
        conn.close()


def start_components(env: dict, host: str, port: int, log_dir: Path) -> list[tuple[str, subprocess.Popen]]:
    """Start the four components in one new process group (the first one leads it; not the terminal's, so a
    Ctrl-C reaches only this launcher, which stops them all at once), each writing to
    ``log_dir/<component>.log``. If one cannot be started, those already started are stopped."""
    log_dir.mkdir(parents=True, exist_ok=True)
    procs: list[tuple[str, subprocess.Popen]] = []
    try:
        for name, flags in COMPONENTS:
            args = [airflow_executable(), name, *flags]
            if name == "api-server":
                args += ["--host", host, "--port", str(port)]
            with open(log_dir / f"{name}.log", "ab") as out:
                procs.append((name, subprocess.Popen(
                    args, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                    process_group=procs[0][1].pid if procs else 0)))
    except BaseException:
        if procs:
            _stop(procs[0][1], others=[pr for _, pr in procs[1:]])
        raise
    return procs


def _stop(proc: subprocess.Popen, timeout: float = 6, others: Sequence[subprocess.Popen] = ()) -> int:
    """Stop the components we started (``proc`` leads their process group), within about ``timeout`` + 2 s.

    The components live in one process group, so SIGTERM goes to all of them at once (``airflow standalone``
    relaying a SIGINT to its components one after the other took about 35 s), then SIGKILL to whatever is left
    after ``timeout``."""
    def signal_group(sig: signal.Signals) -> bool:
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
    for p in [proc, *others]:
        try:
            p.wait(2)
        except subprocess.TimeoutExpired:
            pass
    return proc.returncode if proc.returncode is not None else -9


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m include.airflow_standalone", description=__doc__.split("\n\n")[0])
    p.add_argument("--host", default=os.environ.get("AIRFLOW_HOST") or DEFAULT_HOST,
                   help="address the api-server listens on (default: $AIRFLOW_HOST or 127.0.0.1, this machine "
                        "only; 0.0.0.0 opens it to the network)")
    p.add_argument("--port", type=int, default=int(os.environ.get("AIRFLOW_PORT", "8080")),
                   help="api-server port (default: $AIRFLOW_PORT or 8080)")
    p.add_argument("--home", type=Path, default=AIRFLOW_HOME, help="AIRFLOW_HOME (default: var/airflow)")
    p.add_argument("--check", action="store_true", help="start, wait until healthy, log in, list DAGs, stop")
    p.add_argument("--timeout", type=float, default=180, help="seconds to wait for health (default 180)")
    args = p.parse_args(argv)

    host, home = args.host, args.home.resolve()
    if port_in_use(args.port, host):
        print(f"port {args.port} is already in use: stop what listens there or run "
              f"`AIRFLOW_PORT=<free port> make airflow`", file=sys.stderr)
        return 1
    env = airflow_env(port=args.port, home=home, host=host)
    home.mkdir(parents=True, exist_ok=True)
    _ensure_sample_data(env)
    prepare_metadata_db(env, home)
    log_dir = home / "components"
    url = env["AIRFLOW__API__BASE_URL"]
    print(f"Starting Airflow (AIRFLOW_HOME={os.path.relpath(home)}, dags={os.path.relpath(DAGS_FOLDER)}, "
          f"plugins={os.path.relpath(PLUGINS_FOLDER)}, parallelism {PARALLELISM}, "
          f"STORAGE_ENGINE_CONFIG={os.path.relpath(env['STORAGE_ENGINE_CONFIG'])})", flush=True)
    reach = ("this machine only; AIRFLOW_HOST=0.0.0.0 opens it to the network" if is_loopback(host)
             else "reachable from the network")
    print(f"api-server on {host}:{args.port} ({reach}); component output: {os.path.relpath(log_dir)}/<component>.log",
          flush=True)
    started = time.monotonic()
    procs = start_components(env, host, args.port, log_dir)
    leader, others = procs[0][1], [pr for _, pr in procs[1:]]
    interrupted = False
    no_login = env.get("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS", "").lower() == "true"

    def exited() -> tuple[str, int] | None:
        for name, pr in procs:
            if pr.poll() is not None:
                return name, pr.returncode
        return None

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        nonlocal interrupted
        interrupted = True

    old_int = signal.signal(signal.SIGINT, on_signal)
    old_term = signal.signal(signal.SIGTERM, on_signal)
    try:
        h = None
        while not interrupted:
            gone = exited()
            if gone is not None:
                name, code = gone
                component_log = log_dir / f"{name}.log"
                print(f"airflow {name} exited with code {code} before Airflow was healthy; last lines of "
                      f"{os.path.relpath(component_log)}:\n{_tail(component_log)}", file=sys.stderr)
                _stop(leader, others=others)
                return 1
            h = health(args.port, host)
            if all_healthy(h) and (read_password(home) is not None or no_login):
                break
            if time.monotonic() - started > args.timeout:
                print(f"Airflow was not healthy after {args.timeout:.0f} s (last health: {h}); see "
                      f"{os.path.relpath(log_dir)}/", file=sys.stderr)
                _stop(leader, others=others)
                return 1
            time.sleep(1)
        if interrupted:
            _stop(leader, others=others)
            return 130
        password = read_password(home)
        print(f"\nAirflow is up after {time.monotonic() - started:.0f} s:  {url}", flush=True)
        if no_login:
            print("  login:    none (AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS=True)", flush=True)
        else:
            print(f"  login:    admin / {password}", flush=True)
            print(f"  password: {os.path.relpath(home / PASSWORD_FILE_NAME)}", flush=True)
        print(f"  Storage:  {url}{STORAGE_VIEW_PATH}  (the Storage view: \"Storage\" in Airflow's navigation)",
              flush=True)
        print(f"  health:   {url}{HEALTH_PATH} -> " +
              ", ".join(f"{k} {v.get('status')}" for k, v in (h or {}).items() if isinstance(v, dict)), flush=True)
        if args.check and not no_login:
            token = api_token(args.port, "admin", password or "", host)
            dag_ids = []
            deadline = time.monotonic() + 60
            expected = {f.stem for f in DAGS_FOLDER.glob("*.py") if not f.name.startswith("_")}
            while time.monotonic() < deadline:        # the dag-processor parses dags/ shortly after start
                dags = api_get(args.port, "/api/v2/dags?limit=100", token, host)
                dag_ids = sorted(d["dag_id"] for d in dags.get("dags", []))
                if dag_ids or not expected:
                    break
                time.sleep(2)
            print(f"  API login ok (POST /auth/token); DAGs loaded: {', '.join(dag_ids) or 'none'}", flush=True)
            print("Stopping (--check).", flush=True)
            code = _stop(leader, others=others)
            print(f"Airflow stopped (exit code {code}).", flush=True)
            return 0
        print("New DAGs start paused: unpause them in the UI. Ctrl-C stops Airflow.", flush=True)
        while not interrupted and exited() is None:
            time.sleep(0.5)
        gone = exited()
        if gone is not None and not interrupted:
            print(f"airflow {gone[0]} exited with code {gone[1]}; see {os.path.relpath(log_dir)}/{gone[0]}.log",
                  file=sys.stderr)
            _stop(leader, others=others)
            return 1
        print("\nStopping Airflow ...", flush=True)
        _stop(leader, others=others)
        return 0
    except Exception:
        _stop(leader, others=others)
        raise
    finally:
        signal.signal(signal.SIGINT, old_int)
        signal.signal(signal.SIGTERM, old_term)


if __name__ == "__main__":
    sys.exit(main())
