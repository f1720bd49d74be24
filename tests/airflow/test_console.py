"""The Storage view's console as an operator uses it, in Debian's chromium (Playwright) against a real ``airflow
api-server`` on the sample logs: topics and their configs, the message browser (a record found by key, seeks by
offset and timestamp, formats, transaction markers and aborted records from a real transactional producer, damage),
the Kafka listener and a consumer group, live figures, the actions refused without Airflow's permission and done
with it (each through its confirm step, each in Airflow's audit log), Airflow's light and dark theme, 1280 px.

Oracles are the engine itself (``Log.read_records``, ``Log.offset_for_timestamp``, ``describe``), the config file,
Airflow's REST API and the files on disk; screenshots under ``var/test-artifacts/storage-view/console/``.
"""
from __future__ import annotations

import json
import os
import pathlib
import shutil
import time
import urllib.parse

import pytest
import yaml

from include.broker_launcher import BrokerLauncher
from storage_engine.config_keys import TOPIC_KEYS
from storage_engine.log.manager import LogManager
from storage_engine.record.records import SimpleRecord
from storage_maintenance.tasks.hooks import iso_ms

from .conftest import REPO
from .browser import chromium as launch_chromium
from .browser import log_in
from .test_storage_view import describe, sample, server  # noqa: F401 - module fixtures

pytestmark = [pytest.mark.airflow, pytest.mark.e2e]

ARTIFACTS = REPO / "var" / "test-artifacts" / "storage-view" / "console"
BASE = "/storage-maintenance"
KEY = b"user-00042"
TIMEOUT_S = 60


# -- fixtures --------------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def chromium():
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with launch_chromium() as browser:
        yield browser


@pytest.fixture
def open_page(chromium, server):
    """``open_page(user="admin", scheme="light", width=1280, init_script=None)``: a page of a fresh browser context
    logged in as ``user`` (the UI's ``_token`` cookie) with the browser's colour scheme ``scheme``; the JavaScript
    errors of the page are kept for :func:`shot`. The contexts close when the test ends."""
    contexts = []

    def open_(user: str = "admin", *, scheme: str = "light", width: int = 1280, init_script: str | None = None):
        context = log_in(chromium, server, user, viewport={"width": width, "height": 900}, color_scheme=scheme)
        contexts.append(context)
        if init_script:
            context.add_init_script(init_script)
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.js_errors = errors
        return page

    try:
        yield open_
    finally:
        for context in contexts:
            context.close()


def shot(page, name: str, *, own_page: bool = True) -> pathlib.Path:
    """A full-page screenshot kept as a test artifact; a page of the console (``own_page``) must have run without a
    JavaScript error."""
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    assert path.stat().st_size > 10_000
    if own_page:
        assert not page.js_errors, page.js_errors
    return path


def wait_until(check, what: str, timeout_s: float = TIMEOUT_S, interval_s: float = 0.3):
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(interval_s)


def engine_log(config, topic: str, partition: int):
    """A context manager opening one partition with the engine (the oracle; it writes lock and state files)."""
    return LogManager.open(config, partitions=[(topic, partition)])


def records_of(config, topic: str, partition: int, isolation: str = "read_uncommitted") -> list:
    with engine_log(config, topic, partition) as mgr:
        return list(mgr.get_log(topic, partition).read_records(isolation_level=isolation))


def partition_for(key: bytes, partitions: int) -> int:
    from include.sample_data import partition_for_key
    return partition_for_key(key, partitions)


def listing(dirs) -> dict:
    """Every folder and file under the log dirs (the engine's own files too): kind, size, mtime, inode."""
    out = {}
    for root in dirs:
        for d, subdirs, files in os.walk(root):
            for n in [".", *subdirs, *files]:
                p = os.path.normpath(os.path.join(d, n))
                st = os.lstat(p)
                out[p] = (st.st_mode, st.st_size, st.st_mtime_ns, st.st_ino)
    return out


def event_logs(server, event: str) -> list[dict]:
    body = server.get_json(f"/api/v2/eventLogs?event={urllib.parse.quote(event)}&order_by=-when&limit=100",
                           server.token())
    return [dict(e, extra=json.loads(e["extra"] or "{}")) for e in body["event_logs"]]


def confirm(page, typed: str | None = None) -> None:
    """The confirm step of an action: the dialog is open; type the name when asked, then confirm."""
    dialog = page.locator("#confirm-dialog")
    dialog.wait_for(state="visible")
    if typed is not None:
        assert page.locator("#confirm-ok").is_disabled()          # nothing happens before the name is typed
        page.fill("#confirm-input", typed)
    page.click("#confirm-ok")


def result_of(page, out: str, status: str) -> str:
    locator = page.locator(f"#{out}").filter(has_text=status)
    locator.wait_for(timeout=TIMEOUT_S * 1000)
    return locator.inner_text()


# -- every endpoint needs the login --------------------------------------------------------------------------------

def test_every_console_endpoint_needs_the_airflow_login(server):
    from storage_maintenance.ui import console

    routes = [(m, r.path) for r in console.router.routes for m in sorted(getattr(r, "methods", None) or [])  # type: ignore[attr-defined]  # the router's routes are APIRoutes, which have a path
              if m != "HEAD"]
    assert len(routes) >= 14 and {m for m, _ in routes} == {"GET", "POST"}
    samples = {"topic": "access-log", "partition": "0", "group_id": "g", "action": "delete-records"}
    for method, path in routes:
        for name, value in samples.items():
            path = path.replace("{%s}" % name, value)
        status, body, _ = server.request(BASE + path, method=method, body={} if method == "POST" else None)
        assert status == 401, (method, path, status, body[:200])
    # and with the login they answer
    assert server.request(BASE + "/topics", token=server.token("viewer"))[0] == 200


# -- topics --------------------------------------------------------------------------------------------------------

def test_topic_pages_show_sizes_and_every_config_with_its_source(server, sample, open_page):
    truth = describe(sample["config"])
    file_config = yaml.safe_load(sample["config_path"].read_text())
    page = open_page()
    page.goto(server.url + BASE + "/topics")
    for topic in ("access-log", "user-emails", "user-sessions"):
        row = page.locator(f'#topics tr[data-topic="{topic}"]')
        mine = [d for (t, _), d in truth.items() if t == topic]
        assert row.locator('[data-field="partitions"]').inner_text() == str(len(mine))
        assert row.locator('[data-field="size_bytes"]').get_attribute("title") == f"{sum(d['size_bytes'] for d in mine)} bytes"
    shot(page, "01-topics")

    page.goto(server.url + BASE + "/topics/access-log")
    mine_by_partition = {p: d for (t, p), d in truth.items() if t == "access-log"}
    assert page.locator('#facts [data-field="size_bytes"]').get_attribute("title") == (
        f"{sum(d['size_bytes'] for d in mine_by_partition.values())} bytes")
    for p, d in mine_by_partition.items():
        row = page.locator(f'#partitions tr[data-partition="{p}"]')
        assert row.locator('[data-field="log_end_offset"]').inner_text() == str(d["log_end_offset"])
        assert row.locator('[data-field="log_start_offset"]').inner_text() == str(d["log_start_offset"])

    def config_row(name):
        row = page.locator(f'#configs tr[data-config="{name}"]')
        return (row.locator('[data-field="value"]').inner_text().split(" ")[0],
                row.locator('[data-field="source"]').inner_text(), row.locator('[data-field="set_by"]').inner_text())

    overrides = file_config["topics"]["access-log"]
    assert config_row("retention.ms") == (str(overrides["retention.ms"]), "topic override", "config file")
    assert config_row("segment.bytes") == (str(overrides["segment.bytes"]), "topic override", "config file")
    # a broker key of the config file is the broker override, named; what nothing sets is Kafka's default
    assert config_row("file.delete.delay.ms") == (str(file_config["broker"]["log.segment.delete.delay.ms"]),
                                                  "broker override", "log.segment.delete.delay.ms")
    assert config_row("segment.ms") == (str(7 * 24 * 3600 * 1000), "Kafka default", "")
    assert page.locator("#configs tr[data-config]").count() == len(TOPIC_KEYS)      # every topic key of Kafka's
    assert page.locator('#configs tr[data-config="retention.ms"] .pill', has_text="changed").count() == 1
    shot(page, "02-topic-access-log")

    page.goto(server.url + BASE + "/topics/user-sessions")   # retention.ms and cleanup.policy=compact,delete
    assert config_row("cleanup.policy") == ("compact,delete", "topic override", "config file")
    assert server.request(BASE + "/topics/no-such-topic", token=server.token())[0] == 404
    assert server.request(BASE + "/topics/..%2Fx", token=server.token())[0] in (404, 422)


# -- the message browser -------------------------------------------------------------------------------------------

def test_a_record_found_by_key_in_the_message_browser(server, sample, open_page):
    """Type a key, ask for JSON: exactly the records the engine holds under that key, their values as JSON."""
    p = partition_for(KEY, 3)
    expected = [r for r in records_of(sample["config"], "user-emails", p) if r.key == KEY]
    assert len(expected) >= 1
    page = open_page()
    page.goto(server.url + BASE + f"/messages/user-emails/{p}")
    page.fill('#seek input[name="key"]', KEY.decode())
    page.select_option('#seek select[name="format"]', "json")
    page.select_option('#seek select[name="limit"]', "100")
    page.click('#seek button[type="submit"]')
    page.wait_for_url("**key=user-00042**")
    rows = page.locator("#records tr[data-offset]")
    assert rows.count() == min(len(expected), 100)
    for i, rec in enumerate(expected[:100]):
        row = rows.nth(i)
        assert row.get_attribute("data-offset") == str(rec.offset)
        assert row.locator('[data-field="key"]').inner_text().strip() == KEY.decode()
        value = row.locator('[data-field="value"] pre').inner_text()
        if rec.value is None:
            assert value == "null" and "tombstone" in row.locator('[data-field="marks"]').inner_text()
        else:
            assert json.loads(value) == json.loads(rec.value)
            assert "\n" in value                          # indented, as asked
        headers = row.locator('[data-field="headers"]').inner_text()
        assert all(f"{k}: {v.decode()}" in headers for k, v in rec.headers)
    assert "CRC-checked" in page.locator("#checked").inner_text()
    shot(page, "03-messages-by-key")
    # the newest record of the key: its current value
    page.click("#seek a:has-text(\"newest\")")
    page.wait_for_url("**latest=true**")
    assert page.locator("#records tr[data-offset]").last.get_attribute("data-offset") == str(expected[-1].offset)
    assert "the newest" in page.locator("#shown").inner_text()
    latest = server.get_json(BASE + f"/api/messages/user-emails/{p}?key={KEY.decode()}&latest=true&limit=1",
                             server.token())["page"]
    assert [r["offset"] for r in latest["records"]] == [expected[-1].offset]


def test_the_browser_seeks_by_offset_timestamp_and_newest_and_pages_on(server, sample, open_page):
    config = sample["config"]
    truth = describe(config)[("access-log", 0)]
    base = truth["log_start_offset"]                  # retention moved it at T
    all_records = records_of(config, "access-log", 0)
    assert [r.offset for r in all_records] == list(range(base, truth["log_end_offset"]))
    token = server.token()
    api = BASE + "/api/messages/access-log/0"
    # from an offset: that record first, the next page from where this one ended, no overlap, no gap
    first = server.get_json(api + f"?offset={base + 100}&limit=20", token)["page"]
    assert [r["offset"] for r in first["records"]] == list(range(base + 100, base + 120))
    assert first["next_offset"] == base + 120
    second = server.get_json(api + f"?offset={first['next_offset']}&limit=20", token)["page"]
    assert second["records"][0]["offset"] == base + 120
    # below the log start: shown from there, and said
    if base > 0:
        below = server.get_json(api + "?offset=0&limit=1", token)["page"]
        assert below["records"][0]["offset"] == base and f"below the log start offset {base}" in below["notes"][0]
    # from a timestamp: where the engine's time index says
    ts = all_records[500].timestamp
    with engine_log(config, "access-log", 0) as mgr:
        _, at = mgr.get_log("access-log", 0).offset_for_timestamp(ts)
    iso = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts // 1000)) + f".{ts % 1000:03d}Z"
    seek = server.get_json(api + "?timestamp=" + urllib.parse.quote(iso) + "&limit=5", token)["page"]
    assert seek["seek"] == "timestamp" and seek["records"][0]["offset"] == at
    assert seek["records"][0]["timestamp"] >= ts
    # the newest records end at the log end offset
    newest = server.get_json(api + "?latest=true&limit=10", token)["page"]
    assert [r["offset"] for r in newest["records"]] == [r.offset for r in all_records[-10:]]
    assert newest["records"][-1]["offset"] == truth["log_end_offset"] - 1 and newest["next_offset"] is None
    # bad input is named
    status, body, _ = server.request(api + "?timestamp=yesterday", token=token)
    assert status == 422 and b"timestamp must be an ISO date-time" in body
    assert server.request(api + "?format=xml", token=token)[0] == 422
    assert server.request(api + "?offset=-3", token=token)[0] == 422
    assert server.request(BASE + "/api/messages/access-log/7", token=token)[0] == 404

    page = open_page()
    page.goto(server.url + BASE + f"/messages/access-log/0?offset={base + 100}&limit=20&format=hex")
    rows = page.locator("#records tr[data-offset]")
    assert rows.first.get_attribute("data-offset") == str(base + 100)
    value = rows.first.locator('[data-field="value"] pre').inner_text()
    raw = all_records[100].value
    assert value.startswith("00000000  " + " ".join(f"{b:02x}" for b in raw[:16]))
    page.click("#next")
    page.wait_for_url(f"**offset={base + 120}**")
    assert page.locator("#records tr[data-offset]").first.get_attribute("data-offset") == str(base + 120)
    assert "format=hex" in page.url                      # the format is kept from page to page
    page.click("#prev")
    page.wait_for_url(f"**offset={base + 100}**")
    shot(page, "04-messages-hex")
    # a timestamp typed in the form (to the second)
    page.goto(server.url + BASE + "/messages/access-log/0")
    page.fill('#seek input[name="timestamp"]', iso[:19] + "Z")
    page.click('#seek button[type="submit"]')
    page.wait_for_url("**timestamp=**")
    with engine_log(config, "access-log", 0) as mgr:
        _, at_second = mgr.get_log("access-log", 0).offset_for_timestamp(ts // 1000 * 1000)
    assert page.locator("#records tr[data-offset]").first.get_attribute("data-offset") == str(at_second)


def test_large_values_are_cut_on_the_page_and_given_whole_when_asked(server, sample, open_page):
    config = sample["config"]
    big = json.dumps({"blob": "x" * 40_000}).encode()
    with LogManager.open(config) as mgr:
        mgr.get_or_create_log("big-values", 0).append_records([SimpleRecord(b"big", big), SimpleRecord(b"\xff\x00", b"v")])
    page = open_page()
    page.goto(server.url + BASE + "/messages/big-values/0?format=text")
    row = page.locator('#records tr[data-offset="0"]')
    assert row.locator('[data-field="value"] pre').inner_text() == big[:16 * 1024].decode()
    assert "only the first 16.0 KiB shown" in row.locator('[data-field="value"]').inner_text()
    # a key that is not text is shown in hex, whatever was asked
    assert page.locator('#records tr[data-offset="1"] [data-field="key"] pre').inner_text().startswith("00000000  ff 00")
    page.goto(server.url + BASE + "/messages/big-values/0?format=json&max_bytes=65536")
    assert json.loads(page.locator('#records tr[data-offset="0"] [data-field="value"] pre').inner_text()) == json.loads(big)
    page.click('#seek button[type="submit"]')             # the form keeps the size asked for
    page.wait_for_url("**max_bytes=65536**")
    whole = server.get_json(BASE + "/api/messages/big-values/0?limit=1", server.token())["page"]["records"][0]
    assert whole["value"] == big.decode() and whole["value_shown"]["truncated"]


def test_browsing_and_every_console_page_write_nothing_to_the_store(server, sample):
    """Read-only like every inspection command: the files (the engine's lock and state files included) are the
    same after every page and JSON answer of the console, in every mode of the browser."""
    config = sample["config"]
    token = server.token()
    before = listing(config.log_dirs)
    p = partition_for(KEY, 3)
    paths = ["/topics", "/topics/access-log", "/topics/user-emails", "/broker", "/api/topics",
             "/api/topics/user-sessions", "/api/topics/access-log/live", "/api/broker", "/api/broker/live",
             "/messages/access-log/0", "/messages/access-log/1?latest=true", "/messages/user-sessions/1?format=hex",
             f"/messages/user-emails/{p}?key={KEY.decode()}&format=json", "/api/messages/access-log/2?offset=50",
             "/api/messages/user-emails/0?timestamp=2025-12-30T00:00:00Z",
             "/api/messages/user-sessions/0?isolation=read_committed&limit=500", "/api/actions"]
    for path in paths:
        status, body, _ = server.request(BASE + path, token=token)
        assert status == 200, (path, status, body[:300])
    assert listing(config.log_dirs) == before


def test_damage_ends_the_page_naming_the_file_and_the_position(server, sample, open_page):
    """A copy of a partition with one flipped bit: the records before the damaged batch are shown, then the damage
    with its file and byte position; nothing from the damaged batch on."""
    from storage_engine.segment.file_records import FileRecords

    config = sample["config"]
    src = next(os.path.join(d, "access-log-1") for d in config.log_dirs if os.path.isdir(os.path.join(d, "access-log-1")))
    dst = os.path.join(os.path.dirname(src), "damaged-0")
    os.mkdir(dst)
    try:
        first = sorted(n for n in os.listdir(src) if n.endswith(".log"))[0]
        for suffix in (".log", ".index", ".timeindex"):
            shutil.copy(os.path.join(src, first[:-4] + suffix), os.path.join(dst, first[:-4] + suffix))
        log_path = os.path.join(dst, first)
        records = FileRecords(log_path, writable=False)
        batches = list(records.batches())
        victim = batches[3]
        expected = [r.offset for b in batches[:3] for r in b.records()]
        records.close()
        assert 0 < len(expected) <= 500
        with open(log_path, "r+b") as f:
            f.seek(victim.file_position + 61 + 5)
            byte = f.read(1)
            f.seek(victim.file_position + 61 + 5)
            f.write(bytes([byte[0] ^ 0x10]))
        page = open_page()
        page.goto(server.url + BASE + "/messages/damaged/0?limit=500")
        shown = [int(r.get_attribute("data-offset")) for r in page.locator("#records tr[data-offset]").all()]
        assert shown == expected
        damage = page.locator("#damage").inner_text()
        assert "crc" in damage.lower() and log_path in damage and f"byte position {victim.file_position}" in damage
        shot(page, "05-messages-damaged")
    finally:
        shutil.rmtree(dst)


# -- the Kafka listener, a transactional producer, a consumer group -------------------------------------------------

@pytest.fixture(scope="module")
def broker_launcher(sample, tmp_path_factory):
    """``serve`` on the sample's log dirs (a test may stop and start it again: later starts keep its port). Stopped
    cleanly (SIGTERM) at the end."""
    launcher = BrokerLauncher(sample["config_path"], tmp_path_factory.mktemp("broker") / "broker.log",
                              listeners="PLAINTEXT://127.0.0.1:0", cwd=REPO).start()
    try:
        yield launcher
    finally:
        if launcher.proc is not None:
            assert launcher.stop(60) == 0, launcher.log_tail()


@pytest.fixture
def broker(broker_launcher):
    """The running broker's bootstrap address."""
    if broker_launcher.proc is None:
        broker_launcher.start()
    return broker_launcher.bootstrap


def test_transactions_marked_in_the_browser_with_a_real_producer(server, sample, open_page, broker):
    """A confluent-kafka transactional producer on a topic created over the wire: records of the open transaction are
    marked open, then aborted with their ABORT marker; a committed one with its COMMIT marker. read_committed shows
    what the engine's read_committed read returns."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": broker})
    for future in admin.create_topics([NewTopic("orders", 1, 1, config={"retention.ms": "7200000"})]).values():
        future.result(TIMEOUT_S)
    plain = Producer({"bootstrap.servers": broker, "compression.type": "none"})
    plain.produce("orders", key=b"o-1", value=b'{"order": 1}', partition=0)
    assert plain.flush(TIMEOUT_S) == 0                   # a record outside any transaction first
    del plain
    producer = Producer({"bootstrap.servers": broker, "transactional.id": "console-txn", "compression.type": "none"})
    producer.init_transactions(TIMEOUT_S)
    producer.begin_transaction()
    for i in (2, 3):
        producer.produce("orders", key=f"o-{i}".encode(), value=json.dumps({"order": i}).encode(), partition=0,
                         headers=[("trace", b"abc")])
    assert producer.flush(TIMEOUT_S) == 0

    page = open_page()
    url = server.url + BASE + "/messages/orders/0"
    page.goto(url)
    marks = lambda: [(r.get_attribute("data-offset"), r.locator('[data-field="marks"]').inner_text().strip())  # noqa: E731
                     for r in page.locator("#records tr[data-offset]").all()]
    assert marks() == [("0", ""), ("1", "open transaction"), ("2", "open transaction")]
    assert "open transaction(s): producer" in page.locator("#offsets").inner_text()
    producer_cell = page.locator('#records tr[data-offset="1"] [data-field="producer"]').inner_text()
    assert producer_cell.startswith("id ") and "epoch 0" in producer_cell and "seq 0" in producer_cell
    page.goto(url + "?isolation=read_committed")
    assert [r for r, _ in marks()] == ["0"]                # a read_committed consumer stops at the open transaction
    assert "last stable offset 1" in page.locator("#shown").inner_text()
    shot(page, "06-messages-open-transaction")

    producer.abort_transaction(TIMEOUT_S)
    producer.begin_transaction()
    producer.produce("orders", key=b"o-4", value=b'{"order": 4}', partition=0)
    producer.commit_transaction(TIMEOUT_S)
    page.goto(url)
    assert marks() == [("0", ""), ("1", "aborted"), ("2", "aborted"), ("3", "ABORT marker"),
                       ("4", "committed transaction"), ("5", "COMMIT marker")]
    assert "line-through" in page.locator('#records tr[data-offset="1"] pre').last.evaluate(
        "e => getComputedStyle(e).textDecorationLine")
    assert "coordinator epoch" in page.locator('#records tr[data-offset="3"] [data-field="value"]').inner_text()
    shot(page, "07-messages-aborted-and-committed")
    page.goto(url + "?isolation=read_committed")
    committed = records_of(sample["config"], "orders", 0, "read_committed")
    assert [int(r) for r, _ in marks()] == [r.offset for r in committed] == [0, 4]
    # the topic created over the wire shows its retention.ms as a topic override set over the wire
    page.goto(server.url + BASE + "/topics/orders")
    row = page.locator('#configs tr[data-config="retention.ms"]')
    assert row.locator('[data-field="source"]').inner_text() == "topic override"
    assert row.locator('[data-field="set_by"]').inner_text() == "set over the wire"
    del producer


def test_broker_and_consumer_group_pages(server, sample, open_page, broker):
    """A consumer in group console-group on orders-0, committed at 1: the broker page lists the group and the
    listener's figures (refreshed live); the group page its member, assignment, committed offset and lag, linked to
    the unread records."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": broker, "group.id": "console-group", "client.id": "console-reader",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    assigned: list = []
    consumer.subscribe(["orders"], on_assign=lambda c, parts: assigned.extend(parts))
    wait_until(lambda: consumer.poll(0.5) is not None and assigned, "the consumer's assignment and a record")
    consumer.commit(offsets=[TopicPartition("orders", 0, 1)], asynchronous=False)
    token = server.token()
    try:
        group = wait_until(lambda: next((g for g in server.get_json(BASE + "/api/broker", token)["groups"]
                                         if g["group_id"] == "console-group" and g["partitions"] and g["members"]),
                                        None), "the broker to report the group")
        end = describe(sample["config"])[("orders", 0)]["log_end_offset"]
        page = open_page()
        page.goto(server.url + BASE + "/broker")
        assert page.locator('[data-live="state"]').inner_text() == "running"
        row = page.locator('#groups tr[data-group="console-group"]')
        assert row.locator('[data-field="lag"]').inner_text() == str(end - 1)
        refreshes = page.evaluate("window.liveRefreshes")
        page.wait_for_function(f"window.liveRefreshes > {refreshes}")          # the figures refresh in place
        shot(page, "08-broker")

        row.locator("a").click()
        page.wait_for_url("**/groups/console-group")
        members = page.locator("#members tr[data-member]")
        assert members.count() == 1 and "console-reader" in members.inner_text() and "orders: 0" in members.inner_text()
        offsets = page.locator('#offsets tr[data-partition="orders-0"]')
        assert (offsets.locator('[data-field="committed"]').inner_text(),
                offsets.locator('[data-field="log_end_offset"]').inner_text(),
                offsets.locator('[data-field="lag"]').inner_text()) == ("1", str(end), str(end - 1))
        assert group["partitions"] == [{"topic": "orders", "partition": 0, "committed": 1, "log_end_offset": end,
                                        "lag": end - 1}]
        shot(page, "09-consumer-group")
        offsets.get_by_role("link", name="unread records").click()
        page.wait_for_url(lambda url: url.endswith("/messages/orders/0?offset=1"))
        assert page.locator("#records tr[data-offset]").first.get_attribute("data-offset") == "1"
        assert server.request(BASE + "/groups/no-such-group", token=token)[0] == 404
    finally:
        consumer.close()


def test_a_stopped_listener_shows_no_rates_and_when_it_was_last_seen(server, sample, open_page, broker_launcher):
    """A real producer keeps the listener busy: the broker page shows it running with a produce rate. The listener
    stops cleanly (SIGTERM): without a reload the page shows it stopped, with no connections or rates (its last
    status still held them) and when it was last seen; the first page and the JSON say the same."""
    from confluent_kafka import Producer

    if broker_launcher.proc is None:
        broker_launcher.start()
    producer = Producer({"bootstrap.servers": broker_launcher.bootstrap, "linger.ms": 5})
    token = server.token()

    def produce_until_a_rate_is_reported() -> dict | None:
        for i in range(200):
            producer.produce("stop-events", key=b"k", value=b"v%d" % i)
        assert producer.flush(TIMEOUT_S) == 0
        live = server.get_json(BASE + "/api/broker/live", token)["listener"]
        return live if live["state"] == "running" and live["produce_records_per_s"] else None

    live = wait_until(produce_until_a_rate_is_reported, "the listener to report a produce rate")
    page = open_page()
    page.goto(server.url + BASE + "/broker")
    assert page.locator('[data-live="state"]').inner_text() == "running"
    assert page.locator("#listener-stale").is_hidden()
    rate = page.locator('[data-live="produce_records_per_s"]').inner_text()
    assert float(rate) >= 0, rate                    # a figure (the rate of the latest interval), not a dash
    assert broker_launcher.stop(60) == 0, broker_launcher.log_tail()
    stopped = server.get_json(BASE + "/api/broker/live", token)["listener"]
    assert stopped["state"] == "stopped"
    assert stopped["produce_records_per_s"] is None and stopped["connections"] is None
    assert stopped["last_figures"]["produce_records_per_s"] is not None     # the status file still holds them
    assert stopped["last_seen_ms"] == stopped["updated_ms"] >= live["updated_ms"]
    page.evaluate("window.notReloaded = true")
    page.locator('[data-live="state"]').filter(has_text="stopped").wait_for(timeout=TIMEOUT_S * 1000)
    for field in ("produce_records_per_s", "produce_bytes_per_s", "fetch_bytes_per_s"):
        assert page.locator(f'[data-live="{field}"]').inner_text() == "—", field
    assert page.locator('[data-live="connections"]').inner_text() == "none"
    stale = page.locator("#listener-stale").inner_text()
    assert f"The listener is stopped: last seen {iso_ms(stopped['last_seen_ms'])}" in stale, stale
    assert page.evaluate("window.notReloaded") is True
    shot(page, "08b-broker-stopped")
    page.goto(server.url + BASE + "/")
    row = page.locator("#listener tr").nth(1)
    assert row.locator('[data-field="listener-state"]').inner_text() == "stopped"
    assert row.locator('[data-field="produce_rate"]').inner_text() == "stopped: no rates"
    assert f"last seen {iso_ms(stopped['last_seen_ms'])}" in row.locator('[data-field="last-seen"]').inner_text()
    broker_launcher.start()                      # the other tests' broker again, on the same port


# -- live figures --------------------------------------------------------------------------------------------------

def test_live_figures_follow_appends_without_a_reload(server, sample, open_page):
    config = sample["config"]
    with LogManager.open(config) as mgr:
        log = mgr.get_or_create_log("live-events", 0)
        log.append_records([SimpleRecord(b"k", b"x" * 100) for _ in range(20)])
        page = open_page()
        page.goto(server.url + BASE + "/topics/live-events")
        row = page.locator('#partitions tr[data-partition="0"]')
        page.wait_for_function("window.liveRefreshes >= 2")
        page.evaluate("window.notReloaded = true")
        for _ in range(10):
            log.append_records([SimpleRecord(b"k", b"y" * 100) for _ in range(10)])
        end = log.log_end_offset
        size = log.size_in_bytes()
        # the row's log end offset and the rates change in place; the page was not loaded again
        page.wait_for_function(
            "([end]) => { const r = document.querySelector('#partitions tr[data-partition=\"0\"]');"
            " return r.querySelector('[data-field=\"log_end_offset\"]').textContent === String(end)"
            " && parseFloat(r.querySelector('[data-field=\"rate\"]').textContent) > 0"
            " && parseFloat(document.querySelector('[data-live=\"rate\"]').textContent) > 0; }", arg=[end],
            timeout=TIMEOUT_S * 1000)
        assert row.locator('[data-field="size_bytes"]').get_attribute("title") == f"{size} bytes"
        assert page.evaluate("window.notReloaded") is True
        assert page.evaluate("performance.getEntriesByType('navigation').length") == 1
        shot(page, "10-topic-live")
        messages = open_page()
        messages.goto(server.url + BASE + "/messages/live-events/0?latest=true&limit=5")
        log.append_records([SimpleRecord(b"k", b"z") for _ in range(3)])
        messages.locator("#new-records").filter(has_text="3 new since this page was loaded").wait_for(
            timeout=TIMEOUT_S * 1000)
        assert messages.locator('[data-live="leo"]').inner_text() == str(end + 3)


# -- actions -------------------------------------------------------------------------------------------------------

def test_actions_are_refused_without_permission_and_done_with_it(server, sample, open_page):
    """In the browser, through each action's confirm step: the viewer is refused (the store unchanged, the refusal in
    Airflow's audit log), the admin does it (the engine's state changed, the action in the audit log and on the
    topic page)."""
    config = sample["config"]
    with LogManager.open(config) as mgr:
        for p in range(2):
            log = mgr.get_or_create_log("scratch", p)
            for i in range(5):
                log.append_records([SimpleRecord(f"k{j}".encode(), b"v" * 50) for j in range(10)])
    before = describe(config)[("scratch", 0)]
    assert before["log_start_offset"] == 0 and before["log_end_offset"] == 50

    def delete_records(user: str, offset: int):
        page = open_page(user)
        page.goto(server.url + BASE + "/topics/scratch")
        page.select_option("#dr-partition", "0")
        page.fill("#dr-offset", str(offset))
        page.click("#delete-records")
        assert f"moves from 0 to {offset}" in page.locator("#confirm-text").inner_text()
        confirm(page)
        return page

    page = delete_records("viewer", 20)
    text = result_of(page, "delete-records-out", "403")
    assert "refused" in text and "edit permission on the DAG log_retention" in text
    shot(page, "11-action-refused")
    assert describe(config)[("scratch", 0)]["log_start_offset"] == 0          # nothing changed
    (refusal,) = [e for e in event_logs(server, "storage.delete-records") if e["owner"] == "viewer"]
    assert refusal["extra"]["outcome"] == "refused" and refusal["dag_id"] == "log_retention"
    assert (refusal["extra"]["topic"], refusal["extra"]["partition"], refusal["extra"]["offset"]) == ("scratch", 0, 20)

    page = delete_records("admin", 20)
    assert "log start offset of scratch-0 moved from 0 to 20" in result_of(page, "delete-records-out", "200")
    assert describe(config)[("scratch", 0)]["log_start_offset"] == 20
    assert [r.offset for r in records_of(config, "scratch", 0)][0] == 20
    done = [e for e in event_logs(server, "storage.delete-records") if e["owner"] == "admin"]
    assert done[0]["extra"]["outcome"] == "done"
    page.reload()
    recent = page.locator("#recent tr[data-action]")
    assert [(recent.nth(i).get_attribute("data-outcome"), recent.nth(i).locator("td").nth(2).inner_text())
            for i in range(2)] == [("done", "admin"), ("refused", "viewer")]
    shot(page, "12-action-done")
    page.goto(server.url + BASE + "/messages/scratch/0?offset=0")
    assert "below the log start offset 20" in page.locator("#shown").inner_text()
    assert page.locator("#records tr[data-offset]").first.get_attribute("data-offset") == "20"

    # move a partition to the other log dir
    source = describe(config)[("scratch", 1)]["dir"]
    target = next(d for d in config.log_dirs if not source.startswith(d.rstrip("/") + "/"))
    page = open_page("viewer")
    page.goto(server.url + BASE + "/topics/scratch")
    page.select_option("#mv-partition", "1")
    page.select_option("#mv-dir", target)
    page.click("#move-partition")
    confirm(page)
    assert "edit permission on the DAG log_dir_balance" in result_of(page, "move-partition-out", "403")
    page = open_page("admin")
    page.goto(server.url + BASE + "/topics/scratch")
    page.select_option("#mv-partition", "1")
    page.select_option("#mv-dir", target)
    page.click("#move-partition")
    confirm(page)
    assert f"to {target}" in result_of(page, "move-partition-out", "200")
    assert os.path.dirname(describe(config)[("scratch", 1)]["dir"]) == target
    assert [r.offset for r in records_of(config, "scratch", 1)] == list(range(50))

    # a dry run of log_retention on this topic
    page.click('button[data-dry-run="log_retention"]')
    confirm(page)
    run_id = json.loads(result_of(page, "dry-run-out", "200").split("done: ", 1)[1])["run_id"]
    run = server.get_json(f"/api/v2/dags/log_retention/dagRuns/{urllib.parse.quote(run_id)}", server.token())
    assert run["conf"] == {"dry_run": True, "topics": ["scratch"]}

    # delete the topic: the name must be typed
    page = open_page("viewer")
    page.goto(server.url + BASE + "/topics/scratch")
    page.click("#delete-topic")
    confirm(page, typed="scratch")
    assert "delete permission on the DAG log_retention" in result_of(page, "delete-topic-out", "403")
    assert ("scratch", 0) in describe(config)
    page = open_page("admin")
    page.goto(server.url + BASE + "/topics/scratch")
    page.click("#delete-topic")
    page.fill("#confirm-input", "scratc")
    assert page.locator("#confirm-ok").is_disabled()
    page.click("#confirm-cancel")                          # cancelled: nothing posted
    assert page.locator("#delete-topic-out").inner_text() == ""
    page.click("#delete-topic")
    confirm(page, typed="scratch")
    assert "deleted 2 partition(s) of scratch" in result_of(page, "delete-topic-out", "200")
    shot(page, "13-topic-deleted")
    assert not [tp for tp in describe(config) if tp[0] == "scratch"]
    assert any(n.startswith("scratch-") and n.endswith("-delete") for d in config.log_dirs for n in os.listdir(d))
    page.goto(server.url + BASE + "/topics")
    assert page.locator('#topics tr[data-topic="scratch"]').count() == 0
    outcomes = {(e["event"], e["owner"], e["extra"]["outcome"])
                for event in ("storage.move-partition", "storage.delete-topic") for e in event_logs(server, event)}
    assert outcomes == {("storage.move-partition", "viewer", "refused"), ("storage.move-partition", "admin", "done"),
                        ("storage.delete-topic", "viewer", "refused"), ("storage.delete-topic", "admin", "done")}


def test_action_requests_are_checked_before_anything_changes(server, sample):
    config = sample["config"]
    admin = server.token()
    url = BASE + "/api/actions/delete-records"
    start = describe(config)[("access-log", 2)]["log_start_offset"]
    body = {"topic": "access-log", "partition": 2, "offset": start + 10, "confirm": "access-log-2"}
    # JSON only: a form post (what another site could make a browser send) is refused before anything runs
    assert server.request(url, token=admin, method="POST", body=b"topic=access-log&partition=2&offset=10",
                          content_type="application/x-www-form-urlencoded")[0] == 422
    status, answer, _ = server.request(url, token=admin, method="POST", body=dict(body, confirm="access-log-1"))
    assert status == 422 and b"confirm must be 'access-log-2'" in answer
    status, answer, _ = server.request(url, token=admin, method="POST", body=dict(body, offset="10"))
    assert status == 422 and b"offset must be an integer" in answer
    status, answer, _ = server.request(url, token=admin, method="POST", body=dict(body, topic="../x", confirm="../x-2"))
    assert status == 422
    assert server.request(BASE + "/api/actions/format-disk", token=admin, method="POST", body=body)[0] == 404
    status, answer, _ = server.request(url, token=admin, method="POST", body=dict(body, offset=10**9))
    assert status == 422 and b"OffsetOutOfRange" in answer
    assert [e["extra"]["outcome"] for e in event_logs(server, "storage.delete-records")
            if e["extra"].get("offset") == 10**9] == ["failed"]
    status, answer, _ = server.request(BASE + "/api/actions/move-partition", token=admin, method="POST",
                                       body={"topic": "access-log", "partition": 2, "to_dir": "/tmp",
                                             "confirm": "access-log-2"})
    assert status == 422 and b"to_dir must be one of the log dirs" in answer
    assert describe(config)[("access-log", 2)]["log_start_offset"] == start


# -- Airflow's look: theme, width ----------------------------------------------------------------------------------

def _background(page_or_frame) -> tuple[str, float]:
    """The page's theme attribute and the lightness of its body's background (0 black .. 1 white)."""
    theme, rgb = page_or_frame.evaluate(
        "[document.documentElement.dataset.theme, getComputedStyle(document.body).backgroundColor]")
    probe = page_or_frame.evaluate(
        "(c) => { const e = document.createElement('canvas').getContext('2d'); e.fillStyle = c; e.fillRect(0, 0, 1, 1);"
        " return Array.from(e.getImageData(0, 0, 1, 1).data); }", rgb)
    return theme, sum(probe[:3]) / (3 * 255)


def test_the_console_follows_airflows_light_and_dark_theme(server, sample, open_page):
    for scheme in ("light", "dark"):
        page = open_page(scheme=scheme)
        page.goto(server.url + BASE + "/topics/user-emails")
        theme, lightness = _background(page)
        assert theme == scheme and (lightness > 0.9 if scheme == "light" else lightness < 0.3), (scheme, lightness)
        shot(page, f"14-standalone-{scheme}")
    # Inside the Airflow UI the UI's own choice wins over the browser's: dark in Airflow, light in the browser.
    page = open_page(scheme="light", init_script="localStorage.setItem('theme', 'dark')")
    page.goto(server.url + "/plugin/storage/storage-maintenance/topics/access-log")
    page.frame_locator("iframe").locator("#configs").wait_for(timeout=TIMEOUT_S * 1000)
    assert page.evaluate("document.documentElement.classList.contains('dark')")
    frame = next(f for f in page.frames if f.url == server.url + BASE + "/topics/access-log")
    assert _background(frame)[0] == "dark" and _background(frame)[1] < 0.3
    shot(page, "15-airflow-ui-dark", own_page=False)
    # switching Airflow's theme switches the embedded page at once, without a reload
    page.evaluate("document.documentElement.classList.replace('dark', 'light')")
    frame.wait_for_function("document.documentElement.dataset.theme === 'light'")
    assert _background(frame)[1] > 0.9
    shot(page, "16-airflow-ui-light", own_page=False)


PAGES = ["/", "/partitions", "/partitions/access-log/0", "/plan", "/topics", "/topics/access-log",
         "/topics/user-sessions", "/messages/access-log/0", "/messages/user-emails/0?format=hex&limit=20",
         "/messages/user-sessions/0?format=json&limit=20", "/broker"]


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_every_page_reads_at_1280_px(server, sample, open_page, scheme):
    """No page of the view needs a horizontal scroll at 1280 px, alone or inside the Airflow UI (whose navigation
    takes part of the width); each is kept as a screenshot in both themes."""
    page = open_page(scheme=scheme, width=1280)
    for i, path in enumerate(PAGES):
        page.goto(server.url + BASE + path)
        width = page.evaluate("[document.documentElement.scrollWidth, document.documentElement.clientWidth]")
        assert width[0] <= width[1], (path, width)
        name = path.strip("/").split("?")[0].replace("/", "-") or "log-dirs"
        shot(page, f"20-{scheme}-{i:02d}-{name}")
    ui = open_page(scheme=scheme, width=1280,
                   init_script=f"localStorage.setItem('theme', '{scheme}')")
    for path in ("/topics/access-log", "/messages/access-log/0"):
        ui.goto(server.url + "/plugin/storage/storage-maintenance" + path)
        ui.frame_locator("iframe").locator("h1").wait_for(timeout=TIMEOUT_S * 1000)
        frame = next(f for f in ui.frames if f.url == server.url + BASE + path)
        width = frame.evaluate("[document.documentElement.scrollWidth, document.documentElement.clientWidth]")
        assert width[0] <= width[1], (path, width)
        assert frame.evaluate("document.documentElement.dataset.theme") == scheme
    shot(ui, f"21-{scheme}-airflow-ui-messages", own_page=False)
