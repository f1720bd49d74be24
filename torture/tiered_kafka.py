"""The Kafka client of a tiered torture trial (:mod:`torture.tiered`): ``python -m torture.tiered_kafka kafka-consumer
--bootstrap HOST:PORT --log-dir DIR --stop-file F [options]``.

A librdkafka consumer (confluent-kafka; no group, CRCs checked by the client) reading every tiered topic from
offset 0 through the trial's ``serve`` broker, over and over, while the broker itself, the tier job, the appender
and the object store are killed. Each round assigns both partitions at offset 0 and reads up to the high watermark
the broker gave at the round's start, so every round crosses the part that lives only in the object store. It
checks what it reads itself:

* offsets rise by one without a gap from where the round started (a record delivered twice must have the value
  first delivered);
* every value is an intact self-checking payload (:func:`torture.child.payload_ok`);
* an offset always has the same value, across rounds and broker restarts (nothing handed out is taken back);
* ``auto.offset.reset`` is ``error``: the broker answering OFFSET_OUT_OF_RANGE is accepted only when the log start
  offset it then reports (ListOffsets EARLIEST) is past the offset asked for (remote retention of
  ``tiered-retained`` deleted it), and the round goes on from there; for ``tiered``, where nothing expires, or
  for an offset the broker still says it holds, it is a ``BAD`` line;
* CORRUPT_MESSAGE (librdkafka's INVALID_MSG) or a CRC the client rejects (_BAD_MSG) is a ``BAD`` line; other errors (the broker or the object store
  being down: transport errors, KAFKA_STORAGE_ERROR) are counted and the client retries, as an application does.

Prints ``READY``; after each round with records ``ROUND <records> <of them below the local log start>`` (the local
log start is the lowest ``.log`` file of the partition's folder when the round starts: whatever the broker served
below it came from the object store); ``RESET <topic> <from> <to>``; ``ERR <code name>`` once per distinct error;
``BAD <reason>``; ``DONE`` at the end.
"""
from __future__ import annotations

import argparse
import hashlib
import sys
import time
from pathlib import Path
from typing import Any

from torture.child import Stop, payload_ok
from torture.tiered_child import TOPICS, TIERED

ROUND_TIMEOUT_S = 5.0     # a ListOffsets that gets no answer (the broker is down) is asked again


def local_log_start(log_dir: Path, topic: str) -> int | None:
    """The base offset of the partition's lowest local segment (None while it has none listed)."""
    bases = [int(p.name[:-4]) for p in (log_dir / f"{topic}-0").glob("*.log") if p.name[:-4].isdigit()]
    return min(bases) if bases else None


class Reader:
    """One librdkafka consumer and what it has seen: {topic: {offset: value digest}}."""

    def __init__(self, bootstrap: str, tag: str):
        from confluent_kafka import Consumer
        self.consumer: Any = Consumer({
            "bootstrap.servers": bootstrap, "group.id": f"tiered-torture-{tag}", "enable.auto.commit": False,
            "enable.auto.offset.store": False, "auto.offset.reset": "error", "check.crcs": True,
            "fetch.max.bytes": 1024 * 1024, "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 500,
            "socket.connection.setup.timeout.ms": 5000, "log_level": 0})
        self.seen: dict[str, dict[int, bytes]] = {t: {} for t in TOPICS}
        self.errors: set[str] = set()

    def watermarks(self, topic: str, stop: Stop) -> tuple[int, int] | None:
        from confluent_kafka import KafkaException, TopicPartition
        while not stop():
            try:
                low, high = self.consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=ROUND_TIMEOUT_S)
                return int(low), int(high)
            except KafkaException as exc:
                self.note_error(exc.args[0].name())
                time.sleep(0.1)
        return None

    def note_error(self, name: str) -> None:
        if name not in self.errors:
            self.errors.add(name)
            print(f"ERR {name}", flush=True)

    def assign(self, positions: dict[str, int]) -> None:
        from confluent_kafka import TopicPartition
        self.consumer.assign([TopicPartition(t, 0, o) for t, o in positions.items()])

    def round(self, log_dir: Path, stop: Stop) -> str | None:
        """One round over every topic; returns a BAD reason, or None."""
        from confluent_kafka import KafkaError
        ends: dict[str, int] = {}
        local_start: dict[str, int | None] = {}
        for topic in TOPICS:
            marks = self.watermarks(topic, stop)
            if marks is None:
                return None
            ends[topic] = marks[1]
            local_start[topic] = local_log_start(log_dir, topic)
        nxt = {t: 0 for t in TOPICS}
        self.assign(nxt)
        read = remote = 0
        while not stop() and any(nxt[t] < ends[t] for t in TOPICS):
            msg = self.consumer.poll(0.5)
            if msg is None:
                continue
            err = msg.error()
            if err is not None:
                code = err.code()
                if code == KafkaError._AUTO_OFFSET_RESET or code == KafkaError.OFFSET_OUT_OF_RANGE:
                    topic = msg.topic() or ""
                    if topic not in nxt:        # the error names no partition: find which one stalled
                        return f"offset out of range without a partition: {err}"
                    failed = msg.offset()
                    if failed is not None and 0 <= failed < nxt[topic]:
                        # librdkafka names the offset whose fetch failed: one below where this round already
                        # is was asked before a RESET moved on (a fetch in flight then); nothing to check again.
                        continue
                    bad = self.reset(topic, nxt, stop)
                    if bad:
                        return bad
                    continue
                if code in (KafkaError.INVALID_MSG, KafkaError._BAD_MSG):
                    return f"{msg.topic()}: {err.name()} at offset {msg.offset()}: {err.str()}"
                self.note_error(err.name())
                continue
            topic, offset, value = msg.topic(), msg.offset(), msg.value()
            if not payload_ok(value):
                return f"{topic}: damaged value at offset {offset}"
            dig = hashlib.sha256(value).digest()
            first = self.seen[topic].setdefault(offset, dig)
            if first != dig:
                return f"{topic}: offset {offset} handed out with another value than before"
            if offset < nxt[topic]:
                continue                         # delivered again (after a reconnect): the same value, checked
            if offset != nxt[topic]:
                return f"{topic}: offset {offset} after {nxt[topic] - 1}: a gap"
            nxt[topic] = offset + 1
            read += 1
            start = local_start[topic]
            remote += start is not None and offset < start
        if read:
            print(f"ROUND {read} {remote}", flush=True)
        return None

    def reset(self, topic: str, nxt: dict[str, int], stop: Stop) -> str | None:
        """OFFSET_OUT_OF_RANGE at ``nxt[topic]``: fine only if the log start moved past it (then go on there)."""
        marks = self.watermarks(topic, stop)
        if marks is None:
            return None
        low, high = marks
        if topic == TIERED or low <= nxt[topic]:
            return (f"{topic}: offset {nxt[topic]} answered OFFSET_OUT_OF_RANGE, but the broker reports the log "
                    f"as [{low}, {high})")
        print(f"RESET {topic} {nxt[topic]} {low}", flush=True)
        nxt[topic] = low
        self.assign(nxt)
        return None


def consumer(args: argparse.Namespace) -> None:
    stop = Stop(args.stop_file, args.seconds)
    reader = Reader(args.bootstrap, args.tag)
    print("READY", flush=True)
    try:
        while not stop():
            bad = reader.round(Path(args.log_dir), stop)
            if bad:
                print(f"BAD {bad}", flush=True)
            time.sleep(args.pause_s)
    finally:
        reader.consumer.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m torture.tiered_kafka")
    p.add_argument("role", choices=["kafka-consumer"])
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--log-dir", required=True)
    p.add_argument("--stop-file", required=True)
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--tag", default="k")
    p.add_argument("--pause-s", type=float, default=0.05)
    args = p.parse_args(argv)
    consumer(args)
    print("DONE", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
