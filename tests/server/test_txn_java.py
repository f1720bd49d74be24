"""Exactly-once consume-transform-produce on Kafka's own Java client across broker restarts.

java/TxnWorker.java (kafka-clients 3.9.1: a KafkaConsumer, ``read_committed``, in a group with a
``group.instance.id``; a transactional KafkaProducer committing every 50 records with ``sendOffsetsToTransaction``)
turns 3,000 numbered input records on 3 partitions into output records while the test restarts the broker
(tests/server/broker_proc.py) four times on the same port, by SIGKILL and by SIGTERM in turn, each once the
worker has committed since the previous restart. After each restart the worker must commit a transaction again
(a bounded wait: a stalled ``sendOffsetsToTransaction`` fails the test naming the restart, with the worker's
events and stderr). At the end ``read_committed`` shows every input record exactly once, in input order per
partition, the group's committed offsets are the input's ends, and no TxnOffsetCommit was refused for an unknown
member (the coordinator keeps its members across restarts). The worker is compiled from source with the
machine's ``javac`` if its classes are missing (tests/server/java/build.py); the jars come from the pinned
``shigawire-apache-flink-libraries`` package. tests/server/java/restarts.py is the long version, which also runs
librdkafka's worker the same way.
"""
from __future__ import annotations

import random
import time

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions
from confluent_kafka.admin import AdminClient

from tests.server.broker_proc import wait_until
from tests.server.java import build
from tests.server.java.restarts import (BROKER, Worker, create_topics, exactly_once, fill_input, read_committed,
                                        worker_for)

pytestmark = [pytest.mark.slow, pytest.mark.kills]

PARTITIONS = 3
RECORDS = 3000
RESTARTS = 4
WAIT_S = 90.0        # for a commit after a restart: a stall in sendOffsetsToTransaction lasts for ever
SEED = 37


@pytest.fixture(scope="module")
def java_worker_built():
    try:
        build.tools()
    except build.JavaUnavailable as exc:   # `make clients` installs Debian's JDK: a missing one is a failure, not a skip
        pytest.fail(f"{exc} (make clients installs it)")
    return build.build()          # a missing jar is an error naming the package to install, not a skip


def test_java_client_commits_after_every_broker_restart_and_stays_exactly_once(java_worker_built, broker_factory,
                                                                               tmp_path):
    rng = random.Random(SEED)
    broker = broker_factory(broker=BROKER)
    create_topics(broker.bootstrap, **{"in": PARTITIONS, "out": PARTITIONS})
    ends = fill_input(broker.bootstrap, "in", PARTITIONS, RECORDS)
    spec = {"bootstrap": broker.bootstrap, "input": "in", "output": "out", "ends": ends, "group": "java-eos",
            "instance": "java-worker", "transactional_id": "java-worker", "commit_every": 50, "work_s": 0.002}
    worker: Worker = worker_for("java", spec, None, tmp_path)
    after_restart: list[float] = []      # seconds from the broker serving again to the worker's next commit
    worker.start()
    try:
        for i in range(RESTARTS):
            before = worker.commits()
            wait_until(f"a commit before restart {i}", lambda: worker.alive() and worker.commits() > before, WAIT_S)
            time.sleep(rng.uniform(0, 0.3))
            if i % 2 == 0:
                broker.kill()
            else:
                assert broker.stop() == 0, f"restart {i}: the broker's SIGTERM stop did not exit 0"
            time.sleep(rng.uniform(0, 0.5))
            broker.restart()
            served = time.monotonic()
            deadline = served + WAIT_S
            while not worker.commits_since(served):
                assert time.monotonic() < deadline, (
                    f"restart {i} ({'SIGKILL' if i % 2 == 0 else 'SIGTERM'}): no transaction committed within "
                    f"{WAIT_S:.0f} s of the broker serving again: {worker.report()}")
                assert worker.alive()
                time.sleep(0.1)
            after_restart.append(round(worker.commits_since(served)[0]["t"] - served, 2))
        wait_until("the worker to finish", lambda: worker.exited() is not None, 300)
        assert worker.exited() == 0, f"the worker exited with {worker.exited()}: {worker.report()}"
    finally:
        worker.kill()
    assert worker.runs == 1 and broker.runs == 1 + RESTARTS
    assert [e for e in worker.events if e["event"] == "fatal"] == []
    # The group coordinator keeps its members across a restart: the group metadata the worker had before it is
    # still current, so no TxnOffsetCommit is refused for an unknown member (each restart cost an abort before).
    refused = [e["reason"] for e in worker.events if e["event"] == "aborted" and "not aware of this member" in
               e["reason"]]
    assert refused == [], refused
    assert worker.events[-1]["event"] == "done"
    print(f"java worker: first commit after each restart {after_restart} s; "
          f"{sum(e['event'] == 'committed' for e in worker.events)} transactions committed, "
          f"{sum(e['event'] == 'aborted' for e in worker.events)} aborted")

    output = read_committed(broker.bootstrap, "out", PARTITIONS)
    assert sum(map(len, output.values())) == RECORDS, {q: len(v) for q, v in output.items()}
    assert exactly_once(output, ends, PARTITIONS) == {"lost": 0, "duplicated": 0, "in_order": True}
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 0})
    got = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions("java-eos")])["java-eos"].result(60)
    assert {(tp.topic, tp.partition): tp.offset for tp in got.topic_partitions} == \
        {("in", q): ends[q] for q in range(PARTITIONS)}
    assert broker.stop() == 0
