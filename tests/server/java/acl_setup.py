"""The broker of the Java client's ACL tests: a SASL_PLAINTEXT listener with three users (admin, a super user;
alice; bob), Kafka's StandardAuthorizer (``allow.everyone.if.no.acl.found`` false, its default), and one driver
process with an Admin client per user (named after the user: admin by SCRAM-SHA-512, alice by SCRAM-SHA-256, bob
by PLAIN). Helpers make the JSON of an ACL binding and a user's client config."""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import yaml
from confluent_kafka.admin import AdminClient, NewTopic

from tests.server.broker_proc import BrokerProcess
from tests.server.java.driver import JavaDriver, serving

PASSWORDS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}
AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


@contextmanager
def secured_broker(tmp: Path) -> Iterator[tuple[BrokerProcess, JavaDriver]]:
    users = tmp / "users.yaml"
    users.write_text(yaml.safe_dump({"users": {u: {"password": p} for u, p in PASSWORDS.items()}}))
    broker_conf = {"auto.create.topics.enable": False, "group.initial.rebalance.delay.ms": 0,
                   "sasl.credentials.file": str(users), "authorizer.class.name": AUTHORIZER,
                   "super.users": "User:admin"}
    with serving(tmp, broker=broker_conf, listeners="SASL_PLAINTEXT://127.0.0.1:0") as (broker, java):
        for user, mechanism in (("admin", "SCRAM-SHA-512"), ("alice", "SCRAM-SHA-256"), ("bob", "PLAIN")):
            java.call("admin", name=user, config=sasl(broker, user, mechanism))
        yield broker, java


def sasl(broker: BrokerProcess, user: str, mechanism: str = "PLAIN") -> dict[str, str]:
    module = ("org.apache.kafka.common.security.plain.PlainLoginModule" if mechanism == "PLAIN" else
              "org.apache.kafka.common.security.scram.ScramLoginModule")
    return {"bootstrap.servers": broker.address("SASL_PLAINTEXT"), "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": mechanism,
            "sasl.jaas.config": f'{module} required username="{user}" password="{PASSWORDS[user]}";'}


def make_topics(broker: BrokerProcess, *names: str) -> None:
    """Made by the super user with librdkafka's admin (the Java client's createTopics is tested on its own)."""
    admin = AdminClient({"bootstrap.servers": broker.address("SASL_PLAINTEXT"), "security.protocol": "SASL_PLAINTEXT",
                         "sasl.mechanism": "PLAIN", "sasl.username": "admin", "sasl.password": PASSWORDS["admin"],
                         "log_level": 0})
    for future in admin.create_topics([NewTopic(name, 1, 1) for name in names]).values():
        future.result(60)


def allow(principal: str, resource_type: str, name: str, operation: str, pattern: str = "LITERAL",
          permission: str = "ALLOW", host: str = "*") -> dict[str, str]:
    """An ACL binding as AdminOps.java reads it (``permission="DENY"`` for a deny)."""
    return {"resource_type": resource_type, "name": name, "pattern": pattern, "principal": principal, "host": host,
            "operation": operation, "permission": permission}
