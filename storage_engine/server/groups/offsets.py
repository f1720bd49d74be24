"""Committed offsets (Kafka's ``OffsetCommit``, ``TxnOffsetCommit``, ``OffsetFetch``, ``DeleteGroups`` and offsets
retention, KIP-211).

A commit is answered once its records are in ``__consumer_offsets``; nothing is changed in memory before that. A
transaction's offset commit is written as the producer's transactional batch and counts when its COMMIT marker
is written (:meth:`~.store.GroupStore.write_marker`). A deletion holds the group's move to Dead as pending while
its tombstones are written, then applies it: requests meanwhile see the group gone and begin a new one of the
same name. The offsets of a group empty for ``offsets.retention.minutes`` are deleted with tombstones.
"""
from __future__ import annotations

import asyncio
import logging

from kio.schema.errors import ErrorCode

from storage_engine.record.records import SimpleRecord
from storage_engine.server.errors import error_code
from storage_engine.server.groups import records as rec
from storage_engine.server.groups.state import COMPLETING, DEAD, EMPTY
from storage_engine.server.groups.store import GroupStore

logger = logging.getLogger(__name__)

OffsetEntry = tuple[str, int, int, int, "str | None"]     # topic, partition, offset, leader epoch, metadata


class GroupOffsets(GroupStore):
    """The offset APIs of the group coordinator."""

    def _offset_records(self, group_id: str, offsets: list[OffsetEntry], stamp: int
                        ) -> tuple[list[ErrorCode], list[SimpleRecord], list[tuple[tuple[str, int], rec.OffsetValue]]]:
        """Per entry its error code (OFFSET_METADATA_TOO_LARGE above ``offset.metadata.max.bytes``); the records
        of the accepted ones and their values."""
        codes: list[ErrorCode] = []
        records, values = [], []
        for topic, p, offset, epoch, metadata in offsets:
            meta = metadata or ""
            if len(meta.encode("utf-8")) > self.max_metadata:
                codes.append(ErrorCode.offset_metadata_too_large)
                continue
            records.append(SimpleRecord(rec.offset_key(group_id, topic, p),
                                        rec.offset_value(offset, epoch, meta, stamp)))
            values.append(((topic, p), rec.OffsetValue(offset, epoch, meta, stamp)))
            codes.append(ErrorCode.none)
        return codes, records, values

    async def commit(self, group_id: str, generation: int, member_id: str, offsets: list[OffsetEntry],
                     instance_id: str | None = None) -> list[ErrorCode]:
        """Commit (topic, partition, offset, leader epoch, metadata) entries; one error code per entry."""
        g = self.groups.get(group_id)
        if member_id and self.fenced(g, member_id, instance_id):
            return [ErrorCode.fenced_instance_id] * len(offsets)
        if generation < 0 and not member_id:
            if g is not None and g.members:
                return [ErrorCode.unknown_member_id] * len(offsets)    # a standalone commit needs an empty group
        else:
            if g is None or member_id not in g.members:
                return [ErrorCode.unknown_member_id] * len(offsets)
            if generation != g.generation:
                return [ErrorCode.illegal_generation] * len(offsets)
            if g.state == COMPLETING:
                return [ErrorCode.rebalance_in_progress] * len(offsets)
            g.members[member_id].touch(self.now_ms())
        g = self.live_group(group_id)
        stamp = self.now_ms()
        codes, records, values = self._offset_records(group_id, offsets, stamp)
        if records:
            try:
                first = await self.persist(group_id, records)
            except Exception as exc:   # noqa: BLE001 - nothing committed: the client retries
                logger.warning("group %s: cannot write committed offsets: %s", group_id, exc)
                return [ErrorCode.coordinator_not_available if c == ErrorCode.none else c for c in codes]
            for i, (key, value) in enumerate(values):
                g.offsets[key], g.positions[key] = value, first + i
            if g.state == EMPTY:
                g.state_ms = stamp          # an empty group's offsets expire counting from its last commit
        return codes

    async def txn_commit(self, group_id: str, producer_id: int, producer_epoch: int, generation: int,
                         member_id: str, instance_id: str | None, offsets: list[OffsetEntry]) -> list[ErrorCode]:
        """TxnOffsetCommit: the offsets are written as the producer's transactional batch and count once the
        transaction commits. A consumer's group metadata, when sent (v3+), must be current (KIP-447 fencing)."""
        g = self.groups.get(group_id)
        if member_id:
            if self.fenced(g, member_id, instance_id):
                return [ErrorCode.fenced_instance_id] * len(offsets)
            if g is None or member_id not in g.members:
                return [ErrorCode.unknown_member_id] * len(offsets)
            if generation != g.generation:
                return [ErrorCode.illegal_generation] * len(offsets)
        codes, records, values = self._offset_records(group_id, offsets, self.now_ms())
        if records:
            try:
                first = await self.persist(group_id, records, (producer_id, producer_epoch))
            except Exception as exc:   # noqa: BLE001 - the producer's error (fenced epoch) or a storage failure
                code = error_code(exc)
                if code == ErrorCode.unknown_server_error:
                    code = ErrorCode.coordinator_not_available
                logger.warning("group %s: cannot write transactional offsets: %s", group_id, exc)
                return [code if c == ErrorCode.none else c for c in codes]
            pending = self.txn_offsets.setdefault(producer_id, {}).setdefault(group_id, {})
            for i, (key, value) in enumerate(values):
                pending[key] = (value, first + i)
        return codes

    def fetch_offsets(self, group_id: str, wanted: list[tuple[str, list[int]]] | None
                      ) -> list[tuple[str, list[tuple[int, rec.OffsetValue | None]]]]:
        g = self.groups.get(group_id)
        offsets = g.offsets if g is not None else {}
        if wanted is None:
            by_topic: dict[str, list[int]] = {}
            for (t, p) in sorted(offsets):
                by_topic.setdefault(t, []).append(p)
            wanted = list(by_topic.items())
        return [(t, [(p, offsets.get((t, p))) for p in parts]) for t, parts in wanted]

    async def delete(self, group_id: str) -> ErrorCode:
        """DeleteGroups of one group: Dead is prepared, the tombstones of its offsets and its metadata written,
        then Dead applied. Nothing changes if they cannot be written."""
        g = self.group(group_id)
        if g is None:
            return ErrorCode.group_id_not_found
        if g.members:
            return ErrorCode.non_empty_group
        tombstones = [SimpleRecord(rec.offset_key(group_id, t, p), None) for (t, p) in sorted(g.offsets)]
        g.prepare_transition(DEAD)
        tombstones.append(self.group_record(g))
        try:
            await self.persist(group_id, tombstones)
        except Exception as exc:   # noqa: BLE001 - not deleted: the client retries
            g.abort_transition()
            logger.warning("group %s: cannot write its tombstones: %s", group_id, exc)
            return ErrorCode.coordinator_not_available
        g.complete_transition(self.now_ms())
        if self.groups.get(group_id) is g:     # not a group of the same name begun while the tombstones were written
            del self.groups[group_id]
        return ErrorCode.none

    # -- offsets retention (Kafka's offsets.retention.minutes, KIP-211) ------------------------------------------
    async def _retention_loop(self) -> None:
        while True:
            await asyncio.sleep(self.retention_check_s)
            await self.expire_offsets(self.now_ms())

    async def expire_offsets(self, at_ms: int) -> list[str]:
        """Delete the offsets of every group that has been empty for ``offsets.retention.minutes`` (since it
        became empty, or since its last commit for a group that never had members): tombstones for each offset
        and for the group are appended, so compaction removes them from ``__consumer_offsets``. Returns the
        groups expired."""
        expired = []
        for g in list(self.groups.values()):
            if g.state != EMPTY or g.pending_state is not None or g.members or at_ms - g.state_ms < self.retention_ms:
                continue
            before = dict(g.offsets)
            tombstones = [SimpleRecord(rec.offset_key(g.group_id, t, p), None) for (t, p) in sorted(before)]
            tombstones.append(SimpleRecord(rec.group_key(g.group_id), None))
            try:
                await self.persist(g.group_id, tombstones)
            except Exception as exc:   # noqa: BLE001 - tried again at the next check
                logger.warning("group %s: cannot write the tombstones of its expired offsets: %s", g.group_id, exc)
                continue
            if g.offsets != before or g.members or g.state != EMPTY or g.pending_state is not None:
                # a commit or a join came in while the tombstones were written (its records follow them on
                # disk): the group lives on with what came after, only the expired offsets go
                for key, value in before.items():
                    if g.offsets.get(key) is value:
                        del g.offsets[key]
                        g.positions.pop(key, None)
                continue
            g.transition_to(DEAD, self.now_ms())
            if self.groups.get(g.group_id) is g:
                del self.groups[g.group_id]
            expired.append(g.group_id)
            logger.info("group %s: %d offset(s) expired (empty for %d min, offsets.retention.minutes)", g.group_id,
                        len(tombstones) - 1, self.retention_ms // 60_000)
        return expired
