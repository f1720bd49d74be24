"""``serve``: the Kafka-protocol listener over the store, until SIGTERM or Ctrl-C.

Each configured listener is an asyncio server; a connection past ``max.connections`` or
``max.connections.per.ip`` is closed at once with one log line. Every connection of every listener takes its
request frames from one memory pool (``queued.max.request.bytes``); the limits and their derived defaults are
in :mod:`storage_engine.server.limits` and are logged at start. On SIGTERM/SIGINT the listeners stop
accepting, idle connections are closed, requests in flight are answered (up to :data:`DRAIN_S`), the high
watermarks are checkpointed (:mod:`storage_engine.server.replica_checkpoints`), and the log manager is closed
clean (producer snapshots, flush, clean-shutdown marker), so the next start recovers nothing. Once started, the
objects start-up made are frozen out of garbage collection and the collector's pauses are counted in the status
file (:func:`freeze_after_start`, :class:`GcPauses`).

Why the freeze: CPython's cyclic garbage collector stops every thread while it runs, and a full (generation 2)
collection walks every tracked object the process holds. A freshly started broker holds ~42,000 (modules, the
protocol schemas, the logs it opened); one full collection of them took 18-33 ms of CPU on the 2-core benchmark
machine (several times that in wall time when the machine was busy), every few to tens of seconds while clients
produced: each a pause of the event loop and the engine threads at once, in the tail of produce latency, and longer
the bigger the store (5,000 partitions open: ~149,000 objects, ~100 ms of CPU per full collection). None of
those objects is garbage: they are moved into the collector's permanent generation (``gc.freeze()``) once, when
the broker is about to serve, so later collections walk only what was made since (2-5 ms of CPU for ~10,000
objects in the same runs). Freezing leaves them out of the cycle collector only: reference counting still frees
any of them that is let go; a reference cycle among them would stay until the process ends. One status interval
later, what the first clients' requests left for good (the modules of the message versions they asked for, imported
at first use; the first topics' logs) is frozen too (:func:`freeze_settled`), after a young collection only.

Nothing periodic on the event loop walks the heap: the status file's frozen count is the one taken at start-up
(``gc.get_freeze_count()`` counts the frozen objects one by one: 5-40 ms for ~50,000 of them, every 5 s, was the
loop's one periodic stall), and glibc is looked up for the memory pool's ``malloc_trim`` at start-up, not at the
first trim under the first clients' requests.
"""
from __future__ import annotations

import asyncio
import functools
import gc
import logging
import signal
import sys
import threading
import time
from collections import Counter
from typing import Any

from storage_engine.config import StorageConfig
from storage_engine.log.manager import LogManager
from storage_engine.server.broker import STATUS_INTERVAL_S, Broker
from storage_engine.server.connection import Connection
from storage_engine.server import replica_checkpoints
from storage_engine.server.limits import Limits, MemoryPool, trim
from storage_engine.server.sasl import Users, load_users
from storage_engine.server.settings import Listener, parse_listeners, tls_context

logger = logging.getLogger(__name__)
DRAIN_S = 10.0
# The stream's buffer limit: asyncio stops reading a socket once 2x this is buffered and starts again when the
# connection takes it, an epoll_ctl pair each time. At 64 KiB a 1 MB produce request cost ~8 such pauses; at 256
# KiB the broker's CPU per 1 MB request of 1 KiB records fell from 5.33 to 4.76 ms (median of 5 alternating rounds
# each, every round lower, two brokers side by side). At most 512 KiB per connection buffered ahead of the memory
# pool, within limits.CONNECTION_MEMORY.
STREAM_LIMIT = 256 * 1024


_FROZEN = [0]      # objects frozen by freeze_after_start, kept: gc.get_freeze_count() walks all of them


def freeze_after_start() -> int:
    """Collect once, then freeze every object left (start-up's); returns how many are frozen."""
    gc.collect()
    gc.freeze()
    _FROZEN[0] = gc.get_freeze_count()
    return _FROZEN[0]


def freeze_settled() -> None:
    """Freeze once more what the first clients' requests made for good, one status interval after start-up: the
    modules of message versions imported at their first use (kio has one per version), handler caches, the logs of
    the first topics. Left in the collector, they are walked by every later full collection (~10 generation-1
    collections apart: about every minute at 100,000 records/s). Only the young generations are collected first
    (a ~1 ms pause, not a full collection's tens): what is already old is long-lived; a cycle that became garbage
    there in the first seconds stays until the process ends, once."""
    gc.collect(1)
    gc.freeze()


class GcPauses:
    """Per generation: collections, total and longest pause (ms) since :meth:`install`."""

    def __init__(self) -> None:
        self.count = [0, 0, 0]
        self.total_ms = [0.0, 0.0, 0.0]
        self.max_ms = [0.0, 0.0, 0.0]
        self._started: dict[int, float] = {}      # thread id -> start of the collection it runs
        self._installed = False

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        tid = threading.get_ident()
        if phase == "start":
            self._started[tid] = time.perf_counter()
            return
        began = self._started.pop(tid, None)
        if began is None:       # installed during a collection
            return
        gen = min(int(info.get("generation", 2)), 2)
        ms = (time.perf_counter() - began) * 1000
        self.count[gen] += 1
        self.total_ms[gen] += ms
        if ms > self.max_ms[gen]:
            self.max_ms[gen] = ms

    def install(self) -> None:
        if not self._installed:
            gc.callbacks.append(self._callback)
            self._installed = True

    def uninstall(self) -> None:
        if self._installed:
            gc.callbacks.remove(self._callback)
            self._installed = False

    def summary(self) -> dict[str, Any]:
        """The status file's ``gc`` entry."""
        # not gc.get_freeze_count(): it counts the frozen objects one by one down a linked list, 5-40 ms for ~50,000
        # of them, on the event loop every status interval
        return {"frozen_objects": _FROZEN[0], "collections": list(self.count),
                "pause_total_ms": [round(v, 3) for v in self.total_ms],
                "pause_max_ms": [round(v, 3) for v in self.max_ms]}


class Server:
    def __init__(self, broker: Broker, listeners: list[Listener], advertised: list[Listener] | None):
        self.broker = broker
        self.listeners = listeners
        self.advertised = advertised
        server = broker.config.server
        self.users: Users | None = None
        if any(lst.sasl for lst in listeners):
            path = server.get("sasl.credentials.file")
            if not path:
                from storage_engine.errors import ConfigError
                raise ConfigError("a SASL listener needs sasl.credentials.file (the users and their credentials)")
            self.users = load_users(path)
            broker.users = self.users       # DescribeUserScramCredentials reads them
        self.tls = tls_context(server) if any(lst.tls for lst in listeners) else None
        self.connections: set[Connection] = set()
        self.tasks: set[asyncio.Task[None]] = set()
        self.per_ip: Counter[str] = Counter()
        self.servers: list[asyncio.base_events.Server] = []
        self.bound: list[Listener] = []
        self.stopping = asyncio.Event()
        self.limits = Limits.from_server(server)
        self.pool = MemoryPool(self.limits.queued_bytes)
        self.gc_pauses = GcPauses()

    def _advertised_for(self, bound: Listener) -> tuple[str, int]:
        for adv in self.advertised or ():
            if adv.protocol == bound.protocol:
                return adv.host, adv.port or bound.port
        host = bound.host if bound.host not in ("", "0.0.0.0", "::") else "127.0.0.1"
        return host, bound.port

    async def start(self) -> None:
        lim = self.limits
        logger.info("limits: max.connections %d, queued.max.request.bytes %s, connections.max.idle.ms %s, "
                    "socket.request.receive.timeout.ms %s, socket.request.max.bytes %d", lim.max_connections,
                    -1 if lim.queued_bytes is None else lim.queued_bytes,
                    -1 if lim.idle_s is None else int(lim.idle_s * 1000),
                    -1 if lim.receive_s is None else int(lim.receive_s * 1000),
                    self.broker.config.server["socket.request.max.bytes"])
        for lst in self.listeners:
            srv = await asyncio.start_server(
                functools.partial(self._accept, lst), host=lst.host or None, port=lst.port,
                ssl=self.tls if lst.tls else None, reuse_address=True, limit=STREAM_LIMIT)
            port = srv.sockets[0].getsockname()[1]
            bound = Listener(lst.protocol, lst.host, port)
            self.servers.append(srv)
            self.bound.append(bound)
            host, adv_port = self._advertised_for(bound)
            self.broker.listeners.append((bound.protocol, host, adv_port))
            logger.info("listening on %s (advertised as %s:%d)", bound, host, adv_port)

    async def _accept(self, listener: Listener, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        bound = next(b for b in self.bound if b.protocol == listener.protocol) if self.bound else listener
        conn = Connection(self.broker, listener, self._advertised_for(bound), reader, writer, self.users,
                          self.limits, self.pool)
        server = self.broker.config.server
        if self.stopping.is_set():
            writer.close()
            return
        if len(self.connections) >= self.limits.max_connections or \
                self.per_ip[conn.ip] >= server["max.connections.per.ip"]:
            logger.warning("refusing connection from %s on %s: %d connections open (max.connections %d, "
                           "max.connections.per.ip %d)", conn.peer, listener, self.per_ip[conn.ip],
                           self.limits.max_connections, server["max.connections.per.ip"])
            writer.close()
            return
        stats = self.broker.stats
        stats.connections += 1
        stats.connections_total += 1
        self.connections.add(conn)
        self.per_ip[conn.ip] += 1
        task = asyncio.current_task()
        if task is not None:
            self.tasks.add(task)
        try:
            await conn.run()
        except asyncio.CancelledError:
            # stop() cancels idle connections: the task ends quietly (a cancelled client_connected_cb task makes
            # asyncio log a traceback)
            pass
        except Exception as exc:   # noqa: BLE001 - Connection.run logs its own failures; this is a last guard
            logger.error("closing connection from %s on %s: %s: %s", conn.peer, listener, type(exc).__name__,
                         " ".join(str(exc).split())[:500])
            writer.close()
        finally:
            stats.connections -= 1
            self.connections.discard(conn)
            self.per_ip[conn.ip] -= 1
            if self.per_ip[conn.ip] <= 0:
                del self.per_ip[conn.ip]
            if task is not None:
                self.tasks.discard(task)

    async def status_loop(self) -> None:
        ticks = 0
        while not self.stopping.is_set():
            ticks += 1
            if ticks == 2:
                freeze_settled()
            self.broker.groups_summary = self.broker.groups.summary()
            self.broker.txns_summary = self.broker.transactions.summary()
            self.broker.gc_summary = self.gc_pauses.summary()
            await self.broker.call(self.broker.write_status, running=True)
            try:
                await asyncio.wait_for(self.stopping.wait(), STATUS_INTERVAL_S)
            except asyncio.TimeoutError:
                pass

    async def stop(self) -> None:
        """Stop accepting, answer what is in flight, close the rest."""
        self.stopping.set()
        for srv in self.servers:
            srv.close()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + DRAIN_S
        while any(c.busy for c in self.connections) and loop.time() < deadline:
            await asyncio.sleep(0.02)
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        for srv in self.servers:
            await srv.wait_closed()


async def _run(server: Server, ready: asyncio.Event | None = None) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    broker = server.broker
    await broker.call(broker.groups.load)
    await broker.call(broker.transactions.load)
    await broker.transactions.recover()         # transactions a stop left in Prepare* are completed before serving
    await broker.call(replica_checkpoints.at_start, broker.manager)
    broker.groups.start()
    broker.transactions.start()
    # glibc is looked up (ctypes.util.find_library runs ldconfig in a subprocess: ~5 ms) now rather than on the
    # event loop at the first trim of the memory pool, under the first clients' requests
    trim()
    # what start-up made lives as long as the process: out of the collector's walks (see the module's docstring);
    # before the listeners open, so that no client's first request waits behind this full collection (17-37 ms)
    frozen = freeze_after_start()
    await server.start()
    status = asyncio.create_task(server.status_loop())
    high_watermarks = asyncio.create_task(replica_checkpoints.run(
        broker.manager, broker.config.server["replica.high.watermark.checkpoint.interval.ms"], server.stopping))
    logger.info("serving; %d objects of start-up frozen out of garbage collection", frozen)
    print("serving " + ", ".join(f"{p}://{h}:{port}" for p, h, port in server.broker.listeners), flush=True)
    if ready is not None:
        ready.set()
    await stop.wait()
    logger.info("stopping: answering requests in flight, then closing the logs clean")
    await server.stop()
    await server.broker.transactions.stop()
    await server.broker.groups.stop()
    await status
    await high_watermarks
    await broker.call(replica_checkpoints.checkpoint, broker.manager)   # as Kafka's ReplicaManager.shutdown


def serve(config: StorageConfig, *, listeners: str | None = None) -> int:
    """Run the listener until SIGTERM or SIGINT; 0 after a clean stop."""
    parsed = parse_listeners(listeners or config.server["listeners"],
                             "--listeners" if listeners else "listeners")
    adv_text = config.server.get("advertised.listeners")
    advertised = parse_listeners(adv_text, "advertised.listeners") if adv_text else None
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                            format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    manager = LogManager.open(config)
    broker = None
    server: Server | None = None
    try:
        broker = Broker(config, manager)
        server = Server(broker, parsed, advertised)
        server.gc_pauses.install()
        asyncio.run(_run(server))
    finally:
        if server is not None:
            server.gc_pauses.uninstall()
        if broker is not None:
            broker.close()
            if server is not None:
                broker.gc_summary = server.gc_pauses.summary()
            broker.write_status(running=False)
        manager.close()
    logger.info("stopped; logs closed clean")
    return 0
