"""Masking and consumer-group lag in the Storage view, as users see them in Debian's chromium against a real
``airflow api-server``: the demo's storage config masks the ``email`` field of ``user-emails``; a viewer (no read
permission on Airflow's connections) sees it masked on the message browser and in its JSON, an admin in clear. A
real broker and a confluent-kafka consumer that commits on one partition only: the group page shows every
partition of the topic, the uncommitted ones lagging from their log start, and the lag history as a chart.

Oracles: the records as the engine reads them (``Log.read_records``), the consumer's own commits and the log
offsets the engine reports. Screenshots under ``var/test-artifacts/storage-view/masking-lag/``.
"""
from __future__ import annotations

import json
import os
import pathlib
import time

import pytest
import yaml

from include.broker_launcher import BrokerLauncher
from storage_engine.config_file import load_config
from storage_engine.log.manager import LogManager

from .api_server import ApiServer
from .conftest import REPO
from .storage_fixtures import T_MS
from .browser import chromium, log_in
from tests.typed import present

pytestmark = [pytest.mark.airflow, pytest.mark.e2e]

ARTIFACTS = REPO / "var" / "test-artifacts" / "storage-view" / "masking-lag"
BASE = "/storage-maintenance"
TIMEOUT_S = 60
GROUP = "lag-readers"
TRIMMED = 2                 # user-emails-2's log start is moved here, so "from the log start" is not "from 0"


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """The demo's storage config (with its masking rules) on small sample logs of user-emails and access-log;
    user-emails-2 starts at offset TRIMMED."""
    from include.sample_data import TOPICS, generate

    root = tmp_path_factory.mktemp("masking-lag")
    data = yaml.safe_load((REPO / "include" / "config" / "storage.yaml").read_text())
    data["broker"]["log.dirs"] = [str(root / "logs" / "dir-a"), str(root / "logs" / "dir-b")]
    data["broker"].pop("remote.log.storage.system.enable", None)     # no object store in this test
    config_path = root / "storage.yaml"
    config_path.write_text(yaml.safe_dump(data))
    config = load_config(config_path)
    generate(config, now_ms=T_MS, scale=0.01, topics=[t for t in TOPICS if t.name in ("user-emails", "access-log")])
    with LogManager.open(config, partitions=[("user-emails", 2)]) as mgr:
        log = mgr.get_log("user-emails", 2)
        assert log is not None and log.delete_records(TRIMMED) == TRIMMED
        mgr.checkpoint([log.log_dir])
    return {"config_path": config_path, "config": config}


@pytest.fixture(scope="module")
def server(store):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    srv = ApiServer(pathlib.Path(os.environ["AIRFLOW_HOME"]), store["config_path"], ARTIFACTS / "api-server.log")
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def browser():
    with chromium() as b:
        yield b


@pytest.fixture
def open_page(browser, server):
    """``open_page(user)``: a page logged in as ``user`` (the UI's ``_token`` cookie); closed when the test ends."""
    contexts = []

    def open_(user: str):
        context = log_in(browser, server, user, viewport={"width": 1280, "height": 900})
        contexts.append(context)
        page = context.new_page()
        page.js_errors = []
        page.on("pageerror", lambda exc: page.js_errors.append(str(exc)))
        return page

    try:
        yield open_
    finally:
        for context in contexts:
            context.close()


def shot(page, name: str) -> None:
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    assert path.stat().st_size > 10_000
    assert not page.js_errors, page.js_errors


def wait_until(check, what: str, timeout_s: float = TIMEOUT_S):
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.3)


def first_records(config, topic: str, partition: int, n: int) -> list:
    with LogManager.open(config, partitions=[(topic, partition)]) as mgr:
        log = mgr.get_log(topic, partition)
        assert log is not None
        out = []
        for r in log.read_records():
            out.append(r)
            if len(out) == n:
                return out
    return out


# -- masking ---------------------------------------------------------------------------------------------------------

def test_a_viewer_sees_masked_emails_and_an_admin_the_clear_ones(server, store, open_page):
    records = [r for r in first_records(store["config"], "user-emails", 0, 20) if r.value is not None][:5]
    assert records
    emails = [json.loads(r.value)["email"] for r in records]
    assert all("@" in e for e in emails)
    start = records[0].offset
    url = f"{server.url}{BASE}/messages/user-emails/0?offset={start}&limit=20"

    viewer = open_page("viewer")
    viewer.goto(url)
    cells = viewer.locator('#records tr[data-offset] [data-field="value"]')
    assert cells.count() == 20
    text = viewer.locator("#records").inner_text()
    assert not any(e in text for e in emails), "a viewer reads an e-mail address"
    for r in records:
        cell = viewer.locator(f'#records tr[data-offset="{r.offset}"] [data-field="value"]')
        shown = json.loads(cell.locator("pre").inner_text())
        clear = json.loads(r.value)
        assert shown == {**clear, "email": "****"}                 # only the field the rule names
        assert cell.locator('[data-field="masked"]').inner_text() == "masked"
        assert f"{len(r.value)} B stored" in cell.inner_text()
        key = viewer.locator(f'#records tr[data-offset="{r.offset}"] [data-field="key"]').inner_text()
        assert key == r.key.decode()                               # keys are not masked
    assert "read permission on Airflow's connections" in viewer.locator("#masked-note").inner_text()
    shot(viewer, "01-viewer-masked")

    admin = open_page("admin")
    admin.goto(url)
    for r, email in zip(records, emails):
        cell = admin.locator(f'#records tr[data-offset="{r.offset}"] [data-field="value"]')
        assert json.loads(cell.locator("pre").inner_text()) == json.loads(r.value)
        assert email in cell.inner_text()
        assert cell.locator('[data-field="masked"]').count() == 0
    assert admin.locator("#masked-note").count() == 0
    shot(admin, "02-admin-clear")


def test_the_json_api_masks_the_raw_value_too(server, store):
    records = [r for r in first_records(store["config"], "user-emails", 1, 10) if r.value is not None]
    path = f"{BASE}/api/messages/user-emails/1?offset={records[0].offset}&limit=10"
    seen = server.get_json(path, server.token("viewer"))["page"]["records"]
    clear = server.get_json(path, server.token("admin"))["page"]["records"]
    by_offset = {r.offset: r for r in records}
    for masked_row, clear_row in zip(seen, clear):
        r = by_offset.get(masked_row["offset"])
        if r is None:
            continue
        assert json.loads(masked_row["value"]) == {**json.loads(r.value), "email": "****"}
        assert json.loads(masked_row["value_shown"]["text"])["email"] == "****"
        assert masked_row["masked"] == ["email"] and masked_row["value_size"] == len(r.value)
        assert json.loads(clear_row["value"]) == json.loads(r.value) and "masked" not in clear_row
    assert json.loads(server.request(path, token=server.token("viewer"))[1]).get("masked") is True


def test_topics_without_a_rule_are_shown_in_clear_to_a_viewer(server, store, open_page):
    (record,) = first_records(store["config"], "access-log", 0, 1)
    page = open_page("viewer")
    page.goto(f"{server.url}{BASE}/messages/access-log/0?offset={record.offset}&limit=1")
    assert page.locator('#records [data-field="value"] pre').inner_text() == record.value.decode()
    assert page.locator('[data-field="masked"]').count() == 0 and page.locator("#masked-note").count() == 0


# -- group lag -------------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def broker(store, tmp_path_factory):
    launcher = BrokerLauncher(store["config_path"], tmp_path_factory.mktemp("broker") / "broker.log",
                              listeners="PLAINTEXT://127.0.0.1:0", cwd=REPO).start()
    try:
        yield launcher.bootstrap
    finally:
        assert launcher.stop(60) == 0, launcher.log_tail()


def test_the_group_page_shows_lag_of_uncommitted_partitions_and_its_history(server, store, open_page, broker):
    """A consumer subscribed to user-emails commits on partition 0 only: the group page lists all three partitions,
    1 and 2 lagging from their log start (2's is TRIMMED), and the history chart the listener's samples draw."""
    from confluent_kafka import Consumer, TopicPartition

    config = store["config"]
    with LogManager.open(config, partitions=[("user-emails", p) for p in range(3)]) as mgr:
        logs = {p: present(mgr.get_log("user-emails", p)) for p in range(3)}
        bounds = {p: (log.log_start_offset, log.log_end_offset) for p, log in logs.items()}
    assert bounds[2][0] == TRIMMED and all(end > 5 for _, end in bounds.values())
    consumer = Consumer({"bootstrap.servers": broker, "group.id": GROUP, "client.id": "lag-reader",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe(["user-emails"])
        wait_until(lambda: consumer.poll(0.5) is not None, "a record")
        consumer.commit(offsets=[TopicPartition("user-emails", 0, 3)], asynchronous=False)
        token = server.token("viewer")

        def history_points(n: int):
            body = server.request(f"{BASE}/api/groups/{GROUP}", token=token)
            if body[0] != 200:
                return None
            data = json.loads(body[1])
            return data if len(data["history"]) >= n and data["g"]["partitions"] else None

        data = wait_until(lambda: history_points(2), "two lag samples of the group")
        g = data["g"]
        assert g["partitions"] == [{"topic": "user-emails", "partition": 0, "committed": 3,
                                    "log_end_offset": bounds[0][1], "lag": bounds[0][1] - 3, "member": "lag-reader"}]
        assert [(u["partition"], u["committed"], u["lag"], u["lag_from"]) for u in g["uncommitted"]] == [
            (p, None, bounds[p][1] - bounds[p][0], "log start") for p in (1, 2)]
        last = data["history"][-1]
        assert {(x["partition"], x["lag"]) for x in last["partitions"]} == {
            (0, bounds[0][1] - 3), (1, bounds[1][1] - bounds[1][0]), (2, bounds[2][1] - TRIMMED)}
        assert last["lag"] == g["lag"] + g["uncommitted_lag"] == sum(x["lag"] for x in last["partitions"])
        assert g["lag"] == bounds[0][1] - 3

        page = open_page("viewer")
        page.goto(f"{server.url}{BASE}/groups/{GROUP}")
        row = page.locator('#offsets tr[data-partition="user-emails-2"]')
        assert row.locator('[data-field="committed"]').inner_text() == "none"
        assert row.locator('[data-field="lag_value"]').inner_text() == str(bounds[2][1] - TRIMMED)
        assert row.locator('[data-field="lag_from"]').inner_text() == "from log start"
        assert page.locator('.facts [data-field="lag"]').inner_text() == str(bounds[0][1] - 3)
        assert page.locator('.facts [data-field="uncommitted_lag"]').inner_text() == str(
            bounds[1][1] - bounds[1][0] + bounds[2][1] - TRIMMED)
        assert page.locator('#offsets tr[data-partition="user-emails-0"] [data-field="lag"]').inner_text() == str(
            bounds[0][1] - 3)
        chart = page.locator("#lag-chart")
        assert int(chart.get_attribute("data-points")) >= 2
        assert chart.locator("svg polyline.total").count() == 1
        assert {chart.locator("svg polyline.partition").nth(i).get_attribute("data-partition")
                for i in range(3)} == {"user-emails-0", "user-emails-1", "user-emails-2"}
        assert "total lag" in page.locator("#lag-legend").inner_text()
        shot(page, "03-group-lag")
    finally:
        consumer.close()
