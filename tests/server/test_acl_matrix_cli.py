"""``python -m storage_engine acls``, the read-only listing of the ACLs the authorizer reads: ACLs created through
confluent-kafka's AdminClient on a serving broker are listed (while it serves, nothing locked or written), with
the filters and the authorizer's settings; a damaged ACL file is one error line naming the file (exit 2), never
an empty list."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType, AdminClient,
                                   ResourcePatternType, ResourceType)

from storage_engine import layout
from tests.server.broker_proc import ROOT, BrokerProcess

pytestmark = pytest.mark.e2e

STANDARD = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


def cli(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "storage_engine", "--config", str(config), "acls", *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))


def admin(server: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": server.address("SASL_PLAINTEXT"), "security.protocol": "SASL_PLAINTEXT",
                        "sasl.mechanisms": "PLAIN", "sasl.username": "admin", "sasl.password": "admin-secret"})


def test_acls_lists_what_clients_created(tmp_path: Path) -> None:
    users = tmp_path / "users.yaml"
    users.write_text(yaml.safe_dump({"users": {"admin": {"password": "admin-secret"}}}))
    server = BrokerProcess(tmp_path, broker={"sasl.credentials.file": str(users), "authorizer.class.name": STANDARD,
                                             "super.users": "User:admin"},
                           listeners="SASL_PLAINTEXT://127.0.0.1:0")
    config = tmp_path / "storage.yaml"
    try:
        server.start()
        before = cli(config)
        assert before.returncode == 0, before.stderr
        empty = json.loads(before.stdout)
        assert (empty["acls"], empty["total"], empty["exists"]) == ([], 0, False)
        assert empty["authorizer"] == {"class_name": STANDARD, "enabled": True, "super_users": "User:admin",
                                       "allow_everyone_if_no_acl_found": False}

        client = admin(server)
        made = [AclBinding(ResourceType.TOPIC, "orders", ResourcePatternType.LITERAL, "User:alice", "*",
                           AclOperation.READ, AclPermissionType.ALLOW),
                AclBinding(ResourceType.TOPIC, "orders-", ResourcePatternType.PREFIXED, "User:bob", "10.0.0.9",
                           AclOperation.WRITE, AclPermissionType.DENY),
                AclBinding(ResourceType.GROUP, "billing", ResourcePatternType.LITERAL, "User:alice", "*",
                           AclOperation.ALL, AclPermissionType.ALLOW),
                AclBinding(ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL, "User:*", "*",
                           AclOperation.IDEMPOTENT_WRITE, AclPermissionType.ALLOW)]
        for future in client.create_acls(made, request_timeout=30).values():
            future.result()

        listed = json.loads(cli(config).stdout)     # the broker still serves: the listing locks nothing
        assert listed["total"] == 4 and listed["exists"]
        assert listed["file"] == os.path.join(server.log_dirs[0], layout.ACLS_FILE)
        assert sorted(listed["acls"], key=lambda a: (a["resource_type"], a["name"])) == [
            {"resource_type": "CLUSTER", "pattern_type": "LITERAL", "name": "kafka-cluster", "principal": "User:*",
             "host": "*", "operation": "IDEMPOTENT_WRITE", "permission": "ALLOW"},
            {"resource_type": "GROUP", "pattern_type": "LITERAL", "name": "billing", "principal": "User:alice",
             "host": "*", "operation": "ALL", "permission": "ALLOW"},
            {"resource_type": "TOPIC", "pattern_type": "LITERAL", "name": "orders", "principal": "User:alice",
             "host": "*", "operation": "READ", "permission": "ALLOW"},
            {"resource_type": "TOPIC", "pattern_type": "PREFIXED", "name": "orders-", "principal": "User:bob",
             "host": "10.0.0.9", "operation": "WRITE", "permission": "DENY"}]
        alice = json.loads(cli(config, "--principal", "User:alice").stdout)
        assert {(a["resource_type"], a["name"]) for a in alice["acls"]} == {("GROUP", "billing"), ("TOPIC", "orders")}
        topics = json.loads(cli(config, "--resource-type", "topic").stdout)
        assert [a["name"] for a in topics["acls"]] == ["orders", "orders-"] and topics["total"] == 4
        bad = cli(config, "--resource-type", "queue")
        assert bad.returncode == 2 and bad.stdout == ""
        assert bad.stderr.strip().splitlines() == [
            "storage-engine: error: unknown resource type 'queue'; one of TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID, "
            "DELEGATION_TOKEN, USER"]

        anything: Any = None        # a filter's None matches every name, principal and host
        deleted = client.delete_acls([AclBindingFilter(ResourceType.GROUP, anything, ResourcePatternType.ANY, anything,
                                                       anything, AclOperation.ANY, AclPermissionType.ANY)],
                                     request_timeout=30)
        assert [len(f.result()) for f in deleted.values()] == [1]
        assert json.loads(cli(config).stdout)["total"] == 3
        assert server.stop() == 0
    finally:
        server.close()

    # A damaged file: one line naming it, exit 2, never "no ACLs".
    path = Path(server.log_dirs[0]) / layout.ACLS_FILE
    data = path.read_bytes()
    path.write_bytes(data.replace(b"orders", b"ordens", 1))
    damaged = cli(config)
    assert damaged.returncode == 2 and damaged.stdout == "", damaged
    lines = damaged.stderr.strip().splitlines()
    assert len(lines) == 1 and str(path) in lines[0], lines
