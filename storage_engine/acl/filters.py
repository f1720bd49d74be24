"""Kafka's ``AclBindingFilter``: which ACLs a DescribeAcls or DeleteAcls request selects.

A filter field left open (resource type ANY, name None, pattern type ANY, principal or host None, operation
ANY, permission ANY) matches every value. Pattern type MATCH selects the ACLs that would apply to the literal
resource ``name``: the literal ACL of that name, the wildcard literal ``*`` and every PREFIXED ACL whose name
starts ``name`` (``ResourcePatternFilter.matches``). Principal and host are compared as given: ``User:*`` in a
filter selects the wildcard ACLs only, as in Kafka (``AccessControlEntryFilter.matches``)."""
from __future__ import annotations

from dataclasses import dataclass

from storage_engine.acl.model import WILDCARD, AclBinding, Operation, PatternType, Permission, ResourceType


@dataclass(frozen=True)
class AclBindingFilter:
    resource_type: ResourceType
    name: str | None
    pattern_type: PatternType
    principal: str | None
    host: str | None
    operation: Operation
    permission: Permission

    def unknown_element(self) -> str | None:
        """The UNKNOWN field a request must not carry (Kafka refuses such a filter), or None."""
        for field, value in (("resource type", self.resource_type), ("pattern type", self.pattern_type),
                             ("operation", self.operation), ("permission type", self.permission)):
            if value.name == "UNKNOWN":
                return f"the filter's {field} is UNKNOWN"
        return None

    def matches_pattern(self, acl: AclBinding) -> bool:
        if self.resource_type is not ResourceType.ANY and self.resource_type is not acl.resource_type:
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH) and self.pattern_type is not acl.pattern_type:
            return False
        if self.name is None:
            return True
        if self.pattern_type is PatternType.ANY or self.pattern_type is acl.pattern_type:
            return self.name == acl.name
        # MATCH: the ACLs that apply to the literal resource ``name``
        if acl.pattern_type is PatternType.LITERAL:
            return self.name == acl.name or acl.name == WILDCARD
        if acl.pattern_type is PatternType.PREFIXED:
            return self.name.startswith(acl.name)
        return False

    def matches_entry(self, acl: AclBinding) -> bool:
        if self.principal is not None and self.principal != acl.principal:
            return False
        if self.host is not None and self.host != acl.host:
            return False
        if self.operation is not Operation.ANY and self.operation is not acl.operation:
            return False
        return self.permission is Permission.ANY or self.permission is acl.permission

    def matches(self, acl: AclBinding) -> bool:
        return self.matches_pattern(acl) and self.matches_entry(acl)


ANY_FILTER = AclBindingFilter(ResourceType.ANY, None, PatternType.ANY, None, None, Operation.ANY, Permission.ANY)
