"""The processes of a tiered torture trial (:mod:`torture.tiered`): ``python -m torture.tiered_child <role>
--config CFG --stop-file F [options]``.

* ``appender``: one long-lived ``LogManager`` (the broker's place in the log: what a produce does) appending
  batches of self-checking payloads to the tiered topics in turn and, once ``append_records`` returned, printing
  one line per record: ``ACK <topic> <offset> <sha256 of the value>``;
* ``tier``: the tier job (``storage_engine.jobs.tiering.tier``: copy, local retention, remote retention, orphans)
  in a loop, each run a whole job as the CLI's ``tier`` and the DAG's tasks run it; a run the object store fails
  (the harness kills it too) prints ``STORE-DOWN <error>`` and the loop goes on, as a retried task would; a
  partition failing for any other reason prints ``FAIL <error type> <error>``; each run without a failure prints
  ``RUN <copied segments>``;
* ``consumer``: one long-lived manager reading every tiered topic from its log start offset to its end over and
  over, the offsets below the local log start from the object store (:func:`read_range`), checking what it reads
  itself (offsets rise without a gap, values are intact payloads); prints ``BAD <reason>``, or ``REMOTE <n>``
  once a round read ``n`` records from the object store.

Every role runs until its deadline or until the stop file exists, then closes cleanly and prints ``DONE``; an
unexpected exception goes to stderr and exits 1 (the harness counts it as a violation).
"""
from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Iterator
from typing import Any

from storage_engine.config import StorageConfig
from storage_engine.config_file import load_config
from storage_engine.errors import (OffsetOutOfRangeError, RemoteObjectDamagedError, RemoteObjectMissingError,
                                   RemoteStorageError)
from storage_engine.log.log import Log
from storage_engine.log.manager import LogManager
from storage_engine.record.records import SimpleRecord
from storage_engine.segment.file_records import iter_batches
from torture.child import Stop, digest, payload, payload_ok

TIERED, RETAINED = "tiered", "tiered-retained"
TOPICS = (TIERED, RETAINED)
FETCH_BYTES = 64 * 1024
# What a tier run fails with while the object store is killed and restarting (any other failure is a finding).
STORE_DOWN = ("RemoteStoreUnreachableError",)


def appender(config: StorageConfig, stop: Stop, args: argparse.Namespace) -> None:
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
            values = [payload(args.tag, n * 10 + j, rng, rng.randint(20, 300)) for j in range(count)]
            info = logs[topic].append_records([SimpleRecord(f"{args.tag}-{n}-{j}".encode(), v)
                                               for j, v in enumerate(values)])
            out.write("".join(f"ACK {topic} {info.first_offset + j} {digest(v)}\n" for j, v in enumerate(values)))
            out.flush()
            n += 1
            if args.pause_s:
                time.sleep(rng.random() * args.pause_s)


def tier(config: StorageConfig, stop: Stop, args: argparse.Namespace) -> None:
    from storage_engine.jobs.tiering import tier as tier_run
    out = sys.stdout
    while not stop():
        try:
            result = tier_run(config)
            failures = [(f["error_type"], f["error"]) for f in result["failures"]]
        except RemoteStorageError as exc:
            failures = [(type(exc).__name__, str(exc))]
        down = [f for f in failures if f[0] in STORE_DOWN]
        if down:      # the object store is down (killed): the task fails, and is retried
            out.write(f"STORE-DOWN {down[0][0]}\n")
        for error_type, error in (f for f in failures if f[0] not in STORE_DOWN):
            out.write(f"FAIL {error_type} {error[:500]!r}\n")
        if not failures:
            out.write(f"RUN {result['copied_segments']}\n")
        out.flush()
        time.sleep(args.pause_s if not failures else 0.2)


class RemoteRange:
    """Reads of a tiered partition over local and remote storage: one manager, its remote view and a remote
    reader (built once; the view is refreshed before each round)."""

    def __init__(self, config: StorageConfig, mgr: LogManager):
        from storage_engine.tiered.object_store import ObjectStore
        from storage_engine.tiered.reads import RemoteReader
        from storage_engine.tiered.remote_log import RemoteLogView
        from storage_engine.tiered.settings import RemoteStorageSettings
        settings = RemoteStorageSettings.of(config)
        self.settings = settings
        self.mgr = mgr
        self.store = ObjectStore(settings)
        self.view = RemoteLogView.load(mgr)
        self.reader = RemoteReader(settings, self.store, self.view)

    def refresh(self) -> None:
        self.view.refresh(self.mgr)

    def batches(self, log: Log, start: int, end: int) -> Iterator[tuple[bool, Any]]:
        """(from the object store?, batch) of every batch holding offsets in [start, end): local reads, and
        remote ones where the local log says the offset is only in remote storage."""
        from storage_engine.errors import OffsetInRemoteStorageError
        offset = start
        while offset < end:
            remote = False
            try:
                fetched = log.read(offset, FETCH_BYTES)
                data = None if fetched is None else fetched.data
            except OffsetInRemoteStorageError:
                remote = True
                if self.view.segment_for(log.topic, log.partition, offset) is None:
                    self.refresh()      # local retention deleted what this view had not yet seen tiered
                remote_fetch = self.reader.read(log.topic, log.partition, offset, FETCH_BYTES)
                data = None if remote_fetch is None else remote_fetch.data
            if not data:
                return
            last = None
            for batch in iter_batches(data):
                if batch.next_offset <= offset:
                    continue
                last = batch
                yield remote, batch
            if last is None:
                return
            offset = last.next_offset


def read_range(rr: RemoteRange, log: Log, start: int, end: int) -> Iterator[tuple[bool, int, bytes | None]]:
    """(from the object store?, offset, value) of every record in [start, end)."""
    for remote, batch in rr.batches(log, start, end):
        for rec in batch.records():
            if start <= rec.offset < end:
                yield remote, rec.offset, rec.value


def consumer(config: StorageConfig, stop: Stop, args: argparse.Namespace) -> None:
    out = sys.stdout
    with LogManager.open(config) as mgr:
        rr = RemoteRange(config, mgr)
        out.write("READY\n")
        out.flush()
        while not stop():
            rr.refresh()
            for topic in TOPICS:
                log = mgr.get_log(topic, 0)
                if log is None:
                    continue
                log.refresh()
                bad, remote = _round(rr, log)
                if bad:
                    out.write(f"BAD {topic}: {bad}\n")
                elif remote:
                    out.write(f"REMOTE {remote}\n")
                out.flush()
            time.sleep(args.pause_s)


def _round(rr: RemoteRange, log: Log) -> tuple[str | None, int]:
    previous = None
    remote_records = 0
    start, end = log.log_start_offset, log.log_end_offset
    try:
        for remote, offset, value in read_range(rr, log, start, end):
            if previous is not None and offset != previous + 1:
                return f"offset {offset} after {previous}: a gap", remote_records
            if previous is None and offset != start:
                return f"the first record read is at {offset}, the log starts at {start}", remote_records
            if not payload_ok(value):
                return f"damaged value at offset {offset}{' (remote)' if remote else ''}", remote_records
            remote_records += remote
            previous = offset
    except OffsetOutOfRangeError:
        return None, remote_records      # remote or local retention moved the log start past this round
    except RemoteObjectDamagedError as exc:
        return f"damaged remote object: {exc}", remote_records
    except RemoteObjectMissingError as exc:
        if log.topic == TIERED:          # nothing of it is ever deleted remotely
            return f"missing remote object: {exc}", remote_records
        return None, remote_records      # remote retention deleted it while this round read
    except RemoteStorageError:
        return None, remote_records      # the object store is down (killed): nothing handed out, no answer
    return None, remote_records


ROLES = {"appender": appender, "tier": tier, "consumer": consumer}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m torture.tiered_child")
    p.add_argument("role", choices=sorted(ROLES))
    p.add_argument("--config", required=True)
    p.add_argument("--stop-file", required=True)
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tag", default="a")
    p.add_argument("--pause-s", type=float, default=0.0)
    args = p.parse_args(argv)
    ROLES[args.role](load_config(args.config), Stop(args.stop_file, args.seconds), args)
    sys.stdout.write("DONE\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
