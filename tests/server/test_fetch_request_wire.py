"""Fetch requests read by :mod:`storage_engine.server.handlers.fetch_request_wire` against kio (generated from
Kafka's ``FetchRequest.json``), every version 4-16: requests kio wrote decoded to the same values; damaged requests
refused by both, or read alike by both (but unknown tagged fields, which Kafka's readers skip and kio refuses)."""
from __future__ import annotations

import dataclasses
import datetime
import importlib
import io
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.index import load_request_schema
from kio.serial import entity_writer

from storage_engine.server import protocol
from storage_engine.server.handlers import SUPPORTED, fetch_request_wire

pytestmark = pytest.mark.unit

VERSIONS = range(4, 17)
names = st.text(st.characters(codec="utf-8"), min_size=1, max_size=20)
i32 = st.integers(-2**31, 2**31 - 1)
i64 = st.integers(-2**63, 2**63 - 1)
ids = st.one_of(st.just(uuid.UUID(int=0)), st.uuids())

partitions = st.fixed_dictionaries({
    "partition": i32, "current_leader_epoch": i32, "fetch_offset": i64, "last_fetched_epoch": i32,
    "log_start_offset": i64, "partition_max_bytes": i32})
requests = st.fixed_dictionaries({
    "replica_id": st.one_of(st.just(-1), i32), "replica_epoch": st.one_of(st.just(-1), i64),
    "max_wait": st.integers(0, 2**31 - 1), "min_bytes": i32, "max_bytes": i32,
    "isolation_level": st.integers(-128, 127), "session_id": i32, "session_epoch": i32,
    "topics": st.lists(st.fixed_dictionaries({"topic": names, "topic_id": ids,
                                              "partitions": st.lists(partitions, max_size=3)}), max_size=3),
    "forgotten": st.lists(st.fixed_dictionaries({"topic": names, "topic_id": ids,
                                                 "partitions": st.lists(i32, max_size=4)}), max_size=2),
    "rack_id": st.one_of(st.just(""), names), "cluster_id": st.one_of(st.none(), names)})


def _only(cls: type, values: dict[str, Any]) -> dict[str, Any]:
    """The values of the fields ``cls`` (one version's kio class) has."""
    fields = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in values.items() if k in fields}


def _kio_request(version: int, correlation: int, client_id: str | None, body: dict[str, Any]) -> bytearray:
    cls: Any = load_request_schema(1, version)
    mod = importlib.import_module(cls.__module__)
    topic_key = "topic_id" if version >= 13 else "topic"
    topics = tuple(mod.FetchTopic(**{topic_key: t[topic_key]}, partitions=tuple(
        mod.FetchPartition(**_only(mod.FetchPartition, p)) for p in t["partitions"])) for t in body["topics"])
    values: dict[str, Any] = dict(body, max_wait=datetime.timedelta(milliseconds=body["max_wait"]), topics=topics)
    if version >= 7:
        values["forgotten_topics_data"] = tuple(mod.ForgottenTopic(**{topic_key: f[topic_key]},
                                                                   partitions=tuple(f["partitions"]))
                                                for f in body["forgotten"])
    if version >= 15:
        values["replica_state"] = mod.ReplicaState(replica_id=body["replica_id"],
                                                   replica_epoch=body["replica_epoch"])
    request = cls(**_only(cls, values))
    header = cls.__header_schema__(request_api_key=1, request_api_version=version, correlation_id=correlation,
                                   client_id=client_id)
    out = io.BytesIO()
    entity_writer(type(header))(out, header)
    entity_writer(cls)(out, request)
    return bytearray(out.getvalue())


def _kio_decode(frame: bytearray) -> protocol.Request:
    """The request as kio reads it (the direct decoder left out of ``decode_request``)."""
    saved = protocol.DIRECT_DECODERS.pop(1, None)
    try:
        return protocol.decode_request(frame, SUPPORTED)
    finally:
        if saved is not None:
            protocol.DIRECT_DECODERS[1] = saved


def _id(value: Any) -> Any:
    return None if value is None or value == uuid.UUID(int=0) else value


def _values(request: protocol.Request, *, kio: bool) -> tuple[Any, ...]:
    """Every field of a decoded request, as kio's class of that version names it (kio's fields a version lacks
    are the direct reader's defaults, which must be Kafka's)."""
    version, body = request.api_version, request.body
    by_id = version >= 13
    defaults = {"current_leader_epoch": -1, "last_fetched_epoch": -1, "log_start_offset": -1}
    if kio:
        replica = ((int(body.replica_state.replica_id), int(body.replica_state.replica_epoch)) if version >= 15
                   else (int(body.replica_id), -1))
        session = (int(body.session_id), int(body.session_epoch)) if version >= 7 else (0, -1)
        forgotten = body.forgotten_topics_data if version >= 7 else ()
        rack = body.rack_id if version >= 11 else ""
        cluster = body.cluster_id if version >= 12 else None
    else:
        replica = (body.replica_state.replica_id, body.replica_state.replica_epoch)
        session, forgotten = (body.session_id, body.session_epoch), body.forgotten_topics_data
        rack, cluster = body.rack_id, body.cluster_id
        for t in (*body.topics, *forgotten):   # the field of the other versions is None
            assert (t.topic if by_id else t.topic_id) is None
    return (request.api_key, version, request.correlation_id, request.client_id, replica, body.max_wait,
            int(body.min_bytes), int(body.max_bytes), int(body.isolation_level), session,
            tuple((_id(t.topic_id) if by_id else t.topic,
                   tuple((int(p.partition), int(getattr(p, "current_leader_epoch", -1)), int(p.fetch_offset),
                          int(getattr(p, "last_fetched_epoch", -1)), int(getattr(p, "log_start_offset", -1)),
                          int(p.partition_max_bytes)) for p in t.partitions)) for t in body.topics),
            tuple((_id(f.topic_id) if by_id else f.topic, tuple(int(p) for p in f.partitions)) for f in forgotten),
            rack, cluster, defaults)


@pytest.mark.parametrize("version", VERSIONS)
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(body=requests, correlation=i32, client_id=st.one_of(st.none(), names))
def test_requests_read_as_kio_reads_them(version, body, correlation, client_id):
    frame = _kio_request(version, correlation, client_id, body)
    ours = fetch_request_wire.decode_request(frame)
    assert _values(ours, kio=False) == _values(_kio_decode(frame), kio=True)
    assert protocol.decode_request(frame, SUPPORTED).body == ours.body     # decode_request takes this decoder
    assert ours.size == len(frame)


@pytest.mark.parametrize("version", VERSIONS)
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(body=requests, data=st.data())
def test_damaged_requests_are_refused_or_read_as_kio_reads_them(version, body, data):
    frame = _kio_request(version, 7, "c", body)
    cut = data.draw(st.one_of(st.just(len(frame)), st.integers(0, len(frame))))   # half only flipped
    flips = data.draw(st.lists(st.tuples(st.integers(8, max(8, len(frame) - 1)), st.integers(0, 255)), max_size=3))
    damaged = frame[:cut]
    for pos, value in flips:
        if pos < len(damaged):
            damaged[pos] = value
    try:
        kio = _values(_kio_decode(damaged), kio=True)
    except protocol.MalformedRequest as exc:
        if "Unknown tagged field" in str(exc):    # kio refuses what Kafka skips (see the test below)
            return
        kio = None
    try:
        ours = _values(fetch_request_wire.decode_request(damaged), kio=False)
    except protocol.MalformedRequest:
        ours = None
    assert ours == kio


def _simple(version: int) -> bytearray:
    return _kio_request(version, 1, "c", {
        "replica_id": -1, "replica_epoch": -1, "max_wait": 500, "min_bytes": 1, "max_bytes": 1 << 20,
        "isolation_level": 0, "session_id": 0, "session_epoch": -1, "rack_id": "", "cluster_id": None,
        "topics": [{"topic": "t", "topic_id": uuid.UUID(int=7), "partitions": [
            {"partition": 0, "current_leader_epoch": -1, "fetch_offset": 42, "last_fetched_epoch": -1,
             "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}], "forgotten": []})


UNKNOWN = b"\x05\x03abc"                                    # a tagged field: tag 5, 3 bytes
REPLICA_STATE = b"\x01\x0d" + (3).to_bytes(4, "big") + (9).to_bytes(8, "big") + b"\x00"   # tag 1, 13 bytes
CLUSTER_ID = b"\x00\x02\x02x"                                # tag 0, 2 bytes: the compact string "x"


def _tags(*fields: bytes) -> bytes:
    return bytes([len(fields)]) + b"".join(fields)


def _v16_with_tags(partition: bytes, topic: bytes, request: bytes) -> bytearray:
    """``_simple(16)`` with these tagged fields (a count, then the fields) in its partition, topic and request."""
    frame = _simple(16)
    assert frame.endswith(b"\x00\x00\x01\x01\x00")   # partition, topic tags; forgotten []; rack ""; request tags
    return frame[:-5] + partition + topic + b"\x01\x01" + request


def test_unknown_tagged_fields_are_skipped_and_known_ones_read():
    plain = fetch_request_wire.decode_request(_simple(16)).body
    assert plain.replica_state == fetch_request_wire.ReplicaState(-1, -1) and plain.cluster_id is None
    tagged = _v16_with_tags(_tags(UNKNOWN), _tags(UNKNOWN), _tags(UNKNOWN, REPLICA_STATE, CLUSTER_ID))
    ours = fetch_request_wire.decode_request(tagged).body
    assert ours == dataclasses.replace(plain, replica_state=fetch_request_wire.ReplicaState(3, 9), cluster_id="x")
    # Kafka's generated readers keep unknown tagged fields aside and read on; kio refuses them (the connection was
    # closed before this reader)
    with pytest.raises(protocol.MalformedRequest, match="Unknown tagged field tag: 5"):
        _kio_decode(_v16_with_tags(_tags(UNKNOWN), _tags(), _tags()))
    assert fetch_request_wire.decode_request(_v16_with_tags(_tags(UNKNOWN), _tags(), _tags())).body == plain
    # the known ones as kio reads them
    known = _v16_with_tags(_tags(), _tags(), _tags(CLUSTER_ID, REPLICA_STATE))
    assert _values(fetch_request_wire.decode_request(known), kio=False) == _values(_kio_decode(known), kio=True)
    assert _kio_decode(known).body.replica_state.replica_id == 3


def test_a_known_tagged_field_that_does_not_fit_its_size_is_refused():
    short = b"\x01\x04" + REPLICA_STATE[2:]     # the replica state (13 bytes) said to be 4 bytes long
    with pytest.raises(protocol.MalformedRequest, match="Fetch: 12 bytes of fixed fields past the end"):
        fetch_request_wire.decode_request(_v16_with_tags(_tags(), _tags(), _tags(short)))
    past = b"\x01\x7f" + REPLICA_STATE[2:]      # 127 bytes said, 13 there
    with pytest.raises(protocol.MalformedRequest, match="Fetch: a tagged field of 127 bytes with 13 left"):
        fetch_request_wire.decode_request(_v16_with_tags(_tags(), _tags(), _tags(past)))


def test_a_huge_array_count_is_refused_before_anything_is_built():
    frame = _simple(4)
    # v4 ends with the topics array: its count sits 4 bytes after the fixed fields
    start = 8 + 2 + 1 + 4 + 4 + 4 + 4 + 1        # header, client id "c", replica id, limits, isolation
    huge = frame[:start] + (2**31 - 1).to_bytes(4, "big") + frame[start + 4:]
    with pytest.raises(protocol.MalformedRequest, match="array of 2147483647 elements"):
        fetch_request_wire.decode_request(huge)
    with pytest.raises(protocol.MalformedRequest):
        _kio_decode(huge)
