"""What the broker's event loop may not do through the engine: close, open or stat another log's files, or wait for
another thread. The open-logs list (``OpenLogs``: the least recently used logs parked past ``max_open_logs``, the
last log's sealed segments closed when another is used) is counted on the loop only without waiting and without
touching a file (``OpenLogs.used_now``): a release it owes is done by the next count in the engine's threads, and a
park or a busy list makes the loop give up (``WouldBlock``). So for ``Log.try_append_batches`` (the Produce append
tried on the loop), a read inside ``slice_read.nonblocking`` (the Fetch read tried on the loop) and the handlers'
``log_now``. File calls are watched by patching ``os.close``, ``os.open`` and ``os.stat``."""
from __future__ import annotations

import os
import threading
from types import SimpleNamespace
from typing import Any

import pytest

from storage_engine.clock import ManualClock
from storage_engine.config_file import config_from_mapping
from storage_engine.log.locks import PartitionLock
from storage_engine.log.log import Log
from storage_engine.log.manager import LogManager
from storage_engine.record.record_batch import build_batch
from storage_engine.record.records import SimpleRecord
from storage_engine.segment.slice_read import WouldBlock, nonblocking
from storage_engine.server.handlers.context import log_now

pytestmark = pytest.mark.unit

T0 = 1_700_000_000_000


def _batch(value: bytes) -> bytearray:
    return bytearray(build_batch([SimpleRecord(None, value, T0)], base_offset=0))


def _open(tmp_path, max_open: int = 100) -> LogManager:
    cfg = config_from_mapping({"broker": {"log.dirs": [str(tmp_path / "logs")]}, "topics": {"t": {}}})
    return LogManager.open(cfg, clock=ManualClock(T0), max_open_logs=max_open)


def _ready(mgr: LogManager, partition: int) -> Log:
    """A partition whose next small append can be done on the loop (its first append went the waiting way)."""
    log = mgr.get_or_create_log("t", partition)
    log.append_batches(_batch(b"first"))
    log.try_append_batches(_batch(b"second"), in_place=True)
    assert log.log_end_offset == 2
    return log


def _try_append(log) -> str:
    """The loop's append of one batch: "appended", or "gave up" (WouldBlock)."""
    try:
        log.try_append_batches(_batch(b"now"), in_place=True)
        return "appended"
    except WouldBlock:
        return "gave up"


def _file_calls(monkeypatch, fn) -> list[tuple[str, object]]:
    """The ``os.close`` / ``os.open`` / ``os.stat`` calls ``fn()`` made."""
    calls: list[tuple[str, object]] = []

    def watched(name: str, call: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            calls.append((name, args[0]))
            return call(*args, **kwargs)
        return wrapper
    for name in ("close", "open", "stat"):
        monkeypatch.setattr(os, name, watched(name, getattr(os, name)))
    try:
        fn()
    finally:
        monkeypatch.undo()
    return calls


def _with_sealed_segment_open(mgr: LogManager) -> tuple[Log, Log]:
    """(a, b): a read of ``a`` opened its sealed segment, and ``a`` is the last log used."""
    b = _ready(mgr, 1)
    a = _ready(mgr, 0)
    a.roll()
    a.append_batches(_batch(b"after the roll"))
    assert len(list(a.read_records())) == 3
    assert a.segments[0].is_open
    return a, b


def test_the_loops_append_leaves_the_last_logs_sealed_segments_to_the_engine_threads(tmp_path, monkeypatch):
    with _open(tmp_path) as mgr:
        a, b = _with_sealed_segment_open(mgr)
        calls = _file_calls(monkeypatch, lambda: b.try_append_batches(_batch(b"now"), in_place=True))
        assert calls == [] and b.log_end_offset == 3
        assert a.segments[0].is_open          # owed: the next count in the engine's threads releases it
        b.append_batches(_batch(b"pooled"))
        assert not a.segments[0].is_open


def test_the_loops_read_leaves_the_last_logs_sealed_segments_to_the_engine_threads(tmp_path, monkeypatch):
    with _open(tmp_path) as mgr:
        b = _ready(mgr, 1)
        b.read_slice(0, 1 << 20)               # b's bytes checked the waiting way
        first = b.read_slice(0, 1)             # its first batch: the next read starts at a remembered position
        assert first is not None and first.next_offset == 1
        a = _ready(mgr, 0)
        a.roll()
        a.append_batches(_batch(b"after the roll"))
        assert len(list(a.read_records())) == 3 and a.segments[0].is_open
        found = []

        def read() -> None:
            with nonblocking():
                found.append(b.read_slice(1, 1 << 20))
        calls = _file_calls(monkeypatch, read)
        assert calls == [] and found[0] is not None and found[0].next_offset == 2
        assert a.segments[0].is_open          # owed to the next count in the engine's threads
        b.read_slice(0, 1 << 20)
        assert not a.segments[0].is_open


def test_the_loops_append_gives_up_rather_than_park_a_log(tmp_path, monkeypatch):
    """A park refused earlier (``a`` pinned by a reader) left the list over its bound: the loop's append of ``b``
    gives up (the park is for the engine's threads) and touches no file; the waiting append then parks ``a``."""
    with _open(tmp_path, max_open=1) as mgr:
        a = _ready(mgr, 0)
        with a.pinned():
            b = _ready(mgr, 1)                  # tries to park a: refused while it is pinned
        assert not a.parked and not b.parked
        found: list[str] = []

        def append() -> None:
            found.append(_try_append(b))
        calls = _file_calls(monkeypatch, append)
        assert calls == [] and not a.parked
        if found == ["gave up"]:
            b.append_batches(_batch(b"now"))
        assert b.log_end_offset == 3
        b.append_batches(_batch(b"pooled"))
        assert a.parked


def test_the_loops_append_gives_up_while_another_thread_holds_the_open_logs_list(tmp_path):
    """Another thread inside ``OpenLogs.used`` (parking logs, closing sealed segments): the loop's append gives
    up at once, having appended nothing (a thread doing it is joined while the list is still held)."""
    with _open(tmp_path) as mgr:
        a = _ready(mgr, 0)
        found: list[str] = []

        def append() -> None:
            found.append(_try_append(a))
        with mgr.open_logs._mutex:
            t = threading.Thread(target=append)
            t.start()
            t.join(60)                          # a hang guard: the append must end while the list is held
            assert not t.is_alive(), "the loop's append waited for the open-logs list"
        assert found == ["gave up"] and a.log_end_offset == 2


def test_log_now_gives_up_on_a_lock_parked_meanwhile(tmp_path, monkeypatch):
    """``log_now`` run inside ``LocalLog.park``'s window (the lock file parked, the log not yet marked) reads no
    state through a file it would have to open: it gives up."""
    with _open(tmp_path) as mgr:
        log = _ready(mgr, 0)
        ctx = SimpleNamespace(broker=SimpleNamespace(manager=mgr))
        outcome: list[str] = []
        calls: list[tuple[str, object]] = []
        real_park = PartitionLock.park

        def park(self: PartitionLock) -> bool:
            done = real_park(self)

            def during() -> None:
                try:
                    log_now(ctx, "t", 0)    # type: ignore[arg-type]
                    outcome.append("returned")
                except WouldBlock:
                    outcome.append("gave up")
            calls.extend(_file_calls(pytest.MonkeyPatch(), during))
            return done
        monkeypatch.setattr(PartitionLock, "park", park)
        assert log.park()
        assert outcome == ["gave up"] and calls == []
