"""Read one partition from its start, over and over, while other processes write it.

    python reader.py --config CFG --topic T --partition P [--rounds N] [--until-count C] [--max-seconds S]

Each round refreshes the log view and reads every record from the log start offset, checking on its own that
offsets are contiguous and that every value is an intact self-checking payload (see ``payloads.py``). It
prints one line per round::

    SNAP <first offset> <count> <sha256 over (offset, sha256 of value) of the whole prefix>
    BAD <reason>                      (a gap, a repeated offset, a damaged value, fewer records than before)
    GONE <error type>: <message>      (the engine said the partition is gone: it was deleted; the reader stops)

and ``DONE`` at the end: after ``--rounds`` rounds, once a round saw ``--until-count`` records, or at the
deadline. The partition may not exist yet when it starts; it waits for it.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from payloads import digest, payload_ok

from storage_engine.config_file import load_config
from storage_engine.errors import PartitionNotFoundError
from storage_engine.log.manager import LogManager


def prefix_digest(pairs) -> str:
    h = hashlib.sha256()
    for offset, value_digest in pairs:
        h.update(f"{offset} {value_digest}\n".encode())
    return h.hexdigest()


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--config", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--partition", type=int, default=0)
    p.add_argument("--rounds", type=int, default=200)
    p.add_argument("--until-count", type=int, default=None)
    p.add_argument("--max-seconds", type=float, default=30.0)
    args = p.parse_args(argv)

    deadline = time.monotonic() + args.max_seconds
    out = sys.stdout
    with LogManager.open(load_config(args.config)) as mgr:
        log = None
        while log is None and time.monotonic() < deadline:
            log = mgr.get_log(args.topic, args.partition)
            if log is None:
                time.sleep(0.01)
        if log is None:
            out.write("BAD partition never appeared\n")
            return 1
        out.write("READY\n")
        out.flush()
        seen = 0
        for _ in range(args.rounds):
            if time.monotonic() > deadline:
                break
            try:
                log.refresh()
                start = log.log_start_offset
                pairs: list[tuple[int, str]] = []
                bad = None
                for rec in log.read_records(start):
                    expected = start + len(pairs)
                    if rec.offset != expected:
                        bad = f"offset {rec.offset} where {expected} was expected"
                        break
                    if not payload_ok(rec.value):
                        bad = f"damaged value at offset {rec.offset}"
                        break
                    pairs.append((rec.offset, digest(rec.value)))
            except PartitionNotFoundError as exc:     # PartitionDeletedError is one
                out.write(f"GONE {type(exc).__name__}: {exc}\n")
                break
            if bad is None and len(pairs) < seen:
                bad = (f"saw {len(pairs)} records after {seen}: log end offset {log.log_end_offset}, segments "
                       f"{[(seg.base_offset, seg.size) for seg in log.segments]}")
            seen = max(seen, len(pairs))
            out.write(f"BAD {bad}\n" if bad else f"SNAP {start} {len(pairs)} {prefix_digest(pairs)}\n")
            out.flush()
            if args.until_count is not None and len(pairs) >= args.until_count:
                break
    out.write("DONE\n")
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
