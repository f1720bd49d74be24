"""Surviving mutants that are not equivalent but that no test here can kill, each with the cause.

They count against the score like any survivor; listing them only says why each is left (an ``fsync`` of a
directory that matters only on power loss, an OS failure this machine cannot provoke, ...). A survivor matches
an entry as an equivalent does (module, function, the changed lines); ``make mutation`` prints each survivor
with its cause, or as unexplained, and lists entries that matched nothing so that stale ones are removed.
MUTATION.md gives the same list for readers (``python -m mutation --list-survivors``).
"""
from __future__ import annotations

from .equivalent import Equivalent as Explained

KNOWN_SURVIVORS: tuple[Explained, ...] = (
)
