"""The broker's pieces that need no server: framing and the version policy, response building, the topic config
store and its merge into every process's config, the node's identity files and producer id blocks."""
from __future__ import annotations

import io
import os
import shutil
import struct
import typing

import pytest
import yaml
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_writer

from storage_engine import topic_store
from storage_engine.config_file import load_config
from storage_engine.errors import ConfigError
from storage_engine.server import gen_responses, identity, protocol
from storage_engine.server.handlers import APIS, SUPPORTED

pytestmark = pytest.mark.unit


def frame(key: int, version: int, body_values: dict, correlation: int = 7) -> bytes:
    cls = load_request_schema(key, version)
    out = io.BytesIO()
    header = cls.__header_schema__
    entity_writer(header)(out, header(request_api_key=key, request_api_version=version,  # type: ignore[arg-type]  # plain ints for kio's i16/i32
                                      correlation_id=correlation, client_id="t"))  # type: ignore[arg-type]  # (nominal ints)
    entity_writer(cls)(out, protocol.build(cls, body_values))
    return out.getvalue()



def test_the_typed_responses_are_what_the_generator_writes():
    """``storage_engine/server/responses/`` is generated from kio's schemas over the served versions: serving a new
    API or version, or a kio upgrade, without running ``python -m storage_engine.server.gen_responses`` fails
    here (as does a hand edit of a generated file)."""
    assert gen_responses.stale() == [], "run python -m storage_engine.server.gen_responses"


def test_every_handler_is_typed_with_its_own_apis_response():
    """mypy checks each handler's keys and values against the TypedDict its return is annotated with; this checks
    that TypedDict is its own API's (kio's response class name), so a Fetch handler cannot be checked against
    ListOffsets' shape."""
    wrong = []
    for api in APIS.values():
        if api.handler is None:
            continue
        returned = typing.get_type_hints(api.handler)["return"]
        # None: no response (acks=0); Encoded: the handler encodes its TypedDict itself (Metadata)
        skip = (type(None), protocol.Encoded)
        names = {t.__name__ for t in typing.get_args(returned) if t not in skip} or {returned.__name__}
        wanted = protocol.response_class(api.key, api.max_version).__name__
        if names != {wanted} or not typing.is_typeddict(next(t for t in typing.get_args(returned) or (returned,)
                                                             if t not in skip)):
            wrong.append(f"{api.name}: {api.handler.__qualname__} returns {returned}, not {wanted}")
    assert not wrong, wrong

def test_a_served_request_decodes_with_its_header():
    req = protocol.decode_request(frame(3, 12, {"topics": None, "allow_auto_topic_creation": False,
                                                "include_topic_authorized_operations": False}, 42), SUPPORTED)
    assert (req.api_key, req.api_version, req.correlation_id, req.client_id) == (3, 12, 42, "t")
    assert req.body.topics is None and req.body.allow_auto_topic_creation is False


def test_api_versions_above_ours_is_answered_in_v0_with_unsupported_version():
    data = struct.pack(">hhi", 18, 99, 5) + b"\x00\x01t" + b"garbage that is never parsed"
    req = protocol.decode_request(data, SUPPORTED)
    assert req.body is None and req.correlation_id == 5
    cls = protocol.response_class(18, 0)
    out = protocol.encode_response(req, protocol.build(cls, {"error_code": 35, "api_keys": (
        {"api_key": 18, "min_version": 0, "max_version": 4},)}))
    size, correlation, error = struct.unpack_from(">iih", out, 0)
    assert (size, correlation, error) == (len(out) - 4, 5, 35)


@pytest.mark.parametrize("key, version", [(0, 2), (1, 3), (9, 0), (1000, 0), (18 + 0, -1)])
def test_an_unserved_key_or_version_is_malformed(key, version):
    with pytest.raises(protocol.MalformedRequest, match="unsupported API key"):
        protocol.decode_request(struct.pack(">hhi", key, version, 1) + b"\xff\xff", SUPPORTED)


def test_bytes_after_a_body_are_ignored_as_kafka_does_and_short_frames_are_malformed():
    good = frame(3, 12, {"topics": (), "allow_auto_topic_creation": True,
                         "include_topic_authorized_operations": False})
    # librdkafka's Metadata for all topics leaves three bytes behind its body; Kafka's parser ignores them
    assert protocol.decode_request(good + b"\x00\x00\x00", SUPPORTED).body.topics == ()
    with pytest.raises(protocol.MalformedRequest, match="does not parse"):
        protocol.decode_request(good[:-3], SUPPORTED)
    with pytest.raises(protocol.MalformedRequest, match="shorter than a request header"):
        protocol.decode_request(b"\x00\x03", SUPPORTED)


def test_build_drops_fields_a_version_lacks_and_fills_nested_classes():
    old = protocol.build(protocol.response_class(0, 3), {
        "throttle_time": 0, "responses": ({"name": "t", "partition_responses": (
            {"index": 0, "error_code": 45, "base_offset": 9, "log_start_offset": 3, "error_message": "x",
             "record_errors": ()},)},)})
    part = old.responses[0].partition_responses[0]
    assert part.error_code == ErrorCode.out_of_order_sequence_number and part.base_offset == 9
    assert not hasattr(part, "log_start_offset")      # v5+
    new = protocol.build(protocol.response_class(0, 11), {"responses": ({"name": "t", "partition_responses": (
        {"index": 0, "error_code": 0, "base_offset": 9, "log_start_offset": 3, "record_errors": ()},)},)})
    assert new.responses[0].partition_responses[0].log_start_offset == 3
    assert new.responses[0].partition_responses[0].log_append_time is None     # optional: the schema's default


def test_build_refuses_a_missing_required_field_and_a_key_no_version_has():
    # a forgotten error_code must not go out as NONE (success)
    with pytest.raises(protocol.BuildError, match=r"partition_responses\[0\].*required error_code not given"):
        protocol.build(protocol.response_class(0, 11), {"responses": ({"name": "t", "partition_responses": (
            {"index": 0, "base_offset": 9, "record_errors": ()},)},)})
    # a misspelt key is a handler bug, named, not dropped
    with pytest.raises(protocol.BuildError, match="no version has eror_code"):
        protocol.build(protocol.response_class(12, 4), {"throttle_time": 0, "error_code": 0, "eror_code": 0})
    # a key of another version of the message is dropped: Heartbeat v0 has no throttle_time, v1+ has
    assert protocol.build(protocol.response_class(12, 0), {"throttle_time": 0, "error_code": 27}).error_code == 27


def test_every_advertised_range_lies_within_the_schemas():
    for api in APIS.values():
        for version in (api.min_version, api.max_version):
            assert load_request_schema(api.key, version) is not None


def _config(tmp_path, topics=None):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"broker": {"log.dirs": [str(tmp_path / "d")]}, "topics": topics or {}}))
    (tmp_path / "d").mkdir(exist_ok=True)
    return path


def test_topic_configs_set_over_the_wire_reach_every_config_load(tmp_path):
    path = _config(tmp_path, {"t": {"retention.ms": 1000, "segment.bytes": 2048}})
    topic_store.write(str(tmp_path / "d"), {"t": {"retention.ms": "5000"}, "u": {"cleanup.policy": "compact"}})
    config = load_config(path)
    assert config.log_config("t").retention_ms == 5000          # the wire's value over the file's
    assert config.log_config("t").segment_bytes == 2048         # the file's other keys stay
    assert config.log_config("u").cleanup_policy == ("compact",)
    assert config.dynamic_topics == {"t": {"retention.ms": "5000"}, "u": {"cleanup.policy": "compact"}}


@pytest.mark.parametrize("content, match", [
    (b"{", "not valid JSON"), (b'{"version": 2, "topics": {}}', "expected"),
    (b'{"version": 1, "topics": {"t": {"retention.ms": 5}}}', "expected"),
    (b'{"version": 1, "topics": {"t": {"retention.ms": "soon"}}}', "retention.ms"),
])
def test_a_damaged_topic_config_store_is_a_config_error_naming_it(tmp_path, content, match):
    path = _config(tmp_path)
    (tmp_path / "d" / topic_store.path_in("").lstrip("/")).write_bytes(content)
    with pytest.raises(ConfigError, match=match):
        load_config(path)


def test_meta_properties_keep_one_cluster_id(tmp_path):
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    for d in dirs:
        (tmp_path / d).mkdir()
    first = identity.load_meta_properties(dirs, 3)
    assert len(first) == 22 and identity.load_meta_properties(dirs, 3) == first
    text = (tmp_path / "a" / "meta.properties").read_text()
    assert "version=1" in text and "node.id=3" in text and f"cluster.id={first}" in text
    with pytest.raises(ConfigError, match="node.id=3"):
        identity.load_meta_properties(dirs, 4)
    (tmp_path / "b" / "meta.properties").write_text("version=1\nnode.id=3\ncluster.id=other\n")
    with pytest.raises(ConfigError, match="different clusters"):
        identity.load_meta_properties(dirs, 3)


def test_ids_look_like_kafkas_and_round_trip(tmp_path):
    for _ in range(200):
        value = identity.random_uuid()
        text = identity.uuid_text(value)
        assert len(text) == 22 and not text.startswith("-") and identity.parse_uuid(text) == value
    identity.write_topic_id(str(tmp_path), value)
    assert identity.read_topic_id(str(tmp_path)) == value
    assert (tmp_path / "partition.metadata").read_text() == f"version: 0\ntopic_id: {text}"   # as Kafka: no line end


def test_producer_ids_never_repeat_across_restarts(tmp_path):
    first = identity.ProducerIds(str(tmp_path))
    a = [first.allocate() for _ in range(3)]
    second = identity.ProducerIds(str(tmp_path))     # a restart: the next block
    b = second.allocate()
    assert a == [0, 1, 2] and b == identity.PRODUCER_ID_BLOCK
    assert [first.allocate() for _ in range(identity.PRODUCER_ID_BLOCK)][-1] == 2 * identity.PRODUCER_ID_BLOCK + 2


def test_topic_configs_are_kept_in_every_log_dir_and_the_newest_copy_wins(tmp_path):
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    for d in dirs:
        os.makedirs(d)
    topic_store.save(dirs, {"t": {"retention.ms": "1000"}})
    topic_store.write(dirs[1], {"t": {"retention.ms": "2000"}}, serial=5)     # a newer change only b took
    assert topic_store.load(dirs) == {"t": {"retention.ms": "2000"}}
    topic_store.save(dirs, {"t": {"retention.ms": "3000"}})
    assert [topic_store.read(d) for d in dirs] == [{"t": {"retention.ms": "3000"}}] * 2
    # a log dir that is gone (here: a file where the dir was) neither fails a load nor takes the configs with it
    shutil.rmtree(dirs[0])
    with open(dirs[0], "w") as f:
        f.write("not a dir")
    assert topic_store.load(dirs) == {"t": {"retention.ms": "3000"}}
    topic_store.save(dirs, {"t": {"retention.ms": "4000"}})
    assert topic_store.load(dirs) == {"t": {"retention.ms": "4000"}}


def test_producer_id_blocks_survive_a_lost_log_dir(tmp_path):
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    for d in dirs:
        os.makedirs(d)
    assert identity.ProducerIds(dirs).allocate() == 0
    shutil.rmtree(dirs[0])
    assert identity.ProducerIds(dirs).allocate() == identity.PRODUCER_ID_BLOCK   # b still knows the block is used


def test_every_engine_error_becomes_a_kafka_code_in_one_place():
    import inspect
    import re

    from storage_engine import errors as engine_errors
    from storage_engine.errors import PartitionNotFoundError, ProducerStateError
    from storage_engine.log import topic_changes
    from storage_engine.server import errors

    producer_errors = [c for c in vars(engine_errors).values()
                       if isinstance(c, type) and issubclass(c, ProducerStateError) and c is not ProducerStateError]
    assert producer_errors
    for cls in producer_errors:     # each names a real ErrorCode member (a typo would crash the handler)
        assert errors.error_code(cls("x")) == ErrorCode[cls.kafka_name.lower()] != ErrorCode.unknown_server_error
    named = re.findall(r'TopicChangeError\("([a-z_]+)"', inspect.getsource(topic_changes))
    assert named and all(errors.error_code(topic_changes.TopicChangeError(n, "x")) == ErrorCode[n] for n in named)
    assert errors.error_code(PartitionNotFoundError("t-0")) == ErrorCode.unknown_topic_or_partition
    assert errors.error_code(RuntimeError("a bug")) == ErrorCode.unknown_server_error
    # a refused request keeps its own text; any other error is one line for the client
    refused = errors.TopicError(ErrorCode.invalid_config, "config 'a'  has\ta null value")
    assert errors.describe(refused) == (ErrorCode.invalid_config, "config 'a'  has\ta null value")
    assert refused.code == "invalid_config"
    assert errors.describe(OSError("disk\n gone")) == (ErrorCode.unknown_server_error, "disk gone")


def test_build_refuses_an_error_code_that_is_not_one():
    with pytest.raises(protocol.BuildError, match="HeartbeatResponse.error_code: an error code must be"):
        protocol.build(protocol.response_class(12, 4), {"throttle_time": 0, "error_code": "0"})
    with pytest.raises(ValueError, match="is not a valid ErrorCode"):
        protocol.build(protocol.response_class(12, 4), {"throttle_time": 0, "error_code": 31337})
    built = protocol.build(protocol.response_class(12, 4), {"throttle_time": 0, "error_code": 27})
    assert built.error_code is ErrorCode.rebalance_in_progress
