"""Produce requests and responses of :mod:`storage_engine.server.handlers.produce_wire` against kio (generated from
Kafka's ``ProduceRequest.json`` / ``ProduceResponse.json``), every version 3-11: responses byte for byte; requests
kio wrote decoded to the same values; damaged requests refused by both, or read alike by both (but unknown tagged fields, which Kafka's readers skip and
kio refuses)."""
from __future__ import annotations

import datetime
import importlib
import io
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.index import load_request_schema
from kio.serial import entity_writer

from storage_engine.server import protocol
from storage_engine.server.errors import ErrorCode
from storage_engine.server.handlers import SUPPORTED, produce_wire

pytestmark = pytest.mark.unit

VERSIONS = range(3, 12)
names = st.text(st.characters(codec="utf-8"), min_size=1, max_size=20)
codes = st.sampled_from([c for c in ErrorCode if c.value < 120][:40])


def _partition_response() -> Any:
    """A partition's answer as handlers give it (``record_errors`` is always there: v8 has no default)."""
    return st.fixed_dictionaries(
        {"index": st.integers(-2**31, 2**31 - 1), "error_code": codes,
         "base_offset": st.integers(-1, 2**63 - 1),
         "record_errors": st.lists(st.fixed_dictionaries(
             {"batch_index": st.integers(0, 2**31 - 1)},
             optional={"batch_index_error_message": st.one_of(st.none(), names)}), max_size=3)},
        optional={"log_append_time": st.one_of(st.none(), st.just(-1), st.integers(0, 2**41)),
                  "log_start_offset": st.integers(-1, 2**63 - 1),
                  "error_message": st.one_of(st.none(), names)})


responses = st.fixed_dictionaries(
    {"responses": st.lists(st.fixed_dictionaries({"name": names, "partition_responses": st.lists(
        _partition_response(), max_size=4)}), max_size=4)},
    optional={"throttle_time": st.integers(0, 2**31 - 1)})


def _kio_response(version: int, request: protocol.Request, response: dict[str, Any]) -> bytes:
    return protocol.encode_response(request, protocol.build(protocol.response_class(0, version), response))


@pytest.mark.parametrize("version", VERSIONS)
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(response=responses, correlation=st.integers(-2**31, 2**31 - 1))
def test_responses_are_kios_bytes(version, response, correlation):
    request = protocol.Request(0, version, correlation, "client", None, 0)
    assert produce_wire.encodable(response)
    ours = protocol.frame_encoded_bytes(request, produce_wire.encode_response(version, response))
    assert ours == _kio_response(version, request, response)


def test_a_response_with_a_tagged_field_is_left_to_kio():
    part = {"index": 0, "error_code": ErrorCode.not_leader_or_follower, "base_offset": -1,
            "current_leader": {"leader_id": 1, "leader_epoch": 2}}
    assert not produce_wire.encodable({"responses": ({"name": "t", "partition_responses": (part,)},)})
    assert not produce_wire.encodable({"responses": (), "node_endpoints": ({"node_id": 1, "host": "h", "port": 1},)})
    assert produce_wire.encodable({"responses": (), "node_endpoints": ()})


def test_a_response_with_a_wrong_key_is_left_to_kio_which_names_it():
    for wrong in ({"index": 0, "base_offset": 5, "record_errors": ()},                     # no error code
                  {"index": 0, "error_code": 0, "base_offset": 5, "log_start_ofset": 0, "record_errors": ()}):
        response = {"responses": ({"name": "t", "partition_responses": (wrong,)},), "throttle_time": 0}
        assert not produce_wire.encodable(response)
        with pytest.raises(protocol.BuildError):
            protocol.build(protocol.response_class(0, 9), response)
    assert not produce_wire.encodable({"responses": (), "throttle_tme": 0})


# -- requests ------------------------------------------------------------------------------------------------------

def _kio_request(version: int, correlation: int, client_id: str | None, body: dict[str, Any]) -> bytearray:
    cls: Any = load_request_schema(0, version)
    mod = importlib.import_module(cls.__module__)
    header = cls.__header_schema__(request_api_key=0, request_api_version=version, correlation_id=correlation,
                                   client_id=client_id)
    request = cls(transactional_id=body["transactional_id"], acks=body["acks"],
                  timeout=datetime.timedelta(milliseconds=body["timeout"]),
                  topic_data=tuple(mod.TopicProduceData(name=t["name"], partition_data=tuple(
                      mod.PartitionProduceData(index=p["index"], records=p["records"]) for p in t["partitions"]))
                      for t in body["topics"]))
    out = io.BytesIO()
    entity_writer(type(header))(out, header)
    entity_writer(cls)(out, request)
    return bytearray(out.getvalue())


requests = st.fixed_dictionaries({
    "transactional_id": st.one_of(st.none(), names), "acks": st.sampled_from([-1, 0, 1, 2, -7]),
    "timeout": st.integers(0, 2**31 - 1),
    "topics": st.lists(st.fixed_dictionaries({"name": names, "partitions": st.lists(st.fixed_dictionaries(
        {"index": st.integers(-2**31, 2**31 - 1), "records": st.one_of(st.none(), st.binary(max_size=300))}),
        max_size=3)}), max_size=3)})


def _values(request: protocol.Request) -> tuple[Any, ...]:
    """What the Produce handler reads of a decoded request, whichever decoder made it."""
    body = request.body
    timeout = body.timeout
    if isinstance(timeout, datetime.timedelta):
        timeout = round(timeout.total_seconds() * 1000)
    return (request.api_version, request.correlation_id, request.client_id, body.transactional_id, int(body.acks),
            timeout, tuple((t.name, tuple((int(p.index), None if p.records is None else bytes(p.records))
                                          for p in t.partition_data)) for t in body.topic_data))


def _kio_decode(frame: bytearray) -> protocol.Request:
    """The request as kio reads it (the Produce decoder left out of ``decode_request``)."""
    saved = protocol.DIRECT_DECODERS.pop(0, None)
    try:
        return protocol.decode_request(frame, SUPPORTED)
    finally:
        if saved is not None:
            protocol.DIRECT_DECODERS[0] = saved


@pytest.mark.parametrize("version", VERSIONS)
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(body=requests, correlation=st.integers(-2**31, 2**31 - 1), client_id=st.one_of(st.none(), names))
def test_requests_read_as_kio_reads_them(version, body, correlation, client_id):
    frame = _kio_request(version, correlation, client_id, body)
    ours = produce_wire.decode_request(frame)
    assert _values(ours) == _values(_kio_decode(frame))
    assert protocol.decode_request(frame, SUPPORTED).body == ours.body     # decode_request takes this decoder
    assert ours.size == len(frame)


@pytest.mark.parametrize("version", VERSIONS)
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(body=requests, data=st.data())
def test_damaged_requests_are_refused_or_read_as_kio_reads_them(version, body, data):
    frame = _kio_request(version, 7, "c", body)
    cut = data.draw(st.integers(0, len(frame)))
    flips = data.draw(st.lists(st.tuples(st.integers(8, max(8, len(frame) - 1)), st.integers(0, 255)), max_size=3))
    damaged = frame[:cut]
    for pos, value in flips:
        if pos < len(damaged):
            damaged[pos] = value
    try:
        kio = _values(_kio_decode(damaged))
    except protocol.MalformedRequest as exc:
        if "Unknown tagged field" in str(exc):    # kio refuses what Kafka skips (see the test below)
            return
        kio = None
    try:
        ours = _values(produce_wire.decode_request(damaged))
    except protocol.MalformedRequest:
        ours = None
    assert ours == kio


def test_unknown_tagged_fields_are_skipped_and_records_are_a_view_of_the_frame():
    body = {"transactional_id": None, "acks": -1, "timeout": 30000,
            "topics": [{"name": "t", "partitions": [{"index": 0, "records": b"r" * 200}]}]}
    frame = _kio_request(9, 1, "c", body)
    assert frame.endswith(b"r" * 200 + b"\x00\x00\x00")     # partition, topic and request tags, all empty
    # one tagged field (tag 5, 3 bytes) in each of the partition, the topic and the request
    tagged = frame[:-3] + b"\x01\x05\x03abc" * 3
    assert _values(produce_wire.decode_request(tagged))[3:] == (None, -1, 30000, (("t", ((0, b"r" * 200),)),))
    # Kafka's generated readers keep unknown tagged fields aside and read on; kio refuses them (the connection was
    # closed before this decoder)
    with pytest.raises(protocol.MalformedRequest, match="Unknown tagged field tag: 5"):
        _kio_decode(tagged)
    records = produce_wire.decode_request(tagged).body.topic_data[0].partition_data[0].records
    assert isinstance(records, memoryview) and records.obj is tagged


def test_a_huge_array_count_is_refused_before_anything_is_built():
    frame = _kio_request(3, 1, "c", {"transactional_id": None, "acks": 1, "timeout": 1, "topics": []})
    huge = frame[:-4] + (2**31 - 1).to_bytes(4, "big")
    with pytest.raises(protocol.MalformedRequest, match="array of 2147483647 elements"):
        produce_wire.decode_request(huge)
    with pytest.raises(protocol.MalformedRequest):
        _kio_decode(huge)


# -- the append from the frame -------------------------------------------------------------------------------------

def test_an_append_in_place_writes_what_an_append_of_a_copy_writes(tmp_path):
    from storage_engine.config_file import config_from_mapping
    from storage_engine.log.manager import LogManager
    from storage_engine.record.record_batch import build_batch
    from storage_engine.record.records import SimpleRecord

    batches = [build_batch([SimpleRecord(b"k%d" % i, b"v" * i, 1000 + i) for i in range(n)]) for n in (1, 5, 40)]
    mgr = LogManager.open(config_from_mapping({"broker": {"log.dirs": [str(tmp_path)]}, "topics": {
        name: {"message.timestamp.type": "LogAppendTime"} for name in ("copied-append-time", "in-place-append-time")}}))
    try:
        check_in_place(mgr, "copied", "in-place", batches)
        check_in_place(mgr, "copied-append-time", "in-place-append-time", batches)    # CRC redone in the frame
        log = mgr.get_log("in-place-append-time", 0)
        assert log is not None and log.config.message_timestamp_type == "LogAppendTime"
    finally:
        mgr.close()


def check_in_place(mgr: Any, copied_topic: str, in_place_topic: str, batches: list[bytes]) -> None:
    """Append ``batches`` to one log from bytes and to another in place from views inside frames: the same records
    (offsets, keys, values) read back, every written batch valid, the frame around a view untouched."""
    from storage_engine.segment.file_records import iter_batches

    copied, in_place = mgr.get_or_create_log(copied_topic, 0), mgr.get_or_create_log(in_place_topic, 0)
    for batch in batches:
        frame = bytearray(b"header" + batch + b"\x00")        # the records are a view inside a frame
        view = memoryview(frame)[6:6 + len(batch)]
        a, b = copied.append_batches(batch), in_place.append_batches(view, in_place=True)
        assert (a.first_offset, a.last_offset, a.count, a.bytes) == (b.first_offset, b.last_offset, b.count,
                                                                     b.bytes)
        assert bytes(view) != batch or a.first_offset == 0     # offsets assigned in the frame itself
        assert frame[:6] == b"header" and frame[-1:] == b"\x00"
    with pytest.raises(TypeError, match="writable buffer"):
        in_place.append_batches(batches[0], in_place=True)
    read = []
    for log in (copied, in_place):
        fetched = log.read(0, 10**6)
        assert fetched is not None
        read.append([(r.offset, r.key, r.value) for b in iter_batches(fetched.data) for r in b.records()])
        assert all(b.is_valid() for b in iter_batches(fetched.data))
    assert read[0] == read[1] and len(read[0]) == 46
