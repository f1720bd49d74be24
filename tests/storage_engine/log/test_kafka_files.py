"""``partition.metadata`` and ``replication-offset-checkpoint`` byte for byte as Kafka writes them.

The expected bytes are spelled out from Kafka's source, not from the engine's writers:
``PartitionMetadata.encode()`` is ``"version: " + version + "\\ntopic_id: " + topicId`` (no line end after the id),
and ``CheckpointFile.CheckpointWriteBuffer.write`` writes the version, ``newLine()``, the entry count, ``newLine()``,
then each ``OffsetCheckpointFile.Formatter`` line ``topic + " " + partition + " " + offset`` and ``newLine()``
(``\\n`` on Linux). ``Uuid(34, 98)`` prints as ``AAAAAAAAACIAAAAAAAAAYg`` (URL-safe base64 of the two longs, big
endian, no padding)."""
from __future__ import annotations

import logging
import os
import uuid

import pytest

from storage_engine import layout
from storage_engine.config_file import config_from_mapping
from storage_engine.log import hw_checkpoint
from storage_engine.log.manager import LogManager
from storage_engine.log.topic_id import ensure_topic_id, parse_partition_metadata, read_topic_id, write_topic_id
from tests.storage_engine.helpers import recs

pytestmark = pytest.mark.unit

KAFKA_UUID_34_98 = uuid.UUID(int=(34 << 64) | 98)


def test_partition_metadata_is_kafkas_bytes(tmp_path):
    write_topic_id(str(tmp_path), KAFKA_UUID_34_98)
    assert (tmp_path / layout.PARTITION_METADATA).read_bytes() == b"version: 0\ntopic_id: AAAAAAAAACIAAAAAAAAAYg"
    assert read_topic_id(str(tmp_path)) == KAFKA_UUID_34_98

    fresh = tmp_path / "orders-0"
    fresh.mkdir()
    given = ensure_topic_id(str(fresh))
    text = (fresh / layout.PARTITION_METADATA).read_bytes()
    assert text.startswith(b"version: 0\ntopic_id: ") and not text.endswith(b"\n")
    assert read_topic_id(str(fresh)) == given


@pytest.mark.parametrize("data, expected", [
    (b"version: 0\ntopic_id: AAAAAAAAACIAAAAAAAAAYg\n", KAFKA_UUID_34_98),   # written by earlier engine versions
    (b"version:   0\ntopic_id:\tAAAAAAAAACIAAAAAAAAAYg", KAFKA_UUID_34_98),    # Kafka splits on any whitespace
    (b"version: 1\ntopic_id: AAAAAAAAACIAAAAAAAAAYg", KAFKA_UUID_34_98),     # a later version still reads
    (b"version: -1\ntopic_id: AAAAAAAAACIAAAAAAAAAYg", None),                # below version 0
    (b"version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAA", None),                 # the zero id
    (b"topic_id: AAAAAAAAACIAAAAAAAAAYg\nversion: 0", None),                # the lines in the wrong order
    (b"version: 0\ntopic_id: AAAAAAAAACIAAAAAAAAAYg extra", None),          # three fields
    (b"version: zero\ntopic_id: AAAAAAAAACIAAAAAAAAAYg", None),
    (b"version: 0\ntopic_id: short", None),
    (b"version: 0", None),
])
def test_partition_metadata_reads_as_kafka_reads_it(data, expected):
    assert parse_partition_metadata(data) == expected


def test_high_watermark_checkpoint_is_kafkas_bytes(tmp_path):
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    os.mkdir(a)
    os.mkdir(b)
    hw_checkpoint.create_empty([a, b])
    assert (tmp_path / "a" / "replication-offset-checkpoint").read_bytes() == b""   # Files.createFile
    written = hw_checkpoint.write_high_watermarks({a: {("orders", 1): 0, ("orders", 0): 42, ("__consumer_offsets", 7): 3}})
    assert written == [a]
    assert (tmp_path / "a" / "replication-offset-checkpoint").read_bytes() == \
        b"0\n3\n__consumer_offsets 7 3\norders 0 42\norders 1 0\n"
    assert (tmp_path / "b" / "replication-offset-checkpoint").read_bytes() == b""   # no partitions: not written
    hw_checkpoint.create_empty([a])                                                  # never truncates a file
    assert (tmp_path / "a" / "replication-offset-checkpoint").read_bytes().startswith(b"0\n3\n")
    assert sorted(os.listdir(a)) == ["replication-offset-checkpoint"]                # no temp file left


def test_high_watermarks_of_a_managers_logs_and_the_read_back(tmp_path, caplog):
    d = str(tmp_path / "logs")
    config = config_from_mapping({"broker": {"log.dirs": [d]}})
    with LogManager.open(config) as mgr:
        mgr.get_or_create_log("orders", 0).append_records(recs(b"a", b"b", b"c"))
        mgr.get_or_create_log("orders", 1)
        per_dir = hw_checkpoint.high_watermarks(mgr.logs.values())
        assert per_dir == {d: {("orders", 0): 3, ("orders", 1): 0}}
        hw_checkpoint.write_high_watermarks(per_dir)
        assert hw_checkpoint.read_back(mgr.logs.values()) == {}
        # a checkpoint above the log end: records once below the high watermark are gone, and that is said
        hw_checkpoint.write_high_watermarks({d: {("orders", 0): 3, ("orders", 1): 5}})
        with caplog.at_level(logging.WARNING, logger="storage_engine.log.hw_checkpoint"):
            assert hw_checkpoint.read_back(mgr.logs.values()) == {("orders", 1): 5}
        assert "orders-1: the checkpointed high watermark 5 is above the log end 0" in caplog.text
        # a damaged file reads as empty, with a warning, and is replaced by the next write
        with open(hw_checkpoint.path_in(d), "wb") as f:
            f.write(b"0\n2\norders 0\n")
        assert hw_checkpoint.read_back(mgr.logs.values()) == {}
        assert "Ignoring corrupt checkpoint file" in caplog.text
    # the layout knows the file: verify/describe do not call it stray
    assert layout.is_engine_file("replication-offset-checkpoint")
    assert layout.is_engine_file("replication-offset-checkpoint.tmp")
