"""metadata: Metadata requests over the wire against a broker holding 10,000 partitions (500 with ``--quick``),
each set against kio encoding the same response in this process, in the same run.

Setup (not timed): one log dir under ``var/bench/tmp`` holding 1,000 topics of 10 partitions (``--quick``: 10 x 50;
many topics are the harder case: most of the work is per topic), each partition folder with its
``partition.metadata``, opened and closed once by the engine (segment files, checkpoints, clean-shutdown marker);
then ``python -m storage_engine serve`` on it (default configuration, no authorizer). The client is a bare socket in this process: kio encodes the request, the
response is read whole; one request in flight on one connection, opened before the clock starts. A first
all-topics Metadata is sent before the rounds (the broker then reads every topic id from disk once) and its time
is kept as a note.

Rows (one request per round; best round shown; ``cpu s`` is this process plus the broker's):

* ``Metadata v12, all topics``: ``topics`` null, what a client's metadata refresh of everything asks;
* ``Metadata v12, every topic named``: the same topics listed by name;
* baseline ``kio encode of the same response``: the all-topics response decoded by kio, then written back by
  kio's writer in this process (what answering cost before the broker encoded Metadata itself, less the
  dataclass building): the same bytes, no socket.

The notes give each row's median and worst round beside the best: a round that meets the broker's once-a-second
rebuild of its topic catalog (a listing of the log dir) pays for it. Records = partitions answered, MB = the
response's bytes (the same in the three rows of a shape, so the ratio is
a time ratio). Target: an all-topics answer for 10,000 partitions in 50 ms or less (>= 20 requests/s); ``--quick``
prints it against 500 partitions.
"""
from __future__ import annotations

import io
import os
import socket
import uuid
import struct
import time
from typing import Any, Callable

from kio.index import load_request_schema, load_response_schema
from kio.schema.metadata.v12.request import MetadataRequestTopic
from kio.schema.types import TopicName
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i16, i32

import yaml

from storage_engine import layout
from storage_engine.config_file import config_from_mapping
from storage_engine.log.manager import LogManager
from storage_engine.log.topic_id import partition_metadata_bytes, random_uuid
from storage_engine.server import protocol

from .harness import Context, Row, Sample, Section, Target, run_interleaved, scratch_dir
from .wire import LISTENERS, BrokerProcess

NAME = "metadata"
VERSION = 12
SHAPES_FULL = ((1000, 10),)
SHAPES_QUICK = ((10, 50),)
ROUNDS_FULL = 20
ROUNDS_QUICK = 5
TARGET_S = 0.050
START_TIMEOUT_S = 600.0
_SIZE = struct.Struct(">i")


class Client:
    """One connection; :meth:`ask` sends a request and returns the whole response frame (header and body)."""

    def __init__(self, address: str):
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.correlation = 0

    def ask(self, body: Any, version: int) -> bytes:
        header_cls = type(body).__header_schema__
        self.correlation += 1
        out = io.BytesIO()
        entity_writer(header_cls)(out, header_cls(request_api_key=i16(type(body).__api_key__),
                                                  request_api_version=i16(version),
                                                  correlation_id=i32(self.correlation), client_id="bench"))
        entity_writer(type(body))(out, body)
        payload = out.getvalue()
        self.sock.sendall(_SIZE.pack(len(payload)) + payload)
        size = _SIZE.unpack(self._exactly(4))[0]
        return self._exactly(size)

    def _exactly(self, n: int) -> bytes:
        buf = bytearray(n)
        view, got = memoryview(buf), 0
        while got < n:
            k = self.sock.recv_into(view[got:], n - got)
            if k == 0:
                raise ConnectionError("the broker closed the connection")
            got += k
        return bytes(buf)

    def close(self) -> None:
        self.sock.close()


def _metadata_request(topics: list[str] | None) -> Any:
    cls: Any = load_request_schema(3, VERSION)     # kio types the loader's result as a header payload
    return cls(topics=None if topics is None else tuple(MetadataRequestTopic(name=TopicName(t),
                                                                             topic_id=uuid.UUID(int=0))
                                                        for t in topics),
               allow_auto_topic_creation=False, include_topic_authorized_operations=False)


def _decode(frame: bytes) -> Any:
    cls = load_response_schema(3, VERSION)
    view = memoryview(frame)
    _header, offset = entity_reader(cls.__header_schema__)(view, 0)
    body, used = entity_reader(cls)(view, offset)
    if offset + used != len(frame):
        raise RuntimeError(f"{len(frame) - offset - used} bytes after the Metadata response")
    return body


def _with_cpu(broker: BrokerProcess, fn: Callable[[], Any]) -> tuple[Sample, Any]:
    cpu0, bcpu0 = time.process_time(), broker.cpu_s()
    start = time.perf_counter()
    value = fn()
    wall = time.perf_counter() - start
    return Sample(wall, time.process_time() - cpu0 + broker.cpu_s() - bcpu0), value


def _build_store(log_dir: str, shape: tuple[int, int]) -> list[str]:
    """The partition folders with their ``partition.metadata`` (written without fsync: a scratch store), then one
    open and clean close of the engine, which gives each its segment files and the dir its checkpoints and
    clean-shutdown marker, so the broker's open is a clean one."""
    topics, partitions = shape
    os.makedirs(log_dir)
    names = [f"bench-{i:04d}" for i in range(topics)]
    for name in names:
        data = partition_metadata_bytes(random_uuid())
        for p in range(partitions):
            folder = os.path.join(log_dir, layout.partition_dir_name(name, p))
            os.mkdir(folder)
            with open(os.path.join(folder, layout.PARTITION_METADATA), "wb") as f:
                f.write(data)
    with LogManager.open(config_from_mapping({"broker": {"log.dirs": [log_dir]}})):
        pass
    return names


def _broker(work: str, log_dir: str) -> BrokerProcess:
    broker = BrokerProcess(work, log_dir)
    with open(broker.config_path, "w") as f:
        yaml.safe_dump({"broker": {"log.dirs": [log_dir], "listeners": LISTENERS}}, f)
    broker.start(START_TIMEOUT_S)      # a clean open of 10,000 partitions takes tens of seconds on a busy machine
    return broker


def run(ctx: Context) -> Section:
    shapes = SHAPES_QUICK if ctx.quick else SHAPES_FULL
    rounds = ROUNDS_QUICK if ctx.quick else ROUNDS_FULL
    section = Section(NAME, "Metadata over the wire (one broker, no authorizer)",
                      {"shapes": ", ".join(f"{t} topics x {p}" for t, p in shapes), "rounds": rounds,
                       "version": VERSION})
    for shape in shapes:
        topics, partitions = shape
        total = topics * partitions
        group = f"{total:,} partitions ({topics} topics x {partitions})"
        with scratch_dir(ctx, "metadata") as work:
            log_dir = os.path.join(work, "logs")
            start = time.perf_counter()
            names = _build_store(log_dir, shape)
            section.notes.append(f"{group}: store built in {time.perf_counter() - start:.1f} s (not timed)")
            broker = _broker(work, log_dir)
            try:
                client = Client(broker.bootstrap)
                try:
                    all_topics, named = _metadata_request(None), _metadata_request(names)
                    first, frame = _with_cpu(broker, lambda: client.ask(all_topics, VERSION))
                    response = _decode(frame)
                    answered = sum(len(t.partitions) for t in response.topics)
                    if answered != total or len(response.topics) != topics:
                        raise RuntimeError(f"the broker answered {len(response.topics)} topics, {answered} "
                                           f"partitions; expected {topics}, {total}")
                    section.notes.append(f"{group}: first all-topics request (topic ids read from disk) "
                                         f"{first.wall_s * 1000:.1f} ms")
                    request = protocol.Request(3, VERSION, 1, "bench", None, 0)

                    def over_wire(body: Any) -> Callable[[], Sample]:
                        def case() -> Sample:
                            sample, got = _with_cpu(broker, lambda: client.ask(body, VERSION))
                            if len(got) != len(frame):
                                raise RuntimeError(f"response of {len(got)} bytes, expected {len(frame)}")
                            return sample
                        return case

                    def kio_encode() -> Sample:
                        cpu0 = time.process_time()
                        start = time.perf_counter()
                        parts = protocol.encode_response_parts(request, response)
                        wall = time.perf_counter() - start
                        if sum(map(len, parts)) != len(frame) + 4:
                            raise RuntimeError("kio's encoding differs in size from the broker's")
                        return Sample(wall, time.process_time() - cpu0)

                    runs = run_interleaved({"all": over_wire(all_topics), "named": over_wire(named),
                                            "kio": kio_encode}, rounds)
                finally:
                    client.close()
            except BaseException:
                broker.close()
                raise
            broker.stop_clean()
        size = len(frame)
        for name, samples in runs.items():
            walls = sorted(x.wall_s for x in samples)
            section.notes.append(f"{group}, {name}: best {walls[0] * 1000:.1f} ms, median "
                                 f"{walls[len(walls) // 2] * 1000:.1f} ms, worst {walls[-1] * 1000:.1f} ms")
        base = "kio encode of the same response (in process)"
        section.add(Row(group, base, total, size, runs["kio"]))
        section.add(Row(group, "Metadata v12, all topics", total, size, runs["all"], baseline=base, units=1,
                        target=Target("units_per_s", 1 / TARGET_S, "<= 50 ms a request (>= 20 requests/s)")
                        if total >= 10_000 or ctx.quick else None))
        section.add(Row(group, "Metadata v12, every topic named", total, size, runs["named"], baseline=base,
                        units=1))
    return section
