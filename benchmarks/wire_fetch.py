"""A bare Kafka fetch client for the wire benchmark: Fetch v12 requests encoded with kio over one socket, one in
flight (as librdkafka and Java consumers keep per broker), each response read whole into one buffer and decoded,
the next offset taken from the last batch's header; records are not decoded. It measures the broker's fetch path
without a client library's per-record work."""
from __future__ import annotations

import datetime
import io
import socket
import struct

from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.fetch.v12.response import FetchResponse
from kio.schema.types import TopicName
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i8, i16, i32, i32Timedelta, i64

VERSION = 12
_SIZE = struct.Struct(">i")
_ENTRY = struct.Struct(">qi")


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
    header_cls = FetchRequest.__header_schema__
    write_header, write_body = entity_writer(header_cls), entity_writer(FetchRequest)
    read_header, read_body = entity_reader(FetchResponse.__header_schema__), entity_reader(FetchResponse)
    host, port = address.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    buf = bytearray(partition_max_bytes + 1024 * 1024)
    offset = responses = received = 0
    try:
        while offset < end_offset:
            out = io.BytesIO()
            out.write(b"\0\0\0\0")
            write_header(out, header_cls(request_api_key=FetchRequest.__api_key__, request_api_version=i16(VERSION),
                                         correlation_id=i32(responses), client_id="bench"))
            write_body(out, FetchRequest(
                max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=500)), min_bytes=i32(1),
                max_bytes=i32(partition_max_bytes), isolation_level=i8(0), session_id=i32(0), session_epoch=i32(-1),
                forgotten_topics_data=(), rack_id="",
                topics=(FetchTopic(topic=TopicName(topic), partitions=(FetchPartition(
                    partition=i32(0), fetch_offset=i64(offset), partition_max_bytes=i32(partition_max_bytes)),)),)))
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
