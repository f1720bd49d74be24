"""Kafka's framing and message bodies: a request frame in, a response frame out.

Bodies are decoded and encoded by ``kio`` (dataclasses generated from Kafka's own message schemas, flexible
versions and tagged fields included); this module adds what kio leaves to a broker: the frame (int32 size, then
header and body), choosing the header version from the API and version, the version policy (ApiVersions answers
any version, every other unsupported key or version closes the connection, as Kafka's ``SocketServer`` does) and
:func:`build`, which turns plain dicts into the response dataclasses of whatever version was asked for (fields the
version lacks are dropped, missing optional ones take their schema defaults; an unknown key or a missing required
field raises). Handlers therefore speak one shape for every
version of an API.

Before kio reads a request, :func:`check_lengths` walks it by the same schema and checks every array count,
string, bytes and tagged-field length against the bytes left in the frame: kio's native reader reserves memory for
an array from its count before reading an element, so one frame claiming 2**35 elements made the process abort on
a failed allocation of hundreds of gigabytes. A null (-1) where the version's schema does not allow one is refused
as Kafka's generated readers refuse it ("non-nullable field topics was serialized as null", an
``InvalidRequestException`` that closes the connection); kio would hand a handler ``None`` where it expects a
tuple or a string.
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

API_VERSIONS_KEY = 18
_SIZE = struct.Struct(">i")
_KEY_VERSION = struct.Struct(">hh")
_CORRELATION = struct.Struct(">i")


class MalformedRequest(Exception):
    """A frame that cannot be a valid request: the connection is closed with one log line (Kafka's
    ``InvalidRequestException``); nothing is answered or stored."""


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
# handlers/produce_wire.py registers itself); it returns the Request or raises MalformedRequest.
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


# -- the length check before kio --------------------------------------------------------------------------------

_FIXED = {"int8": 1, "bool": 1, "int16": 2, "uint16": 2, "error_code": 2, "int32": 4, "timedelta_i32": 4,
          "int64": 8, "timedelta_i64": 8, "datetime_i64": 8, "float64": 8, "uuid": 16}


class _Bad(Exception):
    """The frame's shape is wrong at some position (becomes a MalformedRequest)."""


@dataclasses.dataclass(frozen=True)
class KioField:
    """A field of a kio message class, its type hint unwrapped: ``X | None`` is nullable, ``tuple[X, ...]`` an
    array, and the element ``X`` a nested entity (kind ``"struct"``, ``struct`` its class) or a scalar (kind its
    ``kafka_type``: ``int32``, ``string``, ``error_code``, ...)."""
    name: str
    kind: str                 # a kafka_type, or "struct"
    nullable: bool
    array: bool
    struct: Any               # the element class for "struct", else None
    tag: int | None           # a tagged field's tag
    required: bool            # no schema default: a value must be given


@functools.cache
def kio_fields(cls: type) -> tuple[KioField, ...]:
    """The fields of the kio message class ``cls`` in declaration order (the wire order of its untagged ones),
    each unwrapped (:class:`KioField`): what the length check walks and the response types are generated from."""
    hints = typing.get_type_hints(cls)
    out: list[KioField] = []
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        args = typing.get_args(hint)
        nullable = type(None) in args
        base = next((a for a in args if a is not type(None)), hint) if nullable else hint
        array = typing.get_origin(base) is tuple
        elem = typing.get_args(base)[0] if array else base
        kind, struct = ("struct", elem) if dataclasses.is_dataclass(elem) else (f.metadata.get("kafka_type", ""), None)
        out.append(KioField(f.name, kind, nullable, array, struct, f.metadata.get("tag"),
                            f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING))
    return tuple(out)


@functools.cache
def _plan(cls: type) -> tuple[tuple[KioField, ...], dict[int, KioField]]:
    """``cls``'s fields in wire order, and its tagged fields by tag."""
    regular: list[KioField] = []
    tagged: dict[int, KioField] = {}
    for field in kio_fields(cls):
        if field.kind != "struct" and field.kind not in _FIXED and field.kind not in ("string", "bytes", "records"):
            raise TypeError(f"{cls.__name__}.{field.name}: no length rule for kafka_type {field.kind!r}")
        if field.tag is None:
            regular.append(field)
        else:
            tagged[field.tag] = field
    return tuple(regular), tagged


def _uvarint(buf: memoryview, pos: int, end: int) -> tuple[int, int]:
    value = shift = 0
    for i in range(5):
        if pos + i >= end:
            raise _Bad(f"an unsigned varint at byte {pos} runs past the end")
        byte = buf[pos + i]
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos + i + 1
        shift += 7
    raise _Bad(f"an unsigned varint at byte {pos} is longer than 5 bytes")


def _length(buf: memoryview, pos: int, end: int, flexible: bool, width: int) -> tuple[int, int]:
    """A length or count (-1: null) and the position after it: a compact uvarint (n + 1) or a big-endian int of
    ``width`` bytes; a count larger than the bytes left cannot be right."""
    if flexible:
        raw, pos = _uvarint(buf, pos, end)
        n = raw - 1
    else:
        if pos + width > end:
            raise _Bad(f"a length at byte {pos} runs past the end")
        n = int.from_bytes(buf[pos:pos + width], "big", signed=True)
        pos += width
    if n < -1:
        raise _Bad(f"length {n} at byte {pos}")
    if n > end - pos:
        raise _Bad(f"length {n} at byte {pos} but {end - pos} bytes left")
    return n, pos


def _walk_value(field: KioField, flexible: bool, buf: memoryview, pos: int, end: int) -> int:
    kind = field.kind
    size = _FIXED.get(kind)
    if size is not None:
        if pos + size > end:
            raise _Bad(f"{field.name} at byte {pos} runs past the end")
        return pos + size
    if kind == "struct":
        if field.nullable and not field.array:
            if pos >= end:
                raise _Bad(f"{field.name} at byte {pos} runs past the end")
            if int.from_bytes(buf[pos:pos + 1], "big", signed=True) < 0:
                return pos + 1
            pos += 1
        return _walk(field.struct, buf, pos, end)
    n, pos = _length(buf, pos, end, flexible, 2 if kind == "string" else 4)
    if n < 0 and not field.nullable:
        raise _Bad(f"non-nullable field {field.name} was serialized as null")
    return pos + max(n, 0)


def _walk(cls: Any, buf: memoryview, pos: int, end: int) -> int:
    regular, tagged = _plan(cls)
    flexible = bool(cls.__flexible__)
    for field in regular:
        if field.array:
            count, pos = _length(buf, pos, end, flexible, 4)
            if count < 0 and not field.nullable:
                raise _Bad(f"non-nullable field {field.name} was serialized as null")
            for _ in range(count):
                pos = _walk_value(field, flexible, buf, pos, end)
        else:
            pos = _walk_value(field, flexible, buf, pos, end)
    if flexible:
        pos = _walk_tags(tagged, buf, pos, end)
    return pos


def _walk_tags(tagged: Mapping[int, KioField], buf: memoryview, pos: int, end: int) -> int:
    count, pos = _uvarint(buf, pos, end)
    if count > end - pos:
        raise _Bad(f"{count} tagged fields at byte {pos} but {end - pos} bytes left")
    for _ in range(count):
        tag, pos = _uvarint(buf, pos, end)
        size, pos = _uvarint(buf, pos, end)
        if size > end - pos:
            raise _Bad(f"tagged field {tag} of {size} bytes at byte {pos} but {end - pos} bytes left")
        field = tagged.get(tag)
        if field is None:
            pos += size           # an unknown tag is skipped by its size
        elif field.array:         # a known one is read in place, as Kafka's generated readers do (size unused)
            n, pos = _length(buf, pos, end, True, 4)
            if n < 0 and not field.nullable:
                raise _Bad(f"non-nullable field {field.name} was serialized as null")
            for _ in range(n):
                pos = _walk_value(field, True, buf, pos, end)
        else:
            pos = _walk_value(field, True, buf, pos, end)
    return pos


def check_lengths(cls: Any, frame: bytes | bytearray | memoryview) -> None:
    """Walk the request header and body of ``cls`` over ``frame``: every count and length must fit in the bytes
    left (raises :class:`MalformedRequest` naming the first that does not). Only lengths are checked; kio reads
    the values."""
    buf = memoryview(frame)
    end = len(buf)
    try:
        if end < 10:
            raise _Bad("shorter than a request header")
        client_id = int.from_bytes(buf[8:10], "big", signed=True)     # a legacy int16 string in every version
        if client_id < -1 or client_id > end - 10:
            raise _Bad(f"client id length {client_id} but {end - 10} bytes left")
        pos = 10 + max(client_id, 0)
        if cls.__header_schema__.__flexible__:
            pos = _walk_tags({}, buf, pos, end)
        _walk(cls, buf, pos, end)
    except _Bad as exc:
        key, version = cls.__api_key__, cls.__version__
        raise MalformedRequest(f"API key {key} version {version}: body does not parse ({exc})") from None


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
    cls = load_request_schema(key, version)
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
    """A response body its handler encoded itself (Metadata: :mod:`.handlers.metadata_wire`), with the version
    of the response header to put before it (1 for the flexible versions of the API, else 0)."""

    body: bytes
    header_version: int


def frame_encoded(request: Request, encoded: Encoded) -> list[bytes | bytearray | memoryview]:
    """The frame of a body encoded by its handler: size, correlation id, the header's empty tagged fields in
    header v1, then the body."""
    header = _SIZE.pack(request.correlation_id) + (b"\x00" if encoded.header_version >= 1 else b"")
    return [_SIZE.pack(len(header) + len(encoded.body)) + header, encoded.body]


def encode_response(request: Request, response: Any) -> bytes:
    """:func:`encode_response_parts` as one ``bytes`` (file slices read in)."""
    return b"".join(bytes(p) if isinstance(p, FileSlice) else p for p in encode_response_parts(request, response))


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
    unknown = values.keys() - _known(cls)
    if unknown:
        raise BuildError(f"{where} ({cls.__module__}): no version has {', '.join(sorted(unknown))}")
    missing = required - values.keys()
    if missing:
        raise BuildError(f"{where} ({cls.__module__}): required {', '.join(sorted(missing))} not given")
    return cls(**{name: _convert(hints[name], values[name], f"{where}.{name}") for name in hints if name in values})
