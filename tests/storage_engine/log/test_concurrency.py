"""Several real processes on one partition (ARCHITECTURE.md section 4).

Every test starts child Python processes (``tests/storage_engine/procs/``) that open the log through
``LogManager`` and append or read, while this process rolls, flushes, checkpoints, deletes and reads the same
partition, or kills a writer with SIGKILL in the middle of its appends. A child acknowledges a record on
stdout only after ``append_records`` returned, so "acknowledged" has the same meaning as for a producer.

Every loop is bounded by a count and by a deadline, and every child is killed at teardown, so a hang shows
up as a failure, never as a stuck run.
"""
from __future__ import annotations

import os
import io
import pathlib
import random
import signal
import subprocess
import sys
import threading
import time
from typing import cast

import pytest

from tests.paths import REPO
from storage_engine import layout
from storage_engine.config_file import load_config
from storage_engine.segment.file_records import FileRecords
from storage_engine.log.manager import LogManager
from storage_engine.record.record_batch import build_batch
from storage_engine.record.records import SimpleRecord
from storage_engine.inspection.verify import verify_log_dirs
from tests.storage_engine.procs.payloads import digest, make_payload, payload_ok, payload_tag
from tests.storage_engine.procs.reader import prefix_digest
from tests.storage_engine.helpers import get_log
from tests.storage_engine.kernels import split_by_process_fixture

pytestmark = pytest.mark.slow

# Once, not once per kernel implementation: the work is in child processes (see split_by_process_fixture).
kernels = split_by_process_fixture()

PROCS = pathlib.Path(__file__).resolve().parent.parent / "procs"
TOPIC = "events"
CHILD_TIMEOUT_S = 60


# -- helpers ---------------------------------------------------------------------------------------------------

def write_config(tmp_path: pathlib.Path, **broker) -> str:
    dirs = broker.pop("dirs", ["logs-a"])
    lines = ["broker:", f"  log.dirs: [{', '.join(dirs)}]"]
    lines += [f"  {k}: {v}" for k, v in broker.items()]
    path = tmp_path / "storage.yaml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


class Child:
    """A child process whose stdout lines are collected by a thread as they arrive."""

    def __init__(self, script: str, *args: str, stderr_path: pathlib.Path):
        # faulthandler: a child killed by SIGBUS/SIGSEGV still leaves its Python stack in its stderr file.
        env = dict(os.environ, PYTHONFAULTHANDLER="1",
                   PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        self._stderr = open(stderr_path, "wb")
        self.stderr_path = stderr_path
        self.proc = subprocess.Popen([sys.executable, str(PROCS / script), *args], stdout=subprocess.PIPE,
                                     stderr=self._stderr, env=env, cwd=str(REPO))
        self.lines: list[str] = []
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._pump, daemon=True)
        self._reader.start()

    def _pump(self) -> None:
        buf = b""
        while True:
            assert self.proc.stdout is not None
            chunk = cast(io.BufferedReader, self.proc.stdout).read1(65536)
            if not chunk:
                break
            buf += chunk
            *complete, buf = buf.split(b"\n")
            with self._lock:
                self.lines.extend(c.decode() for c in complete)
        # A line cut by SIGKILL has no newline: it was never fully acknowledged, so it is dropped.

    def snapshot(self) -> list[str]:
        with self._lock:
            return list(self.lines)

    def wait_for(self, predicate, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if predicate(self.snapshot()):
                return True
            if self.proc.poll() is not None:
                self._reader.join(5)
                return predicate(self.snapshot())
            time.sleep(0.005)
        return False

    def wait_ready(self) -> None:
        assert self.wait_for(lambda ls: "READY" in ls, CHILD_TIMEOUT_S), self.failure("never became ready")

    def acks(self) -> list[tuple[int, str, str, int]]:
        out = []
        for line in self.snapshot():
            if line.startswith("ACK "):
                _, offset, dig, tag, n = line.split()
                out.append((int(offset), dig, tag, int(n)))
        return out

    def kill9(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(CHILD_TIMEOUT_S)
        self._reader.join(5)

    def finish(self) -> int:
        rc = self.proc.wait(CHILD_TIMEOUT_S)
        self._reader.join(5)
        return rc

    def failure(self, what: str) -> str:
        self._stderr.flush()
        return f"child {cast(list[str], self.proc.args)[1:]} {what}; stderr:\n{self.stderr_path.read_text(errors='replace')[-4000:]}"

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(CHILD_TIMEOUT_S)
        self._stderr.close()


@pytest.fixture
def children(tmp_path):
    started: list[Child] = []

    def start(script: str, *args: str) -> Child:
        child = Child(script, *args, stderr_path=tmp_path / f"child-{len(started)}.stderr")
        started.append(child)
        return child

    yield start
    for child in started:
        child.close()


def appender(start, cfg: str, tag: str, **opts) -> Child:
    args = ["--config", cfg, "--topic", TOPIC, "--partition", "0", "--tag", tag]
    for k, v in opts.items():
        args += [f"--{k.replace('_', '-')}", str(v)]
    return start("appender.py", *args)


def read_log(log) -> dict[int, bytes]:
    """Every record from the log start, checking offsets strictly increase (so none is repeated)."""
    log.refresh()
    out: dict[int, bytes] = {}
    previous = -1
    for rec in log.read_records(log.log_start_offset):
        assert rec.offset > previous, f"offset {rec.offset} after {previous}"
        previous = rec.offset
        out[rec.offset] = rec.value
    return out


def assert_acks_present(acks, records: dict[int, bytes], deleted_below: int = 0) -> None:
    for offset, dig, tag, n in acks:
        if offset < deleted_below:
            continue
        assert offset in records, f"acknowledged offset {offset} ({tag} append {n}) is missing"
        assert digest(records[offset]) == dig, f"acknowledged offset {offset} reads back different bytes"


def assert_no_damage(cfg: str) -> dict:
    report = verify_log_dirs(load_config(cfg))
    assert not report["damaged"], report["problems"]
    return report


# -- one writer, maintenance in this process ----------------------------------------------------------------------

def test_maintenance_in_this_process_while_a_child_appends(tmp_path, children):
    cfg = write_config(tmp_path, **{"log.segment.bytes": 8192, "log.index.interval.bytes": 512})
    config = load_config(cfg)
    mgr = LogManager.open(config)
    try:
        log = mgr.get_or_create_log(TOPIC, 0)
        child = appender(children, cfg, "w", appends=400, records_per_append=3, payload_bytes=150,
                         max_seconds=40)
        child.wait_ready()
        deleted_below = 0
        ops = {"roll": 0, "flush": 0, "checkpoint": 0, "delete": 0, "read": 0}
        deadline = time.monotonic() + 45
        i = 0
        while child.proc.poll() is None and i < 2000 and time.monotonic() < deadline:
            step = i % 5
            i += 1
            if step == 0:
                log.roll()
                ops["roll"] += 1
            elif step == 1:
                assert log.flush() <= log.log_end_offset
                ops["flush"] += 1
            elif step == 2:
                written = mgr.checkpoint()
                assert f"{TOPIC}-0" in written[config.log_dirs[0]]["recovery_points"]
                ops["checkpoint"] += 1
            elif step == 3:
                with log.locked():
                    segments = log.segments
                    # Only whole segments far below the end, never the active one: what goes is exactly the
                    # offsets below the next segment's base, which becomes the log start offset.
                    if len(segments) > 4:
                        gone = log.delete_segments_locked(segments[:2], int(time.time() * 1000))
                        assert [s.base_offset for s in gone] == [s.base_offset for s in segments[:2]]
                        assert log.log_start_offset == segments[2].base_offset
                        deleted_below = log.log_start_offset
                        ops["delete"] += 1
            else:
                acked = child.acks()
                records = read_log(log)
                assert log.log_start_offset == deleted_below
                assert_acks_present(acked, records, deleted_below)
                ops["read"] += 1
            time.sleep(0.002)
        assert child.finish() == 0, child.failure("failed")
        assert child.snapshot()[-1] == "DONE"
        assert all(ops.values()), f"some maintenance never ran while the child appended: {ops}"

        acked = child.acks()
        assert len(acked) == 1200
        offsets = [a[0] for a in acked]
        assert offsets == sorted(set(offsets)), "the child's acknowledged offsets are not strictly increasing"
        records = read_log(log)
        assert_acks_present(acked, records, deleted_below)
        # Nothing but deliberate deletion is missing: the log is every offset from its start to its end.
        assert sorted(records) == list(range(deleted_below, log.log_end_offset))
        assert log.log_end_offset == 1200
        assert {o for o in offsets if o < deleted_below} == set(range(deleted_below))
        assert all(payload_ok(v) for v in records.values())
        assert_no_damage(cfg)
        mgr.checkpoint()
    finally:
        mgr.close()
    # The checkpoints a new process starts from agree with the log.
    with LogManager.open(load_config(cfg)) as again:
        log = get_log(again, TOPIC, 0)
        assert log.log_start_offset == deleted_below and log.log_end_offset == 1200
        assert_acks_present(acked, read_log(log), deleted_below)


# -- SIGKILL of a writer in the middle of its appends -----------------------------------------------------------

def torn_copy_of_a_batch(base_offset: int) -> bytes:
    """The first half of a valid batch: what a writer killed inside its write() leaves behind."""
    batch = build_batch([SimpleRecord(b"torn", b"x" * 300)], base_offset=base_offset)
    return batch[: len(batch) // 2]


# (random payload bytes, records per append, most appends acknowledged before the kill) per round. Rolls
# every few milliseconds (log.roll.ms) put kills inside rolls; multi-megabyte writes are the ones a SIGKILL
# really tears (the kernel stops a large write() between pages). Round 2 also gets a torn .log tail written
# here, so the repair runs whatever the timing of the kills was (a torn index entry has its own test below).
KILL_ROUNDS = [(200, 4, 200), (20000, 4, 60), (3000, 4, 100), (3_000_000, 1, 4), (200, 4, 200), (20000, 4, 60)]


@pytest.mark.parametrize("keep_open", [True, False], ids=["repaired-by-next-lock-holder", "recovered-at-load"])
def test_sigkill_of_a_writer_mid_append_loses_only_the_unacknowledged_batch(tmp_path, children, keep_open):
    cfg = write_config(tmp_path, **{"log.segment.bytes": 8388608, "message.max.bytes": 8388608,
                                    "log.roll.ms": 25, "log.index.interval.bytes": 1024})
    config = load_config(cfg)
    rng = random.Random(4242)
    all_acks: list[tuple[int, str, str, int]] = []
    mgr = LogManager.open(config) if keep_open else None
    try:
        for rnd, (payload_bytes, per_append, most) in enumerate(KILL_ROUNDS):
            child = appender(children, cfg, f"k{rnd}", appends=100000, records_per_append=per_append,
                             payload_bytes=payload_bytes, max_seconds=30)
            child.wait_ready()
            # Let it append a random amount, then kill it while it is in its tight loop.
            want = rng.randrange(1, most)
            assert child.wait_for(lambda ls: sum(1 for x in ls if x.startswith("ACK")) >= want * per_append,
                                  30), child.failure("did not append")
            time.sleep(rng.random() * 0.05)
            assert child.proc.poll() is None, child.failure("ended before it was killed")
            child.kill9()
            acked = child.acks()
            assert acked, "the child acknowledged nothing"
            all_acks += acked
            log_dir = config.log_dirs[0]
            active = sorted(f for f in os.listdir(os.path.join(log_dir, f"{TOPIC}-0")) if f.endswith(".log"))[-1]
            active_path = os.path.join(log_dir, f"{TOPIC}-0", active)
            if rnd == 2:
                # Make sure at least one round has a torn tail, whatever the timing of the kill was.
                fr = FileRecords(active_path, writable=False)
                try:
                    end = max([b.next_offset for b in fr.batches(0)] or [layout.offset_from_filename(active)])
                finally:
                    fr.close()
                with open(active_path, "ab") as f:
                    f.write(torn_copy_of_a_batch(end))
                report = verify_log_dirs(config)
                assert report["damaged"], "verify did not notice a torn tail"
                assert any(p["file"] == active_path for p in report["problems"]), report["problems"]

            if keep_open:
                assert mgr is not None   # kept open
                log = mgr.get_log(TOPIC, 0)
                assert log is not None
                with log.locked():     # the next lock holder validates the tail and truncates what is torn
                    pass
            else:
                mgr = LogManager.open(config)   # first opener: full load, recovery from the recovery point
                log = mgr.get_log(TOPIC, 0)
                assert log is not None
            assert_no_damage(cfg)

            max_acked = max(a[0] for a in all_acks)
            records = read_log(log)
            assert_acks_present(all_acks, records)
            assert sorted(records) == list(range(log.log_end_offset)), "offsets are not contiguous"
            # At most the batch in flight (written, not yet acknowledged) is there beyond the acknowledgements.
            assert max_acked + 1 <= log.log_end_offset <= max_acked + 1 + per_append
            assert all(payload_ok(v) for v in records.values())

            # A subsequent append works and lands right at the end.
            value = make_payload("parent", rnd, 0, 50)
            info = log.append_records([SimpleRecord(b"after", value)])
            assert info.first_offset == max(records) + 1
            all_acks.append((info.first_offset, digest(value), "parent", rnd))
            assert_no_damage(cfg)
            if not keep_open:
                assert mgr is not None
                mgr.close()
                mgr = None
    finally:
        if mgr is not None:
            mgr.close()
    with LogManager.open(load_config(cfg)) as again:
        log = again.get_log(TOPIC, 0)
        assert log is not None
        records = read_log(log)
        assert_acks_present(all_acks, records)
        assert sorted(records) == list(range(log.log_end_offset))


# -- a writer killed in the middle of a roll ------------------------------------------------------------------------

@pytest.mark.parametrize("step", ["seal", "new-log", "new-index", "new-tindex", "flush"])
def test_a_writer_killed_at_each_step_of_a_roll_leaves_a_log_others_append_to_correctly(tmp_path, children, step):
    cfg = write_config(tmp_path, **{"log.index.interval.bytes": 64})
    config = load_config(cfg)
    acks = []
    with LogManager.open(config) as mgr:            # this process has the partition open all along
        log = mgr.get_or_create_log(TOPIC, 0)
        for n in range(5):
            value = make_payload("parent", n, 0, 100)
            info = log.append_records([SimpleRecord(b"p", value)])
            acks.append((info.first_offset, digest(value), "parent", n))
        crasher = children("crash_at.py", "--config", cfg, "--topic", TOPIC, "--partition", "0", "--at", step)
        assert crasher.finish() == -signal.SIGKILL, crasher.failure(f"did not die at {step}")
        acks += crasher.acks()
        assert [a[0] for a in acks] == list(range(8))

        # A process that opens the log now appends first, at offset 8, wherever the dead roll left the segments
        # (its view must not be an empty segment whose missing indexes have no room, nor a log that ends early).
        late = appender(children, cfg, "late", appends=2, records_per_append=2, payload_bytes=100)
        assert late.finish() == 0, late.failure("failed")
        assert [a[0] for a in late.acks()] == [8, 9, 10, 11]
        acks += late.acks()
        # Then this process, which had the log open before the crash: after them, losing none of theirs.
        value = make_payload("parent", 5, 0, 100)
        info = log.append_records([SimpleRecord(b"p", value)])
        assert info.first_offset == 12
        acks.append((12, digest(value), "parent", 5))
        # And both go on rolling and appending.
        log.roll()
        value = make_payload("parent", 6, 0, 100)
        assert log.append_records([SimpleRecord(b"p", value)]).first_offset == 13
        acks.append((13, digest(value), "parent", 6))
        more = appender(children, cfg, "more", appends=3, records_per_append=1, payload_bytes=100)
        assert more.finish() == 0, more.failure("failed")
        acks += more.acks()
        records = read_log(log)
        assert sorted(records) == list(range(17))
        assert_acks_present(acks, records)
        assert_no_damage(cfg)
    with LogManager.open(config) as again:          # the next first opener loads it the same
        records = read_log(again.get_log(TOPIC, 0))
        assert sorted(records) == list(range(17))
        assert_acks_present(acks, records)
    assert_no_damage(cfg)


@pytest.mark.parametrize("keep_open", [True, False], ids=["repaired-by-next-lock-holder", "recovered-at-load"])
def test_a_writer_killed_inside_a_time_index_entry_leaves_no_damage(tmp_path, children, keep_open):
    """A time-index entry is two stores (timestamp, then offset); a writer killed between them leaves an entry
    naming the segment's base offset, which the next lock holder must drop."""
    cfg = write_config(tmp_path, **{"log.index.interval.bytes": 64})
    config = load_config(cfg)
    mgr = LogManager.open(config) if keep_open else None
    try:
        crasher = children("crash_at.py", "--config", cfg, "--topic", TOPIC, "--partition", "0",
                           "--at", "tindex-entry")
        assert crasher.finish() == -signal.SIGKILL, crasher.failure("did not die in a time-index append")
        acks = crasher.acks()
        tindex = os.path.join(config.log_dirs[0], f"{TOPIC}-0", layout.filename_prefix(0) + ".timeindex")
        report = verify_log_dirs(config)
        assert any(p["file"] == tindex for p in report["problems"]), report
        if keep_open:
            assert mgr is not None   # kept open
            log = mgr.get_log(TOPIC, 0)
            assert log is not None
            with log.locked():
                pass
        else:
            mgr = LogManager.open(config)
            log = mgr.get_log(TOPIC, 0)
            assert log is not None
        assert_no_damage(cfg)
        records = read_log(log)
        assert_acks_present(acks, records)
        # The batch whose index entry was torn had been written whole: it stays (written, not acknowledged).
        assert sorted(records) == list(range(len(acks) + 3))
        info = log.append_records([SimpleRecord(b"after", make_payload("parent", 0, 0, 50))])
        assert info.first_offset == len(records)
        assert_no_damage(cfg)
    finally:
        if mgr is not None:
            mgr.close()


@pytest.mark.parametrize("step", ["new-log", "new-index", "new-tindex"])
def test_a_reader_refreshing_while_a_roll_is_half_done_leaves_the_roll_alone(tmp_path, children, step):
    """The generation moves before a roll creates its files; a lock-free reader that reloaded then would find
    the new segment half made and create its missing index files under the roller (who then has no room in
    them, or a mapping past their end)."""
    cfg = write_config(tmp_path, **{"log.index.interval.bytes": 64})
    with LogManager.open(load_config(cfg)) as mgr:
        log = mgr.get_or_create_log(TOPIC, 0)
        roller = children("crash_at.py", "--config", cfg, "--topic", TOPIC, "--partition", "0", "--at", step,
                          "--pause-s", "1.0", "--appends-after", "4")
        assert roller.wait_for(lambda ls: "PAUSED" in ls, CHILD_TIMEOUT_S), roller.failure("never paused")
        log.refresh()                   # waits for the roll to finish, instead of reloading in the middle of it
        part = os.path.join(load_config(cfg).log_dirs[0], f"{TOPIC}-0")
        newest = max(layout.offset_from_filename(f) for f in os.listdir(part) if f.endswith(".log"))
        for suffix in (".index", ".timeindex"):
            path = layout.segment_file(part, newest, suffix)
            assert not os.path.exists(path) or os.path.getsize(path) > 0, f"{path} is empty: the roll was half done"
        records = read_log(log)
        assert len(records) >= 3 and sorted(records) == list(range(len(records)))
        assert roller.finish() == 0, roller.failure("failed")
        records = read_log(log)
        assert sorted(records) == list(range(15))
        assert_acks_present(roller.acks(), records)
    assert_no_damage(cfg)


# -- two writers ---------------------------------------------------------------------------------------------------

def test_two_processes_appending_to_one_partition_never_interleave_or_lose_records(tmp_path, children):
    per_append, appends = 3, 250
    cfg = write_config(tmp_path, dirs=["logs-a", "logs-b"],
                       **{"log.segment.bytes": 16384, "log.index.interval.bytes": 700})
    # Neither creates the partition first: both race through get_or_create_log.
    writers = [appender(children, cfg, tag, appends=appends, records_per_append=per_append, payload_bytes=120,
                        max_seconds=40) for tag in ("left", "right")]
    for w in writers:
        assert w.finish() == 0, w.failure("failed")
    config = load_config(cfg)
    homes = [d for d in config.log_dirs if os.path.isdir(os.path.join(d, f"{TOPIC}-0"))]
    assert len(homes) == 1, f"{TOPIC}-0 exists in {homes}"

    acks = [a for w in writers for a in w.acks()]
    assert len(acks) == 2 * appends * per_append
    offsets = [a[0] for a in acks]
    assert len(set(offsets)) == len(offsets), "two acknowledgements name the same offset"
    for w in writers:
        own = [a[0] for a in w.acks()]
        assert own == sorted(own), "a writer's offsets went backwards"
        # The records of one append are one batch: contiguous offsets, nothing of the other writer inside.
        by_append: dict[int, list[int]] = {}
        for offset, _, _, n in w.acks():
            by_append.setdefault(n, []).append(offset)
        for n, offs in by_append.items():
            assert offs == list(range(offs[0], offs[0] + per_append)), f"append {n} is split: {offs}"

    with LogManager.open(config) as mgr:
        log = mgr.get_log(TOPIC, 0)
        records = read_log(log)
        assert_acks_present(acks, records)
        assert sorted(records) == list(range(len(acks)))
        tags = [payload_tag(records[o]) for o in sorted(records)]
        for start in range(0, len(tags), per_append):
            assert len(set(tags[start:start + per_append])) == 1, f"batches interleave at offset {start}"
        assert {"left", "right"} <= set(tags)
    assert_no_damage(cfg)


# -- a reader process ----------------------------------------------------------------------------------------------

def test_a_reader_process_sees_a_consistent_prefix_while_a_writer_appends(tmp_path, children):
    cfg = write_config(tmp_path, **{"log.segment.bytes": 8192, "log.index.interval.bytes": 256})
    with LogManager.open(load_config(cfg)) as mgr:
        mgr.get_or_create_log(TOPIC, 0)
        writer = appender(children, cfg, "w", appends=300, records_per_append=2, payload_bytes=100,
                          max_seconds=40, pause_s=0.002)
        reader = children("reader.py", "--config", cfg, "--topic", TOPIC, "--partition", "0", "--rounds", "100000",
                          "--until-count", "600", "--max-seconds", "40")
        assert writer.finish() == 0, writer.failure("failed")
        assert reader.finish() == 0, reader.failure("failed")
    lines = reader.snapshot()
    assert lines[-1] == "DONE"
    assert not [x for x in lines if x.startswith("BAD")], [x for x in lines if x.startswith("BAD")][:5]
    snaps = [x.split() for x in lines if x.startswith("SNAP")]
    assert snaps, "the reader never read"
    acked = sorted((a[0], a[1]) for a in writer.acks())
    assert [a[0] for a in acked] == list(range(600))
    counts = []
    for _, start, count, prefix in snaps:
        start, count = int(start), int(count)
        assert start == 0
        # What the reader saw is exactly the first `count` records the writer acknowledged, in order.
        assert prefix == prefix_digest(acked[:count]), f"snapshot of {count} records is not a prefix"
        counts.append(count)
    assert counts == sorted(counts), "the reader saw the log shrink"
    assert len(set(counts)) >= 2, f"the reader never overlapped the writer: {sorted(set(counts))}"
