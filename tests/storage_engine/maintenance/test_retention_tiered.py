"""Retention of a tiered topic (``remote.storage.enable``), Kafka's ``UnifiedLog.deleteOldSegments`` with remote
storage: ``local.retention.*`` instead of ``retention.*``, only segments whose last offset has a finished remote copy
(``remote_upper``) go, the log start offset stays (the local one moves), and the active segment that breaches local
retention is rolled. Through the plan, the per-partition run, and the jobs that take ``remote_upper_for``."""
from __future__ import annotations

import pytest

from storage_engine.clock import ManualClock
from storage_engine.config import LogConfig
from storage_engine.config_file import config_from_mapping
from storage_engine.inspection import plans
from storage_engine.jobs import batches, housekeeping
from storage_engine.log import loader
from storage_engine.log.log import Log
from storage_engine.log.manager import LogManager
from storage_engine.maintenance import retention
from storage_engine.record.records import SimpleRecord

pytestmark = pytest.mark.unit

DAY_MS = 86_400_000
T0 = 1_700_000_000_000
# A store with tiered storage on (no object store is reached here: the engine's part needs none).
TIERED_STORE = {"remote.log.storage.system.enable": True, "rsm.config.storage.s3.endpoint.url": "http://127.0.0.1:9",
                "rsm.config.storage.s3.bucket.name": "tiered"}


def _size() -> int:
    from storage_engine.record.record_batch import build_batch
    return len(build_batch([SimpleRecord(b"k", b"v" * 20, T0)]))


def open_log(tmp_path, overrides: dict, topic: str = "t") -> Log:
    cfg = LogConfig().with_overrides({"segment.bytes": 2 * _size(), **overrides})
    log, _ = loader.open_log(str(tmp_path), topic, 0, cfg, clock=ManualClock(T0), exclusive=True, create=True)
    return log


def fill(log: Log, n: int, ts: int = T0) -> None:
    """``n`` one-record batches at timestamp ``ts``: two per segment ([0, 1], [2, 3], ...)."""
    for _ in range(n):
        log.append_records([SimpleRecord(b"k", b"v" * 20, ts)])


def bases(log: Log) -> list[int]:
    return [s.base_offset for s in log.segments]


TIERED = {"remote.storage.enable": True}


def test_local_retention_bytes_deletes_only_the_segments_with_a_finished_remote_copy(tmp_path):
    log = open_log(tmp_path, {**TIERED, "local.retention.bytes": 0, "retention.ms": -1, "retention.bytes": -1})
    fill(log, 9)
    assert bases(log) == [0, 2, 4, 6, 8]
    # Copied up to offset 4: segment [4, 5] is only half copied, so it stays, and so does everything after it.
    result = retention.run(log, T0, remote_upper=4)
    assert [(s["base_offset"], s["reason"]) for s in result["segments"]] == [(0, "local-retention-bytes"),
                                                                             (2, "local-retention-bytes")]
    assert bases(log) == [4, 6, 8]
    assert (result["log_start_offset_before"], result["log_start_offset"]) == (0, 0)
    assert (result["local_log_start_offset_before"], result["local_log_start_offset"]) == (0, 4)
    assert result["tiered"] and result["remote_upper"] == 4
    assert (log.log_start_offset, log.local_log_start_offset) == (0, 4)
    # Copied further: the next pass goes up to it. The active segment breaches local.retention.bytes too: it is
    # rolled (Kafka), so that it can be copied, never deleted uncopied.
    result = retention.run(log, T0, remote_upper=7)
    assert [s["base_offset"] for s in result["segments"]] == [4, 6] and result["rolled_active"]
    assert bases(log) == [8, 9] and log.log_start_offset == 0


def test_local_retention_ms_applies_and_retention_ms_does_not(tmp_path):
    log = open_log(tmp_path, {**TIERED, "local.retention.ms": DAY_MS, "retention.ms": 10 * DAY_MS})
    fill(log, 7, ts=T0)
    now = T0 + 2 * DAY_MS       # past local.retention.ms, far from retention.ms
    result = retention.run(log, now, remote_upper=5)
    assert [(s["base_offset"], s["reason"]) for s in result["segments"]] == [(0, "local-retention-ms"),
                                                                             (2, "local-retention-ms"),
                                                                             (4, "local-retention-ms")]
    assert log.log_start_offset == 0 and log.local_log_start_offset == 6


def test_local_retention_minus_two_follows_retention(tmp_path):
    log = open_log(tmp_path, {**TIERED, "retention.ms": DAY_MS})       # local.retention.ms defaults to -2
    assert log.config.effective_local_retention_ms == DAY_MS
    fill(log, 5)
    assert retention.run(log, T0 + DAY_MS, remote_upper=3)["nothing_to_do"]     # strict, as retention.ms
    assert [s["reason"] for s in retention.run(log, T0 + DAY_MS + 1, remote_upper=3)["segments"]] == [
        "local-retention-ms"] * 2


@pytest.mark.parametrize("remote_upper", [None, -1])
def test_retention_never_deletes_a_tiered_segment_without_a_finished_remote_copy(tmp_path, remote_upper):
    """retention.ms and retention.bytes both say every sealed segment must go; none has a remote copy (the store is
    down, or nothing was tiered yet): nothing goes, and the log start offset stays."""
    log = open_log(tmp_path, {**TIERED, "retention.ms": DAY_MS, "retention.bytes": 0})
    fill(log, 7)
    result = retention.run(log, T0 + 30 * DAY_MS, remote_upper=remote_upper)
    assert result["segments_deleted"] == 0 and bases(log) == [0, 2, 4, 6]
    assert log.log_start_offset == 0
    deletions, _ = retention.plan(log, T0 + 30 * DAY_MS, remote_upper=remote_upper)
    assert deletions == []
    # The same files in a topic that is not tiered: everything sealed goes by size.
    plain = open_log(tmp_path, {"retention.ms": DAY_MS, "retention.bytes": 0}, topic="plain")
    fill(plain, 7)
    assert retention.run(plain, T0 + 30 * DAY_MS)["segments_deleted"] == 4 and plain.log_start_offset == 7


def test_the_log_start_offset_rule_needs_no_remote_copy(tmp_path):
    """Kafka's ``allowDeletionDueToLogStartOffsetIncremented``: below the log start offset (delete-records, remote
    retention) a tiered topic's segments go whether copied or not."""
    log = open_log(tmp_path, {**TIERED, "retention.ms": -1})
    fill(log, 7)
    log.delete_records(4)
    result = retention.run(log, T0, remote_upper=None)
    assert [(s["base_offset"], s["reason"]) for s in result["segments"]] == [(0, "log-start-offset"),
                                                                             (2, "log-start-offset")]
    assert log.log_start_offset == 4


def test_an_active_segment_that_breaches_local_retention_is_rolled_then_deleted_once_copied(tmp_path):
    log = open_log(tmp_path, {**TIERED, "local.retention.ms": DAY_MS, "retention.ms": -1})
    fill(log, 1)
    assert bases(log) == [0]
    dry = retention.run(log, T0 + 2 * DAY_MS, remote_upper=-1, dry_run=True)
    assert dry["rolled_active"] and bases(log) == [0]          # would roll; a dry run changes nothing
    result = retention.run(log, T0 + 2 * DAY_MS, remote_upper=-1)
    assert result["rolled_active"] and not result["nothing_to_do"] and result["segments_deleted"] == 0
    assert bases(log) == [0, 1]             # sealed: the tiering job can copy it now
    result = retention.run(log, T0 + 2 * DAY_MS, remote_upper=0)
    assert [s["base_offset"] for s in result["segments"]] == [0] and not result["rolled_active"]
    assert bases(log) == [1] and log.log_start_offset == 0 and log.local_log_start_offset == 1
    assert retention.run(log, T0 + 2 * DAY_MS, remote_upper=0)["nothing_to_do"]    # the empty active one stays


def test_with_remote_log_copy_disable_the_topic_follows_retention_and_moves_the_log_start(tmp_path):
    """Kafka: remote.log.copy.disable=true makes local.retention.* irrelevant; the local segments expire by
    retention.* and deleting them moves the log start offset."""
    log = open_log(tmp_path, {**TIERED, "remote.log.copy.disable": True, "retention.ms": DAY_MS})
    fill(log, 4)
    fill(log, 1, ts=T0 + DAY_MS)
    result = retention.run(log, T0 + DAY_MS + 1, remote_upper=-1)
    assert [s["reason"] for s in result["segments"]] == ["retention-ms"] * 2 and "tiered" not in result
    assert log.log_start_offset == 4


def store(tmp_path) -> tuple:
    d = tmp_path / "logs"
    seg = 2 * _size()
    cfg = config_from_mapping({
        "broker": {"log.dirs": [str(d)], **TIERED_STORE},
        "topics": {"tiered": {"remote.storage.enable": True, "segment.bytes": seg, "retention.ms": DAY_MS},
                   "plain": {"segment.bytes": seg, "retention.ms": DAY_MS}}})
    with LogManager.open(cfg, clock=ManualClock(T0)) as mgr:
        for t in ("tiered", "plain"):
            fill(mgr.get_or_create_log(t, 0), 7)
    return cfg, T0 + 2 * DAY_MS


def segments_of(cfg, topic: str) -> list[int]:
    with LogManager.open(cfg, clock=ManualClock(T0), read_only=True) as mgr:
        return bases(mgr.logs[(topic, 0)])


def test_the_retention_jobs_delete_no_tiered_segment_without_a_remote_view(tmp_path):
    cfg, now = store(tmp_path)
    results = {r["topic"]: r for r in housekeeping.retention_all(cfg, now)}
    assert results["tiered"]["segments_deleted"] == 0 and results["tiered"]["remote_upper"] == -1
    assert results["plain"]["segments_deleted"] == 4
    batch = batches.retention_batch(cfg, [["tiered", 0]], now)
    assert batch["results"][0]["segments_deleted"] == 0 and not batch["failures"]
    assert housekeeping.retention(cfg, "tiered", 0, now)["segments_deleted"] == 0
    assert segments_of(cfg, "tiered") == [0, 2, 4, 6]


def test_the_retention_jobs_delete_up_to_what_remote_upper_for_says(tmp_path):
    cfg, now = store(tmp_path)
    asked: list[tuple[str, int]] = []

    def remote_upper_for(topic: str, partition: int) -> int | None:
        asked.append((topic, partition))
        return 3

    # The dry runs and the Storage view's plan agree with the run.
    dry = batches.retention_batch(cfg, [["tiered", 0]], now, dry_run=True, remote_upper_for=remote_upper_for)
    assert dry["results"][0]["segments_deleted"] == 2 and dry["results"][0]["records_removed"] == 0
    view = plans.plan(cfg, now, topics=["tiered"], remote_upper_for=remote_upper_for)["retention"]["partitions"][0]
    assert [s["base_offset"] for s in view["segments"]] == [0, 2] and view["log_start_after"] == 0
    result = batches.retention_batch(cfg, [["tiered", 0], ["plain", 0]], now, remote_upper_for=remote_upper_for)
    by_topic = {r["topic"]: r for r in result["results"]}
    assert by_topic["tiered"]["segments_deleted"] == 2 and by_topic["tiered"]["log_start_offset"] == 0
    assert by_topic["tiered"]["local_log_start_offset"] == 4
    assert by_topic["plain"]["segments_deleted"] == 4
    assert ("plain", 0) not in asked            # only tiered topics are asked
    assert segments_of(cfg, "tiered") == [4, 6]
    with LogManager.open(cfg, clock=ManualClock(now)) as mgr:       # reopened: the log start offset stayed
        log = mgr.logs[("tiered", 0)]
        assert (log.log_start_offset, log.local_log_start_offset) == (0, 4)


def publish_copies(cfg, topic: str, finished: list[tuple[int, int]], started: tuple[tuple[int, int], ...] = (),
                   topic_id=None):
    """Record remote copies of ``topic``-0's offset ranges in ``__remote_log_metadata`` as the tiering job does
    (COPY_SEGMENT_STARTED, then FINISHED for ``finished``); returns the partition's topic id."""
    import uuid
    from storage_engine.log.topic_id import ensure_topic_id
    from storage_engine.tiered import metadata as m
    from storage_engine.tiered.remote_log import RemoteLogMetadata, RemoteLogView
    with LogManager.open(cfg, clock=ManualClock(T0)) as mgr:
        own = ensure_topic_id(mgr.logs[(topic, 0)].dir)
        tid = topic_id or own
        meta, view = RemoteLogMetadata(3), RemoteLogView()
        for n, (start, end) in enumerate(list(finished) + list(started)):
            seg = m.RemoteSegment(topic, tid, 0, uuid.UUID(int=n + 1), start, end, T0, T0, 0, {0: start}, 100)
            meta.publish(mgr, seg, view)
            if (start, end) in finished:
                meta.publish(mgr, seg.update(m.COPY_SEGMENT_FINISHED, T0 + 1), view)
    return own


def test_the_retention_jobs_read_the_remote_view_when_the_store_is_tiered(tmp_path):
    """Without a caller's bound, the jobs ask ``__remote_log_metadata``: only segments with a finished copy go; a
    copy started and never finished (an upload cut short, the store down) protects its segment."""
    cfg, now = store(tmp_path)
    publish_copies(cfg, "tiered", finished=[(0, 1), (2, 3)], started=((4, 5),))
    dry = batches.retention_batch(cfg, [["tiered", 0]], now, dry_run=True)["results"][0]
    assert (dry["segments_deleted"], dry["remote_upper"]) == (2, 3)
    view = plans.plan(cfg, now, topics=["tiered"])["retention"]["partitions"][0]      # the Storage view agrees
    assert [s["base_offset"] for s in view["segments"]] == [0, 2] and view["log_start_after"] == 0
    result = batches.retention_batch(cfg, [["tiered", 0], ["plain", 0]], now)
    by_topic = {r["topic"]: r for r in result["results"]}
    assert (by_topic["tiered"]["segments_deleted"], by_topic["tiered"]["remote_upper"]) == (2, 3)
    assert by_topic["plain"]["segments_deleted"] == 4 and not result["failures"]
    assert segments_of(cfg, "tiered") == [4, 6]
    again = {r["topic"]: r for r in housekeeping.retention_all(cfg, now)}
    assert again["tiered"]["nothing_to_do"] and again["tiered"]["remote_upper"] == 3
    assert housekeeping.retention(cfg, "tiered", 0, now)["remote_upper"] == 3


def test_copies_of_a_topic_deleted_and_created_again_do_not_count_for_the_new_one(tmp_path):
    """The view is asked for the partition's own topic id: finished copies recorded under another id (the topic of
    that name before it was deleted) are not this partition's, so none of its segments goes."""
    import uuid
    cfg, now = store(tmp_path)
    own = publish_copies(cfg, "tiered", finished=[(0, 5)], topic_id=uuid.UUID(int=0xDEAD))
    assert own != uuid.UUID(int=0xDEAD)
    result = batches.retention_batch(cfg, [["tiered", 0]], now)["results"][0]
    assert (result["segments_deleted"], result["remote_upper"]) == (0, -1)
    assert segments_of(cfg, "tiered") == [0, 2, 4, 6]
