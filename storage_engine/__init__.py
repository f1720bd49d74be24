"""A Kafka-compatible log store: record formats, segments, indexes, logs, checkpoints, retention, cleaning.

The public API, importable from here::

    import storage_engine
    config = storage_engine.load_config("include/config/storage.yaml")
    with storage_engine.LogManager.open(config) as mgr:
        log = mgr.get_or_create_log("user-emails", 0)
        log.append_records([storage_engine.SimpleRecord(b"u1", b"a@example.com")])
        for record in log.read_records(0):
            print(record.offset, record.key, record.value)
    storage_engine.retention_all(config, now_ms=1767225600000, dry_run=True)

Layers (each imports only the ones listed before it): ``errors``, ``layout``, ``durable``, ``clock``,
``config_keys``, ``config``, ``config_file``, ``units``; ``record/`` (batch formats and codecs); ``segment/`` (one
segment's files, the log dir's small files); ``log/`` (a partition's log, loading, the set of logs, locks);
``maintenance/`` (the mechanisms: retention, the cleaner, key maps); ``jobs/`` (the whole jobs the CLI and Airflow run);
``inspection/`` (read-only status, verify, dump); ``cli/`` (the command line). The engine imports neither Airflow nor
Spark.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:     # the same names, for type checkers (at run time they load on first use)
    from storage_engine.clock import SYSTEM_CLOCK, Clock, ManualClock, SystemClock
    from storage_engine.config import CleanerConfig, LogConfig, StorageConfig
    from storage_engine.config_file import config_from_mapping, load_config
    from storage_engine.errors import (CompressionError, ConfigError, CorruptCheckpointError, CorruptIndexError,
                                       CorruptRecordError, InvalidOffsetError, InvalidRecordError,
                                       InvalidRecordForTopicError, InvalidRequestError, InvalidTopicError,
                                       LogDirOfflineError, LogLockedError, OffsetOutOfRangeError, PartitionDeletedError,
                                       PartitionNotFoundError, RecordTooLargeError, StorageError, StorageIOError,
                                       DataLossError, PartitionUnreadableError)
    from storage_engine.log.appends import AppendInfo
    from storage_engine.log.log import Log
    from storage_engine.log.manager import LogManager
    from storage_engine.jobs.lifecycle import (accept_loss, balance_plan, cancel_move, delete_topic, log_dir_usage,
                                               move_partition, purge_delete_dirs, remove_folder)
    from storage_engine.jobs.compaction import (clear_uncleanable, compact, compact_partition,
                                                compaction_plan)
    from storage_engine.jobs.housekeeping import checkpoint, flush, list_partitions, purge, retention, retention_all
    from storage_engine.record.records import Record, SimpleRecord
    from storage_engine.inspection.verify import verify_log_dirs

# Each public name and the module defining it. A name is imported on first use (PEP 562), so importing a lower
# layer (``storage_engine.record.records``) loads that layer only, not the jobs, the inspection or PyYAML.
_WHERE: dict[str, str] = {
    "SYSTEM_CLOCK": "storage_engine.clock",
    "Clock": "storage_engine.clock",
    "ManualClock": "storage_engine.clock",
    "SystemClock": "storage_engine.clock",
    "CleanerConfig": "storage_engine.config",
    "LogConfig": "storage_engine.config",
    "StorageConfig": "storage_engine.config",
    "config_from_mapping": "storage_engine.config_file",
    "load_config": "storage_engine.config_file",
    "CompressionError": "storage_engine.errors",
    "ConfigError": "storage_engine.errors",
    "CorruptCheckpointError": "storage_engine.errors",
    "CorruptIndexError": "storage_engine.errors",
    "CorruptRecordError": "storage_engine.errors",
    "InvalidOffsetError": "storage_engine.errors",
    "InvalidRecordError": "storage_engine.errors",
    "InvalidRecordForTopicError": "storage_engine.errors",
    "InvalidRequestError": "storage_engine.errors",
    "InvalidTopicError": "storage_engine.errors",
    "LogDirOfflineError": "storage_engine.errors",
    "LogLockedError": "storage_engine.errors",
    "OffsetOutOfRangeError": "storage_engine.errors",
    "PartitionDeletedError": "storage_engine.errors",
    "PartitionNotFoundError": "storage_engine.errors",
    "RecordTooLargeError": "storage_engine.errors",
    "StorageError": "storage_engine.errors",
    "StorageIOError": "storage_engine.errors",
    "DataLossError": "storage_engine.errors",
    "PartitionUnreadableError": "storage_engine.errors",
    "AppendInfo": "storage_engine.log.appends",
    "Log": "storage_engine.log.log",
    "LogManager": "storage_engine.log.manager",
    "accept_loss": "storage_engine.jobs.lifecycle",
    "balance_plan": "storage_engine.jobs.lifecycle",
    "cancel_move": "storage_engine.jobs.lifecycle",
    "delete_topic": "storage_engine.jobs.lifecycle",
    "log_dir_usage": "storage_engine.jobs.lifecycle",
    "move_partition": "storage_engine.jobs.lifecycle",
    "purge_delete_dirs": "storage_engine.jobs.lifecycle",
    "remove_folder": "storage_engine.jobs.lifecycle",
    "clear_uncleanable": "storage_engine.jobs.compaction",
    "compact": "storage_engine.jobs.compaction",
    "compact_partition": "storage_engine.jobs.compaction",
    "compaction_plan": "storage_engine.jobs.compaction",
    "checkpoint": "storage_engine.jobs.housekeeping",
    "flush": "storage_engine.jobs.housekeeping",
    "list_partitions": "storage_engine.jobs.housekeeping",
    "purge": "storage_engine.jobs.housekeeping",
    "retention": "storage_engine.jobs.housekeeping",
    "retention_all": "storage_engine.jobs.housekeeping",
    "Record": "storage_engine.record.records",
    "SimpleRecord": "storage_engine.record.records",
    "verify_log_dirs": "storage_engine.inspection.verify",
}

__version__ = "0.1.0"

__all__ = [
    # logs
    "LogManager", "Log", "AppendInfo", "SimpleRecord", "Record",
    # configuration and time
    "load_config", "config_from_mapping", "StorageConfig", "LogConfig", "CleanerConfig",
    "Clock", "SystemClock", "ManualClock", "SYSTEM_CLOCK",
    # maintenance jobs (each opens the logs, acts as of now_ms, closes, returns a summary)
    "checkpoint", "flush", "retention", "retention_all", "purge", "compact", "compaction_plan",
    "compact_partition", "clear_uncleanable", "list_partitions", "verify_log_dirs",
    # topic and log-dir lifecycle
    "delete_topic", "purge_delete_dirs", "move_partition", "cancel_move", "log_dir_usage", "balance_plan",
    "remove_folder", "accept_loss",
    # errors
    "StorageError", "StorageIOError", "ConfigError", "InvalidRequestError", "PartitionNotFoundError",
    "InvalidTopicError", "CorruptRecordError", "InvalidRecordError", "InvalidRecordForTopicError",
    "CompressionError", "CorruptIndexError", "CorruptCheckpointError", "InvalidOffsetError",
    "OffsetOutOfRangeError", "RecordTooLargeError", "LogLockedError", "PartitionDeletedError", "LogDirOfflineError",
    "DataLossError", "PartitionUnreadableError",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'storage_engine' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value     # later uses skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
