"""The Storage view's ACL page: ACLs created through confluent-kafka's AdminClient on a real broker with Kafka's
StandardAuthorizer, the page opened in Debian's chromium (headless, Playwright) inside a real ``airflow
api-server``, each row checked against the store's own reading (``storage_engine.acl.store.read_acls``), the
filters, the authorizer's settings, the JSON API, and a damaged ACL file shown as the error naming it (never as
"no ACLs"). Screenshots under ``var/test-artifacts/storage-view/acls/``."""
from __future__ import annotations

import os
import pathlib
import urllib.parse

import pytest
import yaml
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient, ResourcePatternType,
                                   ResourceType)

from storage_engine import layout
from storage_engine.acl.store import read_acls

from .api_server import ApiServer
from .conftest import REPO
from .browser import logged_in
from tests.server.broker_proc import BrokerProcess

pytestmark = [pytest.mark.airflow, pytest.mark.e2e]

ARTIFACTS = REPO / "var" / "test-artifacts" / "storage-view" / "acls"
STANDARD = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
MADE = [AclBinding(ResourceType.TOPIC, "orders", ResourcePatternType.LITERAL, "User:alice", "*", AclOperation.READ,
                   AclPermissionType.ALLOW),
        AclBinding(ResourceType.TOPIC, "orders-", ResourcePatternType.PREFIXED, "User:bob", "10.0.0.9",
                   AclOperation.WRITE, AclPermissionType.DENY),
        AclBinding(ResourceType.GROUP, "billing", ResourcePatternType.LITERAL, "User:alice", "*", AclOperation.ALL,
                   AclPermissionType.ALLOW),
        AclBinding(ResourceType.TRANSACTIONAL_ID, "payments", ResourcePatternType.PREFIXED, "User:carol", "*",
                   AclOperation.WRITE, AclPermissionType.ALLOW),
        AclBinding(ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL, "User:*", "*",
                   AclOperation.IDEMPOTENT_WRITE, AclPermissionType.ALLOW)]


@pytest.fixture(scope="module")
def acls(tmp_path_factory):
    """A broker's log dirs holding :data:`MADE`, created by the super user through the AdminClient; the broker is
    stopped afterwards (the page reads the file, not the broker)."""
    root = tmp_path_factory.mktemp("acl-view")
    users = root / "users.yaml"
    users.write_text(yaml.safe_dump({"users": {"admin": {"password": "admin-secret"}}}))
    broker = BrokerProcess(root, broker={"sasl.credentials.file": str(users), "authorizer.class.name": STANDARD,
                                         "super.users": "User:admin", "allow.everyone.if.no.acl.found": True},
                           listeners="SASL_PLAINTEXT://127.0.0.1:0")
    try:
        broker.start()
        client = AdminClient({"bootstrap.servers": broker.address("SASL_PLAINTEXT"),
                              "security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "PLAIN",
                              "sasl.username": "admin", "sasl.password": "admin-secret"})
        for future in client.create_acls(MADE, request_timeout=30).values():
            future.result()
        assert broker.stop() == 0
    finally:
        broker.close()
    return {"config_path": root / "storage.yaml", "log_dirs": broker.log_dirs}


@pytest.fixture(scope="module")
def server(acls):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    srv = ApiServer(pathlib.Path(os.environ["AIRFLOW_HOME"]), acls["config_path"], ARTIFACTS / "api-server.log")
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def browser(server):
    with logged_in(server, viewport={"width": 1400, "height": 900}) as context:
        yield context


def rows_of(page) -> list[dict[str, str]]:
    rows = page.locator("#acls tr[data-acl]")
    fields = ("resource_type", "pattern_type", "name", "principal", "host", "operation", "permission")
    return [{f: rows.nth(i).locator(f'[data-field="{f}"]').inner_text().strip().rstrip("…") for f in fields}
            for i in range(rows.count())]


def stored(log_dirs: list[str], **only: str) -> list[dict[str, str]]:
    out = [{"resource_type": a.resource_type.name, "pattern_type": a.pattern_type.name, "name": a.name,
            "principal": a.principal, "host": a.host, "operation": a.operation.name, "permission": a.permission.name}
           for a in read_acls(log_dirs)]
    return sorted((a for a in out if all(a[k] == v for k, v in only.items())), key=lambda a: (
        a["resource_type"], a["pattern_type"], a["name"], a["principal"], a["host"], a["operation"], a["permission"]))


def test_the_acl_page_lists_what_the_authorizer_reads(server, acls, browser):
    truth = stored(acls["log_dirs"])
    assert len(truth) == len(MADE)
    page = browser.new_page()
    base = server.url + "/storage-maintenance"
    page.goto(base + "/acls")
    assert page.locator('nav.top a[aria-current="page"]').inner_text() == "ACLs"
    assert rows_of(page) == truth
    assert page.locator('[data-field="authorizer"]').inner_text() == STANDARD
    assert page.locator('[data-field="super-users"]').inner_text() == "User:admin"
    assert page.locator('[data-field="no-acl-found"]').inner_text().startswith("allowed")
    assert page.locator('[data-field="file"]').inner_text() == os.path.join(acls["log_dirs"][0], layout.ACLS_FILE)
    assert page.locator("#acl-summary").inner_text().startswith(f"{len(MADE)} of {len(MADE)} ACLs")
    deny = page.locator("#acls tr[data-acl]").filter(has_text="User:bob")
    assert deny.locator('[data-field="permission"] .bad').inner_text() == "DENY"
    page.screenshot(path=str(ARTIFACTS / "01-acls.png"), full_page=True)

    # the filters, through the page's own form
    page.fill('input[name="principal"]', "User:alice")
    page.select_option('select[name="resource_type"]', "TOPIC")
    page.click('button[type="submit"]')
    page.wait_for_url("**/acls?principal=*")
    assert rows_of(page) == stored(acls["log_dirs"], principal="User:alice", resource_type="TOPIC")
    assert len(rows_of(page)) == 1
    assert page.locator("#acl-summary").inner_text().startswith(f"1 of {len(MADE)} ACLs (filtered)")
    page.goto(base + "/acls?principal=" + urllib.parse.quote("User:nobody"))
    assert page.locator("#acls").inner_text().count("No ACL matches the filter") == 1
    page.screenshot(path=str(ARTIFACTS / "02-acls-filtered.png"), full_page=True)

    # the JSON behind it
    token = server.token()
    api = server.get_json("/storage-maintenance/api/acls", token)
    assert api["acls"] == truth and api["total"] == len(MADE) and api["authorizer"]["enabled"] is True
    status, body, _ = server.request("/storage-maintenance/api/acls?resource_type=queue", token=token)
    assert status == 422 and b"unknown resource type 'queue'" in body


def test_a_damaged_acl_file_is_shown_as_the_error_naming_it(server, acls, browser):
    path = pathlib.Path(acls["log_dirs"][0]) / layout.ACLS_FILE
    good = path.read_bytes()
    try:
        path.write_bytes(good.replace(b"orders", b"ordens", 1))
        page = browser.new_page()
        page.goto(server.url + "/storage-maintenance/acls")
        error = page.locator("#acl-error").inner_text()
        assert str(path) in error, error
        assert page.locator("#acls").count() == 0          # no table that would read as "no ACLs"
        page.screenshot(path=str(ARTIFACTS / "03-acls-damaged.png"), full_page=True)
        status, body, _ = server.request("/storage-maintenance/api/acls", token=server.token())
        assert status == 422 and str(path).encode() in body
    finally:
        path.write_bytes(good)
