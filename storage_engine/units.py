"""Sizes as people read them: in task logs, the Storage view and the demo's tables."""
from __future__ import annotations


def human_bytes(n: int | float | None) -> str:
    """1536 -> "1.5 KiB"; exact bytes below 1 KiB; binary units up to TiB; a negative size (a shrink) keeps its
    sign; None (not known) -> ""."""
    if n is None:
        return ""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(size) < 1024:
            return f"{int(size)} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"
