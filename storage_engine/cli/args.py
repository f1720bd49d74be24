"""The command line's arguments and what every command shares: the exit codes and the JSON output.

:func:`build_parser` declares every command of ``python -m storage_engine`` (:mod:`storage_engine.cli.main`)
and checks argument values (ranges of offsets, epochs and sequences) before a command runs, so a bad value is a
usage error (exit 2) naming it. A command prints one JSON object per line on stdout (:func:`print_json`), and
every error as one line on stderr (:func:`print_error`): a maintenance command one line per partition it could not
maintain (:func:`report_failures`), after its JSON summary, and exits 1.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Mapping
from typing import Any, NoReturn

from storage_engine.config_file import ENV_VAR
from storage_engine.record import codecs

EXIT_DAMAGE = 1
EXIT_BAD_INPUT = 2


def print_json(obj: object) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")


def print_error(message: object) -> None:
    """One error, one line on stderr: ``storage-engine: error: <what>``."""
    sys.stderr.write(f"storage-engine: error: {one_line(message)}\n")


def report_failures(failures: Iterable[Mapping[str, Any]]) -> int:
    """A maintenance command's failed partitions (the ``failures`` of its JSON summary, which it prints on stdout
    first): one line on stderr each, naming the partition and the error (which names the file and what is wrong).
    Returns the exit code: :data:`EXIT_DAMAGE` if there was any, else 0."""
    code = 0
    for f in failures:
        print_error(f"{f['topic']}-{f['partition']}: {f['error_type']}: {f['error']}")
        code = EXIT_DAMAGE
    return code


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


class OneLineErrorParser(argparse.ArgumentParser):
    """A parser whose usage errors are one line on stderr, exit 2: ``storage-engine: error: argument --partition:
    expected an integer, got 'x' (see python -m storage_engine produce --help)``. The usage block stays for
    ``--help``. Subcommand parsers are of this class too (``add_subparsers`` uses the parent's class)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_BAD_INPUT, f"storage-engine: error: {one_line(message)} (see {self.prog} --help)\n")


def one_line(text: object) -> str:
    """``text`` on one line: every run of line breaks (and the whitespace around them) becomes one space."""
    return " ".join(part.strip() for part in str(text).splitlines() if part.strip())


def build_parser() -> argparse.ArgumentParser:
    p = OneLineErrorParser(prog="python -m storage_engine",
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

    st = sub.add_parser("status", help="what the Storage view's first page shows: log-dir space (as df counts it), "
                                       "the dirtiest compacted partitions, damage, foreign entries, moves (read-only)")
    st.add_argument("--json", action="store_true", help="the same facts as one JSON object")
    st.add_argument("--top", type=_positive, default=10, help="how many of the dirtiest partitions (default 10)")
    st.add_argument("--now-ms", type=_non_negative, default=None,
                    help="dirty ratios as the cleaner sees them at this time (default: now)")
    ds = sub.add_parser("describe", help="log dirs, partitions, segments and offsets")
    ds.add_argument("--topic", action="append", help="only these topics (repeatable)")
    ds.add_argument("--partition", type=_non_negative, default=None, help="only this partition number")
    ds.add_argument("--limit", type=_positive, default=None,
                    help="at most this many partitions (in topic, partition order); only those logs are opened")
    ds.add_argument("--offset", type=_non_negative, default=0, help="skip this many partitions first")
    ac = sub.add_parser("acls", help="the ACLs the broker's authorizer reads, and its settings (read-only)")
    ac.add_argument("--principal", default=None, help="only this principal's ACLs (e.g. User:alice)")
    ac.add_argument("--resource-type", default=None, help="only this resource type (TOPIC, GROUP, CLUSTER, ...)")
    vf = sub.add_parser("verify", help="read-only integrity audit of every log dir; exit 1 on damage")
    vf.add_argument("--strict", action="store_true",
                    help="also exit 1 for offline log dirs, stray or foreign folders, and an object store that "
                         "cannot be checked")
    vf.add_argument("--deep", action="store_true",
                    help="tiered storage: download every remote segment and check its batches (CRC, offsets) "
                         "and indexes, not only that each object is there with its recorded size and ETag")
    vf.add_argument("--local-only", action="store_true", help="do not check remote segments in the object store")
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
    tr = sub.add_parser("tier", help="copy sealed segments to the object store, apply local and remote retention, "
                                     "clean up objects of interrupted runs")
    tr.add_argument("--topic", help="only this topic (with --partition: only that partition)")
    tr.add_argument("--partition", type=_non_negative, default=None)
    tr.add_argument("--now-ms", type=_non_negative, default=None, help="act as of this time (default: now)")
    tr.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    tr.add_argument("--sweep-orphans", action="store_true",
                    help="list every partition's objects for ones no metadata names (else only after an "
                         "interrupted copy or deletion)")
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


def _lifecycle_commands(sub: argparse._SubParsersAction[OneLineErrorParser]) -> None:
    dt = sub.add_parser("delete-topic", help="delete a topic's partitions (folders renamed -delete at once)")
    dt.add_argument("--topic", required=True)
    dt.add_argument("--partition", type=_non_negative, action="append", default=None,
                    help="only this partition (repeatable); default: every partition of the topic")
    dt.add_argument("--now-ms", type=_non_negative, default=None)
    al = sub.add_parser("accept-loss", help="accept the offsets a partition lost (verify reports them): its log "
                                            "start offset moves past them and the report is cleared")
    _tp(al)
    al.add_argument("--now-ms", type=_non_negative, default=None)
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
    sv = sub.add_parser("serve", help="serve the store to Kafka clients (the wire protocol) until SIGTERM/Ctrl-C")
    sv.add_argument("--listeners", default=None,
                    help="override the config's listeners, e.g. PLAINTEXT://127.0.0.1:9092 (port 0: any free port)")


def _tp(p: argparse.ArgumentParser) -> None:
    p.add_argument("--topic", required=True)
    p.add_argument("--partition", type=_non_negative, required=True)

