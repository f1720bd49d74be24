"""The two S3 clients the tiering benchmarks compare, set up the same way against one SeaweedFS (``weed server
-s3``, :class:`include.seaweedfs.WeedServer`, started in the benchmark's scratch directory).

* **boto3** (pinned in requirements.txt; what ``storage_engine.tiered.object_store`` uses): ``upload_file`` is
  s3transfer's managed upload (multipart above 8 MiB, 8 MiB parts, 10 threads), ``get_object`` + ``read()`` a
  plain GET;
* **obstore** (not in requirements.txt; the rows are skipped, with a note, where it is not installed): ``obstore.put`` of an open file (its
  multipart writer above its chunk size, parts uploaded concurrently), ``obstore.get(...).bytes()`` a plain GET.

Every call checks what it moved (sizes, and the bytes of a GET against the file's), so a client cannot look fast
by doing less.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from include.seaweedfs import WeedServer

REGION = "us-east-1"


def boto3_client(server: WeedServer) -> Any:
    import boto3
    from botocore.config import Config
    return boto3.client("s3", endpoint_url=server.endpoint_url, aws_access_key_id=server.access_key,
                        aws_secret_access_key=server.secret_key, region_name=REGION,
                        config=Config(s3={"addressing_style": "path"}))


def has_obstore() -> bool:
    import importlib.util
    return importlib.util.find_spec("obstore") is not None


def obstore_store(server: WeedServer, bucket: str) -> Any:
    from obstore.store import S3Store
    return S3Store(bucket, endpoint=server.endpoint_url, access_key_id=server.access_key,
                   secret_access_key=server.secret_key, region=REGION, virtual_hosted_style_request=False,
                   client_options={"allow_http": True})


def boto3_upload(client: Any, bucket: str, files: list[tuple[str, str]]) -> int:
    """``upload_file`` of every (path, key); returns the bytes the bucket then holds under those keys."""
    for path, key in files:
        client.upload_file(path, bucket, key)
    return sum(client.head_object(Bucket=bucket, Key=key)["ContentLength"] for _, key in files)


def obstore_upload(store: Any, files: list[tuple[str, str]]) -> int:
    import obstore
    for path, key in files:
        with open(path, "rb") as f:
            obstore.put(store, key, f)
    return sum(obstore.head(store, key)["size"] for _, key in files)


def boto3_put_small(client: Any, bucket: str, objects: list[tuple[str, bytes]]) -> int:
    for key, data in objects:
        client.put_object(Bucket=bucket, Key=key, Body=data)
    return sum(len(d) for _, d in objects)


def obstore_put_small(store: Any, objects: list[tuple[str, bytes]]) -> int:
    import obstore
    for key, data in objects:
        obstore.put(store, key, data)
    return sum(len(d) for _, d in objects)


def boto3_get(client: Any, bucket: str, key: str) -> bytes:
    body = client.get_object(Bucket=bucket, Key=key)["Body"]
    try:
        return bytes(body.read())
    finally:
        body.close()


def obstore_get(store: Any, key: str) -> bytes:
    import obstore
    return bytes(obstore.get(store, key).bytes())


def boto3_get_ranges(client: Any, bucket: str, key: str, size: int, chunk: int) -> bytes:
    """The object as consecutive ranged GETs of ``chunk`` bytes (how a remote reader fetches through a chunk
    cache)."""
    parts = []
    for start in range(0, size, chunk):
        body = client.get_object(Bucket=bucket, Key=key, Range=f"bytes={start}-{min(size, start + chunk) - 1}")["Body"]
        try:
            parts.append(body.read())
        finally:
            body.close()
    return b"".join(parts)


def obstore_get_ranges(store: Any, key: str, size: int, chunk: int) -> bytes:
    import obstore
    return b"".join(bytes(obstore.get_range(store, key, start=start, end=min(size, start + chunk)))
                    for start in range(0, size, chunk))


def same_bytes(got: bytes, path: str | Path) -> bool:
    with open(path, "rb") as f:
        return got == f.read()


def file_sizes(files: list[tuple[str, str]]) -> int:
    return sum(os.path.getsize(p) for p, _ in files)
