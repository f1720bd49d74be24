"""StorageEngineHook: which storage config, what "now" is, and every call into the engine and its connections.

As in Airflow's Spark provider, the hook owns the mechanics and the operators only hold parameters: the
engine's maintenance jobs (:mod:`storage_engine.jobs.housekeeping`, :mod:`storage_engine.jobs.batches`),
its read-only status (:mod:`storage_engine.inspection.status`, for the Storage view), the compaction plan and clean
(:mod:`storage_engine.jobs.compaction`), the Spark connection check and the run-scoped key-map
folders all go through here.

Config resolution, first match wins:

1. ``config_path`` given to the hook (an operator's templated argument);
2. the ``extra`` of the Airflow connection ``storage_engine_default`` (or the hook's ``storage_engine_conn_id``):
   ``{"config": "/path/storage.yaml"}``; a missing connection, or one without ``config``, is not an error;
3. ``$STORAGE_ENGINE_CONFIG``;
4. the engine's default, ``include/config/storage.yaml`` (``storage_engine.config_file.DEFAULT_CONFIG_PATH``).

**Several storage hosts** (the config's ``hosts:``): a hook made for one ``host`` sees only that host's log dirs
(:meth:`StorageEngineHook.config`), and refuses to work on a worker of another host
(:func:`check_worker_host`, ``$STORAGE_MAINTENANCE_HOST``).

**What "now" is** (ARCHITECTURE.md section 5): a run acts as of one stated instant, chosen by
:func:`storage_maintenance.tasks.params.run_as_of` (the ``AS_OF_*`` rules named here). Every task of the run uses it,
logs it, puts it in its XCom; the run report, the alert and the Storage view show it the same way.
"""
from __future__ import annotations

import calendar
import datetime
import os
import re
import shutil
import sys
from collections.abc import Collection, Mapping
from functools import cached_property
from typing import Any, TypedDict

from airflow.sdk import BaseHook
from airflow.sdk.exceptions import AirflowNotFoundException

from storage_engine import layout
from storage_engine.config import StorageConfig
from storage_engine.config_file import DEFAULT_CONFIG_PATH, ENV_VAR, load_config
from storage_engine.inspection.detail import PartitionDetail
from storage_engine.inspection.listing import PartitionPage
from storage_engine.inspection.status import Overview
from storage_engine.jobs import batches, compaction, housekeeping
from storage_engine.jobs.batches import BatchPartitions, BatchResult
from storage_engine.jobs.summaries import PurgeResult

KEYMAP_DIR_ENV = "STORAGE_ENGINE_KEYMAP_DIR"
STATE_DIR_ENV = "STORAGE_MAINTENANCE_STATE_DIR"
HOST_ENV = "STORAGE_MAINTENANCE_HOST"
OFFLINE_STATE_FILE = "offline-log-dirs.json"
AS_OF_INTERVAL_END = "data interval end"
AS_OF_TRIGGER_TIME = "trigger time (the run has no data interval)"


class AsOf(TypedDict):
    now_ms: int
    iso: str            # e.g. 2026-01-01T12:00:00.000Z
    source: str         # AS_OF_INTERVAL_END or AS_OF_TRIGGER_TIME


def epoch_ms(when: datetime.datetime) -> int:
    """``when`` (timezone-aware) as integer epoch milliseconds, exactly (no float rounding).

    Integer arithmetic on the UTC fields, because Airflow hands out pendulum DateTimes, whose differences are
    pendulum Intervals that do not divide by a stdlib timedelta."""
    if when.tzinfo is None:
        raise ValueError(f"{when!r} has no timezone; Airflow's data interval bounds are always aware")
    return calendar.timegm(when.utctimetuple()) * 1000 + when.microsecond // 1000


def iso_ms(now_ms: int) -> str:
    when = datetime.datetime.fromtimestamp(now_ms / 1000, tz=datetime.timezone.utc)
    return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def config_path_without_connection() -> str:
    """Steps 3-4 of the resolution: what DAG files use at parse time, where no connection may be looked up."""
    return os.environ.get(ENV_VAR) or DEFAULT_CONFIG_PATH


def check_worker_host(host: str | None) -> None:
    """Refuse (:class:`AirflowFailException`) to run a task of storage host ``host`` on a worker whose
    ``$STORAGE_MAINTENANCE_HOST`` names another host: that worker lacks the task's log dirs. A task of no host, or
    a worker that does not say, is not checked."""
    worker = os.environ.get(HOST_ENV) or None
    if host is not None and worker is not None and worker != host:
        from airflow.sdk.exceptions import AirflowFailException
        raise AirflowFailException(
            f"this task maintains the log dirs of storage host {host!r} but runs on a worker of storage host "
            f"{worker!r} (${HOST_ENV}); only the workers of {host!r} (airflow celery worker --queues {host},default) "
            "may run it: check the task's queue and the workers' queues")


def spark_submit_env(given: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The environment a key-map task gives spark-submit, resolved by the worker when the task runs (not by the
    DAG processor when it parses the DAG file): this interpreter's folder first on ``PATH`` (spark-submit is the
    pip package's) and ``PYSPARK_PYTHON`` this interpreter unless the worker sets one; ``given`` (the task's own
    ``env_vars``) over both."""
    env: dict[str, Any] = {"PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""),
                           "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable)}
    return {**env, **(given or {})}


def declared_topics(path: str | None = None) -> list[str]:
    """Topics named in the config file's ``topics:`` section (no log dir is listed): stable between parses,
    so a DAG's params built from them change only when the config does."""
    return sorted(load_config(path or config_path_without_connection()).topic_overrides)


class StorageEngineHook(BaseHook):
    """Runs the engine's maintenance jobs and read-only queries for one storage config.

    Each maintenance method opens only the logs it needs, acts as of ``now_ms``, closes them and returns the
    engine's JSON-able summary; engine errors (``storage_engine.errors.StorageError``) propagate unchanged.

    :param storage_engine_conn_id: connection whose ``extra`` may name the config file (``{"config": ...}``)
    :param config_path: a config file that overrides the connection and the environment
    :param host: the storage host (the config's ``hosts:``) whose log dirs this hook maintains; None: every log dir
    """

    conn_name_attr = "storage_engine_conn_id"
    default_conn_name = "storage_engine_default"
    conn_type = "generic"
    hook_name = "Kafka-format log storage"

    def __init__(self, storage_engine_conn_id: str = default_conn_name, config_path: str | None = None,
                 host: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.storage_engine_conn_id = storage_engine_conn_id
        self._config_path = config_path or None
        self.host = host or None

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
    def store_config(self) -> StorageConfig:
        """The loaded and validated config, every log dir; ``ConfigError`` names the file, key and value when it is
        invalid."""
        return load_config(self.config_path)

    @cached_property
    def config(self) -> StorageConfig:
        """The config the engine calls get: for a hook of one ``host``, that host's log dirs only."""
        return self.store_config if self.host is None else self.store_config.for_host(self.host)

    def get_conn(self) -> StorageConfig:
        return self.config

    # -- planning -----------------------------------------------------------------------------------------------
    def list_partitions(self, topics: list[str] | None = None) -> list[dict]:
        """Read-only listing (folder names only); unknown topics raise ``PartitionNotFoundError``."""
        return housekeeping.list_partitions(self.config, topics=topics or None)

    def plan_batches(self, topics: list[str] | None, batch_size: int, max_batches: int | None = None) -> list:
        """Batches of at most ``batch_size`` partitions per log dir; when that would give more than
        ``max_batches`` batches, the size grows instead (more partitions per task, never more tasks)."""
        if max_batches:
            total = len(self.list_partitions(topics))
            batch_size = max(batch_size, -(-total // max_batches))
        return batches.plan_batches(self.config, topics=topics or None, batch_size=batch_size)

    # -- the maintenance jobs -----------------------------------------------------------------------------------
    def retention_batch(self, partitions: BatchPartitions, now_ms: int, dry_run: bool = False) -> BatchResult:
        """Retention of a batch; a tiered topic's local segments go only up to the highest offset with a finished
        remote copy (the engine reads it from ``__remote_log_metadata``), so a segment never copied stays."""
        return batches.retention_batch(self.config, partitions, now_ms, dry_run=dry_run)

    def flush_batch(self, partitions: BatchPartitions, now_ms: int, due_only: bool = True,
                    dry_run: bool = False) -> BatchResult:
        return batches.flush_batch(self.config, partitions, now_ms, due_only=due_only, dry_run=dry_run)

    def checkpoint_batch(self, partitions: BatchPartitions, now_ms: int, flush: bool = True,
                         dry_run: bool = False) -> BatchResult:
        return batches.checkpoint_batch(self.config, partitions, now_ms, flush=flush, dry_run=dry_run)

    def verify_batch(self, partitions: BatchPartitions) -> BatchResult:
        from storage_engine.inspection.verify import verify_batch
        return verify_batch(self.config, partitions)

    def verify_log_dirs(self) -> dict:
        from storage_engine.inspection.verify import verify_dir_files
        return verify_dir_files(self.config)

    def expire_producers_batch(self, partitions: BatchPartitions, now_ms: int, dry_run: bool = False) -> dict:
        return dict(batches.expire_producers_batch(self.config, partitions, now_ms, dry_run=dry_run))

    def tier_batch(self, partitions: BatchPartitions, now_ms: int, dry_run: bool = False) -> BatchResult:
        """Tiered storage for a batch (:func:`storage_engine.jobs.tiering.tier_batch`): copy the eligible sealed
        segments to the object store, then local retention, remote retention and orphan clean-up."""
        from storage_engine.jobs import tiering
        return tiering.tier_batch(self.config, partitions, now_ms, dry_run=dry_run)

    def tiering_topics(self, topics: Collection[str]) -> list[str]:
        """The topics among ``topics`` that tiering has work for (``remote.storage.enable``, or
        ``remote.log.delete.on.disable`` after it was turned off); none while ``remote.log.storage.system.enable``
        is off."""
        from storage_engine.jobs import tiering
        return tiering.tiering_topics(self.config, topics)

    def check_object_store(self) -> dict[str, str | None]:
        """One real request to the object store (a listing of one page under the key prefix): raises the engine's
        ``RemoteStorageError`` subclass that names the fix (unreachable, bucket missing, credentials refused)
        before any batch starts; returns ``{"endpoint_url", "bucket"}``."""
        from storage_engine.jobs import tiering
        return tiering.check_object_store(self.config)

    def purge(self, now_ms: int, dry_run: bool = False) -> PurgeResult:
        """``.deleted`` files and ``-delete`` folders (deleted partitions) past ``file.delete.delay.ms``."""
        return housekeeping.purge(self.config, now_ms, dry_run=dry_run)

    # -- log dirs: health, offline alerts, balance --------------------------------------------------------------
    def log_dir_health(self) -> dict:
        """``{"online": [...], "offline": {dir: error}}``, read-only (no log opened)."""
        return dict(housekeeping.log_dir_health(self.config))

    def state_dir(self) -> str:
        """Where the maintenance DAGs keep their own state across runs (which offline dirs were alerted):
        ``$STORAGE_MAINTENANCE_STATE_DIR``, else ``maintenance-state/`` beside the first log dir of the store (never
        in one; the same for the tasks of every host)."""
        env = os.environ.get(STATE_DIR_ENV)
        if env:
            return os.path.abspath(env)
        return os.path.join(os.path.dirname(os.path.abspath(self.store_config.log_dirs[0])),
                            layout.MAINTENANCE_STATE_DIR)

    def note_log_dirs(self, offline: dict[str, str], online: list[str], seen: dict) -> tuple[list[str], list[str]]:
        """Record what a run saw of the log dirs; returns (dirs newly offline: alert them, dirs back online).

        The record (``offline-log-dirs.json`` in :meth:`state_dir`, read and written under an flock, so runs of
        several DAGs at once agree) keeps each offline dir until a run sees it online again: each dir going
        offline is alerted once. ``seen`` (``{"dag_id", "run_id", "as_of"}``) is stored with a new entry."""
        import fcntl
        import json

        os.makedirs(self.state_dir(), exist_ok=True)
        path = os.path.join(self.state_dir(), OFFLINE_STATE_FILE)
        with open(path + ".lock", "a+b") as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            from storage_engine.durable import read_regular_file
            from storage_engine.errors import UnsafeFileError
            try:
                state = json.loads(read_regular_file(path, 16 * 1024 * 1024) or b"{}")
            except FileNotFoundError:
                state = {}
            except (ValueError, UnsafeFileError):   # unreadable record (or no regular file): start over (at
                state = {}                          # worst an offline dir is alerted again)
            new = sorted(d for d in offline if d not in state)
            back = sorted(d for d in online if d in state and d not in offline)
            for d in new:
                state[d] = {"reason": offline[d], **seen}
            for d in back:
                state.pop(d)
            if new or back:
                from storage_engine.durable import atomic_write
                atomic_write(path, json.dumps(state, indent=1, sort_keys=True).encode())
        return new, back

    def forget_offline(self, log_dir: str) -> None:
        """Drop one dir from the record (its alert could not be delivered: the next run alerts it again)."""
        self.note_log_dirs({}, [log_dir], {})

    def balance_plan(self, *, max_used_percent: float | None, max_dir_bytes: int | None, max_moves: int | None,
                     topics: list[str] | None) -> dict:
        from storage_engine.jobs import lifecycle
        return lifecycle.balance_plan(self.config, max_used_percent=max_used_percent, max_dir_bytes=max_dir_bytes,
                                      max_moves=max_moves, topics=topics or None)

    def move_partition(self, topic: str, partition: int, to_dir: str, now_ms: int) -> dict:
        from storage_engine.jobs import lifecycle
        return lifecycle.move_partition(self.config, topic, partition, to_dir, now_ms)

    # -- compaction ---------------------------------------------------------------------------------------------
    def compaction_plan(self, now_ms: int, topics: list[str] | None, max_partitions: int, strategy: str) -> dict:
        """The cleaner's selection bounded by ``now_ms`` (a run never cleans a segment holding a record at or
        after its interval end), with the key-map strategy of each selected partition."""
        return compaction.compaction_plan(self.config, now_ms, topics=topics or None,
                                               max_partitions=max_partitions, strategy=strategy,
                                               upper_time_bound_ms=now_ms)

    def compact_partition(self, topic: str, partition: int, first_dirty_offset: int, first_uncleanable_offset: int,
                          now_ms: int, keymap_path: str | None = None, dry_run: bool = False) -> dict:
        return compaction.compact_partition(self.config, topic, partition, first_dirty_offset,
                                                 first_uncleanable_offset, now_ms, keymap_path=keymap_path,
                                                 dry_run=dry_run)

    def clear_uncleanable(self, topic: str, partition: int) -> dict:
        return compaction.clear_uncleanable(self.config, topic, partition)

    def mark_uncleanable(self, topic: str, partition: int, reason: str, now_ms: int) -> dict:
        """Record that cleaning the partition failed (the Spark key-map job found damage): skipped by the
        selection, shown in the Storage view, cleared with :meth:`clear_uncleanable`."""
        return compaction.mark_uncleanable(self.config, topic, partition, reason, now_ms)

    def keymap_root(self) -> str:
        """Where run-scoped key maps go: ``$STORAGE_ENGINE_KEYMAP_DIR``, else ``keymaps/`` beside the first log
        dir (never inside a log dir; shared storage in a cluster deployment)."""
        env = os.environ.get(KEYMAP_DIR_ENV)
        if env:
            return os.path.abspath(env)
        return layout.keymap_root(self.config.log_dirs)

    def keymap_path(self, run_id: str, topic: str, partition: int) -> str:
        safe_run = re.sub(r"[^A-Za-z0-9._-]", "_", run_id)
        return os.path.join(self.keymap_root(), safe_run, f"{topic}-{partition}")

    def remove_keymap(self, path: str) -> None:
        """Remove a run's key map once the clean that used it is durable, and the run's folder once empty."""
        shutil.rmtree(path, ignore_errors=True)
        run_dir = os.path.dirname(path)
        try:
            os.rmdir(run_dir)           # only when no other partition's map of the run is still there
        except OSError:
            pass

    @staticmethod
    def check_spark_connection(conn_id: str) -> str:
        """The Spark connection's master, or AirflowFailException: the Spark provider silently submits to YARN
        when the connection is missing or unparsable."""
        from airflow.sdk.exceptions import AirflowFailException
        try:
            conn = BaseHook.get_connection(conn_id)
        except AirflowNotFoundException:
            raise AirflowFailException(
                f"connection {conn_id!r} is missing, so spark-submit would go to YARN; define it, e.g. "
                "AIRFLOW_CONN_SPARK_DEFAULT='{\"conn_type\":\"spark\",\"host\":\"local[*]\"}'") from None
        host = (conn.host or "").strip()
        if not host or host == "yarn":
            raise AirflowFailException(f"connection {conn_id!r} has host {conn.host!r}; set it to local[*] or "
                                       "spark://host:port")
        return host

    # -- read-only status (the Storage view) ---------------------------------------------------------------------
    def consumer_groups(self, listener: dict | None) -> list[dict]:
        """The groups the listener reported, with their lag per partition."""
        from storage_engine.inspection.listener import consumer_groups
        return consumer_groups(self.config, listener)

    def groups_losing_unread(self, groups: list[dict], retention_rows: list[dict]) -> list[dict]:
        from storage_engine.inspection import listener
        return listener.groups_losing_unread(groups, retention_rows)

    def listener_status(self) -> dict | None:
        """The Kafka-protocol listener's last status (see :func:`storage_engine.inspection.listener.listener_status`)."""
        from storage_engine.inspection import listener
        return listener.listener_status(self.config)

    def log_dir_status(self) -> list:
        from storage_engine.inspection import status
        return status.log_dir_status(self.config)

    def overview(self, now_ms: int | None = None, top: int = 10,
                 extra: dict[tuple[str, int], dict[str, Any]] | None = None) -> Overview:
        """The first page's facts (:func:`storage_engine.inspection.status.overview`); ``extra``: what the
        metadata DB adds per partition (damage found by runs), counted with what the files show."""
        from storage_engine.inspection import status
        return status.overview(self.config, now_ms=now_ms, top=top, extra=extra)

    def partition_page(self, **kwargs: Any) -> PartitionPage:
        from storage_engine.inspection import listing
        return listing.list_partition_status(self.config, **kwargs)

    def partition_detail(self, topic: str, partition: int, now_ms: int | None = None) -> PartitionDetail:
        from storage_engine.inspection import detail
        return detail.partition_detail(self.config, topic, partition, now_ms)

    def plan(self, now_ms: int, topics: Collection[str] | None = None, offset: int = 0, limit: int = 100) -> dict:
        from storage_engine.inspection import plans
        return plans.plan(self.config, now_ms, topics=topics, offset=offset, limit=limit)
