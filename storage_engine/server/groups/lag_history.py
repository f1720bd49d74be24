"""The history of consumer-group lag the listener (``serve``) keeps for the Storage view's lag chart.

At every status write (every ``STATUS_INTERVAL_S``) the broker samples each group's lag on every partition of every
topic the group reads: the topics it has committed offsets on, the topics its members are assigned and the topics
they subscribe to. A partition with a committed offset lags by ``log end - committed``; one without a commit by
``log end - log start`` (all of it is unread: what a consumer starting from the earliest offset has to read), and is
stored as such (``from_start``).

Bounded: the last :data:`RECENT_SAMPLES` samples (10 minutes at 5 s) are kept as taken, and one sample a minute
for :data:`MINUTE_SAMPLES` minutes (24 hours) before that; a group's partitions beyond
:data:`MAX_PARTITIONS_PER_GROUP` (the most lagging kept) count in its total only; at most :data:`MAX_GROUPS`
groups (the most lagging). The file stays below a few MiB whatever the store.

Crash-safe: the file (``.engine+lag-history.json`` in the first log dir; read by
:func:`storage_engine.inspection.listener.lag_history`, beside the status file) is replaced
atomically (temp file, rename); it is fsynced when a minute sample is added, so a crash loses at most the recent
samples since. A file that cannot be read (damaged, another version) is set aside as ``.damaged`` and the history
starts anew: it is a courtesy, never a reason not to serve.

Format (version 1)::

    {"version": 1, "recent": [sample, ...], "minutes": [sample, ...]}
    sample = {"t": <epoch ms>, "groups": {"<group id>": {"lag": <total>, "partitions":
              [[topic, partition, lag, committed or null], ...]}}}
"""
from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from storage_engine.durable import atomic_write, read_regular_file
from storage_engine.errors import StorageError
from storage_engine.inspection.listener import LAG_HISTORY_FILE, LAG_HISTORY_VERSION, group_topics, is_lag_sample

logger = logging.getLogger(__name__)

VERSION = LAG_HISTORY_VERSION
RECENT_SAMPLES = 120                 # 10 minutes at the status interval of 5 s
MINUTE_SAMPLES = 24 * 60             # one a minute for a day
MINUTE_MS = 60_000
MAX_PARTITIONS_PER_GROUP = 64
MAX_GROUPS = 50
MAX_FILE_BYTES = 64 << 20

Sample = dict[str, Any]
# (topic, partition) -> (log start offset, log end offset), or None when this broker has no such log
OffsetsOf = Callable[[str, int], "tuple[int, int] | None"]


def history_path(log_dir: str) -> str:
    return os.path.join(log_dir, LAG_HISTORY_FILE)


def take_sample(now_ms: int, groups: Iterable[Mapping[str, Any]], partitions_of: Callable[[str], list[int]],
                offsets_of: OffsetsOf) -> Sample:
    """One sample of every group's lag per partition (see the module docstring), bounded."""
    out: dict[str, Any] = {}
    for g in groups:
        committed = g.get("offsets") or {}
        rows: list[tuple[str, int, int, int | None]] = []
        for topic in sorted(group_topics(g)):
            for p in partitions_of(topic):
                offsets = offsets_of(topic, p)
                if offsets is None:
                    continue
                start, end = offsets
                offset = (committed.get(topic) or {}).get(str(p))
                lag = max(0, end - (start if offset is None else offset))
                rows.append((topic, p, lag, offset))
        rows.sort(key=lambda r: (-r[2], r[0], r[1]))
        out[str(g["group_id"])] = {"lag": sum(r[2] for r in rows),
                                   "partitions": [list(r) for r in sorted(rows[:MAX_PARTITIONS_PER_GROUP])]}
    if len(out) > MAX_GROUPS:
        kept = sorted(out, key=lambda gid: -out[gid]["lag"])[:MAX_GROUPS]
        out = {gid: out[gid] for gid in sorted(kept)}
    return {"t": now_ms, "groups": out}


class LagHistory:
    """The bounded history in memory and on disk (see the module docstring); one per broker."""

    def __init__(self, path: str):
        self.path = path
        self.recent: list[Sample] = []
        self.minutes: list[Sample] = []
        self._load()

    def _load(self) -> None:
        try:
            data = json.loads(read_regular_file(self.path, MAX_FILE_BYTES))
        except FileNotFoundError:
            return
        except (OSError, StorageError, ValueError) as exc:
            self._set_aside(f"{type(exc).__name__}: {exc}")
            return
        if (not isinstance(data, dict) or data.get("version") != VERSION
                or not isinstance(data.get("recent"), list) or not isinstance(data.get("minutes"), list)
                or not all(is_lag_sample(s) for s in data["recent"] + data["minutes"])):
            self._set_aside("not a version-1 lag history")
            return
        self.recent = data["recent"][-RECENT_SAMPLES:]
        self.minutes = data["minutes"][-MINUTE_SAMPLES:]

    def _set_aside(self, why: str) -> None:
        logger.warning("lag history %s cannot be read (%s): set aside as .damaged, starting anew", self.path, why)
        try:
            os.replace(self.path, self.path + ".damaged")
        except OSError:
            pass

    def add(self, sample: Sample) -> None:
        """Keep ``sample`` and write the file: fsynced when it also becomes the sample of a new minute."""
        if not sample["groups"] and not self.recent and not self.minutes:
            return       # no group has ever been seen: no file
        minute = not self.minutes or sample["t"] // MINUTE_MS > self.minutes[-1]["t"] // MINUTE_MS
        self.recent = (self.recent + [sample])[-RECENT_SAMPLES:]
        if minute:
            self.minutes = (self.minutes + [sample])[-MINUTE_SAMPLES:]
        data = {"version": VERSION, "recent": self.recent, "minutes": self.minutes}
        atomic_write(self.path, json.dumps(data, separators=(",", ":")).encode("utf-8"), sync=minute,
                     steps="lag-history", what="lag history")
