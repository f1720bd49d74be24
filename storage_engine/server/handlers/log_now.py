"""A partition's log as the broker's event loop may take it, without waiting: shared by the Fetch reads and the
Produce appends tried there first (:mod:`.fetch`, :mod:`.produce`), whose threads do what this refuses."""
from __future__ import annotations

from storage_engine.log.locks import LIVE
from storage_engine.log.log import Log
from storage_engine.segment.slice_read import WouldBlock
from storage_engine.server.handlers.context import Ctx


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
        state = log.lock.read_state()
        if state.status != LIVE:
            raise WouldBlock(f"{topic}-{p} is being deleted or moved")   # get_log closes it
        if manager.failures.is_offline(log.log_dir):
            raise WouldBlock(f"{topic}-{p}: its log dir is offline")
    finally:
        manager.mutex.release()
    return log, state.generation
