"""The ACL APIs (CreateAcls, DescribeAcls, DeleteAcls) through Kafka's own AdminClient (kafka-clients 3.9.1, one
JVM for the file: java/Driver.java) on a SASL broker with Kafka's StandardAuthorizer (java/acl_setup.py: admin is
a super user, alice and bob are not): the super user creates, describes with Kafka's filters (LITERAL, PREFIXED,
ANY, MATCH) and deletes ACLs, which survive a restart; the others are refused with ClusterAuthorizationException;
bad bindings are InvalidRequestException; without an authorizer the calls are SecurityDisabledException."""
from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.server.broker_proc import BrokerProcess
from tests.server.java.acl_setup import allow, secured_broker
from tests.server.java.driver import JavaDriver

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, JavaDriver]]:
    with secured_broker(tmp_path_factory.mktemp("java-acls")) as kafka:
        yield kafka


def key(acl: dict) -> tuple:
    return tuple(sorted(acl.items()))


def test_create_describe_with_filters_and_delete(secured):
    broker, java = secured
    literal = allow("User:carol", "TOPIC", "orders", "READ")
    wildcard = allow("User:carol", "TOPIC", "*", "DESCRIBE")
    prefixed = allow("User:carol", "TOPIC", "ord", "WRITE", "PREFIXED")
    other = allow("User:carol", "TOPIC", "payments", "READ", host="10.0.0.1")
    group = allow("User:carol", "GROUP", "carol-", "READ", "PREFIXED", permission="DENY")
    cluster = allow("User:carol", "CLUSTER", "kafka-cluster", "IDEMPOTENT_WRITE")
    made = [literal, wildcard, prefixed, other, group, cluster]
    java.call("createAcls", client="admin", acls=made)

    def described(**flt: str) -> set:
        return {key(a) for a in java.call("describeAcls", client="admin", filter={"principal": "User:carol", **flt})}
    assert described() == {key(a) for a in made}
    assert described(resource_type="TOPIC", name="orders", pattern="LITERAL") == {key(literal)}
    # MATCH: every binding that applies to the topic "orders": the literal, the wildcard and the prefix
    assert described(resource_type="TOPIC", name="orders", pattern="MATCH") == {key(literal), key(wildcard),
                                                                                key(prefixed)}
    assert described(pattern="PREFIXED") == {key(prefixed), key(group)}
    assert described(resource_type="CLUSTER") == {key(cluster)}
    assert described(permission="DENY") == {key(group)}
    assert described(host="10.0.0.1") == {key(other)}
    assert described(operation="WRITE") == {key(prefixed)}
    java.call("createAcls", client="admin", acls=[literal])                  # again: nothing new
    assert len(described()) == len(made)

    deleted = java.call("deleteAcls", client="admin", filters=[{"principal": "User:carol", "resource_type": "TOPIC",
                                                                 "name": "orders", "pattern": "MATCH"}])
    assert {key(a) for a in deleted} == {key(literal), key(wildcard), key(prefixed)}
    assert described() == {key(other), key(group), key(cluster)}
    assert java.call("deleteAcls", client="admin", filters=[{"principal": "User:nobody"}]) == []
    java.call("deleteAcls", client="admin", filters=[{"principal": "User:carol"}])
    assert described() == set()


def test_only_a_super_user_may_create_describe_or_delete_acls_here(secured):
    broker, java = secured
    for user in ("alice", "bob"):
        assert java.error("describeAcls", client=user).kind == "ClusterAuthorizationException"
        assert java.error("createAcls", client=user, acls=[allow(f"User:{user}", "TOPIC", "*", "ALL")]).kind == \
            "ClusterAuthorizationException"
        assert java.error("deleteAcls", client=user, filters=[{}]).kind == "ClusterAuthorizationException"
    assert java.call("describeAcls", client="admin", filter={"principal": "User:alice"}) == []


def test_a_user_given_alter_and_describe_on_the_cluster_manages_acls(secured):
    broker, java = secured
    grants = [allow("User:alice", "CLUSTER", "kafka-cluster", "ALTER"),
              allow("User:alice", "CLUSTER", "kafka-cluster", "DESCRIBE")]
    java.call("createAcls", client="admin", acls=grants)
    rule = allow("User:bob", "TOPIC", "bob-topic", "READ")
    java.call("createAcls", client="alice", acls=[rule])
    assert key(rule) in {key(a) for a in java.call("describeAcls", client="alice", filter={"principal": "User:bob"})}
    assert java.call("deleteAcls", client="alice", filters=[{"principal": "User:bob"}]) == [rule]
    java.call("deleteAcls", client="admin", filters=[{"principal": "User:alice"}])
    assert java.error("describeAcls", client="alice").kind == "ClusterAuthorizationException"


def test_bad_bindings_are_invalid_requests(secured):
    broker, java = secured
    for bad in (allow("User:carol", "TOPIC", "", "READ"),                       # an empty name
                allow("carol", "TOPIC", "t", "READ"),                            # a principal without its type
                allow("User:carol", "CLUSTER", "my-cluster", "ALTER")):          # the cluster is kafka-cluster
        refused = java.error("createAcls", client="admin", acls=[bad])
        assert refused.kind == "InvalidRequestException", (bad, refused)
    assert java.call("describeAcls", client="admin", filter={"principal": "User:carol"}) == []


def test_acls_survive_a_broker_restart(secured):
    broker, java = secured
    rule = allow("User:bob", "TOPIC", "bob-", "DESCRIBE", "PREFIXED")
    java.call("createAcls", client="admin", acls=[rule])
    assert broker.stop() == 0
    broker.restart()
    assert java.call("describeAcls", client="admin", filter={"principal": "User:bob"}) == [rule]
    java.call("deleteAcls", client="admin", filters=[{"principal": "User:bob"}])
