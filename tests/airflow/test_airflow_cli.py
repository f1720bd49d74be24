"""``make airflow-cli`` and ``make cluster-cli`` (include/airflow_cli.py): Airflow's CLI against the project's
environments, run through the Makefile targets as an operator runs them.

* ``variables set`` through ``make airflow-cli`` lands in the metadata DB this session's Airflow reads (checked
  in process with ``Variable.get``), and ``variables get`` reads one set in process;
* the README's backfill example, run as written with ``--dry-run``, lists the run count the README states (168:
  ``--to-date`` is inclusive and ``log_compaction`` is hourly), from ``--from-date`` to ``--to-date``;
* ``make cluster-cli`` takes the scheduler's environment of the last ``make cluster`` (its PostgreSQL port, its
  AIRFLOW_HOME); tests/cluster/test_cluster.py runs ``variables set/get`` through it against the cluster's PostgreSQL.

The targets run with ``BIN`` set to this interpreter's bin dir and ``STAMP`` empty: the recipe itself, without
``make venv``'s install step. ``--home`` points ``make airflow``'s environment at this session's AIRFLOW_HOME,
so nothing under var/ is touched.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.paths import REPO

pytestmark = pytest.mark.airflow


def make(target: str, args: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["make", "-s", "-C", str(REPO), target, f"BIN={Path(sys.executable).parent}", "STAMP=",
                           f"ARGS={shlex.join(args)}"], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ if env is None else env))


def airflow_cli(*args: str) -> subprocess.CompletedProcess:
    from airflow.configuration import conf

    # The session's Airflow runs in unit-test mode, whose Fernet key is not in AIRFLOW_HOME's airflow.cfg (as
    # make airflow's is, for every process): the CLI is given this process's key to read and write Variables.
    env = dict(os.environ, AIRFLOW__CORE__FERNET_KEY=conf.get("core", "fernet_key"))
    done = make("airflow-cli", ["--home", os.environ["AIRFLOW_HOME"], *args], env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def test_variables_set_and_get_through_make_airflow_cli_use_the_metadata_db():
    from airflow.models import Variable

    value = "retention paused: 'disk swap' on host a"      # spaces and quotes survive make's ARGS
    airflow_cli("variables", "set", "storage_cli_probe", value)
    assert Variable.get("storage_cli_probe") == value

    Variable.set("storage_cli_probe_2", "set in process")
    assert airflow_cli("variables", "get", "storage_cli_probe_2").stdout.strip().splitlines()[-1] == "set in process"


def readme_backfill() -> tuple[list[str], int]:
    """The README's ``backfill create`` command (as airflow's arguments) and the run count it states."""
    readme = (REPO / "README.md").read_text()
    section = readme[readme.index("### Backfilling compaction"):readme.index("## Tiered storage")]
    command = re.search(r'make airflow-cli ARGS="(backfill create --dag-id [^"]*)"', section)
    assert command, "the README's backfill example is not a make airflow-cli ARGS=\"backfill create ...\" command"
    stated = re.search(r"a week is \*\*(\d[\d,]*) runs\*\*", section)
    assert stated, "the README does not state how many runs the backfill creates"
    return shlex.split(command.group(1).replace("\\\n", " ")), int(stated.group(1).replace(",", ""))


def sync_dag(dag_id: str) -> None:
    """Put one DAG file's DAG in the metadata DB, as the dag-processor of ``make airflow`` does."""
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.dagbag import DagBag, sync_bag_to_db

    DagBundlesManager().sync_bundles_to_db()        # the dags-folder bundle the DAG rows refer to
    bag = DagBag(dag_folder=str(REPO / "dags" / f"{dag_id}.py"))
    assert not bag.import_errors, bag.import_errors
    sync_bag_to_db(bag, "dags-folder", None)


def test_the_readme_backfill_example_creates_the_runs_it_states():
    args, stated = readme_backfill()
    dag_id = args[args.index("--dag-id") + 1]
    sync_dag(dag_id)
    out = airflow_cli(*args, "--dry-run").stdout
    logical_dates = re.findall(r"^\| (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\+00:00) ", out, re.MULTILINE)
    assert len(logical_dates) == stated == 168, out[-2000:]
    from_date = args[args.index("--from-date") + 1].replace("T", " ")
    to_date = args[args.index("--to-date") + 1].replace("T", " ")
    assert (logical_dates[0], logical_dates[-1]) == (from_date, to_date)
    assert len(set(logical_dates)) == len(logical_dates)


def test_make_cluster_cli_takes_the_last_clusters_ports_and_home(tmp_path):
    """No cluster runs here: a state file as ``make cluster`` writes it, with PostgreSQL moved to another port."""
    from include.cluster.topology import Ports

    ports = Ports(postgres=15432, redis=16379)
    (tmp_path / "state.json").write_text(json.dumps({"processes": {}, "ports": ports.__dict__, "host": "127.0.0.1"}))
    done = make("cluster-cli", ["--print-env"], env=dict(os.environ, CLUSTER_DIR=str(tmp_path)))
    assert done.returncode == 0, done.stderr
    exported = dict(shlex.split(line.removeprefix("export "))[0].split("=", 1) for line in done.stdout.splitlines())
    assert exported["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] == "postgresql+psycopg2://airflow:airflow@127.0.0.1:15432/airflow"
    assert exported["AIRFLOW__CELERY__BROKER_URL"] == "redis://:@127.0.0.1:16379/0"
    assert exported["AIRFLOW_HOME"] == str(tmp_path / "airflow")
    assert exported["AIRFLOW__CORE__EXECUTOR"] == "CeleryExecutor"


def test_airflow_cli_without_a_command_names_what_is_missing():
    done = make("airflow-cli", [])
    assert done.returncode != 0
    assert "no airflow command given" in done.stderr


def test_the_demos_closing_lines_name_the_url_a_login_airflow_keeps_and_the_storage_view(tmp_path, monkeypatch):
    """``make demo`` ends with where ``make airflow`` serves: the URL, the login and the Storage view. The password
    is written before the api-server ever ran; Airflow's own SimpleAuthManager, started on that file as the
    api-server starts it, keeps it (it generates passwords only for users the file lacks)."""
    from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager

    from include.airflow_standalone import PASSWORD_FILE_NAME, where_to_look
    from storage_maintenance.plugin import StorageMaintenancePlugin

    lines = where_to_look(tmp_path, "127.0.0.1", 8123)
    password = json.loads((tmp_path / PASSWORD_FILE_NAME).read_text())["admin"]
    assert (tmp_path / PASSWORD_FILE_NAME).stat().st_mode & 0o777 == 0o600
    assert lines[0].split() == ["Airflow:", "http://localhost:8123"]
    assert lines[1].split()[:4] == ["login:", "admin", "/", password]
    assert lines[2].split()[:2] == ["Storage:", "http://localhost:8123/plugin/storage"]
    assert where_to_look(tmp_path, "127.0.0.1", 8123) == lines          # the same login every time

    monkeypatch.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS", "admin:admin")
    monkeypatch.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE", str(tmp_path / PASSWORD_FILE_NAME))
    SimpleAuthManager().init()
    assert SimpleAuthManager.get_passwords() == {"admin": password}
    # /plugin/<url_route> is where Airflow's UI shows a plugin's navigation entry
    routes = [v["url_route"] for v in StorageMaintenancePlugin.external_views if v["name"] == "Storage"]
    assert routes == ["storage"]
