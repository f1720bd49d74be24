"""Never derive a loss away (ARCHITECTURE.md section 6): a first segment gone or a sealed segment emptied is
recorded by the load that finds it, the log start offset stays where it was recorded, ``verify`` reports the lost
offsets after any number of opens, reads of them fail, until an operator runs ``accept-loss``; retention and
delete-records still move the log start offset as before."""
from __future__ import annotations

import json
import os

import pytest

from storage_engine import layout
from storage_engine.cli.main import main
from storage_engine.clock import ManualClock
from storage_engine.config_file import config_from_mapping
from storage_engine.errors import DataLossError, OffsetOutOfRangeError
from storage_engine.inspection.verify import verify_log_dirs
from storage_engine.jobs import housekeeping, lifecycle
from storage_engine.log import losses
from storage_engine.log.manager import LogManager
from storage_engine.maintenance import retention
from storage_engine.record.records import SimpleRecord
from tests.storage_engine.helpers import get_log, present

pytestmark = pytest.mark.unit
T0 = 1_700_000_000_000
HOUR = 3_600_000


def make_store(tmp_path, *, topics=None, n=60):
    """Topic t, partition 0: ``n`` records of one batch each in segments of ~5 records; the YAML path for the CLI."""
    data = {"broker": {"log.dirs": [str(tmp_path / "a")], "log.segment.bytes": 600, "log.index.interval.bytes": 100},
            "topics": topics or {"t": {"retention.ms": -1}}}
    path = tmp_path / "storage.yaml"
    path.write_text(json.dumps(data))
    cfg = config_from_mapping(data)
    with LogManager.open(cfg, clock=ManualClock(T0)) as mgr:
        log = mgr.get_or_create_log("t", 0)
        for i in range(n):
            log.append_records([SimpleRecord(b"k%d" % (i % 7), b"v" * 60, T0 + i)])
    return cfg, str(path)


def pdir(cfg) -> str:
    return os.path.join(cfg.log_dirs[0], "t-0")


def bases(cfg) -> list[int]:
    return sorted(layout.offset_from_filename(n) for n in os.listdir(pdir(cfg)) if n.endswith(".log"))


def lost_reported(cfg) -> list[str]:
    """The messages of verify saying offsets were lost."""
    report = verify_log_dirs(cfg)
    return [p["message"] for p in report["problems"] if "were lost" in p["message"]]


def cli(capsys, path: str, *args) -> tuple[int, str]:
    capsys.readouterr()
    rc = main(["--config", path, *map(str, args)])
    return rc, capsys.readouterr().out


def open_and_read_start(cfg) -> int:
    with LogManager.open(cfg, clock=ManualClock(T0)) as mgr:
        return get_log(mgr, "t", 0).log_start_offset


def test_a_deleted_first_segment_stays_reported_after_any_number_of_opens_until_accepted(tmp_path, capsys):
    """The reproducer: the first sealed .log deleted, its index kept."""
    cfg, path = make_store(tmp_path)
    first, second = bases(cfg)[:2]
    assert first == 0 and second > 0
    os.remove(layout.segment_file(pdir(cfg), 0, layout.LOG_SUFFIX))
    lost = f"offsets [0, {second}) were lost"
    assert any(lost in m for m in lost_reported(cfg)), "before any open"
    assert cli(capsys, path, "verify")[0] == 1
    assert open_and_read_start(cfg) == 0, "the load keeps the log start offset where it was recorded"
    assert os.path.exists(losses.path_of(cfg.log_dirs[0], "t-0"))
    assert any(lost in m for m in lost_reported(cfg)), "after one open"
    for _ in range(2):
        open_and_read_start(cfg)
    rc, out = cli(capsys, path, "describe")
    assert rc == 0
    (part,) = json.loads(out)["log_dirs"][0]["partitions"]
    assert part["log_start_offset"] == 0 and part["segments"][0]["base_offset"] == second
    assert any(lost in m for m in lost_reported(cfg)), "after three opens and describe"
    rc, out = cli(capsys, path, "verify")
    assert rc == 1 and lost in out
    # Reads of the lost range fail, never skip to the next segment; the rest reads.
    with LogManager.open(cfg, clock=ManualClock(T0)) as mgr:
        log = mgr.get_log("t", 0)
        assert log is not None
        for start in (None, 0, second - 1):
            with pytest.raises(DataLossError, match=r"accept-loss --topic t --partition 0"):
                list(log.read_records(start))
        with pytest.raises(DataLossError):
            log.read(0)
        assert next(log.read_records(second)).offset == second
    # The operator accepts the loss: the log start moves past the gap, the report clears, verify exits 0.
    rc, out = cli(capsys, path, "accept-loss", "--topic", "t", "--partition", 0)
    assert rc == 0
    done = json.loads(out)
    assert (done["log_start_offset_before"], done["log_start_offset"]) == (0, second)
    assert [(r["start"], r["end"]) for r in done["accepted"]] == [(0, second)]
    assert not os.path.exists(losses.path_of(cfg.log_dirs[0], "t-0"))
    assert cli(capsys, path, "verify")[0] == 0
    assert open_and_read_start(cfg) == second
    assert lost_reported(cfg) == []
    with LogManager.open(cfg, clock=ManualClock(T0)) as mgr:
        assert next(get_log(mgr, "t", 0).read_records()).offset == second
        with pytest.raises(OffsetOutOfRangeError):
            list(get_log(mgr, "t", 0).read_records(0))


def test_a_first_segment_gone_with_its_index_is_found_from_the_recorded_log_start(tmp_path):
    cfg, _ = make_store(tmp_path)
    second = bases(cfg)[1]
    for suffix in layout.SEGMENT_SUFFIXES:
        path = layout.segment_file(pdir(cfg), 0, suffix)
        if os.path.exists(path):
            os.remove(path)
    assert any(f"offsets [0, {second}) were lost" in m for m in lost_reported(cfg))
    for _ in range(3):
        assert open_and_read_start(cfg) == 0
    assert any(f"offsets [0, {second}) were lost" in m for m in lost_reported(cfg))


@pytest.mark.parametrize("topics", [{"t": {"retention.ms": -1}},
                                    {"t": {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": 0.99}}],
                         ids=["delete", "compact"])
def test_an_emptied_sealed_segment_is_reported_as_lost_offsets(tmp_path, capsys, topics):
    cfg, path = make_store(tmp_path, topics=topics)
    segs = bases(cfg)
    emptied, nxt = segs[2], segs[3]
    with open(layout.segment_file(pdir(cfg), emptied, layout.LOG_SUFFIX), "r+b") as f:
        f.truncate(0)
    lost = f"offsets [{emptied}, {nxt}) were lost (sealed segment {emptied} was emptied"
    assert any(lost in m for m in lost_reported(cfg)), "before any open"
    for _ in range(3):
        open_and_read_start(cfg)
        assert any(lost in m for m in lost_reported(cfg))
    with LogManager.open(cfg, clock=ManualClock(T0)) as mgr:
        log = mgr.get_log("t", 0)
        assert log is not None
        with pytest.raises(DataLossError):
            list(log.read_records(emptied + 1))
        # A read from before the gap returns what lies before it, then fails instead of skipping the gap.
        got = []
        with pytest.raises(DataLossError):
            for rec in log.read_records(emptied - 2):
                got.append(rec.offset)
        assert got == [emptied - 2, emptied - 1]
        assert present(log.read(emptied - 1)).data                       # a fetch inside the segment before the gap
        with pytest.raises(DataLossError):
            log.read(emptied)
    rc, out = cli(capsys, path, "accept-loss", "--topic", "t", "--partition", 0)
    assert rc == 0 and json.loads(out)["log_start_offset"] == nxt
    assert cli(capsys, path, "verify")[0] == 0
    assert open_and_read_start(cfg) == nxt


def test_retention_and_delete_records_still_move_the_log_start_offset(tmp_path):
    cfg, _ = make_store(tmp_path, topics={"t": {"retention.ms": HOUR}})
    segs = bases(cfg)
    with LogManager.open(cfg, clock=ManualClock(T0)) as mgr:
        log = mgr.get_log("t", 0)
        assert log is not None
        assert log.delete_records(segs[1] + 1) == segs[1] + 1
    assert open_and_read_start(cfg) == segs[1] + 1
    # retention: the log start offset breach removes the segments below it, time retention the rest
    result = housekeeping.retention(cfg, "t", 0, T0 + 2 * HOUR)      # every record expired: up to the log end
    assert result["segments_deleted"] == len(segs) and result["log_start_offset"] == 60
    assert {s["reason"] for s in result["segments"]} == {"log-start-offset", "retention-ms"}
    for _ in range(2):
        assert open_and_read_start(cfg) == 60
    assert lost_reported(cfg) == [] and not os.path.exists(losses.path_of(cfg.log_dirs[0], "t-0"))
    assert verify_log_dirs(cfg)["damaged"] is False


def test_retention_stops_below_a_recorded_loss_until_it_is_accepted(tmp_path):
    """Retention never passes a lost range over: it deletes nothing reaching it (the result says why) until an
    operator accepts the loss; then it deletes as before."""
    cfg, _ = make_store(tmp_path, topics={"t": {"retention.ms": HOUR}})
    segs = bases(cfg)
    os.remove(layout.segment_file(pdir(cfg), 0, layout.LOG_SUFFIX))
    assert open_and_read_start(cfg) == 0
    with LogManager.open(cfg, clock=ManualClock(T0)) as mgr:
        log = get_log(mgr, "t", 0)
        held = retention.run(log, T0 + 2 * HOUR)
        assert (held["log_start_offset_before"], held["log_start_offset"], held["segments_deleted"]) == (0, 0, 0)
        assert f"offsets [0, {segs[1]}) were lost" in held["held_by_loss"]
    assert open_and_read_start(cfg) == 0
    assert any(f"offsets [0, {segs[1]}) were lost" in m for m in lost_reported(cfg))
    done = lifecycle.accept_loss(cfg, "t", 0, T0)
    assert done["log_start_offset"] == segs[1] and done["cleared"] is True
    assert lost_reported(cfg) == []
    with LogManager.open(cfg, clock=ManualClock(T0)) as mgr:
        after = retention.run(get_log(mgr, "t", 0), T0 + 2 * HOUR)
        assert after["log_start_offset"] == 60 and "held_by_loss" not in after


def test_deleting_the_partition_removes_its_loss_record(tmp_path):
    cfg, _ = make_store(tmp_path)
    os.remove(layout.segment_file(pdir(cfg), 0, layout.LOG_SUFFIX))
    open_and_read_start(cfg)
    record = losses.path_of(cfg.log_dirs[0], "t-0")
    assert os.path.exists(record)
    lifecycle.delete_topic(cfg, "t", None, T0)
    assert not os.path.exists(record)
    with LogManager.open(cfg, clock=ManualClock(T0)) as mgr:      # a new partition of that name starts clean
        mgr.get_or_create_log("t", 0).append_records([SimpleRecord(b"k", b"v", T0)])
    assert lost_reported(cfg) == []


def test_accept_loss_without_a_loss_changes_nothing(tmp_path):
    cfg, _ = make_store(tmp_path)
    done = lifecycle.accept_loss(cfg, "t", 0, T0)
    assert (done["accepted"], done["log_start_offset_before"], done["log_start_offset"], done["cleared"]) == (
        [], 0, 0, False)
