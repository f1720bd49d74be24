"""Kafka's ACL vocabulary with Kafka's wire codes (``org.apache.kafka.common.acl`` and ``...resource``): resource
types, pattern types, operations and permissions, and one ACL binding."""
from __future__ import annotations

import enum
from dataclasses import dataclass


class ResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class Operation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class Permission(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


CLUSTER_NAME = "kafka-cluster"     # the one cluster resource's name (Kafka's ``Resource.CLUSTER_NAME``)
WILDCARD = "*"                     # a literal resource name, principal or host matching every one


@dataclass(frozen=True)
class AclBinding:
    """One ACL: ``principal`` (``User:alice``, ``User:*``) from ``host`` (an IP or ``*``) is allowed or denied
    ``operation`` on the resources ``pattern_type`` and ``name`` select of ``resource_type``."""
    resource_type: ResourceType
    name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: Operation
    permission: Permission
