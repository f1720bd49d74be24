"""Searching a topic (or every topic) for records: by key, value text, JSON fields and headers; read-only.

A search by key goes first to the partition Kafka's default partitioner picks for that key
(:func:`storage_engine.record.partitioner.default_partition`: murmur2 of the key modulo the topic's partition
count), where a producer using Kafka's default partitioner put every record of it. If that partition holds none
(a producer with another partitioner, an explicit partition, a partition count changed since), the search falls
back to every other partition of the topic. A search without a key reads every partition. :func:`plan` lists
the partitions in that order (``preferred`` marks the default partition of the key), :func:`scan_partition`
reads one of them in bounded steps (``max_scan_bytes`` of batches, then ``next_offset`` says where to go on), so
a caller can show progress partition by partition; :func:`search` runs a whole search with both.

Filters (:func:`parse_filters`), all of which a record must pass:

* ``text``: the value contains this text (case-insensitive; the value read as UTF-8, undecodable bytes replaced);
* ``fields``: ``path=value`` where ``path`` is a dotted path into the value parsed as JSON (``user.email``; a
  number indexes a list: ``items.0.sku``) and ``value`` is compared with the field as text (a string as is, any
  other JSON value as JSON: ``true``, ``42``, ``null``); ``path`` alone requires the field to be present;
* ``headers``: ``name=value`` (a header ``name`` whose value is that UTF-8 text) or ``name`` alone (present).

Every record goes through ``view`` first (the console's masking: a masked value is what the filters see, so a
search cannot reveal what a reader may not read) and the records returned are the viewed ones. Transaction
markers never match. Reads are those of :mod:`storage_engine.inspection.browse`: every batch CRC-checked, damage
ends that partition's scan with its ``error``, nothing is written.
"""
from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TypedDict

from storage_engine import layout
from storage_engine.config import StorageConfig
from storage_engine.errors import InvalidRequestError
from storage_engine.inspection import browse
from storage_engine.inspection.browse import BrowsedRecord
from storage_engine.record.partitioner import default_partition

__all__ = ["Filters", "parse_filters", "matches", "Target", "plan", "scan_partition", "search", "SearchStep",
           "DEFAULT_STEP_BYTES", "partition_count"]

DEFAULT_STEP_BYTES = 8 * 1024 * 1024      # of batches read per scan step: a step answers in well under a second
MAX_FILTERS = 20
View = Callable[[str, BrowsedRecord], BrowsedRecord]     # (topic, record) -> the record as the reader sees it


@dataclass(frozen=True)
class Filters:
    text: str | None = None
    fields: tuple[tuple[tuple[str, ...], str | None], ...] = ()      # (path, expected text or None: present)
    headers: tuple[tuple[str, str | None], ...] = ()                  # (name, expected text or None: present)

    @property
    def empty(self) -> bool:
        return not self.text and not self.fields and not self.headers


def parse_filters(text: str | None = None, fields: Sequence[str] = (), headers: Sequence[str] = ()) -> Filters:
    """The filters of a search from what a person typed; :class:`InvalidRequestError` names a malformed one."""
    if len(fields) + len(headers) > MAX_FILTERS:
        raise InvalidRequestError(f"at most {MAX_FILTERS} field and header filters, got {len(fields) + len(headers)}")
    parsed_fields = []
    for raw in fields:
        if not raw.strip():
            continue
        path, eq, expected = raw.partition("=")
        parts = tuple(p.strip() for p in path.strip().split("."))
        if not path.strip() or any(not p for p in parts):
            raise InvalidRequestError(f"field filter {raw!r}: the path must be names joined by dots, like "
                                      "user.email=alice@example.com")
        parsed_fields.append((parts, expected if eq else None))
    parsed_headers = []
    for raw in headers:
        if not raw.strip():
            continue
        name, eq, expected = raw.partition("=")
        if not name.strip():
            raise InvalidRequestError(f"header filter {raw!r}: give a header name, like trace-id=abc or trace-id")
        parsed_headers.append((name.strip(), expected if eq else None))
    return Filters(text or None, tuple(parsed_fields), tuple(parsed_headers))


_MISSING = object()


def _field(document: object, path: tuple[str, ...]) -> object:
    for part in path:
        if isinstance(document, dict):
            document = document.get(part, _MISSING)
        elif isinstance(document, list) and part.isdigit() and int(part) < len(document):
            document = document[int(part)]
        else:
            return _MISSING
        if document is _MISSING:
            return _MISSING
    return document


def _as_text(value: object) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def matches(filters: Filters, record: BrowsedRecord) -> bool:
    """Whether ``record`` passes every filter (a transaction marker never does)."""
    if record["control"] is not None:
        return False
    value = record["value"]
    if filters.text:
        if value is None or filters.text.casefold() not in value.decode("utf-8", "replace").casefold():
            return False
    if filters.fields:
        try:
            document = json.loads(value) if value is not None else _MISSING
        except ValueError:
            return False
        if document is _MISSING:
            return False
        for path, expected in filters.fields:
            found = _field(document, path)
            if found is _MISSING or (expected is not None and _as_text(found) != expected):
                return False
    for name, expected in filters.headers:
        values = [v for k, v in record["headers"] if k == name]
        if not values:
            return False
        if expected is not None and not any(v is not None and v.decode("utf-8", "replace") == expected
                                            for v in values):
            return False
    return True


class Target(TypedDict):
    topic: str
    partition: int
    preferred: bool          # the partition the default partitioner picks for the key


def partition_count(config: StorageConfig, topic: str) -> int:
    """The topic's partition count as producers see it: the highest partition number present + 1 (0: none)."""
    highest = -1
    for d in config.log_dirs:
        try:
            dirs = layout.partition_dirs(d)
        except OSError:
            continue             # an offline dir: its partitions cannot be read anyway
        for _name, (t, p) in dirs:
            if t == topic:
                highest = max(highest, p)
    return highest + 1


def _partitions(config: StorageConfig, topic: str) -> list[int]:
    found: set[int] = set()
    for d in config.log_dirs:
        try:
            dirs = layout.partition_dirs(d)
        except OSError:
            continue
        found.update(p for name, (t, p) in dirs if t == topic and os.path.isdir(os.path.join(d, name)))
    return sorted(found)


def plan(config: StorageConfig, topics: Sequence[str], key: bytes | None) -> list[Target]:
    """The partitions a search reads, in order: with a key, first the default partition of each topic
    (``preferred``), then the others (read only when the preferred ones hold no match); without, all."""
    preferred: list[Target] = []
    rest: list[Target] = []
    for topic in topics:
        layout.validate_topic(topic)
        partitions = _partitions(config, topic)
        chosen = default_partition(key, partition_count(config, topic)) if key is not None and partitions else None
        for p in partitions:
            (preferred if p == chosen else rest).append({"topic": topic, "partition": p, "preferred": p == chosen})
    return preferred + rest


def _matcher(topic: str, key: bytes | None, filters: Filters,
             view: View | None) -> Callable[[BrowsedRecord], BrowsedRecord | None]:
    def match(record: BrowsedRecord) -> BrowsedRecord | None:
        if key is not None and record["key"] != key:
            return None
        shown = view(topic, record) if view is not None else record
        return shown if matches(filters, shown) else None
    return match


def scan_partition(config: StorageConfig, topic: str, partition: int, *, key: bytes | None, filters: Filters,
                   offset: int | None = None, limit: int = browse.DEFAULT_LIMIT,
                   max_scan_bytes: int = DEFAULT_STEP_BYTES, isolation: str = browse.READ_UNCOMMITTED,
                   view: View | None = None) -> browse.BrowsePage:
    """One step of a search in one partition: from ``offset`` (default the log start), at most ``limit`` matches
    and about ``max_scan_bytes`` of batches read; ``next_offset`` is where the next step starts (None: done)."""
    return browse.browse(config, topic, partition, offset=offset, key=key, limit=limit, isolation=isolation,
                         max_scan_bytes=max_scan_bytes, match=_matcher(topic, key, filters, view))


class SearchStep(TypedDict):
    topic: str
    partition: int
    preferred: bool
    records: list[BrowsedRecord]
    next_offset: int | None
    partition_done: bool
    partitions_done: int
    partitions_total: int
    bytes_scanned: int
    error: dict | None


def search(config: StorageConfig, topics: Sequence[str], *, key: bytes | None, filters: Filters,
           limit: int, every_partition: bool = False, isolation: str = browse.READ_UNCOMMITTED,
           view: View | None = None, step_bytes: int = DEFAULT_STEP_BYTES) -> Iterator[SearchStep]:
    """A whole search as steps (see the module docstring): at most ``limit`` records in all. With a key, the
    partitions after the preferred ones are read only if those hold no match, or with ``every_partition``."""
    if limit < 1:
        raise InvalidRequestError(f"limit must be >= 1, got {limit}")
    if key is None and filters.empty:
        raise InvalidRequestError("a search needs a key or a filter (value text, a JSON field or a header)")
    targets = plan(config, topics, key)
    found = 0
    for i, target in enumerate(targets):
        if (key is not None and not target["preferred"] and (i == 0 or targets[i - 1]["preferred"]) and found
                and not every_partition):
            break                   # the default partitions held the key: the others are not read
        offset: int | None = None
        while True:
            page = scan_partition(config, target["topic"], target["partition"], key=key, filters=filters,
                                  offset=offset, limit=min(browse.MAX_LIMIT, limit - found),
                                  max_scan_bytes=step_bytes, isolation=isolation, view=view)
            found += len(page["records"])
            done = page["next_offset"] is None or found >= limit
            yield {"topic": target["topic"], "partition": target["partition"], "preferred": target["preferred"],
                   "records": page["records"], "next_offset": page["next_offset"], "partition_done": done,
                   "partitions_done": i + (1 if done else 0), "partitions_total": len(targets),
                   "bytes_scanned": page["bytes_scanned"], "error": page["error"]}
            if done:
                break
            offset = page["next_offset"]
        if found >= limit:
            return
