"""The summaries maintenance jobs return, as typed dicts: JSON-able as they are (the CLI prints them, Airflow
keeps them as XComs) and checked by the type checker where the operators and the CLI read them by key.

The summaries of retention and purge are the mechanism's own (:mod:`storage_engine.maintenance.retention`) and are
named here too, so that the command line and Airflow read every summary from this module.
Every summary of a job acting "as of" an instant carries that instant as ``now_ms`` (epoch milliseconds).
"""
from __future__ import annotations

from typing import NotRequired, TypedDict

from storage_engine.errors import is_retriable
from storage_engine.maintenance.retention import FutureSegment, PurgeResult, RetentionResult, SegmentDeletion

__all__ = ["SegmentDeletion", "FutureSegment", "RetentionResult", "PurgeResult", "FlushedPartition",
           "CheckpointsWritten", "CheckpointResult", "FlushResult", "ProducerExpiry", "ExpireProducersResult",
           "PartitionFailure", "partition_failure"]


class PartitionFailure(TypedDict):
    """A partition a job could not maintain (a batch's ``failures``; the whole-store jobs' too)."""
    topic: str
    partition: int
    error_type: str
    error: str
    permanent: bool     # no retry can fix it (not :func:`storage_engine.errors.is_retriable`)


def partition_failure(tp: tuple[str, int], exc: BaseException) -> PartitionFailure:
    return {"topic": tp[0], "partition": tp[1], "error_type": type(exc).__name__, "error": str(exc),
            "permanent": not is_retriable(exc)}


class FlushedPartition(TypedDict):
    topic: str
    partition: int
    recovery_point_before: int
    recovery_point: int


class CheckpointsWritten(TypedDict):
    recovery_points: dict[str, int]      # "<topic>-<partition>" -> offset
    log_start_offsets: dict[str, int]


class CheckpointResult(TypedDict):
    now_ms: int
    flushed: list[FlushedPartition]
    checkpoints: dict[str, CheckpointsWritten]  # log dir -> what was written there
    partitions_flushed: int
    offline_dirs: dict[str, str]                # log dir -> the error that took it offline (skipped)
    failures: list[PartitionFailure]            # partitions that could not be read (not flushed)


class FlushResult(TypedDict):
    now_ms: int
    flushed: list[FlushedPartition]
    not_due: int
    nothing_to_do: bool
    offline_dirs: dict[str, str]
    failures: list[PartitionFailure]


class ProducerExpiry(TypedDict):
    topic: str
    partition: int
    expired_producer_ids: list[int]
    producers: int              # producers the partition still tracks (all of them, with dry_run)
    open_transactions: int
    future: NotRequired[bool]       # the copy being made of the partition for a move between log dirs
    folder: NotRequired[str]


class ExpireProducersResult(TypedDict):
    now_ms: int
    dry_run: bool
    producer_id_expiration_ms: int
    partitions: list[ProducerExpiry]
    producers_expired: int
    nothing_to_do: bool
    offline_dirs: dict[str, str]
    failures: list[PartitionFailure]
