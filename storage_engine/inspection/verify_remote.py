"""``verify``'s remote half: the segments of tiered partitions checked against the object store.

For every partition ``__remote_log_metadata`` names (every topic id: an older incarnation of a topic whose remote
data is still kept is checked too), each segment whose copy finished (``COPY_SEGMENT_FINISHED``; the only ones
read) is checked:

* the finished segments of a partition leave no offset out between the first and the last, nor between the
  partition's log start offset and its first local offset (offsets no read can serve);
* each object the segment needs is in the bucket (a HEAD per object): the parts its parts manifest lists
  (:mod:`storage_engine.tiered.parts`), or, for a segment copied before manifests, every part but the ``.txnindex``
  (whose absence cannot be told from "no aborted transactions" for those: they are counted as
  ``txnindex_unchecked``);
* its size is the one recorded (the ``.log``'s is the metadata's segment size; the others' the manifest's), and
  its ETag the one recorded (manifest segments);
* with ``deep``: every byte is downloaded and checked as a read checks it (each batch's size, magic and CRC,
  offsets in order inside the segment's range, the offset index's entries; the ``.txnindex`` decoded), and each
  part whose ETag is a single PUT's MD5 is hashed and compared with the manifest. Nothing is cached or written.

A segment that remote retention deletes while the check runs is not reported: the problems found are kept only
for segments still finished in the metadata read again after the objects were (its deletion is announced before
its objects go). A missing object is reported as loss, a wrong one as damage, each with the topic, partition, offset range, segment
id and object key, in the report's ``problems`` as local damage is (``verify`` exits 1). An object store that
cannot be used (unreachable, bucket missing, credentials refused) stops the remote check with ``error`` (naming the
endpoint) and ``fix``; the local report is unaffected: like an offline log dir, this is no damage to stored data,
and ``verify`` exits 1 for it only with ``--strict``.
"""
from __future__ import annotations

import hashlib
import os
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from storage_engine import layout
from storage_engine.config import StorageConfig
from storage_engine.errors import (RemoteBucketMissingError, RemoteCredentialsError, RemoteObjectDamagedError,
                                   RemoteObjectMissingError, RemoteStorageError, RemoteStoreUnreachableError,
                                   StorageError)
from storage_engine.inspection.snapshot import LogSnapshot
from storage_engine.log.topic_id import read_topic_id, uuid_text
from storage_engine.tiered import parts as manifests
from storage_engine.tiered.keys import LOG, REQUIRED_SUFFIXES, segment_keys

__all__ = ["verify_remote"]

HEAD_THREADS = 8
_STORE_DOWN = (RemoteStoreUnreachableError, RemoteBucketMissingError, RemoteCredentialsError)


@dataclass
class _Checked:
    """What checking one segment found."""
    problems: list[dict] = field(default_factory=list)
    objects: int = 0
    bytes_read: int = 0
    txnindex_unchecked: bool = False
    store_down: RemoteStorageError | None = None


def verify_remote(config: StorageConfig, *, deep: bool = False) -> dict:
    """The remote half of the audit (module docstring): ``{"checked", "endpoint", "bucket", "deep", "error",
    "fix", "partitions", "segments", "objects", "bytes_read", "txnindex_unchecked", "problems"}``; ``checked`` is
    False (with the reason in ``error``) when tiered storage is off, or the metadata or the store cannot be read."""
    from storage_engine.inspection.tiering import METADATA_TOPIC, load_view
    from storage_engine.tiered.settings import RemoteStorageSettings

    out: dict[str, Any] = {"checked": False, "endpoint": None, "bucket": None, "deep": deep, "error": None,
                           "fix": None, "partitions": [], "segments": 0, "objects": 0, "bytes_read": 0,
                           "txnindex_unchecked": 0, "problems": []}
    try:
        settings = RemoteStorageSettings.of(config)
    except StorageError as exc:
        out["error"] = f"the remote storage settings are wrong: {exc}"
        return out
    out.update(endpoint=settings.endpoint_url, bucket=settings.bucket)
    if not settings.enabled:
        out["error"] = "remote.log.storage.system.enable is false: no remote segment is checked"
        return out
    firsts = _local_offsets(config, METADATA_TOPIC)      # read before the metadata: see _boundaries
    try:
        view = load_view(config)
    except (StorageError, OSError) as exc:
        out["error"] = f"the remote log metadata ({METADATA_TOPIC}) cannot be read: {type(exc).__name__}: {exc}"
        return out
    from storage_engine.tiered.object_store import ObjectStore
    work = _segments(settings, view, out, METADATA_TOPIC)
    out["problems"].extend(_boundaries(config, view, firsts))
    if not work:
        out["checked"] = True       # nothing is remote: the store is not asked
        return out
    store = ObjectStore(settings)
    try:
        health = store.health()     # one request first: a dead store costs one timeout, not one per object
        if not (health["reachable"] and health["bucket_exists"] and health["credentials_ok"]):
            _store_down(out, str(health["error"]), health["fix"])
        else:
            _check_all(settings, store, work, deep, out)
    finally:
        store.close()
    if any(p["kind"] != "gap" for p in out["problems"]):
        _drop_deleted_meanwhile(config, out, load_view)
    return out


def _drop_deleted_meanwhile(config: StorageConfig, out: dict, load_view: Any) -> None:
    """Keep only the problems of segments still finished in the metadata read after the objects were: remote
    retention (or a topic's deletion) publishes DELETE_SEGMENT_STARTED, fsynced, before it deletes a segment's
    objects, so a segment it deleted while this check ran is no longer finished now, and its objects' absence is
    no loss."""
    try:
        now = load_view(config)
    except (StorageError, OSError):
        return                      # the first read worked; report what was found
    finished = {(s.topic, s.partition, uuid_text(s.segment_id))
                for topic, topic_id, partition in now.partitions()
                for s in now.segments(topic, partition, topic_id=topic_id)}
    out["problems"] = [p for p in out["problems"] if p["kind"] == "gap"
                       or (p["topic"], p["partition"], p["segment_id"]) in finished]


def _store_down(out: dict, reason: str, fix: str | None) -> None:
    where = f"object store {out['endpoint']}, bucket {out['bucket']}"
    out["error"] = f"remote segments not verified: {reason}" + ("" if str(out["endpoint"]) in reason
                                                                else f" ({where})")
    out["fix"] = fix


def _segments(settings: Any, view: Any, out: dict, metadata_topic: str) -> list[tuple[Any, "_OneSegment"]]:
    """Every finished segment to check (each with a view of it alone), the partitions' summaries and the gaps
    between segments into ``out``."""
    work: list[tuple[Any, _OneSegment]] = []
    for topic, topic_id, partition in view.partitions():
        if topic == metadata_topic:
            continue
        segs = view.segments(topic, partition, topic_id=topic_id)
        if not segs:
            continue
        out["partitions"].append({"topic": topic, "partition": partition, "topic_id": uuid_text(topic_id),
                                  "segments": len(segs), "bytes": sum(s.size_bytes for s in segs),
                                  "start_offset": segs[0].start_offset,
                                  "end_offset": max(s.end_offset for s in segs)})
        out["problems"].extend(_gaps(settings, segs))
        work.extend((s, _OneSegment(s)) for s in segs)
    return work


def _check_all(settings: Any, store: Any, work: list[tuple[Any, "_OneSegment"]], deep: bool, out: dict) -> None:
    with ThreadPoolExecutor(HEAD_THREADS if not deep else 2, thread_name_prefix="verify-remote") as pool:
        results = list(pool.map(lambda item: _check_segment(settings, store, item[0], item[1], deep), work))
    for r in results:
        if r.store_down is not None:
            _store_down(out, r.store_down.reason, r.store_down.fix)
            out["problems"] = [p for p in out["problems"] if p.get("kind") == "gap"]
            return
    for r in results:
        out["problems"].extend(r.problems)
        out["objects"] += r.objects
        out["bytes_read"] += r.bytes_read
        out["txnindex_unchecked"] += r.txnindex_unchecked
    out["segments"] = len(work)
    out["checked"] = True


def _local_offsets(config: StorageConfig, metadata_topic: str) -> dict[tuple[str, int], tuple[str, int]]:
    """{(topic, partition): (log dir, first local offset)} of every tiered partition with a readable local log (one
    that cannot be read is the local audit's to report)."""
    out: dict[tuple[str, int], tuple[str, int]] = {}
    for d in config.log_dirs:
        try:
            listed = layout.scan_log_dir(d).partitions
        except OSError:
            continue
        for _name, (topic, partition) in listed:
            if topic == metadata_topic or not config.log_config(topic).remote_storage_enable:
                continue
            try:
                with LogSnapshot(config, d, topic, partition) as snap:
                    out[(topic, partition)] = (d, snap.local_log_start_offset)
            except (StorageError, OSError):
                continue
    return out


def _boundaries(config: StorageConfig, view: Any, firsts: dict[tuple[str, int], tuple[str, int]]) -> list[dict]:
    """Offsets of a tiered partition from its log start offset up to its first local offset that no finished
    remote segment holds, below the first remote segment or between the last one and the local log (the gaps
    between remote segments are :func:`_gaps`'). No race makes one up: the first local offset is read before the
    metadata (local retention deletes a segment only once its COPY_SEGMENT_FINISHED is written), the log start
    offset after it (remote retention raises it before it announces a deletion)."""
    out = []
    for (topic, partition), (log_dir, first_local) in sorted(firsts.items()):
        try:
            with LogSnapshot(config, log_dir, topic, partition) as snap:
                start = snap.log_start_offset
        except (StorageError, OSError):
            continue
        if start >= first_local:
            continue
        topic_id = read_topic_id(os.path.join(log_dir, layout.partition_dir_name(topic, partition)))
        segs = view.segments(topic, partition, topic_id=topic_id) if topic_id is not None else []
        holes = []
        if not segs:
            holes.append((start, first_local - 1))
        else:
            if start < segs[0].start_offset:
                holes.append((start, min(segs[0].start_offset, first_local) - 1))
            end = max(s.end_offset for s in segs)
            if end + 1 < first_local:
                holes.append((max(end + 1, start), first_local - 1))
        for low, high in holes:
            out.append({"file": os.path.join(log_dir, layout.partition_dir_name(topic, partition)), "topic": topic,
                        "partition": partition, "start_offset": low, "end_offset": high, "segment_id": None,
                        "kind": "gap", "message": f"offsets [{low}, {high}] of {topic}-{partition} lie between its "
                        f"log start offset {start} and its first local offset {first_local} but in no finished "
                        "remote segment: they are lost (reads of them fail)"})
    return out


def _where(settings: Any, key: str) -> str:
    return f"s3://{settings.bucket}/{key}"


def _problem(settings: Any, seg: Any, key: str | None, message: str, kind: str) -> dict:
    return {"file": _where(settings, key) if key else f"{seg.topic}-{seg.partition} remote segments",
            "topic": seg.topic, "partition": seg.partition, "start_offset": seg.start_offset,
            "end_offset": seg.end_offset, "segment_id": uuid_text(seg.segment_id), "kind": kind,
            "message": message}


def _gaps(settings: Any, segs: Sequence[Any]) -> list[dict]:
    out = []
    reach = segs[0].end_offset
    for seg in segs[1:]:
        if seg.start_offset > reach + 1:
            p = _problem(settings, seg, None, f"offsets [{reach + 1}, {seg.start_offset - 1}] of {seg.topic}-"
                         f"{seg.partition} are in no finished remote segment (between remote segments): reads of "
                         "them fail", "gap")
            p.update(start_offset=reach + 1, end_offset=seg.start_offset - 1)
            out.append(p)
        reach = max(reach, seg.end_offset)
    return out


def _range(seg: Any) -> str:
    return f"remote segment [{seg.start_offset}, {seg.end_offset}] of {seg.topic}-{seg.partition}"


def _check_segment(settings: Any, store: Any, seg: Any, one: "_OneSegment", deep: bool) -> _Checked:
    done = _Checked()
    keys = segment_keys(settings.key_prefix, seg.topic, seg.topic_id, seg.partition, seg.start_offset,
                        seg.segment_id)
    offsets = (seg.start_offset, seg.end_offset)
    try:
        listed = manifests.of_segment(seg)
    except manifests.ManifestError as exc:
        done.problems.append(_problem(settings, seg, None, f"{_range(seg)}: its metadata's parts manifest is "
                                      f"damaged ({exc}); its objects cannot be checked", "damaged"))
        listed = None
    wanted = list(listed.parts) if listed is not None else list(REQUIRED_SUFFIXES)
    done.txnindex_unchecked = listed is None
    try:
        for suffix in wanted:
            key = keys[suffix]
            try:
                size, etag = store.head(key, offsets)
            except RemoteObjectMissingError:
                done.problems.append(_problem(settings, seg, key, f"{_range(seg)}: its .{suffix} object is missing "
                                              "from the bucket: its records are lost from remote storage (restore "
                                              "the object, or accept the loss)", "missing"))
                continue
            done.objects += 1
            part = listed.parts[suffix] if listed is not None else None
            expected = seg.size_bytes if suffix == LOG else part.size if part is not None else None
            if expected is not None and size != expected:
                done.problems.append(_problem(settings, seg, key, f"{_range(seg)}: its .{suffix} object holds "
                                              f"{size} bytes where {expected} were copied", "damaged"))
            elif part is not None and not part.etag_matches(etag):
                done.problems.append(_problem(settings, seg, key, f"{_range(seg)}: its .{suffix} object was "
                                              f"replaced: ETag {etag} where the copy recorded "
                                              f"{part.describe()}", "damaged"))
        if deep and not done.problems:
            _deep(settings, store, seg, one, keys, listed, done)
    except _STORE_DOWN as exc:
        done.store_down = exc
    return done


def _deep(settings: Any, store: Any, seg: Any, one: "_OneSegment", keys: dict[str, str],
          listed: manifests.PartsManifest | None, done: _Checked) -> None:
    """Every byte read and checked as a read would (a reader with no cache: nothing is written)."""
    from storage_engine.tiered.cache import NoCache
    from storage_engine.tiered.reads import RemoteReader

    reader = RemoteReader(settings, store, one, cache=NoCache())
    try:
        last = None
        for batch in reader.batches(seg.topic, seg.partition, seg.start_offset, topic_id=seg.topic_id):
            last = batch.last_offset
        if last is not None and last > seg.end_offset:
            raise RemoteObjectDamagedError(keys[LOG], (seg.start_offset, seg.end_offset),
                                           f"its last batch ends at offset {last}, past the segment's end")
        done.bytes_read += seg.size_bytes
        reader.aborted_transactions(seg.topic, seg.partition, seg.start_offset, seg.end_offset + 1,
                                    topic_id=seg.topic_id)
        for suffix, part in (listed.parts.items() if listed is not None else ()):
            if part.digest is None or part.etag_parts or suffix == LOG:
                continue        # a multipart ETag is no MD5 of the bytes; the .log's batches were checked above
            data = store.get(keys[suffix], (seg.start_offset, seg.end_offset)) if part.size else b""
            done.bytes_read += len(data)
            if hashlib.md5(data, usedforsecurity=False).digest()[:len(part.digest)] != part.digest:
                raise RemoteObjectDamagedError(keys[suffix], (seg.start_offset, seg.end_offset),
                                               f"its MD5 is not the one the copy recorded ({part.describe()})")
    except (RemoteObjectMissingError, RemoteObjectDamagedError) as exc:
        kind = "missing" if isinstance(exc, RemoteObjectMissingError) else "damaged"
        done.problems.append(_problem(settings, seg, exc.key, f"{_range(seg)}: {exc}", kind))
    except StorageError as exc:
        if isinstance(exc, _STORE_DOWN):
            raise
        done.problems.append(_problem(settings, seg, keys[LOG], f"{_range(seg)}: {exc}", "damaged"))


class _OneSegment:
    """A remote view holding one segment: the reader checks it alone."""

    def __init__(self, seg: Any):
        self.seg = seg

    def segments(self, topic: str, partition: int, *, topic_id: uuid.UUID | None = None) -> list[Any]:
        return [self.seg]
