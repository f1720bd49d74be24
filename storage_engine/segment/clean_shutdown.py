"""The clean-shutdown marker ``.kafka_cleanshutdown`` of a log dir (Kafka's ``CleanShutdownFileHandler``).

Content: JSON ``{"version":0,"brokerEpoch":<long>}`` (unknown fields are ignored on read).

Protocol, per log dir:

* at startup, before any log loads, :func:`consume_clean_shutdown`: if the marker exists it is deleted at
  once (and the deletion fsynced) and the dir counts as cleanly shut down, so a crash while loading makes
  the next start recover (KAFKA-10471); without a marker every log in the dir is recovered;
* at shutdown, after every log is flushed and the checkpoints written, :func:`write_clean_shutdown`
  (atomic and fsynced: the marker is either absent or complete).
"""
from __future__ import annotations

import json
import os

from storage_engine.durable import atomic_write, fsync_dir, read_regular_file
from storage_engine.errors import StorageIOError, UnsafeFileError
from storage_engine.layout import CLEAN_SHUTDOWN_FILE

VERSION = 0
MAX_MARKER_BYTES = 64 * 1024    # the marker is some 30 bytes; anything larger (or no regular file) is not one


def clean_shutdown_path(log_dir: str | os.PathLike) -> str:
    return os.path.join(os.fspath(log_dir), CLEAN_SHUTDOWN_FILE)


def write_clean_shutdown(log_dir: str | os.PathLike, broker_epoch: int = -1) -> None:
    """Write the marker atomically and durably."""
    if isinstance(broker_epoch, bool) or not isinstance(broker_epoch, int):
        raise TypeError(f"broker_epoch must be an int, got {broker_epoch!r}")
    payload = json.dumps({"version": VERSION, "brokerEpoch": broker_epoch}, separators=(",", ":"))
    atomic_write(clean_shutdown_path(log_dir), payload.encode("utf-8"))


def has_clean_shutdown(log_dir: str | os.PathLike) -> bool:
    return os.path.exists(clean_shutdown_path(log_dir))


def consume_clean_shutdown(log_dir: str | os.PathLike) -> bool:
    """True if the marker was present. It is deleted immediately and the deletion fsynced.

    Of several processes consuming the same marker, exactly one sees True.
    """
    path = clean_shutdown_path(log_dir)
    try:
        os.remove(path)
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise StorageIOError("cannot delete clean-shutdown marker", path, exc) from exc
    fsync_dir(os.fspath(log_dir))
    return True


def read_broker_epoch(log_dir: str | os.PathLike) -> int | None:
    """The marker's brokerEpoch; None if the marker is missing, unreadable or has no integer brokerEpoch."""
    try:
        content = json.loads(read_regular_file(clean_shutdown_path(log_dir), MAX_MARKER_BYTES).decode("utf-8"))
    except (OSError, UnsafeFileError, UnicodeDecodeError, ValueError):
        return None
    epoch = content.get("brokerEpoch") if isinstance(content, dict) else None
    return epoch if isinstance(epoch, int) and not isinstance(epoch, bool) else None
