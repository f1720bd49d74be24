"""The ACL APIs, as Kafka's ``AclApis``: DescribeAcls (29), CreateAcls (30) and DeleteAcls (31), v1-3 (Kafka 4.x's
range; v0 is gone from it).

Each first checks Kafka's operation on the cluster (DESCRIBE for DescribeAcls, ALTER for the other two):
refused, the whole request gets CLUSTER_AUTHORIZATION_FAILED. Without an authorizer (``authorizer.class.name``
empty) each answers SECURITY_DISABLED. CreateAcls refuses, one creation at a time, what Kafka's
``AclApis``/``AclControlManager.validateNewAcl`` refuse with INVALID_REQUEST: a resource or pattern type,
operation or permission that is not concrete (ANY, MATCH, UNKNOWN or a code Kafka does not have), a CLUSTER
resource not named ``kafka-cluster``, an empty name; and a principal that is not ``type:name``. An ACL already
stored is a success and is not stored twice. DeleteAcls answers each filter with the ACLs it removed; a filter
with an UNKNOWN element gets INVALID_REQUEST (``validateFilter``), as does a DescribeAcls filter with one (Kafka
refuses those when it parses the request). The valid changes of a request are written to the ACL file in one
durable rewrite before the answer (:mod:`storage_engine.acl.store`)."""
from __future__ import annotations

import logging
from typing import Any, TypeVar

from storage_engine.acl.filters import AclBindingFilter
from storage_engine.acl.model import (CLUSTER_NAME, AclBinding, Operation, PatternType, Permission, ResourceType,
                                      invalid_reason)
from storage_engine.errors import StorageError
from storage_engine.server import access
from storage_engine.server.errors import ErrorCode
from storage_engine.server.handlers.context import Ctx
from storage_engine.server.responses.acls import (AclCreationResult, CreateAclsResponse, DeleteAclsFilterResult,
                                                  DeleteAclsMatchingAcl, DeleteAclsResponse, DescribeAclsResource,
                                                  DescribeAclsResponse)

logger = logging.getLogger(__name__)
E = TypeVar("E", ResourceType, PatternType, Operation, Permission)

NO_AUTHORIZER = "No Authorizer is configured on the broker"
NOT_AUTHORIZED = "Cluster authorization failed."


def _enum(kind: type[E], code: int) -> E:
    """Kafka's ``fromCode``: a code it does not have is UNKNOWN."""
    try:
        return kind(int(code))
    except ValueError:
        return kind(0)


def _filter(f: Any) -> AclBindingFilter:
    """A DescribeAcls request or a DeleteAcls filter (the same fields)."""
    return AclBindingFilter(_enum(ResourceType, f.resource_type_filter), f.resource_name_filter,
                            _enum(PatternType, f.pattern_type_filter), f.principal_filter, f.host_filter,
                            _enum(Operation, f.operation), _enum(Permission, f.permission_type))


def _binding(c: Any) -> AclBinding:
    return AclBinding(_enum(ResourceType, c.resource_type), c.resource_name, _enum(PatternType, c.resource_pattern_type),
                      c.principal, c.host, _enum(Operation, c.operation), _enum(Permission, c.permission_type))


async def describe_acls(ctx: Ctx, body: Any) -> DescribeAclsResponse:
    def error(code: ErrorCode, message: str) -> DescribeAclsResponse:
        return {"throttle_time": 0, "error_code": code, "error_message": message, "resources": ()}
    if not access.allowed(ctx, Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        return error(ErrorCode.cluster_authorization_failed, NOT_AUTHORIZED)
    store = ctx.broker.acls
    if store is None:
        return error(ErrorCode.security_disabled, NO_AUTHORIZER)
    flt = _filter(body)
    unknown = flt.unknown_element()
    if unknown is not None:
        return error(ErrorCode.invalid_request, f"DescribeAcls: {unknown}")
    grouped: dict[tuple[ResourceType, str, PatternType], list[AclBinding]] = {}
    for acl in store.describe(flt):
        grouped.setdefault((acl.resource_type, acl.name, acl.pattern_type), []).append(acl)
    resources: list[DescribeAclsResource] = [
        {"resource_type": int(rt), "resource_name": name, "pattern_type": int(pt),
         "acls": tuple({"principal": a.principal, "host": a.host, "operation": int(a.operation),
                        "permission_type": int(a.permission)} for a in acls)}
        for (rt, name, pt), acls in grouped.items()]
    return {"throttle_time": 0, "error_code": ErrorCode.none, "error_message": None, "resources": tuple(resources)}


async def create_acls(ctx: Ctx, body: Any) -> CreateAclsResponse:
    creations = list(body.creations)

    def all_fail(code: ErrorCode, message: str) -> CreateAclsResponse:
        return {"throttle_time": 0, "results": tuple({"error_code": code, "error_message": message}
                                                     for _ in creations)}
    if not access.allowed(ctx, Operation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
        return all_fail(ErrorCode.cluster_authorization_failed, NOT_AUTHORIZED)
    store = ctx.broker.acls
    if store is None:
        return all_fail(ErrorCode.security_disabled, "No Authorizer is configured.")
    results: list[AclCreationResult] = []
    valid: list[AclBinding] = []
    for c in creations:
        acl = _binding(c)
        reason = invalid_reason(acl)
        if reason is None:
            valid.append(acl)
            results.append({"error_code": ErrorCode.none, "error_message": None})
        else:
            results.append({"error_code": ErrorCode.invalid_request, "error_message": reason})
    if valid:
        try:
            await ctx.broker.call(store.create, valid)
        except StorageError as exc:
            logger.error("cannot store ACLs: %s", exc)
            results = [r if r["error_code"] != ErrorCode.none else
                       {"error_code": ErrorCode.unknown_server_error, "error_message": f"cannot store the ACLs: {exc}"}
                       for r in results]
        else:
            logger.info("ACLs created by %s from %s: %s", ctx.principal, ctx.client_host,
                        "; ".join(_text(a) for a in valid))
    return {"throttle_time": 0, "results": tuple(results)}


async def delete_acls(ctx: Ctx, body: Any) -> DeleteAclsResponse:
    filters = list(body.filters)

    def all_fail(code: ErrorCode, message: str) -> DeleteAclsResponse:
        return {"throttle_time": 0, "filter_results": tuple(
            {"error_code": code, "error_message": message, "matching_acls": ()} for _ in filters)}
    if not access.allowed(ctx, Operation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
        return all_fail(ErrorCode.cluster_authorization_failed, NOT_AUTHORIZED)
    store = ctx.broker.acls
    if store is None:
        return all_fail(ErrorCode.security_disabled, "No Authorizer is configured.")
    parsed = [_filter(f) for f in filters]
    valid = [f for f in parsed if f.unknown_element() is None]
    try:
        matched = await ctx.broker.call(store.delete, valid) if valid else []
    except StorageError as exc:
        logger.error("cannot delete ACLs: %s", exc)
        return all_fail(ErrorCode.unknown_server_error, f"cannot store the ACLs: {exc}")
    by_filter = iter(matched)
    out: list[DeleteAclsFilterResult] = []
    for f in parsed:
        unknown = f.unknown_element()
        if unknown is not None:
            out.append({"error_code": ErrorCode.invalid_request, "error_message": f"DeleteAcls: {unknown}",
                        "matching_acls": ()})
            continue
        hits = next(by_filter)
        matching: list[DeleteAclsMatchingAcl] = [
            {"error_code": ErrorCode.none, "error_message": None, "resource_type": int(a.resource_type),
             "resource_name": a.name, "pattern_type": int(a.pattern_type), "principal": a.principal,
             "host": a.host, "operation": int(a.operation), "permission_type": int(a.permission)} for a in hits]
        out.append({"error_code": ErrorCode.none, "error_message": None, "matching_acls": tuple(matching)})
    removed = {a for hits in matched for a in hits}
    if removed:
        logger.info("ACLs deleted by %s from %s: %s", ctx.principal, ctx.client_host,
                    "; ".join(_text(a) for a in removed))
    return {"throttle_time": 0, "filter_results": tuple(out)}


def _text(acl: AclBinding) -> str:
    return (f"{acl.permission.name} {acl.principal}@{acl.host} {acl.operation.name} on "
            f"{acl.resource_type.name}:{acl.pattern_type.name}:{acl.name}")
