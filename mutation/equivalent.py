"""Surviving mutants that no test can kill, because the program behaves the same with them: each with the reason.

A survivor matches an entry when module, function and the changed lines (stripped, joined by newlines) are
equal, so an entry keeps matching when the code around it moves. ``make mutation`` lists entries that matched
nothing, so a stale one is seen and removed. MUTATION.md gives the same list for readers.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Equivalent:
    module: str
    function: str
    removed: str
    added: str
    reason: str


EQUIVALENT: tuple[Equivalent, ...] = ()
