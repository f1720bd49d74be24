"""Authorization's answers on a broker without an authorizer (``authorizer.class.name`` unset), where Kafka allows
everything: the authorized operations a client asks for are every operation the resource type supports."""
from __future__ import annotations

import pytest

from tests.server.authz_client import Client

pytestmark = pytest.mark.e2e


def test_without_an_authorizer_describe_groups_reports_every_group_operation_to_kafka_python(broker_factory):
    """Asked for (kafka-python always asks), a group's authorized operations are its supported ones (Kafka 4.x's
    ``AclEntry.supportedOperations``: READ, DELETE, DESCRIBE and the group configs' DESCRIBE_CONFIGS and
    ALTER_CONFIGS), not Integer.MIN_VALUE, whose bit 31 kafka-python 2.x cannot name."""
    from kafka.admin import KafkaAdminClient

    broker = broker_factory()
    with Client(broker.bootstrap) as c:     # a group no one joined: Dead, and its operations all the same
        [raw] = c.call(15, 5, groups=["plain-g"], include_authorized_operations=True).groups
        assert (raw.error_code, raw.group_state) == (0, "Dead")
        assert raw.authorized_operations == (1 << 3) | (1 << 6) | (1 << 8) | (1 << 10) | (1 << 11)
        [plain] = c.call(15, 5, groups=["plain-g"], include_authorized_operations=False).groups
        assert plain.authorized_operations == -2147483648       # not asked: Integer.MIN_VALUE, as Kafka
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        described = admin.describe_groups(["plain-g"])
    finally:
        admin.close()
    assert sorted(described["plain-g"]["authorized_operations"]) == ["ALTER_CONFIGS", "DELETE", "DESCRIBE",
                                                                     "DESCRIBE_CONFIGS", "READ"]
