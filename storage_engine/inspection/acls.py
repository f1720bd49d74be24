"""The ACLs as the broker's authorizer reads them, for people and machines (``python -m storage_engine acls``
and the Storage view's ACL page): read-only, from :func:`storage_engine.acl.store.read_acls`, with the
authorizer's settings beside them (with ``authorizer.class.name`` empty the broker enforces none of them).

A damaged ACL file is the store's :class:`~storage_engine.errors.ConfigError` naming the file, never an empty
list: an empty list would read as "no ACLs", which with ``allow.everyone.if.no.acl.found`` means everything is
allowed."""
from __future__ import annotations

import os
from typing import Any

from storage_engine.acl.model import AclBinding, ResourceType
from storage_engine.config import StorageConfig

# The order of a listing: by resource, then who, then what (Kafka's tools print ACLs grouped by resource).
_COLUMNS = ("resource_type", "pattern_type", "name", "principal", "host", "operation", "permission")


def acl_dict(acl: AclBinding) -> dict[str, str]:
    """One ACL with Kafka's names for its values (``TOPIC``, ``PREFIXED``, ``READ``, ``ALLOW``)."""
    return {"resource_type": acl.resource_type.name, "pattern_type": acl.pattern_type.name, "name": acl.name,
            "principal": acl.principal, "host": acl.host, "operation": acl.operation.name,
            "permission": acl.permission.name}


def _setting(config: StorageConfig, key: str) -> Any:
    return config.server.get(key)


def acl_listing(config: StorageConfig, *, principal: str | None = None,
                resource_type: str | None = None) -> dict[str, Any]:
    """``{"file", "exists", "authorizer": {...}, "total", "acls": [...]}``: every stored ACL (``total`` counts
    them), those of ``principal`` and/or ``resource_type`` (a name such as ``TOPIC``, any case) in ``acls``. An
    unknown resource type is a ``ValueError`` naming the known ones."""
    from storage_engine.acl.store import path_in, read_acls

    wanted_type: ResourceType | None = None
    if resource_type:
        try:
            wanted_type = ResourceType[resource_type.strip().upper().replace("-", "_")]
        except KeyError:
            known = ", ".join(t.name for t in ResourceType if t not in (ResourceType.UNKNOWN, ResourceType.ANY))
            raise ValueError(f"unknown resource type {resource_type!r}; one of {known}") from None
    path = path_in(config.log_dirs)
    acls = read_acls(config.log_dirs)
    rows = sorted((acl_dict(a) for a in acls
                   if (principal is None or a.principal == principal)
                   and (wanted_type is None or a.resource_type == wanted_type)),
                  key=lambda d: tuple(d[c] for c in _COLUMNS))
    class_name = _setting(config, "authorizer.class.name") or ""
    return {"file": path, "exists": os.path.exists(path), "total": len(acls), "acls": rows,
            "authorizer": {"class_name": class_name, "enabled": bool(class_name),
                           "super_users": _setting(config, "super.users") or "",
                           "allow_everyone_if_no_acl_found": bool(_setting(config,
                                                                           "allow.everyone.if.no.acl.found"))}}
