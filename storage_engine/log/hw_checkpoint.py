"""``replication-offset-checkpoint``: each log dir's high watermarks, written as a one-broker Kafka writes them.

Kafka's ``ReplicaManager`` keeps one ``OffsetCheckpointFile`` per live log dir, named
``replication-offset-checkpoint``; creating it at start creates the file empty (``CheckpointFile``'s
``Files.createFile``: zero bytes, not synced) when there is none. ``checkpointHighWatermarks`` then writes, for every
dir that holds partitions (a dir without any is not written), the high watermark of each of its logs and of each
``-future`` copy being made in it: ``0`` (the version), the entry count, then ``<topic> <partition> <hw>`` per line,
every line ending in ``\\n``, written to ``<file>.tmp``, fsynced and renamed over the file. It does so every
``replica.high.watermark.checkpoint.interval.ms`` (default 5 s) and once more at a clean stop, after the listeners
stop and before the logs close. Entries here are sorted by (topic, partition) (Kafka's order is its hash map's).

On one node the high watermark is the log end offset (:mod:`storage_engine.log.log`), so the file never tells this
engine anything its logs do not; it is written so that a Kafka broker given these dirs finds what it expects, and
read back at start as Kafka reads it (``Partition.createLog`` takes a partition's checkpointed high watermark as its
first one, clamped to the log). A checkpointed high watermark above a log's end after the open means records once
visible to consumers are gone (unflushed records lost to a power failure): that is logged, once per partition.

Only ``serve`` writes the file (it is Kafka's replica manager here): the CLI and the maintenance jobs' checkpoint run
write recovery points and log start offsets, which their own work moves, but no high watermark: a process that
served no client has none to record, and two writers of one file would undo each other's entries.
"""
from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping

from storage_engine import layout
from storage_engine.errors import StorageError
from storage_engine.log.log import Log
from storage_engine.segment.checkpoint import OffsetCheckpointFile

logger = logging.getLogger(__name__)
TopicPartition = tuple[str, int]

__all__ = ["path_in", "create_empty", "high_watermarks", "write_high_watermarks", "read_back"]


def path_in(log_dir: str) -> str:
    return os.path.join(log_dir, layout.HIGH_WATERMARK_CHECKPOINT)


def create_empty(log_dirs: Iterable[str]) -> None:
    """Create each dir's file empty if it has none, as Kafka's ``CheckpointFile`` constructor does."""
    for d in log_dirs:
        try:
            os.close(os.open(path_in(d), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
        except FileExistsError:
            pass
        except OSError as exc:
            logger.warning("cannot create %s: %s", path_in(d), exc)


def high_watermarks(logs: Iterable[Log]) -> dict[str, dict[TopicPartition, int]]:
    """{log dir: {(topic, partition): high watermark}} of ``logs`` (a ``-future`` copy counts in its own dir)."""
    out: dict[str, dict[TopicPartition, int]] = {}
    for log in logs:
        out.setdefault(log.log_dir, {})[(log.topic, log.partition)] = log.high_watermark
    return out


def write_high_watermarks(per_dir: Mapping[str, Mapping[TopicPartition, int]]) -> list[str]:
    """Write each dir's file whole (temp file, fsync, rename, dir fsync); returns the dirs written. A dir that
    fails is logged and skipped, as Kafka logs a ``KafkaStorageException`` of one dir and goes on."""
    written = []
    for d, entries in per_dir.items():
        try:
            OffsetCheckpointFile(path_in(d)).write(entries)
            written.append(d)
        except (OSError, StorageError) as exc:
            logger.error("Error while writing to highwatermark file in directory %s: %s", d, exc)
    return written


def read_back(logs: Iterable[Log]) -> dict[TopicPartition, int]:
    """The checkpointed high watermarks of ``logs`` that lie above their log end, each logged: records that were
    below a high watermark once are gone. A damaged file reads as empty, with a warning (Kafka would take the dir
    offline; here nothing depends on the file)."""
    by_dir: dict[str, list[Log]] = {}
    for log in logs:
        by_dir.setdefault(log.log_dir, []).append(log)
    lost: dict[TopicPartition, int] = {}
    for d, dir_logs in by_dir.items():
        try:
            entries, _ = OffsetCheckpointFile(path_in(d)).read_or_empty(logger)
        except StorageError as exc:
            logger.warning("cannot read %s: %s", path_in(d), exc)
            continue
        for log in dir_logs:
            hw = entries.get((log.topic, log.partition))
            if hw is not None and hw > log.high_watermark:
                lost[(log.topic, log.partition)] = hw
                logger.warning("%s: the checkpointed high watermark %d is above the log end %d after the open: "
                               "records once visible to consumers are gone (%d offsets)", log.name, hw,
                               log.high_watermark, hw - log.high_watermark)
    return lost
