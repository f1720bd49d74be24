"""A worker of a transaction torture trial (:mod:`torture.txn`): ``python -m torture.txn_worker --bootstrap
HOST:PORT --slot K --group G --input T --output T --ends 0:E0,1:E1,... [options]``.

The consume-transform-produce loop of Kafka's exactly-once processing, with confluent-kafka: a consumer in group
``G`` (``isolation.level=read_committed``, ``enable.auto.commit=false``) and a transactional producer whose
``transactional.id`` is fixed by the worker slot (``txn-torture-<K>``), so that a worker restarted in the slot
fences the one before it. Each round: poll a batch of input records, ``begin_transaction``, produce one output
record per input record naming it (``<topic>:<partition>:<offset>:<value>``), ``send_offsets_to_transaction``
with the consumer's positions and group metadata, ``commit_transaction``. An error that needs an abort aborts the
transaction and rewinds the consumer to the group's committed offsets; a retriable one retries the step; a fatal
one (the producer fenced by a newer worker of the slot, the consumer's static membership taken over) ends the
worker, which the harness may start again in its slot (:mod:`torture.txn`). The worker is done when the group's
committed offsets reach ``--ends`` (the input's end offsets) on every input partition: every input record has its
output committed, by this worker or another.

Its stdout, one line per event::

    READY <producer's transactional id>       init_transactions done
    TXN <records>                             a transaction committed with that many output records
    ABORT <step> <error>                      a transaction aborted (then the consumer rewound)
    RETRY <step> <error>                      a retriable error, the step tried again
    FATAL <step> <error> <text>               a fatal error: exit 3 (a consumer's: the error under ``_FATAL``)
    UNEXPECTED <step> <what>                  an error the loop has no answer for: exit 4
    DEADLINE <transactions> <records>         not done within --deadline: exit 5
    HUNG <step>                               a client call blocked for HUNG_S: exit 6
    DONE <transactions> <records>             the committed offsets reached the ends: exit 0

Exit codes: 0 done, 3 fatal error (:data:`EXIT_FATAL`), 4 an error the loop has no answer for (neither fatal nor
retriable nor abortable, or a rewind that keeps failing), 5 not done within ``--deadline`` seconds, 6 a client
call that did not return within :data:`HUNG_S` (``HUNG <step>`` and the threads' stacks on stderr).

A consumer's fatal error does not reach the error callback: librdkafka hands it to the application as a consumer
error of code ``_FATAL`` returned by ``consume()`` (the underlying error named in its text), once, and
confluent-kafka's ``KafkaError.fatal()`` is False for it; :func:`fatal_name` recognises it by its code. A
worker that skipped it would go on polling a consumer that no longer takes part in the group, for ever.

With static membership the consumer's fatal error is FENCED_INSTANCE_ID: when a resumed zombie of the slot took
the slot's ``group.instance.id``, or after the consumer's own session timed out (no heartbeat answered within
``session.timeout.ms``, the broker away or slow to restart): librdkafka then drops its member id and, until the
application's next ``consume()`` has served the revocation, goes on heartbeating with an empty member id and the
instance id, which the coordinator answers FENCED_INSTANCE_ID while it still holds the instance's member (Kafka's
``isStaticMemberFenced``). A worker blocked in a transaction's calls meanwhile is the usual case.

Both clients set ``metadata.recovery.strategy=none``. With librdkafka's default (``rebootstrap``, 2.10 on) the
death of the only broker makes the client re-bootstrap, which decommissions the broker object the group
coordinator is cached on; a ``send_offsets_to_transaction`` begun after the restart then waits for that object
to come up, forever, past its timeout (librdkafka issues #5511 and #5456). The broker restarts at the same
address and node id, so there is nothing to re-bootstrap from anyway.
"""
from __future__ import annotations

import argparse
import faulthandler
import os
import random
import signal
import sys
import threading
import time
from typing import Any, NoReturn

from confluent_kafka import (OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Message, Producer,
                             TopicPartition)

EXIT_FATAL = 3
EXIT_UNEXPECTED = 4
EXIT_DEADLINE = 5
EXIT_HUNG = 6
HUNG_S = 60.0                     # a client call (each has a timeout of CALL_TIMEOUT_S) blocked this long is hung
CALL_TIMEOUT_S = 10.0
DEBUG_ENV = "TXN_WORKER_DEBUG"      # librdkafka debug contexts for the producer (e.g. "eos,protocol"), on stderr


def fatal_name(err: KafkaError) -> str | None:
    """The name of the fatal error ``err`` is or stands for (a consumer's ``_FATAL``: the error its text names),
    or None if ``err`` is not fatal."""
    if err.code() != KafkaError._FATAL and not err.fatal():
        return None
    if err.code() == KafkaError._FATAL:
        for code in (KafkaError.FENCED_INSTANCE_ID,):
            if KafkaError(code).str() in err.str():
                return str(KafkaError(code).name())
    return str(err.name())


def transactional_id(slot: int) -> str:
    return f"txn-torture-{slot}"


def consumer_config(args: argparse.Namespace) -> dict[str, Any]:
    conf: dict[str, Any] = {
        "bootstrap.servers": args.bootstrap,
        "group.id": args.group,
        "client.id": f"worker-{args.name or args.slot}",
        "isolation.level": "read_committed",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": args.session_timeout_ms,
        "heartbeat.interval.ms": max(100, args.session_timeout_ms // 6),
        "max.poll.interval.ms": 60_000,
        "reconnect.backoff.ms": 20,
        "reconnect.backoff.max.ms": 250,
        "retry.backoff.ms": 20,
        "retry.backoff.max.ms": 250,
        "fetch.wait.max.ms": 100,
        "metadata.recovery.strategy": "none",
        "log_level": 4,
    }
    if args.static:
        conf["group.instance.id"] = f"worker-{args.slot}"
    return conf


def producer_config(args: argparse.Namespace) -> dict[str, Any]:
    conf: dict[str, Any] = {
        "bootstrap.servers": args.bootstrap,
        "transactional.id": transactional_id(args.slot),
        "client.id": f"worker-{args.name or args.slot}",
        "transaction.timeout.ms": args.txn_timeout_ms,
        "message.timeout.ms": args.txn_timeout_ms,
        "acks": "all",
        "linger.ms": 5,
        "batch.size": 16384,
        "reconnect.backoff.ms": 20,
        "reconnect.backoff.max.ms": 250,
        "retry.backoff.ms": 20,
        "retry.backoff.max.ms": 250,
        "metadata.recovery.strategy": "none",
        "log_level": 4,
    }
    if os.environ.get(DEBUG_ENV):
        conf.update({"debug": os.environ[DEBUG_ENV], "log_level": 7})
    return conf


class Worker:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.rng = random.Random(args.seed)
        self.ends = {int(p): int(e) for p, _, e in (x.partition(":") for x in args.ends.split(","))}
        self.deadline = time.monotonic() + args.deadline
        self.consumer = Consumer(consumer_config(args))
        self.producer = Producer(producer_config(args))
        self.txns = self.records = 0
        self.step = ""
        self.since = time.monotonic()       # when the loop last made progress (a call returned)
        threading.Thread(target=self.watchdog, daemon=True).start()

    def watchdog(self) -> None:
        while True:
            time.sleep(1.0)
            if time.monotonic() - self.since > HUNG_S:
                self.say(f"HUNG {self.step}")
                faulthandler.dump_traceback(all_threads=True)
                sys.stderr.flush()
                os._exit(EXIT_HUNG)

    # -- output -------------------------------------------------------------------------------------------------
    @staticmethod
    def say(line: str) -> None:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()

    def fatal(self, step: str, err: KafkaError) -> NoReturn:
        self.say(f"FATAL {step} {fatal_name(err) or err.name()} {err.str()!r}")
        sys.exit(EXIT_FATAL)

    def unexpected(self, step: str, what: str) -> NoReturn:
        self.say(f"UNEXPECTED {step} {what}")
        sys.exit(EXIT_UNEXPECTED)

    def check_deadline(self) -> None:
        if time.monotonic() > self.deadline:
            self.say(f"DEADLINE {self.txns} {self.records}")
            sys.exit(EXIT_DEADLINE)

    # -- the loop -----------------------------------------------------------------------------------------------
    def retrying(self, step: str, call: Any) -> Any:
        """``call()`` until it does not raise a retriable error; a fatal one ends the worker; an abortable one is
        raised to the caller."""
        self.step = step
        while True:
            self.check_deadline()
            try:
                result = call()
                self.since = time.monotonic()
                return result
            except KafkaException as exc:
                self.since = time.monotonic()
                err: KafkaError = exc.args[0]
                if fatal_name(err):
                    self.fatal(step, err)
                if err.txn_requires_abort():
                    raise
                if err.retriable():
                    self.say(f"RETRY {step} {err.name()}")
                    time.sleep(0.05)
                    continue
                self.unexpected(step, f"{err.name()} {err.str()!r}")

    def run(self) -> int:
        self.retrying("init_transactions", lambda: self.producer.init_transactions(CALL_TIMEOUT_S))
        self.say(f"READY {transactional_id(self.args.slot)}")
        self.consumer.subscribe([self.args.input])
        last_check = 0.0
        while True:
            self.check_deadline()
            self.step = "consume"
            msgs = self.consumer.consume(num_messages=self.rng.randint(1, self.args.batch), timeout=0.2)
            self.since = time.monotonic()
            self.check_deadline()
            batch: list[Message] = []
            for m in msgs:
                err = m.error()
                if err is None:
                    batch.append(m)
                elif fatal_name(err):
                    self.fatal("consume", err)
                # other consumer errors are informational (a broker away): librdkafka carries on
            if batch:
                self.process(batch)
            elif time.monotonic() - last_check > 0.5:
                last_check = time.monotonic()
                if self.done():
                    self.say(f"DONE {self.txns} {self.records}")
                    self.step = "close"
                    self.close()
                    return 0

    def process(self, batch: list[Message]) -> None:
        producer, out = self.producer, self.args.output
        try:
            self.retrying("begin_transaction", producer.begin_transaction)
            self.step = "produce"
            for m in batch:
                partition, offset = m.partition(), m.offset()
                assert partition is not None and offset is not None, "the batch holds records, not errors"
                value = f"{m.topic()}:{partition}:{offset}:{(m.value() or b'').decode()}".encode()
                part = (partition + offset) % self.args.out_partitions
                while True:
                    try:
                        producer.produce(out, value=value, partition=part)
                        break
                    except BufferError:
                        producer.poll(0.05)
                        self.since = time.monotonic()
                producer.poll(0)
            positions = self.consumer.position(self.consumer.assignment())
            meta = self.consumer.consumer_group_metadata()
            self.retrying("send_offsets_to_transaction",
                          lambda: producer.send_offsets_to_transaction(positions, meta, CALL_TIMEOUT_S))
            self.retrying("commit_transaction", lambda: producer.commit_transaction(CALL_TIMEOUT_S))
        except KafkaException as exc:
            err: KafkaError = exc.args[0]
            self.say(f"ABORT {self.step} {err.name()}")
            self.retrying("abort_transaction", lambda: producer.abort_transaction(CALL_TIMEOUT_S))
            self.rewind()
            return
        self.txns += 1
        self.records += len(batch)
        self.say(f"TXN {len(batch)}")

    def rewind(self) -> None:
        """Seek every assigned partition back to the group's committed offset (the input of the aborted
        transaction is processed again)."""
        for _ in range(100):
            self.check_deadline()
            self.step = "rewind"
            try:
                assignment = self.consumer.assignment()
                if not assignment:
                    return
                committed = self.consumer.committed(assignment, timeout=CALL_TIMEOUT_S)
                self.since = time.monotonic()
                for tp in committed:
                    if tp.error is not None:
                        raise KafkaException(tp.error)
                    self.consumer.seek(TopicPartition(tp.topic, tp.partition,
                                                      tp.offset if tp.offset >= 0 else OFFSET_BEGINNING))
                return
            except KafkaException as exc:
                self.since = time.monotonic()
                err = exc.args[0]
                if isinstance(err, KafkaError) and fatal_name(err):
                    self.fatal("rewind", err)
                self.say(f"RETRY rewind {err.name() if isinstance(err, KafkaError) else err}")
                time.sleep(0.1)
        self.unexpected("rewind", "the consumer could not be rewound")

    def done(self) -> bool:
        """Whether the group's committed offsets reached the input's end offsets on every partition."""
        tps = [TopicPartition(self.args.input, p) for p in sorted(self.ends)]
        self.step = "committed"
        try:
            committed = self.consumer.committed(tps, timeout=CALL_TIMEOUT_S)
            self.since = time.monotonic()
        except KafkaException as exc:
            self.since = time.monotonic()
            err = exc.args[0]
            if isinstance(err, KafkaError) and fatal_name(err):
                self.fatal("committed", err)
            return False
        return all(tp.error is None and tp.offset >= self.ends[tp.partition] for tp in committed)

    def close(self) -> None:
        try:
            self.consumer.close()
        except KafkaException:
            pass
        self.producer.flush(5)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m torture.txn_worker", description=__doc__)
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--slot", type=int, required=True)
    p.add_argument("--name", default="", help="the worker's name in its client.id (default: its slot)")
    p.add_argument("--group", required=True)
    p.add_argument("--input", required=True)
    p.add_argument("--output", required=True)
    p.add_argument("--out-partitions", type=int, required=True)
    p.add_argument("--ends", required=True, help="the input's end offsets: <partition>:<offset>,...")
    p.add_argument("--batch", type=int, default=200, help="at most this many records a transaction")
    p.add_argument("--static", action="store_true", help="static group membership (group.instance.id per slot)")
    p.add_argument("--session-timeout-ms", type=int, default=6000)
    p.add_argument("--txn-timeout-ms", type=int, default=60_000)
    p.add_argument("--deadline", type=float, default=600.0, help="seconds before giving up (exit 5)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    faulthandler.register(signal.SIGUSR1)     # kill -USR1 <pid>: where a worker that seems stuck is
    return Worker(args).run()


if __name__ == "__main__":
    sys.exit(main())
