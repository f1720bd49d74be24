"""A classic group's states and members (Kafka's ``ClassicGroupState`` and ``ClassicGroup``).

Each state names the states a group may enter it from, and :meth:`Group.transition_to` is the only way a group's
state changes: it refuses any other move with :class:`IllegalStateTransition`, naming the group and both states.
The moves, as Kafka allows them:

* **Empty** <- PreparingRebalance (the last member left, or none rejoined);
* **PreparingRebalance** <- Empty, Stable, CompletingRebalance (a join, a leave, an expired session);
* **CompletingRebalance** <- PreparingRebalance (every known member rejoined, or the rebalance timeout passed);
* **Stable** <- CompletingRebalance (the leader's assignment is written);
* **Dead** <- any state (the group is deleted; its tombstones are written first).

A group loaded from ``__consumer_offsets`` starts in the state its last record implies (Stable with its members,
else Empty), as Kafka constructs it; that is construction, not a transition.

Times are epoch milliseconds from the broker's clock (:mod:`storage_engine.clock`), never read here.
"""
from __future__ import annotations

import asyncio
import enum
from dataclasses import dataclass, field
from typing import Any, Required, TypedDict

from kio.schema.errors import ErrorCode

from storage_engine.server.groups import records as rec
from storage_engine.server.responses.groups import JoinGroupResponseMember


class IllegalStateTransition(RuntimeError):
    """A coordinator tried a state change its state machine does not allow: a bug, never a client's error."""

    def __init__(self, what: str, current: enum.Enum, target: enum.Enum, allowed: frozenset[Any]):
        names = ", ".join(sorted(_name(s) for s in allowed))
        super().__init__(f"{what} cannot move from {_name(current)} to {_name(target)}: {_name(target)} is "
                         f"entered only from {names}")
        self.current, self.target = current, target


def _name(state: enum.Enum) -> str:
    """Kafka's name of the state (``PreparingRebalance``, ``PrepareCommit``)."""
    return str(getattr(state, "display", state.value))


class GroupState(enum.Enum):
    """The classic protocol's states; the value is the name ListGroups and DescribeGroups report."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"

    @property
    def valid_previous(self) -> frozenset[GroupState]:
        return _GROUP_PREVIOUS[self]

    def __str__(self) -> str:
        return self.value


EMPTY, PREPARING, COMPLETING = GroupState.EMPTY, GroupState.PREPARING_REBALANCE, GroupState.COMPLETING_REBALANCE
STABLE, DEAD = GroupState.STABLE, GroupState.DEAD

_GROUP_PREVIOUS: dict[GroupState, frozenset[GroupState]] = {
    EMPTY: frozenset({PREPARING}),
    PREPARING: frozenset({EMPTY, STABLE, COMPLETING}),
    COMPLETING: frozenset({PREPARING}),
    STABLE: frozenset({COMPLETING}),
    DEAD: frozenset(GroupState),
}


class JoinResult(TypedDict, total=False):
    """The coordinator's answer to a JoinGroup: the error, and once the join completes the generation, the
    group's protocol, its leader, the member's id and (to the leader) every member; the handler gives the
    response's defaults for what an error leaves out."""
    error_code: Required[ErrorCode]
    generation_id: int
    protocol_type: str | None
    protocol_name: str | None
    leader: str | None
    member_id: str
    members: tuple[JoinGroupResponseMember, ...]
    skip_assignment: bool      # v9+: a static leader back in a Stable group gets the members but keeps the assignment


class SyncResult(TypedDict, total=False):
    """The coordinator's answer to a SyncGroup: the error, and once the group is Stable its protocol and the
    member's assignment."""
    error_code: Required[ErrorCode]
    protocol_type: str | None
    protocol_name: str | None
    assignment: bytes


@dataclass
class Member:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    join_waiter: asyncio.Future[JoinResult] | None = None
    sync_waiter: asyncio.Future[SyncResult] | None = None
    deadline_ms: int = 0                    # the session's end: a heartbeat (or any request of the member) moves it

    def touch(self, now_ms: int) -> None:
        self.deadline_ms = now_ms + self.session_timeout_ms

    def metadata(self, protocol: str | None) -> bytes:
        return next((m for name, m in self.protocols if name == protocol), b"")

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        """Kafka's ``ClassicGroupMember.matches``: the same protocols, in the same order, with the same metadata."""
        return list(self.protocols) == list(protocols)


@dataclass
class Group:
    group_id: str
    _state: GroupState = EMPTY
    state_ms: int = 0                                         # when the group entered its state (epoch ms)
    protocol_type: str | None = None
    protocol: str | None = None
    generation: int = 0
    leader: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    pending: set[str] = field(default_factory=set)           # member ids handed out with MEMBER_ID_REQUIRED
    offsets: dict[tuple[str, int], rec.OffsetValue] = field(default_factory=dict)
    # the __consumer_offsets offset of the record each committed offset came from: a transaction's offset commit
    # counts at its COMMIT marker only if no later plain commit of the partition came first (Kafka's rule)
    positions: dict[tuple[str, int], int] = field(default_factory=dict)
    rebalance: asyncio.Task[None] | None = None
    not_before_ms: int = 0                                    # the initial rebalance delay's end
    rebalance_deadline_ms: int = 0                            # when members that did not rejoin are dropped
    # a state being written (Kafka's pending transition): Dead while the deletion's tombstones are appended, so
    # requests meanwhile see the group gone and begin a new one of the same name
    pending_state: GroupState | None = None

    @property
    def state(self) -> GroupState:
        return self._state

    @property
    def gone(self) -> bool:
        """Deleted, or being deleted."""
        return self._state == DEAD or self.pending_state == DEAD

    def transition_to(self, target: GroupState, now_ms: int) -> None:
        """The one way the state changes: refused (:class:`IllegalStateTransition`) unless ``target`` may be
        entered from the current state."""
        if self._state not in target.valid_previous:
            raise IllegalStateTransition(f"group {self.group_id!r}", self._state, target, target.valid_previous)
        self._state = target
        self.state_ms = now_ms

    def prepare_transition(self, target: GroupState) -> None:
        """Check ``target`` and hold it as pending while its record is written; :meth:`complete_transition` or
        :meth:`abort_transition` follows."""
        if self._state not in target.valid_previous:
            raise IllegalStateTransition(f"group {self.group_id!r}", self._state, target, target.valid_previous)
        if self.pending_state is not None:
            raise IllegalStateTransition(f"group {self.group_id!r} (already moving to {self.pending_state})",
                                         self._state, target, target.valid_previous)
        self.pending_state = target

    def complete_transition(self, now_ms: int) -> None:
        target, self.pending_state = self.pending_state, None
        if target is None:
            raise RuntimeError(f"group {self.group_id!r}: no state change was prepared")
        self.transition_to(target, now_ms)

    def abort_transition(self) -> None:
        self.pending_state = None

    def static_member(self, instance_id: str | None) -> Member | None:
        """The member holding ``instance_id`` (Kafka's ``staticMemberId``), if any."""
        if instance_id is None:
            return None
        return next((m for m in self.members.values() if m.instance_id == instance_id), None)

    def supports_protocols(self, protocol_type: str, names: set[str]) -> bool:
        """Kafka's ``supportsProtocols``: a group without members takes any non-empty protocol type and list;
        otherwise the type must be the group's and one of ``names`` supported by every member."""
        if not self.members:
            return bool(protocol_type) and bool(names)
        return protocol_type == self.protocol_type and any(
            all(name in {n for n, _ in m.protocols} for m in self.members.values()) for name in names)

    def describe(self) -> dict[str, Any]:
        return {"group_id": self.group_id, "state": self.state.value, "protocol_type": self.protocol_type or "",
                "protocol": self.protocol or "", "generation": self.generation, "leader": self.leader,
                "members": [{"member_id": m.member_id, "group_instance_id": m.instance_id, "client_id": m.client_id,
                             "client_host": m.client_host, "assignment": m.assignment}
                            for m in self.members.values()],
                "offsets": {f"{t}-{p}": v.offset for (t, p), v in sorted(self.offsets.items())}}
