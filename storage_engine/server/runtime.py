"""The broker process's Python runtime: its collector frozen after start-up, and its pauses counted.

CPython's cyclic garbage collector stops every thread while it runs. A full (generation 2) collection walks every
tracked object the process holds; a freshly started broker holds ~42,000 (modules, the protocol schemas, the logs
it opened), and one full collection of them took 18-33 ms of CPU on the 2-core benchmark machine (several times
that in wall time when the machine was busy), every few seconds to tens of seconds while clients produced: each
one a pause of the event loop and the engine threads at once, in the tail of produce latency. None of those
objects is garbage: :func:`freeze_after_start` moves them into the collector's permanent generation
(``gc.freeze()``), once, when the broker is about to serve, so later collections walk only what was made since
(2-5 ms of CPU for ~10,000 objects in the same runs). Objects frozen are never collected; only what start-up made
is frozen, and it lives as long as the process.

:class:`GcPauses` counts the collections of each generation and their pause times (``gc.callbacks``: two clock
reads per collection); the broker publishes them in its status file, so a pause that reaches the tail shows.
"""
from __future__ import annotations

import gc
import threading
import time
from typing import Any


def freeze_after_start() -> int:
    """Collect once, then freeze every object left (start-up's); returns how many are frozen."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


class GcPauses:
    """Per generation: collections, total and longest pause (ms) since :meth:`install`."""

    def __init__(self) -> None:
        self.count = [0, 0, 0]
        self.total_ms = [0.0, 0.0, 0.0]
        self.max_ms = [0.0, 0.0, 0.0]
        self._started: dict[int, float] = {}      # thread id -> start of the collection it runs
        self._installed = False

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        tid = threading.get_ident()
        if phase == "start":
            self._started[tid] = time.perf_counter()
            return
        began = self._started.pop(tid, None)
        if began is None:       # installed during a collection
            return
        gen = min(int(info.get("generation", 2)), 2)
        ms = (time.perf_counter() - began) * 1000
        self.count[gen] += 1
        self.total_ms[gen] += ms
        if ms > self.max_ms[gen]:
            self.max_ms[gen] = ms

    def install(self) -> None:
        if not self._installed:
            gc.callbacks.append(self._callback)
            self._installed = True

    def uninstall(self) -> None:
        if self._installed:
            gc.callbacks.remove(self._callback)
            self._installed = False

    def summary(self) -> dict[str, Any]:
        """The status file's ``gc`` entry."""
        return {"frozen_objects": gc.get_freeze_count(), "collections": list(self.count),
                "pause_total_ms": [round(v, 3) for v in self.total_ms],
                "pause_max_ms": [round(v, 3) for v in self.max_ms]}
