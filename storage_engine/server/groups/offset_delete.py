"""OffsetDelete (Kafka's ``OffsetMetadataManager.deleteOffsets`` and ``ClassicGroup.validateOffsetDelete``): the
committed offsets of some partitions of a group are deleted with tombstones in ``__consumer_offsets``, written
before anything changes in memory. A consumer group may lose the offsets of topics none of its members subscribes
to, a group of another protocol type only while it has no members."""
from __future__ import annotations

import logging
import struct

from kio.schema.errors import ErrorCode

from storage_engine.record.records import SimpleRecord
from storage_engine.server.groups import records as rec
from storage_engine.server.groups.offsets import GroupOffsets
from storage_engine.server.groups.state import Group

logger = logging.getLogger(__name__)

# -- OffsetDelete ---------------------------------------------------------------------------------------------
async def delete_offsets(c: GroupOffsets, group_id: str, partitions: list[tuple[str, int]]
                         ) -> tuple[ErrorCode, dict[tuple[str, int], ErrorCode]]:
    """Kafka's ``OffsetMetadataManager.deleteOffsets``: (group error, error per partition). A group that does
    not exist is GROUP_ID_NOT_FOUND; one with members that does not use the consumer protocol NON_EMPTY_GROUP;
    the partitions of a topic some member subscribes to GROUP_SUBSCRIBED_TO_TOPIC; the others get a tombstone
    if an offset (committed, or pending in a transaction) is there, written before anything changes in memory."""
    g = c.group(group_id)
    if g is None:
        return ErrorCode.group_id_not_found, {}
    consumer = g.protocol_type == "consumer"
    if g.members and not consumer:
        return ErrorCode.non_empty_group, {}
    subscribed = subscribed_topics(g) if consumer else set()
    codes: dict[tuple[str, int], ErrorCode] = {}
    doomed: list[tuple[str, int]] = []
    for tp in partitions:
        if tp[0] in subscribed:
            codes[tp] = ErrorCode.group_subscribed_to_topic
            continue
        codes[tp] = ErrorCode.none
        if tp in g.offsets or c.pending_offset(group_id, *tp):
            doomed.append(tp)
    if doomed:
        try:
            await c.persist(group_id, [SimpleRecord(rec.offset_key(group_id, t, p), None) for t, p in doomed])
        except Exception as exc:   # noqa: BLE001 - nothing deleted: the client retries
            logger.warning("group %s: cannot write the tombstones of deleted offsets: %s", group_id, exc)
            return ErrorCode.coordinator_not_available, {}
        for tp in doomed:
            g.offsets.pop(tp, None)
            g.positions.pop(tp, None)
            for pending in c.txn_offsets.values():
                pending.get(group_id, {}).pop(tp, None)
        logger.info("group %s: offsets of %d partition(s) deleted", group_id, len(doomed))
    return ErrorCode.none, codes


def subscribed_topics(g: Group) -> set[str]:
    """The topics the members of a consumer group subscribe to (each member's ``ConsumerProtocolSubscription``
    of the group's protocol, read as its v0 prefix, as Kafka's ``ClassicGroup.computeSubscribedTopics``); a
    member whose metadata cannot be read adds nothing."""
    topics: set[str] = set()
    for m in g.members.values():
        data = m.metadata(g.protocol)
        try:
            (count,) = struct.unpack_from(">i", data, 2)
            pos = 6
            for _ in range(count):
                (n,) = struct.unpack_from(">h", data, pos)
                topics.add(data[pos + 2:pos + 2 + n].decode("utf-8"))
                pos += 2 + n
        except (struct.error, UnicodeDecodeError):
            continue
    return topics
