"""Kafka's framing and message bodies: a request frame in, a response frame out.

Bodies are decoded and encoded by ``kio`` (dataclasses generated from Kafka's own message schemas, flexible
versions and tagged fields included); this module adds what kio leaves to a broker: the frame (int32 size, then
header and body), choosing the header version from the API and version, the version policy (ApiVersions answers
any version, every other unsupported key or version closes the connection, as Kafka's ``SocketServer`` does) and
:func:`build`, which turns plain dicts into the response dataclasses of whatever version was asked for (fields the
version lacks are dropped, missing ones take their schema defaults). Handlers therefore speak one shape for every
version of an API.
"""
from __future__ import annotations

import dataclasses
import datetime
import functools
import io
import struct
import typing
import uuid
from collections.abc import Mapping
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer

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


def peek_key_version(frame: bytes | memoryview) -> tuple[int, int]:
    if len(frame) < 8:
        raise MalformedRequest(f"a request of {len(frame)} bytes is shorter than a request header")
    key, version = _KEY_VERSION.unpack_from(frame, 0)
    return int(key), int(version)


_READERS: dict[Any, Any] = {}
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


def decode_request(frame: bytes, supported: Mapping[int, tuple[int, int]]) -> Request:
    """Decode one request frame (without its size prefix). ``supported`` maps each served API key to its
    (min, max) version. Raises :class:`MalformedRequest` for an unserved key or version (except ApiVersions,
    which answers any version), trailing bytes, or a body that does not parse."""
    key, version = peek_key_version(frame)
    rng = supported.get(key)
    if key == API_VERSIONS_KEY and rng is not None and version > rng[1]:
        # KIP-511: a version above ours is answered in v0 with UNSUPPORTED_VERSION; the body is not parsed.
        correlation = _CORRELATION.unpack_from(frame, 4)[0] if len(frame) >= 8 else 0
        return Request(key, version, int(correlation), "", None, len(frame))
    if rng is None or not rng[0] <= version <= rng[1]:
        raise MalformedRequest(f"unsupported API key {key} version {version}")
    cls = load_request_schema(key, version)
    view = memoryview(frame)
    try:
        header, offset = _reader(cls.__header_schema__)(view, 0)
        body, used = _reader(cls)(view, offset)
    except Exception as exc:   # kio raises many kinds for bad bytes: all mean "not a request"
        raise MalformedRequest(f"API key {key} version {version}: body does not parse "
                               f"({type(exc).__name__}: {exc})") from None
    if offset + used != len(frame):
        raise MalformedRequest(f"API key {key} version {version}: {len(frame) - offset - used} bytes after the body")
    client_id = getattr(header, "client_id", None) or ""
    return Request(key, version, int(header.correlation_id), client_id, body, len(frame))


def encode_response(request: Request, response: Any, *, version: int | None = None) -> bytes:
    """The whole frame (size prefix included) answering ``request`` with ``response`` (a kio response
    dataclass); the header version is the one the response class names (v0 for every ApiVersions)."""
    cls = type(response)
    out = io.BytesIO()
    out.write(b"\0\0\0\0")
    header_cls = cls.__header_schema__
    _writer(header_cls)(out, header_cls(correlation_id=request.correlation_id))
    _writer(cls)(out, response)
    data = out.getbuffer()
    _SIZE.pack_into(data, 0, len(data) - 4)
    return bytes(data)


def response_class(api_key: int, version: int) -> type:
    return load_response_schema(api_key, version)


# -- building response dataclasses from dicts ----------------------------------------------------------------

@functools.cache
def _fields(cls: type) -> tuple[dict[str, Any], frozenset[str]]:
    hints = typing.get_type_hints(cls)
    fields = dataclasses.fields(cls)
    required = frozenset(f.name for f in fields
                         if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)
    return {f.name: hints[f.name] for f in fields}, required


def _convert(hint: Any, value: Any) -> Any:
    if value is None:
        return None
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        inner = [a for a in args if a is not type(None)]
        return _convert(inner[0], value) if inner else value
    if origin is tuple:
        return tuple(_convert(args[0], v) for v in value)
    if isinstance(hint, type):
        if dataclasses.is_dataclass(hint):
            return value if isinstance(value, hint) else build(hint, value)
        if issubclass(hint, ErrorCode):
            return ErrorCode(int(value))
        if issubclass(hint, datetime.timedelta):
            return value if isinstance(value, datetime.timedelta) else datetime.timedelta(milliseconds=int(value))
        if issubclass(hint, datetime.datetime):
            if isinstance(value, datetime.datetime):
                return value
            return None if int(value) < 0 else datetime.datetime.fromtimestamp(int(value) / 1000, datetime.UTC)
        if hint is uuid.UUID:
            return value
        if hint is bool:
            return bool(value)
    return value


def build(cls: type, values: Mapping[str, Any]) -> Any:
    """``cls`` (a kio dataclass of some version) from ``values``: keys the version lacks are dropped, nested
    dicts and lists become the version's nested classes, ints become error codes and timedeltas as the schema
    wants; a required field missing from ``values`` is an error (a handler bug, not a client's)."""
    hints, required = _fields(cls)
    kwargs = {name: _convert(hints[name], values[name]) for name in hints if name in values}
    missing = required - kwargs.keys()
    for name in missing:
        kwargs[name] = _zero(hints[name])
    return cls(**kwargs)


def _zero(hint: Any) -> Any:
    """A neutral value for a required field a handler did not fill (it is not part of its answer)."""
    origin = typing.get_origin(hint)
    if origin is tuple:
        return ()
    if origin is not None:
        return None
    if isinstance(hint, type):
        if issubclass(hint, ErrorCode):
            return ErrorCode.none
        if issubclass(hint, datetime.timedelta):
            return datetime.timedelta(0)
        if issubclass(hint, bool):
            return False
        if issubclass(hint, int):
            return -1
        if issubclass(hint, str):
            return ""
        if issubclass(hint, bytes):
            return b""
        if hint is uuid.UUID:
            return uuid.UUID(int=0)
        if dataclasses.is_dataclass(hint):
            return build(hint, {})
    return None
