"""Self-checking payloads shared by the child programs and the tests.

A payload is ``<tag>:<append no>:<record no>:`` + random bytes + SHA-256 of everything before it, so any
reader can tell a torn or mixed-up value from a real one without asking the writer, and the writer's
acknowledgement names a payload by the SHA-256 of the whole value.
"""
from __future__ import annotations

import hashlib
import os

DIGEST_SIZE = 32


def make_payload(tag: str, append_no: int, record_no: int, random_bytes: int) -> bytes:
    body = f"{tag}:{append_no}:{record_no}:".encode() + os.urandom(random_bytes)
    return body + hashlib.sha256(body).digest()


def payload_ok(value: bytes | None) -> bool:
    return (value is not None and len(value) > DIGEST_SIZE
            and hashlib.sha256(value[:-DIGEST_SIZE]).digest() == value[-DIGEST_SIZE:])


def payload_tag(value: bytes) -> str:
    return value.split(b":", 1)[0].decode()


def digest(value: bytes) -> str:
    return hashlib.sha256(value).hexdigest()
