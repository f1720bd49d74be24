"""A manager's reads and writes of its dirs' offset checkpoint files (``log.dir_checkpoints``): each file is parsed
once while its bytes do not change (however many partitions are adopted), parsed again when another process
rewrote it, left as it is by a close or a checkpoint that would write the same entries, and still merged with the
entries of the partitions a manager never loaded."""
from __future__ import annotations

import os

import pytest

from storage_engine import layout
from storage_engine.clock import ManualClock
from storage_engine.config_file import config_from_mapping
from storage_engine.log import dir_checkpoints
from storage_engine.log.manager import LogManager
from storage_engine.segment.checkpoint import OffsetCheckpointFile

from ..helpers import get_log, recs

pytestmark = pytest.mark.unit
T0 = 1_700_000_000_000
PARTITIONS = [("a", p) for p in range(6)]


def _config(log_dir):
    return config_from_mapping({"broker": {"log.dirs": str(log_dir)}})


def _fill(log_dir):
    cfg = _config(log_dir)
    with LogManager.open(cfg, clock=ManualClock(T0)) as mgr:
        for t, p in PARTITIONS:
            mgr.get_or_create_log(t, p).append_records(recs(f"{t}-{p}", timestamp=T0))
    return cfg


def _files(log_dir):
    return [os.path.join(str(log_dir), name)
            for name in (layout.RECOVERY_POINT_CHECKPOINT, layout.LOG_START_OFFSET_CHECKPOINT)]


def _identity(path):
    st = os.stat(path)
    return st.st_ino, st.st_mtime_ns, st.st_size


@pytest.fixture
def counted_parses(monkeypatch):
    """How many times checkpoint bytes were parsed by a manager (the parser itself, counted)."""
    count = {"parses": 0}
    real = dir_checkpoints.parse_offset_checkpoint

    def parse(data, path=None):
        count["parses"] += 1
        return real(data, path)
    monkeypatch.setattr(dir_checkpoints, "parse_offset_checkpoint", parse)
    return count


def test_a_manager_parses_each_checkpoint_file_once_however_many_partitions_it_adopts(log_dir, counted_parses):
    """A batch's manager opens one partition and adopts the others one by one (as the remote view adopts the
    metadata topic's partitions): the dir's two files are parsed at open and never again while unchanged."""
    cfg = _fill(log_dir)
    counted_parses["parses"] = 0
    with LogManager.open(cfg, clock=ManualClock(T0), partitions=[PARTITIONS[0]]) as mgr:
        assert counted_parses["parses"] == 2
        for t, p in PARTITIONS[1:]:
            assert (t, p) not in mgr.logs
            log = get_log(mgr, t, p)
            assert [r.value for r in log.read_records()] == [f"{t}-{p}".encode()]
        assert counted_parses["parses"] == 2, "adopting 5 partitions parsed the files again"
        assert mgr.checkpoint_files.parses == 2
    assert counted_parses["parses"] == 2, "the close found the files unchanged: nothing parsed again"


def test_a_file_another_process_rewrote_is_parsed_again_and_its_new_entries_are_used(log_dir):
    cfg = _fill(log_dir)
    rp_path = _files(log_dir)[0]
    with LogManager.open(cfg, clock=ManualClock(T0), partitions=[PARTITIONS[0]]) as mgr:
        entries, error = mgr.checkpoint_files.read(rp_path)
        assert error is None and entries[("a", 1)] == 1
        with pytest.raises(TypeError):
            entries[("a", 1)] = 7       # type: ignore[index]  # what a reader gets cannot be changed under others
        OffsetCheckpointFile(rp_path).write({**entries, ("a", 1): 0})   # another process's write
        again, error = mgr.checkpoint_files.read(rp_path)
        assert error is None and again[("a", 1)] == 0 and again[("a", 2)] == 1
        assert mgr.checkpoint_files.parses == 3
        with open(rp_path, "wb") as f:      # damaged behind the manager's back: read as empty, with the reason
            f.write(b"0\n2\na 0 1\n")
        damaged, error = mgr.checkpoint_files.read(rp_path)
        assert dict(damaged) == {} and error is not None and "expected 2 entries" in error


def test_a_close_that_changes_no_entry_leaves_the_files_and_one_that_does_writes_and_merges(log_dir):
    cfg = _fill(log_dir)
    files = _files(log_dir)
    before = [_identity(f) for f in files]
    with LogManager.open(cfg, clock=ManualClock(T0), partitions=PARTITIONS[:2]):
        pass
    assert [_identity(f) for f in files] == before, "nothing changed: the files were rewritten anyway"

    with LogManager.open(cfg, clock=ManualClock(T0), partitions=PARTITIONS[:1]) as mgr:
        get_log(mgr, *PARTITIONS[0]).append_records(recs("more", timestamp=T0))
    rp = OffsetCheckpointFile(files[0]).read()
    assert rp[("a", 0)] == 2, "the flushed recovery point of the closing manager's log"
    assert {tp: rp[tp] for tp in PARTITIONS[1:]} == {tp: 1 for tp in PARTITIONS[1:]}, \
        "the entries of partitions the manager never loaded are kept"

    os.remove(files[1])     # a missing file is written, even with no entry to put in it
    with LogManager.open(cfg, clock=ManualClock(T0), partitions=PARTITIONS[:1]):
        pass
    assert os.path.exists(files[1]) and OffsetCheckpointFile(files[1]).read() == {}


def test_a_checkpoint_leaves_unchanged_files_and_keeps_other_processes_entries(log_dir):
    """``LogManager.checkpoint`` while another manager has the dir open: unchanged entries write nothing; a
    changed one is merged with the entries the other process owns."""
    cfg = _fill(log_dir)
    files = _files(log_dir)
    with LogManager.open(cfg, clock=ManualClock(T0), partitions=PARTITIONS[:1]) as mine, \
            LogManager.open(cfg, clock=ManualClock(T0), partitions=PARTITIONS[1:2]) as other:
        before = [_identity(f) for f in files]
        mine.checkpoint()
        assert [_identity(f) for f in files] == before
        log = get_log(other, *PARTITIONS[1])
        log.append_records(recs("other", timestamp=T0))
        log.flush()
        other.checkpoint()
        rp = OffsetCheckpointFile(files[0]).read()
        assert rp[PARTITIONS[1]] == 2 and all(rp[tp] == 1 for tp in PARTITIONS if tp != PARTITIONS[1])
        after_other = [_identity(f) for f in files]
        mine.checkpoint()       # its own entry unchanged: the other's new entry stays, the files are not rewritten
        assert [_identity(f) for f in files] == after_other
        assert OffsetCheckpointFile(files[0]).read() == rp
