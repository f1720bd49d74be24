"""Root causes of tiered-storage failures and their fixes (used by :mod:`.root_causes`).

The engine raises one ``RemoteStorageError`` subclass per cause (``storage_engine.errors``); each becomes a kind
whose fix names the object store and bucket the storage config declares (``rsm.config.storage.s3.*``) and the
config file to correct:

=====================  ============================  ===========================================================
kind                   from                          fix
=====================  ============================  ===========================================================
``store-unreachable``  ``RemoteStoreUnreachableError``  start the object store at its URL, or correct
                                                     ``rsm.config.storage.s3.endpoint.url``
``store-bucket``       ``RemoteBucketMissingError``  create the bucket (the engine never creates one), or correct
                                                     ``rsm.config.storage.s3.bucket.name``
``store-credentials``  ``RemoteCredentialsError``    correct ``rsm.config.storage.aws.access.key.id`` / ``.secret.
                                                     access.key`` (or the store's identity for that key)
``remote-missing``     ``RemoteObjectMissingError``  met by a copy's check after upload: check the store (the copy
                                                     is not finished, the next run copies again); met reading:
                                                     restore the object from a backup or a replica of the bucket,
                                                     or move the log start offset past it
``remote-damaged``     ``RemoteObjectDamagedError``  the same, for an object whose bytes do not match
``store-error``        ``RemoteStorageError``        the store failed on its own (a 5xx): its log
=====================  ============================  ===========================================================

A store-wide cause (the first three) is one root cause for every partition and batch that met it, keyed by the
store (``store-unreachable:http://weed:8333``): a run in which the store is down alerts once, and the next task that
reaches the store closes it. A missing or damaged object is a cause of its partition.
"""
from __future__ import annotations

import re
import shlex
from typing import Any

REMOTE_KINDS = {
    "RemoteStoreUnreachableError": "store-unreachable",
    "RemoteBucketMissingError": "store-bucket",
    "RemoteCredentialsError": "store-credentials",
    "RemoteObjectMissingError": "remote-missing",
    "RemoteObjectDamagedError": "remote-damaged",
    "RemoteStorageError": "store-error",
}
STORE_KINDS = frozenset({"store-unreachable", "store-bucket", "store-credentials", "store-error"})
TITLES = {
    "store-unreachable": "object store unreachable", "store-bucket": "object store bucket missing",
    "store-credentials": "object store refused the credentials", "remote-missing": "remote object missing",
    "remote-damaged": "remote object damaged", "store-error": "object store failed",
}
ENDPOINT_KEY = "rsm.config.storage.s3.endpoint.url"
BUCKET_KEY = "rsm.config.storage.s3.bucket.name"
ACCESS_KEY_KEY = "rsm.config.storage.aws.access.key.id"
SECRET_KEY_KEY = "rsm.config.storage.aws.secret.access.key"

_URL = re.compile(r"https?://[^\s,;'\")]+")
_OFFSETS = re.compile(r"offsets? (\d+)\s*(?:-|\.\.|to)\s*(\d+)")
_OBJECT_KEY = re.compile(r"(?:object|key) '?([^\s']+/\d{20}-[^\s']+?)'?(?=[\s:,;)]|$)")


def remote_store(config: Any) -> dict[str, str | None]:
    """``{"endpoint_url", "bucket"}`` the storage config names for its object store (None when it names none or
    cannot say); never raises."""
    try:
        remote = config.remote
        return {"endpoint_url": remote.get(ENDPOINT_KEY) or None, "bucket": remote.get(BUCKET_KEY) or None}
    except Exception:   # noqa: BLE001 - an alert must go out even when the config cannot say
        return {"endpoint_url": None, "bucket": None}


def remote_kind(error_type: str) -> str | None:
    return REMOTE_KINDS.get(error_type)


def store_key(kind: str, store: dict[str, str | None], error: str) -> str:
    """What a store-wide cause's key names: the store's URL (and the bucket, for a missing bucket)."""
    url = store.get("endpoint_url")
    if not url:
        m = _URL.search(error)
        url = m.group(0) if m else "?"
    return f"{url}/{store.get('bucket') or '?'}" if kind == "store-bucket" else url


def remote_fix(cause: dict, store: dict[str, str | None], config_path: str | None, cli: Any) -> tuple[str, list[str]]:
    """(fix, commands) of a tiered-storage cause; ``cli(*args)`` renders an engine command with the config."""
    kind = cause["kind"]
    url = store.get("endpoint_url") or "its URL"
    bucket = store.get("bucket") or "the bucket"
    config = config_path or "the storage config"
    error = cause.get("error") or ""
    commands: list[str] = []
    if kind == "store-unreachable":
        fix = (f"The object store at {url} does not answer: start it (or bring its S3 gateway back), or correct "
               f"{ENDPOINT_KEY} in {config}. Nothing local was deleted: local retention of tiered topics waits "
               "for finished remote copies, and the next run copies what is waiting.")
        if store.get("endpoint_url"):
            commands.append(shlex.join(["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}\\n", url]))
    elif kind == "store-bucket":
        fix = (f"Bucket {bucket} does not exist in the object store at {url}: create it (the engine never creates "
               f"buckets), or correct {BUCKET_KEY} in {config}; the next run copies what is waiting.")
        if store.get("endpoint_url") and store.get("bucket"):
            commands.append(shlex.join(["aws", "--endpoint-url", url, "s3api", "create-bucket", "--bucket", bucket]))
    elif kind == "store-error":
        fix = (f"The object store at {url} answered with an error of its own: see its log (for SeaweedFS, the volume "
               "servers' free space and the filer); the next run retries.")
    elif kind == "store-credentials":
        fix = (f"The object store at {url} refused the access key: correct {ACCESS_KEY_KEY} and {SECRET_KEY_KEY} in "
               f"{config} (or give that key access to bucket {bucket} in the store); the next run copies what is "
               "waiting.")
    else:
        what = "is missing" if kind == "remote-missing" else "no longer matches what was copied (size or checksum)"
        m = _OBJECT_KEY.search(error)
        obj = m.group(1) if m else "a remote object"
        offsets = _OFFSETS.search(error)
        span = f" (offsets {offsets.group(1)}-{offsets.group(2)})" if offsets else ""
        tp = cause.get("topic_partition")
        if cause.get("dag_id") == "log_tiering":
            # met while copying: the object was checked right after its upload, so the copy never finished
            fix = (f"{obj}{span} in bucket {bucket} {what} right after its upload: the object store did not keep "
                   "what it was sent. Check the store (its volume servers' disks and free space, its log). The copy "
                   "was not marked finished, so the local segment stays; the next run removes the objects and "
                   "copies the segment again.")
        else:
            fix = (f"{obj}{span} in bucket {bucket} {what}: it was changed behind the store's back and its records "
                   "are never handed out. Restore the object from a backup or a replica of the bucket; if it is gone "
                   "for good, move the partition's log start offset past it, and remote retention then forgets it.")
        if tp and offsets and cause.get("dag_id") != "log_tiering":
            commands.append(cli("delete-records", "--topic", str(tp[0]), "--partition", str(tp[1]), "--offset",
                                str(int(offsets.group(2)) + 1)))
    commands.append(cli("tier", "--dry-run"))
    return fix, commands
