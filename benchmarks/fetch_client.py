"""A lean Kafka Fetch v12 client for the wire benchmark: what a client must do to read one partition, and no more.

What it does, per fetch (one fetch in flight on one connection, as librdkafka and Java consumers keep per broker):

* the request: encoded once with kio (header v2 and body, every field as a consumer sends it: replica -1,
  ``max_wait`` 500 ms, ``min_bytes`` 1, isolation 0, no fetch session, one topic, partition 0); each fetch patches
  its correlation id and fetch offset into that same frame;
* the response, read whole (:func:`fetch_all`, ``stream=False``): its size prefix, then the whole frame into one
  receive buffer kept for the connection, made as large as the largest response so far (in whole MiB; anonymous
  memory mapped with MAP_POPULATE, as a C client's malloc, its pages faulted in at once, no zeroing pass);
  the header and body fields are read directly: correlation id (must match),
  tagged fields, throttle time, top-level error code (must be 0), one topic of our name, one partition (index 0,
  error code 0), high watermark, LSO, log start, aborted transactions, preferred read replica, then the records
  as a memoryview of the buffer (not copied), then the trailing tagged fields, which must end the frame exactly;
* the records: only the batch headers are read (:func:`walk_batches`): each batch must be magic 2, at least a
  batch header long, whole within the records, and in offset order (the first one holding the fetch offset, each
  next one after the last offset of the one before); the next fetch offset is the last batch's last offset + 1.
  A partial batch at the end (allowed by the protocol) is not counted and is fetched again.

What it does not do: decode records, check CRCs (librdkafka's ``check.crcs`` is off by default too), decompress,
or hand records to an application. The ``sendfile`` baseline's reader does less still: it receives into one 1 MiB
buffer and discards, reading no field at all.

``stream=True`` reads the same responses as a streaming consumer would: into one bounded buffer (1 MiB) as the bytes
arrive, the header fields parsed from it, then each batch header as it passes, the batch bodies overwritten by the
next receive; the same checks. It is the whole-response client's work minus holding the response in memory.
"""
from __future__ import annotations

import datetime
import io
import mmap
import socket
import struct
from dataclasses import dataclass

from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.types import TopicName
from kio.serial import entity_writer
from kio.static.primitive import i8, i16, i32, i32Timedelta, i64

VERSION = 12
MAX_WAIT_MS = 500
STREAM_BUFFER = 1 << 20
BATCH_OVERHEAD = 61                 # a v2 batch header: offset .. records count
_SENTINEL_OFFSET = 0x0123456789ABCDEF
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_HEAD = struct.Struct(">qiibI hi")   # base offset, batch length, leader epoch, magic, crc, attributes, last delta
_PARTITION = struct.Struct(">ihqqq")  # partition index, error code, high watermark, LSO, log start


class FetchFramingError(RuntimeError):
    """A response that is not what the request asked for, or whose framing is broken."""


@dataclass
class FetchStats:
    responses: int = 0
    record_bytes: int = 0           # bytes of whole batches received
    batches: int = 0
    partial_bytes: int = 0          # bytes of a partial last batch, fetched again


class RequestTemplate:
    """One Fetch v12 request frame (size prefix included), patched per fetch."""

    def __init__(self, topic: str, partition_max_bytes: int, client_id: str = "bench") -> None:
        header_cls = FetchRequest.__header_schema__
        out = io.BytesIO()
        out.write(b"\0\0\0\0")
        entity_writer(header_cls)(out, header_cls(request_api_key=FetchRequest.__api_key__,
                                                  request_api_version=i16(VERSION), correlation_id=i32(0),
                                                  client_id=client_id))
        entity_writer(FetchRequest)(out, FetchRequest(
            max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=MAX_WAIT_MS)), min_bytes=i32(1),
            max_bytes=i32(partition_max_bytes), isolation_level=i8(0), session_id=i32(0), session_epoch=i32(-1),
            forgotten_topics_data=(), rack_id="",
            topics=(FetchTopic(topic=TopicName(topic), partitions=(FetchPartition(
                partition=i32(0), fetch_offset=i64(_SENTINEL_OFFSET),
                partition_max_bytes=i32(partition_max_bytes)),)),)))
        self.frame = bytearray(out.getvalue())
        _I32.pack_into(self.frame, 0, len(self.frame) - 4)
        sentinel = _I64.pack(_SENTINEL_OFFSET)
        self._offset_at = self.frame.find(sentinel)
        if self._offset_at < 0 or self.frame.find(sentinel, self._offset_at + 1) >= 0:
            raise AssertionError("the fetch offset is not found exactly once in the encoded request")
        self._correlation_at = 8         # size, api key, api version, correlation id
        self.topic = topic.encode()

    def patch(self, correlation_id: int, offset: int) -> bytearray:
        _I32.pack_into(self.frame, self._correlation_at, correlation_id)
        _I64.pack_into(self.frame, self._offset_at, offset)
        return self.frame


# -- reading a response ------------------------------------------------------------------------------------------

class _Short(Exception):
    """The bytes at hand end before the field being read (streaming: receive more)."""


def _uvarint(view: memoryview, pos: int, end: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= end:
            raise _Short
        b = view[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7
        if shift > 28:
            raise FetchFramingError(f"an unsigned varint longer than 5 bytes at byte {pos}")


def _skip_tags(view: memoryview, pos: int, end: int) -> int:
    count, pos = _uvarint(view, pos, end)
    for _ in range(count):
        _, pos = _uvarint(view, pos, end)
        size, pos = _uvarint(view, pos, end)
        pos += size
        if pos > end:
            raise _Short
    return pos


def _need(pos: int, n: int, end: int) -> None:
    if pos + n > end:
        raise _Short


@dataclass
class ResponseHead:
    high_watermark: int
    records_at: int                 # position of the records in the frame
    records_size: int


def parse_head(view: memoryview, end: int, correlation_id: int, topic: bytes) -> ResponseHead:
    """Read a Fetch v12 response frame (without its size prefix) up to its records; raises :class:`_Short` when
    ``view[:end]`` ends before them, :class:`FetchFramingError` when a field is not what the request asked for."""
    _need(0, 4, end)
    got = _I32.unpack_from(view, 0)[0]
    if got != correlation_id:
        raise FetchFramingError(f"correlation id {got}, expected {correlation_id}")
    pos = _skip_tags(view, 4, end)                                   # response header v1
    _need(pos, 10, end)
    error = struct.unpack_from(">h", view, pos + 4)[0]               # after throttle_time_ms
    if error:
        raise FetchFramingError(f"top-level error code {error}")
    pos += 10                                                        # throttle, error, session id
    topics, pos = _uvarint(view, pos, end)
    if topics != 2:
        raise FetchFramingError(f"{topics - 1} topics in the response, expected 1")
    name_len, pos = _uvarint(view, pos, end)
    _need(pos, name_len - 1, end)
    if view[pos:pos + name_len - 1] != topic:
        raise FetchFramingError(f"topic {bytes(view[pos:pos + name_len - 1])!r}, expected {topic!r}")
    pos += name_len - 1
    parts, pos = _uvarint(view, pos, end)
    if parts != 2:
        raise FetchFramingError(f"{parts - 1} partitions in the response, expected 1")
    _need(pos, _PARTITION.size, end)
    index, error, high_watermark, _, _ = _PARTITION.unpack_from(view, pos)
    if index != 0 or error:
        raise FetchFramingError(f"partition {index} error code {error}, expected partition 0 error 0")
    pos += _PARTITION.size
    aborted, pos = _uvarint(view, pos, end)                          # compact nullable array: 0 = null
    for _ in range(max(0, aborted - 1)):
        _need(pos, 16, end)
        pos = _skip_tags(view, pos + 16, end)
    _need(pos, 4, end)
    pos += 4                                                         # preferred read replica
    size, pos = _uvarint(view, pos, end)                             # compact nullable records: 0 = null
    return ResponseHead(high_watermark, pos, max(0, size - 1))


def parse_tail(view: memoryview, pos: int, end: int) -> None:
    """The tagged fields of the partition, the topic and the body after the records: they must end the frame."""
    try:
        for _ in range(3):
            pos = _skip_tags(view, pos, end)
    except _Short:
        raise FetchFramingError("the response ends inside its trailing tagged fields") from None
    if pos != end:
        raise FetchFramingError(f"{end - pos} bytes after the response's last field")


class BatchWalk:
    """Batch headers seen in offset order, fed piece by piece (whole response: one piece)."""

    def __init__(self, fetch_offset: int) -> None:
        self.next_offset = fetch_offset     # the fetch offset until a batch is seen, then last offset + 1
        self.first = True
        self.bytes = 0
        self.batches = 0

    def header(self, view: memoryview, at: int) -> tuple[int, int]:
        """Check the batch header at ``view[at:at+27]``; (the batch's size in bytes, its last offset)."""
        base, length, _, magic, _, _, delta = _HEAD.unpack_from(view, at)
        if magic != 2:
            raise FetchFramingError(f"batch at offset {base}: magic {magic}, expected 2")
        if length < BATCH_OVERHEAD - 12 or delta < 0:
            raise FetchFramingError(f"batch at offset {base}: length {length}, last offset delta {delta}")
        last = base + delta
        if (self.first and last < self.next_offset) or (not self.first and base < self.next_offset):
            raise FetchFramingError(f"batch {base}..{last} out of order: expected offsets from {self.next_offset}")
        return 12 + length, last

    def take(self, last: int) -> None:
        """The batch whose header was checked last is whole."""
        self.first = False
        self.next_offset = last + 1
        self.batches += 1


def walk_batches(records: memoryview, fetch_offset: int) -> tuple[BatchWalk, int]:
    """Walk the batch headers of ``records``; (the walk, bytes of a partial last batch)."""
    walk = BatchWalk(fetch_offset)
    pos, end = 0, len(records)
    while pos + BATCH_OVERHEAD <= end:
        size, last = walk.header(records, pos)
        if pos + size > end:
            break
        walk.take(last)
        pos += size
    walk.bytes = pos
    return walk, end - pos


# -- the client --------------------------------------------------------------------------------------------------

def recv_exactly(sock: socket.socket, view: memoryview, n: int, peer: str = "the broker") -> None:
    """Receive exactly ``n`` bytes into ``view``; ConnectionError if ``peer`` closes first."""
    got = 0
    while got < n:
        k = sock.recv_into(view[got:n])
        if not k:
            raise ConnectionError(f"{peer} closed the connection after {got} of {n} bytes")
        got += k


def _receive_buffer(size: int) -> bytearray | mmap.mmap:
    """A receive buffer of ``size`` bytes. A large one is anonymous memory mapped with MAP_POPULATE: its pages are
    faulted in by one call, where a ``bytearray`` would also zero them with a memset; a small one is a bytearray."""
    if size <= STREAM_BUFFER or not hasattr(mmap, "MAP_POPULATE"):
        return bytearray(size)
    return mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | mmap.MAP_POPULATE)


class FetchClient:
    """One connection reading ``topic``-0 (see the module docstring)."""

    def __init__(self, address: str, topic: str, partition_max_bytes: int, *, stream: bool = False) -> None:
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.request = RequestTemplate(topic, partition_max_bytes)
        self.stream = stream
        # whole responses: a buffer as large as the largest response so far (KIP-74: one batch larger than the
        # fetch's limit comes whole), refused past twice the limit + 1 MiB
        self.max_response = 2 * partition_max_bytes + (1 << 20)
        self.buf: bytearray | mmap.mmap = bytearray(STREAM_BUFFER if stream else 0)
        self.size = bytearray(4)
        self.correlation = 0
        self.stats = FetchStats()

    def close(self) -> None:
        self.sock.close()
        self._free()

    def _free(self) -> None:
        if isinstance(self.buf, mmap.mmap):
            try:
                self.buf.close()
            except BufferError:         # a view of it is still held (an exception's frame): the GC frees it
                pass

    def fetch(self, offset: int) -> int:
        """One fetch at ``offset``; returns the next offset to fetch."""
        self.correlation += 1
        self.sock.sendall(self.request.patch(self.correlation, offset))
        recv_exactly(self.sock, memoryview(self.size), 4)
        size = _I32.unpack(self.size)[0]
        if size < 0:
            raise FetchFramingError(f"a response of size {size}")
        walk, partial = (self._stream(size, offset) if self.stream else self._whole(size, offset))
        self.stats.responses += 1
        self.stats.record_bytes += walk.bytes
        self.stats.batches += walk.batches
        self.stats.partial_bytes += partial
        return walk.next_offset

    def _whole(self, size: int, offset: int) -> tuple[BatchWalk, int]:
        if size > len(self.buf):
            if size > self.max_response:
                raise FetchFramingError(f"a response of {size} bytes, more than {self.max_response} (twice the "
                                        f"fetch's limit + 1 MiB)")
            self._free()
            self.buf = _receive_buffer(-(-size // (1 << 20)) << 20)     # whole MiB
        view = memoryview(self.buf)
        recv_exactly(self.sock, view, size)
        try:
            head = parse_head(view, size, self.correlation, self.request.topic)
        except _Short:
            raise FetchFramingError(f"the response ({size} bytes) ends before its records") from None
        end = head.records_at + head.records_size
        if end > size:
            raise FetchFramingError(f"records of {head.records_size} bytes overrun the {size}-byte response")
        walk, partial = walk_batches(view[head.records_at:end], offset)
        parse_tail(view, end, size)
        return walk, partial

    def _stream(self, size: int, offset: int) -> tuple[BatchWalk, int]:
        # The buffer holds the frame's bytes [base, base + fill).
        view, cap = memoryview(self.buf), len(self.buf)
        base, fill = 0, 0
        while True:                             # the head: tens of bytes unless aborted transactions are listed
            fill += self._recv_some(view, fill, min(cap, size))
            try:
                head = parse_head(view, fill, self.correlation, self.request.topic)
                break
            except _Short:
                if fill >= min(cap, size):
                    raise FetchFramingError(f"the response's head is larger than {min(cap, size)} bytes") from None
        records_end = head.records_at + head.records_size
        if records_end > size:
            raise FetchFramingError(f"records of {head.records_size} bytes overrun the {size}-byte response")
        walk = BatchWalk(offset)
        at = head.records_at                    # frame position of the next batch
        while at + BATCH_OVERHEAD <= records_end:
            if at + _HEAD.size > base + fill:   # its header is not all in the buffer: move on, receive more
                base, fill = self._slide(view, base, fill, at)
                fill += self._recv_some(view, fill, min(cap, size - base))
                continue
            batch, last = walk.header(view, at - base)
            if at + batch > records_end:
                break                           # a partial batch at the end: fetched again
            walk.take(last)
            at += batch
        walk.bytes = at - head.records_at
        base, fill = self._slide(view, base, fill, records_end)
        if size - base > cap:
            raise FetchFramingError(f"{size - records_end} bytes after the records")
        recv_exactly(self.sock, view[fill:], size - base - fill)
        parse_tail(view, 0, size - base)
        return walk, records_end - at

    def _recv_some(self, view: memoryview, fill: int, limit: int) -> int:
        k = self.sock.recv_into(view[fill:limit])
        if not k:
            raise ConnectionError("the broker closed the connection inside a response")
        return k

    def _slide(self, view: memoryview, base: int, fill: int, to: int) -> tuple[int, int]:
        """Make frame position ``to`` the buffer's start: keep the bytes from it on, or receive and drop the bytes
        before it (batch bodies, never read); returns the new (base, fill)."""
        if to < base + fill:
            keep = base + fill - to
            self.buf[0:keep] = self.buf[to - base:to - base + keep]
            return to, keep
        pos, cap = base + fill, len(view)
        while pos < to:
            k = self.sock.recv_into(view[:min(cap, to - pos)])
            if not k:
                raise ConnectionError(f"the broker closed the connection at byte {pos} of a response")
            pos += k
        return to, 0


def fetch_all(address: str, topic: str, end_offset: int, partition_max_bytes: int,
              *, stream: bool = False) -> FetchStats:
    """Fetch ``topic``-0 from offset 0 to ``end_offset`` with a :class:`FetchClient`."""
    client = FetchClient(address, topic, partition_max_bytes, stream=stream)
    try:
        offset = 0
        while offset < end_offset:
            offset = client.fetch(offset)
    finally:
        client.close()
    return client.stats
