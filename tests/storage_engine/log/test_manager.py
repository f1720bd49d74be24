"""LogManager: which partitions a manager loads, and what it leaves for the next opener."""
from __future__ import annotations

import os
import shutil

import pytest

from storage_engine.clock import ManualClock
from storage_engine import layout
from storage_engine.config_file import config_from_mapping
from storage_engine.errors import StorageError
from storage_engine.log.manager import LogManager
from storage_engine.segment.clean_shutdown import clean_shutdown_path

from ..helpers import partition_dir, recs, segment_path, get_log

pytestmark = pytest.mark.unit
T0 = 1_700_000_000_000


def _config(log_dir):
    return config_from_mapping({"broker": {"log.dirs": str(log_dir)}})


def _fill(log_dir, partitions):
    cfg = _config(log_dir)
    with LogManager.open(cfg, clock=ManualClock(T0)) as mgr:
        for t, p in partitions:
            mgr.get_or_create_log(t, p).append_records(recs(f"{t}-{p}", timestamp=T0))
    return cfg


def _break(log_dir, topic, partition):
    """Make the partition unloadable: its first segment's .log becomes a folder."""
    path = segment_path(partition_dir(log_dir, topic, partition), 0)
    os.remove(path)
    os.mkdir(path)


def test_a_subset_opens_only_its_partitions_and_ignores_damage_elsewhere(log_dir):
    cfg = _fill(log_dir, [("a", 0), ("a", 1), ("b", 0)])
    _break(log_dir, "b", 0)
    with pytest.raises(StorageError):
        LogManager.open(cfg, clock=ManualClock(T0)).close()
    with LogManager.open(cfg, clock=ManualClock(T0), partitions=[("a", 1), ("nope", 3)]) as mgr:
        assert sorted(mgr.logs) == [("a", 1)]
        assert [r.value for r in mgr.logs[("a", 1)].read_records()] == [b"a-1"]
        assert mgr.get_log("nope", 3) is None


def test_a_subset_manager_writes_the_marker_only_for_a_dir_it_had_to_itself(log_dir):
    """It flushed only its own logs: it vouches for the others only if it found the dir clean and no other
    manager joined while it had the dir open."""
    cfg = _fill(log_dir, [("a", 0), ("b", 0)])
    marker = clean_shutdown_path(str(log_dir))
    assert os.path.exists(marker)
    with LogManager.open(cfg, clock=ManualClock(T0), partitions=[("a", 0)]) as mgr:
        assert not os.path.exists(marker), "the first opener consumes the marker"
        mgr.logs[("a", 0)].append_records(recs("more", timestamp=T0))
    assert os.path.exists(marker), "alone in a clean dir: it may vouch for the logs it never opened"

    with LogManager.open(cfg, clock=ManualClock(T0), partitions=[("a", 0)]):
        with LogManager.open(cfg, clock=ManualClock(T0)) as other:  # another manager joins, writes, leaves
            get_log(other, "b", 0).append_records(recs("unflushed", timestamp=T0))
    assert not os.path.exists(marker), "another manager joined: it cannot vouch for b-0"

    with LogManager.open(cfg, clock=ManualClock(T0), partitions=[("a", 0)]):
        pass
    assert not os.path.exists(marker), "the dir was not clean when it opened it"
    with LogManager.open(cfg, clock=ManualClock(T0)) as mgr:
        assert [r.value for r in get_log(mgr, "a", 0).read_records()] == [b"a-0", b"more"]
        assert [r.value for r in get_log(mgr, "b", 0).read_records()] == [b"b-0", b"unflushed"]
    assert os.path.exists(marker), "a manager of every partition writes it again"


def test_a_partition_not_loaded_since_an_unclean_shutdown_is_recovered_by_a_joining_process(log_dir):
    """Crash epochs: the first opener after an unclean shutdown loads only a-0; a manager joining the dir (it
    does not get the dir lock exclusively) opens b-0, which nobody loaded since the crash: it loads it fully, so
    the swap a Kafka-style crash left (segment 0 as .swap, the original .deleted) is completed, which a view,
    ignoring both names, would not do."""
    cfg = _fill(log_dir, [("a", 0), ("b", 0)])
    with LogManager.open(cfg, clock=ManualClock(T0)) as mgr:
        b = mgr.get_log("b", 0)
        assert b is not None
        b.roll()
        b.append_records(recs("later", timestamp=T0))
    os.remove(clean_shutdown_path(str(log_dir)))  # the next open is the first after an unclean shutdown
    d = partition_dir(log_dir, "b", 0)
    shutil.copyfile(segment_path(d, 0), segment_path(d, 0, layout.LOG_SUFFIX, layout.SWAP_SUFFIX))
    os.replace(segment_path(d, 0), segment_path(d, 0, layout.LOG_SUFFIX, layout.DELETED_SUFFIX))
    first = LogManager.open(cfg, clock=ManualClock(T0), partitions=[("a", 0)])
    try:
        epoch = first.dirs[str(log_dir)].epoch
        with LogManager.open(cfg, clock=ManualClock(T0), partitions=[("b", 0)]) as joiner:
            assert not joiner.dirs[str(log_dir)].exclusive_at_open
            log = joiner.get_log("b", 0)
            assert log is not None
            assert log.lock.read_state().loaded_epoch == epoch
            assert [r.value for r in log.read_records()] == [b"b-0", b"later"]
            assert not os.path.exists(segment_path(d, 0, layout.LOG_SUFFIX, layout.SWAP_SUFFIX))
            messages = joiner.dirs[str(log_dir)].load_messages
            assert any("completed swap" in m for m in messages), messages
        # a third process finds b-0 loaded in this epoch: a view, no second load
        with LogManager.open(cfg, clock=ManualClock(T0), partitions=[("b", 0)]) as third:
            assert third.dirs[str(log_dir)].load_messages == []
            assert [r.value for r in get_log(third, "b", 0).read_records()] == [b"b-0", b"later"]
    finally:
        first.close()


def test_a_clean_first_open_keeps_the_epoch_and_an_unclean_one_starts_a_new_one(log_dir):
    cfg = _fill(log_dir, [("a", 0)])
    with LogManager.open(cfg, clock=ManualClock(T0)) as mgr:
        clean_epoch = mgr.dirs[str(log_dir)].epoch
    with LogManager.open(cfg, clock=ManualClock(T0)) as mgr:
        assert mgr.dirs[str(log_dir)].epoch == clean_epoch
    os.remove(clean_shutdown_path(str(log_dir)))
    with LogManager.open(cfg, clock=ManualClock(T0)) as mgr:
        assert mgr.dirs[str(log_dir)].epoch != clean_epoch
        assert get_log(mgr, "a", 0).lock.read_state().loaded_epoch == mgr.dirs[str(log_dir)].epoch
