"""The long structure-aware fuzz campaign (outside the suite): a real broker process, ``--frames`` cases of
:mod:`tests.server.fuzz_structured` over every served API, the broker's resident size sampled from ``/proc``
throughout, then a JSON report on stdout: frames per API, error codes answered, connections closed and the
broker's reasons, handler failures in its log, RSS min/max. Exit 0 only when there is no failure: no handler
exception, no UNKNOWN_SERVER_ERROR, no connection closed without a reason, no late answer, and the resident size
below ``--rss-limit-mib``.

    PYTHONPATH=. python -m tests.server.fuzz_campaign --frames 50000 --seed 1
"""
from __future__ import annotations

import argparse
import datetime
import json
import sys
import tempfile
import time
from pathlib import Path

from tests.server import fuzz_structured as fs
from tests.server import wire
from tests.server.broker_proc import BrokerProcess

TOPIC = "fuzz-scratch"
QUEUED = 64 * 1024 * 1024


def create_topic(address: str, topic: str, partitions: int) -> None:
    conn = wire.Conn(address)
    try:
        body = wire.build_request(19, 7, topics=[{"name": topic, "num_partitions": partitions,
                                                  "replication_factor": 1, "assignments": [], "configs": []}],
                                  timeout=datetime.timedelta(seconds=30), validate_only=False)
        answer = conn.request(body, 1)
        assert int(answer.topics[0].error_code) == 0, answer
    finally:
        conn.close()


def start_broker(tmp: Path) -> BrokerProcess:
    broker = BrokerProcess(tmp, broker={"auto.create.topics.enable": False, "queued.max.request.bytes": QUEUED,
                                        "group.initial.rebalance.delay.ms": 0,
                                        "offsets.topic.num.partitions": 3,
                                        "transaction.state.log.num.partitions": 3})
    broker.start()
    create_topic(broker.bootstrap, TOPIC, 3)
    return broker


def campaign(frames: int, seed: int, tmp: Path) -> dict:
    broker = start_broker(tmp)
    assert broker.proc is not None
    sampler = fs.RssSampler(broker.proc.pid)
    sampler.start()
    started = time.monotonic()
    try:
        runner = fs.Runner(broker.bootstrap, fs.targets_for(TOPIC, broker.log_dirs), seed)
        tally = runner.run(frames)
        alive = broker.proc.poll() is None
    finally:
        samples = sampler.stop()
    elapsed = time.monotonic() - started
    rc = broker.stop() if alive else None
    log = broker.log_text()
    reasons, silent = fs.close_reasons(log, tally)
    handler = fs.handler_failures(log)
    return {"frames": sum(tally.frames.values()), "seed": seed, "seconds": round(elapsed, 1),
            "mutated_frames": tally.mutated, "frames_per_api": dict(sorted(tally.frames.items())),
            "answered": tally.answered, "closed": len(tally.closed), "timed_out": len(tally.timeouts),
            "close_reasons": dict(reasons.most_common()), "closed_without_reason": silent[:20],
            "error_codes": {str(k): v for k, v in sorted(tally.codes.items())},
            "error_codes_by_api": {api: {str(k): v for k, v in sorted(c.items())}
                                   for api, c in sorted(tally.codes_by_api.items())},
            "failures": tally.failures[:50], "failure_count": len(tally.failures),
            "timeouts": tally.timeouts[:20], "handler_failures": handler[:20],
            "handler_failure_count": len(handler), "broker_alive": alive, "broker_exit": rc,
            "rss_samples": len(samples), "rss_min_mib": round(min(samples) / 2 ** 20, 1) if samples else None,
            "rss_max_mib": round(max(samples) / 2 ** 20, 1) if samples else None,
            "rss_last_mib": round(samples[-1] / 2 ** 20, 1) if samples else None}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=50_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--rss-limit-mib", type=float, default=400.0,
                        help="fail when the broker's resident size exceeds this")
    parser.add_argument("--keep", help="a directory for the broker's files (default: a temporary one)")
    args = parser.parse_args(argv)
    if args.keep:
        Path(args.keep).mkdir(parents=True, exist_ok=True)
        report = campaign(args.frames, args.seed, Path(args.keep))
    else:
        with tempfile.TemporaryDirectory(prefix="fuzz-campaign-") as tmp:
            report = campaign(args.frames, args.seed, Path(tmp))
    ok = (report["failure_count"] == 0 and report["handler_failure_count"] == 0
          and not report["closed_without_reason"] and not report["timeouts"] and report["broker_alive"]
          and report["broker_exit"] == 0 and (report["rss_max_mib"] or 0) <= args.rss_limit_mib)
    report["pass"] = ok
    json.dump(report, sys.stdout, indent=1)
    print()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
