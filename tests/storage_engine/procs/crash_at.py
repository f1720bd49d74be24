"""Append one batch, then die by SIGKILL at a chosen step of a roll or of the next append (or pause there).

    python crash_at.py --config CFG --topic T --partition P --at STEP [--pause-s S --appends-after N]

Steps of a roll, in the order ``LocalLog.roll_locked`` takes them:

    seal         in the old segment's final time-index entry and trim (the generation is already bumped)
    new-log      creating the new segment's .log (the old one is sealed)
    new-index    creating the new segment's .index (its .log exists)
    new-tindex   creating the new segment's .timeindex (its .log and .index exist)
    flush        in the flush after the new segment is in place

A step of an append (the next one that adds index entries; needs a small index.interval.bytes):

    tindex-entry between the two stores of a time-index entry: its timestamp is written, its offset not

Prints ``ACK <offset> <sha256 of the value> <tag> <append no>`` for each acknowledged record. With
``--pause-s`` it does not die: at the step it prints ``PAUSED``, sleeps (holding the partition lock, as a slow
roll would), completes the roll and appends ``--appends-after`` more batches. Without it, a clean exit means
the step was never reached (exit code 3).
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from payloads import digest, make_payload

from storage_engine.segment import index_file
from storage_engine.log import log as log_module
from storage_engine.segment import segment
from storage_engine.config_file import load_config
from storage_engine.log.manager import LogManager
from storage_engine.record.records import SimpleRecord


def die(*_args, **_kwargs):
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def pausing(original, seconds: float):
    def pause(*args, **kwargs):
        sys.stdout.write("PAUSED\n")
        sys.stdout.flush()
        time.sleep(seconds)
        return original(*args, **kwargs)
    return pause


def torn_time_index_entry(original):
    def append_entry(index, packed, head_size=0):
        if not head_size:                 # the offset index: one store
            return original(index, packed, head_size)
        start = index.entries * index.ENTRY_SIZE
        os.pwrite(index._fd, packed[:head_size], start)
        die()
    return append_entry


def append(log, n: int) -> None:
    values = [make_payload("crash", n, j, 100) for j in range(3)]
    info = log.append_records([SimpleRecord(b"crash-%d" % j, v) for j, v in enumerate(values)])
    sys.stdout.write("".join(f"ACK {info.first_offset + j} {digest(v)} crash {n}\n" for j, v in enumerate(values)))
    sys.stdout.flush()


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--config", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--partition", type=int, default=0)
    p.add_argument("--at", required=True,
                   choices=["seal", "new-log", "new-index", "new-tindex", "flush", "tindex-entry"])
    p.add_argument("--pause-s", type=float, default=None)
    p.add_argument("--appends-after", type=int, default=3)
    args = p.parse_args(argv)

    with LogManager.open(load_config(args.config)) as mgr:
        log = mgr.get_or_create_log(args.topic, args.partition)
        append(log, 0)
        if args.at == "tindex-entry":
            index_file.IndexFile._append_entry = torn_time_index_entry(index_file.IndexFile._append_entry)  # type: ignore[method-assign]  # the crash injection replaces the method in this process
            for n in range(1, 20):        # until an append adds index entries
                append(log, n)
            return 3
        owner, name = {"seal": (segment.LogSegment, "on_become_inactive_segment"), "new-log": (segment, "FileRecords"),
                       "new-index": (segment, "OffsetIndex"), "new-tindex": (segment, "TimeIndex"),
                       "flush": (log_module.Log, "flush_locked")}[args.at]
        original = getattr(owner, name)
        setattr(owner, name, die if args.pause_s is None else pausing(original, args.pause_s))
        log.roll()
        setattr(owner, name, original)
        if args.pause_s is None:
            return 3
        for n in range(1, args.appends_after + 1):
            append(log, n)
    return 0


if __name__ == "__main__":
    sys.exit(main())
