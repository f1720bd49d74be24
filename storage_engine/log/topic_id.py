"""Topic ids as Kafka keeps them: a :class:`uuid.UUID` per topic, in every partition folder's ``partition.metadata``.

The file is byte for byte what Kafka's ``PartitionMetadataFile`` writes (``PartitionMetadata.encode``):
``version: 0\ntopic_id: <id>`` in UTF-8, with no newline after the id. It is read as Kafka's
``PartitionMetadataReadBuffer`` reads it: the first line is ``version: <n>`` with ``n >= 0``, the second
``topic_id: <id>`` with an id that is not the zero id, each split on whitespace into exactly two fields; a line end
after the id (files written by earlier versions of this engine) is accepted, as Kafka's line reader accepts it.

Ids are Kafka's ``Uuid``: 16 random bytes shown as URL-safe base64 without padding (22 characters), never the
reserved zero or one ids, never starting with ``-``.

A topic has one id: :func:`ensure_topic_id` gives a partition folder that has none (made by the CLI or a maintenance
job, which write no ``partition.metadata``) the id another partition folder of its topic already has, or a new one,
under the store's creation lock, and never replaces an id a folder has: remote segments are named and recorded by
topic id, so an id that changed would orphan them.
"""
from __future__ import annotations

import base64
import os
import secrets
import uuid
from collections.abc import Sequence

from storage_engine import layout
from storage_engine.durable import atomic_write, fsync_dir, read_regular_file
from storage_engine.errors import StorageError
from storage_engine.log.locks import FileLock

__all__ = ["random_uuid", "uuid_text", "parse_uuid", "read_topic_id", "parse_partition_metadata",
           "partition_metadata_bytes", "write_topic_id", "ensure_topic_id"]

_MAX_BYTES = 64 * 1024


def random_uuid() -> uuid.UUID:
    while True:
        value = uuid.UUID(bytes=secrets.token_bytes(16))
        if value.int > 1 and not uuid_text(value).startswith("-"):
            return value


def uuid_text(value: uuid.UUID) -> str:
    return base64.urlsafe_b64encode(value.bytes).decode("ascii").rstrip("=")


def parse_uuid(text: str) -> uuid.UUID:
    raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    if len(raw) != 16:
        raise ValueError(f"{text!r} is not a 16-byte id")
    return uuid.UUID(bytes=raw)


def read_topic_id(partition_dir: str) -> uuid.UUID | None:
    """The topic id in ``<partition_dir>/partition.metadata``, or None if there is none or it does not read as
    Kafka reads it (see the module docstring)."""
    try:
        props = read_regular_file(os.path.join(partition_dir, layout.PARTITION_METADATA), _MAX_BYTES)
    except (OSError, StorageError):
        return None
    return parse_partition_metadata(props)


def parse_partition_metadata(data: bytes) -> uuid.UUID | None:
    """The topic id of a ``partition.metadata`` file's bytes, None when Kafka's reader would refuse them."""
    lines = data.decode("utf-8", "replace").splitlines()
    if len(lines) < 2:
        return None
    version, topic = lines[0].split(), lines[1].split()
    if len(version) != 2 or len(topic) != 2:
        return None
    try:
        if int(version[1]) < 0:
            return None
        found = parse_uuid(topic[1])
    except ValueError:
        return None
    return None if found.int == 0 else found


def partition_metadata_bytes(topic_id: uuid.UUID) -> bytes:
    """Kafka's ``PartitionMetadata(0, id).encode()`` in UTF-8: no line end after the id."""
    return f"version: 0\ntopic_id: {uuid_text(topic_id)}".encode("utf-8")


def write_topic_id(partition_dir: str, topic_id: uuid.UUID) -> None:
    atomic_write(os.path.join(partition_dir, layout.PARTITION_METADATA), partition_metadata_bytes(topic_id))


def _write_if_absent(partition_dir: str, topic_id: uuid.UUID) -> None:
    """Write ``partition.metadata`` only if there is none: the text goes to a temp file (fsynced) that is then
    hard-linked to the name, which fails if the name exists; a crash leaves the old state or the whole file."""
    target = os.path.join(partition_dir, layout.PARTITION_METADATA)
    tmp = f"{target}.{secrets.token_hex(6)}{layout.TMP_SUFFIX}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        os.write(fd, partition_metadata_bytes(topic_id))
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.link(tmp, target)
    except FileExistsError:
        pass
    finally:
        os.unlink(tmp)
    fsync_dir(partition_dir)


def ensure_topic_id(partition_dir: str, log_dirs: Sequence[str] = ()) -> uuid.UUID:
    """The topic id of the partition folder ``partition_dir``, written into its ``partition.metadata`` if it has
    none: the id of another folder of the same topic in ``log_dirs`` (every log dir of the store), else a new one.

    With ``log_dirs``, the choice is made under the store's creation lock (first log dir), so two processes giving
    ids to two partitions of one topic at once agree. An unreadable or damaged ``partition.metadata`` is kept, not
    replaced (raises :class:`StorageError`: an id that changed would orphan the topic's remote segments)."""
    known = read_topic_id(partition_dir)
    if known is not None:
        return known
    if os.path.lexists(os.path.join(partition_dir, layout.PARTITION_METADATA)):
        raise StorageError(f"{os.path.join(partition_dir, layout.PARTITION_METADATA)} exists but holds no readable "
                           "topic id; fix or remove it (it is not replaced: the topic's remote segments are named "
                           "by its id)")
    if not log_dirs:
        _write_if_absent(partition_dir, random_uuid())
    else:
        topic, _ = layout.parse_partition_dir(os.path.basename(os.path.normpath(partition_dir)))
        with FileLock(os.path.join(log_dirs[0], layout.CREATE_LOCK_FILE)):
            found = None
            for log_dir in log_dirs:
                for name, (other, _) in layout.partition_dirs(log_dir):
                    if other == topic and found is None:
                        found = read_topic_id(os.path.join(log_dir, name))
            _write_if_absent(partition_dir, found or random_uuid())
    written = read_topic_id(partition_dir)
    if written is None:
        raise StorageError(f"cannot give {partition_dir} a topic id: {layout.PARTITION_METADATA} is unreadable")
    return written
