"""The lock module: every flock the engine takes, tried from a real second process, and the engine's own files
named so that no topic can collide with them."""
from __future__ import annotations

import os
import struct
import subprocess
import sys
import textwrap

import pytest

from storage_engine import layout
from storage_engine.clock import ManualClock
from storage_engine.config_file import config_from_mapping
from storage_engine.errors import InvalidTopicError, LogLockedError
from storage_engine.log.locks import (UNKNOWN, CleaningClaim, DirLock, FileLock, PartitionLock, PartitionState,
                                      convert_legacy_engine_files, lock_path)
from storage_engine.log.manager import LogManager
from storage_engine.record.records import SimpleRecord
from tests.paths import REPO
from tests.storage_engine.helpers import get_log

pytestmark = pytest.mark.unit
T0 = 1_700_000_000_000


def _other_process(code: str) -> str:
    """Run ``code`` in a second Python process; returns what it printed."""
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, cwd=REPO,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_partition_lock_excludes_another_process_and_carries_the_state(tmp_path):
    path = lock_path(str(tmp_path), "t-0")
    assert os.path.basename(path) == ".engine+partition+t-0"
    lock = PartitionLock(path)
    assert lock.read_state().generation == 0 and lock.read_state().log_start_offset == UNKNOWN
    with lock:
        lock.write_state(PartitionState(7, 100, 90, T0))
        probe = f"""
            from storage_engine.log.locks import PartitionLock
            from storage_engine.errors import LogLockedError
            lock = PartitionLock({path!r})
            s = lock.read_state()
            try:
                lock.acquire(blocking=False)
                print("acquired")
            except LogLockedError:
                print("locked", s.generation, s.log_start_offset, s.recovery_point, s.last_flush_ms)
        """
        assert _other_process(probe) == f"locked 7 100 90 {T0}"
    assert _other_process(probe) == "acquired"
    with pytest.raises(RuntimeError):
        lock.write_state(PartitionState())  # only a holder writes the state
    lock.close()


def test_partition_lock_is_reentrant_within_one_object_and_times_out(tmp_path):
    path = lock_path(str(tmp_path), "t-0")
    a, b = PartitionLock(path), PartitionLock(path)
    with a:
        with a:
            assert a.held
        assert a.held
        with pytest.raises(LogLockedError, match="locked by another"):
            b.acquire(timeout_s=0.05)  # another open file description: excluded even in this process
    assert not a.held
    b.acquire(timeout_s=1)
    b.release()
    a.close()
    b.close()


def test_dir_lock_first_opener_is_exclusive_and_counts_openers(tmp_path):
    first = DirLock(str(tmp_path))
    assert first.try_exclusive()
    assert first.count_open() == 1
    second = DirLock(str(tmp_path))
    assert not second.try_exclusive()
    first.shared()
    second.shared()
    assert second.count_open() == 2
    assert first.opens() == 2
    assert not first.try_exclusive(), "shared by another: not the last closer"
    second.close()
    assert first.try_exclusive(), "the other left: the last closer may take it"
    first.close()
    with open(tmp_path / layout.DIR_LOCK_FILE, "rb") as f:
        assert struct.unpack(">q", f.read(8))[0] == 2


def test_cleaning_claim_is_taken_without_waiting_and_dies_with_its_process(tmp_path):
    claim = CleaningClaim(str(tmp_path), "t-0")
    assert os.path.basename(claim.path) == ".engine+cleaning+t-0"
    code = f"""
        from storage_engine.log.locks import CleaningClaim
        print(CleaningClaim({str(tmp_path)!r}, "t-0").try_acquire())
    """
    assert claim.try_acquire()
    assert _other_process(code) == "False"
    with pytest.raises(LogLockedError, match="another process is cleaning"):
        CleaningClaim(str(tmp_path), "t-0").acquire_or_raise()
    with claim:  # released on leaving the block
        pass
    assert _other_process(code) == "True"


def test_file_lock_serialises_two_processes(tmp_path):
    path = str(tmp_path / layout.CHECKPOINT_LOCK_FILE)
    with FileLock(path):
        code = f"""
            import fcntl, os
            fd = os.open({path!r}, os.O_RDWR)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                print("free")
            except BlockingIOError:
                print("held")
        """
        assert _other_process(code) == "held"
    assert _other_process(code) == "free"


def test_long_partition_names_get_a_hashed_file_name(tmp_path):
    name = "t" * 249 + "-2147483647"
    path = lock_path(str(tmp_path), name)
    assert len(os.path.basename(path).encode()) <= 255
    assert os.path.basename(path).startswith(layout.PARTITION_STATE_PREFIX)
    assert path == lock_path(str(tmp_path), name) != lock_path(str(tmp_path), "u" * 249 + "-2147483647")


def test_no_topic_can_collide_with_an_engine_file(tmp_path):
    """A topic called .lock.t is legal in Kafka; its partition folder .lock.t-0 was the name of t-0's lock file
    in earlier versions. Both topics now live side by side, and no engine file lands in a partition folder."""
    cfg = config_from_mapping({"broker": {"log.dirs": str(tmp_path)}})
    with LogManager.open(cfg, clock=ManualClock(T0)) as mgr:
        for topic in ("t", ".lock.t", ".engine", "engine-partition"):
            mgr.get_or_create_log(topic, 0).append_records([SimpleRecord(b"k", topic.encode(), T0)])
    with LogManager.open(cfg, clock=ManualClock(T0)) as mgr:
        assert sorted(mgr.logs) == [(".engine", 0), (".lock.t", 0), ("engine-partition", 0), ("t", 0)]
        for (topic, p), log in mgr.logs.items():
            assert [r.value for r in log.read_records()] == [topic.encode()]
            inside = os.listdir(log.dir)
            assert all(layout.is_offset_named(n) or layout.is_partition_file(n) for n in inside), inside
    assert not mgr.load_errors
    for name in os.listdir(tmp_path):
        if os.path.isfile(tmp_path / name):
            assert layout.is_engine_file(name), name
        else:
            assert not layout.is_engine_file(name)
            layout.parse_partition_dir(name)
    for hostile in (".engine+partition+t", "a+b"):
        with pytest.raises(InvalidTopicError):
            layout.partition_dir_name(hostile, 0)


def test_engine_files_of_earlier_versions_are_converted_once(tmp_path):
    d = tmp_path
    cfg = config_from_mapping({"broker": {"log.dirs": str(d)}})
    with LogManager.open(cfg, clock=ManualClock(T0)) as mgr:
        mgr.get_or_create_log("t", 0).append_records([SimpleRecord(b"k", b"v", T0)])
        mgr.get_or_create_log(".lock.x", 0).append_records([SimpleRecord(b"k", b"x", T0)])
    # what an earlier version left: its state file names, a claim, transient locks, the uncleanable list
    os.replace(d / ".engine+partition+t-0", d / ".lock.t-0")
    with open(d / ".lock.t-0", "r+b") as f:
        f.write(struct.pack(">qqqq", 41, 0, 1, T0))
    for name in (".cleaning.t-0", ".create.lock", ".checkpoint.lock", ".cleaner-checkpoint.lock"):
        (d / name).write_bytes(b"")
    (d / ".uncleanable-partitions.json").write_text('{"t-0": {"reason": "x", "since_ms": 1}}')
    os.remove(d / layout.CLEAN_SHUTDOWN_FILE)  # (a marker would make no difference to the conversion)

    with LogManager.open(cfg, clock=ManualClock(T0)) as mgr:
        messages = mgr.dirs[str(d)].load_messages
        assert "renamed .lock.t-0 to .engine+partition+t-0" in messages
        assert get_log(mgr, "t", 0).generation == 42, "the state kept its generation (one more for this load)"
        assert [r.value for r in get_log(mgr, ".lock.x", 0).read_records()] == [b"x"]
    names = set(os.listdir(d))
    assert {".lock.t-0", ".cleaning.t-0", ".create.lock", ".checkpoint.lock", ".cleaner-checkpoint.lock",
            ".uncleanable-partitions.json"}.isdisjoint(names)
    assert (d / layout.UNCLEANABLE_FILE).read_text().startswith('{"t-0"')
    assert (d / ".lock.x-0").is_dir(), "a partition folder of a topic named .lock.x is not an engine file"
    assert convert_legacy_engine_files(str(d)) == []


def test_a_partition_lock_excludes_the_other_threads_and_is_reentrant_for_its_holder(tmp_path):
    """Kafka's one lock per log, between threads: a second thread waits (or fails without blocking) while the first
    holds the lock at any depth; only the holder sees it held and may release it; an idle lock can be parked, a
    held one cannot, even from another thread."""
    import threading
    lock = PartitionLock(str(tmp_path / "p.lock"))
    lock.acquire()
    lock.acquire()
    assert lock.held and lock.depth == 2
    seen: dict[str, object] = {}

    def other() -> None:
        seen["held"] = lock.held
        seen["busy"] = lock.busy
        seen["park"] = lock.park()
        try:
            lock.acquire(blocking=False)
        except LogLockedError as exc:
            seen["refused"] = str(exc)
        try:
            lock.release()
        except RuntimeError as exc:
            seen["release"] = str(exc)
        lock.acquire()              # waits for the holder's last release
        seen["got"] = lock.depth
        lock.release()

    t = threading.Thread(target=other)
    t.start()
    for _ in range(1000):          # until the other thread reaches its blocking acquire
        if "release" in seen:
            break
        t.join(0.01)
    t.join(0.2)
    assert t.is_alive(), "the other thread took a lock this thread holds"
    assert seen == {"held": False, "busy": True, "park": False,
                    "refused": f"partition is locked by another thread of this process: {lock.path}",
                    "release": "release of a partition lock that this thread does not hold"}
    lock.release()
    assert t.is_alive() and lock.depth == 1
    lock.release()
    t.join(5)
    assert not t.is_alive() and seen["got"] == 1
    assert not lock.busy and lock.park()
    lock.close()


def test_the_state_is_read_right_while_other_threads_park_and_take_the_lock(tmp_path):
    """``read_state`` takes no lock (the broker's event loop reads it), while other threads park the lock (closing
    its descriptor) and take it again: a reader must never read through a descriptor closed meanwhile, nor through
    its number reused by a file another thread opened (here a decoy whose bytes say *moved*, generation 999)."""
    import threading
    lock = PartitionLock(str(tmp_path / "p.lock"))
    with lock:
        lock.write_state(PartitionState(7, 100, 90, T0))
    decoy = tmp_path / "decoy"
    decoy.write_bytes(struct.pack(">6q", 999, 1, 1, 1, 1, 2))
    rounds = 3000
    failures: list[str] = []
    done = threading.Event()

    def parker() -> None:
        for _ in range(rounds):
            lock.park()
            with lock:
                pass
        done.set()

    def opener() -> None:             # takes the descriptor numbers park() frees
        while not done.is_set():
            fds = [os.open(decoy, os.O_RDONLY) for _ in range(4)]
            for fd in fds:
                os.close(fd)

    def reader() -> None:
        while not done.is_set():
            try:
                s = lock.read_state()
            except OSError as exc:
                failures.append(f"read_state raised {exc!r}")
                continue
            if (s.generation, s.log_start_offset, s.status) != (7, 100, 0):
                failures.append(f"read_state answered {s!r}")

    threads = [threading.Thread(target=f) for f in (parker, opener, reader, reader)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    lock.close()
    assert failures == [], f"{len(failures)} wrong reads, the first: {failures[:3]}"
