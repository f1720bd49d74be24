"""What a handler gets: the broker, the request and the connection it came on; and a partition's log as the event
loop may take it, without waiting (:func:`log_now`, for the Fetch reads and Produce appends tried there first)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from storage_engine.log.locks import LIVE
from storage_engine.log.log import Log
from storage_engine.segment.slice_read import WouldBlock
from storage_engine.server.broker import Broker
from storage_engine.server.protocol import Request


class CloseConnection(Exception):
    """Close this connection after logging this line, without an answer: how a broker tells a client that expects
    no response (a Produce with acks=0) that its request failed, as Kafka does."""


@dataclass
class Ctx:
    broker: Broker
    request: Request
    host: str                 # advertised host and port of the listener the connection came on
    port: int
    peer: str
    principal: str = "User:ANONYMOUS"   # Kafka's principal: User:<SASL user>, or User:ANONYMOUS without SASL
    client_host: str = ""               # the client's IP, as ACL hosts name it

    @property
    def api_name(self) -> str:
        from storage_engine.server.handlers import APIS
        api = APIS.get(self.request.api_key)
        return api.name if api is not None else str(self.request.api_key)

    @property
    def version(self) -> int:
        return self.request.api_version


def has(body: Any, name: str) -> bool:
    return name in getattr(type(body), "__dataclass_fields__", {})


def log_now(ctx: Ctx, topic: str, p: int) -> tuple[Log, int]:
    """The partition's log, on the event loop: one already loaded and not parked, live, its dir online, its
    manager's lock free (else :class:`WouldBlock`: adopting a log, waiting for the manager, and answering an
    offline dir are for the engine's threads, through ``LogManager.get_log``); with the shared generation its
    state held then (read before any of its files is looked at, so a read need not read it again)."""
    manager = ctx.broker.manager
    if not manager.mutex.acquire(blocking=False):
        raise WouldBlock(f"{topic}-{p}: the log manager is busy")
    try:
        # what get_log answers for a loaded log, its state read once: a live one, its dir online
        log = manager.logs.get((topic, p))
        if log is None or log.parked or not log.lock.is_open:
            raise WouldBlock(f"{topic}-{p} is not loaded")      # get_log adopts it
        state = log.lock.read_state_open()
        if state is None:                                       # parked meanwhile by another thread
            raise WouldBlock(f"{topic}-{p} is parked")
        if state.status != LIVE:
            raise WouldBlock(f"{topic}-{p} is being deleted or moved")   # get_log closes it
        if manager.failures.is_offline(log.log_dir):
            raise WouldBlock(f"{topic}-{p}: its log dir is offline")
    finally:
        manager.mutex.release()
    return log, state.generation
