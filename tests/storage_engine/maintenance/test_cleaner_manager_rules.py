"""Kafka's ``LogCleanerManager`` rules at their exact boundaries, and the engine's cleaner state files
(MUTATION.md: what the mutants of cleaner_manager.py showed the other tests let through). Rules from the
reference, section 7.2:

* the checkpoint is reset to the log start offset if ``checkpoint < logStartOffset`` or ``> LEO``;
* ``min.compaction.lag.ms > 0`` bounds cleaning at the first dirty non-active segment whose largest timestamp is
  ``> now - min.compaction.lag.ms``;
* ``maxCompactionDelay``: over the *dirty* non-active segments, first-batch timestamps ``filter(_ > 0)``;
* a log is eligible if ``(needCompactionNow && cleanableBytes > 0) || cleanableRatio > min.cleanable.dirty.ratio``.
"""
from __future__ import annotations

import json
import os

import pytest

from storage_engine import layout
from storage_engine.maintenance import cleaner_manager
from storage_engine.maintenance.cleaner_manager import (cleanable_offsets, log_to_clean, read_cleaner_checkpoints,
                                                        read_uncleanable, update_cleaner_checkpoint)
from storage_engine.config import LogConfig
from storage_engine.errors import CorruptCheckpointError
from storage_engine.log.log import Log
from storage_engine.record.records import SimpleRecord

from .test_cleaner_manager import HOUR, T0, corrupt_magic, storage_config, write
from tests.storage_engine.helpers import manual_clock

pytestmark = pytest.mark.unit


def compact_cfg(**overrides) -> LogConfig:
    o = {"cleanup.policy": "compact", "segment.bytes": 100}
    o.update({k.replace("_", "."): v for k, v in overrides.items()})
    return LogConfig().with_overrides(o)


@pytest.fixture
def make_log(logs):
    def make(cfg=None, *, topic="foo", partition=0) -> Log:
        return logs(cfg or compact_cfg(), topic=topic, partition=partition, now_ms=T0)
    return make


def segments_of_one_record(log: Log, n: int, ts=lambda i: T0) -> None:
    """One same-sized record per segment (segment.bytes = 100) until the log has ``n`` segments."""
    while len(log.segments) < n:
        t = ts(log.log_end_offset)
        manual_clock(log).set(max(t, 0))
        log.append_records([SimpleRecord(b"1", b"0" * 25, t)])


# -- cleaner-offset-checkpoint -----------------------------------------------------------------------------------

def test_checkpoint_updates_keep_only_partitions_whose_folder_exists(log_dir):
    d = str(log_dir)
    os.mkdir(os.path.join(d, "t-0"))
    with open(os.path.join(d, "gone-1"), "wb"):     # a file with a partition's name is not a partition folder
        pass
    update_cleaner_checkpoint(d, ("gone", 1), 5)
    update_cleaner_checkpoint(d, ("t", 0), 7)
    assert read_cleaner_checkpoints(d) == {("t", 0): 7}
    update_cleaner_checkpoint(d, ("t", 3), None)     # removing an entry that is not there changes nothing
    assert read_cleaner_checkpoints(d) == {("t", 0): 7}
    assert layout.CLEANER_CHECKPOINT_LOCK_FILE in os.listdir(d)   # serialised by the log dir's own lock file


# -- the uncleanable-partitions file -------------------------------------------------------------------------------

def test_an_empty_uncleanable_file_marks_nothing_and_one_without_an_object_blocks_the_dir(log_dir):
    path = log_dir / layout.UNCLEANABLE_FILE
    path.write_bytes(b"")
    assert read_uncleanable(str(log_dir)) == {}
    for content in (b"[1]", b"null", b"{"):
        path.write_bytes(content)
        assert read_uncleanable(str(log_dir)) == {"<unreadable>": {
            "reason": f"{path} is not valid JSON (an object of partitions); fix or delete it"}}


def test_marking_and_clearing_rewrite_the_file_sorted_and_indented(log_dir):
    d = str(log_dir)
    (log_dir / layout.UNCLEANABLE_FILE).write_bytes(b"not json")
    cleaner_manager.mark_uncleanable(d, "t-1", "boom", T0)       # replaces the unreadable content
    assert layout.CLEANER_CHECKPOINT_LOCK_FILE in os.listdir(d)   # serialised by the log dir's own lock file
    cleaner_manager.mark_uncleanable(d, "a-0", "bang", T0 + 1)
    expected = {"a-0": {"reason": "bang", "since_ms": T0 + 1}, "t-1": {"reason": "boom", "since_ms": T0}}
    assert read_uncleanable(d) == expected
    assert (log_dir / layout.UNCLEANABLE_FILE).read_bytes() == json.dumps(expected, indent=1,
                                                                          sort_keys=True).encode()
    assert json.dumps(expected, indent=1, sort_keys=True).startswith('{\n "a-0": {\n  "reason": "bang"')
    assert cleaner_manager.clear_uncleanable(d, "x-9") == []
    assert cleaner_manager.clear_uncleanable(d, "t-1") == ["t-1"]
    assert (log_dir / layout.UNCLEANABLE_FILE).read_bytes() == (
        b'{\n "a-0": {\n  "reason": "bang",\n  "since_ms": ' + str(T0 + 1).encode() + b'\n }\n}')
    assert cleaner_manager.clear_uncleanable(d) == ["a-0"]
    assert read_uncleanable(d) == {} and (log_dir / layout.UNCLEANABLE_FILE).read_bytes() == b"{}"


def test_clearing_rewrites_a_hand_edited_file_sorted(tmp_path):
    d = str(tmp_path)
    entry = {"since_ms": 1, "reason": "r"}
    (tmp_path / layout.UNCLEANABLE_FILE).write_text(json.dumps({"z-1": entry, "m-2": entry, "a-0": entry}))
    assert cleaner_manager.clear_uncleanable(d, "m-2") == ["m-2"]
    assert layout.CLEANER_CHECKPOINT_LOCK_FILE in os.listdir(d)   # serialised by the log dir's own lock file
    assert (tmp_path / layout.UNCLEANABLE_FILE).read_text() == json.dumps(
        {"a-0": {"reason": "r", "since_ms": 1}, "z-1": {"reason": "r", "since_ms": 1}}, indent=1)


# -- cleanable offsets ---------------------------------------------------------------------------------------------

def test_a_checkpoint_equal_to_the_log_start_offset_is_valid(make_log):
    log = make_log()
    segments_of_one_record(log, 4)
    log.delete_records(2)
    assert cleanable_offsets(log, 2, T0)[0::3] == (2, False)
    assert cleanable_offsets(log, 1, T0)[0::3] == (2, True)


def test_min_compaction_lag_zero_sets_no_time_bound_and_one_ms_does(make_log):
    # A record 5 ms in the future: with min.compaction.lag.ms = 0 it does not hold cleaning back (Kafka only
    # bounds when the lag is > 0); with a lag of 1 ms its segment is "too recent".
    for lag, expected in ((0, "active"), (1, "first")):
        log = make_log(compact_cfg(min_compaction_lag_ms=lag, max_compaction_lag_ms=max(lag, 1)), partition=lag)
        segments_of_one_record(log, 3, ts=lambda i: T0 + 5)
        first = log.segments[0].base_offset if expected == "first" else log.active_segment.base_offset
        assert cleanable_offsets(log, None, T0)[1] == first


def test_max_compaction_delay_counts_only_dirty_segments_and_positive_timestamps(make_log):
    # Segment 0 (clean, before the checkpoint) is old; the dirty ones are recent: nothing is overdue.
    log = make_log(compact_cfg(max_compaction_lag_ms=HOUR), partition=0)
    segments_of_one_record(log, 4, ts=lambda i: T0 - 10 * HOUR if i == 0 else T0)
    checkpoint = log.segments[1].base_offset
    assert cleanable_offsets(log, checkpoint, T0) == (checkpoint, log.active_segment.base_offset, False, False, 0)
    assert cleanable_offsets(log, 0, T0)[2:] == (True, False, 9 * HOUR)
    # Record timestamp 0 ("no time"): Kafka's firstBatchTimestamps.filter(_ > 0) leaves it out; 1 counts.
    log = make_log(compact_cfg(max_compaction_lag_ms=HOUR), partition=1)
    segments_of_one_record(log, 3, ts=lambda i: 0)
    assert cleanable_offsets(log, None, T0)[2:] == (False, False, 0)
    log = make_log(compact_cfg(max_compaction_lag_ms=HOUR), partition=2)
    segments_of_one_record(log, 3, ts=lambda i: 1)
    assert cleanable_offsets(log, None, T0)[2:] == (True, False, T0 - HOUR - 1)


# -- LogToClean ----------------------------------------------------------------------------------------------------

def test_log_to_clean_summary(make_log):
    log = make_log(compact_cfg(min_cleanable_dirty_ratio=0.25))
    segments_of_one_record(log, 4)
    size = log.segments[0].size
    ltc = log_to_clean(log, log.segments[2].base_offset, T0)
    assert ltc.as_dict() == {
        "topic": "foo", "partition": 0, "first_dirty_offset": 2, "first_uncleanable_offset": 3,
        "clean_bytes": 2 * size, "cleanable_bytes": size, "dirty_ratio": 0.333333,
        "min_cleanable_dirty_ratio": 0.25, "need_compaction_now": False, "max_compaction_delay_ms": 0,
        "checkpoint_reset": False}


def test_log_to_clean_stops_at_the_upper_time_bound(make_log):
    log = make_log()
    segments_of_one_record(log, 5, ts=lambda i: T0 + i)
    ltc = log_to_clean(log, None, T0 + 10, upper_time_bound_ms=T0 + 2)
    assert (ltc.first_dirty_offset, ltc.first_uncleanable_offset) == (0, 2)
    assert ltc.cleanable_bytes == 2 * log.segments[0].size


# -- selection -------------------------------------------------------------------------------------------------------

def test_select_goes_on_past_a_log_that_is_not_compacted(make_log):
    plain = make_log(LogConfig().with_overrides({"segment.bytes": 100}), topic="plain")
    segments_of_one_record(plain, 3)
    compacted = make_log()
    segments_of_one_record(compacted, 3)
    sel = cleaner_manager.select([plain, compacted], T0)
    assert [e.log for e in sel["eligible"]] == [compacted]


def test_select_honours_the_upper_time_bound(make_log):
    log = make_log()
    segments_of_one_record(log, 5, ts=lambda i: T0 + i)
    [ltc] = cleaner_manager.select([log], T0 + 10, upper_time_bound_ms=T0 + 2)["eligible"]
    assert ltc.first_uncleanable_offset == 2


def test_an_overdue_log_with_nothing_cleanable_below_the_bound_is_not_selected(make_log):
    # max.compaction.lag.ms says "clean now", but the upper time bound leaves no cleanable bytes: Kafka needs
    # needCompactionNow && cleanableBytes > 0.
    log = make_log(compact_cfg(max_compaction_lag_ms=HOUR, min_cleanable_dirty_ratio=0.99))
    segments_of_one_record(log, 4, ts=lambda i: T0 - 5 * HOUR)
    now = T0 + HOUR
    assert log_to_clean(log, None, now).need_compaction_now
    sel = cleaner_manager.select([log], now, upper_time_bound_ms=T0 - 5 * HOUR)
    assert sel["eligible"] == [] and sel["not_dirty"][0].cleanable_bytes == 0
    assert [e.log for e in cleaner_manager.select([log], now)["eligible"]] == [log]


def test_an_error_while_selecting_is_reported_and_recorded_with_its_time(tmp_path):
    cfg = storage_config(tmp_path, {"t": {"cleanup.policy": "compact", "segment.bytes": 1024,
                                          "max.compaction.lag.ms": HOUR}})
    write(cfg, "t", 0, [(f"k{i % 3}", f"v{i}", T0) for i in range(30)])
    corrupt_magic(cfg, "t", 0, batch_no=0)
    from storage_engine.clock import ManualClock
    from storage_engine.log.manager import LogManager
    now = T0 + 2 * HOUR
    with LogManager.open(cfg, clock=ManualClock(now)) as mgr:
        log = mgr.get_log("t", 0)
        assert log is not None
        [skipped] = cleaner_manager.select([log], now)["skipped"]
    assert set(skipped) == {"topic", "partition", "reason"}
    assert (skipped["topic"], skipped["partition"]) == ("t", 0)
    marked = read_uncleanable(cfg.log_dirs[0])["t-0"]
    assert skipped["reason"] == "uncleanable: " + marked["reason"]
    assert marked["since_ms"] == now


@pytest.mark.parametrize("clean, cleanable, overdue, ratio, eligible", [
    (0, 1, True, 0.5, True),        # one cleanable byte of an overdue log is enough (totalBytes > 0)
    (1000, 1, True, 0.5, True),     # ... whatever the ratio
    (1000, 0, True, 0.5, False),    # overdue with nothing cleanable: no (cleanableBytes > 0)
    (1000, 1, False, 0.5, False),   # not overdue, ratio 1/1001 <= 0.5
    (1, 1, False, 0.5, False),      # ratio exactly the minimum: not strictly above
    (1, 2, False, 0.5, True),
])
def test_eligibility_is_an_overdue_log_with_cleanable_bytes_or_a_ratio_strictly_above_the_minimum(
        make_log, clean, cleanable, overdue, ratio, eligible):
    """``LogCleanerManager.grabFilthiestCompactedLog``: ``totalBytes > 0`` and
    ``(needCompactionNow && cleanableBytes > 0) || cleanableRatio > minCleanableRatio``, byte for byte."""
    log = make_log(compact_cfg(min_cleanable_dirty_ratio=ratio))
    ltc = cleaner_manager.LogToClean(log, 0, 0, clean_bytes=clean, cleanable_bytes=cleanable,
                                     need_compaction_now=overdue)
    assert cleaner_manager.is_eligible(ltc) is eligible


def test_clearing_one_partition_of_an_unreadable_record_is_refused_and_writes_nothing(tmp_path):
    d = str(tmp_path)
    (tmp_path / layout.UNCLEANABLE_FILE).write_bytes(b"not json")
    with pytest.raises(CorruptCheckpointError, match="cannot be cleared alone") as raised:
        cleaner_manager.clear_uncleanable(d, "t-1")
    assert layout.UNCLEANABLE_FILE in str(raised.value)
    assert (tmp_path / layout.UNCLEANABLE_FILE).read_bytes() == b"not json"   # the evidence stays as it was
    assert "<unreadable>" in read_uncleanable(d)                              # every partition still blocked
    assert cleaner_manager.clear_uncleanable(d) == ["<unreadable>"]
    assert read_uncleanable(d) == {} and (tmp_path / layout.UNCLEANABLE_FILE).read_bytes() == b"{}"
