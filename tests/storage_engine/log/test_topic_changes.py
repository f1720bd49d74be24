"""Topic changes whole or not at all (storage_engine.log.topic_changes): the record, its roll-forward at the next
open or change, a live change left to its process; and the command line's ``delete-topic`` and the console's
delete-topic action killed (``STORAGE_ENGINE_CRASH_AT``) at each step of a delete, completed at the next open."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from storage_engine import layout
from storage_engine.config_file import load_config
from storage_engine.errors import PartitionNotFoundError
from storage_engine.log import topic_changes
from storage_engine.log.manager import LogManager
from storage_engine.server import identity
from tests.paths import REPO
from tests.storage_engine.kernels import child_processes_once


def write_config(tmp_path) -> str:
    dirs = [str(tmp_path / "logs-a"), str(tmp_path / "logs-b")]
    path = tmp_path / "storage.yaml"
    path.write_text(json.dumps({"broker": {"log.dirs": dirs}, "topics": {}}))
    return str(path)


def partitions_of(cfg, topic: str) -> list[int]:
    return sorted(p for d in cfg.log_dirs for _, (t, p) in layout.partition_dirs(d) if t == topic)


def record_names(cfg) -> list[str]:
    folder = topic_changes.record_dir(cfg.log_dirs)
    return sorted(os.listdir(folder)) if os.path.isdir(folder) else []


def ids(cfg, topic: str) -> set:
    return {identity.read_topic_id(os.path.join(d, layout.partition_dir_name(topic, p)))
            for d in cfg.log_dirs for p in partitions_of(cfg, topic)
            if os.path.isdir(os.path.join(d, layout.partition_dir_name(topic, p)))}


@pytest.mark.unit
def test_create_extend_delete_leave_whole_topics_and_no_record(tmp_path):
    cfg = load_config(write_config(tmp_path))
    with LogManager.open(cfg) as mgr:
        seen = []
        made = topic_changes.create(mgr, "t", 5, {"retention.ms": "1000"},
                                    on_record=lambda t, r: seen.append((t, r and r["op"])))
        assert seen == [("t", "create"), ("t", None)] and made["completed_half_done"] is False
        with pytest.raises(topic_changes.TopicChangeError) as exc:
            topic_changes.create(mgr, "t", 5)
        assert exc.value.code == "topic_already_exists"
        topic_changes.add_partitions(mgr, "t", 8, made["topic_id"])
        with pytest.raises(topic_changes.TopicChangeError) as exc:
            topic_changes.add_partitions(mgr, "t", 8, made["topic_id"])
        assert exc.value.code == "invalid_partitions"
    assert partitions_of(cfg, "t") == list(range(8)) and ids(cfg, "t") == {made["topic_id"]}
    assert record_names(cfg) == []
    with LogManager.open(cfg) as mgr:
        assert [d["partition"] for d in topic_changes.delete(mgr, "t")] == list(range(8))
        with pytest.raises(PartitionNotFoundError):
            topic_changes.delete(mgr, "t")
    assert partitions_of(cfg, "t") == [] and record_names(cfg) == []
    with open(os.path.join(cfg.log_dirs[0], layout.TOPIC_CONFIGS_FILE)) as f:
        assert "t" not in json.load(f)["topics"], "a deleted topic's configs go with it"


@pytest.mark.unit
def test_a_record_left_by_a_dead_process_is_rolled_forward_at_open_unless_its_process_lives(tmp_path):
    cfg = load_config(write_config(tmp_path))
    with LogManager.open(cfg) as mgr:
        mgr.get_or_create_log("t", 0)
    # as a process that died after its record and one partition would leave it
    topic_changes._write(cfg.log_dirs, {"op": "create", "topic": "t", "partitions": 4, "topic_id": "ab" * 16,
                                        "configs": {}})
    assert topic_changes.hidden(topic_changes.pending(cfg.log_dirs)) == {"t": 0}
    held = topic_changes.ChangeLock(cfg.log_dirs)
    assert held.try_acquire()          # a live process making the change: not another's to complete
    try:
        with LogManager.open(cfg) as mgr:
            assert mgr.resolved_topic_changes == []
        assert record_names(cfg) == ["t"] and partitions_of(cfg, "t") == [0]
    finally:
        held.release()
    with LogManager.open(cfg) as mgr:
        assert [r["topic"] for r in mgr.resolved_topic_changes] == ["t"]
    assert record_names(cfg) == [] and partitions_of(cfg, "t") == [0, 1, 2, 3]
    assert {i.hex if i else None for i in ids(cfg, "t")} == {"ab" * 16}


@pytest.mark.unit
def test_extension_records_hide_only_the_new_partitions_and_a_damaged_record_is_ignored(tmp_path, caplog):
    cfg = load_config(write_config(tmp_path))
    topic_changes._write(cfg.log_dirs, {"op": "add-partitions", "topic": "x", "from": 3, "partitions": 6,
                                        "topic_id": "cd" * 16})
    with open(os.path.join(topic_changes.record_dir(cfg.log_dirs), "broken"), "w") as f:
        f.write("{not json")
    assert topic_changes.hidden(topic_changes.pending(cfg.log_dirs)) == {"x": 3}
    assert "unreadable topic-change record" in caplog.text


CONSOLE_DELETE = """
import sys
from storage_engine.config_file import load_config
from plugins.storage_maintenance.ui import actions
print(actions.run(load_config(sys.argv[1]), "delete-topic", {"topic": "t"}))
"""


def _delete_killed(cfg_path: str, step: str, how: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "STORAGE_ENGINE_CRASH_AT": step, "PYTHONPATH": str(REPO)}
    if how == "cli":
        cmd = [sys.executable, "-m", "storage_engine", "--config", cfg_path, "delete-topic", "--topic", "t"]
    else:
        cmd = [sys.executable, "-c", CONSOLE_DELETE, cfg_path]
    return subprocess.run(cmd, cwd=str(REPO), env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.e2e
@pytest.mark.kills
@child_processes_once
@pytest.mark.parametrize("how, step, left", [
    ("cli", "topic.delete.intent", 4), ("cli", "topic.delete.partition:2", 2), ("cli", "topic.delete.configs", 0),
    ("cli", "topic.delete.done", 0), ("console", "topic.delete.partition:1", 3),
    ("console", "topic.resolve.partial", 2)])
def test_a_delete_topic_killed_at_each_step_is_completed_at_the_next_open(tmp_path, how, step, left):
    cfg_path = write_config(tmp_path)
    cfg = load_config(cfg_path)
    with LogManager.open(cfg) as mgr:
        topic_changes.create(mgr, "t", 4, {"retention.ms": "1000"})
        topic_changes.create(mgr, "kept", 2)
    if step == "topic.resolve.partial":
        # a first delete dies after one partition; the next one dies completing it (the resolution is resumable)
        assert _delete_killed(cfg_path, "topic.delete.partition:1", how).returncode == -signal.SIGKILL
    proc = _delete_killed(cfg_path, step, how)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert f"CRASHPOINT {step.split(':')[0]}" in proc.stderr
    assert record_names(cfg) == ["t"]
    assert partitions_of(cfg, "t") == list(range(4 - left, 4))
    with LogManager.open(cfg) as mgr:
        assert [r["op"] for r in mgr.resolved_topic_changes] == ["delete"]
    assert partitions_of(cfg, "t") == [] and record_names(cfg) == []
    assert partitions_of(cfg, "kept") == [0, 1]
    with open(os.path.join(cfg.log_dirs[0], layout.TOPIC_CONFIGS_FILE)) as f:
        assert "t" not in json.load(f)["topics"]
    # the command again: the topic is gone, and it says so
    again = subprocess.run([sys.executable, "-m", "storage_engine", "--config", cfg_path, "delete-topic",
                            "--topic", "t"], cwd=str(REPO), capture_output=True, text=True, timeout=120)
    assert again.returncode == 2 and "topic 't' has no partitions" in again.stderr


@pytest.mark.e2e
@pytest.mark.kills
@child_processes_once
def test_a_cli_delete_killed_half_way_is_completed_by_the_retried_command(tmp_path):
    cfg_path = write_config(tmp_path)
    cfg = load_config(cfg_path)
    with LogManager.open(cfg) as mgr:
        topic_changes.create(mgr, "t", 3)
    assert _delete_killed(cfg_path, "topic.delete.partition:1", "cli").returncode == -signal.SIGKILL
    assert partitions_of(cfg, "t") == [1, 2]
    again = subprocess.run([sys.executable, "-m", "storage_engine", "--config", cfg_path, "delete-topic",
                            "--topic", "t"], cwd=str(REPO), capture_output=True, text=True, timeout=120)
    assert again.returncode == 2 and "a delete of it left half done was completed" in again.stderr
    assert partitions_of(cfg, "t") == [] and record_names(cfg) == []


@pytest.mark.unit
def test_a_new_topic_takes_its_id_from_the_one_topic_id_writer(tmp_path, monkeypatch):
    """Topic ids come from :mod:`storage_engine.log.topic_id` alone (Kafka's ``Uuid.randomUuid``: never a
    reserved id, never text starting with ``-``), written as it writes ``partition.metadata``."""
    from storage_engine.log import topic_id
    chosen = topic_id.random_uuid()
    monkeypatch.setattr(topic_id, "random_uuid", lambda: chosen)
    cfg = load_config(write_config(tmp_path))
    with LogManager.open(cfg) as mgr:
        assert topic_changes.create(mgr, "fresh", 3)["topic_id"] == chosen
    assert ids(cfg, "fresh") == {chosen}
    for d in cfg.log_dirs:
        for name, (t, _p) in layout.partition_dirs(d):
            if t == "fresh":
                with open(os.path.join(d, name, layout.PARTITION_METADATA), "rb") as f:
                    assert f.read() == f"version: 0\ntopic_id: {topic_id.uuid_text(chosen)}".encode()
