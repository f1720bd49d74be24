"""Retention: deleting old segments by log start offset, size and time (Kafka's ``deleteOldSegments``).

Rules, applied in this order on each pass, each on what the previous one left:

1. **log start offset** (always, even for compacted topics, KAFKA-7400): a segment goes when the next
   segment's base offset is <= the log start offset (raised by delete-records).
2. **size** (``retention.bytes`` >= 0, policy contains ``delete``): with ``diff = log size - retention.bytes``,
   walking oldest first, a segment goes while ``diff - segment size >= 0`` (whole segments only, so the log
   never shrinks below the limit).
3. **time** (``retention.ms`` >= 0, policy contains ``delete``): a segment goes when
   ``now - largest timestamp > retention.ms`` (strict; the file mtime stands in when a segment has no
   timestamps).

A **tiered** topic (``remote.storage.enable``, copying not disabled by ``remote.log.copy.disable``) follows Kafka's
rules for a log with remote storage (``UnifiedLog.deleteOldSegments``): size and time use the effective
``local.retention.bytes``/``local.retention.ms`` (-2: ``retention.*``), and a segment goes only once its last offset
is at or below the highest offset with a finished remote copy (``remote_upper``, given by the caller that knows the
remote view; unknown counts as nothing copied), or the log start offset passed it (rule 1, as Kafka's
``allowDeletionDueToLogStartOffsetIncremented``). Its deletions move the local log start offset only: the log start
offset stays where it was, the offsets below the first local segment being served from remote storage (remote
retention raises it, :meth:`Log.set_log_start_offset_from_remote`). When the active segment itself breaches local
retention it is rolled, as Kafka does, so that it can be copied and then deleted. With ``remote.log.copy.disable``
the topic's local segments follow ``retention.*`` and move the log start offset, as in Kafka.

Only a prefix of the log is ever deleted: the walk stops at the first segment that must stay. Size and time
never delete a segment whose range reaches offsets the partition lost (:mod:`storage_engine.log.losses`) until an
operator accepts the loss: deleting it would move the log start offset past the loss and pass it over. A segment is
deletable only if the high watermark (here: the log end offset) is at or past its upper bound and it is not
the empty active segment; when every segment would go, the log rolls first so an empty active segment
remains. Deleted segments are renamed ``.deleted`` and purged by :func:`purge_deleted` once
``file.delete.delay.ms`` has passed, so readers holding them open can finish.

Segments whose largest timestamp lies after ``now`` are reported as ``future_segments``: time retention
can never delete them (nor anything after them) until the clock catches up, which an operator must know.
``now`` is passed in (``--now-ms``; the DAG passes its data interval end), so a backfilled run acts on the log
as of its interval, and re-running the same interval finds nothing more to do.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import NotRequired, Protocol, TypedDict

from storage_engine import crashpoints, layout
from storage_engine.config import LogConfig
from storage_engine.log import intent, losses
from storage_engine.log.losses import LostRange
from storage_engine.log.locks import LIVE, PartitionLock, lock_path
from storage_engine.log.log import Log
from storage_engine.segment.segment import LogSegment


# For a tiered topic's partition: the highest offset with a finished remote copy (the remote view's
# ``highest_offset``), or None when none is known (then nothing goes by size or time). What the retention jobs take
# from their caller, who knows the remote view.
RemoteUpperFor = Callable[[str, int], int | None]


def held_by_loss(log: RetentionView) -> LostRange | None:
    """The first lost range at or past the log start offset that an operator has not accepted (retention stops
    below it), or None."""
    return losses.barrier(log.log_dir, getattr(log, "folder", log.name), log.log_start_offset)


class RetentionView(Protocol):
    """What :func:`plan` reads of a log: a :class:`Log`, or a read-only snapshot of its files
    (:class:`storage_engine.inspection.snapshot.LogSnapshot`)."""

    @property
    def config(self) -> LogConfig: ...

    @property
    def segments(self) -> list[LogSegment]: ...

    @property
    def log_start_offset(self) -> int: ...

    @property
    def log_end_offset(self) -> int: ...

    @property
    def high_watermark(self) -> int: ...

    @property
    def log_dir(self) -> str: ...

    @property
    def name(self) -> str: ...


class SegmentDeletion(TypedDict):
    base_offset: int
    size_bytes: int
    largest_timestamp: int
    # "log-start-offset" | "retention-bytes" | "retention-ms"; a tiered topic's: "local-retention-bytes" |
    # "local-retention-ms" (its segments have a finished remote copy)
    reason: str


class FutureSegment(TypedDict):
    """A segment whose largest timestamp is after "now": time-based retention cannot expire it yet."""
    base_offset: int
    largest_timestamp: int
    ahead_ms: int


class RetentionResult(TypedDict):
    topic: str
    partition: int
    dry_run: bool
    now_ms: int
    cleanup_policy: str
    segments_deleted: int
    bytes_reclaimed: int
    segments: list[SegmentDeletion]
    log_start_offset_before: int
    log_start_offset: int
    future_segments: list[FutureSegment]
    nothing_to_do: bool
    skipped: NotRequired[str]
    held_by_loss: NotRequired[str]    # retention stops below offsets the partition lost, until accept-loss
    future: NotRequired[bool]       # the copy being made of the partition for a move between log dirs
    folder: NotRequired[str]
    # Tiered topics only (see the module docstring):
    tiered: NotRequired[bool]
    remote_upper: NotRequired[int]      # the highest offset with a finished remote copy, as given (-1: none known)
    local_log_start_offset_before: NotRequired[int]
    local_log_start_offset: NotRequired[int]
    rolled_active: NotRequired[bool]    # the active segment breached local retention: rolled (would be, in a dry
                                        # run) so that it can be copied


class PurgeResult(TypedDict):
    files_removed: int
    bytes_freed: int
    files_waiting: int
    removed: list[str]  # "<partition folder>/<file name>"
    dry_run: bool
    now_ms: NotRequired[int]
    nothing_to_do: NotRequired[bool]
    folders_removed: NotRequired[list[str]]   # -delete folders removed (paths)
    folders_waiting: NotRequired[int]
    offline_dirs: NotRequired[dict[str, str]]


@dataclass
class Deletion:
    segment: LogSegment
    reason: str

    def as_dict(self) -> SegmentDeletion:
        s = self.segment
        return {"base_offset": s.base_offset, "size_bytes": s.size, "largest_timestamp": s.largest_timestamp(),
                "reason": self.reason}


def is_tiered(cfg: LogConfig) -> bool:
    """Whether retention applies Kafka's local rules to the topic (``remote.storage.enable`` and copying not
    disabled: Kafka's ``remoteLogEnabledAndRemoteCopyEnabled``)."""
    return cfg.remote_storage_enable and not cfg.remote_log_copy_disable


@dataclass
class RetentionPlan:
    """What a retention pass would do: the deletions in order, the future-timestamp warnings, and whether the
    active segment of a tiered topic breaches local retention (it is then rolled so it can be copied)."""
    deletions: list[Deletion]
    future: list[FutureSegment]
    roll_active: bool = False
    tiered: bool = False
    remote_upper: int | None = None


class _Walk:
    """Kafka's ``deletableSegments``: the prefix of ``segments`` that ``predicate`` deletes, stopping at offsets the
    partition lost (``barrier``) and, for a tiered topic (``copied`` not None), at the first segment whose last
    offset has no finished remote copy unless the log start offset passed it. ``breached_active``: the walk
    reached the non-empty last segment and the predicate holds for it (Kafka rolls it then, for a tiered log)."""

    def __init__(self, log: RetentionView, barrier: int | None, copied: int | None):
        self.log, self.barrier, self.copied = log, barrier, copied
        self.breached_active = False

    def _eligible(self, nxt: LogSegment | None, upper: int) -> bool:
        if self.copied is None:
            return True
        return (upper > 0 and upper - 1 <= self.copied) or (nxt is not None
                                                            and self.log.log_start_offset >= nxt.base_offset)

    def __call__(self, segments: list[LogSegment],
                 predicate: Callable[[LogSegment, LogSegment | None], bool]) -> list[LogSegment]:
        out = []
        hw = self.log.high_watermark
        for i, seg in enumerate(segments):
            nxt = segments[i + 1] if i + 1 < len(segments) else None
            upper = nxt.base_offset if nxt is not None else self.log.log_end_offset
            is_last_and_empty = nxt is None and seg.size == 0
            if self.barrier is not None and upper > self.barrier:
                break       # its range reaches offsets the partition lost: kept until the loss is accepted
            breached = hw >= upper and predicate(seg, nxt)
            if breached and nxt is None and seg.size > 0 and self.copied is not None:
                self.breached_active = True
            if breached and not is_last_and_empty and self._eligible(nxt, upper):
                out.append(seg)
            else:
                break
        return out


def plan(log: RetentionView, now_ms: int, *,
         remote_upper: int | None = None) -> tuple[list[Deletion], list[FutureSegment]]:
    """Which segments retention would delete at ``now_ms`` and why, plus future-timestamp warnings.
    ``remote_upper``: for a tiered topic, the highest offset with a finished remote copy (None or -1: none
    known, so size and time delete nothing); ignored for other topics (see :func:`plan_retention`)."""
    p = plan_retention(log, now_ms, remote_upper=remote_upper)
    return p.deletions, p.future


def plan_retention(log: RetentionView, now_ms: int, *, remote_upper: int | None = None) -> RetentionPlan:
    """:func:`plan`, with whether a tiered log's active segment is to be rolled (module docstring)."""
    cfg = log.config
    tiered = is_tiered(cfg)
    copied = (remote_upper if remote_upper is not None else -1) if tiered else None
    lost = held_by_loss(log)
    walk = _Walk(log, None if lost is None else lost["start"], copied)
    remaining = log.segments
    deletions: list[Deletion] = []
    prefix = "local-" if tiered else ""

    def take(segs: list[LogSegment], reason: str) -> None:
        nonlocal remaining
        deletions.extend(Deletion(s, reason) for s in segs)
        gone = {id(s) for s in segs}
        remaining = [s for s in remaining if id(s) not in gone]

    start = log.log_start_offset
    # Rule 1 stops at nothing but the log start offset (Kafka, KAFKA-7400): not at a loss, not at a remote copy.
    take(_Walk(log, None, copied)(remaining, lambda s, n: n is not None and n.base_offset <= start),
         "log-start-offset")
    if cfg.delete:
        retention_bytes = cfg.effective_local_retention_bytes if tiered else cfg.retention_bytes
        retention_ms = cfg.effective_local_retention_ms if tiered else cfg.retention_ms
        size = sum(s.size for s in remaining)
        if retention_bytes >= 0 and size >= retention_bytes:  # Kafka: skip if size < retention.bytes
            diff = size - retention_bytes

            def by_size(seg: LogSegment, _n: LogSegment | None) -> bool:
                nonlocal diff
                if diff - seg.size >= 0:
                    diff -= seg.size
                    return True
                return False
            take(walk(remaining, by_size), prefix + "retention-bytes")
        if retention_ms >= 0:
            take(walk(remaining, lambda s, n: now_ms - s.largest_timestamp() > retention_ms), prefix + "retention-ms")
    future: list[FutureSegment] = [{"base_offset": s.base_offset, "largest_timestamp": s.largest_timestamp(),
               "ahead_ms": s.largest_timestamp() - now_ms}
              for s in remaining if s.largest_timestamp() > now_ms and s.size > 0]
    return RetentionPlan(deletions, future, roll_active=walk.breached_active, tiered=tiered,
                         remote_upper=copied)


def run(log: Log, now_ms: int, *, dry_run: bool = False, remote_upper: int | None = None) -> RetentionResult:
    """Apply (or with ``dry_run`` only plan) retention to one log; returns a JSON-able summary. ``remote_upper``:
    for a tiered topic, the highest offset with a finished remote copy (None: none known; see :func:`plan`).

    On a compacted topic retention pauses while a cleaning of the partition is in progress (Kafka runs
    both from the cleaner thread): it takes the cleaning claim or reports the partition as busy."""
    from storage_engine.maintenance.cleaner_manager import cleaning_claim
    claim = cleaning_claim(log) if log.config.compact else None
    if claim is not None and not claim.try_acquire():
        return {"topic": log.topic, "partition": log.partition, "dry_run": dry_run, "now_ms": now_ms,
                "cleanup_policy": ",".join(log.config.cleanup_policy), "segments_deleted": 0,
                "bytes_reclaimed": 0, "segments": [], "log_start_offset_before": log.log_start_offset,
                "log_start_offset": log.log_start_offset, "future_segments": [], "nothing_to_do": True,
                "skipped": "cleaning in progress on this partition"}
    try:
        return _run(log, now_ms, dry_run, remote_upper)
    finally:
        if claim is not None:
            claim.release()


def _run(log: Log, now_ms: int, dry_run: bool, remote_upper: int | None) -> RetentionResult:
    with log.locked():
        p = plan_retention(log, now_ms, remote_upper=remote_upper)
        deletions, future = p.deletions, p.future
        before_start, before_local = log.log_start_offset, log.local_log_start_offset
        summaries = {id(d.segment): d.as_dict() for d in deletions}  # before the files are renamed
        if dry_run:
            done = [d.segment for d in deletions]
        else:
            done = (log.delete_segments_locked([d.segment for d in deletions], now_ms, move_log_start=not p.tiered)
                    if deletions else [])
        rolled = p.roll_active and log.active_segment.size > 0     # (a dry run says it would)
        if rolled and not dry_run:
            log.roll_locked(now_ms)     # Kafka: the active segment breached local retention; copied, then deleted
        segments = [summaries[id(s)] for s in done]
        lost = held_by_loss(log)
        extra: dict = {} if lost is None else {"held_by_loss": losses.describe(lost) + ": retention deletes nothing "
                                               "at or past them until an operator accepts the loss (accept-loss)"}
        if p.tiered:
            extra.update(tiered=True, remote_upper=p.remote_upper, local_log_start_offset_before=before_local,
                         local_log_start_offset=log.local_log_start_offset, rolled_active=rolled)
        return {
            "topic": log.topic, "partition": log.partition, "dry_run": dry_run, "now_ms": now_ms,
            "cleanup_policy": ",".join(log.config.cleanup_policy),
            "segments_deleted": len(segments),
            "bytes_reclaimed": sum(s["size_bytes"] for s in segments),
            "segments": segments,
            "log_start_offset_before": before_start,
            "log_start_offset": log.log_start_offset,
            "future_segments": future,
            "nothing_to_do": not segments and not rolled,
            **extra,
        }


def purge_deleted(log_dirs: Iterable[str], now_ms: int, delay_ms_for: Callable[[str], int] | None = None, *,
                  dry_run: bool = False) -> PurgeResult:
    """Remove ``*.deleted`` files whose deletion was scheduled at least ``file.delete.delay.ms`` ago.

    The schedule time is the file's mtime, set when it was renamed. ``delay_ms_for(topic)`` gives the delay.
    Each partition is purged under its lock, and one with a swap pending (a record, or a ``.swap`` file) is
    skipped: rolling that swap back may need its ``.deleted`` files."""
    removed: list[str] = []
    waiting = freed = 0
    for d in log_dirs:
        if not os.path.isdir(d):
            continue
        # Partitions and the copies being made for moves; a -delete folder goes as a whole (see purge_delete_dirs).
        listing = layout.scan_log_dir(d)
        for part, (topic, _) in sorted(listing.partitions + listing.futures):
            pdir = os.path.join(d, part)
            try:
                if not any(n.endswith(layout.DELETED_SUFFIX) for n in os.listdir(pdir)):
                    continue
            except FileNotFoundError:
                continue    # deleted or moved since the listing
            delay = delay_ms_for(topic) if delay_ms_for else 60000
            lock = PartitionLock(lock_path(d, part))
            try:
                with lock:
                    if lock.read_state().status != LIVE or not os.path.isdir(pdir):
                        continue    # deleted or moved since the listing: its -delete folder goes as a whole
                    r, w, f = _purge_partition(d, part, pdir, now_ms, delay, dry_run)
            finally:
                lock.close()
            removed += r
            waiting += w
            freed += f
    return {"files_removed": len(removed), "bytes_freed": freed, "files_waiting": waiting, "removed": removed,
            "dry_run": dry_run}


def _purge_partition(log_dir: str, part: str, pdir: str, now_ms: int, delay: int,
                     dry_run: bool) -> tuple[list[str], int, int]:
    removed: list[str] = []
    waiting = freed = 0
    names = sorted(os.listdir(pdir))
    if intent.exists(log_dir, part) or any(n.endswith(layout.SWAP_SUFFIX) for n in names):
        return removed, sum(1 for n in names if n.endswith(layout.DELETED_SUFFIX)), 0
    for name in names:
        if not name.endswith(layout.DELETED_SUFFIX):
            continue
        path = os.path.join(pdir, name)
        try:
            st = os.stat(path)
        except FileNotFoundError:
            continue
        if now_ms - int(st.st_mtime * 1000) >= delay:
            if not dry_run:
                try:
                    os.remove(path)
                except FileNotFoundError:
                    continue
                if not removed:
                    crashpoints.reached("purge.partial")
            removed.append(os.path.join(part, name))
            freed += st.st_size
        else:
            waiting += 1
    return removed, waiting, freed
