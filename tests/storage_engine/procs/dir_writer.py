"""Append to several partitions from one process, one append each in turn, and keep going when one fails.

    python dir_writer.py --config CFG --partitions x-0,y-0 [--appends N] [--max-seconds S] [--pause-s X]

The partitions are created if missing (in the order given: each new one goes to the log dir with the fewest).
For every acknowledged record it prints ``ACK <topic>-<partition> <offset> <sha256 of the value>``; for an append
the engine refused ``ERR <topic>-<partition> <error type>: <message>``; ``HOME <topic>-<partition> <log dir>`` once
per partition at the start, then ``READY``, and ``DONE`` at the end. Any error other than a storage error ends it
with a traceback.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from payloads import digest, make_payload  # noqa: E402

from storage_engine.config_file import load_config  # noqa: E402
from storage_engine.errors import StorageError  # noqa: E402
from storage_engine.log.manager import LogManager  # noqa: E402
from storage_engine.record.records import SimpleRecord  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--config", required=True)
    p.add_argument("--partitions", required=True)
    p.add_argument("--appends", type=int, default=100000)
    p.add_argument("--max-seconds", type=float, default=30.0)
    p.add_argument("--pause-s", type=float, default=0.002)
    p.add_argument("--payload-bytes", type=int, default=200)
    args = p.parse_args(argv)
    names = args.partitions.split(",")
    deadline = time.monotonic() + args.max_seconds
    out = sys.stdout
    with LogManager.open(load_config(args.config)) as mgr:
        logs = {}
        for name in names:
            topic, part = name.rsplit("-", 1)
            logs[name] = mgr.get_or_create_log(topic, int(part))
            out.write(f"HOME {name} {logs[name].log_dir}\n")
        out.write("READY\n")
        out.flush()
        for n in range(args.appends):
            if time.monotonic() > deadline:
                break
            for name, log in logs.items():
                value = make_payload(name, n, 0, args.payload_bytes)
                try:
                    info = log.append_records([SimpleRecord(b"k", value)])
                except StorageError as exc:
                    out.write(f"ERR {name} {type(exc).__name__}: {exc}\n")
                else:
                    out.write(f"ACK {name} {info.first_offset} {digest(value)}\n")
            out.flush()
            time.sleep(args.pause_s)
    out.write("DONE\n")
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
