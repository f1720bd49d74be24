"""Compaction's plan over partitions it cannot clean (ARCHITECTURE.md section 6): a partition whose folder became a
file and one marked uncleanable are ``blocked`` (failures of the run, every run, until an operator acts), the others
are still selected; clearing the mark makes the partition selectable again."""
from __future__ import annotations

import os
import shutil

import pytest

from storage_engine.clock import ManualClock
from storage_engine.config_file import config_from_mapping
from storage_engine.jobs import compaction
from storage_engine.log.manager import LogManager
from storage_engine.record.records import SimpleRecord

pytestmark = pytest.mark.unit
T0 = 1_700_000_000_000


@pytest.fixture
def cfg(tmp_path):
    """Compacted topic c, partitions 0..2, each several segments of 4 keys written over and over."""
    config = config_from_mapping({"broker": {"log.dirs": [str(tmp_path / "a")], "log.segment.bytes": 1024},
                                  "topics": {"c": {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": 0.01}}})
    with LogManager.open(config, clock=ManualClock(T0)) as mgr:
        for p in range(3):
            log = mgr.get_or_create_log("c", p)
            for i in range(60):
                log.append_records([SimpleRecord(b"k%d" % (i % 4), b"v" * 60, T0)])
    return config


def blocked(plan) -> dict:
    return {(b["topic"], b["partition"]): b for b in plan["blocked"]}


def test_unreadable_and_uncleanable_partitions_are_blocked_every_plan_and_the_others_selected(cfg, tmp_path):
    path = os.path.join(cfg.log_dirs[0], "c-1")
    shutil.move(path, tmp_path / "saved")
    with open(path, "w") as f:
        f.write("not a folder")
    compaction.mark_uncleanable(cfg, "c", 2, "CorruptRecordError: damaged batch (file x.log, byte position 0)", T0)
    for _ in range(2):      # the same every run: nothing is forgotten by having been reported
        plan = compaction.compaction_plan(cfg, T0 + 1, strategy="local")
        assert [(s["topic"], s["partition"]) for s in plan["selected"]] == [("c", 0)]
        assert sorted(blocked(plan)) == [("c", 1), ("c", 2)] and plan["nothing_to_do"] is False
        unreadable = blocked(plan)[("c", 1)]
        assert unreadable["error_type"] == "PartitionUnreadableError" and unreadable["permanent"] is True
        assert f"{path} is a regular file, not a folder" in unreadable["error"]
        marked = blocked(plan)[("c", 2)]
        assert (marked["error_type"], marked["permanent"]) == ("CorruptRecordError", True)
        assert marked["error"].startswith("damaged batch (file x.log, byte position 0) (partition c-2 is marked "
                                          "uncleanable")
        assert "compact --clear-uncleanable --topic c --partition 2" in marked["error"]
    compaction.clear_uncleanable(cfg, "c", 2)
    plan = compaction.compaction_plan(cfg, T0 + 1, strategy="local")
    assert sorted(blocked(plan)) == [("c", 1)]
    assert sorted((s["topic"], s["partition"]) for s in plan["selected"]) == [("c", 0), ("c", 2)]
