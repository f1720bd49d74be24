"""The broker's remote tier (KIP-405): when ``remote.log.storage.system.enable`` is on, the object store, the
remote view rebuilt from ``__remote_log_metadata`` and the reader of remote segments, built once at start.

Fetch and ListOffsets ask it about offsets below a partition's local log start. A read that the view cannot place
(an offset in no segment it knows) or whose object is gone is retried once after a refresh of the view (cheap when
``__remote_log_metadata`` did not grow: its log end offsets are compared): the ``log_tiering`` DAG, in another
process, may just have copied that segment, or deleted it by remote retention (then the offset is out of range, not
lost). ListOffsets refreshes before it answers. The view is read and refreshed under one lock, so a thread never
sees one half refreshed.
"""
from __future__ import annotations

import logging
import threading
import uuid
from typing import TYPE_CHECKING

from storage_engine.config import StorageConfig
from storage_engine.errors import OffsetOutOfRangeError, RemoteObjectMissingError
from storage_engine.log.manager import LogManager
from storage_engine.segment.checked_read import FetchData
from storage_engine.tiered.reads import RemoteReader

if TYPE_CHECKING:
    from storage_engine.tiered.remote_log import RemoteLogView, RemoteSegment

logger = logging.getLogger(__name__)


class LockedView:
    """A :class:`RemoteLogView` read and refreshed under one lock (the reader's ``SegmentSource``)."""

    def __init__(self, view: RemoteLogView, manager: LogManager):
        self._view = view
        self._manager = manager
        self._mutex = threading.Lock()

    def segments(self, topic: str, partition: int, *, topic_id: uuid.UUID | None = None) -> list[RemoteSegment]:
        with self._mutex:
            return list(self._view.segments(topic, partition, topic_id=topic_id))

    def highest_offset(self, topic: str, partition: int, *, topic_id: uuid.UUID | None = None) -> int:
        with self._mutex:
            return self._view.highest_offset(topic, partition, topic_id=topic_id)

    def refresh(self) -> None:
        with self._mutex:
            self._view.refresh(self._manager)


class RemoteTier:
    """The store, the view and the reader of one broker."""

    def __init__(self, view: LockedView, reader: RemoteReader):
        self.view = view
        self.reader = reader

    @classmethod
    def open(cls, config: StorageConfig, manager: LogManager) -> RemoteTier | None:
        """The remote tier of ``config``'s broker, or None when ``remote.log.storage.system.enable`` is off."""
        from storage_engine.tiered.settings import RemoteStorageSettings
        settings = RemoteStorageSettings.of(config)
        if not settings.enabled:
            return None
        from storage_engine.tiered.object_store import ObjectStore
        from storage_engine.tiered.remote_log import RemoteLogView
        view = LockedView(RemoteLogView.load(manager), manager)
        reader = RemoteReader(settings, ObjectStore(settings), view)
        logger.info("remote storage: bucket %s at %s, cache %s (%d bytes)", settings.bucket, settings.endpoint_url,
                    settings.cache_dir, settings.cache_bytes)
        return cls(view, reader)

    def refresh(self) -> None:
        """Read what ``__remote_log_metadata`` gained since the last look; a failure is logged and the last view
        kept (a read then answers from what it knew)."""
        try:
            self.view.refresh()
        except Exception as exc:   # noqa: BLE001 - a stale view must not fail the fetch that asked
            logger.warning("remote storage: cannot refresh the remote log view: %s", exc)

    def read(self, topic: str, partition: int, offset: int, max_bytes: int, min_one_message: bool,
             topic_id: uuid.UUID | None) -> FetchData | None:
        """The remote reader's fetch, retried once on a fresh view when the view did not know the offset or the
        object was gone (see the module docstring)."""
        try:
            return self.reader.read(topic, partition, offset, max_bytes, min_one_message=min_one_message,
                                    topic_id=topic_id)
        except (OffsetOutOfRangeError, RemoteObjectMissingError):
            self.refresh()
        return self.reader.read(topic, partition, offset, max_bytes, min_one_message=min_one_message,
                                topic_id=topic_id)

