"""Object keys of remote segments, named as Kafka's S3 storage plugins name them::

    {key prefix}{topic}-{topic id}/{partition}/{base offset, 20 digits}-{segment id}.{suffix}

Topic id and segment id are Kafka's ``Uuid`` text (22 characters of URL-safe base64). The suffixes are the parts of
Kafka's ``LogSegmentData``: ``log`` (the segment), ``index``, ``timeindex``, ``txnindex`` (only when the segment has
aborted transactions), ``snapshot`` (the producer snapshot at the segment's end offset + 1) and
``leader-epoch-checkpoint`` (the leader epoch entries up to the segment's end). Which parts a copy uploaded is
recorded in its metadata (:mod:`storage_engine.tiered.parts`), so an absent ``txnindex`` object is told from a
deleted one.

:func:`parse_key` reads a key back (None for a key that is not a segment part under the prefix), so the objects of
a partition can be listed and matched against the metadata to find orphans.
"""
from __future__ import annotations

import re
import uuid
from typing import NamedTuple

from storage_engine.layout import OFFSET_DIGITS
from storage_engine.log.topic_id import parse_uuid, uuid_text

__all__ = ["SUFFIXES", "REQUIRED_SUFFIXES", "KeyParts", "partition_prefix", "segment_keys", "parse_key"]

LOG, INDEX, TIME_INDEX, TXN_INDEX, SNAPSHOT, LEADER_EPOCHS = (
    "log", "index", "timeindex", "txnindex", "snapshot", "leader-epoch-checkpoint")
SUFFIXES = (LOG, INDEX, TIME_INDEX, TXN_INDEX, SNAPSHOT, LEADER_EPOCHS)
REQUIRED_SUFFIXES = (LOG, INDEX, TIME_INDEX, SNAPSHOT, LEADER_EPOCHS)    # txnindex only when there is one
_UUID_CHARS = 22
_PARTITION = re.compile(r"0|[1-9][0-9]{0,9}")
_UUID_TEXT = re.compile(f"[A-Za-z0-9_-]{{{_UUID_CHARS}}}")
_OFFSET = re.compile(f"[0-9]{{{OFFSET_DIGITS}}}")


class KeyParts(NamedTuple):
    topic: str
    topic_id: uuid.UUID
    partition: int
    base_offset: int
    segment_id: uuid.UUID
    suffix: str


def partition_prefix(prefix: str, topic: str, topic_id: uuid.UUID, partition: int) -> str:
    """The common start of every object key of one partition (ends with ``/``)."""
    return f"{prefix}{topic}-{uuid_text(topic_id)}/{partition}/"


def segment_keys(prefix: str, topic: str, topic_id: uuid.UUID, partition: int, base_offset: int,
                 segment_id: uuid.UUID) -> dict[str, str]:
    """{suffix: object key} of every part of one remote segment (all of :data:`SUFFIXES`; a segment without a
    transaction index simply has no ``txnindex`` object)."""
    if base_offset < 0:
        raise ValueError(f"base offset {base_offset} is negative")
    stem = f"{partition_prefix(prefix, topic, topic_id, partition)}{base_offset:0{OFFSET_DIGITS}d}-{uuid_text(segment_id)}"
    return {suffix: f"{stem}.{suffix}" for suffix in SUFFIXES}


def parse_key(key: str, prefix: str = "") -> KeyParts | None:
    """The parts of a segment object key under ``prefix``, or None when ``key`` is not one."""
    if not key.startswith(prefix):
        return None
    pieces = key[len(prefix):].split("/")
    if len(pieces) != 3:
        return None
    folder, partition_text, name = pieces
    # <topic>-<22 id characters>: topic names may hold '-', the id is the last 22 characters.
    if len(folder) < _UUID_CHARS + 2 or folder[-_UUID_CHARS - 1] != "-":
        return None
    topic, topic_id = folder[:-_UUID_CHARS - 1], _uuid(folder[-_UUID_CHARS:])
    stem = OFFSET_DIGITS + 1 + _UUID_CHARS
    if (topic_id is None or not _PARTITION.fullmatch(partition_text) or len(name) <= stem + 1
            or name[OFFSET_DIGITS] != "-" or name[stem] != "." or not _OFFSET.fullmatch(name[:OFFSET_DIGITS])):
        return None
    segment_id, suffix = _uuid(name[OFFSET_DIGITS + 1:stem]), name[stem + 1:]
    if segment_id is None or suffix not in SUFFIXES:
        return None
    return KeyParts(topic, topic_id, int(partition_text), int(name[:OFFSET_DIGITS]), segment_id, suffix)


def _uuid(text: str) -> uuid.UUID | None:
    if not _UUID_TEXT.fullmatch(text):
        return None
    try:
        value = parse_uuid(text)
    except ValueError:
        return None
    return value if uuid_text(value) == text else None
