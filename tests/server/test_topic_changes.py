"""CreateTopics, CreatePartitions and DeleteTopics take effect whole or not at all (storage_engine.log.topic_changes).

A real broker process is armed with ``STORAGE_ENGINE_CRASH_AT`` at each named step of each change and dies there
by SIGKILL while answering a request sent on the wire; the store is then as the step says (the change's record on
disk, the topic short of partitions), and the restarted broker shows the change completed: the topic whole with
one topic id and its configs, or deleted with its configs. Without a crash, Metadata polled by a Kafka client
during a 300-partition CreateTopics never shows the topic short of partitions; and a CreateTopics resent for a
topic whose create a process left half done completes it.
"""
from __future__ import annotations

import datetime
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource

from storage_engine import layout
from storage_engine.server import identity
from tests.server import wire
from tests.server.broker_proc import ROOT, BrokerProcess

pytestmark = [pytest.mark.e2e, pytest.mark.kills]

RECORDS = layout.TOPIC_CHANGES_DIR
TIMEOUT = datetime.timedelta(seconds=30)


def folders(b: BrokerProcess, topic: str) -> list[int]:
    """The partitions of ``topic`` with a folder in the broker's log dirs."""
    found = []
    for d in b.log_dirs:
        for name, (t, p) in layout.partition_dirs(d):
            if t == topic:
                found.append(p)
    return sorted(found)


def records(b: BrokerProcess) -> list[str]:
    path = Path(b.log_dirs[0]) / RECORDS
    return sorted(n for n in os.listdir(path) if not n.endswith(".tmp")) if path.is_dir() else []


def topic_ids(b: BrokerProcess, topic: str) -> set:
    return {identity.read_topic_id(os.path.join(d, layout.partition_dir_name(topic, p)))
            for d in b.log_dirs for p in folders(b, topic)
            if os.path.isdir(os.path.join(d, layout.partition_dir_name(topic, p)))}


def stored_configs(b: BrokerProcess) -> dict:
    path = Path(b.log_dirs[0]) / layout.TOPIC_CONFIGS_FILE
    return json.loads(path.read_text())["topics"] if path.exists() else {}


def admin(b: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": b.bootstrap, "log_level": 3})


def metadata(b: BrokerProcess) -> dict[str, int]:
    md = admin(b).list_topics(timeout=30)
    return {t: len(m.partitions) for t, m in md.topics.items() if m.error is None}


def send(b: BrokerProcess, key: int, version: int, **fields):
    """One request on its own connection; the response, or None when the broker closed it (it died)."""
    conn = wire.Conn(b.bootstrap)
    try:
        return conn.request(wire.build_request(key, version, **fields), timeout=60)
    except wire.Closed:
        return None
    finally:
        conn.close()


def create_request(topic: str, count: int, configs: dict[str, str] | None = None) -> dict:
    return {"topics": [{"name": topic, "num_partitions": count, "replication_factor": 1, "assignments": [],
                        "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()]}],
            "timeout": TIMEOUT, "validate_only": False}


def create(b: BrokerProcess, topic: str, count: int, configs: dict[str, str] | None = None):
    return send(b, 19, 5, **create_request(topic, count, configs))


def extend(b: BrokerProcess, topic: str, count: int):
    return send(b, 37, 2, topics=[{"name": topic, "count": count, "assignments": None}], timeout=TIMEOUT,
                validate_only=False)


def delete(b: BrokerProcess, topic: str):
    return send(b, 20, 4, topic_names=[topic], timeout=TIMEOUT)


def die_at(b: BrokerProcess, step: str, request) -> None:
    """Restart ``b`` armed at ``step``, send ``request(b)``: it must die there by SIGKILL, unanswered."""
    b.stop()
    b.env = {"STORAGE_ENGINE_CRASH_AT": step}
    b.start()
    b.env = {}
    assert request(b) is None, "the broker answered instead of dying"
    assert b.proc is not None
    assert b.proc.wait(60) == -signal.SIGKILL
    b.proc = None
    assert f"CRASHPOINT {step.split(':')[0]}" in b.log_text()


CONFIGS = {"retention.ms": "7200000"}


@pytest.mark.parametrize("step, made", [("topic.create.intent", 0), ("topic.create.configs", 0),
                                        ("topic.create.partition:3", 3), ("topic.create.done", 8)])
def test_a_create_killed_at_each_step_is_whole_after_the_restart(broker, step, made):
    die_at(broker, step, lambda b: create(b, "orders", 8, CONFIGS))
    assert records(broker) == ["orders"]
    assert folders(broker, "orders") == list(range(made))
    broker.start()
    assert records(broker) == [], "the start completed the create"
    assert folders(broker, "orders") == list(range(8))
    assert metadata(broker)["orders"] == 8
    assert len(topic_ids(broker, "orders")) == 1 and None not in topic_ids(broker, "orders")
    assert stored_configs(broker)["orders"] == CONFIGS
    client = admin(broker)
    res = client.describe_configs([ConfigResource("topic", "orders")])
    described = next(iter(res.values())).result(30)
    assert described["retention.ms"].value == "7200000"
    again = create(broker, "orders", 8)
    assert again.topics[0].error_code == 36, "TOPIC_ALREADY_EXISTS: the topic is whole and answered"


@pytest.mark.parametrize("step, made", [("topic.extend.intent", 3), ("topic.extend.partition:2", 5),
                                        ("topic.extend.done", 7)])
def test_an_extension_killed_at_each_step_is_whole_after_the_restart(broker, step, made):
    assert create(broker, "orders", 3).topics[0].error_code == 0
    before = topic_ids(broker, "orders")
    die_at(broker, step, lambda b: extend(b, "orders", 7))
    assert records(broker) == ["orders"]
    assert folders(broker, "orders") == list(range(made))
    broker.start()
    assert records(broker) == []
    assert folders(broker, "orders") == list(range(7))
    assert metadata(broker)["orders"] == 7
    assert topic_ids(broker, "orders") == before, "the new partitions carry the topic's id"


@pytest.mark.parametrize("step, left", [("topic.delete.intent", 4), ("topic.delete.partition:2", 2),
                                        ("topic.delete.configs", 0), ("topic.delete.done", 0)])
def test_a_delete_killed_at_each_step_is_complete_after_the_restart(broker, step, left):
    assert create(broker, "orders", 4, CONFIGS).topics[0].error_code == 0
    assert create(broker, "kept", 2).topics[0].error_code == 0
    die_at(broker, step, lambda b: delete(b, "orders"))
    assert records(broker) == ["orders"]
    assert folders(broker, "orders") == list(range(4 - left, 4))
    broker.start()
    assert records(broker) == []
    assert folders(broker, "orders") == []
    assert "orders" not in stored_configs(broker)
    assert metadata(broker) == {"kept": 2}
    # the name is free: a new topic of it is whole, with its own id
    assert create(broker, "orders", 2).topics[0].error_code == 0
    assert metadata(broker)["orders"] == 2


def test_metadata_never_shows_a_topic_short_of_partitions_during_a_big_create(broker):
    client = admin(broker)
    seen: list[int] = []
    polls_during = [0]
    started, done = threading.Event(), threading.Event()

    def poll() -> None:
        while not done.is_set():
            began = started.is_set()
            md = client.list_topics(timeout=30)
            if began and not done.is_set():
                polls_during[0] += 1     # a poll wholly while the create was under way
            if "big" in md.topics and md.topics["big"].error is None:
                seen.append(len(md.topics["big"].partitions))

    poller = threading.Thread(target=poll)
    poller.start()
    try:
        started.set()
        response = create(broker, "big", 300)
    finally:
        done.set()
        poller.join(60)
    assert response.topics[0].error_code == 0
    assert polls_during[0] >= 2, "Metadata was polled while the create ran"
    assert set(seen) <= {300}, f"Metadata showed the topic with {sorted(set(seen))} partitions"
    assert metadata(broker)["big"] == 300


HALF_CREATE = """
import sys
from storage_engine.config_file import load_config
from storage_engine.log import topic_changes
from storage_engine.log.manager import LogManager
with LogManager.open(load_config(sys.argv[1])) as mgr:
    topic_changes.create(mgr, "orders", 6, {"retention.ms": "7200000"})
"""


def test_a_resent_create_completes_a_topic_another_process_left_half_made(broker):
    """A process creating a topic dies after 2 of 6 partitions while the broker serves: Metadata does not show the
    half-made topic, and a CreateTopics of it as it was asked completes it (no TOPIC_ALREADY_EXISTS)."""
    proc = subprocess.run([sys.executable, "-c", HALF_CREATE, str(broker.config_path)], cwd=ROOT,
                          env={**os.environ, "STORAGE_ENGINE_CRASH_AT": "topic.create.partition:2"},
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert folders(broker, "orders") == [0, 1] and records(broker) == ["orders"]
    assert "orders" not in metadata(broker), "a half-made topic is not shown"
    response = create(broker, "orders", 6, CONFIGS)
    assert response.topics[0].error_code == 0, response.topics[0].error_message
    assert response.topics[0].num_partitions == 6
    assert folders(broker, "orders") == list(range(6)) and records(broker) == []
    assert metadata(broker)["orders"] == 6
    assert len(topic_ids(broker, "orders")) == 1
    assert stored_configs(broker)["orders"] == CONFIGS
    assert create(broker, "orders", 6).topics[0].error_code == 36, "now it exists"
