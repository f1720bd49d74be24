"""``python -m torture [--trials N] [--soak SECONDS] [--seed S] [--keep DIR]``: kill -9 torture (``make torture``).
``python -m torture --server [--trials N]``: the broker killed under idempotent producers (:mod:`torture.server`).
``python -m torture --txn [--trials N]``: the broker and transactional consume-transform-produce workers killed
(:mod:`torture.txn`).
``python -m torture --tiered [--trials N]``: the tier job, the appender, the ``serve`` broker and the object store
(SeaweedFS) killed while records are tiered and read back from offset 0, by the engine and by a Kafka client
through the broker (:mod:`torture.tiered`).

Prints each failing trial's violations as they happen, and at the end the totals: trials, kills per process type,
forced steps and the steps actually reached, acknowledged records checked, violations, duration. Exits 1 if any
trial had a violation (its log dir is kept under ``--keep``)."""
from __future__ import annotations

import argparse
import logging
import subprocess
import sys
from pathlib import Path

from torture import harness


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m torture", description=__doc__)
    p.add_argument("--trials", type=int, default=1000)
    p.add_argument("--soak", type=float, default=None, metavar="SECONDS",
                   help="one long trial instead: a live writer and the maintenance loops for SECONDS, random kills "
                        "of any role every 5-25 s, then the same checks")
    p.add_argument("--threads", type=int, default=0, metavar="N",
                   help="threads mode: the writer process runs N writer threads, two reader threads, a cleaner "
                        "and a maintenance thread on one LogManager, beside the other processes")
    p.add_argument("--server", action="store_true",
                   help="server trials instead: idempotent Kafka producers while the broker is killed with SIGKILL "
                        "and restarted; then every acknowledged record once, in order (torture/server.py)")
    p.add_argument("--txn", action="store_true",
                   help="transaction trials instead: transactional consume-transform-produce workers while the "
                        "broker and the workers are killed with SIGKILL and restarted; then every input record's "
                        "output committed exactly once (torture/txn.py)")
    p.add_argument("--tiered", action="store_true",
                   help="tiered-storage trials instead: the tier job, the appender, the broker and the object store "
                        "(weed) killed with SIGKILL while records are tiered and read back from offset 0, also by a "
                        "Kafka client through the broker; then every "
                        "acknowledged record readable, locally or remotely, and no object left untracked after "
                        "one more clean tier run (torture/tiered.py)")
    p.add_argument("--seed", type=int, default=20261123)
    p.add_argument("--keep", type=Path, default=harness.REPO / "var" / "torture" / "failures",
                   help="where a failing trial's log dir and outputs are kept (default: %(default)s)")
    args = p.parse_args(argv)
    if args.tiered:
        from torture import tiered
        print(f"torture: {args.trials} tiered trials, seed {args.seed}", flush=True)
        return tiered.main(args.trials, args.seed, args.keep)
    if args.txn:
        from torture import txn
        print(f"torture: {args.trials} transaction trials, seed {args.seed}", flush=True)
        return txn.main(args.trials, args.seed, args.keep)
    if args.server:
        from torture import server
        print(f"torture: {args.trials} server trials, seed {args.seed}", flush=True)
        return server.main(args.trials, args.seed, args.keep)
    # The checks reopen crashed log dirs: the engine's repair warnings are expected there, not news.
    logging.getLogger("storage_engine").setLevel(logging.ERROR)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=harness.REPO, capture_output=True,
                            text=True).stdout.strip() or "unknown"
    what = f"soak of {args.soak:.0f} s" if args.soak else f"{args.trials} trials"
    if args.threads:
        what += f", threads mode ({args.threads} writer threads)"
    print(f"torture: {what}, seed {args.seed}, commit {commit}", flush=True)
    args.keep.mkdir(parents=True, exist_ok=True)
    totals = harness.run(args.trials, args.seed, args.keep, out=lambda s: print(s, flush=True),
                         soak_seconds=args.soak, threads=args.threads)
    print(f"trials: {totals['trials']}")
    print(f"acknowledged records checked: {totals['acknowledged']}")
    print("kills per process type: " + ", ".join(f"{k} {v}" for k, v in sorted(totals["kills"].items())))
    print(f"kills in total: {sum(totals['kills'].values())}")
    print("forced steps: " + ", ".join(f"{k} {v}" for k, v in sorted(totals["steps_forced"].items())))
    print("steps reached (died there): " + ", ".join(f"{k} {v}" for k, v in sorted(totals["steps_reached"].items())))
    print(f"violations: {totals['violations']} in {len(totals['failed_trials'])} trial(s)")
    print(f"duration: {totals['seconds']} s")
    return 1 if totals["violations"] else 0


if __name__ == "__main__":
    sys.exit(main())
