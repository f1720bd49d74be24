"""The ACL matrix: every API the broker serves, for each resource it authorizes (tests/server/acl_matrix.py's
rows, read from Kafka's KafkaApis and, for the APIs a Kafka 4 broker forwards, ControllerApis), against a broker
with Kafka's StandardAuthorizer, once with ``allow.everyone.if.no.acl.found`` false and once true, and against one
without an authorizer (everything allowed, the ACL APIs SECURITY_DISABLED). Each row runs the cases of
:data:`CASES` through raw requests on SASL/PLAIN connections (``User:alice`` the subject, ``User:admin`` the super
user, ``User:bob`` someone else), the ACLs set through CreateAcls and cleared through DeleteAcls by the super user
between cases, and the row's whole table of answers is compared with Kafka's at once: allowed (the row's ``ok``)
or refused (Kafka's error code for that resource)."""
from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from storage_engine.acl.model import Operation as Op, PatternType, Permission, ResourceType as RT
from tests.server import acl_matrix as M, acl_matrix_requests as Q, wire
from tests.server.broker_proc import BrokerProcess

pytestmark = pytest.mark.e2e

PASSWORDS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}
ALICE, BOB, ADMIN, ANYONE = "User:alice", "User:bob", "User:admin", "User:*"
STANDARD = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
OTHER_HOST = "10.0.0.9"             # the test's connections come from 127.0.0.1


class Client:
    """One authenticated connection (SaslHandshake v1 + SaslAuthenticate PLAIN)."""

    def __init__(self, address: str, user: str | None):
        self.address, self.user, self.corr = address, user, 0
        self.conn = self._connect()

    def _connect(self) -> wire.Conn:
        conn = wire.Conn(self.address)
        if self.user is not None:
            assert int(conn.request(wire.req(17, 1, mechanism="PLAIN"), 0).error_code) == 0
            token = f"\0{self.user}\0{PASSWORDS[self.user]}".encode()
            assert int(conn.request(wire.req(36, 2, auth_bytes=token), 0).error_code) == 0
        return conn

    def call(self, api: int, version: int, **fields: Any) -> Any:
        self.corr += 1
        try:
            return self.conn.request(wire.build_request(api, version, **fields), self.corr)
        except wire.Closed:
            self.conn = self._connect()      # the next call gets a fresh connection; this one fails
            raise

    def call_raw(self, api: int, version: int, **fields: Any) -> bytes:
        """The response frame (after its size) of a request, undecoded."""
        self.corr += 1
        try:
            self.conn.send(wire.request_frame(wire.build_request(api, version, **fields), self.corr))
            frame = self.conn.read_frame()
        except wire.Closed:
            self.conn = self._connect()
            raise
        assert int.from_bytes(frame[:4], "big") == self.corr
        return frame

    def close(self) -> None:
        self.conn.close()


@dataclass(frozen=True)
class Acl:
    principal: str
    need: M.Need
    op: Op | None = None                 # None: the need's operation
    name: str | None = None              # None: the need's resource name
    pattern: PatternType = PatternType.LITERAL
    host: str = "*"
    permission: Permission = Permission.ALLOW

    def creation(self) -> dict[str, Any]:
        return {"resource_type": int(self.need.rtype), "resource_name": self.name or self.need.name,
                "resource_pattern_type": int(self.pattern), "principal": self.principal, "host": self.host,
                "operation": int(self.op or self.need.op), "permission_type": int(self.permission)}


def _other_op(op: Op) -> Op:
    return Op.DELETE if op == Op.ALTER else Op.ALTER


ALLOWED, DENIED, SETTING = "allowed", "denied", "setting"

# name -> (who asks, the ACLs on the subject, the answer); SETTING: as allow.everyone.if.no.acl.found says
CASES: dict[str, tuple[str, Any, str]] = {
    "literal": ("alice", lambda s: [Acl(ALICE, s)], ALLOWED),
    "prefixed": ("alice", lambda s: [Acl(ALICE, s, name=s.name[:-3], pattern=PatternType.PREFIXED)], ALLOWED),
    "wildcard-resource": ("alice", lambda s: [Acl(ALICE, s, name="*")], ALLOWED),
    "wildcard-principal": ("alice", lambda s: [Acl(ANYONE, s)], ALLOWED),
    "all-operations": ("alice", lambda s: [Acl(ALICE, s, op=Op.ALL)], ALLOWED),
    "host-match": ("alice", lambda s: [Acl(ALICE, s, host="127.0.0.1")], ALLOWED),
    "deny-other-operation": ("alice", lambda s: [Acl(ALICE, s), Acl(ALICE, s, op=_other_op(s.op),
                                                                    permission=Permission.DENY)], ALLOWED),
    "host-other": ("alice", lambda s: [Acl(ALICE, s, host=OTHER_HOST)], DENIED),
    "other-principal": ("alice", lambda s: [Acl(BOB, s)], DENIED),
    "deny-wins": ("alice", lambda s: [Acl(ANYONE, s, op=Op.ALL), Acl(ALICE, s, permission=Permission.DENY)],
                  DENIED),
    "deny-prefixed": ("alice", lambda s: [Acl(ALICE, s), Acl(ALICE, s, name=s.name[:-3],
                                                             pattern=PatternType.PREFIXED,
                                                             permission=Permission.DENY)], DENIED),
    "deny-all-operations": ("alice", lambda s: [Acl(ALICE, s), Acl(ALICE, s, op=Op.ALL,
                                                                   permission=Permission.DENY)], DENIED),
    "no-acl": ("alice", lambda s: [], SETTING),
    "super-user": ("admin", lambda s: [], ALLOWED),
    "super-user-despite-deny": ("admin", lambda s: [Acl(ADMIN, s, op=Op.ALL, permission=Permission.DENY)],
                                ALLOWED),
}
# Cases that refuse the subject's operation while DESCRIBE on the resource stays allowed (ALLOW ALL to everyone /
# ALLOW of the operation itself, which implies DESCRIBE for READ, WRITE, DELETE and ALTER; the DENY is of the
# operation only): a row's ``if_describable`` answer applies there.
DESCRIBE_KEPT = {"deny-wins", "deny-prefixed"}
IMPLIES_DESCRIBE = {Op.READ, Op.WRITE, Op.DELETE, Op.ALTER, Op.DESCRIBE}

# A CLUSTER ACL names kafka-cluster, literally (Kafka's AclApis refuses any other name, test below).
NOT_FOR_CLUSTER = {"prefixed", "wildcard-resource", "deny-prefixed"}

# ALLOW on these implies the row's operation (StandardAuthorizerData.IMPLIES_DESCRIBE / IMPLIES_DESCRIBE_CONFIGS)
IMPLIED = {Op.DESCRIBE: Op.ALTER, Op.DESCRIBE_CONFIGS: Op.ALTER_CONFIGS}


# With allow.everyone.if.no.acl.found=true only these run again: the cases whose answer depends on whether some
# ACL applies to a resource (the others test pattern and principal matching, the same under either setting).
EVERYONE_CASES = {"literal", "host-other", "other-principal", "deny-wins", "no-acl", "super-user"}


# Cases of the authorizer's own rules (wildcards, ALL, DENY over a prefix or ALL, super users despite a DENY): they
# do not depend on the API, so they run for one row of each resource type only; every row runs the others, which
# tell whether the API asks for the right operation on the right resource name from the right host.
AUTHORIZER_CASES = {"wildcard-resource", "wildcard-principal", "all-operations", "deny-prefixed",
                    "deny-all-operations", "super-user-despite-deny"}
ONE_ROW_PER_TYPE = {"fetch/topic", "describe-groups/group", "describe-log-dirs/cluster",
                    "init-producer-id/transactional-id"}


def cases_of(row: M.Row, everyone: bool) -> dict[str, tuple[str, list[Acl], str]]:
    out = {name: (who, acls(row.subject), answer) for name, (who, acls, answer) in CASES.items()
           if (not everyone or name in EVERYONE_CASES)
           and (name not in AUTHORIZER_CASES or row.id in ONE_ROW_PER_TYPE)
           and not (row.subject.rtype == RT.CLUSTER and name in NOT_FOR_CLUSTER)}
    if row.subject.op in IMPLIED and not everyone:
        out["implied"] = ("alice", [Acl(ALICE, row.subject, op=IMPLIED[row.subject.op])], ALLOWED)
    return out


@dataclass
class Matrix:
    broker: BrokerProcess
    authorizer: bool
    everyone: bool
    env: Q.Env
    clients: dict[str, Client]

    def clear_acls(self) -> None:
        r = self.clients["admin"].call(31, 3, filters=[{
            "resource_type_filter": int(RT.ANY), "resource_name_filter": None,
            "pattern_type_filter": int(PatternType.ANY), "principal_filter": None, "host_filter": None,
            "operation": int(Op.ANY), "permission_type": int(Permission.ANY)}])
        assert [int(f.error_code) for f in r.filter_results] == [0], r

    def add_acls(self, acls: list[Acl]) -> None:
        if acls:
            r = self.clients["admin"].call(30, 3, creations=[a.creation() for a in acls])
            assert [int(x.error_code) for x in r.results] == [0] * len(acls), r

    def answer(self, row: M.Row, who: str) -> int | str:
        client = self.clients[who]
        try:
            if row.raw is not None:
                return row.raw(client.call_raw(row.key, row.version, **row.build(self.env)))
            response = client.call(row.key, row.version, **row.build(self.env))
        except wire.Closed:
            return "connection closed"
        return row.code(response)


def start_matrix(tmp: Path, broker: dict[str, Any]) -> Matrix:
    users = tmp / "users.yaml"
    users.write_text(yaml.safe_dump({"users": {u: {"password": p} for u, p in PASSWORDS.items()}}))
    server = BrokerProcess(tmp, broker={"auto.create.topics.enable": False, "sasl.credentials.file": str(users),
                                        **broker}, listeners="SASL_PLAINTEXT://127.0.0.1:0", log_dirs=1)
    server.start()
    address = server.address("SASL_PLAINTEXT")
    clients = {u: Client(address, u) for u in PASSWORDS}
    admin = clients["admin"]
    made = admin.call(19, 7, topics=[{"name": Q.TOPIC, "num_partitions": 1, "replication_factor": 1,
                                      "assignments": [], "configs": []}], timeout=Q.SEC, validate_only=False)
    assert int(made.topics[0].error_code) == 0, made
    env = Q.Env(broker_id=int(admin.call(3, 12, **Q.metadata(None)(Q.Env(0))).brokers[0].node_id))
    for group in (Q.GROUP, Q.OFFSETS_GROUP):       # groups with committed offsets
        assert Q.topics_partition(admin.call(8, 8, **Q.offset_commit_to(group)(env))) == 0
    assert Q.top(admin.call(22, 4, **Q.init_producer_id(Q.TXN)(env))) == 0      # the transactional id exists
    return Matrix(server, bool(broker.get("authorizer.class.name")), bool(broker.get("allow.everyone.if.no.acl.found")),
                  env, clients)


def stop_matrix(m: Matrix) -> None:
    for c in m.clients.values():
        c.close()
    try:
        assert m.broker.stop() == 0
    finally:
        m.broker.close()


SETTINGS = {"no-authorizer": {},
            "no-acl-found-denies": {"authorizer.class.name": STANDARD, "super.users": f"{ADMIN};User:nobody-else",
                                    "allow.everyone.if.no.acl.found": False},
            "no-acl-found-allows": {"authorizer.class.name": STANDARD, "super.users": f"{ADMIN};User:nobody-else",
                                    "allow.everyone.if.no.acl.found": True}}
ACL_APIS = (29, 30, 31)
SECURITY_DISABLED = 54      # the ACL APIs without an authorizer (AclApis: authorizer None)


@pytest.fixture(scope="module", params=list(SETTINGS))
def matrix(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Matrix]:
    tmp = tmp_path_factory.mktemp("acl-matrix")
    m = start_matrix(tmp, SETTINGS[request.param])
    yield m
    stop_matrix(m)


def expected_answer(row: M.Row, case: str, answer: str, everyone: bool) -> int | str:
    if answer == SETTING:
        answer = ALLOWED if everyone else DENIED
    if row.everyone_allows and everyone:
        answer = ALLOWED
    if case == "deny-wins" and row.also_allowed_by:      # ALL to everyone grants the other operations
        answer = ALLOWED
    if answer == ALLOWED:
        return row.ok
    if row.if_describable is not None and case in DESCRIBE_KEPT and row.subject.op in IMPLIES_DESCRIBE:
        return row.if_describable
    return row.denied


@pytest.mark.parametrize("row", M.ROWS, ids=[r.id for r in M.ROWS])
def test_acl_matrix(matrix: Matrix, row: M.Row) -> None:
    if not matrix.authorizer:     # Kafka without an authorizer: everything allowed, whoever asks
        want_one = SECURITY_DISABLED if row.key in ACL_APIS else row.ok
        assert {who: matrix.answer(row, who) for who in ("alice", "admin")} == {"alice": want_one, "admin": want_one}
        return
    got: dict[str, int | str] = {}
    want: dict[str, int | str] = {}
    for name, (who, acls, answer) in cases_of(row, matrix.everyone).items():
        matrix.clear_acls()
        grants = [Acl(ALICE, need) for need in row.grants]
        blocks = [Acl(BOB, need) for need in row.blocks]
        matrix.add_acls(acls + grants + blocks)
        got[name] = matrix.answer(row, who)
        want[name] = expected_answer(row, name, answer, matrix.everyone)
    matrix.clear_acls()
    assert got == want, f"{row.id} (Kafka: {row.kafka}): " + ", ".join(
        f"{k}: got {got[k]!r}, Kafka answers {want[k]!r}" for k in want if got[k] != want[k])


def test_refusals_are_logged_with_principal_operation_and_resource(matrix: Matrix) -> None:
    """A refused DeleteRecords leaves a log line naming who, from where, what and on which resource; without an
    authorizer nothing is refused and no such line is written."""
    row = next(r for r in M.ROWS if r.id == "delete-records/topic")

    def refusals() -> list[str]:
        return [line for line in matrix.broker.log_text().splitlines()
                if "refused" in line and "User:alice" in line and "DELETE" in line and Q.TOPIC in line]

    if not matrix.authorizer:
        assert matrix.answer(row, "alice") == row.ok
        assert refusals() == []
        return
    matrix.clear_acls()
    matrix.add_acls([Acl(BOB, row.subject)])
    before = len(refusals())
    assert matrix.answer(row, "alice") == Q.TOPIC_AUTH
    matrix.clear_acls()
    lines = refusals()
    assert len(lines) > before and "127.0.0.1" in lines[-1], matrix.broker.log_text()[-3000:]


def test_a_cluster_acl_must_name_kafka_cluster(matrix: Matrix) -> None:
    """CreateAcls refuses a CLUSTER ACL of any other name (a prefix, ``*``) with INVALID_REQUEST and keeps the
    valid ones of the same request (AclApis.handleCreateAcls); without an authorizer it is SECURITY_DISABLED."""
    cluster = M.on_cluster(Op.DESCRIBE)
    acls = [Acl(ALICE, cluster, name="kafka-clus", pattern=PatternType.PREFIXED), Acl(ALICE, cluster, name="*"),
            Acl(ALICE, cluster)]
    r = matrix.clients["admin"].call(30, 3, creations=[a.creation() for a in acls])
    codes = [int(x.error_code) for x in r.results]
    if not matrix.authorizer:
        assert codes == [SECURITY_DISABLED] * 3
        return
    assert codes == [Q.INVALID_REQUEST, Q.INVALID_REQUEST, 0], r
    listed = matrix.clients["admin"].call(29, 3, resource_type_filter=int(RT.CLUSTER), resource_name_filter=None,
                                          pattern_type_filter=int(PatternType.ANY), principal_filter=None,
                                          host_filter=None, operation=int(Op.ANY), permission_type=int(Permission.ANY))
    assert [(res.resource_name, int(res.pattern_type)) for res in listed.resources] == [
        ("kafka-cluster", int(PatternType.LITERAL))], listed
    matrix.clear_acls()


# -- authorized operations --------------------------------------------------------------------------------------------

# Kafka's AclEntry.supportedOperations: what an authorized-operations field may hold (GROUP has the config operations
# since group configs, KAFKA-14510).
KAFKA_SUPPORTED = {
    RT.TOPIC: {Op.READ, Op.WRITE, Op.CREATE, Op.DESCRIBE, Op.DELETE, Op.ALTER, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS},
    RT.GROUP: {Op.READ, Op.DESCRIBE, Op.DELETE, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS},
    RT.CLUSTER: {Op.CREATE, Op.CLUSTER_ACTION, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS, Op.IDEMPOTENT_WRITE, Op.ALTER,
                 Op.DESCRIBE},
}
# (the API that reports them, its version, the resource) per field
OPS_FIELDS = {
    "describe-groups": (15, 5, M.on_group(Op.DESCRIBE)),
    "metadata-topic": (3, 10, M.on_topic(Op.DESCRIBE)),
    "metadata-cluster": (3, 10, M.on_cluster(Op.DESCRIBE)),
    "describe-cluster": (60, 1, M.on_cluster(Op.DESCRIBE)),
}
# the operation each resource type's "all but one" case denies
DENIED_ONE = {RT.TOPIC: Op.WRITE, RT.GROUP: Op.DELETE, RT.CLUSTER: Op.ALTER}


def ops_of(bits: int) -> set[Op]:
    return {op for op in Op if op.value > 1 and bits & (1 << op.value)}


def reported(matrix: Matrix, field: str, who: str) -> tuple[int, set[Op] | None]:
    """(the error code, the authorized operations reported) of ``field``'s API for ``who``."""
    key, version, need = OPS_FIELDS[field]
    client = matrix.clients[who]
    if field == "describe-groups":
        g = client.call(key, version, groups=[need.name], include_authorized_operations=True).groups[0]
        return int(g.error_code), None if int(g.error_code) else ops_of(int(g.authorized_operations))
    if field == "describe-cluster":
        r = client.call(key, version, include_cluster_authorized_operations=True, endpoint_type=1)
        return int(r.error_code), ops_of(int(r.cluster_authorized_operations))
    r = client.call(key, version, topics=[{"name": Q.TOPIC, "topic_id": uuid.UUID(int=0)}],
                    allow_auto_topic_creation=False, include_cluster_authorized_operations=field == "metadata-cluster",
                    include_topic_authorized_operations=field == "metadata-topic")
    if field == "metadata-cluster":
        return 0, ops_of(int(r.cluster_authorized_operations))
    t = r.topics[0]
    return int(t.error_code), None if int(t.error_code) else ops_of(int(t.topic_authorized_operations))


def ops_cases(need: M.Need) -> dict[str, tuple[str, list[Acl], set[Op] | None]]:
    """name -> (who, ACLs, the operations Kafka reports; None: the resource is refused, no operations)."""
    supported = KAFKA_SUPPORTED[need.rtype]
    first = Op.ALTER if need.rtype == RT.CLUSTER else Op.READ       # an operation that implies DESCRIBE
    return {
        "one-operation": ("alice", [Acl(ALICE, need, op=first)], {first, Op.DESCRIBE}),
        "configs": ("alice", [Acl(ALICE, need), Acl(ALICE, need, op=Op.ALTER_CONFIGS)],
                    {Op.DESCRIBE, Op.ALTER_CONFIGS, Op.DESCRIBE_CONFIGS} & supported),
        "all": ("alice", [Acl(ALICE, need, op=Op.ALL)], supported),
        "all-but-one": ("alice", [Acl(ALICE, need, op=Op.ALL),
                                  Acl(ALICE, need, op=DENIED_ONE[need.rtype], permission=Permission.DENY)],
                        supported - {DENIED_ONE[need.rtype]}),
        "super-user": ("admin", [], supported),
        "no-acl": ("alice", [], None),
    }


@pytest.mark.parametrize("field", list(OPS_FIELDS))
def test_authorized_operations(matrix: Matrix, field: str) -> None:
    """The authorized operations of a group, a topic and the cluster, as Kafka's AuthHelper.authorizedOperations
    computes them: each supported operation the principal may do, implied ones included; a resource the principal
    may not DESCRIBE is refused (group, topic) or reports none (the cluster's fields: 0). Without an authorizer
    every supported operation."""
    need = OPS_FIELDS[field][2]
    supported = KAFKA_SUPPORTED[need.rtype]
    refused: tuple[int, set[Op] | None] = {RT.TOPIC: (Q.TOPIC_AUTH, None), RT.GROUP: (Q.GROUP_AUTH, None), RT.CLUSTER: (0, set())}[need.rtype]
    got: dict[str, tuple[int, set[Op] | None]] = {}
    want: dict[str, tuple[int, set[Op] | None]] = {}
    for name, (who, acls, ops) in ops_cases(need).items():
        if not matrix.authorizer:
            ops = supported
        elif name == "no-acl" and matrix.everyone:
            ops = supported
        if matrix.authorizer:
            matrix.clear_acls()
            matrix.add_acls(acls)
        got[name] = reported(matrix, field, who)
        want[name] = refused if ops is None else (0, ops)
    if matrix.authorizer:
        matrix.clear_acls()
    assert got == want, field + ": " + ", ".join(
        f"{k}: got {got[k]}, Kafka answers {want[k]}" for k in want if got[k] != want[k])
