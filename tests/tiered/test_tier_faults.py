"""The object store failing under the tiering job (a real SeaweedFS killed, a bucket that does not exist, credentials
it refuses): the partition fails with the ``RemoteStorageError`` that names the fix, the command exits 1, and
nothing local is deleted, though local retention would delete every sealed segment."""
from __future__ import annotations

import json
import os

import pytest

from tests.tiered.tier_helpers import TOPIC, cli, fill, write_config

pytestmark = [pytest.mark.tiered]


def _files(tmp_path) -> dict[str, int]:
    folder = tmp_path / "logs" / f"{TOPIC}-0"
    # (partition.metadata aside: the topic id is written once, before anything reaches the store)
    return {n: os.path.getsize(folder / n) for n in os.listdir(folder) if n != "partition.metadata"}


def _failed(cfg: str) -> tuple[dict, str]:
    done = cli(cfg, "tier")
    assert done.returncode == 1, (done.returncode, done.stderr)
    out = json.loads(done.stdout)
    (failure,) = out["failures"]
    assert failure["topic"] == TOPIC and failure["partition"] == 0
    assert out["local_segments_deleted"] == 0
    return failure, done.stderr


@pytest.mark.kills
def test_a_dead_object_store_fails_the_partition_and_deletes_nothing(tmp_path, weed_factory):
    server = weed_factory()
    from tests.tiered.conftest import s3_client
    s3_client(server).create_bucket(Bucket="segments")
    cfg = write_config(tmp_path, server, "segments", local_retention_bytes=0)
    fill(cfg, 60)
    before = _files(tmp_path)
    assert server.kill9()
    failure, stderr = _failed(cfg)
    assert failure["error_type"] == "RemoteStoreUnreachableError"
    assert "rsm.config.storage.s3.endpoint.url" in failure["error"] and "fix" in stderr
    assert failure["permanent"] is False
    assert _files(tmp_path) == before


def test_a_missing_bucket_fails_the_partition_naming_it(tmp_path, weed, bucket):
    cfg = write_config(tmp_path, weed, bucket + "-absent", local_retention_bytes=0)
    fill(cfg, 60)
    before = _files(tmp_path)
    failure, _ = _failed(cfg)
    assert failure["error_type"] == "RemoteBucketMissingError"
    assert f"create bucket {bucket}-absent" in failure["error"]
    assert _files(tmp_path) == before


def test_refused_credentials_fail_the_partition_naming_the_keys(tmp_path, weed, bucket):
    cfg = write_config(tmp_path, weed, bucket, secret="not-the-secret", local_retention_bytes=0)
    fill(cfg, 60)
    before = _files(tmp_path)
    failure, _ = _failed(cfg)
    assert failure["error_type"] == "RemoteCredentialsError"
    assert "rsm.config.storage.aws.secret.access.key" in failure["error"]
    assert "not-the-secret" not in failure["error"]
    assert _files(tmp_path) == before


def _faulty_store_fails_the_copy_then_recovers(tmp_path, weed, bucket, fault: str) -> dict:
    """Copy through an :class:`EtagProxy` with ``fault`` (its flag) set: the partition's failure (returned) must
    leave no segment finished and the local files as they were; with the fault cleared, the next run copies every
    segment and leaves no object untracked. Returns the failure and the proxy's counters."""
    from tests.tiered.etag_proxy import EtagProxy
    from tests.tiered.tier_helpers import assert_every_object_tracked, remote_segments, tier_cli
    with EtagProxy(weed.endpoint_url) as proxy:
        cfg = write_config(tmp_path, weed, bucket, endpoint=proxy.endpoint_url, local_retention_bytes=0)
        fill(cfg, 60)
        before = _files(tmp_path)
        setattr(proxy, fault, True)
        failure, _ = _failed(cfg)
        assert remote_segments(cfg) == []
        assert _files(tmp_path) == before
        setattr(proxy, fault, False)
        out = tier_cli(cfg)
        assert out["copied_segments"] >= 2 and not out["failures"]
        finished = assert_every_object_tracked(cfg, weed, bucket)
        assert len(finished) == out["copied_segments"]
        return {**failure, "damaged": proxy.damaged, "lost": proxy.lost}


def test_a_store_answering_other_etags_fails_the_copy_as_damaged_and_finishes_nothing(tmp_path, weed, bucket):
    """Every object is checked against the bytes read from the local file before COPY_SEGMENT_FINISHED: a store
    whose answers to the uploads carry another ETag than the MD5 of the bytes sent (it kept other bytes) fails the
    partition as damage, with no segment finished and nothing local deleted. Once the answers are right, the next
    run copies every segment and no object is left untracked."""
    failure = _faulty_store_fails_the_copy_then_recovers(tmp_path, weed, bucket, "damage_uploads")
    assert failure["damaged"] >= 1
    assert failure["error_type"] == "RemoteObjectDamagedError"
    assert "where the bytes sent give" in failure["error"]


def test_a_store_losing_acknowledged_uploads_fails_the_copy_as_missing_and_finishes_nothing(tmp_path, weed, bucket):
    """A store that acknowledges an upload with the right ETag and then does not keep the object (weed's gateway
    answering before a volume server took the write, then losing it) is caught by the copy's read-back of what
    the store kept (one listing of the segment's keys) before COPY_SEGMENT_FINISHED: the partition fails with the
    missing object named, no segment finished, nothing local deleted; the next run copies every segment."""
    failure = _faulty_store_fails_the_copy_then_recovers(tmp_path, weed, bucket, "lose_puts")
    assert failure["lost"] >= 1
    assert failure["error_type"] == "RemoteObjectMissingError"
    assert "is missing" in failure["error"] and "offsets" in failure["error"]
