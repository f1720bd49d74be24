"""The console's search, exports and live tail as an operator uses them, in Debian's chromium (Playwright) against a
real ``airflow api-server`` on the sample logs, with real Kafka clients producing through ``serve``:

* a search by key in 3 actions from the landing page (type the key, press Search, click the result), read only
  in the partition Kafka's default partitioner picks;
* the partition the search picks is the one real producers chose (kafka-python's default partitioner and
  librdkafka's ``murmur2_random``), and a record a producer put elsewhere (librdkafka's default CRC32
  partitioner) is found by the fallback scan of every partition, the page counting partitions done / total;
* value text, JSON field and header filters return exactly what a filter of the engine's own records returns;
* a whole search and one page of the message browser exported as JSON and CSV (downloads), equal to the engine's
  records;
* the live tail: records produced after the page was opened appear in its table without a reload.

Oracles: the engine's ``Log.read_records``, the producers' delivery reports; screenshots under
``var/test-artifacts/storage-view/search/``.
"""
from __future__ import annotations

import csv
import io
import json
import pathlib
import urllib.parse
import zlib

import pytest

from storage_engine.record.partitioner import default_partition
from storage_engine.record.records import Record

from .conftest import REPO
from .test_console import (broker, broker_launcher, chromium, open_page, records_of,  # noqa: F401 - module fixtures
                           wait_until)
from .test_storage_view import sample, server  # noqa: F401 - module fixtures
from tests.typed import present

pytestmark = [pytest.mark.airflow, pytest.mark.e2e]

ARTIFACTS = REPO / "var" / "test-artifacts" / "storage-view" / "search"
BASE = "/storage-maintenance"
KEY = b"user-00042"
TOPIC_PARTITIONS = {"user-emails": 3, "access-log": 3, "user-sessions": 2}
TIMEOUT_MS = 60_000


def shot(page, name: str) -> pathlib.Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    assert not page.js_errors, page.js_errors
    return path


def all_records(config, topic: str) -> list[tuple[int, Record]]:
    return [(p, r) for p in range(TOPIC_PARTITIONS[topic]) for r in records_of(config, topic, p)]


def api(server, path: str, user: str = "admin", **query) -> dict:
    return server.get_json(BASE + path + "?" + urllib.parse.urlencode(query, doseq=True), server.token(user))


def wait_search(page) -> None:
    page.wait_for_function("window.searchDone === true", timeout=TIMEOUT_MS)


def test_a_key_is_found_in_three_actions_from_the_landing_page(server, sample, open_page):
    truth = [(p, r.offset) for p, r in all_records(sample["config"], "user-emails") if r.key == KEY]
    assert truth and {p for p, _ in truth} == {default_partition(KEY, 3)}
    page = open_page()
    page.goto(server.url + BASE + "/")
    page.fill("#search-key", KEY.decode())                       # 1: type the key
    page.click("#search-go")                                     # 2: press Search
    wait_search(page)
    rows = page.locator("#results tr[data-offset]")
    assert [(r.get_attribute("data-topic"), int(r.get_attribute("data-partition")), int(r.get_attribute("data-offset")))
            for r in rows.all()] == [("user-emails", p, o) for p, o in truth]
    # only the key's default partition of each topic was read: 3 of the 8 partitions
    progress = page.locator("#search-progress")
    assert (progress.get_attribute("data-done"), progress.get_attribute("data-total")) == ("3", "8")
    summary = page.locator("#search-summary").inner_text()
    assert f"{len(truth)} record(s) found" in summary and "the other 5 partition(s) were not read" in summary
    shot(page, "01-search-by-key")
    last = truth[-1]
    rows.last.locator("a.open").click()                          # 3: click the result
    page.wait_for_url(f"**/messages/user-emails/{last[0]}?offset={last[1]}**")
    first = page.locator("#records tr[data-offset]").first
    assert first.get_attribute("data-offset") == str(last[1])
    assert first.locator('[data-field="key"]').inner_text().strip() == KEY.decode()
    # the topic page has the box too, searching that topic only
    page.goto(server.url + BASE + "/topics/user-emails")
    page.fill("#search-key", KEY.decode())
    page.click("#search-go")
    wait_search(page)
    assert page.locator("#results tr[data-offset]").count() == len(truth)
    assert page.locator("#search-progress").get_attribute("data-total") == "3"


def test_the_partition_searched_is_the_one_real_producers_chose(server, sample, broker, open_page):
    """kafka-python (default partitioner) and librdkafka with murmur2_random put a key where the search looks
    first; librdkafka's default (consistent_random: CRC32) put one elsewhere, which the fallback finds."""
    from confluent_kafka import Producer
    from kafka import KafkaProducer

    delivered: dict[bytes, tuple[int, int]] = {}
    kp = KafkaProducer(bootstrap_servers=broker, acks="all")
    try:
        for i in range(12):
            key = f"kp-search-{i}".encode()
            md = kp.send("access-log", key=key, value=b"from kafka-python").get(timeout=30)
            delivered[key] = (md.partition, md.offset)
    finally:
        kp.close()

    def produce(partitioner: str, keys: list[bytes]) -> None:
        producer = Producer({"bootstrap.servers": broker, "partitioner": partitioner, "acks": "all"})

        def report(err, msg):
            assert err is None, err
            delivered[msg.key()] = (msg.partition(), msg.offset())
        for key in keys:
            producer.produce("access-log", key=key, value=f"from librdkafka {partitioner}".encode(), on_delivery=report)
        assert producer.flush(30) == 0

    produce("murmur2_random", [f"rd-search-{i}".encode() for i in range(12)])
    # a key librdkafka's CRC32 partitioner sends elsewhere than murmur2 does
    stray = next(k for k in (f"crc-search-{i}".encode() for i in range(100))
                 if zlib.crc32(k) % 3 != default_partition(k, 3))
    produce("consistent_random", [stray])

    for key, (partition, offset) in delivered.items():
        if key == stray:
            continue
        assert default_partition(key, 3) == partition, key              # the clients agree with murmur2
        found = api(server, "/api/search", topic="access-log", key=key.decode())
        assert [(r["partition"], r["offset"]) for r in found["records"]] == [(partition, offset)], key
        assert [(p["partition"], p["preferred"]) for p in found["partitions"]] == [(partition, True)], key

    partition, offset = delivered[stray]
    assert partition != default_partition(stray, 3)
    found = api(server, "/api/search", topic="access-log", key=stray.decode())
    assert [(r["partition"], r["offset"]) for r in found["records"]] == [(partition, offset)]
    assert sorted(p["partition"] for p in found["partitions"]) == [0, 1, 2]          # it read every partition

    page = open_page()
    page.goto(server.url + BASE + "/search?" + urllib.parse.urlencode({"topic": "access-log", "key": stray.decode()}))
    wait_search(page)
    progress = page.locator("#search-progress")
    assert (progress.get_attribute("data-done"), progress.get_attribute("data-total")) == ("3", "3")
    assert "reading every partition" in page.locator("#search-summary").inner_text()
    row = page.locator("#results tr[data-offset]")
    assert row.count() == 1 and (row.get_attribute("data-partition"), row.get_attribute("data-offset")) == (
        str(partition), str(offset))
    shot(page, "02-search-fallback")


def test_filters_on_value_text_json_fields_and_headers(server, sample, open_page):
    records = all_records(sample["config"], "user-emails")
    values = {(p, r.offset): json.loads(r.value) for p, r in records if r.value is not None}
    some = next(v for v in values.values() if v["verified"] and v["version"] > 1)
    email = some["email"]

    def got(**query) -> list[tuple[int, int]]:
        body = api(server, "/api/search", topic="user-emails", limit=100_000, **query)
        return [(r["partition"], r["offset"]) for r in body["records"]]

    assert got(field=[f"email={email}"]) == [k for k, v in values.items() if v["email"] == email]
    assert got(field=["verified=false", "version=1"]) == [
        k for k, v in values.items() if v["verified"] is False and v["version"] == 1]
    assert got(text=email.split("@")[0].upper()) == [
        (p, r.offset) for p, r in records if r.value and email.split("@")[0].encode() in r.value.lower()]
    assert got(header=["source=support-tool"]) == [(p, r.offset) for p, r in records if ("source", b"support-tool") in r.headers]
    tombstones = [(p, r.offset) for p, r in records if r.value is None and ("source", b"gdpr-eraser") in r.headers]
    assert tombstones and got(header=["source=gdpr-eraser"]) == tombstones
    # in the page: JSON field and header filters from the form, with the key
    page = open_page()
    page.goto(server.url + BASE + "/search?" + urllib.parse.urlencode(
        {"topic": "user-emails", "key": KEY.decode(), "field": "verified=true", "header": "source"}))
    wait_search(page)
    expected = [(p, r.offset) for p, r in records if r.key == KEY and r.value and json.loads(r.value)["verified"]]
    assert [(int(r.get_attribute("data-partition")), int(r.get_attribute("data-offset")))
            for r in page.locator("#results tr[data-offset]").all()] == expected
    shot(page, "03-search-filters")
    # bad filters and bad searches are refused, naming what is wrong
    status, body, _ = server.request(BASE + "/api/search?topic=user-emails&field=a..b=1", token=server.token())
    assert status == 422 and b"path must be names joined by dots" in body
    status, body, _ = server.request(BASE + "/api/search?topic=user-emails", token=server.token())
    assert status == 422 and b"needs a key or a filter" in body
    status, body, _ = server.request(BASE + "/api/search?topic=no-such&key=x", token=server.token())
    assert status == 404 and b"no-such" in body


def expected_export(config, topic: str, keep) -> list[dict]:
    return [{"topic": topic, "partition": p, "offset": r.offset, "key": r.key.decode() if r.key is not None else None,
             "value": r.value.decode() if r.value is not None else None,
             "headers": [[k, v.decode()] for k, v in r.headers]}
            for p in range(TOPIC_PARTITIONS[topic]) for r in records_of(config, topic, p) if keep(r)]


def test_a_search_and_a_page_export_to_json_and_csv(server, sample, open_page):
    config = sample["config"]
    expected = expected_export(config, "user-emails", lambda r: r.key == KEY)
    page = open_page()
    page.goto(server.url + BASE + "/search?topic=user-emails&key=" + KEY.decode())
    wait_search(page)
    exports = {}
    for fmt in ("json", "csv"):
        with page.expect_download() as download:
            page.click(f"#export-{fmt}")
        exports[fmt] = pathlib.Path(download.value.path()).read_text()
        assert download.value.suggested_filename == f"search-user-emails-key-{KEY.decode()}.{fmt}"
    got_json = [{k: r[k] for k in ("topic", "partition", "offset", "key", "value", "headers")}
                for r in json.loads(exports["json"])]
    assert got_json == expected
    rows = list(csv.DictReader(io.StringIO(exports["csv"])))
    assert [(r["topic"], int(r["partition"]), int(r["offset"]), r["key"], r["value"] if r["value_format"] != "null" else None,
             json.loads(r["headers"])) for r in rows] == [
        (e["topic"], e["partition"], e["offset"], e["key"], e["value"], e["headers"]) for e in expected]

    # one page of the message browser: access-log-1 from offset start+5, 20 records
    truth = records_of(config, "access-log", 1)
    start = truth[5].offset
    page.goto(server.url + BASE + f"/messages/access-log/1?offset={start}&limit=20")
    with page.expect_download() as download:
        page.click("#export-page-csv")
    rows = list(csv.DictReader(io.StringIO(pathlib.Path(download.value.path()).read_text())))
    assert [(int(r["offset"]), r["key"] if r["key_format"] != "null" else None, r["value"]) for r in rows] == [
        (r.offset, r.key.decode() if r.key is not None else None, r.value.decode()) for r in truth[5:25]]
    with page.expect_download() as download:
        page.click("#export-page-json")
    exported = json.loads(pathlib.Path(download.value.path()).read_text())
    assert [(r["offset"], r["value"], r["headers"]) for r in exported] == [
        (r.offset, r.value.decode(), [[k, v.decode()] for k, v in r.headers]) for r in truth[5:25]]
    status, body, _ = server.request(BASE + "/api/export/messages/access-log/1?as=xml", token=server.token())
    assert status == 422 and b"as must be json or csv" in body


def test_the_live_tail_shows_new_records_without_a_reload(server, sample, open_page, broker):
    from kafka import KafkaProducer

    page = open_page()
    page.goto(server.url + BASE + "/messages/user-sessions/1?latest=true&limit=20")
    loaded = int(page.locator('[data-field="log_end_offset"]').inner_text())
    page.click("#tail-toggle")
    page.wait_for_function("document.getElementById('tail-status').textContent.includes('tailing')", timeout=TIMEOUT_MS)
    producer = KafkaProducer(bootstrap_servers=broker, acks="all")
    try:
        offsets = [producer.send("user-sessions", partition=1, key=f"tail-{i}".encode(),
                                 value=json.dumps({"tail": i}).encode(), headers=[("h", b"x")]).get(timeout=30).offset
                   for i in range(3)]
    finally:
        producer.close()
    assert offsets == [loaded, loaded + 1, loaded + 2]
    page.wait_for_function("window.tailed >= 3", timeout=TIMEOUT_MS)
    tailed = page.locator("#records tr.tailed")
    assert [int(r.get_attribute("data-offset")) for r in tailed.all()] == offsets
    assert [json.loads(r.locator('[data-field="value"] pre').inner_text()) for r in tailed.all()] == [
        {"tail": i} for i in range(3)]
    assert tailed.first.locator('[data-field="headers"]').inner_text().strip() == "h: x"
    assert page.evaluate("performance.getEntriesByType('navigation').length") == 1        # no reload
    shot(page, "04-live-tail")
    page.click("#tail-toggle")
    assert "stopped" in page.locator("#tail-status").inner_text()


def test_every_search_endpoint_needs_the_airflow_login(server):
    from storage_maintenance.ui import search

    routes = [r.path for r in search.router.routes]  # type: ignore[attr-defined]  # the router's routes are APIRoutes, which have a path
    assert len(routes) == 6
    for path in routes:
        path = path.replace("{topic}", "access-log").replace("{partition}", "0")
        status, body, _ = server.request(BASE + path + "?topic=access-log&partition=0&after=0&key=k")
        assert status == 401, (path, status, body[:200])
        assert server.request(BASE + path + "?topic=access-log&partition=0&after=0&key=k",
                              token=server.token("viewer"))[0] == 200, path


def test_a_viewer_searches_exports_and_tails_masked_values(server, sample, open_page, broker):
    """The storage config masks user-emails' ``email`` for users without the unmasked-read permission: a viewer's
    search, exports and tail show ``****`` and a viewer cannot find a record by the masked field; an admin can."""
    from kafka import KafkaProducer

    truth = [(p, r) for p, r in all_records(sample["config"], "user-emails") if r.key == KEY and r.value is not None]
    email = json.loads(present(truth[-1][1].value))["email"]
    as_admin = api(server, "/api/search", "admin", topic="user-emails", key=KEY.decode())["records"]
    as_viewer = api(server, "/api/search", "viewer", topic="user-emails", key=KEY.decode())["records"]
    assert [r["offset"] for r in as_viewer if r["value"]] == [r["offset"] for r in as_admin if r["value"]] == [
        r.offset for _, r in truth]
    assert [json.loads(r["value"])["email"] for r in as_admin if r["value"]] == [
        json.loads(present(r.value))["email"] for _, r in truth]
    assert {json.loads(r["value"])["email"] for r in as_viewer if r["value"]} == {"****"}
    assert all(r["masked"] == ["email"] for r in as_viewer if r["value"])
    # the filters see what the reader sees
    assert api(server, "/api/search", "admin", topic="user-emails", field=[f"email={email}"])["records"]
    assert api(server, "/api/search", "viewer", topic="user-emails", field=[f"email={email}"])["records"] == []
    assert api(server, "/api/search", "viewer", topic="user-emails", text=email)["records"] == []
    status, body, _ = server.request(BASE + f"/api/search/export?as=csv&topic=user-emails&key={KEY.decode()}",
                                     token=server.token("viewer"))
    assert status == 200 and email.encode() not in body and b"****" in body

    page = open_page("viewer")
    page.goto(server.url + BASE + "/search?topic=user-emails&key=" + KEY.decode())
    wait_search(page)
    values = page.locator('#results [data-field="value"]')
    assert values.count() == len(as_viewer) and "****" in values.first.inner_text() and email not in page.content()
    assert "masked" in values.first.inner_text()
    shot(page, "05-search-masked-for-a-viewer")
    # the tail as a viewer
    p = default_partition(b"tail-user", 3)
    page.goto(server.url + BASE + f"/messages/user-emails/{p}?latest=true&limit=5")
    page.click("#tail-toggle")
    page.wait_for_function("document.getElementById('tail-status').textContent.includes('tailing')", timeout=TIMEOUT_MS)
    producer = KafkaProducer(bootstrap_servers=broker, acks="all")
    try:
        producer.send("user-emails", key=b"tail-user", value=b'{"email":"secret@example.com","user_id":1}').get(timeout=30)
    finally:
        producer.close()
    page.wait_for_function("window.tailed >= 1", timeout=TIMEOUT_MS)
    row = page.locator("#records tr.tailed").first
    assert json.loads(row.locator('[data-field="value"] pre').inner_text()) == {"email": "****", "user_id": 1}
    assert "secret@example.com" not in page.content()
