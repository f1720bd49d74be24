"""Topic changes that take effect whole or not at all: creating a topic, adding partitions to one, deleting one.

Each is several steps (a folder per partition, its ``partition.metadata``, the topic's stored configs), so a
process killed part-way would leave a topic short of partitions for good. Each change is therefore recorded
before its first step, as the cleaner's swaps are (:mod:`storage_engine.log.intent`), and the record is resolved
by whoever finds it after its process died.

Files (in the first log dir, which holds the creation lock too):

* ``.engine+topic-changes.lock``: an exclusive ``flock`` held for the whole of a change, by the process (and
  thread) making it; the kernel releases it when that process dies;
* ``.engine+topic-changes/<topic>``: the record of a change under way, one JSON object written atomically and
  durably before the change's first step and removed (durably) after its last::

    {"version": 1, "op": "create", "topic": T, "partitions": N, "topic_id": "<32 hex>", "configs": {...}}
    {"version": 1, "op": "add-partitions", "topic": T, "from": M, "partitions": N, "topic_id": "<32 hex>"}
    {"version": 1, "op": "delete", "topic": T, "partitions": [p, ...], "whole": true}

Rules:

* A change takes the lock, then resolves every record it finds (a record found under the lock was left by a
  process that died), then checks the request, and only then writes its record. So a record only ever
  describes a change that was checked and accepted.
* **Every recorded change is rolled forward**, never back: a create gets all its partitions (each with the
  topic id of the record) and its configs; an add-partitions gets the partitions ``from .. partitions-1``; a
  delete deletes the listed partitions still there (their folders become ``-delete``) and, for a whole topic,
  drops its stored configs. Rolling forward is what the dead process would have done, and it is always
  possible: every step is idempotent (an existing partition is kept, a missing one is created; a partition
  already deleted is skipped). A change killed before its record was durable did nothing: no partition of it
  exists (the record comes before the first step), and it was never acknowledged.
* Resolution runs at the next open of the log dirs (:meth:`LogManager.open
  <storage_engine.log.manager.LogManager.open>`, so at the broker's start too), when the lock is free (a live
  process holding it completes its own change), and at the start of every change. A retried CreateTopics of a
  topic whose create was left half done therefore completes it.
* Readers that list topics (the broker's catalog) hide what a record names: a topic being created or deleted
  entirely, a topic being extended beyond its old partition count. So no topic is ever seen with fewer
  partitions than it was created with.
"""
from __future__ import annotations

import fcntl
import json
import logging
import os
import uuid
from collections.abc import Callable, Collection, Mapping
from typing import Any, Protocol

from storage_engine import crashpoints, layout, topic_store
from storage_engine.durable import atomic_write, fsync_dir, read_regular_file
from storage_engine.errors import PartitionNotFoundError, StorageError, StorageIOError, UnsafeFileError

from storage_engine.config import StorageConfig
from storage_engine.log.failure import LogDirFailureChannel
from storage_engine.log import topic_id as topic_ids
from storage_engine.log.log import Log


class LogManager(Protocol):
    """What a topic change needs of the set of logs (:class:`storage_engine.log.manager.LogManager` is one; it
    calls :func:`resolve` as it opens, so this module names the manager by what it uses, not by import)."""
    config: StorageConfig
    failures: LogDirFailureChannel

    def online_dirs(self) -> list[str]: ...

    def partitions(self, topic_filter: Collection[str] | None = None) -> list[tuple[str, int]]: ...

    def get_or_create_log(self, topic: str, partition: int) -> Log: ...

    def delete_log(self, topic: str, partition: int) -> dict: ...


logger = logging.getLogger(__name__)

VERSION = 1
LOCK_FILE = layout.ENGINE_PREFIX + "topic-changes.lock"
RECORD_DIR = layout.TOPIC_CHANGES_DIR
MAX_RECORD_BYTES = 1024 * 1024
OPS = ("create", "add-partitions", "delete")
StoreConfigs = Callable[[str, Mapping[str, str]], None]


class TopicChangeError(StorageError):
    """A change refused after its check (``code``: the Kafka error name, e.g. ``topic_already_exists``)."""

    def __init__(self, code: str, message: str):
        self.code = code
        super().__init__(message)


def lock_path(log_dirs: list[str] | tuple[str, ...]) -> str:
    return os.path.join(log_dirs[0], LOCK_FILE)


def record_dir(log_dirs: list[str] | tuple[str, ...]) -> str:
    return os.path.join(log_dirs[0], RECORD_DIR)


class ChangeLock:
    """The exclusive ``flock`` on ``.engine+topic-changes.lock`` (blocking, or with ``try_acquire`` not)."""

    def __init__(self, log_dirs: list[str] | tuple[str, ...]):
        self.path = lock_path(log_dirs)
        self._fd: int | None = None

    def _open(self) -> int:
        try:
            return os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
        except OSError as exc:
            raise StorageIOError("cannot open the topic-changes lock", self.path, exc) from exc

    def try_acquire(self) -> bool:
        fd = self._open()
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        self._fd = fd
        return True

    def __enter__(self) -> "ChangeLock":
        fd = self._open()
        fcntl.flock(fd, fcntl.LOCK_EX)
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __exit__(self, *exc: object) -> None:
        self.release()


# -- records ---------------------------------------------------------------------------------------------------

def _record_path(log_dirs: list[str] | tuple[str, ...], topic: str) -> str:
    return os.path.join(record_dir(log_dirs), topic)   # a legal topic name is a legal file name


def _write(log_dirs: list[str] | tuple[str, ...], record: dict[str, Any]) -> None:
    folder = record_dir(log_dirs)
    if not os.path.isdir(folder):
        try:
            os.makedirs(folder, exist_ok=True)
        except OSError as exc:
            raise StorageIOError("cannot create the topic-changes folder", folder, exc) from exc
        fsync_dir(log_dirs[0])
    atomic_write(_record_path(log_dirs, record["topic"]),
                 json.dumps({"version": VERSION, **record}, separators=(",", ":")).encode())


def _clear(log_dirs: list[str] | tuple[str, ...], topic: str) -> None:
    path = _record_path(log_dirs, topic)
    try:
        os.remove(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise StorageIOError("cannot remove the topic-change record", path, exc) from exc
    fsync_dir(record_dir(log_dirs))


def pending(log_dirs: list[str] | tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """{topic: record} of the changes recorded and not done (under way, or left by a process that died). A
    record that does not parse is reported and skipped (it can only be damaged: its write is atomic)."""
    folder = record_dir(log_dirs)
    try:
        names = os.listdir(folder)
    except (FileNotFoundError, NotADirectoryError):
        return {}
    except OSError as exc:
        raise StorageIOError("cannot list the topic-change records", folder, exc) from exc
    out: dict[str, dict[str, Any]] = {}
    for name in sorted(names):
        if name.endswith(layout.TMP_SUFFIX):
            continue
        path = os.path.join(folder, name)
        try:
            record = json.loads(read_regular_file(path, MAX_RECORD_BYTES).decode("utf-8"))
        except FileNotFoundError:
            continue    # done meanwhile
        except (OSError, UnsafeFileError, UnicodeDecodeError, ValueError) as exc:
            logger.error("%s: unreadable topic-change record (%s); ignored", path, exc)
            continue
        if (not isinstance(record, dict) or record.get("version") != VERSION or record.get("op") not in OPS
                or record.get("topic") != name):
            logger.error("%s: topic-change record of an unknown form; ignored", path)
            continue
        out[name] = record
    return out


def hidden(records: Mapping[str, Mapping[str, Any]]) -> dict[str, int]:
    """What readers must not show yet: {topic: partitions visible below} (0: the whole topic is hidden)."""
    return {t: int(r["from"]) if r["op"] == "add-partitions" else 0 for t, r in records.items()}


# -- the changes -----------------------------------------------------------------------------------------------

def existing_partitions(mgr: "LogManager", topic: str, *, vanished: bool = False) -> list[int]:
    """The partitions of ``topic`` in the online log dirs (folders, and logs this manager has); with ``vanished``
    also those whose folder vanished or became a file (:mod:`storage_engine.log.health`), which a delete
    forgets."""
    from storage_engine.log import health
    found: set[int] = set()
    for d in mgr.online_dirs():
        try:
            found.update(p for _, (t, p) in layout.partition_dirs(d) if t == topic)
            if vanished:
                found.update(m["partition"] for m in health.missing_partitions(d) if m["topic"] == topic)
        except OSError as exc:
            logger.warning("cannot list log dir %s: %s", d, exc)
    found.update(p for t, p in mgr.partitions([topic]))
    return sorted(found)


def _default_store(mgr: "LogManager") -> StoreConfigs:
    def store(topic: str, configs: Mapping[str, str]) -> None:
        topic_store.replace(mgr.online_dirs(), topic, configs)
    return store


def _create_partitions(mgr: "LogManager", topic: str, partitions: range, topic_id: uuid.UUID, step: str) -> None:
    for p in partitions:
        log = mgr.get_or_create_log(topic, p)
        if topic_ids.read_topic_id(log.dir) != topic_id:     # (a roll-forward finds most already written)
            topic_ids.write_topic_id(log.dir, topic_id)
        crashpoints.reached(step)


def _roll_forward(mgr: "LogManager", record: Mapping[str, Any], store: StoreConfigs, *,
                  resolving: bool) -> list[dict]:
    """Do every step of ``record`` not yet done (each is idempotent); for a delete, what each deletion did."""
    topic, op = record["topic"], record["op"]
    step = "topic.resolve.partial" if resolving else None
    if op == "create":
        if record.get("configs"):
            store(topic, record["configs"])
        if step is None:
            crashpoints.reached("topic.create.configs")
        _create_partitions(mgr, topic, range(int(record["partitions"])), uuid.UUID(hex=record["topic_id"]),
                           step or "topic.create.partition")
    elif op == "add-partitions":
        _create_partitions(mgr, topic, range(int(record["from"]), int(record["partitions"])),
                           uuid.UUID(hex=record["topic_id"]), step or "topic.extend.partition")
    else:
        deleted = []
        for p in record["partitions"]:
            try:
                deleted.append(mgr.delete_log(topic, int(p)))
            except PartitionNotFoundError:
                continue    # deleted before the process died
            crashpoints.reached(step or "topic.delete.partition")
        if record.get("whole"):
            store(topic, {})
            if step is None:
                crashpoints.reached("topic.delete.configs")
        return deleted
    return []


def _resolve_locked(mgr: "LogManager", store: StoreConfigs) -> list[dict[str, Any]]:
    done = []
    for topic, record in pending(mgr.config.log_dirs).items():
        logger.warning("completing the %s of topic %s that a process left half done (%s)", record["op"], topic,
                       record)
        _roll_forward(mgr, record, store, resolving=True)
        _clear(mgr.config.log_dirs, topic)
        done.append(record)
    return done


def resolve(mgr: "LogManager", store: StoreConfigs | None = None) -> list[dict[str, Any]]:
    """Roll forward the changes left by processes that died (the records found while the lock is free); the
    records resolved. With the lock held by a live process, nothing (it completes its own change)."""
    log_dirs = mgr.config.log_dirs
    if mgr.failures.is_offline(log_dirs[0]) is not None or not pending(log_dirs):
        return []
    lock = ChangeLock(log_dirs)
    if not lock.try_acquire():
        return []
    try:
        return _resolve_locked(mgr, store or _default_store(mgr))
    finally:
        lock.release()


def create(mgr: "LogManager", topic: str, partitions: int, configs: Mapping[str, str] | None = None, *,
           topic_id: uuid.UUID | None = None, store: StoreConfigs | None = None,
           on_record: Callable[[str, dict[str, Any] | None], None] | None = None) -> dict[str, Any]:
    """Create ``topic`` with ``partitions`` partitions (and ``configs``) whole. ``topic_already_exists`` if any
    partition of it exists, unless a create of it with the same partition count was left half done (then this
    completes it). ``on_record(topic, record or None)`` is called once the record is written (readers must hide
    the topic) and once it is cleared. Returns {"topic_id", "completed_half_done"}."""
    layout.validate_topic(topic)    # its name is a file name of the record
    store = store or _default_store(mgr)
    with ChangeLock(mgr.config.log_dirs):
        left = pending(mgr.config.log_dirs)
        resolved = _resolve_locked(mgr, store) if left else []
        for r in resolved:
            if r["topic"] == topic and r["op"] == "create" and int(r["partitions"]) == partitions:
                return {"topic_id": uuid.UUID(hex=r["topic_id"]), "completed_half_done": True}
        if existing_partitions(mgr, topic):
            raise TopicChangeError("topic_already_exists", f"topic {topic!r} already exists")
        tid = topic_id or topic_ids.random_uuid()     # Kafka's Uuid.randomUuid: never a reserved id
        record = {"op": "create", "topic": topic, "partitions": partitions, "topic_id": tid.hex,
                  "configs": dict(configs or {})}
        _change(mgr, record, store, on_record, "create")
        return {"topic_id": tid, "completed_half_done": False}


def add_partitions(mgr: "LogManager", topic: str, count: int, topic_id: uuid.UUID, *,
                   store: StoreConfigs | None = None,
                   on_record: Callable[[str, dict[str, Any] | None], None] | None = None) -> None:
    """Extend ``topic`` to ``count`` partitions whole (``unknown_topic_or_partition``, ``invalid_partitions``)."""
    layout.validate_topic(topic)    # its name is a file name of the record
    store = store or _default_store(mgr)
    with ChangeLock(mgr.config.log_dirs):
        if pending(mgr.config.log_dirs):
            _resolve_locked(mgr, store)
        existing = existing_partitions(mgr, topic)
        if not existing:
            raise TopicChangeError("unknown_topic_or_partition", f"topic {topic!r} does not exist")
        current = max(existing) + 1
        if count <= current:
            raise TopicChangeError("invalid_partitions", f"topic {topic!r} has {current} partitions; the new count "
                                                         f"{count} must be larger")
        record = {"op": "add-partitions", "topic": topic, "from": current, "partitions": count,
                  "topic_id": topic_id.hex}
        _change(mgr, record, store, on_record, "extend")


def delete(mgr: "LogManager", topic: str, partitions: list[int] | None = None, *, whole: bool | None = None,
           store: StoreConfigs | None = None,
           on_record: Callable[[str, dict[str, Any] | None], None] | None = None) -> list[dict]:
    """Delete ``topic`` (default: the partitions found; or ``partitions``) whole, and with ``whole`` (default:
    no ``partitions`` given) its stored configs; what :meth:`LogManager.delete_log` did for each partition.
    Unknown topic: :class:`PartitionNotFoundError`."""
    layout.validate_topic(topic)    # its name is a file name of the record
    store = store or _default_store(mgr)
    with ChangeLock(mgr.config.log_dirs):
        if pending(mgr.config.log_dirs):
            _resolve_locked(mgr, store)
        existing = existing_partitions(mgr, topic, vanished=True)
        wanted = existing if partitions is None else sorted(set(partitions))
        if not wanted:
            raise PartitionNotFoundError(f"topic {topic!r} does not exist in {mgr.online_dirs()}")
        unknown = [p for p in wanted if p not in existing]
        if unknown:
            raise PartitionNotFoundError(f"partition(s) {unknown} of topic {topic!r} do not exist in "
                                         f"{mgr.online_dirs()}")
        record = {"op": "delete", "topic": topic, "partitions": wanted,
                  "whole": partitions is None if whole is None else whole}
        return _change(mgr, record, store, on_record, "delete")


def _change(mgr: "LogManager", record: dict[str, Any], store: StoreConfigs,
            on_record: Callable[[str, dict[str, Any] | None], None] | None, name: str) -> list[dict]:
    topic = record["topic"]
    if on_record is not None:
        on_record(topic, record)      # hidden from readers before anything of it exists
    try:
        _write(mgr.config.log_dirs, record)
        crashpoints.reached(f"topic.{name}.intent")
        done = _roll_forward(mgr, record, store, resolving=False)
        crashpoints.reached(f"topic.{name}.done")
        _clear(mgr.config.log_dirs, topic)
        return done
    finally:
        # On an error the record stays (the next change or open completes it); readers go by the record then.
        if on_record is not None:
            on_record(topic, None)
