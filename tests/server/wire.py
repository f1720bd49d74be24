"""Raw Kafka wire protocol for the server tests: requests encoded with kio and framed by hand, responses read
from a plain socket, magic-2 batches built with the engine's encoder, and :func:`sample_request`, a valid request
of any served API and version whose topic names and values the caller chooses (the fuzz mutates those)."""
from __future__ import annotations

import dataclasses
import datetime
import io
import random
import socket
import struct
import time
import typing
import uuid
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer

from storage_engine.record.record_batch import build_batch

_SIZE = struct.Struct(">i")
_WRITERS: dict[type, Any] = {}
_READERS: dict[type, Any] = {}


def _writer(cls: type) -> Any:
    if cls not in _WRITERS:
        _WRITERS[cls] = entity_writer(cls)
    return _WRITERS[cls]


def _reader(cls: type) -> Any:
    if cls not in _READERS:
        _READERS[cls] = entity_reader(cls)
    return _READERS[cls]


def encode(body: Any, correlation_id: int, client_id: str | None = "wire-test") -> bytes:
    """Header and body of a request (no size prefix)."""
    cls = type(body)
    header_cls = cls.__header_schema__
    out = io.BytesIO()
    _writer(header_cls)(out, header_cls(request_api_key=cls.__api_key__, request_api_version=cls.__version__,
                                        correlation_id=correlation_id, client_id=client_id))
    _writer(cls)(out, body)
    return out.getvalue()


def encode_entity(entity: Any) -> bytes:
    """Any kio dataclass (a header, a body) alone."""
    out = io.BytesIO()
    _writer(type(entity))(out, entity)
    return out.getvalue()


def frame(payload: bytes) -> bytes:
    return _SIZE.pack(len(payload)) + payload


def request_frame(body: Any, correlation_id: int, client_id: str | None = "wire-test") -> bytes:
    return frame(encode(body, correlation_id, client_id))


def decode_response(api_key: int, version: int, data: bytes) -> tuple[int, Any]:
    """(correlation id, response body) of one response frame without its size prefix; the whole frame must
    parse."""
    cls = load_response_schema(api_key, version)
    view = memoryview(data)
    header, offset = _reader(cls.__header_schema__)(view, 0)
    body, used = _reader(cls)(view, offset)
    assert offset + used == len(data), f"{len(data) - offset - used} bytes after the {cls.__name__}"
    return int(header.correlation_id), body


class Closed(Exception):
    """The server closed the connection (EOF or reset)."""


class Conn:
    """A blocking client socket that reads whole response frames."""

    def __init__(self, address: str, timeout: float = 30.0):
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.local_port = self.sock.getsockname()[1]
        self.buf = bytearray()

    def send(self, data: bytes) -> None:
        try:
            self.sock.sendall(data)
        except (BrokenPipeError, ConnectionResetError) as exc:
            raise Closed(str(exc)) from None

    def _fill(self, want: int, deadline: float) -> None:
        while len(self.buf) < want:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no complete response within the deadline ({len(self.buf)} bytes buffered)")
            self.sock.settimeout(remaining)
            try:
                chunk = self.sock.recv(max(65536, want - len(self.buf)))
            except socket.timeout:
                continue
            except (ConnectionResetError, BrokenPipeError) as exc:
                raise Closed(str(exc)) from None
            if not chunk:
                raise Closed("EOF")
            self.buf += chunk

    def read_frame(self, timeout: float = 30.0) -> bytes:
        """The next response frame (without its size prefix). Raises :class:`Closed` or ``TimeoutError``."""
        deadline = time.monotonic() + timeout
        self._fill(4, deadline)
        size = _SIZE.unpack_from(self.buf, 0)[0]
        assert 0 <= size <= 256 * 1024 * 1024, f"response size {size}"
        self._fill(4 + size, deadline)
        data = bytes(self.buf[4:4 + size])
        del self.buf[:4 + size]
        return data

    def request(self, body: Any, correlation_id: int = 1, timeout: float = 30.0) -> Any:
        """Send ``body`` and return the decoded response (it must carry ``correlation_id``)."""
        self.send(request_frame(body, correlation_id))
        corr, response = decode_response(type(body).__api_key__, type(body).__version__, self.read_frame(timeout))
        assert corr == correlation_id, (corr, correlation_id)
        return response

    def expect_closed(self, timeout: float = 30.0) -> bytes:
        """Wait until the server closes the connection; returns whatever it sent before (should be nothing)."""
        deadline = time.monotonic() + timeout
        got = bytes(self.buf)
        self.buf.clear()
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("the server kept the connection open")
            self.sock.settimeout(remaining)
            try:
                chunk = self.sock.recv(65536)
            except socket.timeout:
                continue
            except (ConnectionResetError, BrokenPipeError):
                return got
            if not chunk:
                return got
            got += chunk

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


def req(key: int, version: int, **fields: Any) -> Any:
    """A request body of ``key``/``version`` built from keyword fields (nested ones as built dataclasses)."""
    return load_request_schema(key, version)(**fields)


def api_versions(version: int = 3) -> Any:
    cls: Any = load_request_schema(18, version)   # kio types the loader's result as a header payload
    if version >= 3:
        return cls(client_software_name="wire-test", client_software_version="1.0")
    return cls()


def nested(cls: type, name: str) -> type[Any]:
    """The element class of field ``name`` of ``cls`` (a tuple of dataclasses, or a dataclass)."""
    hint = typing.get_type_hints(cls)[name]
    for arg in (hint, *typing.get_args(hint)):
        if dataclasses.is_dataclass(arg):
            return arg  # type: ignore[return-value]
        for inner in typing.get_args(arg):
            if dataclasses.is_dataclass(inner):
                return inner  # type: ignore[return-value]
    raise TypeError(f"{cls.__name__}.{name} holds no dataclass")


def metadata_request(version: int, topics: list[str] | None, allow_auto: bool = False) -> Any:
    cls = load_request_schema(3, version)
    fields: dict[str, Any] = {}
    if topics is None:
        fields["topics"] = None
    else:
        tcls = nested(cls, "topics")
        kw = [{"name": t} | ({"topic_id": uuid.UUID(int=0)} if "topic_id" in tcls.__dataclass_fields__ else {})
              for t in topics]
        fields["topics"] = tuple(tcls(**k) for k in kw)
    names = cls.__dataclass_fields__
    if "allow_auto_topic_creation" in names:
        fields["allow_auto_topic_creation"] = allow_auto
    for flag in ("include_cluster_authorized_operations", "include_topic_authorized_operations"):
        if flag in names:
            fields[flag] = False
    return cls(**fields)


def produce_request(version: int, topic: str, partition: int, records: bytes, acks: int = -1) -> Any:
    cls: Any = load_request_schema(0, version)   # kio types the loader's result as a header payload
    tcls = nested(cls, "topic_data")
    pcls = nested(tcls, "partition_data")
    return cls(transactional_id=None, acks=acks, timeout=datetime.timedelta(seconds=5),
               topic_data=(tcls(name=topic, partition_data=(pcls(index=partition, records=records),)),))


def list_offsets_request(version: int, topic: str, partitions: list[int], timestamp: int = -1) -> Any:
    cls = load_request_schema(2, version)
    tcls = nested(cls, "topics")
    pcls = nested(tcls, "partitions")
    pkw: dict[str, Any] = {"timestamp": timestamp}
    if "current_leader_epoch" in pcls.__dataclass_fields__:
        pkw["current_leader_epoch"] = -1
    fields: dict[str, Any] = {"replica_id": -1,
                              "topics": (tcls(name=topic, partitions=tuple(pcls(partition_index=p, **pkw)
                                                                          for p in partitions)),)}
    if "isolation_level" in cls.__dataclass_fields__:
        fields["isolation_level"] = 0
    return cls(**fields)


def batch(values: list[bytes], *, timestamp_ms: int | None = None) -> bytes:
    """One uncompressed magic-2 batch with a valid CRC (what a producer without idempotence sends)."""
    now = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
    return build_batch([(None, v, now, ()) for v in values])


def break_crc(data: bytes) -> bytes:
    """``data`` (one batch) with its CRC-32C (bytes 17..20) inverted: the broker must refuse it."""
    out = bytearray(data)
    for i in range(17, 21):
        out[i] ^= 0xFF
    return bytes(out)


# -- a valid request of any API and version -----------------------------------------------------------------------

@dataclasses.dataclass
class Targets:
    """What :func:`sample_request` puts in a request: the names and ids it may read, and those it may name in a
    request that changes something (which must not exist, so nothing a mutation leaves valid can change data)."""
    readable: list[str]              # topics a read-only request (Fetch, ListOffsets, Metadata...) may name
    absent: list[str]                # topics that do not exist: every request that writes names only these
    readable_ids: list[uuid.UUID]
    bad_topic_names: list[str]       # not valid topic names: CreateTopics names only these
    log_dirs: list[str]
    produce_records: Any             # (rng, topic) -> records: broken CRC for a readable topic


# Fetch, ListOffsets, Metadata, SASL, ApiVersions, Describe*, and the cluster APIs that only read:
# OffsetForLeaderEpoch, ListPartitionReassignments, DescribeQuorum, DescribeCluster, ListConfigResources,
# DescribeTopicPartitions
READ_ONLY = {1, 2, 3, 17, 18, 23, 32, 35, 36, 46, 55, 60, 74, 75}


def sample_request(rng: random.Random, key: int, version: int, targets: Targets) -> Any:
    """A request of ``key``/``version`` that parses, with values chosen by ``rng`` within what ``targets`` allows."""
    cls = load_request_schema(key, version)
    return _build(rng, cls, key, targets, cls.__name__, {})


def _ints(rng: random.Random, kind: str) -> int:
    bits = {"int8": 8, "int16": 16, "int32": 32, "int64": 64}[kind]
    choice = rng.random()
    if choice < 0.6:
        return rng.randint(-1, 3)
    if choice < 0.8:
        return rng.choice([0, -1, 2 ** (bits - 1) - 1, -2 ** (bits - 1)])
    return rng.randint(-2 ** (bits - 1), 2 ** (bits - 1) - 1)


def _value(rng: random.Random, path: str, kind: str | None, key: int, targets: Targets,
           state: dict[str, Any]) -> Any:
    leaf = path.rsplit(".", 1)[-1]
    if kind in ("string",):
        if path.endswith("configs.name"):
            return rng.choice(["retention.ms", "cleanup.policy", "segment.bytes", "no.such.key"])
        if leaf in ("name", "topic", "resource_name", "topic_name", "topic_names"):
            if key == 19:
                return rng.choice(targets.bad_topic_names)
            if key in READ_ONLY or key == 0:     # Produce names readable topics only with broken batches
                state["topic"] = rng.choice(targets.readable + targets.absent)
            else:
                state["topic"] = rng.choice(targets.absent)
            return state["topic"]
        if leaf == "value":
            return rng.choice(["1000", "compact", "-1", "x", None])
        if leaf == "path":
            return rng.choice(targets.log_dirs + ["/nonexistent/dir"])
        if leaf == "mechanism":
            return rng.choice(["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "GSSAPI"])
        if leaf == "client_software_name":
            return rng.choice(["fuzz", "librdkafka", "bad name!"])
        if leaf == "client_software_version":
            return rng.choice(["1.0", "2.16.0"])
        if leaf == "transactional_id":
            return rng.choice([None, None, None, "txn-1"])
        if leaf in ("configuration_keys",):
            return rng.choice(["retention.ms", "cleanup.policy", "log.dirs"])
        if leaf in ("cluster_id", "rack_id"):
            return rng.choice([None, "", "rack"]) if leaf == "cluster_id" else ""
        return rng.choice(["", "a", "x" * rng.randint(1, 40)])
    if kind == "records":
        return targets.produce_records(rng, state.get("topic"))
    if kind == "bytes":
        noise = bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 60)))
        return rng.choice([b"", b"\0user\0wrong-password", noise])
    if kind == "bool":
        if leaf == "validate_only":
            return key in (19, 37) or rng.random() < 0.5     # CreateTopics/CreatePartitions: validate only
        return rng.random() < 0.5
    if kind == "uuid":
        if key in READ_ONLY and targets.readable_ids and rng.random() < 0.5:
            return rng.choice(targets.readable_ids)
        return rng.choice([uuid.UUID(int=0), uuid.UUID(int=rng.getrandbits(128))])
    if kind in ("timedelta_i32", "timedelta_i64"):
        return datetime.timedelta(milliseconds=rng.choice([0, 0, 1, 5, 100]))
    if kind in ("int8", "int16", "int32", "int64"):
        if leaf in ("partition", "partition_index", "index", "partitions"):
            return rng.choice([0, 1, 1, 2, -1, 99])
        if leaf == "acks":
            return rng.choice([-1, 1, 1, 0, 2])
        if leaf == "fetch_offset" or leaf == "offset":
            return rng.choice([0, 0, 1, 5, -1, 10 ** 6])
        if leaf == "timestamp":
            return rng.choice([-1, -2, -3, -4, 0, int(time.time() * 1000)])
        if leaf in ("min_bytes",):
            return 0
        if leaf == "resource_type":
            return rng.choice([2, 2, 4, 4, 1, 0])
        if leaf == "num_partitions":
            return rng.choice([0, -5, 20000])       # never a valid count (nor -1, the broker's default)
        if leaf == "replication_factor":
            return rng.choice([1, -1, 3])
        if leaf == "config_operation":
            return rng.choice([0, 1, 2, 3, 9])
        if leaf == "count":
            return rng.choice([1, 3, 20000])
        return _ints(rng, kind)
    raise AssertionError(f"{path}: no sample for kafka_type {kind}")


def _build(rng: random.Random, cls: type, key: int, targets: Targets, path: str, state: dict[str, Any]) -> Any:
    hints = typing.get_type_hints(cls)
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        fpath = f"{path}.{f.name}"
        hint = hints[f.name]
        kind = f.metadata.get("kafka_type")
        if "tag" in f.metadata and rng.random() < 0.7:
            continue   # tagged fields left at their default (not written)
        optional = type(None) in typing.get_args(hint)
        inner = [a for a in typing.get_args(hint) if a is not type(None)] if optional else [hint]
        base = inner[0] if inner else hint
        if typing.get_origin(base) is tuple:
            if optional and rng.random() < 0.15:
                kwargs[f.name] = None
                continue
            elem = typing.get_args(base)[0]
            count = rng.choice([1, 1, 1, 2, 0])
            if dataclasses.is_dataclass(elem):
                kwargs[f.name] = tuple(_build(rng, elem, key, targets, fpath, state)  # type: ignore[arg-type]
                                       for _ in range(count))
            else:
                kwargs[f.name] = tuple(_value(rng, fpath, kind, key, targets, state) for _ in range(count))
            continue
        if dataclasses.is_dataclass(base):
            kwargs[f.name] = _build(rng, base, key, targets, fpath, state)  # type: ignore[arg-type]
            continue
        value = _value(rng, fpath, kind, key, targets, state)
        if value is None and not optional:
            value = ""
        kwargs[f.name] = value
    return cls(**kwargs)


# -- transactions ---------------------------------------------------------------------------------------------------

def build_request(api_key: int, version: int, /, **fields: Any) -> Any:
    """Like :func:`req`, with nested fields given as dicts (or lists of dicts) built into the version's nested
    classes, and lists of plain values as tuples. A field the version lacks is an error (nothing is dropped)."""
    return _made(load_request_schema(api_key, version), fields)


def _made(cls: type, values: dict[str, Any]) -> Any:
    kwargs: dict[str, Any] = {}
    for name, value in values.items():
        if name not in cls.__dataclass_fields__:   # type: ignore[attr-defined]
            raise TypeError(f"{cls.__name__} has no field {name!r}")
        if isinstance(value, dict):
            kwargs[name] = _made(nested(cls, name), value)
        elif isinstance(value, list) and any(isinstance(v, dict) for v in value):
            elem = nested(cls, name)
            kwargs[name] = tuple(_made(elem, v) for v in value)
        elif isinstance(value, list):
            kwargs[name] = tuple(value)
        else:
            kwargs[name] = value
    return cls(**kwargs)


def producer_batch(values: list[bytes], producer_id: int, producer_epoch: int, base_sequence: int, *,
                   transactional: bool = True, keys: list[bytes | None] | None = None,
                   timestamp_ms: int | None = None) -> bytes:
    """One uncompressed magic-2 batch of an idempotent producer (``transactional``: of a transactional one)."""
    now = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
    keys = keys if keys is not None else [None] * len(values)
    return build_batch([(k, v, now, ()) for k, v in zip(keys, values)], producer_id=producer_id,
                       producer_epoch=producer_epoch, base_sequence=base_sequence, is_transactional=transactional)


def txn_produce_request(version: int, transactional_id: str | None, topic: str, partition: int, records: bytes,
                        acks: int = -1) -> Any:
    """:func:`produce_request` carrying a ``transactional_id`` (Produce v3+)."""
    return dataclasses.replace(produce_request(version, topic, partition, records, acks),
                               transactional_id=transactional_id)
