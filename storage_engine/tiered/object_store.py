"""The S3 object store holding remote segments (SeaweedFS's S3 gateway, or any S3), through boto3.

Client: boto3 (pinned: the S3 client every Python S3 user knows; how it compares with ``obstore`` is measured by
the benchmarks), one client per :class:`ObjectStore`, shared by threads (boto3 clients are thread-safe).

Uploads (:meth:`ObjectStore.upload`) read each file once: a file below :data:`PART_BYTES` goes up in one PUT, a
larger one in parts of s3transfer's size for it (:data:`CONCURRENT_PARTS` at once, each part read into memory,
hashed and sent from that same buffer). Every request's bytes are hashed (MD5) as they are read, and the ETag the
store answers to that request (its MD5 of the bytes it received) must equal it; the ETag answered to the
CompleteMultipartUpload must equal the MD5 of the parts' MD5s followed by ``-<parts>``. So an upload that returns
has been acknowledged byte for byte, with no second read of the file. botocore's own request checksum (a CRC32
trailer in aws-chunked encoding, on by default) is turned off: it would hash the same bytes a second time for a
check the MD5 already makes, and its chunked body costs CPU per request.

Verification (:meth:`ObjectStore.verify`): the object's size and its ETag, read back with a HEAD, must equal the
size and ETag of what was read locally (from :meth:`ObjectStore.upload`, or :func:`etag_of_file` for the same part
size): the MD5 of the bytes for a single PUT, the MD5 of the parts' MD5s followed by ``-<parts>`` for a multipart
upload. The store computes its ETag from the bytes it received (no Content-MD5 is sent for it to echo), so an equal
ETag means the store holds what was read locally; an object replaced behind the store's back has another ETag, and
one missing answers 404. SeaweedFS computes both forms as S3 does (tests/tiered/test_object_store.py checks it
against a real ``weed``).

Failures are the :class:`~storage_engine.errors.RemoteStorageError` subclasses, each with the operator's fix:
unreachable (connection refused, timed out, reset: retriable), bucket missing, credentials refused, object missing,
object damaged. A write first checks that the bucket exists: SeaweedFS creates a missing bucket on a PUT, and the
engine never creates one (a mistyped bucket name must fail, not start a new bucket). Timeouts are short and retries bounded, so a dead store fails a task in seconds: a refused
connection fails after :data:`MAX_ATTEMPTS` tries (0.1 s measured against a killed ``weed``), a store that accepts
and never answers after :data:`READ_TIMEOUT_S` per try (30 s in all against a stopped one).
"""
from __future__ import annotations

import builtins
import hashlib
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, NamedTuple, TypeVar

import boto3
import botocore.exceptions as bex
import botocore.loaders
import botocore.session
from botocore.config import Config
from s3transfer.utils import ChunksizeAdjuster

from storage_engine.errors import (RemoteBucketMissingError, RemoteCredentialsError, RemoteObjectDamagedError,
                                   RemoteObjectMissingError, RemoteStorageError, RemoteStoreUnreachableError,
                                   StorageError)
from storage_engine.tiered.settings import RemoteStorageSettings

__all__ = ["ObjectStore", "Uploaded", "ListedObject", "etag_of_file", "PART_BYTES"]

PART_BYTES = 8 * 1024 * 1024        # multipart threshold and part size (s3transfer's defaults)
CONCURRENT_PARTS = 4                # parts of one file in flight (and in memory) at once
CONNECT_TIMEOUT_S = 3.0
READ_TIMEOUT_S = 10.0
MAX_ATTEMPTS = 3                    # botocore's "standard" retry mode: the first try and two retries
DELETE_BATCH = 1000                 # S3's DeleteObjects limit
_READ_BYTES = 1024 * 1024

_T = TypeVar("_T")
Offsets = tuple[int, int] | None
_CREDENTIAL_CODES = {"InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "403", "Forbidden",
                     "InvalidToken", "ExpiredToken", "AuthorizationHeaderMalformed"}
_MISSING_OBJECT_CODES = {"NoSuchKey", "404", "NotFound"}
# botocore's parsed service models (S3's JSON files, read once per loader): shared by every client of the process.
# A fresh session parses them again, 0.2-1.5 s per client (measured at load average 1-24); the tiering job makes
# one client per batch, so 20 batches over 10,000 partitions spent up to 20 s on it. Only the read-only model
# data is shared: each client keeps its own session (its credentials and configuration are its own).
_LOADER_MUTEX = threading.Lock()
_LOADER: botocore.loaders.Loader | None = None


def _session() -> boto3.session.Session:
    """A new boto3 session whose botocore session reads service models through the process's shared loader."""
    global _LOADER
    core = botocore.session.get_session()
    with _LOADER_MUTEX:
        if _LOADER is None:
            _LOADER = core.get_component("data_loader")
        else:
            core.register_component("data_loader", _LOADER)
    return boto3.session.Session(botocore_session=core)


class Uploaded(NamedTuple):
    key: str
    size: int
    checksum: str          # the ETag the store must give back (see the module docstring), without quotes


class ListedObject(NamedTuple):
    key: str
    size: int
    etag: str = ""         # without quotes


def etag_of_file(path: str, part_bytes: int = PART_BYTES) -> tuple[int, str]:
    """``(size, ETag)`` of the file as S3 computes the ETag of an upload of it by :meth:`ObjectStore.upload` (whole
    when smaller than ``part_bytes``, else in parts of s3transfer's size for it)."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size < part_bytes:
            md5 = hashlib.md5(usedforsecurity=False)
            while chunk := f.read(_READ_BYTES):
                md5.update(chunk)
            return size, md5.hexdigest()
        part = ChunksizeAdjuster().adjust_chunksize(part_bytes, size)
        digests = []
        while True:
            md5, got = hashlib.md5(usedforsecurity=False), 0
            while got < part and (chunk := f.read(min(part - got, _READ_BYTES))):
                md5.update(chunk)
                got += len(chunk)
            if got:
                digests.append(md5.digest())
            if got < part:
                break
        return size, f"{hashlib.md5(b''.join(digests), usedforsecurity=False).hexdigest()}-{len(digests)}"


def _pread_exactly(fd: int, path: str, length: int, start: int) -> bytes:
    """``length`` bytes of the open file from ``start``; a file shorter than when it was measured is an error (a
    sealed segment never shrinks: something else changed it)."""
    chunks, got = [], 0
    while got < length:
        chunk = os.pread(fd, length - got, start + got)
        if not chunk:
            raise StorageError(f"{path} ended at byte {start + got} while it was uploaded (it had more when the "
                               f"upload began): the file was changed by something else")
        chunks.append(chunk)
        got += len(chunk)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


class ObjectStore:
    """The bucket of ``settings`` (:class:`RemoteStorageSettings`). Never creates the bucket."""

    def __init__(self, settings: RemoteStorageSettings, *, connect_timeout_s: float = CONNECT_TIMEOUT_S,
                 read_timeout_s: float = READ_TIMEOUT_S, max_attempts: int = MAX_ATTEMPTS) -> None:
        self.settings = settings
        self.bucket = settings.bucket
        self.endpoint_url = settings.endpoint_url
        config = Config(connect_timeout=connect_timeout_s, read_timeout=read_timeout_s,
                        retries={"mode": "standard", "total_max_attempts": max_attempts},
                        s3={"addressing_style": "path" if settings.path_style else "virtual"},
                        max_pool_connections=2 * CONCURRENT_PARTS + 4, tcp_keepalive=True,
                        # the uploads check every request's bytes by MD5 against the store's ETag (module docstring)
                        request_checksum_calculation="when_required")
        self.client: Any = _session().client(
            "s3", endpoint_url=settings.endpoint_url, region_name=settings.region, config=config,
            aws_access_key_id=settings.access_key_id, aws_secret_access_key=settings.secret_access_key)

    # -- errors ------------------------------------------------------------------------------------------------

    def _translate(self, exc: Exception, key: str | None, offsets: Offsets) -> Exception:
        """The :class:`RemoteStorageError` ``exc`` (a botocore failure) stands for."""
        if isinstance(exc, (bex.EndpointConnectionError, bex.ConnectTimeoutError, bex.ReadTimeoutError,
                            bex.ConnectionClosedError, bex.ProxyConnectionError)):
            return RemoteStoreUnreachableError(self.endpoint_url, str(exc))
        if isinstance(exc, bex.HTTPClientError):      # a connection reset or another transport failure
            return RemoteStoreUnreachableError(self.endpoint_url, str(exc))
        if isinstance(exc, bex.NoCredentialsError):
            return RemoteCredentialsError("no credentials are configured (rsm.config.storage.aws.access.key.id)")
        if not isinstance(exc, bex.ClientError):
            return exc
        error = exc.response.get("Error", {})
        code = str(error.get("Code", ""))
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if code == "NoSuchBucket":
            return RemoteBucketMissingError(self.bucket, self.endpoint_url)
        if code in _CREDENTIAL_CODES or status == 403:
            return RemoteCredentialsError(f"{code}: {error.get('Message') or 'access denied'}")
        if key is not None and (code in _MISSING_OBJECT_CODES or status == 404):
            return RemoteObjectMissingError(key, offsets)
        failed = RemoteStorageError(f"the object store at {self.endpoint_url} failed: {code} "
                                    f"{error.get('Message') or ''}".rstrip(),
                                    "see the object store's log; the operation is retried by the next run")
        failed.retriable = status is None or status >= 500
        return failed

    def _call(self, operation: Callable[[], _T], key: str | None = None, offsets: Offsets = None) -> _T:
        try:
            return operation()
        except (bex.BotoCoreError, bex.ClientError) as exc:
            translated = self._translate(exc, key, offsets)
            if isinstance(translated, RemoteObjectMissingError) and not self._bucket_exists():
                raise RemoteBucketMissingError(self.bucket, self.endpoint_url) from exc
            raise translated from exc

    def require_bucket(self) -> None:
        """Raise :class:`RemoteBucketMissingError` unless the bucket exists. Asked before every write: SeaweedFS
        (like some other S3 stores) creates a missing bucket on a PUT, which would hide a mistyped bucket name."""
        def head() -> None:
            self.client.head_bucket(Bucket=self.bucket)
        try:
            self._call(head)
        except RemoteStorageError as exc:
            cause = exc.__cause__
            if isinstance(cause, bex.ClientError) and str(cause.response.get("Error", {}).get("Code")) in (
                    "404", "NoSuchBucket", "NotFound"):
                raise RemoteBucketMissingError(self.bucket, self.endpoint_url) from cause
            raise

    def _bucket_exists(self) -> bool:
        """Whether the bucket exists (a 404 of a HEAD says not which is missing, the bucket or the object)."""
        try:
            self.client.head_bucket(Bucket=self.bucket)
            return True
        except bex.ClientError as exc:
            return str(exc.response.get("Error", {}).get("Code")) not in ("404", "NoSuchBucket", "NotFound")
        except bex.BotoCoreError:
            return True

    # -- writing -----------------------------------------------------------------------------------------------

    def upload(self, key: str, path: str, offsets: Offsets = None, *, check_bucket: bool = True) -> Uploaded:
        """Upload the file at ``path`` as ``key``, reading it once (module docstring), and return its size and the
        ETag the store computed for it (:meth:`verify` checks both against the object as stored). Raises
        :class:`RemoteObjectDamagedError` naming ``offsets`` when the store's answer is not the MD5 of the bytes
        sent. ``check_bucket=False`` when the caller has just checked the bucket (:meth:`require_bucket`)."""
        if check_bucket:
            self.require_bucket()
        fd = os.open(path, os.O_RDONLY)
        try:
            size = os.fstat(fd).st_size
            if size < PART_BYTES:
                return self._put_whole(key, path, fd, size, offsets)
            return self._put_parts(key, path, fd, size, offsets)
        finally:
            os.close(fd)

    def _answered(self, key: str, offsets: Offsets, what: str, answer: dict, expected: str) -> str:
        """The ETag of ``answer``, which must be ``expected`` (the MD5 of the bytes sent, or the parts' ETag)."""
        got = str(answer.get("ETag", "")).strip('"')
        if got != expected:
            raise RemoteObjectDamagedError(key, offsets, f"the store answered the {what} with ETag {got!r} where "
                                                         f"the bytes sent give {expected!r}")
        return got

    def _put_whole(self, key: str, path: str, fd: int, size: int, offsets: Offsets) -> Uploaded:
        data = _pread_exactly(fd, path, size, 0)
        md5 = hashlib.md5(data, usedforsecurity=False).hexdigest()
        answer = self._call(lambda: self.client.put_object(Bucket=self.bucket, Key=key, Body=data), key, offsets)
        return Uploaded(key, size, self._answered(key, offsets, "PUT", answer, md5))

    def _put_parts(self, key: str, path: str, fd: int, size: int, offsets: Offsets) -> Uploaded:
        part_size = ChunksizeAdjuster().adjust_chunksize(PART_BYTES, size)
        count = -(-size // part_size)
        created = self._call(lambda: self.client.create_multipart_upload(Bucket=self.bucket, Key=key), key, offsets)
        upload_id = str(created["UploadId"])

        def send(number: int) -> bytes:
            """Part ``number`` (from 1) read, hashed, sent; its MD5 digest once the store's ETag matched it."""
            start = (number - 1) * part_size
            data = _pread_exactly(fd, path, min(part_size, size - start), start)
            md5 = hashlib.md5(data, usedforsecurity=False)
            answer = self._call(lambda: self.client.upload_part(Bucket=self.bucket, Key=key, UploadId=upload_id,
                                                                PartNumber=number, Body=data), key, offsets)
            self._answered(key, offsets, f"part {number}", answer, md5.hexdigest())
            return md5.digest()

        try:
            with ThreadPoolExecutor(min(CONCURRENT_PARTS, count), thread_name_prefix="upload-part") as pool:
                futures: builtins.list[Future[bytes]] = [pool.submit(send, n) for n in range(1, count + 1)]
                try:
                    digests = [f.result() for f in futures]
                except BaseException:
                    for f in futures:
                        f.cancel()      # the parts not begun are not sent; the pool waits for the others
                    raise
            etag = f"{hashlib.md5(b''.join(digests), usedforsecurity=False).hexdigest()}-{count}"
            parts = [{"ETag": f'"{d.hex()}"', "PartNumber": n} for n, d in enumerate(digests, 1)]
            answer = self._call(lambda: self.client.complete_multipart_upload(
                Bucket=self.bucket, Key=key, UploadId=upload_id, MultipartUpload={"Parts": parts}), key, offsets)
            return Uploaded(key, size, self._answered(key, offsets, "CompleteMultipartUpload", answer, etag))
        except BaseException:
            self._abort_quietly(key, upload_id)
            raise

    def _abort_quietly(self, key: str, upload_id: str) -> None:
        """Abort a failed multipart upload so its parts take no space; if even that fails (the store is down), the
        orphan step aborts it later (:meth:`abort_incomplete_uploads`)."""
        try:
            self.client.abort_multipart_upload(Bucket=self.bucket, Key=key, UploadId=upload_id)
        except (bex.BotoCoreError, bex.ClientError):
            pass

    def put(self, key: str, data: bytes) -> Uploaded:
        """Store ``data`` as ``key`` in one request (small objects)."""
        self.require_bucket()
        self._call(lambda: self.client.put_object(Bucket=self.bucket, Key=key, Body=data), key)
        return Uploaded(key, len(data), hashlib.md5(data, usedforsecurity=False).hexdigest())

    def delete(self, keys: Iterable[str]) -> None:
        """Delete ``keys`` (absent ones are no error, as in S3), in batches of :data:`DELETE_BATCH`."""
        pending = list(dict.fromkeys(keys))
        for start in range(0, len(pending), DELETE_BATCH):
            batch = [{"Key": k} for k in pending[start:start + DELETE_BATCH]]
            answer = self._call(lambda: self.client.delete_objects(
                Bucket=self.bucket, Delete={"Objects": batch, "Quiet": True}))
            errors = answer.get("Errors") or []
            if errors:
                first = errors[0]
                raise RemoteStorageError(f"the object store did not delete {len(errors)} of {len(batch)} objects; "
                                         f"{first.get('Key')}: {first.get('Code')} {first.get('Message', '')}",
                                         "see the object store's log; the next run deletes them again")

    # -- reading -----------------------------------------------------------------------------------------------

    def head(self, key: str, offsets: Offsets = None) -> tuple[int, str]:
        """``(size, ETag without quotes)`` of ``key``; :class:`RemoteObjectMissingError` when absent."""
        answer = self._call(lambda: self.client.head_object(Bucket=self.bucket, Key=key), key, offsets)
        return int(answer["ContentLength"]), str(answer.get("ETag", "")).strip('"')

    def verify(self, key: str, size: int, checksum: str, offsets: Offsets = None) -> None:
        """Check that ``key`` holds what was uploaded (``size`` and ``checksum`` from :meth:`upload`): raises
        :class:`RemoteObjectMissingError` or :class:`RemoteObjectDamagedError` naming ``offsets``."""
        found_size, found = self.head(key, offsets)
        if found_size != size:
            raise RemoteObjectDamagedError(key, offsets, f"{found_size} bytes where {size} were uploaded")
        if found != checksum:
            raise RemoteObjectDamagedError(key, offsets, f"its ETag is {found!r} where the uploaded bytes give "
                                                         f"{checksum!r}")

    def check_stored(self, prefix: str, uploaded: Iterable[Uploaded], offsets: Offsets = None) -> None:
        """Check, by one listing of ``prefix`` after the uploads, that the store holds each of ``uploaded`` with its
        size and ETag: :class:`RemoteObjectMissingError` or :class:`RemoteObjectDamagedError` naming ``offsets``
        otherwise. The uploads' own answers said what the store received; this reads back what it kept."""
        stored = {obj.key: obj for obj in self.list(prefix)}
        for up in uploaded:
            found = stored.get(up.key)
            if found is None:
                raise RemoteObjectMissingError(up.key, offsets)
            if found.size != up.size:
                raise RemoteObjectDamagedError(up.key, offsets, f"{found.size} bytes where {up.size} were uploaded")
            if found.etag != up.checksum:
                raise RemoteObjectDamagedError(up.key, offsets, f"its ETag is {found.etag!r} where the uploaded bytes "
                                                                f"give {up.checksum!r}")

    def get(self, key: str, offsets: Offsets = None) -> bytes:
        """The whole object ``key``."""
        def read() -> bytes:
            answer = self.client.get_object(Bucket=self.bucket, Key=key)
            return bytes(answer["Body"].read())
        return self._call(read, key, offsets)

    def get_range(self, key: str, start: int, end_exclusive: int, offsets: Offsets = None) -> bytes:
        """Bytes ``[start, end_exclusive)`` of ``key``; :class:`RemoteObjectDamagedError` when the object is shorter
        than that (it was whole when verified)."""
        if start < 0 or end_exclusive < start:
            raise ValueError(f"bad byte range [{start}, {end_exclusive}) of {key}")
        if end_exclusive == start:
            return b""

        def read() -> bytes:
            answer = self.client.get_object(Bucket=self.bucket, Key=key, Range=f"bytes={start}-{end_exclusive - 1}")
            return bytes(answer["Body"].read())
        try:
            data = self._call(read, key, offsets)
        except RemoteStorageError as exc:
            cause = exc.__cause__
            if isinstance(cause, bex.ClientError) and cause.response.get("Error", {}).get("Code") == "InvalidRange":
                raise RemoteObjectDamagedError(key, offsets, f"it ends before byte {start}") from exc
            raise
        if len(data) != end_exclusive - start:
            raise RemoteObjectDamagedError(key, offsets, f"bytes [{start}, {end_exclusive}) asked, "
                                                         f"{len(data)} given: the object is shorter")
        return data

    def get_range_pieces(self, key: str, start: int, end_exclusive: int, piece_bytes: int,
                         offsets: Offsets = None) -> Iterator[bytes]:
        """Bytes ``[start, end_exclusive)`` of ``key`` by ONE ranged GET, yielded as they arrive in consecutive
        pieces of ``piece_bytes`` (the last one shorter): a reader uses the first piece while the rest stream in.
        Errors as :meth:`get_range`, a short object included (raised where it ends)."""
        if start < 0 or end_exclusive < start or piece_bytes <= 0:
            raise ValueError(f"bad byte range [{start}, {end_exclusive}) in pieces of {piece_bytes} of {key}")
        if end_exclusive == start:
            return
        try:
            answer = self._call(lambda: self.client.get_object(Bucket=self.bucket, Key=key,
                                                               Range=f"bytes={start}-{end_exclusive - 1}"),
                                key, offsets)
        except RemoteStorageError as exc:
            cause = exc.__cause__
            if isinstance(cause, bex.ClientError) and cause.response.get("Error", {}).get("Code") == "InvalidRange":
                raise RemoteObjectDamagedError(key, offsets, f"it ends before byte {start}") from exc
            raise
        body = answer["Body"]
        try:
            pos = start
            while pos < end_exclusive:
                want = min(piece_bytes, end_exclusive - pos)
                piece = self._call(lambda: _read_up_to(body, want), key, offsets)
                if len(piece) != want:
                    raise RemoteObjectDamagedError(key, offsets, f"bytes [{start}, {end_exclusive}) asked, "
                                                                 f"{pos - start + len(piece)} given: the object is "
                                                                 f"shorter")
                yield piece
                pos += want
        finally:
            body.close()

    def list(self, prefix: str = "") -> Iterator[ListedObject]:
        """Every object whose key starts with ``prefix``, in key order."""
        token: str | None = None
        while True:
            kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": prefix}
            if token:
                kwargs["ContinuationToken"] = token
            page = self._call(lambda: self.client.list_objects_v2(**kwargs))
            for item in page.get("Contents") or ():
                yield ListedObject(str(item["Key"]), int(item["Size"]), str(item.get("ETag", "")).strip('"'))
            token = page.get("NextContinuationToken")
            if not page.get("IsTruncated") or not token:
                return

    def incomplete_uploads(self, prefix: str = "") -> builtins.list[tuple[str, str, int]]:
        """``(key, upload id, started at epoch ms)`` of the multipart uploads under ``prefix`` never completed nor
        aborted (a process killed mid-upload leaves one: its parts take space but are no object)."""
        out: builtins.list[tuple[str, str, int]] = []
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": prefix}
        while True:
            page = self._call(lambda: self.client.list_multipart_uploads(**kwargs))
            for u in page.get("Uploads") or ():
                out.append((str(u["Key"]), str(u["UploadId"]), int(u["Initiated"].timestamp() * 1000)))
            if not page.get("IsTruncated"):
                return out
            kwargs.update(KeyMarker=page.get("NextKeyMarker"), UploadIdMarker=page.get("NextUploadIdMarker"))

    def abort_incomplete_uploads(self, prefix: str = "", started_before_ms: int | None = None) -> int:
        """Abort the incomplete multipart uploads under ``prefix`` (those started before ``started_before_ms``
        only, when given, so an upload under way elsewhere is left alone); returns how many."""
        aborted = 0
        for key, upload_id, started in self.incomplete_uploads(prefix):
            if started_before_ms is not None and started >= started_before_ms:
                continue
            self._call(lambda: self.client.abort_multipart_upload(Bucket=self.bucket, Key=key, UploadId=upload_id),
                       key)
            aborted += 1
        return aborted

    # -- health ------------------------------------------------------------------------------------------------

    def health(self) -> dict[str, Any]:
        """The store as an operator sees it; never raises: ``{"endpoint", "bucket", "reachable", "bucket_exists",
        "credentials_ok", "latency_ms", "error", "fix"}`` (None where the check could not get that far)."""
        out: dict[str, Any] = {"endpoint": self.endpoint_url, "bucket": self.bucket, "reachable": False,
                               "bucket_exists": None, "credentials_ok": None, "latency_ms": None, "error": None,
                               "fix": None}
        began = time.monotonic()
        try:
            self._call(lambda: self.client.list_objects_v2(Bucket=self.bucket, MaxKeys=1))
            out.update(reachable=True, bucket_exists=True, credentials_ok=True)
        except RemoteStoreUnreachableError as exc:
            out.update(error=exc.reason, fix=exc.fix)
        except RemoteBucketMissingError as exc:
            out.update(reachable=True, bucket_exists=False, credentials_ok=True, error=exc.reason, fix=exc.fix)
        except RemoteCredentialsError as exc:
            out.update(reachable=True, credentials_ok=False, error=exc.reason, fix=exc.fix)
        except Exception as exc:   # noqa: BLE001 - health answers, whatever went wrong
            out.update(reachable=isinstance(exc, RemoteStorageError), error=str(exc),
                       fix=getattr(exc, "fix", None))
        out["latency_ms"] = round((time.monotonic() - began) * 1000, 1)
        return out

    def close(self) -> None:
        self.client.close()


def _read_up_to(body: Any, size: int) -> bytes:
    """``size`` bytes of a streaming response body, fewer only where it ends."""
    parts: list[bytes] = []
    got = 0
    while got < size:
        part = body.read(size - got)
        if not part:
            break
        parts.append(part)
        got += len(part)
    return bytes(parts[0]) if len(parts) == 1 else b"".join(parts)

