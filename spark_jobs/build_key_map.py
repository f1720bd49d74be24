"""Key-map job: the latest offset of every key of one partition over [start offset, end offset).

    spark-submit spark_jobs/build_key_map.py --config storage.yaml --topic user-emails --partition 0 \
        --start-offset 0 --end-offset 50000 --output var/keymaps/<run>/user-emails-0

Spark distributes the work and the files; the per-record work runs in the Python workers with the engine's
compiled kernels, not in Spark's row engine (which cost >10x the CPU per record of the in-process build: Arrow to
JVM rows, a shuffle, a sort and a window). Two stages of tasks (:mod:`spark_jobs.key_map_tasks`):

1. one task per segment group (``SegmentKeysReader.partitions``: consecutive segments of about equal bytes, up to
   512 MiB, a multiple of the tasks Spark runs at once) reads its segments once, as the in-process map does (one
   compiled decode and hash per record; batches of aborted transactions left out, control batches and keyless
   records dropped), counts records, keyless records and tombstones, and writes its (hash, offset) rows split by bucket
   (``bucket`` = the top bits of the high hash, in signed order) into stage files under ``<output>.tmp``;
2. one task per bucket reads that bucket's rows from every group, keeps the maximum offset per 128-bit key hash
   (a compiled radix sort by hash) and writes ``<output>/data/bucket=<n>/part.parquet`` (``key_hash_hi``,
   ``key_hash_lo``, ``offset``) sorted by hash.

Buckets number hash ranges in ascending order, so the files read by bucket give the whole map sorted; next to
them, ``<output>/keymap.json`` (partition, range, counts, layout, the Spark master used). The engine's cleaner
loads it as a :class:`storage_engine.maintenance.offset_map.SortedHashOffsetMap` in place of its bounded in-process map -
a copy, no re-sort - so a partition with any number of distinct keys is cleaned in one pass. Prints the manifest
as one JSON line. Every task must see the log dir and the output dir at the same paths (local mode, or a cluster
on one machine or a shared file system).

Bad input fails before Spark starts, with a message and exit code 2: a partition that does not exist, an
offset range outside the log, an output path inside a log dir. Nothing here writes to the log dirs.

Damage: the segment source checks every batch (framing, offset order, CRC) before decoding it. A damaged batch
fails the job with exit code 3 and one ``error:`` line naming the partition, the file, the byte position and the
batch's offsets; no map is written, and the same error goes to ``<output>.damage.json``, which the Airflow task
reads to mark the partition uncleanable (the job itself never writes to a log dir).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark import SparkContext

    from storage_engine.config import StorageConfig
    from storage_engine.inspection.partitions import PartitionInfo

EXIT_BAD_INPUT = 2
EXIT_DAMAGED = 3            # the source found a damaged batch: no map; see damage_report_path(output)
DAMAGE_REPORT_SUFFIX = ".damage.json"

# What the job is submitted with (the log_compaction DAG's BuildKeyMapOperator and the benchmark use these): no web
# UI, and a driver JVM that compiles with C1 only. The driver only schedules tasks and collects three numbers from
# each while the work runs in the Python workers; C2's compiler threads cost it about 3.5 s of CPU and 0.7 s of wall
# time per submission (measured with an empty job on local[2]: 9.0 -> 5.3 s of CPU, 7.0 -> 6.3 s wall).
SUBMIT_CONF = {"spark.ui.enabled": "false", "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1"}


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", help="storage engine YAML (default: $STORAGE_ENGINE_CONFIG or the project default)")
    p.add_argument("--topic", required=True)
    p.add_argument("--partition", type=int, required=True)
    p.add_argument("--start-offset", type=int, required=True, help="first dirty offset (inclusive)")
    p.add_argument("--end-offset", type=int, required=True, help="first uncleanable offset (exclusive)")
    p.add_argument("--output", required=True, help="run-scoped directory for the map (replaced if present)")
    p.add_argument("--shuffle-partitions", type=int, default=None,
                   help="tasks of the bucket phase (default: one per bucket)")
    return p.parse_args(argv)


def validate(args: argparse.Namespace) -> tuple[StorageConfig, PartitionInfo, str]:
    """Engine-side checks, before any JVM starts. Returns (config, partition info, absolute output)."""
    from storage_engine.config_file import load_config
    from storage_engine.inspection.partitions import check_offset_range, partition_info
    config = load_config(args.config)
    info = partition_info(config, args.topic, args.partition)
    check_offset_range(info, args.start_offset, args.end_offset)
    out = os.path.abspath(args.output)
    for d in config.log_dirs:
        d = os.path.abspath(d)
        if out == d or out.startswith(d + os.sep):
            raise ValueError(f"output {out} lies inside log dir {d}; key maps must not be written into log dirs")
    return config, info, out


ROWS_PER_BUCKET = 2_000_000
MAX_BUCKET_BITS = 10


def bucket_bits(records: int, rows_per_bucket: int = ROWS_PER_BUCKET) -> int:
    """Bits of the high hash that name a bucket: about ``rows_per_bucket`` keys per bucket file at most."""
    bits = 0
    while bits < MAX_BUCKET_BITS and (records >> bits) > rows_per_bucket:
        bits += 1
    return bits


def build(sc: SparkContext, info: PartitionInfo, start: int, end: int, out: str, shuffle_partitions: int | None = None,
          rows_per_bucket: int = ROWS_PER_BUCKET) -> dict:
    """Build the map of ``info``'s partition over [start, end) into ``out`` with the SparkContext ``sc`` (see the
    module docstring); returns the manifest. ``shuffle_partitions``: tasks of the bucket phase (default: one per
    bucket)."""
    from spark_jobs import key_map_tasks
    from spark_jobs.segment_source import SegmentKeysReader
    t0 = time.monotonic()
    bits = bucket_bits(end - start, rows_per_bucket)
    tmp = out + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    stage, data = os.path.join(tmp, "stage"), os.path.join(tmp, "data")
    os.makedirs(stage)
    os.makedirs(data)
    groups = SegmentKeysReader({"path": info.dir, "startOffset": str(start), "endOffset": str(end),
                                "tasks": str(sc.defaultParallelism)}).groups()
    counts = [0, 0, 0]
    damage = []
    if groups:
        # Phase 1: one task per segment group decodes it and splits its keyed rows by bucket into stage files.
        split = key_map_tasks.split_group
        jobs = sc.parallelize(list(enumerate(groups)), len(groups))
        for got in jobs.map(lambda g: split(g[0], g[1], start, end, bits, stage)).collect():
            counts = [c + g for c, g in zip(counts, got[:3])]
            if got[3] is not None:
                damage.append(got[3])
    if damage:
        # No map from damaged bytes: the job fails with the first damage in log order, and nothing is written.
        shutil.rmtree(tmp, ignore_errors=True)
        raise damage_error(damage)
    # Phase 2: one task per bucket keeps each hash's latest offset and writes the bucket's sorted Parquet file.
    buckets = 1 << bits
    merge = key_map_tasks.merge_bucket
    tasks = max(1, min(buckets, shuffle_partitions or buckets))
    distinct = sum(sc.parallelize(range(buckets), tasks).map(lambda b: merge(b, stage, data)).collect())
    shutil.rmtree(stage)
    manifest = {"topic": info.topic, "partition": info.partition, "start_offset": start, "end_offset": end,
                "groups": len(groups), "records": counts[0], "keyless_records": counts[1], "tombstones": counts[2],
                "distinct_keys": int(distinct), "layout": "bucket", "bucket_bits": bits, "sorted": True,
                "segments": [s.base_offset for i, s in enumerate(info.segments) if s.base_offset < end and
                             (i + 1 == len(info.segments) or info.segments[i + 1].base_offset > start)],
                "spark_master": sc.master, "spark_version": sc.version, "application_id": sc.applicationId,
                "elapsed_s": round(time.monotonic() - t0, 3), "output": out}
    if distinct != _rows_written(data):
        raise RuntimeError(f"the bucket tasks reported {distinct} keys, the files under {data} hold another count")
    with open(os.path.join(tmp, "keymap.json"), "w") as f:
        json.dump(manifest, f)
    shutil.rmtree(out, ignore_errors=True)
    os.replace(tmp, out)
    return manifest


def damage_error(damage: list[dict]) -> Exception:
    """The job's error for the damage its tasks found (``key_map_tasks.split_group``): a ``CorruptRecordError``
    naming the partition, the file, the byte position and the batch's offsets (the first damage in file order)."""
    from storage_engine.errors import CompressionError, CorruptRecordError
    first = min(damage, key=lambda d: (d["path"] or "", d["position"] or 0))
    cls = CompressionError if first["error_type"] == CompressionError.__name__ else CorruptRecordError
    return cls(f"the Spark key map was not built: {first['reason']}", first["path"], first["position"])


def damage_report_path(output: str) -> str:
    """Where a failed job leaves the damage it found, beside its output (never in a log dir): read by the Airflow
    task, which marks the partition uncleanable with it."""
    return os.path.abspath(output) + DAMAGE_REPORT_SUFFIX


def write_damage_report(info: PartitionInfo, output: str, exc: Exception) -> str:
    path = damage_report_path(output)
    report = {"topic": info.topic, "partition": info.partition, "error_type": type(exc).__name__,
              "error": str(exc), "path": getattr(exc, "path", None), "position": getattr(exc, "position", None)}
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(report, f)
    os.replace(tmp, path)
    return path


def _rows_written(data_dir: str) -> int:
    """Rows of the written map, from the Parquet footers (no data read)."""
    import pyarrow.parquet as pq

    from storage_engine.maintenance.offset_map import map_files
    return sum(pq.ParquetFile(f).metadata.num_rows for f in map_files(data_dir))


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    from storage_engine.errors import CorruptRecordError, StorageError
    try:
        _config, info, out = validate(args)
    except (StorageError, ValueError) as exc:
        sys.stderr.write(f"error: {exc}\n")
        return EXIT_BAD_INPUT
    # A bare SparkContext: the job uses no SQL, and a SparkSession costs about 3 s more to start.
    from pyspark import SparkConf, SparkContext
    try:
        os.remove(damage_report_path(out))       # a previous attempt's
    except FileNotFoundError:
        pass
    sc = SparkContext(conf=SparkConf().setAppName(f"build-key-map {args.topic}-{args.partition}"))
    try:
        manifest = build(sc, info, args.start_offset, args.end_offset, out, args.shuffle_partitions)
    except CorruptRecordError as exc:
        report = write_damage_report(info, out, exc)
        sys.stderr.write(f"error: {exc} (damage report: {report})\n")
        return EXIT_DAMAGED
    finally:
        sc.stop()
    sys.stdout.write(json.dumps(manifest) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
