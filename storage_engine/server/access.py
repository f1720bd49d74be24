"""Who may do what, asked by every handler: ``allowed(ctx, operation, resource type, name)`` with the request's
principal and client host. Without an authorizer (``authorizer.class.name`` unset) everything is allowed, as in
Kafka. A refusal is logged with the principal, host, operation, resource and API."""
from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Protocol

from storage_engine.acl.model import (CLUSTER_NAME, WILDCARD, AclBinding, Operation, PatternType, Permission,
                                      ResourceType)

if TYPE_CHECKING:
    from storage_engine.server.handlers.context import Ctx

logger = logging.getLogger(__name__)


class Authorizer(Protocol):
    def authorize(self, principal: str, host: str, operation: Operation, resource_type: ResourceType,
                  name: str) -> bool: ...

    def authorized_operations(self, principal: str, host: str, resource_type: ResourceType, name: str) -> int:
        """Kafka's bit field: bit ``op`` set for each operation of the resource type the principal may do."""
        ...


# The operations each resource type has (Kafka's ``AclEntry.supportedOperations``): what authorized operations
# may contain, and what a broker without an authorizer reports.
SUPPORTED: dict[ResourceType, tuple[Operation, ...]] = {
    ResourceType.TOPIC: (Operation.READ, Operation.WRITE, Operation.CREATE, Operation.DESCRIBE, Operation.DELETE,
                         Operation.ALTER, Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS),
    ResourceType.GROUP: (Operation.READ, Operation.DESCRIBE, Operation.DELETE),
    ResourceType.CLUSTER: (Operation.CREATE, Operation.CLUSTER_ACTION, Operation.DESCRIBE_CONFIGS,
                           Operation.ALTER_CONFIGS, Operation.IDEMPOTENT_WRITE, Operation.ALTER, Operation.DESCRIBE),
    ResourceType.TRANSACTIONAL_ID: (Operation.DESCRIBE, Operation.WRITE),
    ResourceType.DELEGATION_TOKEN: (Operation.DESCRIBE,),
    ResourceType.USER: (Operation.CREATE_TOKENS, Operation.DESCRIBE_TOKENS),
}


def bits(operations: tuple[Operation, ...] | list[Operation]) -> int:
    out = 0
    for op in operations:
        out |= 1 << int(op)
    return out


def allowed(ctx: Ctx, operation: Operation, resource_type: ResourceType, name: str, *, log: bool = True) -> bool:
    """May the request's principal do ``operation`` on the resource? ``log=False`` for checks that only filter
    (Metadata hiding topics the principal may not describe), as Kafka logs those at debug."""
    authorizer = ctx.broker.authorizer
    if authorizer is None:
        return True
    ok = authorizer.authorize(ctx.principal, ctx.client_host, operation, resource_type, name)
    if not ok and log:
        log_refusal(ctx, operation, resource_type, name)
    return ok


def log_refusal(ctx: Ctx, operation: Operation, resource_type: ResourceType, name: str) -> None:
    """The one line every refusal leaves (for a check made with ``log=False`` that turned out to decide)."""
    logger.info("refused: principal=%s host=%s operation=%s resource=%s:%s api=%s", ctx.principal,
                ctx.client_host, operation.name, resource_type.name, name, ctx.api_name)


def authorized_operations(ctx: Ctx, resource_type: ResourceType, name: str) -> int:
    """The bit field a response's ``authorized_operations`` carries when the client asked for it."""
    authorizer = ctx.broker.authorizer
    if authorizer is None:
        return bits(SUPPORTED[resource_type])
    return authorizer.authorized_operations(ctx.principal, ctx.client_host, resource_type, name)


def allowed_names(ctx: Ctx, operation: Operation, resource_type: ResourceType, names: Iterable[str | None], *,
                  log: bool = True) -> set[str]:
    """The names among ``names`` the principal may do ``operation`` on, each asked once (Kafka's
    ``AuthHelper.filterByAuthorized``); None entries (an unresolved topic id) are never allowed."""
    return {name for name in dict.fromkeys(n for n in names if n is not None)
            if allowed(ctx, operation, resource_type, name, log=log)}


def allowed_cluster(ctx: Ctx, operation: Operation, *, log: bool = True) -> bool:
    """``operation`` on the cluster resource (``kafka-cluster``)."""
    return allowed(ctx, operation, ResourceType.CLUSTER, CLUSTER_NAME, log=log)


def allowed_by_resource_type(ctx: Ctx, operation: Operation, resource_type: ResourceType) -> bool:
    """May the principal do ``operation`` on at least one resource of the type (Kafka's
    ``Authorizer.authorizeByResourceType``: InitProducerId without a transactional id accepts WRITE on any topic
    in place of IDEMPOTENT_WRITE on the cluster)? An authorizer that answers it itself
    (``authorize_by_resource_type``) is asked; otherwise Kafka's default is computed over its ACLs
    (``acl_bindings()``)."""
    authorizer = ctx.broker.authorizer
    if authorizer is None:
        return True
    own = getattr(authorizer, "authorize_by_resource_type", None)
    if own is not None:
        return bool(own(ctx.principal, ctx.client_host, operation, resource_type))
    # Kafka checks a made-up name first, so super users (and allow.everyone.if.no.acl.found) pass.
    if authorizer.authorize(ctx.principal, ctx.client_host, operation, resource_type, "hardcode"):
        return True
    bindings = getattr(authorizer, "acl_bindings", None)
    if bindings is None:
        raise TypeError(f"{type(authorizer).__name__} has neither authorize_by_resource_type nor acl_bindings")
    return by_resource_type(bindings(), ctx.principal, ctx.client_host, operation, resource_type)


def by_resource_type(bindings: Iterable[AclBinding], principal: str, host: str, operation: Operation,
                     resource_type: ResourceType) -> bool:
    """Kafka's default ``authorizeByResourceType`` after its super-user check: the ACLs of the principal (or
    ``User:*``) from the host (or ``*``) naming the operation (or ALL) on the resource type; a literal ``*`` DENY
    refuses, a literal ``*`` ALLOW allows, else some ALLOW whose name is neither denied literally (for a literal)
    nor by a PREFIXED DENY that is a prefix of it."""
    deny_literal: set[str] = set()
    deny_prefixed: set[str] = set()
    allows: list[tuple[PatternType, str]] = []
    wildcard_allow = False
    for b in bindings:
        if b.resource_type != resource_type:
            continue
        if b.host not in (host, WILDCARD) or b.principal not in (principal, "User:*"):
            continue
        if b.operation not in (operation, Operation.ALL):
            continue
        if b.permission == Permission.DENY:
            if b.pattern_type == PatternType.LITERAL:
                if b.name == WILDCARD:
                    return False
                deny_literal.add(b.name)
            elif b.pattern_type == PatternType.PREFIXED:
                deny_prefixed.add(b.name)
            continue
        if b.permission != Permission.ALLOW:
            continue
        if b.pattern_type == PatternType.LITERAL and b.name == WILDCARD:
            wildcard_allow = True
        elif b.pattern_type in (PatternType.LITERAL, PatternType.PREFIXED):
            allows.append((b.pattern_type, b.name))
    if wildcard_allow:
        return True
    for pattern, name in allows:
        if pattern == PatternType.LITERAL and name in deny_literal:
            continue
        if not any(name[:i] in deny_prefixed for i in range(1, len(name) + 1)):
            return True
    return False
