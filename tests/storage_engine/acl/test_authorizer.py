"""The decision with Kafka's StandardAuthorizer semantics (StandardAuthorizerData.findAclRule/findResult,
Authorizer.authorizeByResourceType), case by case."""
from __future__ import annotations

import pytest

from storage_engine.acl.authorizer import StandardAuthorizer, parse_super_users
from storage_engine.acl.model import AclBinding, Operation, PatternType, Permission, ResourceType

pytestmark = pytest.mark.unit

T, G, C, X = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER, ResourceType.TRANSACTIONAL_ID
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = Permission.ALLOW, Permission.DENY
Op = Operation
ALICE, BOB = "User:alice", "User:bob"
HOST = "10.0.0.1"


def acl(rt: ResourceType, name: str, op: Operation, perm: Permission = ALLOW, principal: str = ALICE,
        host: str = "*", pattern: PatternType = LIT) -> AclBinding:
    return AclBinding(rt, name, pattern, principal, host, op, perm)


def authz(*acls: AclBinding, allow_if_no_acl: bool = False, super_users: tuple[str, ...] = ()) -> StandardAuthorizer:
    stored = tuple(acls)
    return StandardAuthorizer(lambda: stored, super_users, allow_if_no_acl)


def ok(a: StandardAuthorizer, op: Operation, rt: ResourceType, name: str, principal: str = ALICE,
       host: str = HOST) -> bool:
    return a.authorize(principal, host, op, rt, name)


@pytest.mark.parametrize("allow", [False, True])
def test_no_acl_found_follows_the_setting(allow):
    a = authz(allow_if_no_acl=allow)
    assert ok(a, Op.READ, T, "foo") is allow
    assert ok(a, Op.CREATE, C, "kafka-cluster") is allow


def test_an_acl_on_the_resource_for_someone_else_means_acls_are_found():
    # Kafka: any ACL applying to the resource (whatever principal, host or operation) turns "no ACL found" off
    a = authz(acl(T, "foo", Op.READ, principal=BOB), allow_if_no_acl=True)
    assert not ok(a, Op.READ, T, "foo")
    assert not ok(a, Op.WRITE, T, "foo", principal=BOB)
    assert ok(a, Op.READ, T, "bar")            # nothing applies to bar
    assert ok(a, Op.READ, G, "foo")            # nor to the group foo


def test_literal_allow_and_its_implications():
    a = authz(acl(T, "foo", Op.READ), acl(T, "foo", Op.ALTER_CONFIGS))
    assert ok(a, Op.READ, T, "foo")
    assert ok(a, Op.DESCRIBE, T, "foo")              # READ implies DESCRIBE
    assert ok(a, Op.DESCRIBE_CONFIGS, T, "foo")      # ALTER_CONFIGS implies DESCRIBE_CONFIGS
    assert not ok(a, Op.WRITE, T, "foo")
    assert not ok(a, Op.ALTER, T, "foo")
    assert not ok(a, Op.READ, T, "foobar")           # a literal names one resource
    assert not ok(a, Op.READ, T, "foo", principal=BOB)


@pytest.mark.parametrize("op", [Op.READ, Op.WRITE, Op.DELETE, Op.ALTER, Op.DESCRIBE])
def test_allow_of_each_implying_op_gives_describe(op):
    assert ok(authz(acl(T, "t", op)), Op.DESCRIBE, T, "t")


@pytest.mark.parametrize("op", [Op.CREATE, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS, Op.CLUSTER_ACTION, Op.IDEMPOTENT_WRITE])
def test_other_ops_do_not_imply_describe(op):
    assert not ok(authz(acl(T, "t", op)), Op.DESCRIBE, T, "t")


def test_deny_counts_only_for_its_own_operation():
    a = authz(acl(T, "foo", Op.ALL), acl(T, "foo", Op.READ, DENY))
    assert not ok(a, Op.READ, T, "foo")
    assert ok(a, Op.DESCRIBE, T, "foo")       # a DENY of READ does not deny DESCRIBE
    assert ok(a, Op.WRITE, T, "foo")


def test_all_allows_and_denies_everything():
    a = authz(acl(G, "g", Op.ALL))
    assert all(ok(a, op, G, "g") for op in (Op.READ, Op.DESCRIBE, Op.DELETE))
    b = authz(acl(G, "g", Op.ALL), acl(G, "g", Op.ALL, DENY, principal="User:*"))
    assert not any(ok(b, op, G, "g") for op in (Op.READ, Op.DESCRIBE, Op.DELETE))


def test_deny_wins_over_allow_whatever_the_patterns():
    a = authz(acl(T, "*", Op.READ, principal="User:*"), acl(T, "secret", Op.READ, DENY, pattern=PRE))
    assert ok(a, Op.READ, T, "public")
    assert not ok(a, Op.READ, T, "secret-1")
    assert not ok(a, Op.READ, T, "secret")


def test_wildcard_literal_and_prefixed_patterns():
    a = authz(acl(T, "*", Op.WRITE), acl(T, "app-", Op.READ, pattern=PRE))
    assert ok(a, Op.WRITE, T, "anything")
    assert ok(a, Op.READ, T, "app-1")
    assert ok(a, Op.READ, T, "app-")
    assert not ok(a, Op.READ, T, "app")
    assert not ok(a, Op.READ, T, "other")
    # a prefixed "*" is a prefix like any other, not a wildcard
    b = authz(acl(T, "*", Op.READ, pattern=PRE))
    assert not ok(b, Op.READ, T, "foo")
    assert ok(b, Op.READ, T, "*foo")


def test_many_prefixes_of_different_lengths():
    a = authz(acl(T, "a", Op.READ, pattern=PRE, principal=BOB), acl(T, "abc", Op.READ, pattern=PRE),
              acl(T, "abcdef", Op.READ, DENY, pattern=PRE), acl(T, "abd", Op.READ, pattern=PRE, principal=BOB))
    assert ok(a, Op.READ, T, "abcd")
    assert not ok(a, Op.READ, T, "abcdefg")
    assert not ok(a, Op.READ, T, "abd1")
    assert ok(a, Op.READ, T, "abd1", principal=BOB)


def test_principal_wildcard_and_host():
    a = authz(acl(T, "foo", Op.READ, principal="User:*", host=HOST))
    assert ok(a, Op.READ, T, "foo", principal=BOB, host=HOST)
    assert not ok(a, Op.READ, T, "foo", principal=BOB, host="10.0.0.2")
    # Kafka's matching principals are {the session's, User:*}: an ACL for User:* counts for any principal
    assert ok(a, Op.READ, T, "foo", principal="Group:x", host=HOST)
    assert not ok(authz(acl(T, "foo", Op.READ, principal="Group:*")), Op.READ, T, "foo", principal="Group:x")


def test_super_users_pass_every_check_even_a_deny():
    a = authz(acl(C, "kafka-cluster", Op.ALL, DENY, principal="User:*"), super_users=(BOB,))
    assert ok(a, Op.ALTER, C, "kafka-cluster", principal=BOB)
    assert not ok(a, Op.ALTER, C, "kafka-cluster")


def test_resource_types_are_separate():
    a = authz(acl(X, "foo", Op.WRITE))
    assert ok(a, Op.WRITE, X, "foo")
    assert ok(a, Op.DESCRIBE, X, "foo")
    assert not ok(a, Op.WRITE, T, "foo")


def test_authorized_operations_bit_field():
    a = authz(acl(T, "foo", Op.READ), acl(T, "foo", Op.ALTER_CONFIGS))
    bits = a.authorized_operations(ALICE, HOST, T, "foo")
    assert bits == (1 << Op.READ) | (1 << Op.DESCRIBE) | (1 << Op.ALTER_CONFIGS) | (1 << Op.DESCRIBE_CONFIGS)
    assert a.authorized_operations(BOB, HOST, T, "foo") == 0
    full = authz(super_users=(ALICE,)).authorized_operations(ALICE, HOST, G, "g")
    assert full == (1 << Op.READ) | (1 << Op.DESCRIBE) | (1 << Op.DELETE)
    assert not full & (1 << 31)


def test_index_follows_the_provider():
    stored: list[tuple[AclBinding, ...]] = [()]
    a = StandardAuthorizer(lambda: stored[0])
    assert not ok(a, Op.READ, T, "foo")
    stored[0] = (acl(T, "foo", Op.READ),)
    assert ok(a, Op.READ, T, "foo")
    stored[0] = ()
    assert not ok(a, Op.READ, T, "foo")


# Kafka's Authorizer.authorizeByResourceType (its AuthorizerInterfaceDefaultTest cases, read from the source)
def test_by_resource_type_allow_literal_not_dominated():
    assert authz(acl(T, "foo", Op.WRITE)).authorize_by_resource_type(ALICE, HOST, Op.WRITE, T)
    assert not authz(acl(T, "foo", Op.WRITE)).authorize_by_resource_type(ALICE, HOST, Op.READ, T)
    assert not authz(acl(T, "foo", Op.WRITE)).authorize_by_resource_type(BOB, HOST, Op.WRITE, T)


def test_by_resource_type_denies_dominating():
    # a literal DENY of the same name, or a prefixed DENY of a prefix, cancels an ALLOW
    assert not authz(acl(T, "foo", Op.WRITE), acl(T, "foo", Op.WRITE, DENY)).authorize_by_resource_type(
        ALICE, HOST, Op.WRITE, T)
    assert not authz(acl(T, "foo", Op.WRITE), acl(T, "fo", Op.WRITE, DENY, pattern=PRE)).authorize_by_resource_type(
        ALICE, HOST, Op.WRITE, T)
    assert not authz(acl(T, "foo", Op.WRITE, pattern=PRE),
                     acl(T, "f", Op.WRITE, DENY, pattern=PRE)).authorize_by_resource_type(ALICE, HOST, Op.WRITE, T)
    # a literal DENY does not cancel a prefixed ALLOW of the same name
    assert authz(acl(T, "foo", Op.WRITE, pattern=PRE), acl(T, "foo", Op.WRITE, DENY)).authorize_by_resource_type(
        ALICE, HOST, Op.WRITE, T)
    # nor does a prefixed DENY longer than the allowed name
    assert authz(acl(T, "foo", Op.WRITE), acl(T, "foo1", Op.WRITE, DENY, pattern=PRE)).authorize_by_resource_type(
        ALICE, HOST, Op.WRITE, T)


def test_by_resource_type_wildcards_and_super_users():
    assert authz(acl(T, "*", Op.WRITE)).authorize_by_resource_type(ALICE, HOST, Op.WRITE, T)
    assert not authz(acl(T, "*", Op.WRITE), acl(T, "*", Op.WRITE, DENY)).authorize_by_resource_type(
        ALICE, HOST, Op.WRITE, T)
    assert not authz(acl(T, "foo", Op.WRITE), acl(T, "*", Op.ALL, DENY, principal="User:*")).authorize_by_resource_type(
        ALICE, HOST, Op.WRITE, T)
    assert authz(acl(T, "*", Op.ALL, DENY, principal="User:*"), super_users=(ALICE,)).authorize_by_resource_type(
        ALICE, HOST, Op.WRITE, T)
    assert authz(allow_if_no_acl=True).authorize_by_resource_type(ALICE, HOST, Op.WRITE, T)
    assert not authz().authorize_by_resource_type(ALICE, HOST, Op.WRITE, T)
    assert not authz(acl(T, "foo", Op.WRITE, host="10.9.9.9")).authorize_by_resource_type(ALICE, HOST, Op.WRITE, T)


def test_super_users_key_parsing():
    assert parse_super_users(" User:a ; User:b;;") == {"User:a", "User:b"}
    assert parse_super_users(None) == frozenset()
    with pytest.raises(ValueError, match="'alice' is not a principal"):
        parse_super_users("User:a;alice")


def _reference(acls: list[AclBinding], principal: str, host: str, op: Operation, rt: ResourceType, name: str,
               allow_if_no_acl: bool) -> bool:
    """Kafka's rules read straight, over every ACL (no index): the cross-check of the indexed decision."""
    applying = [a for a in acls if a.resource_type is rt and (
        (a.pattern_type is LIT and a.name in (name, "*")) or (a.pattern_type is PRE and name.startswith(a.name)))]
    counting = []
    for a in applying:
        if a.principal not in (principal, "User:*") or a.host not in (host, "*"):
            continue
        if a.operation is Op.ALL or a.operation is op:
            counting.append(a.permission)
        elif a.permission is ALLOW and (
                (op is Op.DESCRIBE and a.operation in (Op.READ, Op.WRITE, Op.DELETE, Op.ALTER))
                or (op is Op.DESCRIBE_CONFIGS and a.operation is Op.ALTER_CONFIGS)):
            counting.append(ALLOW)
    if DENY in counting:
        return False
    if ALLOW in counting:
        return True
    return allow_if_no_acl and not applying


@pytest.mark.parametrize("seed", range(20))
def test_random_acl_sets_against_a_plain_reading_of_the_rules(seed):
    import random
    rng = random.Random(seed)
    names = ["a", "ab", "abc", "abd", "b", "*", "ba"]
    principals = [ALICE, BOB, "User:*"]
    ops = [Op.READ, Op.WRITE, Op.DESCRIBE, Op.ALTER, Op.ALTER_CONFIGS, Op.DESCRIBE_CONFIGS, Op.ALL, Op.DELETE]
    acls = [AclBinding(rng.choice([T, G]), rng.choice(names), rng.choice([LIT, PRE]), rng.choice(principals),
                       rng.choice(["*", HOST, "10.0.0.2"]), rng.choice(ops), rng.choice([ALLOW, DENY]))
            for _ in range(rng.randint(0, 12))]
    allow = rng.random() < 0.5
    a = authz(*acls, allow_if_no_acl=allow)
    for name in ["a", "ab", "abc", "abcd", "abd", "b", "ba", "c", "*"]:
        for principal in (ALICE, BOB):
            for op in ops[:-2] + [Op.DELETE]:
                for rt in (T, G):
                    assert ok(a, op, rt, name, principal) == _reference(acls, principal, HOST, op, rt, name, allow), \
                        (acls, principal, op, rt, name, allow)
