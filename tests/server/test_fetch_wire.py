"""The broker's own Fetch response encoder and the compiled length check, held to kio and to the reference walk.

- :mod:`storage_engine.server.handlers.fetch_wire` writes, for every Fetch version 4-16, byte for byte what kio
  (generated from Kafka's ``FetchResponse.json``) writes for the same values: hypothesis draws the responses (topics
  by name and id, partitions with any error code and offsets, aborted transactions or null, records null, empty,
  small, large or a file slice, the tagged fields set or default, node endpoints in v16). A file slice stays a part
  of its own (never read into the response) and large bytes are not copied.
- :func:`storage_engine.server.frame_check.check_lengths` (the walk compiled per message class) accepts and refuses
  exactly what the reference walk does, with the same message, on valid requests of every served API and version
  and on their mutations: fields rewritten as the structured fuzz rewrites them (counts and lengths null, huge, off
  by one), bytes overwritten, frames cut short.
"""
from __future__ import annotations

import datetime
import io
import os
import random
import struct
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage_engine.segment.file_slice import FileSlice
from storage_engine.server import frame_check, protocol
from storage_engine.server.handlers import SUPPORTED, fetch_request_wire, fetch_wire
from tests.server import fuzz_structured, wire

pytestmark = pytest.mark.unit

PROPERTY = settings(deadline=None, max_examples=40, suppress_health_check=[HealthCheck.too_slow,
                                                                            HealthCheck.function_scoped_fixture])
FETCH_VERSIONS = range(fetch_wire.MIN_VERSION, fetch_wire.MAX_VERSION + 1)
I32 = st.integers(-2 ** 31, 2 ** 31 - 1)
I64 = st.integers(-2 ** 63, 2 ** 63 - 1)
ERRORS = st.sampled_from([0, 1, 3, 6, 29, 70, 71, 100, 106, -1])


@pytest.fixture(scope="module")
def segment(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("fetch-wire") / "00000000000000000000.log"
    path.write_bytes(random.Random(7).randbytes(200_000))
    return str(path)


def _records() -> st.SearchStrategy[Any]:
    def a_slice(at: tuple[int, int]) -> Any:
        return ("slice", at)
    return st.one_of(st.none(), st.just(b""), st.binary(max_size=300),
                     st.integers(fetch_wire.LARGE, fetch_wire.LARGE + 5000).map(lambda n: b"L" * n),
                     st.tuples(st.integers(0, 100_000), st.integers(1, 90_000)).map(a_slice))


def _tagged(fields: tuple[tuple[str, Any], ...]) -> st.SearchStrategy[Any]:
    return st.one_of(st.fixed_dictionaries({name: kind for name, kind in fields}),
                     st.just({name: -1 for name, _ in fields}))


def _partition() -> st.SearchStrategy[dict[str, Any]]:
    aborted = st.one_of(st.none(), st.lists(st.fixed_dictionaries({"producer_id": I64, "first_offset": I64}),
                                            max_size=3).map(tuple))
    return st.fixed_dictionaries({
        "partition_index": I32, "error_code": ERRORS, "high_watermark": I64, "last_stable_offset": I64,
        "log_start_offset": I64, "aborted_transactions": aborted, "records": _records(),
        "preferred_read_replica": I32,
    }, optional={
        "diverging_epoch": _tagged((("epoch", I32), ("end_offset", I64))),
        "current_leader": _tagged((("leader_id", I32), ("leader_epoch", I32))),
        "snapshot_id": _tagged((("end_offset", I64), ("epoch", I32))),
    })


def _response(version: int) -> st.SearchStrategy[dict[str, Any]]:
    topic = st.fixed_dictionaries({
        "topic": st.text(max_size=20), "topic_id": st.uuids(),
        "partitions": st.lists(_partition(), max_size=4).map(tuple)})
    endpoint = st.fixed_dictionaries({"node_id": I32, "host": st.text(max_size=10), "port": I32},
                                     optional={"rack": st.one_of(st.none(), st.text(max_size=5))})
    optional = {"node_endpoints": st.lists(endpoint, max_size=2).map(tuple)} if version >= 16 else {}
    return st.fixed_dictionaries({"throttle_time": st.integers(0, 2 ** 31 - 1), "error_code": ERRORS,
                                  "session_id": I32, "responses": st.lists(topic, max_size=3).map(tuple)},
                                 optional=optional)


def _with_slices(response: dict[str, Any], path: str) -> list[FileSlice]:
    """Replace each ("slice", (position, length)) by a file slice of the segment; the slices made."""
    made = []
    for topic in response["responses"]:
        for part in topic["partitions"]:
            records = part["records"]
            if isinstance(records, tuple):
                fd = os.open(path, os.O_RDONLY)
                position, length = records[1]
                part["records"] = FileSlice(fd, position, length, path)
                made.append(part["records"])
    return made


def _kio_bytes(request: protocol.Request, response: dict[str, Any]) -> bytes:
    return protocol.encode_response(request, protocol.build(protocol.response_class(1, request.api_version),
                                                            response))


def _bytes(parts: list[Any]) -> bytes:
    return b"".join(bytes(p) for p in parts)


@pytest.mark.parametrize("version", FETCH_VERSIONS)
@PROPERTY
@given(data=st.data())
def test_every_fetch_version_is_kios_bytes(segment, version, data):
    response = data.draw(_response(version))
    slices = _with_slices(response, segment)
    try:
        request = protocol.Request(1, version, data.draw(I32), "client", None, 0)
        ours = protocol.frame_encoded(request, fetch_wire.encode(version, response))
        # the file slices are parts of their own, in order, never read into the response; large bytes not copied
        assert [p for p in ours if isinstance(p, FileSlice)] == slices
        large = [part["records"] for t in response["responses"] for part in t["partitions"]
                 if isinstance(part["records"], bytes) and len(part["records"]) >= fetch_wire.LARGE]
        assert [p for p in ours if isinstance(p, bytes) and len(p) >= fetch_wire.LARGE and p in large] == large
        assert all(any(p is big for p in ours) for big in large)
        assert _bytes(ours) == _kio_bytes(request, response)
    finally:
        for s in slices:
            s.close()


def test_a_fetch_of_one_big_slice_is_header_slice_tail(segment):
    """The shape the connection sends with sendfile: one small head (size, header, fields), the slice, and in the
    flexible versions a tail of tagged fields."""
    fd = os.open(segment, os.O_RDONLY)
    piece = FileSlice(fd, 100, 150_000, segment)
    try:
        for version in (4, 11, 12, 16):
            response: Any = {"throttle_time": 0, "error_code": 0, "session_id": 0, "responses": (
                {"topic": "wire-fetch", "topic_id": uuid.uuid4(), "partitions": (
                    {"partition_index": 0, "error_code": 0, "high_watermark": 10, "last_stable_offset": 10,
                     "log_start_offset": 0, "aborted_transactions": None, "records": piece},)},)}
            request = protocol.Request(1, version, 5, "client", None, 0)
            parts = protocol.frame_encoded(request, fetch_wire.encode(version, response))
            tail = [bytearray] if version >= 12 else []     # the tagged fields after the records (flexible versions)
            assert [type(p) for p in parts] == [bytes, FileSlice, *tail], version
            head = parts[0]
            assert isinstance(head, bytes) and len(head) < 100 and parts[1] is piece
            assert struct.unpack(">i", head[:4])[0] == sum(len(p) for p in parts) - 4
            assert _bytes(parts) == _kio_bytes(request, response)
    finally:
        piece.close()


def test_versions_outside_the_encoders_are_refused():
    for version in (3, 17):
        with pytest.raises(ValueError, match=f"Fetch v{version} is not encoded here"):
            fetch_wire.encode(version, {"throttle_time": 0, "responses": ()})


# -- the compiled length check against the reference walk -------------------------------------------------------

def _outcome(check: Any, cls: Any, frame: bytes) -> str | None:
    try:
        check(cls, frame)
    except protocol.MalformedRequest as exc:
        return str(exc)
    return None


def _cases(rng: random.Random, cls: Any, payload: bytes) -> list[bytes]:
    """``payload``, then its mutations: fields rewritten, bytes overwritten, the frame cut."""
    out = [payload]
    for _ in range(4):
        out.append(fuzz_structured.mutate_fields(rng, payload, cls)[0])
    for _ in range(3):
        data = bytearray(payload)
        for _ in range(rng.randint(1, 3)):
            data[rng.randrange(len(data))] = rng.choice([0, 0x7F, 0x80, 0xFF, rng.randrange(256)])
        out.append(bytes(data))
    for _ in range(2):
        out.append(payload[:rng.randrange(len(payload))])
    return out


SERVED_KEYS = sorted(SUPPORTED)


@pytest.mark.parametrize("key", SERVED_KEYS)
@settings(deadline=None, max_examples=6, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2 ** 32 - 1))
def test_compiled_check_answers_as_the_reference(key, seed):
    rng = random.Random(seed)
    targets = fuzz_structured.targets_for("t", ["/data/a"])
    lo, hi = SUPPORTED[key]
    for version in range(lo, hi + 1):
        cls = protocol.request_class(key, version)
        payload = wire.encode(wire.sample_request(rng, key, version, targets), rng.randrange(2 ** 31),
                              rng.choice(["c", None, ""]))
        assert _outcome(frame_check.check_lengths, cls, payload) is None, (key, version)
        for case in _cases(rng, cls, payload):
            fast = _outcome(frame_check.check_lengths, cls, case)
            assert fast == _outcome(frame_check.reference_check, cls, case), (key, version, case.hex())


def _only(cls: type, values: dict[str, Any]) -> dict[str, Any]:
    """The ``values`` that ``cls`` (one version's class) has fields for."""
    return {k: v for k, v in values.items() if k in getattr(cls, "__dataclass_fields__")}


def _fetch_frame(version: int, partitions: int) -> bytes:
    cls = protocol.request_class(1, version)
    topic_cls = wire.nested(cls, "topics")
    part_cls = wire.nested(topic_cls, "partitions")
    parts = [_only(part_cls, {"partition": p, "current_leader_epoch": -1, "fetch_offset": p * 10,
                              "last_fetched_epoch": -1, "log_start_offset": -1, "partition_max_bytes": 1 << 20})
             for p in range(partitions)]
    body = wire.build_request(1, version, **_only(cls, {
        "replica_id": -1, "max_wait": datetime.timedelta(0), "min_bytes": 1, "max_bytes": 1 << 20,
        "isolation_level": 0, "session_id": 0, "session_epoch": -1, "rack_id": "", "forgotten_topics_data": [],
        "topics": [_only(topic_cls, {"topic": "t", "topic_id": uuid.UUID(int=5), "partitions": parts})]}))
    return wire.encode(body, 7, "c")


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    return bytes(out + bytes((n,)))


@pytest.mark.parametrize("version", FETCH_VERSIONS)
def test_a_fetch_decodes_as_kio_reads_it_and_a_huge_count_is_refused(version):
    """1,000 partitions decode to kio's own values; a partition count of 2**31-1 (or a compact one past the bytes
    left) is refused before kio reserves anything, and by the broker's direct reader
    (:mod:`~storage_engine.server.handlers.fetch_request_wire`)."""
    payload = _fetch_frame(version, 1000)
    direct = protocol.DIRECT_DECODERS.pop(1)      # kio's path: the reader of a version the direct one leaves
    try:
        _kio_path_decodes_and_refuses(version, payload)
    finally:
        protocol.DIRECT_DECODERS[1] = direct


def _kio_path_decodes_and_refuses(version: int, payload: bytes) -> None:
    request = protocol.decode_request(payload, SUPPORTED)
    cls = protocol.request_class(1, version)
    view = memoryview(payload)
    _, at = protocol._reader(cls.__header_schema__)(view, 0)
    assert request.body == protocol._reader(cls)(view, at)[0]
    assert (request.api_key, request.api_version, request.correlation_id, request.client_id) == (1, version, 7, "c")
    span = next(s for s in fuzz_structured.spans(cls, payload) if s.path.endswith("topics[0].partitions"))
    huge = bytearray(payload)
    huge[span.pos:span.pos + span.width] = _uvarint(2 ** 31) if span.flexible else b"\x7f\xff\xff\xff"
    with pytest.raises(protocol.MalformedRequest, match="body does not parse"):
        protocol.decode_request(bytes(huge), SUPPORTED)
    with pytest.raises(protocol.MalformedRequest, match="Fetch: an array of 2147483647 elements"):
        fetch_request_wire.decode_request(bytes(huge))


def test_the_check_is_linear_in_partitions_not_in_fields():
    """The compiled walk of a non-flexible Fetch checks its fixed-size partition array in one step: the same number
    of Python calls for 1 and 1,000 partitions (the reference walk makes thousands)."""
    import cProfile
    import pstats

    def calls(partitions: int, check: Any) -> int:
        payload = _fetch_frame(11, partitions)
        cls = protocol.request_class(1, 11)
        check(cls, payload)        # compiled once before counting
        profile = cProfile.Profile()
        profile.runcall(check, cls, payload)
        return int(getattr(pstats.Stats(profile, stream=io.StringIO()), "total_calls"))

    assert calls(1000, frame_check.check_lengths) == calls(1, frame_check.check_lengths)
    assert calls(1000, frame_check.reference_check) > 1000
