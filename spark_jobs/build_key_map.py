"""Key-map job: the latest offset of every key of one partition over [start offset, end offset).

    spark-submit spark_jobs/build_key_map.py --config storage.yaml --topic user-emails --partition 0 \
        --start-offset 0 --end-offset 50000 --output var/keymaps/<run>/user-emails-0

Reads the segments through the ``kafka_segments`` data source, groups by the 128-bit key hash and keeps the
maximum offset, and writes ``<output>/data/*.parquet`` (``key_hash_hi``, ``key_hash_lo``, ``offset``) plus
``<output>/keymap.json`` (partition, range, counts, the Spark master used). The engine's cleaner loads it as
a :class:`storage_engine.maintenance.offset_map.SortedHashOffsetMap` in place of its bounded in-process map, so a
partition with any number of distinct keys is cleaned in one pass. Prints the manifest as one JSON line.

Bad input fails before Spark starts, with a message and exit code 2: a partition that does not exist, an
offset range outside the log, an output path inside a log dir. Nothing here writes to the log dirs.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time

EXIT_BAD_INPUT = 2


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", help="storage engine YAML (default: $STORAGE_ENGINE_CONFIG or the project default)")
    p.add_argument("--topic", required=True)
    p.add_argument("--partition", type=int, required=True)
    p.add_argument("--start-offset", type=int, required=True, help="first dirty offset (inclusive)")
    p.add_argument("--end-offset", type=int, required=True, help="first uncleanable offset (exclusive)")
    p.add_argument("--output", required=True, help="run-scoped directory for the map (replaced if present)")
    p.add_argument("--shuffle-partitions", type=int, default=None)
    return p.parse_args(argv)


def validate(args):
    """Engine-side checks, before any JVM starts. Returns (config, partition info, absolute output)."""
    from storage_engine.config import load_config
    from storage_engine.tools.inspect import check_offset_range, partition_info
    config = load_config(args.config)
    info = partition_info(config, args.topic, args.partition)
    check_offset_range(info, args.start_offset, args.end_offset)
    out = os.path.abspath(args.output)
    for d in config.log_dirs:
        d = os.path.abspath(d)
        if out == d or out.startswith(d + os.sep):
            raise ValueError(f"output {out} lies inside log dir {d}; key maps must not be written into log dirs")
    return config, info, out


def build(spark, info, start: int, end: int, out: str, shuffle_partitions: int | None = None) -> dict:
    from pyspark.sql import functions as F

    from spark_jobs.segment_source import NAME, SegmentDataSource
    spark.dataSource.register(SegmentDataSource)
    # 200 shuffle partitions (Spark's default) only add task overhead for one partition's keys.
    spark.conf.set("spark.sql.shuffle.partitions",
                   str(shuffle_partitions or max(2, 2 * spark.sparkContext.defaultParallelism)))
    t0 = time.monotonic()
    df = (spark.read.format(NAME).option("path", info.dir).option("startOffset", str(start))
          .option("endOffset", str(end)).load())
    counts = df.agg(F.count(F.lit(1)).alias("records"),
                    F.sum(F.when(F.col("key").isNull(), 1).otherwise(0)).alias("keyless"),
                    F.sum(F.when(F.col("is_tombstone"), 1).otherwise(0)).alias("tombstones")).collect()[0]
    keymap = (df.where(F.col("key").isNotNull())
              .groupBy("key_hash_hi", "key_hash_lo").agg(F.max("offset").alias("offset")))
    tmp = out + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    keymap.write.mode("overwrite").parquet(os.path.join(tmp, "data"))
    distinct = spark.read.parquet(os.path.join(tmp, "data")).count()
    manifest = {"topic": info.topic, "partition": info.partition, "start_offset": start, "end_offset": end,
                "records": int(counts["records"] or 0), "keyless_records": int(counts["keyless"] or 0),
                "tombstones": int(counts["tombstones"] or 0), "distinct_keys": int(distinct),
                "segments": [s.base_offset for i, s in enumerate(info.segments) if s.base_offset < end and
                             (i + 1 == len(info.segments) or info.segments[i + 1].base_offset > start)],
                "spark_master": spark.sparkContext.master, "spark_version": spark.version,
                "application_id": spark.sparkContext.applicationId,
                "elapsed_s": round(time.monotonic() - t0, 3), "output": out}
    with open(os.path.join(tmp, "keymap.json"), "w") as f:
        json.dump(manifest, f)
    shutil.rmtree(out, ignore_errors=True)
    os.replace(tmp, out)
    return manifest


def main(argv=None) -> int:
    args = parse_args(argv)
    from storage_engine.errors import StorageError
    try:
        _config, info, out = validate(args)
    except (StorageError, ValueError) as exc:
        sys.stderr.write(f"error: {exc}\n")
        return EXIT_BAD_INPUT
    from pyspark.sql import SparkSession
    spark = SparkSession.builder.appName(f"build-key-map {args.topic}-{args.partition}").getOrCreate()
    try:
        manifest = build(spark, info, args.start_offset, args.end_offset, out, args.shuffle_partitions)
    finally:
        spark.stop()
    sys.stdout.write(json.dumps(manifest) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
