"""Objects no metadata names under a partition's key prefix (put there behind the store's back, as a run that lost
its metadata would leave them) and a multipart upload never completed: a sweep's dry run reports them, a sweep
deletes and aborts them, and the finished segments are untouched. A segment deleted by another process while it is being
uploaded is abandoned: its objects deleted, its states closed. And a partition another run is tiering is skipped."""
from __future__ import annotations

import pytest

from storage_engine.log.manager import LogManager
from storage_engine.tiered import copy as copy_mod
from storage_engine.tiered import metadata as md
from storage_engine.tiered.context import TierContext
from storage_engine.tiered.object_store import ObjectStore
from storage_engine.tiered.remote_log import RemoteLogView
from storage_engine.tiered.settings import RemoteStorageSettings

from storage_engine.config_file import load_config
from storage_engine.jobs import tiering
from storage_engine.log.topic_id import random_uuid, uuid_text
from storage_engine.tiered.locks import TieringClaim
from tests.tiered.conftest import s3_client
from tests.tiered.tier_helpers import (TOPIC, assert_every_object_tracked, bucket_objects, cli, fill, remote_segments,
                                       tier_cli, write_config)

pytestmark = [pytest.mark.tiered]


def test_untracked_objects_and_cut_uploads_are_cleaned(tmp_path, weed, bucket):
    cfg = write_config(tmp_path, weed, bucket, prefix="p/")
    fill(cfg, 60)
    assert assert_every_object_tracked(cfg, weed, bucket) == []     # nothing copied yet
    first = tier_cli(cfg)["partitions"][0]
    assert first["copied_segments"] >= 3 and first["orphan_objects"] == 0
    tracked = bucket_objects(weed, bucket)
    log_key = next(k for k in tracked if k.endswith(".log"))
    prefix = log_key.rsplit("/", 1)[0] + "/"
    s3 = s3_client(weed)
    stray_segment = f"{prefix}{999:020d}-{uuid_text(random_uuid())}.log"
    s3.put_object(Bucket=bucket, Key=stray_segment, Body=b"no metadata names me")
    s3.put_object(Bucket=bucket, Key=prefix + "notes.txt", Body=b"not a segment part")
    elsewhere = f"p/{TOPIC}-{uuid_text(random_uuid())}/0/{0:020d}-{uuid_text(random_uuid())}.log"
    s3.put_object(Bucket=bucket, Key=elsewhere, Body=b"another topic id: not this partition's")
    upload = s3.create_multipart_upload(Bucket=bucket, Key=f"{prefix}{998:020d}-{uuid_text(random_uuid())}.log")
    s3.upload_part(Bucket=bucket, Key=upload["Key"], UploadId=upload["UploadId"], PartNumber=1, Body=b"x" * 1024)

    quick = tier_cli(cfg)["partitions"][0]     # nothing unfinished: the objects are not listed
    assert quick["orphan_objects"] == 0 and quick["orphan_uploads"] == 0
    plan = tier_cli(cfg, "--dry-run", "--sweep-orphans")["partitions"][0]
    assert plan["orphan_objects"] == 2 and plan["orphan_uploads"] == 1
    assert sorted(plan["orphan_keys"]) == sorted([stray_segment, prefix + "notes.txt"])
    assert set(bucket_objects(weed, bucket)) == set(tracked) | {stray_segment, prefix + "notes.txt", elsewhere}

    done = tier_cli(cfg, "--sweep-orphans")["partitions"][0]
    assert done["orphan_objects"] == 2 and done["orphan_uploads"] == 1 and done["copied_segments"] == 0
    assert set(bucket_objects(weed, bucket)) == set(tracked) | {elsewhere}
    assert s3.list_multipart_uploads(Bucket=bucket, Prefix=prefix).get("Uploads", []) == []
    again = tier_cli(cfg, "--sweep-orphans")["partitions"][0]
    assert again["orphan_objects"] == 0 and again["orphan_uploads"] == 0


def test_a_partition_another_run_is_tiering_is_skipped(tmp_path, weed, bucket):
    cfg = write_config(tmp_path, weed, bucket)
    fill(cfg, 60)
    claim = TieringClaim(str(tmp_path / "logs"), f"{TOPIC}-0")
    assert claim.try_acquire()
    try:
        (part,) = tiering.tier(load_config(cfg))["partitions"]
        assert part["skipped"] == "another process is tiering this partition"
        assert part["copied_segments"] == 0 and bucket_objects(weed, bucket) == {}
    finally:
        claim.release()
    (part,) = tiering.tier(load_config(cfg))["partitions"]
    assert part["copied_segments"] >= 3


class _Racing(TierContext):
    """A run during whose upload another process deletes the segment being copied (delete-records past it, then
    retention): the moment is fixed by running that process right after COPY_SEGMENT_STARTED."""

    cfg = ""

    def copy_started(self, seg: md.RemoteSegment) -> None:
        super().copy_started(seg)
        for args in (("delete-records", "--topic", TOPIC, "--partition", "0", "--offset", str(seg.end_offset + 1)),
                     ("retention", "--topic", TOPIC, "--partition", "0")):
            done = cli(self.cfg, *args)
            assert done.returncode == 0, done.stderr


def test_a_segment_deleted_under_its_upload_is_abandoned_and_its_objects_deleted(tmp_path, weed, bucket):
    cfg = write_config(tmp_path, weed, bucket)
    fill(cfg, 60)
    config = load_config(cfg)
    settings = RemoteStorageSettings.of(config)
    with LogManager.open(config) as mgr:
        log = mgr.get_log(TOPIC, 0)
        assert log is not None
        ctx = _Racing(mgr, settings, ObjectStore(settings), RemoteLogView.load(mgr), 0)
        ctx.cfg = cfg
        with log.locked():
            first = copy_mod.eligible(log, -1)[0]
        assert copy_mod.copy_segment(ctx, log, first) is None
        assert log.log_start_offset == first.end_offset + 1 and log.segments[0].base_offset > first.base_offset
    assert bucket_objects(weed, bucket) == {}
    assert remote_segments(cfg, states=None) == [], "the abandoned copy's states are closed (DELETE_SEGMENT_FINISHED)"
