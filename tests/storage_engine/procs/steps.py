"""Counting the steps of a multi-step change (a move's commit, a deletion, a split) and stopping at one of them.

Every call that changes what is on disk or what other processes see is a step: renames of files and folders,
fsyncs of folders, retiring and unlinking locks and claims, checkpoint edits. :func:`install` wraps them; the
wrapper counts calls once ``arm()`` was called and, at call number ``stop_at`` (or at the first call of the step
named ``stop_before``), runs ``action`` *instead of* the step (``die``: SIGKILL of this process, so nothing after it
runs, not even ``finally`` blocks).
"""
from __future__ import annotations

import os
import signal
import sys

from storage_engine import durable
from storage_engine.log import deletion, locks, mover, split
from storage_engine.segment import file_records, index_file, segment


class Stop(BaseException):
    """Raised by the in-process action: unwinds like a crash would (BaseException: no handler catches it)."""


def die() -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def stop() -> None:
    raise Stop()


class Steps:
    def __init__(self, stop_at: int | None, action=die, log=None, stop_before: str | None = None):
        self.stop_at = stop_at
        self.stop_before = stop_before
        self.action = action
        self.count = 0
        self.armed = False
        self.names: list[str] = []
        self.log = log

    def arm(self) -> None:
        self.armed = True

    def wrap(self, name: str, fn):
        def step(*args, **kwargs):
            if self.armed:
                self.count += 1
                self.names.append(name)
                if self.log is not None:
                    self.log(f"STEP {self.count} {name}")
                if (self.stop_at is not None and self.count == self.stop_at) or name == self.stop_before:
                    self.action()
            return fn(*args, **kwargs)
        step.__wrapped_step__ = fn  # type: ignore[attr-defined]  # marks the wrapper with the step it wraps
        return step


def install(steps: Steps) -> None:
    """Wrap every step function where the lifecycle modules look them up."""
    for module in (durable, mover, deletion, split, segment, file_records, index_file):
        for name in ("durable_rename", "fsync_dir"):
            if hasattr(module, name):
                setattr(module, name, steps.wrap(f"{name}", getattr(module, name)))
    for cls, name in ((locks.PartitionLock, "retire"), (locks.PartitionLock, "unlink"),
                      (locks.PartitionLock, "unlink_path"), (locks.CleaningClaim, "unlink")):
        original = cls.__dict__[name]
        if isinstance(original, staticmethod):
            setattr(cls, name, staticmethod(steps.wrap(f"{cls.__name__}.{name}", original.__func__)))
        else:
            setattr(cls, name, steps.wrap(f"{cls.__name__}.{name}", original))
    deletion.edit_checkpoint = steps.wrap("edit_checkpoint", deletion.edit_checkpoint)


def uninstall() -> None:
    for module in (durable, mover, deletion, split, segment, file_records, index_file):
        for name in ("durable_rename", "fsync_dir", "edit_checkpoint"):
            fn = getattr(module, name, None)
            if fn is not None and hasattr(fn, "__wrapped_step__"):
                setattr(module, name, fn.__wrapped_step__)
    for cls, name in ((locks.PartitionLock, "retire"), (locks.PartitionLock, "unlink"),
                      (locks.PartitionLock, "unlink_path"), (locks.CleaningClaim, "unlink")):
        fn = cls.__dict__[name]
        inner = fn.__func__ if isinstance(fn, staticmethod) else fn
        if hasattr(inner, "__wrapped_step__"):
            original = inner.__wrapped_step__
            setattr(cls, name, staticmethod(original) if isinstance(fn, staticmethod) else original)
