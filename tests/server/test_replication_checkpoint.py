"""``replication-offset-checkpoint`` written by a running broker as a one-broker Kafka writes it: created empty in
every log dir at start, each dir's high watermarks every ``replica.high.watermark.checkpoint.interval.ms``, and
the final ones at a clean stop (expected bytes spelled out from Kafka's ``CheckpointFile``: version, count, then
``topic partition offset``, each line ending in ``\\n``)."""
from __future__ import annotations

import os

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from storage_engine import layout
from tests.server.broker_proc import wait_until

pytestmark = pytest.mark.e2e

NAME = "replication-offset-checkpoint"


def _file(log_dir: str) -> bytes:
    with open(os.path.join(log_dir, NAME), "rb") as f:
        return f.read()


def _expected(log_dir: str, ends: dict[tuple[str, int], int]) -> bytes:
    here = sorted(tp for _, tp in layout.partition_dirs(log_dir))
    if not here:
        return b""
    return b"0\n%d\n" % len(here) + b"".join(b"%s %d %d\n" % (t.encode(), p, ends[(t, p)]) for t, p in here)


def test_high_watermarks_are_checkpointed_while_serving_and_at_a_clean_stop(broker_factory):
    b = broker_factory(broker={"replica.high.watermark.checkpoint.interval.ms": 100}, log_dirs=3)
    assert all(os.path.exists(os.path.join(d, NAME)) for d in b.log_dirs)       # created at start
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic("orders", 2, 1)])["orders"].result(30)
    producer = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 0})
    for i in range(5):
        producer.produce("orders", value=b"v%d" % i, partition=0)
    assert producer.flush(30) == 0
    ends = {("orders", 0): 5, ("orders", 1): 0}
    # the periodic checkpoint: each dir holding a partition of orders gets its high watermark
    wait_until("the high watermark of orders-0 in its dir's checkpoint",
               lambda: all(_file(d) == _expected(d, ends) for d in b.log_dirs if _expected(d, ends)))

    assert sum(bool(_expected(d, ends)) for d in b.log_dirs) in (1, 2)
    assert any(_file(d) == b"" for d in b.log_dirs)    # a dir with no partition: the empty file Kafka creates
    del producer, admin
    assert b.stop() == 0


def test_a_clean_stop_writes_the_last_high_watermarks(broker_factory):
    # an interval of an hour: the only writes are the one at start, made before the listener accepts a connection
    # (no partitions yet), and the stop's
    b = broker_factory(broker={"replica.high.watermark.checkpoint.interval.ms": 3_600_000}, log_dirs=1)
    producer = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 0})
    for i in range(3):
        producer.produce("auto-created", value=b"w%d" % i)
    assert producer.flush(30) == 0
    del producer
    assert b.stop() == 0
    partitions = [p for _, (t, p) in layout.partition_dirs(b.log_dirs[0]) if t == "auto-created"]
    ends = {("auto-created", p): 0 for p in partitions}
    ends[("auto-created", 0)] = 3        # num.partitions defaults to 1
    assert _file(b.log_dirs[0]) == _expected(b.log_dirs[0], ends)
