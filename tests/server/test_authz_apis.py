"""Kafka's authorization on every API but Metadata, over the raw wire against a real broker with the
StandardAuthorizer, SASL/PLAIN users and ACLs made with CreateAcls by the super user ``admin``:

* ``alice``: ALL on topics prefixed ``ok-`` (but a DENY of WRITE on ``ok-denied``), READ on groups prefixed ``ok-``,
  DELETE on the group ``ok-del``, WRITE on transactional ids prefixed ``ok-``;
* ``carol``: ALL on the cluster (and nothing on topics, groups or transactional ids);
* ``bob``: no ACL at all (``allow.everyone.if.no.acl.found`` is false).

Each API answers Kafka's code (TOPIC_AUTHORIZATION_FAILED 29, GROUP_ 30, CLUSTER_ 31, TRANSACTIONAL_ID_ 53) from
``KafkaApis`` / ``ControllerApis``, and a refused principal gets the same answer for a topic that exists and one
that does not (it must not learn which), while an allowed one gets UNKNOWN_TOPIC_OR_PARTITION for a missing
topic. Every refusal is logged with the principal, host, operation, resource and API."""
from __future__ import annotations

import datetime
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from kio.index import load_request_schema

from tests.server import wire
from tests.server.authz_client import (ALL, ALLOW, CLUSTER, DELETE, DENY, GROUP, LITERAL, PREFIXED, READ, TOPIC,
                                       TRANSACTIONAL_ID, WRITE, Client, create_acls)
from tests.server.broker_proc import BrokerProcess

pytestmark = pytest.mark.e2e

USERS = ("admin", "alice", "bob", "carol")
NONE, UNKNOWN, TOPIC_AUTH, GROUP_AUTH, CLUSTER_AUTH, TXN_AUTH = 0, 3, 29, 30, 31, 53
UNKNOWN_TOPIC_ID, OPERATION_NOT_ATTEMPTED = 100, 55
NOT_ASKED = -2147483648                          # Integer.MIN_VALUE: authorized operations not asked for
SECONDS = datetime.timedelta(seconds=10)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    tmp = tmp_path_factory.mktemp("authz")
    users = tmp / "users.yaml"
    users.write_text(yaml.safe_dump({"users": {u: {"password": f"{u}-secret"} for u in USERS}}))
    broker = BrokerProcess(tmp, broker={
        "auto.create.topics.enable": False, "sasl.credentials.file": str(users),
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin", "allow.everyone.if.no.acl.found": False},
        listeners="SASL_PLAINTEXT://127.0.0.1:0")
    broker.start()
    try:
        with login(broker, "admin") as admin:
            for name, count in (("ok-data", 2), ("secret", 1), ("ok-denied", 1), ("ok-doomed", 1), ("zz-doomed", 1)):
                created = admin.call(19, 7, topics=[{"name": name, "num_partitions": count, "replication_factor": 1,
                                                     "assignments": [], "configs": []}],
                                     timeout=SECONDS, validate_only=False)
                assert created.topics[0].error_code == NONE, created
            create_acls(admin,
                        (TOPIC, "ok-", PREFIXED, "User:alice", ALL, ALLOW),
                        (TOPIC, "ok-denied", LITERAL, "User:alice", WRITE, DENY),
                        (GROUP, "ok-", PREFIXED, "User:alice", READ, ALLOW),
                        (GROUP, "ok-del", LITERAL, "User:alice", DELETE, ALLOW),
                        (TRANSACTIONAL_ID, "ok-", PREFIXED, "User:alice", WRITE, ALLOW),
                        (CLUSTER, "kafka-cluster", LITERAL, "User:carol", ALL, ALLOW))
            # groups with committed offsets (a standalone commit makes an empty group), by the super user
            for group, topic in (("ok-g", "ok-data"), ("ok-g", "secret"), ("ok-del", "ok-data"), ("zz-g", "secret")):
                assert commit(admin, group, {topic: [0]}) == {(topic, 0): NONE}
        yield broker
        assert broker.stop() == 0
    finally:
        broker.close()


def login(broker: BrokerProcess, user: str) -> Client:
    return Client(broker.address("SASL_PLAINTEXT"), user, f"{user}-secret")


def codes(topics: Any, partitions: str = "partitions", code: str = "error_code") -> dict[tuple[str, int], int]:
    """{(topic, partition): error code} of a response's topics."""
    out = {}
    for t in topics:
        for p in getattr(t, partitions):
            index = p.partition_index if hasattr(p, "partition_index") else p.index
            name = next(getattr(t, a) for a in ("name", "topic", "topic_name") if hasattr(t, a))
            out[(name, int(index))] = int(getattr(p, code))
    return out


def commit(c: Client, group: str, parts: dict[str, list[int]], offset: int = 5) -> dict[tuple[str, int], int]:
    response = c.call(8, 8, group_id=group, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
                      topics=[{"name": t, "partitions": [{"partition_index": p, "committed_offset": offset,
                                                          "committed_leader_epoch": -1, "committed_metadata": ""}
                                                         for p in ps]} for t, ps in parts.items()])
    return codes(response.topics)


def produce(c: Client, topic: str, records: bytes, txn_id: str | None = None) -> int:
    response = c.call(0, 9, transactional_id=txn_id, acks=-1, timeout=SECONDS,
                      topic_data=[{"name": topic, "partition_data": [{"index": 0, "records": records}]}])
    return codes(response.responses, "partition_responses")[(topic, 0)]


def fetch(c: Client, topic: str, replica_id: int = -1) -> int:
    response = c.call(1, 12, cluster_id=None, replica_id=replica_id, max_wait=datetime.timedelta(0), min_bytes=0,
                      max_bytes=1 << 20, isolation_level=0, session_id=0, session_epoch=-1, forgotten_topics_data=[],
                      rack_id="", topics=[{"topic": topic, "partitions": [
                          {"partition": 0, "current_leader_epoch": -1, "fetch_offset": 0, "last_fetched_epoch": -1,
                           "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}])
    [(_, code)] = codes(response.responses).items()
    return code


def list_offsets(c: Client, topic: str) -> tuple[int, int]:
    response = c.call(2, 7, replica_id=-1, isolation_level=0, topics=[
        {"name": topic, "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}])
    part = response.topics[0].partitions[0]
    return int(part.error_code), int(part.offset)


def refusals(broker: BrokerProcess) -> list[str]:
    return [line for line in broker.log_text().splitlines() if "refused: principal=" in line]


# -- Produce, Fetch, ListOffsets ------------------------------------------------------------------------------------

def test_produce_needs_write_on_the_topic_and_hides_whether_it_exists(server):
    records = wire.batch([b"v"])
    with login(server, "bob") as bob:
        assert produce(bob, "ok-data", records) == TOPIC_AUTH
        assert produce(bob, "ok-missing", records) == TOPIC_AUTH      # the same answer: bob learns nothing
    with login(server, "alice") as alice:
        assert produce(alice, "ok-data", records) == NONE
        assert produce(alice, "ok-missing", records) == UNKNOWN       # alice may describe it: it does not exist
        assert produce(alice, "secret", records) == TOPIC_AUTH
        assert produce(alice, "ok-denied", records) == TOPIC_AUTH     # DENY wins over the prefixed ALL
    assert any("principal=User:bob host=127.0.0.1 operation=WRITE resource=TOPIC:ok-missing api=Produce" in line
               for line in refusals(server))


def test_transactional_produce_needs_write_on_the_transactional_id(server):
    txn_batch = wire.producer_batch([b"t"], 1000, 0, 0)
    with login(server, "alice") as alice:
        assert produce(alice, "ok-data", txn_batch, txn_id=None) == TXN_AUTH    # no id at all: Kafka's 53 too
        assert produce(alice, "ok-data", txn_batch, txn_id="zz-tx") == TXN_AUTH
        # allowed, so the transaction coordinator answers: this producer id has no transaction
        assert produce(alice, "ok-data", txn_batch, txn_id="ok-tx") not in (TXN_AUTH, TOPIC_AUTH, NONE)


def test_fetch_needs_read_and_a_followers_fetch_cluster_action(server):
    with login(server, "bob") as bob:
        assert fetch(bob, "ok-data") == TOPIC_AUTH
        assert fetch(bob, "ok-missing") == TOPIC_AUTH
    with login(server, "alice") as alice:
        assert fetch(alice, "ok-data") == NONE
        assert fetch(alice, "ok-missing") == UNKNOWN
        assert fetch(alice, "secret") == TOPIC_AUTH
        assert fetch(alice, "ok-data", replica_id=0) == TOPIC_AUTH     # a follower: READ is not enough
    with login(server, "carol") as carol:
        assert fetch(carol, "ok-data") == TOPIC_AUTH                    # cluster ACLs give no topic
        assert fetch(carol, "ok-data", replica_id=0) == NONE


def test_a_followers_fetch_by_topic_id_names_itself_in_replica_state(server):
    """Fetch v15+ carries the replica id in ``replica_state``: a follower there needs CLUSTER_ACTION too."""
    with login(server, "admin") as admin:
        [meta] = admin.call(3, 12, topics=[{"name": "ok-data", "topic_id": uuid.UUID(int=0)}],
                            allow_auto_topic_creation=False, include_topic_authorized_operations=False).topics

    def fetch_v15(c: Client, replica_id: int) -> int:
        response = c.call(1, 15, cluster_id=None, replica_state={"replica_id": replica_id, "replica_epoch": -1},
                          max_wait=datetime.timedelta(0), min_bytes=0, max_bytes=1 << 20, isolation_level=0,
                          session_id=0, session_epoch=-1, forgotten_topics_data=[], rack_id="",
                          topics=[{"topic_id": meta.topic_id, "partitions": [
                              {"partition": 0, "current_leader_epoch": -1, "fetch_offset": 0,
                               "last_fetched_epoch": -1, "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}])
        return int(response.responses[0].partitions[0].error_code)

    with login(server, "alice") as alice:
        assert fetch_v15(alice, -1) == NONE
        assert fetch_v15(alice, 0) == TOPIC_AUTH
    with login(server, "carol") as carol:
        assert fetch_v15(carol, 0) == NONE
        assert fetch_v15(carol, -1) == TOPIC_AUTH


def test_list_offsets_needs_describe(server):
    with login(server, "bob") as bob:
        assert list_offsets(bob, "ok-data") == (TOPIC_AUTH, -1)
        assert list_offsets(bob, "ok-missing") == (TOPIC_AUTH, -1)
    with login(server, "alice") as alice:
        assert list_offsets(alice, "ok-data")[0] == NONE
        assert list_offsets(alice, "ok-missing")[0] == UNKNOWN
        assert list_offsets(alice, "secret") == (TOPIC_AUTH, -1)


# -- producer ids and coordinators ----------------------------------------------------------------------------------

def init_producer_id(c: Client, txn_id: str | None) -> tuple[int, int]:
    response = c.call(22, 4, transactional_id=txn_id, transaction_timeout=datetime.timedelta(seconds=60),
                      producer_id=-1, producer_epoch=-1)
    return int(response.error_code), int(response.producer_id)


def test_init_producer_id_needs_the_transactional_id_or_idempotent_write(server):
    with login(server, "bob") as bob:
        assert init_producer_id(bob, None) == (CLUSTER_AUTH, -1)
        assert init_producer_id(bob, "ok-tx") == (TXN_AUTH, -1)
    with login(server, "alice") as alice:
        assert init_producer_id(alice, None)[0] == NONE      # WRITE on some topic does (authorizeByResourceType)
        assert init_producer_id(alice, "ok-tx")[0] == NONE
        assert init_producer_id(alice, "zz-tx") == (TXN_AUTH, -1)
    with login(server, "carol") as carol:
        assert init_producer_id(carol, None)[0] == NONE      # IDEMPOTENT_WRITE on the cluster (ALL)


def test_find_coordinator_needs_describe_on_the_group_or_transactional_id(server):
    find_coordinator_v3: Any = load_request_schema(10, 3)    # kio types the loader's result as a header payload
    port = int(server.address("SASL_PLAINTEXT").rsplit(":", 1)[1])
    for user, group_code, txn_code in (("bob", GROUP_AUTH, TXN_AUTH), ("alice", NONE, NONE)):
        with login(server, user) as c:
            old = c.send(find_coordinator_v3(key="ok-g", key_type=0))
            assert (old.error_code, old.port) == ((GROUP_AUTH, -1) if group_code else (NONE, port))
            for key_type, key, code in ((0, "ok-g", group_code), (1, "ok-tx", txn_code)):
                [found] = c.call(10, 4, key_type=key_type, coordinator_keys=[key]).coordinators
                # refused: Kafka's Node.noNode() (-1, "", -1)
                assert (found.error_code, found.host, found.port) == \
                       ((code, "", -1) if code else (NONE, "127.0.0.1", port))


# -- groups ---------------------------------------------------------------------------------------------------------

def test_group_membership_needs_read_on_the_group(server):
    for user, want in (("bob", GROUP_AUTH), ("alice", None)):
        with login(server, user) as c:
            joined = c.call(11, 5, group_id="ok-g2", session_timeout=SECONDS, rebalance_timeout=SECONDS,
                            member_id="", group_instance_id=None, protocol_type="consumer",
                            protocols=[{"name": "range", "metadata": b""}])
            synced = c.call(14, 5, group_id="ok-g2", generation_id=1, member_id="m", group_instance_id=None,
                            protocol_type="consumer", protocol_name="range", assignments=[])
            beat = c.call(12, 4, group_id="ok-g2", generation_id=1, member_id="m", group_instance_id=None)
            left = c.call(13, 4, group_id="ok-g2", members=[{"member_id": "m", "group_instance_id": None}])
            got = [joined.error_code, synced.error_code, beat.error_code, left.error_code]
            if want is not None:
                assert got == [want] * 4 and joined.member_id == "" and joined.generation_id == -1
            else:
                assert GROUP_AUTH not in got, got       # the coordinator answers (member id required, unknown...)


def test_offset_commit_checks_the_group_then_each_topic_then_existence(server):
    with login(server, "bob") as bob:
        assert commit(bob, "ok-g", {"ok-data": [0], "ok-missing": [0]}) == {
            ("ok-data", 0): GROUP_AUTH, ("ok-missing", 0): GROUP_AUTH}
    with login(server, "alice") as alice:
        assert commit(alice, "ok-g", {"ok-data": [0, 9], "secret": [0], "ok-missing": [0]}, offset=3) == {
            ("ok-data", 0): NONE, ("ok-data", 9): UNKNOWN, ("secret", 0): TOPIC_AUTH, ("ok-missing", 0): UNKNOWN}


def test_offset_fetch_hides_the_topics_the_principal_may_not_describe(server):
    with login(server, "alice") as alice:
        named = alice.call(9, 7, group_id="ok-g", topics=[{"name": "ok-data", "partition_indexes": [0]},
                                                          {"name": "secret", "partition_indexes": [0]}],
                           require_stable=False)
        assert named.error_code == NONE
        assert {(t.name, p.error_code, p.committed_offset) for t in named.topics for p in t.partitions} >= {
            ("secret", TOPIC_AUTH, -1)}
        assert ("ok-data", NONE) in {(t.name, p.error_code) for t in named.topics for p in t.partitions}
        every = alice.call(9, 8, groups=[{"group_id": "ok-g", "topics": None}, {"group_id": "zz-g", "topics": None}],
                           require_stable=False)
        ok_g, zz_g = every.groups
        assert ok_g.error_code == NONE and [t.name for t in ok_g.topics] == ["ok-data"]    # secret left out
        assert (zz_g.error_code, zz_g.topics) == (GROUP_AUTH, ())
    with login(server, "bob") as bob:
        old = bob.call(9, 7, group_id="ok-g", topics=None, require_stable=False)
        assert (old.error_code, old.topics) == (GROUP_AUTH, ())
        # v1 has no group error code, and Kafka's refused group has no topics: an empty answer
        assert bob.call(9, 1, group_id="ok-g", topics=[{"name": "ok-data", "partition_indexes": [0]}]).topics == ()


def test_describe_groups_answers_the_authorized_operations_when_asked(server):
    with login(server, "alice") as alice:
        asked = alice.call(15, 5, groups=["ok-g", "ok-nobody", "zz-g"], include_authorized_operations=True).groups
        assert [(g.group_id, g.error_code) for g in asked] == [("ok-g", NONE), ("ok-nobody", NONE),
                                                               ("zz-g", GROUP_AUTH)]
        # READ on ok-g implies DESCRIBE: bits 3 and 8, never bit 31; a group that does not exist is Dead, the same
        assert [g.authorized_operations for g in asked] == [(1 << 3) | (1 << 8), (1 << 3) | (1 << 8), NOT_ASKED]
        assert asked[1].group_state == "Dead" and asked[2].group_state == ""
        plain = alice.call(15, 5, groups=["ok-g"], include_authorized_operations=False).groups
        assert plain[0].authorized_operations == NOT_ASKED


def test_list_groups_is_every_group_with_cluster_describe_else_those_the_principal_may_describe(server):
    seen = {}
    for user in ("bob", "alice", "carol"):
        with login(server, user) as c:
            seen[user] = {g.group_id for g in c.call(16, 4, states_filter=[]).groups}
    assert seen["bob"] == set()
    assert "ok-g" in seen["alice"] and "zz-g" not in seen["alice"]
    assert {"ok-g", "zz-g"} <= seen["carol"]


def test_delete_groups_needs_delete_on_each_group(server):
    with login(server, "bob") as bob:
        assert [(r.group_id, r.error_code) for r in bob.call(42, 2, groups_names=["ok-del"]).results] == [
            ("ok-del", GROUP_AUTH)]
    with login(server, "alice") as alice:
        results = alice.call(42, 2, groups_names=["ok-g", "ok-del"]).results
        assert sorted((r.group_id, r.error_code) for r in results) == [("ok-del", NONE), ("ok-g", GROUP_AUTH)]


# -- topics ---------------------------------------------------------------------------------------------------------

def create(c: Client, name: str) -> tuple[int, str | None, int]:
    response = c.call(19, 7, topics=[{"name": name, "num_partitions": 1, "replication_factor": 1, "assignments": [],
                                      "configs": []}], timeout=SECONDS, validate_only=True)
    t = response.topics[0]
    return int(t.error_code), t.error_message, int(t.topic_config_error_code)


def test_create_topics_needs_create_on_the_cluster_or_the_topic(server):
    with login(server, "bob") as bob:
        assert create(bob, "ok-new") == (TOPIC_AUTH, "Authorization failed.", NONE)
    with login(server, "alice") as alice:
        assert create(alice, "ok-new") == (NONE, None, NONE)
        assert create(alice, "zz-new") == (TOPIC_AUTH, "Authorization failed.", NONE)
    with login(server, "carol") as carol:
        # CREATE on the cluster creates any topic, but its configs need DESCRIBE_CONFIGS on the topic
        assert create(carol, "zz-new") == (NONE, None, TOPIC_AUTH)


def test_delete_topics_answers_unknown_only_to_who_may_describe(server):
    with login(server, "admin") as admin:
        ids = {t.name: t.topic_id for t in admin.call(3, 12, topics=None, allow_auto_topic_creation=False,
                                                      include_topic_authorized_operations=False).topics}
    by_name = lambda c, name: [(r.name, r.error_code) for r in c.call(  # noqa: E731
        20, 6, topics=[{"name": name, "topic_id": uuid.UUID(int=0)}], timeout=SECONDS).responses]
    with login(server, "bob") as bob:
        assert by_name(bob, "ok-doomed") == [("ok-doomed", TOPIC_AUTH)]
        assert by_name(bob, "ok-missing") == [("ok-missing", TOPIC_AUTH)]
    with login(server, "alice") as alice:
        assert by_name(alice, "ok-missing") == [("ok-missing", UNKNOWN)]
        assert by_name(alice, "secret") == [("secret", TOPIC_AUTH)]
        [by_id] = alice.call(20, 6, topics=[{"name": None, "topic_id": ids["secret"]}], timeout=SECONDS).responses
        assert (by_id.name, by_id.topic_id, by_id.error_code) == (None, ids["secret"], TOPIC_AUTH)  # name not told
        [unknown] = alice.call(20, 6, topics=[{"name": None, "topic_id": uuid.uuid4()}], timeout=SECONDS).responses
        assert unknown.error_code == UNKNOWN_TOPIC_ID
        assert by_name(alice, "ok-doomed") == [("ok-doomed", NONE)]
    with login(server, "carol") as carol:
        assert by_name(carol, "zz-doomed") == [("zz-doomed", NONE)]      # DELETE on the cluster (ALL)


def test_create_partitions_and_delete_records_need_alter_and_delete(server):
    def grow(c: Client, topic: str) -> int:
        response = c.call(37, 3, topics=[{"name": topic, "count": 4, "assignments": None}], timeout=SECONDS,
                          validate_only=True)
        return int(response.results[0].error_code)

    def delete_records(c: Client, topic: str) -> tuple[int, int]:
        response = c.call(21, 2, topics=[{"name": topic, "partitions": [{"partition_index": 0, "offset": 0}]}],
                          timeout=SECONDS)
        part = response.topics[0].partitions[0]
        return int(part.error_code), int(part.low_watermark)

    with login(server, "bob") as bob:
        assert grow(bob, "ok-data") == TOPIC_AUTH
        assert delete_records(bob, "ok-data") == (TOPIC_AUTH, -1)
        assert delete_records(bob, "ok-missing") == (TOPIC_AUTH, -1)
    with login(server, "alice") as alice:
        assert grow(alice, "ok-data") == NONE
        assert grow(alice, "secret") == TOPIC_AUTH
        assert delete_records(alice, "ok-data")[0] == NONE
        assert delete_records(alice, "ok-missing") == (UNKNOWN, -1)


# -- transactions ---------------------------------------------------------------------------------------------------

def test_the_transactional_apis_need_the_transactional_id_then_the_group_and_topics(server):
    def add(c: Client, txn_id: str, parts: dict[str, list[int]]) -> dict[tuple[str, int], int]:
        response = c.call(24, 3, v3_and_below_transactional_id=txn_id, v3_and_below_producer_id=1000,
                          v3_and_below_producer_epoch=0,
                          v3_and_below_topics=[{"name": t, "partitions": ps} for t, ps in parts.items()])
        return codes(response.results_by_topic_v3_and_below, "results_by_partition", "partition_error_code")

    def txn_commit(c: Client, txn_id: str, group: str, parts: dict[str, list[int]]) -> dict[tuple[str, int], int]:
        response = c.call(28, 3, transactional_id=txn_id, group_id=group, producer_id=1000, producer_epoch=0,
                          generation_id=-1, member_id="", group_instance_id=None,
                          topics=[{"name": t, "partitions": [{"partition_index": p, "committed_offset": 1,
                                                              "committed_leader_epoch": -1, "committed_metadata": ""}
                                                             for p in ps]} for t, ps in parts.items()])
        return codes(response.topics)

    with login(server, "bob") as bob:
        assert add(bob, "ok-tx", {"ok-data": [0]}) == {("ok-data", 0): TXN_AUTH}
        assert bob.call(25, 3, transactional_id="ok-tx", producer_id=1000, producer_epoch=0,
                        group_id="ok-g").error_code == TXN_AUTH
        assert bob.call(26, 3, transactional_id="ok-tx", producer_id=1000, producer_epoch=0,
                        committed=True).error_code == TXN_AUTH
        assert txn_commit(bob, "ok-tx", "ok-g", {"ok-data": [0]}) == {("ok-data", 0): TXN_AUTH}
    with login(server, "alice") as alice:
        # one refused or unknown partition fails the request; the others were not attempted
        assert add(alice, "ok-tx", {"ok-data": [0], "secret": [0], "ok-missing": [0]}) == {
            ("ok-data", 0): OPERATION_NOT_ATTEMPTED, ("secret", 0): TOPIC_AUTH, ("ok-missing", 0): UNKNOWN}
        assert add(alice, "ok-tx", {"__consumer_offsets": [0]}) == {("__consumer_offsets", 0): TOPIC_AUTH}
        assert alice.call(25, 3, transactional_id="ok-tx", producer_id=1000, producer_epoch=0,
                          group_id="zz-g").error_code == GROUP_AUTH
        assert txn_commit(alice, "ok-tx", "zz-g", {"ok-data": [0]}) == {("ok-data", 0): GROUP_AUTH}
        committed = txn_commit(alice, "ok-tx", "ok-g", {"ok-data": [0], "secret": [0], "ok-missing": [0]})
        assert committed[("secret", 0)] == TOPIC_AUTH and committed[("ok-missing", 0)] == UNKNOWN
        assert committed[("ok-data", 0)] not in (TOPIC_AUTH, GROUP_AUTH, TXN_AUTH, NONE)    # no transaction open


# -- configs and log dirs -------------------------------------------------------------------------------------------

def describe_config(c: Client, resource_type: int, name: str) -> tuple[int, str | None, int]:
    [result] = c.call(32, 4, resources=[{"resource_type": resource_type, "resource_name": name,
                                         "configuration_keys": None}],
                      include_synonyms=False, include_documentation=False).results
    return int(result.error_code), result.error_message, len(result.configs)


def alter_config(c: Client, resource_type: int, name: str, key: str, value: str) -> int:
    [result] = c.call(44, 1, validate_only=True, resources=[{"resource_type": resource_type, "resource_name": name,
                                                             "configs": [{"name": key, "config_operation": 0,
                                                                          "value": value}]}]).responses
    return int(result.error_code)


def test_configs_need_describe_configs_and_alter_configs_on_the_topic_or_cluster(server):
    with login(server, "bob") as bob:
        assert describe_config(bob, 2, "ok-data") == (TOPIC_AUTH, "Topic authorization failed.", 0)
        assert describe_config(bob, 2, "ok-missing") == (TOPIC_AUTH, "Topic authorization failed.", 0)
        assert describe_config(bob, 4, "0") == (CLUSTER_AUTH, "Cluster authorization failed.", 0)
        assert alter_config(bob, 2, "ok-data", "retention.ms", "1000") == TOPIC_AUTH
    with login(server, "alice") as alice:
        code, _, count = describe_config(alice, 2, "ok-data")
        assert code == NONE and count > 0
        assert describe_config(alice, 2, "ok-missing")[0] == UNKNOWN
        assert describe_config(alice, 4, "0")[0] == CLUSTER_AUTH
        assert alter_config(alice, 2, "ok-data", "retention.ms", "1000") == NONE
        assert alter_config(alice, 4, "0", "log.retention.ms", "1000") == CLUSTER_AUTH
    with login(server, "carol") as carol:
        code, _, count = describe_config(carol, 4, "")       # the broker's configs (this node's id or "")
        assert code == NONE and count > 0
        assert describe_config(carol, 2, "ok-data")[0] == TOPIC_AUTH


def test_log_dirs_need_describe_and_alter_on_the_cluster(server):
    move = [{"path": server.log_dirs[0], "topics": [{"name": "ok-data", "partitions": [0]}]}]
    with login(server, "alice") as alice:
        described = alice.call(35, 4, topics=None)
        assert (described.error_code, described.results) == (CLUSTER_AUTH, ())
        moved = alice.call(34, 2, dirs=move)
        assert codes(moved.results, code="error_code") == {("ok-data", 0): CLUSTER_AUTH}
    with login(server, "carol") as carol:
        described = carol.call(35, 4, topics=None)
        assert described.error_code == NONE and len(described.results) == len(server.log_dirs)
        assert codes(carol.call(34, 2, dirs=move).results) == {("ok-data", 0): NONE}


def test_every_refusal_names_principal_operation_resource_and_api(server):
    with login(server, "bob") as bob:
        describe_config(bob, 2, "ok-data")
        bob.call(35, 4, topics=None)
    lines = refusals(server)
    for wanted in ("principal=User:bob host=127.0.0.1 operation=DESCRIBE_CONFIGS resource=TOPIC:ok-data "
                   "api=DescribeConfigs",
                   "principal=User:bob host=127.0.0.1 operation=DESCRIBE resource=CLUSTER:kafka-cluster "
                   "api=DescribeLogDirs"):
        assert any(wanted in line for line in lines), (wanted, lines[-10:])



# -- a real client ----------------------------------------------------------------------------------------------------

def test_confluent_kafka_sees_kafkas_authorization_errors(server):
    """librdkafka as alice: an idempotent producer (InitProducerId by WRITE on her topics) and a consumer group
    (FindCoordinator, JoinGroup, SyncGroup, OffsetCommit, OffsetFetch by READ on ``ok-`` groups); as bob a
    producer's delivery fails with TOPIC_AUTHORIZATION_FAILED (nothing stored) and his consumer in the same group
    with GROUP_AUTHORIZATION_FAILED. (An idempotent producer refused its producer id is a fatal error that
    confluent-kafka raises from inside its callbacks; the raw InitProducerId test covers that refusal.)"""
    from confluent_kafka import Consumer, KafkaError, KafkaException, Producer

    def conf(user: str) -> dict[str, Any]:
        return {"bootstrap.servers": server.address("SASL_PLAINTEXT"), "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanisms": "PLAIN", "sasl.username": user, "sasl.password": f"{user}-secret"}

    def send(user: str, values: list[bytes], idempotent: bool) -> list[int]:
        errors: list[int] = []
        producer = Producer({**conf(user), "enable.idempotence": idempotent, "message.timeout.ms": 20000})
        for v in values:
            producer.produce("ok-data", value=v, partition=1,
                             on_delivery=lambda err, msg: errors.append(err.code()) if err else None)
        producer.flush(30)
        return errors

    assert send("alice", [b"a1", b"a2"], idempotent=True) == []
    assert set(send("bob", [b"b1"], idempotent=False)) == {KafkaError.TOPIC_AUTHORIZATION_FAILED}

    consumer = Consumer({**conf("alice"), "group.id": "ok-cg", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    try:
        consumer.subscribe(["ok-data"])
        got: list[bytes] = []
        for _ in range(300):
            msg = consumer.poll(0.1)
            if msg is not None and msg.error() is None:
                got.append(msg.value() or b"")
                consumer.commit(message=msg, asynchronous=False)
            if {b"a1", b"a2"} <= set(got):
                break
        assert [v for v in got if v in (b"a1", b"a2", b"b1")] == [b"a1", b"a2"]    # bob's b1 was never stored
    finally:
        consumer.close()

    consumer = Consumer({**conf("bob"), "group.id": "ok-cg", "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe(["ok-data"])
        seen = None
        for _ in range(300):
            msg = consumer.poll(0.1)
            if msg is not None and msg.error() is not None:
                seen = msg.error()
                break
        assert seen is not None and seen.code() == KafkaError.GROUP_AUTHORIZATION_FAILED, seen
    except KafkaException as exc:
        assert exc.args[0].code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    finally:
        consumer.close()
