"""append: appending 100-byte-value records to a log, against a raw sequential ``os.write`` of the same bytes.

Three ways in, each into a fresh log (one partition, default config: 1 GiB segments, so no roll and no
fsync happens while timing; ``mgr.close()`` and its fsync are outside the timed region):

* ``append_batches`` - the broker's path: pre-built 1000-record batches, one per call; the engine
  validates every batch and record and assigns offsets;
* ``append_records`` - the producer path: lists of 1000 ``SimpleRecord`` per call; the engine builds the batch;
* one by one - ``append_records([record])`` per record;
* ``append_batches`` of an idempotent producer - the same 1000-record batches carrying a producer id, epoch and
  consecutive sequences, so every append is checked against and recorded in the producer state (the
  producer-state tracking a Kafka client's default, idempotent producer costs), compared with the plain
  ``append_batches`` row of the same run (target: within 10%, ratio >= 0.9).

Each is compared with ``os.write`` of the same bytes in the same chunks (one write per engine append) to a
new file in the same directory, also without fsync. Records/s and MB/s count the records and batch bytes
that end up in the log.
"""
from __future__ import annotations

import os
from typing import Callable

from storage_engine.clock import ManualClock
from storage_engine.config_file import config_from_mapping
from storage_engine.log.log import Log
from storage_engine.log.manager import LogManager
from storage_engine.record.record_batch import build_batch

from .harness import (NOW_MS, Context, Row, Sample, Section, Target, chunks, generate_records, raw_write,
                      run_interleaved, scratch_dir, timed)

NAME = "append"
RECORDS_PER_BATCH = 1000
VALUE_BYTES = 100
# Batches repeat from a pool of this many distinct ones; their content does not change the append work.
DISTINCT_BATCHES = 20
BATCHED_TARGET = Target("records_per_s", 1_000_000, ">= 1,000,000 records/s")
PRODUCER_STATE_TARGET = Target("ratio", 0.9, "within 10% of append_batches")
PRODUCER_ID = 4242
TOPIC = "bench-append"


def _append_into_fresh_log(ctx: Context, append: Callable[[Log], tuple[int, int]]) -> Sample:
    """Open a new log, time ``append(log)``, check the log holds what the caller expects, close."""
    with scratch_dir(ctx, "append") as log_dir:
        config = config_from_mapping({"broker": {"log.dirs": [log_dir]}})
        mgr = LogManager.open(config, clock=ManualClock(NOW_MS))
        try:
            log = mgr.get_or_create_log(TOPIC, 0)
            sample, expected = timed(append, log)
            records, size = expected
            if log.log_end_offset != records or log.size_in_bytes() != size:
                raise RuntimeError(f"log holds {log.log_end_offset} records in {log.size_in_bytes()} bytes, "
                                   f"expected {records} in {size}")
        finally:
            mgr.close()
        return sample


def _raw_case(ctx: Context, pieces: list[bytes]) -> Callable[[], Sample]:
    def case() -> Sample:
        with scratch_dir(ctx, "append-raw") as d:
            return raw_write(os.path.join(d, "raw.log"), pieces)
    return case


def run(ctx: Context) -> Section:
    batch_count = 30 if ctx.quick else 400
    single_count = 3_000 if ctx.quick else 30_000
    section = Section(NAME, "log append throughput vs raw sequential os.write() of the same bytes",
                      {"value_bytes": VALUE_BYTES, "records_per_batch": RECORDS_PER_BATCH,
                       "batched_appends": batch_count, "single_record_appends": single_count,
                       "segment_bytes": "1 GiB (default; no roll while timing)", "fsync": "none while timing"})

    pool = chunks(generate_records(DISTINCT_BATCHES * RECORDS_PER_BATCH, VALUE_BYTES, seed=10), RECORDS_PER_BATCH)
    record_lists = [pool[i % DISTINCT_BATCHES] for i in range(batch_count)]
    batch_pool = [build_batch(records) for records in pool]
    batches = [batch_pool[i % DISTINCT_BATCHES] for i in range(batch_count)]
    batched_records = batch_count * RECORDS_PER_BATCH
    batched_bytes = sum(len(b) for b in batches)

    # The same records with a producer id and consecutive sequences (each batch is distinct: sequences move on).
    idempotent = [build_batch(pool[i % DISTINCT_BATCHES], producer_id=PRODUCER_ID, producer_epoch=0,
                              base_sequence=i * RECORDS_PER_BATCH) for i in range(batch_count)]
    idempotent_bytes = sum(len(b) for b in idempotent)

    singles = generate_records(single_count, VALUE_BYTES, seed=11)
    single_batches = [build_batch([r]) for r in singles]
    single_bytes = sum(len(b) for b in single_batches)

    def append_batches(log: Log) -> tuple[int, int]:
        for batch in batches:
            log.append_batches(batch)
        return batched_records, batched_bytes

    def append_idempotent(log: Log) -> tuple[int, int]:
        for batch in idempotent:
            log.append_batches(batch)
        if log.producer_state.producers[PRODUCER_ID].last_seq != batched_records - 1:
            raise RuntimeError("the producer state did not track every batch")
        return batched_records, idempotent_bytes

    def append_records(log: Log) -> tuple[int, int]:
        for records in record_lists:
            log.append_records(records)
        return batched_records, batched_bytes

    def append_one_by_one(log: Log) -> tuple[int, int]:
        for record in singles:
            log.append_records([record])
        return single_count, single_bytes

    runs = run_interleaved({
        "raw batched": _raw_case(ctx, batches),
        "append_batches": lambda: _append_into_fresh_log(ctx, append_batches),
        "append_batches idempotent": lambda: _append_into_fresh_log(ctx, append_idempotent),
        "append_records": lambda: _append_into_fresh_log(ctx, append_records),
        "raw one-by-one": _raw_case(ctx, single_batches),
        "one-by-one": lambda: _append_into_fresh_log(ctx, append_one_by_one),
    }, ctx.repeats)

    group = f"{RECORDS_PER_BATCH}-record batches"
    section.add(Row(group, "raw os.write per batch", batched_records, batched_bytes, runs["raw batched"]))
    section.add(Row(group, "append_batches (broker)", batched_records, batched_bytes, runs["append_batches"],
                    baseline="raw os.write per batch", target=BATCHED_TARGET))
    section.add(Row(group, "append_batches, idempotent producer", batched_records, idempotent_bytes,
                    runs["append_batches idempotent"], baseline="append_batches (broker)",
                    target=PRODUCER_STATE_TARGET))
    section.add(Row(group, "append_records (producer)", batched_records, batched_bytes, runs["append_records"],
                    baseline="raw os.write per batch", target=BATCHED_TARGET))
    group = "one record per append"
    section.add(Row(group, "raw os.write per record", single_count, single_bytes, runs["raw one-by-one"]))
    section.add(Row(group, "append_records([one])", single_count, single_bytes, runs["one-by-one"],
                    baseline="raw os.write per record"))
    section.notes.append(f"a 1000-record batch is {batched_bytes / batch_count:,.0f} bytes; a one-record batch "
                         f"{single_bytes / single_count:,.0f} bytes")
    return section
