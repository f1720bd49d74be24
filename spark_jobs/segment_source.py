"""PySpark Python Data Sources (Spark 4 API) over one partition's Kafka-format segments.

    spark.dataSource.register(SegmentDataSource)
    df = (spark.read.format("kafka_segments").option("path", "/logs/dir-a/user-emails-0")
          .option("startOffset", 0).option("endOffset", 1000).load())

One Spark partition per ``.log`` segment overlapping [startOffset, endOffset) (both optional). Each yields
Arrow record batches with one row per record. Both sources read the log as the cleaner's key map does (Kafka's
``buildOffsetMap``, by the same rule: ``CleanedTransactionMetadata.is_aborted_data`` of
:mod:`storage_engine.maintenance.txn_cleaning`): the batches of aborted transactions (known from the folder's
``.txnindex`` files, read once on the driver) are left out, so a Spark-built key map equals the in-process one.
``kafka_segments`` (:class:`SegmentDataSource`) also leaves out control batches (transaction markers) and has every
field:

    offset long, timestamp long, key binary, key_hash_hi long, key_hash_lo long, value_size int,
    is_tombstone boolean, batch_base_offset long, batch_last_offset long, segment long

``kafka_segment_keys`` (:class:`SegmentKeysDataSource`) has only what a key map needs, filled straight from the
compiled decoder (``kernels.KERNELS.key_columns``: one decode and one hash per record, into numpy arrays that
become the Arrow buffers, no Python object per record):

    key_hash_hi long, key_hash_lo long, offset long, flags byte   (flags: 1 keyless, 2 tombstone, 4 control)

(compressed batches are decompressed in Python and then decoded the same way; legacy batches and runs without
the compiled kernels take the per-record Python path). The key-map job does not read it as a DataFrame: its
tasks take the same segment groups (:meth:`SegmentKeysReader.partitions`) and the same columns as numpy arrays
(:func:`segment_key_columns`), so no row enters the JVM.

``key_hash_hi/lo`` are the engine's 128-bit key hash (``storage_engine.maintenance.offset_map.key_hash``), the join key of
key maps. Files are opened read-only; a segment that disappears while a task reads it (retention, a swap)
fails the task with an error naming the file. Both sources read as the cleaner does, with the engine's checked
read (``storage_engine.segment.checked_read``): every batch's framing, offset order and CRC is verified, a piece
at a time just before its records are decoded, so no damaged batch reaches a key map; damage raises
``CorruptRecordError`` naming the partition, the file, the byte position and the batch's offsets. This module must be importable on the executors (the project
is installed in the Spark Python environment, or shipped with ``--py-files``).

Tiered topics: with the option ``storageConfig`` (the storage config file), ``kafka_segments`` also reads the
offsets below the partition's local log start from the object store, one Spark partition per remote segment
(:class:`RemoteSegmentPartition`), checked by the same reads; the driver learns the remote segments from
``__remote_log_metadata`` through a read-only open, and the executors fetch the ``.log`` objects without keeping a
cache (they write nothing but their output).
"""
from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

if TYPE_CHECKING:
    from storage_engine.maintenance.txn_cleaning import CleanedTransactionMetadata
    from pyspark.sql.types import StructType

    from storage_engine.record.legacy_records import LegacyBatch
    from storage_engine.record.record_batch import BatchBuffer, RecordBatch
    from storage_engine.record.records import Record
    from storage_engine.segment.txn_index import AbortedTxn

NAME = "kafka_segments"
KEYS_NAME = "kafka_segment_keys"
KEYS_SCHEMA = "key_hash_hi long, key_hash_lo long, offset long, flags byte"
KEYLESS, TOMBSTONE, CONTROL = 1, 2, 4
MAX_PARTITION_BYTES = 512 << 20
SCHEMA = ("offset long, timestamp long, key binary, key_hash_hi long, key_hash_lo long, value_size int, "
          "is_tombstone boolean, batch_base_offset long, batch_last_offset long, segment long")
ROWS_PER_ARROW_BATCH = 65536


class SegmentPartition(InputPartition):
    def __init__(self, path: str, base_offset: int, next_base: int | None, inode: int,
                 aborted: tuple[AbortedTxn, ...] = ()):
        super().__init__(path)
        self.path = path
        self.base_offset = base_offset
        self.next_base = next_base
        self.inode = inode
        self.aborted = aborted   # the aborted transactions not ended before base_offset, by first offset


class RemoteSegmentPartition(InputPartition):
    """A remote segment (its metadata and the store's settings: the executor fetches its ``.log`` object)."""

    def __init__(self, settings: Any, segment: Any, next_base: int, aborted: tuple[AbortedTxn, ...] = ()):
        super().__init__(f"remote:{segment.start_offset}")
        self.settings = settings
        self.segment = segment
        self.base_offset = segment.start_offset
        self.next_base = next_base
        self.aborted = aborted


class SegmentDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema: StructType) -> SegmentReader:
        return SegmentReader(self.options)


def _opt_int(options: Mapping[str, str], name: str) -> int | None:
    raw = options.get(name)
    if raw is None or raw == "":
        return None
    try:
        return int(raw)
    except (TypeError, ValueError):
        raise ValueError(f"option {name} must be an integer offset, got {raw!r}") from None


class SegmentReader(DataSourceReader):
    def __init__(self, options: Mapping[str, str]) -> None:
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
        self.storage_config = options.get("storageConfig") or None

    def _aborted(self) -> tuple[AbortedTxn, ...]:
        """Aborted transactions overlapping [start, end) from every ``.txnindex`` of the folder, by first offset."""
        from storage_engine import layout
        from storage_engine.segment.txn_index import TransactionIndex
        start = self.start if self.start is not None else -1
        end = self.end if self.end is not None else 2**63 - 1
        out: set[AbortedTxn] = set()
        for n in os.listdir(self.path):
            if n.endswith(layout.TXN_INDEX_SUFFIX) and layout.is_offset_named(n):
                index = TransactionIndex(os.path.join(self.path, n), layout.offset_from_filename(n), writable=False)
                for t in index.all_aborted_txns():
                    if t.last_offset >= start and t.first_offset < end:
                        out.add(t)
        return tuple(sorted(out, key=lambda t: (t.first_offset, t.producer_id, t.last_offset)))

    def partitions(self) -> Sequence[InputPartition]:
        return [*self._remote_segments(), *self._segments()]

    def _remote_segments(self) -> list[RemoteSegmentPartition]:
        """The remote segments below the local log start overlapping [start, end) (``storageConfig`` given and the
        topic tiered), each with the aborted transactions its read leaves out."""
        if self.storage_config is None:
            return []
        from storage_engine import layout
        from storage_engine.config_file import load_config
        from storage_engine.inspection.snapshot import LogSnapshot
        from storage_engine.tiered.whole_log import remote_part
        config = load_config(self.storage_config)
        topic, partition = layout.parse_partition_dir(os.path.basename(self.path))
        start = self.start if self.start is not None else -1
        end = self.end if self.end is not None else 2**63 - 1
        with LogSnapshot(config, os.path.dirname(self.path), topic, partition) as snap, \
                remote_part(config, self.path, topic, partition, snap.log_start_offset,
                            snap.local_log_start_offset) as part:
            if part is None:
                return []
            self.start = max(start, part.log_start)
            aborted = sorted({*part.aborted_transactions(max(start, part.log_start), end), *self._aborted()},
                             key=lambda t: (t.first_offset, t.producer_id, t.last_offset))
            segs = [s for s in part.reader.segments_from(topic, partition, self.start, topic_id=part.topic_id)
                    if s.start_offset < min(part.local_start, end)]
            out = []
            for i, seg in enumerate(segs):
                nxt = segs[i + 1].start_offset if i + 1 < len(segs) else part.local_start
                out.append(RemoteSegmentPartition(part.reader.settings, seg, nxt,
                                                  tuple(t for t in aborted if t.last_offset >= seg.start_offset)))
            return out

    def _segments(self) -> list[SegmentPartition]:
        """The segments overlapping [start, end), each with the aborted transactions its read leaves out."""
        from storage_engine import layout
        bases = sorted(layout.offset_from_filename(n) for n in os.listdir(self.path)
                       if n.endswith(layout.LOG_SUFFIX) and layout.is_offset_named(n))
        aborted = self._aborted()
        parts = []
        for i, base in enumerate(bases):
            nxt = bases[i + 1] if i + 1 < len(bases) else None
            if self.end is not None and base >= self.end:
                continue
            if self.start is not None and nxt is not None and nxt <= self.start:
                continue
            path = layout.segment_file(self.path, base, layout.LOG_SUFFIX)
            # A segment is read from its first batch: the transactions aborted before it are over.
            parts.append(SegmentPartition(path, base, nxt, os.stat(path).st_ino,
                                          tuple(t for t in aborted if t.last_offset >= base)))
        return parts

    def read(self, partition: InputPartition) -> Iterator[Any]:
        import pyarrow as pa

        if isinstance(partition, RemoteSegmentPartition):
            yield from self._read_remote(partition, pa)
            return
        if not isinstance(partition, SegmentPartition):
            raise TypeError(f"{NAME} reads a SegmentPartition, not {type(partition).__name__}")
        from storage_engine.segment.file_records import FileRecords
        try:
            fr = FileRecords(partition.path, writable=False)
        except Exception as exc:   # noqa: BLE001 - any failure to open a listed segment means it was replaced
            raise FileNotFoundError(f"segment {partition.path} disappeared while the job read it (retention or "
                                    f"compaction replaced it): {exc}") from None
        cols = _Columns()
        try:
            view = fr.view()
            for cols in self._rows(view, fr.size, partition.path, partition, pa):
                if cols.n >= ROWS_PER_ARROW_BATCH:
                    yield cols.to_arrow(pa)
        finally:
            fr.close()
        if os.path.exists(partition.path) and os.stat(partition.path).st_ino != partition.inode:
            raise FileNotFoundError(f"segment {partition.path} was replaced while the job read it")
        if not os.path.exists(partition.path):
            raise FileNotFoundError(f"segment {partition.path} was deleted while the job read it")
        if cols.n:
            yield cols.to_arrow(pa)

    def _rows(self, view: BatchBuffer, size: int, path: str, partition: SegmentPartition | RemoteSegmentPartition,
              pa: ModuleType) -> Iterator[_Columns]:
        """The rows of one segment's bytes, in column batches: each batch yielded as it grows (the caller sends it
        on once full), the last one at the end. Only byte ranges whose batches all passed the checked read are
        decoded, aborted transactions left out."""
        from storage_engine.maintenance.offset_map import key_hash
        from storage_engine.segment.file_records import iter_batches
        start = self.start if self.start is not None else -1
        end = self.end if self.end is not None else 2**63 - 1
        cols = _Columns()
        for pos, limit in _checked_runs(view, size, path, partition.aborted, partition.base_offset,
                                        partition.next_base, end):
            for batch in iter_batches(view, pos, limit, path):
                if batch.is_control or batch.last_offset < start:
                    continue
                for rec in batch.records():
                    if rec.offset < start or rec.offset >= end:
                        continue
                    hi, lo = key_hash(rec.key) if rec.key is not None else (None, None)
                    cols.add(rec, hi, lo, batch, partition.base_offset)
                if cols.n >= ROWS_PER_ARROW_BATCH:
                    yield cols
                    cols = _Columns()
        yield cols

    def _read_remote(self, partition: RemoteSegmentPartition, pa: ModuleType) -> Iterator[Any]:
        """A remote segment's rows: its ``.log`` object fetched whole (no cache on an executor), then read as a
        local one; a missing or damaged object fails the task naming the object and the segment's offsets."""
        from storage_engine.tiered.cache import NoCache
        from storage_engine.tiered.object_store import ObjectStore
        from storage_engine.tiered.reads import RemoteReader
        seg = partition.segment
        reader = RemoteReader(partition.settings, ObjectStore(partition.settings), _OneSegment(seg), cache=NoCache())
        data, where = reader.segment_bytes(seg)
        cols = _Columns()
        for cols in self._rows(data, len(data), where, partition, pa):
            if cols.n >= ROWS_PER_ARROW_BATCH:
                yield cols.to_arrow(pa)
        if cols.n:
            yield cols.to_arrow(pa)


class _OneSegment:
    """The remote view of one segment, as an executor's reader needs it."""

    def __init__(self, seg: Any) -> None:
        self.seg = seg

    def segments(self, topic: str, partition: int, *, topic_id: Any = None) -> list[Any]:
        return [self.seg]


class _Columns:
    __slots__ = ("n", "offset", "timestamp", "key", "hi", "lo", "value_size", "tomb", "bbase", "blast", "seg")

    def __init__(self) -> None:
        self.n = 0
        self.offset: list[int] = []
        self.timestamp: list[int] = []
        self.key: list[bytes | None] = []
        self.hi: list[int | None] = []
        self.lo: list[int | None] = []
        self.value_size: list[int] = []
        self.tomb: list[bool] = []
        self.bbase: list[int] = []
        self.blast: list[int] = []
        self.seg: list[int] = []

    def add(self, rec: Record, hi: int | None, lo: int | None, batch: RecordBatch | LegacyBatch,
            segment_base: int) -> None:
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

    def to_arrow(self, pa: ModuleType) -> Any:
        return pa.RecordBatch.from_arrays(
            [pa.array(self.offset, pa.int64()), pa.array(self.timestamp, pa.int64()),
             pa.array(self.key, pa.binary()), pa.array(self.hi, pa.int64()), pa.array(self.lo, pa.int64()),
             pa.array(self.value_size, pa.int32()), pa.array(self.tomb, pa.bool_()),
             pa.array(self.bbase, pa.int64()), pa.array(self.blast, pa.int64()), pa.array(self.seg, pa.int64())],
            names=["offset", "timestamp", "key", "key_hash_hi", "key_hash_lo", "value_size", "is_tombstone",
                   "batch_base_offset", "batch_last_offset", "segment"])


class SegmentKeysDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return KEYS_NAME

    def schema(self) -> str:
        return KEYS_SCHEMA

    def reader(self, schema: StructType) -> SegmentKeysReader:
        return SegmentKeysReader(self.options)


class SegmentGroup(InputPartition):
    """Consecutive segments read by one task (fewer, longer tasks: a task costs Spark a fixed overhead)."""

    def __init__(self, segments: list[SegmentPartition]):
        super().__init__(segments[0].path)
        self.segments = segments


class SegmentKeysReader(SegmentReader):
    """Consecutive segments grouped into Spark partitions of about equal bytes: as few as keep each group under
    option ``maxPartitionBytes`` (default 512 MiB), rounded up to a multiple of option ``tasks`` (default 2: the
    tasks that run at once, ``local[2]``'s cores) so that no core idles while the last group is read, and never
    more groups than segments."""

    def __init__(self, options: Mapping[str, str]) -> None:
        super().__init__(options)
        self.max_partition_bytes = _opt_int(options, "maxPartitionBytes") or MAX_PARTITION_BYTES
        self.tasks = _opt_int(options, "tasks") or 2

    def partitions(self) -> Sequence[InputPartition]:
        return self.groups()

    def groups(self) -> list[SegmentGroup]:
        """The Spark partitions: consecutive segments in groups of about equal bytes (see the class docstring)."""
        segments = self._segments()
        if not segments:
            return []
        sizes = [os.stat(p.path).st_size for p in segments]
        total = max(1, sum(sizes))
        n = -(-total // self.max_partition_bytes)
        n = min(len(segments), -(-n // self.tasks) * self.tasks)
        groups: list[list[SegmentPartition]] = [[] for _ in range(n)]
        before = 0
        for seg, size in zip(segments, sizes):
            # the group whose share of the bytes holds the segment's middle byte: consecutive, balanced
            groups[min(n - 1, (2 * before + size) * n // (2 * total))].append(seg)
            before += size
        return [SegmentGroup(g) for g in groups if g]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        import pyarrow as pa
        if not isinstance(partition, SegmentGroup):
            raise TypeError(f"{KEYS_NAME} reads a SegmentGroup, not {type(partition).__name__}")
        for seg in partition.segments:
            for cols in segment_key_columns(seg, self.start, self.end):
                yield cols.to_arrow(pa)


def segment_key_columns(partition: SegmentPartition, start: int | None, end: int | None,
                        rows: int = ROWS_PER_ARROW_BATCH) -> Iterator[KeyColumns]:
    """The key columns (:class:`KeyColumns`: numpy hi, lo, offset, flags; ``n`` rows filled) of one segment's records
    with start <= offset < end, aborted batches left out; fails with an error naming the file if the segment
    disappears or is replaced while it is read. What both the ``kafka_segment_keys`` source and the key-map job's
    tasks read."""
    from storage_engine.segment.file_records import FileRecords
    try:
        fr = FileRecords(partition.path, writable=False)
    except Exception as exc:   # noqa: BLE001 - any failure to open a listed segment means it was replaced
        raise FileNotFoundError(f"segment {partition.path} disappeared while the job ran (retention or "
                                f"compaction replaced it): {exc}") from None
    start = start if start is not None else -1
    end = end if end is not None else 2**63 - 1
    try:
        yield from key_columns(fr.view(), fr.size, start, end, partition.path, rows, partition.aborted,
                               base_offset=partition.base_offset, next_base=partition.next_base)
    finally:
        fr.close()
    if not os.path.exists(partition.path):
        raise FileNotFoundError(f"segment {partition.path} was deleted while the job read it")
    if os.stat(partition.path).st_ino != partition.inode:
        raise FileNotFoundError(f"segment {partition.path} was replaced while the job read it")


def _transactions(aborted: Sequence[AbortedTxn]) -> CleanedTransactionMetadata:
    """The cleaner's transaction state for a read from a segment's first batch (see :class:`SegmentPartition`)."""
    from storage_engine.maintenance.txn_cleaning import CleanedTransactionMetadata
    txn = CleanedTransactionMetadata()
    txn.add_aborted_transactions(aborted)
    return txn


CHECK_CHUNK_BYTES = 1 << 20   # bytes checked ahead of the decode: still in the CPU cache when decoded


class _MappedSegment:
    """One segment file as the engine's checked read takes it (``checked_read.ScannedSegment``), its batches
    parsed from the mapped ``view``: the bytes checked are the bytes then decoded, read once. A sealed segment
    (one with a next segment) is read strictly; the last one may end in a torn tail, not read, as the engine's
    own active segment may."""

    def __init__(self, view: BatchBuffer, size: int, path: str, base_offset: int, sealed: bool) -> None:
        self.view, self.size, self.path, self.base_offset, self.sealed = view, size, path, base_offset, sealed
        self.index_interval_bytes = 4096
        self.log: Any = self   # FileRecords' read_batches, below

    def read_batches(self, start: int = 0, end: int | None = None, *, strict: bool = False,
                     window: int = 0) -> Iterator:
        from storage_engine.segment.file_records import iter_batches
        return iter_batches(self.view, start, self.size if end is None else min(end, self.size), self.path,
                            strict=self.sealed)


def _checked_runs(view: BatchBuffer, size: int, path: str, aborted: Sequence[AbortedTxn], base_offset: int,
                  next_base: int | None, stop: int) -> Iterator[tuple[int, int]]:
    """Byte ranges of ``view[0:size]`` (a segment, from its first batch) whose batches passed the engine's checked
    read (``checked_read.checked_from``: framing, offsets rising within the segment and below ``next_base``,
    each batch's CRC), up to the first batch at or after offset ``stop``, without the batches of the ``aborted``
    transactions, in pieces of about ``CHECK_CHUNK_BYTES``. A piece is handed out only once all its batches are
    checked, so no damaged batch reaches the decoder: damage raises :class:`CorruptRecordError` naming the
    partition, the file, the byte position and the batch's offsets."""
    from storage_engine.errors import CorruptRecordError
    from storage_engine.segment.checked_read import checked_from
    seg = _MappedSegment(view, size, path, base_offset, sealed=next_base is not None)
    txn = _transactions(aborted) if aborted else None
    run_start = run_end = -1
    try:
        for batch in checked_from(seg, 0, -1, next_base, size):
            if batch.base_offset >= stop:
                break
            if txn is not None and txn.is_aborted_data(batch):
                if run_end > run_start:
                    yield run_start, run_end
                run_start = run_end = -1
                continue
            if run_start < 0:
                run_start = batch.file_position
            run_end = batch.file_position + batch.size_in_bytes
            if run_end - run_start >= CHECK_CHUNK_BYTES:
                yield run_start, run_end
                run_start = run_end = -1
    except CorruptRecordError as exc:
        raise type(exc)(f"damaged batch in {_partition_name(path)}, segment {base_offset}"
                        f"{_declared_offsets(view, size, exc.position)}: {exc.reason}", exc.path, exc.position) from exc
    if run_end > run_start >= 0:
        yield run_start, run_end


def _partition_name(path: str) -> str:
    return os.path.basename(os.path.dirname(os.path.abspath(path))) or path


def _declared_offsets(view: BatchBuffer, size: int, position: int | None) -> str:
    """", declaring offsets [first, last]" of the entry at ``position`` (its header only; "" if unreadable)."""
    from storage_engine.errors import StorageError
    from storage_engine.segment.file_records import batch_at
    if position is None:
        return ""
    try:
        batch = batch_at(view, position, size)
    except (StorageError, ValueError):
        return ""
    if batch is None:
        return ""
    first = batch.base_offset if batch.magic >= 2 else batch.last_offset
    return f", declaring offsets [{first}, {batch.last_offset}]"


def key_batches(view: BatchBuffer, size: int, start: int, end: int, path: str, rows: int = ROWS_PER_ARROW_BATCH,
                aborted: Sequence[AbortedTxn] = ()) -> Iterator[Any]:
    """Arrow record batches (``KEYS_SCHEMA``) of the records in ``view[0:size]`` (a segment, from its first batch)
    with start <= offset < end, leaving out the batches of the ``aborted`` transactions (those not ended before
    the segment's base offset)."""
    import pyarrow as pa
    for cols in key_columns(view, size, start, end, path, rows, aborted):
        yield cols.to_arrow(pa)


def key_columns(view: BatchBuffer, size: int, start: int, end: int, path: str, rows: int = ROWS_PER_ARROW_BATCH,
                aborted: Sequence[AbortedTxn] = (), *, base_offset: int | None = None,
                next_base: int | None = None) -> Iterator[KeyColumns]:
    """:func:`key_batches` as :class:`KeyColumns` (numpy arrays, up to ``rows`` rows each; one decode and one hash
    per record in compiled code, no Python object per record). Only checked bytes are decoded
    (:func:`_checked_runs`; ``base_offset`` is the segment's, by default from the file name, ``next_base`` the
    next segment's, None for the last one)."""
    import numpy as np

    from storage_engine import layout
    from storage_engine.record import kernels as _kernels
    from storage_engine.segment.file_records import batch_at
    kernels = _kernels.KERNELS
    cols = KeyColumns(np, rows)
    if base_offset is None:
        base_offset = layout.offset_from_filename(os.path.basename(path))
    for pos, limit in _checked_runs(view, size, path, aborted, base_offset, next_base, end):
        while pos < limit:
            if kernels is not None:
                pos, cols.n, status = kernels.key_columns(view, pos, limit, start, end, cols.columns(), cols.n,
                                                          rows)
                if status == 1:                     # the arrays are full
                    yield cols
                    cols = KeyColumns(np, rows)
                    continue
                if status == 0:                     # done
                    break
            batch = batch_at(view, pos, limit, path)   # the batch the kernel left to Python (or every batch)
            if batch is None or batch.base_offset >= end:
                break
            pos += batch.size_in_bytes
            if batch.last_offset < start:
                continue
            for hi, lo, offset, flags in _batch_rows(batch, start, end, kernels):
                if cols.n == rows:
                    yield cols
                    cols = KeyColumns(np, rows)
                cols.add(hi, lo, offset, flags)
    if cols.n:
        yield cols


def _batch_rows(batch: RecordBatch | LegacyBatch, start: int, end: int,
                kernels: Any) -> list[tuple[int, int, int, int]]:
    """(hi, lo, offset, flags) of one batch's records in range, decoded in Python (compressed batches through the
    kernel, once decompressed)."""
    from storage_engine.record.record_batch import RecordBatch
    if (kernels is not None and batch.magic >= 2 and isinstance(batch, RecordBatch) and batch.compression != 0
            and batch.records_count >= 0):
        import numpy as np
        payload = batch.records_payload()
        plain = bytearray(batch.buf[batch.pos:batch.pos + 61])
        plain[22] &= 0xF8                                      # codec: none
        plain[8:12] = (49 + len(payload)).to_bytes(4, "big")   # length = 61 - 12 + records
        plain += payload
        n = max(batch.records_count, 1)
        cols = KeyColumns(np, n)
        pos, got, status = kernels.key_columns(plain, 0, len(plain), start, end, cols.columns(), 0, n)
        if status == 0 and pos == len(plain):
            return list(zip(cols.hi[:got].tolist(), cols.lo[:got].tolist(), cols.off[:got].tolist(),
                            cols.flags[:got].tolist()))
    from storage_engine.maintenance.offset_map import key_hash
    control = CONTROL if batch.is_control else 0
    out = []
    for rec in batch.records():
        if start <= rec.offset < end:
            hi, lo = key_hash(rec.key) if rec.key is not None else (0, 0)
            out.append((hi, lo, rec.offset, control | (KEYLESS if rec.key is None else 0) |
                        (TOMBSTONE if rec.value is None else 0)))
    return out


class KeyColumns:
    __slots__ = ("n", "hi", "lo", "off", "flags")

    def __init__(self, np: ModuleType, rows: int) -> None:
        self.n = 0
        self.hi = np.empty(rows, dtype=np.int64)
        self.lo = np.empty(rows, dtype=np.int64)
        self.off = np.empty(rows, dtype=np.int64)
        self.flags = np.empty(rows, dtype=np.int8)

    def columns(self) -> tuple:
        """The four arrays as the compiled kernels take them (``key_columns``, ``split_rows``)."""
        return self.hi, self.lo, self.off, self.flags

    def add(self, hi: int, lo: int, offset: int, flags: int) -> None:
        n = self.n
        self.hi[n], self.lo[n], self.off[n], self.flags[n] = hi, lo, offset, flags
        self.n = n + 1

    def to_arrow(self, pa: ModuleType) -> Any:
        n = self.n
        return pa.RecordBatch.from_arrays(
            [pa.array(self.hi[:n]), pa.array(self.lo[:n]), pa.array(self.off[:n]), pa.array(self.flags[:n])],
            names=["key_hash_hi", "key_hash_lo", "offset", "flags"])
