"""The message browser: one page of a partition's records as an operator reads them, read-only and checked.

A page starts at an offset, at the first record whose timestamp is at or after an instant (the segments'
``.timeindex`` files, as Kafka's ``ListOffsets`` finds it), at the log start, or ``latest`` (the last ``limit``
offsets); with a key it keeps only the records carrying that key, scanning forward for at most ``max_scan_bytes``
of batches per page (the page says where to continue), or with ``latest`` the newest records of that key (the
current value of a key, on a compacted topic), segment after segment from the newest back.

Every record comes with what Kafka stores about it: offset, timestamp and its type, key, value, headers, the
batch's producer id, epoch and the record's sequence, the partition leader epoch, the batch's codec. Records of
transactional batches are marked ``committed``, ``aborted`` (their transaction's ABORT marker is listed in a
``.txnindex``, found as Kafka's consumer finds it) or ``open`` (their producer's transaction has no marker yet,
from the producer state rebuilt from the ``.snapshot`` files); transaction markers (control batches) are records
of their own, marked ``COMMIT`` or ``ABORT`` with the coordinator epoch. ``read_committed`` shows what such a
consumer reads instead: nothing at or after the last stable offset, no aborted record, no marker.

Reads are checked as the engine's own are (:mod:`storage_engine.segment.checked_read`): every batch passes its
CRC-32C (CRC-32 for legacy messages) and the offset-order checks before a record of it is shown. Damage ends
the page there: the records before it are returned with ``error`` naming the file and the byte position.

Offsets below the local log start of a tiered topic (their segments only in the object store) are read through
:mod:`storage_engine.tiered.whole_log`, checked the same way; a remote object missing or damaged ends the page as
local damage does, with ``error`` naming the object and the segment's offsets. The newest records of a key are
searched in the local segments only.

Read-only, like the rest of :mod:`storage_engine.inspection`: segments are opened read-only through
:class:`~storage_engine.inspection.snapshot.LogSnapshot`, no lock is taken, no file is created or changed, so a
page may be read from any process (Airflow's api-server) while a writer appends and maintenance runs. A
segment that retention or the cleaner renamed away during the read makes the read start again on a fresh
listing (a few times at most); bytes a writer is still appending to the active segment are not read (the page
ends at the last whole batch).

:func:`render_bytes` turns a key, value or header into text for people: ``text`` (UTF-8), ``json`` (indented),
``hex`` (a hex dump with offsets and ASCII) or ``auto`` (JSON if it parses, else text if it is UTF-8 without
control characters, else hex).
"""
from __future__ import annotations

import collections
import contextvars
import json
import os
import struct
from collections.abc import Callable, Iterator
from typing import TypedDict

from storage_engine import layout
from storage_engine.config import StorageConfig
from storage_engine.errors import (CorruptIndexError, CorruptRecordError, InvalidRequestError, PartitionNotFoundError,
                                   RemoteStorageError, StorageIOError)
from storage_engine.inspection.snapshot import LogSnapshot
from storage_engine.log.aborted_filter import AbortedFilter
from storage_engine.log.producer_state_manager import ProducerStateManager, rebuild
from storage_engine.record import codecs
from storage_engine.record.legacy_records import LegacyBatch
from storage_engine.record.record_batch import NO_SEQUENCE, TIMESTAMP_TYPE_NAMES, RecordBatch, increment_sequence
from storage_engine.segment.segment import LogSegment
from storage_engine.segment.txn_index import AbortedTxn
from storage_engine.tiered.whole_log import RemotePart, remote_part

READ_UNCOMMITTED = "read_uncommitted"
READ_COMMITTED = "read_committed"
ISOLATION_LEVELS = (READ_UNCOMMITTED, READ_COMMITTED)
FORMATS = ("auto", "text", "json", "hex")
MAX_LIMIT = 500
DEFAULT_LIMIT = 50
DEFAULT_MAX_SCAN_BYTES = 64 * 1024 * 1024
MAX_REPLAY_BYTES = 256 * 1024 * 1024
READ_ATTEMPTS = 3            # fresh listings after segments were renamed away under the read
_CONTROL_KEY = struct.Struct(">hh")
_CONTROL_VALUE = struct.Struct(">hi")
_ABORT, _COMMIT = 0, 1
# The remote part of the partition being browsed (None: all of it is local), for the read helpers below.
_REMOTE: contextvars.ContextVar[RemotePart | None] = contextvars.ContextVar("browse_remote", default=None)


class BrowsedRecord(TypedDict):
    offset: int
    timestamp: int                  # ms; -1 none
    timestamp_type: str             # CreateTime, LogAppendTime, NoTimestampType
    key: bytes | None
    value: bytes | None             # None: a tombstone (compacted topics delete the key with it)
    headers: list[tuple[str, bytes | None]]
    batch_base_offset: int
    batch_last_offset: int
    magic: int
    codec: str
    producer_id: int                # -1 none
    producer_epoch: int
    sequence: int                   # -1 none
    partition_leader_epoch: int
    transactional: bool
    control: str | None             # COMMIT, ABORT (a transaction marker) or another control type
    coordinator_epoch: int | None   # of a transaction marker
    txn: str | None                 # transactional records: committed, aborted or open


class BrowsePage(TypedDict):
    topic: str
    partition: int
    log_dir: str
    log_start_offset: int
    log_end_offset: int
    last_stable_offset: int
    open_transactions: list[dict]   # {producer_id, first_offset} of the transactions without a marker yet
    seek: str                       # offset, timestamp, key, start or latest
    requested_offset: int | None
    timestamp_ms: int | None
    key: bytes | None
    isolation: str
    start_offset: int               # where the scan began
    next_offset: int | None         # where the next page begins (None: the end was reached)
    records: list[BrowsedRecord]
    batches_checked: int            # batches whose CRC and offsets were checked on the way
    bytes_scanned: int
    scan_limited: bool              # a key search stopped at max_scan_bytes before finding ``limit`` records
    notes: list[str]
    error: dict | None              # damage met: {"message", "path", "position"}


def browse(config: StorageConfig, topic: str, partition: int, *, offset: int | None = None,
           timestamp_ms: int | None = None, key: bytes | None = None, latest: bool = False,
           limit: int = DEFAULT_LIMIT, isolation: str = READ_UNCOMMITTED,
           max_scan_bytes: int = DEFAULT_MAX_SCAN_BYTES,
           match: Callable[[BrowsedRecord], BrowsedRecord | None] | None = None) -> BrowsePage:
    """One page of records of ``topic``-``partition``: from ``offset``, else from the first record at or after
    ``timestamp_ms``, else the last ``limit`` offsets (``latest``), else from the log start; only those whose key
    is ``key`` when given (with ``latest``: the newest ``limit`` of them). At most ``limit`` records
    (1..:data:`MAX_LIMIT`), in offset order. See the module docstring.

    ``match`` (a search's filter, :mod:`storage_engine.inspection.search`) sees every record the scan reads and
    returns the record to keep (it may return a changed copy: a masked value) or None to skip it; with it the
    scan stops after ``max_scan_bytes`` as a key search does. Not with ``latest`` and ``key`` together."""
    layout.validate_topic(topic)
    if isolation not in ISOLATION_LEVELS:
        raise InvalidRequestError(f"isolation must be one of {ISOLATION_LEVELS}, got {isolation!r}")
    if not 1 <= limit <= MAX_LIMIT:
        raise InvalidRequestError(f"limit must be in [1, {MAX_LIMIT}], got {limit}")
    if max_scan_bytes < 1:
        raise InvalidRequestError(f"max_scan_bytes must be >= 1, got {max_scan_bytes}")
    if offset is not None and offset < 0:
        raise InvalidRequestError(f"offset must be >= 0, got {offset}")
    log_dir = _locate(config, topic, partition)
    attempt = 0
    while True:
        try:
            with LogSnapshot(config, log_dir, topic, partition) as snap, \
                    remote_part(config, snap.dir, topic, partition, snap.log_start_offset,
                                snap.local_log_start_offset) as part:
                token = _REMOTE.set(part)
                try:
                    return _browse(snap, offset, timestamp_ms, key, latest, limit, isolation, max_scan_bytes,
                                   match)
                finally:
                    _REMOTE.reset(token)
        except (StorageIOError, FileNotFoundError):
            # A segment renamed away (retention, a swap) between the listing and the read: list again.
            attempt += 1
            if attempt >= READ_ATTEMPTS:
                raise
            log_dir = _locate(config, topic, partition)


def _locate(config: StorageConfig, topic: str, partition: int) -> str:
    name = layout.partition_dir_name(topic, partition)
    for d in config.log_dirs:
        if os.path.isdir(os.path.join(d, name)):
            return d
    raise PartitionNotFoundError(f"partition {name} does not exist in any log dir {list(config.log_dirs)}")


def _browse(snap: LogSnapshot, offset: int | None, timestamp_ms: int | None, key: bytes | None, latest: bool,
            limit: int, isolation: str, max_scan_bytes: int,
            match: Callable[[BrowsedRecord], BrowsedRecord | None] | None = None) -> BrowsePage:
    start_offset, leo = _log_start(snap), snap.log_end_offset
    notes: list[str] = []
    ongoing = _open_transactions(snap, notes)
    lso = min([leo, *ongoing.values()])
    seek = ("offset" if offset is not None else "timestamp" if timestamp_ms is not None
            else "latest" if latest else "start")
    if key is not None:
        seek = "key" if seek == "start" else f"key from {seek}"
    page: BrowsePage = {
        "topic": snap.topic, "partition": snap.partition, "log_dir": snap.log_dir, "log_start_offset": start_offset,
        "log_end_offset": leo, "last_stable_offset": lso,
        "open_transactions": [{"producer_id": pid, "first_offset": first} for pid, first in sorted(ongoing.items())],
        "seek": seek, "requested_offset": offset, "timestamp_ms": timestamp_ms, "key": key, "isolation": isolation,
        "start_offset": start_offset, "next_offset": None, "records": [], "batches_checked": 0, "bytes_scanned": 0,
        "scan_limited": False, "notes": notes, "error": None}
    end = lso if isolation == READ_COMMITTED else leo
    try:
        if latest and key is not None and offset is None and timestamp_ms is None:
            _newest_with_key(snap, page, end, key, limit, isolation, max_scan_bytes, ongoing)
        else:
            start = _start(snap, offset, timestamp_ms, latest, limit, notes)
            page["start_offset"] = start
            if start < end:
                _scan(snap, page, start, end, key, limit, isolation, max_scan_bytes, ongoing, match=match)
    except CorruptRecordError as exc:
        page["error"] = {"message": str(exc), "path": exc.path, "position": exc.position}
        page["next_offset"] = None
    except RemoteStorageError as exc:
        page["error"] = {"message": str(exc), "path": getattr(exc, "key", None), "position": None}
        page["next_offset"] = None
    if isolation == READ_COMMITTED and end < leo and page["next_offset"] is None and page["error"] is None:
        notes.append(f"read_committed stops at the last stable offset {lso}: a transaction is still open there")
    return page


def _start(snap: LogSnapshot, offset: int | None, timestamp_ms: int | None, latest: bool, limit: int,
           notes: list[str]) -> int:
    start_offset, leo = _log_start(snap), snap.log_end_offset
    if offset is not None:
        if offset < start_offset:
            notes.append(f"offset {offset} is below the log start offset {start_offset}: shown from there")
            return start_offset
        if offset > leo:
            notes.append(f"offset {offset} is beyond the log end offset {leo}")
            return leo
        return offset
    if timestamp_ms is not None:
        found = _offset_for_timestamp(snap, timestamp_ms)
        if found is None:
            notes.append("no record has a timestamp at or after that instant")
            return leo
        return found
    if latest:
        return max(start_offset, leo - limit)
    return start_offset


def _scan(snap: LogSnapshot, page: BrowsePage, start: int, end: int, key: bytes | None, limit: int, isolation: str,
          max_scan_bytes: int, ongoing: dict[int, int], *, newest: bool = False,
          match: Callable[[BrowsedRecord], BrowsedRecord | None] | None = None) -> list[BrowsedRecord]:
    """The records of [start, end), checked batch by batch (see :func:`browse`): the first ``limit``, or with
    ``newest`` the last ``limit`` (the whole range is read); counts and ``next_offset`` go to ``page``."""
    aborted = AbortedFilter(_aborted_transactions(snap, start, end))
    # Forward, records go straight into the page, so those before a damaged batch are kept when it raises.
    found: collections.deque[BrowsedRecord] | list[BrowsedRecord] = (collections.deque(maxlen=limit) if newest
                                                                      else page["records"])
    next_offset = start
    for batch in _checked_batches(snap, start):
        if batch.base_offset >= end:
            break
        page["batches_checked"] += 1
        page["bytes_scanned"] += batch.size_in_bytes
        status = _transaction_status(batch, aborted, ongoing)
        if isolation == READ_COMMITTED and (batch.is_control or status == "aborted"):
            next_offset = max(next_offset, batch.next_offset)
            continue
        for rec in batch.records():
            if rec.offset < next_offset:
                continue
            if rec.offset >= end:
                break
            if key is not None and (batch.is_control or rec.key != key):
                continue
            record: BrowsedRecord | None = _record(batch, rec.offset, rec.timestamp, rec.key, rec.value, rec.headers,
                                                   status)
            if match is not None and record is not None:
                record = match(record)
            if record is None:
                continue
            found.append(record)
            if not newest and len(found) >= limit:
                page["next_offset"] = rec.offset + 1 if rec.offset + 1 < end else None
                return list(found)
        next_offset = max(next_offset, batch.next_offset)
        if (not newest and (key is not None or match is not None) and page["bytes_scanned"] >= max_scan_bytes
                and next_offset < end):
            page["scan_limited"] = True
            page["notes"].append(f"the {'key ' if match is None else ''}search read {page['bytes_scanned']} bytes and stopped at offset "
                                 f"{next_offset}: continue from there for more")
            break
    page["next_offset"] = next_offset if next_offset < end else None
    return list(found)


def _newest_with_key(snap: LogSnapshot, page: BrowsePage, end: int, key: bytes, limit: int, isolation: str,
                     max_scan_bytes: int, ongoing: dict[int, int]) -> None:
    """The newest ``limit`` records with ``key`` before ``end``: segment after segment from the newest back, until
    enough are found or ``max_scan_bytes`` were read (then the page says how far back it looked)."""
    bases = [seg.base_offset for seg in snap.segments]
    ranges = [(max(lo, snap.log_start_offset), min(hi, end))
              for lo, hi in zip(bases, bases[1:] + [snap.log_end_offset])]
    records: list[BrowsedRecord] = []
    for lo, hi in reversed(ranges):
        if lo >= hi:
            continue
        page["start_offset"] = lo
        records = (_scan(snap, page, lo, hi, key, limit, isolation, max_scan_bytes, ongoing, newest=True)
                   + records)[-limit:]
        page["records"] = records          # kept if an older segment turns out damaged
        if len(records) >= limit:
            break
        if page["bytes_scanned"] >= max_scan_bytes and lo > snap.log_start_offset:
            page["scan_limited"] = True
            page["notes"].append(f"the key search read {page['bytes_scanned']} bytes, back to offset {lo}, and "
                                 "stopped: search from an offset for older records")
            break
    page["next_offset"] = None


def _log_start(snap: LogSnapshot) -> int:
    """The first offset a page can show: the remote part's start, else the local log start (a tiered topic
    whose remote part cannot be read shows its local part)."""
    part = _REMOTE.get()
    return part.log_start if part is not None else snap.local_log_start_offset


def _checked_batches(snap: LogSnapshot, start: int) -> Iterator[RecordBatch | LegacyBatch]:
    """Every checked batch from the one holding ``start`` to the last whole batch of the active segment (the
    remote part first, when ``start`` lies below the local log start)."""
    part = _REMOTE.get()
    if part is not None and start < part.local_start:
        yield from part.batches(start)
        start = part.local_start
    segments = snap.segments
    for i, seg in enumerate(segments):
        upper = segments[i + 1].base_offset if i + 1 < len(segments) else None
        if upper is not None and upper <= start:
            continue
        end = None if upper is not None else _whole_batches_end(seg)
        yield from seg.checked_batches(max(start, seg.base_offset), upper, end)


def _whole_batches_end(seg: LogSegment) -> int | None:
    """The byte position after the last whole batch of the active segment (a writer may be appending one); None
    when the bytes there do not parse, so that the checked scan reaches the damage and reports it."""
    _, pos = seg.offset_index.lookup(seg.offset_index.last_offset)
    end = pos
    try:
        for batch in seg.log.batches(pos):
            end = batch.file_position + batch.size_in_bytes
    except CorruptRecordError:
        return None
    return end


def _offset_for_timestamp(snap: LogSnapshot, timestamp_ms: int) -> int | None:
    """The offset of the first record with timestamp >= ``timestamp_ms`` (Kafka's ``fetchOffsetByTimestamp``:
    the remote part first)."""
    part = _REMOTE.get()
    found_remote = part.offset_for_timestamp(timestamp_ms) if part is not None else None
    if found_remote is not None:
        return found_remote[1]
    last = len(snap.segments) - 1
    for i, seg in enumerate(snap.segments):
        if i < last and seg.largest_timestamp() < timestamp_ms:
            continue
        found = seg.find_offset_by_timestamp(timestamp_ms, max(seg.base_offset, snap.log_start_offset))
        if found is not None:
            return found[1]
    return None


def _open_transactions(snap: LogSnapshot, notes: list[str]) -> dict[int, int]:
    """{producer id: first offset} of the transactions without a marker yet, from the producer snapshots and a
    replay of the batches after the newest (nothing on disk changes). Without any snapshot the replay would read
    the whole log: above :data:`MAX_REPLAY_BYTES` the page goes without (and says so)."""
    psm = ProducerStateManager(snap.dir, snap.name)
    if not psm.snapshot_offsets() and snap.size_in_bytes() > MAX_REPLAY_BYTES:
        notes.append("open transactions not determined: the partition has no producer snapshot to start from")
        return {}
    try:
        rebuild(psm, snap.segments, snap.log_start_offset, snap.log_end_offset, exclusive=False)
    except (CorruptIndexError, CorruptRecordError) as exc:
        notes.append(f"open transactions not determined: {exc}")
        return {}
    return {pid: first for first, pid in psm.ongoing_txns.items()}


def _aborted_transactions(snap: LogSnapshot, start: int, end: int) -> list[AbortedTxn]:
    """Aborted transactions overlapping [start, end), from the ``.txnindex`` of the segment holding ``start`` on,
    until one proves the search complete (Kafka's ``collectAbortedTransactions``; the remote part's first)."""
    out: list[AbortedTxn] = []
    part = _REMOTE.get()
    if part is not None and start < part.local_start:
        out.extend(part.aborted_transactions(start, end))
        start = part.local_start
    segments = snap.segments
    for i, seg in enumerate(segments):
        if i + 1 < len(segments) and segments[i + 1].base_offset <= start:
            continue
        result = seg.txn_index.collect_aborted_txns(start, end)
        out.extend(result.aborted)
        if result.complete:
            break
    return out


def _transaction_status(batch: RecordBatch | LegacyBatch, aborted: AbortedFilter, ongoing: dict[int, int]) -> str | None:
    """committed, aborted or open for a transactional batch (None otherwise); advances Kafka's consumer-side
    tracking of aborted producers (``aborted``) past ``batch``."""
    if aborted.is_aborted(batch):
        return "aborted"
    if batch.magic < 2 or batch.producer_id < 0 or batch.is_control or not batch.is_transactional:
        return None
    first = ongoing.get(batch.producer_id)
    if first is not None and batch.base_offset >= first:
        return "open"
    return "committed"


def _control_type(batch: RecordBatch | LegacyBatch) -> str | None:
    return batch.control_type() if isinstance(batch, RecordBatch) else None


def _record(batch: RecordBatch | LegacyBatch, offset: int, timestamp: int, key: bytes | None, value: bytes | None,
            headers: tuple, status: str | None) -> BrowsedRecord:
    v2 = isinstance(batch, RecordBatch)
    sequence = NO_SEQUENCE
    if v2 and batch.base_sequence != NO_SEQUENCE:
        sequence = increment_sequence(batch.base_sequence, offset - batch.base_offset)
    control = coordinator_epoch = None
    if batch.is_control:
        control = "UNKNOWN"
        if key is not None and len(key) >= _CONTROL_KEY.size:
            ctype = _CONTROL_KEY.unpack_from(key)[1]
            control = {_ABORT: "ABORT", _COMMIT: "COMMIT"}.get(ctype, f"control type {ctype}")
        if value is not None and len(value) >= _CONTROL_VALUE.size and control in ("ABORT", "COMMIT"):
            coordinator_epoch = _CONTROL_VALUE.unpack_from(value)[1]
    return {"offset": offset, "timestamp": timestamp,
            "timestamp_type": TIMESTAMP_TYPE_NAMES.get(batch.timestamp_type, str(batch.timestamp_type)),
            "key": key, "value": value, "headers": [(str(k), v) for k, v in headers],
            "batch_base_offset": batch.base_offset, "batch_last_offset": batch.last_offset, "magic": batch.magic,
            "codec": codecs.CODEC_NAMES.get(batch.compression, str(batch.compression)),
            "producer_id": batch.producer_id, "producer_epoch": batch.producer_epoch, "sequence": sequence,
            "partition_leader_epoch": batch.partition_leader_epoch, "transactional": bool(batch.is_transactional),
            "control": control, "coordinator_epoch": coordinator_epoch, "txn": status}


# -- showing bytes to people -------------------------------------------------------------------------------------

class Rendered(TypedDict):
    format: str          # the format used: text, json, hex, or null
    text: str
    size: int            # bytes of the original (0 for null)
    truncated: bool      # only the first ``max_bytes`` were rendered
    note: str | None     # why the asked format was not used


def render_bytes(data: bytes | None, fmt: str = "auto", max_bytes: int = 64 * 1024) -> Rendered:
    """``data`` as text in ``fmt`` (see the module docstring); a format that does not fit (``json`` of bytes
    that do not parse, ``text`` of bytes that are not UTF-8) falls back to the next one and says why."""
    if fmt not in FORMATS:
        raise InvalidRequestError(f"format must be one of {FORMATS}, got {fmt!r}")
    if data is None:
        return {"format": "null", "text": "null", "size": 0, "truncated": False, "note": None}
    size = len(data)
    head = data[:max_bytes]
    truncated = size > max_bytes
    note = None
    if fmt in ("auto", "json") and not truncated:
        try:
            parsed = json.loads(data)
        except ValueError:
            parsed = _NOT_JSON
        if parsed is not _NOT_JSON and (fmt == "json" or isinstance(parsed, (dict, list))):
            text = json.dumps(parsed, indent=2 if fmt == "json" else None, ensure_ascii=False,
                              separators=None if fmt == "json" else (", ", ": "))
            return {"format": "json", "text": text, "size": size, "truncated": False, "note": None}
        if fmt == "json":
            note = "not JSON"
    elif fmt == "json":
        note = f"too large to parse as JSON (over {max_bytes} bytes)"
    if fmt != "hex":
        decoded = _utf8(head, truncated)
        if decoded is None and fmt in ("text", "json"):
            note = "not UTF-8 text"
        if decoded is not None and (fmt != "auto" or _printable(decoded)):
            return {"format": "text", "text": decoded, "size": size, "truncated": truncated, "note": note}
    return {"format": "hex", "text": hex_dump(head), "size": size, "truncated": truncated, "note": note}


_NOT_JSON = object()


def _utf8(data: bytes, truncated: bool) -> str | None:
    """``data`` decoded, or None when it is not UTF-8 (a character cut by a truncation at the end is dropped)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        if truncated and exc.start >= len(data) - 3:
            try:
                return data[:exc.start].decode("utf-8")
            except UnicodeDecodeError:
                return None
        return None


def _printable(text: str) -> bool:
    return all(c.isprintable() or c in "\n\r\t" for c in text)


def hex_dump(data: bytes, width: int = 16) -> str:
    """``00000000  7b 22 61 22 ...  |{"a"...|``: offset, bytes in hex, the printable ASCII ones."""
    lines = []
    for pos in range(0, len(data), width):
        chunk = data[pos:pos + width]
        hexes = " ".join(f"{b:02x}" for b in chunk)
        ascii_ = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append(f"{pos:08x}  {hexes:<{width * 3 - 1}}  |{ascii_}|")
    return "\n".join(lines)
