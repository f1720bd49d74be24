"""Consumer groups with confluent-kafka (librdkafka, the classic protocol) against a real broker process.

* Three members subscribed to a 6-partition topic share it: every partition goes to exactly one member (what
  each client reports, what DescribeGroups says, and which member reads the records produced afterwards); a
  fourth member joining and one leaving each cause a rebalance after which the partitions are again covered
  exactly once. A member in another process killed with SIGKILL (no LeaveGroup) is dropped when its session
  times out, and the others take over its partitions. A second process with the group.instance.id of a live
  member takes its place and the first is fenced (FENCED_INSTANCE_ID), once.
* Commits and resume: a group processes the first half of every partition, committing each record synchronously,
  and closes; the broker is killed with SIGKILL and restarted; a new member resumes exactly at the committed
  offsets (it reads the uncommitted half, nothing before it and nothing skipped). ``__consumer_offsets`` (small
  segments, so the many commits roll several) is then compacted by the engine's ``compact`` command in another
  process; the latest commit per key survives, and after another restart a new member still resumes there.
* The AdminClient: list_consumer_groups (with and without a state filter), describe_consumer_groups,
  list_consumer_group_offsets and delete_consumer_groups (a group with members gives NON_EMPTY_GROUP; an empty
  one loses its offsets, which stay gone after a restart, and tombstones are stored); listing by type finds
  every group classic.

Members run in threads of the test process, each with its own Consumer (the killed one in a process of its own).
"""
from __future__ import annotations

import base64
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.server.broker_proc import wait_until as _wait_until
from confluent_kafka import (Consumer, ConsumerGroupState, ConsumerGroupTopicPartitions, ConsumerGroupType,
                             KafkaError, KafkaException, Producer, TopicPartition)
from confluent_kafka.admin import AdminClient, NewTopic

from storage_engine.server.groups import records as rec
from tests.typed import present

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 60.0
OFFSETS_TOPIC = "__consumer_offsets"
OFFSETS_PARTITIONS = 3
# Few offsets partitions, a short first-rebalance delay, and segments small enough that a few dozen commits
# roll several of them (so compaction has something to clean).
BROKER = {"offsets.topic.num.partitions": OFFSETS_PARTITIONS, "group.initial.rebalance.delay.ms": 300,
          "offsets.topic.segment.bytes": 1024}
# The broker's minimum session timeout; frequent heartbeats so that members learn of a rebalance quickly; the
# rebalance timeout (max.poll.interval.ms) bounds how long a rebalance waits for a member that is gone.
MEMBER_CONF = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 500, "max.poll.interval.ms": 15000,
               "auto.offset.reset": "earliest", "enable.auto.commit": False}


# -- the engine, the broker and the clients ----------------------------------------------------------------------

def engine(broker, *args: str) -> list[dict]:
    """``python -m storage_engine --config CFG <args>`` in its own process; its JSON output lines."""
    proc = subprocess.run([sys.executable, "-m", "storage_engine", "--config", str(broker.config_path), *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"{args}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]


def stored_offset_records(broker, group: str) -> list[tuple[int, object, bytes | None]]:
    """(offset, parsed key, raw value) of every record of ``group``'s ``__consumer_offsets`` partition, read by
    the engine in another process."""
    partition = rec.partition_for(group, OFFSETS_PARTITIONS)
    out: list[tuple[int, object, bytes | None]] = []
    for r in engine(broker, "consume", "--topic", OFFSETS_TOPIC, "--partition", str(partition),
                    "--encoding", "base64"):
        key = rec.parse_key(base64.b64decode(r["key"]))
        if getattr(key, "group", None) == group:
            out.append((r["offset"], key, None if r["value"] is None else base64.b64decode(r["value"])))
    return out


def latest_commits(records: list[tuple[int, object, bytes | None]]) -> dict[tuple[str, int], int | None]:
    """The last committed offset per (topic, partition) in stored records; None where a tombstone is last."""
    out: dict[tuple[str, int], int | None] = {}
    for _, key, value in records:
        if isinstance(key, rec.OffsetKey):
            out[(key.topic, key.partition)] = None if value is None else rec.parse_offset_value(value).offset
    return out


def offsets_partition_info(broker, group: str) -> dict:
    partition = rec.partition_for(group, OFFSETS_PARTITIONS)
    [out] = engine(broker, "describe", "--topic", OFFSETS_TOPIC, "--partition", str(partition))
    [info] = [p for d in out["log_dirs"] for p in d["partitions"]]
    return info


def create_topic(admin: AdminClient, name: str, partitions: int) -> None:
    for future in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        future.result(TIMEOUT)


def produce(broker, topic: str, records: list[tuple[int, bytes, bytes]]) -> None:
    """(partition, key, value) records, in order, acks=all; every one must be delivered."""
    errors: list = []
    p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 5})
    for partition, key, value in records:
        p.produce(topic, key=key, value=value, partition=partition,
                  on_delivery=lambda err, _msg: errors.append(err) if err is not None else None)
    assert p.flush(TIMEOUT) == 0
    assert errors == []


def describe(admin: AdminClient, group: str):
    return admin.describe_consumer_groups([group])[group].result(TIMEOUT)


def committed(admin: AdminClient, group: str) -> dict[tuple[str, int], int]:
    """The group's committed offsets as the admin API lists them (every partition it has an offset for)."""
    result = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(TIMEOUT)
    assert result.group_id == group
    return {(tp.topic, tp.partition): tp.offset for tp in result.topic_partitions if tp.error is None}


def wait_until(what: str, check, timeout: float = TIMEOUT):
    return _wait_until(what, check, timeout)


class Member(threading.Thread):
    """One consumer of ``group`` in its own thread. It polls until :meth:`leave`, publishing its member id, its
    assignment (after every poll) and the records it read. With ``process_below`` it takes records below that
    offset as processed and commits each synchronously (retrying a commit a rebalance refused, while it still
    owns the partition); it commits nothing else."""

    def __init__(self, broker, group: str, topic: str, name: str, *, process_below: int | None = None,
                 **conf: str):
        super().__init__(name=name, daemon=True)
        self.conf = {"bootstrap.servers": broker.bootstrap, "group.id": group, "client.id": name, **MEMBER_CONF,
                     **conf, "error_cb": self._client_error}
        self.topic = topic
        self.process_below = process_below
        self.member_id: str | None = None
        self.assignment: list[int] = []
        self.read: list[tuple[int, int, bytes]] = []     # (partition, offset, value)
        self.commit_failures: list[str] = []
        self.errors: list[str] = []
        self._quit = threading.Event()

    def _client_error(self, err: KafkaError) -> None:
        """librdkafka's error callback: a fatal error, or any but a lost connection (which it retries)."""
        if err.fatal() or err.code() not in (KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN):
            self.errors.append(str(err))

    def run(self) -> None:
        c = Consumer(self.conf)
        pending: dict[int, int] = {}         # partition -> offset to commit
        try:
            c.subscribe([self.topic])
            while not self._quit.is_set():
                msg = c.poll(0.1)
                assignment = sorted(tp.partition for tp in c.assignment())
                self.member_id, self.assignment = c.memberid(), assignment
                if msg is not None:
                    if msg.error():
                        if present(msg.error()).code() != KafkaError._PARTITION_EOF:
                            self.errors.append(str(msg.error()))
                    else:
                        self.read.append((present(msg.partition()), present(msg.offset()), present(msg.value())))
                        if self.process_below is not None and present(msg.offset()) < self.process_below:
                            pending[present(msg.partition())] = present(msg.offset()) + 1
                pending = {p: o for p, o in pending.items() if p in assignment}   # a new owner re-reads the rest
                if pending:
                    try:
                        done = c.commit(offsets=[TopicPartition(self.topic, p, o) for p, o in pending.items()],
                                        asynchronous=False)
                        failed = [tp for tp in done or () if tp.error is not None]
                        if failed:
                            self.commit_failures.append(str(failed))
                        else:
                            pending = {}
                    except KafkaException as exc:      # e.g. REBALANCE_IN_PROGRESS: try again after the rejoin
                        self.commit_failures.append(str(exc))
        finally:
            c.close()                                  # sends LeaveGroup

    def leave(self) -> None:
        self._quit.set()
        self.join(TIMEOUT)
        assert not self.is_alive(), f"{self.name} did not close"


def wait_balanced(admin: AdminClient, group: str, members: list[Member], partitions: int) -> dict[str, list[int]]:
    """Until the members' own assignments are disjoint, none empty, and cover every partition, and the broker
    describes the group as Stable with exactly these members holding exactly these partitions."""
    last: dict = {}

    def balanced():
        snap = {m.name: (m.member_id, list(m.assignment)) for m in members}
        last["clients"] = snap
        owned = sorted(p for _, parts in snap.values() for p in parts)
        if owned != list(range(partitions)) or not all(parts for _, parts in snap.values()):
            return None
        d = describe(admin, group)
        described = {md.member_id: sorted(tp.partition for tp in md.assignment.topic_partitions)
                     for md in d.members}
        last["broker"] = (d.state, described)
        if d.state != ConsumerGroupState.STABLE or described != {mid: parts for mid, parts in snap.values()}:
            return None
        return {name: parts for name, (_, parts) in snap.items()}

    try:
        return wait_until(f"{group} to settle on {len(members)} members", balanced)
    except AssertionError as exc:
        errors = {m.name: m.errors for m in members if m.errors}
        raise AssertionError(f"{exc}; last seen {last}; client errors {errors}") from None


# -- membership and rebalances ---------------------------------------------------------------------------------

def test_three_members_share_six_partitions_and_rebalance_when_a_fourth_joins_and_one_leaves(broker_factory):
    broker = broker_factory(broker=BROKER)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    create_topic(admin, "shared", 6)
    group = "sharers"
    members = [Member(broker, group, "shared", f"member-{i}") for i in range(3)]
    for m in members:
        m.start()
    try:
        first = wait_balanced(admin, group, members, 6)
        assert sorted(len(p) for p in first.values()) == [2, 2, 2]        # range: 6 partitions over 3
        d = describe(admin, group)
        assert d.partition_assignor == "range" and not d.is_simple_consumer_group
        assert sorted(md.client_id for md in d.members) == ["member-0", "member-1", "member-2"]

        fourth = Member(broker, group, "shared", "member-3")
        fourth.start()
        members.append(fourth)
        second = wait_balanced(admin, group, members, 6)
        assert sorted(len(p) for p in second.values()) == [1, 1, 2, 2]
        assert second["member-3"]

        leaving = members.pop(0)
        leaving.leave()                     # LeaveGroup: the others rebalance at once, no session timeout
        third = wait_balanced(admin, group, members, 6)
        assert sorted(len(p) for p in third.values()) == [2, 2, 2]
        assert len({m.member_id for m in members}) == 3

        # The records produced now are read by the member owning their partition, and only by it.
        produce(broker, "shared", [(p, b"marker", b"marker-%d" % p) for p in range(6)])

        def markers():
            seen = {m.name: sorted(p for p, _, v in m.read if v == b"marker-%d" % p) for m in members}
            return seen if sum(len(v) for v in seen.values()) >= 6 else None
        seen = wait_until("every marker to be read", markers)
        assert seen == third
        assert all(m.errors == [] for m in members)
    finally:
        for m in members:
            if m.is_alive():
                m.leave()
    d = wait_until("the group to empty", lambda: (lambda d: d if d.state == ConsumerGroupState.EMPTY else None)(
        describe(admin, group)))
    assert d.members == []


_CHILD_MEMBER = """
import json, sys
from confluent_kafka import Consumer
conf, topic = json.loads(sys.argv[1]), sys.argv[2]
c = Consumer(conf)
c.subscribe([topic])
while True:
    c.poll(0.2)
"""


@pytest.mark.kills
def test_a_member_killed_with_sigkill_leaves_the_group_when_its_session_times_out(broker_factory):
    broker = broker_factory(broker=BROKER)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    create_topic(admin, "watched", 6)
    group = "watchers"
    members = [Member(broker, group, "watched", f"member-{i}") for i in range(2)]
    for m in members:
        m.start()
    conf = {"bootstrap.servers": broker.bootstrap, "group.id": group, "client.id": "doomed", **MEMBER_CONF}
    child = subprocess.Popen([sys.executable, "-c", _CHILD_MEMBER, json.dumps(conf), "watched"], cwd=ROOT)
    try:
        def three_stable():
            d = describe(admin, group)
            if d.state != ConsumerGroupState.STABLE or len(d.members) != 3:
                return None
            held = {md.client_id: sorted(tp.partition for tp in md.assignment.topic_partitions) for md in d.members}
            mine = {m.name: m.assignment for m in members}
            return held if all(held.get(name) == parts for name, parts in mine.items()) else None
        held = wait_until("three members, one in another process", three_stable)
        assert sorted(p for parts in held.values() for p in parts) == list(range(6)) and held["doomed"]

        # SIGKILL: no LeaveGroup; the member stops heartbeating and the coordinator drops it after
        # session.timeout.ms, after which the two others share every partition.
        child.kill()
        child.wait(TIMEOUT)
        after = wait_balanced(admin, group, members, 6)
        assert sorted(len(p) for p in after.values()) == [3, 3]
        assert "no heartbeat within 6000 ms" in broker.log_text()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(TIMEOUT)
        for m in members:
            m.leave()


def test_a_second_process_with_the_same_group_instance_id_fences_the_first(broker_factory):
    """Static membership (KIP-345): a member that joins with the group.instance.id of a live member takes its
    place, and the older one is told FENCED_INSTANCE_ID (a fatal error for librdkafka) instead of rejoining and
    taking the place back in turn."""
    broker = broker_factory(broker=BROKER)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    create_topic(admin, "static", 2)
    group = "statics"
    first = Member(broker, group, "static", "first", **{"group.instance.id": "instance-1"})  # type: ignore[arg-type]  # a librdkafka setting (its name has dots), never process_below
    first.start()
    second = None
    try:
        wait_balanced(admin, group, [first], 2)
        second = Member(broker, group, "static", "second", **{"group.instance.id": "instance-1"})  # type: ignore[arg-type]  # a librdkafka setting (its name has dots), never process_below
        second.start()
        wait_until("the first member to be fenced", lambda: any("fenced" in e for e in first.errors))
        settled = wait_balanced(admin, group, [second], 2)
        assert settled == {"second": [0, 1]}
        # It stays settled: the fenced member does not come back (with UNKNOWN_MEMBER_ID it would rejoin, take
        # the instance's place back, and the two would alternate).
        member_id = second.member_id
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            d = describe(admin, group)
            assert [(md.member_id, md.group_instance_id) for md in d.members] == [(member_id, "instance-1")]
            assert d.state == ConsumerGroupState.STABLE
            time.sleep(0.25)
        assert second.member_id == member_id and second.errors == []
        # Stored: the group's record names the instance with the second member's id; the client id stays the
        # first one's, as Kafka's replaceStaticMember keeps the replaced member's client id and host.
        [*_, (_, _, value)] = [r for r in stored_offset_records(broker, group) if isinstance(r[1], rec.GroupKey)]
        [member] = rec.parse_group_value(present(value)).members
        assert (member.member_id, member.group_instance_id, member.client_id) == (member_id, "instance-1", "first")
    finally:
        for m in (first, second):
            if m is not None and m.is_alive():
                m.leave()


# -- commits, resume after SIGKILL, compaction of __consumer_offsets --------------------------------------------

def resume(broker, group: str, topic: str, partitions: int, start: int, end: int) -> dict[int, list[int]]:
    """A new member of ``group`` reads ``topic`` until it has every offset in [start, end) of each partition;
    the offsets it read, per partition (it commits nothing)."""
    m = Member(broker, group, topic, "resumer")
    m.start()
    try:
        def complete():
            got = {p: {o for q, o, _ in m.read if q == p} for p in range(partitions)}
            return all(set(range(start, end)) <= got[p] for p in range(partitions))
        wait_until(f"{group} to read [{start}, {end}) of every partition", complete)
    finally:
        m.leave()
    assert m.errors == []
    return {p: [o for q, o, _ in m.read if q == p] for p in range(partitions)}


@pytest.mark.kills
def test_group_commits_survive_sigkill_and_compaction_and_a_new_member_resumes_at_them(broker_factory):
    broker = broker_factory(broker=BROKER)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    topic, group, parts, n, half = "ledger", "ledger-readers", 6, 10, 5
    create_topic(admin, topic, parts)
    produce(broker, topic, [(p, b"k%d" % i, b"%d/%d" % (p, i)) for i in range(n) for p in range(parts)])

    # Two members process the first half of every partition, committing each record; then they close.
    members = [Member(broker, group, topic, f"worker-{i}", process_below=half) for i in range(2)]
    for m in members:
        m.start()
    try:
        want = {(topic, p): half for p in range(parts)}
        wait_until("every partition committed at its half", lambda: committed(admin, group) == want)
    finally:
        for m in members:
            m.leave()
    assert all(m.errors == [] for m in members)
    assert committed(admin, group) == want

    stored = stored_offset_records(broker, group)
    assert latest_commits(stored) == want
    commits = [r for r in stored if isinstance(r[1], rec.OffsetKey)]
    assert len(commits) >= 2 * parts                      # one per processed record, some merged by retries
    before = offsets_partition_info(broker, group)
    assert len(before["segments"]) >= 3, before["segments"]

    # SIGKILL, restart: the coordinator rebuilds the offsets from __consumer_offsets.
    broker.kill()
    broker.restart()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    assert committed(admin, group) == want
    read = resume(broker, group, topic, parts, half, n)
    assert read == {p: list(range(half, n)) for p in range(parts)}, read
    assert committed(admin, group) == want                # the resumer committed nothing

    # Compaction in another process while the broker serves: the latest record per key survives.
    [report] = engine(broker, "compact", "--topic", OFFSETS_TOPIC)
    assert report["failed"] == [], report
    partition = rec.partition_for(group, OFFSETS_PARTITIONS)
    [result] = [r for r in report["results"] if r["partition"] == partition]
    assert result["stats"]["records_removed"] > 0 and result["size_bytes_after"] < result["size_bytes_before"]
    compacted = stored_offset_records(broker, group)
    assert len(compacted) < len(stored)
    assert latest_commits(compacted) == want
    # Below the active segment (which the cleaner leaves alone) every key appears once.
    active_base = offsets_partition_info(broker, group)["segments"][-1]["base_offset"]
    cleaned_keys = [key for offset, key, _ in compacted if offset < active_base]
    assert len(cleaned_keys) == len(set(cleaned_keys))

    # A clean stop and a restart: the compacted topic still holds the commits.
    assert broker.stop() == 0
    broker.restart()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    assert committed(admin, group) == want
    read = resume(broker, group, topic, parts, half, n)
    assert read == {p: list(range(half, n)) for p in range(parts)}, read


# -- the admin APIs ------------------------------------------------------------------------------------------------

def listed(admin: AdminClient, **kwargs) -> dict[str, ConsumerGroupState]:
    result = admin.list_consumer_groups(request_timeout=TIMEOUT, **kwargs).result(TIMEOUT)
    assert not result.errors, result.errors
    return {g.group_id: g.state for g in result.valid}


def test_admin_lists_describes_fetches_offsets_and_deletes_only_empty_groups(broker_factory):
    broker = broker_factory(broker=BROKER)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    create_topic(admin, "audited", 2)
    produce(broker, "audited", [(p, b"k", b"%d-%d" % (p, i)) for i in range(4) for p in range(2)])

    # "busy" has a live member that commits everything it reads; "idle" only ever had a standalone commit
    # (generation -1, no member id) from a consumer that never joined.
    busy = Member(broker, "busy", "audited", "busy-0", process_below=1_000)
    busy.start()
    try:
        wait_until("busy to commit everything",
                   lambda: committed(admin, "busy") == {("audited", 0): 4, ("audited", 1): 4})
        idle = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "idle", "enable.auto.commit": False})
        [done] = idle.commit(offsets=[TopicPartition("audited", 1, 3)], asynchronous=False)
        assert done.error is None and done.offset == 3
        idle.close()

        assert listed(admin) == {"busy": ConsumerGroupState.STABLE, "idle": ConsumerGroupState.EMPTY}
        assert listed(admin, states={ConsumerGroupState.STABLE}) == {"busy": ConsumerGroupState.STABLE}
        assert listed(admin, states={ConsumerGroupState.EMPTY}) == {"idle": ConsumerGroupState.EMPTY}
        # Every group here is a classic one (ListGroups v5 types filter).
        assert listed(admin, types={ConsumerGroupType.CLASSIC}) == listed(admin)
        assert listed(admin, types={ConsumerGroupType.CONSUMER}) == {}

        futures = admin.describe_consumer_groups(["busy", "idle"])
        b, i = futures["busy"].result(TIMEOUT), futures["idle"].result(TIMEOUT)
        assert b.state == ConsumerGroupState.STABLE and b.partition_assignor == "range"
        [md] = b.members
        assert (md.member_id, md.client_id) == (busy.member_id, "busy-0")
        assert sorted((tp.topic, tp.partition) for tp in md.assignment.topic_partitions) == \
            [("audited", 0), ("audited", 1)]
        assert i.state == ConsumerGroupState.EMPTY and i.members == []
        assert committed(admin, "idle") == {("audited", 1): 3}
        # Asked for given partitions: one without a commit is reported as having none (-1001, OFFSET_INVALID).
        asked = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(
            "idle", [TopicPartition("audited", 0), TopicPartition("audited", 1)])])["idle"].result(TIMEOUT)
        assert [(tp.partition, tp.offset) for tp in asked.topic_partitions] == [(0, -1001), (1, 3)]

        # Deleting a group with a member is refused; the member and its offsets stay.
        with pytest.raises(KafkaException) as refused:
            admin.delete_consumer_groups(["busy"])["busy"].result(TIMEOUT)
        assert refused.value.args[0].code() == KafkaError.NON_EMPTY_GROUP
        assert listed(admin)["busy"] == ConsumerGroupState.STABLE
        # An empty group is deleted with its offsets.
        assert admin.delete_consumer_groups(["idle"])["idle"].result(TIMEOUT) is None
        assert committed(admin, "idle") == {}
        assert "idle" not in listed(admin)
    finally:
        busy.leave()

    wait_until("busy to empty", lambda: listed(admin).get("busy") == ConsumerGroupState.EMPTY)
    assert admin.delete_consumer_groups(["busy"])["busy"].result(TIMEOUT) is None
    with pytest.raises(KafkaException) as unknown:
        admin.delete_consumer_groups(["busy"])["busy"].result(TIMEOUT)
    assert unknown.value.args[0].code() == KafkaError.GROUP_ID_NOT_FOUND
    assert listed(admin) == {}

    # Stored: a tombstone for every offset and for each group, after the commits they delete.
    for group, partitions in (("busy", [0, 1]), ("idle", [1])):
        records = stored_offset_records(broker, group)
        assert latest_commits(records) == {("audited", p): None for p in partitions}
        last_group_record = [value for _, key, value in records if isinstance(key, rec.GroupKey)][-1:]
        assert last_group_record == [None]

    # After a restart the deleted groups and their offsets are still gone.
    assert broker.stop() == 0
    broker.restart()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    assert listed(admin) == {}
    assert committed(admin, "busy") == {} and committed(admin, "idle") == {}
    d = describe(admin, "busy")
    assert d.state == ConsumerGroupState.DEAD and d.members == []
