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


def test_a_run_renders_as_markdown_with_every_mutant_not_detected():
    mutant = {"name": f"{MODULE}.x_f__mutmut_1", "module": MODULE, "function": "f", "removed": ["a = 1"],
              "added": ["a = 2"]}
    doc = {"meta": {"argv": ["--fail-under", "90"], "commit": "0123456789abcdef", "commit_subject": "s",
                    "uncommitted_engine_or_test_changes": False, "mutmut": "3.8.1", "python": "3.11.7", "nproc": 2,
                    "max_children": 2, "loadavg_at_start": [0.5, 0.5, 0.5], "loadavg_at_end": [1, 1, 1],
                    "seconds": 600.0},
           "modules": [{"module": MODULE, "mutants": 3, "killed": 1, "timeout": 0, "survived": 2, "suspicious": 0,
                        "no tests": 0, "other": 0, "equivalent": 1, "score": 50.0}],
           "groups": [{"name": "g", "pure_python": True, "seconds": 12.3, "mutants": [
               dict(mutant, status="survived", equivalent=None, known_cause="power loss only"),
               dict(mutant, name=mutant["name"] + "0", status="survived", equivalent="same program",
                    known_cause=None),
               dict(mutant, name=mutant["name"] + "1", status="killed", equivalent=None, known_cause=None)]},
               {"name": "g-kernels", "pure_python": False, "seconds": 1.0, "mutants": [
                   dict(mutant, name=mutant["name"] + "1", status="survived", equivalent=None, known_cause=None)]}]}
    text = report.run_markdown(doc)
    assert text.startswith("Command: `python -m mutation --fail-under 90`\nat commit `0123456789ab`")
    assert "**10.0 minutes**" in text and "| g | pure Python | 3 | 12 |" in text
    assert f"| {MODULE} | 3 | 1 | 0 | 2 | 0 | 0 | 0 | 1 | 50.0% |" in text
    # the equivalent is left out, and a mutant the other pass killed is not listed
    assert text.endswith("### Not detected and not equivalent (1)\n\n"
                         f"- survived: `{MODULE}:f`: `a = 1` -> `a = 2`: power loss only\n")
