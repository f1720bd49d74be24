"""``python -m storage_engine [--config CFG] <command>``: JSON on stdout for machines, errors on stderr.

Exit codes: 0 success, 1 damage found (``verify``, ``dump-log``) or a storage error, 2 bad input (usage,
configuration, topic names, malformed JSON lines, records the topic refuses, offsets out of range, missing files,
appends or markers the producer state refuses: printed with Kafka's error name, e.g. ``INVALID_PRODUCER_EPOCH``).
"""
from __future__ import annotations

import argparse
import base64
import binascii
import json
import logging
import sys

from storage_engine.record import codecs
from storage_engine import layout
from storage_engine.clock import clock_at
from storage_engine.config import ENV_VAR, load_config
from storage_engine.errors import (ConfigError, InvalidRecordError, InvalidRecordForTopicError, InvalidRequestError,
                                   ProducerStateError,
                                   InvalidTopicError, PartitionNotFoundError, OffsetOutOfRangeError, RecordTooLargeError, StorageError)
from storage_engine.record.records import MAX_RECORD_OVERHEAD, SimpleRecord

EXIT_DAMAGE = 1
EXIT_BAD_INPUT = 2


def _out(obj) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")


def _non_negative(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {v}")
    return v


def _positive(text: str) -> int:
    v = _non_negative(text)
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {v}")
    return v


def _offset(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer offset, got {text!r}") from None
    if v < -1:
        raise argparse.ArgumentTypeError(f"offset must be >= 0 (or -1 for the high watermark), got {v}")
    return v


def _ranged(text: str, what: str, lo: int, hi: int) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer {what}, got {text!r}") from None
    if not lo <= v <= hi:
        raise argparse.ArgumentTypeError(f"{what} must be in [{lo}, {hi}], got {v}")
    return v


def _producer_epoch(text: str) -> int:
    return _ranged(text, "producer epoch", 0, 32767)


def _sequence(text: str) -> int:
    return _ranged(text, "sequence", 0, 2**31 - 1)


def _coordinator_epoch(text: str) -> int:
    return _ranged(text, "coordinator epoch", 0, 2**31 - 1)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m storage_engine",
                                description="Kafka-compatible log storage: produce, consume, inspect, maintain.")
    p.add_argument("--config", help=f"YAML config (default: ${ENV_VAR} or include/config/storage.yaml)")
    p.add_argument("-v", "--verbose", action="store_true", help="log engine activity to stderr")
    sub = p.add_subparsers(dest="command", required=True, metavar="<command>")

    d = sub.add_parser("dump-log", help="print .log/.index/.timeindex/.txnindex/.snapshot files like kafka-dump-log.sh")
    d.add_argument("--files", nargs="+", required=True, help="segment, index, time-index, transaction-index or producer-snapshot files")
    d.add_argument("--deep-iteration", action="store_true", help="print every record, not only batches")
    d.add_argument("--print-data-log", action="store_true", help="print keys and values (implies deep iteration)")
    d.add_argument("--index-sanity-check", action="store_true", help="only sanity-check index files")
    d.add_argument("--verify-index-only", action="store_true", help="verify index entries without printing them")
    d.add_argument("--max-bytes", type=_non_negative, default=None, help="stop after this many bytes of a .log")
    d.add_argument("--json", action="store_true", help="one JSON object per line")

    pr = sub.add_parser("produce", help="append JSON lines from stdin to a partition")
    _tp(pr)
    pr.add_argument("--encoding", choices=("utf8", "base64"), default="utf8")
    pr.add_argument("--compression", choices=sorted(codecs.CODEC_IDS), default="none",
                    help="codec of the written batches (the topic's compression.type may override it)")
    pr.add_argument("--now-ms", type=_non_negative, default=None, help="timestamp for records without one")
    pr.add_argument("--producer-id", type=_non_negative, default=None,
                    help="idempotent producer id (with --epoch and --base-sequence); a retried batch is written once")
    pr.add_argument("--epoch", type=_producer_epoch, default=None, help="producer epoch (default 0)")
    pr.add_argument("--base-sequence", type=_sequence, default=None,
                    help="sequence of the first record (default 0); the records of a call get consecutive ones")
    pr.add_argument("--transactional", action="store_true",
                    help="the records belong to the producer's open transaction (end it with end-txn)")

    et = sub.add_parser("end-txn", help="write a transaction marker (COMMIT or ABORT) as the coordinator would")
    _tp(et)
    et.add_argument("--producer-id", type=_non_negative, required=True)
    et.add_argument("--epoch", type=_producer_epoch, required=True, help="the producer's epoch")
    outcome = et.add_mutually_exclusive_group(required=True)
    outcome.add_argument("--commit", action="store_true")
    outcome.add_argument("--abort", action="store_true")
    et.add_argument("--coordinator-epoch", type=_coordinator_epoch, default=0)
    et.add_argument("--now-ms", type=_non_negative, default=None, help="timestamp of the marker")

    c = sub.add_parser("consume", help="print records of a partition as JSON lines")
    _tp(c)
    c.add_argument("--from-offset", type=_non_negative, default=None)
    c.add_argument("--max-records", type=_non_negative, default=None)
    c.add_argument("--encoding", choices=("utf8", "base64"), default="utf8")
    c.add_argument("--isolation-level", choices=("read_uncommitted", "read_committed"), default="read_uncommitted",
                   help="read_committed stops at the last stable offset and skips aborted records (markers are "
                        "never returned)")

    ds = sub.add_parser("describe", help="log dirs, partitions, segments and offsets")
    ds.add_argument("--topic", action="append", help="only these topics (repeatable)")
    ds.add_argument("--partition", type=_non_negative, default=None, help="only this partition number")
    ds.add_argument("--limit", type=_positive, default=None,
                    help="at most this many partitions (in topic, partition order); only those logs are opened")
    ds.add_argument("--offset", type=_non_negative, default=0, help="skip this many partitions first")
    vf = sub.add_parser("verify", help="read-only integrity audit of every log dir; exit 1 on damage")
    vf.add_argument("--strict", action="store_true",
                    help="also exit 1 for offline log dirs and stray or foreign folders")
    ck = sub.add_parser("checkpoint", help="write recovery-point and log-start-offset checkpoints")
    ck.add_argument("--flush", action="store_true", help="flush every log to its end first")
    fl = sub.add_parser("flush", help="fsync logs and advance their recovery points")
    fl.add_argument("--topic", action="append", help="only these topics (repeatable)")
    fl.add_argument("--due-only", action="store_true", help="only logs whose flush.ms has elapsed")
    fl.add_argument("--now-ms", type=_non_negative, default=None)
    dr = sub.add_parser("delete-records", help="advance a partition's log start offset")
    _tp(dr)
    dr.add_argument("--offset", type=_offset, required=True, help="new log start offset (-1: high watermark)")
    dr.add_argument("--now-ms", type=_non_negative, default=None)
    rt = sub.add_parser("retention", help="delete old segments by log start offset, size and time")
    rt.add_argument("--topic", help="only this topic (with --partition: only that partition)")
    rt.add_argument("--partition", type=_non_negative, default=None)
    rt.add_argument("--now-ms", type=_non_negative, default=None, help="act as of this time (default: now)")
    rt.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    cp = sub.add_parser("compact", help="clean the dirtiest compacted logs (latest value per key survives)")
    cp.add_argument("--topic", help="only this topic (with --partition: only that partition)")
    cp.add_argument("--partition", type=_non_negative, default=None)
    cp.add_argument("--now-ms", type=_non_negative, default=None, help="act as of this time (default: now)")
    cp.add_argument("--upper-time-bound-ms", type=_non_negative, default=None,
                    help="never clean segments holding a record at or after this time (interval runs)")
    cp.add_argument("--max-partitions", type=_positive, default=None)
    cp.add_argument("--dry-run", action="store_true", help="print the selection and what would be removed")
    cp.add_argument("--clear-uncleanable", action="store_true",
                    help="forget that --topic/--partition (or every partition) failed cleaning, then exit")
    ep = sub.add_parser("expire-producers", help="forget producers idle for producer.id.expiration.ms")
    ep.add_argument("--topic", action="append", help="only these topics (repeatable)")
    ep.add_argument("--now-ms", type=_non_negative, default=None, help="act as of this time (default: now)")
    ep.add_argument("--dry-run", action="store_true", help="list the producers that would expire")
    pg = sub.add_parser("purge-deleted", help="remove .deleted files and -delete folders past file.delete.delay.ms")
    pg.add_argument("--now-ms", type=_non_negative, default=None)
    pg.add_argument("--dry-run", action="store_true")
    _lifecycle_commands(sub)
    return p


def _lifecycle_commands(sub) -> None:
    dt = sub.add_parser("delete-topic", help="delete a topic's partitions (folders renamed -delete at once)")
    dt.add_argument("--topic", required=True)
    dt.add_argument("--partition", type=_non_negative, action="append", default=None,
                    help="only this partition (repeatable); default: every partition of the topic")
    dt.add_argument("--now-ms", type=_non_negative, default=None)
    mv = sub.add_parser("move-partition", help="move a partition to another log dir while it keeps serving")
    _tp(mv)
    mv.add_argument("--to-dir", help="the target log dir (one of log.dirs)")
    mv.add_argument("--cancel", action="store_true", help="give up the copy being made for a move instead")
    mv.add_argument("--now-ms", type=_non_negative, default=None)
    ld = sub.add_parser("log-dirs", help="usage of each log dir, and the moves that would balance them")
    threshold = ld.add_mutually_exclusive_group()
    threshold.add_argument("--max-used-percent", type=float, default=None,
                           help="plan moves off dirs whose filesystem is used above this percentage")
    threshold.add_argument("--max-dir-bytes", type=_non_negative, default=None,
                           help="plan moves off dirs holding more than this many bytes of log data")
    ld.add_argument("--max-moves", type=_positive, default=None)
    ld.add_argument("--execute", action="store_true", help="carry out the planned moves, one after the other")
    rf = sub.add_parser("remove-folder", help="remove a stray or foreign folder that describe/verify report")
    rf.add_argument("--log-dir", required=True)
    rf.add_argument("--name", required=True, help="the folder's name inside the log dir")
    rf.add_argument("--dry-run", action="store_true")


def _tp(p: argparse.ArgumentParser) -> None:
    p.add_argument("--topic", required=True)
    p.add_argument("--partition", type=_non_negative, required=True)


# -- commands -----------------------------------------------------------------------------------------------------

def _decode_field(value, encoding: str, what: str, line_no: int) -> bytes | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidRequestError(f"line {line_no}: {what} must be a string or null, got {type(value).__name__}")
    if encoding == "base64":
        try:
            return base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raise InvalidRequestError(f"line {line_no}: {what} is not valid base64") from None
    try:
        return value.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError as exc:
        raise InvalidRequestError(f"line {line_no}: {what} is not valid Unicode text ({exc.reason} at character "
                       f"{exc.start}); use --encoding base64 for binary data") from None


def parse_produce_lines(lines, encoding: str) -> list[SimpleRecord]:
    """Validate every JSON line before anything is written, so a bad line stores nothing."""
    records = []
    for n, line in enumerate(lines, 1):
        if isinstance(line, bytes):
            try:
                line = line.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise InvalidRequestError(f"line {n}: not UTF-8 text (byte {exc.start}); JSON lines must be UTF-8, "
                               "use --encoding base64 for binary data") from None
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InvalidRequestError(f"line {n}: malformed JSON: {exc.msg} at column {exc.colno}") from None
        except RecursionError:
            raise InvalidRequestError(f"line {n}: JSON nested too deeply ({len(line)} characters); a record is "
                                      "an object of key, value, timestamp and headers") from None
        if not isinstance(obj, dict):
            raise InvalidRequestError(f"line {n}: expected a JSON object with key/value, got {type(obj).__name__}")
        unknown = set(obj) - {"key", "value", "timestamp", "headers"}
        if unknown:
            raise InvalidRequestError(f"line {n}: unknown fields {sorted(unknown)}; allowed: key, value, timestamp, headers")
        ts = obj.get("timestamp", -1)
        if ts is None:
            ts = -1
        if isinstance(ts, bool) or not isinstance(ts, int) or ts < -1 or ts > 2**63 - 1:
            raise InvalidRequestError(f"line {n}: timestamp must be a non-negative integer of milliseconds, got {ts!r}")
        headers = obj.get("headers")
        if headers is None:
            headers = {}
        if not isinstance(headers, dict):
            raise InvalidRequestError(f"line {n}: headers must be an object of string to string, got {type(headers).__name__}")
        for k in headers:
            try:
                k.encode("utf-8")          # header keys are UTF-8 text in every encoding
            except UnicodeEncodeError as exc:
                raise InvalidRequestError(f"line {n}: header key {k!r} is not valid Unicode text ({exc.reason})") from None
        hdrs = tuple((k, _decode_field(v, encoding, f"header {k!r}", n)) for k, v in headers.items())
        records.append(SimpleRecord(_decode_field(obj.get("key"), encoding, "key", n),
                                    _decode_field(obj.get("value"), encoding, "value", n), ts, hdrs))
    return records


def _batches_of(records: list[SimpleRecord], limit_bytes: int):
    batch: list[SimpleRecord] = []
    size = 61
    for r in records:
        rs = MAX_RECORD_OVERHEAD + len(r.key or b"") + len(r.value or b"") + sum(
            len(k) + len(v or b"") + 10 for k, v in r.headers)
        if batch and size + rs > limit_bytes:
            yield batch
            batch, size = [], 61
        batch.append(r)
        size += rs
    if batch:
        yield batch


def cmd_produce(args, config) -> int:
    from storage_engine.log.manager import LogManager
    from storage_engine.log.validator import check_records
    if args.producer_id is None and (args.epoch is not None or args.base_sequence is not None or args.transactional):
        raise InvalidRequestError("--epoch, --base-sequence and --transactional need --producer-id")
    records = parse_produce_lines(sys.stdin.buffer, args.encoding)
    if not records:
        raise InvalidRequestError("no records on standard input (expected JSON lines)")
    layout.partition_dir_name(args.topic, args.partition)
    log_config = config.log_config(args.topic)
    codec = codecs.CODEC_IDS[args.compression]
    chunks = list(_batches_of(records, min(log_config.max_message_bytes, log_config.segment_bytes)))
    clock = clock_at(args.now_ms)
    now = clock.milliseconds()
    with LogManager.open(config, clock=clock, partitions=[(args.topic, args.partition)]) as mgr:
        # All or nothing: every batch passes the topic's checks before the partition is created or written,
        # and the batches go in under one hold of the partition lock, so they are contiguous.
        for chunk in chunks:
            check_records(args.topic, log_config, chunk, codec=codec, now_ms=now)
        log = mgr.get_or_create_log(args.topic, args.partition)
        first = last = None
        duplicates = 0
        producer = {}
        if args.producer_id is not None:
            producer = {"producer_id": args.producer_id, "producer_epoch": args.epoch or 0,
                        "is_transactional": args.transactional}
        seq = args.base_sequence or 0
        with log.locked():
            for chunk in chunks:
                if producer:
                    producer["base_sequence"] = seq
                    seq += len(chunk)
                info = log.append_records(chunk, codec=codec, **producer)
                duplicates += info.duplicate
                first = info.first_offset if first is None else first
                last = info.last_offset
    out = {"topic": args.topic, "partition": args.partition, "base_offset": first, "last_offset": last,
           "count": len(records)}
    if producer:
        out.update(producer_id=args.producer_id, epoch=args.epoch or 0, base_sequence=args.base_sequence or 0,
                   duplicate_batches=duplicates)
    _out(out)
    return 0


def cmd_end_txn(args, config) -> int:
    from storage_engine.log.manager import LogManager
    layout.partition_dir_name(args.topic, args.partition)
    with LogManager.open(config, clock=clock_at(args.now_ms), partitions=[(args.topic, args.partition)]) as mgr:
        log = mgr.get_log(args.topic, args.partition)
        if log is None:
            raise PartitionNotFoundError(f"partition {args.topic}-{args.partition} does not exist in "
                                         f"{list(config.log_dirs)}")
        info = log.append_end_txn(args.producer_id, args.epoch, commit=args.commit,
                                  coordinator_epoch=args.coordinator_epoch)
        lso = log.last_stable_offset
    _out({"topic": args.topic, "partition": args.partition, "producer_id": args.producer_id, "epoch": args.epoch,
          "marker": "COMMIT" if args.commit else "ABORT", "offset": info.first_offset, "last_stable_offset": lso})
    return 0


def cmd_expire_producers(args, config) -> int:
    from storage_engine.maintenance import jobs as maintenance
    _out(maintenance.expire_producers(config, args.now_ms, topics=args.topic, dry_run=args.dry_run))
    return 0


def _encode_field(value: bytes | None, encoding: str):
    if value is None:
        return None
    if encoding == "base64":
        return base64.b64encode(value).decode("ascii")
    return value.decode("utf-8", "surrogateescape") if _is_utf8(value) else value.decode("utf-8", "replace")


def _is_utf8(b: bytes) -> bool:
    try:
        b.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def cmd_consume(args, config) -> int:
    from storage_engine.log.manager import LogManager
    with LogManager.open(config, partitions=[(args.topic, args.partition)]) as mgr:
        log = mgr.get_log(args.topic, args.partition)
        if log is None:
            raise PartitionNotFoundError(f"partition {args.topic}-{args.partition} does not exist in "
                                         f"{list(config.log_dirs)}")
        for rec in log.read_records(args.from_offset, args.max_records, isolation_level=args.isolation_level):
            _out({"offset": rec.offset, "timestamp": rec.timestamp,
                  "key": _encode_field(rec.key, args.encoding), "value": _encode_field(rec.value, args.encoding),
                  "headers": {k: _encode_field(v, args.encoding) for k, v in rec.headers}})
    return 0


def _listable_partition_dirs(log_dir: str) -> list:
    try:
        return layout.partition_dirs(log_dir)
    except OSError:
        return []


def cmd_describe(args, config) -> int:
    from storage_engine.log.manager import LogManager
    from storage_engine.segment.checkpoint import OffsetCheckpointFile
    import os
    # Folder names first (no log opened), then only the logs of the requested page: usable at 10,000 partitions.
    # A dir that cannot be listed is left out here; the manager reports it offline.
    names = sorted({tp for d in config.log_dirs for _n, tp in _listable_partition_dirs(d)
                    if (not args.topic or tp[0] in args.topic) and (args.partition is None or tp[1] == args.partition)})
    page = names[args.offset:None if args.limit is None else args.offset + args.limit]
    whole = not args.topic and args.partition is None and args.limit is None and not args.offset
    with LogManager.open(config, partitions=None if whole else page) as mgr:
        out = mgr.describe()
    out.update(partitions_total=len(names), offset=args.offset, limit=args.limit)
    for d in out["log_dirs"]:
        if d["status"] == "offline":
            continue
        cleaner, err = OffsetCheckpointFile(os.path.join(d["path"], layout.CLEANER_OFFSET_CHECKPOINT)).read_or_empty()
        if err:
            d["cleaner_checkpoint_error"] = err
        parts = d["partitions"]
        for p in parts:
            p["cleaner_checkpoint"] = cleaner.get((p["topic"], p["partition"]))
    _out(out)
    return 0


def cmd_checkpoint(args, config) -> int:
    from storage_engine.log.manager import LogManager
    with LogManager.open(config) as mgr:
        flushed = mgr.flush_all() if args.flush else []
        written = mgr.checkpoint()
    _out({"flushed": flushed, "checkpoints": written})
    return 0


def cmd_flush(args, config) -> int:
    from storage_engine.log.manager import LogManager
    clock = clock_at(args.now_ms)
    now = clock.milliseconds()
    with LogManager.open(config, clock=clock) as mgr:
        out = []
        for tp in mgr.partitions(args.topic):
            log = mgr.logs[tp]
            log.refresh()
            if args.due_only and not log.flush_due(now):
                continue
            before = log.recovery_point
            after = log.flush()
            out.append({"topic": tp[0], "partition": tp[1], "recovery_point_before": before,
                        "recovery_point": after})
    _out({"flushed": out})
    return 0


def cmd_delete_records(args, config) -> int:
    from storage_engine.log.manager import LogManager
    with LogManager.open(config, clock=clock_at(args.now_ms), partitions=[(args.topic, args.partition)]) as mgr:
        log = mgr.get_log(args.topic, args.partition)
        if log is None:
            raise PartitionNotFoundError(f"partition {args.topic}-{args.partition} does not exist")
        before = log.log_start_offset
        after = log.delete_records(args.offset)
        mgr.checkpoint([log.log_dir])
    _out({"topic": args.topic, "partition": args.partition, "log_start_offset_before": before,
          "log_start_offset": after})
    return 0


def cmd_retention(args, config) -> int:
    from storage_engine.maintenance import jobs as maintenance
    if args.partition is not None and not args.topic:
        raise InvalidRequestError("--partition needs --topic")
    if args.topic and args.partition is not None:
        results = [maintenance.retention(config, args.topic, args.partition, args.now_ms, dry_run=args.dry_run)]
    else:
        results = maintenance.retention_all(config, args.now_ms, topics=[args.topic] if args.topic else None,
                                            dry_run=args.dry_run)
    _out({"dry_run": args.dry_run, "partitions": results,
          "segments_deleted": sum(r["segments_deleted"] for r in results),
          "bytes_reclaimed": sum(r["bytes_reclaimed"] for r in results)})
    return 0


def cmd_compact(args, config) -> int:
    from storage_engine.maintenance import compaction_jobs
    if args.partition is not None and not args.topic:
        raise InvalidRequestError("--partition needs --topic")
    if args.clear_uncleanable:
        _out(compaction_jobs.clear_uncleanable(config, args.topic, args.partition if args.topic else None))
        return 0
    result = compaction_jobs.compact(config, args.now_ms, topics=[args.topic] if args.topic else None,
                                     partition=args.partition, dry_run=args.dry_run,
                                     upper_time_bound_ms=args.upper_time_bound_ms, max_partitions=args.max_partitions)
    for r in result["results"]:
        for line in r.get("log_lines", []):
            logging.getLogger("storage_engine.maintenance.cleaner").info(line)
    _out(result)
    return EXIT_DAMAGE if result["failed"] else 0


def cmd_purge_deleted(args, config) -> int:
    from storage_engine.maintenance import jobs as maintenance
    _out(maintenance.purge(config, args.now_ms, dry_run=args.dry_run))
    return 0


def cmd_verify(args, config) -> int:
    from storage_engine.tools.verify import verify_log_dirs
    report = verify_log_dirs(config)
    _out(report)
    strict_fail = args.strict and (report["offline_dirs"] or report["foreign"])
    return EXIT_DAMAGE if report["damaged"] or strict_fail else 0


def cmd_delete_topic(args, config) -> int:
    from storage_engine.maintenance import lifecycle
    _out(lifecycle.delete_topic(config, args.topic, args.partition, args.now_ms))
    return 0


def cmd_move_partition(args, config) -> int:
    from storage_engine.maintenance import lifecycle
    if args.cancel == bool(args.to_dir):
        raise InvalidRequestError("give either --to-dir (move) or --cancel (give up a move in progress)")
    if args.cancel:
        _out(lifecycle.cancel_move(config, args.topic, args.partition, args.now_ms))
    else:
        _out(lifecycle.move_partition(config, args.topic, args.partition, args.to_dir, args.now_ms))
    return 0


def cmd_log_dirs(args, config) -> int:
    from storage_engine.maintenance import lifecycle
    if args.max_used_percent is None and args.max_dir_bytes is None:
        if args.execute:
            raise InvalidRequestError("--execute needs --max-used-percent or --max-dir-bytes")
        _out({"log_dirs": lifecycle.log_dir_usage(config)})
        return 0
    plan = lifecycle.balance_plan(config, max_used_percent=args.max_used_percent, max_dir_bytes=args.max_dir_bytes,
                                  max_moves=args.max_moves)
    if args.execute:
        plan["results"] = [lifecycle.move_partition(config, m["topic"], m["partition"], m["to_dir"])
                           for m in plan["moves"]]
    _out(plan)
    return 0


def cmd_remove_folder(args, config) -> int:
    from storage_engine.maintenance import lifecycle
    _out(lifecycle.remove_folder(config, args.log_dir, args.name, dry_run=args.dry_run))
    return 0


def _print_line(line: str) -> None:
    sys.stdout.write(line + "\n")


def cmd_dump_log(args, config) -> int:
    from storage_engine.tools.dump import DumpOptions, dump_file
    opts = DumpOptions(deep_iteration=args.deep_iteration or args.print_data_log,
                       print_data_log=args.print_data_log, index_sanity_check=args.index_sanity_check,
                       verify_index_only=args.verify_index_only, as_json=args.json, max_bytes=args.max_bytes)
    import os
    missing = [f for f in args.files if not os.path.isfile(f)]
    if missing:
        raise InvalidRequestError(f"no such file: {', '.join(missing)}")
    errors = 0
    for f in args.files:
        errors += dump_file(f, opts, _print_line)
    return EXIT_DAMAGE if errors else 0


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
