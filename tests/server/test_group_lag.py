"""Consumer-group lag as the Storage view reads it: every partition of a topic a group reads, committed or not
(no commit: lag from the log start), and the history of that lag the listener keeps (bounded, crash-safe).

The end-to-end test runs a real broker and a real confluent-kafka consumer; the oracle is what was produced and
what the consumer committed. The unit tests drive the history file directly."""
from __future__ import annotations

import json
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from storage_engine.config_file import load_config
from storage_engine.inspection.listener import consumer_groups, lag_history, listener_status
from storage_engine.server.groups import lag_history as lag_history_module
from storage_engine.server.groups.lag_history import (MAX_GROUPS, MAX_PARTITIONS, MAX_PARTITIONS_PER_GROUP,
                                                      OLDER_STEP_MS, LagHistory, history_path, take_sample)

TIMEOUT_S = 60


def wait_for(what: str, check, timeout_s: float = TIMEOUT_S):
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


@pytest.mark.e2e
@pytest.mark.kills
def test_lag_of_uncommitted_partitions_and_its_history_across_restarts(broker_factory):
    """A consumer subscribed to a 3-partition topic commits on partition 0 only: the group shows partition 0 lagging
    from its commit and partitions 1 and 2 from the log start; the history follows new records, survives a clean
    stop and a kill -9, and the restarted broker goes on adding to it."""
    b = broker_factory()
    config = load_config(b.config_path)
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    for future in admin.create_topics([NewTopic("lagged", 3, 1)]).values():
        future.result(TIMEOUT_S)
    producer = Producer({"bootstrap.servers": b.bootstrap})
    for p in range(3):
        for i in range(10):
            producer.produce("lagged", key=b"k%d" % i, value=b"v%d" % i, partition=p)
    assert producer.flush(TIMEOUT_S) == 0
    consumer = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "lag-group", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "client.id": "lag-reader"})
    try:
        consumer.subscribe(["lagged"])
        wait_for("a record", lambda: consumer.poll(0.5) is not None)
        consumer.commit(offsets=[TopicPartition("lagged", 0, 4)], asynchronous=False)

        def group():
            st = listener_status(config)
            found = [g for g in consumer_groups(config, st) if g["group_id"] == "lag-group"] if st else []
            return found[0] if found and found[0]["partitions"] and found[0]["members"] else None

        g = wait_for("the listener to report the group with its commit", group)
        assert [m["subscription"] for m in g["members"]] == [["lagged"]]
        assert g["partitions"] == [{"topic": "lagged", "partition": 0, "committed": 4, "log_end_offset": 10,
                                    "lag": 6}]
        assert [(u["partition"], u["committed"], u["log_start_offset"], u["log_end_offset"], u["lag"], u["lag_from"])
                for u in g["uncommitted"]] == [(1, None, 0, 10, 10, "log start"), (2, None, 0, 10, 10, "log start")]
        assert (g["lag"], g["uncommitted_lag"]) == (6, 20)

        def last_sample_is(expected: dict):
            history = lag_history(config, "lag-group")
            return history if history and history[-1]["partitions"] == expected else None

        wait_for("a sample of 6/10/10", lambda: last_sample_is({("lagged", 0): 6, ("lagged", 1): 10,
                                                                 ("lagged", 2): 10}))
        for i in range(5):
            producer.produce("lagged", value=b"more", partition=1)
        assert producer.flush(TIMEOUT_S) == 0
        history = wait_for("a sample with partition 1 at 15",
                           lambda: last_sample_is({("lagged", 0): 6, ("lagged", 1): 15, ("lagged", 2): 10}))
        assert history[-1]["lag"] == 31 and len(history) >= 2
        assert [s["t"] for s in history] == sorted(s["t"] for s in history)
    finally:
        consumer.close()
    del producer

    before_stop = lag_history(config, "lag-group")
    assert b.stop() == 0
    after_stop = lag_history(config, "lag-group")
    assert after_stop[:len(before_stop)] == before_stop               # a clean stop keeps every sample
    b.restart()
    wait_for("a sample from the restarted broker", lambda: len(lag_history(config, "lag-group")) > len(after_stop))
    b.kill()
    kept = lag_history(config, "lag-group")
    assert kept[:len(after_stop)] == after_stop                       # kill -9 loses nothing already replaced
    assert kept[-1]["partitions"] == {("lagged", 0): 6, ("lagged", 1): 15, ("lagged", 2): 10}
    raw = json.loads(open(history_path(config.log_dirs[0]), "rb").read())
    assert raw["version"] == 1 and raw["older"] and raw["recent"]


# -- the history file, without a broker ---------------------------------------------------------------------------

def _group(gid: str, offsets: dict, subscription=()) -> dict:
    return {"group_id": gid, "offsets": offsets,
            "members": [{"member_id": "m", "assignment": {}, "subscription": list(subscription)}]}


@pytest.mark.unit
def test_a_sample_covers_every_partition_of_the_topics_a_group_reads():
    ends = {("a", 0): (0, 10), ("a", 1): (5, 9), ("b", 0): (0, 3)}
    sample = take_sample(1000, [_group("g", {"a": {"0": 4}}), _group("h", {}, subscription=["b", "gone"])],
                         lambda t: sorted(p for tt, p in ends if tt == t), lambda t, p: ends.get((t, p)))
    assert sample == {"t": 1000, "groups": {
        "g": {"lag": 6 + 4, "partitions": [["a", 0, 6, 4], ["a", 1, 4, None]]},   # a-1: from its log start 5
        "h": {"lag": 3, "partitions": [["b", 0, 3, None]]}}}


@pytest.mark.unit
def test_a_group_with_many_partitions_keeps_the_most_lagging_and_counts_all():
    n = MAX_PARTITIONS_PER_GROUP + 10
    sample = take_sample(0, [_group("g", {"t": {str(p): 0 for p in range(n)}})], lambda t: list(range(n)),
                         lambda t, p: (0, p))
    kept = sample["groups"]["g"]["partitions"]
    assert len(kept) == MAX_PARTITIONS_PER_GROUP
    assert {r[1] for r in kept} == set(range(10, n))
    assert sample["groups"]["g"]["lag"] == sum(range(n))


@pytest.mark.unit
def test_the_history_is_bounded_and_keeps_one_sample_every_five_minutes(tmp_path, monkeypatch):
    # smaller bounds than the real ones (120 and 288), the same code: every add rewrites the file
    recent_samples, older_samples = 24, 30
    monkeypatch.setattr(lag_history_module, "RECENT_SAMPLES", recent_samples)
    monkeypatch.setattr(lag_history_module, "OLDER_SAMPLES", older_samples)
    path = str(tmp_path / "history.json")
    history = LagHistory(path)
    step = 60_000
    total = recent_samples * 3
    for i in range(total):   # a recent sample may wait for a later write; the last one at a clean stop does not
        history.add({"t": i * step, "groups": {"g": {"lag": i, "partitions": []}}}, flush=i == total - 1)
    reopened = LagHistory(path)
    assert [s["t"] for s in reopened.recent] == [i * step for i in range(total - recent_samples, total)]
    older = [s["t"] for s in reopened.older]
    assert older == [m * OLDER_STEP_MS for m in range(-(-total * step // OLDER_STEP_MS))]   # the first of each step
    for i in range(older_samples + 5):     # each one a new 5-minute step: each written
        history.add({"t": (total + i) * OLDER_STEP_MS, "groups": {}})
    assert len(LagHistory(path).older) == older_samples


@pytest.mark.unit
def test_a_sample_holds_at_most_max_groups_and_max_partitions():
    groups = [_group(f"g{i:03d}", {"t": {str(p): 0 for p in range(MAX_PARTITIONS_PER_GROUP)}})
              for i in range(MAX_GROUPS + 5)]
    # equal lags: the groups first by name are kept
    sample = take_sample(0, groups, lambda t: list(range(MAX_PARTITIONS_PER_GROUP)), lambda t, p: (0, 0))
    assert sorted(sample["groups"]) == [f"g{i:03d}" for i in range(MAX_GROUPS)]
    assert sum(len(g["partitions"]) for g in sample["groups"].values()) <= MAX_PARTITIONS
    sized = take_sample(0, groups, lambda t: list(range(MAX_PARTITIONS_PER_GROUP)),
                        lambda t, p: (0, 1000 + p))
    figures = {gid: len(g["partitions"]) for gid, g in sized["groups"].items()}
    assert sum(figures.values()) == MAX_PARTITIONS
    assert all(g["lag"] == sum(1000 + p for p in range(MAX_PARTITIONS_PER_GROUP)) for g in sized["groups"].values())


@pytest.mark.unit
def test_no_group_ever_means_no_file(tmp_path):
    history = LagHistory(str(tmp_path / "history.json"))
    history.add({"t": 1, "groups": {}})
    assert not (tmp_path / "history.json").exists()


@pytest.mark.unit
@pytest.mark.parametrize("content", [b"{not json", b'{"version": 2, "recent": [], "older": []}', b"[]",
                                     b'{"version": 1, "recent": [{"t": "x"}], "older": []}'])
def test_a_damaged_history_is_set_aside_and_started_anew(tmp_path, content):
    path = tmp_path / "history.json"
    path.write_bytes(content)
    history = LagHistory(str(path))
    assert history.recent == [] and history.older == []
    assert (tmp_path / "history.json.damaged").read_bytes() == content
    history.add({"t": 60_000, "groups": {"g": {"lag": 1, "partitions": [["t", 0, 1, None]]}}})
    assert json.loads(path.read_bytes())["recent"][0]["groups"]["g"]["lag"] == 1
