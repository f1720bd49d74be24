"""The tiering job against a real SeaweedFS: sealed segments copied with every part of Kafka's ``LogSegmentData``,
byte for byte, each state in ``__remote_log_metadata``; local retention of a tiered topic deletes only what has a
finished remote copy; a dry run changes nothing; a second run has nothing to do; the ``tier`` command's JSON."""
from __future__ import annotations

import json
import os

import pytest

from storage_engine import layout
from storage_engine.config_file import load_config
from storage_engine.jobs import tiering
from storage_engine.log.manager import LogManager
from storage_engine.record.records import SimpleRecord
from storage_engine.tiered import remote_log
from tests.tiered.tier_helpers import (T0, TOPIC, assert_every_object_tracked, cli, bucket_objects, fill, object_bytes,
                                       records_of, remote_segments, seg_id_text, tier_cli, write_config)

pytestmark = [pytest.mark.tiered]


def _local(cfg: str) -> dict[int, bytes]:
    """{base offset: .log bytes} of the sealed local segments."""
    with LogManager.open(load_config(cfg)) as mgr:
        log = mgr.get_log(TOPIC, 0)
        assert log is not None
        return {s.base_offset: open(s.file_path(layout.LOG_SUFFIX), "rb").read() for s in log.segments[:-1]}


def test_sealed_segments_are_copied_byte_for_byte_and_a_second_run_has_nothing_to_do(tmp_path, weed, bucket):
    cfg = write_config(tmp_path, weed, bucket, prefix="cluster-a/")
    written = fill(cfg, 120)
    local = _local(cfg)
    assert len(local) >= 5
    result = tiering.tier(load_config(cfg))
    assert result["failures"] == [] and result["errors"] == []
    (part,) = result["partitions"]
    assert part["tiered"] is True
    assert part["copied_segments"] == len(local) == result["copied_segments"]
    assert part["copied_bytes"] == sum(len(b) for b in local.values())
    assert part["lag_segments"] == 0 and part["lag_bytes"] == 0
    assert part["local_segments_deleted"] == 0 and part["remote_segments_deleted"] == 0
    assert part["highest_remote_offset"] == max(local) + len(records_of(local[max(local)])) - 1
    finished = assert_every_object_tracked(cfg, weed, bucket)
    assert [s.start_offset for s in finished] == sorted(local)
    keys = bucket_objects(weed, bucket)
    for seg in finished:
        log_key = next(k for k in keys if seg_id_text(seg) in k and k.endswith(".log"))
        assert log_key.startswith(f"cluster-a/{TOPIC}-") and f"/0/{seg.start_offset:020d}-" in log_key
        assert object_bytes(weed, bucket, log_key) == local[seg.start_offset]
        assert seg.size_bytes == len(local[seg.start_offset])
        assert seg.segment_leader_epochs and min(seg.segment_leader_epochs.values()) == seg.start_offset
    remote = [r for seg in finished for r in records_of(local[seg.start_offset])]
    assert remote == written[:len(remote)]
    again = tiering.tier(load_config(cfg))
    assert again["copied_segments"] == 0 and again["partitions"][0]["orphan_objects"] == 0
    assert bucket_objects(weed, bucket) == keys


def test_local_retention_deletes_only_segments_whose_copy_finished(tmp_path, weed, bucket):
    # local.retention.bytes 0: every sealed segment is past local retention, but none may go before it is remote;
    # an open transaction holds back the copy of every segment from its first offset on
    cfg = write_config(tmp_path, weed, bucket, local_retention_bytes=0)
    fill(cfg, 40)
    with LogManager.open(load_config(cfg)) as mgr:
        log = mgr.get_or_create_log(TOPIC, 0)
        txn_start = log.append_records([SimpleRecord(None, b"open" * 50, T0)], producer_id=11, producer_epoch=0,
                                       base_sequence=0, is_transactional=True).first_offset
        log.flush()
    fill(cfg, 60, first=40)
    sealed = _local(cfg)
    below = {b: d for b, d in sealed.items() if b < txn_start and min(o for o in sealed if o > b) <= txn_start}
    assert below and len(sealed) - len(below) >= 3
    held = tiering.tier(load_config(cfg))["partitions"][0]
    assert held["copied_segments"] == len(below)
    assert held["local_segments_deleted"] == len(below)
    assert held["lag_segments"] == len(sealed) - len(below)
    assert held["log_start_offset"] == 0, "deleting tiered local copies never moves the log start offset"
    left = _local(cfg)
    assert set(left) == set(sealed) - set(below), "a segment without a finished remote copy stays"
    assert all(left[b] == sealed[b] for b in left)
    with LogManager.open(load_config(cfg)) as mgr:
        mgr.get_or_create_log(TOPIC, 0).append_end_txn(11, 0, commit=True)
    fill(cfg, 30, first=100)
    sealed_now = _local(cfg)
    done = tiering.tier(load_config(cfg))["partitions"][0]
    assert done["copied_segments"] == len(sealed_now)
    assert done["local_segments_deleted"] == len(sealed_now)
    assert done["local_bytes_deleted"] == sum(len(b) for b in sealed_now.values())
    assert done["log_start_offset"] == 0 and done["local_log_start_offset"] > max(sealed_now)
    # the active segment breached local retention too: rolled (as Kafka does), so the next run copies it
    assert done["rolled_active"] is True and done["lag_segments"] == 1
    last = tiering.tier(load_config(cfg))["partitions"][0]
    assert last["copied_segments"] == 1 and last["local_segments_deleted"] == 1 and last["lag_segments"] == 0
    assert _local(cfg) == {}
    finished = assert_every_object_tracked(cfg, weed, bucket)
    assert finished[0].start_offset == 0
    # every record, the tiered ones from the object store, as the CLI's consumer reads them from offset 0
    read = cli(cfg, "consume", "--topic", TOPIC, "--partition", "0", "--from-offset", "0")
    assert read.returncode == 0, read.stderr
    offsets = [json.loads(line)["offset"] for line in read.stdout.splitlines()]
    assert offsets == sorted(set(offsets)) and len(offsets) == 131 and offsets[0] == 0


def test_a_dry_run_plans_and_changes_nothing(tmp_path, weed, bucket):
    cfg = write_config(tmp_path, weed, bucket, local_retention_bytes=0)
    fill(cfg, 60)
    sealed = _local(cfg)
    folder = tmp_path / "logs" / f"{TOPIC}-0"
    before = sorted(os.listdir(folder))
    plan = tier_cli(cfg, "--dry-run")
    (part,) = plan["partitions"]
    assert plan["dry_run"] is True
    assert [c["base_offset"] for c in part["copied"]] == sorted(sealed)
    assert part["copied_segments"] == len(sealed) and part["local_segments_deleted"] == len(sealed)
    assert bucket_objects(weed, bucket) == {}
    assert sorted(os.listdir(folder)) == before
    assert not any(n.startswith(remote_log.TOPIC) for n in os.listdir(tmp_path / "logs"))


def test_the_tier_command_names_one_partition_and_refuses_bad_input(tmp_path, weed, bucket):
    cfg = write_config(tmp_path, weed, bucket)
    fill(cfg, 40)
    fill(cfg, 40, partition=1)
    one = tier_cli(cfg, "--topic", TOPIC, "--partition", "1", "--now-ms", "1700000100000")
    assert [p["partition"] for p in one["partitions"]] == [1]
    assert one["now_ms"] == 1700000100000 and one["copied_segments"] > 0
    assert remote_segments(cfg, partition=0) == []
    from tests.tiered.tier_helpers import cli
    bad = cli(cfg, "tier", "--partition", "1")
    assert bad.returncode == 2 and "--partition needs --topic" in bad.stderr
    missing = cli(cfg, "tier", "--topic", TOPIC, "--partition", "7")
    assert missing.returncode != 0 and f"{TOPIC}-7" in missing.stderr


def test_a_topic_without_remote_storage_is_left_alone(tmp_path, weed, bucket):
    cfg = write_config(tmp_path, weed, bucket, remote_storage_enable=False, local_retention_bytes=0)
    fill(cfg, 40)
    sealed = _local(cfg)
    (part,) = tiering.tier(load_config(cfg))["partitions"]
    assert part["tiered"] is False and part["copied_segments"] == 0 and part["local_segments_deleted"] == 0
    assert _local(cfg) == sealed and bucket_objects(weed, bucket) == {}
