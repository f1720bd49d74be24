"""An OS call failing under the engine: the error it must raise names the file and chains the OS error."""
from __future__ import annotations

import errno
import os

import pytest

from storage_engine.errors import StorageIOError


def storage_error_when_failing(monkeypatch, os_call: str, action, target) -> tuple[StorageIOError, OSError]:
    """Run ``action(target)`` with ``os.<os_call>`` raising EIO; returns the StorageIOError it raised, which chains
    that OSError, and the OSError."""
    failure = OSError(errno.EIO, "Input/output error")

    def fail(*args, **kwargs):
        raise failure
    monkeypatch.setattr(os, os_call, fail)
    with pytest.raises(StorageIOError) as err:
        action(target)
    monkeypatch.undo()
    assert err.value.__cause__ is failure
    return err.value, failure
