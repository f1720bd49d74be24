"""Operators of the log-storage housekeeping DAGs: templated parameters in, one hook call, a summary out.

Every operator acts as of the run's **data interval end** (:meth:`StorageEngineHook.now_ms_of`), logs one
human line ("retention events-1: deleted 8 segments, reclaimed 7.1 KiB ...") and returns the engine's
JSON-able summary, which Airflow stores as the task's XCom and shows in the UI.

Parameters that come from the trigger form (``dry_run``, ``topics``, ``max_partitions``) are templated; the
DAGs render templates as native objects, so ``"{{ params.dry_run }}"`` arrives as a bool. They are checked
again here, because a run can be created without the form (REST API, CLI, backfill).

Failures: bad parameters and errors that a retry cannot fix (unknown topic or partition, invalid config,
illegal topic name) raise :class:`AirflowFailException`, so the task fails at once and alerts; other engine
errors (I/O, corrupt data found while acting) propagate and are retried.
"""
from __future__ import annotations

import datetime
from collections.abc import Sequence
from functools import cached_property
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowFailException

from storage_engine.errors import ConfigError, InvalidTopicError
from storage_engine.errors import PartitionNotFoundError

from .hooks import StorageEngineHook

# Engine errors that no retry can fix: the run fails at once (and alerts) instead of retrying.
_PERMANENT_ERRORS = (PartitionNotFoundError, ConfigError, InvalidTopicError)


def human_bytes(n: int) -> str:
    """1536 -> "1.5 KiB"; exact bytes below 1 KiB."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{int(size)} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def _as_dry_run(value: Any) -> bool:
    if not isinstance(value, bool):
        raise AirflowFailException(f"dry_run must be true or false, got {value!r} ({type(value).__name__})")
    return value


def _as_topics(value: Any) -> list[str] | None:
    """``None``/``[]`` mean every topic; otherwise a list of topic names."""
    if value is None or value == [] or value == ():
        return None
    if not isinstance(value, (list, tuple)) or not all(isinstance(t, str) for t in value):
        raise AirflowFailException(f"topics must be a list of topic names, got {value!r}")
    return list(value)


def _as_positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise AirflowFailException(f"{name} must be an integer >= 1, got {value!r}")
    return value


class StorageMaintenanceOperator(BaseOperator):
    """Base of the maintenance operators: the hook, the clock and the error policy; subclasses do one call.

    :param storage_engine_conn_id: connection whose ``extra`` may name the storage config
        (``{"config": "/path/storage.yaml"}``); see :mod:`storage_maintenance.hooks` for the full order
    :param config_path: storage config file overriding the connection and ``$STORAGE_ENGINE_CONFIG``
        (templated)
    """

    template_fields: Sequence[str] = ("config_path",)
    ui_color = "#e8f0f7"

    def __init__(self, *, storage_engine_conn_id: str = StorageEngineHook.default_conn_name,
                 config_path: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.storage_engine_conn_id = storage_engine_conn_id
        self.config_path = config_path

    @cached_property
    def hook(self) -> StorageEngineHook:
        return StorageEngineHook(storage_engine_conn_id=self.storage_engine_conn_id, config_path=self.config_path)

    def execute(self, context) -> Any:
        now_ms = StorageEngineHook.now_ms_of(context)
        try:
            self.log.info("storage config %s; acting as of the data interval end, now_ms=%d",
                          self.hook.config_path, now_ms)
            result = self.run(now_ms)
        except _PERMANENT_ERRORS as exc:
            raise AirflowFailException(f"{type(exc).__name__}: {exc}") from exc
        self.log.info("%s", self.summary(result))
        return result

    def run(self, now_ms: int) -> Any:
        raise NotImplementedError

    def summary(self, result: Any) -> str:
        raise NotImplementedError

    @staticmethod
    def _as_of(result: dict) -> str:
        now_ms = result["now_ms"]
        when = datetime.datetime.fromtimestamp(now_ms / 1000, tz=datetime.timezone.utc)
        return f"as of {when.isoformat(timespec='milliseconds').replace('+00:00', 'Z')} (now_ms={now_ms})"


class LogCheckpointOperator(StorageMaintenanceOperator):
    """Kafka's checkpoint tasks: flush every log to its end, then write ``recovery-point-offset-checkpoint`` and
    ``log-start-offset-checkpoint`` of every log dir.

    :param topics: only flush these topics (the checkpoint files of every dir are still written); empty = all
    :param dry_run: only list the partitions that would be flushed (read-only folder listing)
    :param flush: flush the logs before writing the checkpoints (Kafka's checkpoint does not flush; the
        recovery point only means something once the data is on disk)
    """

    template_fields: Sequence[str] = (*StorageMaintenanceOperator.template_fields, "topics", "dry_run")

    def __init__(self, *, topics: list[str] | str | None = None, dry_run: bool | str = False,
                 flush: bool = True, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.topics = topics
        self.dry_run = dry_run
        self.flush = flush

    def run(self, now_ms: int) -> dict:
        topics, dry_run = _as_topics(self.topics), _as_dry_run(self.dry_run)
        if dry_run:
            partitions = self.hook.partitions_on_disk(topics)
            return {"now_ms": now_ms, "dry_run": True, "would_flush": partitions,
                    "log_dirs": list(self.hook.config.log_dirs), "nothing_to_do": True}
        result = self.hook.checkpoint(now_ms, topics, flush=self.flush)
        result["dry_run"] = False
        return result

    def summary(self, result: dict) -> str:
        if result["dry_run"]:
            return (f"checkpoint dry run {self._as_of(result)}: would flush {len(result['would_flush'])} "
                    f"partition(s) and write the checkpoints of {len(result['log_dirs'])} log dir(s)")
        return (f"checkpoint {self._as_of(result)}: flushed {result['partitions_flushed']} of "
                f"{len(result['flushed'])} partition(s), wrote the checkpoints of "
                f"{len(result['checkpoints'])} log dir(s)")


class LogFlushOperator(StorageMaintenanceOperator):
    """Time-based flush (``flush.ms``): fsync the logs whose last flush is at least ``flush.ms`` old.

    :param topics: only these topics; empty = all
    :param dry_run: only list the partitions that would be considered (read-only folder listing)
    :param due_only: ``False`` flushes every log regardless of ``flush.ms``
    """

    template_fields: Sequence[str] = (*StorageMaintenanceOperator.template_fields, "topics", "dry_run")

    def __init__(self, *, topics: list[str] | str | None = None, dry_run: bool | str = False,
                 due_only: bool = True, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.topics = topics
        self.dry_run = dry_run
        self.due_only = due_only

    def run(self, now_ms: int) -> dict:
        topics, dry_run = _as_topics(self.topics), _as_dry_run(self.dry_run)
        if dry_run:
            return {"now_ms": now_ms, "dry_run": True, "would_check": self.hook.partitions_on_disk(topics),
                    "nothing_to_do": True}
        result = self.hook.flush(now_ms, topics, due_only=self.due_only)
        result["dry_run"] = False
        result["partitions_flushed"] = sum(1 for f in result["flushed"]
                                           if f["recovery_point"] > f["recovery_point_before"])
        return result

    def summary(self, result: dict) -> str:
        if result["dry_run"]:
            return f"flush dry run {self._as_of(result)}: would check {len(result['would_check'])} partition(s)"
        return (f"flush {self._as_of(result)}: flushed {result['partitions_flushed']} partition(s), "
                f"{result['not_due']} not due")


class ListPartitionsOperator(StorageMaintenanceOperator):
    """The partitions to maintain, as ``[{"topic": t, "partition": p}]``: the keyword arguments of one mapped
    :class:`LogRetentionOperator` each (``.partial(...).expand_kwargs(list_task.output)``).

    :param topics: only these topics; empty = all; an unknown topic fails the task
    :param max_partitions: fail instead of fanning out to more mapped tasks than this (a guard against a
        misconfigured log dir flooding the scheduler); narrow ``topics`` or raise it
    """

    template_fields: Sequence[str] = (*StorageMaintenanceOperator.template_fields, "topics", "max_partitions")

    def __init__(self, *, topics: list[str] | str | None = None, max_partitions: int | str = 1000,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.topics = topics
        self.max_partitions = max_partitions

    def run(self, now_ms: int) -> list[dict]:
        topics = _as_topics(self.topics)
        limit = _as_positive_int("max_partitions", self.max_partitions)
        partitions = self.hook.list_partitions(topics)
        if len(partitions) > limit:
            raise AirflowFailException(
                f"{len(partitions)} partitions found, more than max_partitions={limit}; narrow 'topics' or "
                f"raise 'max_partitions'")
        for p in partitions:
            self.log.info("partition %s-%s in %s (cleanup.policy=%s)", p["topic"], p["partition"],
                          p["log_dir"], p["cleanup_policy"])
        return [{"topic": p["topic"], "partition": p["partition"]} for p in partitions]

    def summary(self, result: list[dict]) -> str:
        return f"found {len(result)} partition(s) in {len({p['topic'] for p in result})} topic(s)"


class LogRetentionOperator(StorageMaintenanceOperator):
    """Retention of one partition (log start offset, ``retention.bytes``, ``retention.ms``): expired segments
    are renamed ``.deleted`` and the log start offset advances; ``PurgeDeletedOperator`` removes the files later.

    Mapped once per partition, so each partition is its own task instance in the UI; give the mapped task
    ``map_index_template="{{ task.topic }}-{{ task.partition }}"`` to name it after its partition.

    :param topic: the partition's topic (templated)
    :param partition: the partition number (templated)
    :param dry_run: report what would be deleted, change nothing
    """

    template_fields: Sequence[str] = (*StorageMaintenanceOperator.template_fields, "topic", "partition", "dry_run")

    def __init__(self, *, topic: str, partition: int | str, dry_run: bool | str = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.topic = topic
        self.partition = partition
        self.dry_run = dry_run

    def run(self, now_ms: int) -> dict:
        if not isinstance(self.topic, str):
            raise AirflowFailException(f"topic must be a topic name, got {self.topic!r}")
        partition = self.partition
        if isinstance(partition, str) and partition.strip().isdigit():
            partition = int(partition)
        if isinstance(partition, bool) or not isinstance(partition, int) or partition < 0:
            raise AirflowFailException(f"partition must be an integer >= 0, got {self.partition!r}")
        return self.hook.retention(self.topic, partition, now_ms, dry_run=_as_dry_run(self.dry_run))

    def summary(self, result: dict) -> str:
        name = f"{result['topic']}-{result['partition']}"
        verb = "would delete" if result["dry_run"] else "deleted"
        if result["nothing_to_do"]:
            line = f"retention {name} {self._as_of(result)}: nothing to do"
        else:
            line = (f"retention {name} {self._as_of(result)}: {verb} {result['segments_deleted']} segment(s), "
                    f"reclaimed {human_bytes(result['bytes_reclaimed'])} ({result['bytes_reclaimed']} bytes); "
                    f"log start offset {result['log_start_offset_before']} -> {result['log_start_offset']}")
        if result.get("future_segments"):
            line += (f"; {len(result['future_segments'])} segment(s) have timestamps after now and cannot expire "
                     f"until the clock passes them")
        return line


class PurgeDeletedOperator(StorageMaintenanceOperator):
    """Remove ``.deleted`` files older than their topic's ``file.delete.delay.ms`` (as of the interval end).

    :param dry_run: report what would be removed, change nothing
    """

    template_fields: Sequence[str] = (*StorageMaintenanceOperator.template_fields, "dry_run")

    def __init__(self, *, dry_run: bool | str = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.dry_run = dry_run

    def run(self, now_ms: int) -> dict:
        return self.hook.purge(now_ms, dry_run=_as_dry_run(self.dry_run))

    def summary(self, result: dict) -> str:
        verb = "would remove" if result["dry_run"] else "removed"
        return (f"purge {self._as_of(result)}: {verb} {result['files_removed']} file(s), freed "
                f"{human_bytes(result['bytes_freed'])} ({result['bytes_freed']} bytes); "
                f"{result['files_waiting']} file(s) still within file.delete.delay.ms")


class FailRunIfUpstreamFailedOperator(BaseOperator):
    """Fails the run when an upstream task failed (use with ``trigger_rule="one_failed"``).

    A DAG run's state is decided by its leaf tasks only. When a cleanup step downstream of the maintenance
    tasks runs with ``trigger_rule="all_done"`` (so one broken partition cannot stop disk space being
    reclaimed for the others), that step succeeding would otherwise mark the run successful although a
    partition failed. This task is then the extra leaf that keeps the run red. It does no maintenance itself
    and sends no alert: the failed task already did.
    """

    ui_color = "#f7e8e8"

    def execute(self, context) -> None:
        raise AirflowFailException(
            f"maintenance task(s) upstream of {self.task_id} failed in run {context['run_id']}; "
            "see their logs and alerts")
