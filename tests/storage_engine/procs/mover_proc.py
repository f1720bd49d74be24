"""Move a partition to another log dir, and die by SIGKILL at a chosen step of the move.

    python mover_proc.py --config CFG --topic T --partition P --to-dir D
                         [--stop-at N | --stop-before STEP | --die-after-bytes B] [--final-lag-bytes L]

``--stop-at N``: die at step N of the commit (steps counted by :mod:`steps` from the start of the commit).
``--stop-before STEP``: die instead of the first step of the commit named STEP (a name :mod:`steps` gives, e.g.
``durable_rename``: the rename of the copy to the partition's name, right after the commit point).
``--die-after-bytes B``: die in the copy, once B bytes were appended to the copy (no commit step reached).
Prints ``MOVED <json report>`` and exits 0 when the move completed before the chosen step.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import steps

from storage_engine.config_file import load_config
from storage_engine.log import mover
from storage_engine.log.log import Log
from storage_engine.log.manager import LogManager


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--config", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--partition", type=int, default=0)
    p.add_argument("--to-dir", required=True)
    p.add_argument("--stop-at", type=int, default=None)
    p.add_argument("--stop-before", default=None)
    p.add_argument("--die-after-bytes", type=int, default=None)
    p.add_argument("--final-lag-bytes", type=int, default=mover.FINAL_LAG_BYTES)
    args = p.parse_args(argv)

    counter = steps.Steps(args.stop_at, steps.die, stop_before=args.stop_before)
    steps.install(counter)
    original_commit = mover._commit

    def commit(*a, **kw):
        counter.arm()
        return original_commit(*a, **kw)
    mover._commit = commit
    if args.die_after_bytes is not None:
        original_append = Log.append_as_follower
        copied = [0]

        def append(self, data):
            info = original_append(self, data)
            copied[0] += len(data)
            if copied[0] >= args.die_after_bytes:
                steps.die()
            return info
        Log.append_as_follower = append  # type: ignore[method-assign]  # the crash injection replaces the method in this process
    with LogManager.open(load_config(args.config)) as mgr:
        result = mgr.move_log(args.topic, args.partition, args.to_dir, final_lag_bytes=args.final_lag_bytes)
    sys.stdout.write("MOVED " + json.dumps(result) + "\n")
    sys.stdout.write(f"STEPS {counter.count}\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
