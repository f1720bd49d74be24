"""Who may do what, asked by every handler: ``allowed(ctx, operation, resource type, name)`` with the request's
principal and client host. Without an authorizer (``authorizer.class.name`` unset) everything is allowed, as in
Kafka. A refusal is logged with the principal, host, operation, resource and API."""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Protocol

from storage_engine.acl.model import SUPPORTED_OPERATIONS, Operation, ResourceType

if TYPE_CHECKING:
    from storage_engine.server.handlers.context import Ctx

logger = logging.getLogger(__name__)


class Authorizer(Protocol):
    def authorize(self, principal: str, host: str, operation: Operation, resource_type: ResourceType,
                  name: str) -> bool: ...

    def authorized_operations(self, principal: str, host: str, resource_type: ResourceType, name: str) -> int:
        """Kafka's bit field: bit ``op`` set for each operation of the resource type the principal may do."""
        ...

    def authorize_by_resource_type(self, principal: str, host: str, operation: Operation,
                                   resource_type: ResourceType) -> bool:
        """Kafka's ``authorizeByResourceType``: may the principal do ``operation`` on some resource of the type."""
        ...


# The operations each resource type has (Kafka's ``AclEntry.supportedOperations``): what authorized operations
# may contain, and what a broker without an authorizer reports.
SUPPORTED = SUPPORTED_OPERATIONS


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
        logger.info("refused: principal=%s host=%s operation=%s resource=%s:%s api=%s", ctx.principal,
                    ctx.client_host, operation.name, resource_type.name, name, ctx.api_name)
    return ok


def allowed_any(ctx: Ctx, operation: Operation, resource_type: ResourceType, *, log: bool = True) -> bool:
    """May the principal do ``operation`` on at least one resource of the type (Kafka's
    ``authorizeByResourceType``, e.g. InitProducerId's "WRITE on any topic" without IDEMPOTENT_WRITE)?"""
    authorizer = ctx.broker.authorizer
    if authorizer is None:
        return True
    ok = authorizer.authorize_by_resource_type(ctx.principal, ctx.client_host, operation, resource_type)
    if not ok and log:
        logger.info("refused: principal=%s host=%s operation=%s resource=%s:(any) api=%s", ctx.principal,
                    ctx.client_host, operation.name, resource_type.name, ctx.api_name)
    return ok


def authorized_operations(ctx: Ctx, resource_type: ResourceType, name: str) -> int:
    """The bit field a response's ``authorized_operations`` carries when the client asked for it."""
    authorizer = ctx.broker.authorizer
    if authorizer is None:
        return bits(SUPPORTED[resource_type])
    return authorizer.authorized_operations(ctx.principal, ctx.client_host, resource_type, name)
