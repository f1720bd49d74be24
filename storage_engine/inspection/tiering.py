"""Tiered storage as an operator sees it: per partition and per topic the bytes, segments and offsets kept locally
and in the object store, how far tiering lags behind, and the object store's health. The Storage view's
``/tiered`` page.

Per partition (every partition of a topic with ``remote.storage.enable``, and any other partition the remote log
metadata still names, such as a topic whose tiering was switched off):

* **offsets** as Kafka names them: the log start offset (the whole log's, remote part included), the local log
  start offset (the first offset still on local disk), the highest tiered offset (the last offset of a segment
  whose remote copy has finished, what ``ListOffsets`` ``LATEST_TIERED`` answers; -1 when none) and the log end
  offset;
* **local** bytes and segments (the ``.log`` files), **remote** bytes and segments (the segments whose copy
  finished, by the sizes the metadata records);
* **lag**: the sealed local segments above the highest tiered offset, not copied yet (bytes and count); the active
  segment is never copied, so it is not lag; ``copying``: copies started and not finished (in progress, or left by
  an interrupted run for the next run to clean up).

The remote figures come from the ``__remote_log_metadata`` topic (:class:`storage_engine.tiered.remote_log.
RemoteLogView`) read from the files like every inspection (no lock, nothing written); the object store's health is
:meth:`ObjectStore.health` (reachable, bucket present, credentials accepted, latency), asked only when tiered
storage is enabled. The local figures are the folder listing's (:mod:`.listing`) and the segment files'.
"""
from __future__ import annotations

from collections.abc import Collection
import os
import uuid
from typing import Any, Protocol, TypedDict

from storage_engine import layout
from storage_engine.config import StorageConfig
from storage_engine.errors import StorageError
from storage_engine.inspection.listing import matching_partitions
from storage_engine.inspection.snapshot import LogSnapshot, read_checkpoints
from storage_engine.log.topic_id import read_topic_id

METADATA_TOPIC = "__remote_log_metadata"    # storage_engine.tiered.remote_log.TOPIC


class RemotePartition(TypedDict, total=False):
    topic: str
    partition: int
    log_dir: str | None             # None: no local folder (every local segment gone with the topic)
    tiered: bool                    # remote.storage.enable of its topic
    log_start_offset: int | None
    local_log_start_offset: int | None
    highest_tiered_offset: int      # -1: nothing tiered yet
    log_end_offset: int | None
    local_bytes: int
    local_segments: int
    remote_bytes: int
    remote_segments: int
    remote_log_start_offset: int | None
    lag_bytes: int                  # sealed local segments above the highest tiered offset
    lag_segments: int
    copying: int                    # COPY_SEGMENT_STARTED without FINISHED
    error: str | None


class RemoteTopic(TypedDict):
    topic: str
    tiered: bool
    partitions: int
    local_bytes: int
    local_segments: int
    remote_bytes: int
    remote_segments: int
    lag_bytes: int
    lag_segments: int
    copying: int


class TieringStatus(TypedDict):
    enabled: bool                   # remote.log.storage.system.enable
    store: dict[str, Any]           # endpoint, bucket, key prefix, health (no secret)
    metadata_error: str | None      # the remote log metadata could not be read: remote figures unknown
    topics: list[RemoteTopic]
    partitions: list[RemotePartition]


class RemoteView(Protocol):
    """What this module reads of :class:`storage_engine.tiered.remote_log.RemoteLogView`."""

    def segments(self, topic: str, partition: int, *, topic_id: uuid.UUID | None = None) -> list[Any]: ...

    def copy_started_unfinished(self, topic: str, partition: int, *,
                                topic_id: uuid.UUID | None = None) -> list[Any]: ...

    def partitions(self) -> list[tuple[str, uuid.UUID, int]]: ...


def local_figures(config: StorageConfig, log_dir: str, topic: str, partition: int, checkpoints: dict,
                  highest_tiered: int) -> RemotePartition:
    """One partition's local side from its files (read-only, :class:`LogSnapshot`): offsets, bytes and segments,
    and the sealed segments above ``highest_tiered`` (the lag)."""
    with LogSnapshot(config, log_dir, topic, partition, checkpoints=checkpoints) as snap:
        segments = [(s.base_offset, s.size) for s in snap.segments]
        row: RemotePartition = {"log_dir": log_dir, "log_start_offset": snap.log_start_offset,
                                "local_log_start_offset": snap.local_log_start_offset,
                                "log_end_offset": snap.log_end_offset,
                                "local_bytes": sum(size for _, size in segments), "local_segments": len(segments)}
    lag_bytes = lag_segments = 0
    # The sealed segments (all but the active one) whose last offset (the next base - 1) is above the highest
    # tiered offset: what the next tiering run has to copy.
    for (_base, size), (next_base, _) in zip(segments, segments[1:]):
        if next_base - 1 > highest_tiered:
            lag_bytes += size
            lag_segments += 1
    row["lag_bytes"], row["lag_segments"] = lag_bytes, lag_segments
    return row


def tiering_status(config: StorageConfig, *, topics: Collection[str] | None = None,
                   view: RemoteView | None = None, health: dict[str, Any] | None = None,
                   check_store: bool = True) -> TieringStatus:
    """Tiered storage's figures (see the module docstring). ``view``: a loaded remote log view (default: read
    from the files); ``health``: the object store's health if the caller asked already; ``check_store=False``
    skips asking the store."""
    from storage_engine.tiered.settings import RemoteStorageSettings

    settings: RemoteStorageSettings | None = None
    store_error: str | None = None
    try:
        settings = RemoteStorageSettings.of(config)
    except StorageError as exc:
        store_error = str(exc)
    enabled = bool(settings and settings.enabled)
    store: dict[str, Any] = {"endpoint_url": settings.endpoint_url if settings else None,
                             "bucket": settings.bucket if settings else None,
                             "key_prefix": settings.key_prefix if settings else None, "health": health,
                             "error": store_error}
    if enabled and settings is not None and health is None and check_store:
        store["health"] = store_health(settings)
    metadata_error: str | None = None
    if view is None:
        try:
            view = load_view(config)
        except (StorageError, OSError) as exc:
            metadata_error = f"{type(exc).__name__}: {exc}"
    wanted = set(topics) if topics else None
    tiered_topics = {t for t in _topics(config) if config.log_config(t).remote_storage_enable}
    remote_partitions = {(t, p) for t, _id, p in view.partitions()} if view is not None else set()
    keys: dict[tuple[str, int], str | None] = {}
    for log_dir, _name, topic, partition in matching_partitions(config, wanted):
        if topic in tiered_topics or (topic, partition) in remote_partitions:
            keys[(topic, partition)] = log_dir
    for tp in remote_partitions:
        if (wanted is None or tp[0] in wanted) and tp[0] != METADATA_TOPIC:
            keys.setdefault(tp, None)
    per_dir: dict[str, dict] = {}
    rows: list[RemotePartition] = []
    for (topic, partition), where in sorted(keys.items()):
        rows.append(_partition_row(config, topic, partition, where, view, per_dir, topic in tiered_topics))
    return {"enabled": enabled, "store": store, "metadata_error": metadata_error,
            "topics": _topic_rows(rows), "partitions": rows}


def _partition_row(config: StorageConfig, topic: str, partition: int, log_dir: str | None, view: RemoteView | None,
                   per_dir: dict[str, dict], tiered: bool) -> RemotePartition:
    # The segments of this incarnation of the topic: the local folder's topic id (a topic deleted and created
    # again has a new one, and the old one's remote segments are not its own); without a folder, the latest id.
    topic_id = _topic_id(log_dir, topic, partition) if log_dir else None
    remote = view.segments(topic, partition, topic_id=topic_id) if view is not None else []
    highest = max((s.end_offset for s in remote), default=-1)
    row: RemotePartition = {"topic": topic, "partition": partition, "tiered": tiered,
                            "highest_tiered_offset": highest, "remote_bytes": sum(s.size_bytes for s in remote),
                            "remote_segments": len(remote),
                            "remote_log_start_offset": remote[0].start_offset if remote else None,
                            "copying": (len(view.copy_started_unfinished(topic, partition, topic_id=topic_id))
                                        if view is not None else 0),
                            "log_dir": log_dir, "local_bytes": 0, "local_segments": 0, "lag_bytes": 0,
                            "lag_segments": 0, "log_start_offset": None, "local_log_start_offset": None,
                            "log_end_offset": None, "error": None}
    if log_dir is None:
        return row
    if log_dir not in per_dir:
        per_dir[log_dir] = read_checkpoints(log_dir)
    try:
        row.update(local_figures(config, log_dir, topic, partition, per_dir[log_dir], highest))
    except (StorageError, OSError) as exc:
        row["error"] = f"{type(exc).__name__}: {exc}"
    return row


def _topic_id(log_dir: str, topic: str, partition: int) -> uuid.UUID | None:
    try:
        return read_topic_id(os.path.join(log_dir, layout.partition_dir_name(topic, partition)))
    except (StorageError, OSError, ValueError):
        return None             # no partition.metadata (or an unreadable one): the latest id the view knows


def _topic_rows(rows: list[RemotePartition]) -> list[RemoteTopic]:
    out: dict[str, RemoteTopic] = {}
    for r in rows:
        t = out.setdefault(r["topic"], {"topic": r["topic"], "tiered": bool(r.get("tiered")), "partitions": 0,
                                        "local_bytes": 0, "local_segments": 0, "remote_bytes": 0,
                                        "remote_segments": 0, "lag_bytes": 0, "lag_segments": 0, "copying": 0})
        t["partitions"] += 1
        t["local_bytes"] += r.get("local_bytes", 0)
        t["local_segments"] += r.get("local_segments", 0)
        t["remote_bytes"] += r.get("remote_bytes", 0)
        t["remote_segments"] += r.get("remote_segments", 0)
        t["lag_bytes"] += r.get("lag_bytes", 0)
        t["lag_segments"] += r.get("lag_segments", 0)
        t["copying"] += r.get("copying", 0)
    return [out[t] for t in sorted(out)]


def _topics(config: StorageConfig) -> set[str]:
    names = set(config.topic_overrides)
    for d in config.log_dirs:
        try:
            names |= {topic for _name, (topic, _p) in layout.partition_dirs(d)}
        except OSError:
            continue
    return names


def store_health(settings: Any) -> dict[str, Any]:
    """:meth:`ObjectStore.health` of the configured store (never raises)."""
    from storage_engine.tiered.object_store import ObjectStore

    try:
        store = ObjectStore(settings)
    except Exception as exc:  # noqa: BLE001 - a store that cannot even be built is reported, not raised
        return {"reachable": False, "error": f"{type(exc).__name__}: {exc}"}
    try:
        return dict(store.health())
    finally:
        store.close()


def load_view(config: StorageConfig) -> RemoteView:
    """The remote log view rebuilt from ``__remote_log_metadata`` as its files are: a read-only open of that
    topic's partitions (no lock taken, no byte written; an empty view when the topic does not exist yet)."""
    from storage_engine.log.manager import LogManager
    from storage_engine.tiered.remote_log import TOPIC, RemoteLogView

    partitions = []
    for d in config.log_dirs:
        try:
            partitions += [(TOPIC, p) for _name, (t, p) in layout.partition_dirs(d) if t == TOPIC]
        except OSError:
            continue            # an offline dir: the log dirs page says why
    if not partitions:
        return RemoteLogView()
    with LogManager.open(config, partitions=partitions, read_only=True) as mgr:
        return RemoteLogView.load(mgr)
