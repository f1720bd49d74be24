"""load: opening a log dir, cleanly and after a crash, for two shapes of partition.

**Many small segments** (the per-segment cost):

Setup (timed only as a note): ``log.segment.bytes`` = 4096 and 3 batches of 8 records (100-byte values,
~1 KB per batch) per ``append_batches`` call, so every call after the first rolls: one call, one segment.
The manager is closed cleanly (flush, checkpoints, ``.kafka_cleanshutdown``). Then, interleaved:

* baseline: read every ``.log`` file of the partition start to end (open, ``os.read`` 1 MiB chunks, close);
* ``LogManager.open`` after a clean shutdown (marker present: no segment is read);
* ``LogManager.open`` after an unclean one: the marker, ``recovery-point-offset-checkpoint`` and the
  partition's ``.engine+partition+<topic>-<partition>`` state file (which also carries a recovery point) are removed,
  so every segment is recovered from offset 0: each batch is size- and CRC-checked and both indexes rebuilt.

Every open is checked (clean flag seen, recovery point, log end offset, segment count) before its time counts;
``mgr.close()`` after each open is not timed. At most 3 rounds run, because the close after an unclean open
fsyncs every segment. MB/s is the bytes of all ``.log`` files over the open time.

The engine keeps every segment's files open (a ``.log`` descriptor, both index descriptors and a duplicate
held by each ``mmap``), so the segment count is capped to what ``RLIMIT_NOFILE`` allows; the cap, the
measured descriptors per segment and the limit are printed when it applies. Targets: unclean recovery >= 200
MB/s (not expected at this size: the cost is per segment) and >= 10,000 segments/s for both opens.

**128 MiB segments** (the per-byte cost): ``log.segment.bytes`` = 128 MiB, filled with 128-record batches of
100-byte values (~16 KB, the size of a producer's default ``batch.size``), 2 sealed segments (8 MiB ones with
``--quick``) plus the active one; the same three rows. Target: unclean recovery >= 200 MB/s.
"""
from __future__ import annotations

import math
import os
import resource
import time

from storage_engine.clock import ManualClock
from storage_engine import layout
from storage_engine.segment.clean_shutdown import clean_shutdown_path
from storage_engine.config_file import config_from_mapping
from storage_engine.config import StorageConfig
from storage_engine.log.manager import LogManager
from storage_engine.log.locks import lock_path
from storage_engine.record.record_batch import build_batch

from .harness import (MB, MIB, NOW_MS, Context, Row, Sample, Section, Target, generate_records, open_fd_count,
                      partition_log, raw_read_files, run_interleaved, scratch_dir, timed)

NAME = "load"
TOPIC = "bench-load"
SEGMENT_BYTES = 4096
BATCHES_PER_SEGMENT = 3
RECORDS_PER_BATCH = 8
VALUE_BYTES = 100
SEGMENTS_FULL = 10_000
SEGMENTS_QUICK = 500
# Rounds of this section at most: each unclean round ends with a close that fsyncs every segment.
MAX_ROUNDS = 3
# Descriptors left for the interpreter, libraries and the benchmark itself.
FD_HEADROOM = 512
PROBE_SEGMENTS = (20, 60)
UNCLEAN_TARGET = Target("mb_per_s", 200.0, ">= 200 MB/s")
SEGMENTS_TARGET = Target("units_per_s", 10_000.0, ">= 10,000 segments/s")
LARGE_SEGMENT_BYTES_FULL = 128 * MIB
LARGE_SEGMENT_BYTES_QUICK = 8 * MIB
LARGE_SEGMENTS = 2
LARGE_RECORDS_PER_BATCH = 128
LARGE_BATCHES_PER_APPEND = 64


def _config(log_dir: str, segment_bytes: int = SEGMENT_BYTES) -> StorageConfig:
    return config_from_mapping({"broker": {"log.dirs": [log_dir], "log.segment.bytes": segment_bytes}})


def _segment_payload() -> bytes:
    """``BATCHES_PER_SEGMENT`` batches, concatenated: one ``append_batches`` call fills one segment."""
    records = generate_records(BATCHES_PER_SEGMENT * RECORDS_PER_BATCH, VALUE_BYTES, seed=30)
    payload = b"".join(build_batch(records[i:i + RECORDS_PER_BATCH])
                       for i in range(0, len(records), RECORDS_PER_BATCH))
    if not 2 * len(payload) > SEGMENT_BYTES >= len(payload):
        raise RuntimeError(f"{len(payload)} bytes per append do not fill exactly one {SEGMENT_BYTES}-byte segment")
    return payload


def _build(log_dir: str, segments: int, payload: bytes) -> tuple[list[float], int]:
    """Append until the log has ``segments`` segments, close cleanly. Returns (seconds per append, peak fds)."""
    mgr = LogManager.open(_config(log_dir), clock=ManualClock(NOW_MS))
    try:
        log = mgr.get_or_create_log(TOPIC, 0)
        per_append_s = []
        clock = time.perf_counter
        for _ in range(segments):
            start = clock()
            log.append_batches(payload)
            per_append_s.append(clock() - start)
        peak_fds = open_fd_count()
        if len(log.segments) != segments:
            raise RuntimeError(f"built {len(log.segments)} segments, wanted {segments}")
    finally:
        mgr.close()
    return per_append_s, peak_fds


def _make_unclean(log_dir: str) -> None:
    """What a crash leaves behind: no marker, no recovery point anywhere, so recovery starts at offset 0."""
    os.remove(clean_shutdown_path(log_dir))
    os.remove(os.path.join(log_dir, layout.RECOVERY_POINT_CHECKPOINT))
    os.remove(lock_path(log_dir, layout.partition_dir_name(TOPIC, 0)))


def _open_and_check(log_dir: str, *, clean: bool, records: int, segments: int,
                    segment_bytes: int = SEGMENT_BYTES) -> tuple[Sample, int]:
    """(time of ``LogManager.open``, descriptors open after it); the open is verified and the manager closed
    afterwards (not timed)."""
    config = _config(log_dir, segment_bytes)
    sample, mgr = timed(lambda: LogManager.open(config, clock=ManualClock(NOW_MS)))
    try:
        fds = open_fd_count()
        state = mgr.dirs[log_dir]
        log = partition_log(mgr, TOPIC, 0)
        expected_rp = records if clean else 0
        found = (state.had_clean_shutdown, log.log_end_offset, log.recovery_point, len(log.segments))
        if found != (clean, records, expected_rp, segments):
            raise RuntimeError(f"open after {'clean' if clean else 'unclean'} shutdown found (clean, log end, "
                               f"recovery point, segments) = {found}, expected "
                               f"{(clean, records, expected_rp, segments)}")
    finally:
        mgr.close()
    return sample, fds


def _fds_per_segment(ctx: Context, payload: bytes) -> int:
    """Descriptors the engine holds per segment at its peak (after an unclean open), from two probe logs."""
    peaks = []
    for segments in PROBE_SEGMENTS:
        with scratch_dir(ctx, "load-probe") as log_dir:
            before = open_fd_count()
            _, built = _build(log_dir, segments, payload)
            _make_unclean(log_dir)
            _, opened = _open_and_check(log_dir, clean=False, records=segments * BATCHES_PER_SEGMENT *
                                        RECORDS_PER_BATCH, segments=segments)
            peaks.append(max(built, opened) - before)
    return max(1, math.ceil((peaks[1] - peaks[0]) / (PROBE_SEGMENTS[1] - PROBE_SEGMENTS[0])))


def _raise_fd_limit() -> tuple[int, int]:
    """Raise the soft descriptor limit to the hard one (allowed for any process); returns the old limits."""
    old = resource.getrlimit(resource.RLIMIT_NOFILE)
    if old[0] != old[1]:
        resource.setrlimit(resource.RLIMIT_NOFILE, (old[1], old[1]))
    return old


def run(ctx: Context) -> Section:
    requested = SEGMENTS_QUICK if ctx.quick else SEGMENTS_FULL
    payload = _segment_payload()
    old_limits = _raise_fd_limit()
    try:
        section = _run(ctx, requested, payload)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, old_limits)
    _run_large(ctx, section)
    return section


def _run(ctx: Context, requested: int, payload: bytes) -> Section:
    fds_per_segment = _fds_per_segment(ctx, payload)
    limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    segments = requested
    notes = [f"the engine holds {fds_per_segment} file descriptors per open segment at its peak (measured); "
             f"RLIMIT_NOFILE = {limit}"]
    if limit != resource.RLIM_INFINITY:
        fit = (limit - open_fd_count() - FD_HEADROOM) // fds_per_segment
        if fit < requested:
            segments = fit
            notes.append(f"CAPPED: {requested:,} segments were requested but would need ~"
                         f"{requested * fds_per_segment:,} descriptors; measured with {segments:,} segments")
    records = segments * BATCHES_PER_SEGMENT * RECORDS_PER_BATCH
    section = Section(NAME, "LogManager.open of one partition with many small segments vs raw read of them",
                      {"segments_requested": requested, "segments": segments, "segment_bytes": SEGMENT_BYTES,
                       "batches_per_segment": BATCHES_PER_SEGMENT, "records_per_batch": RECORDS_PER_BATCH,
                       "value_bytes": VALUE_BYTES, "rounds": min(ctx.repeats, MAX_ROUNDS)})
    section.notes.extend(notes)
    with scratch_dir(ctx, "load") as log_dir:
        per_append_s, _ = _build(log_dir, segments, payload)
        tenth = max(1, segments // 10)
        section.notes.append(
            f"setup: built {segments:,} segments in {sum(per_append_s):.2f} s; an append that rolls took "
            f"{sum(per_append_s[1:tenth + 1]) / tenth * 1e3:.3f} ms on average over the first 10% of segments, "
            f"{sum(per_append_s[-tenth:]) / tenth * 1e3:.3f} ms over the last 10%")
        part_dir = os.path.join(log_dir, layout.partition_dir_name(TOPIC, 0))
        paths = sorted(os.path.join(part_dir, n) for n in os.listdir(part_dir) if n.endswith(layout.LOG_SUFFIX))
        size = sum(os.path.getsize(p) for p in paths)

        def raw_case() -> Sample:
            sample, read = timed(raw_read_files, paths, MIB)
            if read != size:
                raise RuntimeError(f"raw read returned {read} bytes, the segments hold {size}")
            return sample

        def clean_case() -> Sample:
            return _open_and_check(log_dir, clean=True, records=records, segments=segments)[0]

        def unclean_case() -> Sample:
            _make_unclean(log_dir)
            return _open_and_check(log_dir, clean=False, records=records, segments=segments)[0]

        raw_read_files(paths)  # warm the page cache for every row alike
        runs = run_interleaved({"raw": raw_case, "clean": clean_case, "unclean": unclean_case},
                               min(ctx.repeats, MAX_ROUNDS))

    group = f"{segments:,} segments"
    base = "raw read of all .log files"
    section.add(Row(group, base, records, size, runs["raw"]))
    clean = section.add(Row(group, "LogManager.open, clean shutdown", records, size, runs["clean"], baseline=base,
                            target=SEGMENTS_TARGET, units=segments))
    unclean = section.add(Row(group, "LogManager.open, unclean (recover from 0)", records, size, runs["unclean"],
                              baseline=base, target=UNCLEAN_TARGET, units=segments))
    section.add(Row(group, "LogManager.open, unclean: segments/s", records, size, runs["unclean"], baseline=base,
                    target=SEGMENTS_TARGET, units=segments))
    section.facts["segments"] = segments
    section.notes.append(f"per segment: clean open {clean.best_s / segments * 1e3:.4f} ms, unclean open "
                         f"{unclean.best_s / segments * 1e3:.4f} ms, raw read "
                         f"{section.find(group, base).best_s / segments * 1e3:.4f} ms")
    return section


def _run_large(ctx: Context, section: Section) -> None:
    segment_bytes = LARGE_SEGMENT_BYTES_QUICK if ctx.quick else LARGE_SEGMENT_BYTES_FULL
    records_list = generate_records(LARGE_RECORDS_PER_BATCH, VALUE_BYTES, seed=31)
    one = build_batch(records_list)
    per_append = LARGE_RECORDS_PER_BATCH * LARGE_BATCHES_PER_APPEND
    with scratch_dir(ctx, "load-large") as log_dir:
        mgr = LogManager.open(_config(log_dir, segment_bytes), clock=ManualClock(NOW_MS))
        try:
            log = mgr.get_or_create_log(TOPIC, 0)
            t0 = time.perf_counter()
            chunk = one * LARGE_BATCHES_PER_APPEND
            while len(log.segments) <= LARGE_SEGMENTS:
                log.append_batches(chunk)
            build_s = time.perf_counter() - t0
            records = log.log_end_offset
            segments = len(log.segments)
        finally:
            mgr.close()
        if records % per_append:
            raise RuntimeError(f"large-segment log ends at {records}, not a whole number of appends")
        part_dir = os.path.join(log_dir, layout.partition_dir_name(TOPIC, 0))
        paths = sorted(os.path.join(part_dir, n) for n in os.listdir(part_dir) if n.endswith(layout.LOG_SUFFIX))
        size = sum(os.path.getsize(p) for p in paths)

        def raw_case() -> Sample:
            sample, read = timed(raw_read_files, paths, MIB)
            if read != size:
                raise RuntimeError(f"raw read returned {read} bytes, the segments hold {size}")
            return sample

        def opened(clean: bool) -> Sample:
            if not clean:
                _make_unclean(log_dir)
            return _open_and_check(log_dir, clean=clean, records=records, segments=segments,
                                   segment_bytes=segment_bytes)[0]

        raw_read_files(paths)
        runs = run_interleaved({"raw": raw_case, "clean": lambda: opened(True), "unclean": lambda: opened(False)},
                               min(ctx.repeats, MAX_ROUNDS))
    group = f"{segment_bytes // MIB} MiB segments"
    base = "raw read of all .log files"
    section.add(Row(group, base, records, size, runs["raw"]))
    section.add(Row(group, "LogManager.open, clean shutdown", records, size, runs["clean"], baseline=base))
    section.add(Row(group, "LogManager.open, unclean (recover from 0)", records, size, runs["unclean"],
                    baseline=base, target=UNCLEAN_TARGET))
    section.notes.append(f"{group}: {segments} segments ({segments - 1} sealed + the active one), {size / MB:,.1f} MB, "
                         f"{LARGE_RECORDS_PER_BATCH}-record batches of {len(one):,} bytes; built in {build_s:.1f} s")
