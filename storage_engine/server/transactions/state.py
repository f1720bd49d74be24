"""A transactional id's states and metadata (Kafka's ``TransactionState``, ``TransactionMetadata`` and
``TxnTransitMetadata``).

Each state names the states it may be entered from, as Kafka's ``validPreviousStates``:

* **Empty** <- Empty, CompleteCommit, CompleteAbort (InitProducerId);
* **Ongoing** <- Ongoing, Empty, CompleteCommit, CompleteAbort (AddPartitionsToTxn, AddOffsetsToTxn);
* **PrepareCommit** <- Ongoing; **PrepareAbort** <- Ongoing, PrepareEpochFence (EndTxn, a timeout, a fencing
  InitProducerId);
* **CompleteCommit** <- PrepareCommit; **CompleteAbort** <- PrepareAbort (every marker written);
* **Dead** <- Empty, CompleteCommit, CompleteAbort (the transactional id expired);
* **PrepareEpochFence** <- Ongoing (Kafka's; this coordinator writes PrepareAbort with the bumped epoch directly).

A change is made in three steps, as Kafka's ``prepareTransitionTo`` / ``completeTransitionTo``:
:meth:`Txn.prepare_transition` checks the move and returns the new metadata (:class:`TxnTransit`) while the
state in memory stays as it was (the move is held as pending, so appends of the transaction are refused
meanwhile); the coordinator writes the transit's record; :meth:`Txn.complete_transition` applies it, or
:meth:`Txn.abort_transition` drops it if the write failed, leaving nothing changed. A move the table does not
allow raises :class:`~storage_engine.server.groups.state.IllegalStateTransition` naming both states.

The value of each state is its ``TransactionStatus`` id in ``__transaction_state`` (:mod:`.records`).
"""
from __future__ import annotations

import asyncio
import enum
from dataclasses import dataclass, field
from typing import Any

from storage_engine.server.groups.state import IllegalStateTransition
from storage_engine.server.transactions import records as rec


class TxnState(enum.IntEnum):
    EMPTY = rec.EMPTY
    ONGOING = rec.ONGOING
    PREPARE_COMMIT = rec.PREPARE_COMMIT
    PREPARE_ABORT = rec.PREPARE_ABORT
    COMPLETE_COMMIT = rec.COMPLETE_COMMIT
    COMPLETE_ABORT = rec.COMPLETE_ABORT
    DEAD = rec.DEAD
    PREPARE_EPOCH_FENCE = rec.PREPARE_EPOCH_FENCE

    @property
    def display(self) -> str:
        """Kafka's name (``PrepareCommit``), as the status file shows it."""
        return rec.STATE_NAMES[self.value]

    @property
    def valid_previous(self) -> frozenset[TxnState]:
        return _TXN_PREVIOUS[self]


EMPTY, ONGOING, DEAD = TxnState.EMPTY, TxnState.ONGOING, TxnState.DEAD
PREPARE_COMMIT, PREPARE_ABORT = TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT
COMPLETE_COMMIT, COMPLETE_ABORT = TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT
PREPARE_EPOCH_FENCE = TxnState.PREPARE_EPOCH_FENCE
PREPARED = (PREPARE_COMMIT, PREPARE_ABORT)
COMPLETED = (COMPLETE_COMMIT, COMPLETE_ABORT)

_TXN_PREVIOUS: dict[TxnState, frozenset[TxnState]] = {
    EMPTY: frozenset({EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT}),
    ONGOING: frozenset({ONGOING, EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT}),
    PREPARE_COMMIT: frozenset({ONGOING}),
    PREPARE_ABORT: frozenset({ONGOING, PREPARE_EPOCH_FENCE}),
    COMPLETE_COMMIT: frozenset({PREPARE_COMMIT}),
    COMPLETE_ABORT: frozenset({PREPARE_ABORT}),
    DEAD: frozenset({EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT}),
    PREPARE_EPOCH_FENCE: frozenset({ONGOING}),
}


@dataclass(frozen=True)
class TxnTransit:
    """The metadata a transactional id will have once its record is written (Kafka's ``TxnTransitMetadata``)."""

    state: TxnState
    producer_id: int
    epoch: int
    last_epoch: int
    timeout_ms: int
    partitions: frozenset[tuple[str, int]]
    start_ms: int
    update_ms: int

    def record(self) -> rec.TxnRecord:
        by_topic: dict[str, list[int]] = {}
        for topic, p in sorted(self.partitions):
            by_topic.setdefault(topic, []).append(p)
        return rec.TxnRecord(self.producer_id, self.epoch, self.timeout_ms, int(self.state), by_topic,
                             self.update_ms, self.start_ms)


@dataclass
class Txn:
    txn_id: str
    producer_id: int
    epoch: int
    timeout_ms: int
    _state: TxnState = EMPTY
    partitions: set[tuple[str, int]] = field(default_factory=set)
    start_ms: int = -1
    update_ms: int = -1
    lock: asyncio.Lock = field(default_factory=asyncio.Lock, repr=False)
    # the epoch before the producer's own last bump (KIP-360), so a retry of that bump is answered with its result;
    # -1 after a bump by a new producer instance or a fencing abort (Kafka's lastProducerEpoch; in memory only)
    last_epoch: int = -1
    in_flight: int = 0                         # produces and offset commits of this transaction being appended
    drained: asyncio.Event = field(default_factory=asyncio.Event, repr=False)
    pending: TxnTransit | None = None          # a move being prepared and written (Kafka's pendingState)

    @property
    def state(self) -> TxnState:
        return self._state

    @property
    def pending_state(self) -> TxnState | None:
        return None if self.pending is None else self.pending.state

    def prepare_transition(self, target: TxnState, now_ms: int, **changes: Any) -> TxnTransit:
        """Check the move to ``target`` and hold it as pending; returns the metadata to write, with ``changes``
        (any of ``producer_id``, ``epoch``, ``last_epoch``, ``timeout_ms``, ``partitions``, ``start_ms``)
        applied and the update time ``now_ms``. Nothing else changes until :meth:`complete_transition`."""
        what = f"transactional id {self.txn_id!r}"
        if self._state not in target.valid_previous:
            raise IllegalStateTransition(what, self._state, target, target.valid_previous)
        if self.pending_state is not None:
            raise IllegalStateTransition(f"{what} (already moving to {self.pending_state.display})", self._state,
                                         target, target.valid_previous)
        unknown = set(changes) - {"producer_id", "epoch", "last_epoch", "timeout_ms", "partitions", "start_ms"}
        if unknown:
            raise TypeError(f"not a field of a transaction's metadata: {sorted(unknown)}")
        self.pending = TxnTransit(
            target, changes.get("producer_id", self.producer_id), changes.get("epoch", self.epoch),
            changes.get("last_epoch", self.last_epoch), changes.get("timeout_ms", self.timeout_ms),
            frozenset(changes.get("partitions", self.partitions)), changes.get("start_ms", self.start_ms), now_ms)
        return self.pending

    def complete_transition(self, transit: TxnTransit) -> None:
        """Apply ``transit`` once its record is written."""
        if self.pending is not transit:
            raise IllegalStateTransition(f"transactional id {self.txn_id!r} (no move to {transit.state.display} "
                                         "was prepared)", self._state, transit.state, transit.state.valid_previous)
        if self._state not in transit.state.valid_previous:
            raise IllegalStateTransition(f"transactional id {self.txn_id!r}", self._state, transit.state,
                                         transit.state.valid_previous)
        self._state, self.pending = transit.state, None
        self.producer_id, self.epoch, self.last_epoch = transit.producer_id, transit.epoch, transit.last_epoch
        self.timeout_ms, self.partitions = transit.timeout_ms, set(transit.partitions)
        self.start_ms, self.update_ms = transit.start_ms, transit.update_ms

    def abort_transition(self) -> None:
        """The record could not be written: the move is dropped and nothing changed."""
        self.pending = None

    def accepts_appends(self) -> bool:
        """Ongoing and not ending: produces and offset commits of the transaction are admitted, also while a
        partition being added is written (an Ongoing -> Ongoing change), never once Prepare* is pending."""
        return self._state == ONGOING and (self.pending is None or self.pending.state == ONGOING)

    def fences(self, epoch: int) -> bool:
        """Whether ``epoch`` is not the producer's current one, or not the one a fencing abort being written
        gives it (its producer is refused from the moment the abort is prepared)."""
        return epoch != self.epoch or (self.pending is not None and epoch != self.pending.epoch)

    def describe(self) -> dict[str, Any]:
        return {"transactional_id": self.txn_id, "producer_id": self.producer_id, "producer_epoch": self.epoch,
                "state": self._state.display, "timeout_ms": self.timeout_ms, "start_ms": self.start_ms,
                "partitions": [f"{t}-{p}" for t, p in sorted(self.partitions)]}
