"""Metadata under ACLs, as Kafka's ``handleTopicMetadataRequest`` decides: topics the principal may not DESCRIBE
are left out of an all-topics answer and answered TOPIC_AUTHORIZATION_FAILED when named (the zero id, whether the
topic exists or not; the id when asked by id), a missing topic is created only with CREATE on the cluster or on it,
and authorized operations are computed when asked (Integer.MIN_VALUE otherwise).

One broker with StandardAuthorizer: ``alice`` (SASL) is a super user and changes the ACLs through confluent-kafka's
admin client; the raw requests come over the PLAINTEXT listener as ``User:ANONYMOUS``."""
from __future__ import annotations

import dataclasses
import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType, AdminClient,
                                   NewTopic, ResourcePatternType, ResourceType)

from storage_engine import layout
from storage_engine.log.topic_id import read_topic_id
from storage_engine.server.errors import ErrorCode
from tests.server import wire
from tests.server.broker_proc import BrokerProcess
from tests.server.test_security import PASSWORDS, sasl_conf, write_users

pytestmark = pytest.mark.e2e

STANDARD = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
ANON = "User:ANONYMOUS"
MIN_INT = -2147483648
ZERO_ID = uuid.UUID(int=0)
LIT, PRE = ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED
# Kafka's AclOperation codes
READ, CREATE, DESCRIBE = 3, 5, 8


def _acl(rt: ResourceType, name: str, op: AclOperation, pattern: ResourcePatternType = LIT) -> AclBinding:
    return AclBinding(rt, name, pattern, ANON, "*", op, AclPermissionType.ALLOW)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, AdminClient]]:
    pytest.importorskip("storage_engine.acl.authorizer", reason="the ACL authorizer is not in this tree yet")
    tmp = tmp_path_factory.mktemp("metadata-authz")
    users = write_users(tmp / "users.yaml")
    broker = BrokerProcess(tmp, broker={"sasl.credentials.file": str(users), "authorizer.class.name": STANDARD,
                                        "super.users": "User:alice", "num.partitions": 2},
                           listeners="SASL_PLAINTEXT://127.0.0.1:0,PLAINTEXT://127.0.0.1:0", log_dirs=1)
    broker.start()
    alice = AdminClient(sasl_conf(broker, "SASL_PLAINTEXT", "PLAIN", "alice", PASSWORDS["alice"]))
    for topic, fut in alice.create_topics([NewTopic(t, 2, 1) for t in ("visible", "hidden", "ops-1")]).items():
        fut.result(30)
    for fut in alice.create_acls([_acl(ResourceType.TOPIC, "visible", AclOperation.DESCRIBE),
                                  _acl(ResourceType.TOPIC, "ops-", AclOperation.READ, PRE),
                                  _acl(ResourceType.TOPIC, "made-", AclOperation.DESCRIBE, PRE),
                                  _acl(ResourceType.TOPIC, "made-", AclOperation.CREATE, PRE),
                                  _acl(ResourceType.TOPIC, "nocreate-", AclOperation.DESCRIBE, PRE)]).values():
        fut.result(30)
    yield broker, alice
    try:
        assert broker.stop() == 0
    finally:
        broker.close()


def _ask(broker: BrokerProcess, version: int, topics: list[str] | None, *, auto: bool = False,
         topic_ops: bool = False, cluster_ops: bool = False, ids: list[uuid.UUID] | None = None) -> Any:
    body = wire.metadata_request(version, topics, allow_auto=auto)
    if ids is not None:
        tcls = wire.nested(type(body), "topics")
        body = dataclasses.replace(body, topics=tuple(tcls(name=None, topic_id=i) for i in ids))
    if topic_ops:
        body = dataclasses.replace(body, include_topic_authorized_operations=True)
    if cluster_ops:
        body = dataclasses.replace(body, include_cluster_authorized_operations=True)
    conn = wire.Conn(broker.address("PLAINTEXT"))
    try:
        return conn.request(body)
    finally:
        conn.close()


def _by_name(response: Any) -> dict[Any, Any]:
    return {t.name: t for t in response.topics}


def test_all_topics_hides_what_the_principal_may_not_describe(server):
    broker, alice = server
    answer = _by_name(_ask(broker, 12, None))
    assert set(answer) == {"visible", "ops-1"}                        # READ implies DESCRIBE
    assert all(t.error_code == ErrorCode.none and len(t.partitions) == 2 for t in answer.values())
    # the super user sees everything
    assert {"visible", "hidden", "ops-1"} <= set(alice.list_topics(timeout=30).topics)


def test_named_topics_unauthorized_whether_they_exist_or_not(server):
    broker, _ = server
    answer = _by_name(_ask(broker, 12, ["visible", "hidden", "ghost", "visible"]))
    assert len(_ask(broker, 12, ["visible", "visible"]).topics) == 1      # a name asked twice is answered once
    assert answer["visible"].error_code == ErrorCode.none and answer["visible"].topic_id not in (None, ZERO_ID)
    for name in ("hidden", "ghost"):      # the same answer: the client cannot tell that hidden exists
        assert answer[name].error_code == ErrorCode.topic_authorization_failed
        assert answer[name].topic_id in (None, ZERO_ID) and answer[name].partitions == ()   # kio reads zero as None
    # asked by id, the id is given back (ids are not secret), without the name
    topic_id = read_topic_id(os.path.join(broker.log_dirs[0], layout.partition_dir_name("hidden", 0)))
    assert topic_id is not None
    by_id = _ask(broker, 12, None, ids=[topic_id]).topics
    assert [(t.error_code, t.name, t.topic_id) for t in by_id] == [
        (ErrorCode.topic_authorization_failed, None, topic_id)]


def test_auto_create_needs_create_on_the_cluster_or_the_topic(server):
    broker, alice = server
    answer = _by_name(_ask(broker, 12, ["made-1", "nocreate-1", "ghost-2"], auto=True))
    assert answer["made-1"].error_code == ErrorCode.none and len(answer["made-1"].partitions) == 2
    assert answer["nocreate-1"].error_code == ErrorCode.topic_authorization_failed     # DESCRIBE, no CREATE
    assert answer["ghost-2"].error_code == ErrorCode.topic_authorization_failed        # not even DESCRIBE
    names = {t for _, (t, _) in layout.partition_dirs(broker.log_dirs[0])}
    assert "made-1" in names and "nocreate-1" not in names and "ghost-2" not in names
    # CREATE on the cluster: any topic the principal may describe is created
    grant = _acl(ResourceType.BROKER, "kafka-cluster", AclOperation.CREATE)
    alice.create_acls([grant])[grant].result(30)
    try:
        answer = _by_name(_ask(broker, 12, ["nocreate-2", "ghost-3"], auto=True))
        assert answer["nocreate-2"].error_code == ErrorCode.none
        assert answer["ghost-3"].error_code == ErrorCode.topic_authorization_failed
    finally:
        make: Any = AclBindingFilter     # confluent-kafka's stubs type the open fields as str
        flt = make(ResourceType.BROKER, "kafka-cluster", LIT, ANON, None, AclOperation.CREATE, AclPermissionType.ALLOW)
        alice.delete_acls([flt])[flt].result(30)


def test_authorized_operations_when_asked(server):
    broker, alice = server
    asked = _by_name(_ask(broker, 10, ["visible", "ops-1", "hidden"], topic_ops=True, cluster_ops=True))
    assert asked["visible"].topic_authorized_operations == 1 << DESCRIBE
    assert asked["ops-1"].topic_authorized_operations == (1 << READ) | (1 << DESCRIBE)
    assert asked["hidden"].topic_authorized_operations == MIN_INT      # refused: not computed, as Kafka
    response = _ask(broker, 10, ["visible"], topic_ops=True, cluster_ops=True)
    assert response.cluster_authorized_operations == 0                  # no DESCRIBE on the cluster
    grants = [_acl(ResourceType.BROKER, "kafka-cluster", AclOperation.DESCRIBE),
              _acl(ResourceType.BROKER, "kafka-cluster", AclOperation.CREATE)]
    for fut in alice.create_acls(grants).values():
        fut.result(30)
    try:
        response = _ask(broker, 10, ["visible"], cluster_ops=True)
        assert response.cluster_authorized_operations == (1 << DESCRIBE) | (1 << CREATE)
    finally:
        make: Any = AclBindingFilter
        flt = make(ResourceType.BROKER, "kafka-cluster", LIT, ANON, None, AclOperation.ANY, AclPermissionType.ANY)
        alice.delete_acls([flt])[flt].result(30)
    # not asked: Integer.MIN_VALUE, the schema's default
    plain = _ask(broker, 10, ["visible"])
    assert plain.cluster_authorized_operations == MIN_INT
    assert plain.topics[0].topic_authorized_operations == MIN_INT


def test_without_an_authorizer_everything_is_described_with_every_operation(broker_factory):
    broker = broker_factory(log_dirs=1)
    admin = AdminClient({"bootstrap.servers": broker.address("PLAINTEXT")})
    admin.create_topics([NewTopic("t", 1, 1)])["t"].result(30)
    response = _ask(broker, 10, ["t"], topic_ops=True, cluster_ops=True)
    # Kafka's AuthHelper.authorizedOperations without an authorizer: every operation the resource type supports
    assert response.topics[0].topic_authorized_operations == sum(1 << op for op in (3, 4, 5, 6, 7, 8, 10, 11))
    assert response.cluster_authorized_operations == sum(1 << op for op in (5, 7, 8, 9, 10, 11, 12))
    # topic ids before v12: Kafka's InvalidRequestException, answered for every topic asked (a null name as "")
    some_id = uuid.uuid4()
    for version in (10, 11):
        answer = _ask(broker, version, None, ids=[some_id]).topics
        assert [(t.error_code, t.name, t.topic_id) for t in answer] == [(ErrorCode.invalid_request, "", some_id)]
    assert [t.error_code for t in _ask(broker, 12, None, ids=[some_id]).topics] == [ErrorCode.unknown_topic_id]
