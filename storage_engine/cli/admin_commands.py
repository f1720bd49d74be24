"""The inspection, maintenance and lifecycle commands of the command line.

Inspection: ``status``, ``describe``, ``acls``, ``verify``, ``dump-log``. Maintenance: ``checkpoint``, ``flush``,
``delete-records``, ``retention``, ``tier``, ``compact``, ``purge-deleted``, ``expire-producers`` (the jobs of
:mod:`storage_engine.maintenance`).
Lifecycle: ``delete-topic``, ``move-partition``, ``log-dirs``, ``remove-folder``
(:mod:`storage_engine.jobs.lifecycle`).
"""
from __future__ import annotations

import argparse
import logging
import sys

from storage_engine import layout
from storage_engine.clock import clock_at
from storage_engine.config import StorageConfig
from storage_engine.errors import InvalidRequestError
from storage_engine.cli.args import EXIT_DAMAGE, print_error, print_json, report_failures
from storage_engine.log import health as log_health


def cmd_expire_producers(args: argparse.Namespace, config: StorageConfig) -> int:
    from storage_engine.jobs import housekeeping as maintenance
    result = maintenance.expire_producers(config, args.now_ms, topics=args.topic, dry_run=args.dry_run)
    print_json(result)
    return report_failures(result["failures"])


def _listable_partition_dirs(log_dir: str) -> list[tuple[str, tuple[str, int]]]:
    try:
        return layout.partition_dirs(log_dir)
    except OSError:
        return []


def cmd_describe(args: argparse.Namespace, config: StorageConfig) -> int:
    from storage_engine.log.manager import LogManager
    from storage_engine.segment.checkpoint import OffsetCheckpointFile
    import os
    # Folder names first (no log opened), then only the logs of the requested page: usable at 10,000 partitions.
    # A dir that cannot be listed is left out here; the manager reports it offline.
    names = sorted({tp for d in config.log_dirs for _n, tp in _listable_partition_dirs(d)
                    if (not args.topic or tp[0] in args.topic) and (args.partition is None or tp[1] == args.partition)})
    page = names[args.offset:None if args.limit is None else args.offset + args.limit]
    whole = not args.topic and args.partition is None and args.limit is None and not args.offset
    with LogManager.open(config, partitions=None if whole else page, read_only=True) as mgr:
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
    print_json(out)
    return 0


def cmd_acls(args: argparse.Namespace, config: StorageConfig) -> int:
    """The ACLs the broker's authorizer reads and its settings, as JSON (read-only: no lock, nothing written, so
    it runs beside a serving broker); a damaged ACL file is an error naming it, never an empty list."""
    from storage_engine.inspection.acls import acl_listing
    print_json(acl_listing(config, principal=args.principal, resource_type=args.resource_type))
    return 0


def cmd_status(args: argparse.Namespace, config: StorageConfig) -> int:
    """The Storage view's first page for a terminal (read-only; no lock, no file written): a table by default,
    the same facts as JSON with ``--json``."""
    from storage_engine.inspection.status import overview
    from storage_engine.cli.status_table import render
    facts = overview(config, now_ms=args.now_ms, top=args.top)
    if args.json:
        print_json(facts)
    else:
        sys.stdout.write(render(facts, config.source) + "\n")
    return 0


def cmd_checkpoint(args: argparse.Namespace, config: StorageConfig) -> int:
    from storage_engine.jobs import housekeeping as maintenance
    # The partitions that cannot be read (a folder that vanished or became a file, a segment that is no file, a
    # load that fails) are failures; the checkpoint files keep their entries, the others are written.
    result = maintenance.checkpoint(config, flush=args.flush)
    print_json(result)
    return report_failures(result["failures"])


def cmd_flush(args: argparse.Namespace, config: StorageConfig) -> int:
    from storage_engine.jobs import housekeeping as maintenance
    result = maintenance.flush(config, args.now_ms, topics=args.topic, due_only=args.due_only)
    print_json(result)
    return report_failures(result["failures"])


def cmd_delete_records(args: argparse.Namespace, config: StorageConfig) -> int:
    from storage_engine.jobs.partition import open_partition
    with open_partition(config, clock_at(args.now_ms), args.topic, args.partition) as (mgr, log):
        log_health.check_partition(log)
        before = log.log_start_offset
        after = log.delete_records(args.offset)
        mgr.checkpoint([log.log_dir])
    print_json({"topic": args.topic, "partition": args.partition, "log_start_offset_before": before,
          "log_start_offset": after})
    return 0


def cmd_retention(args: argparse.Namespace, config: StorageConfig) -> int:
    from storage_engine.jobs import housekeeping as maintenance
    if args.partition is not None and not args.topic:
        raise InvalidRequestError("--partition needs --topic")
    failures: list = []
    if args.topic and args.partition is not None:
        results = [maintenance.retention(config, args.topic, args.partition, args.now_ms, dry_run=args.dry_run)]
    else:
        results = maintenance.retention_all(config, args.now_ms, topics=[args.topic] if args.topic else None,
                                            dry_run=args.dry_run, failures=failures)
    print_json({"dry_run": args.dry_run, "partitions": results,
          "segments_deleted": sum(r["segments_deleted"] for r in results),
          "bytes_reclaimed": sum(r["bytes_reclaimed"] for r in results), "failures": failures})
    return report_failures(failures)


def cmd_tier(args: argparse.Namespace, config: StorageConfig) -> int:
    from storage_engine.jobs import tiering
    if args.partition is not None and not args.topic:
        raise InvalidRequestError("--partition needs --topic")
    result = tiering.tier(config, args.now_ms, topics=[args.topic] if args.topic else None,
                          partition=args.partition, dry_run=args.dry_run, sweep_orphans=args.sweep_orphans)
    print_json(result)
    # Failed: the partitions whose tiering failed (an object-store fault names its fix), or that cannot be read.
    return report_failures(result["failures"])


def cmd_compact(args: argparse.Namespace, config: StorageConfig) -> int:
    from storage_engine.jobs import compaction
    if args.partition is not None and not args.topic:
        raise InvalidRequestError("--partition needs --topic")
    if args.clear_uncleanable:
        print_json(compaction.clear_uncleanable(config, args.topic, args.partition if args.topic else None))
        return 0
    result = compaction.compact(config, args.now_ms, topics=[args.topic] if args.topic else None,
                                     partition=args.partition, dry_run=args.dry_run,
                                     upper_time_bound_ms=args.upper_time_bound_ms, max_partitions=args.max_partitions)
    for r in result["results"]:
        for line in r.get("log_lines", []):
            logging.getLogger("storage_engine.maintenance.cleaner").info(line)
    print_json(result)
    # Failed: the partitions whose cleaning failed now, those marked uncleanable by an earlier run (every run fails
    # until an operator clears the mark), and those that cannot be read. The others were cleaned.
    return report_failures(result["failures"])


def cmd_purge_deleted(args: argparse.Namespace, config: StorageConfig) -> int:
    from storage_engine.jobs import housekeeping as maintenance
    print_json(maintenance.purge(config, args.now_ms, dry_run=args.dry_run))
    return 0


def cmd_verify(args: argparse.Namespace, config: StorageConfig) -> int:
    from storage_engine.inspection.verify import verify_log_dirs
    from storage_engine.inspection.verify_remote import verify_remote
    report = verify_log_dirs(config)
    remote = None
    if not args.local_only and config.remote.get("remote.log.storage.system.enable"):
        # Remote segments: a missing or damaged one is a problem like local damage (inspection/verify_remote.py).
        remote = report["remote"] = verify_remote(config, deep=args.deep)
        report["problems"].extend(remote["problems"])
        report["damaged"] = bool(report["problems"])
    print_json(report)
    unchecked = remote is not None and not remote["checked"]
    strict_fail = args.strict and (report["offline_dirs"] or report["foreign"] or unchecked)
    for p in report["problems"]:        # each problem names its file and what is wrong
        print_error(f"{p['file']}: {p['message']}")
    if unchecked:
        assert remote is not None
        print_error(remote["error"] + (f"; fix: {remote['fix']}" if remote["fix"] else ""))
    if args.strict:
        for d, reason in report["offline_dirs"].items():
            print_error(f"log dir {d} is offline: {reason}")
        for f in report["foreign"]:
            print_error(f"{f['file']}: {f['message']}")
    if report["damaged"] and not report["problems"]:
        print_error("verify found damage (see the report on stdout)")
    return EXIT_DAMAGE if report["damaged"] or strict_fail else 0


def cmd_delete_topic(args: argparse.Namespace, config: StorageConfig) -> int:
    from storage_engine.jobs import lifecycle
    print_json(lifecycle.delete_topic(config, args.topic, args.partition, args.now_ms))
    return 0


def cmd_accept_loss(args: argparse.Namespace, config: StorageConfig) -> int:
    from storage_engine.jobs import lifecycle
    print_json(lifecycle.accept_loss(config, args.topic, args.partition, args.now_ms))
    return 0


def cmd_move_partition(args: argparse.Namespace, config: StorageConfig) -> int:
    from storage_engine.jobs import lifecycle
    if args.cancel == bool(args.to_dir):
        raise InvalidRequestError("give either --to-dir (move) or --cancel (give up a move in progress)")
    if args.cancel:
        print_json(lifecycle.cancel_move(config, args.topic, args.partition, args.now_ms))
    else:
        print_json(lifecycle.move_partition(config, args.topic, args.partition, args.to_dir, args.now_ms))
    return 0


def cmd_log_dirs(args: argparse.Namespace, config: StorageConfig) -> int:
    from storage_engine.jobs import lifecycle
    if args.max_used_percent is None and args.max_dir_bytes is None:
        if args.execute:
            raise InvalidRequestError("--execute needs --max-used-percent or --max-dir-bytes")
        print_json({"log_dirs": lifecycle.log_dir_usage(config)})
        return 0
    plan = lifecycle.balance_plan(config, max_used_percent=args.max_used_percent, max_dir_bytes=args.max_dir_bytes,
                                  max_moves=args.max_moves)
    if args.execute:
        plan["results"] = [lifecycle.move_partition(config, m["topic"], m["partition"], m["to_dir"])
                           for m in plan["moves"]]
    print_json(plan)
    return 0


def cmd_remove_folder(args: argparse.Namespace, config: StorageConfig) -> int:
    from storage_engine.jobs import lifecycle
    print_json(lifecycle.remove_folder(config, args.log_dir, args.name, dry_run=args.dry_run))
    return 0


def _print_line(line: str) -> None:
    sys.stdout.write(line + "\n")


def cmd_dump_log(args: argparse.Namespace) -> int:
    from storage_engine.inspection.dump import DumpOptions, dump_file
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


