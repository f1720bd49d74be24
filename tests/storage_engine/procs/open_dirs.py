"""Open the log dirs (a first, loading and recovering opener) and die by SIGKILL at step N of what the load changes.

    python open_dirs.py --config CFG --stop-at N

Steps are counted by :mod:`steps` (renames, fsyncs of folders, lock and checkpoint changes). Exit code 0: the
load finished before step N (every step was passed); killed by SIGKILL otherwise.
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import steps  # noqa: E402

from storage_engine.clock import ManualClock  # noqa: E402
from storage_engine.config_file import load_config  # noqa: E402
from storage_engine.log.manager import LogManager  # noqa: E402

T0 = 1_700_000_000_000


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--config", required=True)
    p.add_argument("--stop-at", type=int, required=True)
    args = p.parse_args(argv)
    counter = steps.Steps(args.stop_at, steps.die)
    steps.install(counter)
    counter.arm()
    mgr = LogManager.open(load_config(args.config), clock=ManualClock(T0))
    counter.armed = False
    mgr.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
