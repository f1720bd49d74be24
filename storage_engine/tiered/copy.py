"""Copying a partition's sealed segments to the object store (Kafka's ``RLMCopyTask``), one segment at a time.

Which segments (:func:`eligible`, with the partition lock held for the choice only): the sealed segments (never
the active one) whose last offset is above the highest offset already in remote storage and below the last
stable offset, the high watermark and the recovery point (a segment is copied only once it is flushed, so the
remote copy never holds bytes a machine crash could still take back), and not wholly below the log start offset.
Nothing is copied for a topic without ``remote.storage.enable`` or with ``remote.log.copy.disable``.

What is copied (Kafka's ``LogSegmentData``): the ``.log``, ``.index``, ``.timeindex``, the ``.txnindex`` when the
segment has one, the producer snapshot at the segment's end offset + 1 (the one the roll wrote; when there is
none, a snapshot of the state at that offset is rebuilt from the newest snapshot below it and the segments in
between, into a temp file, as Kafka's copy takes one) and the leader-epoch entries up to the segment's end (a
checkpoint file in Kafka's format).

How (:func:`copy_segment`), every state durable before the action it announces:

1. under the partition lock: the segment is checked to be the one chosen (same base offset, same ``.log`` inode,
   size and next segment), its files are opened (the descriptors keep the bytes readable whatever happens to the
   names meanwhile) and the small files are written to a temp dir; the lock is then released, so appends, rolls
   and reads go on during the upload;
2. ``COPY_SEGMENT_STARTED`` is published (fsynced into ``__remote_log_metadata``);
3. each part is uploaded (one after the other), each object checked against the bytes read from the local file (read
   once): the store's answer to every request must be the MD5 of the bytes sent, and to the multipart upload's
   completion the MD5 of the parts' MD5s, so the object holds exactly the file's bytes (its size and checksum;
   :mod:`storage_engine.tiered.object_store`); then one listing of the segment's keys reads back what the store
   kept: every part there with its size and ETag;
4. under the partition lock again: if the segment is no longer the one uploaded (retention or a truncation
   removed it meanwhile), the copy is abandoned: ``DELETE_SEGMENT_STARTED``, its objects deleted,
   ``DELETE_SEGMENT_FINISHED``;
5. otherwise ``COPY_SEGMENT_FINISHED`` is published, with the parts uploaded (names, sizes, ETags: the parts
   manifest of :mod:`storage_engine.tiered.parts`) as its custom metadata: only now may local retention delete the
   local copy.

A process killed anywhere in between leaves at worst a ``COPY_SEGMENT_STARTED`` without ``FINISHED`` and some
objects: the next run's orphan step deletes them (:mod:`storage_engine.tiered.orphans`). An object-store error
stops the partition's copying (raised as a ``RemoteStorageError``, whose ``fix`` the alert names); nothing local
is changed by a copy, failed or not.
"""
from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from storage_engine import crashpoints, layout
from storage_engine.log.log import Log
from storage_engine.log.producer_state_manager import ProducerStateManager, rebuild
from storage_engine.segment import producer_snapshot
from storage_engine.segment.leader_epoch import EpochEntry, LeaderEpochFileCache, format_leader_epoch_checkpoint
from storage_engine.segment.segment import LogSegment
from storage_engine.tiered import parts

if TYPE_CHECKING:
    from storage_engine.tiered.context import TierContext
    from storage_engine.tiered.object_store import Uploaded

# The parts of Kafka's LogSegmentData and the local file each comes from (suffix of the object key).
SEGMENT_PARTS = (("log", layout.LOG_SUFFIX), ("index", layout.INDEX_SUFFIX), ("timeindex", layout.TIME_INDEX_SUFFIX))
TXN_PART = ("txnindex", layout.TXN_INDEX_SUFFIX)
SNAPSHOT_PART = "snapshot"
EPOCH_PART = "leader-epoch-checkpoint"


@dataclass(frozen=True)
class Candidate:
    """A sealed local segment chosen for copying, as it was when chosen."""
    base_offset: int
    end_offset: int             # inclusive: the next segment's base offset - 1 (Kafka's endOffset)
    size_bytes: int
    max_timestamp_ms: int
    identity: tuple[int, int]   # (device, inode) of its .log: a segment replaced under the upload is not it

    def as_dict(self) -> dict:
        return {"base_offset": self.base_offset, "end_offset": self.end_offset, "size_bytes": self.size_bytes,
                "max_timestamp_ms": self.max_timestamp_ms}


def _identity(path: str) -> tuple[int, int]:
    st = os.stat(path)
    return st.st_dev, st.st_ino


def copy_bound(log: Log) -> int:
    """The first offset no copy may reach: min(last stable offset, high watermark, recovery point)."""
    return min(log.last_stable_offset, log.high_watermark, log.recovery_point)


def eligible(log: Log, highest_remote_offset: int) -> list[Candidate]:
    """The segments to copy, oldest first (caller holds the partition lock, with a fresh view)."""
    segs = log.segments
    bound = copy_bound(log)
    out = []
    for seg, nxt in zip(segs, segs[1:]):
        end = nxt.base_offset - 1
        if end <= highest_remote_offset or nxt.base_offset <= log.log_start_offset:
            continue        # already remote, or wholly below the log start (retention removes it)
        if nxt.base_offset > bound:
            break           # reaches past the LSO/HW/recovery point, and so does every later one
        if seg.size == 0:
            continue        # no batch to copy (its offsets hold nothing)
        out.append(Candidate(seg.base_offset, end, seg.size, seg.largest_timestamp(),
                             _identity(seg.file_path(layout.LOG_SUFFIX))))
    return out


def lag(log: Log, highest_remote_offset: int) -> dict:
    """How far the remote copy lags behind the local log: sealed segments (and their bytes) above the highest
    remote offset, copyable or not yet (the LSO, HW and recovery point hold some back)."""
    segs = log.segments
    behind = [s for s, n in zip(segs, segs[1:]) if n.base_offset - 1 > highest_remote_offset and s.size > 0
              and n.base_offset > log.log_start_offset]
    return {"lag_segments": len(behind), "lag_bytes": sum(s.size for s in behind)}


def _find(log: Log, cand: Candidate) -> tuple[LogSegment, int] | None:
    """The segment ``cand`` names if it is still the same one (and still sealed), with its next base offset."""
    segs = log.segments
    for seg, nxt in zip(segs, segs[1:]):
        if seg.base_offset == cand.base_offset:
            try:
                same = (_identity(seg.file_path(layout.LOG_SUFFIX)) == cand.identity and seg.size == cand.size_bytes
                        and nxt.base_offset == cand.end_offset + 1)
            except FileNotFoundError:
                return None
            return (seg, nxt.base_offset) if same else None
    return None


def epoch_entries(log: Log, end_offset: int) -> list[EpochEntry]:
    """The leader-epoch entries that start at or below ``end_offset`` (caller holds the partition lock)."""
    cache: LeaderEpochFileCache = log.leader_epochs.sync(log.view.generation)
    return [e for e in cache.entries if e.start_offset <= end_offset]


def segment_leader_epochs(entries: list[EpochEntry], base_offset: int, epoch_default: int) -> dict[int, int]:
    """Kafka's ``segmentLeaderEpochs``: epoch -> first offset of the epoch within the segment (the epoch in force
    at the base offset starts at the base offset). A log without epochs has every batch in ``epoch_default``."""
    out: dict[int, int] = {}
    for e in entries:
        if e.start_offset <= base_offset:
            out = {e.epoch: base_offset}
        else:
            out[e.epoch] = e.start_offset
    return out or {epoch_default: base_offset}


def _write_snapshot(log: Log, next_base: int, path: str) -> None:
    """The producer snapshot at ``next_base`` into ``path``: the roll's file if there is one, else the state at
    that offset rebuilt from the partition's newest snapshot below it (nothing in the partition folder changes)."""
    src = layout.segment_file(log.dir, next_base, layout.SNAPSHOT_SUFFIX)
    try:
        with open(src, "rb") as f:
            data = f.read()
        producer_snapshot.decode_snapshot(data, src)    # a damaged file is rebuilt below, never copied
        with open(path, "wb") as out:
            out.write(data)
        return
    except FileNotFoundError:
        pass
    except Exception:   # noqa: BLE001 - a damaged snapshot: rebuilt from the log, like a load would
        pass
    psm = ProducerStateManager(log.dir, log.name)
    rebuild(psm, log.segments, log.log_start_offset, next_base, exclusive=False)
    producer_snapshot.write_snapshot(path, [e.to_snapshot_entry() for e in psm.producers.values()], sync=False)


@dataclass
class Prepared:
    """A candidate's parts, ready to upload: ``{part: path}`` (descriptor paths for the segment files)."""
    candidate: Candidate
    paths: dict[str, str]
    sizes: dict[str, int]
    leader_epochs: dict[int, int]


@contextmanager
def prepare(log: Log, cand: Candidate) -> Iterator[Prepared | None]:
    """Open the candidate's files under the partition lock (None if the segment is no longer the one chosen); the
    descriptors and temp files live until the ``with`` ends."""
    with ExitStack() as stack:
        tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="tier-"))
        paths: dict[str, str] = {}
        sizes: dict[str, int] = {}
        with log.locked():
            found = _find(log, cand)
            if found is None:
                yield None
                return
            seg, next_base = found
            parts = list(SEGMENT_PARTS)
            if os.path.exists(seg.file_path(layout.TXN_INDEX_SUFFIX)):
                parts.append(TXN_PART)
            for part, suffix in parts:
                fd = os.open(seg.file_path(suffix), os.O_RDONLY)
                stack.callback(os.close, fd)
                # /proc/self/fd: the upload reads the file it was given even if retention renames it meanwhile
                paths[part] = f"/proc/self/fd/{fd}"
                sizes[part] = os.fstat(fd).st_size
            paths[SNAPSHOT_PART] = os.path.join(tmp, f"{layout.filename_prefix(next_base)}.snapshot")
            _write_snapshot(log, next_base, paths[SNAPSHOT_PART])
            entries = epoch_entries(log, cand.end_offset)
            paths[EPOCH_PART] = os.path.join(tmp, EPOCH_PART)
            with open(paths[EPOCH_PART], "wb") as f:
                f.write(format_leader_epoch_checkpoint(entries))
            epochs = segment_leader_epochs(entries, cand.base_offset, log.config.partition_leader_epoch)
        for part in (SNAPSHOT_PART, EPOCH_PART):
            sizes[part] = os.path.getsize(paths[part])
        yield Prepared(cand, paths, sizes, epochs)


def _upload_part(ctx: TierContext, prep: Prepared, part: str, key: str) -> Uploaded:
    """Upload one part, checked against the bytes read from the local file: the store answered every request with
    the MD5 of the bytes sent (and the multipart ETag of the parts' MD5s; :meth:`ObjectStore.upload` raises
    :class:`RemoteObjectDamagedError` otherwise), so the object holds exactly the bytes read, and those were the
    whole file (its size when the segment was chosen). What the store kept is read back once per segment, by one
    listing of its keys after every part's upload (:meth:`ObjectStore.check_stored`), not by a HEAD per part."""
    cand = prep.candidate
    offsets = (cand.base_offset, cand.end_offset)
    up = ctx.store.upload(key, prep.paths[part], offsets, check_bucket=False)
    if up.size != prep.sizes[part]:
        from storage_engine.errors import RemoteObjectDamagedError
        raise RemoteObjectDamagedError(up.key, offsets, f"uploaded {up.size} bytes of a {prep.sizes[part]}-byte file")
    return up


def _upload_all(ctx: TierContext, prep: Prepared, keys: dict[str, str]) -> list[Uploaded]:
    """Upload and check every part, one after the other, after one check that the bucket exists (a large ``.log``
    goes up in parts, several at once: :meth:`ObjectStore.upload`). One part at a time, a process killed between two
    parts has no request in flight, so no object of its copy can land after the next run's orphan step has
    deleted the copy's objects (a PUT whose body was sent is completed by the store even after its client died)."""
    ctx.store.require_bucket()
    uploaded = []
    for part in prep.paths:
        uploaded.append(_upload_part(ctx, prep, part, keys[part]))
        crashpoints.reached("tier.uploaded-part")
    return sorted(uploaded, key=lambda u: u.key)


def still_there(log: Log, cand: Candidate) -> bool:
    with log.locked():
        return _find(log, cand) is not None


def copy_segment(ctx: TierContext, log: Log, cand: Candidate) -> dict | None:
    """Copy one segment (module docstring); the finished segment's summary, or None when it was abandoned
    because it changed under the upload."""
    with prepare(log, cand) as prep:
        if prep is None:
            return None
        seg = ctx.new_segment(log, cand.base_offset, cand.end_offset, cand.max_timestamp_ms, cand.size_bytes,
                              prep.leader_epochs)
        ctx.copy_started(seg)
        crashpoints.reached("tier.copy-started")
        keys = ctx.keys_of(seg)
        uploaded = _upload_all(ctx, prep, keys)
        # Read back what the store kept (one listing of the segment's keys): sizes and ETags as uploaded.
        ctx.store.check_stored(os.path.commonprefix(list(keys.values())), uploaded,
                               (cand.base_offset, cand.end_offset))
        crashpoints.reached("tier.verified")
    if not still_there(log, cand):
        ctx.abandon(seg)
        return None
    # The parts uploaded, in the FINISHED record: a part it lists that goes missing is loss (tiered/parts.py).
    ctx.copy_finished(seg, parts.from_uploads(keys, [(u.key, u.size, u.checksum) for u in uploaded]).encode())
    crashpoints.reached("tier.copy-finished")
    return {**cand.as_dict(), "segment_id": ctx.segment_id_text(seg), "objects": len(uploaded),
            "object_bytes": sum(up.size for up in uploaded)}
