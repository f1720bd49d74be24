"""``status`` for a terminal: the Storage view's first page as plain-text tables.

The facts come from :func:`storage_engine.inspection.status.overview` (``status --json`` prints it as it is);
this module only lays them out: sizes as :func:`storage_engine.units.human_bytes` writes them (the view's unit
style), percentages with one decimal, columns padded to their widest cell, an empty value as ``-``.
"""
from __future__ import annotations

import os
from collections.abc import Sequence

from storage_engine.inspection.status import Overview
from storage_engine.units import human_bytes


def table(header: Sequence[str], rows: Sequence[Sequence[object]], right: Sequence[int] = ()) -> list[str]:
    """Lines of a table: ``header`` in capitals, columns two spaces apart, the columns in ``right`` (numbers)
    right-aligned; the last column is never padded (it may be long)."""
    cells = [[str(h) if "." in str(h) else str(h).upper() for h in header]] + [["-" if c is None or c == "" else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = []
    for r in cells:
        parts = [c.rjust(widths[i]) if i in right else (c if i == len(r) - 1 else c.ljust(widths[i]))
                 for i, c in enumerate(r)]
        lines.append("  ".join(parts).rstrip())
    return lines


def percent(value: float | None) -> str:
    return "" if value is None else f"{value:.1f}%"


def ratio(value: float | None) -> str:
    return "" if value is None else f"{100 * value:.1f}%"


def _dir_name(path: str) -> str:
    return os.path.basename(path.rstrip("/")) or path


def render(overview: Overview, config_path: str | None = None) -> str:
    dirs = overview["log_dirs"]
    out = [f"{overview['partitions']} partition(s) in {len(dirs)} log dir(s)"
           + (f" (config {config_path})" if config_path else ""), ""]
    out += table(["log dir", "state", "partitions", "log data", ".deleted", "size", "used", "avail", "use%",
                  "damage"],
                 [[d["path"], "online" if d["online"] else "OFFLINE", d["partitions"], human_bytes(d["size_bytes"]),
                   human_bytes(d["deleted_bytes"]), human_bytes(d["capacity_bytes"]), human_bytes(d["used_bytes"]),
                   human_bytes(d["free_bytes"]), percent(d["used_percent"]),
                   (f"{len(d['damaged'])} problem(s)" if d["damaged"] else "none") if d["online"] else d["error"]]
                  for d in dirs], right=(2, 3, 4, 5, 6, 7, 8))
    out += ["", f"Dirtiest compacted partitions ({len(overview['dirtiest'])} of {overview['compacted']}):"]
    if overview["dirtiest"]:
        out += table(["partition", "log dir", "dirty ratio", "min.cleanable.dirty.ratio", "size", "segments",
                      "cleaner checkpoint", "uncleanable"],
                     [[f"{p['topic']}-{p['partition']}", _dir_name(p["log_dir"]), ratio(p.get("dirty_ratio")),
                       ratio(p.get("min_cleanable_dirty_ratio")), human_bytes(p["size_bytes"]), p["segments"],
                       p.get("cleaner_checkpoint"), p.get("uncleanable")] for p in overview["dirtiest"]],
                     right=(2, 3, 4, 5, 6))
    else:
        out.append("  none (no compacted partition)")
    damaged = overview["damaged"]
    problems = [d for d in dirs if d["online"] and d["damaged"] and not d["damaged_partitions"]]
    out += ["", f"Damage: {len(damaged)} partition(s)" + ("" if damaged or problems else ", none found")]
    if damaged:
        out += table(["partition", "log dir", "kind", "what"],
                     [[f"{p['topic']}-{p['partition']}", _dir_name(p["log_dir"]), x.get("kind"), x.get("message")]
                      for p in damaged for x in p.get("damage", [])])
    for d in dirs:
        own = [m for m in d["damaged"] if not any(m.startswith(f"{p['topic']}-{p['partition']}: ") for p in damaged)]
        out += [f"  {d['path']}: {m}" for m in own]
    crashed = [d for d in dirs if d["online"] and d.get("recovery_pending")]
    if crashed:
        out += ["", "Not shut down cleanly (recovery pending; the next writable open runs it):"]
        out += [f"  {d['path']}" for d in crashed]
    offline = [d for d in dirs if not d["online"]]
    if offline:
        out += ["", "Offline log dirs:"] + [f"  {d['path']}: {d['error']}" for d in offline]
    foreign = [(d["path"], f) for d in dirs for f in d["foreign"] + [f"{n} (file)" for n in d["foreign_files"]]]
    if foreign:
        out += ["", "Foreign entries (never loaded, never removed by maintenance; remove-folder removes a folder):"]
        out += [f"  {path}: {f}" for path, f in foreign]
    moves = [(d["path"], m) for d in dirs for m in d["moves_in_progress"]]
    if moves:
        out += ["", "Moves in progress:"]
        out += table(["partition", "from", "to", "copied", "partition size"],
                     [[f"{m['topic']}-{m['partition']}", m.get("source_dir"), path, human_bytes(m["size_bytes"]),
                       human_bytes(m.get("source_size_bytes"))] for path, m in moves], right=(3,))
    deleting = [d for d in dirs if d["deleting"]]
    for d in deleting:
        out.append(f"{d['path']}: {d['deleting']} deleted partition folder(s) ({human_bytes(d['deleting_bytes'])}) "
                   "awaiting removal")
    listener = overview["listener"]
    out.append("")
    if listener:
        out.append(f"Kafka listener: {listener['state']} ({', '.join(listener.get('listeners', []))}), "
                   f"{listener.get('connections', 0)} client(s) connected, {len(overview['groups'])} consumer "
                   "group(s)")
        if overview["groups"]:
            out += table(["group", "state", "members", "lag (records)"],
                         [[g["group_id"], g.get("state"), len(g.get("members", [])), g.get("lag")]
                          for g in overview["groups"]], right=(2, 3))
    else:
        out.append("Kafka listener: none has run on these log dirs")
    return "\n".join(out)
