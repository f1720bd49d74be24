"""The primitives of Kafka's wire encoding shared by the handlers that write their responses directly
(``metadata_wire``, ``produce_wire``, ``fetch_wire``): unsigned varints, strings and array lengths, in the classic
encoding (fixed-size lengths) and the flexible one (KIP-482: varint lengths plus one, tagged fields)."""
from __future__ import annotations

import struct

NO_TAGS = b"\x00"                  # a flexible structure's empty tagged-field section
I16 = struct.Struct(">h")
I32 = struct.Struct(">i")


def uvarint(n: int) -> bytes:
    """``n`` as an unsigned varint (7 bits a byte, low bits first)."""
    if n < 0x80:
        return bytes((n,))
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def string(value: str | None, flexible: bool) -> bytes:
    """A (nullable) string: an int16 length, or in a flexible version a varint of the length plus one."""
    if value is None:
        return b"\x00" if flexible else b"\xff\xff"
    raw = value.encode("utf-8")
    return (uvarint(len(raw) + 1) if flexible else I16.pack(len(raw))) + raw


def count(n: int, flexible: bool) -> bytes:
    """An array's length (-1: null): an int32, or in a flexible version a varint of the length plus one."""
    return uvarint(n + 1) if flexible else I32.pack(n)
