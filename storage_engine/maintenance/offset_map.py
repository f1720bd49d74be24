"""Key maps for compaction: "the latest offset of each key" over the dirty section of a log.

:class:`InProcessOffsetMap` is Kafka's ``SkimpyOffsetMap``: one preallocated buffer of
``log.cleaner.dedupe.buffer.size`` (divided by ``log.cleaner.threads``) bytes holding ``buffer / 24`` slots of
24 bytes - the key's 128-bit hash (:func:`key_hash`, xxh3 where Kafka uses MD5) and its offset - filled to
``slots * log.cleaner.io.buffer.load.factor`` entries; when it is full the cleaner stops mapping and cleans
only up to the last mapped offset (partial cleaning, resumed next round). Like Kafka's map it compares keys by
hash only (at 128 bits a collision among 10^9 keys has a probability below 10^-20) and holds no object per key,
so its resident size is the configured buffer (an anonymous mapping: pages are touched as entries arrive).

Slot layout, three native int64 per slot: hash high, hash low, offset + 1 (0 = empty). Robin Hood linear probing
from the home slot ``(unsigned high * slots) >> 64``: an insert takes the slot of the first resident closer to
its own home than the new key is to its home (the resident moves on), so a lookup stops at such a resident
and an absent key costs about what a present one does, even at the 0.9 load factor. The compiled kernels
(``storage_engine/record/_keymap.c``) and the Python twins below (:func:`_py_table_put`, :func:`_py_table_get`)
implement the same algorithm and leave identical bytes in the buffer.

Every map answers :meth:`get` (offset or -1) and :attr:`latest_offset` (the last offset it covers); maps the
compiled cleaner can probe also have :attr:`kernel_spec` (None for subclasses that override :meth:`get`).
"""
from __future__ import annotations

import mmap
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import TYPE_CHECKING

from xxhash import xxh3_128_intdigest

from storage_engine.errors import StorageError
from storage_engine.record import kernels as _kernels

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    import pyarrow

    # The offsets column of a sorted map: absolute int64, or uint32 relative to a base offset.
    OffsetColumn = npt.NDArray[np.int64] | npt.NDArray[np.uint32]

BYTES_PER_ENTRY = 24
_MASK64 = (1 << 64) - 1
_INT64_MAX = (1 << 63) - 1


def _check_offset(offset: int) -> None:
    if offset < 0 or offset >= _INT64_MAX:
        raise ValueError(f"offset {offset} cannot be stored in a key map")


def _py_table_put(table: memoryview, slots: int, entries: int, hi: int, lo: int, offset: int) -> int:
    """Put (hash, offset) into ``table`` (a native int64 view of the slots): 1 new, 0 updated, -1 full."""
    _check_offset(offset)
    i = ((hi & _MASK64) * slots) >> 64
    dist = 0
    while True:
        b = 3 * i
        if table[b + 2] == 0:
            break
        ehi = table[b]
        if ehi == hi and table[b + 1] == lo:
            table[b + 2] = offset + 1
            return 0
        home = ((ehi & _MASK64) * slots) >> 64
        if (i - home if i >= home else i + slots - home) < dist:
            break
        i = 0 if i + 1 == slots else i + 1
        dist += 1
        if dist >= slots:
            break
    if entries >= slots:
        return -1
    cur = (hi, lo, offset + 1)
    while True:
        b = 3 * i
        if table[b + 2] == 0:
            table[b], table[b + 1], table[b + 2] = cur
            return 1
        ehi = table[b]
        home = ((ehi & _MASK64) * slots) >> 64
        d = i - home if i >= home else i + slots - home
        if d < dist:
            old = (ehi, table[b + 1], table[b + 2])
            table[b], table[b + 1], table[b + 2] = cur
            cur, dist = old, d
        i = 0 if i + 1 == slots else i + 1
        dist += 1


def _py_table_get(table: memoryview, slots: int, hi: int, lo: int) -> int:
    """The offset stored for (hi, lo), or -1."""
    i = ((hi & _MASK64) * slots) >> 64
    dist = 0
    while True:
        b = 3 * i
        stored = table[b + 2]
        if stored == 0:
            return -1
        ehi = table[b]
        if ehi == hi and table[b + 1] == lo:
            return stored - 1
        home = ((ehi & _MASK64) * slots) >> 64
        if (i - home if i >= home else i + slots - home) < dist:
            return -1
        i = 0 if i + 1 == slots else i + 1
        dist += 1
        if dist >= slots:
            return -1


def key_hash(key: bytes) -> tuple[int, int]:
    """The 128-bit xxh3 hash of a key as two signed int64 (high, low): what every key map stores."""
    h = xxh3_128_intdigest(key)
    hi, lo = h >> 64, h & _MASK64
    return (hi - (1 << 64) if hi >= 1 << 63 else hi), (lo - (1 << 64) if lo >= 1 << 63 else lo)


class InProcessOffsetMap:
    """The bounded in-process key map (see the module docstring). Not safe for concurrent use."""

    def __init__(self, memory_bytes: int, load_factor: float = 0.9):
        slots = memory_bytes // BYTES_PER_ENTRY
        if slots * load_factor <= 1:
            raise ValueError(f"offset map of {memory_bytes} bytes with load factor {load_factor} holds no entry")
        self.slots = slots
        self.max_entries = int(slots * load_factor)
        # Private anonymous memory: zero pages until written, and clear() hands the pages back (MADV_DONTNEED).
        self._buffer = mmap.mmap(-1, slots * BYTES_PER_ENTRY, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        try:
            # Probes land anywhere in the buffer: 2 MiB pages mean ~500x fewer page faults and TLB misses.
            self._buffer.madvise(mmap.MADV_HUGEPAGE)
        except (AttributeError, OSError):
            pass
        self.table = memoryview(self._buffer).cast("q")   # 3 native int64 per slot
        self.entries = 0
        self.latest_offset = -1

    @property
    def size(self) -> int:
        return self.entries

    @property
    def full(self) -> bool:
        return self.entries >= self.max_entries

    @property
    def utilization(self) -> float:
        return self.entries / self.slots

    @property
    def kernel_spec(self) -> tuple | None:
        """What the compiled cleaner probes (None when a subclass answers get() itself)."""
        return (0, self.table, self.slots) if type(self).get is InProcessOffsetMap.get else None

    def put(self, key: bytes, offset: int) -> None:
        self.put_hash(*key_hash(key), offset)

    def put_hash(self, hi: int, lo: int, offset: int) -> None:
        kernels = _kernels.KERNELS
        put = kernels.table_put if kernels is not None else _py_table_put
        added = put(self.table, self.slots, self.entries, hi, lo, offset)
        if added < 0:
            raise ValueError("attempted to add a new entry to a full offset map")
        self.entries += added
        self.latest_offset = offset

    def get(self, key: bytes) -> int:
        return self.get_hash(*key_hash(key))

    def get_hash(self, hi: int, lo: int) -> int:
        kernels = _kernels.KERNELS
        get = kernels.table_get if kernels is not None else _py_table_get
        return get(self.table, self.slots, hi, lo)

    def update_latest_offset(self, offset: int) -> None:
        self.latest_offset = offset

    def clear(self) -> None:
        if self.entries:
            self._buffer.madvise(mmap.MADV_DONTNEED)   # private anonymous pages read back as zeros
        self.entries = 0
        self.latest_offset = -1


# -- maps built elsewhere (Spark) --------------------------------------------------------------------------------

MANIFEST = "keymap.json"


class SortedHashOffsetMap:
    """A key map loaded from Parquet files (columns ``key_hash_hi``, ``key_hash_lo``, ``offset``: int64), held
    as three numpy arrays sorted by (high, low) hash: the two int64 halves of the hash and the offsets, stored as
    uint32 relative to a base offset when they span less than 2**32 (always, for a map of fewer than 2**32
    offsets): 20 bytes per distinct key (24 with int64 offsets) and no Python object per key, so 100 million
    keys take about 2 GB. The Spark job writes the files already sorted, one hash range per
    directory ``data/bucket=<n>`` in ascending ``n`` (:func:`map_files` gives their order), so loading is a copy
    plus one pass that checks the order; files from any other writer are sorted here instead.

    With the compiled kernels a bucket index (the first entry of each range of the top ``bits`` bits of the
    high hash, about one int64 per 32 keys) turns a probe into a short binary search inside one bucket, and the
    cleaner probes a whole batch's keys per call; :meth:`get_many` is the same probe for a list of keys.

    The directory also holds ``keymap.json`` (written by the Spark job): the offset range it covers. The map
    covers all of it, so :attr:`latest_offset` = end offset - 1 (no partial rounds)."""

    def __init__(self, hi: npt.NDArray[np.int64], lo: npt.NDArray[np.int64], offsets: OffsetColumn,
                 start_offset: int, end_offset: int, manifest: dict | None = None, *,
                 offset_base: int | None = None) -> None:
        """``offsets``: each key's absolute offset (int64), or, with ``offset_base``, uint32 offsets relative to it
        (what :meth:`load` builds)."""
        if not _is_sorted(hi, lo):
            import numpy as np
            # Reorder one column at a time so that at most one extra column exists besides the sort order:
            # peak about 40 bytes per key, 24 held.
            order = np.lexsort((lo, hi))
            hi = hi[order]
            lo = lo[order]
            offsets = offsets[order]
            del order
        if offset_base is None:
            offsets, offset_base = _narrow(offsets)
        self._hi, self._lo, self._off, self._base = hi, lo, offsets, offset_base
        self._index: tuple | None = None
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

    def offsets(self) -> npt.NDArray[np.int64]:
        """Each key's offset (int64), in the order of the hashes."""
        import numpy as np
        return self._off.astype(np.int64) + self._base

    @property
    def kernel_spec(self) -> tuple | None:
        """What the compiled cleaner probes: (1, hi, lo, offsets, bucket starts, bits), or with uint32 offsets
        (2, hi, lo, offsets, bucket starts, bits, base); None without the kernels or when a subclass answers get()
        itself."""
        kernels = _kernels.KERNELS
        if kernels is None or type(self).get is not SortedHashOffsetMap.get:
            return None
        if self._index is None:
            bits = max(0, min(24, (len(self._off) // 32).bit_length() - 1))
            starts = kernels.sorted_check_and_index(self._hi, self._lo, bits)
            if starts is None:
                raise StorageError("key map arrays are not strictly sorted by hash (a duplicate key hash?)")
            if self._off.dtype == "uint32":
                self._index = (2, self._hi, self._lo, self._off, starts, bits, self._base)
            else:
                self._index = (1, self._hi, self._lo, self._off, starts, bits)
        return self._index

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
        files = map_files(os.path.join(path, "data"))
        # Size the three columns once, then copy the files in one row group at a time, straight from the Arrow
        # buffers: no per-file lists to concatenate, and Arrow's transient buffers stay a few MiB (its allocator
        # keeps what it once held). Not pq.read_table or ChunkedArray.to_numpy: they import pyarrow.dataset,
        # pyarrow.compute and pandas, about 45 MiB of RSS that stayed in the process.
        counts = [pq.ParquetFile(f).metadata.num_rows for f in files]
        total = sum(counts)
        columns = ("key_hash_hi", "key_hash_lo", "offset")
        # Every offset lies in [start, end) (checked per chunk), so when the range spans less than 2**32 the offsets
        # are held in 32 bits, relative to start.
        narrow = end - start <= _U32_SPAN
        arrays = [np.empty(total, dtype=np.int64), np.empty(total, dtype=np.int64),
                  np.empty(total, dtype=np.uint32 if narrow else np.int64)]
        pos = 0
        for part_file, n in zip(files, counts):
            end_pos = pos + n
            with pq.ParquetFile(part_file) as pf:
                for group in range(pf.num_row_groups):
                    t = pf.read_row_group(group, columns=list(columns), use_threads=False)
                    if pos + t.num_rows > end_pos:
                        raise StorageError(f"key map file {part_file} holds more rows than its footer says ({n})")
                    for dest, name in zip(arrays, columns):
                        at = pos
                        for chunk in t.column(name).chunks:
                            values = _int64_values(chunk, part_file, name, pa)
                            if name == "offset":
                                _check_offsets(values, start, end, part_file)
                                if narrow:
                                    values = values - start
                            dest[at:at + len(values)] = values
                            at += len(values)
                    pos += t.num_rows
                    del t
            if pos != end_pos:
                raise StorageError(f"key map file {part_file} holds {n - (end_pos - pos)} rows, its footer says {n}")
            pa.default_memory_pool().release_unused()
        hi, lo, off = arrays
        return cls(hi, lo, off, start, end, manifest, offset_base=start if narrow else 0)

    def get(self, key: bytes) -> int:
        kernels, spec = _kernels.KERNELS, self.kernel_spec
        if kernels is None or spec is None:
            return self._get_python(key)
        return int.from_bytes(kernels.lookup_keys(spec, (key,)), sys.byteorder, signed=True)

    def _get_python(self, key: bytes) -> int:
        hi, lo = key_hash(key)
        i = int(self._hi.searchsorted(hi, "left"))
        n = len(self._hi)
        while i < n and self._hi[i] == hi:
            if self._lo[i] == lo:
                return int(self._off[i]) + self._base
            if self._lo[i] > lo:
                break
            i += 1
        return -1

    def get_many(self, keys: Sequence[bytes]) -> list[int]:
        """``[get(k) for k in keys]``, probed in one call when the compiled kernels are loaded."""
        kernels, spec = _kernels.KERNELS, self.kernel_spec
        if kernels is None or spec is None:
            return [self._get_python(k) for k in keys]
        import numpy as np
        return np.frombuffer(kernels.lookup_keys(spec, keys), dtype=np.int64).tolist()

    def clear(self) -> None:
        raise StorageError("a prebuilt key map cannot be rebuilt in place")

    def update_latest_offset(self, offset: int) -> None:
        self.latest_offset = offset


_U32_SPAN = 1 << 32


def _int64_values(chunk: pyarrow.Array, path: str, name: str, pa: ModuleType) -> npt.NDArray[np.int64]:
    """One Arrow array of int64 (no nulls; other integer types are cast) as a numpy view of its buffer."""
    import numpy as np
    if chunk.null_count:
        raise StorageError(f"key map file {path}: column {name} has null values")
    if chunk.type != pa.int64():
        chunk = chunk.cast(pa.int64())
    return np.frombuffer(chunk.buffers()[1], dtype=np.int64, count=len(chunk), offset=chunk.offset * 8)


def _check_offsets(values: npt.NDArray[np.int64], start: int, end: int, path: str) -> None:
    """Every offset of a key map lies in the range its manifest says it covers, [start, end)."""
    if len(values):
        low, high = int(values.min()), int(values.max())
        if low < start or high >= end:
            bad = low if low < start else high
            raise StorageError(f"key map file {path}: offset {bad} is outside the map's range [{start}, {end})")


def _narrow(offsets: OffsetColumn) -> tuple[OffsetColumn, int]:
    """Absolute int64 offsets as (uint32 offsets relative to their minimum, that minimum) when they span less than
    2**32, else unchanged with base 0."""
    import numpy as np
    if len(offsets) == 0:
        return np.empty(0, dtype=np.uint32), 0
    base = int(offsets.min())
    if int(offsets.max()) - base >= _U32_SPAN:
        return offsets, 0
    out = np.empty(len(offsets), dtype=np.uint32)
    step = 1 << 20                      # a few MiB of temporaries at a time
    for s in range(0, len(offsets), step):
        out[s:s + step] = offsets[s:s + step] - base
    return out, base


def _is_sorted(hi: npt.NDArray[np.int64], lo: npt.NDArray[np.int64], chunk: int = 1 << 22) -> bool:
    """Whether (hi, lo) is strictly increasing: by the compiled kernels (no temporaries), or checked in chunks (a
    few MiB of temporaries at most, which the C allocator may keep)."""
    kernels = _kernels.KERNELS
    if kernels is not None and len(hi) == len(lo) and all(
            getattr(a, "dtype", None) == "int64" and a.flags.c_contiguous for a in (hi, lo)):
        return kernels.sorted_check_and_index(hi, lo, 0) is not None
    n = len(hi)
    for s in range(0, max(n - 1, 0), chunk):
        e = min(n - 1, s + chunk)
        h0, h1, l0, l1 = hi[s:e], hi[s + 1:e + 1], lo[s:e], lo[s + 1:e + 1]
        if not ((h0 < h1) | ((h0 == h1) & (l0 < l1))).all():
            return False
    return True


def map_files(data_dir: str) -> list[str]:
    """The Parquet files of a key map in hash order: ``bucket=<n>`` directories by ascending ``n`` (the Spark job's
    layout), files inside a directory (and files directly in ``data_dir``) by name."""
    import os
    out: list[str] = []
    entries = sorted(os.listdir(data_dir))
    out.extend(os.path.join(data_dir, f) for f in entries if f.endswith(".parquet"))
    buckets = []
    for name in entries:
        full = os.path.join(data_dir, name)
        if name.startswith("bucket=") and os.path.isdir(full):
            try:
                buckets.append((int(name[len("bucket="):]), full))
            except ValueError:
                raise StorageError(f"key map directory {full} is not named bucket=<number>") from None
    for _n, full in sorted(buckets):
        out.extend(os.path.join(full, f) for f in sorted(os.listdir(full)) if f.endswith(".parquet"))
    return out


# A key map the filter reads: built in process by a round, or loaded from a prebuilt file (Spark).
OffsetMap = InProcessOffsetMap | SortedHashOffsetMap
