"""Airflow test set-up: environment before Airflow is imported, one metadata DB per session, test fixtures.

Airflow reads AIRFLOW_HOME, the DAGs and plugins folders and unit-test mode once, when it is first imported,
so they are set at the top of this module, which pytest imports before any test module of this folder.
``dag.test()`` only runs DAGs that live in the configured DAGs folder, so that is the repository's ``dags/``.
The metadata DB is a SQLite file in a temporary AIRFLOW_HOME, reset once per session.
"""
from __future__ import annotations

import email
import email.policy
import json
import os
import pathlib
import shutil
import sys
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

REPO = pathlib.Path(__file__).resolve().parents[2]
DAGS_FOLDER = REPO / "dags"
PLUGINS_FOLDER = REPO / "plugins"

if "airflow" in sys.modules:     # pragma: no cover - a guard against a wrong import order
    raise RuntimeError("airflow was imported before tests/airflow/conftest.py could configure it")

_AIRFLOW_HOME = tempfile.mkdtemp(prefix="airflow-home-")
os.environ.update({
    "AIRFLOW_HOME": _AIRFLOW_HOME,
    "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS_FOLDER),
    "AIRFLOW__CORE__PLUGINS_FOLDER": str(PLUGINS_FOLDER),
    "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
    "AIRFLOW__CORE__UNIT_TEST_MODE": "True",
    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{_AIRFLOW_HOME}/airflow.db",
    "AIRFLOW__API__BASE_URL": "http://airflow.test:8080",
})
for _var in ("STORAGE_ENGINE_CONFIG", "STORAGE_MAINTENANCE_ALERT_EMAILS", "STORAGE_MAINTENANCE_ALERT_WEBHOOK",
             "AIRFLOW_CONN_SMTP_DEFAULT", "AIRFLOW_CONN_STORAGE_ENGINE_DEFAULT"):
    os.environ.pop(_var, None)
# Airflow puts the plugins folder on sys.path when it starts; the DAG files need it from the first parse.
if str(PLUGINS_FOLDER) not in sys.path:
    sys.path.append(str(PLUGINS_FOLDER))

import pytest  # noqa: E402

from include.broker_launcher import free_port  # noqa: E402

from .storage_fixtures import StorageFixture  # noqa: E402


def pytest_unconfigure(config):
    shutil.rmtree(_AIRFLOW_HOME, ignore_errors=True)


@pytest.fixture(scope="session", autouse=True)
def airflow_db():
    """A fresh metadata DB, created once for the whole session."""
    from airflow.utils import db

    db.resetdb()
    yield


@pytest.fixture(scope="session")
def console_sample(tmp_path_factory):
    """The console files' sample store, built once per worker and put back as built for each file that uses it, and
    the api-server over it, started once per worker (tests/airflow/console_sample.py; the module fixtures ``sample``
    and ``server`` of test_storage_view.py are its uses)."""
    from .console_sample import ConsoleSample

    sample = ConsoleSample(tmp_path_factory.mktemp("storage-view"))
    try:
        yield sample
    finally:
        sample.close()


@pytest.fixture
def storage(tmp_path, monkeypatch) -> StorageFixture:
    """A storage config in tmp_path, named by $STORAGE_ENGINE_CONFIG; see StorageFixture for building data."""
    fixture = StorageFixture(tmp_path / "storage")
    monkeypatch.setenv("STORAGE_ENGINE_CONFIG", str(fixture.config_path))
    return fixture


def parse_dag(dag_id: str):
    """Parse ``dags/<dag_id>.py`` now (its params list the topics of $STORAGE_ENGINE_CONFIG) and return the DAG.

    One file only, so a DAG file that another change breaks does not fail the tests of this one; the whole
    folder is checked by test_dag_integrity."""
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(DAGS_FOLDER / f"{dag_id}.py"))
    assert not bag.import_errors, bag.import_errors
    return bag.get_dag(dag_id)


class _Mailbox:
    """aiosmtpd handler keeping every message it receives, parsed."""

    def __init__(self):
        self.messages: list[email.message.EmailMessage] = []
        self.envelopes = []

    async def handle_DATA(self, server, session, envelope):   # noqa: N802 - aiosmtpd's naming
        self.envelopes.append(envelope)
        self.messages.append(email.message_from_bytes(envelope.original_content or envelope.content,
                                                      policy=email.policy.default))
        return "250 Message accepted for delivery"


@pytest.fixture
def smtp_server(monkeypatch):
    """A real SMTP server on 127.0.0.1, wired up as Airflow's smtp_default connection."""
    from aiosmtpd.controller import Controller

    mailbox = _Mailbox()
    port = free_port()
    controller = Controller(mailbox, hostname="127.0.0.1", port=port)
    controller.start()
    monkeypatch.setenv("AIRFLOW_CONN_SMTP_DEFAULT", json.dumps({
        "conn_type": "smtp", "host": "127.0.0.1", "port": port,
        "extra": {"disable_ssl": True, "disable_tls": True, "from_email": "airflow@storage.test",
                  "retry_limit": 0, "timeout": 10}}))
    try:
        yield mailbox
    finally:
        controller.stop()


class _WebhookHandler(BaseHTTPRequestHandler):
    def do_POST(self):
        length = int(self.headers.get("Content-Length", 0))
        body = self.rfile.read(length)
        self.server.received.append({"path": self.path, "content_type": self.headers.get("Content-Type"),  # type: ignore[attr-defined]  # the webhook fixture's own fields on its server
                                     "body": json.loads(body)})
        self.send_response(self.server.status)  # type: ignore[attr-defined]  # the webhook fixture's own fields on its server
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args):
        pass


@pytest.fixture
def webhook_server():
    """A real HTTP server on 127.0.0.1 recording the JSON POSTed to it; set ``.status`` to answer differently."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _WebhookHandler)
    server.received = []  # type: ignore[attr-defined]  # the webhook fixture's own fields on its server
    server.status = 200  # type: ignore[attr-defined]  # the webhook fixture's own fields on its server
    server.url = f"http://127.0.0.1:{server.server_address[1]}/alerts"  # type: ignore[attr-defined]  # the webhook fixture's own fields on its server
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def run_results(dag_run) -> dict:
    """{(task_id, map_index): return value} of a finished run, read back from the metadata DB's XCom table."""
    from sqlalchemy import select

    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = session.scalars(select(XComModel).where(
            XComModel.dag_id == dag_run.dag_id, XComModel.run_id == dag_run.run_id,
            XComModel.key == "return_value"))
        return {(row.task_id, row.map_index): XComModel.deserialize_value(row) for row in rows}


def partition_results(results: dict, task_id: str) -> dict:
    """{(topic, partition): per-partition result} from the batch results of ``task_id`` in ``run_results``."""
    out = {}
    for (task, _map_index), batch in results.items():
        if task == task_id:
            for r in batch["results"]:
                out[(r["topic"], r["partition"])] = r
    return out


def asset_events(uri_prefix: str = "kafka-log://", run_id: str | None = None) -> list[dict]:
    """Asset events recorded in the metadata DB for assets whose URI starts with ``uri_prefix`` (and emitted by
    run ``run_id``; the DB lives for the whole session), oldest first:
    ``{"uri", "extra", "source_dag_id", "source_task_id", "source_run_id", "source_map_index"}``."""
    from sqlalchemy import select

    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session

    with create_session() as session:
        query = (select(AssetModel.uri, AssetEvent).join(AssetEvent, AssetEvent.asset_id == AssetModel.id)
                 .where(AssetModel.uri.startswith(uri_prefix)).order_by(AssetEvent.id))
        if run_id is not None:
            query = query.where(AssetEvent.source_run_id == run_id)
        rows = session.execute(query).all()
        return [{"uri": uri, "extra": dict(ev.extra or {}), "source_dag_id": ev.source_dag_id,
                 "source_task_id": ev.source_task_id, "source_run_id": ev.source_run_id,
                 "source_map_index": ev.source_map_index} for uri, ev in rows]


def task_instances(dag_run) -> dict:
    """{(task_id, map_index): TaskInstance} of a finished run, fresh from the metadata DB."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        tis = session.scalars(select(TaskInstance).where(
            TaskInstance.dag_id == dag_run.dag_id, TaskInstance.run_id == dag_run.run_id)).all()
        session.expunge_all()
        return {(ti.task_id, ti.map_index): ti for ti in tis}


def without_retry_delay(dag):
    """Keep the DAG's retries but drop their delay, so dag.test() retries at once (no waiting in tests)."""
    import datetime

    for task in dag.tasks:
        task.retry_delay = datetime.timedelta(0)
    return dag
