"""The broker's topic ids: a partition folder without ``partition.metadata`` (made by the CLI or the library) gets
the topic's id, and an id once written is never replaced, since tiered storage names a topic's remote segments by
it."""
from __future__ import annotations

import os
import time

import pytest

from storage_engine import layout
from storage_engine.config_file import config_from_mapping
from storage_engine.log.manager import LogManager
from storage_engine.log.topic_id import random_uuid, read_topic_id, write_topic_id
from storage_engine.server.broker import Broker

pytestmark = pytest.mark.unit


def _folder(log_dir: str, topic: str, partition: int) -> str:
    return os.path.join(log_dir, layout.partition_dir_name(topic, partition))


def test_folders_without_an_id_get_the_topics_and_a_written_id_is_never_replaced(tmp_path):
    log_dir = str(tmp_path / "logs")
    config = config_from_mapping({"broker": {"log.dirs": [log_dir]}})
    with LogManager.open(config) as mgr:
        for p in range(3):
            mgr.get_or_create_log("made-by-cli", p)
        for p in range(2):
            mgr.get_or_create_log("disagreeing", p)
    assert all(read_topic_id(_folder(log_dir, "made-by-cli", p)) is None for p in range(3))
    first, second = random_uuid(), random_uuid()
    write_topic_id(_folder(log_dir, "disagreeing", 0), first)
    write_topic_id(_folder(log_dir, "disagreeing", 1), second)

    with LogManager.open(config) as mgr:
        broker = Broker(config, mgr)
        try:
            broker.topics(fresh=True)      # what Metadata does before it asks for ids
            given = broker.topic_id("made-by-cli")
            kept = broker.topic_id("disagreeing")
        finally:
            broker.close()
    assert [read_topic_id(_folder(log_dir, "made-by-cli", p)) for p in range(3)] == [given] * 3
    assert kept == first
    assert read_topic_id(_folder(log_dir, "disagreeing", 1)) == second, "an existing id was replaced"


def test_the_catalog_lists_a_log_dir_again_only_when_it_changed(tmp_path):
    log_dir = str(tmp_path / "logs")
    config = config_from_mapping({"broker": {"log.dirs": [log_dir]}})
    with LogManager.open(config) as mgr:
        mgr.get_or_create_log("orders", 0)
        broker = Broker(config, mgr)
        try:
            past = time.time() - 10
            os.utime(log_dir, (past, past))           # settled: last changed well before the listing
            first = broker._partition_dirs(log_dir)
            assert [tp for _, tp in first] == [("orders", 0)]
            assert broker._partition_dirs(log_dir) is first          # unchanged dir: the listing is reused
            os.mkdir(_folder(log_dir, "orders", 1))                  # made by another process: the mtime moves
            again = broker._partition_dirs(log_dir)
            assert [tp for _, tp in again] == [("orders", 0), ("orders", 1)]
            # changed less than a second before it was listed: its names are read again every time (a change in
            # the same timestamp tick would not move the mtime); the same names, the same listing
            assert broker._partition_dirs(log_dir) is again
            checkpoint = os.path.join(log_dir, "replication-offset-checkpoint")
            with open(checkpoint, "wb"):             # a new name: sorted again
                pass
            again = broker._partition_dirs(log_dir)
            with open(checkpoint + ".tmp", "wb"):    # the file replaced as checkpoints are: the same names after
                pass
            os.replace(checkpoint + ".tmp", checkpoint)
            os.utime(log_dir, (past, past))
            assert broker._partition_dirs(log_dir) is again
            os.mkdir(_folder(log_dir, "orders", 2))
            os.utime(log_dir, (past + 1, past + 1))  # settled again, another mtime: names differ, sorted again
            assert [tp for _, tp in broker._partition_dirs(log_dir)] == [("orders", 0), ("orders", 1), ("orders", 2)]
            os.rmdir(_folder(log_dir, "orders", 2))
            assert broker.topics(fresh=True) == {"orders": [0, 1]}
            assert broker._partition_dirs(str(tmp_path / "missing")) == []
        finally:
            broker.close()
