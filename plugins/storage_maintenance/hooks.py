"""StorageEngineHook: which storage config, what "now" is, and the calls into ``storage_engine.maintenance.jobs``.

Config resolution, first match wins:

1. ``config_path`` given to the hook (an operator's templated argument);
2. the ``extra`` of the Airflow connection ``storage_engine_default`` (or the hook's ``storage_engine_conn_id``):
   ``{"config": "/path/storage.yaml"}``; a missing connection, or one without ``config``, is not an error;
3. ``$STORAGE_ENGINE_CONFIG``;
4. the engine's default, ``include/config/storage.yaml`` (``storage_engine.config.DEFAULT_CONFIG_PATH``).

``now`` is the run's data interval end, in epoch milliseconds (DESIGN.md section 5): a backfilled or
re-run interval acts on the log as of its end, so re-running an interval changes nothing.
"""
from __future__ import annotations

import calendar
import datetime
import os
from functools import cached_property
from typing import Any

from airflow.sdk import BaseHook
from airflow.sdk.exceptions import AirflowNotFoundException

from storage_engine.maintenance import jobs as maintenance
from storage_engine.config import DEFAULT_CONFIG_PATH, ENV_VAR, StorageConfig, load_config
from storage_engine.errors import PartitionNotFoundError


def epoch_ms(when: datetime.datetime) -> int:
    """``when`` (timezone-aware) as integer epoch milliseconds, exactly (no float rounding).

    Integer arithmetic on the UTC fields, because Airflow hands out pendulum DateTimes, whose differences are
    pendulum Intervals that do not divide by a stdlib timedelta."""
    if when.tzinfo is None:
        raise ValueError(f"{when!r} has no timezone; Airflow's data interval bounds are always aware")
    return calendar.timegm(when.utctimetuple()) * 1000 + when.microsecond // 1000


def config_path_without_connection() -> str:
    """Steps 3-4 of the resolution: what DAG files use at parse time, where no connection may be looked up."""
    return os.environ.get(ENV_VAR) or DEFAULT_CONFIG_PATH


def partitions_on_disk(config: StorageConfig) -> list[dict]:
    """``[{"topic", "partition", "log_dir"}]`` of the partition folders in ``config.log_dirs``, sorted, read-only
    (the engine's :func:`storage_engine.layout.partition_dirs`: folder names only, no log opened, no lock, no
    file touched). Cheap enough for DAG parse time and for dry runs."""
    return [{"topic": p["topic"], "partition": p["partition"], "log_dir": p["log_dir"]}
            for p in maintenance.list_partitions(config)]


def topics_on_disk(config: StorageConfig) -> list[str]:
    """Sorted topic names found by :func:`partitions_on_disk`."""
    return sorted({p["topic"] for p in partitions_on_disk(config)})


class StorageEngineHook(BaseHook):
    """Runs the engine's maintenance jobs for one storage config.

    Each method opens the logs, acts as of ``now_ms``, closes them and returns the engine's JSON-able summary;
    engine errors (``storage_engine.errors.StorageError`` and subclasses) propagate unchanged.

    :param storage_engine_conn_id: connection whose ``extra`` may name the config file (``{"config": ...}``)
    :param config_path: a config file that overrides the connection and the environment
    """

    conn_name_attr = "storage_engine_conn_id"
    default_conn_name = "storage_engine_default"
    conn_type = "generic"
    hook_name = "Kafka-format log storage"

    def __init__(self, storage_engine_conn_id: str = default_conn_name, config_path: str | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.storage_engine_conn_id = storage_engine_conn_id
        self._config_path = config_path or None

    # -- mechanics ----------------------------------------------------------------------------------------------
    @cached_property
    def config_path(self) -> str:
        """The config file this hook uses (see the module docstring for the order)."""
        if self._config_path:
            return os.fspath(self._config_path)
        if self.storage_engine_conn_id:
            try:
                conn = self.get_connection(self.storage_engine_conn_id)
            except AirflowNotFoundException:
                conn = None
            path = (conn.extra_dejson.get("config") if conn is not None else None) or None
            if path is not None:
                if not isinstance(path, str):
                    raise ValueError(f"connection {self.storage_engine_conn_id!r}: extra 'config' must be a "
                                     f"path string, got {path!r}")
                return path
        return config_path_without_connection()

    @cached_property
    def config(self) -> StorageConfig:
        """The loaded and validated config; ``ConfigError`` names the file, key and value when it is invalid."""
        return load_config(self.config_path)

    def get_conn(self) -> StorageConfig:
        return self.config

    @staticmethod
    def now_ms_of(context) -> int:
        """The run's data interval end as epoch ms: the "now" every maintenance job of the run acts as of.

        A run without a data interval (one triggered without a logical date) falls back to its ``run_after``,
        the earliest time it was allowed to start, which is as close to "the interval it stands for" as it has.
        """
        end = context.get("data_interval_end")
        if end is None:
            dag_run = context.get("dag_run")
            end = getattr(dag_run, "run_after", None)
            if end is None:
                raise ValueError("the run has neither a data interval nor a run_after time to act as of")
        return epoch_ms(end)

    # -- the maintenance jobs -----------------------------------------------------------------------------------
    def list_partitions(self, topics: list[str] | None = None) -> list[dict]:
        return maintenance.list_partitions(self.config, topics=topics or None)

    def partitions_on_disk(self, topics: list[str] | None = None) -> list[dict]:
        """Read-only listing (see :func:`partitions_on_disk`) for dry runs; unknown topics raise like the engine."""
        found = partitions_on_disk(self.config)
        if topics:
            known = {p["topic"] for p in found}
            missing = sorted(set(topics) - known)
            if missing:
                raise PartitionNotFoundError(
                    f"unknown topic(s) {missing}; existing topics: {sorted(known)}")
            found = [p for p in found if p["topic"] in topics]
        return found

    def checkpoint(self, now_ms: int, topics: list[str] | None = None, flush: bool = True) -> dict:
        return maintenance.checkpoint(self.config, now_ms, topics=topics or None, flush=flush)

    def flush(self, now_ms: int, topics: list[str] | None = None, due_only: bool = True) -> dict:
        return maintenance.flush(self.config, now_ms, topics=topics or None, due_only=due_only)

    def retention(self, topic: str, partition: int, now_ms: int, dry_run: bool = False) -> dict:
        return maintenance.retention(self.config, topic, partition, now_ms, dry_run=dry_run)

    def purge(self, now_ms: int, dry_run: bool = False) -> dict:
        return maintenance.purge(self.config, now_ms, dry_run=dry_run)
