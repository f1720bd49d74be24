"""ListTransactions (66, v0-1), as Kafka's ``TransactionStateManager.listTransactionStates``: every transactional
id of the transaction coordinator (Dead ones excepted) filtered by state names (Kafka's: ``Ongoing``,
``PrepareCommit`` ...; an unknown name is returned in ``unknown_state_filters`` and matches nothing), by producer
ids and, from v1, by a duration: only transactions open longer than it. Only the ids the principal may DESCRIBE
are listed (the others are left out, not refused). v2's transactional id pattern (KIP-1152) is not served.
(In its own module: its response's ``TransactionState`` entry differs from DescribeTransactions'.)"""
from __future__ import annotations

from typing import Any

from storage_engine.acl.model import Operation, ResourceType
from storage_engine.server import access
from storage_engine.server.errors import ErrorCode
from storage_engine.server.handlers.context import Ctx, has
from storage_engine.server.responses.list_transactions import ListTransactionsResponse, TransactionState
from storage_engine.server.transactions.state import DEAD, TxnState

_STATE_BY_NAME = {s.display: s for s in TxnState}


async def list_transactions(ctx: Ctx, body: Any) -> ListTransactionsResponse:
    coordinator = ctx.broker.transactions
    wanted: set[TxnState] = set()
    unknown: list[str] = []
    for name in body.state_filters:
        if name in _STATE_BY_NAME:
            wanted.add(_STATE_BY_NAME[name])
        else:
            unknown.append(name)
    producer_ids = {int(p) for p in body.producer_id_filters}
    duration = int(body.duration_filter) if has(body, "duration_filter") else -1
    now = coordinator.now_ms()
    listed: list[TransactionState] = []
    for t in sorted(coordinator.txns.values(), key=lambda t: t.txn_id):
        if t.state == DEAD or (producer_ids and t.producer_id not in producer_ids):
            continue
        if body.state_filters and t.state not in wanted:
            continue
        if duration >= 0 and now - t.start_ms <= duration:
            continue
        if not access.allowed(ctx, Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, t.txn_id, log=False):
            continue
        listed.append({"transactional_id": t.txn_id, "producer_id": t.producer_id,
                       "transaction_state": t.state.display})
    return {"throttle_time": 0, "error_code": ErrorCode.none, "unknown_state_filters": tuple(unknown),
            "transaction_states": tuple(listed)}
