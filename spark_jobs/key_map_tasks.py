"""The two kinds of task of the key-map job (``spark_jobs/build_key_map.py``); they run in Spark's Python workers,
so this module must be importable there (the project installed in the Spark Python environment, or on
PYTHONPATH).

Phase 1, :func:`split_group`, one task per segment group (``SegmentKeysReader.partitions``: consecutive segments of
about equal bytes, up to 512 MiB each): decodes the group's segments with the compiled kernels
(``segment_source.segment_key_columns``: one decode and one hash per record, aborted batches left out, as the
in-process map reads the log), counts records, keyless records and tombstones, drops keyless and control-batch
records, and appends the (hash high, hash low, offset) rows of each bucket (the top bits of the high hash, in signed
order) to ``<stage>/bucket=<n>/group=<g>.rows``: raw little-endian int64 triples, 24 bytes per row, in log order.
Every batch is checked before it is decoded (``segment_source``'s checked reads); a damaged one stops the task, which
returns the damage to the driver instead of rows from it.

Phase 2, :func:`merge_bucket`, one task per bucket: reads the bucket's rows from every group, keeps the maximum
offset per 128-bit hash (``_keymap.c``'s ``sort_latest``: sorts the rows by (high, low) in signed order in place
and keeps each key's latest offset) and writes ``<data>/bucket=<n>/part.parquet`` (``key_hash_hi``,
``key_hash_lo``, ``offset``; int64, sorted, uncompressed: hashes do not compress; row groups of 131,072 rows, so
the loader's transient Arrow buffers stay small), the layout ``SortedHashOffsetMap.load`` copies without sorting.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, BinaryIO

import numpy as np

if TYPE_CHECKING:
    import numpy.typing as npt

    from spark_jobs.segment_source import KeyColumns, SegmentGroup

ROWS_PER_CHUNK = 1 << 20     # rows decoded per chunk: 24 MiB of rows in flight per task
ROWS_PER_ROW_GROUP = 1 << 17  # 3 MiB row groups: what SortedHashOffsetMap.load holds in Arrow buffers at a time
_ROW = np.dtype("<i8")
_SIGN = np.uint64(1 << 63)


def bucket_of(hi: npt.NDArray[np.int64], bits: int) -> npt.NDArray[np.uint16]:
    """Bucket numbers (uint16) of high hashes: their top ``bits`` bits in signed order (0 = most negative)."""
    if bits == 0:
        return np.zeros(len(hi), dtype=np.uint16)
    return ((hi.view(np.uint64) ^ _SIGN) >> np.uint64(64 - bits)).astype(np.uint16)


def stage_file(stage: str, bucket: int, group: int) -> str:
    return os.path.join(stage, f"bucket={bucket}", f"group={group:06d}.rows")


def split_group(group_index: int, group: SegmentGroup, start: int, end: int, bits: int,
                stage: str) -> tuple[int, int, int, dict | None]:
    """Phase 1 for one segment group (see the module docstring). Returns (records, keyless, tombstones, damage):
    ``damage`` is None, or, when the source found a damaged batch (``CorruptRecordError``: it stops there, no
    row of that batch or after it is written), ``{"error_type", "message", "reason", "path", "position"}`` for the
    driver, which fails the job with it (:func:`damage_of`): damage is no task failure for Spark to retry."""
    from spark_jobs.segment_source import CONTROL, KEYLESS, TOMBSTONE, segment_key_columns
    from storage_engine.errors import CorruptRecordError
    records = keyless = tombstones = 0
    files: dict[int, BinaryIO] = {}
    rows = np.empty((ROWS_PER_CHUNK, 3), dtype=_ROW)
    counts = np.empty(1 << bits, dtype=np.int64)
    damage = None
    try:
        for seg in group.segments:
            for cols in segment_key_columns(seg, start, end, ROWS_PER_CHUNK):
                n = cols.n
                flags = cols.flags[:n]
                records += n
                keyless += int(np.count_nonzero(flags & KEYLESS))
                tombstones += int(np.count_nonzero(flags & TOMBSTONE))
                if len(rows) < n:
                    rows = np.empty((n, 3), dtype=_ROW)
                split_by_bucket(cols, n, KEYLESS | CONTROL, bits, rows, counts)
                pos = 0
                for b in np.flatnonzero(counts).tolist():
                    f = files.get(b)
                    if f is None:
                        path = stage_file(stage, b, group_index)
                        os.makedirs(os.path.dirname(path), exist_ok=True)
                        f = files[b] = open(path, "wb")
                    k = int(counts[b])
                    f.write(rows[pos:pos + k].data)
                    pos += k
    except CorruptRecordError as exc:
        damage = damage_of(exc)
    finally:
        for f in files.values():
            f.close()
    return records, keyless, tombstones, damage


def damage_of(exc: BaseException) -> dict:
    """A located engine error (``CorruptRecordError``) as the JSON-able dict :func:`split_group` returns."""
    return {"error_type": type(exc).__name__, "message": str(exc), "reason": getattr(exc, "reason", str(exc)),
            "path": getattr(exc, "path", None), "position": getattr(exc, "position", None)}


def split_by_bucket(cols: KeyColumns, n: int, drop: int, bits: int, rows: npt.NDArray[np.int64],
                    counts: npt.NDArray[np.int64]) -> int:
    """Rows [0, n) of decoded key columns without ``drop`` flags, as (high, low, offset) rows into ``rows`` grouped
    by bucket (:func:`bucket_of`), in log order within a bucket; ``counts[b]`` = rows of bucket b. Returns the rows
    kept (compiled ``split_rows``, or numpy)."""
    from storage_engine.record import kernels as _kernels
    kernels = _kernels.KERNELS
    if kernels is not None:
        return kernels.split_rows(cols.columns(), n, drop, bits, rows, counts)
    keep = (cols.flags[:n] & drop) == 0
    hi, lo, off = cols.hi[:n][keep], cols.lo[:n][keep], cols.off[:n][keep]
    buckets = bucket_of(hi, bits)
    order = np.argsort(buckets, kind="stable")    # radix sort of 16-bit numbers; keeps log order
    kept = len(hi)
    rows[:kept, 0] = hi[order]
    rows[:kept, 1] = lo[order]
    rows[:kept, 2] = off[order]
    counts[:] = np.bincount(buckets, minlength=1 << bits)
    return kept


def latest_per_key(rows: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """Sort (n, 3) int64 rows (hash high, hash low, offset) by hash in signed order and keep the maximum offset of
    each hash: returns the first ``distinct`` rows of ``rows`` (sorted in place with the compiled kernels)."""
    from storage_engine.record import kernels as _kernels
    kernels = _kernels.KERNELS
    if kernels is not None:
        distinct = kernels.sort_latest(rows)
        return rows[:distinct]
    order = np.lexsort((rows[:, 2], rows[:, 1], rows[:, 0]))
    rows = rows[order]
    last = np.ones(len(rows), dtype=bool)
    last[:-1] = (rows[1:, 0] != rows[:-1, 0]) | (rows[1:, 1] != rows[:-1, 1])
    return rows[last]


def merge_bucket(bucket: int, stage: str, data: str) -> int:
    """Phase 2 for one bucket (see the module docstring). Returns the distinct keys written."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    folder = os.path.join(stage, f"bucket={bucket}")
    names = sorted(os.listdir(folder)) if os.path.isdir(folder) else []
    sizes = [os.path.getsize(os.path.join(folder, n)) for n in names]
    rows = np.empty((sum(sizes) // 24, 3), dtype=_ROW)
    flat = rows.reshape(-1).view(np.uint8)
    pos = 0
    for name, size in zip(names, sizes):
        with open(os.path.join(folder, name), "rb") as f:
            if f.readinto(flat[pos:pos + size].data) != size:
                raise OSError(f"short read of {os.path.join(folder, name)}")
        pos += size
    if not len(rows):
        return 0
    latest = latest_per_key(rows)
    table = pa.table({"key_hash_hi": np.ascontiguousarray(latest[:, 0]),
                      "key_hash_lo": np.ascontiguousarray(latest[:, 1]),
                      "offset": np.ascontiguousarray(latest[:, 2])})
    out = os.path.join(data, f"bucket={bucket}")
    os.makedirs(out, exist_ok=True)
    # Plain encoding: random 64-bit hashes gain nothing from a dictionary, and pyarrow's default tries one for every
    # column chunk (7x the CPU of the whole write).
    pq.write_table(table, os.path.join(out, "part.parquet"), compression="none", use_dictionary=False,
                   row_group_size=ROWS_PER_ROW_GROUP)
    return len(latest)
