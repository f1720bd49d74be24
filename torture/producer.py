"""A producer of a server torture trial (:mod:`torture.server`): ``python -m torture.producer --bootstrap HOST:PORT
--topic T --partitions P --name NAME --records N [options]``.

One idempotent librdkafka producer (``enable.idempotence``, ``acks=all``, retries without limit, short retry and
reconnect backoffs, a long ``message.timeout.ms``) sends the values ``NAME:0`` .. ``NAME:N-1``, in that order, each
to a partition drawn at random, at about ``--rate`` records a second, then waits for every delivery report. The
broker it writes to is killed and restarted meanwhile; librdkafka resends what was in flight with the same producer
id, epoch and sequence numbers.

Its stdout, one line per delivery report, printed only from the delivery callback::

    ACK <partition> <offset> <seq>        the broker acknowledged NAME:<seq> at that offset
    FAIL <seq> <error>                    librdkafka gave the record up

and at the end ``DONE <produced> <acknowledged> <failed> <still queued>``. Exit 0 once every record has a report.
"""
from __future__ import annotations

import argparse
import random
import sys
import time
from typing import Any

from confluent_kafka import KafkaError, Message, Producer


def config(bootstrap: str, timeout_ms: int) -> dict[str, Any]:
    """The idempotent producer's settings: every failure the broker's death causes is retried, quickly."""
    return {
        "bootstrap.servers": bootstrap,
        "enable.idempotence": True,
        "acks": "all",
        "message.send.max.retries": 10_000_000,
        "retry.backoff.ms": 20,
        "retry.backoff.max.ms": 250,
        "reconnect.backoff.ms": 20,
        "reconnect.backoff.max.ms": 250,
        "message.timeout.ms": timeout_ms,
        "linger.ms": 5,
        "batch.size": 16384,   # the Java client's default: a batch always fits the trials' smallest segments
        "log_level": 4,   # librdkafka's warnings and errors only: one line per refused connection is enough
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m torture.producer", description=__doc__)
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--partitions", type=int, required=True)
    p.add_argument("--name", required=True)
    p.add_argument("--records", type=int, required=True)
    p.add_argument("--rate", type=float, default=2000.0, help="records a second (about)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout-ms", type=int, default=60_000, help="librdkafka's message.timeout.ms")
    args = p.parse_args(argv)
    rng = random.Random(args.seed)
    out = sys.stdout
    counts = {"acked": 0, "failed": 0}

    def report(err: KafkaError | None, msg: Message) -> None:
        seq = (msg.value() or b"").decode().rsplit(":", 1)[1]
        if err is None:
            counts["acked"] += 1
            out.write(f"ACK {msg.partition()} {msg.offset()} {seq}\n")
        else:
            counts["failed"] += 1
            out.write(f"FAIL {seq} {err.name()}\n")
        out.flush()

    producer = Producer(config(args.bootstrap, args.timeout_ms))
    started = time.monotonic()
    for seq in range(args.records):
        value = f"{args.name}:{seq}".encode()
        partition = rng.randrange(args.partitions)
        while True:
            try:
                producer.produce(args.topic, value=value, partition=partition, on_delivery=report)
                break
            except BufferError:   # the local queue is full while the broker is away: wait for reports
                producer.poll(0.05)
        producer.poll(0)
        ahead = (seq + 1) / args.rate - (time.monotonic() - started)
        if ahead > 0.005:
            producer.poll(ahead)
    # every record has its report within message.timeout.ms; the margin covers the last broker start
    remaining = producer.flush(args.timeout_ms / 1000 + 30)
    out.write(f"DONE {args.records} {counts['acked']} {counts['failed']} {remaining}\n")
    out.flush()
    return 0 if remaining == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
