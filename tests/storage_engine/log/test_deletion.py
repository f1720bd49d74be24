"""Deleting partitions: -delete folders at once, the name free for a new partition, checkpoints cleaned, removal
after file.delete.delay.ms; a deletion left half done is completed by whoever meets it."""
from __future__ import annotations

import os

import pytest

from storage_engine import layout
from storage_engine.clock import ManualClock
from storage_engine.config_file import config_from_mapping
from storage_engine.errors import LogLockedError, PartitionDeletedError, PartitionNotFoundError
from storage_engine.log import deletion
from storage_engine.log.locks import DELETED, CleaningClaim, PartitionLock, lock_path, peek_state
from storage_engine.log.manager import LogManager
from storage_engine.jobs import housekeeping, lifecycle
from storage_engine.segment.checkpoint import OffsetCheckpointFile
from storage_engine.inspection.verify import verify_log_dirs

from ..helpers import recs, get_log, present

pytestmark = pytest.mark.unit
T0 = 1_700_000_000_000
DELAY = 60_000


def _config(tmp_path, **broker):
    return config_from_mapping({"broker": {"log.dirs": [str(tmp_path / "a"), str(tmp_path / "b")], **broker}})


def _values(log):
    log.refresh()
    return [r.value for r in log.read_records()]


def _checkpoint(log_dir, name):
    return OffsetCheckpointFile(os.path.join(log_dir, name)).read()


def _fill(mgr, topic, partitions, n=3):
    for p in partitions:
        log = mgr.get_or_create_log(topic, p)
        for i in range(n):
            log.append_records(recs(f"{topic}-{p}-{i}", timestamp=T0))
        log.delete_records(1)
    mgr.checkpoint()


def test_delete_renames_at_once_and_the_name_is_free_for_a_new_partition(tmp_path):
    cfg = _config(tmp_path)
    with LogManager.open(cfg, clock=ManualClock(T0)) as mgr:
        _fill(mgr, "t", [0, 1])
        home = mgr.dir_of(("t", 0))
        old = mgr.get_log("t", 0)
        assert old is not None
        with LogManager.open(cfg, clock=ManualClock(T0)) as reader:       # another manager has it open
            held = reader.get_log("t", 0)
            assert held is not None
            assert _values(held) == [b"t-0-1", b"t-0-2"]
            result = mgr.delete_log("t", 0)
            assert result["log_dir"] == home and result["deleted_folder"].endswith("-delete")
            assert sorted(os.listdir(home)).count("t-0") == 0
            assert os.path.isdir(os.path.join(home, result["deleted_folder"]))
            assert not os.path.exists(lock_path(home, "t-0")), "the retired lock file is gone"
            # Every user of the old partition fails cleanly; the deleting one too.
            with pytest.raises(PartitionDeletedError, match="t-0 was deleted"):
                held.refresh()
            with pytest.raises(PartitionDeletedError):
                held.append_records(recs("late", timestamp=T0))
            with pytest.raises(PartitionDeletedError):
                old.append_records(recs("late", timestamp=T0))
            # The partition leaves the checkpoints of its dir; t-1 stays.
            for name in (layout.RECOVERY_POINT_CHECKPOINT, layout.LOG_START_OFFSET_CHECKPOINT):
                assert ("t", 0) not in _checkpoint(home, name)
                assert ("t", 1) in _checkpoint(mgr.dir_of(("t", 1)), name)
            # Created again at once: a new, empty partition, nothing of the old one.
            new = mgr.get_or_create_log("t", 0)
            assert new.log_end_offset == 0 and new.log_start_offset == 0
            new.append_records(recs("fresh", timestamp=T0))
            assert _values(new) == [b"fresh"]
            # The other manager's get_log now finds the new partition, not the deleted one.
            again = reader.get_log("t", 0)
            assert again is not held and _values(again) == [b"fresh"]
    with LogManager.open(cfg, clock=ManualClock(T0)) as mgr:
        assert _values(mgr.get_log("t", 0)) == [b"fresh"]
        assert _values(mgr.get_log("t", 1)) == [b"t-1-1", b"t-1-2"]
        assert get_log(mgr, "t", 0).log_start_offset == 0, "the old log start offset did not come back"


def test_delete_folders_are_never_loaded_and_go_after_the_delay(tmp_path):
    cfg = _config(tmp_path, **{"log.segment.delete.delay.ms": DELAY})
    with LogManager.open(cfg, clock=ManualClock(T0)) as mgr:
        _fill(mgr, "t", [0])
        home = mgr.dir_of(("t", 0))
        deleted = mgr.delete_log("t", 0)["deleted_folder"]
    path = os.path.join(home, deleted)
    assert deletion.delete_dir_scheduled_ms(path) == T0
    report = verify_log_dirs(cfg)
    assert not report["damaged"]
    assert {"file": path, "message": "deleted partition; removed after file.delete.delay.ms"} in report["pending"]
    assert report["partitions"] == []
    # Not due: neither the purge nor the first opener removes it; nothing loads it.
    assert housekeeping.purge(cfg, T0 + DELAY - 1)["folders_removed"] == []
    with LogManager.open(cfg, clock=ManualClock(T0 + DELAY - 1)) as mgr:
        assert mgr.logs == {}
        described = {d["path"]: d for d in mgr.describe()["log_dirs"]}
        assert described[home]["deleting"] == [{"folder": deleted, "deleted_ms": T0, "due_ms": T0 + DELAY}]
    assert os.path.isdir(path)
    dry = housekeeping.purge(cfg, T0 + DELAY, dry_run=True)
    assert dry["folders_removed"] == [path] and os.path.isdir(path)
    done = housekeeping.purge(cfg, T0 + DELAY)
    assert done["folders_removed"] == [path] and done["bytes_freed"] > 0 and not done["nothing_to_do"]
    assert not os.path.exists(path)
    assert housekeeping.purge(cfg, T0 + DELAY)["nothing_to_do"]


def test_the_first_opener_removes_delete_folders_that_are_due(tmp_path):
    cfg = _config(tmp_path, **{"log.segment.delete.delay.ms": DELAY})
    with LogManager.open(cfg, clock=ManualClock(T0)) as mgr:
        _fill(mgr, "t", [0, 1])
        home = mgr.dir_of(("t", 0))
        deleted = mgr.delete_log("t", 0)["deleted_folder"]
    with LogManager.open(cfg, clock=ManualClock(T0 + DELAY)) as mgr:
        assert not os.path.exists(os.path.join(home, deleted))
        assert f"removed {deleted} (deleted partition)" in mgr.dirs[home].load_messages
        assert sorted(mgr.logs) == [("t", 1)]


def test_a_deletion_left_half_done_is_completed_by_the_next_process(tmp_path):
    """The lock is retired (the deletion is decided) but the process died before the rename."""
    cfg = _config(tmp_path)
    with LogManager.open(cfg, clock=ManualClock(T0)) as mgr:
        _fill(mgr, "t", [0])
        home = mgr.dir_of(("t", 0))
    lock = PartitionLock(lock_path(home, "t-0"))
    with lock:
        lock.retire(DELETED)
    lock.close()
    assert os.path.isdir(os.path.join(home, "t-0"))
    with LogManager.open(cfg, clock=ManualClock(T0)) as mgr:
        assert mgr.get_log("t", 0) is None
        names = os.listdir(home)
        assert "t-0" not in names and any(n.startswith("t-0.") and n.endswith("-delete") for n in names)
        assert ("t", 0) not in _checkpoint(home, layout.RECOVERY_POINT_CHECKPOINT)
        assert mgr.get_or_create_log("t", 0).log_end_offset == 0


def test_a_lock_file_left_by_a_gone_partition_does_not_leak_into_a_new_one(tmp_path):
    """A retired lock whose folder is gone (the process died before unlinking it), and a live-looking state
    file whose folder was removed by hand: a partition created under that name starts from nothing."""
    cfg = _config(tmp_path)
    with LogManager.open(cfg, clock=ManualClock(T0)) as mgr:
        _fill(mgr, "t", [0, 1])
        homes = {p: mgr.dir_of(("t", p)) for p in (0, 1)}
        get_log(mgr, "t", 1).delete_records(3)
    lock = PartitionLock(lock_path(homes[0], "t-0"))
    with lock:
        lock.retire(DELETED)
    lock.close()
    os.rename(os.path.join(homes[0], "t-0"), os.path.join(homes[0], layout.delete_dir_name("t", 0)))
    deletion.remove_tree(os.path.join(homes[1], "t-1"))
    with LogManager.open(cfg, clock=ManualClock(T0)) as mgr:
        for p in (0, 1):
            log = mgr.get_or_create_log("t", p)
            assert (log.log_start_offset, log.log_end_offset) == (0, 0), p
            log.append_records(recs("new", timestamp=T0))
            assert _values(log) == [b"new"]
    assert present(peek_state(lock_path(homes[0], "t-0"))).status == 0


def test_deletion_waits_for_a_cleaning_in_progress(tmp_path):
    cfg = _config(tmp_path)
    with LogManager.open(cfg, clock=ManualClock(T0)) as mgr:
        _fill(mgr, "t", [0])
        home = mgr.dir_of(("t", 0))
        claim = CleaningClaim(home, "t-0")
        assert claim.try_acquire()
        try:
            with pytest.raises(LogLockedError, match="cleaning of this partition did not finish"):
                deletion.delete_partition(home, "t", 0, T0, claim_timeout_s=0.2)
            assert os.path.isdir(os.path.join(home, "t-0")), "nothing changed"
            assert _values(mgr.get_log("t", 0)) == [b"t-0-1", b"t-0-2"]
        finally:
            claim.release()
        assert mgr.delete_log("t", 0)["deleted_folder"]


def test_delete_topic_job_and_bad_requests(tmp_path):
    cfg = _config(tmp_path)
    with LogManager.open(cfg, clock=ManualClock(T0)) as mgr:
        _fill(mgr, "t", [0, 1, 2])
        _fill(mgr, "u", [0])
    result = lifecycle.delete_topic(cfg, "t", [1], now_ms=T0)
    assert result["partitions"] == [1] and result["offline_dirs"] == {}
    result = lifecycle.delete_topic(cfg, "t", now_ms=T0)
    assert result["partitions"] == [0, 2]
    with pytest.raises(PartitionNotFoundError, match="topic 't' has no partitions"):
        lifecycle.delete_topic(cfg, "t", now_ms=T0)
    with pytest.raises(PartitionNotFoundError):
        lifecycle.delete_topic(cfg, "u", [7], now_ms=T0)
    with pytest.raises(ValueError, match="illegal"):
        lifecycle.delete_topic(cfg, "../u", now_ms=T0)
    with LogManager.open(cfg, clock=ManualClock(T0)) as mgr:
        assert sorted(mgr.logs) == [("u", 0)]
