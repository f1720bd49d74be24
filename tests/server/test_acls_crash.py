"""The ACL file after a kill -9 at each step of a CreateAcls and a DeleteAcls (``acl.tmp-written``,
``acl.renamed``, ``acl.synced``): the broker dies unanswered, restarts on a whole file (never torn, no temp file
left), every ACL acknowledged before is there, and the change is there exactly when its rename was done."""
from __future__ import annotations

import os
import signal
from typing import Any

import pytest

from storage_engine.acl.store import read_acls
from storage_engine.layout import ACLS_FILE, TMP_SUFFIX
from storage_engine.server.errors import ErrorCode
from tests.server import wire
from tests.server.broker_proc import BrokerProcess

pytestmark = [pytest.mark.e2e, pytest.mark.kills]

BROKER = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
          "super.users": "User:ANONYMOUS"}


def creation(name: str) -> dict[str, Any]:
    return {"resource_type": 2, "resource_name": name, "resource_pattern_type": 3, "principal": "User:app",
            "host": "*", "operation": 3, "permission_type": 3}


def deletion(name: str) -> dict[str, Any]:
    return {"resource_type_filter": 2, "resource_name_filter": name, "pattern_type_filter": 3,
            "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1}


def send(b: BrokerProcess, key: int, **fields: Any) -> Any:
    """One request (v3) on its own connection; the response, or None when the broker closed it (it died)."""
    conn = wire.Conn(b.bootstrap)
    try:
        return conn.request(wire.build_request(key, 3, **fields), timeout=60)
    except wire.Closed:
        return None
    finally:
        conn.close()


def names(b: BrokerProcess) -> list[str]:
    return sorted(a.name for a in read_acls(b.log_dirs))


def described(b: BrokerProcess) -> list[str]:
    got = send(b, 29, resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1,
               principal_filter=None, host_filter=None, operation=1, permission_type=1)
    assert got.error_code == ErrorCode.none
    return sorted(r.resource_name for r in got.resources)


@pytest.mark.parametrize("step, done", [("acl.tmp-written", False), ("acl.renamed", True), ("acl.synced", True)])
@pytest.mark.parametrize("change", ["create", "delete"])
def test_killed_at_each_step_of_a_change(tmp_path, step, done, change):
    b = BrokerProcess(tmp_path, broker=BROKER, log_dirs=1)
    b.env = {"STORAGE_ENGINE_CRASH_AT": f"{step}:2"}     # the first change passes the step, the second dies there
    try:
        b.start()
        b.env = {}
        got = send(b, 30, creations=[creation("kept"), creation("doomed")])
        assert [r.error_code for r in got.results] == [ErrorCode.none] * 2       # acknowledged: must survive
        if change == "create":
            before, after = ["doomed", "kept"], ["doomed", "fresh", "kept"]
            answer = send(b, 30, creations=[creation("fresh")])
        else:
            before, after = ["doomed", "kept"], ["kept"]
            answer = send(b, 31, filters=[deletion("doomed")])
        assert answer is None, "the broker answered instead of dying"
        assert b.proc is not None and b.proc.wait(60) == -signal.SIGKILL
        b.proc = None
        assert f"CRASHPOINT {step}" in b.log_text()
        # the file is whole, the old set or the new one
        assert names(b) == (after if done else before)
        b.start()
        assert not os.path.exists(os.path.join(b.log_dirs[0], ACLS_FILE + TMP_SUFFIX))
        assert described(b) == (after if done else before)
        # the client retries what it was not told succeeded: done once, whatever the crash left
        retry = (send(b, 30, creations=[creation("fresh")]) if change == "create"
                 else send(b, 31, filters=[deletion("doomed")]))
        assert retry is not None
        assert described(b) == after
        assert b.stop() == 0
    finally:
        b.close()
