"""A consume-transform-produce worker with exactly-once output, run as its own process by test_txn_clients.py.

``python tests/server/txn_worker.py '<spec>'``, spec (JSON): ``bootstrap``; ``input`` and ``output`` topics;
``ends``, the input's end offset per partition; ``group`` and ``instance`` (its ``group.instance.id``: a restarted
worker takes the place of a killed one at once, without waiting for its session to time out);
``transactional_id``; ``commit_every``; ``work_s``, the time the transform of one record takes (it sleeps that
long); optionally ``consumer`` and ``producer``, more client settings (e.g. ``debug``).

It consumes the input as a member of ``group`` (``read_committed``, no auto commit) and, for every input record,
produces ``<partition>:<offset>:<value>`` to the same partition of the output within a transaction. Every
``commit_every`` records, or when no record came for half a second, it sends the positions after the records of
the transaction with ``send_offsets_to_transaction`` and commits. On an error that needs the transaction aborted
it aborts and rewinds every assigned partition to the group's committed offset (a partition whose seek cannot be
made yet is rewound when its next record comes: no record is processed out of order). A rebalance that takes the
partitions away aborts the transaction (whoever gets them starts at the committed offsets). On a fatal error it
exits with code 3. It exits 0 once the group's committed offsets are ``ends``.

stdout carries one JSON object per line: ``{"event": "started"}``, ``{"event": "committed", "records": n,
"offsets": {partition: offset}}`` after each commit, ``{"event": "aborted", "reason": ..., "records": n}``,
``{"event": "fatal", "error": ...}`` and ``{"event": "done"}``. SIGUSR1 prints the worker's stack on stderr.
"""
from __future__ import annotations

import faulthandler
import json
import signal
import sys
import time

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

WAIT_S = 120.0          # how long one call may keep failing with retriable errors before the worker gives up
CALL_TIMEOUT_S = 30.0   # the timeout given to each transactional call
# librdkafka 2.16 re-bootstraps when every broker is down (always, when the only broker restarts) and forgets the
# coordinators it knew; send_offsets_to_transaction then waits for the forgotten group coordinator for ever,
# past its timeout (confluentinc/librdkafka#5511, #5456). Without re-bootstrapping the clients reconnect.
CLIENT = {"reconnect.backoff.max.ms": 500, "metadata.recovery.strategy": "none", "log_level": 3}


class Fatal(Exception):
    pass


class Abortable(Exception):
    pass


def say(event: str, **fields) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


def call(what: str, fn, *args):
    """``fn(*args)`` retried while it fails with a retriable error; Abortable or Fatal for the others."""
    deadline = time.monotonic() + WAIT_S
    last = ""
    while True:
        try:
            return fn(*args)
        except KafkaException as exc:
            err: KafkaError = exc.args[0]
            if err.fatal():
                raise Fatal(f"{what}: {err}") from exc
            if err.txn_requires_abort():
                raise Abortable(f"{what}: {err}") from exc
            if not err.retriable() and err.code() != KafkaError._TIMED_OUT:
                raise Fatal(f"{what}: not retriable: {err}") from exc
            if time.monotonic() > deadline:
                raise Fatal(f"{what}: still failing after {WAIT_S} s: {err}") from exc
            if str(err) != last:
                print(f"{what}: retrying after {err}", file=sys.stderr, flush=True)
                last = str(err)
            time.sleep(0.2)


class Worker:
    def __init__(self, spec: dict):
        self.spec = spec
        self.topic_in, self.topic_out = spec["input"], spec["output"]
        self.ends = {int(p): o for p, o in spec["ends"].items()}
        self.consumer = Consumer({
            "bootstrap.servers": spec["bootstrap"], "group.id": spec["group"], "group.instance.id": spec["instance"],
            "isolation.level": "read_committed", "enable.auto.commit": False, "auto.offset.reset": "earliest",
            "session.timeout.ms": 10000, "heartbeat.interval.ms": 500, "max.poll.interval.ms": 120000,
            **CLIENT, **spec.get("consumer", {})})
        self.producer = Producer({
            "bootstrap.servers": spec["bootstrap"], "transactional.id": spec["transactional_id"],
            "transaction.timeout.ms": 60000, "linger.ms": 5, **CLIENT, **spec.get("producer", {})})
        self.in_txn = False
        self.pending: dict[int, int] = {}     # partition -> offset after its last record in the transaction
        self.records = 0                      # records of the transaction
        self.rewind_to: dict[int, int] = {}   # partition -> the offset its next record must have after a rewind
        self.sought: set[int] = set()         # partitions of rewind_to whose seek was made

    # -- transactions ---------------------------------------------------------------------------------------------
    def commit(self) -> None:
        offsets = [TopicPartition(self.topic_in, p, o) for p, o in sorted(self.pending.items())]
        call("send_offsets_to_transaction", self.producer.send_offsets_to_transaction, offsets,
             self.consumer.consumer_group_metadata(), CALL_TIMEOUT_S)
        call("commit_transaction", self.producer.commit_transaction, CALL_TIMEOUT_S)
        say("committed", records=self.records, offsets=self.pending)
        self.in_txn, self.pending, self.records = False, {}, 0

    def abort(self, reason: str) -> None:
        if self.in_txn:
            call("abort_transaction", self.producer.abort_transaction, CALL_TIMEOUT_S)
        say("aborted", reason=reason, records=self.records)
        self.in_txn, self.pending, self.records = False, {}, 0

    def rewind(self) -> None:
        """Every assigned partition back to the group's committed offset (0 when there is none)."""
        assigned = self.consumer.assignment()
        if assigned:
            for tp in call("committed", self.consumer.committed, assigned, CALL_TIMEOUT_S):
                self.rewind_to[tp.partition] = max(tp.offset, 0)
                self.sought.discard(tp.partition)
                self.seek(tp.partition)

    def seek(self, partition: int) -> None:
        try:
            self.consumer.seek(TopicPartition(self.topic_in, partition, self.rewind_to[partition]))
            self.sought.add(partition)
        except KafkaException as exc:         # e.g. not being fetched yet: again at its next record
            print(f"seek of {partition} to {self.rewind_to[partition]}: {exc}", file=sys.stderr, flush=True)

    def on_revoke(self, _consumer, partitions) -> None:
        self.rewind_to.clear()                # a new assignment starts at the committed offsets
        self.sought.clear()
        if self.in_txn:
            self.abort(f"partitions revoked: {sorted(tp.partition for tp in partitions)}")

    # -- the loop -------------------------------------------------------------------------------------------------
    def finished(self) -> bool:
        tps = [TopicPartition(self.topic_in, p) for p in self.ends]
        got = {tp.partition: tp.offset for tp in call("committed", self.consumer.committed, tps, CALL_TIMEOUT_S)}
        return got == self.ends

    def process(self, msg) -> None:
        p = msg.partition()
        if p in self.rewind_to:
            if msg.offset() != self.rewind_to[p]:
                if p not in self.sought:
                    self.seek(p)
                return                        # read before the rewind took effect: dropped
            del self.rewind_to[p]
        time.sleep(self.spec["work_s"])
        if not self.in_txn:
            self.producer.begin_transaction()
            self.in_txn = True
        self.producer.produce(self.topic_out, key=msg.key(), partition=p,
                              value=f"{p}:{msg.offset()}:".encode() + msg.value())
        self.producer.poll(0)
        self.pending[p] = msg.offset() + 1
        self.records += 1
        if self.records >= self.spec["commit_every"]:
            self.commit()

    def run(self) -> int:
        call("init_transactions", self.producer.init_transactions, CALL_TIMEOUT_S)
        self.consumer.subscribe([self.topic_in], on_revoke=self.on_revoke)
        say("started")
        while True:
            try:
                msg = self.consumer.poll(0.5)
                error = None if msg is None else msg.error()
                if error is not None:
                    if error.fatal():
                        raise Fatal(f"consumer: {error}")
                elif msg is not None:
                    self.process(msg)
                elif self.in_txn:
                    self.commit()             # nothing more came for a while
                elif self.finished():
                    say("done")
                    return 0
            except Abortable as exc:
                self.abort(str(exc))
                self.rewind()
            except KafkaException as exc:     # from begin_transaction() or produce()
                if exc.args[0].fatal():
                    raise Fatal(str(exc.args[0])) from exc
                self.abort(str(exc.args[0]))
                self.rewind()

    def close(self) -> None:
        self.consumer.close()
        self.producer.flush(10)


def main() -> int:
    faulthandler.register(signal.SIGUSR1)
    worker = Worker(json.loads(sys.argv[1]))
    try:
        code = worker.run()
    except Fatal as exc:
        say("fatal", error=str(exc))
        return 3
    worker.close()
    return code


if __name__ == "__main__":
    sys.exit(main())
