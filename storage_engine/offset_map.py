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

BYTES_PER_ENTRY = 24


class InProcessOffsetMap:
    def __init__(self, memory_bytes: int, load_factor: float = 0.9):
        slots = memory_bytes // BYTES_PER_ENTRY
        if slots * load_factor <= 1:
            raise ValueError(f"offset map of {memory_bytes} bytes with load factor {load_factor} holds no entry")
        self.slots = slots
        self.max_entries = int(slots * load_factor)
        self._map: dict[bytes, int] = {}
        self.latest_offset = -1

    @property
    def size(self) -> int:
        return len(self._map)

    @property
    def full(self) -> bool:
        return len(self._map) >= self.max_entries

    @property
    def utilization(self) -> float:
        return len(self._map) / self.slots

    def put(self, key: bytes, offset: int) -> None:
        if key not in self._map and len(self._map) >= self.slots:
            raise ValueError("attempted to add a new entry to a full offset map")
        self._map[key] = offset
        self.latest_offset = offset

    def get(self, key: bytes) -> int:
        return self._map.get(key, -1)

    def update_latest_offset(self, offset: int) -> None:
        self.latest_offset = offset

    def clear(self) -> None:
        self._map.clear()
        self.latest_offset = -1
