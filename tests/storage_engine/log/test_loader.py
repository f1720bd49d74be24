"""Loading and recovery of a partition, one test per crash point (after Kafka's LogLoaderTest).

Each test builds the files a crash would leave by hand (truncating, corrupting, copying and renaming real
segment files), then opens the partition the way the first process after a crash does
(``open_log(..., exclusive=True, had_clean_shutdown=False)``) and checks: every record below the recovery
point is there with its offset, nothing is duplicated, the temporary files are gone.
"""
from __future__ import annotations

import os
import random
import shutil

import pytest

from tests.paths import REAL_KAFKA_FIXTURES
from storage_engine.clock import ManualClock
from storage_engine import layout
from storage_engine.segment.checkpoint import OffsetCheckpointFile
from storage_engine.segment.clean_shutdown import has_clean_shutdown
from storage_engine.config import LogConfig
from storage_engine.config_file import config_from_mapping
from storage_engine.segment.file_records import iter_batches
from storage_engine.log.manager import LogManager
from storage_engine.segment.segment import LogSegment

from ..helpers import (TOPIC, batch, config, files, open_log, partition_dir, read_all, recs, segment_path, get_log, present)

pytestmark = pytest.mark.unit

T0 = 1_700_000_000_000
REAL_KAFKA = str(REAL_KAFKA_FIXTURES)


def one(value: str, ts: int = T0):
    return recs(value, timestamp=ts)


def single_size(value: str = "v000") -> int:
    return len(batch(0, value, timestamp=T0))


def fill(log, n: int, start_ts: int = T0, prefix: str = "v") -> None:
    for i in range(n):
        log.clock.set(T0)
        log.append_records(one(f"{prefix}{log.log_end_offset:03d}", ts=start_ts + i * 10))


def reopen(log_dir, cfg=None, **kw):
    kw.setdefault("had_clean_shutdown", False)
    kw.setdefault("now_ms", T0)
    return open_log(log_dir, cfg, create=False, **kw)


def bases(log) -> list[int]:
    return [s.base_offset for s in log.segments]


def assert_consistent(log, before: list[tuple[int, bytes | None]], recovery_point: int) -> list[tuple[int, bytes | None]]:
    """Offsets strictly increase, nothing is duplicated, every record below the recovery point survived."""
    after = read_all(log)
    offsets = [o for o, _ in after]
    assert offsets == sorted(set(offsets)), "offsets must be unique and increasing"
    kept = [r for r in before if r[0] < recovery_point]
    assert after[:len(kept)] == kept
    assert set(after) <= set(before), "recovery never invents records"
    return after


def temp_files(dir_path) -> list[str]:
    return [n for n in files(dir_path)
            if n.endswith((layout.CLEANED_SUFFIX, layout.SWAP_SUFFIX, layout.DELETED_SUFFIX))]


@pytest.fixture
def crashed_log(log_dir):
    """A log of 4 segments x 5 records (offsets 0..19), flushed up to 10, closed as a crash would leave it
    (no trimming, no flush of the rest). Returns (records, dir)."""
    cfg = config(segment_bytes=5 * single_size(), index_interval_bytes=1)
    log, _ = open_log(log_dir, cfg, now_ms=T0)
    fill(log, 20)
    log.flush(10)
    assert bases(log) == [0, 5, 10, 15]
    records = read_all(log)
    log.close(clean=False)
    return records, partition_dir(log_dir), cfg


# ------------------------------------------------------------------ torn and corrupt data

def test_torn_tail_write(crashed_log, log_dir):
    records, d, cfg = crashed_log
    path = segment_path(d, 15)
    size = os.path.getsize(path)
    last = single_size()
    with open(path, "r+b") as f:
        f.truncate(size - last // 2)  # the last batch is half written
    log, res = reopen(log_dir, cfg, recovery_point_checkpoint=10)
    assert res.bytes_truncated == last - last // 2
    assert log.log_end_offset == 19
    assert assert_consistent(log, records, 10) == records[:19]
    assert log.recovery_point == 10
    assert os.path.getsize(path) == size - last
    # the log goes on at the torn offset
    log.clock.set(T0)
    log.append_records(one("again"))
    assert read_all(log)[-1] == (19, b"again")
    log.close(clean=True)


def test_torn_tail_header_only(crashed_log, log_dir):
    """Fewer bytes than an entry header left at the end."""
    records, d, cfg = crashed_log
    with open(segment_path(d, 15), "ab") as f:
        f.write(b"\x00\x00\x00")
    log, res = reopen(log_dir, cfg, recovery_point_checkpoint=10)
    assert res.bytes_truncated == 3
    assert assert_consistent(log, records, 10) == records
    log.close(clean=False)


def test_corrupt_batch_in_middle_of_unflushed_segment(crashed_log, log_dir):
    """Recovery truncates the segment at the corrupt batch and deletes every later unflushed segment."""
    records, d, cfg = crashed_log
    size = single_size()
    with open(segment_path(d, 10), "r+b") as f:
        f.seek(2 * size + 65)  # inside the payload (CRC-covered) of the batch of offset 12
        b = f.read(1)
        f.seek(2 * size + 65)
        f.write(bytes([b[0] ^ 0x55]))
    log, res = reopen(log_dir, cfg, recovery_point_checkpoint=10)
    assert bases(log) == [0, 5, 10]
    assert log.log_end_offset == 12
    assert res.bytes_truncated == 3 * size
    assert assert_consistent(log, records, 10) == records[:12]
    assert not os.path.exists(segment_path(d, 15))
    assert not os.path.exists(segment_path(d, 15, layout.INDEX_SUFFIX))
    assert log.recovery_point == 10
    log.close(clean=True)


def test_corruption_below_recovery_point_is_not_scanned(crashed_log, log_dir):
    """Segments wholly below the recovery point are trusted (Kafka recovers from the recovery point on)."""
    records, d, cfg = crashed_log
    with open(segment_path(d, 0), "r+b") as f:
        f.seek(70)
        b = f.read(1)
        f.seek(70)
        f.write(bytes([b[0] ^ 0x55]))
    log, res = reopen(log_dir, cfg, recovery_point_checkpoint=10)
    assert res.bytes_truncated == 0
    assert bases(log) == [0, 5, 10, 15]
    assert log.log_end_offset == 20
    log.close(clean=False)


def test_offsets_going_backwards_in_unflushed_segment(crashed_log, log_dir):
    """The base offset field is outside the CRC: a batch whose offsets go backwards passes the CRC check but
    cannot be indexed. Kafka empties that segment (truncates it to its base) and deletes later ones."""
    records, d, cfg = crashed_log
    size = single_size()
    with open(segment_path(d, 10), "r+b") as f:
        f.seek(3 * size)  # the batch of offset 13 claims offset 11
        f.write((11).to_bytes(8, "big"))
    log, res = reopen(log_dir, cfg, recovery_point_checkpoint=10)
    assert bases(log) == [0, 5, 10]
    assert log.log_end_offset == 10
    assert assert_consistent(log, records, 10) == records[:10]
    log.clock.set(T0)
    log.append_records(one("next"))
    assert read_all(log)[-1] == (10, b"next")
    log.close(clean=True)


def test_corrupt_log(log_dir):
    """testCorruptLog: random bytes appended to the active .log and .index are cut away, the data is intact."""
    rng = random.Random(7)
    cfg = config(segment_bytes=1000, index_interval_bytes=1, max_message_bytes=64 * 1024)
    for attempt in range(10):
        topic = f"corrupt{attempt}"
        log, _ = open_log(log_dir, cfg, topic=topic, now_ms=T0)
        n = 50 + rng.randrange(50)
        fill(log, n)
        records = read_all(log)
        active = log.active_segment
        log_path, index_path = active.log.path, active.offset_index.path
        log.close(clean=True)
        with open(log_path, "ab") as f:
            f.write(bytes(rng.randrange(256) for _ in range(rng.randrange(1024) + 1)))
        with open(index_path, "ab") as f:
            f.write(bytes(rng.randrange(256) for _ in range(rng.randrange(1024) + 1)))
        log, _ = reopen(log_dir, cfg, topic=topic, recovery_point_checkpoint=50)
        assert log.log_end_offset == n
        assert read_all(log) == records
        log.active_segment.offset_index.sanity_check()
        log.close(clean=True)


# ------------------------------------------------------------------ indexes

def build_index_log(log_dir, cfg):
    log, _ = open_log(log_dir, cfg, now_ms=T0)
    for i in range(200):
        log.append_records(recs(f"{i:010d}", timestamp=T0 + i * 10))
    entries = [(s.offset_index.entries, s.time_index.entries) for s in log.segments]
    return log, entries


def check_index_log(log, entries=None):
    assert log.log_end_offset == 200
    if entries is not None:
        assert [(s.offset_index.entries, s.time_index.entries) for s in log.segments] == entries
    assert log.segments[0].offset_index.entries > 0 and log.segments[0].time_index.entries > 0
    for i in range(200):
        data = log.read(i, 100)
        assert next(iter_batches(data.data)).last_offset == i
        assert log.offset_for_timestamp(T0 + i * 10)[1] == i
    for seg in log.segments:
        seg.offset_index.sanity_check()
        seg.time_index.sanity_check()


@pytest.mark.parametrize("which", [(layout.INDEX_SUFFIX,), (layout.TIME_INDEX_SUFFIX,),
                                   (layout.INDEX_SUFFIX, layout.TIME_INDEX_SUFFIX)])
def test_index_rebuild(log_dir, which):
    """testIndexRebuild: deleted .index / .timeindex files are rebuilt on an unclean reopen."""
    cfg = config(segment_bytes=600, index_interval_bytes=1)
    log, entries = build_index_log(log_dir, cfg)
    paths = [p for s in log.segments for p in (s.offset_index.path, s.time_index.path)]
    log.close(clean=True)
    for p in paths:
        if p.endswith(which):
            os.remove(p)
    log, _ = reopen(log_dir, cfg)
    check_index_log(log, entries)
    log.close(clean=True)


def test_missing_offset_index_rebuilt_after_clean_shutdown(log_dir):
    """A missing .index forces recovery of its segment even after a clean shutdown."""
    cfg = config(segment_bytes=600, index_interval_bytes=1)
    log, entries = build_index_log(log_dir, cfg)
    paths = [s.offset_index.path for s in log.segments]
    log.close(clean=True)
    for p in paths:
        os.remove(p)
    log, res = reopen(log_dir, cfg, had_clean_shutdown=True, recovery_point_checkpoint=200)
    assert res.recovered_segments == len(paths)
    check_index_log(log, entries)
    log.close(clean=True)


@pytest.mark.parametrize("clean", [False, True])
def test_corrupt_index_rebuild(log_dir, clean):
    """testCorruptIndexRebuild: index files overwritten with garbage are rebuilt (unclean: by recovery from
    0; clean: because they fail the sanity check)."""
    cfg = config(segment_bytes=600, index_interval_bytes=1)
    log, entries = build_index_log(log_dir, cfg)
    paths = [p for s in log.segments for p in (s.offset_index.path, s.time_index.path)]
    log.close(clean=True)
    for p in paths:
        with open(p, "wb") as f:
            f.write(b"  ")
    log, _ = reopen(log_dir, cfg, had_clean_shutdown=clean, recovery_point_checkpoint=200 if clean else 0)
    check_index_log(log, entries)
    log.close(clean=True)


def test_random_garbage_index_rebuilt_after_clean_shutdown(log_dir):
    cfg = config(segment_bytes=600, index_interval_bytes=1)
    log, entries = build_index_log(log_dir, cfg)
    paths = [s.offset_index.path for s in log.segments[:-1]]
    log.close(clean=True)
    rng = random.Random(3)
    for p in paths:
        with open(p, "wb") as f:
            f.write(bytes(rng.randrange(1, 256) for _ in range(96)))
    log, _ = reopen(log_dir, cfg, had_clean_shutdown=True, recovery_point_checkpoint=200)
    check_index_log(log, entries)
    log.close(clean=True)


def test_bogus_index_segments_are_removed(log_dir):
    """testBogusIndexSegmentsAreRemoved: index files without a .log are deleted; the log still works."""
    d = partition_dir(log_dir)
    os.makedirs(d)
    for suffix in layout.INDEX_SUFFIXES:
        open(segment_path(d, 5, suffix), "wb").close()
    open(segment_path(d, 0, layout.INDEX_SUFFIX), "wb").close()
    open(segment_path(d, 0, layout.LOG_SUFFIX), "wb").close()
    cfg = config(segment_bytes=5 * single_size(), segment_index_bytes=1000, index_interval_bytes=1)
    log, res = reopen(log_dir, cfg)
    for suffix in layout.INDEX_SUFFIXES:
        assert not os.path.exists(segment_path(d, 5, suffix))
    assert os.path.getsize(segment_path(d, 0, layout.INDEX_SUFFIX)) > 0
    assert os.path.getsize(segment_path(d, 0, layout.TIME_INDEX_SUFFIX)) > 0
    fill(log, 10)
    assert log.log_end_offset == 10 and bases(log) == [0, 5]
    log.close(clean=True)


# ------------------------------------------------------------------ obsolete files

def test_open_deletes_obsolete_files(log_dir):
    """testOpenDeletesObsoleteFiles: stray .cleaned files are removed at load, and .deleted files once their
    file.delete.delay.ms has passed (before that another process may still read them)."""
    cfg = config(segment_bytes=5 * single_size())
    log, _ = open_log(log_dir, cfg, now_ms=T0)
    fill(log, 20)
    records = read_all(log)
    d = partition_dir(log_dir)
    log.truncate_to(12)  # segment 15 goes to .deleted
    log.close(clean=True)
    shutil.copyfile(segment_path(d, 0), segment_path(d, 0, layout.LOG_SUFFIX, layout.CLEANED_SUFFIX))
    shutil.copyfile(segment_path(d, 5, layout.INDEX_SUFFIX),
                    segment_path(d, 5, layout.INDEX_SUFFIX, layout.CLEANED_SUFFIX))
    assert any(n.endswith(".deleted") for n in files(d))
    log, res = reopen(log_dir, cfg, recovery_point_checkpoint=10, now_ms=T0 + cfg.file_delete_delay_ms - 1)
    assert [n for n in temp_files(d) if not n.endswith(".deleted")] == []
    assert any(n.endswith(".deleted") for n in files(d))
    log.close(clean=True)
    log, res = reopen(log_dir, cfg, recovery_point_checkpoint=10, now_ms=T0 + cfg.file_delete_delay_ms)
    assert temp_files(d) == []
    assert bases(log) == [0, 5, 10]
    assert read_all(log) == records[:12]
    log.close(clean=True)


# ------------------------------------------------------------------ the swap protocol (4.7)

@pytest.fixture
def swap_log(log_dir):
    """4 segments of 4 keyed single-record batches (offsets 0..15, keys cycling k0..k3), closed cleanly.

    ``cleaned(base, old_bases)`` writes a ``.cleaned`` segment holding, of the old segments' batches, only
    the last batch of each key within them (offsets unchanged, the last batch always kept)."""
    cfg = config(segment_bytes=4 * len(batch(0, "v000", keys=["k0"], timestamp=T0)), index_interval_bytes=1)
    log, _ = open_log(log_dir, cfg, now_ms=T0)
    for i in range(16):
        log.append_records(recs(f"v{i:03d}", keys=[f"k{i % 3}"], timestamp=T0 + i))
    assert bases(log) == [0, 4, 8, 12]
    records = read_all(log)
    log.close(clean=True)
    d = partition_dir(log_dir)

    def cleaned(base: int, old_bases: list[int]) -> list[tuple[int, bytes | None]]:
        raw = []
        for ob in old_bases:
            seg = LogSegment.open(d, ob, LogConfig(), now_ms=T0, file_already_exists=True, writable=False)
            raw += [(b.last_offset, b.raw(), b.records()[0].key) for b in seg.batches()]
            seg.close(trim=False)
        last_of_key = {}
        for off, _, key in raw:
            last_of_key[bytes(present(key))] = off
        keep = [(off, data) for off, data, key in raw if last_of_key[bytes(present(key))] == off or off == raw[-1][0]]
        new = LogSegment.open(d, base, config(index_interval_bytes=1, segment_index_bytes=cfg.segment_index_bytes),
                              now_ms=T0, suffix=layout.CLEANED_SUFFIX)
        for off, data in keep:
            new.append(off, T0 + off, off, data)
        new.on_become_inactive_segment()
        new.flush()
        new.close()
        kept = {off for off, _ in keep}
        return [r for r in records if r[0] in kept]

    return records, d, cfg, cleaned


def rename_suffix(d, base: int, old: str, new: str) -> None:
    for suffix in (layout.LOG_SUFFIX, layout.INDEX_SUFFIX, layout.TIME_INDEX_SUFFIX):
        src = segment_path(d, base, suffix, old)
        if os.path.exists(src):
            os.replace(src, segment_path(d, base, suffix, new))


def open_after_crash(log_dir, cfg):
    return reopen(log_dir, cfg, recovery_point_checkpoint=16)


def test_swap_crash_after_cleaned_written(swap_log, log_dir):
    """Crash while/after writing ``.cleaned``: the cleaned output is discarded, the log is as before."""
    records, d, cfg, cleaned = swap_log
    cleaned(0, [0, 4])
    log, _ = open_after_crash(log_dir, cfg)
    assert temp_files(d) == []
    assert bases(log) == [0, 4, 8, 12]
    assert read_all(log) == records
    log.close(clean=True)


def test_swap_crash_after_some_renames_to_swap(swap_log, log_dir):
    """Renames ``.cleaned -> .swap`` go in descending base order; a crash between them leaves a ``.swap``
    at or above the smallest ``.cleaned``: everything is discarded, the log is as before."""
    records, d, cfg, cleaned = swap_log
    cleaned(0, [0])
    cleaned(4, [4])
    rename_suffix(d, 4, layout.CLEANED_SUFFIX, layout.SWAP_SUFFIX)
    log, res = open_after_crash(log_dir, cfg)
    assert temp_files(d) == []
    assert bases(log) == [0, 4, 8, 12]
    assert read_all(log) == records
    log.close(clean=True)


def test_swap_crash_between_file_renames_of_one_segment(swap_log, log_dir):
    """The .log of the cleaned segment became .swap but its .index is still .cleaned: discarded."""
    records, d, cfg, cleaned = swap_log
    cleaned(0, [0, 4])
    os.replace(segment_path(d, 0, layout.LOG_SUFFIX, layout.CLEANED_SUFFIX),
               segment_path(d, 0, layout.LOG_SUFFIX, layout.SWAP_SUFFIX))
    log, _ = open_after_crash(log_dir, cfg)
    assert temp_files(d) == []
    assert read_all(log) == records
    log.close(clean=True)


def test_swap_crash_after_all_swap_before_old_deleted(swap_log, log_dir):
    """Every ``.swap`` exists, the old segments are untouched: the load completes the swap."""
    records, d, cfg, cleaned = swap_log
    expected = cleaned(0, [0, 4]) + records[8:]
    assert len(expected) < len(records)
    rename_suffix(d, 0, layout.CLEANED_SUFFIX, layout.SWAP_SUFFIX)
    log, res = open_after_crash(log_dir, cfg)
    assert temp_files(d) == []
    assert bases(log) == [0, 8, 12]
    assert not os.path.exists(segment_path(d, 4))
    assert read_all(log) == expected
    log.close(clean=True)


def test_swap_crash_after_old_deleted_before_swap_renamed(swap_log, log_dir):
    """Old segments renamed ``.deleted``, the ``.swap`` not yet renamed: the load completes the swap."""
    records, d, cfg, cleaned = swap_log
    expected = cleaned(0, [0, 4]) + records[8:]
    rename_suffix(d, 0, layout.CLEANED_SUFFIX, layout.SWAP_SUFFIX)
    rename_suffix(d, 0, "", layout.DELETED_SUFFIX)
    rename_suffix(d, 4, "", layout.DELETED_SUFFIX)
    log, _ = open_after_crash(log_dir, cfg)
    assert temp_files(d) == []
    assert bases(log) == [0, 8, 12]
    assert read_all(log) == expected
    log.close(clean=True)


def test_swap_crash_with_two_new_segments_partly_renamed_final(swap_log, log_dir):
    """Two cleaned segments, both ``.swap``; old files ``.deleted``; one ``.swap`` already renamed to its
    final name: the load finishes the other."""
    records, d, cfg, cleaned = swap_log
    expected = cleaned(0, [0]) + cleaned(4, [4]) + records[8:]
    for base in (4, 0):
        rename_suffix(d, base, layout.CLEANED_SUFFIX, layout.SWAP_SUFFIX)
    for base in (0, 4):
        rename_suffix(d, base, "", layout.DELETED_SUFFIX)
    rename_suffix(d, 0, layout.SWAP_SUFFIX, "")
    log, _ = open_after_crash(log_dir, cfg)
    # The old files stay as .deleted until file.delete.delay.ms has passed; nothing else is left over.
    assert [n for n in temp_files(d) if not n.endswith(".deleted")] == []
    assert bases(log) == [0, 4, 8, 12]
    assert read_all(log) == expected
    log.close(clean=True)


def test_swap_without_index_files_completes(swap_log, log_dir):
    """A ``.swap`` segment whose index files are missing (Kafka creates indexes lazily) still completes; its
    indexes are rebuilt."""
    records, d, cfg, cleaned = swap_log
    expected = cleaned(0, [0, 4]) + records[8:]
    os.replace(segment_path(d, 0, layout.LOG_SUFFIX, layout.CLEANED_SUFFIX),
               segment_path(d, 0, layout.LOG_SUFFIX, layout.SWAP_SUFFIX))
    for suffix in (layout.INDEX_SUFFIX, layout.TIME_INDEX_SUFFIX):
        os.remove(segment_path(d, 0, suffix, layout.CLEANED_SUFFIX))
    log, _ = open_after_crash(log_dir, cfg)
    assert temp_files(d) == []
    assert bases(log) == [0, 8, 12]
    assert read_all(log) == expected
    assert log.segments[0].offset_index.entries > 0
    log.close(clean=True)


# ------------------------------------------------------------------ shutdown state and offsets

def manager_config(log_dir, **broker):
    return config_from_mapping({"broker": {"log.dirs": str(log_dir), **broker}})


def test_clean_shutdown_skips_recovery(log_dir):
    """testCleanShutdownFile: with the clean-shutdown marker no segment is recovered, even with recovery
    point 0 (a corrupt byte in the first segment stays); without it, recovery runs from 0 and cuts there."""
    cfg = manager_config(log_dir, **{"log.segment.bytes": 5 * single_size(), "log.index.interval.bytes": 1})
    mgr = LogManager.open(cfg, clock=ManualClock(T0))
    log = mgr.get_or_create_log(TOPIC, 0)
    fill(log, 20)
    records = read_all(log)
    mgr.close()
    assert has_clean_shutdown(str(log_dir))
    d = partition_dir(log_dir)
    with open(segment_path(d, 0), "r+b") as f:
        f.seek(70)
        b = f.read(1)
        f.seek(70)
        f.write(bytes([b[0] ^ 0x55]))
    def log_files():
        return {n: open(os.path.join(d, n), "rb").read() for n in files(d) if n.endswith(layout.LOG_SUFFIX)}

    before = log_files()
    assert len(before) == 4
    rp_file = OffsetCheckpointFile(os.path.join(str(log_dir), layout.RECOVERY_POINT_CHECKPOINT))
    rp_file.write({(TOPIC, 0): 0})

    mgr = LogManager.open(cfg, clock=ManualClock(T0))
    assert not has_clean_shutdown(str(log_dir)), "the marker is consumed at startup"
    log = get_log(mgr, TOPIC, 0)
    assert log.log_end_offset == 20
    assert log.recovery_point == 20
    assert log_files() == before, "no segment was recovered or truncated"
    assert len(log.segments) == 4
    mgr.close()

    # the same files without the marker: recovery from 0 truncates at the corrupt batch
    os.remove(os.path.join(str(log_dir), layout.CLEAN_SHUTDOWN_FILE))
    rp_file.write({(TOPIC, 0): 0})
    mgr = LogManager.open(cfg, clock=ManualClock(T0))
    log = get_log(mgr, TOPIC, 0)
    assert log.log_end_offset == 0
    assert read_all(log) == []
    assert records  # (the records were there before)
    mgr.close()


def test_log_end_less_than_start_after_reopen(log_dir):
    """testLogEndLessThanStartAfterReopen: recovery leaves a log end below the log start checkpoint, so the
    log is restarted as a single empty segment at the log start."""
    log, _ = open_log(log_dir, now_ms=T0)
    for i in range(5):
        log.append_records(one(str(i)))
        log.roll()
    assert len(log.segments) == 6
    log.delete_records(4)
    assert log.log_end_offset > log.log_start_offset == 4
    second = log.segments[1]
    with open(second.log.path, "wb") as f:  # overwrite segment 1 with garbage
        f.write(b"corruptRecord")
    d = partition_dir(log_dir)
    log.close(clean=False)
    log, _ = reopen(log_dir, log_start_offset_checkpoint=4, recovery_point_checkpoint=0)
    assert bases(log) == [4]
    assert (log.log_start_offset, log.log_end_offset) == (4, 4)
    seg = log.segments[0]
    for suffix in (layout.LOG_SUFFIX, layout.INDEX_SUFFIX, layout.TIME_INDEX_SUFFIX):
        assert os.path.exists(segment_path(d, 4, suffix))
    assert seg.size == 0
    log.append_records(one("x"))
    assert read_all(log) == [(4, b"x")]
    log.close(clean=True)


def test_log_recovers_to_correct_offset(log_dir):
    """testLogRecoversToCorrectOffset: indexes and offsets identical after recovery; the recovery point is
    not advanced by recovery itself, only by the next flush."""
    message_size = 100
    cfg = config(segment_bytes=7 * message_size, index_interval_bytes=3 * message_size,
                 segment_index_bytes=4096)
    log, _ = open_log(log_dir, cfg, now_ms=T0)
    rng = random.Random(1)
    for i in range(100):
        log.append_records([recs(bytes(rng.randrange(256) for _ in range(message_size)),
                                 timestamp=T0 + i * 10)[0]])
    assert log.log_end_offset == 100
    active = log.active_segment
    last_index_offset = active.offset_index.last_offset
    index_entries = active.offset_index.entries
    last_time_ts = active.largest_timestamp()
    time_entries = active.time_index.entries + (0 if active.time_index.last_entry[1] == 99 else 1)
    records = read_all(log)
    log.close(clean=True)

    def verify(log, recovery_point):
        assert log.recovery_point == recovery_point
        assert log.log_end_offset == 100
        a = log.active_segment
        assert a.offset_index.last_offset == last_index_offset
        assert a.offset_index.entries == index_entries
        assert a.time_index.last_entry == (last_time_ts, 99)
        assert a.time_index.entries == time_entries
        assert read_all(log) == records

    log, _ = reopen(log_dir, cfg, recovery_point_checkpoint=100)
    verify(log, 100)
    log.close(clean=False)

    log, res = reopen(log_dir, cfg, recovery_point_checkpoint=10)
    assert res.recovered_segments >= 1
    verify(log, 10)
    log.flush()
    verify(log, 100)
    log.close(clean=True)


def test_reopen_then_truncate(log_dir):
    """testReopenThenTruncate: truncation after an unclean reopen deletes the higher segments."""
    cfg = config(segment_bytes=1000, index_interval_bytes=1, segment_index_bytes=10000)
    log, _ = open_log(log_dir, cfg, now_ms=T0)
    fill(log, 100)
    assert len(log.segments) > 1
    log.close(clean=True)
    log, _ = reopen(log_dir, cfg)
    log.truncate_to(3)
    assert len(log.segments) == 1
    assert log.log_end_offset == 3
    assert [o for o, _ in read_all(log)] == [0, 1, 2]
    log.close(clean=True)


def test_unclean_close_keeps_flushed_data_and_preallocated_tail_is_cut(log_dir):
    """An untrimmed preallocated active segment (a crash before trim) loads: the zero tail is cut away."""
    cfg = config(segment_bytes=64 * 1024, preallocate=True)
    log, _ = open_log(log_dir, cfg, now_ms=T0)
    fill(log, 5)
    records = read_all(log)
    path = log.active_segment.log.path
    log.flush()
    log.close(clean=False)
    assert os.path.getsize(path) == 64 * 1024
    log, res = reopen(log_dir, cfg, recovery_point_checkpoint=5)
    assert read_all(log) == records
    assert log.log_end_offset == 5
    log.close(clean=True)
    assert os.path.getsize(path) == sum(len(batch(0, present(v).decode(), timestamp=T0)) for _, v in records)


# ------------------------------------------------------------------ segments written by real Kafka

@pytest.mark.parametrize("name,base,offsets", [
    ("cluster-metadata-a.00000000000000000000.log", 0, [0, 1, 2, 3]),
    ("cluster-metadata-b.00000000000000000001.log", 1, [1, 2, 3]),
])
@pytest.mark.parametrize("clean", [False, True])
def test_real_kafka_segments_load(log_dir, name, base, offsets, clean):
    src = os.path.join(REAL_KAFKA, name)
    # shared/ always sits beside the repository (locally and in CI): a missing fixture is a failure.
    assert os.path.exists(src), f"real-Kafka fixture {src} is missing"
    topic = "meta"
    d = partition_dir(log_dir, topic)
    os.makedirs(d)
    dst = segment_path(d, base)
    shutil.copyfile(src, dst)
    original = open(src, "rb").read()
    log, res = open_log(log_dir, topic=topic, create=False, had_clean_shutdown=clean, now_ms=T0)
    assert res.bytes_truncated == 0
    assert (log.log_start_offset, log.log_end_offset) == (base, offsets[-1] + 1)
    assert [r.offset for r in log.read_records()] == offsets
    assert open(dst, "rb").read() == original, "loading must not change a valid segment"
    log.close(clean=True)
    assert open(dst, "rb").read() == original
