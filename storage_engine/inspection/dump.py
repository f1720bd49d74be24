"""``dump-log``: print ``.log``, ``.index``, ``.timeindex``, ``.txnindex`` and ``.snapshot`` files the way Kafka's
``kafka-dump-log.sh`` (``DumpLogSegments``) does, and check them while doing so.

Output, one line per item (``--json``: one JSON object per line, with a ``type`` field instead)::

    Dumping <file>                                                    type "file"
    Log starting offset: <base offset from the file name>             (.log named by its base offset only)
    baseOffset: 0 lastOffset: 2 count: 3 baseSequence: -1 lastSequence: -1 producerId: -1 producerEpoch: -1
        partitionLeaderEpoch: -1 isTransactional: false isControl: false deleteHorizonMs: OptionalLong.empty
        position: 0 CreateTime: 1700000000000 size: 90 magic: 2 compresscodec: none crc: 123 isvalid: true
                                                                      type "batch" (one line in the output)
    | offset: 0 CreateTime: 1700000000000 keySize: 1 valueSize: 2 sequence: -1 headerKeys: [h]
        key: k payload: v                                             type "record" (--deep-iteration;
                                                                      key/payload with --print-data-log)
    offset: 12 position: 4096                                         type "index_entry"
    timestamp: 1700000000000 offset: 12                               type "time_index_entry"
    version: 0 producerId: 7 firstOffset: 3 lastOffset: 9 lastStableOffset: 10
                                                                      type "aborted_txn" (.txnindex)
    producerId: 7 producerEpoch: 0 coordinatorEpoch: 2 currentTxnFirstOffset: OptionalLong.empty
        lastTimestamp: 1700000000000 firstSequence: 0 lastSequence: 4 lastOffset: 14 offsetDelta: 4
        timestamp: 1700000000000                                      type "producer" (.snapshot; the
                                                                      batch fields only if it has a batch)

Legacy (magic 0/1) entries print ``offset: <last offset>`` instead of the v2 batch fields, as Kafka does; with
``--deep-iteration`` each message (each inner message of a compressed wrapper) adds `` isValid: true crc: N}``,
the closing brace included: Kafka's format string has a stray ``}``, and the output is Kafka's byte for byte. A
snapshot that fails its checks prints Kafka's message (on stderr) and counts as damage.

Checks, as Kafka's tool makes them: every batch's CRC (``isvalid``); bytes at the end of a ``.log`` that do
not form a whole batch; offsets that go backwards (an error) or skip (``Non-consecutive offsets``, only a note:
compaction leaves gaps); each ``.index`` entry must point at the batch whose last offset it names; each
``.timeindex`` entry must name the last offset of a batch whose max timestamp it holds, with timestamps
increasing. ``--index-sanity-check`` runs only the load-time sanity check of index files;
``--verify-index-only`` checks index entries without printing them. Problems go to stderr (``--json``: objects
of type ``error`` on stdout) and are counted: :func:`dump_file` returns their number, so the command exits 1
when a file is damaged. Files are opened read-only and never changed.
"""
from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Callable, cast

from storage_engine.record import codecs
from storage_engine import layout
from storage_engine.errors import StorageError
from storage_engine.segment.file_records import FileRecords
from storage_engine.errors import CorruptSnapshotError
from storage_engine.segment import producer_snapshot
from storage_engine.segment.offset_index import OffsetIndex
from storage_engine.segment.txn_index import TransactionIndex
from storage_engine.record.record_batch import (CONTROL_TYPES, MAGIC_V2, NO_SEQUENCE, TIMESTAMP_TYPE_NAMES, RecordBatch,
                                                decrement_sequence, increment_sequence)
from storage_engine.record.legacy_records import LegacyBatch
from storage_engine.record.records import NO_TIMESTAMP, Record
from storage_engine.segment.time_index import TimeIndex

RECORD_INDENT = "|"


@dataclass(frozen=True)
class DumpOptions:
    deep_iteration: bool = False
    print_data_log: bool = False
    index_sanity_check: bool = False
    verify_index_only: bool = False
    as_json: bool = False
    max_bytes: int | None = None


class _Output:
    """Lines for people or JSON objects for machines; counts errors (damage) apart from notes."""

    def __init__(self, opts: DumpOptions, write: Callable[[str], None], write_error: Callable[[str], None]):
        self.opts = opts
        self._write = write
        self._write_error = write_error
        self.errors = 0

    def line(self, text: str, obj: dict) -> None:
        self._write(json.dumps(obj) if self.opts.as_json else text)

    def error(self, path: str, message: str, position: int | None = None) -> None:
        self.errors += 1
        self._problem("error", path, message, position)

    def note(self, path: str, message: str) -> None:
        self._problem("note", path, message, None)

    def _problem(self, kind: str, path: str, message: str, position: int | None) -> None:
        if self.opts.as_json:
            obj: dict[str, object] = {"type": kind, "file": path, "message": message}
            if position is not None:
                obj["position"] = position
            self._write(json.dumps(obj))
        else:
            self._write_error(message)


def dump_file(path: str, opts: DumpOptions, write: Callable[[str], None],
              write_error: Callable[[str], None] | None = None) -> int:
    """Print one file (chosen by its suffix); returns the number of problems found (0 = undamaged)."""
    if write_error is None:
        def write_error(line: str) -> None:
            sys.stderr.write(line + "\n")
    out = _Output(opts, write, write_error)
    out.line(f"Dumping {path}", {"type": "file", "file": path})
    if not os.path.isfile(path):
        out.error(path, f"cannot dump {path}: no such file")
        return out.errors
    name = os.path.basename(path)
    suffix = name[name.rfind("."):] if "." in name else ""
    try:
        if suffix == layout.LOG_SUFFIX:
            _dump_log(path, opts, out)
        elif suffix == layout.INDEX_SUFFIX:
            _dump_index(path, opts, out)
        elif suffix == layout.TIME_INDEX_SUFFIX:
            _dump_time_index(path, opts, out)
        elif suffix == layout.TXN_INDEX_SUFFIX:
            _dump_txn_index(path, out)
        elif suffix == layout.SNAPSHOT_SUFFIX:
            _dump_producer_snapshot(path, out)
        else:
            out.note(path, f"Ignoring unknown file {path}")
    except StorageError as exc:
        out.error(path, f"cannot dump {path}: {exc}", getattr(exc, "position", None))
    return out.errors


def _base_offset_of(path: str) -> int | None:
    head = os.path.basename(path).split(".", 1)[0]
    return int(head) if head.isdigit() else None


def _bool(v: bool) -> str:
    return "true" if v else "false"


def _text(b: bytes) -> str:
    return b.decode("utf-8", "replace")


# -- .log ------------------------------------------------------------------------------------------------------

def _dump_log(path: str, opts: DumpOptions, out: _Output) -> None:
    base = _base_offset_of(path)
    if base is not None:
        out.line(f"Log starting offset: {base}", {"type": "log_start", "file": path, "base_offset": base})
    fr = FileRecords(path, writable=False)
    try:
        end = fr.size if opts.max_bytes is None else min(fr.size, opts.max_bytes)
        valid_bytes = 0
        last_offset = None
        gaps: list = []
        deep = opts.deep_iteration or opts.print_data_log
        try:
            # Strict on the whole file, so a torn or corrupt tail is reported with its position; a --max-bytes
            # cut, like Kafka's slice, just ends the listing.
            for batch in _batches(fr, end, strict=opts.max_bytes is None):
                _print_batch(path, batch, valid_bytes, out)
                if deep:
                    last_offset = _print_records(path, batch, opts, out, last_offset, gaps)
                else:
                    if last_offset is not None and batch.last_offset <= last_offset:
                        out.error(path, f"batch at position {batch.file_position} of {path}: last offset "
                                        f"{batch.last_offset} is not above the previous {last_offset}",
                                  batch.file_position)
                    last_offset = batch.last_offset
                valid_bytes += batch.size_in_bytes
        except StorageError as exc:
            trailing = fr.size - valid_bytes
            out.error(path, f"Found {trailing} invalid bytes at the end of {os.path.basename(path)} "
                            f"(position {valid_bytes}): {exc}", valid_bytes)
        else:
            trailing = fr.size - valid_bytes
            if trailing > 0 and opts.max_bytes is None:
                out.error(path, f"Found {trailing} invalid bytes at the end of {os.path.basename(path)} "
                                f"(position {valid_bytes})", valid_bytes)
        if gaps:
            out.note(path, f"Non-consecutive offsets in {path}\n" +
                     "\n".join(f"  {a} is followed by {b}" for a, b in gaps))
    finally:
        fr.close()


def _batches(fr: FileRecords, end: int, *, strict: bool) -> Iterator[RecordBatch | LegacyBatch]:
    # pread windows, not a memory map: another process may shrink an active segment while it is dumped.
    return fr.read_batches(0, end, strict=strict)


def _print_batch(path: str, batch: RecordBatch | LegacyBatch, position: int, out: _Output) -> None:
    ts_type = TIMESTAMP_TYPE_NAMES.get(batch.timestamp_type, "NoTimestampType")
    valid = batch.is_valid()
    codec = codecs.CODEC_NAMES.get(batch.compression, f"unknown({batch.compression})")
    if batch.magic >= MAGIC_V2:
        horizon = batch.delete_horizon_ms
        horizon_text = f"OptionalLong[{horizon}]" if batch.has_delete_horizon else "OptionalLong.empty"
        head = (f"baseOffset: {batch.base_offset} lastOffset: {batch.last_offset} count: {batch.records_count} "
                f"baseSequence: {batch.base_sequence} lastSequence: {batch.last_sequence} "
                f"producerId: {batch.producer_id} producerEpoch: {batch.producer_epoch} "
                f"partitionLeaderEpoch: {batch.partition_leader_epoch} "
                f"isTransactional: {_bool(batch.is_transactional)} isControl: {_bool(batch.is_control)} "
                f"deleteHorizonMs: {horizon_text}")
        obj = {"type": "batch", "base_offset": batch.base_offset, "last_offset": batch.last_offset,
               "count": batch.records_count, "base_sequence": batch.base_sequence,
               "last_sequence": batch.last_sequence, "producer_id": batch.producer_id,
               "producer_epoch": batch.producer_epoch, "partition_leader_epoch": batch.partition_leader_epoch,
               "is_transactional": batch.is_transactional, "is_control": batch.is_control,
               "delete_horizon_ms": horizon if batch.has_delete_horizon else None}
    else:
        head = f"offset: {batch.last_offset}"
        obj = {"type": "batch", "last_offset": batch.last_offset}
    out.line(f"{head} position: {position} {ts_type}: {batch.max_timestamp} size: {batch.size_in_bytes} "
             f"magic: {batch.magic} compresscodec: {codec} crc: {batch.crc} isvalid: {_bool(valid)}",
             {**obj, "position": position, "timestamp_type": ts_type, "max_timestamp": batch.max_timestamp,
              "size": batch.size_in_bytes, "magic": batch.magic, "compression": codec, "crc": batch.crc,
              "is_valid": valid})
    if not valid:
        out.error(path, f"batch at position {position} of {path} is corrupt: stored crc {batch.crc}, computed "
                        f"crc {batch.compute_crc()}", position)


def _print_records(path: str, batch: RecordBatch | LegacyBatch, opts: DumpOptions, out: _Output,
                   last_offset: int | None, gaps: list[tuple[int, int]]) -> int | None:
    try:
        records = batch.records()
    except StorageError as exc:
        out.error(path, f"cannot read the records of the batch at position {batch.file_position}: {exc}",
                  batch.file_position)
        return last_offset
    ts_type = TIMESTAMP_TYPE_NAMES.get(batch.timestamp_type, "NoTimestampType")
    checksums = cast(LegacyBatch, batch).message_checksums() if batch.magic < MAGIC_V2 else None
    for n, rec in enumerate(records):
        if last_offset is not None:
            if rec.offset <= last_offset:
                out.error(path, f"record offset {rec.offset} in the batch at position {batch.file_position} of "
                                f"{path} is not above the previous {last_offset}", batch.file_position)
            elif rec.offset != last_offset + 1:
                gaps.append((last_offset, rec.offset))
        last_offset = rec.offset
        key_size = -1 if rec.key is None else len(rec.key)
        value_size = -1 if rec.value is None else len(rec.value)
        text = (f"{RECORD_INDENT} offset: {rec.offset} {ts_type}: {rec.timestamp} keySize: {key_size} "
                f"valueSize: {value_size}")
        obj = {"type": "record", "offset": rec.offset, "timestamp_type": ts_type, "timestamp": rec.timestamp,
               "key_size": key_size, "value_size": value_size}
        if batch.magic >= MAGIC_V2:
            seq = (NO_SEQUENCE if batch.base_sequence == NO_SEQUENCE
                   else increment_sequence(batch.base_sequence, rec.offset - batch.base_offset))
            keys = [k for k, _ in rec.headers]
            text += f" sequence: {seq} headerKeys: [{','.join(keys)}]"
            obj.update(sequence=seq, header_keys=keys)
        elif checksums is not None and n < len(checksums):
            crc, valid = checksums[n]
            text += f" isValid: {_bool(valid)} crc: {crc}}}"   # Kafka's stray brace, verbatim
            obj.update(is_valid=valid, crc=crc)
        if batch.is_control:
            ctl_text, ctl_obj = _control(rec)
            text += ctl_text
            obj.update(ctl_obj)
        elif opts.print_data_log:
            if rec.key is not None:
                text += f" key: {_text(rec.key)}"
            if rec.value is not None:
                text += f" payload: {_text(rec.value)}"
            obj.update(key=None if rec.key is None else _text(rec.key),
                       payload=None if rec.value is None else _text(rec.value))
        out.line(text, obj)
    return last_offset


def _control(rec: Record) -> tuple[str, dict]:
    """Kafka's rendering of a control record: the end-transaction marker, or the control type."""
    key = rec.key or b""
    if len(key) < 4:
        return " controlType: UNKNOWN", {"control_type": "UNKNOWN"}
    type_id = int.from_bytes(key[2:4], "big", signed=True)
    name = CONTROL_TYPES.get(type_id, "UNKNOWN")
    value = rec.value or b""
    if name in ("ABORT", "COMMIT") and len(value) >= 6:
        epoch = int.from_bytes(value[2:6], "big", signed=True)
        return (f" endTxnMarker: {name} coordinatorEpoch: {epoch}",
                {"control_type": name, "coordinator_epoch": epoch})
    return f" controlType: {name}({type_id})", {"control_type": name}


# -- .index and .timeindex -------------------------------------------------------------------------------------

def _log_beside(path: str) -> str:
    name = os.path.basename(path)
    return os.path.join(os.path.dirname(os.path.abspath(path)), name.split(".", 1)[0] + layout.LOG_SUFFIX)


def _open_log_beside(path: str, out: _Output) -> tuple[FileRecords | None, str]:
    log_path = _log_beside(path)
    if not os.path.isfile(log_path):
        out.note(path, f"{log_path} does not exist: the entries of {path} are not checked against it")
        return None, log_path
    return FileRecords(log_path, writable=False), log_path


def _index_base(path: str, out: _Output) -> int:
    base = _base_offset_of(path)
    if base is None:
        out.note(path, f"{os.path.basename(path)} is not named by a base offset: offsets are shown relative "
                       "to base offset 0")
        return 0
    return base


def _sanity_check(index: OffsetIndex | TimeIndex, path: str, out: _Output) -> None:
    """``--index-sanity-check``: Kafka's verdict on one index file."""
    try:
        index.sanity_check()
    except StorageError as exc:
        out.error(path, f"{path} failed sanity check: {exc}", getattr(exc, "position", None))
        return
    out.line(f"{path} passed sanity check.", {"type": "sanity_check", "file": path, "passed": True})


def _dump_index(path: str, opts: DumpOptions, out: _Output) -> None:
    base = _index_base(path, out)
    index = OffsetIndex(path, base, max(os.path.getsize(path), 8), writable=False)
    try:
        if opts.index_sanity_check:
            _sanity_check(index, path, out)
            return
        if index.entries == 0:
            out.line(f"{path} is empty.", {"type": "empty", "file": path})
            return
        fr, log_path = _open_log_beside(path, out)
        mismatches = []
        try:
            for n in range(index.entries):
                offset, position = index.entry(n)
                if fr is not None:
                    found = _batch_last_offset_at(fr, position)
                    if found != offset:
                        mismatches.append((n, offset, position, found))
                if not opts.verify_index_only:
                    out.line(f"offset: {offset} position: {position}",
                             {"type": "index_entry", "offset": offset, "position": position})
        finally:
            if fr is not None:
                fr.close()
        if mismatches:
            out.error(path, f"Mismatches in :{path}\n" + "\n".join(
                f"  Index offset: {off}, log offset: {found if found is not None else 'none'} "
                f"(entry {n}, position {pos} of {log_path})" for n, off, pos, found in mismatches),
                mismatches[0][0] * 8)
    finally:
        index.close(trim=False)


def _batch_last_offset_at(fr: FileRecords, position: int) -> int | None:
    if position < 0 or position >= fr.size:
        return None
    try:
        batch = fr.batch_at(position)
    except StorageError:
        return None
    return None if batch is None else batch.last_offset


def _dump_time_index(path: str, opts: DumpOptions, out: _Output) -> None:
    base = _index_base(path, out)
    index = TimeIndex(path, base, max(os.path.getsize(path), 12), writable=False)
    try:
        if opts.index_sanity_check:
            _sanity_check(index, path, out)
            return
        fr, log_path = _open_log_beside(path, out)
        prev_ts = NO_TIMESTAMP
        # last offset -> max timestamp of every batch, read once (Kafka compares entry and batch the same way).
        batch_ts = {}
        if fr is not None:
            try:
                batch_ts = {b.last_offset: b.max_timestamp for b in fr.batches(0)}
            except StorageError as exc:
                out.error(path, f"cannot verify against {log_path}: {exc}")
            finally:
                fr.close()
        for n in range(index.entries):
            ts, offset = index.entry(n)
            if ts <= prev_ts:
                out.error(path, f"Found out of order timestamp in :{path}: index timestamp {ts} at entry {n}, "
                                f"previously indexed timestamp {prev_ts}", n * 12)
            prev_ts = ts
            if fr is not None:
                if offset not in batch_ts:
                    out.error(path, f"Found shallow offset not found in :{path}: indexed offset {offset} (entry "
                                    f"{n}) is not the last offset of a batch in {log_path}", n * 12)
                elif batch_ts[offset] != ts:
                    out.error(path, f"Found timestamp mismatch in :{path}: index timestamp {ts}, log "
                                    f"timestamp {batch_ts[offset]} for offset {offset} (entry {n})", n * 12)
            if not opts.verify_index_only:
                out.line(f"timestamp: {ts} offset: {offset}",
                         {"type": "time_index_entry", "timestamp": ts, "offset": offset})
    finally:
        index.close(trim=False)


# -- .txnindex and .snapshot -----------------------------------------------------------------------------------

def _dump_txn_index(path: str, out: _Output) -> None:
    base = _base_offset_of(path)
    for txn in TransactionIndex(path, 0 if base is None else base, writable=False).all_aborted_txns():
        out.line(f"version: {txn.version} producerId: {txn.producer_id} firstOffset: {txn.first_offset} "
                 f"lastOffset: {txn.last_offset} lastStableOffset: {txn.last_stable_offset}",
                 {"type": "aborted_txn", "version": txn.version, "producer_id": txn.producer_id,
                  "first_offset": txn.first_offset, "last_offset": txn.last_offset,
                  "last_stable_offset": txn.last_stable_offset})


def _optional_long(value: int) -> str:
    return "OptionalLong.empty" if value < 0 else f"OptionalLong[{value}]"


def _dump_producer_snapshot(path: str, out: _Output) -> None:
    try:
        entries = producer_snapshot.read_snapshot(path)
    except CorruptSnapshotError as exc:
        out.error(path, exc.reason, exc.position)
        return
    for e in entries:
        text = (f"producerId: {e.producer_id} producerEpoch: {e.epoch} coordinatorEpoch: {e.coordinator_epoch} "
                f"currentTxnFirstOffset: {_optional_long(e.current_txn_first_offset)} lastTimestamp: {e.timestamp} ")
        obj = {"type": "producer", "producer_id": e.producer_id, "producer_epoch": e.epoch,
               "coordinator_epoch": e.coordinator_epoch,
               "current_txn_first_offset": e.current_txn_first_offset if e.current_txn_first_offset >= 0 else None,
               "last_timestamp": e.timestamp}
        if e.last_offset >= 0:   # the entry has its last batch's metadata
            first_seq = decrement_sequence(e.last_sequence, e.offset_delta)
            text += (f"firstSequence: {first_seq} lastSequence: {e.last_sequence} lastOffset: {e.last_offset} "
                     f"offsetDelta: {e.offset_delta} timestamp: {e.timestamp}")
            obj.update(first_sequence=first_seq, last_sequence=e.last_sequence, last_offset=e.last_offset,
                       offset_delta=e.offset_delta, timestamp=e.timestamp)
        out.line(text, obj)
