"""Key maps for compaction: "the latest offset of each key" over the dirty section of a log.

:class:`InProcessOffsetMap` plays the role of Kafka's ``SkimpyOffsetMap``. Kafka sizes its map by
``log.cleaner.dedupe.buffer.size`` (divided by ``log.cleaner.threads``) at 24 bytes per entry (16-byte MD5 +
8-byte offset) and fills it to ``slots * log.cleaner.io.buffer.load.factor`` entries; when it is full the
cleaner stops mapping and cleans only up to the last mapped offset (partial cleaning, resumed next round).
This map keeps the same capacity rule, so a log is split into the same rounds as Kafka would split it, but
stores exact keys (no hash collisions). Its real memory use is that of a Python dict (about 100 bytes per
key plus the key itself), which is why large maps are built outside the cleaning process (Spark).

Every map answers :meth:`get` (offset or -1) and :attr:`latest_offset` (the last offset it covers).
"""
from __future__ import annotations

from xxhash import xxh3_128_intdigest

from storage_engine.errors import StorageError

BYTES_PER_ENTRY = 24


class InProcessOffsetMap:
    def __init__(self, memory_bytes: int, load_factor: float = 0.9):
        slots = memory_bytes // BYTES_PER_ENTRY
        if slots * load_factor <= 1:
            raise ValueError(f"offset map of {memory_bytes} bytes with load factor {load_factor} holds no entry")
        self.slots = slots
        self.max_entries = int(slots * load_factor)
        self.table: dict[bytes, int] = {}   # key -> latest offset; the cleaner's hot loops use it directly
        self.latest_offset = -1

    @property
    def size(self) -> int:
        return len(self.table)

    @property
    def full(self) -> bool:
        return len(self.table) >= self.max_entries

    @property
    def utilization(self) -> float:
        return len(self.table) / self.slots

    def put(self, key: bytes, offset: int) -> None:
        if key not in self.table and len(self.table) >= self.slots:
            raise ValueError("attempted to add a new entry to a full offset map")
        self.table[key] = offset
        self.latest_offset = offset

    def get(self, key: bytes) -> int:
        return self.table.get(key, -1)

    def update_latest_offset(self, offset: int) -> None:
        self.latest_offset = offset

    def clear(self) -> None:
        self.table.clear()
        self.latest_offset = -1


# -- maps built elsewhere (Spark) --------------------------------------------------------------------------------

def key_hash(key: bytes) -> tuple[int, int]:
    """The 128-bit xxh3 hash of a key as two signed int64 (high, low) - the join key of prebuilt maps.

    Like Kafka's MD5-keyed map, a prebuilt map compares keys by hash only; at 128 bits a collision among
    10^9 keys has a probability below 10^-20."""
    h = xxh3_128_intdigest(key)
    hi, lo = h >> 64, h & 0xFFFFFFFFFFFFFFFF
    return (hi - (1 << 64) if hi >= 1 << 63 else hi), (lo - (1 << 64) if lo >= 1 << 63 else lo)


MANIFEST = "keymap.json"


class SortedHashOffsetMap:
    """A key map loaded from Parquet files (columns ``key_hash_hi``, ``key_hash_lo``, ``offset``: int64), held
    as three sorted numpy arrays: 24 bytes per distinct key and no Python object per key, so 100 million keys
    take about 2.4 GB. Lookups hash the key and binary-search the arrays.

    The directory also holds ``keymap.json`` (written by the Spark job): the offset range it covers. The map
    covers all of it, so :attr:`latest_offset` = end offset - 1 (no partial rounds)."""

    def __init__(self, hi, lo, offsets, start_offset: int, end_offset: int, manifest: dict | None = None):
        import numpy as np
        # Reorder one column at a time so that at most one extra column exists besides the sort order:
        # peak about 40 bytes per key, 24 held.
        order = np.lexsort((lo, hi))
        hi = hi[order]
        lo = lo[order]
        offsets = offsets[order]
        del order
        self._hi, self._lo, self._off = hi, lo, offsets
        self.start_offset = start_offset
        self.end_offset = end_offset
        self.latest_offset = end_offset - 1
        self.manifest = manifest or {}
        self.max_entries = len(self._off)
        self.utilization = 1.0 if len(self._off) else 0.0

    @property
    def size(self) -> int:
        return len(self._off)

    @property
    def nbytes(self) -> int:
        return self._hi.nbytes + self._lo.nbytes + self._off.nbytes

    @classmethod
    def load(cls, path: str, *, expect_start: int | None = None, expect_end: int | None = None,
             expect_partition: tuple[str, int] | None = None) -> "SortedHashOffsetMap":
        import json
        import os

        import numpy as np
        import pyarrow as pa
        import pyarrow.parquet as pq
        try:
            with open(os.path.join(path, MANIFEST), "rb") as f:
                manifest = json.loads(f.read())
        except (OSError, ValueError) as exc:
            raise StorageError(f"key map at {path} has no readable {MANIFEST}: {exc}") from None
        start, end = int(manifest["start_offset"]), int(manifest["end_offset"])
        if expect_partition is not None and (manifest.get("topic"), manifest.get("partition")) != \
                (expect_partition[0], expect_partition[1]):
            raise StorageError(f"key map at {path} is for {manifest.get('topic')}-{manifest.get('partition')}, "
                               f"not {expect_partition[0]}-{expect_partition[1]}")
        if (expect_start is not None and start != expect_start) or (expect_end is not None and end != expect_end):
            raise StorageError(f"key map at {path} covers [{start}, {end}), expected [{expect_start}, {expect_end})")
        files = sorted(os.path.join(path, "data", f) for f in os.listdir(os.path.join(path, "data"))
                       if f.endswith(".parquet"))
        # Size the three columns once, then copy each file's columns in: no per-file lists to concatenate, and
        # Arrow's buffers go back to the OS after each file (Arrow's pool would otherwise keep them).
        counts = [pq.ParquetFile(f).metadata.num_rows for f in files]
        total = sum(counts)
        hi = np.empty(total, dtype=np.int64)
        lo = np.empty(total, dtype=np.int64)
        off = np.empty(total, dtype=np.int64)
        pos = 0
        for part_file, n in zip(files, counts):
            t = pq.read_table(part_file, columns=["key_hash_hi", "key_hash_lo", "offset"], memory_map=True)
            if t.num_rows != n:
                raise StorageError(f"key map file {part_file} holds {t.num_rows} rows, its footer says {n}")
            hi[pos:pos + n] = t.column("key_hash_hi").to_numpy()
            lo[pos:pos + n] = t.column("key_hash_lo").to_numpy()
            off[pos:pos + n] = t.column("offset").to_numpy()
            pos += n
            del t
            pa.default_memory_pool().release_unused()
        return cls(hi, lo, off, start, end, manifest)

    def get(self, key: bytes) -> int:
        hi, lo = key_hash(key)
        i = int(self._hi.searchsorted(hi, "left"))
        n = len(self._hi)
        while i < n and self._hi[i] == hi:
            if self._lo[i] == lo:
                return int(self._off[i])
            if self._lo[i] > lo:
                break
            i += 1
        return -1

    def clear(self) -> None:
        raise StorageError("a prebuilt key map cannot be rebuilt in place")

    def update_latest_offset(self, offset: int) -> None:
        self.latest_offset = offset
