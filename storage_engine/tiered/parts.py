"""The parts manifest of a remote segment: which objects its copy uploaded, each with its size and the start of its
ETag, kept in the ``customMetadata`` bytes of the segment's ``COPY_SEGMENT_FINISHED`` record (the field Kafka's
``RemoteLogSegmentMetadata`` has for what the storage plugin wants to remember about a copy).

Why: an object missing from the bucket must read as loss, never as an answer. Every part but the ``.txnindex`` is
uploaded for every segment, so a missing one is loss anyway; the ``.txnindex`` is uploaded only when the segment has
one, and without a record of that, a deleted ``.txnindex`` object would read as "no aborted transactions" and hand
aborted records to ``read_committed`` consumers as committed. With the manifest, a part it lists is required (a
missing object is :class:`~storage_engine.errors.RemoteObjectMissingError`), and a ``.txnindex`` it does not list is
known to be absent (the reader asks the store nothing for it).

Segments copied before the manifest existed have no custom metadata (or bytes another plugin wrote: anything not
starting with :data:`MAGIC`): :func:`of_segment` answers None for them and readers keep the old rule for those
only (a missing ``.txnindex`` object means none); ``verify`` counts them as segments whose ``.txnindex`` cannot be
checked.

Bytes (version 1, at most 106, so within Kafka's default ``remote.log.metadata.custom.metadata.max.bytes`` of 128):
``MAGIC`` (2 bytes), the version (1 byte), the part count (1 byte), then per part: a byte holding the part's index
in :data:`~storage_engine.tiered.keys.SUFFIXES` (bit 7 set when an ETag follows), its size as an unsigned varint,
and, when set, the first 8 bytes of the ETag's MD5 and the ETag's part count as an unsigned varint (0: a single
PUT's ``<md5>``; n: a multipart upload's ``<md5 of the parts' md5s>-<n>``). Eight bytes of the digest tell a
replaced object from the uploaded one with odds of 2^-64 per check; the ETag itself is checked in full when the
copy is made.
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from storage_engine.errors import StorageError
from storage_engine.tiered.keys import REQUIRED_SUFFIXES, SUFFIXES

__all__ = ["MAGIC", "MAX_BYTES", "Part", "PartsManifest", "ManifestError", "of_segment", "from_uploads"]

MAGIC = b"SE"
VERSION = 1
MAX_BYTES = 128             # Kafka's default remote.log.metadata.custom.metadata.max.bytes
_DIGEST_BYTES = 8
_HAS_ETAG = 0x80
_ETAG = re.compile(r"([0-9a-fA-F]{32})(?:-([1-9][0-9]{0,4}))?")


class ManifestError(StorageError):
    """Custom metadata that starts as a parts manifest but is not a valid one (the metadata record is damaged)."""


@dataclass(frozen=True)
class Part:
    size: int
    digest: bytes | None = None     # the first 8 bytes of the ETag's MD5 (None: the store's ETag is no MD5)
    etag_parts: int = 0             # 0: single PUT; n: multipart upload of n parts

    @classmethod
    def of(cls, size: int, etag: str) -> "Part":
        m = _ETAG.fullmatch(etag.strip('"'))
        if m is None:
            return cls(size)
        return cls(size, bytes.fromhex(m.group(1))[:_DIGEST_BYTES], int(m.group(2) or 0))

    def etag_matches(self, etag: str) -> bool:
        """Whether ``etag`` (as a HEAD returns it) is the one recorded (always, when none was recorded)."""
        if self.digest is None:
            return True
        return Part.of(self.size, etag) == self

    def describe(self) -> str:
        if self.digest is None:
            return f"{self.size} bytes"
        suffix = f"-{self.etag_parts}" if self.etag_parts else ""
        return f"{self.size} bytes, ETag {self.digest.hex()}...{suffix}"


@dataclass(frozen=True)
class PartsManifest:
    parts: Mapping[str, Part]       # suffix -> part; a suffix not listed was not uploaded

    def __post_init__(self) -> None:
        missing = [s for s in REQUIRED_SUFFIXES if s not in self.parts]
        unknown = [s for s in self.parts if s not in SUFFIXES]
        if missing or unknown:
            raise ManifestError(f"a parts manifest must list {', '.join(REQUIRED_SUFFIXES)} and nothing but "
                                f"{', '.join(SUFFIXES)}; missing {missing}, unknown {unknown}")

    def has(self, suffix: str) -> bool:
        return suffix in self.parts

    def encode(self) -> bytes:
        out = bytearray(MAGIC)
        out += bytes((VERSION, len(self.parts)))
        for suffix in SUFFIXES:
            part = self.parts.get(suffix)
            if part is None:
                continue
            out.append(SUFFIXES.index(suffix) | (_HAS_ETAG if part.digest is not None else 0))
            _uvarint(part.size, out)
            if part.digest is not None:
                out += part.digest
                _uvarint(part.etag_parts, out)
        assert len(out) <= MAX_BYTES, f"parts manifest of {len(out)} bytes"
        return bytes(out)

    @classmethod
    def decode(cls, raw: bytes) -> "PartsManifest":
        if raw[:len(MAGIC)] != MAGIC:
            raise ManifestError("not a parts manifest")
        pos = len(MAGIC)
        try:
            version, count = raw[pos], raw[pos + 1]
            pos += 2
            if version != VERSION:
                raise ManifestError(f"parts manifest version {version} is unknown (only {VERSION} is)")
            parts: dict[str, Part] = {}
            for _ in range(count):
                head = raw[pos]
                pos += 1
                index = head & ~_HAS_ETAG
                if index >= len(SUFFIXES) or SUFFIXES[index] in parts:
                    raise ManifestError(f"parts manifest names part {index} twice or unknown")
                size, pos = _read_uvarint(raw, pos)
                digest, etag_parts = None, 0
                if head & _HAS_ETAG:
                    digest = raw[pos:pos + _DIGEST_BYTES]
                    if len(digest) != _DIGEST_BYTES:
                        raise IndexError(pos)
                    pos += _DIGEST_BYTES
                    etag_parts, pos = _read_uvarint(raw, pos)
                parts[SUFFIXES[index]] = Part(size, digest, etag_parts)
        except IndexError:
            raise ManifestError(f"parts manifest of {len(raw)} bytes is truncated") from None
        if pos != len(raw):
            raise ManifestError(f"{len(raw) - pos} byte(s) after the parts manifest")
        return cls(parts)


def of_segment(seg: object) -> PartsManifest | None:
    """The parts manifest of a remote segment (its ``custom_metadata``), or None for a segment copied without one
    (before manifests, or by another plugin). :class:`ManifestError` when the bytes are a damaged manifest."""
    raw = getattr(seg, "custom_metadata", None)     # (readers' test segments may lack the field: no manifest)
    if not raw or not bytes(raw).startswith(MAGIC):
        return None
    return PartsManifest.decode(bytes(raw))


def from_uploads(keys: Mapping[str, str], uploaded: Iterable[tuple[str, int, str]]) -> PartsManifest:
    """The manifest of a copy: ``keys`` is {suffix: object key} of the segment, ``uploaded`` the (key, size, ETag)
    of each object uploaded and verified."""
    suffix_of = {key: suffix for suffix, key in keys.items()}
    return PartsManifest({suffix_of[key]: Part.of(size, etag) for key, size, etag in uploaded})


def _uvarint(value: int, out: bytearray) -> None:
    if value < 0:
        raise ValueError(f"negative size {value}")
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _read_uvarint(raw: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = raw[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise ManifestError("parts manifest size varint is too long")
