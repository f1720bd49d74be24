"""The produce job (the console's "produce a record"): one batch appended with its key, value, headers and
timestamp, read back by the engine; the topic's checks and a missing partition refuse it with nothing written."""
from __future__ import annotations

import os

import pytest

from storage_engine.config_file import config_from_mapping
from storage_engine.errors import InvalidRecordForTopicError, PartitionNotFoundError
from storage_engine.jobs.partition import produce
from storage_engine.log.manager import LogManager

pytestmark = pytest.mark.unit
T0 = 1_700_000_000_000


@pytest.fixture
def cfg(tmp_path):
    config = config_from_mapping({"broker": {"log.dirs": [str(tmp_path / "a")]},
                                  "topics": {"c": {"cleanup.policy": "compact"}}})
    with LogManager.open(config) as mgr:
        mgr.get_or_create_log("t", 0)
        mgr.get_or_create_log("c", 0)
    return config


def records(config, topic: str) -> list:
    with LogManager.open(config, partitions=[(topic, 0)]) as mgr:
        log = mgr.get_log(topic, 0)
        assert log is not None
        return list(log.read_records())


def test_records_are_appended_as_one_batch_and_read_back(cfg):
    assert produce(cfg, "t", 0, [(b"k", b"v", [("h", b"x")])], now_ms=T0) == {
        "topic": "t", "partition": 0, "offset": 0, "last_offset": 0}
    assert produce(cfg, "t", 0, [(None, b"a", []), (b"k2", None, [])], now_ms=T0 + 1)["offset"] == 1
    got = records(cfg, "t")
    assert [(r.offset, r.key, r.value, list(r.headers), r.timestamp) for r in got] == [
        (0, b"k", b"v", [("h", b"x")], T0), (1, None, b"a", [], T0 + 1), (2, b"k2", None, [], T0 + 1)]


def test_a_missing_partition_or_a_record_the_topic_refuses_writes_nothing(cfg):
    with pytest.raises(PartitionNotFoundError, match="partition t-3 does not exist"):
        produce(cfg, "t", 3, [(b"k", b"v", [])])
    assert not os.path.exists(os.path.join(cfg.log_dirs[0], "t-3"))
    with pytest.raises(InvalidRecordForTopicError, match="without a key"):
        produce(cfg, "c", 0, [(None, b"no key on a compacted topic", [])])
    assert records(cfg, "c") == []
