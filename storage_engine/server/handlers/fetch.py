"""Fetch and ListOffsets.

Fetch (``ReplicaManager.fetchMessages`` / ``DelayedFetch``): each partition is read from its fetch offset as
whole, CRC-checked batches, up to the high watermark (``read_uncommitted``) or the last stable offset
(``read_committed``, with the aborted transactions overlapping the range); the first batch of the first partition
with data is sent even above the byte limits (KIP-74). A local read is a slice of the segment file
(``Log.read_slice``: bytes checked once are not read again, the rest is checked in pieces of at most 1 MiB), which
the connection sends with ``sendfile``; its records' length comes from the batch headers, cut at the bound as
:func:`_cut_at` cuts the remote tier's bytes. The answer waits up to ``max_wait_ms`` until ``min_bytes`` are there,
in the purgatory (:mod:`storage_engine.server.purgatory`): woken only by a change to one of its partitions, an
append through this broker or a change another process made to their files
(:mod:`storage_engine.server.file_watch`), it re-reads the partitions that changed. Fetch sessions (KIP-227,
:mod:`storage_engine.server.fetch_sessions`): a session's incremental fetch answers only the partitions with
something new, and does not read a partition whose log is as it was when it last had nothing to send.

Where the reads are done: on the event loop first (:func:`_read_now`), when every partition of the fetch is served
from verified bytes already in the page cache with no lock, refresh, check or disk read waited for
(:func:`storage_engine.segment.slice_read.nonblocking`; a sequential consumer's repeated reads, and every
re-read of bytes another consumer already read), and, for ``read_committed``, every ``.txnindex`` to search as it
was last read (:mod:`storage_engine.segment.txn_index` keeps its entries until the file changes); else in the
broker's read threads, as if the first attempt had not been made. A thread hand-off costs more than such a read.
The request is read by :mod:`.fetch_request_wire`, the response encoded by :mod:`.fetch_wire`.

Offsets below a tiered partition's local log start (the engine raises ``OffsetInRemoteStorageError``) are read
from the object store (:mod:`storage_engine.tiered.reads`, through :class:`~storage_engine.server.remote_tier.
RemoteTier`), in the same thread pool, as whole CRC-checked batches of one remote segment, with the aborted
transactions of the remote ``.txnindex`` objects (and the local ones after them). A remote object that is missing
answers KAFKA_STORAGE_ERROR, as a local loss does, and a damaged one CORRUPT_MESSAGE, as local damage does (Kafka
itself answers UNKNOWN_SERVER_ERROR for any remote read failure); either is logged with the partition, the fetch
offset and the segment's offsets, and no byte of it is sent. A local read that fails is logged in one line too, as
Kafka's ``ReplicaManager`` logs it, unless it is an offset out of range, an unknown partition, an offline dir or
offsets the log lost.

Authorization as Kafka's ``KafkaApis.handleFetchRequest``: a consumer needs READ on each topic (an unknown topic
id is UNKNOWN_TOPIC_ID first; a refused topic answers TOPIC_AUTHORIZATION_FAILED whether or not it exists, then an
unknown one UNKNOWN_TOPIC_OR_PARTITION); a follower's fetch (replica id >= 0) needs CLUSTER_ACTION on the cluster,
else every partition answers TOPIC_AUTHORIZATION_FAILED. ListOffsets needs DESCRIBE on each topic
(``handleListOffsetRequest``), else its partitions answer TOPIC_AUTHORIZATION_FAILED.

ListOffsets answers as Kafka 3.9's ``UnifiedLog.fetchOffsetByTimestamp``: EARLIEST (-2) the log start offset,
remote part included; EARLIEST_LOCAL (-4) the local log start offset of a tiered partition (the log start of any
other); LATEST_TIERED (-5) the highest offset copied to remote storage (-1, leader epoch -1, when none is or the
partition is not tiered); a timestamp is searched in the remote segments first, then locally. A special timestamp
the request's version does not know (``ReplicaManager.timestampMinSupportedVersion``: -3 from v7, -4 from v8, -5
from v9) answers UNSUPPORTED_VERSION for that partition.
"""
from __future__ import annotations

import logging
import time
import uuid
from typing import Any, cast

from storage_engine.acl.model import Operation, ResourceType
from storage_engine.errors import (DataLossError, LogDirOfflineError, OffsetInRemoteStorageError,
                                   PartitionNotFoundError, RemoteStorageError)
from storage_engine.log.log import Log
from storage_engine.segment.file_slice import FileSlice
from storage_engine.segment.slice_read import WouldBlock, nonblocking
from storage_engine.tiered import whole_log
from storage_engine.record.record_batch import (BATCH_OVERHEAD, ENTRY_HEADER, LOG_OVERHEAD, MAGIC_OFFSET, MAGIC_V2,
                                                RecordBatch)
from storage_engine.server import access
from storage_engine.server.errors import ErrorCode, error_code, message
from storage_engine.server.fetch_sessions import CachedPartition
from storage_engine.server.handlers import fetch_request_wire  # noqa: F401  (registers the direct Fetch reader)
from storage_engine.server.handlers import fetch_wire
from storage_engine.server.handlers.context import Ctx, has, log_now
from storage_engine.server.protocol import Encoded
from storage_engine.server.responses.fetch import (AbortedTransaction, FetchableTopicResponse, FetchResponse,
                                                   ListOffsetsPartitionResponse, ListOffsetsResponse,
                                                   ListOffsetsTopicResponse, PartitionData)

READ_COMMITTED = 1
COMMITTED_READ_ATTEMPTS = 5   # read_committed reads of a partition another process kept changing under them
logger = logging.getLogger(__name__)


def _cut_at(data: bytes, bound: int) -> bytes:
    """The whole batches of ``data`` that start below offset ``bound``."""
    pos = 0
    while pos + LOG_OVERHEAD <= len(data):
        base, length = ENTRY_HEADER.unpack_from(data, pos)
        if base >= bound:
            break
        pos += LOG_OVERHEAD + length
    return data[:min(pos, len(data))]


def _read_partition(ctx: Ctx, topic: str, part: Any, isolation: int, budget: int, first: bool,
                    refresh: bool, now: bool) -> tuple[PartitionData, int]:
    """One partition's entry and its records' size. ``now``: on the event loop (:func:`_read_now`): any failure
    raises :class:`WouldBlock`, the read threads' read then answering it (refresh, retries, error code, log).

    A ``read_committed`` read looks the ``.txnindex`` files up by path after reading its bytes: if another process
    began a change meanwhile (a cleaner's swap, a truncation: the shared generation moves before any file is
    renamed or cut), they may not be the files of those bytes, so the read is done again on a refreshed view (on
    the loop: :class:`WouldBlock`); a partition that keeps changing answers no records this time."""
    for _ in range(COMMITTED_READ_ATTEMPTS):
        read = _read_partition_once(ctx, topic, part, isolation, budget, first, refresh, now)
        if read is not None:
            return read
        refresh = True
    return {"partition_index": int(part.partition), "error_code": ErrorCode.none, "high_watermark": -1,
            "last_stable_offset": -1, "log_start_offset": -1, "aborted_transactions": None, "records": b""}, 0


def _read_partition_once(ctx: Ctx, topic: str, part: Any, isolation: int, budget: int, first: bool,
                         refresh: bool, now: bool) -> tuple[PartitionData, int] | None:
    """:func:`_read_partition`'s one attempt; None when a read_committed read must be done again."""
    p = int(part.partition)
    base: PartitionData = {"partition_index": p, "error_code": ErrorCode.none, "high_watermark": -1,
                           "last_stable_offset": -1, "log_start_offset": -1, "aborted_transactions": None,
                           "records": b""}
    try:
        shared: int | None = None       # the shared generation, when the event loop's check read the state
        log: Log | None
        if now:
            log, shared = log_now(ctx, topic, p)
        else:
            log = ctx.broker.manager.get_log(topic, p)
        if log is None:
            raise PartitionNotFoundError(f"partition {topic}-{p} does not exist")
        if refresh:
            log.refresh()
        hw, lso, start = log.high_watermark, log.last_stable_offset, log.log_start_offset
        base.update({"high_watermark": hw, "last_stable_offset": lso, "log_start_offset": start})
        offset = int(part.fetch_offset)
        bound = lso if isolation == READ_COMMITTED else hw
        limit = max(0, min(int(part.partition_max_bytes), budget))
        data: bytes | FileSlice = b""
        upper, remote = offset, False
        if offset < bound or offset < start or offset > hw:
            data, upper, remote = _read(ctx, log, topic, p, offset, max(limit, 1), first, bound, now, shared)
            if not first and len(data) > limit:
                _drop(data)
                data, upper = b"", offset
        # a file slice goes out as it is, sent from the segment file (fetch_wire keeps it a part of its own)
        base["records"] = cast(bytes, data)
        if isolation == READ_COMMITTED:
            base["aborted_transactions"] = _aborted(ctx, log, topic, p, offset, upper if data else offset, remote,
                                                    now)
            if not log.view_holds(now=now):
                if now:
                    raise WouldBlock(f"{topic}-{p} changed under a read_committed read")
                _drop(data)
                return None
        return base, len(data)
    except Exception as exc:   # noqa: BLE001 - the partition's error code
        _drop(base.get("records"))
        base["records"] = b""
        if now:
            raise WouldBlock(f"{topic}-{p}: {exc}") from None
        base["error_code"] = code = error_code(exc)
        if code not in (ErrorCode.offset_out_of_range, ErrorCode.unknown_topic_or_partition):
            ctx.broker.stats.errors += 1
            # an offline dir was logged when it went, lost offsets are verify's: either would log every fetch
            if not isinstance(exc, (LogDirOfflineError, DataLossError)):
                logger.warning("fetch of %s-%d at offset %s answered %s: %s", topic, p, part.fetch_offset,
                               code.name.upper(), message(exc))
        return base, 0


def _drop(data: object) -> None:
    if isinstance(data, FileSlice):
        data.close()


def _read(ctx: Ctx, log: Log, topic: str, p: int, offset: int, max_bytes: int, first: bool,
          bound: int, now: bool = False, shared: int | None = None) -> tuple[bytes | FileSlice, int, bool]:
    """(records, one past their last offset, True when they came from remote): the log's read as a slice of its
    segment file, cut before ``bound``, or the remote tier's bytes below the local log start. ``now``: on the
    event loop, with the log's lock free (else :class:`WouldBlock`), never from the remote tier."""
    try:
        if now:
            if not log.mutex.acquire(blocking=False):
                raise WouldBlock(f"{topic}-{p} is busy")
            try:
                local = log.read_slice(offset, max_bytes, min_one_message=first, bound=bound, generation=shared)
            finally:
                log.mutex.release()
        else:
            local = log.read_slice(offset, max_bytes, min_one_message=first, bound=bound)
        if local is None or local.slice is None:
            return b"", offset, False
        return local.slice, max(offset, local.next_offset), False
    except OffsetInRemoteStorageError:
        tier = ctx.broker.remote
        if tier is None or now:
            raise
    try:
        fetched = tier.read(topic, p, offset, max_bytes, first, ctx.broker.topic_id(topic))
    except RemoteStorageError as exc:
        logger.error("fetch of %s-%d at offset %d from remote storage failed: %s", topic, p, offset, exc)
        raise
    data = _cut_at(fetched.data, bound) if fetched is not None else b""
    return data, _upper(data, offset), True


def _upper(data: bytes, offset: int) -> int:
    """One past the last offset of the batches in ``data`` (``offset`` when there are none)."""
    upper = offset
    pos = 0
    while pos + LOG_OVERHEAD <= len(data):
        base, length = ENTRY_HEADER.unpack_from(data, pos)
        last = base                                           # a legacy entry holds one offset (or its last)
        if pos + BATCH_OVERHEAD <= len(data) and data[pos + MAGIC_OFFSET] == MAGIC_V2:
            last = RecordBatch(data, pos).last_offset
        upper = max(upper, last + 1)
        pos += LOG_OVERHEAD + length
    return upper


def _aborted(ctx: Ctx, log: Log, topic: str, p: int, offset: int, upper: int,
             remote: bool, now: bool = False) -> tuple[AbortedTransaction, ...]:
    """The aborted transactions overlapping the fetched offsets [offset, upper) (Kafka's
    ``collectAbortedTransactions``). ``now``: on the event loop, with the log's lock free and every ``.txnindex``
    to search as it was last read (else :class:`WouldBlock`)."""
    if upper <= offset:
        return ()
    tier = ctx.broker.remote
    if remote and tier is not None:
        found = whole_log.aborted_transactions(log, tier.reader, topic, p, offset, upper)
    elif now:
        if not log.mutex.acquire(blocking=False):
            raise WouldBlock(f"{topic}-{p} is busy")
        try:
            found = log.aborted_transactions(offset, upper)
        finally:
            log.mutex.release()
    else:
        found = log.aborted_transactions(offset, upper)
    return tuple({"producer_id": a.producer_id, "first_offset": a.first_offset} for a in found)


async def _names_by_id(ctx: Ctx, topics: Any) -> list[tuple[str | None, Any, Any]]:
    """(name, id, topic) of a v13+ fetch's topics (by id; the direct reader's topics hold a name field too)."""
    out = []
    for t in topics:
        name = await _topic_by_id(ctx, t.topic_id)
        out.append((name, t.topic_id, t))
    return out


async def _topic_by_id(ctx: Ctx, topic_id: uuid.UUID) -> str | None:
    """The topic of ``topic_id``: from the ids the broker knows, else looked up in the read threads."""
    broker = ctx.broker
    name = broker.known_topic_by_id(topic_id)
    return name if name is not None else await broker.call(broker.topic_by_id, topic_id)


def _replica_id(body: Any) -> int:
    """Kafka's ``FetchRequest.replicaId``: in ``replica_state`` from v15, a field of its own before."""
    if has(body, "replica_state"):
        return int(body.replica_state.replica_id)
    return int(getattr(body, "replica_id", -1))


def _refused_topics(ctx: Ctx, follower: bool, parts: list[CachedPartition]) -> set[str | None]:
    """The topics of ``parts`` whose partitions answer TOPIC_AUTHORIZATION_FAILED (None: the unresolved topic
    ids, refused too in a follower's fetch). Without an authorizer every check allows: none (asked per fetch, so
    not walked)."""
    if ctx.broker.authorizer is None:
        return set()
    names = list(dict.fromkeys(w.topic for w in parts))
    if follower:                    # a follower: CLUSTER_ACTION on the cluster, READ not asked
        return set() if access.allowed_cluster(ctx, Operation.CLUSTER_ACTION) else set(names)
    readable = access.allowed_names(ctx, Operation.READ, ResourceType.TOPIC, names)
    return {name for name in names if name is not None and name not in readable}


async def fetch(ctx: Ctx, body: Any) -> FetchResponse | Encoded:
    """Read the fetch's partitions (the request's, or its session's); while ``min_bytes`` are not there and
    ``max_wait_ms`` is not over, wait in the purgatory for a change to one of them and re-read those that changed
    (every partition when some other one already holds bytes, so the byte limits apply in order)."""
    broker = ctx.broker
    broker.stats.fetch_requests += 1
    purgatory = broker.purgatory
    purgatory.files.attach()
    deadline = time.monotonic() + max(0, int(body.max_wait.total_seconds() * 1000)) / 1000
    min_bytes = int(body.min_bytes)
    isolation = int(getattr(body, "isolation_level", 0))
    version = ctx.version
    uses_ids = version >= 13
    topics = (await _names_by_id(ctx, body.topics) if uses_ids     # no coroutine for a fetch by names
              else [(t.topic, None, t) for t in body.topics])
    wanted = [CachedPartition(name, topic_id, int(p.partition), int(p.fetch_offset), int(p.partition_max_bytes))
              for name, topic_id, t in topics for p in t.partitions]
    forgotten = [(f.topic_id if uses_ids else f.topic, int(p))
                 for f in getattr(body, "forgotten_topics_data", ()) for p in f.partitions]
    follower = _replica_id(body) >= 0
    context = broker.fetch_sessions.new_context(version, int(getattr(body, "session_id", 0)),
                                                int(getattr(body, "session_epoch", -1)), wanted, forgotten,
                                                follower)
    if context.kind == "error":
        return _encoded(version, {"throttle_time": 0, "error_code": context.error, "session_id": 0, "responses": ()})
    parts = context.partitions
    if context.kind == "incremental" and uses_ids:
        await _resolve_ids(ctx, parts)
    refused = _refused_topics(ctx, follower, parts)
    keys = [(w.topic, w.partition) for w in parts if w.topic is not None and w.topic not in refused]
    entries: list[PartitionData | None] = [None] * len(parts)
    sizes = [0] * len(parts)
    only: set[tuple[str, int]] | None = None
    while True:
        since = purgatory.seq
        args = (ctx, parts, refused, isolation, int(body.max_bytes), entries, sizes, only,
                context.kind == "incremental")
        read = _read_now(*args)
        total, errors = read if read is not None else await broker.call(_read_all, *args)
        remaining = deadline - time.monotonic()
        # refused topics do not end the wait (Kafka leaves them out of the delayed fetch), unless nothing is left
        if total >= min_bytes or errors or remaining <= 0 or not keys:
            break
        changed = await purgatory.wait(keys, since, remaining)
        if not changed:
            break
        only = changed if total == 0 else None
    session_id, sent = broker.fetch_sessions.respond(context, entries, sizes)
    if len(sent) < len(entries):
        kept = {id(entry) for _, entry in sent}
        for entry in entries:
            if entry is not None and id(entry) not in kept:
                _release(entry)
    broker.stats.fetch_bytes += total
    return _encoded(version, {"throttle_time": 0, "error_code": ErrorCode.none, "session_id": session_id,
                              "responses": _by_topic(sent)})


def _encoded(version: int, response: FetchResponse) -> FetchResponse | Encoded:
    """The response encoded by :mod:`.fetch_wire` (every version this broker serves), else left to kio."""
    if fetch_wire.MIN_VERSION <= version <= fetch_wire.MAX_VERSION:
        return fetch_wire.encode(version, response)
    return response


async def _resolve_ids(ctx: Ctx, parts: list[CachedPartition]) -> None:
    """A session's topics by id, named again for this request (a topic deleted meanwhile: None, UNKNOWN_TOPIC_ID;
    one made again under the same name has a new id, so the old id never reads it)."""
    names: dict[uuid.UUID | None, str | None] = {}
    for w in parts:
        if w.topic_id not in names:
            names[w.topic_id] = await _topic_by_id(ctx, w.topic_id) if w.topic_id is not None else None
        w.topic = names[w.topic_id]


def _by_topic(sent: list[tuple[CachedPartition, PartitionData]]) -> tuple[FetchableTopicResponse, ...]:
    """The reply's topics: consecutive partitions of one topic together, as Kafka's ``FetchResponse.of``."""
    grouped: list[tuple[tuple[str | None, uuid.UUID | None], list[PartitionData]]] = []
    for w, entry in sent:
        key = (w.topic, w.topic_id)
        if grouped and grouped[-1][0] == key:
            grouped[-1][1].append(entry)
        else:
            grouped.append((key, [entry]))
    return tuple({"topic": name or "", "topic_id": topic_id or uuid.UUID(int=0), "partitions": tuple(entries)}
                 for (name, topic_id), entries in grouped)


def _read_now(ctx: Ctx, parts: list[CachedPartition], refused: set[str | None], isolation: int, max_bytes: int,
              entries: list[PartitionData | None], sizes: list[int], only: set[tuple[str, int]] | None,
              incremental: bool) -> tuple[int, bool] | None:
    """:func:`_read_all` on the event loop, when every partition it reads is served from verified bytes already
    in the page cache, no lock, disk, check, refresh or remote read waited for
    (:func:`~storage_engine.segment.slice_read.nonblocking`); None at the first partition that is not, and then the
    read threads read them all, as if this had not been tried (its entries are released by that read, the
    partitions' session state is put back)."""
    quiet = [w.quiet for w in parts]
    try:
        with nonblocking():
            out = _read_all(ctx, parts, refused, isolation, max_bytes, entries, sizes, only, incremental, True)
    except WouldBlock:
        for w, q in zip(parts, quiet):
            w.quiet = q
        ctx.broker.stats.fetch_reads_pooled += 1
        return None
    ctx.broker.stats.fetch_reads_inline += 1
    return out


def _read_all(ctx: Ctx, parts: list[CachedPartition], refused: set[str | None], isolation: int, max_bytes: int,
              entries: list[PartitionData | None], sizes: list[int], only: set[tuple[str, int]] | None,
              incremental: bool, now: bool = False) -> tuple[int, bool]:
    """Read ``parts`` in order into ``entries``/``sizes`` (all of them, or those in ``only``, the others kept as
    the last read left them); the total bytes and whether a partition answered an error that ends the wait.

    A partition's view of the files is refreshed only when the file watcher says another process may have changed
    it. In an incremental session fetch, a partition whose last read had nothing to send and whose log is as it
    was then (same high watermark, last stable offset, log start offset and fetch offset, no change seen in its
    files) is not read at all: its entry is None, and the reply leaves it out as Kafka would."""
    files = ctx.broker.purgatory.files
    logs = ctx.broker.manager.logs
    total, errors = 0, False
    for i, w in enumerate(parts):
        name, p = w.topic, w.partition
        if only is not None and (name, p) not in only:
            total += sizes[i]
            entry = entries[i]
            errors = errors or (entry is not None and entry["error_code"] not in _WAITING_CODES)
            continue
        sizes[i] = 0
        if entries[i] is not None:
            _release(entries[i])
        if name in refused:
            entries[i] = {"partition_index": p, "error_code": ErrorCode.topic_authorization_failed,
                          "high_watermark": -1, "last_stable_offset": -1, "log_start_offset": -1, "records": b"",
                          "aborted_transactions": None}
            continue
        if name is None:
            entries[i] = {"partition_index": p, "error_code": ErrorCode.unknown_topic_id, "high_watermark": -1,
                          "records": b"", "aborted_transactions": None}
            errors = True
            continue
        log = logs.get((name, p))
        if now:
            if log is None or not files.is_current((name, p), log):
                raise WouldBlock(f"{name}-{p}'s view may need a refresh")
            refresh = False
        else:
            refresh = log is None or files.needs_refresh((name, p), log)
        quiet = w.quiet
        if (incremental and only is None and not refresh and quiet is not None and quiet[0] is log
                and quiet[1:] == (log.high_watermark, log.last_stable_offset, log.log_start_offset, w.fetch_offset)):
            entries[i] = None
            continue
        entry, size = _read_partition(ctx, name, w, isolation, max_bytes - total, total == 0, refresh, now)
        entries[i], sizes[i] = entry, size
        total += size
        code = entry["error_code"]
        errors = errors or code != ErrorCode.none
        hw, lso = entry["high_watermark"], entry.get("last_stable_offset", -1)
        w.quiet = None
        if code == ErrorCode.none and size == 0 and w.fetch_offset == (
                lso if isolation == READ_COMMITTED else hw):
            w.quiet = (logs.get((name, p)), hw, lso, entry.get("log_start_offset", -1), w.fetch_offset)
    return total, errors


_WAITING_CODES = (ErrorCode.none, ErrorCode.topic_authorization_failed)


def _release(entry: PartitionData | None) -> None:
    """Close the records of an entry that will not be sent (a read replaced by a re-read, or left out of an
    incremental reply), if they hold a file (a slice of a segment); bytes need nothing."""
    close = getattr(entry.get("records") if entry is not None else None, "close", None)
    if callable(close):
        close()


# -- ListOffsets --------------------------------------------------------------------------------------------------
LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED = -1, -2, -3, -4, -5
# Kafka's ReplicaManager.timestampMinSupportedVersion: the first request version that may ask for each one.
MIN_VERSION = {EARLIEST: 1, LATEST: 1, MAX_TIMESTAMP: 7, EARLIEST_LOCAL: 8, LATEST_TIERED: 9}


def _offset_for(ctx: Ctx, topic: str, p: int, timestamp: int, isolation: int,
                version: int) -> ListOffsetsPartitionResponse:
    entry: ListOffsetsPartitionResponse = {"partition_index": p, "error_code": ErrorCode.none, "timestamp": -1,
                                           "offset": -1, "leader_epoch": -1}
    if timestamp < 0 and version < MIN_VERSION.get(timestamp, 1 << 15):
        entry["error_code"] = ErrorCode.unsupported_version
        return entry
    try:
        log = ctx.broker.manager.get_log(topic, p)
        if log is None:
            raise PartitionNotFoundError(f"partition {topic}-{p} does not exist")
        log.refresh()
        tier = ctx.broker.remote if log.config.remote_storage_enable else None
        if timestamp == LATEST:
            entry["offset"] = log.last_stable_offset if isolation == READ_COMMITTED else log.high_watermark
        elif timestamp == EARLIEST:
            entry["offset"] = log.log_start_offset
        elif timestamp == EARLIEST_LOCAL:
            entry["offset"] = log.local_log_start_offset if tier is not None else log.log_start_offset
        elif timestamp == LATEST_TIERED:
            if tier is not None:
                tier.refresh()
                entry["offset"] = tier.view.highest_offset(topic, p, topic_id=ctx.broker.topic_id(topic))
        elif timestamp == MAX_TIMESTAMP:
            found = _max_timestamp(log)
            if found is not None:
                entry["timestamp"], entry["offset"] = found
        else:
            if tier is not None and log.log_start_offset < log.local_log_start_offset:
                tier.refresh()
            found = whole_log.offset_for_timestamp(log, tier.reader if tier is not None else None, topic, p,
                                                      timestamp)
            if found is not None:
                entry["timestamp"], entry["offset"] = found
        if entry["offset"] >= 0:
            entry["leader_epoch"] = 0
    except Exception as exc:   # noqa: BLE001 - the partition's error code
        entry["error_code"] = error_code(exc)
    return entry


def _max_timestamp(log: Log) -> tuple[int, int] | None:
    """(max timestamp, offset of the first record carrying it), as Kafka 3.8+ answers MAX_TIMESTAMP: the segment
    with the largest timestamp, the batch holding it (named by its last offset), then that batch's records."""
    best = max(log.segments, key=lambda seg: seg.max_timestamp_so_far, default=None)
    if best is None or best.max_timestamp_so_far < 0:
        return None
    ts, shallow = best.max_timestamp_so_far, best.offset_of_max_timestamp_so_far
    for batch in best.checked_batches(max(shallow, log.log_start_offset)):
        for record in batch.records():
            if record.timestamp == ts and record.offset >= log.log_start_offset:
                return ts, record.offset
        break
    return ts, shallow


async def list_offsets(ctx: Ctx, body: Any) -> ListOffsetsResponse:
    isolation = int(getattr(body, "isolation_level", 0))
    topics: list[ListOffsetsTopicResponse] = []
    describable = access.allowed_names(ctx, Operation.DESCRIBE, ResourceType.TOPIC, (t.name for t in body.topics))
    for t in body.topics:
        parts: list[ListOffsetsPartitionResponse] = []
        if t.name not in describable:
            topics.append({"name": t.name, "partitions": tuple(
                {"partition_index": int(part.partition_index), "error_code": ErrorCode.topic_authorization_failed,
                 "timestamp": -1, "offset": -1, "leader_epoch": -1} for part in t.partitions)})
            continue
        for part in t.partitions:
            parts.append(await ctx.broker.call(_offset_for, ctx, t.name, int(part.partition_index),
                                               int(part.timestamp), isolation, ctx.version))
        topics.append({"name": t.name, "partitions": tuple(parts)})
    return {"throttle_time": 0, "topics": tuple(topics)}

