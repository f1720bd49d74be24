"""A PySpark Python Data Source (Spark 4 API) over one partition's Kafka-format segments.

    spark.dataSource.register(SegmentDataSource)
    df = (spark.read.format("kafka_segments").option("path", "/logs/dir-a/user-emails-0")
          .option("startOffset", 0).option("endOffset", 1000).load())

One Spark partition per ``.log`` segment overlapping [startOffset, endOffset) (both optional). Each yields
Arrow record batches with one row per record:

    offset long, timestamp long, key binary, key_hash_hi long, key_hash_lo long, value_size int,
    is_tombstone boolean, batch_base_offset long, batch_last_offset long, segment long

``key_hash_hi/lo`` are the engine's 128-bit key hash (``storage_engine.maintenance.offset_map.key_hash``), the join key of
key maps. Files are opened read-only; a segment that disappears while a task reads it (retention, a swap)
fails the task with an error naming the file. This module must be importable on the executors (the project
is installed in the Spark Python environment, or shipped with ``--py-files``).
"""
from __future__ import annotations

import os

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

NAME = "kafka_segments"
SCHEMA = ("offset long, timestamp long, key binary, key_hash_hi long, key_hash_lo long, value_size int, "
          "is_tombstone boolean, batch_base_offset long, batch_last_offset long, segment long")
ROWS_PER_ARROW_BATCH = 65536


class SegmentPartition(InputPartition):
    def __init__(self, path: str, base_offset: int, next_base: int | None, inode: int):
        super().__init__(path)
        self.path = path
        self.base_offset = base_offset
        self.next_base = next_base
        self.inode = inode


class SegmentDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema):
        return SegmentReader(self.options)


def _opt_int(options, name: str):
    raw = options.get(name)
    if raw is None or raw == "":
        return None
    try:
        return int(raw)
    except (TypeError, ValueError):
        raise ValueError(f"option {name} must be an integer offset, got {raw!r}") from None


class SegmentReader(DataSourceReader):
    def __init__(self, options):
        from storage_engine import layout
        path = options.get("path")
        if not path:
            raise ValueError("kafka_segments needs option 'path': a partition folder <log dir>/<topic>-<partition>")
        self.path = os.path.abspath(path)
        if not os.path.isdir(self.path):
            raise FileNotFoundError(f"partition folder {self.path} does not exist")
        layout.parse_partition_dir(os.path.basename(self.path))
        self.start = _opt_int(options, "startOffset")
        self.end = _opt_int(options, "endOffset")

    def partitions(self):
        from storage_engine import layout
        bases = sorted(layout.offset_from_filename(n) for n in os.listdir(self.path)
                       if n.endswith(layout.LOG_SUFFIX) and layout.is_offset_named(n))
        parts = []
        for i, base in enumerate(bases):
            nxt = bases[i + 1] if i + 1 < len(bases) else None
            if self.end is not None and base >= self.end:
                continue
            if self.start is not None and nxt is not None and nxt <= self.start:
                continue
            path = layout.segment_file(self.path, base, layout.LOG_SUFFIX)
            parts.append(SegmentPartition(path, base, nxt, os.stat(path).st_ino))
        return parts

    def read(self, partition: SegmentPartition):
        import pyarrow as pa

        from storage_engine.segment.file_records import FileRecords
        from storage_engine.maintenance.offset_map import key_hash
        try:
            fr = FileRecords(partition.path, writable=False)
        except Exception as exc:
            raise FileNotFoundError(f"segment {partition.path} disappeared while the job ran (retention or "
                                    f"compaction replaced it): {exc}") from None
        start = self.start if self.start is not None else -1
        end = self.end if self.end is not None else 2**63 - 1
        cols = _Columns()
        try:
            for batch in fr.batches(0, strict=False):
                if batch.last_offset < start:
                    continue
                if batch.base_offset >= end:
                    break
                for rec in batch.records():
                    if rec.offset < start or rec.offset >= end:
                        continue
                    hi, lo = key_hash(rec.key) if rec.key is not None else (None, None)
                    cols.add(rec, hi, lo, batch, partition.base_offset)
                if cols.n >= ROWS_PER_ARROW_BATCH:
                    yield cols.to_arrow(pa)
                    cols = _Columns()
        finally:
            fr.close()
        if os.path.exists(partition.path) and os.stat(partition.path).st_ino != partition.inode:
            raise FileNotFoundError(f"segment {partition.path} was replaced while the job read it")
        if not os.path.exists(partition.path):
            raise FileNotFoundError(f"segment {partition.path} was deleted while the job read it")
        if cols.n:
            yield cols.to_arrow(pa)


class _Columns:
    __slots__ = ("n", "offset", "timestamp", "key", "hi", "lo", "value_size", "tomb", "bbase", "blast", "seg")

    def __init__(self):
        self.n = 0
        self.offset, self.timestamp, self.key, self.hi, self.lo = [], [], [], [], []
        self.value_size, self.tomb, self.bbase, self.blast, self.seg = [], [], [], [], []

    def add(self, rec, hi, lo, batch, segment_base) -> None:
        self.n += 1
        self.offset.append(rec.offset)
        self.timestamp.append(rec.timestamp)
        self.key.append(rec.key)
        self.hi.append(hi)
        self.lo.append(lo)
        self.value_size.append(-1 if rec.value is None else len(rec.value))
        self.tomb.append(rec.value is None)
        self.bbase.append(batch.base_offset)
        self.blast.append(batch.last_offset)
        self.seg.append(segment_base)

    def to_arrow(self, pa):
        return pa.RecordBatch.from_arrays(
            [pa.array(self.offset, pa.int64()), pa.array(self.timestamp, pa.int64()),
             pa.array(self.key, pa.binary()), pa.array(self.hi, pa.int64()), pa.array(self.lo, pa.int64()),
             pa.array(self.value_size, pa.int32()), pa.array(self.tomb, pa.bool_()),
             pa.array(self.bbase, pa.int64()), pa.array(self.blast, pa.int64()), pa.array(self.seg, pa.int64())],
            names=["offset", "timestamp", "key", "key_hash_hi", "key_hash_lo", "value_size", "is_tombstone",
                   "batch_base_offset", "batch_last_offset", "segment"])
