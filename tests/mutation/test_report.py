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
    assert report.survivor_cause(mutants[4]) == "only a power loss shows it"    # no test of the group runs it
    assert report.survivor_cause(_mutant(6, "killed", "b = 1", "b = 2")) is None
    assert "known: only a power loss shows it" in report.describe(mutants[3])
    stale = Equivalent(MODULE, "f", "c = 1", "c = 2", "gone")
    assert report.unused_equivalents(results, (known, stale)) == [stale]
    assert "- `f`: `b = 1` -> `b = 2`: only a power loss shows it" in report.equivalents_markdown((known,))



def test_runs_render_as_markdown_judged_against_todays_lists(monkeypatch):
    monkeypatch.setattr(report, "EQUIVALENT", (Equivalent(MODULE, "f", "a = 1", "a = 3", "same program"),))
    monkeypatch.setattr(report, "KNOWN_SURVIVORS", (Equivalent(MODULE, "f", "a = 1", "a = 2", "power loss only"),))
    mutant = {"module": MODULE, "function": "f", "removed": ["a = 1"]}
    meta = {"argv": ["--fail-under", "90"], "commit": "0123456789abcdef", "commit_subject": "s",
            "uncommitted_engine_or_test_changes": False, "mutmut": "3.8.1", "python": "3.11.7", "nproc": 2,
            "max_children": 2, "loadavg_at_start": [0.5, 0.5, 0.5], "loadavg_at_end": [1, 1, 1], "seconds": 600.0}
    group = {"name": "g", "modules": ["storage_engine/segment/checkpoint.py"], "tests": [], "functions": [],
             "pure_python": True, "seconds": 540.0}
    doc = {"meta": meta, "groups": [
        dict(group, mutants=[dict(mutant, name=f"{MODULE}.x_f__mutmut_1", added=["a = 2"], status="survived"),
                             dict(mutant, name=f"{MODULE}.x_f__mutmut_2", added=["a = 3"], status="survived"),
                             dict(mutant, name=f"{MODULE}.x_f__mutmut_3", added=["a = 4"], status="survived"),
                             dict(mutant, name=f"{MODULE}.x_f__mutmut_4", added=["a = 5"], status="killed")]),
        dict(group, name="g-kernels", pure_python=False, seconds=60.0,
             mutants=[dict(mutant, name=f"{MODULE}.x_f__mutmut_3", added=["a = 4"], status="killed")])]}
    text = report.run_markdown([doc])
    assert text.startswith("Runs:\n\n- `python -m mutation --fail-under 90` at commit `0123456789ab`: ")
    assert "  - group `g` (pure Python): 4 mutants in 540 s" in text and "**10.0 minutes**" in text
    # mutant 3 is detected by the kernel pass; mutant 2 is equivalent: 2 detected of 3 judged
    [row] = [line for line in text.splitlines() if line.startswith(f"| {MODULE} ")]
    assert [c.strip() for c in row.strip("|").split("|")][1:] == ["4", "2", "0", "2", "0", "0", "0", "1", "66.7%"]
    assert text.endswith("### Not detected and not equivalent (1; 0 without a known cause)\n\n"
                         f"- survived: `{MODULE}:f`: `a = 1` -> `a = 2`: power loss only\n")
