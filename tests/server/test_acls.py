"""The ACL APIs on the wire (DescribeAcls 29, CreateAcls 30, DeleteAcls 31) with confluent-kafka's, kafka-python's
and kafkajs's admin clients and raw requests: created ACLs are described and deleted through Kafka's filters,
decide what a SASL user may do, survive a clean stop and a kill -9; Kafka's errors for a user without the cluster
operation, for invalid ACLs and for a broker without an authorizer."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType, AdminClient,
                                   ResourcePatternType, ResourceType)
from kafka import KafkaAdminClient
from kafka.admin import ACL, ACLFilter, ACLOperation, ACLPermissionType, ACLResourcePatternType, ResourcePattern
from kafka.admin import ResourcePatternFilter as KpFilter
from kafka.admin import ResourceType as KpType
from kafka.errors import BrokerResponseError, SecurityDisabledError

from storage_engine.acl.store import read_acls
from storage_engine.server.errors import ErrorCode
from tests.server import wire
from tests.server.broker_proc import BrokerProcess
from tests.server.test_clients_kafkajs import NODE, NODE_MODULES, node
from tests.server.test_security import PASSWORDS, sasl_conf, write_users

pytestmark = pytest.mark.e2e

STANDARD = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
LIT, PRE = ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
CLUSTER = "kafka-cluster"


@pytest.fixture(scope="module")
def acl_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """SASL and PLAINTEXT listeners, StandardAuthorizer on; alice and the PLAINTEXT listener's ANONYMOUS are super
    users, bob (SCRAM-SHA-256) is not."""
    tmp = tmp_path_factory.mktemp("acl-broker")
    users = write_users(tmp / "users.yaml")
    server = BrokerProcess(tmp, broker={"sasl.credentials.file": str(users), "authorizer.class.name": STANDARD,
                                        "super.users": "User:alice;User:ANONYMOUS"},
                           listeners="SASL_PLAINTEXT://127.0.0.1:0,PLAINTEXT://127.0.0.1:0")
    server.start()
    yield server
    try:
        assert server.stop() == 0
    finally:
        server.close()


def acl_filter(rt: ResourceType, name: str | None, pattern: ResourcePatternType, principal: str | None = None,
               op: AclOperation = AclOperation.ANY) -> AclBindingFilter:
    """A filter with open fields as None (confluent-kafka's stubs type them as str)."""
    make: Any = AclBindingFilter
    return make(rt, name, pattern, principal, None, op, AclPermissionType.ANY)


def admin(server: BrokerProcess, user: str) -> AdminClient:
    mechanism = "SCRAM-SHA-256" if user == "bob" else "PLAIN"
    return AdminClient(sasl_conf(server, "SASL_PLAINTEXT", mechanism, user, PASSWORDS[user]))


def everything(admin_client: AdminClient) -> set[AclBinding]:
    flt = acl_filter(ResourceType.ANY, None, ResourcePatternType.ANY)
    return set(admin_client.describe_acls(flt).result(timeout=30))


def kp_describe_error(server: BrokerProcess, user: str) -> int:
    """The error code of a DescribeAcls of everything by ``user`` (SCRAM-SHA-256) through kafka-python."""
    kp = KafkaAdminClient(bootstrap_servers=server.address("SASL_PLAINTEXT"), security_protocol="SASL_PLAINTEXT",
                          sasl_mechanism="SCRAM-SHA-256", sasl_plain_username=user,
                          sasl_plain_password=PASSWORDS[user], client_id="acl-test")
    try:
        _, err = kp.describe_acls(ACLFilter(None, None, ACLOperation.ANY, ACLPermissionType.ANY,
                                            KpFilter(KpType.ANY, None, ACLResourcePatternType.ANY)))
        return err.errno
    except BrokerResponseError as exc:
        return exc.errno
    finally:
        kp.close()


def error_code(exc: BaseException) -> int:
    assert isinstance(exc, KafkaException), exc
    return exc.args[0].code()


def test_confluent_create_describe_delete_and_the_acls_decide(acl_server):
    alice, bob = admin(acl_server, "alice"), admin(acl_server, "bob")
    for fut in alice.delete_acls([acl_filter(ResourceType.ANY, None, ResourcePatternType.ANY)]).values():
        fut.result(timeout=30)
    # bob may not describe or change ACLs: CLUSTER_AUTHORIZATION_FAILED (librdkafka does not surface
    # DescribeAcls' top-level error code, its future gives an empty list: kafka-python checks it)
    assert kp_describe_error(acl_server, "bob") == ErrorCode.cluster_authorization_failed
    grant = AclBinding(ResourceType.BROKER, CLUSTER, LIT, "User:bob", "*", AclOperation.DESCRIBE, ALLOW)
    with pytest.raises(KafkaException) as got:
        bob.create_acls([grant])[grant].result(timeout=30)
    assert error_code(got.value) == ErrorCode.cluster_authorization_failed

    acls = [grant,
            AclBinding(ResourceType.TOPIC, "orders", LIT, "User:bob", "*", AclOperation.READ, ALLOW),
            AclBinding(ResourceType.TOPIC, "app-", PRE, "User:*", "127.0.0.1", AclOperation.WRITE, ALLOW),
            AclBinding(ResourceType.TOPIC, "*", LIT, "User:carol", "*", AclOperation.DESCRIBE, ALLOW),
            AclBinding(ResourceType.GROUP, "g", LIT, "User:bob", "*", AclOperation.ALL, DENY),
            AclBinding(ResourceType.TRANSACTIONAL_ID, "tx", LIT, "User:bob", "*", AclOperation.WRITE, ALLOW)]
    for fut in alice.create_acls(acls).values():
        assert fut.result(timeout=30) is None
    # created twice: a success, stored once
    assert alice.create_acls([acls[1]])[acls[1]].result(timeout=30) is None
    assert everything(alice) == set(acls)
    assert everything(bob) == set(acls)          # the grant of DESCRIBE on the cluster is in force at once
    assert kp_describe_error(acl_server, "bob") == ErrorCode.none
    # MATCH: the ACLs that apply to the topic app-1
    match = acl_filter(ResourceType.TOPIC, "app-1", ResourcePatternType.MATCH)
    assert set(alice.describe_acls(match).result(timeout=30)) == {acls[2], acls[3]}
    # bob may describe but not delete
    drop = acl_filter(ResourceType.TOPIC, None, ResourcePatternType.ANY, "User:bob")
    with pytest.raises(KafkaException) as got:
        bob.delete_acls([drop])[drop].result(timeout=30)
    assert error_code(got.value) == ErrorCode.cluster_authorization_failed
    assert alice.delete_acls([drop])[drop].result(timeout=30) == [acls[1]]
    assert everything(alice) == set(acls) - {acls[1]}
    stored = read_acls(acl_server.log_dirs)
    assert {(a.resource_type.name, a.name, a.principal) for a in stored} == {
        ("CLUSTER", CLUSTER, "User:bob"), ("TOPIC", "app-", "User:*"), ("TOPIC", "*", "User:carol"),
        ("GROUP", "g", "User:bob"), ("TRANSACTIONAL_ID", "tx", "User:bob")}


def test_invalid_creations_are_refused_one_by_one(acl_server):
    conn = wire.Conn(acl_server.address("PLAINTEXT"))
    try:
        good: dict[str, Any] = {"resource_type": 2, "resource_name": "fine", "resource_pattern_type": 3,
                                "principal": "User:x", "host": "*", "operation": 3, "permission_type": 3}
        bad: list[dict[str, Any]] = [
               {"resource_type": 4, "resource_name": "not-the-cluster"},       # CLUSTER must be kafka-cluster
               {"resource_name": ""},                                          # empty name
               {"resource_type": 1},                                           # ANY resource type
               {"resource_pattern_type": 2},                                   # MATCH
               {"operation": 1},                                               # ANY operation
               {"permission_type": 1},                                         # ANY permission
               {"operation": 99},                                              # no such operation: UNKNOWN
               {"principal": "alice"}]                                         # not type:name
        creations = [good] + [{**good, **b} for b in bad]
        for version in (1, 2, 3):
            got = conn.request(wire.build_request(30, version, creations=creations))
            codes = [r.error_code for r in got.results]
            assert codes == [ErrorCode.none] + [ErrorCode.invalid_request] * len(bad), (version, got)
            assert "kafka-cluster" in got.results[1].error_message
            assert "Invalid operation" in got.results[5].error_message
        stored = [a for a in read_acls(acl_server.log_dirs) if a.principal == "User:x"]
        assert [(a.name, a.operation.name) for a in stored] == [("fine", "READ")]
        # a DeleteAcls filter with an UNKNOWN element is refused alone; the other filter deletes
        flt: dict[str, Any] = {"resource_type_filter": 2, "resource_name_filter": "fine", "pattern_type_filter": 1,
                               "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1}
        got = conn.request(wire.build_request(31, 3, filters=[{**flt, "operation": 0}, flt]))
        assert [r.error_code for r in got.filter_results] == [ErrorCode.invalid_request, ErrorCode.none]
        assert [m.principal for m in got.filter_results[1].matching_acls] == ["User:x"]
        got = conn.request(wire.build_request(29, 3, **{**flt, "permission_type": 0}))
        assert got.error_code == ErrorCode.invalid_request and got.resources == ()
    finally:
        conn.close()


def test_kafka_python_admin_and_restarts_keep_the_acls(acl_server):
    kp = KafkaAdminClient(bootstrap_servers=acl_server.address("PLAINTEXT"), client_id="acl-test")
    try:
        acl = ACL("User:dave", "*", ACLOperation.READ, ACLPermissionType.ALLOW,
                  ResourcePattern(KpType.TOPIC, "kp-", ACLResourcePatternType.PREFIXED))
        result = kp.create_acls([acl])
        assert result["failed"] == [] and len(result["succeeded"]) == 1
        flt = ACLFilter("User:dave", None, ACLOperation.ANY, ACLPermissionType.ANY,
                        KpFilter(KpType.ANY, None, ACLResourcePatternType.ANY))
        found, err = kp.describe_acls(flt)
        assert err.errno == 0 and [(a.principal, a.resource_pattern.resource_name) for a in found] == [
            ("User:dave", "kp-")]
    finally:
        kp.close()
    before = set(read_acls(acl_server.log_dirs))
    assert acl_server.stop() == 0
    acl_server.restart()
    assert set(read_acls(acl_server.log_dirs)) == before
    acl_server.kill()
    acl_server.restart()
    kp = KafkaAdminClient(bootstrap_servers=acl_server.address("PLAINTEXT"), client_id="acl-test")
    try:
        found, err = kp.describe_acls(flt)
        assert err.errno == 0 and len(found) == 1
        deleted = kp.delete_acls([flt])
        assert [a.principal for a in deleted[0][1]] == ["User:dave"] and deleted[0][2].errno == 0
        assert kp.describe_acls(flt)[0] == []
    finally:
        kp.close()


def test_without_an_authorizer_the_acl_apis_answer_security_disabled(broker):
    conn = wire.Conn(broker.bootstrap)
    try:
        flt: dict[str, Any] = {"resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
                               "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1}
        got = conn.request(wire.build_request(29, 3, **flt))
        assert got.error_code == ErrorCode.security_disabled
        creation = {"resource_type": 2, "resource_name": "t", "resource_pattern_type": 3, "principal": "User:x",
                    "host": "*", "operation": 3, "permission_type": 3}
        got = conn.request(wire.build_request(30, 3, creations=[creation, creation]))
        assert [r.error_code for r in got.results] == [ErrorCode.security_disabled] * 2
        got = conn.request(wire.build_request(31, 3, filters=[flt]))
        assert [r.error_code for r in got.filter_results] == [ErrorCode.security_disabled]
    finally:
        conn.close()
    kp = KafkaAdminClient(bootstrap_servers=broker.bootstrap, client_id="acl-test")
    try:
        flt_kp = ACLFilter(None, None, ACLOperation.ANY, ACLPermissionType.ANY,
                           KpFilter(KpType.ANY, None, ACLResourcePatternType.ANY))
        _, err = kp.describe_acls(flt_kp)
        assert isinstance(err, SecurityDisabledError) or getattr(err, "errno", None) == 54
    except SecurityDisabledError:
        pass
    finally:
        kp.close()
    assert not Path(broker.log_dirs[0], ".engine+acls.json").exists()


@pytest.mark.skipif(NODE is None or not (NODE_MODULES / "kafkajs").is_dir(), reason="node and kafkajs are needed")
def test_kafkajs_create_describe_delete(acl_server):
    acl = {"resourceType": 2, "resourceName": "js", "resourcePatternType": 3, "principal": "User:js", "host": "*",
           "operation": 3, "permissionType": 3}
    flt = {"resourceType": 2, "resourceName": "js", "resourcePatternType": 3, "operation": 1, "permissionType": 1}
    created, described, deleted, after = node("admin.js", acl_server, {
        "brokers": [acl_server.address("PLAINTEXT")],
        "calls": [{"call": "createAcls", "args": [{"acl": [acl]}]}, {"call": "describeAcls", "args": [flt]},
                  {"call": "deleteAcls", "args": [{"filters": [flt]}]}, {"call": "describeAcls", "args": [flt]}]})
    assert "ok" in created, created
    assert described["ok"]["resources"] == [{"resourceType": 2, "resourceName": "js", "resourcePatternType": 3,
                                             "acls": [{"principal": "User:js", "host": "*", "operation": 3,
                                                       "permissionType": 3}]}]
    [result] = deleted["ok"]["filterResponses"]
    assert result["errorCode"] == 0 and [m["principal"] for m in result["matchingAcls"]] == ["User:js"]
    assert after["ok"]["resources"] == []
