"""DescribeUserScramCredentials over ``sasl.credentials.file``, with librdkafka's and kafka-python's admin clients:
every user's SCRAM mechanisms and iterations (a password entry counts for both, with 4096), a named user without
a SCRAM credential RESOURCE_NOT_FOUND, a user named twice DUPLICATE_RESOURCE; with the StandardAuthorizer on, a
user without DESCRIBE on the cluster is refused CLUSTER_AUTHORIZATION_FAILED."""
from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, ScramMechanism
from kafka import KafkaAdminClient
from kafka.errors import ClusterAuthorizationFailedError

from tests.server.test_security import PASSWORDS, write_users

pytestmark = pytest.mark.e2e

STANDARD = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


def test_scram_credentials_are_described_and_a_user_without_acls_is_refused(broker_factory, tmp_path):
    users = write_users(tmp_path / "users.yaml")
    server = broker_factory(broker={"sasl.credentials.file": str(users), "authorizer.class.name": STANDARD,
                                    "super.users": "User:alice;User:ANONYMOUS"},
                            listeners="SASL_PLAINTEXT://127.0.0.1:0,PLAINTEXT://127.0.0.1:0")
    admin = AdminClient({"bootstrap.servers": server.address("PLAINTEXT")})
    every_future: Any = admin.describe_user_scram_credentials()      # one future when no user is named
    every = every_future.result(30)
    assert {u: sorted((i.mechanism, i.iterations) for i in d.scram_credential_infos) for u, d in every.items()} == {
        "alice": [(ScramMechanism.SCRAM_SHA_256, 4096), (ScramMechanism.SCRAM_SHA_512, 4096)],
        "bob": [(ScramMechanism.SCRAM_SHA_256, 4096)],
        "carol": [(ScramMechanism.SCRAM_SHA_512, 8192)]}
    named: Any = admin.describe_user_scram_credentials(["carol", "dave"])    # a future per user
    assert [(i.mechanism, i.iterations) for i in named["carol"].result(30).scram_credential_infos] == [
        (ScramMechanism.SCRAM_SHA_512, 8192)]
    with pytest.raises(KafkaException) as missing:
        named["dave"].result(30)
    assert missing.value.args[0].code() == KafkaError.RESOURCE_NOT_FOUND

    as_alice = KafkaAdminClient(**{"bootstrap_servers": server.address("SASL_PLAINTEXT"),
                                   "security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN",
                                   "sasl_plain_username": "alice", "sasl_plain_password": PASSWORDS["alice"]})
    as_bob = KafkaAdminClient(bootstrap_servers=server.address("SASL_PLAINTEXT"), security_protocol="SASL_PLAINTEXT",
                              sasl_mechanism="SCRAM-SHA-256", sasl_plain_username="bob",
                              sasl_plain_password=PASSWORDS["bob"])
    try:
        described = as_alice.describe_user_scram_credentials(["bob"])
        assert "bob" in str(described)
        # (kafka-python: librdkafka 2.16 aborts the process on this refusal, "munmap_chunk(): invalid pointer")
        with pytest.raises(ClusterAuthorizationFailedError):
            as_bob.describe_user_scram_credentials(["bob"])
        with pytest.raises(ClusterAuthorizationFailedError):
            as_bob.describe_user_scram_credentials()
    finally:
        as_alice.close()
        as_bob.close()
