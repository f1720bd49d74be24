"""The object store against a real SeaweedFS: uploads (whole and multipart) verified by size and the ETag computed
locally, objects damaged or deleted behind the store's back, wrong credentials, a missing bucket and a store that
died, each reported as its own error with the operator's fix."""
from __future__ import annotations

import dataclasses
import hashlib
import os
from pathlib import Path

import pytest

from include.seaweedfs import WeedServer
from storage_engine.errors import (RemoteBucketMissingError, RemoteCredentialsError, RemoteObjectDamagedError,
                                   RemoteObjectMissingError, RemoteStoreUnreachableError, is_retriable)
from storage_engine.tiered import object_store
from storage_engine.tiered.object_store import PART_BYTES, ObjectStore, etag_of_file
from storage_engine.tiered.settings import RemoteStorageSettings
from tests.tiered.conftest import s3_client
from tests.tiered.etag_proxy import EtagProxy

pytestmark = pytest.mark.tiered


def settings_of(server: WeedServer, bucket: str, **change: object) -> RemoteStorageSettings:
    base = RemoteStorageSettings(enabled=True, endpoint_url=server.endpoint_url, bucket=bucket, region="us-east-1",
                                 path_style=True, access_key_id=server.access_key,
                                 secret_access_key=server.secret_key)
    return dataclasses.replace(base, **change)  # type: ignore[arg-type]


@pytest.fixture
def store(weed: WeedServer, bucket: str):
    s = ObjectStore(settings_of(weed, bucket))
    yield s
    s.close()


def write(path: Path, size: int) -> bytes:
    data = os.urandom(size)
    path.write_bytes(data)
    return data


@pytest.mark.parametrize("size", [0, 1, PART_BYTES - 1, PART_BYTES, PART_BYTES + 1, 2 * PART_BYTES + 12345])
def test_the_etag_computed_locally_is_the_one_weed_computes(store, weed, bucket, tmp_path, size):
    """Whole (below the part size) and multipart (from it on) uploads: the size and ETag read back with a HEAD are
    the ones computed from the file, so verify passes, and the object reads back as the file."""
    data = write(tmp_path / "segment.log", size)
    uploaded = store.upload("t/0/segment.log", str(tmp_path / "segment.log"))
    head = s3_client(weed).head_object(Bucket=bucket, Key="t/0/segment.log")
    assert (uploaded.size, uploaded.checksum) == (size, head["ETag"].strip('"')) == etag_of_file(
        str(tmp_path / "segment.log"))
    assert ("-" in uploaded.checksum) == (size >= PART_BYTES)       # multipart from the part size on
    store.verify(uploaded.key, uploaded.size, uploaded.checksum)
    store.check_stored("t/0/", [uploaded])          # a listing carries the same size and ETag as the HEAD
    assert store.get(uploaded.key) == data
    if size > 10:
        assert store.get_range(uploaded.key, 3, size - 2) == data[3:size - 2]
    assert store.get_range(uploaded.key, 0, 0) == b""


def test_put_list_and_delete(store):
    for name in ("a/1", "a/2", "a/3", "b/1"):
        store.put(name, name.encode() * 3)
    assert [(o.key, o.size) for o in store.list("a/")] == [("a/1", 9), ("a/2", 9), ("a/3", 9)]
    # A listing carries each object's ETag as the store computed it: the MD5 of a whole-object PUT.
    assert [o.etag for o in store.list("a/")] == [hashlib.md5(n.encode() * 3).hexdigest() for n in ("a/1", "a/2", "a/3")]
    store.delete(["a/1", "a/2", "a/missing"])          # absent keys are no error
    assert [o.key for o in store.list("")] == ["a/3", "b/1"]
    uploaded = store.put("c", b"0123456789")
    store.verify(uploaded.key, 10, uploaded.checksum)


def test_incomplete_multipart_uploads_are_listed_and_aborted(store, weed, bucket):
    client = s3_client(weed)
    started = [client.create_multipart_upload(Bucket=bucket, Key=f"t/0/{name}")["UploadId"] for name in "ab"]
    client.upload_part(Bucket=bucket, Key="t/0/a", UploadId=started[0], PartNumber=1, Body=b"x" * 100)
    client.create_multipart_upload(Bucket=bucket, Key="u/0/c")
    assert sorted((k, u) for k, u, _ in store.incomplete_uploads("t/")) == [("t/0/a", started[0]), ("t/0/b", started[1])]
    assert store.abort_incomplete_uploads("t/", started_before_ms=0) == 0      # none started before 1970
    assert store.abort_incomplete_uploads("t/") == 2
    assert store.incomplete_uploads("t/") == [] and [k for k, _, _ in store.incomplete_uploads("")] == ["u/0/c"]
    assert list(store.list("")) == []                                       # parts were never objects


def test_delete_goes_in_batches(store, monkeypatch):
    monkeypatch.setattr(object_store, "DELETE_BATCH", 2)
    keys = [f"k/{i}" for i in range(5)]
    for key in keys:
        store.put(key, b"x")
    store.delete(keys)
    assert list(store.list("k/")) == []


def test_an_object_replaced_behind_the_stores_back_is_damaged(store, weed, bucket, tmp_path):
    data = write(tmp_path / "seg", PART_BYTES + 100)
    uploaded = store.upload("seg", str(tmp_path / "seg"))
    client = s3_client(weed)
    client.put_object(Bucket=bucket, Key="seg", Body=data[:-1] + bytes([data[-1] ^ 1]))    # same size, one bit
    with pytest.raises(RemoteObjectDamagedError) as err:
        store.verify("seg", uploaded.size, uploaded.checksum, offsets=(100, 199))
    assert err.value.key == "seg" and err.value.offsets == (100, 199)
    assert "remote object seg is damaged (offsets 100 to 199): its ETag is" in str(err.value)
    assert err.value.fix is not None and "restore the object" in err.value.fix
    client.put_object(Bucket=bucket, Key="seg", Body=data[:1000])
    with pytest.raises(RemoteObjectDamagedError, match=f"1000 bytes where {PART_BYTES + 100} were uploaded"):
        store.verify("seg", uploaded.size, uploaded.checksum)
    with pytest.raises(RemoteObjectDamagedError, match="the object is shorter|ends before byte"):
        store.get_range("seg", 900, 1100, offsets=(5, 6))
    with pytest.raises(RemoteObjectDamagedError, match="ends before byte 2000"):
        store.get_range("seg", 2000, 2100)


def test_an_object_deleted_behind_the_stores_back_is_missing(store, weed, bucket):
    uploaded = store.put("gone", b"bytes")
    s3_client(weed).delete_object(Bucket=bucket, Key="gone")
    with pytest.raises(RemoteObjectMissingError) as err:
        store.verify("gone", uploaded.size, uploaded.checksum, offsets=(0, 41))
    assert err.value.offsets == (0, 41) and "remote object gone is missing (offsets 0 to 41)" in str(err.value)
    with pytest.raises(RemoteObjectMissingError):
        store.get("gone")
    with pytest.raises(RemoteObjectMissingError):
        store.get_range("gone", 0, 2)
    assert not is_retriable(err.value)


def test_a_missing_bucket_is_named_with_its_fix(weed, tmp_path):
    store = ObjectStore(settings_of(weed, "no-such-bucket"))
    write(tmp_path / "f", 100)
    for attempt in (lambda: store.upload("k", str(tmp_path / "f")), lambda: store.put("k", b"x"),
                    lambda: store.verify("k", 1, "x"), lambda: store.get("k"), lambda: list(store.list("p/"))):
        with pytest.raises(RemoteBucketMissingError) as err:
            attempt()
        assert err.value.fix == "create bucket no-such-bucket or fix rsm.config.storage.s3.bucket.name"
    health = store.health()
    assert (health["reachable"], health["bucket_exists"], health["credentials_ok"]) == (True, False, True)
    assert health["fix"] == "create bucket no-such-bucket or fix rsm.config.storage.s3.bucket.name"


@pytest.mark.parametrize("change", [{"secret_access_key": "wrong-secret"}, {"access_key_id": "nobody"}])
def test_wrong_credentials_are_named_with_their_fix(weed, bucket, tmp_path, change):
    store = ObjectStore(settings_of(weed, bucket, **change))
    write(tmp_path / "f", 100)
    for attempt in (lambda: store.upload("k", str(tmp_path / "f")), lambda: store.get("k"),
                    lambda: store.verify("k", 1, "x"), lambda: list(store.list(""))):
        with pytest.raises(RemoteCredentialsError) as err:
            attempt()
        assert "fix rsm.config.storage.aws.access.key.id and rsm.config.storage.aws.secret.access.key" in str(err.value)
        assert "wrong-secret" not in str(err.value)
    health = store.health()
    assert (health["reachable"], health["credentials_ok"]) == (True, False)
    assert list(ObjectStore(settings_of(weed, bucket)).list("")) == []     # nothing was written


@pytest.mark.kills
def test_a_dead_store_is_unreachable_with_its_fix_and_health_says_so(weed_factory, tmp_path):
    server = weed_factory()
    s3_client(server).create_bucket(Bucket="tiered")
    store = ObjectStore(settings_of(server, "tiered"))
    write(tmp_path / "f", PART_BYTES + 1)
    uploaded = store.upload("k", str(tmp_path / "f"))
    assert store.health()["reachable"]
    server.kill9()
    for attempt in (lambda: store.upload("k2", str(tmp_path / "f")), lambda: store.put("k3", b"x"),
                    lambda: store.verify("k", uploaded.size, uploaded.checksum), lambda: store.get("k"),
                    lambda: store.delete(["k"]), lambda: list(store.list(""))):
        with pytest.raises(RemoteStoreUnreachableError) as err:
            attempt()
        assert err.value.fix == f"start the object store at {server.endpoint_url} or fix " \
                                "rsm.config.storage.s3.endpoint.url"
        assert is_retriable(err.value)
    health = store.health()
    assert (health["reachable"], health["bucket_exists"]) == (False, None)
    assert health["fix"].startswith("start the object store at")
    server.start()                       # back, with the object: nothing was deleted meanwhile
    store.verify("k", uploaded.size, uploaded.checksum)


@pytest.mark.parametrize("size", [100, PART_BYTES + 1])
def test_an_upload_answered_with_another_etag_is_damaged_and_leaves_nothing(weed, bucket, tmp_path, size):
    """The upload checks the store's answer to each request (PUT, or each part) against the MD5 of the bytes it read
    and sent: a store answering another ETag (it kept other bytes) fails the upload as damaged, naming the key and
    offsets, and a multipart upload is aborted (no object, no parts left). The same file then uploads and verifies
    through the same path once the answers are right again."""
    data = write(tmp_path / "seg", size)
    with EtagProxy(weed.endpoint_url) as proxy:
        store = ObjectStore(settings_of(weed, bucket, endpoint_url=proxy.endpoint_url))
        proxy.damage_uploads = True
        with pytest.raises(RemoteObjectDamagedError) as err:
            store.upload("t/seg", str(tmp_path / "seg"), (7, 9))
        assert proxy.damaged >= 1
        assert err.value.key == "t/seg" and err.value.offsets == (7, 9)
        what = "PUT" if size < PART_BYTES else "part "
        assert f"the store answered the {what}" in str(err.value) and "where the bytes sent give" in str(err.value)
        assert store.incomplete_uploads("") == []
        if size < PART_BYTES:       # a single PUT's object exists (S3 has no way to refuse it after the fact):
            store.delete(["t/seg"])     # the caller (the copy) deletes it with the segment's other objects
        assert list(store.list("")) == []
        proxy.damage_uploads = False
        uploaded = store.upload("t/seg", str(tmp_path / "seg"))
        assert (uploaded.size, uploaded.checksum) == etag_of_file(str(tmp_path / "seg"))
        store.verify(uploaded.key, uploaded.size, uploaded.checksum)
        assert store.get("t/seg") == data
        store.close()
