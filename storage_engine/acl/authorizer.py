"""The decision, with the semantics of Kafka's ``StandardAuthorizer`` (``StandardAuthorizerData``):

* a principal named in ``super.users`` may do everything, whatever the ACLs say;
* the ACLs that apply to a resource are those of its type whose pattern selects its name: the LITERAL ACL of
  that name, the LITERAL wildcard ``*``, and every PREFIXED ACL whose name starts the resource's name;
* of those, an ACL counts for the request when its principal is the request's or ``User:*``, its host is the
  client's IP or ``*``, and its operation is the one asked, or ALL, or (ALLOW only) one that implies it: READ,
  WRITE, DELETE and ALTER imply DESCRIBE, ALTER_CONFIGS implies DESCRIBE_CONFIGS. A DENY ACL counts only for its
  own operation or ALL (a DENY of READ does not deny DESCRIBE);
* a DENY that counts refuses, whatever allows; else an ALLOW that counts allows;
* else, when no ACL at all applies to the resource (whatever their principals, hosts or operations),
  ``allow.everyone.if.no.acl.found`` decides (default: refuse); when some do, but none for this request, refused.

``authorized_operations`` is Kafka's bit field (``AuthHelper.authorizedOperations``): bit ``op`` for each
operation of the resource type (``SUPPORTED_OPERATIONS``) the principal may do.
``authorize_by_resource_type`` is Kafka's ``Authorizer.authorizeByResourceType``: may the principal do the
operation on at least one resource of the type (InitProducerId's "WRITE on any topic")?

The ACLs come from a provider (the store's current set, reloaded when the file changes); the index over them is
rebuilt only when the provider hands a different set."""
from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field

from storage_engine.acl.model import (
    SUPPORTED_OPERATIONS,
    WILDCARD,
    AclBinding,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    split_principal,
)

WILDCARD_PRINCIPAL = "User:*"
CLASS_NAMES = ("org.apache.kafka.metadata.authorizer.StandardAuthorizer",
               # ZooKeeper-era Kafka's name (removed in Kafka 4.0): same semantics for a config carried over
               "kafka.security.authorizer.AclAuthorizer")

_MAX_DECIDED = 100_000     # decisions remembered; past it the memo starts afresh
_Question = tuple[str, str, Operation, ResourceType, str]    # principal, host, operation, resource type, name

_IMPLIES_DESCRIBE = frozenset({Operation.DESCRIBE, Operation.READ, Operation.WRITE, Operation.DELETE,
                               Operation.ALTER})
_IMPLIES_DESCRIBE_CONFIGS = frozenset({Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS})


def parse_super_users(text: str | None) -> frozenset[str]:
    """``User:alice;User:bob`` (Kafka's ``super.users``): each entry trimmed, empty ones skipped; an entry
    without ``type:name`` is a ValueError naming it."""
    out = set()
    for raw in (text or "").split(";"):
        entry = raw.strip()
        if not entry:
            continue
        if split_principal(entry) is None:
            raise ValueError(f"{entry!r} is not a principal of the form <type>:<name> (e.g. User:alice)")
        out.add(entry)
    return frozenset(out)


def _counts(acl: AclBinding, principal: str, host: str, operation: Operation) -> Permission | None:
    """Kafka's ``findResult``: the ACL's permission if it counts for this request, else None."""
    if acl.principal != principal and acl.principal != WILDCARD_PRINCIPAL:
        return None
    if acl.host != WILDCARD and acl.host != host:
        return None
    if acl.operation is not Operation.ALL:
        if acl.permission is Permission.ALLOW:
            if operation is Operation.DESCRIBE:
                if acl.operation not in _IMPLIES_DESCRIBE:
                    return None
            elif operation is Operation.DESCRIBE_CONFIGS:
                if acl.operation not in _IMPLIES_DESCRIBE_CONFIGS:
                    return None
            elif operation is not acl.operation:
                return None
        elif operation is not acl.operation:
            return None
    return acl.permission


@dataclass
class _Index:
    """The ACLs of one resource type: LITERAL by name, PREFIXED by prefix (and the lengths the prefixes have, so
    a lookup tries only those)."""
    literal: dict[str, list[AclBinding]] = field(default_factory=dict)
    prefixed: dict[str, list[AclBinding]] = field(default_factory=dict)
    prefix_lengths: tuple[int, ...] = ()

    def applying(self, name: str) -> list[AclBinding]:
        out = list(self.literal.get(name, ()))
        if name != WILDCARD:
            out.extend(self.literal.get(WILDCARD, ()))
        for length in self.prefix_lengths:
            if length > len(name):
                break
            out.extend(self.prefixed.get(name[:length], ()))
        return out


def _build(acls: Iterable[AclBinding]) -> dict[ResourceType, _Index]:
    index: dict[ResourceType, _Index] = {}
    for acl in acls:
        entry = index.setdefault(acl.resource_type, _Index())
        if acl.pattern_type is PatternType.LITERAL:
            entry.literal.setdefault(acl.name, []).append(acl)
        elif acl.pattern_type is PatternType.PREFIXED:
            entry.prefixed.setdefault(acl.name, []).append(acl)
    for entry in index.values():
        entry.prefix_lengths = tuple(sorted({len(p) for p in entry.prefixed}))
    return index


class StandardAuthorizer:
    """Implements :class:`storage_engine.server.access.Authorizer` over the ACLs ``acls()`` returns."""

    def __init__(self, acls: Callable[[], Sequence[AclBinding]], super_users: Collection[str] = (),
                 allow_if_no_acl: bool = False):
        self._acls = acls
        self.super_users = frozenset(super_users)
        self.allow_if_no_acl = allow_if_no_acl
        self._mutex = threading.Lock()
        # (the ACL set, its index, the decisions taken over it): swapped whole when the set changes, so a decision
        # is never remembered against a set it was not taken over. Metadata asks the same questions every request.
        self._state: tuple[Sequence[AclBinding] | None, dict[ResourceType, _Index], dict[_Question, bool]] = (
            None, {}, {})

    def _current(self) -> tuple[dict[ResourceType, _Index], dict[_Question, bool]]:
        acls = self._acls()
        state = self._state
        if acls is not state[0]:
            with self._mutex:
                state = self._state
                if acls is not state[0]:
                    state = (acls, _build(acls), {})
                    self._state = state
        return state[1], state[2]

    def authorize(self, principal: str, host: str, operation: Operation, resource_type: ResourceType,
                  name: str) -> bool:
        if principal in self.super_users:
            return True
        index, decided = self._current()
        key = (principal, host, operation, resource_type, name)
        known = decided.get(key)
        if known is None:
            known = self._decide(index.get(resource_type), principal, host, operation, name)
            if len(decided) >= _MAX_DECIDED:
                decided.clear()
            decided[key] = known
        return known

    def _decide(self, index: _Index | None, principal: str, host: str, operation: Operation, name: str) -> bool:
        if index is None:
            return self.allow_if_no_acl
        found_any = allowed = False
        for acl in index.applying(name):
            found_any = True
            result = _counts(acl, principal, host, operation)
            if result is Permission.DENY:
                return False
            if result is Permission.ALLOW:
                allowed = True
        if allowed:
            return True
        return self.allow_if_no_acl if not found_any else False

    def authorized_operations(self, principal: str, host: str, resource_type: ResourceType, name: str) -> int:
        out = 0
        for op in SUPPORTED_OPERATIONS.get(resource_type, ()):
            if self.authorize(principal, host, op, resource_type, name):
                out |= 1 << int(op)
        return out

    def authorize_by_resource_type(self, principal: str, host: str, operation: Operation,
                                   resource_type: ResourceType) -> bool:
        """Kafka's ``Authorizer.authorizeByResourceType``: allowed on some resource of the type. A super user
        (or a broker allowing when no ACL is found, with none of the type) passes the check of a resource no ACL
        names; else an ALLOW (for the operation itself or ALL) of a LITERAL or PREFIXED name that no DENY of the
        same literal name or of a prefix of it covers; a DENY of the literal ``*`` refuses at once."""
        if self.authorize(principal, host, operation, resource_type, "hardcode"):
            return True
        index = self._current()[0].get(resource_type)
        if index is None:
            return False
        deny_literal: set[str] = set()
        deny_prefix: set[str] = set()
        allow: list[tuple[PatternType, str]] = []
        wildcard_allow = False
        for pattern, by_name in ((PatternType.LITERAL, index.literal), (PatternType.PREFIXED, index.prefixed)):
            for name, acls in by_name.items():
                for acl in acls:
                    if acl.host != host and acl.host != WILDCARD:
                        continue
                    if acl.principal != principal and acl.principal != WILDCARD_PRINCIPAL:
                        continue
                    if acl.operation is not operation and acl.operation is not Operation.ALL:
                        continue
                    if acl.permission is Permission.DENY:
                        if pattern is PatternType.LITERAL:
                            if name == WILDCARD:
                                return False
                            deny_literal.add(name)
                        else:
                            deny_prefix.add(name)
                    elif acl.permission is Permission.ALLOW:
                        if pattern is PatternType.LITERAL and name == WILDCARD:
                            wildcard_allow = True    # decided after the loop: a DENY of ``*`` still refuses
                        else:
                            allow.append((pattern, name))
        if wildcard_allow:
            return True
        for pattern, name in allow:
            if pattern is PatternType.LITERAL and name in deny_literal:
                continue
            if not any(name[:end] in deny_prefix for end in range(1, len(name) + 1)):
                return True
        return False
