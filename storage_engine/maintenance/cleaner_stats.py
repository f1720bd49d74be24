"""The figures of one cleaning round (Kafka's ``CleanerStats``), and the lines the cleaner logs from them."""
from __future__ import annotations

import time
from dataclasses import dataclass, field

MB = 1024 * 1024


@dataclass
class CleanerStats:
    bytes_read: int = 0
    messages_read: int = 0
    bytes_written: int = 0
    messages_written: int = 0
    map_bytes_read: int = 0
    map_messages_read: int = 0
    invalid_messages_read: int = 0
    tombstones_removed: int = 0
    buffer_utilization: float = 0.0
    start_s: float = field(default_factory=time.monotonic)
    map_complete_s: float = 0.0
    end_s: float = 0.0

    def as_dict(self) -> dict:
        elapsed = max(self.end_s - self.start_s, 1e-9)
        map_s = max(self.map_complete_s - self.start_s, 0.0)
        clean_s = max(self.end_s - self.map_complete_s, 0.0)
        return {
            "mb_read": round(self.bytes_read / MB, 3), "mb_written": round(self.bytes_written / MB, 3),
            "bytes_read": self.bytes_read, "bytes_written": self.bytes_written,
            "messages_read": self.messages_read, "messages_written": self.messages_written,
            "records_removed": self.messages_read - self.messages_written,
            "map_bytes_read": self.map_bytes_read, "map_messages_read": self.map_messages_read,
            "invalid_messages_read": self.invalid_messages_read, "tombstones_removed": self.tombstones_removed,
            "map_utilization_percent": round(100 * self.buffer_utilization, 2),
            "elapsed_s": round(elapsed, 4), "map_s": round(map_s, 4), "clean_s": round(clean_s, 4),
            "mb_per_s": round(self.bytes_read / MB / elapsed, 3),
            "size_reduction_percent": round(100 * (1 - self.bytes_written / self.bytes_read), 2)
            if self.bytes_read else 0.0,
            "fewer_messages_percent": round(100 * (1 - self.messages_written / self.messages_read), 2)
            if self.messages_read else 0.0,
        }

    def log_lines(self, name: str, first_dirty: int, end: int) -> list[str]:
        d = self.as_dict()
        total = d["elapsed_s"]
        return [
            f"Log cleaner cleaned log {name} (dirty section = [{first_dirty}, {end}])",
            f"{d['mb_read']:,.1f} MB of log processed in {total:,.1f} seconds ({d['mb_per_s']:,.1f} MB/sec).",
            f"Indexed {self.map_bytes_read / MB:,.1f} MB in {d['map_s']:,.1f} seconds "
            f"({self.map_bytes_read / MB / max(d['map_s'], 1e-9):,.1f} Mb/sec, "
            f"{100 * d['map_s'] / max(total, 1e-9):,.1f}% of total time)",
            f"Buffer utilization: {d['map_utilization_percent']:,.1f}%",
            f"Cleaned {d['mb_read']:,.1f} MB in {d['clean_s']:,.1f} seconds "
            f"({d['mb_read'] / max(d['clean_s'], 1e-9):,.1f} Mb/sec, "
            f"{100 * d['clean_s'] / max(total, 1e-9):,.1f}% of total time)",
            f"Start size: {d['mb_read']:,.1f} MB ({self.messages_read:,} messages)",
            f"End size: {d['mb_written']:,.1f} MB ({self.messages_written:,} messages)",
            f"{d['size_reduction_percent']:,.1f}% size reduction ({d['fewer_messages_percent']:,.1f}% fewer messages)",
        ]
