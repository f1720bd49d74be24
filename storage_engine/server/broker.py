"""The broker's state shared by every connection: the log manager, who this node is, the topics on disk, the
producer ids, the fetches waiting for appends and the figures the Storage view shows.

Engine calls block (files, fsync, flock), so connections run them in a small thread pool (:meth:`Broker.call`);
the log manager and its logs are safe to share between threads (ARCHITECTURE.md section 4). Topics are what the log
dirs hold: the catalog is rebuilt from the folders at most once a second, so topics that the maintenance DAGs or
the CLI create or delete from other processes appear and vanish without a restart. A topic change under way or
left half done by a process that died (:mod:`storage_engine.log.topic_changes`) is hidden: the catalog never
shows a topic short of the partitions it was created with.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from storage_engine import layout
from storage_engine.acl.settings import open_authorizer
from storage_engine.acl.store import AclStore
from storage_engine.clock import Clock
from storage_engine.config import StorageConfig
from storage_engine.durable import atomic_write
from storage_engine.errors import StorageError
from storage_engine.log import topic_changes
from storage_engine.log.manager import LogManager
from storage_engine.log import topic_id as topic_id_mod
from storage_engine.server import identity
from storage_engine.server.access import Authorizer
from storage_engine.server.fetch_sessions import FetchSessionCache
from storage_engine.server.groups.coordinator import GroupCoordinator
from storage_engine.server.groups.lag_history import LagHistory, history_path, take_sample
from storage_engine.server.purgatory import Purgatory
from storage_engine.server.remote_tier import RemoteTier
from storage_engine.server.sasl import Users
from storage_engine.server.transactions.coordinator import TxnCoordinator

logger = logging.getLogger(__name__)
T = TypeVar("T")

CATALOG_TTL_S = 1.0
LISTING_SETTLED_NS = 1_000_000_000
STATUS_FILE = "broker-status.json"      # in the first log dir's .engine+ namespace (see status_path)
STATUS_INTERVAL_S = 5.0


@dataclass
class Stats:
    """Counters for the listener's status (the Storage view reads them from the status file)."""

    started_ms: int = 0
    connections: int = 0
    connections_total: int = 0
    produce_requests: int = 0
    produce_records: int = 0
    produce_bytes: int = 0
    produce_appends_inline: int = 0   # partition appends done on the event loop (nothing in them could wait)
    produce_appends_pooled: int = 0   # ... tried there first, then done in the thread pool
    fetch_requests: int = 0
    fetch_bytes: int = 0
    fetch_reads_inline: int = 0       # fetch reads served on the event loop (verified bytes in the page cache)
    fetch_reads_pooled: int = 0       # ... tried there first, then read in the thread pool
    errors: int = 0
    malformed: int = 0


class Broker:
    def __init__(self, config: StorageConfig, manager: LogManager, *, threads: int = 8,
                 clock: Clock | None = None):
        self.config = config
        self.manager = manager
        # "now" for the coordinators (sessions, rebalances, transaction timeouts, offsets retention), append times
        # and the status file: the log manager's clock unless another is given. Intervals between samples (rates,
        # the catalog's age) are measured with time.monotonic.
        self.clock: Clock = manager.clock if clock is None else clock
        self.node_id: int = config.server["node.id"]
        self.cluster_id = identity.load_meta_properties(manager.online_dirs(), self.node_id)
        self.producer_ids = identity.ProducerIds(list(config.log_dirs))
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=threads, thread_name_prefix="engine")
        self.stats = Stats(started_ms=self.clock.milliseconds())
        self.listeners: list[tuple[str, str, int]] = []   # (security protocol, advertised host, port)
        self._topic_ids: dict[str, uuid.UUID] = {}
        self._catalog: dict[str, list[int]] = {}
        self._catalog_at = 0.0
        self._catalog_mutex = threading.Lock()
        self._changing: dict[str, dict[str, Any]] = {}    # topic changes of this process under way
        # Each log dir's partition folders as last listed: (inode, mtime), when listed, the entry names, the listing
        self._listings: dict[str, tuple[tuple[int, int], int, frozenset[str],
                                        list[tuple[str, tuple[str, int]]]]] = {}
        self._topic_id_mutex = threading.Lock()    # one writer of partition.metadata at a time (its temp file)
        # Waiting fetches, woken by appends to the partitions they read (storage_engine.server.purgatory), and
        # the fetch sessions of KIP-227 (max.incremental.fetch.session.cache.slots; 0: none).
        self.purgatory = Purgatory()
        self.fetch_sessions = FetchSessionCache(int(config.server["max.incremental.fetch.session.cache.slots"]),
                                                self.clock.milliseconds)
        self.config_mutex = threading.Lock()
        # Authorization (authorizer.class.name): None allows everything, as Kafka without an authorizer does.
        # The ACL store is opened here: a damaged ACL file stops the start with a ConfigError naming it.
        self.authorizer: Authorizer | None = None
        self.acls: AclStore | None = None
        self.users: Users | None = None     # sasl.credentials.file's users, set by the server when a listener uses SASL
        opened = open_authorizer(config.server, list(config.log_dirs))
        if opened is not None:
            self.acls, self.authorizer = opened
        # Tiered storage (remote.log.storage.system.enable): the remote view and reader, None when off.
        self.remote: RemoteTier | None = RemoteTier.open(config, manager)
        self.groups = GroupCoordinator(self)
        self.transactions = TxnCoordinator(self, self.groups)
        self.groups_summary: list[dict[str, Any]] = []   # taken on the event loop, written with the status
        self.lag_history = LagHistory(history_path(config.log_dirs[0]))   # sampled with each status write
        self.txns_summary: dict[str, Any] = {}
        self.gc_summary: dict[str, Any] = {}      # the collector's pauses (server.GcPauses), set by serve()
        self._last_sample: tuple[float, tuple[int, ...]] = (time.monotonic(), (0, 0, 0, 0, 0))
        if manager.resolved_topic_changes:    # completed at the open: configs stored or dropped since config loaded
            from storage_engine.server.catalog import reload_config
            reload_config(self)

    # -- running engine calls ---------------------------------------------------------------------------------
    async def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.pool, functools.partial(fn, *args, **kwargs))

    # -- waiting fetches and fetch sessions ----------------------------------------------------------------------
    def fetch_status(self) -> dict[str, int]:
        """The purgatory's, the file watcher's and the fetch session cache's counters, for the status file."""
        c, files = self.fetch_sessions.counters, self.purgatory.files
        return {"fetch_sessions": len(self.fetch_sessions.sessions), "fetch_sessions_created": c.created,
                "fetch_sessions_evicted": c.evicted, "fetch_full": c.full, "fetch_incremental": c.incremental,
                "fetch_sessionless": c.sessionless, "fetch_session_errors": c.errors,
                "fetch_reads_inline": self.stats.fetch_reads_inline,
                "fetch_reads_pooled": self.stats.fetch_reads_pooled,
                "fetch_waits": self.purgatory.waits, "fetch_wakeups": self.purgatory.wakeups,
                "file_watch_inotify": int(files.inotify), "file_watch_partitions": files.watched(),
                "file_watch_events": files.events, "file_watch_polls": files.polls}

    # -- topics -----------------------------------------------------------------------------------------------
    def topics(self, *, fresh: bool = False) -> dict[str, list[int]]:
        """{topic: sorted partitions} held by the online log dirs (blocking: call through :meth:`call`), without
        what a topic change under way or left half done has made so far (:mod:`storage_engine.log.topic_changes`):
        a topic being created or deleted is absent, one being extended has its old partitions only."""
        with self._catalog_mutex:
            if fresh or time.monotonic() - self._catalog_at > CATALOG_TTL_S:
                # Records read before and after the listing: a change of another process that began or ended
                # while the folders were listed is hidden either way. This process's changes are in
                # self._changing from before their record until after it is cleared, and leave it under this
                # mutex, so never while a listing is under way.
                before = self._pending_changes()
                found: dict[str, set[int]] = {}
                for d in self.manager.online_dirs():
                    try:
                        for _, (topic, partition) in self._partition_dirs(d):
                            found.setdefault(topic, set()).add(partition)
                    except OSError as exc:
                        logger.warning("cannot list log dir %s: %s", d, exc)
                for topic, partition in self.manager.partitions():
                    found.setdefault(topic, set()).add(partition)
                changes = {**before, **self._pending_changes(), **self._changing}
                for topic, below in topic_changes.hidden(changes).items():
                    if topic in found:
                        found[topic] = {p for p in found[topic] if p < below}
                self._catalog = {t: sorted(p) for t, p in found.items() if p}
                self._catalog_at = time.monotonic()
                for gone in set(self._topic_ids) - set(self._catalog):
                    del self._topic_ids[gone]
            return dict(self._catalog)

    def _partition_dirs(self, log_dir: str) -> list[tuple[str, tuple[str, int]]]:
        """:func:`layout.partition_dirs` of ``log_dir``, sorted again only when its entries changed. A listing is
        reused as it is while the dir's inode and mtime are those it was taken at and it was taken at least
        :data:`LISTING_SETTLED_NS` after that mtime (a change within the file system's timestamp granularity after
        the listing would leave the mtime as it was); else the entry names are read and, if they are the names
        the listing was made from (the dir changed by a checkpoint file replaced, not a folder), it is reused too.
        Sorting 10,000 partition folders and their state files took tens of milliseconds of every
        once-a-second catalog refresh, paid by the request that met it."""
        try:
            st = os.stat(log_dir)
        except FileNotFoundError:
            return []       # as layout.partition_dirs: a missing log dir has no partitions
        key = (st.st_ino, st.st_mtime_ns)
        cached = self._listings.get(log_dir)
        if cached is not None and cached[0] == key and cached[1] - st.st_mtime_ns >= LISTING_SETTLED_NS:
            return cached[3]
        listed_at = time.time_ns()
        names = frozenset(os.listdir(log_dir))
        if cached is not None and cached[2] == names:
            listing = cached[3]
        else:
            # names read before the sort: a folder made or removed in between differs from them next time
            listing = layout.partition_dirs(log_dir)
        self._listings[log_dir] = (key, listed_at, names, listing)
        return listing

    def _pending_changes(self) -> dict[str, dict[str, Any]]:
        try:
            return topic_changes.pending(self.config.log_dirs)
        except StorageError as exc:
            logger.warning("cannot read the topic changes under way: %s", exc)
            return {}

    def note_topic_change(self, topic: str, record: dict[str, Any] | None) -> None:
        """A topic change of this process began (``record``) or ended (None): the catalog hides its topic
        meanwhile and is listed afresh after it."""
        with self._catalog_mutex:
            if record is None:
                self._changing.pop(topic, None)
            else:
                self._changing[topic] = record
                if record["op"] != "add-partitions":
                    self._topic_ids.pop(topic, None)    # a new topic of the name gets its own id
            self._catalog_at = 0.0

    def forget_catalog(self) -> None:
        with self._catalog_mutex:
            self._catalog_at = 0.0

    def topic_id(self, topic: str) -> uuid.UUID:
        """The topic's id from its partitions' ``partition.metadata``; a new one is written into every
        partition folder that lacks it (blocking)."""
        known = self._topic_ids.get(topic)
        if known is not None:
            return known
        with self._topic_id_mutex:
            return self._topic_id_locked(topic)

    def _topic_id_locked(self, topic: str) -> uuid.UUID:
        known = self._topic_ids.get(topic)
        if known is not None:
            return known
        folders = []
        for d in self.manager.online_dirs():
            for p in self._catalog.get(topic, []):
                path = os.path.join(d, layout.partition_dir_name(topic, p))
                if os.path.isdir(path):
                    folders.append(path)
        # A folder without an id gets the topic's (under the store's creation lock, as every process gives ids); an
        # id once written is never replaced: the topic's remote segments are named by it.
        topic_id: uuid.UUID | None = None
        for folder in folders:
            try:
                found = topic_id_mod.ensure_topic_id(folder, self.manager.online_dirs())
            except Exception as exc:   # noqa: BLE001 - a folder deleted meanwhile, or a damaged file kept for the operator
                logger.info("cannot read or give the topic id of %s: %s", folder, exc)
                continue
            if topic_id is None:
                topic_id = found
            elif found != topic_id:
                logger.warning("partition folder %s holds topic id %s, not the topic's %s; kept as it is", folder,
                               identity.uuid_text(found), identity.uuid_text(topic_id))
        if topic_id is None:
            topic_id = identity.random_uuid()
        self._topic_ids[topic] = topic_id
        return topic_id

    def known_topic_by_id(self, topic_id: uuid.UUID) -> str | None:
        """:meth:`topic_by_id` among the ids this broker has already read (no I/O: the event loop asks this
        first), None when the id is not among them."""
        for topic, known in list(self._topic_ids.items()):
            if known == topic_id:
                return topic
        return None

    def topic_by_id(self, topic_id: uuid.UUID) -> str | None:
        for topic, known in self._topic_ids.items():
            if known == topic_id:
                return topic
        for topic in self.topics():
            if self.topic_id(topic) == topic_id:
                return topic
        return None

    # -- status for the Storage view ----------------------------------------------------------------------------
    def status_path(self) -> str:
        return os.path.join(self.config.log_dirs[0], layout.ENGINE_PREFIX + STATUS_FILE)

    def write_status(self, *, running: bool) -> None:
        s = self.stats
        now = time.monotonic()
        figures = (s.produce_requests, s.produce_records, s.produce_bytes, s.fetch_requests, s.fetch_bytes)
        last_at, last = self._last_sample
        span = max(now - last_at, 1e-3)
        rates = {f"{name}_per_s": round((cur - prev) / span, 1) for name, cur, prev in
                 zip(("produce_requests", "produce_records", "produce_bytes", "fetch_requests", "fetch_bytes"),
                     figures, last)}
        self._last_sample = (now, figures)
        data = {"running": running, "pid": os.getpid(), "node_id": self.node_id, "cluster_id": self.cluster_id,
                "listeners": [f"{proto}://{host}:{port}" for proto, host, port in self.listeners],
                "updated_ms": self.clock.milliseconds(), "interval_s": STATUS_INTERVAL_S, **s.__dict__, **rates,
                **self.fetch_status(),
                "groups": self.groups_summary, "transactions": self.txns_summary, "gc": self.gc_summary}
        try:
            atomic_write(self.status_path(), json.dumps(data).encode("utf-8"), sync=False)
        except Exception as exc:   # noqa: BLE001 - the status is a courtesy; serving goes on
            logger.warning("cannot write the listener status: %s", exc)
        try:
            self.lag_history.add(take_sample(data["updated_ms"], self.groups_summary,
                                             lambda topic: self.topics().get(topic, []), self._log_bounds),
                                 flush=not running)
        except Exception as exc:   # noqa: BLE001 - so is the lag history
            logger.warning("cannot write the lag history: %s", exc)

    def _log_bounds(self, topic: str, partition: int) -> tuple[int, int] | None:
        try:
            log = self.manager.get_log(topic, partition)
        except StorageError:      # its log dir is offline: no figure rather than no sample
            return None
        return None if log is None else (log.log_start_offset, log.log_end_offset)

    def close(self) -> None:
        self.pool.shutdown(wait=True)
        self.purgatory.close()
