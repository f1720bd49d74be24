"""No gap is ever laundered: a sealed segment missing from the middle of a topic, compacted included, is found by
the load from the partition's segment manifest, recorded, reported by ``verify``, refused by reads that cross
it, never passed over by the cleaner or retention, until ``accept-loss``; and normal cleaning, retention, a move,
a dir Kafka wrote and a kill -9 at each step of the manifest's protocol raise no false alarm."""
from __future__ import annotations

import json
import os
import shutil
import signal

import pytest

from storage_engine import layout
from storage_engine.cli.main import main
from storage_engine.clock import ManualClock
from storage_engine.config_file import config_from_mapping
from storage_engine.errors import DataLossError
from storage_engine.inspection.verify import verify_log_dirs
from storage_engine.jobs import compaction, housekeeping, lifecycle
from storage_engine.log import losses, manifest
from storage_engine.log.manager import LogManager
from storage_engine.maintenance.cleaner_manager import read_cleaner_checkpoints
from storage_engine.record.records import SimpleRecord
from tests.paths import REAL_KAFKA_FIXTURES

from ..helpers import batch, get_log

pytestmark = pytest.mark.unit
T0 = 1_700_000_000_000
HOUR = 3_600_000
COMPACTED = {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": 0.01}


def make_store(tmp_path, topic_cfg: dict, *, dirs: int = 1):
    """Topic t, partition 0, segments of ~5 one-record batches; the YAML path for the CLI."""
    data = {"broker": {"log.dirs": [str(tmp_path / f"d{i}") for i in range(dirs)], "log.segment.bytes": 600,
                       "log.index.interval.bytes": 100},
            "topics": {"t": topic_cfg}}
    path = tmp_path / "storage.yaml"
    path.write_text(json.dumps(data))
    return config_from_mapping(data), str(path)


def append(cfg, n: int, keys: int, *, ts: int = T0) -> None:
    with LogManager.open(cfg, clock=ManualClock(ts)) as mgr:
        log = mgr.get_or_create_log("t", 0)
        start = log.log_end_offset
        for i in range(n):
            log.append_records([SimpleRecord(b"k%d" % ((start + i) % keys), b"v%d" % (start + i) + b"x" * 60,
                                             ts + i)])


def pdir(cfg, i: int = 0) -> str:
    return os.path.join(cfg.log_dirs[i], "t-0")


def bases(cfg, i: int = 0) -> list[int]:
    return sorted(layout.offset_from_filename(n) for n in os.listdir(pdir(cfg, i)) if n.endswith(".log"))


def remove_segment(cfg, base: int) -> None:
    """Delete a sealed segment whole, as a careless operator or a broken disk would, with the store closed."""
    for suffix in layout.SEGMENT_SUFFIXES:
        path = layout.segment_file(pdir(cfg), base, suffix)
        if os.path.exists(path):
            os.remove(path)


def lost_reported(cfg) -> list[str]:
    return [p["message"] for p in verify_log_dirs(cfg)["problems"] if "were lost" in p["message"]]


def cli(capsys, path: str, *args) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = main(["--config", path, *map(str, args)])
    out = capsys.readouterr()
    return rc, out.out, out.err


def offsets_read(cfg, start: int | None = None) -> list[int]:
    with LogManager.open(cfg, clock=ManualClock(T0)) as mgr:
        return [r.offset for r in get_log(mgr, "t", 0).read_records(start)]


def assert_clean(cfg, i: int = 0) -> None:
    """No loss recorded or found, verify finds no damage, and the manifest names exactly the segments present."""
    report = verify_log_dirs(cfg)
    assert not report["damaged"], report["problems"]
    assert not os.path.exists(losses.path_of(cfg.log_dirs[i], "t-0"))
    assert manifest.read(cfg.log_dirs[i], "t-0")[0] == bases(cfg, i)


def test_a_middle_segment_lost_from_a_compacted_topic_is_never_laundered(tmp_path, capsys):
    """The reproducer: compacted topic, a cleaning already done (so gaps between segments are normal), more
    records, then a whole sealed segment deleted from the middle with the store closed."""
    cfg, path = make_store(tmp_path, COMPACTED)
    append(cfg, 60, keys=20)
    assert cli(capsys, path, "compact", "--now-ms", T0 + HOUR)[0] == 0
    checkpoint = read_cleaner_checkpoints(cfg.log_dirs[0])[("t", 0)]
    append(cfg, 60, keys=20)
    assert_clean(cfg)
    segs = bases(cfg)
    dirty = [b for b in segs[:-1] if b >= checkpoint]
    gone, nxt = dirty[2], segs[segs.index(dirty[2]) + 1]
    before = segs[segs.index(gone) - 1]
    remove_segment(cfg, gone)
    lost = f"offsets [{gone}, {nxt}) were lost"

    rc, out, _ = cli(capsys, path, "verify")                       # before any load
    assert rc == 1 and lost in out
    with LogManager.open(cfg, clock=ManualClock(T0)) as mgr:       # the load records it
        log = mgr.get_log("t", 0)
        assert log is not None
        assert [(r["start"], r["end"]) for r in losses.recorded(pdir(cfg))] == [(gone, nxt)]
        with pytest.raises(DataLossError, match=rf"offsets \[{gone}, {nxt}\) were lost"):
            list(log.read_records())
        assert next(log.read_records(nxt)).offset == nxt           # past the gap, the log reads
    rc, out, _ = cli(capsys, path, "verify")
    assert rc == 1 and lost in out

    rc, out, err = cli(capsys, path, "consume", "--topic", "t", "--partition", 0)
    assert rc == 1 and len(err.strip().splitlines()) == 1 and f"[{gone}, {nxt})" in err, err
    assert out and all(json.loads(line)["offset"] < gone for line in out.splitlines())

    inodes = {b: os.stat(layout.segment_file(pdir(cfg), b, layout.LOG_SUFFIX)).st_ino for b in bases(cfg)
              if b >= before}
    for _ in range(2):
        rc, out, _ = cli(capsys, path, "compact", "--now-ms", T0 + 2 * HOUR)
        after = read_cleaner_checkpoints(cfg.log_dirs[0]).get(("t", 0))
        assert after is not None and after <= gone, f"the checkpoint {after} passed the lost range {gone}"
        assert {b: os.stat(layout.segment_file(pdir(cfg), b, layout.LOG_SUFFIX)).st_ino for b in bases(cfg)
                if b >= before} == inodes, "nothing at or past the gap is cleaned"
    assert lost in out
    assert any(lost in m for m in lost_reported(cfg))

    rc, out, _ = cli(capsys, path, "accept-loss", "--topic", "t", "--partition", 0)
    done = json.loads(out)
    assert rc == 0 and [(r["start"], r["end"]) for r in done["accepted"]] == [(gone, nxt)]
    # Accepted in place: the records below the gap (the latest values of their keys) are kept.
    assert [(r["start"], r["end"]) for r in done["accepted_in_place"]] == [(gone, nxt)]
    assert done["segments_deleted"] == [] and done["log_start_offset"] == done["log_start_offset_before"]
    assert cli(capsys, path, "verify")[0] == 0
    rc, out, err = cli(capsys, path, "consume", "--topic", "t", "--partition", 0)
    assert rc == 0 and err == ""
    offsets = [json.loads(line)["offset"] for line in out.splitlines()]
    assert any(o < gone for o in offsets) and any(o >= nxt for o in offsets)
    assert not any(gone <= o < nxt for o in offsets)
    with LogManager.open(cfg, clock=ManualClock(T0)):              # a full load does not find it again
        assert losses.recorded(pdir(cfg)) == []
    assert cli(capsys, path, "compact", "--now-ms", T0 + 3 * HOUR)[0] == 0
    assert read_cleaner_checkpoints(cfg.log_dirs[0])[("t", 0)] > gone      # cleaning goes on once accepted
    assert_clean(cfg)


def test_a_middle_segment_lost_from_a_plain_topic_fails_reads_and_holds_retention(tmp_path, capsys):
    cfg, path = make_store(tmp_path, {"retention.ms": HOUR})
    append(cfg, 60, keys=60)
    segs = bases(cfg)
    gone, nxt = segs[3], segs[4]
    remove_segment(cfg, gone)
    rc, out, _ = cli(capsys, path, "verify")
    assert rc == 1 and f"offsets [{gone}, {nxt}) were lost" in out
    rc, out, err = cli(capsys, path, "consume", "--topic", "t", "--partition", 0, "--from-offset", 0)
    assert rc == 1 and len(err.strip().splitlines()) == 1 and f"[{gone}, {nxt})" in err, err
    assert [json.loads(line)["offset"] for line in out.splitlines()] == list(range(gone))   # no jump
    with pytest.raises(DataLossError, match=rf"offsets \[{gone}, {nxt}\) were lost"):
        offsets_read(cfg)
    # Every record is past retention.ms: retention still deletes nothing reaching the lost range.
    held = housekeeping.retention(cfg, "t", 0, T0 + 2 * HOUR)
    assert held["log_start_offset"] <= gone and f"[{gone}, {nxt})" in held["held_by_loss"]
    assert [b for b in bases(cfg) if b >= segs[2]] == [b for b in segs if b >= segs[2] and b != gone]
    assert any(f"offsets [{gone}, {nxt}) were lost" in m for m in lost_reported(cfg))
    done = lifecycle.accept_loss(cfg, "t", 0, T0)
    assert done["cleared"] and done["log_start_offset"] == nxt
    assert housekeeping.retention(cfg, "t", 0, T0 + 2 * HOUR)["log_start_offset"] == 60
    assert_clean(cfg)


def test_cleaning_that_empties_tails_and_removes_whole_groups_raises_no_alarm(tmp_path, capsys):
    cfg, path = make_store(tmp_path, COMPACTED)
    removed: set[int] = set()
    for round_ in range(3):
        append(cfg, 50, keys=3)
        before = bases(cfg)
        assert cli(capsys, path, "compact", "--now-ms", T0 + (round_ + 1) * HOUR)[0] == 0
        removed |= set(before) - set(bases(cfg))
        assert_clean(cfg)
    assert removed - {0}, "cleaning removed segments from the middle (whole groups, emptied groups)"
    for _ in range(2):
        offsets_read(cfg)                # full loads
        assert_clean(cfg)


def test_retention_and_delete_records_raise_no_alarm(tmp_path):
    cfg, _ = make_store(tmp_path, {"retention.ms": HOUR})
    append(cfg, 30, keys=30)
    append(cfg, 30, keys=30, ts=T0 + 3 * HOUR)
    assert housekeeping.retention(cfg, "t", 0, T0 + 3 * HOUR)["segments_deleted"] > 0
    assert_clean(cfg)
    with LogManager.open(cfg, clock=ManualClock(T0)) as mgr:
        log = mgr.get_log("t", 0)
        assert log is not None
        log.delete_records(bases(cfg)[2] + 1)
        log.truncate_to(log.log_end_offset - 7)        # a follower's truncation removes segments at the end
    assert housekeeping.retention(cfg, "t", 0, T0 + 3 * HOUR)["segments_deleted"] == 2
    offsets_read(cfg, bases(cfg)[0] + 1)
    assert_clean(cfg)


def test_a_moved_partition_takes_its_manifest_along(tmp_path, capsys):
    cfg, path = make_store(tmp_path, COMPACTED, dirs=2)
    append(cfg, 60, keys=20)
    src = 0 if os.path.isdir(pdir(cfg, 0)) else 1
    dst = 1 - src
    assert manifest.read(cfg.log_dirs[src], "t-0")[0] == bases(cfg, src)
    rc, out, _ = cli(capsys, path, "move-partition", "--topic", "t", "--partition", 0, "--to-dir", cfg.log_dirs[dst])
    assert rc == 0, out
    assert not os.path.exists(manifest.path_of(cfg.log_dirs[src], "t-0"))
    assert manifest.read(cfg.log_dirs[dst], "t-0")[0] == bases(cfg, dst)
    offsets_read(cfg)
    assert_clean(cfg, dst)
    # The manifest that came along still judges the partition in its new dir.
    segs = bases(cfg, dst)
    for suffix in layout.SEGMENT_SUFFIXES:
        p = layout.segment_file(pdir(cfg, dst), segs[2], suffix)
        if os.path.exists(p):
            os.remove(p)
    assert any(f"offsets [{segs[2]}, {segs[3]}) were lost" in m for m in lost_reported(cfg))


def test_a_dir_kafka_wrote_has_no_manifest_and_raises_no_alarm(tmp_path):
    """Segments written by a Kafka broker, in a compacted topic, with a gap between them as cleaning leaves: no
    manifest, so no judgement; the first load starts the manifest from the files found."""
    cfg, _ = make_store(tmp_path, COMPACTED)
    d = pdir(cfg)
    os.makedirs(d)
    fixture = REAL_KAFKA_FIXTURES / "cluster-metadata-a.00000000000000000000.log"
    assert fixture.exists(), f"real-Kafka fixture {fixture} is missing"
    shutil.copyfile(fixture, layout.segment_file(d, 0, layout.LOG_SUFFIX))     # offsets 0..3
    with open(layout.segment_file(d, 10, layout.LOG_SUFFIX), "wb") as f:        # [4, 10) cleaned away
        f.write(batch(10, "later", timestamp=T0))
    assert not verify_log_dirs(cfg)["damaged"]
    assert offsets_read(cfg) == [0, 1, 2, 3, 10]
    assert_clean(cfg)
    assert offsets_read(cfg) == [0, 1, 2, 3, 10]


# -- kill -9 at each step of the manifest's protocol ------------------------------------------------------------

def killed_at(step: str, action) -> bool:
    """Run ``action`` in a forked process armed to die (SIGKILL) at crash step ``step``; True if it died there."""
    from storage_engine import crashpoints
    pid = os.fork()
    if pid == 0:   # the child: never returns into the test
        try:
            crashpoints.arm(step)
            action()
        finally:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    return os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL


def _roll(cfg) -> None:
    append(cfg, 40, keys=40)


def _retention(cfg) -> None:
    housekeeping.retention(cfg, "t", 0, T0 + 3 * HOUR)


def _compact(cfg) -> None:
    compaction.compact(cfg, T0 + HOUR)


@pytest.mark.kills
@pytest.mark.parametrize("step,topic_cfg,action", [
    ("roll.manifest", {"retention.ms": -1}, _roll),
    ("retention.manifest", {"retention.ms": HOUR}, _retention),
    ("swap.manifest", dict(COMPACTED), _compact),
    ("load.manifest", {"retention.ms": -1}, offsets_read),
], ids=["roll", "retention", "swap", "load"])
def test_a_kill_at_each_manifest_step_makes_no_false_loss(tmp_path, step, topic_cfg, action):
    cfg, _ = make_store(tmp_path, topic_cfg)
    append(cfg, 30, keys=5)
    append(cfg, 30, keys=5, ts=T0 + 3 * HOUR)
    keys_before = _latest(cfg)
    assert killed_at(step, lambda: action(cfg))
    for _ in range(2):
        got = _latest(cfg)
        assert_clean(cfg)
    assert got == keys_before


@pytest.mark.kills
def test_a_kill_at_the_load_after_it_recorded_a_loss_keeps_the_loss(tmp_path):
    cfg, _ = make_store(tmp_path, COMPACTED)
    append(cfg, 60, keys=20)
    segs = bases(cfg)
    remove_segment(cfg, segs[4])
    assert killed_at("load.manifest", lambda: offsets_read(cfg, segs[-1]))
    assert manifest.read(cfg.log_dirs[0], "t-0")[0] == bases(cfg), "the manifest was rewritten before the kill"
    for _ in range(2):
        with pytest.raises(DataLossError, match=rf"offsets \[{segs[4]}, {segs[5]}\) were lost"):
            offsets_read(cfg)
        assert any(f"offsets [{segs[4]}, {segs[5]}) were lost" in m for m in lost_reported(cfg))


def _latest(cfg) -> dict:
    with LogManager.open(cfg, clock=ManualClock(T0)) as mgr:
        log = mgr.get_log("t", 0)
        assert log is not None
        return {r.key: r.value for r in log.read_records()}


def test_missing_ranges_merge_clip_and_never_judge_past_the_last_segment():
    named = [0, 10, 20, 30, 40, 50]
    assert manifest.missing(named, [0, 10, 40, 50], None) == [(20, 40)]            # consecutive ones merged
    assert manifest.missing(named, [0, 20, 50], None) == [(10, 20), (30, 50)]
    assert manifest.missing(named, [10, 20, 30], 5) == [(5, 10)]                     # clipped to the log start
    assert manifest.missing(named, [10, 20, 30], 10) == []                           # wholly below it
    assert manifest.missing(named, [0, 10, 20], None) == []                          # a cut tail is not judged
    assert manifest.missing(None, [0, 20], None) == [] and manifest.missing(named, [], None) == []


def test_a_manifest_written_for_another_folder_proves_nothing(tmp_path):
    """A folder restored from a copy (another inode) or made again: its manifest is ignored, not trusted."""
    cfg, _ = make_store(tmp_path, {"retention.ms": -1})
    append(cfg, 30, keys=30)
    segs = bases(cfg)
    assert manifest.read(cfg.log_dirs[0], "t-0")[0] == segs
    copy = pdir(cfg) + ".copy"
    shutil.copytree(pdir(cfg), copy)
    shutil.rmtree(pdir(cfg))
    os.rename(copy, pdir(cfg))
    named, why = manifest.read(cfg.log_dirs[0], "t-0")
    assert named is None and "written for another folder" in str(why)
    assert offsets_read(cfg) == list(range(30))
    assert_clean(cfg)
