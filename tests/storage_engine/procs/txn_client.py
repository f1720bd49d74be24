"""A producer/coordinator in its own process: reads JSON commands on stdin, answers one JSON line each.

    python txn_client.py --config CFG --topic T --partition P [--crash-at POINT]

Commands: {"op": "append", "pid", "epoch", "seq", "values": [...], "txn": bool}, {"op": "end", "pid", "epoch",
"commit": bool}, {"op": "roll"}, {"op": "state"}, {"op": "close"}. Answers {"ok": true, "first", "last",
"duplicate"} or {"ok": false, "error": "<Kafka error name>"}; "state" answers the producer state, the LSO and the
aborted transactions.

``--crash-at`` kills the process (SIGKILL) at a step of a transactional write:

    txnindex         an ABORT marker is in the .log, its .txnindex entry not yet written
    snapshot-tmp     a producer snapshot is written to its temp file, not yet renamed (roll or close)
    after-snapshot   a roll's snapshot is in place, the flush after it not done
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import sys

from storage_engine.config_file import load_config
from storage_engine.errors import ProducerStateError
from storage_engine.log import producer_state_manager
from storage_engine.log.manager import LogManager
from storage_engine.record.records import SimpleRecord
from storage_engine.segment import producer_snapshot, segment


def die(*_a, **_k):
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def arm(point: str) -> None:
    if point == "txnindex":
        segment.LogSegment.update_txn_index = lambda self, completed, lso: die() if completed.is_aborted else None  # type: ignore[method-assign, assignment]  # the crash injection replaces the method in this process
    elif point == "snapshot-tmp":
        def half_written(path, data, sync=True, steps="atomic", what="file"):
            with open(path + ".tmp", "wb") as f:
                f.write(data[: len(data) // 2])
            die()
        producer_snapshot.atomic_write = half_written
    elif point == "after-snapshot":
        original = producer_state_manager.ProducerStateManager.take_snapshot

        def then_die(self, **kw):
            original(self, **kw)
            die()
        producer_state_manager.ProducerStateManager.take_snapshot = then_die  # type: ignore[method-assign]  # the crash injection replaces the method in this process
    elif point:
        raise SystemExit(f"unknown crash point {point}")


def state_of(log) -> dict:
    psm = log.producer_state
    return {"producers": {str(pid): [e.producer_epoch, e.last_seq, e.last_data_offset, e.coordinator_epoch,
                                     e.current_txn_first_offset] for pid, e in sorted(psm.producers.items())},
            "lso": log.last_stable_offset, "leo": log.log_end_offset,
            "aborted": [list(t[:4]) for s in log.segments for t in s.txn_index.all_aborted_txns()]}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--partition", type=int, required=True)
    ap.add_argument("--crash-at", default="")
    args = ap.parse_args()
    if args.crash_at:
        arm(args.crash_at)
    mgr = LogManager.open(load_config(args.config))
    log = mgr.get_or_create_log(args.topic, args.partition)
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        op = cmd["op"]
        try:
            if op == "arm":
                arm(cmd["point"])
                out: dict[str, object] = {"ok": True}
            elif op == "append":
                recs = [SimpleRecord(None, v.encode()) for v in cmd["values"]]
                info = log.append_records(recs, producer_id=cmd["pid"], producer_epoch=cmd["epoch"],
                                          base_sequence=cmd["seq"], is_transactional=cmd.get("txn", False))
                out = {"ok": True, "first": info.first_offset, "last": info.last_offset, "duplicate": info.duplicate}
            elif op == "end":
                info = log.append_end_txn(cmd["pid"], cmd["epoch"], commit=cmd["commit"])
                out = {"ok": True, "first": info.first_offset, "last": info.last_offset, "duplicate": False}
            elif op == "roll":
                log.roll()
                out = {"ok": True}
            elif op == "state":
                with log.locked():
                    out = {"ok": True, **state_of(log)}
            elif op == "close":
                mgr.close()
                print(json.dumps({"ok": True}), flush=True)
                return 0
            else:
                out = {"ok": False, "error": f"unknown op {op}"}
        except ProducerStateError as exc:
            out = {"ok": False, "error": exc.kafka_name}
        print(json.dumps(out), flush=True)
    mgr.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
