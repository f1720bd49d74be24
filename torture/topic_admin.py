"""The topic admin of a server torture trial (:mod:`torture.server`, :mod:`torture.server_topics`):
``python -m torture.topic_admin --bootstrap HOST:PORT --name NAME --ops N --seed S``.

It creates topics (``NAME-0``, ``NAME-1``, ... of 1-40 partitions), adds partitions to them and deletes them
through the Kafka admin API (librdkafka), one operation at a time, while the broker is killed and restarted. An
operation whose answer is lost with the broker is sent again until it has a definitive answer. Meanwhile a second
thread polls Metadata for every topic and reports any topic of NAME seen with partitions that are not
``0 .. k-1`` for a count ``k`` some operation asked for (a topic seen short of partitions).

Its stdout, one line per event::

    TRY create|extend|delete <topic> <count>   about to send the request (count: 0 for a delete)
    ACK create|extend|delete <topic> <count>   the broker answered success
    DONE create|extend|delete <topic> <count>  a resent request found the change already made (TOPIC_ALREADY_EXISTS,
                                               the count already reached, UNKNOWN_TOPIC for a delete)
    GIVEUP <op> <topic> <count> <error>        no definitive answer before the deadline
    BAD <topic> <partitions seen>              Metadata showed a topic not whole
    END <ops> <metadata polls>
"""
from __future__ import annotations

import argparse
import random
import sys
import threading
import time

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

DEADLINE_S = 150.0


class Out:
    def __init__(self) -> None:
        self.mutex = threading.Lock()

    def line(self, text: str) -> None:
        with self.mutex:
            sys.stdout.write(text + "\n")
            sys.stdout.flush()


def _error(exc: BaseException) -> KafkaError | None:
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return exc.args[0]
    return None


def poll_metadata(admin: AdminClient, name: str, allowed: dict[str, set[int]], mutex: threading.Lock,
                  stop: threading.Event, out: Out, polls: list[int]) -> None:
    while not stop.is_set():
        try:
            md = admin.list_topics(timeout=5)
        except KafkaException:
            time.sleep(0.05)
            continue
        polls[0] += 1
        with mutex:
            known = {t: set(c) for t, c in allowed.items()}
        for topic, meta in md.topics.items():
            if not topic.startswith(name + "-") or meta.error is not None:
                continue
            seen = sorted(meta.partitions)
            if seen != list(range(len(seen))) or len(seen) not in known.get(topic, set()):
                out.line(f"BAD {topic} {','.join(map(str, seen))}")
        time.sleep(0.02)


def run_op(admin: AdminClient, op: str, topic: str, count: int, out: Out) -> None:
    """Send ``op`` until it has a definitive answer (or the deadline)."""
    out.line(f"TRY {op} {topic} {count}")
    deadline = time.monotonic() + DEADLINE_S
    first = True
    while True:
        try:
            if op == "create":
                fut = admin.create_topics([NewTopic(topic, count, 1)], operation_timeout=30, request_timeout=30)
            elif op == "extend":
                fut = admin.create_partitions([NewPartitions(topic, count)], operation_timeout=30,
                                              request_timeout=30)
            else:
                fut = admin.delete_topics([topic], operation_timeout=30, request_timeout=30)
            fut[topic].result(40)
            out.line(f"ACK {op} {topic} {count}")
            return
        except KafkaException as exc:
            err = _error(exc)
            code = err.code() if err is not None else None
            done = {"create": KafkaError.TOPIC_ALREADY_EXISTS, "extend": KafkaError.INVALID_PARTITIONS,
                    "delete": KafkaError.UNKNOWN_TOPIC_OR_PART}[op]
            if code == done and not first:
                out.line(f"DONE {op} {topic} {count}")
                return
            # librdkafka's own errors (negative codes: a connection lost, a broker handle destroyed, a timeout)
            # and the broker's retriable ones are the broker's death: send again. Any other answer is final.
            if err is not None and code is not None and code >= 0 and not err.retriable() and code not in (
                    KafkaError.REQUEST_TIMED_OUT, KafkaError.NOT_CONTROLLER):
                out.line(f"GIVEUP {op} {topic} {count} {err}")
                return
            if time.monotonic() > deadline:
                out.line(f"GIVEUP {op} {topic} {count} {exc}")
                return
        first = False
        time.sleep(0.1)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m torture.topic_admin", description=__doc__)
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--name", required=True)
    p.add_argument("--ops", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    rng = random.Random(args.seed)
    out = Out()
    conf = {"bootstrap.servers": args.bootstrap, "log_level": 3, "reconnect.backoff.ms": 20,
            "reconnect.backoff.max.ms": 250}
    admin = AdminClient(conf)
    allowed: dict[str, set[int]] = {}
    mutex = threading.Lock()
    stop = threading.Event()
    polls = [0]
    poller = threading.Thread(target=poll_metadata, daemon=True,
                              args=(AdminClient(conf), args.name, allowed, mutex, stop, out, polls))
    poller.start()
    live: dict[str, int] = {}
    made = 0
    for _ in range(args.ops):
        kind = rng.choices(("create", "extend", "delete"), weights=(50, 25, 25))[0] if live else "create"
        if kind == "create":
            topic = f"{args.name}-{made}"
            made += 1
            count = rng.randint(1, 12) if rng.random() < 0.7 else rng.randint(20, 40)
            with mutex:
                allowed[topic] = {count}
            run_op(admin, "create", topic, count, out)
            live[topic] = count
        elif kind == "extend":
            topic = rng.choice(sorted(live))
            count = live[topic] + rng.randint(1, 10)
            with mutex:
                allowed[topic].add(count)
            run_op(admin, "extend", topic, count, out)
            live[topic] = count
        else:
            topic = rng.choice(sorted(live))
            run_op(admin, "delete", topic, 0, out)
            del live[topic]
        time.sleep(rng.uniform(0.0, 0.2))
    stop.set()
    poller.join(10)
    out.line(f"END {args.ops} {polls[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
