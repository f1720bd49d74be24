"""A tiered topic's log (``remote.storage.enable``) as Kafka's ``UnifiedLog`` keeps it: the log start offset stays
below the first local segment when local retention deletes segments with a remote copy (Kafka's
``localLogStartOffset`` moves instead), across a reopen and a crash; reads of the offsets in between raise
:class:`OffsetInRemoteStorageError`; remote retention raises the log start offset durably."""
from __future__ import annotations

import os
import shutil

import pytest

from storage_engine.errors import OffsetInRemoteStorageError, OffsetOutOfRangeError
from storage_engine.log import loader
from storage_engine.clock import ManualClock
from storage_engine.maintenance import retention

from ..helpers import config, recs
from .test_log_rules import joiner_of, killed_at, shared_generation, size_of

pytestmark = pytest.mark.unit

T0 = 1_700_000_000_000
# A store with tiered storage on (no object store is reached here: the engine's part needs none).
TIERED_STORE = {"remote.log.storage.system.enable": True, "rsm.config.storage.s3.endpoint.url": "http://127.0.0.1:9",
                "rsm.config.storage.s3.bucket.name": "tiered"}
TIERED = {"remote_storage_enable": True}


def two_per_segment(logs, n: int, **kw):
    """A log of ``n`` segments of two one-record batches each ([0, 1], [2, 3], ...), the last one active."""
    log = logs(config(segment_bytes=2 * size_of("a"), **kw))
    for _ in range(2 * n - 1):
        log.append_records(recs("a", timestamp=T0))
    assert [s.base_offset for s in log.segments] == list(range(0, 2 * n, 2))
    return log


def locally_retained(logs, n: int = 5, copied: int = 5, **kw):
    """A tiered log of ``n`` two-record segments whose records up to ``copied`` have a remote copy, after local
    retention by size (local.retention.bytes=0) deleted the copied segments."""
    log = two_per_segment(logs, n, **TIERED, local_retention_bytes=0, retention_ms=-1, **kw)
    result = retention.run(log, T0, remote_upper=copied)
    assert result["tiered"] and result["segments_deleted"] == (copied + 1) // 2
    return log


def test_local_retention_keeps_the_log_start_offset_and_moves_the_local_one(logs):
    log = locally_retained(logs)
    assert (log.log_start_offset, log.local_log_start_offset) == (0, 6)
    assert [s.base_offset for s in log.segments] == [6, 8]
    assert log.describe()["local_log_start_offset"] == 6 and log.describe()["log_start_offset"] == 0


@pytest.mark.parametrize("clean", [True, False])
def test_a_reopen_keeps_a_tiered_log_start_below_the_first_local_segment(logs, log_dir, clean):
    log = locally_retained(logs)
    cfg = log.config
    log.close(clean=clean)      # not clean: as after a crash, the load recovers from the checkpoint and state
    again = logs(cfg, had_clean_shutdown=clean)
    assert (again.log_start_offset, again.local_log_start_offset) == (0, 6)
    assert [r.offset for r in again.read_records(6)] == [6, 7, 8]
    # A process joining the log dir sees the same.
    joiner = joiner_of(log_dir, cfg)
    assert (joiner.log_start_offset, joiner.local_log_start_offset) == (0, 6)
    joiner.close(clean=False)


def test_the_same_files_and_checkpoint_start_at_the_first_segment_for_a_topic_that_is_not_tiered(logs, tmp_path):
    """Kafka's load: the checkpoint raised to the first segment's base, except with remote storage (the checkpoint
    as is). The same folder, without the engine's own record of the partition, loaded both ways."""
    log = locally_retained(logs)
    log.close(clean=True)
    for tiered in (True, False):
        d = tmp_path / f"copy-{tiered}"
        d.mkdir()
        shutil.copytree(log.dir, d / os.path.basename(log.dir))
        cfg = config(segment_bytes=2 * size_of("a"), remote_storage_enable=tiered)
        copy, res = loader.open_log(str(d), log.topic, 0, cfg, clock=ManualClock(T0), exclusive=True,
                                    log_start_offset_checkpoint=2)
        assert res is not None and not [m for m in res.messages if "lost" in m]
        assert (copy.log_start_offset, copy.local_log_start_offset) == ((2, 6) if tiered else (6, 6))
        copy.close(clean=False)


def test_reads_below_the_local_log_start_raise_the_remote_storage_error(logs):
    log = locally_retained(logs)
    for offset in (0, 3, 5):
        with pytest.raises(OffsetInRemoteStorageError, match=f"offset {offset} of topic-0 is in remote storage") as e:
            log.read(offset)
        assert isinstance(e.value, OffsetOutOfRangeError)        # old callers keep their behaviour
        assert (e.value.offset, e.value.local_log_start_offset) == (offset, 6)
    with pytest.raises(OffsetInRemoteStorageError):
        next(iter(log.read_records()))          # from the log start offset: in remote storage
    data = log.read(6)
    assert data is not None and data.data
    assert [r.offset for r in log.read_records(6)] == [6, 7, 8]
    with pytest.raises(OffsetOutOfRangeError) as above:
        log.read(10)
    assert not isinstance(above.value, OffsetInRemoteStorageError)


def test_a_topic_that_is_not_tiered_never_raises_the_remote_storage_error(logs):
    log = two_per_segment(logs, 3, retention_ms=-1)
    log.delete_records(3)
    with pytest.raises(OffsetOutOfRangeError) as below:
        log.read(1)
    assert not isinstance(below.value, OffsetInRemoteStorageError)
    assert log.local_log_start_offset == log.log_start_offset == 3


def test_the_log_start_offset_from_remote_deletes_local_segments_below_it_and_is_never_lowered(logs):
    log = two_per_segment(logs, 5, **TIERED, retention_ms=-1)
    assert log.set_log_start_offset_from_remote(4) == 4
    assert log.set_log_start_offset_from_remote(2) == 4       # never lowered
    assert (log.log_start_offset, log.local_log_start_offset) == (4, 4)
    with pytest.raises(OffsetOutOfRangeError, match="high watermark 9"):
        log.set_log_start_offset_from_remote(10)
    # Retention's rule 1 deletes the local segments wholly below it, copied or not.
    result = retention.run(log, T0)
    assert [s["reason"] for s in result["segments"]] == ["log-start-offset"] * 2
    assert [s.base_offset for s in log.segments] == [4, 6, 8] and log.log_start_offset == 4


def test_a_log_start_offset_raised_from_remote_is_in_the_dir_checkpoint(tmp_path):
    from storage_engine.config_file import config_from_mapping
    from storage_engine.log.manager import LogManager
    from storage_engine.segment.checkpoint import OffsetCheckpointFile
    from storage_engine import layout
    d = tmp_path / "logs"
    cfg = config_from_mapping({"broker": {"log.dirs": [str(d)], **TIERED_STORE},
                               "topics": {"t": {"remote.storage.enable": True, "segment.bytes": 2 * size_of("a")}}})
    with LogManager.open(cfg, clock=ManualClock(T0)) as mgr:
        log = mgr.get_or_create_log("t", 0)
        for _ in range(7):
            log.append_records(recs("a", timestamp=T0))
        log.set_log_start_offset_from_remote(4)
        retention.run(log, T0)
        assert log.segments[0].base_offset == 4
        mgr.checkpoint()
        written, _ = OffsetCheckpointFile(os.path.join(d, layout.LOG_START_OFFSET_CHECKPOINT)).read_or_empty()
        # Kafka writes a tiered log's start even when it equals the first local segment's base.
        assert written[("t", 0)] == 4
    with LogManager.open(cfg, clock=ManualClock(T0)) as mgr:
        assert mgr.logs[("t", 0)].log_start_offset == 4


@pytest.mark.kills
@pytest.mark.parametrize("step", ["remote-start.published", "remote-start.synced"])
def test_a_log_start_offset_raised_from_remote_survives_a_kill_9(logs, log_dir, step):
    """The raised start is in the partition's shared state before the process can die (fsynced right after): a
    process killed at either step leaves it raised for every process and for the next load after the crash."""
    log = locally_retained(logs)
    cfg = log.config
    g = shared_generation(log)

    def raise_start():
        j = joiner_of(log_dir, cfg)
        j.set_log_start_offset_from_remote(5)

    assert killed_at(step, raise_start)
    assert (log.lock.read_state().generation, log.lock.read_state().log_start_offset) == (g + 1, 5)
    log.refresh()
    assert log.log_start_offset == 5
    with pytest.raises(OffsetOutOfRangeError) as gone:
        log.read(4)
    assert not isinstance(gone.value, OffsetInRemoteStorageError)      # below the log start: gone, not remote
    with pytest.raises(OffsetInRemoteStorageError):
        log.read(5)
    log.close(clean=False)
    again = logs(cfg, had_clean_shutdown=False)     # the load after the crash
    assert (again.log_start_offset, again.local_log_start_offset) == (5, 6)
    assert all(e.start_offset >= 5 for e in again.leader_epochs.entries)


def test_the_remote_log_index_cache_folder_of_a_log_dir_is_never_a_partition(tmp_path):
    """Kafka keeps its remote index cache in ``<log dir>/remote-log-index-cache`` and skips it when it loads the
    dir; so does every pass over a log dir here: opening, checkpoints, retention, purge, verify."""
    from storage_engine.config_file import config_from_mapping
    from storage_engine.inspection.verify import verify_log_dirs
    from storage_engine.jobs import housekeeping
    from storage_engine.log.manager import LogManager
    from storage_engine import layout
    d = tmp_path / "logs"
    cache = d / "remote-log-index-cache"
    (cache / "t-0").mkdir(parents=True)
    files = {cache / "00000000000000000000_AAAAAAAAAAAAAAAAAAAAAA.index": b"\x00" * 8,
             cache / "t-0" / "00000000000000000000.log": b"not a segment",
             cache / "00000000000000000000_AAAAAAAAAAAAAAAAAAAAAA.timeindex.deleted": b"x"}
    for path, data in files.items():
        path.write_bytes(data)
    cfg = config_from_mapping({"broker": {"log.dirs": [str(d)], **TIERED_STORE},
                               "topics": {"t": {"remote.storage.enable": True}}})
    with LogManager.open(cfg, clock=ManualClock(T0)) as mgr:
        mgr.get_or_create_log("t", 0).append_records(recs("a", timestamp=T0))
        assert list(mgr.logs) == [("t", 0)]
        mgr.checkpoint()
    housekeeping.retention_all(cfg, T0)
    housekeeping.purge(cfg, T0 + 10 ** 9)
    report = verify_log_dirs(cfg)
    assert not report["damaged"] and report["foreign"] == []
    assert layout.scan_log_dir(str(d)).foreign == []
    assert {p: p.read_bytes() for p in files} == files          # never touched


def test_moving_a_tiered_partition_copies_its_local_segments_and_keeps_its_log_start(tmp_path):
    """Kafka's alter-log-dirs of a tiered log: the copy starts at the first local offset and keeps the log start
    offset below it (``truncateFullyAndStartAt(offset, logStartOffsetOpt)``); reopened, it is the same log."""
    from storage_engine.config_file import config_from_mapping
    from storage_engine.log.manager import LogManager
    cfg = config_from_mapping({"broker": {"log.dirs": [str(tmp_path / "a"), str(tmp_path / "b")],
                                          **TIERED_STORE},
                               "topics": {"t": {"remote.storage.enable": True, "segment.bytes": 2 * size_of("a"),
                                                "local.retention.bytes": 0, "retention.ms": -1}}})
    with LogManager.open(cfg, clock=ManualClock(T0)) as mgr:
        log = mgr.get_or_create_log("t", 0)
        for _ in range(9):
            log.append_records(recs("a", timestamp=T0))
        retention.run(log, T0, remote_upper=5)
        assert (log.log_start_offset, log.local_log_start_offset) == (0, 6)
        source = mgr.dir_of(("t", 0))
        target = [d for d in cfg.log_dirs if d != source][0]
        assert mgr.move_log("t", 0, target)["committed"]
        assert log.log_dir == target
        assert (log.log_start_offset, log.local_log_start_offset) == (0, 6)
        assert [r.offset for r in log.read_records(6)] == [6, 7, 8]
    with LogManager.open(cfg, clock=ManualClock(T0)) as mgr:
        moved = mgr.logs[("t", 0)]
        assert moved.log_dir == target
        assert (moved.log_start_offset, moved.local_log_start_offset) == (0, 6)
        with pytest.raises(OffsetInRemoteStorageError):
            moved.read(2)


@pytest.mark.kills
@pytest.mark.parametrize("step", ["retention.published", "retention.manifest", "retention.partial",
                                  "retention.renamed"])
def test_local_retention_killed_at_each_step_loses_nothing_and_keeps_the_log_start(logs, log_dir, step):
    """A tiered log's local retention, killed at each step of deleteSegments: the log start offset never moved, the
    next load finds no lost offsets (the segments going have a remote copy and the manifest no longer names them),
    and the local segments left are whole."""
    log = two_per_segment(logs, 5, **TIERED, local_retention_bytes=0, retention_ms=-1)
    cfg = log.config

    def retain():
        retention.run(joiner_of(log_dir, cfg), T0, remote_upper=5)

    assert killed_at(step, retain)
    assert log.lock.read_state().log_start_offset == 0
    log.close(clean=False)
    again, res = loader.open_log(str(log_dir), log.topic, 0, cfg, clock=ManualClock(T0), exclusive=True)
    assert res is not None
    assert not [m for m in res.messages if "lost" in m], res.messages
    assert again.log_start_offset == 0 and again.local_log_start_offset in (0, 2, 6)
    local = again.local_log_start_offset
    assert [r.offset for r in again.read_records(local)] == list(range(local, 9))
    # The next pass finishes the deletion.
    retention.run(again, T0, remote_upper=5)
    assert (again.log_start_offset, again.local_log_start_offset) == (0, 6)
    again.close(clean=False)


def test_an_index_left_behind_a_locally_deleted_segment_is_no_loss(logs, log_dir):
    """A kill between the renames of a deleted segment's files, then a purge of its ``.log.deleted``, leaves its
    index with entries and no ``.log``: below the first local segment of a tiered topic, local retention did it."""
    log = locally_retained(logs, index_interval_bytes=1)
    cfg = log.config
    log.close(clean=False)
    for name in os.listdir(log.dir):
        if name.endswith(".log.deleted"):
            os.remove(os.path.join(log.dir, name))
        elif name == f"{2:020d}.index.deleted":
            os.rename(os.path.join(log.dir, name), os.path.join(log.dir, f"{2:020d}.index"))
    assert os.path.getsize(os.path.join(log.dir, f"{2:020d}.index")) > 0
    again, res = loader.open_log(str(log_dir), log.topic, 0, cfg, clock=ManualClock(T0), exclusive=True)
    assert res is not None
    assert not [m for m in res.messages if "lost" in m], res.messages
    assert (again.log_start_offset, again.local_log_start_offset) == (0, 6)
    again.close(clean=False)


def test_the_remote_storage_error_survives_a_pickle():
    """(Raised in a worker process and handed back: the offsets come along.)"""
    import pickle
    e = pickle.loads(pickle.dumps(OffsetInRemoteStorageError(3, 6, "offset 3 of t-0 is in remote storage")))
    assert (type(e), e.offset, e.local_log_start_offset, str(e)) == (OffsetInRemoteStorageError, 3, 6,
                                                                     "offset 3 of t-0 is in remote storage")
    assert str(OffsetInRemoteStorageError(1, 2)) == "offset 1 is in remote storage (the first local offset is 2)"


def test_a_topic_whose_remote_storage_was_turned_off_reloads_without_a_false_loss(logs, log_dir):
    """remote.storage.enable turned off with remote.log.delete.on.disable (Kafka's only way): until the tiering job
    deletes the remote segments and raises the log start offset, a load finds the recorded start below the first
    local segment. That is the remote part, not a loss: Kafka's rule for a log without remote storage applies (the
    start raised to the first segment) and nothing is recorded lost; verify reports no damage."""
    from storage_engine.inspection.verify import verify_log_dirs
    from storage_engine.config_file import config_from_mapping
    log = locally_retained(logs)
    log.close(clean=False)
    off = config(segment_bytes=2 * size_of("a"), local_retention_bytes=0, retention_ms=-1,
                 remote_log_delete_on_disable=True)
    cfg = config_from_mapping({"broker": {"log.dirs": [str(log_dir)], **TIERED_STORE},
                               "topics": {log.topic: {"remote.log.delete.on.disable": True,
                                                      "segment.bytes": 2 * size_of("a")}}})
    assert not verify_log_dirs(cfg)["damaged"]              # read-only, before the load
    again, res = loader.open_log(str(log_dir), log.topic, 0, off, clock=ManualClock(T0), exclusive=True)
    assert res is not None
    assert not [m for m in res.messages if "lost" in m], res.messages
    assert (again.log_start_offset, again.local_log_start_offset) == (6, 6)
    assert [r.offset for r in again.read_records()] == [6, 7, 8]
    again.close(clean=False)
    assert not verify_log_dirs(cfg)["damaged"]
