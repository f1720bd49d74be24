"""The transaction coordinator (Kafka's ``TransactionCoordinator``), for every transactional id: this node is the
coordinator of all of them.

A transactional id has one producer id and epoch at a time. **InitProducerId** gives it a producer id (epoch 0),
or bumps the epoch, which fences the previous producer of the id; an Ongoing transaction is aborted first (with
an epoch bumped once more, as Kafka does). **AddPartitionsToTxn** and **AddOffsetsToTxn** (the group's
``__consumer_offsets`` partition) make the transaction Ongoing; produces and TxnOffsetCommits are accepted only
for partitions added, from the current producer id and epoch. **EndTxn** records PrepareCommit or PrepareAbort,
waits for the transaction's appends in flight, writes a COMMIT or ABORT marker through the engine's end-txn path
into every partition of the transaction (so the ``.txnindex``, the last stable offset and ``read_committed``
follow as the engine keeps them), and records CompleteCommit or CompleteAbort.

Every state change is prepared, appended to ``__transaction_state`` (:mod:`.records`, Kafka's schemas; compacted,
cleaned by the ``log_compaction`` DAG like any topic), then applied, before it is answered: a change whose record
cannot be written leaves the transactional id as it was (the states and their allowed moves: :mod:`.state`). At
start the coordinator reads it back: a transaction found in PrepareCommit/PrepareAbort is completed (its markers
written again: a second marker for a transaction already ended changes nothing), an Ongoing one stays open for its
producer to end, or is aborted when its timeout passes. Transactions older than their timeout are aborted with
the producer's epoch bumped (``transaction.abort.timed.out.transaction.cleanup.interval.ms``); transactional ids
idle for ``transactional.id.expiration.ms`` are deleted (a tombstone). "Now" is the broker's clock
(:mod:`storage_engine.clock`); :meth:`TxnCoordinator.sweep` takes the instant to act as of.

Everything runs on the event loop; a lock per transactional id orders its requests, and engine calls run in the
broker's thread pool.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any

from kio.schema.errors import ErrorCode

from storage_engine.errors import PartitionNotFoundError
from storage_engine.record.records import SimpleRecord
from storage_engine.server.groups.coordinator import OFFSETS_TOPIC, GroupCoordinator
from storage_engine.server.groups.records import RecordFormatError, partition_for
from storage_engine.server.groups.replay import create_internal_topic, load_topic
from storage_engine.server.transactions import records as rec
from storage_engine.server.transactions.state import (COMPLETE_ABORT, COMPLETE_COMMIT, COMPLETED, DEAD, EMPTY,
                                                      ONGOING, PREPARE_ABORT, PREPARE_COMMIT, PREPARED, Txn,
                                                      TxnState, TxnTransit)

logger = logging.getLogger(__name__)

TXN_TOPIC = "__transaction_state"
MAX_EPOCH = 32767        # Short.MaxValue: an id whose epoch would reach it gets a new producer id

# The first version of each API that knows PRODUCER_FENCED; older ones get INVALID_PRODUCER_EPOCH (Kafka's rule).
FENCED_SINCE = {"InitProducerId": 4, "AddPartitionsToTxn": 2, "AddOffsetsToTxn": 2, "EndTxn": 2,
                "TxnOffsetCommit": 3}


def fenced(api: str, version: int) -> ErrorCode:
    return ErrorCode.producer_fenced if version >= FENCED_SINCE[api] else ErrorCode.invalid_producer_epoch


class TxnCoordinator:
    def __init__(self, broker: Any, groups: GroupCoordinator):
        self.broker = broker
        self.groups = groups
        self.clock = broker.clock
        s = broker.config.server
        self.partitions: int = s["transaction.state.log.num.partitions"]
        self.segment_bytes: int = s["transaction.state.log.segment.bytes"]
        self.max_timeout_ms: int = s["transaction.max.timeout.ms"]
        self.abort_check_s: float = s["transaction.abort.timed.out.transaction.cleanup.interval.ms"] / 1000
        self.id_expiration_ms: int = s["transactional.id.expiration.ms"]
        self.txns: dict[str, Txn] = {}
        self._topic_ready = False
        self._locks: dict[int, asyncio.Lock] = {}           # appends per partition of the state topic, in order
        self._loop_task: asyncio.Task[None] | None = None

    # -- the state topic ----------------------------------------------------------------------------------------
    def load(self) -> int:
        """Rebuild the transactional ids from ``__transaction_state`` (blocking; at start). Returns records read."""
        loaded = load_topic(self.broker, TXN_TOPIC, self._replay)
        if loaded is None:
            return 0
        self._topic_ready = True
        self.partitions, count = loaded.partitions, loaded.records
        states: dict[str, int] = {}
        for t in self.txns.values():
            states[t.state.display] = states.get(t.state.display, 0) + 1
        logger.info("loaded %d transactional ids (%s; %d records) from %s", len(self.txns), states, count, TXN_TOPIC)
        return count

    def _replay(self, key: bytes, value: bytes | None, _offset: int = -1) -> None:
        try:
            txn_id = rec.parse_key(key)
            if value is None:
                self.txns.pop(txn_id, None)
                return
            r = rec.parse_value(value)
        except (RecordFormatError, UnicodeDecodeError) as exc:
            logger.warning("skipping an unreadable %s record: %s", TXN_TOPIC, exc)
            return
        if r.state == DEAD:
            self.txns.pop(txn_id, None)
            return
        self.txns[txn_id] = Txn(txn_id, r.producer_id, r.producer_epoch, r.timeout_ms, TxnState(r.state),
                                {(t, p) for t, ps in r.partitions.items() for p in ps}, r.start_ms, r.last_update_ms)

    def _ensure_topic(self) -> None:
        if self._topic_ready:
            return
        self.partitions = create_internal_topic(self.broker, TXN_TOPIC, self.partitions, self.segment_bytes)
        self._topic_ready = True

    def _append(self, txn_id: str, value: bytes | None) -> None:
        self._ensure_topic()
        log = self.broker.manager.get_or_create_log(TXN_TOPIC, partition_for(txn_id, self.partitions))
        log.append_records([SimpleRecord(rec.key(txn_id), value)])

    def now_ms(self) -> int:
        return self.clock.milliseconds()

    async def _write(self, txn_id: str, value: bytes | None) -> None:
        async with self._locks.setdefault(partition_for(txn_id, self.partitions), asyncio.Lock()):
            await self.broker.call(self._append, txn_id, value)

    async def _apply(self, t: Txn, transit: TxnTransit) -> bool:
        """Write the prepared ``transit`` of ``t``, then apply it; if it cannot be written, drop it (``t`` is left
        as it was) and return False."""
        try:
            await self._write(t.txn_id, None if transit.state == DEAD else rec.value(transit.record()))
        except Exception as exc:   # noqa: BLE001 - nothing changed: the client retries
            t.abort_transition()
            logger.warning("transactional id %s: cannot record %s: %s", t.txn_id, transit.state.display, exc)
            return False
        except BaseException:      # cancelled: nothing changed either
            t.abort_transition()
            raise
        t.complete_transition(transit)
        return True

    async def _change(self, t: Txn, state: TxnState, **changes: Any) -> bool:
        """Prepare ``state`` (and ``changes``) for ``t``, write it, apply it; False if it could not be written."""
        return await self._apply(t, t.prepare_transition(state, self.now_ms(), **changes))

    # -- running --------------------------------------------------------------------------------------------------
    def start(self) -> None:
        self._loop_task = asyncio.get_running_loop().create_task(self._housekeeping())

    async def stop(self) -> None:
        if self._loop_task is not None:
            self._loop_task.cancel()
            try:
                await self._loop_task
            except asyncio.CancelledError:
                pass

    async def recover(self) -> None:
        """At start: complete the transactions found in Prepare* (and whatever else is due)."""
        try:
            await self.sweep(self.now_ms())
        except Exception:   # housekeeping tries again
            logger.exception("completing the transactions found at start failed")

    async def _housekeeping(self) -> None:
        """Complete what a failed marker left in Prepare*, abort timed-out transactions, expire idle
        transactional ids; every cleanup interval."""
        while True:
            await asyncio.sleep(self.abort_check_s)
            try:
                await self.sweep(self.now_ms())
            except Exception:   # the next round tries again
                logger.exception("transaction housekeeping failed")

    async def sweep(self, at_ms: int) -> None:
        for t in list(self.txns.values()):
            if t.state in PREPARED:
                async with t.lock:
                    if t.state in PREPARED:
                        await self._complete(t)
            elif t.state == ONGOING and t.start_ms + t.timeout_ms < at_ms:
                async with t.lock:
                    if t.state == ONGOING and t.start_ms + t.timeout_ms < at_ms:
                        logger.info("transactional id %s: aborting its transaction, open since %d, past its "
                                    "timeout of %d ms", t.txn_id, t.start_ms, t.timeout_ms)
                        await self._abort_fencing(t)
            elif t.state in (EMPTY, *COMPLETED) and t.update_ms + self.id_expiration_ms < at_ms:
                async with t.lock:
                    if self.txns.get(t.txn_id) is t and t.update_ms + self.id_expiration_ms < at_ms:
                        # Dead is written as a tombstone; one that cannot be written expires on a later round
                        if not await self._change(t, DEAD):
                            continue
                        del self.txns[t.txn_id]
                        logger.info("transactional id %s expired", t.txn_id)

    # -- ending transactions ------------------------------------------------------------------------------------------
    async def _drain(self, t: Txn) -> None:
        while t.in_flight:
            t.drained.clear()
            await t.drained.wait()

    async def _end(self, t: Txn, commit: bool, **changes: Any) -> bool:
        """Ongoing -> Prepare* (recorded) -> markers -> Complete*. False if Prepare* could not be recorded, and
        then nothing changed (``changes`` included)."""
        transit = t.prepare_transition(PREPARE_COMMIT if commit else PREPARE_ABORT, self.now_ms(), **changes)
        try:
            await self._drain(t)              # new appends of this transaction are refused while it is pending
        except BaseException:
            t.abort_transition()
            raise
        if not await self._apply(t, transit):
            return False
        await self._complete(t)
        return True

    async def _complete(self, t: Txn) -> None:
        """Write the markers of a Prepare* transaction, then record Complete*. A partition whose marker cannot be
        written keeps the transaction in Prepare* (housekeeping retries); a deleted one needs no marker."""
        commit = t.state == PREPARE_COMMIT
        failed: list[tuple[str, int]] = []
        for topic, p in sorted(t.partitions):
            try:
                if topic == OFFSETS_TOPIC:
                    await self.groups.write_marker(p, t.producer_id, t.epoch, commit)
                else:
                    await self.broker.call(self._write_marker, topic, p, t.producer_id, t.epoch, commit)
            except PartitionNotFoundError:
                continue
            except Exception as exc:   # noqa: BLE001 - retried by housekeeping
                logger.warning("transactional id %s: cannot write the %s marker to %s-%d: %s", t.txn_id,
                               "COMMIT" if commit else "ABORT", topic, p, exc)
                failed.append((topic, p))
        self.broker.purgatory.appended_all(t.partitions)
        if failed:
            return
        await self._change(t, COMPLETE_COMMIT if commit else COMPLETE_ABORT, partitions=set(), start_ms=-1)

    def _write_marker(self, topic: str, partition: int, producer_id: int, epoch: int, commit: bool) -> None:
        log = self.broker.manager.get_log(topic, partition)
        if log is None:
            raise PartitionNotFoundError(f"partition {topic}-{partition} does not exist")
        log.append_end_txn(producer_id, epoch, commit=commit)

    async def _abort_fencing(self, t: Txn) -> bool:
        """Abort the Ongoing transaction of ``t`` with the epoch bumped (written with PrepareAbort), so its
        producer is fenced; if PrepareAbort cannot be written, the epoch stays and the producer is not fenced."""
        bump = {"last_epoch": -1, "epoch": t.epoch + 1} if t.epoch < MAX_EPOCH - 1 else {}
        return await self._end(t, commit=False, **bump)

    # -- the APIs -----------------------------------------------------------------------------------------------
    def _check(self, txn_id: str, producer_id: int, epoch: int, api: str, version: int) -> Txn | ErrorCode:
        t = self.txns.get(txn_id)
        if t is None or t.producer_id != producer_id:
            return ErrorCode.invalid_producer_id_mapping
        if t.epoch != epoch:
            return fenced(api, version)
        return t

    async def init_producer_id(self, txn_id: str, timeout_ms: int, producer_id: int, epoch: int,
                               version: int) -> tuple[ErrorCode, int, int]:
        """(error code, producer id, epoch)."""
        if not txn_id:
            return ErrorCode.invalid_request, -1, -1
        if not 0 < timeout_ms <= self.max_timeout_ms:
            return ErrorCode.invalid_transaction_timeout, -1, -1
        t = self.txns.get(txn_id)
        if t is None:
            new_id = await self.broker.call(self.broker.producer_ids.allocate)
            if txn_id not in self.txns:
                t = self.txns[txn_id] = Txn(txn_id, new_id, 0, timeout_ms)
                async with t.lock:         # taken at once: nothing awaited since the id was added
                    if await self._change(t, EMPTY):
                        return ErrorCode.none, t.producer_id, t.epoch
                    del self.txns[txn_id]
                    return ErrorCode.coordinator_not_available, -1, -1
            t = self.txns[txn_id]
        async with t.lock:
            if self.txns.get(txn_id) is not t:
                return ErrorCode.concurrent_transactions, -1, -1      # expired meanwhile: the client retries
            if producer_id >= 0:                                        # KIP-360: the producer's own bump
                if producer_id == t.producer_id and epoch == t.last_epoch and t.state != ONGOING:
                    return ErrorCode.none, t.producer_id, t.epoch       # a retry, or after a timeout's fencing
                if producer_id != t.producer_id or epoch != t.epoch:
                    return fenced("InitProducerId", version), -1, -1
            if t.state in PREPARED:
                return ErrorCode.concurrent_transactions, -1, -1                  # markers still being written
            if t.state == ONGOING and not await self._abort_fencing(t):
                return ErrorCode.concurrent_transactions, -1, -1
            if t.state in PREPARED:
                return ErrorCode.concurrent_transactions, -1, -1
            new_pid, new_epoch = t.producer_id, t.epoch + 1
            if new_epoch >= MAX_EPOCH:
                new_pid, new_epoch = await self.broker.call(self.broker.producer_ids.allocate), 0
            # the producer's own bump keeps the epoch it had, so a retry of this request gets the same answer
            last = t.epoch if producer_id >= 0 else -1
            if not await self._change(t, EMPTY, producer_id=new_pid, epoch=new_epoch, timeout_ms=timeout_ms,
                                      partitions=set(), start_ms=-1, last_epoch=last):
                return ErrorCode.coordinator_not_available, -1, -1
            return ErrorCode.none, t.producer_id, t.epoch

    async def add_partitions(self, txn_id: str, producer_id: int, epoch: int, partitions: list[tuple[str, int]],
                             version: int, api: str = "AddPartitionsToTxn") -> dict[tuple[str, int], ErrorCode]:
        def every(code: ErrorCode) -> dict[tuple[str, int], ErrorCode]:
            return {tp: code for tp in partitions}
        checked = self._check(txn_id, producer_id, epoch, api, version)
        if isinstance(checked, ErrorCode):
            return every(checked)
        t = checked
        async with t.lock:
            if self.txns.get(txn_id) is not t:
                return every(ErrorCode.invalid_producer_id_mapping)                  # expired meanwhile
            if t.producer_id != producer_id or t.epoch != epoch:
                return every(fenced(api, version))
            if t.state in PREPARED:
                return every(ErrorCode.concurrent_transactions)
            new = set(partitions) - t.partitions
            if not new and t.state == ONGOING:
                return every(ErrorCode.none)
            catalog = await self.broker.call(self.broker.topics)
            missing = {(tp, p) for tp, p in new if p not in catalog.get(tp, ()) and tp != OFFSETS_TOPIC}
            if missing:
                return {tp: ErrorCode.unknown_topic_or_partition if tp in missing else ErrorCode.operation_not_attempted
                        for tp in partitions}
            start = t.start_ms if t.state == ONGOING else self.now_ms()
            if not await self._change(t, ONGOING, partitions=t.partitions | new, start_ms=start):
                return every(ErrorCode.coordinator_not_available)
            return every(ErrorCode.none)

    async def add_offsets(self, txn_id: str, producer_id: int, epoch: int, group_id: str, version: int
                          ) -> ErrorCode:
        await self.broker.call(self.groups.ensure_topic)
        tp = (OFFSETS_TOPIC, self.groups.partition_of(group_id))
        return (await self.add_partitions(txn_id, producer_id, epoch, [tp], version, "AddOffsetsToTxn"))[tp]

    async def end_txn(self, txn_id: str, producer_id: int, epoch: int, commit: bool, version: int) -> ErrorCode:
        checked = self._check(txn_id, producer_id, epoch, "EndTxn", version)
        if isinstance(checked, ErrorCode):
            return checked
        t = checked
        async with t.lock:
            if self.txns.get(txn_id) is not t:
                return ErrorCode.invalid_producer_id_mapping                         # expired meanwhile
            if t.producer_id != producer_id or t.epoch != epoch:
                return fenced("EndTxn", version)
            if t.state == ONGOING:
                return ErrorCode.none if await self._end(t, commit) else ErrorCode.coordinator_not_available
            if t.state in PREPARED:
                same = (t.state == PREPARE_COMMIT) == commit
                return ErrorCode.concurrent_transactions if same else ErrorCode.invalid_txn_state
            if t.state in (COMPLETE_COMMIT, COMPLETE_ABORT) and (t.state == COMPLETE_COMMIT) == commit:
                return ErrorCode.none                      # a retried EndTxn that already took effect
            return ErrorCode.invalid_txn_state

    # -- appends of a transaction -----------------------------------------------------------------------------------
    def begin_append(self, txn_id: str, producer_id: int, epoch: int, topic: str, partition: int) -> ErrorCode:
        """Admit one transactional append (a produce, or an offset commit on the group's partition): the
        transaction must be Ongoing with the partition added, from its current producer id and epoch. Pair with
        :meth:`end_append`, which EndTxn waits for before writing markers."""
        t = self.txns.get(txn_id)
        if t is None or t.producer_id != producer_id:
            return ErrorCode.invalid_producer_id_mapping
        if t.fences(epoch):
            return ErrorCode.invalid_producer_epoch
        if not t.accepts_appends() or (topic, partition) not in t.partitions:
            return ErrorCode.invalid_txn_state
        t.in_flight += 1
        return ErrorCode.none

    def end_append(self, txn_id: str) -> None:
        t = self.txns.get(txn_id)
        if t is not None and t.in_flight > 0:
            t.in_flight -= 1
            if not t.in_flight:
                t.drained.set()

    def summary(self, limit: int = 100) -> dict[str, Any]:
        """For the status file: how many transactional ids there are, per state, and the open transactions (not
        Empty or Complete*), oldest first, at most ``limit``."""
        states: dict[str, int] = {}
        for t in self.txns.values():
            states[t.state.display] = states.get(t.state.display, 0) + 1
        open_txns = sorted((t for t in self.txns.values() if t.state in (ONGOING, *PREPARED)),
                           key=lambda t: (t.start_ms, t.txn_id))
        return {"ids": len(self.txns), "states": states, "open": [t.describe() for t in open_txns[:limit]],
                "open_total": len(open_txns)}
