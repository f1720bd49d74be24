"""A group's members survive a restart of the broker, as in Kafka (``GroupMetadataManager`` loads a group Stable
with the members of its last record, each with a new session).

A static member (confluent-kafka, ``group.instance.id``) is assigned its partitions; the broker is killed with
SIGKILL and started again. The restarted broker describes the group Stable with the same member id, and the member,
heartbeating on, keeps that id and its assignment: no rebalance. Before this, the coordinator forgot every member
at start: each member's next heartbeat got UNKNOWN_MEMBER_ID and it rejoined under a new member id, and a
transactional worker's first TxnOffsetCommit after the restart (its group metadata from before it) was refused
with UNKNOWN_MEMBER_ID, so the worker aborted a transaction after every restart. A member that does not come back
still leaves the group once its session times out.

A static member whose own session ends while the broker is away (no heartbeat answered within
``session.timeout.ms``) is fenced by the restarted coordinator, as by Kafka's: librdkafka drops its member id and,
until the application's next poll serves the revocation, heartbeats with an empty member id and its
``group.instance.id``; the coordinator still holds the instance's member (restored, its session not over) and
answers FENCED_INSTANCE_ID (Kafka's ``isStaticMemberFenced``), a fatal error for the consumer. A new consumer with
the same instance id, as an application makes one, then takes the member's place and its partitions.
"""
from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, ConsumerGroupState, KafkaError
from confluent_kafka.admin import AdminClient, NewTopic

from tests.server.broker_proc import wait_until
from torture.txn import fenced_after_session_timeout
from torture.txn_worker import fatal_name

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


def test_a_static_member_whose_own_session_ends_while_the_broker_is_away_is_fenced_and_a_new_consumer_replaces_it(
        broker_factory, capfd):
    broker = broker_factory(broker={**BROKER, "group.min.session.timeout.ms": 1000})
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 0})
    for future in admin.create_topics([NewTopic("t", 2, 1)]).values():
        future.result(TIMEOUT)
    config = {"bootstrap.servers": broker.bootstrap, "group.id": "g", "group.instance.id": "static-1",
              "session.timeout.ms": 5000, "heartbeat.interval.ms": 300, "reconnect.backoff.max.ms": 200,
              "metadata.recovery.strategy": "none", "log_level": 4}      # warnings and worse on stderr
    assigned: list[list[int]] = []
    consumer = Consumer(config)
    consumer.subscribe(["t"], on_assign=lambda _c, tps: assigned.append(sorted(tp.partition for tp in tps)))
    stderr: list[str] = []

    def logged(facility: str) -> bool:
        """Whether librdkafka has logged ``facility`` (its log lines: ``%<level>|<time>|<facility>|...``)."""
        stderr.append(capfd.readouterr().err)
        return any(f"|{facility}|" in line for chunk in stderr for line in chunk.splitlines())

    try:
        wait_until("the member's assignment", lambda: consumer.poll(0.1) is None and assigned, TIMEOUT)
        state, before = members(broker, "g")
        assert state == ConsumerGroupState.STABLE and list(before.values()) == [[0, 1]], (state, before)

        broker.kill()
        # the application does not poll meanwhile (as a worker blocked in a transaction's calls): the revocation
        # that follows the session's end waits for it, and the heartbeats go on
        wait_until("the consumer's own session timeout", lambda: logged("SESSTMOUT"), TIMEOUT)
        assert not logged("FATAL")
        broker.restart()
        wait_until("the consumer's fatal error", lambda: logged("FATAL"), TIMEOUT)
        errors = [m.error() for m in consumer.consume(10, 1.0)]
        fatal = [e for e in errors if e is not None and e.code() == KafkaError._FATAL]
        assert fatal and KafkaError(KafkaError.FENCED_INSTANCE_ID).str() in fatal[0].str(), errors
        # what the transaction torture's worker and harness make of it: the fence named, its cause seen
        assert fatal_name(fatal[0]) == "FENCED_INSTANCE_ID"
        assert fenced_after_session_timeout("".join(stderr))
    finally:
        consumer.close()

    # an application's new consumer with the same group.instance.id takes the member's place
    assigned.clear()
    replacement = Consumer(config)
    replacement.subscribe(["t"], on_assign=lambda _c, tps: assigned.append(sorted(tp.partition for tp in tps)))
    try:
        wait_until("the new consumer's assignment", lambda: replacement.poll(0.1) is None and assigned, TIMEOUT)
        state, after = members(broker, "g")
        assert state == ConsumerGroupState.STABLE and list(after.values()) == [[0, 1]], (state, after)
        assert list(after) != list(before), "the new consumer has a member id of its own"
    finally:
        replacement.close()
