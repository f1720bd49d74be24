"""Fetch sessions (KIP-227), as Kafka's ``FetchSession``, ``FetchSessionCache`` and ``FetchContext`` keep them.

A consumer of many partitions sends them all once (a *full* fetch, session id 0, epoch 0); the broker answers with
a session id, and from then on the client sends only what changed (its new fetch offsets, partitions added, the
forgotten ones) with the next epoch, and the broker answers only the partitions with something to say: records,
a moved high watermark or log start offset, an error. Kafka's rules, followed here:

* (session 0, epoch -1): no session (a *sessionless* fetch); every partition answers, the reply's session id is 0.
* (0 or an id, epoch 0): a full fetch; a session named by the id is closed; a new one is made if the cache has a
  slot (or can evict, below), else the reply's session id is 0 and the client goes on with full fetches.
* (id, -1): a full fetch that closes the session and asks for none.
* (id, n > 0): incremental. An unknown id answers FETCH_SESSION_ID_NOT_FOUND (70); an epoch other than the one
  the session expects answers INVALID_FETCH_SESSION_EPOCH (71); a session made with topic ids (Fetch v13+) used
  by a request without them, or the other way round, answers FETCH_SESSION_TOPIC_ID_ERROR (106). Each error
  reply has session id 0 and no partitions. Otherwise the request's partitions are added or updated, the
  forgotten ones removed (a session left empty is closed: sessionless reply), the epoch moves on (wrapping from
  2^31-1 to 1) and every partition of the session is read; a partition is sent when it has records, an error,
  or a high watermark or log start offset other than the last one sent. One sent with records moves to the end
  of the session's order, so the byte limits do not always favour the same partitions.
* Before v7 there are no sessions.

The cache (``max.incremental.fetch.session.cache.slots``, default 1000; 0 turns sessions off) evicts as Kafka's:
first the least recently used session if it was idle for more than :data:`EVICTION_MS`; else, among the sessions
a new one may evict (a follower's may evict any consumer's session and followers' sessions older than
:data:`EVICTION_MS`; a consumer's only sessions older than that), the one of least value (consumer before follower,
then fewer partitions, then the lower id), if the new session is worth at least as much. Kafka decides the "older
than" when a session is used; here when a slot is wanted, which differs only for a session not used since.

Everything here runs on the event loop (a client sends its next fetch after the previous reply, so one session is
never used by two requests at once).
"""
from __future__ import annotations

import random
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from storage_engine.server.errors import ErrorCode

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
EVICTION_MS = 120_000         # Kafka's KafkaServer.MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS
INT32_MAX = (1 << 31) - 1
FIRST_VERSION = 7


def next_epoch(epoch: int) -> int:
    """Kafka's ``FetchMetadata.nextEpoch``."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == INT32_MAX else epoch + 1


class CachedPartition:
    """One partition of a fetch (the request's fields) and, in a session, what was last sent of it. ``quiet`` is
    the read path's note that the last read had nothing to send: (log, high watermark, last stable offset, log
    start offset, fetch offset); while they are all the same, an incremental fetch need not read it again."""

    __slots__ = ("topic", "topic_id", "partition", "fetch_offset", "partition_max_bytes", "high_watermark",
                 "log_start_offset", "quiet")

    def __init__(self, topic: str | None, topic_id: uuid.UUID | None, partition: int, fetch_offset: int,
                 partition_max_bytes: int):
        self.topic = topic
        self.topic_id = topic_id
        self.partition = partition
        self.fetch_offset = fetch_offset
        self.partition_max_bytes = partition_max_bytes
        self.high_watermark = -1
        self.log_start_offset = -1
        self.quiet: tuple[Any, ...] | None = None

    def key(self, uses_ids: bool) -> tuple[Any, int]:
        return (self.topic_id if uses_ids else self.topic, self.partition)

    def must_respond(self, entry: Any, size: int) -> bool:
        """Kafka's ``CachedPartition.maybeUpdateResponseData`` (updating what was last sent); ``size`` is the
        bytes of records the entry carries."""
        respond = size > 0
        hw, start = entry["high_watermark"], entry.get("log_start_offset", -1)
        if hw != self.high_watermark:
            respond, self.high_watermark = True, hw
        if start != self.log_start_offset:
            respond, self.log_start_offset = True, start
        if entry["error_code"] != ErrorCode.none:
            # sent again once the error is gone: the cached high watermark is made invalid
            respond, self.high_watermark = True, -1
        return respond


@dataclass
class FetchSession:
    id: int
    privileged: bool
    uses_ids: bool
    created_ms: int
    last_used_ms: int
    epoch: int = next_epoch(INITIAL_EPOCH)
    partitions: dict[tuple[Any, int], CachedPartition] = field(default_factory=dict)

    def value(self) -> tuple[bool, int, int]:
        """Kafka's ``EvictableKey``: the lower, the first evicted."""
        return (self.privileged, len(self.partitions), self.id)

    def update(self, wanted: list[CachedPartition], forgotten: list[tuple[Any, int]]) -> None:
        for w in wanted:
            key = w.key(self.uses_ids)
            cached = self.partitions.get(key)
            if cached is None:
                self.partitions[key] = w
            else:
                cached.fetch_offset, cached.partition_max_bytes = w.fetch_offset, w.partition_max_bytes
                cached.topic = w.topic              # a topic id resolved again (None: now unknown)
        for key in forgotten:
            self.partitions.pop(key, None)


@dataclass
class FetchContext:
    """What one Fetch reads and how its reply is made: ``kind`` is sessionless, full, incremental or error."""
    kind: str
    partitions: list[CachedPartition]
    error: ErrorCode = ErrorCode.none
    session: FetchSession | None = None
    privileged: bool = False
    uses_ids: bool = False


@dataclass
class Counters:
    created: int = 0
    evicted: int = 0
    full: int = 0
    incremental: int = 0
    sessionless: int = 0
    errors: int = 0


class FetchSessionCache:
    def __init__(self, max_slots: int, now_ms: Callable[[], int]):
        self.max_slots = max_slots
        self.now_ms = now_ms
        self.sessions: dict[int, FetchSession] = {}
        self.counters = Counters()
        self._random = random.Random()

    # -- a request's context ------------------------------------------------------------------------------------
    def new_context(self, version: int, session_id: int, epoch: int, wanted: list[CachedPartition],
                    forgotten: list[tuple[Any, int]], privileged: bool) -> FetchContext:
        """Kafka's ``FetchManager.newContext``. ``wanted`` are the request's partitions, ``forgotten`` its
        forgotten topics' (topic id or name, partition) keys."""
        uses_ids = version >= 13
        if version < FIRST_VERSION:
            self.counters.sessionless += 1
            return FetchContext("sessionless", wanted)
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            if session_id != INVALID_SESSION_ID:
                self.sessions.pop(session_id, None)
            if epoch == FINAL_EPOCH:
                self.counters.sessionless += 1
                return FetchContext("sessionless", wanted)
            self.counters.full += 1
            return FetchContext("full", wanted, privileged=privileged, uses_ids=uses_ids)
        session = self.sessions.get(session_id)
        if session is None:
            self.counters.errors += 1
            return FetchContext("error", [], ErrorCode.fetch_session_id_not_found)
        if session.epoch != epoch:
            self.counters.errors += 1
            return FetchContext("error", [], ErrorCode.invalid_fetch_session_epoch)
        if session.uses_ids != uses_ids:
            self.counters.errors += 1
            return FetchContext("error", [], ErrorCode.fetch_session_topic_id_error)
        session.update(wanted, forgotten)
        if not session.partitions:
            del self.sessions[session.id]
            self.counters.sessionless += 1
            return FetchContext("sessionless", wanted)
        session.last_used_ms = self.now_ms()
        session.epoch = next_epoch(session.epoch)
        self.counters.incremental += 1
        return FetchContext("incremental", list(session.partitions.values()), session=session, uses_ids=uses_ids)

    # -- the reply ----------------------------------------------------------------------------------------------
    def respond(self, context: FetchContext, entries: list[Any | None],
                sizes: list[int]) -> tuple[int, list[tuple[CachedPartition, Any]]]:
        """The reply's session id and the (partition, entry) pairs it carries, in order. ``entries`` and ``sizes``
        (bytes of records) line up with ``context.partitions``; None is a partition the read skipped as
        unchanged (incremental only)."""
        triples = [(w, e, n) for w, e, n in zip(context.partitions, entries, sizes) if e is not None]
        pairs = [(w, e) for w, e, _ in triples]
        if context.kind == "full":
            for w, e, n in triples:
                w.must_respond(e, n)        # what this reply sends is what the session last sent
            return self._maybe_create(context), pairs
        if context.kind != "incremental":
            return INVALID_SESSION_ID, pairs
        session = context.session
        assert session is not None
        out = []
        for w, e, n in triples:
            if w.must_respond(e, n):
                out.append((w, e))
                if n > 0:                   # to the end of the order
                    key = w.key(session.uses_ids)
                    session.partitions[key] = session.partitions.pop(key)
        return session.id, out

    def _maybe_create(self, context: FetchContext) -> int:
        """Kafka's ``FetchSessionCache.maybeCreateSession``: a new session's id, or 0 when no slot is free or
        can be freed."""
        now = self.now_ms()
        size = len(context.partitions)
        if len(self.sessions) >= self.max_slots and not self._evict(context.privileged, size, now):
            return INVALID_SESSION_ID
        session_id = INVALID_SESSION_ID
        while session_id == INVALID_SESSION_ID or session_id in self.sessions:
            session_id = self._random.randint(1, INT32_MAX)
        session = FetchSession(session_id, context.privileged, context.uses_ids, now, now)
        for w in context.partitions:
            session.partitions[w.key(context.uses_ids)] = w
        self.sessions[session_id] = session
        self.counters.created += 1
        return session_id

    def _evict(self, privileged: bool, size: int, now: int) -> bool:
        if not self.sessions:
            return False
        stale = min(self.sessions.values(), key=lambda s: (s.last_used_ms, s.id))
        if now - stale.last_used_ms > EVICTION_MS:
            del self.sessions[stale.id]
            self.counters.evicted += 1
            return True
        evictable = [s for s in self.sessions.values()
                     if now - s.created_ms > EVICTION_MS or (privileged and not s.privileged)]
        if not evictable:
            return False
        least = min(evictable, key=FetchSession.value)
        if (privileged, size, 0) < least.value():
            return False
        del self.sessions[least.id]
        self.counters.evicted += 1
        return True
