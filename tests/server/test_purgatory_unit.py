"""The purgatory, the file watcher and the fetch session cache in-process: a waiting fetch is woken only by a
change to a partition it waits on and learns which; a change between its read and its wait is not lost; a
partition's files changed by another Log (as another process would: same folder, own view) mark it dirty
through inotify, or through the stat fallback; Kafka's session epochs and eviction rules."""
from __future__ import annotations

import asyncio
from typing import Any

import pytest

from storage_engine.config_file import config_from_mapping
from storage_engine.errors import ConfigError
from storage_engine.server.errors import ErrorCode
from storage_engine.server.fetch_sessions import EVICTION_MS, INT32_MAX, CachedPartition, FetchSessionCache, next_epoch
from storage_engine.server.purgatory import Purgatory
from tests.storage_engine.helpers import open_log, recs

pytestmark = pytest.mark.unit


def test_a_waiter_is_woken_only_by_its_partitions_and_learns_which():
    async def run() -> None:
        purgatory = Purgatory(use_inotify=False)
        since = purgatory.seq
        waiting = asyncio.ensure_future(purgatory.wait([("t", 0), ("t", 2)], since, 60))
        await asyncio.sleep(0)
        purgatory.appended("t", 1)          # not watched by this waiter
        purgatory.appended("u", 0)
        await asyncio.sleep(0)
        assert not waiting.done()
        assert purgatory.waiting() == 2
        purgatory.appended("t", 2)
        assert await waiting == {("t", 2)}
        assert purgatory.waiting() == 0 and purgatory.wakeups == 1

        # appended after the read (since) but before the wait: returned at once, not lost
        since = purgatory.seq
        purgatory.appended("t", 0)
        assert await purgatory.wait([("t", 0)], since, 60) == {("t", 0)}
        # a timeout: nothing changed
        assert await purgatory.wait([("t", 0)], purgatory.seq, 0.01) == set()
    asyncio.run(run())


def _two_views(tmp_path):
    """The same partition opened twice, as the broker and another process each open it."""
    broker_log, _ = open_log(tmp_path, exclusive=False)
    other_log, _ = open_log(tmp_path, exclusive=False, create=False)
    return broker_log, other_log


@pytest.mark.parametrize("use_inotify", [True, False])
def test_a_change_by_another_view_marks_the_partition_dirty(tmp_path, use_inotify):
    broker_log, other_log = _two_views(tmp_path)
    tp = (broker_log.topic, broker_log.partition)
    try:
        async def run() -> None:
            purgatory = Purgatory(use_inotify=use_inotify)
            files = purgatory.files
            files.attach()
            assert files.inotify is use_inotify
            assert files.needs_refresh(tp, broker_log)            # a new watch: refresh once
            assert files.needs_refresh(tp, broker_log) is not use_inotify   # watched and clean (polled: always)
            waiting = asyncio.ensure_future(purgatory.wait([tp], purgatory.seq, 60))
            await asyncio.sleep(0)
            other_log.append_records(recs(b"a", b"b"))
            assert await waiting == {tp}
            assert files.events >= 1
            assert (files.polls > 0) is not use_inotify
            assert files.needs_refresh(tp, broker_log)           # dirty: the read refreshes
            broker_log.refresh()
            assert broker_log.high_watermark == 2
            if use_inotify:
                assert not files.needs_refresh(tp, broker_log)
            purgatory.close()
        asyncio.run(run())
    finally:
        broker_log.close(clean=True)
        other_log.close(clean=True)


def _parts(n: int, topic: str = "t") -> list[CachedPartition]:
    return [CachedPartition(topic, None, p, 0, 1 << 20) for p in range(n)]


def _entry(p: int, hw: int, records: bytes = b"", error: ErrorCode = ErrorCode.none) -> Any:
    return {"partition_index": p, "error_code": error, "high_watermark": hw, "log_start_offset": 0,
            "records": records, "aborted_transactions": None}


class _Clock:
    def __init__(self) -> None:
        self.ms = 1_000_000

    def __call__(self) -> int:
        return self.ms


def _session(cache: FetchSessionCache, n: int, privileged: bool = False) -> int:
    context = cache.new_context(12, 0, 0, _parts(n), [], privileged)
    sid, _ = cache.respond(context, [_entry(p, 0) for p in range(n)], [0] * n)
    return sid


def test_epochs_wrap_and_an_incremental_reply_carries_only_changes():
    assert [next_epoch(e) for e in (-1, 0, 1, INT32_MAX)] == [-1, 1, 2, 1]
    cache = FetchSessionCache(10, _Clock())
    sid = _session(cache, 3)
    context = cache.new_context(12, sid, 1, [], [], False)
    assert context.kind == "incremental" and len(context.partitions) == 3
    entries = [_entry(0, 0), _entry(1, 5, b"xyz"), _entry(2, 0, error=ErrorCode.offset_out_of_range)]
    got, sent = cache.respond(context, entries, [0, 3, 0])
    assert got == sid and [w.partition for w, _ in sent] == [1, 2]
    assert list(cache.sessions[sid].partitions) == [("t", 0), ("t", 2), ("t", 1)]   # with records: moved last
    # the errored partition answers again (its cached high watermark was made invalid), the others not
    context = cache.new_context(12, sid, 2, [], [], False)
    _, sent = cache.respond(context, [_entry(0, 0), _entry(2, 0), _entry(1, 5)], [0, 0, 0])
    assert [w.partition for w, _ in sent] == [2]
    assert cache.new_context(12, sid, 2, [], [], False).error == ErrorCode.invalid_fetch_session_epoch


def test_eviction_follows_kafkas_rules():
    clock = _Clock()
    cache = FetchSessionCache(2, clock)
    small, big = _session(cache, 2), _session(cache, 5)
    assert small and big
    assert _session(cache, 9) == 0                       # both new: a consumer may evict neither
    follower = _session(cache, 1, privileged=True)       # a follower evicts the least valuable consumer session
    assert follower and set(cache.sessions) == {big, follower}
    clock.ms += EVICTION_MS + 1
    cache.new_context(12, follower, 1, [], [], True)     # used: only `big` is idle past the eviction time
    assert _session(cache, 1) != 0 and big not in cache.sessions and follower in cache.sessions
    assert cache.counters.evicted == 2 and cache.counters.created == 4
    assert _session(FetchSessionCache(0, clock), 3) == 0  # no slots: no sessions


@pytest.mark.parametrize("value", [-1, "many"])
def test_a_bad_slot_count_is_refused_naming_the_key(tmp_path, value):
    with pytest.raises(ConfigError, match="max.incremental.fetch.session.cache.slots"):
        config_from_mapping({"broker": {"log.dirs": [str(tmp_path)],
                                        "max.incremental.fetch.session.cache.slots": value}})
    good = config_from_mapping({"broker": {"log.dirs": [str(tmp_path)]}})
    assert good.server["max.incremental.fetch.session.cache.slots"] == 1000
