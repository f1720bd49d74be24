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
