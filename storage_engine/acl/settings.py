"""The broker's authorization keys, read at start: ``authorizer.class.name`` (empty: no authorizer, everything
allowed), ``super.users`` (``User:alice;User:bob``) and ``allow.everyone.if.no.acl.found`` (default false)."""
from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from storage_engine.acl.authorizer import StandardAuthorizer, parse_super_users
from storage_engine.acl.store import AclStore
from storage_engine.errors import ConfigError

logger = logging.getLogger(__name__)


def open_authorizer(server: Mapping[str, Any], log_dirs: Sequence[str]) -> tuple[AclStore, StandardAuthorizer] | None:
    """The ACL store and the authorizer over it, or None when ``authorizer.class.name`` is empty. A damaged ACL
    file or a bad key is a :class:`ConfigError` naming it."""
    if not server.get("authorizer.class.name"):
        if server.get("super.users"):
            logger.warning("super.users is set but authorizer.class.name is empty: no authorizer, everything is "
                           "allowed to everyone")
        return None
    try:
        super_users = parse_super_users(server.get("super.users"))
    except ValueError as exc:
        raise ConfigError(f"super.users = {server.get('super.users')!r}: {exc}") from None
    store = AclStore(log_dirs)
    allow = bool(server.get("allow.everyone.if.no.acl.found"))
    logger.info("authorizer %s: super.users=%s, allow.everyone.if.no.acl.found=%s", server["authorizer.class.name"],
                ",".join(sorted(super_users)) or "(none)", str(allow).lower())
    return store, StandardAuthorizer(store.current, super_users, allow)
