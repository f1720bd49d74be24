"""The history of consumer-group lag the listener (``serve``) keeps for the Storage view's lag chart.

At every status write (every ``STATUS_INTERVAL_S``) the broker samples each group's lag on every partition of every
topic the group reads: the topics it has committed offsets on, the topics its members are assigned and the topics
they subscribe to. A partition with a committed offset lags by ``log end - committed``; one without a commit by
``log end - log start`` (all of it is unread: what a consumer starting from the earliest offset has to read), and is
stored with a null committed offset. A sample's ``lag`` is the sum over the group's partitions, both kinds.

Bounded: the last :data:`RECENT_SAMPLES` samples (10 minutes at 5 s) are kept as taken, and one sample every
:data:`OLDER_STEP_MS` (5 minutes) for :data:`OLDER_SAMPLES` steps (24 hours) before that. A sample holds at most
:data:`MAX_GROUPS` groups (the most lagging) and :data:`MAX_PARTITIONS` partition figures in all, at most
:data:`MAX_PARTITIONS_PER_GROUP` a group (the most lagging); the others count in their group's total only. So the
file stays below about 2.5 MB (408 samples of 256 figures, measured 2.4 MB) whatever the store, and is small
for a small one.

Cheap for the broker: each partition's offsets are read once a sample, however many groups read it, and the file
is rewritten with every sample only while that is cheap: after a write that took ``d`` the next one (other than an
older sample's or the last one at a clean stop, always written) waits ``WRITE_COST_FACTOR * d`` (a 2.4 MB file,
about 0.2 s to write, is rewritten every 10 s at most), so writing it takes about 2% of one thread at most.

Crash-safe: the file (``.engine+lag-history.json`` in the first log dir, beside the status file; read by
:func:`storage_engine.inspection.listener.lag_history`) is replaced atomically (temp file, rename), so it is always
one whole version; it is fsynced with each older (5-minute) sample and at a clean stop. A killed broker loses the
samples it had not written yet (seconds); a power cut at most those since the last fsync (5 minutes). A file that
cannot be read (damaged, another version) is set aside as ``.damaged`` and the history starts anew: it is a
courtesy, never a reason not to serve.

Format (version 1)::

    {"version": 1, "recent": [sample, ...], "older": [sample, ...]}
    sample = {"t": <epoch ms>, "groups": {"<group id>": {"lag": <total>, "partitions":
              [[topic, partition, lag, committed or null], ...]}}}
"""
from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from storage_engine.durable import atomic_write, read_regular_file
from storage_engine.errors import StorageError
from storage_engine.inspection.listener import LAG_HISTORY_FILE, LAG_HISTORY_VERSION, group_topics, is_lag_sample

logger = logging.getLogger(__name__)

VERSION = LAG_HISTORY_VERSION
RECENT_SAMPLES = 120                 # 10 minutes at the status interval of 5 s
OLDER_STEP_MS = 5 * 60_000
OLDER_SAMPLES = 24 * 12              # one every 5 minutes for a day
MAX_GROUPS = 50
MAX_PARTITIONS = 256
MAX_PARTITIONS_PER_GROUP = 64
MAX_FILE_BYTES = 64 << 20
WRITE_COST_FACTOR = 50

Sample = dict[str, Any]
# (topic, partition) -> (log start offset, log end offset), or None when this broker has no such log
OffsetsOf = Callable[[str, int], "tuple[int, int] | None"]


def history_path(log_dir: str) -> str:
    return os.path.join(log_dir, LAG_HISTORY_FILE)


def take_sample(now_ms: int, groups: Iterable[Mapping[str, Any]], partitions_of: Callable[[str], list[int]],
                offsets_of: OffsetsOf) -> Sample:
    """One sample of every group's lag per partition (see the module docstring), bounded."""
    out: dict[str, Any] = {}
    known: dict[tuple[str, int], tuple[int, int] | None] = {}
    for g in groups:
        committed = g.get("offsets") or {}
        rows: list[tuple[str, int, int, int | None]] = []
        for topic in sorted(group_topics(g)):
            for p in partitions_of(topic):
                if (topic, p) not in known:
                    known[(topic, p)] = offsets_of(topic, p)
                offsets = known[(topic, p)]
                if offsets is None:
                    continue
                start, end = offsets
                offset = (committed.get(topic) or {}).get(str(p))
                lag = max(0, end - (start if offset is None else offset))
                rows.append((topic, p, lag, offset))
        rows.sort(key=lambda r: (-r[2], r[0], r[1]))
        out[str(g["group_id"])] = {"lag": sum(r[2] for r in rows), "partitions": rows}
    kept = sorted(out, key=lambda gid: (-out[gid]["lag"], gid))[:MAX_GROUPS]
    budget = MAX_PARTITIONS
    for gid in kept:                  # the most lagging groups' figures first
        rows = out[gid]["partitions"][:min(MAX_PARTITIONS_PER_GROUP, budget)]
        budget -= len(rows)
        out[gid]["partitions"] = [list(r) for r in sorted(rows)]
    return {"t": now_ms, "groups": {gid: out[gid] for gid in sorted(kept)}}


class LagHistory:
    """The bounded history in memory and on disk (see the module docstring); one per broker."""

    def __init__(self, path: str):
        self.path = path
        self.recent: list[Sample] = []
        self.older: list[Sample] = []
        self._next_write = 0.0         # time.monotonic() from which a recent sample is written
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
                or not isinstance(data.get("recent"), list) or not isinstance(data.get("older"), list)
                or not all(is_lag_sample(s) for s in data["recent"] + data["older"])):
            self._set_aside("not a version-1 lag history")
            return
        self.recent = data["recent"][-RECENT_SAMPLES:]
        self.older = data["older"][-OLDER_SAMPLES:]

    def _set_aside(self, why: str) -> None:
        logger.warning("lag history %s cannot be read (%s): set aside as .damaged, starting anew", self.path, why)
        try:
            os.replace(self.path, self.path + ".damaged")
        except OSError:
            pass

    def add(self, sample: Sample, *, flush: bool = False) -> None:
        """Keep ``sample``; write the file when it becomes an older (5-minute) sample (fsynced), when ``flush``
        (the last sample before a clean stop) or when the last write was cheap enough (see the module docstring)."""
        if not sample["groups"] and not self.recent and not self.older:
            return       # no group has ever been seen: no file
        step = not self.older or sample["t"] // OLDER_STEP_MS > self.older[-1]["t"] // OLDER_STEP_MS
        self.recent = (self.recent + [sample])[-RECENT_SAMPLES:]
        if step:
            self.older = (self.older + [sample])[-OLDER_SAMPLES:]
        started = time.monotonic()
        if not (step or flush or started >= self._next_write):
            return
        data = {"version": VERSION, "recent": self.recent, "older": self.older}
        atomic_write(self.path, json.dumps(data, separators=(",", ":")).encode("utf-8"), sync=step or flush,
                     steps="lag-history", what="lag history")
        done = time.monotonic()
        self._next_write = done + WRITE_COST_FACTOR * (done - started)
