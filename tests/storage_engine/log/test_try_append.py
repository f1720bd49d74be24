"""``Log.try_append_batches``, the append the broker tries on its event loop: it appends only when nothing in it can
wait, and otherwise gives up (``WouldBlock``) having changed nothing (log end, files and their sizes, producer
state, leader epochs), after which ``append_batches`` of the same buffer appends as if the attempt had not been
made. Each give-up is made true for real: a second process holding the partition lock, another process's append
or roll, a roll, ``flush.messages=1``, an index to grow, a new leader epoch, another thread, a parked log, an
offline dir."""
from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import textwrap
import threading

import pytest

from storage_engine import layout
from storage_engine.clock import ManualClock
from storage_engine.config_file import config_from_mapping
from storage_engine.errors import OutOfOrderSequenceError
from storage_engine.log.locks import lock_path
from storage_engine.log.log import Log
from storage_engine.log.manager import LogManager
from storage_engine.record.record_batch import RecordBatch, build_batch
from storage_engine.record.records import SimpleRecord
from storage_engine.segment.slice_read import WouldBlock

from ...paths import REPO
from ..kernels import split_by_process_fixture

pytestmark = pytest.mark.unit

# Once: the give-ups do not depend on the record kernels, and several tests start child processes.
kernels = split_by_process_fixture()

T0 = 1_700_000_000_000
TOPIC = "t"


def _batch(*values: bytes, producer_id: int = -1, epoch: int = -1, sequence: int = -1) -> bytearray:
    """A client's batch (offsets from 0, as a client sends them), writable like the broker's request frame."""
    return bytearray(build_batch([SimpleRecord(None, v, T0) for v in values], base_offset=0,
                                 producer_id=producer_id, producer_epoch=epoch, base_sequence=sequence))


def _open(tmp_path, **topic) -> LogManager:
    cfg = config_from_mapping({"broker": {"log.dirs": [str(tmp_path / "logs")]}, "topics": {TOPIC: topic}})
    return LogManager.open(cfg, clock=ManualClock(T0))


def _ready(mgr: LogManager) -> Log:
    """The partition after one append through the pool's path (the leader epoch read, the indexes grown), so
    the next small append can be done on the event loop; the test checks it is."""
    log = mgr.get_or_create_log(TOPIC, 0)
    log.append_batches(_batch(b"first"))
    log.try_append_batches(_batch(b"second"), in_place=True)
    assert log.log_end_offset == 2
    return log


def _state(log: Log) -> tuple:
    """Everything an append changes: offsets, the view, the producer state, the leader epochs, every file's size."""
    sizes = sorted((name, os.path.getsize(os.path.join(log.dir, name))) for name in os.listdir(log.dir))
    return (log.log_end_offset, log.recovery_point, log.view.generation, log.view.known_active_size,
            len(log.segments), log.producer_state.state_key(), log.leader_epochs.entries, sizes,
            os.path.getsize(lock_path(log.log_dir, log.name)))


def _gives_up(log: Log, data: bytearray, why: str) -> None:
    """``try_append_batches(data)`` gives up naming ``why`` and changes nothing."""
    before = _state(log)
    with pytest.raises(WouldBlock, match=why):
        log.try_append_batches(data, in_place=True)
    assert _state(log) == before


def _values(log: Log) -> list[bytes | None]:
    return [r.value for r in log.read_records()]


def _child(code: str, log_dir: str, *args: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code), log_dir, *args], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=str(REPO))


# Another process: takes the partition lock, says HELD, keeps it until its input closes.
HOLD = """
    import sys
    from storage_engine.log.locks import PartitionLock, lock_path
    lock = PartitionLock(lock_path(sys.argv[1], "t-0"))
    lock.acquire()
    print("HELD", flush=True)
    sys.stdin.read()
    lock.release()
"""

# Another process: appends one batch ("append") or rolls the partition ("roll") through its own LogManager.
CHANGE = """
    import sys
    from storage_engine.clock import ManualClock
    from storage_engine.config_file import config_from_mapping
    from storage_engine.log.manager import LogManager
    from storage_engine.record.records import SimpleRecord
    with LogManager.open(config_from_mapping({"broker": {"log.dirs": [sys.argv[1]]}}),
                         clock=ManualClock(1_700_000_000_000)) as mgr:
        log = mgr.get_log("t", 0)
        if sys.argv[2] == "append":
            log.append_records([SimpleRecord(None, b"other", 1_700_000_000_000)])
        else:
            log.roll()
        print(log.log_end_offset)
"""


def _change(log_dir: str, action: str) -> None:
    proc = _child(CHANGE, log_dir, action)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err


def test_a_small_append_is_done_now_and_reads_back(tmp_path):
    with _open(tmp_path) as mgr:
        log = _ready(mgr)
        for i in range(20):
            info = log.try_append_batches(_batch(b"v%d" % i, b"w%d" % i), in_place=True)
            assert (info.first_offset, info.last_offset) == (2 + 2 * i, 3 + 2 * i)
        assert _values(log)[:4] == [b"first", b"second", b"v0", b"w0"] and log.log_end_offset == 42
    with _open(tmp_path) as mgr:     # what was written is the log a reload finds
        assert len(_values(mgr.get_or_create_log(TOPIC, 0))) == 42


def test_another_process_holding_the_partition_lock(tmp_path):
    with _open(tmp_path) as mgr:
        log = _ready(mgr)
        holder = _child(HOLD, log.log_dir)
        try:
            assert holder.stdout is not None and holder.stdout.readline().strip() == "HELD"
            _gives_up(log, _batch(b"x"), "locked by another process")
        finally:
            holder.communicate("", timeout=60)
        assert holder.returncode == 0
        assert log.append_batches(_batch(b"x"), in_place=True).first_offset == 2
        assert _values(log) == [b"first", b"second", b"x"]


def test_another_process_appended(tmp_path):
    """The active segment grew under this view (same generation): its bytes must be validated and replayed."""
    with _open(tmp_path) as mgr:
        log = _ready(mgr)
        _change(log.log_dir, "append")
        _gives_up(log, _batch(b"x"), "bytes to validate")
        assert log.append_batches(_batch(b"x"), in_place=True).first_offset == 3
        assert _values(log) == [b"first", b"second", b"other", b"x"]
        log.try_append_batches(_batch(b"y"), in_place=True)     # the view is current again


def test_another_process_rolled(tmp_path):
    """The shared generation moved: the view must be reloaded."""
    with _open(tmp_path) as mgr:
        log = _ready(mgr)
        _change(log.log_dir, "roll")
        _gives_up(log, _batch(b"x"), "reloaded")
        assert log.append_batches(_batch(b"x"), in_place=True).first_offset == 2
        assert len(log.segments) == 2 and _values(log) == [b"first", b"second", b"x"]


def test_an_append_that_must_roll(tmp_path):
    size = len(_batch(b"v" * 100))
    with _open(tmp_path, **{"segment.bytes": 4 * size}) as mgr:
        log = mgr.get_or_create_log(TOPIC, 0)
        log.append_batches(_batch(b"v" * 100))
        for _ in range(3):
            log.try_append_batches(_batch(b"v" * 100), in_place=True)
        _gives_up(log, _batch(b"v" * 100), "roll the segment")
        assert log.append_batches(_batch(b"v" * 100), in_place=True).rolled
        assert [s.base_offset for s in log.segments] == [0, 4] and len(_values(log)) == 5


def test_an_append_due_for_a_flush(tmp_path):
    with _open(tmp_path, **{"flush.messages": 1}) as mgr:
        log = mgr.get_or_create_log(TOPIC, 0)
        log.append_batches(_batch(b"a"))
        assert log.recovery_point == 1
        _gives_up(log, _batch(b"x"), "flushed")
        log.append_batches(_batch(b"x"), in_place=True)
        assert log.recovery_point == 2 and _values(log) == [b"a", b"x"]


def test_an_index_to_grow(tmp_path):
    """An active segment's index shorter than segment.index.bytes (as a view opens one a writer trimmed)."""
    with _open(tmp_path) as mgr:
        log = _ready(mgr)
        index = log.active_segment.offset_index
        full = index.length
        index.resize(index.ENTRY_SIZE * 16)
        _gives_up(log, _batch(b"x"), "index of the active segment must grow")
        log.append_batches(_batch(b"x"), in_place=True)
        assert index.length == full and _values(log) == [b"first", b"second", b"x"]


def test_a_new_leader_epoch(tmp_path):
    """A newer partition leader epoch is written to the leader-epoch-checkpoint before the data."""
    with _open(tmp_path) as mgr:
        log = _ready(mgr)
        epoch = log.config.partition_leader_epoch
        log.config = dataclasses.replace(log.config, partition_leader_epoch=epoch + 1)
        _gives_up(log, _batch(b"x"), "leader epoch")
        log.append_batches(_batch(b"x"), in_place=True)
        assert log.leader_epochs.latest_entry is not None
        assert (log.leader_epochs.latest_entry.epoch, log.leader_epochs.latest_entry.start_offset) == (epoch + 1, 2)
        with open(os.path.join(log.dir, layout.LEADER_EPOCH_CHECKPOINT)) as f:
            assert f"{epoch + 1} 2" in f.read()


def test_another_thread_holding_the_log(tmp_path):
    with _open(tmp_path) as mgr:
        log = _ready(mgr)
        held, done = threading.Event(), threading.Event()

        def hold() -> None:
            with log.mutex:
                held.set()
                done.wait(60)
        thread = threading.Thread(target=hold)
        thread.start()
        try:
            assert held.wait(60)
            _gives_up(log, _batch(b"x"), "busy in another thread")
        finally:
            done.set()
            thread.join(60)
        log.try_append_batches(_batch(b"x"), in_place=True)
        assert _values(log) == [b"first", b"second", b"x"]


def test_a_parked_log(tmp_path):
    with _open(tmp_path) as mgr:
        log = _ready(mgr)
        assert log.park()
        with pytest.raises(WouldBlock, match="parked"):
            log.try_append_batches(_batch(b"x"), in_place=True)
        assert log.parked
        log.append_batches(_batch(b"x"), in_place=True)
        assert _values(log) == [b"first", b"second", b"x"]


def test_an_offline_dir(tmp_path):
    with _open(tmp_path) as mgr:
        log = _ready(mgr)
        mgr.failures.mark_offline(log.log_dir, "test: the disk failed")
        _gives_up(log, _batch(b"x"), "offline")


def test_log_append_time_stamped_again_after_a_give_up(tmp_path):
    """A give-up after the offsets and the append time were written into the buffer: the pool's append of the
    same buffer writes the offsets, the time and the CRC again (the records read back check their CRC)."""
    size = len(_batch(b"v" * 100))
    with _open(tmp_path, **{"segment.bytes": 2 * size, "message.timestamp.type": "LogAppendTime"}) as mgr:
        log = mgr.get_or_create_log(TOPIC, 0)
        log.append_batches(_batch(b"v" * 100))
        log.try_append_batches(_batch(b"v" * 100), in_place=True)
        data = _batch(b"x" * 100)
        _gives_up(log, data, "roll the segment")
        assert RecordBatch(data).base_offset == 2 and RecordBatch(data).max_timestamp == T0
        clock = mgr.clock
        assert isinstance(clock, ManualClock)
        clock.advance(5000)
        info = log.append_batches(data, in_place=True)
        assert info.first_offset == 2 and info.max_timestamp == T0 + 5000
        batch = RecordBatch(data)
        batch.ensure_valid()
        assert batch.max_timestamp == T0 + 5000
        last = list(log.read_records())[-1]
        assert (last.offset, last.value, last.timestamp) == (2, b"x" * 100, T0 + 5000)


def test_producer_state_checked_now_as_in_the_pool(tmp_path):
    """An idempotent producer's batches: appended now, a retried one answered with its first offsets and nothing
    written, an out-of-order one refused; a give-up leaves the producer state as it was."""
    with _open(tmp_path, **{"flush.messages": 4}) as mgr:
        log = mgr.get_or_create_log(TOPIC, 0)
        log.append_batches(_batch(b"a", producer_id=7, epoch=0, sequence=0))
        first = log.try_append_batches(_batch(b"b", b"c", producer_id=7, epoch=0, sequence=1), in_place=True)
        assert (first.first_offset, first.duplicate) == (1, False)
        again = log.try_append_batches(_batch(b"b", b"c", producer_id=7, epoch=0, sequence=1), in_place=True)
        assert (again.first_offset, again.last_offset, again.duplicate) == (1, 2, True)
        with pytest.raises(OutOfOrderSequenceError):
            log.try_append_batches(_batch(b"z", producer_id=7, epoch=0, sequence=9), in_place=True)
        # the 4th record is due for a flush: a give-up, the producer's state untouched
        _gives_up(log, _batch(b"d", producer_id=7, epoch=0, sequence=3), "flushed")
        assert log.append_batches(_batch(b"d", producer_id=7, epoch=0, sequence=3), in_place=True).first_offset == 3
        assert _values(log) == [b"a", b"b", b"c", b"d"]
        assert log.producer_state.producers[7].last_seq == 3
