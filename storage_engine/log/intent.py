"""A partition's pending multi-step change, recorded before its first rename (ARCHITECTURE.md section 4.5).

A change that renames several files (the cleaner's swap today) must be a state every other process can see
before its first rename, so that a process meeting it half done never derives a segment list, a log start
offset or a truncation point from files the change has renamed away, and so that whoever finds it after its
process died can complete it, or roll it back, exactly as its own process would have.

The record is one file per partition in the log dir root, ``layout.intent_file(log_dir, "<topic>-<partition>")``
(``.engine+intent+<topic>-<partition>``), holding one JSON object::

    {"version": 1, "op": "<operation>", ...fields of the operation...}

Rules:

* it is written atomically and durably (temp file, fsync, rename, fsync dir) under the partition lock before
  the change's first rename, and the partition's generation is bumped with it, so every other process reloads
  its view under the lock (which the changing process holds until it is done, or the kernel releases at its
  death);
* it is removed (and the removal fsynced) only when every rename of the change is done and durable;
* so a process that holds the partition lock and finds a record knows the process that wrote it died: it
  resolves the change (:func:`storage_engine.log.swap.resolve`) before reading anything else of the partition.

A record that does not parse (it can only be damaged: the write is atomic) is reported and ignored; the loader's
file-based rules then apply, as for a change left by a Kafka broker.
"""
from __future__ import annotations

import json
import os

from storage_engine import layout
from storage_engine.durable import atomic_write, fsync_dir, read_regular_file
from storage_engine.errors import StorageIOError, UnsafeFileError

VERSION = 1
# A record names the files of one change (some hundred bytes per segment): a larger file, or one that is no regular
# file, is no record of this engine.
MAX_RECORD_BYTES = 16 * 1024 * 1024


def path_of(log_dir: str, partition_dir: str) -> str:
    return layout.intent_file(log_dir, partition_dir)


def write(log_dir: str, partition_dir: str, op: str, fields: dict) -> None:
    """Record a pending change durably (caller holds the partition lock)."""
    record = {"version": VERSION, "op": op, **fields}
    atomic_write(path_of(log_dir, partition_dir), json.dumps(record, separators=(",", ":")).encode())


def read(log_dir: str, partition_dir: str) -> tuple[dict | None, str | None]:
    """(record, None), (None, None) without a record, or (None, why) for a record that does not parse."""
    path = path_of(log_dir, partition_dir)
    try:
        raw = read_regular_file(path, MAX_RECORD_BYTES)
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        raise StorageIOError("cannot read the pending-change record", path, exc) from exc
    except UnsafeFileError as exc:
        return None, f"{path}: unreadable pending-change record ({exc.reason}); ignored"
    try:
        record = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        return None, f"{path}: unreadable pending-change record ({exc}); ignored"
    if not isinstance(record, dict) or record.get("version") != VERSION or not isinstance(record.get("op"), str):
        return None, f"{path}: pending-change record of an unknown form ({raw[:80]!r}); ignored"
    return record, None


def exists(log_dir: str, partition_dir: str) -> bool:
    return os.path.exists(path_of(log_dir, partition_dir))


def clear(log_dir: str, partition_dir: str) -> None:
    """Remove the record durably (the change is complete)."""
    path = path_of(log_dir, partition_dir)
    try:
        os.remove(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise StorageIOError("cannot remove the pending-change record", path, exc) from exc
    fsync_dir(log_dir)
