"""The processes of a torture trial, one role each: ``python -m torture.child <role> --config CFG [options]``.

Roles (each a real process; the harness kills them with SIGKILL at random moments or makes them die at a named
step with ``STORAGE_ENGINE_CRASH_AT``):

* ``writer``: one long-lived ``LogManager`` (an application); appends batches to the plain, keyed and retained
  topics in turn and, only once ``append_records`` returned, prints one line per record::

      ACK <topic> <offset> <key or -> <sha256 of the value>

* ``cleaner``: compacts the keyed topic in a loop (``compaction.compact``, as the Airflow task does: each run opens
  its own manager);
* ``maintenance``: retention, checkpoint with flush, time-based flush and purge of ``.deleted`` files in a
  random order, in a loop (each a whole job, as the DAG tasks are);
* ``reader``: one long-lived manager reading every topic from its log start offset over and over, checking
  what it reads on its own (offsets rise, values are intact self-checking payloads); prints ``BAD <reason>``;
* ``opener``: opens the log dirs once and closes them (the first opener after a crash: a full load);
* ``writer --threads N`` (``make torture THREADS=1``): one process, one ``LogManager`` shared by N writer threads
  (each its own tag, the same ACK lines), two reader threads (the same checks, ``BAD`` lines), a compaction
  thread and a maintenance thread (whole jobs, as the roles above run them, in this process).

Every role runs until its deadline or until the stop file exists, then closes cleanly and prints ``DONE``; an
unexpected exception is printed on stderr and exits 1 (the harness counts it as a violation).
"""
from __future__ import annotations

import argparse
import hashlib
import os
import random
import sys
import time
from typing import Any, Callable

from storage_engine.config import StorageConfig
from storage_engine.config_file import load_config
from storage_engine.errors import OffsetOutOfRangeError
from storage_engine.log.log import Log
from storage_engine.log.manager import LogManager
from storage_engine.jobs import compaction, housekeeping
from storage_engine.record.records import SimpleRecord

PLAIN, KEYED, RETAINED = "plain", "keyed", "retained"
TOPICS = (PLAIN, KEYED, RETAINED)
DIGEST = 32


def payload(tag: str, n: int, rng: random.Random, size: int) -> bytes:
    """A self-checking value: ``<tag>:<n>:`` + random bytes + SHA-256 of what precedes it."""
    body = f"{tag}:{n}:".encode() + rng.randbytes(size)
    return body + hashlib.sha256(body).digest()


def payload_ok(value: bytes | None) -> bool:
    return value is not None and len(value) > DIGEST and hashlib.sha256(value[:-DIGEST]).digest() == value[-DIGEST:]


def digest(value: bytes) -> str:
    return hashlib.sha256(value).hexdigest()


class Stop:
    def __init__(self, stop_file: str, seconds: float):
        self.stop_file = stop_file
        self.deadline = time.monotonic() + seconds

    def __call__(self) -> bool:
        return time.monotonic() > self.deadline or os.path.exists(self.stop_file)


def writer(config: StorageConfig, stop: Stop, args: argparse.Namespace) -> None:
    rng = random.Random(args.seed)
    out = sys.stdout
    with LogManager.open(config) as mgr:
        logs = {t: mgr.get_or_create_log(t, 0) for t in TOPICS}
        out.write("READY\n")
        out.flush()
        n = 0
        while not stop():
            topic = TOPICS[n % len(TOPICS)]
            count = rng.randint(1, 4)
            keys = [f"k{rng.randrange(args.keys)}" if topic == KEYED else f"{args.tag}-{n}-{j}"
                    for j in range(count)]
            values = [payload(args.tag, n * 10 + j, rng, rng.randint(20, 200)) for j in range(count)]
            info = logs[topic].append_records([SimpleRecord(k.encode(), v) for k, v in zip(keys, values)])
            out.write("".join(f"ACK {topic} {info.first_offset + j} {k if topic == KEYED else '-'} {digest(v)}\n"
                              for j, (k, v) in enumerate(zip(keys, values))))
            out.flush()
            n += 1
            if args.pause_s:
                time.sleep(rng.random() * args.pause_s)


def threaded_writer(config: StorageConfig, stop: Stop, args: argparse.Namespace) -> None:
    """Writers, readers, a cleaner and maintenance as threads of one process sharing one manager."""
    import threading
    out = sys.stdout
    out_lock = threading.Lock()
    failures: list[BaseException] = []

    def write(lines: str) -> None:
        with out_lock:
            out.write(lines)
            out.flush()

    def guard(fn: Callable[..., Any], *a: Any) -> None:
        try:
            fn(*a)
        except BaseException as exc:  # noqa: BLE001 - reported on stderr, the process then fails
            import traceback
            traceback.print_exc()
            failures.append(exc)

    with LogManager.open(config) as mgr:
        for t in TOPICS:
            mgr.get_or_create_log(t, 0)

        def append_loop(w: int) -> None:
            rng = random.Random(args.seed * 31 + w)
            n = 0
            while not stop() and not failures:
                topic = TOPICS[(n + w) % len(TOPICS)]
                count = rng.randint(1, 4)
                keys = [f"k{rng.randrange(args.keys)}" if topic == KEYED else f"{args.tag}t{w}-{n}-{j}"
                        for j in range(count)]
                values = [payload(f"{args.tag}t{w}", n * 10 + j, rng, rng.randint(20, 200)) for j in range(count)]
                info = mgr.get_or_create_log(topic, 0).append_records(
                    [SimpleRecord(k.encode(), v) for k, v in zip(keys, values)])
                write("".join(f"ACK {topic} {info.first_offset + j} {k if topic == KEYED else '-'} {digest(v)}\n"
                              for j, (k, v) in enumerate(zip(keys, values))))
                n += 1
                if args.pause_s:
                    time.sleep(rng.random() * args.pause_s)

        def read_loop() -> None:
            while not stop() and not failures:
                for topic in TOPICS:
                    log = mgr.get_log(topic, 0)
                    if log is not None:
                        bad = _read_round(log, topic)
                        if bad:
                            write(f"BAD {topic}: {bad}\n")
                time.sleep(0.02)

        workers = ([threading.Thread(target=guard, args=(append_loop, w)) for w in range(args.threads)]
                   + [threading.Thread(target=guard, args=(read_loop,)) for _ in range(2)]
                   + [threading.Thread(target=guard, args=(cleaner, config, stop, args)),
                      threading.Thread(target=guard, args=(maintenance, config, stop, args))])
        write("READY\n")
        for w in workers:
            w.start()
        for w in workers:
            w.join()
    if failures:
        raise failures[0]


def cleaner(config: StorageConfig, stop: Stop, args: argparse.Namespace) -> None:
    while not stop():
        compaction.compact(config, topics=[KEYED])
        time.sleep(args.pause_s)


def maintenance(config: StorageConfig, stop: Stop, args: argparse.Namespace) -> None:
    rng = random.Random(args.seed)
    ops = [lambda: housekeeping.retention_all(config),
           lambda: housekeeping.checkpoint(config, flush=True),
           lambda: housekeeping.flush(config, due_only=False),
           lambda: housekeeping.purge(config)]
    while not stop():
        rng.choice(ops)()
        time.sleep(args.pause_s)


def reader(config: StorageConfig, stop: Stop, args: argparse.Namespace) -> None:
    out = sys.stdout
    with LogManager.open(config) as mgr:
        out.write("READY\n")
        out.flush()
        while not stop():
            for topic in TOPICS:
                log = mgr.get_log(topic, 0)
                if log is None:
                    continue
                bad = _read_round(log, topic)
                if bad:
                    out.write(f"BAD {topic}: {bad}\n")
                    out.flush()
            time.sleep(args.pause_s)


def _read_round(log: Log, topic: str) -> str | None:
    log.refresh()
    previous = None
    try:
        for rec in log.read_records(log.log_start_offset):
            if previous is not None and rec.offset <= previous:
                return f"offset {rec.offset} after {previous}"
            if topic != KEYED and previous is not None and rec.offset != previous + 1:
                return f"offset {rec.offset} after {previous}: a gap in a delete-policy topic"
            if not payload_ok(rec.value):
                return f"damaged value at offset {rec.offset}"
            previous = rec.offset
    except OffsetOutOfRangeError:
        return None  # retention moved the log start offset past this round's position: Kafka's answer too
    return None


def opener(config: StorageConfig, stop: Stop, args: argparse.Namespace) -> None:
    with LogManager.open(config):
        pass


ROLES = {"writer": writer, "cleaner": cleaner, "maintenance": maintenance, "reader": reader, "opener": opener}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m torture.child")
    p.add_argument("role", choices=sorted(ROLES))
    p.add_argument("--config", required=True)
    p.add_argument("--stop-file", required=True)
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tag", default="w")
    p.add_argument("--keys", type=int, default=300)
    p.add_argument("--pause-s", type=float, default=0.0)
    p.add_argument("--threads", type=int, default=0, help="writer: this many writer threads, with reader, "
                                                         "cleaner and maintenance threads beside them")
    args = p.parse_args(argv)
    role = threaded_writer if args.role == "writer" and args.threads else ROLES[args.role]
    role(load_config(args.config), Stop(args.stop_file, args.seconds), args)
    sys.stdout.write("DONE\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
