"""How ``make mutation`` scores: a listed equivalent leaves the score's denominator, a survivor with a known
cause (``mutation/survivors.py``) still counts against the score, and stale entries are found."""
from __future__ import annotations

import pytest

from mutation import report
from mutation.equivalent import Equivalent
from mutation.groups import Group
from mutation.run import GroupResult, Mutant

pytestmark = pytest.mark.unit

MODULE = "storage_engine.segment.checkpoint"


def _mutant(n: int, status: str, removed: str = "a = 1", added: str = "a = 2") -> Mutant:
    return Mutant(f"{MODULE}.x_f__mutmut_{n}", MODULE, "f", status, [removed], [added])


def test_known_survivors_count_against_the_score_and_equivalents_do_not(monkeypatch):
    equivalent = Equivalent(MODULE, "f", "a = 1", "a = 2", "same program")
    known = Equivalent(MODULE, "f", "b = 1", "b = 2", "only a power loss shows it")
    monkeypatch.setattr(report, "EQUIVALENT", (equivalent,))
    monkeypatch.setattr(report, "KNOWN_SURVIVORS", (known,))
    mutants = [_mutant(1, "killed"), _mutant(2, "killed"), _mutant(3, "survived"),
               _mutant(4, "survived", "b = 1", "b = 2"), _mutant(5, "no tests", "b = 1", "b = 2")]
    results = [GroupResult(Group("g", ("storage_engine/segment/checkpoint.py",), ()), 1.0, mutants)]
    [row] = report.scores(results)
    assert (row.total, row.equivalent, row.detected) == (5, 1, 2)
    assert row.score == pytest.approx(50.0)
    assert [m.name[-1] for m in report.undetected(results)] == ["4", "5"]
    assert report.survivor_cause(mutants[3]) == "only a power loss shows it"
    assert report.survivor_cause(mutants[4]) is None          # only a survivor can have a known cause
    assert "known: only a power loss shows it" in report.describe(mutants[3])
    stale = Equivalent(MODULE, "f", "c = 1", "c = 2", "gone")
    assert report.unused_equivalents(results, (known, stale)) == [stale]
    assert "- `f`: `b = 1` -> `b = 2`: only a power loss shows it" in report.equivalents_markdown((known,))
