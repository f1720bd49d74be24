"""Names of partition folders: Kafka's -delete/-future/-stray forms (LocalLogTest) and the sorting of a log dir."""
from __future__ import annotations

import os

import pytest

from storage_engine import layout
from storage_engine.errors import InvalidTopicError

pytestmark = pytest.mark.unit

UID = "0123456789abcdef0123456789abcdef"


def test_log_delete_dir_name_is_capped_at_255_characters():
    """LocalLogTest.testLogDeleteDirName: a 249-character topic, partition 5, is cut to n + 212 o's."""
    topic = "n" + "o" * 248
    name = layout.delete_dir_name(topic, 5)
    assert len(name) == 255
    assert name.startswith("n" + "o" * 212 + "-5.") and name.endswith("-delete")
    assert name[:213] == "n" + "o" * 212 and name[213] == "-"
    uid = name[len("n" + "o" * 212 + "-5."):-len("-delete")]
    assert len(uid) == 32 and all(c in "0123456789abcdef" for c in uid)
    assert layout.delete_dir_name("short", 0, UID) == f"short-0.{UID}-delete"
    assert layout.delete_dir_name("short", 0) != layout.delete_dir_name("short", 0), "a new id each time"


def test_stray_names_are_capped_and_future_names_are_not():
    assert len(layout.stray_dir_name("n" + "o" * 248, 5)) == 255
    assert layout.future_dir_name("t.x-y", 3, UID) == f"t.x-y-3.{UID}-future"
    with pytest.raises(InvalidTopicError, match="too long to move"):
        layout.future_dir_name("n" + "o" * 248, 5)


@pytest.mark.parametrize("name, expected", [
    ("my-topic-0", ("my-topic", 0)),
    ("a.b-c-17", ("a.b-c", 17)),
    (f"my-topic-3.{UID}-delete", ("my-topic", 3)),
    (f"t.with.dots-1.{UID}-future", ("t.with.dots", 1)),
    (f"t-2.{UID}-stray", ("t", 2)),
])
def test_parse_topic_partition_name(name, expected):
    """LocalLogTest.testParseTopicPartitionName*: the part after the last '.' goes before the split of a
    suffixed name (topics may hold '.' and '-', KAFKA-5232)."""
    assert layout.parse_partition_dir(name) == expected


@pytest.mark.parametrize("name", ["", "-", "topic", "topic-", "-0", "topic-x", f"topic.{UID}-delete"])
def test_parse_rejects_names_that_are_not_partitions(name):
    with pytest.raises(ValueError, match="not in the form"):
        layout.parse_partition_dir(name)


def test_dir_suffix():
    assert layout.dir_suffix(f"t-0.{UID}-delete") == "delete"
    assert layout.dir_suffix(f"t-0.{UID}-future") == "future"
    assert layout.dir_suffix(f"t-0.{UID}-stray") == "stray"
    assert layout.dir_suffix("t-0") is None
    assert layout.dir_suffix("t-delete") is None


def test_scan_sorts_a_log_dir_by_kind(tmp_path):
    for name in ("t-0", "t-1", f"t-2.{UID}-future", f"t-3.{UID}-delete", f"old-0.{UID}-stray", "backup",
                 "bad topic-0", "__cluster_metadata-0", "remote-log-index-cache"):
        (tmp_path / name).mkdir()
    for name in (".lock", ".engine+partition+t-0", "recovery-point-offset-checkpoint", "meta.properties",
                 "notes.txt", ".kafka_cleanshutdown"):
        (tmp_path / name).write_text("")
    listing = layout.scan_log_dir(str(tmp_path))
    assert listing.partitions == [("t-0", ("t", 0)), ("t-1", ("t", 1))]
    assert listing.futures == [(f"t-2.{UID}-future", ("t", 2))]
    assert listing.deleting == [f"t-3.{UID}-delete"]
    assert listing.strays == [f"old-0.{UID}-stray"]
    assert [n for n, _ in listing.foreign] == ["backup", "bad topic-0"]
    assert "illegal" in dict(listing.foreign)["bad topic-0"]
    assert listing.foreign_files == ["notes.txt"]
    errors: list = []
    assert layout.partition_dirs(str(tmp_path), errors) == listing.partitions
    assert [e.split(": ")[0] for e in errors] == [os.path.join(str(tmp_path), "backup"),
                                                  os.path.join(str(tmp_path), "bad topic-0")]
    assert layout.scan_log_dir(str(tmp_path / "missing")).partitions == []
