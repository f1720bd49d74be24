"""Which logs to compact, how far, and who may (Kafka's ``LogCleanerManager``), across processes.

State kept per log dir, in Kafka's files where Kafka has one:

* ``cleaner-offset-checkpoint`` (Kafka's text format): the first dirty offset of each compacted partition,
  i.e. where the last cleaning ended. An entry outside [log start, log end] is reset to the log start. A file
  that does not parse is ignored as Kafka ignores it (warned about once; every partition of the dir is cleaned
  from its log start) and replaced by the next update of the file or the next selection that may write.
* ``.engine+cleaning+<topic>-<partition>`` (flock, :class:`storage_engine.log.locks.CleaningClaim`): the
  cross-process "in progress" claim. Whoever holds it cleans (or runs retention on) the partition; a second run
  skips it and says so.
* ``.engine+uncleanable.json``: partitions whose cleaning failed, with the reason and time. They are skipped
  (and reported) until cleared by ``compact --clear-uncleanable``; Kafka forgets them only on restart.

Selection (``grabFilthiestCompactedLog``): first dirty offset = checkpoint (or log start); first uncleanable
offset = min(last stable offset, active segment base, first dirty segment newer than ``now -
min.compaction.lag.ms``, first dirty segment whose largest timestamp is >= an optional upper time bound, the start
of the first range of offsets the partition lost that an operator has not accepted), snapped to a segment base:
so nothing at or past a lost range is cleaned and the checkpoint never moves past it. Dirty ratio =
cleanable bytes / (clean + cleanable bytes); a log is eligible if the ratio is strictly above
``min.cleanable.dirty.ratio`` or a dirty segment is older than ``max.compaction.lag.ms``.
"""
from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from storage_engine import layout
from storage_engine.config import LogConfig
from storage_engine.segment.checkpoint import OffsetCheckpointFile
from storage_engine.durable import atomic_write, read_regular_file
from storage_engine.errors import CorruptCheckpointError, UnsafeFileError
from storage_engine.log import losses
from storage_engine.log.locks import CleaningClaim, FileLock
from storage_engine.log.read_only import ClaimProbe
from storage_engine.log.log import Log
from storage_engine.segment.segment import LogSegment

_LONG_MAX = 2**63 - 1   # Long.MAX_VALUE: max.compaction.lag.ms "never", and the end of the last segment
_MAX_UNCLEANABLE_BYTES = 16 * 1024 * 1024   # a reason per partition; larger (or no regular file) is not ours
logger = logging.getLogger(__name__)


# -- cleaner checkpoint ----------------------------------------------------------------------------------------

# (file, reason) of the corrupt cleaner checkpoints this process has warned about: each is reported once.
_WARNED_CORRUPT: set[tuple[str, str]] = set()


def _read_checkpoint_file(f: OffsetCheckpointFile) -> tuple[dict, str | None]:
    """``(entries, None)``, or ``({}, reason)`` for a corrupt file. Kafka's ``LogCleanerManager`` logs a
    cleaner checkpoint it cannot read and cleans as if it were empty (``allCleanerCheckpoints``); the cleaner
    checkpoint is derived state (where the last cleaning ended: without it a partition is cleaned again from its
    log start), so a corrupt one loses nothing stored. Warned about once per file and reason in a process."""
    try:
        return f.read(), None
    except CorruptCheckpointError as exc:
        key = (f.path, str(exc))
        if key not in _WARNED_CORRUPT:
            _WARNED_CORRUPT.add(key)
            logger.warning("Ignoring corrupt cleaner checkpoint %s: cleaning as if it were empty until the next "
                           "update replaces it: %s", f.path, exc)
        return {}, str(exc)


def read_cleaner_checkpoints(log_dir: str, *, replace_corrupt: bool = False) -> dict:
    """The dir's cleaner checkpoint entries ({} for a missing or corrupt file). ``replace_corrupt``: a corrupt file
    is replaced at once (by one without entries; Kafka's selection force-writes a checkpoint it finds invalid)."""
    f = OffsetCheckpointFile(os.path.join(log_dir, layout.CLEANER_OFFSET_CHECKPOINT))
    entries, err = _read_checkpoint_file(f)
    if err is not None and replace_corrupt:
        with FileLock(os.path.join(log_dir, layout.CLEANER_CHECKPOINT_LOCK_FILE)):
            entries, err = _read_checkpoint_file(f)     # another process may have replaced it meanwhile
            if err is not None:
                f.write({})
                logger.warning("Replaced corrupt cleaner checkpoint %s by one without entries", f.path)
    return entries


def update_cleaner_checkpoint(log_dir: str, tp: tuple[str, int], offset: int | None) -> None:
    """Set (or with None remove) one partition's entry, keeping the others; entries of partitions whose
    folder is gone are dropped, as Kafka does on every update. A corrupt file counts as empty and is replaced."""
    with FileLock(os.path.join(log_dir, layout.CLEANER_CHECKPOINT_LOCK_FILE)):
        f = OffsetCheckpointFile(os.path.join(log_dir, layout.CLEANER_OFFSET_CHECKPOINT))
        entries, _err = _read_checkpoint_file(f)
        listing = layout.scan_log_dir(log_dir)      # partitions and the copies being made for moves
        present = {tp for _n, tp in listing.partitions} | {tp for _n, tp in listing.futures}
        entries = {k: v for k, v in entries.items() if k in present}
        if offset is None:
            entries.pop(tp, None)
        else:
            entries[tp] = offset
        f.write(entries)


# -- claims ----------------------------------------------------------------------------------------------------

def cleaning_claim(log: Log) -> CleaningClaim:
    """The claim on cleaning ``log``'s partition (see :class:`storage_engine.log.locks.CleaningClaim`); for a log
    opened read-only (a dry run), a probe that creates and holds nothing (:class:`~storage_engine.log.read_only.ClaimProbe`)."""
    if getattr(log, "read_only", False):
        return ClaimProbe(log.log_dir, log.name)
    return CleaningClaim(log.log_dir, log.name)


def is_claimed(log: Log) -> bool:
    claim = cleaning_claim(log)
    if claim.try_acquire():
        claim.release()
        return False
    return True


# -- uncleanable partitions ------------------------------------------------------------------------------------

_UNREADABLE = "<unreadable>"  # the entry standing for a record that cannot be read: every partition of the dir


def read_uncleanable(log_dir: str) -> dict:
    path = os.path.join(log_dir, layout.UNCLEANABLE_FILE)
    try:
        data = json.loads(read_regular_file(path, _MAX_UNCLEANABLE_BYTES) or b"{}")
    except FileNotFoundError:
        return {}
    except UnsafeFileError as exc:
        return {_UNREADABLE: {"reason": f"{path} is {exc.reason}; fix or delete it"}}
    except (ValueError, OSError):
        data = None
    if not isinstance(data, dict):
        # An unreadable marker file must not make every partition cleanable silently: keep it, report it.
        return {_UNREADABLE: {"reason": f"{path} is not valid JSON (an object of partitions); fix or delete it"}}
    return data


def mark_uncleanable(log_dir: str, name: str, reason: str, now_ms: int) -> None:
    with FileLock(os.path.join(log_dir, layout.CLEANER_CHECKPOINT_LOCK_FILE)):
        data = read_uncleanable(log_dir)
        data.pop(_UNREADABLE, None)
        data[name] = {"reason": reason, "since_ms": now_ms}
        atomic_write(os.path.join(log_dir, layout.UNCLEANABLE_FILE),
                     json.dumps(data, indent=1, sort_keys=True).encode())


def clear_uncleanable(log_dir: str, name: str | None = None) -> list[str]:
    """Clear one partition (or all with None); returns what was cleared.

    A record that cannot be read names no partition, so clearing one cannot be done on it: that raises
    :class:`CorruptCheckpointError` naming the file (clear all, or fix the file), and the file stays as it is. The
    stand-in entry for such a file is never written back."""
    with FileLock(os.path.join(log_dir, layout.CLEANER_CHECKPOINT_LOCK_FILE)):
        data = read_uncleanable(log_dir)
        if name is not None and _UNREADABLE in data:
            raise CorruptCheckpointError(
                f"the uncleanable record cannot be read, so {name} cannot be cleared alone: clear every partition "
                f"(compact --clear-uncleanable without --topic) or fix the file",
                os.path.join(log_dir, layout.UNCLEANABLE_FILE))
        cleared = sorted(data) if name is None else ([name] if name in data else [])
        for n in cleared:
            data.pop(n, None)
        atomic_write(os.path.join(log_dir, layout.UNCLEANABLE_FILE),
                     json.dumps(data, indent=1, sort_keys=True).encode())
        return cleared


# -- what is cleanable -----------------------------------------------------------------------------------------

class CleanableView(Protocol):
    """What the cleanable-section rules read of a log: a :class:`Log`, or a read-only snapshot of its files
    (:class:`storage_engine.inspection.snapshot.LogSnapshot`)."""

    @property
    def topic(self) -> str: ...

    @property
    def partition(self) -> int: ...

    @property
    def config(self) -> LogConfig: ...

    @property
    def segments(self) -> list[LogSegment]: ...

    @property
    def log_start_offset(self) -> int: ...

    @property
    def log_end_offset(self) -> int: ...

    @property
    def last_stable_offset(self) -> int: ...

    @property
    def log_dir(self) -> str: ...

    @property
    def name(self) -> str: ...


_View = TypeVar("_View", bound=CleanableView)


@dataclass
class LogToClean(Generic[_View]):
    log: _View
    first_dirty_offset: int
    first_uncleanable_offset: int
    clean_bytes: int
    cleanable_bytes: int
    need_compaction_now: bool
    checkpoint_reset: bool = False
    max_compaction_delay_ms: int = 0
    held_by_loss: str | None = None     # the lost range cleaning stops below, until accept-loss

    @property
    def total_bytes(self) -> int:
        return self.clean_bytes + self.cleanable_bytes

    @property
    def cleanable_ratio(self) -> float:
        return self.cleanable_bytes / self.total_bytes if self.total_bytes else 0.0

    def as_dict(self) -> dict:
        return {"topic": self.log.topic, "partition": self.log.partition,
                "first_dirty_offset": self.first_dirty_offset,
                "first_uncleanable_offset": self.first_uncleanable_offset, "clean_bytes": self.clean_bytes,
                "cleanable_bytes": self.cleanable_bytes, "dirty_ratio": round(self.cleanable_ratio, 6),
                "min_cleanable_dirty_ratio": self.log.config.min_cleanable_dirty_ratio,
                "need_compaction_now": self.need_compaction_now,
                "max_compaction_delay_ms": self.max_compaction_delay_ms,
                "checkpoint_reset": self.checkpoint_reset,
                **({"held_by_loss": self.held_by_loss} if self.held_by_loss else {})}


def cleanable_offsets(log: CleanableView, checkpoint: int | None, now_ms: int,
                      upper_time_bound_ms: int | None = None, *,
                      barrier: int | None = None) -> tuple[int, int, bool, bool, int]:
    """(first dirty, first uncleanable, need compaction now, checkpoint reset, max delay) - Kafka's rules, and
    never at or past ``barrier`` (the start of offsets the partition lost, until an operator accepts the loss)."""
    cfg = log.config
    reset = False
    first_dirty = log.log_start_offset if checkpoint is None else checkpoint
    if checkpoint is not None and (checkpoint < log.log_start_offset or checkpoint > log.log_end_offset):
        first_dirty = log.log_start_offset
        reset = True
    segments = log.segments
    active = segments[-1]
    dirty_non_active = [s for s in segments[:-1] if _next_base(segments, s) > first_dirty]
    bounds = [log.last_stable_offset, active.base_offset]  # never past an undecided transaction
    if barrier is not None:
        bounds.append(barrier)
    if cfg.min_compaction_lag_ms > 0:
        for s in dirty_non_active:
            if s.largest_timestamp() > now_ms - cfg.min_compaction_lag_ms:
                bounds.append(s.base_offset)
                break
    if upper_time_bound_ms is not None:
        for s in dirty_non_active:
            if s.largest_timestamp() >= upper_time_bound_ms:
                bounds.append(s.base_offset)
                break
    first_uncleanable = max(first_dirty, min(bounds))
    need_now, max_delay = False, 0
    if cfg.max_compaction_lag_ms < _LONG_MAX:  # else the delay is negative: no need to read any timestamp
        earliest = None
        for s in dirty_non_active:
            ts = s.first_batch_timestamp()
            if ts > 0 and (earliest is None or ts < earliest):  # Kafka: firstBatchTimestamps.filter(_ > 0)
                earliest = ts
        if earliest is not None:
            max_delay = now_ms - cfg.max_compaction_lag_ms - earliest
            need_now = max_delay > 0
    return first_dirty, first_uncleanable, need_now, reset, max(0, max_delay)


def _next_base(segments: list[LogSegment], seg: LogSegment) -> int:
    i = segments.index(seg)
    return segments[i + 1].base_offset if i + 1 < len(segments) else _LONG_MAX


def log_to_clean(log: _View, checkpoint: int | None, now_ms: int,
                 upper_time_bound_ms: int | None = None) -> LogToClean[_View]:
    # Offsets the partition lost (storage_engine.log.losses): nothing at or past them is cleaned, and the
    # checkpoint never moves past them, until an operator accepts the loss.
    lost = losses.barrier(log.log_dir, getattr(log, "folder", log.name), log.log_start_offset)
    first_dirty, first_uncleanable, need_now, reset, delay = cleanable_offsets(
        log, checkpoint, now_ms, upper_time_bound_ms, barrier=None if lost is None else lost["start"])
    segments = log.segments
    # Kafka: clean bytes = segments overlapping [-1, first dirty); a segment split by the checkpoint (a map
    # that filled mid-segment) counts as clean and as cleanable.
    clean_bytes = sum(s.size for s in segments if s.base_offset < first_dirty)
    # Snap the uncleanable boundary to a segment base (the segment holding it, among non-active ones).
    snapped = segments[-1].base_offset
    for s in segments[:-1]:
        if s.base_offset <= first_uncleanable < _next_base(segments, s):
            snapped = s.base_offset
            break
    start = min(first_dirty, snapped)
    cleanable_bytes = sum(s.size for s in segments
                          if _next_base(segments, s) > start and s.base_offset < snapped)
    return LogToClean(log, first_dirty, max(snapped, first_dirty), clean_bytes, cleanable_bytes, need_now, reset,
                      delay, None if lost is None else losses.describe(lost))


def is_eligible(ltc: LogToClean[_View]) -> bool:
    """Kafka's rule: dirty ratio strictly above ``min.cleanable.dirty.ratio``, or forced by
    ``max.compaction.lag.ms`` with something to clean."""
    return ltc.total_bytes > 0 and ((ltc.need_compaction_now and ltc.cleanable_bytes > 0) or
                                    ltc.cleanable_ratio > ltc.log.config.min_cleanable_dirty_ratio)


def select(logs: list[Log], now_ms: int, *, upper_time_bound_ms: int | None = None,
           write_resets: bool = True) -> dict:
    """Rank compacted logs by dirty ratio. Returns {"eligible": [LogToClean sorted dirtiest first],
    "skipped": [{"topic","partition","reason"}], "not_dirty": [LogToClean]}."""
    eligible, skipped, not_dirty = [], [], []
    checkpoints: dict[str, dict] = {}
    uncleanable: dict[str, dict] = {}
    for log in logs:
        if not log.config.compact:
            continue
        if log.log_dir not in checkpoints:
            checkpoints[log.log_dir] = read_cleaner_checkpoints(log.log_dir, replace_corrupt=write_resets)
            uncleanable[log.log_dir] = read_uncleanable(log.log_dir)
        bad = uncleanable[log.log_dir].get(log.name) or uncleanable[log.log_dir].get(_UNREADABLE)
        if bad:
            skipped.append({"topic": log.topic, "partition": log.partition,
                            "reason": f"uncleanable: {bad.get('reason')}"})
            continue
        if is_claimed(log):
            skipped.append({"topic": log.topic, "partition": log.partition,
                            "reason": "another run is cleaning this partition"})
            continue
        try:
            log.refresh()
            ltc = log_to_clean(log, checkpoints[log.log_dir].get((log.topic, log.partition)), now_ms,
                               upper_time_bound_ms)
        except Exception as exc:  # noqa: BLE001 - Kafka: an error while selecting marks the partition uncleanable, and
            reason = f"{type(exc).__name__}: {exc}"  # the other partitions are still considered
            if write_resets:
                mark_uncleanable(log.log_dir, log.name, reason, now_ms)
            skipped.append({"topic": log.topic, "partition": log.partition, "reason": f"uncleanable: {reason}"})
            continue
        if ltc.checkpoint_reset and write_resets:
            update_cleaner_checkpoint(log.log_dir, (log.topic, log.partition), ltc.first_dirty_offset)
        if is_eligible(ltc):
            eligible.append(ltc)
        elif ltc.held_by_loss is not None:
            skipped.append({"topic": log.topic, "partition": log.partition,
                            "reason": f"{ltc.held_by_loss}: nothing at or past them is cleaned until an operator "
                                      f"accepts the loss (accept-loss --topic {log.topic} --partition "
                                      f"{log.partition})"})
        else:
            not_dirty.append(ltc)
    eligible.sort(key=lambda c: c.cleanable_ratio, reverse=True)
    return {"eligible": eligible, "skipped": skipped, "not_dirty": not_dirty}
