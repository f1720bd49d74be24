"""Offline log dirs (Kafka's LogDirFailureChannel): an I/O error in one dir takes that dir offline, its partitions
fail with a clear error, the other dirs keep working, and describe/verify/jobs say so.

The dir fails for real: its path is replaced by a symbolic link to itself, so every access fails with ELOOP,
whoever the process runs as (a chmod would not stop root). The same with a dir made unreadable under a process
without CAP_DAC_OVERRIDE: ``test_lifecycle_processes.py``.
"""
from __future__ import annotations

import errno
import os

import pytest

from storage_engine.clock import ManualClock
from storage_engine.config_file import config_from_mapping
from storage_engine.errors import LogDirOfflineError, StorageIOError
from storage_engine.log.failure import is_dir_failure
from storage_engine.log.manager import LogManager
from storage_engine.jobs import compaction, housekeeping
from storage_engine.inspection.verify import verify_log_dirs

from ..helpers import recs, get_log

pytestmark = pytest.mark.unit
T0 = 1_700_000_000_000


def _config(tmp_path):
    return config_from_mapping({"broker": {"log.dirs": [str(tmp_path / "a"), str(tmp_path / "b")]}})


def break_dir(path: str) -> str:
    """Replace a log dir by a symbolic link to itself (ELOOP on every access); returns where it went."""
    aside = path + ".aside"
    os.rename(path, aside)
    os.symlink(os.path.basename(path), path)
    return aside


def repair_dir(path: str, aside: str) -> None:
    os.remove(path)
    os.rename(aside, path)


def _two_partitions(cfg):
    """x-0 in the first dir, y-0 in the second (new partitions go to the dir with the fewest)."""
    with LogManager.open(cfg, clock=ManualClock(T0)) as mgr:
        for topic in ("x", "y"):
            mgr.get_or_create_log(topic, 0).append_records(recs(f"{topic}-first", timestamp=T0))
        assert mgr.dir_of(("x", 0)) == cfg.log_dirs[0] and mgr.dir_of(("y", 0)) == cfg.log_dirs[1]


def test_an_io_error_takes_one_dir_offline_and_the_other_keeps_working(tmp_path):
    cfg = _config(tmp_path)
    _two_partitions(cfg)
    a, b = cfg.log_dirs
    with LogManager.open(cfg, clock=ManualClock(T0)) as mgr:
        x, y = mgr.get_log("x", 0), mgr.get_log("y", 0)
        assert x is not None
        assert y is not None
        aside = break_dir(a)
        try:
            # The first failing operation raises its own error (it names the file) and takes the dir offline.
            with pytest.raises(StorageIOError) as first:
                x.roll()
            assert is_dir_failure(first.value)
            assert mgr.offline_dirs() == {a: mgr.offline_dirs()[a]} and "Too many levels" in mgr.offline_dirs()[a]
            # From now on every operation on a log of that dir says the dir is offline; the others work.
            for op in (lambda: x.append_records(recs("no", timestamp=T0)), x.flush, x.refresh,
                       lambda: list(x.read_records(0)), lambda: x.read(0), lambda: x.read_slice(0, 1024),
                       lambda: get_log(mgr, "x", 0)):
                with pytest.raises(LogDirOfflineError, match=f"log dir {a} is offline"):
                    op()
            for i in range(3):
                y.append_records(recs(f"y-{i}", timestamp=T0))
            y.roll()
            assert [r.value for r in y.read_records()][-1] == b"y-2"
            assert mgr.partitions() == [("y", 0)]
            assert list(mgr.checkpoint()) == [b]
            assert [f["topic"] for f in mgr.flush_all()] == ["y"]
            dirs = {d["path"]: d for d in mgr.describe()["log_dirs"]}
            assert dirs[a]["status"] == "offline" and "Too many levels" in dirs[a]["offline_reason"]
            assert dirs[b]["status"] == "online" and [p["topic"] for p in dirs[b]["partitions"]] == ["y"]
        finally:
            pass
    # Closing left the offline dir alone and wrote the other's checkpoints and marker.
    assert os.path.exists(os.path.join(b, ".kafka_cleanshutdown"))
    repair_dir(a, aside)
    with LogManager.open(cfg, clock=ManualClock(T0)) as mgr:
        assert [r.value for r in get_log(mgr, "x", 0).read_records()] == [b"x-first"]
        assert [r.value for r in get_log(mgr, "y", 0).read_records()] == [b"y-first", b"y-0", b"y-1", b"y-2"]


def test_a_dir_that_fails_while_opening_is_offline_and_skipped(tmp_path):
    cfg = _config(tmp_path)
    _two_partitions(cfg)
    a, b = cfg.log_dirs
    aside = break_dir(b)
    try:
        with LogManager.open(cfg, clock=ManualClock(T0)) as mgr:
            assert list(mgr.offline_dirs()) == [b]
            assert sorted(mgr.logs) == [("x", 0)]
            get_log(mgr, "x", 0).append_records(recs("more", timestamp=T0))
            with pytest.raises(LogDirOfflineError, match="y-0 is unavailable: log dir .* is offline"):
                mgr.get_log("y", 0)
            # A partition the offline dir may hold cannot be created elsewhere (it would exist twice).
            with pytest.raises(LogDirOfflineError, match="may hold it"):
                mgr.get_or_create_log("z", 0)
        report = verify_log_dirs(cfg)
        assert not report["damaged"] and list(report["offline_dirs"]) == [b]
        assert [p["topic"] for p in report["partitions"]] == ["x"]
        checkpoint = housekeeping.checkpoint(cfg, T0)
        assert list(checkpoint["checkpoints"]) == [a] and list(checkpoint["offline_dirs"]) == [b]
        assert list(housekeeping.flush(cfg, T0, due_only=False)["offline_dirs"]) == [b]
        assert [r["topic"] for r in housekeeping.retention_all(cfg, T0)] == ["x"]
        assert list(compaction.compact(cfg, T0)["offline_dirs"]) == [b]
        purge = housekeeping.purge(cfg, T0)
        assert list(purge["offline_dirs"]) == [b]
    finally:
        repair_dir(b, aside)
    with LogManager.open(cfg, clock=ManualClock(T0)) as mgr:
        assert mgr.offline_dirs() == {}
        assert [r.value for r in get_log(mgr, "x", 0).read_records()] == [b"x-first", b"more"]


def test_the_first_dir_offline_stops_creation_with_a_clear_error(tmp_path):
    """New partitions and moves serialise on a lock in the first log dir: while it is offline they are refused,
    while existing partitions of the other dirs keep working."""
    cfg = _config(tmp_path)
    _two_partitions(cfg)
    a, _b = cfg.log_dirs
    aside = break_dir(a)
    try:
        with LogManager.open(cfg, clock=ManualClock(T0)) as mgr:
            get_log(mgr, "y", 0).append_records(recs("fine", timestamp=T0))
            with pytest.raises(LogDirOfflineError, match=f"log dir {a} is offline"):
                mgr.get_or_create_log("z", 0)
    finally:
        repair_dir(a, aside)
    with LogManager.open(cfg, clock=ManualClock(T0)) as mgr:      # offline, yet its names can be read
        mgr.failures.mark_offline(a, "OSError: [Errno 28] No space left on device")
        get_log(mgr, "y", 0).append_records(recs("fine", timestamp=T0))
        with pytest.raises(LogDirOfflineError, match="holds the creation lock"):
            mgr.get_or_create_log("z", 0)


def test_which_errors_are_dir_failures():
    for code in (errno.EIO, errno.EACCES, errno.EROFS, errno.ENOSPC, errno.ENOTDIR, errno.ELOOP):
        assert is_dir_failure(OSError(code, os.strerror(code)))
        try:
            raise StorageIOError("cannot append", "/x", OSError(code, "x")) from OSError(code, "x")
        except StorageIOError as exc:
            assert is_dir_failure(exc)
    for code in (errno.ENOENT, errno.EISDIR, errno.EEXIST, errno.EMFILE):
        assert not is_dir_failure(OSError(code, os.strerror(code)))
    assert not is_dir_failure(ValueError("x"))
