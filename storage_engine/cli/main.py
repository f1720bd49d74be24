"""``python -m storage_engine [--config CFG] <command>``: JSON on stdout for machines, errors on stderr.

Exit codes: 0 success, 1 damage found (``verify``, ``dump-log``) or a storage error, 2 bad input (usage,
configuration, topic names, malformed JSON lines, records the topic refuses, offsets out of range, missing files,
appends or markers the producer state refuses: printed with Kafka's error name, e.g. ``INVALID_PRODUCER_EPOCH``).

:func:`main` is the entry point: it parses the arguments (:mod:`storage_engine.cli.args`), loads the
config, runs the command (:mod:`storage_engine.cli.data_commands`, :mod:`storage_engine.cli.admin_commands`)
and turns the errors it raises into these exit codes.
"""
from __future__ import annotations

import logging
import sys

from storage_engine.config_file import load_config
from storage_engine.errors import (ConfigError, InvalidRecordError, InvalidRecordForTopicError, InvalidRequestError,
                                   InvalidTopicError, OffsetOutOfRangeError, ProducerStateError, RecordTooLargeError,
                                   StorageError)
from storage_engine.cli.admin_commands import (cmd_checkpoint, cmd_compact, cmd_delete_records, cmd_delete_topic,
                                               cmd_describe, cmd_dump_log, cmd_expire_producers, cmd_flush,
                                               cmd_log_dirs, cmd_move_partition, cmd_purge_deleted,
                                               cmd_remove_folder, cmd_retention, cmd_verify)
from storage_engine.cli.args import EXIT_BAD_INPUT, EXIT_DAMAGE, build_parser
from storage_engine.cli.data_commands import cmd_consume, cmd_end_txn, cmd_produce


COMMANDS = {"produce": cmd_produce, "consume": cmd_consume, "describe": cmd_describe, "verify": cmd_verify,
            "checkpoint": cmd_checkpoint, "flush": cmd_flush, "delete-records": cmd_delete_records,
            "dump-log": cmd_dump_log, "retention": cmd_retention, "compact": cmd_compact, "purge-deleted": cmd_purge_deleted,
            "end-txn": cmd_end_txn, "expire-producers": cmd_expire_producers,
            "delete-topic": cmd_delete_topic, "move-partition": cmd_move_partition, "log-dirs": cmd_log_dirs,
            "remove-folder": cmd_remove_folder}
NO_CONFIG = {"dump-log"}


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, stream=sys.stderr,
                        format="%(levelname)s %(name)s: %(message)s")
    try:
        config = None if args.command in NO_CONFIG else load_config(args.config)
        return COMMANDS[args.command](args, config)
    except ProducerStateError as exc:   # refused by the producer state: named as Kafka names it
        sys.stderr.write(f"error: {exc.kafka_name}: {exc}\n")
        return EXIT_BAD_INPUT
    except (InvalidRequestError, ConfigError, InvalidTopicError, OffsetOutOfRangeError, RecordTooLargeError,
            InvalidRecordError, InvalidRecordForTopicError, ValueError) as exc:
        sys.stderr.write(f"error: {exc}\n")
        return EXIT_BAD_INPUT
    except StorageError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return EXIT_DAMAGE
    except BrokenPipeError:
        return 0
