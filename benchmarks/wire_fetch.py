"""A bare Kafka fetch client for the wire benchmark: Fetch v12 requests encoded with kio over one socket, one in
flight (as librdkafka and Java consumers keep per broker), each response read whole into one buffer and decoded,
the next offset taken from the last batch's header; records are not decoded. It measures the broker's fetch path
without a client library's per-record work."""
from __future__ import annotations

import datetime
import io
import socket
import struct
import typing
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer

VERSION = 12
_SIZE = struct.Struct(">i")
_ENTRY = struct.Struct(">qi")


def _element(cls: type, field: str) -> Any:
    return typing.get_args(typing.get_type_hints(cls)[field])[0]


def _next_offset(records: bytes | memoryview, current: int) -> int:
    pos, nxt = 0, current
    view = memoryview(records)
    while pos + 27 <= len(view):
        base, length = _ENTRY.unpack_from(view, pos)
        if pos + 12 + length > len(view):
            break                                            # a partial batch at the end: fetched again
        nxt = base + struct.unpack_from(">i", view, pos + 23)[0] + 1
        pos += 12 + length
    return nxt


def fetch_all(address: str, topic: str, end_offset: int, partition_max_bytes: int) -> tuple[int, int]:
    """Fetch ``topic``-0 from offset 0 to ``end_offset``; returns (responses, record bytes received)."""
    req_cls = load_request_schema(1, VERSION)
    resp_cls = load_response_schema(1, VERSION)
    topic_cls = _element(req_cls, "topics")
    part_cls = _element(topic_cls, "partitions")
    header_cls = req_cls.__header_schema__
    write_header, write_body = entity_writer(header_cls), entity_writer(req_cls)
    read_header, read_body = entity_reader(resp_cls.__header_schema__), entity_reader(resp_cls)
    host, port = address.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    buf = bytearray(partition_max_bytes + 1024 * 1024)
    offset = responses = received = 0
    try:
        while offset < end_offset:
            out = io.BytesIO()
            out.write(b"\0\0\0\0")
            write_header(out, header_cls(request_api_key=1, request_api_version=VERSION, correlation_id=responses,
                                         client_id="bench"))
            write_body(out, req_cls(
                max_wait=datetime.timedelta(milliseconds=500), min_bytes=1, max_bytes=partition_max_bytes,
                isolation_level=0, session_id=0, session_epoch=-1, forgotten_topics_data=(), rack_id="",
                topics=(topic_cls(topic=topic, partitions=(part_cls(
                    partition=0, fetch_offset=offset, partition_max_bytes=partition_max_bytes),)),)))
            frame = out.getbuffer()
            _SIZE.pack_into(frame, 0, len(frame) - 4)
            sock.sendall(frame)
            size = _SIZE.unpack(_recv_exactly(sock, memoryview(bytearray(4)), 4))[0]
            if size > len(buf):
                buf = bytearray(size)
            view = _recv_exactly(sock, memoryview(buf), size).toreadonly()
            _, at = read_header(view, 0)
            body, _ = read_body(view, at)
            part = body.responses[0].partitions[0]
            if int(part.error_code) != 0:
                raise RuntimeError(f"fetch at offset {offset}: error {part.error_code}")
            records = part.records or b""
            received += len(records)
            offset = _next_offset(records, offset)
            responses += 1
    finally:
        sock.close()
    return responses, received


def _recv_exactly(sock: socket.socket, view: memoryview, n: int) -> memoryview:
    got = 0
    while got < n:
        k = sock.recv_into(view[got:n])
        if not k:
            raise ConnectionError(f"the broker closed the connection after {got} of {n} bytes")
        got += k
    return view[:n]
