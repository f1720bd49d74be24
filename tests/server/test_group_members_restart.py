"""A group's members survive a restart of the broker, as in Kafka (``GroupMetadataManager`` loads a group Stable
with the members of its last record, each with a new session).

A static member (confluent-kafka, ``group.instance.id``) is assigned its partitions; the broker is killed with
SIGKILL and started again. The restarted broker describes the group Stable with the same member id, and the member,
heartbeating on, keeps that id and its assignment: no rebalance. Before this, the coordinator forgot every member
at start: each member's next heartbeat got UNKNOWN_MEMBER_ID and it rejoined under a new member id, and a
transactional worker's first TxnOffsetCommit after the restart (its group metadata from before it) was refused
with UNKNOWN_MEMBER_ID, so the worker aborted a transaction after every restart. A member that does not come back
still leaves the group once its session times out.
"""
from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, ConsumerGroupState
from confluent_kafka.admin import AdminClient, NewTopic

from tests.server.broker_proc import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.kills]

TIMEOUT = 60.0
BROKER = {"offsets.topic.num.partitions": 3, "group.initial.rebalance.delay.ms": 0}
SESSION_MS = 6000


def describe(broker, group: str):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 0})
    return admin.describe_consumer_groups([group])[group].result(TIMEOUT)


def members(broker, group: str) -> tuple[ConsumerGroupState, dict[str, list[int]]]:
    d = describe(broker, group)
    return d.state, {m.member_id: sorted(tp.partition for tp in m.assignment.topic_partitions) for m in d.members}


def test_a_member_keeps_its_id_and_assignment_across_a_broker_kill_and_a_gone_one_expires(broker_factory):
    broker = broker_factory(broker=BROKER)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 0})
    for future in admin.create_topics([NewTopic("t", 2, 1)]).values():
        future.result(TIMEOUT)
    assigned: list[list[int]] = []
    # no re-bootstrap when the only broker dies (librdkafka's default would forget the coordinator; txn_worker.py)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g", "group.instance.id": "static-1",
                         "session.timeout.ms": SESSION_MS, "heartbeat.interval.ms": 300,
                         "reconnect.backoff.max.ms": 200, "metadata.recovery.strategy": "none", "log_level": 0})
    consumer.subscribe(["t"], on_assign=lambda _c, tps: assigned.append(sorted(tp.partition for tp in tps)))
    try:
        wait_until("the member's assignment", lambda: consumer.poll(0.1) is None and assigned, TIMEOUT)
        state, before = members(broker, "g")
        assert state == ConsumerGroupState.STABLE and list(before.values()) == [[0, 1]], (state, before)

        broker.kill()
        broker.restart()
        # the restarted broker knows the member before it has said anything
        state, after = members(broker, "g")
        assert (state, after) == (ConsumerGroupState.STABLE, before)
        # heartbeats go on for several intervals: the member keeps its id, nothing is reassigned
        end = time.monotonic() + 3.0
        while time.monotonic() < end:
            consumer.poll(0.1)
        state, after = members(broker, "g")
        assert (state, after) == (ConsumerGroupState.STABLE, before), "the member rejoined after the restart"
        assert assigned == [[0, 1]], f"rebalanced after the restart: {assigned}"
    finally:
        consumer.close()        # a static member's close does not leave the group: its session must expire

    broker.kill()
    broker.restart()
    state, after = members(broker, "g")
    assert (state, after) == (ConsumerGroupState.STABLE, before)
    wait_until("the gone member's session to expire",
               lambda: members(broker, "g") == (ConsumerGroupState.EMPTY, {}), SESSION_MS / 1000 + TIMEOUT)
    # ... which the broker records: after another restart the group is still empty
    broker.kill()
    broker.restart()
    assert members(broker, "g") == (ConsumerGroupState.EMPTY, {})
