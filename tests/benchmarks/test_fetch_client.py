"""The wire benchmark's lean Fetch client (benchmarks/fetch_client.py): its request is kio's encoding with the
offset and correlation id patched, and it reads responses that kio encodes (tagged fields, aborted transactions,
partial last batches) whole and streamed through a small buffer cut at every position, over a real loopback
socket; a response that is not what was asked for, or whose framing is broken, fails naming what was wrong."""
from __future__ import annotations

import contextlib
import dataclasses
import datetime
import io
import socket
import struct
import threading
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.fetch.v12.response import (AbortedTransaction, EpochEndOffset, FetchableTopicResponse, FetchResponse,
                                           LeaderIdAndEpoch, PartitionData)
from kio.schema.types import BrokerId, ProducerId, TopicName
from kio.serial import entity_writer
from kio.static.primitive import Records, i8, i16, i32, i32Timedelta, i64

from benchmarks import fetch_client
from storage_engine.record.record_batch import build_batch
from storage_engine.record.records import SimpleRecord

TOPIC = "lean-fetch"


def _kio_request(correlation_id: int, offset: int, max_bytes: int) -> bytes:
    header_cls = FetchRequest.__header_schema__
    out = io.BytesIO()
    entity_writer(header_cls)(out, header_cls(request_api_key=FetchRequest.__api_key__, request_api_version=i16(12),
                                              correlation_id=i32(correlation_id), client_id="bench"))
    entity_writer(FetchRequest)(out, FetchRequest(
        max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=500)), min_bytes=i32(1), max_bytes=i32(max_bytes),
        isolation_level=i8(0), session_id=i32(0), session_epoch=i32(-1), forgotten_topics_data=(), rack_id="",
        topics=(FetchTopic(topic=TopicName(TOPIC), partitions=(FetchPartition(
            partition=i32(0), fetch_offset=i64(offset), partition_max_bytes=i32(max_bytes)),)),)))
    body = out.getvalue()
    return struct.pack(">i", len(body)) + body


@pytest.mark.unit
@given(st.integers(0, 2**31 - 1), st.integers(0, 2**63 - 1), st.sampled_from([1 << 20, 64 << 20]))
def test_the_patched_request_is_kios_encoding(correlation_id, offset, max_bytes):
    template = fetch_client.RequestTemplate(TOPIC, max_bytes)
    template.patch(7, 12345)                         # a previous fetch's values are overwritten
    assert bytes(template.patch(correlation_id, offset)) == _kio_request(correlation_id, offset, max_bytes)


def _batches(base: int, count: int, records_each: int) -> list[bytes]:
    out = []
    for i in range(count):
        batch = bytearray(build_batch([SimpleRecord(b"k%d" % j, b"v" * (50 + i)) for j in range(records_each)]))
        struct.pack_into(">q", batch, 0, base + i * records_each)
        out.append(bytes(batch))
    return out


def _response(correlation_id: int, records: bytes | None, *, tagged: bool = False, aborted: int = 0,
              error: ErrorCode = ErrorCode.none, topic: str = TOPIC, extra: bytes = b"") -> bytes:
    part = PartitionData(
        partition_index=i32(0), error_code=error, high_watermark=i64(10_000), last_stable_offset=i64(10_000),
        log_start_offset=i64(0), aborted_transactions=tuple(
            AbortedTransaction(producer_id=ProducerId(i), first_offset=i64(i)) for i in range(aborted)),
        preferred_read_replica=BrokerId(-1), records=None if records is None else Records(records))
    if tagged:      # written as tagged fields, which the client skips
        part = dataclasses.replace(part, diverging_epoch=EpochEndOffset(epoch=i32(3), end_offset=i64(99)),
                                   current_leader=LeaderIdAndEpoch(leader_id=BrokerId(1), leader_epoch=i32(4)))
    out = io.BytesIO()
    header_cls = FetchResponse.__header_schema__
    entity_writer(header_cls)(out, header_cls(correlation_id=i32(correlation_id)))
    entity_writer(FetchResponse)(out, FetchResponse(
        throttle_time=i32Timedelta.parse(datetime.timedelta(0)), error_code=ErrorCode.none, session_id=i32(0),
        responses=(FetchableTopicResponse(topic=TopicName(topic), partitions=(part,)),)))
    body = out.getvalue() + extra
    return struct.pack(">i", len(body)) + body


class _Server:
    """A loopback listener answering each Fetch frame with the next prepared response (its correlation id set to
    the request's unless ``keep_id``), checking the request asks for the offsets expected."""

    def __init__(self, responses: list[bytes], offsets: list[int], keep_id: bool = False) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = "127.0.0.1:%d" % self.listener.getsockname()[1]
        self.responses, self.offsets, self.keep_id = responses, offsets, keep_id
        self.asked: list[int] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        conn, _ = self.listener.accept()
        with conn, contextlib.suppress(ConnectionError):     # a client that refused a response closes early
            for response in self.responses:
                size = struct.unpack(">i", _read(conn, 4))[0]
                request = _read(conn, size)
                correlation_id = struct.unpack_from(">i", request, 4)[0]
                at = request.index(TOPIC.encode()) + len(TOPIC) + 1 + 4 + 4    # partitions, partition, leader epoch
                self.asked.append(struct.unpack_from(">q", request, at)[0])
                frame = bytearray(response)
                if not self.keep_id:
                    struct.pack_into(">i", frame, 4, correlation_id)
                conn.sendall(frame)

    def close(self) -> None:
        self.thread.join(10)
        self.listener.close()


def _read(conn: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            raise ConnectionError("client closed")
        data += chunk
    return data


def _run(responses: list[bytes], offsets: list[int], *, stream: bool, buffer: int = 1 << 20,
         keep_id: bool = False, max_bytes: int = 1 << 20) -> tuple[list[int], fetch_client.FetchStats, list[int]]:
    server = _Server(responses, offsets, keep_id)
    client = fetch_client.FetchClient(server.address, TOPIC, max_bytes, stream=stream)
    if stream:
        client.buf = bytearray(buffer)
    nexts = []
    try:
        for offset in offsets:
            nexts.append(client.fetch(offset))
    finally:
        client.close()
        server.close()
    return nexts, client.stats, server.asked


@pytest.mark.unit
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(count=st.integers(1, 4), records_each=st.integers(1, 3), partial=st.integers(0, 70), tagged=st.booleans(),
       aborted=st.integers(0, 2), stream=st.booleans(), buffer=st.integers(160, 400))
def test_responses_are_read_whole_and_streamed_through_any_buffer(count, records_each, partial, tagged, aborted,
                                                                  stream, buffer):
    batches = _batches(100, count, records_each)
    whole = b"".join(batches)
    cut = _batches(100 + count * records_each, 1, 1)[0][:partial]       # a partial batch at the end (KIP-74)
    responses = [_response(1, whole + cut, tagged=tagged, aborted=aborted), _response(2, None)]
    first = 100 + records_each - 1                                       # inside the first batch
    nexts, stats, asked = _run(responses, [first, 100 + count * records_each], stream=stream, buffer=buffer)
    assert nexts == [100 + count * records_each] * 2                     # the empty answer leaves the offset
    assert asked == [first, 100 + count * records_each]
    assert (stats.responses, stats.batches, stats.record_bytes, stats.partial_bytes) == (2, count, len(whole), partial)


def _fails(response: bytes, offset: int, match: str, **kw: Any) -> None:
    for stream in (False, True):
        with pytest.raises(fetch_client.FetchFramingError, match=match):
            _run([response], [offset], stream=stream, **kw)


@pytest.mark.unit
def test_a_response_that_is_not_what_was_asked_for_fails_naming_it():
    batches = _batches(0, 3, 2)
    _fails(_response(99, b"".join(batches)), 0, "correlation id 99, expected 1", keep_id=True)
    _fails(_response(1, b"", error=ErrorCode.offset_out_of_range), 0, "partition 0 error code 1")
    _fails(_response(1, b"", topic="other"), 0, "topic b'other'")
    _fails(_response(1, b"".join(batches)), 2 * 3, "batch 0..1 out of order")       # not holding the offset
    _fails(_response(1, batches[1] + batches[0]), 2, "batch 0..1 out of order: expected offsets from 4")
    _fails(_response(1, b"".join(batches), extra=b"\0\0"), 0, "2 bytes after the response's last field")
    bad = bytearray(batches[0])
    bad[16] = 1
    _fails(_response(1, bytes(bad)), 0, "magic 1, expected 2")


@pytest.mark.unit
def test_a_batch_larger_than_the_fetch_limit_is_read_whole_up_to_twice_the_limit_plus_a_mib():
    """KIP-74: a first batch larger than the fetch's limit comes whole; the whole-response buffer grows for it."""
    big = bytearray(build_batch([SimpleRecord(b"k", b"v" * 600_000)]))
    response = _response(1, bytes(big))
    for stream in (False, True):
        nexts, stats, _ = _run([response], [0], stream=stream, max_bytes=1000)
        assert nexts == [1] and stats.record_bytes == len(big)
    huge = bytes(build_batch([SimpleRecord(b"k", b"v" * ((1 << 20) + 10_000))]))
    with pytest.raises(fetch_client.FetchFramingError, match="more than 1050576 .twice the fetch's limit"):
        _run([_response(1, huge)], [0], stream=False, max_bytes=1000)
