"""``__remote_log_metadata`` through the engine: publishing (the topic created whole on first use, each record
fsynced before publish returns), the view every process rebuilds from it (a second process's records seen by a
refresh), Kafka's transitions enforced, topics told apart by id, and a writer killed at any step leaving a view
that is consistent and a topic the next writer continues."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from storage_engine.config_file import config_from_mapping
from storage_engine.log import topic_changes
from storage_engine.log.manager import LogManager
from storage_engine.tiered import metadata as m
from storage_engine.tiered.metadata import PartitionDelete, RemoteSegment, decode
from storage_engine.tiered.remote_log import (TOPIC, InvalidRemoteStateError, RemoteLogMetadata, RemoteLogView)
from tests.paths import REPO

WRITER = Path(__file__).with_name("metadata_writer.py")
PARTITIONS = 5                       # metadata_writer.py's count
TOPIC_ID = uuid.UUID(int=0x1234)


def config(log_dir: Path):
    return config_from_mapping({"broker": {"log.dirs": str(log_dir)}})


@pytest.fixture
def mgr(tmp_path):
    manager = LogManager.open(config(tmp_path / "logs"))
    yield manager
    manager.close()


def segment(n: int, topic: str = "orders", topic_id: uuid.UUID = TOPIC_ID, partition: int = 0) -> RemoteSegment:
    return RemoteSegment(topic, topic_id, partition, uuid.UUID(int=n + 1), n * 10, n * 10 + 9, 1000 + n, 2000 + n,
                         1, {0: n * 10}, 100 + n)


def writer(log_dir: Path, count: int, env: dict | None = None, topic_id: uuid.UUID = TOPIC_ID) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(WRITER), str(log_dir), "orders", str(topic_id), str(count)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONPATH=str(REPO), **(env or {})))


@pytest.mark.unit
def test_publish_creates_the_topic_whole_and_the_view_follows_kafkas_states(tmp_path, mgr):
    meta, view = RemoteLogMetadata(PARTITIONS), RemoteLogView()
    first = segment(0)
    where = meta.publish(mgr, first, view)
    assert sorted(topic_changes.existing_partitions(mgr, TOPIC)) == list(range(PARTITIONS))
    assert where == (m.metadata_partition(TOPIC_ID, 0, PARTITIONS), 0)
    reloaded = config(tmp_path / "logs").log_config(TOPIC)            # its configs are stored with it
    assert (reloaded.retention_ms, reloaded.retention_bytes, reloaded.cleanup_policy) == (-1, -1, ("delete",))
    assert view.copy_started_unfinished("orders", 0) == [first] and view.segments("orders", 0) == []
    assert view.highest_offset("orders", 0) == -1 and view.remote_log_start_offset("orders", 0) is None

    meta.publish(mgr, first.update(m.COPY_SEGMENT_FINISHED, 3000), view)
    second = segment(1)
    meta.publish(mgr, second, view)
    meta.publish(mgr, second.update(m.COPY_SEGMENT_FINISHED, 3001), view)
    assert [s.segment_id for s in view.segments("orders", 0)] == [first.segment_id, second.segment_id]
    assert (view.remote_log_start_offset("orders", 0), view.highest_offset("orders", 0)) == (0, 19)
    assert view.segment_for("orders", 0, 15) == second.updated(second.update(m.COPY_SEGMENT_FINISHED, 3001))
    assert view.segment_for("orders", 0, 20) is None and view.remote_bytes("orders", 0) == 201

    meta.publish(mgr, first.update(m.DELETE_SEGMENT_STARTED, 4000), view)
    assert [s.segment_id for s in view.delete_started_unfinished("orders", 0)] == [first.segment_id]
    assert view.remote_log_start_offset("orders", 0) == 10
    meta.publish(mgr, first.update(m.DELETE_SEGMENT_FINISHED, 4001), view)
    assert view.segment("orders", 0, first.segment_id) is None

    fresh = RemoteLogView.load(mgr)          # a view rebuilt from the topic agrees
    assert fresh.segments("orders", 0, None) == view.segments("orders", 0, None)
    assert fresh.partitions() == [("orders", TOPIC_ID, 0)] and not fresh.rejected
    assert fresh.refresh(mgr) == 0           # nothing new


@pytest.mark.unit
def test_kafkas_transitions_are_refused_on_publish_and_skipped_when_read(mgr):
    meta, view = RemoteLogMetadata(PARTITIONS), RemoteLogView()
    first = segment(0)
    with pytest.raises(InvalidRemoteStateError, match="no such segment"):
        meta.publish(mgr, first.update(m.COPY_SEGMENT_FINISHED, 1), view)
    meta.publish(mgr, first, view)
    meta.publish(mgr, first, view)           # a retried STARTED is idempotent
    with pytest.raises(InvalidRemoteStateError, match="COPY_SEGMENT_STARTED, which cannot move to "
                                                      "DELETE_SEGMENT_FINISHED"):
        meta.publish(mgr, first.update(m.DELETE_SEGMENT_FINISHED, 1), view)
    with pytest.raises(InvalidRemoteStateError, match="a new segment's record must be COPY_SEGMENT_STARTED"):
        meta.publish(mgr, segment(1).updated(segment(1).update(m.COPY_SEGMENT_FINISHED, 1)), view)
    with pytest.raises(InvalidRemoteStateError, match="not marked, which cannot move to DELETE_PARTITION_STARTED"):
        meta.publish(mgr, PartitionDelete("orders", TOPIC_ID, 0, 1, 5, m.DELETE_PARTITION_STARTED), view)
    # Written without the check (as a buggy or foreign writer could), it is skipped by every reader, with why.
    meta.publish(mgr, first.update(m.DELETE_SEGMENT_FINISHED, 1))
    loaded = RemoteLogView.load(mgr)
    assert loaded.copy_started_unfinished("orders", 0) == [first]
    assert len(loaded.rejected) == 1 and "skipped DELETE_SEGMENT_FINISHED of segment" in loaded.rejected[0]
    assert "cannot move to DELETE_SEGMENT_FINISHED" in loaded.rejected[0]


@pytest.mark.unit
def test_a_partition_deletion_forgets_its_segments_and_a_recreated_topic_has_its_own(mgr):
    meta, view = RemoteLogMetadata(PARTITIONS), RemoteLogView()
    old = segment(0)
    meta.publish(mgr, old, view)
    meta.publish(mgr, old.update(m.COPY_SEGMENT_FINISHED, 3000), view)
    for state in (m.DELETE_PARTITION_MARKED, m.DELETE_PARTITION_STARTED, m.DELETE_PARTITION_FINISHED):
        meta.publish(mgr, PartitionDelete("orders", TOPIC_ID, 0, 1, 3001 + state, state), view)
    assert view.segments("orders", 0, None) == [] and view.partition_delete_state("orders", 0) == 2
    new_id = uuid.UUID(int=0x9999)                  # the topic created again: a new id, a later event time
    renewed = RemoteSegment("orders", new_id, 0, uuid.UUID(int=77), 0, 4, 1, 5000, 1, {}, 10)
    meta.publish(mgr, renewed, view)
    assert view.topic_id_of("orders") == new_id
    assert view.copy_started_unfinished("orders", 0) == [renewed]
    assert view.partition_delete_state("orders", 0, topic_id=TOPIC_ID) == 2
    assert view.copy_started_unfinished("orders", 0, topic_id=TOPIC_ID) == []


@pytest.mark.unit
def test_a_read_only_manager_loads_the_view(tmp_path, mgr):
    meta = RemoteLogMetadata(PARTITIONS)
    meta.publish(mgr, segment(0))
    with LogManager.open(config(tmp_path / "logs"), read_only=True) as reader:
        assert RemoteLogView.load(reader).copy_started_unfinished("orders", 0) == [segment(0)]
    with LogManager.open(config(tmp_path / "empty"), read_only=True) as nothing:
        assert RemoteLogView.load(nothing).partitions() == []


@pytest.mark.slow
def test_a_second_process_publishes_and_a_refresh_sees_it(tmp_path, mgr):
    view = RemoteLogView.load(mgr)
    assert view.partitions() == []
    proc = writer(tmp_path / "logs", 3)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert view.refresh(mgr) == 6
    finished = view.segments("orders", 0)
    assert [(s.start_offset, s.end_offset, s.state) for s in finished] == [(0, 9, 1), (10, 19, 1), (20, 29, 1)]
    assert view.refresh(mgr) == 0
    # field by field, the bytes in the topic are the records published (read with the engine, decoded here)
    p = m.metadata_partition(TOPIC_ID, 0, PARTITIONS)
    records = [decode(r.value) for r in mgr.get_log(TOPIC, p).read_records(0) if r.value is not None]
    assert [(type(r).__name__, r.state) for r in records] == [("RemoteSegment", 0), ("SegmentUpdate", 1)] * 3
    first = records[0]
    assert isinstance(first, RemoteSegment)
    assert (first.topic, first.topic_id, first.partition, first.start_offset, first.end_offset, first.max_timestamp_ms,
            first.event_timestamp_ms, first.broker_id, dict(first.segment_leader_epochs), first.size_bytes,
            first.custom_metadata) == ("orders", TOPIC_ID, 0, 0, 9, 1000, 2000, 1, {0: 0}, 4096, None)
    assert all(r.key is None for r in mgr.get_log(TOPIC, p).read_records(0))


@pytest.mark.kills
@pytest.mark.slow
@pytest.mark.parametrize("step, states", [
    ("remote.metadata.appended:1", {None, m.COPY_SEGMENT_STARTED}),      # STARTED appended, not flushed
    ("remote.metadata.flushed:1", {m.COPY_SEGMENT_STARTED}),            # STARTED durable, nothing uploaded
    ("remote.metadata.appended:2", {m.COPY_SEGMENT_STARTED, m.COPY_SEGMENT_FINISHED}),
    ("remote.metadata.flushed:2", {m.COPY_SEGMENT_FINISHED}),
    ("topic.create.partition:2", {None}),                                # the topic half created
])
def test_a_writer_killed_at_a_step_leaves_a_consistent_view_and_the_next_writer_continues(tmp_path, step, states):
    logs = tmp_path / "logs"
    proc = writer(logs, 1, env={"STORAGE_ENGINE_CRASH_AT": step})
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == -signal.SIGKILL and f"CRASHPOINT {step.split(':')[0]}" in err
    with LogManager.open(config(logs)) as mgr:         # the next open completes a half-made topic
        view = RemoteLogView.load(mgr)
        seen = view.segments("orders", 0, None)
        assert (seen[0].state if seen else None) in states and len(seen) <= 1 and not view.rejected
    proc = writer(logs, 2)                             # the next writer publishes on
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    with LogManager.open(config(logs)) as mgr:
        view = RemoteLogView.load(mgr)
        assert sorted(topic_changes.existing_partitions(mgr, TOPIC)) == list(range(PARTITIONS))
        before = seen[0].state if seen else None
        assert len(view.segments("orders", 0)) == 2 + (before == m.COPY_SEGMENT_FINISHED) and not view.rejected
        assert len(view.copy_started_unfinished("orders", 0)) == (before == m.COPY_SEGMENT_STARTED)


@pytest.mark.kills
@pytest.mark.slow
def test_a_writer_killed_at_any_moment_leaves_a_view_of_whole_records_in_order(tmp_path):
    logs = tmp_path / "logs"
    for round_ in range(3):
        proc = writer(logs, 0)
        assert proc.stdout is not None
        for _ in range(5 + 7 * round_):                # a different moment each round
            assert proc.stdout.readline().startswith("published")
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
        with LogManager.open(config(logs)) as mgr:
            view = RemoteLogView.load(mgr)
            every = view.segments("orders", 0, None)
            assert not view.rejected
            assert all(s.state in (m.COPY_SEGMENT_STARTED, m.COPY_SEGMENT_FINISHED) for s in every)
            # at most the last segment of each round is left unfinished (one writer, one segment at a time)
            assert len(view.copy_started_unfinished("orders", 0)) <= round_ + 1
