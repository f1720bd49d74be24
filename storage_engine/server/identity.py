"""Who this broker is, kept as KRaft keeps it: ``meta.properties`` in every log dir (``version=1``, ``node.id``,
``cluster.id``, ``directory.id``), a topic id per topic in each partition folder's ``partition.metadata`` (kept by
:mod:`storage_engine.log.topic_id`, whose functions are re-exported here), and producer ids handed out in blocks
whose next start is kept in the first log dir, so no id is handed out twice across restarts.
"""
from __future__ import annotations

import logging
import os
import threading
import time
import uuid

from storage_engine import layout
from storage_engine.durable import atomic_write, read_regular_file
from storage_engine.errors import ConfigError, StorageError
from storage_engine.log.topic_id import (parse_uuid, random_uuid, read_topic_id, uuid_text,
                                         write_topic_id)

__all__ = ["PRODUCER_ID_BLOCK", "ProducerIds", "load_meta_properties", "parse_uuid", "random_uuid", "read_topic_id",
           "uuid_text", "write_topic_id"]

PRODUCER_ID_BLOCK = 1000
_MAX_BYTES = 64 * 1024


def _properties(path: str) -> dict[str, str] | None:
    try:
        text = read_regular_file(path, _MAX_BYTES).decode("utf-8")
    except FileNotFoundError:
        return None
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, value = line.split("=", 1)
            out[key.strip()] = value.strip()
    return out


def load_meta_properties(log_dirs: list[str], node_id: int) -> str:
    """The cluster id of the store: read from the log dirs' ``meta.properties`` (they must agree with each other
    and with ``node.id``), written into every dir that has none (a new cluster id when no dir has one)."""
    found: dict[str, dict[str, str]] = {}
    for d in log_dirs:
        props = _properties(os.path.join(d, layout.META_PROPERTIES))
        if props is not None:
            found[d] = props
    clusters = {p.get("cluster.id") for p in found.values()} - {None}
    if len(clusters) > 1:
        raise ConfigError("log dirs belong to different clusters: "
                          + ", ".join(f"{d}: cluster.id={p.get('cluster.id')}" for d, p in found.items()))
    for d, p in found.items():
        stored = p.get("node.id", p.get("broker.id"))
        if stored is not None and stored != str(node_id):
            raise ConfigError(f"{os.path.join(d, layout.META_PROPERTIES)} has node.id={stored}, "
                              f"but node.id is {node_id} in the config")
    cluster_id = str(clusters.pop()) if clusters else uuid_text(random_uuid())
    for d in log_dirs:
        if d in found:
            continue
        stamp = time.strftime("%a %b %d %H:%M:%S UTC %Y", time.gmtime())
        text = (f"#\n#{stamp}\nnode.id={node_id}\ndirectory.id={uuid_text(random_uuid())}\nversion=1\n"
                f"cluster.id={cluster_id}\n")
        atomic_write(os.path.join(d, layout.META_PROPERTIES), text.encode("utf-8"))
    return cluster_id


def directory_id(log_dir: str) -> uuid.UUID | None:
    """The ``directory.id`` of ``log_dir``'s ``meta.properties``; None when the file or the key is missing."""
    props = _properties(os.path.join(log_dir, layout.META_PROPERTIES))
    text = (props or {}).get("directory.id")
    return parse_uuid(text) if text else None


class ProducerIds:
    """Producer ids from blocks reserved in ``.engine+producer-ids`` (Kafka's controller hands brokers blocks of
    1000 likewise): the next block's start is written into every log dir that can take it before any id of the
    block is used, and read as the largest among the dirs that can be read, so an offline dir loses nothing."""

    def __init__(self, log_dirs: str | list[str]):
        dirs = [log_dirs] if isinstance(log_dirs, str) else list(log_dirs)
        self.paths = [os.path.join(d, layout.PRODUCER_IDS_FILE) for d in dirs]
        self.mutex = threading.Lock()
        self.next_id = 0
        self.block_end = 0

    def _stored(self) -> int:
        start, errors = 0, []
        for path in self.paths:
            try:
                start = max(start, int(read_regular_file(path, 64).decode("ascii").strip() or 0))
            except (FileNotFoundError, NotADirectoryError):
                continue
            except ValueError as exc:
                raise StorageError(f"the producer id block {path} is damaged: {exc}") from None
            except (OSError, StorageError) as exc:
                errors.append(f"{path}: {exc}")
        if errors and len(errors) == len(self.paths):
            raise StorageError("cannot read the producer id block in any log dir: " + "; ".join(errors))
        return start

    def allocate(self) -> int:
        with self.mutex:
            if self.next_id >= self.block_end:
                start = max(self._stored(), self.block_end)
                written = 0
                for path in self.paths:
                    try:
                        atomic_write(path, f"{start + PRODUCER_ID_BLOCK}\n".encode("ascii"))
                        written += 1
                    except (OSError, StorageError) as exc:
                        logging.getLogger(__name__).warning("cannot reserve producer ids in %s: %s", path, exc)
                if not written:
                    raise StorageError("cannot reserve a block of producer ids in any log dir")
                self.next_id, self.block_end = start, start + PRODUCER_ID_BLOCK
            pid = self.next_id
            self.next_id += 1
            return pid
