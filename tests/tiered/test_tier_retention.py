"""Remote retention against a real SeaweedFS, as Kafka's ``RLMExpirationTask`` applies it: ``retention.ms`` by a
remote segment's largest timestamp, ``retention.bytes`` over the local and the remote bytes, and the log start offset
(delete-records); each deletion ``DELETE_SEGMENT_STARTED`` -> objects deleted -> ``DELETE_SEGMENT_FINISHED``, the
log start offset raised past them first. And ``remote.log.delete.on.disable``."""
from __future__ import annotations

import pytest

from storage_engine.config_file import load_config
from storage_engine.jobs import tiering
from storage_engine.log.manager import LogManager
from tests.tiered.tier_helpers import (T0, TOPIC, assert_every_object_tracked, bucket_objects, cli, fill,
                                       remote_segments, seg_id_text, write_config)

pytestmark = [pytest.mark.tiered]


def _log_start(cfg: str) -> int:
    with LogManager.open(load_config(cfg)) as mgr:
        log = mgr.get_log(TOPIC, 0)
        assert log is not None
        return log.log_start_offset


def _tier(cfg: str, now_ms: int | None = None) -> dict:
    result = tiering.tier(load_config(cfg), now_ms)
    assert result["failures"] == [], result["failures"]
    (part,) = result["partitions"]
    return part


def test_retention_ms_deletes_remote_segments_by_their_largest_timestamp(tmp_path, weed, bucket):
    cfg = write_config(tmp_path, weed, bucket, retention_ms=10_000_000, local_retention_ms=0)
    fill(cfg, 150)       # timestamps T0 .. T0 + 149
    copied = _tier(cfg, T0 + 1_000)["copied_segments"]
    finished = remote_segments(cfg)
    assert copied == len(finished) >= 5
    cut = finished[2]
    # as of cut's largest timestamp + retention.ms, segments 0..2 are past retention (Kafka: max ts <= now - ms)
    part = _tier(cfg, cut.max_timestamp_ms + 10_000_000)
    assert part["remote_segments_deleted"] == 3
    assert [d["reason"] for d in part["remote_deleted"]] == ["retention-ms"] * 3
    assert part["log_start_offset"] == cut.end_offset + 1 == _log_start(cfg)
    kept = assert_every_object_tracked(cfg, weed, bucket)
    # (the active segment, past local.retention.ms 0, was rolled by the first run and copied by this one)
    assert [s.start_offset for s in kept][:len(finished) - 3] == [s.start_offset for s in finished[3:]]
    # DELETE_SEGMENT_FINISHED ends a segment: the view rebuilt from the metadata topic no longer has it
    known = {seg_id_text(s) for s in remote_segments(cfg, states=None)}
    assert not known & {seg_id_text(s) for s in finished[:3]}
    assert not any(seg_id_text(s) in k for s in finished[:3] for k in bucket_objects(weed, bucket))


def test_retention_bytes_counts_local_and_remote_bytes(tmp_path, weed, bucket):
    cfg = write_config(tmp_path, weed, bucket, remote_log_copy_disable=False)
    fill(cfg, 150)
    _tier(cfg)
    finished = remote_segments(cfg)
    with LogManager.open(load_config(cfg)) as mgr:
        log = mgr.get_log(TOPIC, 0)
        assert log is not None
        active = log.segments[-1].size    # the only bytes not tiered
    remote = sum(s.size_bytes for s in finished)
    # keep exactly the newest two remote segments and the active one
    limit = active + finished[-1].size_bytes + finished[-2].size_bytes
    cfg = write_config(tmp_path, weed, bucket, retention_bytes=limit)
    part = _tier(cfg)
    assert part["remote_segments_deleted"] == len(finished) - 2
    assert part["remote_bytes_deleted"] == remote - finished[-1].size_bytes - finished[-2].size_bytes
    assert {d["reason"] for d in part["remote_deleted"]} == {"retention-bytes"}
    assert _log_start(cfg) == finished[-3].end_offset + 1
    assert [s.start_offset for s in assert_every_object_tracked(cfg, weed, bucket)] == \
        [finished[-2].start_offset, finished[-1].start_offset]


def test_remote_segments_below_the_log_start_offset_go(tmp_path, weed, bucket):
    cfg = write_config(tmp_path, weed, bucket, local_retention_bytes=0)
    written = fill(cfg, 150)
    _tier(cfg)
    finished = remote_segments(cfg)
    cut = finished[3].start_offset + 1     # inside segment 3: segments 0..2 end below it
    done = cli(cfg, "delete-records", "--topic", TOPIC, "--partition", "0", "--offset", str(cut))
    assert done.returncode == 0, done.stderr
    part = _tier(cfg)
    assert part["remote_segments_deleted"] == 3
    assert {d["reason"] for d in part["remote_deleted"]} == {"log-start-offset"}
    assert _log_start(cfg) == cut, "the log start offset stays where delete-records put it"
    kept = assert_every_object_tracked(cfg, weed, bucket)
    assert kept[0].start_offset == finished[3].start_offset and kept[0].end_offset >= cut
    assert written[-1][0] < tiering_end(cfg)


def tiering_end(cfg: str) -> int:
    with LogManager.open(load_config(cfg)) as mgr:
        log = mgr.get_log(TOPIC, 0)
        assert log is not None
        return log.log_end_offset


def test_delete_on_disable_removes_every_remote_segment(tmp_path, weed, bucket):
    cfg = write_config(tmp_path, weed, bucket)
    fill(cfg, 100)
    _tier(cfg)
    assert remote_segments(cfg) and bucket_objects(weed, bucket)
    off = write_config(tmp_path, weed, bucket, remote_storage_enable=False)
    kept = _tier(off)
    assert kept["remote_segments_deleted"] == 0 and kept["skipped"].startswith("remote.storage.enable is false")
    assert bucket_objects(weed, bucket), "without remote.log.delete.on.disable the remote data stays"
    gone = write_config(tmp_path, weed, bucket, remote_storage_enable=False, remote_log_delete_on_disable=True)
    part = _tier(gone)
    assert part["remote_partition_deleted"] is True and part["remote_segments_deleted"] >= 3
    assert bucket_objects(weed, bucket) == {}
    assert remote_segments(gone) == []
    with LogManager.open(load_config(gone)) as mgr:
        log = mgr.get_log(TOPIC, 0)
        assert log is not None
        assert log.log_start_offset == log.segments[0].base_offset
    again = _tier(gone)
    assert again["remote_segments_deleted"] == 0
