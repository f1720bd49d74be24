"""Kafka's framing and message bodies: a request frame in, a response frame out.

Bodies are decoded and encoded by ``kio`` (dataclasses generated from Kafka's own message schemas, flexible
versions and tagged fields included); this module adds what kio leaves to a broker: the frame (int32 size, then
header and body), choosing the header version from the API and version, the version policy (ApiVersions answers
any version, every other unsupported key or version closes the connection, as Kafka's ``SocketServer`` does) and
:func:`build`, which turns plain dicts into the response dataclasses of whatever version was asked for (fields the
version lacks are dropped, missing optional ones take their schema defaults; an unknown key or a missing required
field raises). Handlers therefore speak one shape for every
version of an API.

Before kio reads a request, :func:`~storage_engine.server.frame_check.check_lengths` walks it by the same schema
and checks every array count, string, bytes and tagged-field length against the bytes left in the frame (kio's
native reader reserves memory for an array from its count), and refuses a null where the schema allows none.

A handler may encode its own response (:class:`Encoded`: Metadata in :mod:`.handlers.metadata_wire`, Fetch in
:mod:`.handlers.fetch_wire`), as bytes and, for a fetch, the file slices of its records between them.
"""
from __future__ import annotations

import dataclasses
import datetime
import functools
import importlib
import pkgutil
import struct
import types
import typing
import uuid
from collections.abc import Mapping
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer

from storage_engine.segment.file_slice import FileSlice
from storage_engine.server.frame_check import KioField as KioField, MalformedRequest as MalformedRequest
from storage_engine.server.frame_check import check_lengths, kio_fields as kio_fields

API_VERSIONS_KEY = 18
_SIZE = struct.Struct(">i")
_KEY_VERSION = struct.Struct(">hh")
_CORRELATION = struct.Struct(">i")
_SIZE_CORRELATION = struct.Struct(">ii")
_JOINED = 64 * 1024
_SIZE_CORRELATION_TAGS = struct.Struct(">iib")


@dataclasses.dataclass(frozen=True)
class Request:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str
    body: Any               # the kio request dataclass; None for an ApiVersions of a version above ours
    size: int               # bytes of header and body


def frame_size(prefix: bytes) -> int:
    return int(_SIZE.unpack(prefix)[0])


def peek_key_version(frame: bytes | bytearray | memoryview) -> tuple[int, int]:
    if len(frame) < 8:
        raise MalformedRequest(f"a request of {len(frame)} bytes is shorter than a request header")
    key, version = _KEY_VERSION.unpack_from(frame, 0)
    return int(key), int(version)


_READERS: dict[Any, Any] = {}
# API key -> a decoder of that API's served versions that reads the frame itself instead of kio (Produce:
# handlers/produce_wire.py, Fetch: handlers/fetch_request_wire.py, each registers itself); it returns the Request
# or raises MalformedRequest.
DIRECT_DECODERS: dict[int, Any] = {}
_WRITERS: dict[Any, Any] = {}


def _reader(cls: Any) -> Any:
    found = _READERS.get(cls)
    if found is None:
        found = _READERS[cls] = entity_reader(cls)
    return found


def _writer(cls: Any) -> Any:
    found = _WRITERS.get(cls)
    if found is None:
        found = _WRITERS[cls] = entity_writer(cls)
    return found


@functools.cache
def request_class(api_key: int, version: int) -> Any:
    """kio's request class of this key and version (kio looks it up by module name on every call)."""
    return load_request_schema(api_key, version)


def decode_request(frame: bytes | bytearray | memoryview, supported: Mapping[int, tuple[int, int]]) -> Request:
    """Decode one request frame (without its size prefix). ``supported`` maps each served API key to its
    (min, max) version. Raises :class:`MalformedRequest` for an unserved key or version (except ApiVersions,
    which answers any version) or a body that does not parse. Bytes after a parsed body are ignored, as Kafka's
    ``AbstractRequest.parseRequest`` ignores them: librdkafka's Metadata v9+ for all topics leaves three bytes of
    its int32 array-count placeholder behind the compact null (``rd_kafka_MetadataRequest0``)."""
    key, version = peek_key_version(frame)
    rng = supported.get(key)
    if key == API_VERSIONS_KEY and rng is not None and version > rng[1]:
        # KIP-511: a version above ours is answered in v0 with UNSUPPORTED_VERSION; the body is not parsed.
        correlation = _CORRELATION.unpack_from(frame, 4)[0] if len(frame) >= 8 else 0
        return Request(key, version, int(correlation), "", None, len(frame))
    if rng is None or not rng[0] <= version <= rng[1]:
        raise MalformedRequest(f"unsupported API key {key} version {version}")
    direct = DIRECT_DECODERS.get(key)
    if direct is not None:
        return direct(frame)
    cls = request_class(key, version)
    check_lengths(cls, frame)
    view = memoryview(frame).toreadonly()   # kio reads only read-only buffers (a frame is a bytearray)
    try:
        header, offset = _reader(cls.__header_schema__)(view, 0)
        body, used = _reader(cls)(view, offset)
    except BaseException as exc:   # kio raises many kinds for bad bytes: all mean "not a request"
        if not isinstance(exc, Exception) and type(exc).__name__ != "PanicException":   # a Rust panic in kio
            raise
        raise MalformedRequest(f"API key {key} version {version}: body does not parse "
                               f"({type(exc).__name__}: {exc})") from None
    client_id = getattr(header, "client_id", None) or ""
    return Request(key, version, int(header.correlation_id), client_id, body, len(frame))


class _Parts:
    """What kio writes a response into: small fields gathered into one buffer, every large bytes value (records)
    kept as the object it is, so a fetched batch is never copied on its way to the socket. A fetch's records may
    be a :class:`~storage_engine.segment.file_slice.FileSlice` (kio writes its length, then hands it over as the
    value): it stays a part of its own, which the connection sends from the file."""

    LARGE = 32 * 1024

    def __init__(self) -> None:
        self.parts: list[bytes | bytearray | memoryview | FileSlice] = [bytearray(4)]   # the size prefix, filled in last
        self.size = 0

    def write(self, data: bytes | bytearray | memoryview | FileSlice) -> int:
        n = len(data)
        if n >= self.LARGE or isinstance(data, FileSlice):
            self.parts.append(data)
            self.parts.append(bytearray())
        else:
            tail = self.parts[-1]
            assert isinstance(tail, bytearray)
            tail += data
        self.size += n
        return n


def encode_response_parts(request: Request, response: Any) -> list[bytes | bytearray | memoryview | FileSlice]:
    """The frame answering ``request`` with ``response`` (a kio response dataclass), size prefix included, as
    buffers to write in order (a fetch's file slices among them, to send from their files); the header version is
    the one the response class names (v0 for ApiVersions)."""
    cls = type(response)
    out = _Parts()
    header_cls = cls.__header_schema__
    _writer(header_cls)(out, header_cls(correlation_id=request.correlation_id))
    _writer(cls)(out, response)
    first = out.parts[0]
    assert isinstance(first, bytearray)
    _SIZE.pack_into(first, 0, out.size)
    return [p for p in out.parts if len(p)]


@dataclasses.dataclass(frozen=True)
class Encoded:
    """A response body its handler encoded itself (Metadata: :mod:`.handlers.metadata_wire`; Fetch:
    :mod:`.handlers.fetch_wire`), with the version of the response header to put before it (1 for the flexible
    versions of the API, else 0). ``parts``, when given, follow ``body`` in the frame: bytes, and the file slices
    of a fetch's records, each sent from its file."""

    body: bytes | bytearray
    header_version: int
    parts: tuple[bytes | bytearray | memoryview | FileSlice, ...] = ()


def frame_encoded(request: Request, encoded: Encoded) -> list[bytes | bytearray | memoryview | FileSlice]:
    """The frame of a body encoded by its handler: size, correlation id, the header's empty tagged fields in
    header v1, then the body (and its parts); a small body is joined to the header (one write)."""
    size = len(encoded.body) + sum(len(p) for p in encoded.parts)
    if encoded.header_version >= 1:
        head = _SIZE_CORRELATION_TAGS.pack(size + 5, request.correlation_id, 0)
    else:
        head = _SIZE_CORRELATION.pack(size + 4, request.correlation_id)
    if len(encoded.body) <= _JOINED:       # one write (one send) for the header and a small body
        return [head + encoded.body, *encoded.parts]
    return [head, encoded.body, *encoded.parts]


def frame_encoded_bytes(request: Request, encoded: Encoded) -> bytes:
    """:func:`frame_encoded` as one ``bytes`` (file slices read in)."""
    return b"".join(bytes(p) if isinstance(p, FileSlice) else p for p in frame_encoded(request, encoded))


def encode_response(request: Request, response: Any) -> bytes:
    """:func:`encode_response_parts` as one ``bytes`` (file slices read in)."""
    return b"".join(bytes(p) if isinstance(p, FileSlice) else p for p in encode_response_parts(request, response))


@functools.cache
def response_class(api_key: int, version: int) -> type:
    return load_response_schema(api_key, version)


# -- building response dataclasses from dicts ----------------------------------------------------------------

class BuildError(TypeError):
    """A handler's values do not make the message asked for: a key no version of the class has, or a field the
    version requires (one without a schema default) missing. A handler bug, never a client's: the connection
    closes with one line naming the class and the key, rather than a zero going out as a value."""


@functools.cache
def _fields(cls: type) -> tuple[dict[str, Any], frozenset[str]]:
    hints = typing.get_type_hints(cls)
    fields = dataclasses.fields(cls)
    required = frozenset(f.name for f in fields
                         if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)
    return {f.name: hints[f.name] for f in fields}, required


@functools.cache
def _known(cls: type) -> frozenset[str]:
    """The field names of ``cls`` in every version of its message: kio generates one module per version
    (``kio.schema.fetch.v12.response``), each with its own class of this name; a handler speaks the union."""
    package, _, tail = cls.__module__.rpartition(".v")
    version, _, kind = tail.partition(".")
    names = set(_fields(cls)[0])
    if version.isdigit():
        here = importlib.import_module(package)
        for info in pkgutil.iter_modules(here.__path__):
            if info.name[:1] == "v" and info.name[1:].isdigit():
                other = getattr(importlib.import_module(f"{package}.{info.name}.{kind}"), cls.__name__, None)
                if other is not None and dataclasses.is_dataclass(other):
                    names.update(f.name for f in dataclasses.fields(other))
    return frozenset(names)


def _convert(hint: Any, value: Any, where: str) -> Any:
    if value is None:
        return None
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        if inner and inner[0] is datetime.datetime and not isinstance(value, datetime.datetime) and int(value) < 0:
            return None                     # a nullable time: -1 (none) is null, which kio writes as -1
        return _convert(inner[0], value, where) if inner else value
    if origin is tuple:
        return tuple(_convert(args[0], v, f"{where}[{i}]") for i, v in enumerate(value))
    if isinstance(hint, type):
        if dataclasses.is_dataclass(hint):
            return value if isinstance(value, hint) else _build(hint, value, where)
        if issubclass(hint, ErrorCode):
            if isinstance(value, bool) or not isinstance(value, int):
                raise BuildError(f"{where}: an error code must be an ErrorCode (or its int), got {value!r}")
            return ErrorCode(value)
        if issubclass(hint, datetime.timedelta):
            return value if isinstance(value, datetime.timedelta) else datetime.timedelta(milliseconds=int(value))
        if issubclass(hint, datetime.datetime):
            if isinstance(value, datetime.datetime):
                return value
            # a time that cannot be null keeps Kafka's -1 (none, as DescribeTransactions' start time of an id with
            # no open transaction): the instant 1 ms before the epoch, which kio writes back as -1
            return datetime.datetime.fromtimestamp(int(value) / 1000, datetime.UTC)
        if hint is uuid.UUID:
            return value
        if hint is bool:
            return bool(value)
    return value


def build(cls: type, values: Mapping[str, Any]) -> Any:
    """``cls`` (a kio dataclass of some version) from ``values``: keys of other versions of the message are
    dropped, nested dicts and lists become the version's nested classes, ints become error codes and timedeltas
    as the schema wants. A key no version of the message has, or a field this version requires (one without a
    schema default) missing from ``values``, raises :class:`BuildError` naming it: a forgotten ``error_code``
    never goes out as success."""
    return _build(cls, values, cls.__name__)


def _build(cls: type, values: Mapping[str, Any], where: str) -> Any:
    hints, required = _fields(cls)
    unknown = values.keys() - hints.keys()
    if unknown:     # keys of other versions: _known imports every version's module at its first call, ~25 ms
        unknown -= _known(cls)
    if unknown:
        raise BuildError(f"{where} ({cls.__module__}): no version has {', '.join(sorted(unknown))}")
    missing = required - values.keys()
    if missing:
        raise BuildError(f"{where} ({cls.__module__}): required {', '.join(sorted(missing))} not given")
    return cls(**{name: _convert(hints[name], values[name], f"{where}.{name}") for name in hints if name in values})
