"""Reading a coordinator's compacted topic back at start, transactions honoured: records outside transactions
apply in log order; a transaction's records apply at its COMMIT marker and are dropped at its ABORT marker (what
Kafka's ``GroupMetadataManager`` and ``TransactionStateManager`` do when they load a partition). Every batch is
read checked, through the engine."""
from __future__ import annotations

from collections.abc import Callable

from storage_engine.log.log import Log
from storage_engine.log.producer_state import COMMIT, parse_end_txn_marker
from storage_engine.segment.file_records import iter_batches

Apply = Callable[[bytes, "bytes | None", int], None]       # key, value, the record's offset
READ_BYTES = 1 << 20


def replay(log: Log, apply: Apply) -> tuple[int, dict[int, list[tuple[bytes, bytes | None, int]]]]:
    """Call ``apply(key, value, offset)`` for every keyed record that counts, in order (a transaction's records at
    its COMMIT marker, with their own offsets). Returns the records read and the records of transactions still
    open at the log end, by producer id."""
    open_txns: dict[int, list[tuple[bytes, bytes | None, int]]] = {}
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
