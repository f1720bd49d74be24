"""The ACL file: written whole and durable, read back exactly, damage refused with the file's name, a changed
file reloaded, the filters of DescribeAcls/DeleteAcls."""
from __future__ import annotations

import json
import os
import re

import pytest

from storage_engine.acl import store as store_mod
from storage_engine.acl.filters import ANY_FILTER, AclBindingFilter
from storage_engine.acl.model import AclBinding, Operation, PatternType, Permission, ResourceType
from storage_engine.acl.settings import open_authorizer
from storage_engine.acl.store import AclStore, read_acls
from storage_engine.errors import ConfigError
from storage_engine.layout import ACLS_FILE, is_engine_file

pytestmark = pytest.mark.unit

T, G = ResourceType.TOPIC, ResourceType.GROUP
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED
A = AclBinding(T, "orders", LIT, "User:alice", "*", Operation.READ, Permission.ALLOW)
B = AclBinding(T, "app-", PRE, "User:bob", "10.0.0.1", Operation.WRITE, Permission.ALLOW)
C = AclBinding(G, "g1", LIT, "User:*", "*", Operation.ALL, Permission.DENY)
W = AclBinding(T, "*", LIT, "User:carol", "*", Operation.DESCRIBE, Permission.ALLOW)


def flt(rt: ResourceType = ResourceType.ANY, name: str | None = None, pattern: PatternType = PatternType.ANY,
        principal: str | None = None, host: str | None = None, op: Operation = Operation.ANY,
        perm: Permission = Permission.ANY) -> AclBindingFilter:
    return AclBindingFilter(rt, name, pattern, principal, host, op, perm)


@pytest.fixture
def dirs(tmp_path):
    out = [str(tmp_path / "d0"), str(tmp_path / "d1")]
    for d in out:
        os.makedirs(d)
    return out


def test_create_is_durable_and_read_back_exactly(dirs):
    s = AclStore(dirs)
    assert s.current() == ()
    s.create([A, B, A])
    s.create([C, B])           # already stored: not added twice
    assert s.current() == (A, B, C)
    assert read_acls(dirs) == (A, B, C)
    assert AclStore(dirs).current() == (A, B, C)
    path = os.path.join(dirs[0], ACLS_FILE)
    assert is_engine_file(ACLS_FILE) and is_engine_file(ACLS_FILE + ".tmp")
    doc = json.loads(open(path, encoding="utf-8").read())
    assert doc["acls"][1] == {"resource_type": "TOPIC", "name": "app-", "pattern_type": "PREFIXED",
                              "principal": "User:bob", "host": "10.0.0.1", "operation": "WRITE",
                              "permission": "ALLOW"}
    assert not os.path.exists(os.path.join(dirs[1], ACLS_FILE))


def test_delete_by_filters_reports_each_filters_matches(dirs):
    s = AclStore(dirs)
    s.create([A, B, C, W])
    got = s.delete([flt(principal="User:bob"), flt(rt=T, name="app-", pattern=PRE), flt(rt=ResourceType.USER)])
    assert got == [[B], [B], []]
    assert s.current() == (A, C, W)
    assert s.delete([flt(rt=T, name="orders", pattern=PatternType.MATCH)]) == [[A, W]]
    assert read_acls(dirs) == (C,)


@pytest.mark.parametrize("f, expected", [
    (ANY_FILTER, [A, B, C, W]),
    (flt(rt=T), [A, B, W]),
    (flt(rt=T, name="orders"), [A]),                                   # ANY pattern: exact name, any type
    (flt(rt=T, name="orders", pattern=PatternType.MATCH), [A, W]),     # what applies to the topic orders
    (flt(rt=T, name="app-x", pattern=PatternType.MATCH), [B, W]),
    (flt(rt=T, name="app-", pattern=PRE), [B]),
    (flt(rt=T, name="app-x", pattern=PRE), []),
    (flt(rt=T, name="*", pattern=LIT), [W]),
    (flt(principal="User:*"), [C]),                                    # filters compare principals as given
    (flt(host="10.0.0.1"), [B]),
    (flt(op=Operation.ALL), [C]),
    (flt(perm=Permission.DENY), [C]),
    (flt(rt=G, pattern=PatternType.MATCH), [C]),
])
def test_filter_matching(dirs, f, expected):
    s = AclStore(dirs)
    s.create([A, B, C, W])
    assert s.describe(f) == expected


def test_unknown_elements_of_a_filter_are_named():
    assert flt().unknown_element() is None
    assert "operation is UNKNOWN" in str(flt(op=Operation.UNKNOWN).unknown_element())


@pytest.mark.parametrize("damage", [
    lambda raw: raw[: len(raw) // 2],                                            # cut short
    lambda raw: raw.replace(b'"orders"', b'"ordert"'),                           # a byte changed: checksum
    lambda raw: raw.replace(b'"READ"', b'"REED"'),                               # not a Kafka value
    lambda raw: b"\xff\xfe",
    lambda raw: b"[]",
])
def test_a_damaged_file_is_refused_naming_it_and_never_overwritten(dirs, damage):
    AclStore(dirs).create([A])
    path = os.path.join(dirs[0], ACLS_FILE)
    raw = open(path, "rb").read()
    open(path, "wb").write(damage(raw))
    damaged = open(path, "rb").read()
    with pytest.raises(ConfigError, match=re.escape(f"ACL file {path}")):
        AclStore(dirs)
    with pytest.raises(ConfigError, match=re.escape(path)):
        read_acls(dirs)
    server = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
              "allow.everyone.if.no.acl.found": True}
    with pytest.raises(ConfigError, match=re.escape(path)):
        open_authorizer(server, dirs)
    assert open(path, "rb").read() == damaged


def test_a_leftover_temp_file_is_removed_and_never_read(dirs):
    AclStore(dirs).create([A])
    tmp = os.path.join(dirs[0], ACLS_FILE + ".tmp")
    open(tmp, "wb").write(store_mod.encode([A, B]))     # a rewrite cut before its rename: never answered
    assert AclStore(dirs).current() == (A,)
    assert not os.path.exists(tmp)


def test_a_file_changed_on_disk_is_reloaded_and_a_damaged_one_keeps_the_old_set(dirs, monkeypatch):
    monkeypatch.setattr(store_mod, "RELOAD_S", 0.0)
    s = AclStore(dirs)
    s.create([A])
    store_mod.write_file(s.path, [A, C])        # another writer (a restore, an operator's tool)
    assert s.current() == (A, C)
    open(s.path, "wb").write(b"{broken")
    assert s.current() == (A, C)               # the last good set stays in force
    with pytest.raises(ConfigError, match="damaged ACL file"):
        s.create([B])                          # and changes are refused: the damaged file is kept
    assert open(s.path, "rb").read() == b"{broken"
    os.remove(s.path)
    assert s.current() == ()


def test_settings_keys(dirs):
    assert open_authorizer({"authorizer.class.name": ""}, dirs) is None
    with pytest.raises(ConfigError, match="super.users = 'alice'"):
        open_authorizer({"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer", "super.users": "alice"},
                        dirs)
    opened = open_authorizer({"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                                    "super.users": "User:admin", "allow.everyone.if.no.acl.found": True}, dirs)
    assert opened is not None
    store, authz = opened
    assert authz.authorize("User:x", "1.2.3.4", Operation.READ, T, "t")
    store.create([A])
    assert not authz.authorize("User:x", "1.2.3.4", Operation.READ, T, "orders")
    assert authz.authorize("User:admin", "1.2.3.4", Operation.READ, T, "orders")


def test_an_acl_file_outside_the_first_log_dir_is_refused(dirs):
    AclStore(dirs).create([A])
    swapped = [dirs[1], dirs[0]]          # log.dirs reordered: the file is not in the first dir any more
    with pytest.raises(ConfigError, match=re.escape(f"the ACL file is {os.path.join(dirs[0], ACLS_FILE)}, not in "
                                                    f"the first log dir {dirs[1]}")):
        AclStore(swapped)
    with pytest.raises(ConfigError, match="reordered"):
        read_acls(swapped)
