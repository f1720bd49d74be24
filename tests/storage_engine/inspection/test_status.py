"""The operators' status (:mod:`storage_engine.inspection.status`) against the engine's own view of the same files:
space as ``df`` counts it, damage where the files show it (a ``.log`` that became a directory, a partition folder
that became a file, recorded losses, uncleanable marks), foreign entries, index sizes as the entries written,
and sorting by every column."""
from __future__ import annotations

import json
import math
import time
import os
import shutil
import subprocess

import pytest

from storage_engine import layout
from storage_engine.clock import ManualClock
from storage_engine.config_file import load_config
from storage_engine.inspection import listing, plans, status
from storage_engine.inspection.detail import partition_detail
from storage_engine.jobs.lifecycle import filesystem_usage, log_dir_usage
from storage_engine.log import losses
from storage_engine.log.manager import LogManager
from storage_engine.maintenance.cleaner_manager import (log_to_clean, mark_uncleanable, read_cleaner_checkpoints,
                                                       update_cleaner_checkpoint)
from storage_engine.record.records import SimpleRecord
from storage_engine.segment.offset_index import OffsetIndex
from storage_engine.segment.time_index import TimeIndex
from tests.storage_engine.helpers import get_log

pytestmark = pytest.mark.unit

T0 = 1_700_000_000_000
TOPICS = {"keyed": {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": 0.01},
          "events": {"retention.ms": 3_600_000}}


@pytest.fixture
def store(tmp_path):
    """Two log dirs; keyed-0/1/2 with 10, 40 and 200 keys over 400 records, their cleaner checkpoints at 0, 100
    and 300 (three dirty ratios), events-0/1 of two sizes."""
    dirs = [str(tmp_path / "dir-a"), str(tmp_path / "dir-b")]
    path = tmp_path / "storage.yaml"
    path.write_text(json.dumps({"broker": {"log.dirs": dirs, "log.segment.bytes": 2048,
                                           "log.index.interval.bytes": 256}, "topics": TOPICS}))
    config = load_config(str(path))
    with LogManager.open(config, clock=ManualClock(T0)) as mgr:
        for p, keys in enumerate((10, 40, 200)):
            log = mgr.get_or_create_log("keyed", p)
            for i in range(400):
                log.append_records([SimpleRecord(b"k%d" % (i % keys), b"v" * 40, T0 + i)])
        for p, n in enumerate((50, 300)):
            log = mgr.get_or_create_log("events", p)
            for i in range(n):
                log.append_records([SimpleRecord(None, b"e" * 60, T0 + i)])
        for p, offset in ((1, 100), (2, 300)):
            log = get_log(mgr, "keyed", p)
            checkpoint = max(s.base_offset for s in log.segments if s.base_offset <= offset)
            update_cleaner_checkpoint(log.log_dir, ("keyed", p), checkpoint)
    return config


def cleaner_checkpoint(config, tp):
    return read_cleaner_checkpoints(home(config, *tp)).get(tp)


def home(config, topic: str, partition: int) -> str:
    name = layout.partition_dir_name(topic, partition)
    (d,) = [d for d in config.log_dirs if os.path.isdir(os.path.join(d, name))]
    return d


def df(path: str) -> tuple[int, int, int]:
    """(used bytes, available bytes, Use% as an integer) as coreutils' df prints them."""
    out = subprocess.run(["df", "-P", "-B1", path], capture_output=True, text=True, check=True).stdout.splitlines()
    fields = out[1].split()
    return int(fields[2]), int(fields[3]), int(fields[4].rstrip("%"))


def test_space_is_counted_as_df_counts_it(store):
    """used = size - free, and use% = used / (used + available), which df rounds up: not used / size (which
    reads far lower on a filesystem that reserves blocks for root)."""
    d = store.log_dirs[0]
    # Other processes (the suite's other worker) write to the same filesystem meanwhile, so the figures are compared
    # from a moment when nothing changed: df before and after, and the engine's own reading between them, all
    # equal. Such moments come between another process's writes; a wrong formula never gives one.
    for _attempt in range(200):
        before = df(d)
        mine = filesystem_usage(d)
        (dir_status,) = [x for x in status.log_dir_status(store) if x["path"] == d]
        usage = {u["log_dir"]: u for u in log_dir_usage(store)}[d]
        after = df(d)
        if before == after and (mine["used_bytes"], mine["available_bytes"]) == before[:2] \
                and (dir_status["used_bytes"], dir_status["free_bytes"]) == before[:2] \
                and usage["fs_available_bytes"] == before[1]:
            break
        time.sleep(0.02 * (_attempt % 5))
    assert before == after, "the filesystem kept changing"
    used, available, percent = before
    assert (mine["used_bytes"], mine["available_bytes"]) == (used, available)
    assert math.ceil(mine["used_percent"]) == percent
    assert mine["used_percent"] == pytest.approx(100 * used / (used + available), abs=0.001)
    assert (dir_status["used_bytes"], dir_status["free_bytes"]) == (used, available)
    assert dir_status["used_percent"] is not None
    assert math.ceil(dir_status["used_percent"]) == percent
    assert math.ceil(usage["fs_used_percent"]) == percent and usage["fs_available_bytes"] == available
    statvfs = os.statvfs(d)
    assert dir_status["capacity_bytes"] == statvfs.f_blocks * statvfs.f_frsize


def test_a_log_replaced_by_a_directory_is_marked_and_counted_nowhere(store):
    d = home(store, "events", 1)
    pdir = os.path.join(d, "events-1")
    logs = sorted(n for n in os.listdir(pdir) if n.endswith(".log"))
    victim = os.path.join(pdir, logs[1])
    victim_size = os.path.getsize(victim)
    before = listing.list_partition_status(store, topics=["events"])["partitions"]
    os.remove(victim)
    os.mkdir(victim)                    # a directory where a sealed .log was

    (row,) = [r for r in listing.list_partition_status(store, topics=["events"])["partitions"] if r["partition"] == 1]
    (was,) = [r for r in before if r["partition"] == 1]
    assert row["segments"] == was["segments"] - 1
    assert row["size_bytes"] == was["size_bytes"] - victim_size          # not 4096 bytes of a directory
    assert [x["kind"] for x in row["damage"]] == ["unreadable"]
    assert victim in row["damage"][0]["message"] and "directory" in row["damage"][0]["message"]
    assert row["error"] is not None
    assert "PartitionUnreadableError" in row["error"]                    # its figures are not read: not maintained
    detail = partition_detail(store, "events", 1)
    (marked,) = [s for s in detail["segment_list"] if s["problem"]]
    assert marked["base_offset"] == layout.offset_from_filename(logs[1]) and marked["size_bytes"] is None
    assert marked["problem"] is not None
    assert "is a directory" in marked["problem"]
    assert len(detail["segment_list"]) == was["segments"]
    overview = status.overview(store)
    assert [(r["topic"], r["partition"]) for r in overview["damaged"]] == [("events", 1)]
    (dir_status,) = [x for x in overview["log_dirs"] if x["path"] == d]
    assert dir_status["error"] is not None
    assert dir_status["damaged_partitions"] == 1 and victim in dir_status["error"]
    # The plan leaves it alone, as maintenance does.
    plan = plans.plan(store, T0)
    assert [(u["topic"], u["partition"]) for u in plan["retention"]["unreadable"]] == [("events", 1)]

    os.rmdir(victim)                    # fixed (the segment gone): no mark left
    assert not status.overview(store)["damaged"]


def test_a_partition_folder_replaced_by_a_file_is_listed_with_the_reason(store):
    d = home(store, "events", 0)
    pdir = os.path.join(d, "events-0")
    shutil.rmtree(pdir)
    with open(pdir, "w") as f:
        f.write("not a folder")

    rows = {(r["topic"], r["partition"]): r for r in listing.list_partition_status(store, limit=100)["partitions"]}
    assert ("events", 0) in rows and len(rows) == 5
    row = rows[("events", 0)]
    assert row["error"] is not None
    assert [x["kind"] for x in row["damage"]] == ["missing"] and "is a regular file, not a folder" in row["error"]
    assert row["log_dir"] == d
    detail = partition_detail(store, "events", 0)
    assert detail["error"] == row["error"] and detail["segment_list"] == []
    overview = status.overview(store)
    (dir_status,) = [x for x in overview["log_dirs"] if x["path"] == d]
    assert "events-0" in dir_status["foreign_files"] and dir_status["damaged_partitions"] == 1
    assert dir_status["partitions"] == len([r for r in rows.values() if r["log_dir"] == d])
    # describe (the engine's own listing) names the same file
    with LogManager.open(store, clock=ManualClock(T0)) as mgr:
        described = {x["path"]: x for x in mgr.describe()["log_dirs"]}
    assert "events-0" in described[d]["foreign_files"]


def test_recorded_losses_uncleanable_marks_and_foreign_entries(store):
    d = home(store, "keyed", 0)
    losses.record(d, "keyed-0", [{"start": 0, "end": 7, "reason": "first segment gone", "found_ms": T0}])
    mark_uncleanable(d, "keyed-0", "CorruptRecordError: CRC mismatch", T0)
    os.mkdir(os.path.join(d, "lost+found"))
    with open(os.path.join(d, "notes.txt"), "w") as f:
        f.write("x")

    (row,) = [r for r in listing.list_partition_status(store, topics=["keyed"])["partitions"] if r["partition"] == 0]
    assert [x["kind"] for x in row["damage"]] == ["lost", "uncleanable"]
    assert "offsets [0, 7) were lost (first segment gone)" in row["damage"][0]["message"]
    assert row["uncleanable"] == "CorruptRecordError: CRC mismatch" and "error" not in row
    (dir_status,) = [x for x in status.log_dir_status(store) if x["path"] == d]
    assert dir_status["uncleanable"] == 1 and dir_status["damaged_partitions"] == 1
    assert dir_status["foreign_files"] == ["notes.txt"]
    assert [f.split(" ")[0] for f in dir_status["foreign"]] == ["lost+found"]


def test_index_sizes_are_the_entries_written_not_the_preallocated_files(store):
    with LogManager.open(store, clock=ManualClock(T0)) as mgr:
        log = mgr.get_log("events", 1)
        assert log is not None
        log.append_records([SimpleRecord(None, b"e" * 60, T0 + 1000 + i) for i in range(5)])   # active, open
        detail = partition_detail(store, "events", 1)
        segments = {s["base_offset"]: s for s in detail["segment_list"]}
        pdir = log.dir
        for base, s in segments.items():
            with OffsetIndex(layout.segment_file(pdir, base, layout.INDEX_SUFFIX), base, writable=False) as idx:
                assert s["index_bytes"] == idx.entries * 8
            with TimeIndex(layout.segment_file(pdir, base, layout.TIME_INDEX_SUFFIX), base, writable=False) as ti:
                assert s["time_index_bytes"] == ti.entries * 12
        last = detail["segment_list"][-1]
        assert last["active"] and last["index_file_bytes"] == 10 * 1024 * 1024      # preallocated while open
        assert last["index_bytes"] is not None and last["time_index_bytes"] is not None
        assert last["index_bytes"] < 1024 and last["time_index_bytes"] < 1024
        assert any(s["index_bytes"] for s in detail["segment_list"][:-1])          # sealed ones hold entries
        assert all(s["index_bytes"] == s["index_file_bytes"] for s in detail["segment_list"][:-1])


def test_the_table_sorts_by_every_column(store):
    truth: dict[tuple[str, int], dict] = {}
    with LogManager.open(store, clock=ManualClock(T0 + 10_000)) as mgr:
        for tp, log in mgr.logs.items():
            truth[tp] = {"size": log.size_in_bytes(), "log_end_offset": log.log_end_offset,
                         "dirty_ratio": (round(log_to_clean(log, cleaner_checkpoint(store, tp),
                                                                    T0 + 10_000).cleanable_ratio, 6)
                                         if tp[0] == "keyed" else None)}
    d = home(store, "events", 0)
    mark_uncleanable(home(store, "keyed", 2), "keyed-2", "damage", T0)
    losses.record(d, "events-0", [{"start": 0, "end": 1, "reason": "x", "found_ms": T0}])
    for key in listing.SORT_KEYS:
        for descending in (False, True):
            page = listing.list_partition_status(store, sort=key, descending=descending, now_ms=T0 + 10_000)
            rows = page["partitions"]
            assert len(rows) == 5 and page["sort"] == key
            names = [(r["topic"], r["partition"]) for r in rows]
            if key == "name":
                assert names == sorted(truth, reverse=descending)
                continue
            values = [listing._sort_value(r, key) for r in rows]
            present = [v for v in values if v is not None]
            assert present == sorted(present, reverse=descending), (key, values)
            missing = [i for i, v in enumerate(values) if v is None]
            assert missing == (list(range(len(missing))) if not descending
                               else list(range(len(values) - len(missing), len(values)))), (key, values)
    by_ratio = listing.list_partition_status(store, sort="dirty_ratio", descending=True, now_ms=T0 + 10_000)
    expected = sorted((tp for tp in truth if tp[0] == "keyed"), key=lambda tp: -truth[tp]["dirty_ratio"])
    assert [(r["topic"], r["partition"]) for r in by_ratio["partitions"][:3]] == expected
    assert [r["dirty_ratio"] for r in by_ratio["partitions"][:3]] == [truth[tp]["dirty_ratio"] for tp in expected]
    by_size = listing.list_partition_status(store, sort="size", descending=True, limit=2)
    assert [r["size_bytes"] for r in by_size["partitions"]] == sorted((t["size"] for t in truth.values()),
                                                                      reverse=True)[:2]
    by_damage = listing.list_partition_status(store, sort="damage", descending=True, limit=2)
    assert {(r["topic"], r["partition"]) for r in by_damage["partitions"]} == {("keyed", 2), ("events", 0)}
    # A caller's own field (what Airflow knows) sorts too, rows without it first.
    extra = {("events", 1): {"last_compaction_ms": 5}, ("keyed", 0): {"last_compaction_ms": 9}}
    page = listing.list_partition_status(store, sort="last_compaction_ms", descending=True, extra=extra,
                                        extra_sorts=["last_compaction_ms"])
    assert [(r["topic"], r["partition"]) for r in page["partitions"][:2]] == [("keyed", 0), ("events", 1)]
    with pytest.raises(ValueError, match="sort must be one of"):
        listing.list_partition_status(store, sort="bogus")


def test_the_overview_ranks_the_dirtiest_compacted_partitions(store):
    now = T0 + 10_000
    overview = status.overview(store, now_ms=now, top=2)
    with LogManager.open(store, clock=ManualClock(now)) as mgr:
        ratios = {tp: round(log_to_clean(log, cleaner_checkpoint(store, tp), now).cleanable_ratio, 6)
                  for tp, log in mgr.logs.items() if tp[0] == "keyed"}
    expected = sorted(ratios, key=lambda tp: (-ratios[tp], tp))[:2]
    assert overview["compacted"] == 3
    assert len(set(ratios.values())) == 3
    assert [(r["topic"], r["partition"]) for r in overview["dirtiest"]] == expected
    assert [r["dirty_ratio"] for r in overview["dirtiest"]] == sorted((ratios[tp] for tp in expected), reverse=True)
    assert all(r["min_cleanable_dirty_ratio"] == 0.01 for r in overview["dirtiest"])
    assert overview["partitions"] == 5 and overview["damaged"] == []
    assert sum(d["partitions"] for d in overview["log_dirs"]) == 5
