"""A coordinator's internal topic (``__consumer_offsets``, ``__transaction_state``): read back at start, and
created at its first write.

:func:`load_topic` reads every partition the catalog has, each through :func:`replay`, transactions honoured:
records outside transactions apply in log order; a transaction's records apply at its COMMIT marker and are
dropped at its ABORT marker (what Kafka's ``GroupMetadataManager`` and ``TransactionStateManager`` do when they
load a partition). Every batch is read checked, through the engine. :func:`create_internal_topic` creates the
topic compacted, or learns its partition count when it exists already."""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from storage_engine.log.log import Log
from storage_engine.log.producer_state import COMMIT, parse_end_txn_marker
from storage_engine.segment.file_records import iter_batches
from storage_engine.server.catalog import TopicError, create_topic

Apply = Callable[[bytes, "bytes | None", int], None]       # key, value, the record's offset
OpenTxns = dict[int, list[tuple[bytes, "bytes | None", int]]]   # producer id -> key, value, offset
READ_BYTES = 1 << 20


@dataclasses.dataclass
class Loaded:
    """An internal topic read back: its partition count (its highest partition + 1), the records read, and the
    records of transactions still open at the log ends, by producer id."""
    partitions: int
    records: int
    open_txns: OpenTxns


def load_topic(broker: Any, topic: str, apply: Apply) -> Loaded | None:
    """At start (blocking): every partition of the internal ``topic`` the catalog holds (read afresh), in order,
    :func:`replay`-ed into ``apply``. None when the topic does not exist yet: it is created at its first write."""
    parts: list[int] | None = broker.topics(fresh=True).get(topic)
    if not parts:
        return None
    loaded = Loaded(max(parts) + 1, 0, {})
    for p in parts:
        log = broker.manager.get_log(topic, p)
        if log is None:
            continue
        read, open_txns = replay(log, apply)
        loaded.records += read
        for producer_id, held in open_txns.items():
            loaded.open_txns.setdefault(producer_id, []).extend(held)
    return loaded


def create_internal_topic(broker: Any, topic: str, partitions: int, segment_bytes: int) -> int:
    """Create the internal ``topic`` (blocking) with ``partitions`` partitions, compacted, of ``segment_bytes``
    segments; if it exists already (another start made it), leave it as it is. Returns its partition count."""
    try:
        create_topic(broker, topic, partitions, {"cleanup.policy": "compact", "segment.bytes": str(segment_bytes)})
    except TopicError as exc:
        if exc.code != "topic_already_exists":
            raise
        return max(broker.topics(fresh=True)[topic]) + 1
    return partitions


def replay(log: Log, apply: Apply) -> tuple[int, OpenTxns]:
    """Call ``apply(key, value, offset)`` for every keyed record that counts, in order (a transaction's records at
    its COMMIT marker, with their own offsets). Returns the records read and the records of transactions still
    open at the log end, by producer id."""
    open_txns: OpenTxns = {}
    offset, count = log.log_start_offset, 0
    while True:
        data = log.read(offset, READ_BYTES)
        if data is None:
            break
        moved = False
        for batch in iter_batches(data.data, 0, len(data.data), log.name):
            if batch.last_offset < offset:
                continue
            offset, moved = batch.last_offset + 1, True
            records = batch.records()
            if batch.is_control:
                if records:
                    control, _ = parse_end_txn_marker(records[0].key, records[0].value, batch)
                    held = open_txns.pop(batch.producer_id, [])
                    if control == COMMIT:
                        for k, v, at in held:
                            apply(k, v, at)
                continue
            keyed = [(r.key, r.value, r.offset) for r in records if r.key is not None]
            count += len(records)
            if batch.is_transactional:
                open_txns.setdefault(batch.producer_id, []).extend(keyed)
            else:
                for k, v, at in keyed:
                    apply(k, v, at)
        if not moved:
            break
    return count, open_txns
