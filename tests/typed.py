"""Narrowing the tests share: a value the test expects to be there, typed without its ``None``."""
from __future__ import annotations

from typing import TypeVar

T = TypeVar("T")


def present(value: T | None) -> T:
    """``value``, which the test expects to be there: None fails the test here."""
    assert value is not None
    return value
