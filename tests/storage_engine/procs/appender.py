"""Append to one partition in a loop and acknowledge every record on stdout.

    python appender.py --config CFG --topic T --partition P --tag W [--appends N] [--records-per-append K]
                       [--payload-bytes B] [--max-seconds S] [--pause-s X]

Each append is one ``LogManager.open(config).get_or_create_log(...).append_records(...)`` call of K records.
Only after it returns, the program prints one line per record and flushes stdout::

    ACK <offset> <sha256 of the value> <tag> <append no>

so a line on stdout means the record was acknowledged. ``READY`` is printed once the log is open, ``DONE``
after a clean close. The loop is bounded by ``--appends`` and ``--max-seconds``.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from payloads import digest, make_payload  # noqa: E402

from storage_engine.config_file import load_config  # noqa: E402
from storage_engine.log.manager import LogManager  # noqa: E402
from storage_engine.record.records import SimpleRecord  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--config", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--partition", type=int, default=0)
    p.add_argument("--tag", required=True)
    p.add_argument("--appends", type=int, default=1000)
    p.add_argument("--records-per-append", type=int, default=3)
    p.add_argument("--payload-bytes", type=int, default=200)
    p.add_argument("--max-seconds", type=float, default=30.0)
    p.add_argument("--pause-s", type=float, default=0.0)
    args = p.parse_args(argv)

    deadline = time.monotonic() + args.max_seconds
    out = sys.stdout
    with LogManager.open(load_config(args.config)) as mgr:
        log = mgr.get_or_create_log(args.topic, args.partition)
        out.write("READY\n")
        out.flush()
        for n in range(args.appends):
            if time.monotonic() > deadline:
                break
            values = [make_payload(args.tag, n, j, args.payload_bytes) for j in range(args.records_per_append)]
            info = log.append_records([SimpleRecord(f"{args.tag}-{n}-{j}".encode(), v)
                                       for j, v in enumerate(values)])
            assert info.last_offset - info.first_offset + 1 == len(values)
            out.write("".join(f"ACK {info.first_offset + j} {digest(v)} {args.tag} {n}\n"
                              for j, v in enumerate(values)))
            out.flush()
            if args.pause_s:
                time.sleep(args.pause_s)
    out.write("DONE\n")
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
