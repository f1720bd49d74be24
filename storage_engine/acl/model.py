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


# The operations each resource type has (Kafka's ``AclEntry.supportedOperations``): what an authorized
# operations bit field may contain, and what a broker without an authorizer reports.
SUPPORTED_OPERATIONS: dict[ResourceType, tuple[Operation, ...]] = {
    ResourceType.TOPIC: (Operation.READ, Operation.WRITE, Operation.CREATE, Operation.DESCRIBE, Operation.DELETE,
                         Operation.ALTER, Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS),
    ResourceType.GROUP: (Operation.READ, Operation.DESCRIBE, Operation.DELETE),
    ResourceType.CLUSTER: (Operation.CREATE, Operation.CLUSTER_ACTION, Operation.DESCRIBE_CONFIGS,
                           Operation.ALTER_CONFIGS, Operation.IDEMPOTENT_WRITE, Operation.ALTER, Operation.DESCRIBE),
    ResourceType.TRANSACTIONAL_ID: (Operation.DESCRIBE, Operation.WRITE),
    ResourceType.DELEGATION_TOKEN: (Operation.DESCRIBE,),
    ResourceType.USER: (Operation.CREATE_TOKENS, Operation.DESCRIBE_TOKENS),
}

# The concrete values a stored ACL may hold (Kafka's AclControlManager.validateNewAcl refuses the others).
CONCRETE_RESOURCE_TYPES = frozenset(ResourceType) - {ResourceType.UNKNOWN, ResourceType.ANY}
CONCRETE_PATTERN_TYPES = frozenset({PatternType.LITERAL, PatternType.PREFIXED})
CONCRETE_OPERATIONS = frozenset(Operation) - {Operation.UNKNOWN, Operation.ANY}
CONCRETE_PERMISSIONS = frozenset({Permission.ALLOW, Permission.DENY})


def split_principal(principal: str) -> tuple[str, str] | None:
    """``User:alice`` -> ("User", "alice"); None when there is no ``:`` (Kafka's ``parseKafkaPrincipal``)."""
    kind, sep, name = principal.partition(":")
    if not sep or not principal:
        return None
    return kind, name


def invalid_reason(acl: AclBinding) -> str | None:
    """Why Kafka refuses to store ``acl`` with INVALID_REQUEST (AclControlManager.validateNewAcl, AclApis), or
    None when it may be stored."""
    if acl.resource_type not in CONCRETE_RESOURCE_TYPES:
        return f"Invalid resourceType {acl.resource_type.name}"
    if acl.pattern_type not in CONCRETE_PATTERN_TYPES:
        return f"Invalid patternType {acl.pattern_type.name}"
    if acl.operation not in CONCRETE_OPERATIONS:
        return f"Invalid operation {acl.operation.name}"
    if acl.permission not in CONCRETE_PERMISSIONS:
        return f"Invalid permissionType {acl.permission.name}"
    if acl.resource_type is ResourceType.CLUSTER and acl.name != CLUSTER_NAME:
        return f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
    if not acl.name:
        return "Resource name should not be empty"
    if split_principal(acl.principal) is None:
        return (f"Could not parse principal from `{acl.principal}` (no colon is present separating the principal "
                f"type from the principal name)")
    return None
