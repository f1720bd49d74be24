"""``python -m storage_engine [--config CFG] <command>``: JSON on stdout for machines (``status`` prints tables
for people unless given ``--json``), errors on stderr.

Exit codes: 0 success, 1 damage found (``verify``, ``dump-log``), a storage error, or a partition a maintenance
command could not maintain (it cannot be read, or compaction marked it uncleanable: the JSON summary is still
printed, with the partition under ``failures``, the others are still maintained), 2 bad input (usage,
configuration, no usable log dir, topic names, malformed JSON lines, records the topic refuses, offsets out of range,
missing files, appends or markers the producer state refuses: printed with Kafka's error name, e.g.
``INVALID_PRODUCER_EPOCH``). Every error is one line on stderr, ``storage-engine: error: <what>`` (a usage error
adds where to find the usage; a failed partition is ``<topic>-<partition>: <ErrorType>: <what>``, naming the
file and the fix); the usage itself is printed by ``--help`` only.

:func:`main` is the entry point: it parses the arguments (:mod:`storage_engine.cli.args`), loads the
config, runs the command (:mod:`storage_engine.cli.data_commands`, :mod:`storage_engine.cli.admin_commands`)
and turns the errors it raises into these exit codes.
"""
from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence

from storage_engine.config import StorageConfig
from storage_engine.config_file import load_config
from storage_engine.errors import (ConfigError, InvalidRecordError, InvalidRecordForTopicError, InvalidRequestError,
                                   InvalidTopicError, OffsetOutOfRangeError, PartitionNotFoundError, ProducerStateError,
                                   RecordTooLargeError, StorageError)
from storage_engine.cli.admin_commands import (cmd_accept_loss, cmd_acls, cmd_checkpoint, cmd_compact, cmd_delete_records, cmd_delete_topic,
                                               cmd_describe, cmd_dump_log, cmd_expire_producers, cmd_flush,
                                               cmd_log_dirs, cmd_move_partition, cmd_purge_deleted,
                                               cmd_remove_folder, cmd_retention, cmd_status, cmd_tier,
                                               cmd_verify)
from storage_engine.cli.args import EXIT_BAD_INPUT, EXIT_DAMAGE, build_parser, print_error
from storage_engine.cli.data_commands import cmd_consume, cmd_end_txn, cmd_produce


def cmd_serve(args: argparse.Namespace, config: StorageConfig) -> int:
    from storage_engine.server.server import serve
    logging.getLogger().setLevel(logging.INFO)
    return serve(config, listeners=args.listeners)


COMMANDS: dict[str, Callable[[argparse.Namespace, StorageConfig], int]] = {
    "produce": cmd_produce, "consume": cmd_consume, "status": cmd_status, "describe": cmd_describe, "verify": cmd_verify,
    "acls": cmd_acls, "checkpoint": cmd_checkpoint, "flush": cmd_flush, "delete-records": cmd_delete_records,
    "retention": cmd_retention, "tier": cmd_tier, "compact": cmd_compact, "purge-deleted": cmd_purge_deleted,
    "end-txn": cmd_end_txn, "expire-producers": cmd_expire_producers,
    "delete-topic": cmd_delete_topic, "move-partition": cmd_move_partition, "log-dirs": cmd_log_dirs,
    "remove-folder": cmd_remove_folder, "accept-loss": cmd_accept_loss, "serve": cmd_serve}
# The commands that read files named on the command line and load no config.
NO_CONFIG: dict[str, Callable[[argparse.Namespace], int]] = {"dump-log": cmd_dump_log}


def _error(message: str, code: int) -> int:
    """Every error of a command is one line on stderr: ``storage-engine: error: <what>``."""
    print_error(message)
    return code


def require_a_usable_log_dir(config: StorageConfig) -> None:
    """Raise :class:`ConfigError` when no log dir of ``config`` can be used (each is no folder, or cannot be read):
    a command then has nothing to work on. Kafka starts with the healthy dirs, and stops only when none is left;
    one usable dir is enough here too (the others are offline, and reported)."""
    from storage_engine.jobs.housekeeping import log_dir_health
    health = log_dir_health(config)
    if config.log_dirs and not health["online"]:
        offline = "; ".join(f"{d} ({reason})" for d, reason in health["offline"].items())
        raise ConfigError(f"no usable log dir in {config.source or 'the config'}: every entry of log.dirs is "
                          f"offline: {offline}")


def _why_missing(args: argparse.Namespace, config: StorageConfig | None) -> StorageError | None:
    """Why the partition a command names (``--topic``, ``--partition``) was not found, when it is one whose folder
    vanished or became a file while its log dir still lists it (:func:`storage_engine.log.health.why_missing`)."""
    from storage_engine.log.health import why_missing
    topic, partition = getattr(args, "topic", None), getattr(args, "partition", None)
    if config is None or not isinstance(topic, str) or not isinstance(partition, int):
        return None
    return why_missing(config.log_dirs, (topic, partition))


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, stream=sys.stderr,
                        format="%(levelname)s %(name)s: %(message)s")
    config: StorageConfig | None = None
    try:
        if args.command in NO_CONFIG:
            return NO_CONFIG[args.command](args)
        config = load_config(args.config)
        require_a_usable_log_dir(config)
        return COMMANDS[args.command](args, config)
    except ProducerStateError as exc:   # refused by the producer state: named as Kafka names it
        return _error(f"{exc.kafka_name}: {exc}", EXIT_BAD_INPUT)
    except PartitionNotFoundError as exc:
        unreadable = _why_missing(args, config)
        if unreadable is not None:      # not bad input: the partition is there, and cannot be read
            return _error(str(unreadable), EXIT_DAMAGE)
        return _error(str(exc), EXIT_BAD_INPUT)
    except (InvalidRequestError, ConfigError, InvalidTopicError, OffsetOutOfRangeError, RecordTooLargeError,
            InvalidRecordError, InvalidRecordForTopicError, ValueError) as exc:
        return _error(str(exc), EXIT_BAD_INPUT)
    except StorageError as exc:
        return _error(str(exc), EXIT_DAMAGE)
    except BrokenPipeError:
        return 0
    except OSError as exc:      # not wrapped by the engine (stdin, stdout): still one line, a storage error
        return _error(f"{type(exc).__name__}: {exc}", EXIT_DAMAGE)
