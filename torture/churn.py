"""The churn of the server trials' zero-copy checks (``python -m torture.churn``): a process beside the broker that
rewrites a compacted topic's partition under its fetches, until ``--stop-file`` exists.

In a loop, through its own ``LogManager`` (another process, as the CLI and the maintenance DAG's tasks are): append
2-12 keyed batches of random sizes (so that the same positions hold other batches after a rewrite), then one of:
the cleaner (``compaction.compact``: a swap of the cleaned segments), a truncation of the last 1-20 offsets (one in
five: 21-300, across segments), which rewrites the segment it cuts (a new file; later appends write new batches
where checked ones were in the old one), ``delete-records`` to a random offset plus retention and purge (segments
deleted, unlinked at once). One truncation in five is made by another process armed to die (SIGKILL) at a random
step of the rewrite (:mod:`storage_engine.log.rewrite`): whichever process takes the partition lock next (this one,
the broker, the cleaner) completes or rolls it back while the broker sends from the partition. Prints ``OPS
<appends> <compactions> <truncations> <deletions> <killed truncations>`` at the end; any exception is a traceback on
stderr and exit 1.
"""
from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from storage_engine import crashpoints
from storage_engine.config_file import load_config
from storage_engine.jobs import compaction, housekeeping
from storage_engine.log.manager import LogManager
from storage_engine.record.record_batch import build_batch

REPO = Path(__file__).resolve().parents[1]
REWRITE_STEPS = sorted(s for s, (protocol, _) in crashpoints.STEPS.items() if protocol == "rewrite")
# A truncation by another process, armed to die (SIGKILL) at a step of its rewrite. argv: config, topic, offset.
KILLED_TRUNCATION = """
import sys
from storage_engine.config_file import load_config
from storage_engine.log.manager import LogManager
with LogManager.open(load_config(sys.argv[1]), partitions=[(sys.argv[2], 0)]) as mgr:
    mgr.get_log(sys.argv[2], 0).truncate_to(int(sys.argv[3]))
"""


def killed_truncation(config: str, topic: str, offset: int, step: str) -> None:
    """Run a truncation in another process that dies at ``step``; raise if it did not die there."""
    env = dict(os.environ, **{crashpoints.ENV_VAR: step})
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    res = subprocess.run([sys.executable, "-c", KILLED_TRUNCATION, config, topic, str(offset)], cwd=str(REPO),
                         env=env, capture_output=True, text=True, timeout=120)
    if res.returncode != -9 or f"CRASHPOINT {step}" not in res.stderr:
        raise RuntimeError(f"a truncation armed at {step} exited {res.returncode}: {res.stderr[-2000:]}")


def batch_start(log: Any, target: int) -> int:
    """The base offset of the first batch holding an offset at or after ``target`` (a cut there removes bytes of
    that batch's segment, which the truncation rewrites)."""
    for seg in log.segments:
        if seg.read_next_offset() <= target:
            continue
        for batch in seg.batches_from(target):
            if batch.last_offset >= target:
                return max(int(batch.base_offset), log.log_start_offset)
    return target


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m torture.churn")
    p.add_argument("--name", required=True)
    p.add_argument("--config", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--stop-file", required=True)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    rng = random.Random(args.seed)
    config = load_config(args.config)
    counts = {"appends": 0, "compactions": 0, "truncations": 0, "deletions": 0, "killed truncations": 0}
    n = 0
    while not os.path.exists(args.stop_file):
        with LogManager.open(config, partitions=[(args.topic, 0)]) as mgr:
            log = mgr.get_log(args.topic, 0)
            if log is None:
                time.sleep(0.1)
                continue
            for _ in range(rng.randint(2, 12)):
                records = [(f"k{rng.randrange(40)}".encode(), f"{args.name}:{n}:{i}:".encode() +
                            bytes([97 + rng.randrange(26)]) * rng.randint(10, 3000), int(time.time() * 1000), ())
                           for i in range(rng.randint(1, 6))]
                log.append_batches(build_batch(records))
                n += 1
                counts["appends"] += 1
            op = rng.random()
            if op < 0.35:
                end = log.log_end_offset
                # mostly the last 1-20 offsets (the active segment); one in five 21-300 back, across segments
                back = rng.randint(1, 20) if rng.random() < 0.8 else rng.randint(21, 300)
                target = max(log.log_start_offset, end - back)
                if target < end and rng.random() < 0.2:
                    # another process dies at a step of its rewrite; the next lock holder (this process, the
                    # broker, the cleaner) completes or rolls it back. Cut at a batch's start: a target in an
                    # offset gap the cleaner left before a segment's base drops whole segments, with no rewrite
                    killed_truncation(args.config, args.topic, batch_start(log, target), rng.choice(REWRITE_STEPS))
                    counts["killed truncations"] += 1
                elif target < end and log.truncate_to(target):
                    counts["truncations"] += 1
            elif op < 0.45 and log.log_end_offset > log.log_start_offset + 10:
                log.delete_records(rng.randint(log.log_start_offset, log.log_end_offset - 5))
                counts["deletions"] += 1
            log.flush()
        if op >= 0.45 and op < 0.75:
            compaction.compact(config, topics=[args.topic])
            counts["compactions"] += 1
        elif op < 0.45:
            housekeeping.retention_all(config, topics=[args.topic])
            housekeeping.purge(config)
        time.sleep(rng.uniform(0.0, 0.05))
    print("OPS " + " ".join(str(v) for v in counts.values()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
