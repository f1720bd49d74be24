"""The lag history chart of a consumer group's page: an inline SVG (no script, no library) of the samples the
Kafka listener keeps (:func:`storage_engine.inspection.listener.lag_history`): the group's total lag as a bold
line, and the partitions that lagged most as thin lines, each named in the legend and in a tooltip."""
from __future__ import annotations

import datetime
from html import escape
from typing import Any

COLOURS = ("#d97706", "#059669", "#7c3aed", "#dc2626", "#0891b2", "#65a30d", "#db2777", "#4b5563")
TOTAL_COLOUR = "#2b6cb0"
MAX_LINES = len(COLOURS)


def _when(ms: int) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def lag_chart(samples: list[dict[str, Any]], width: int = 760, height: int = 240) -> dict[str, Any]:
    """``{"svg": markup or None, "points": samples, "lines": [{"name", "colour", "last"}], "first_ms", "last_ms",
    "max_lag"}`` for a group's samples (``[{"t", "lag", "partitions": {(topic, partition): lag}}]``, oldest
    first)."""
    if not samples:
        return {"svg": None, "points": 0, "lines": [], "first_ms": None, "last_ms": None, "max_lag": 0}
    ts = [int(s["t"]) for s in samples]
    peak: dict[tuple[str, int], int] = {}
    for s in samples:
        for tp, lag in s["partitions"].items():
            peak[tp] = max(peak.get(tp, 0), lag)
    shown = sorted(sorted(peak, key=lambda tp: (-peak[tp], tp))[:MAX_LINES]) if len(peak) > 1 else []
    top = max([int(s["lag"]) for s in samples] + [1])
    x0, x1 = min(ts), max(ts)
    pad_l, pad_r, pad_t, pad_b = 70, 20, 14, 36

    def x(v: int) -> float:
        return pad_l + (v - x0) / (x1 - x0) * (width - pad_l - pad_r) if x1 > x0 else (pad_l + width - pad_r) / 2

    def y(v: int) -> float:
        return pad_t + (1 - v / top) * (height - pad_t - pad_b)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
             f'aria-label="consumer group lag over time">',
             f'<line x1="{pad_l}" y1="{height - pad_b}" x2="{width - pad_r}" y2="{height - pad_b}" stroke="#999"/>',
             f'<line x1="{pad_l}" y1="{pad_t}" x2="{pad_l}" y2="{height - pad_b}" stroke="#999"/>',
             f'<text x="4" y="{pad_t + 10}" font-size="11">{top}</text>',
             f'<text x="4" y="{height - pad_b}" font-size="11">0</text>']
    lines = []
    for i, tp in enumerate(shown):
        colour, name = COLOURS[i], f"{tp[0]}-{tp[1]}"
        points = [(x(t), y(s["partitions"][tp])) for t, s in zip(ts, samples) if tp in s["partitions"]]
        parts.append(f'<polyline class="partition" data-partition="{escape(name)}" fill="none" stroke="{colour}" '
                     'stroke-width="1.2" points="' + " ".join(f"{a:.1f},{b:.1f}" for a, b in points)
                     + f'"><title>{escape(name)}</title></polyline>')
        last = next((s["partitions"][tp] for s in reversed(samples) if tp in s["partitions"]), None)
        lines.append({"name": name, "colour": colour, "last": last})
    parts.append(f'<polyline class="total" fill="none" stroke="{TOTAL_COLOUR}" stroke-width="2.5" points="'
                 + " ".join(f"{x(t):.1f},{y(int(s['lag'])):.1f}" for t, s in zip(ts, samples))
                 + '"><title>total lag</title></polyline>')
    if len(samples) == 1:
        parts.append(f'<circle cx="{x(ts[0]):.1f}" cy="{y(int(samples[0]["lag"])):.1f}" r="3" fill="{TOTAL_COLOUR}"/>')
    parts.append(f'<text x="{pad_l}" y="{height - 12}" font-size="11">{_when(x0)} UTC</text>')
    parts.append(f'<text x="{width - pad_r}" y="{height - 12}" font-size="11" text-anchor="end">{_when(x1)} UTC</text>')
    parts.append("</svg>")
    return {"svg": "".join(parts), "points": len(samples), "lines": lines, "first_ms": x0, "last_ms": x1,
            "max_lag": top}
