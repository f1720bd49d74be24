"""The broker's runtime tuning (storage_engine/server/server.py) in process: what is frozen after start-up is no
longer walked by a full collection, nor is what the first requests left once frozen again, and the pause counter
sees every generation's collections."""
from __future__ import annotations

import gc
import weakref

import pytest

from storage_engine.server.server import GcPauses, freeze_after_start, freeze_settled

pytestmark = pytest.mark.unit


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


def test_objects_frozen_after_start_are_left_alone_by_a_full_collection():
    kept = [Node() for _ in range(1000)]
    try:
        frozen = freeze_after_start()
        assert frozen >= 1000
        walked = {id(o) for o in gc.get_objects()}     # every generation the collector walks
        assert not any(id(n) in walked for n in kept)
        # garbage made after the freeze is still collected
        a, b = Node(), Node()
        a.other, b.other = b, a
        del a, b
        assert gc.collect() >= 2
    finally:
        gc.unfreeze()


def test_a_settled_freeze_takes_what_grew_old_and_collects_young_garbage_first():
    try:
        freeze_after_start()
        kept = [Node() for _ in range(1000)]
        gc.collect()                            # the first requests' lasting objects: now in the oldest generation
        a, b = Node(), Node()
        a.other, b.other = b, a
        cycle = weakref.ref(a)
        del a, b                                # a young cycle of garbage: collected, not frozen
        freeze_settled()
        assert cycle() is None
        walked = {id(o) for o in gc.get_objects()}
        assert not any(id(n) in walked for n in kept)
    finally:
        gc.unfreeze()


def test_the_frozen_count_is_the_one_counted_at_start_up(monkeypatch: pytest.MonkeyPatch):
    pauses = GcPauses()
    try:
        frozen = freeze_after_start()
        assert frozen > 0

        def walk() -> int:
            raise AssertionError("the status counted the frozen objects again")

        # gc.get_freeze_count() walks every frozen object (5-40 ms): the status must report the count taken at the
        # freeze, never count again (comparing with a fresh count would race: a frozen object freed by another
        # thread of this process leaves the permanent generation)
        monkeypatch.setattr(gc, "get_freeze_count", walk)
        assert pauses.summary()["frozen_objects"] == frozen
    finally:
        monkeypatch.undo()
        gc.unfreeze()


def test_pauses_are_counted_per_generation():
    pauses = GcPauses()
    pauses.install()
    try:
        gc.collect(0)
        gc.collect(1)
        gc.collect(2)
    finally:
        pauses.uninstall()
    summary = pauses.summary()
    assert [c >= 1 for c in summary["collections"]] == [True, True, True]
    assert all(0 <= m <= t for m, t in zip(summary["pause_max_ms"], summary["pause_total_ms"]))
    before = list(pauses.count)
    gc.collect()                # uninstalled: not counted
    assert pauses.count == before
