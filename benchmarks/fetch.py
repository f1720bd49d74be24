"""fetch: reading a log by offset, against a raw sequential read of the same segment files.

One log is built (not timed) from 1000-record batches of 100-byte values, in 16 MiB segments (4 MiB with
``--quick``) so reads cross segment boundaries. Then, all from the page cache:

* ``log.read(offset, 1 MiB)`` walking the whole log - a consumer's fetch loop: each fetch returns whole
  batches, the next offset is the last batch's next offset (found from batch headers only);
* ``log.read_records(0)`` - the same walk, every record decoded into a ``Record``;
* baseline: ``os.read`` in 1 MiB chunks of every ``.log`` file of the log, in offset order.

Records/s and MB/s count the records and the bytes of the log, the same for every row.
"""
from __future__ import annotations


from storage_engine.clock import ManualClock
from storage_engine.config_file import config_from_mapping
from storage_engine.segment.file_records import iter_batches
from storage_engine.log.log import Log
from storage_engine.log.manager import LogManager
from storage_engine.record.record_batch import build_batch

from .harness import (MIB, NOW_MS, Context, Row, Sample, Section, chunks, generate_records, raw_read_files,
                      run_interleaved, scratch_dir, timed)

NAME = "fetch"
RECORDS_PER_BATCH = 1000
VALUE_BYTES = 100
DISTINCT_BATCHES = 20
FETCH_MAX_BYTES = MIB
TOPIC = "bench-fetch"


def walk_with_read(log: Log) -> int:
    """Fetch the whole log ``FETCH_MAX_BYTES`` at a time; returns the bytes fetched."""
    offset = log.log_start_offset
    total = 0
    while True:
        fetched = log.read(offset, FETCH_MAX_BYTES)
        if fetched is None:
            return total
        last = None
        for last in iter_batches(fetched.data):
            pass
        if last is None:
            raise RuntimeError(f"read at offset {offset} returned {len(fetched.data)} bytes without a batch")
        offset = last.next_offset
        total += len(fetched.data)


def walk_with_read_records(log: Log) -> int:
    count = 0
    for _ in log.read_records(log.log_start_offset):
        count += 1
    return count


def run(ctx: Context) -> Section:
    batch_count = 40 if ctx.quick else 500
    segment_bytes = (4 if ctx.quick else 16) * MIB
    section = Section(NAME, "fetch by offset vs raw sequential read of the same segment files (page cache)",
                      {"value_bytes": VALUE_BYTES, "records_per_batch": RECORDS_PER_BATCH, "batches": batch_count,
                       "segment_bytes": segment_bytes, "fetch_max_bytes": FETCH_MAX_BYTES})
    pool = [build_batch(records) for records in
            chunks(generate_records(DISTINCT_BATCHES * RECORDS_PER_BATCH, VALUE_BYTES, seed=20), RECORDS_PER_BATCH)]
    with scratch_dir(ctx, "fetch") as log_dir:
        config = config_from_mapping({"broker": {"log.dirs": [log_dir], "log.segment.bytes": segment_bytes}})
        mgr = LogManager.open(config, clock=ManualClock(NOW_MS))
        try:
            log = mgr.get_or_create_log(TOPIC, 0)
            for i in range(batch_count):
                log.append_batches(pool[i % DISTINCT_BATCHES])
            log.flush()
            records = log.log_end_offset
            size = log.size_in_bytes()
            paths = [seg.path for seg in log.segments]

            def read_case() -> Sample:
                sample, fetched = timed(walk_with_read, log)
                if fetched != size:
                    raise RuntimeError(f"log.read walk returned {fetched} bytes, the log holds {size}")
                return sample

            def read_records_case() -> Sample:
                sample, count = timed(walk_with_read_records, log)
                if count != records:
                    raise RuntimeError(f"read_records returned {count} records, the log holds {records}")
                return sample

            def raw_case() -> Sample:
                sample, read = timed(raw_read_files, paths, FETCH_MAX_BYTES)
                if read != size:
                    raise RuntimeError(f"raw read returned {read} bytes, the segments hold {size}")
                return sample

            raw_read_files(paths)  # warm the page cache for every row alike
            runs = run_interleaved({"raw": raw_case, "read": read_case, "read_records": read_records_case},
                                   ctx.repeats)
        finally:
            mgr.close()
    group = f"{len(paths)} segments"
    section.add(Row(group, "raw os.read, 1 MiB chunks", records, size, runs["raw"]))
    section.add(Row(group, "log.read(offset, 1 MiB) walk", records, size, runs["read"],
                    baseline="raw os.read, 1 MiB chunks"))
    section.add(Row(group, "log.read_records (decoded)", records, size, runs["read_records"],
                    baseline="raw os.read, 1 MiB chunks"))
    return section
