"""Run the maintenance jobs in a loop, as the Airflow tasks would, while other processes use the log dirs.

    python maintainer.py --config CFG [--max-seconds S] [--stop-file PATH]

Each round: checkpoint (with flush), time-based flush, retention (everything, as of now), purge of deleted files
and folders, and a read-only verify. Prints ``ROUND <n> <partitions checkpointed>`` per round, ``BAD <what>`` when
verify finds damage, and ``DONE`` when the stop file appears or the deadline passes. An exception ends it with a
traceback (exit code 1).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

from storage_engine.config_file import load_config
from storage_engine.jobs import housekeeping
from storage_engine.inspection.verify import verify_log_dirs


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--config", required=True)
    p.add_argument("--max-seconds", type=float, default=60.0)
    p.add_argument("--stop-file", default=None)
    args = p.parse_args(argv)
    config = load_config(args.config)
    deadline = time.monotonic() + args.max_seconds
    n = 0
    while time.monotonic() < deadline and not (args.stop_file and os.path.exists(args.stop_file)):
        n += 1
        checkpointed = housekeeping.checkpoint(config)
        housekeeping.flush(config, due_only=False)
        housekeeping.retention_all(config)
        housekeeping.purge(config)
        report = verify_log_dirs(config)
        if report["damaged"]:
            sys.stdout.write(f"BAD {report['problems'][:3]}\n")
        sys.stdout.write(f"ROUND {n} {sum(len(c['recovery_points']) for c in checkpointed['checkpoints'].values())}\n")
        sys.stdout.flush()
        time.sleep(0.05)
    sys.stdout.write("DONE\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
