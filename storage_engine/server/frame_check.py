"""The length check a request frame passes before kio reads it.

kio's native reader reserves memory for an array from its count before reading an element, so one frame claiming
2**35 elements made the process abort on a failed allocation of hundreds of gigabytes. :func:`check_lengths` walks
the request header and body by the same schema kio reads with (kio's dataclasses, generated from Kafka's message
schemas) and checks every array count, string, bytes and tagged-field length against the bytes left in the frame
(a count larger than the bytes left cannot be right). A null (-1) where the version's schema does not allow one is
refused as Kafka's generated readers refuse it ("non-nullable field topics was serialized as null"); kio would hand
a handler ``None`` where it expects a tuple or a string. Known tagged fields are walked in place (their size
unused), as Kafka's generated readers read them; unknown ones are skipped by their size.

Two walks, one rule. :func:`walk` goes field by field through :func:`plan` (the reference, and the source of the
message naming the field that is wrong). The walk that runs on every request is compiled once per message class
(:func:`_compiled`): consecutive fixed-size fields are one bounds check, an array of fixed-size elements is one
multiplication, a struct's empty tagged-field section one byte test; a Fetch of 1,000 partitions is checked in a
fraction of the reference walk's time. A frame the compiled walk refuses is walked again by the reference for its
message; the tests hold the two to the same answer on valid, cut and mutated frames of every served API and version.
"""
from __future__ import annotations

import dataclasses
import functools
import struct
import typing
from collections.abc import Callable, Mapping
from typing import Any


class MalformedRequest(Exception):
    """A frame that cannot be a valid request: the connection is closed with one log line (Kafka's
    ``InvalidRequestException``); nothing is answered or stored."""


FIXED = {"int8": 1, "bool": 1, "int16": 2, "uint16": 2, "error_code": 2, "int32": 4, "timedelta_i32": 4,
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
def plan(cls: type) -> tuple[tuple[KioField, ...], dict[int, KioField]]:
    """``cls``'s fields in wire order, and its tagged fields by tag."""
    regular: list[KioField] = []
    tagged: dict[int, KioField] = {}
    for field in kio_fields(cls):
        if field.kind != "struct" and field.kind not in FIXED and field.kind not in ("string", "bytes", "records"):
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
    size = FIXED.get(kind)
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
        return walk(field.struct, buf, pos, end)
    n, pos = _length(buf, pos, end, flexible, 2 if kind == "string" else 4)
    if n < 0 and not field.nullable:
        raise _Bad(f"non-nullable field {field.name} was serialized as null")
    return pos + max(n, 0)


def walk(cls: Any, buf: memoryview, pos: int, end: int) -> int:
    regular, tagged = plan(cls)
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


# -- the compiled walk --------------------------------------------------------------------------------------------

Step = Callable[[memoryview, int, int], int]
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


def _count(buf: memoryview, pos: int, end: int, flexible: bool, width: int) -> tuple[int, int]:
    """:func:`_length`, with ``struct`` for the fixed widths."""
    if flexible:
        if pos < end and buf[pos] < 0x80:
            n = buf[pos] - 1
            pos += 1
        else:
            raw, pos = _uvarint(buf, pos, end)
            n = raw - 1
    else:
        if pos + width > end:
            raise _Bad(f"a length at byte {pos} runs past the end")
        n = (_I16 if width == 2 else _I32).unpack_from(buf, pos)[0]
        pos += width
    if n < -1:
        raise _Bad(f"length {n} at byte {pos}")
    if n > end - pos:
        raise _Bad(f"length {n} at byte {pos} but {end - pos} bytes left")
    return n, pos


def _skip(size: int) -> Step:
    def step(buf: memoryview, pos: int, end: int) -> int:
        pos += size
        if pos > end:
            raise _Bad(f"fixed fields run past the end at byte {pos - size}")
        return pos
    return step


def _value_step(field: KioField, flexible: bool) -> Step:
    """One value of ``field`` (not an array)."""
    size = FIXED.get(field.kind)
    if size is not None:
        return _skip(size)
    if field.kind == "struct":
        inner, _ = _compiled(field.struct)
        if not field.nullable:
            return inner

        def nullable_struct(buf: memoryview, pos: int, end: int) -> int:
            if pos >= end:
                raise _Bad(f"{field.name} at byte {pos} runs past the end")
            if buf[pos] >= 0x80:           # a negative int8: null
                return pos + 1
            return inner(buf, pos + 1, end)
        return nullable_struct
    width, nullable, name = (2 if field.kind == "string" else 4), field.nullable, field.name

    def sized(buf: memoryview, pos: int, end: int) -> int:
        n, pos = _count(buf, pos, end, flexible, width)
        if n < 0:
            if not nullable:
                raise _Bad(f"non-nullable field {name} was serialized as null")
            return pos
        return pos + n
    return sized


def _array_step(field: KioField, flexible: bool) -> Step:
    """An array of ``field``'s elements: a count, then the elements (fixed-size ones checked at once)."""
    nullable, name = field.nullable, field.name
    size = FIXED.get(field.kind)
    if size is None and field.kind == "struct":
        size = _compiled(field.struct)[1]
    element = _value_step(dataclasses.replace(field, array=False, nullable=False), flexible) \
        if field.kind == "struct" else _value_step(field, flexible)

    def array(buf: memoryview, pos: int, end: int) -> int:
        count, pos = _count(buf, pos, end, flexible, 4)
        if count < 0:
            if not nullable:
                raise _Bad(f"non-nullable field {name} was serialized as null")
            return pos
        if size is not None:
            pos += count * size
            if pos > end:
                raise _Bad(f"{count} elements of {name} run past the end")
            return pos
        for _ in range(count):
            pos = element(buf, pos, end)
        return pos
    return array


def _tags_step(tagged: Mapping[int, KioField]) -> Step:
    known = {tag: _array_step(f, True) if f.array else _value_step(f, True) for tag, f in tagged.items()}

    def tags(buf: memoryview, pos: int, end: int) -> int:
        if pos < end and buf[pos] == 0:        # no tagged fields: the common case
            return pos + 1
        return _tags(known, buf, pos, end)
    return tags


def _tags(known: Mapping[int, Step], buf: memoryview, pos: int, end: int) -> int:
    count, pos = _uvarint(buf, pos, end)
    if count > end - pos:
        raise _Bad(f"{count} tagged fields at byte {pos} but {end - pos} bytes left")
    for _ in range(count):
        tag, pos = _uvarint(buf, pos, end)
        size, pos = _uvarint(buf, pos, end)
        if size > end - pos:
            raise _Bad(f"tagged field {tag} of {size} bytes at byte {pos} but {end - pos} bytes left")
        check = known.get(tag)
        pos = pos + size if check is None else check(buf, pos, end)
    return pos


@functools.cache
def _compiled(cls: type) -> tuple[Step, int | None]:
    """The walk of one ``cls`` struct, and its size when every one is the same (a non-flexible struct of
    fixed-size fields only)."""
    regular, tagged = plan(cls)
    flexible = bool(getattr(cls, "__flexible__"))
    steps: list[Step] = []
    run = total = 0
    fixed = True
    for field in regular:
        size = FIXED.get(field.kind)
        if size is not None and not field.array:
            run += size
            total += size
            continue
        fixed = False
        if run:
            steps.append(_skip(run))
            run = 0
        steps.append(_array_step(field, flexible) if field.array else _value_step(field, flexible))
    if run:
        steps.append(_skip(run))
    if flexible:
        steps.append(_tags_step(tagged))
    if len(steps) == 1:
        return steps[0], (total if fixed and not flexible else None)
    parts = tuple(steps)

    def walk_struct(buf: memoryview, pos: int, end: int) -> int:
        for step in parts:
            pos = step(buf, pos, end)
        return pos
    return walk_struct, (total if fixed and not flexible else None)


def _empty(buf: memoryview, pos: int, end: int) -> int:
    return pos


def _header_end(cls: Any, buf: memoryview, end: int) -> int:
    if end < 10:
        raise _Bad("shorter than a request header")
    client_id = _I16.unpack_from(buf, 8)[0]     # a legacy int16 string in every version
    if client_id < -1 or client_id > end - 10:
        raise _Bad(f"client id length {client_id} but {end - 10} bytes left")
    pos = 10 + max(client_id, 0)
    if cls.__header_schema__.__flexible__:
        pos = _walk_tags({}, buf, pos, end)
    return pos


def check_lengths(cls: Any, frame: bytes | bytearray | memoryview) -> None:
    """Walk the request header and body of ``cls`` over ``frame``: every count and length must fit in the bytes
    left (raises :class:`MalformedRequest` naming the first that does not). Only lengths are checked; kio reads
    the values."""
    buf = memoryview(frame)
    end = len(buf)
    try:
        _compiled(cls)[0](buf, _header_end(cls, buf, end), end)
    except _Bad as fast:
        try:
            walk(cls, buf, _header_end(cls, buf, end), end)       # the reference names what is wrong
            reason = str(fast)
        except _Bad as exc:
            reason = str(exc)
        key, version = cls.__api_key__, cls.__version__
        raise MalformedRequest(f"API key {key} version {version}: body does not parse ({reason})") from None


def reference_check(cls: Any, frame: bytes | bytearray | memoryview) -> None:
    """:func:`check_lengths` by the reference walk alone (the tests compare the two)."""
    buf = memoryview(frame)
    end = len(buf)
    try:
        walk(cls, buf, _header_end(cls, buf, end), end)
    except _Bad as exc:
        key, version = cls.__api_key__, cls.__version__
        raise MalformedRequest(f"API key {key} version {version}: body does not parse ({exc})") from None
