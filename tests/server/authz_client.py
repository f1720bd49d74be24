"""A raw Kafka client for the authorization tests: one connection, logged in with SASL/PLAIN as a user (Kafka's
principal ``User:<name>``), that sends any request built from keyword fields (:func:`tests.server.wire.build_request`)
and returns the decoded response; and ACLs created through CreateAcls by a super user."""
from __future__ import annotations

from typing import Any

from tests.server import wire

ALLOW, DENY = 3, 2
LITERAL, PREFIXED = 3, 4
TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID = 2, 3, 4, 5
ALL, READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE = 2, 3, 4, 5, 6, 7, 8
CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE = 9, 10, 11, 12


class Client:
    def __init__(self, address: str, user: str | None = None, password: str | None = None):
        self.conn = wire.Conn(address)
        self.correlation = 0
        if user is not None:
            handshake = self.call(17, 1, mechanism="PLAIN")
            assert handshake.error_code == 0, handshake
            login = self.call(36, 2, auth_bytes=b"\0" + user.encode() + b"\0" + (password or "").encode())
            assert login.error_code == 0, f"{user} could not log in: {login}"

    def call(self, api_key: int, version: int, /, **fields: Any) -> Any:
        return self.send(wire.build_request(api_key, version, **fields))

    def send(self, body: Any) -> Any:
        """A request body built by the caller (FindCoordinator v0-3 has a field named ``key``)."""
        self.correlation += 1
        return self.conn.request(body, self.correlation)

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def create_acls(admin: Client, *acls: tuple[int, str, int, str, int, int]) -> None:
    """(resource type, name, pattern type, principal, operation, permission) each, from any host."""
    response = admin.call(30, 3, creations=[
        {"resource_type": rt, "resource_name": name, "resource_pattern_type": pattern, "principal": principal,
         "host": "*", "operation": op, "permission_type": permission}
        for rt, name, pattern, principal, op, permission in acls])
    assert [r.error_code for r in response.results] == [0] * len(acls), response
