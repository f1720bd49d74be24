"""The console's admin actions as an operator uses them, in Debian's chromium against a real ``airflow api-server``
and a real broker (``serve``) on the sample logs: create a topic, change its configs, produce a record, reset a
consumer group's offsets (previewed first) and delete the group. Each is refused for the viewer (the store
unchanged, the refusal in Airflow's audit log) and done for the admin (the change seen by the engine or by a
Kafka client, the action in the audit log); a group with a member is refused with Kafka's reason, a config the
engine's rules reject names its key, and with no broker running the broker's changes are refused with the reason.

Oracles: the engine (records read back, the stored topic configs), Kafka's client (kafka-python's admin client:
committed offsets, the group's state), Airflow's REST API (the audit log)."""
from __future__ import annotations

import json

import pytest

from storage_engine import topic_store

from .test_console import (BASE, TIMEOUT_S, broker, broker_launcher, chromium, confirm, event_logs,  # noqa: F401
                           open_page, records_of, result_of, shot, wait_until)
from .test_storage_view import describe, sample, server  # noqa: F401 - module fixtures

pytestmark = [pytest.mark.airflow, pytest.mark.e2e]

TOPIC = "admin-made"
GROUP = "admin-group"


def one_event(server, action: str, owner: str) -> dict:
    found = [e for e in event_logs(server, "storage." + action) if e["owner"] == owner]
    assert found, f"no audit entry storage.{action} by {owner}"
    return found[0]


def committed(bootstrap: str, group: str) -> dict[int, int]:
    from kafka.admin import KafkaAdminClient

    client = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        got = client.list_group_offsets({group: None}).get(group) or {}
        return {tp.partition: v.offset for tp, v in got.items() if tp.topic == TOPIC}
    finally:
        client.close()


def group_state(bootstrap: str, group: str) -> str:
    from kafka.admin import KafkaAdminClient

    client = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        return client.describe_groups([group])[group]["group_state"]
    finally:
        client.close()


def test_topic_actions_refused_for_a_viewer_and_done_for_an_admin(server, sample, open_page, broker):
    """Create a topic, set and remove a config override, produce a record: each through its confirm step."""
    config = sample["config"]

    def create(user: str, configs: str):
        page = open_page(user)
        page.goto(server.url + BASE + "/topics")
        page.fill("#ct-name", TOPIC)
        page.fill("#ct-partitions", "2")
        page.fill("#ct-configs", configs)
        page.click("#create-topic")
        confirm(page)
        return page

    page = create("viewer", "retention.ms=7200000")
    assert "create permission on the Airflow connection storage_engine_default" in result_of(page, "create-topic-out", "403")
    shot(page, "admin-01-create-topic-refused")
    assert (TOPIC, 0) not in describe(config)
    refusal = one_event(server, "create-topic", "viewer")
    assert refusal["extra"]["outcome"] == "refused" and refusal["extra"]["topic"] == TOPIC

    page = create("admin", "retention.ms=soon")             # the engine's rules name the key
    assert "retention.ms = 'soon': must be an integer" in result_of(page, "create-topic-out", "422")
    assert (TOPIC, 0) not in describe(config)
    assert one_event(server, "create-topic", "admin")["extra"]["outcome"] == "failed"

    page = create("admin", "retention.ms=7200000")
    assert f"topic {TOPIC} created with 2 partition(s)" in result_of(page, "create-topic-out", "200")
    found = describe(config)
    assert (TOPIC, 0) in found and (TOPIC, 1) in found
    assert topic_store.load(config.log_dirs)[TOPIC] == {"retention.ms": "7200000"}
    assert one_event(server, "create-topic", "admin")["extra"]["outcome"] == "done"
    shot(page, "admin-02-create-topic-done")

    def set_config(user: str, value: str):
        page = open_page(user)
        page.goto(server.url + BASE + "/topics/" + TOPIC)
        page.fill("#cf-key", "retention.ms")
        page.fill("#cf-value", value)
        page.click("#config-set")
        confirm(page)
        return page

    page = set_config("viewer", "3600000")
    assert "edit permission on the Airflow connection" in result_of(page, "config-out", "403")
    assert topic_store.load(config.log_dirs)[TOPIC] == {"retention.ms": "7200000"}
    assert one_event(server, "alter-configs", "viewer")["extra"]["outcome"] == "refused"
    page = set_config("admin", "3600000")
    assert "configs of admin-made: set {'retention.ms': '3600000'}" in result_of(page, "config-out", "200")
    assert topic_store.load(config.log_dirs)[TOPIC] == {"retention.ms": "3600000"}
    page.reload()
    row = page.locator('#configs tr[data-config="retention.ms"]')
    assert row.locator('[data-field="source"]').inner_text() == "topic override"
    assert "3600000" in row.locator('[data-field="value"]').inner_text()
    page.fill("#cf-key", "cleanup.policy")
    page.fill("#cf-value", "shred")
    page.click("#config-set")
    confirm(page)
    assert "cleanup.policy" in result_of(page, "config-out", "422")
    page.fill("#cf-key", "retention.ms")
    page.click("#config-delete")
    confirm(page)
    assert "removed ['retention.ms']" in result_of(page, "config-out", "200")
    assert TOPIC not in topic_store.load(config.log_dirs)

    def produce(user: str):
        page = open_page(user)
        page.goto(server.url + BASE + "/topics/" + TOPIC)
        page.select_option("#pr-partition", "1")
        page.fill("#pr-key", "order-7")
        page.fill("#pr-value", '{"amount": 12}')
        page.fill("#pr-headers", "trace: abc\nsource: console")
        page.click("#produce")
        assert "with key order-7 and 2 header(s)" in page.locator("#confirm-text").inner_text()
        confirm(page)
        return page

    page = produce("viewer")
    assert "create permission" in result_of(page, "produce-out", "403")
    assert records_of(config, TOPIC, 1) == []
    assert one_event(server, "produce", "viewer")["extra"]["outcome"] == "refused"
    page = produce("admin")
    assert f"record appended to {TOPIC}-1 at offset 0" in result_of(page, "produce-out", "200")
    (record,) = records_of(config, TOPIC, 1)
    assert (record.key, record.value, list(record.headers)) == (b"order-7", b'{"amount": 12}',
                                                                [("trace", b"abc"), ("source", b"console")])
    assert one_event(server, "produce", "admin")["extra"]["outcome"] == "done"
    shot(page, "admin-03-produced")
    page.reload()
    recent = page.locator("#recent tr[data-action]")
    assert (recent.first.get_attribute("data-action"), recent.first.get_attribute("data-outcome")) == ("produce", "done")


def test_group_actions_previewed_refused_for_a_viewer_or_a_live_group_and_done_for_an_admin(server, sample, open_page,
                                                                                           broker):
    """A consumer reads the topic and commits its end; while it is in the group the reset is refused with Kafka's
    reason; once it left, the viewer is refused and the admin resets to the earliest offsets (previewed), then
    deletes the group."""
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=broker)
    if TOPIC not in admin.list_topics():
        admin.create_topics({TOPIC: {"num_partitions": 2}})
    admin.close()
    producer = KafkaProducer(bootstrap_servers=broker)
    for i in range(6):
        producer.send(TOPIC, f"v{i}".encode(), key=f"k{i}".encode(), partition=0)
    producer.flush()
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=broker, group_id=GROUP, auto_offset_reset="earliest",
                             enable_auto_commit=False)
    consumer.subscribe([TOPIC])
    got: list = []

    def read_partition_0() -> bool:
        got.extend(r for rs in consumer.poll(500).values() for r in rs)
        return sum(r.partition == 0 for r in got) >= 6
    wait_until(read_partition_0, "the consumer to read partition 0")
    consumer.commit()
    end0 = committed(broker, GROUP)[0]
    assert end0 >= 6
    token = server.token()

    def commit_reported() -> bool:
        # the group shows in the listener's status as soon as the consumer joined; the page's topic list needs
        # the commit (or the assignment) in a status written after it
        status, body, _ = server.request(BASE + f"/api/groups/{GROUP}", token=token)
        return status == 200 and any(p["topic"] == TOPIC and p["committed"] is not None
                                     for p in json.loads(body)["g"]["partitions"])
    wait_until(commit_reported, "the listener to report the group's commit")
    try:
        page = open_page("admin")
        page.goto(server.url + BASE + f"/groups/{GROUP}")
        page.select_option("#rs-topic", TOPIC)
        page.select_option("#rs-to", "earliest")
        page.click("#reset-preview")
        page.locator("#reset-note").filter(has_text="empty group").wait_for(timeout=TIMEOUT_S * 1000)
        assert "stop its consumers first" in page.locator("#reset-note").inner_text()
        assert page.locator("#reset-offsets").is_disabled()
        shot(page, "admin-04-reset-refused-live-group")
        status, body, _ = server.request(BASE + f"/api/admin/groups/{GROUP}/reset-offsets", token=token,
                                         method="POST", body={"topic": TOPIC, "offsets": {"0": 0}, "confirm": GROUP})
        assert status == 409 and b"member(s)" in body
        status, body, _ = server.request(BASE + f"/api/admin/groups/{GROUP}/delete", token=token, method="POST",
                                         body={"confirm": GROUP})
        assert status == 409 and b"deletes only an empty group" in body
        assert committed(broker, GROUP)[0] == end0
    finally:
        consumer.close()

    def reset(user: str):
        page = open_page(user)
        page.goto(server.url + BASE + f"/groups/{GROUP}")
        page.select_option("#rs-topic", TOPIC)
        page.select_option("#rs-to", "earliest")
        page.click("#reset-preview")
        new = page.locator('#reset-table tr[data-partition="0"] [data-field="new"]')
        new.wait_for(timeout=TIMEOUT_S * 1000)
        assert new.inner_text() == "0"
        assert page.locator('#reset-table tr[data-partition="0"] td').nth(1).inner_text() == str(end0)
        page.click("#reset-offsets")
        confirm(page, GROUP)
        return page

    page = reset("viewer")
    assert "edit permission on the Airflow connection" in result_of(page, "reset-out", "403")
    assert committed(broker, GROUP)[0] == end0
    refusal = one_event(server, "reset-offsets", "viewer")
    assert refusal["extra"]["outcome"] == "refused" and refusal["extra"]["group_id"] == GROUP
    page = reset("admin")
    assert f"offsets of group {GROUP} on {TOPIC} reset" in result_of(page, "reset-out", "200")
    assert committed(broker, GROUP)[0] == 0
    assert one_event(server, "reset-offsets", "admin")["extra"]["offsets"] == {"0": 0, "1": 0}
    shot(page, "admin-05-reset-done")

    # a timestamp after every record previews the log end, as Kafka's tool does
    status, body, _ = server.request(BASE + f"/api/admin/groups/{GROUP}/reset-preview", token=token, method="POST",
                                     body={"topic": TOPIC, "to": "timestamp", "value": "2100-01-01T00:00Z"})
    assert status == 200 and b"the log end" in body

    def delete(user: str):
        page = open_page(user)
        page.goto(server.url + BASE + f"/groups/{GROUP}")
        page.click("#delete-group")
        confirm(page, GROUP)
        return page

    page = delete("viewer")
    assert "delete permission on the Airflow connection" in result_of(page, "delete-group-out", "403")
    assert group_state(broker, GROUP) == "Empty"
    assert one_event(server, "delete-group", "viewer")["extra"]["outcome"] == "refused"
    page = delete("admin")
    assert f"group {GROUP} deleted" in result_of(page, "delete-group-out", "200")
    assert group_state(broker, GROUP) == "Dead" and committed(broker, GROUP) == {}
    assert one_event(server, "delete-group", "admin")["extra"]["outcome"] == "done"


def test_with_no_broker_running_the_brokers_changes_are_refused_with_the_reason(server, sample, broker_launcher):
    """Topics, configs and groups are the broker's: with the listener stopped the console refuses to change them
    behind its back (audited as failed), and still produces through the engine."""
    if broker_launcher.proc is not None:
        assert broker_launcher.stop(60) == 0, broker_launcher.log_tail()
    token = server.token()
    wait_until(lambda: (server.get_json(BASE + "/api/broker/live", token)["listener"] or {}).get("state") == "stopped",
               "the listener's status to say stopped")
    status, body, _ = server.request(BASE + "/api/admin/topics", token=token, method="POST",
                                     body={"topic": "offline-topic", "partitions": 1, "confirm": "offline-topic"})
    assert status == 409 and b"no Kafka listener runs on these log dirs" in body
    assert ("offline-topic", 0) not in describe(sample["config"])
    assert one_event(server, "create-topic", "admin")["extra"]["outcome"] == "failed"
    status, body, _ = server.request(BASE + "/api/admin/produce", token=token, method="POST",
                                     body={"topic": "access-log", "partition": 0, "key": "k", "value": "v",
                                           "confirm": "access-log-0"})
    assert status == 200, body


def test_every_admin_endpoint_needs_the_airflow_login_and_a_json_body(server):
    """401 without a login; a form post (not JSON) is refused before anything is checked or done."""
    from storage_maintenance.ui import admin

    paths = [r.path for r in admin.router.routes]  # type: ignore[attr-defined]  # the router's routes are APIRoutes
    assert len(paths) == 6
    token = server.token()
    for path in paths:
        url = BASE + path.replace("{topic}", "access-log").replace("{group_id}", "g")
        assert server.request(url, method="POST", body={})[0] == 401, path
        assert server.request(url, token=token, method="POST", body=b"topic=x",
                              content_type="application/x-www-form-urlencoded")[0] == 422, path
