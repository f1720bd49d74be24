"""The data commands of the command line: ``produce`` (JSON lines from stdin), ``end-txn`` and ``consume``.

Keys, values and header values are UTF-8 text or base64 (``--encoding``) in both directions. ``produce``
validates every line before anything is written, checks every batch against the topic before the partition
is created, and appends the batches under one hold of the partition lock.
"""
from __future__ import annotations

import argparse
import base64
import binascii
import json
import sys
from collections.abc import Iterable, Iterator
from typing import BinaryIO

from storage_engine.record import codecs
from storage_engine import layout
from storage_engine.clock import clock_at
from storage_engine.config import StorageConfig
from storage_engine.errors import InvalidRequestError, PartitionNotFoundError
from storage_engine.record.records import MAX_RECORD_OVERHEAD, SimpleRecord
from storage_engine.cli.args import print_json


def _decode_field(value: object, encoding: str, what: str, line_no: int) -> bytes | None:
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


def parse_produce_lines(lines: Iterable[str | bytes], encoding: str) -> list[SimpleRecord]:
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


def _batches_of(records: list[SimpleRecord], limit_bytes: int) -> Iterator[list[SimpleRecord]]:
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


def bounded_lines(stream: BinaryIO, max_line_bytes: int, topic: str) -> Iterator[bytes]:
    """The lines of ``stream``, each read with a bound: a line longer than ``max_line_bytes`` (``produce <
    /dev/zero`` is one endless line) is refused there instead of filling memory."""
    number = 0
    while True:
        line = stream.readline(max_line_bytes + 1)
        if not line:
            return
        number += 1
        if len(line) > max_line_bytes and not line.endswith(b"\n"):
            raise InvalidRequestError(f"line {number}: longer than {max_line_bytes} bytes, more than any record of "
                                      f"topic {topic} can take (8 x its max.message.bytes, plus 64 KiB)")
        yield line


def cmd_produce(args: argparse.Namespace, config: StorageConfig) -> int:
    from storage_engine.log.manager import LogManager
    from storage_engine.log.validator import check_records
    if args.producer_id is None and (args.epoch is not None or args.base_sequence is not None or args.transactional):
        raise InvalidRequestError("--epoch, --base-sequence and --transactional need --producer-id")
    max_line = 8 * config.log_config(args.topic).max_message_bytes + 65536   # a record's JSON, escapes and all
    records = parse_produce_lines(bounded_lines(sys.stdin.buffer, max_line, args.topic), args.encoding)
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
    print_json(out)
    return 0


def cmd_end_txn(args: argparse.Namespace, config: StorageConfig) -> int:
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
    print_json({"topic": args.topic, "partition": args.partition, "producer_id": args.producer_id, "epoch": args.epoch,
          "marker": "COMMIT" if args.commit else "ABORT", "offset": info.first_offset, "last_stable_offset": lso})
    return 0


def _encode_field(value: bytes | None, encoding: str) -> str | None:
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


def cmd_consume(args: argparse.Namespace, config: StorageConfig) -> int:
    from storage_engine.log.manager import LogManager
    with LogManager.open(config, partitions=[(args.topic, args.partition)], read_only=True) as mgr:
        log = mgr.get_log(args.topic, args.partition)
        if log is None:
            raise PartitionNotFoundError(f"partition {args.topic}-{args.partition} does not exist in "
                                         f"{list(config.log_dirs)}")
        # Offsets below the local log start of a tiered topic come from the object store.
        reader = None
        if log.config.remote_storage_enable and (args.from_offset is None or args.from_offset
                                                 < log.local_log_start_offset):
            from storage_engine.tiered.whole_log import open_reader
            reader = open_reader(config, mgr)
        from storage_engine.tiered.whole_log import read_records
        for rec in read_records(log, reader, args.topic, args.partition, args.from_offset, args.max_records,
                                args.isolation_level):
            print_json({"offset": rec.offset, "timestamp": rec.timestamp,
                  "key": _encode_field(rec.key, args.encoding), "value": _encode_field(rec.value, args.encoding),
                  "headers": {k: _encode_field(v, args.encoding) for k, v in rec.headers}})
    return 0

