"""The listener under fuzz: over 10,000 random and mutated request frames sent to one real server process, on
persistent connections (a frame the server refuses closes its connection; the next case reconnects).

Kinds of cases (counts in :data:`PLAN`):

* ``random``: random size prefixes (negative, below a header, above ``socket.request.max.bytes``, in range with
  random bytes, in range but cut short) and raw byte streams;
* ``header``: a well-formed header of a served or unserved API key with a random version, then random bytes;
* ``valid``: three valid requests of every served API and version and 1,500 of random ones, unmutated, with
  random values within each schema (each must be answered and its response must parse with kio);
* ``mutated``: valid requests of every served API and version with bits flipped, bytes set, interesting integers
  written over length fields, bytes inserted, deleted, duplicated or cut, the API key or version changed, two
  frames back to back, or the outer size prefix made to disagree with the frame;
* ``sasl``: the same valid and mutated requests on the SASL_PLAINTEXT listener before authenticating, and
  SaslHandshake followed by mutated SaslAuthenticate tokens.

After every case that leaves its frame complete, the client sends an ApiVersions request (the probe) on the same
connection: either the server answers it (the connection is still good and every answer before it must parse as the
response of the API and version the frame's header names), or the server closes the connection, which must leave
exactly one log line naming that connection. Cases whose framing the server cannot complete are sent with the write
side shut; those may close silently (end of stream) or with one line.

What "stores nothing" means here, honestly: a mutated frame may still be a valid request, so the fuzz never sends
a request that a mutation could leave valid *and* able to change data. Requests that write (DeleteTopics,
DeleteRecords, CreatePartitions, AlterReplicaLogDirs, IncrementalAlterConfigs, and Produce of valid batches) name
only topics that do not exist (their names differ in length from the real one, and ``auto.create.topics.enable``
is false); CreateTopics names only topics made of illegal characters, with an invalid partition count and
validate_only; Produce to the real topic carries only batches whose CRC-32C is inverted, so storing one would need
a mutation to produce a matching CRC (odds 2**-32 per mutation). On the SASL listener, before authentication, the
requests name the real topic and carry valid batches (Produce with valid CRCs, DeleteTopics, DeleteRecords,
IncrementalAlterConfigs of it): all must be refused. The real topic must then hold byte for byte what a known-good
producer (confluent-kafka) wrote before the fuzz, and no topic or partition may appear.

The seed is fixed (``FUZZ_SEED`` in the environment overrides it) and every failure names it and the case.

``test_structured_fuzz_every_api`` is the structure-aware part (:mod:`tests.server.fuzz_structured`): 3,000
requests of every served API changed field by field (nulls, negatives, huge counts, short records) on a broker
with a scratch topic they may write to; each must get a response that parses and no UNKNOWN_SERVER_ERROR, or a
close with its reason logged, and no handler may raise. ``python -m tests.server.fuzz_campaign --frames 50000``
is the long run of the same cases, with the broker's resident size sampled.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import random
import re
import socket
import struct
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.index import load_request_schema

from storage_engine.server.handlers import APIS, SUPPORTED
from tests.server import wire
from tests.server.broker_proc import ROOT
from tests.typed import present

pytestmark = pytest.mark.e2e

SEED = int(os.environ.get("FUZZ_SEED", "20250917"))
PLAN = {"random": 2000, "header": 1000, "valid": 1500, "mutated": 6000, "sasl": 1200}  # + 3 valid per version
REAL = "fuzz-precious"                                  # the topic written before the fuzz
ABSENT = ["zz-absent-x", "no-such-topic-at-all-here"]   # lengths differ from REAL's
BAD_NAMES = ["!!!!!!", "*?*?*?*?", "   "]             # no character of these is legal in a topic name
MAX_BYTES = 262144                                      # socket.request.max.bytes of the fuzzed server
PROBE_CORR = 0x50524F42
READ_TIMEOUT = 20.0                                     # per case, generous for a loaded machine
SERVED = sorted((k, v) for k, (lo, hi) in SUPPORTED.items() for v in range(lo, hi + 1))
PROBE = wire.request_frame(wire.api_versions(3), PROBE_CORR, "fuzz-probe")
INTERESTING = [0, 1, 0x7F, 0x80, 0xFF, 0x7FFF, 0x8000, 0xFFFF, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 0xFFFFFFFE]
CLOSE_LINE = re.compile(r"closing connection from 127\.0\.0\.1:(\d+) on ")


class CaseFailure(AssertionError):
    pass


@dataclasses.dataclass
class Outcome:
    kind: str                       # answered | closed | timeout
    frames: list[bytes]             # response frames before the probe's answer (or before the close)


class Fuzzer:
    """Cases over persistent connections to one listener, with the bookkeeping the log check needs."""

    def __init__(self, address: str, label: str, expected_keys: list[tuple[int, int, int]]):
        self.address = address
        self.label = label
        self.expected_keys = expected_keys
        self.conn: wire.Conn | None = None
        self.ports: Counter[int] = Counter()        # local port -> connections that used it
        self.exact_lines = 0                        # connections the server must have closed with one line
        self.maybe_lines = 0                        # connections that may or may not have a line
        self.kinds: Counter[str] = Counter()
        self.outcomes: Counter[str] = Counter()     # of the probed cases: answered or closed
        self.cases = 0
        self.timeouts: list[str] = []

    def connect(self) -> wire.Conn:
        if self.conn is None:
            try:
                self.conn = wire.Conn(self.address, timeout=READ_TIMEOUT)
            except OSError as exc:
                raise CaseFailure(f"cannot connect to the {self.label} listener at {self.address}: {exc}") from None
            self.ports[self.conn.local_port] += 1
        return self.conn

    def drop(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def probe(self, data: bytes, what: str) -> Outcome:
        """Send ``data`` (whole frames) then the probe; the answers before the probe's, or the close."""
        self.cases += 1
        self.kinds[what] += 1
        conn = self.connect()
        frames: list[bytes] = []
        self.outcomes["closed"] += 1      # until the probe's answer says otherwise
        try:
            conn.send(data + PROBE)
            while True:
                got = conn.read_frame(READ_TIMEOUT)
                if got[:4] == PROBE[8:12] and self._probe_ok(got):
                    self.outcomes["closed"] -= 1
                    self.outcomes["answered"] += 1
                    return Outcome("answered", frames)
                frames.append(got)
        except wire.Closed:
            self.drop()
            self.exact_lines += 1
            return Outcome("closed", frames)
        except TimeoutError:
            self.timeouts.append(what)
            self.drop()
            self.maybe_lines += 1
            return Outcome("timeout", frames)

    def _probe_ok(self, got: bytes) -> bool:
        corr, body = wire.decode_response(18, 3, got)
        keys = [(int(k.api_key), int(k.min_version), int(k.max_version)) for k in body.api_keys]
        if int(body.error_code) != 0 or keys != self.expected_keys:
            raise CaseFailure(f"the probe got a wrong ApiVersions answer: {body}")
        return corr == PROBE_CORR

    def shut(self, data: bytes, what: str, expect_lines: int | None) -> list[bytes]:
        """Send ``data`` on a fresh connection and shut the write side: the server must close the connection
        (with ``expect_lines`` log lines, None: 0 or 1). Returns what the server sent."""
        self.cases += 1
        self.kinds[what] += 1
        self.drop()
        conn = self.connect()
        try:
            conn.send(data)
            conn.sock.shutdown(socket.SHUT_WR)
            got = conn.expect_closed(READ_TIMEOUT)
        except TimeoutError:
            self.timeouts.append(what)
            got = b""
            expect_lines = None
        except (wire.Closed, OSError):
            got = b""
        self.drop()
        if expect_lines is None:
            self.maybe_lines += 1
        else:
            self.exact_lines += expect_lines
        return [got] if got else []


def framing_lines(data: bytes) -> int | None:
    """The log lines the server writes for ``data`` sent on a fresh connection before end of stream, when the
    framing alone decides (0: stream ends inside a frame; 1: a bad size); None when a complete frame arrives."""
    if len(data) < 4:
        return 0
    size = struct.unpack_from(">i", data)[0]
    if size < 8 or size > MAX_BYTES:
        return 1
    return 0 if len(data) - 4 < size else None


def check_answers(payloads: list[bytes], outcome: Outcome, where: str) -> None:
    """Each answer before the probe's must be the response of the API and version its request's header names,
    with its correlation id, in request order (a request may get no answer: Produce with acks=0)."""
    pending = [p for p in payloads if len(p) >= 8]
    for got in outcome.frames:
        corr = struct.unpack_from(">i", got)[0]
        while pending and struct.unpack_from(">i", pending[0], 4)[0] != corr:
            pending.pop(0)        # answered with nothing (acks=0), or this answer belongs to a later request
        if not pending:
            raise CaseFailure(f"{where}: an answer with correlation id {corr} matches no request sent "
                              f"({got[:64].hex()})")
        key, version = struct.unpack_from(">hh", pending.pop(0))
        if key == 18 and version > SUPPORTED[18][1]:
            version = 0           # KIP-511: an ApiVersions above ours is answered in v0
        try:
            wire.decode_response(key, version, got)
        except Exception as exc:   # noqa: BLE001 - any decode failure is the finding
            raise CaseFailure(f"{where}: the answer to API {key} v{version} does not parse: "
                              f"{type(exc).__name__}: {exc} ({got[:64].hex()})") from None


# -- mutations ------------------------------------------------------------------------------------------------------

def mutate(rng: random.Random, payload: bytes) -> tuple[bytes, str]:
    data = bytearray(payload)
    ops = []
    for _ in range(rng.choice([1, 1, 1, 2, 2, 3])):
        op = rng.choice(["flip", "flip", "set", "interesting", "insert", "delete", "truncate", "duplicate"])
        pos = rng.randrange(len(data)) if data else 0
        if op == "flip" and data:
            data[pos] ^= 1 << rng.randrange(8)
        elif op == "set" and data:
            data[pos] = rng.randrange(256)
        elif op == "interesting" and data:
            width = rng.choice([1, 2, 4])
            value = rng.choice(INTERESTING) & ((1 << (8 * width)) - 1)
            data[pos:pos + width] = value.to_bytes(width, "big")
        elif op == "insert":
            data[pos:pos] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        elif op == "delete" and data:
            del data[pos:pos + rng.randint(1, 8)]
        elif op == "truncate" and data:
            del data[rng.randrange(max(1, len(data))):]
        elif op == "duplicate" and data:
            end = min(len(data), pos + rng.randint(1, 16))
            data[pos:pos] = data[pos:end]
        ops.append(f"{op}@{pos}")
    return bytes(data), ",".join(ops)


def retarget(rng: random.Random, payload: bytes) -> tuple[bytes, str]:
    """The API key and/or version in the header changed: the body is read with another schema."""
    data = bytearray(payload)
    key, version = struct.unpack_from(">hh", data)
    choice = rng.random()
    if choice < 0.4:
        version = rng.randint(SUPPORTED[key][0], SUPPORTED[key][1])
    elif choice < 0.8:
        key, version = rng.choice(SERVED)
    else:
        key, version = rng.choice([(key, version + 1), (key, -1), (rng.randint(-5, 80), rng.randint(-2, 20))])
    struct.pack_into(">hh", data, 0, key, version)
    return bytes(data), f"as {key}v{version}"


# -- the server and the data before the fuzz ---------------------------------------------------------------------

def expected_api_keys() -> list[tuple[int, int, int]]:
    return [(k, lo, hi) for k, (lo, hi) in sorted(SUPPORTED.items())]


def produce_known_good(bootstrap: str) -> list[tuple[int, bytes, bytes]]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(REAL, 2, 1)])[REAL].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    delivered: list[Any] = []
    sent = [(i % 2, f"key-{i}".encode(), f"value-{i}-".encode() * (1 + i % 7)) for i in range(40)]
    for p, k, v in sent:
        producer.produce(REAL, key=k, value=v, partition=p, on_delivery=lambda err, msg: delivered.append(err))
    assert producer.flush(60) == 0
    assert delivered == [None] * len(sent), delivered
    return sent


# Valid group and transaction requests (OffsetCommit, JoinGroup, InitProducerId...) keep their state in these
# internal topics: a write like any valid request's, not data from a malformed frame; the user topics are what
# must not change.
STATE_TOPICS = ("__consumer_offsets", "__transaction_state")


def partition_folders(log_dirs: list[str]) -> list[str]:
    return sorted(f"{Path(d).name}/{e.name}" for d in log_dirs for e in os.scandir(d)
                  if e.is_dir() and not e.name.startswith(tuple(t + "-" for t in STATE_TOPICS)))


def segment_digests(log_dirs: list[str]) -> dict[str, str]:
    out = {}
    for d in log_dirs:
        for folder in Path(d).glob(f"{REAL}-*"):
            for seg in folder.glob("*.log"):
                out[f"{folder.name}/{seg.name}"] = hashlib.sha256(seg.read_bytes()).hexdigest()
    return out


def offsets(address: str) -> dict[int, tuple[int, int]]:
    conn = wire.Conn(address)
    try:
        latest = conn.request(wire.list_offsets_request(9, REAL, [0, 1], -1), 1)
        earliest = conn.request(wire.list_offsets_request(9, REAL, [0, 1], -2), 2)
    finally:
        conn.close()
    out: dict[int, list[int]] = {}
    for response in (earliest, latest):
        for p in response.topics[0].partitions:
            assert int(p.error_code) == 0, p
            out.setdefault(int(p.partition_index), []).append(int(p.offset))
    return {p: (v[0], v[1]) for p, v in out.items()}


def all_topics(address: str) -> tuple[dict[str, list[int]], dict[str, uuid.UUID]]:
    conn = wire.Conn(address)
    try:
        response = conn.request(wire.metadata_request(12, None), 3)
    finally:
        conn.close()
    topics = {t.name: sorted(int(p.partition_index) for p in t.partitions) for t in response.topics
              if t.name not in STATE_TOPICS}
    return topics, {t.name: t.topic_id for t in response.topics}


def consume_all(bootstrap: str, total: int) -> list[tuple[int, bytes, bytes]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "fuzz-check", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest"})
    try:
        consumer.assign([TopicPartition(REAL, 0, 0), TopicPartition(REAL, 1, 0)])
        got: list[tuple[int, bytes, bytes]] = []
        deadline = time.monotonic() + 60
        while len(got) < total and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            got.append((present(msg.partition()), present(msg.key()), present(msg.value())))
        return got
    finally:
        consumer.close()


# -- the cases ------------------------------------------------------------------------------------------------------

def random_cases(rng: random.Random, fz: Fuzzer, count: int, seed_note: str) -> None:
    for i in range(count):
        what = rng.choice(["bad-size", "bad-size", "random-body", "random-body", "short", "stream"])
        where = f"{seed_note} random case {i} ({what})"
        if what == "bad-size":
            size = rng.choice([rng.randint(-2 ** 31, -1), rng.randint(0, 7), MAX_BYTES + 1,
                               rng.randint(MAX_BYTES + 1, 2 ** 31 - 1), -1, 2 ** 31 - 1])
            data = struct.pack(">i", size) + bytes(rng.randrange(256) for _ in range(rng.randint(0, 32)))
            out = fz.probe(data, what)
            if out.kind != "closed":
                raise CaseFailure(f"{where}: size {size} did not close the connection ({out.kind})")
        elif what == "random-body":
            body = bytes(rng.randrange(256) for _ in range(rng.choice([8, 9, 12, 20, rng.randint(8, 600)])))
            check_answers([body], fz.probe(wire.frame(body), what), where)
        elif what == "short":
            size = rng.choice([8, rng.randint(9, 2000), MAX_BYTES])
            cut = rng.randint(0, min(size - 1, 500))
            data = struct.pack(">i", size) + bytes(rng.randrange(256) for _ in range(cut))
            if fz.shut(data, what, 0):
                raise CaseFailure(f"{where}: an incomplete frame was answered")
        else:
            data = bytes(rng.randrange(256) for _ in range(rng.randint(1, 64)))
            fz.shut(data, what, framing_lines(data))


def crafted_cases(fz: Fuzzer, seed_note: str) -> None:
    """Counts and lengths far beyond the frame: kio's native reader reserves memory from an array count before
    reading the elements, so before the broker checked lengths one such frame aborted the process (a failed
    allocation of 256 GiB)."""
    header_v1 = struct.pack(">hhih", 3, 0, 1, 0)                 # Metadata v0, empty client id
    header_v2 = struct.pack(">hhih", 3, 12, 2, 0) + b"\0"       # Metadata v12, no tagged fields
    huge_uvarint = b"\xff\xff\xff\xff\x7f"                     # 2**35 - 1
    for payload in (header_v1 + struct.pack(">i", 0x7FFFFFFF),                      # legacy array count
                    header_v2 + huge_uvarint + b"\0\0",                              # compact array count
                    header_v2 + b"\x02" + b"\0" * 16 + huge_uvarint + b"\0" * 20,   # a topic name's length
                    header_v2 + b"\x01\x00\x00" + huge_uvarint + b"\0" * 8,        # tagged-field count
                    header_v2 + b"\xff\xff\xff\xff\xff\x01" + b"\0" * 8):       # a 6-byte uvarint
        out = fz.probe(wire.frame(payload), "crafted")
        if out.kind != "closed" or out.frames:
            raise CaseFailure(f"{seed_note} crafted frame {payload.hex()}: {out.kind}, {len(out.frames)} answers")


def header_cases(rng: random.Random, fz: Fuzzer, count: int, seed_note: str) -> None:
    header_cls = load_request_schema(18, 3).__header_schema__     # request header v2
    for i in range(count):
        if rng.random() < 0.5:
            key = rng.choice([-1, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 23, 24, 42, 50, 68, 1000, 32767])
            version = rng.randint(-1, 20)
        else:
            key = rng.choice(SERVED)[0]
            version = rng.choice([-1, SUPPORTED[key][0] - 1, SUPPORTED[key][1] + 1, rng.randint(0, 20)])
        header = header_cls(request_api_key=key, request_api_version=version, correlation_id=i,  # type: ignore[arg-type]  # plain ints for kio's i16/i32 (nominal ints)
                            client_id=rng.choice(["c", None, ""]))
        payload = wire.encode_entity(header) + bytes(rng.randrange(256) for _ in range(rng.randint(0, 80)))
        check_answers([payload], fz.probe(wire.frame(payload), "header"), f"{seed_note} header case {i}")


def valid_cases(rng: random.Random, fz: Fuzzer, targets: wire.Targets, pairs: list[tuple[int, int]],
                seed_note: str) -> None:
    """Valid requests (random values within the schema: negative partitions, huge offsets, unknown topics...):
    each must be answered with a response that parses, and the connection must stay usable; a Produce with acks=0
    gets no answer, and its connection is closed when it failed (Kafka's rule)."""
    for n, (key, version) in enumerate(pairs):
        body = wire.sample_request(rng, key, version, targets)
        payload = wire.encode(body, 1000 + n)
        where = f"{seed_note} valid {key}v{version} #{n}: {body}"
        out = fz.probe(wire.frame(payload), "valid")
        if key == 36:     # SaslAuthenticate on a PLAINTEXT listener: no handshake, closed
            if out.kind != "closed":
                raise CaseFailure(f"{where}: not closed")
            continue
        acks0 = key == 0 and int(body.acks) == 0
        if acks0 and out.kind == "closed" and not out.frames:
            continue      # a failed acks=0 Produce closes its connection unanswered: how Kafka tells that client
        if out.kind != "answered":
            raise CaseFailure(f"{where}: {out.kind}")
        if len(out.frames) != (0 if acks0 else 1):
            raise CaseFailure(f"{where}: {len(out.frames)} answers")
        check_answers([payload], out, where)


def mutated_cases(rng: random.Random, fz: Fuzzer, targets: wire.Targets, count: int, seed_note: str) -> None:
    for i in range(count):
        key, version = rng.choice(SERVED)
        body = wire.sample_request(rng, key, version, targets)
        payload = wire.encode(body, i, rng.choice(["fuzz", None, "", "x" * 300]))
        style = rng.random()
        where = f"{seed_note} mutated case {i} of {key}v{version}"
        if style < 0.65:
            data, ops = mutate(rng, payload)
            check_answers([data], fz.probe(wire.frame(data), "mutated"), f"{where} ({ops})")
        elif style < 0.8:
            data, ops = retarget(rng, payload)
            if rng.random() < 0.5:
                data, more = mutate(rng, data)
                ops += "," + more
            check_answers([data], fz.probe(wire.frame(data), "retarget"), f"{where} ({ops})")
        elif style < 0.9:
            other = wire.encode(wire.sample_request(rng, *rng.choice(SERVED), targets), i + 1)
            first, ops = mutate(rng, payload) if rng.random() < 0.5 else (payload, "none")
            second, ops2 = mutate(rng, other)
            check_answers([first, second], fz.probe(wire.frame(first) + wire.frame(second), "pair"),
                          f"{where} (pair: {ops}; {ops2})")
        else:
            delta = rng.choice([-8, -4, -1, 1, 2, 4, 64, rng.randint(-len(payload), 2000)])
            data = struct.pack(">i", len(payload) + delta) + payload
            fz.shut(data, "resize", framing_lines(data))


def sasl_cases(rng: random.Random, fz: Fuzzer, valid_targets: wire.Targets, count: int, seed_note: str) -> None:
    """Before authentication on SASL_PLAINTEXT: every API but ApiVersions, SaslHandshake and SaslAuthenticate
    closes the connection without an answer, even a fully valid Produce to the real topic."""
    for i in range(count):
        where = f"{seed_note} sasl case {i}"
        choice = rng.random()
        if choice < 0.45:
            key, version = rng.choice(SERVED)
            body = wire.sample_request(rng, key, version, valid_targets)
            payload = wire.encode(body, i)
            fz.drop()
            out = fz.probe(wire.frame(payload), "sasl-preauth")
            if key == 17 and version == 0:
                # SaslHandshake v0 answers, then the connection speaks raw SASL tokens: the probe's ApiVersions
                # that follows is taken for a token, fails authentication and closes the connection.
                if len(out.frames) != 1:
                    raise CaseFailure(f"{where}: {key}v{version} before authentication: {out}")
            elif key in (17, 18):
                if out.kind != "answered" or len(out.frames) != 1:
                    raise CaseFailure(f"{where}: {key}v{version} before authentication: {out}")
                check_answers([payload], out, where)
            elif out.kind != "closed" or out.frames:
                raise CaseFailure(f"{where}: {key}v{version} before authentication was not refused: {out.kind}, "
                                  f"{len(out.frames)} answers")
            fz.drop()
        elif choice < 0.55:
            key, version = rng.choice(SERVED)
            data, ops = mutate(rng, wire.encode(wire.sample_request(rng, key, version, valid_targets), i))
            out = fz.probe(wire.frame(data), "sasl-preauth-mutated")
            check_answers([data], out, f"{where} ({ops})")
            if out.frames and struct.unpack_from(">h", data)[0] not in (17, 18, 36):
                raise CaseFailure(f"{where}: answered before authentication ({ops})")
            fz.drop()
        else:
            mechanism = rng.choice(["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
            fz.drop()
            hs = wire.encode(wire.req(17, 1, mechanism=mechanism), 1)
            out = fz.probe(wire.frame(hs), "sasl-handshake")
            if out.kind != "answered":
                raise CaseFailure(f"{where}: SaslHandshake {mechanism}: {out.kind}")
            token = sasl_token(rng, mechanism)
            version = rng.randint(0, 2)
            payload = wire.encode(wire.req(36, version, auth_bytes=token), 2)
            if rng.random() < 0.5:
                payload, _ = mutate(rng, payload)
            out = fz.probe(wire.frame(payload), "sasl-authenticate")
            check_answers([payload], out, f"{where} ({mechanism} {token!r})")
            if out.kind == "answered":
                # a well-formed SCRAM client-first of a known user: the server-first came back; a wrong proof
                # must fail and close the connection
                final = wire.encode(wire.req(36, version, auth_bytes=b"c=biws,r=x,p=AAAA"), 3)
                out = fz.probe(wire.frame(final), "sasl-final")
                if out.kind != "closed":
                    raise CaseFailure(f"{where}: a wrong SCRAM proof did not close the connection")
            fz.drop()


def sasl_token(rng: random.Random, mechanism: str) -> bytes:
    if mechanism == "PLAIN":
        good = b"\0alice\0alice-secret"
        token = rng.choice([b"\0alice\0wrong", b"alice\0alice\0nope", b"\0nobody\0x", b"", b"\0\0", good + b"\0"])
    else:
        token = rng.choice([b"n,,n=alice,r=abc", b"n,,n=nobody,r=abc", b"y,,n=alice,r=x", b"n,,", b"",
                            b"n,a=bob,n=alice,r=q", "n,,n=ali=ce,r=\u00e9".encode()])
    if rng.random() < 0.5:
        scrambled = bytearray(token)
        for _ in range(rng.randint(1, 3)):
            if scrambled:
                scrambled[rng.randrange(len(scrambled))] = rng.randrange(256)
            else:
                scrambled += bytes([rng.randrange(256)])
        token = bytes(scrambled)
    assert token != b"\0alice\0alice-secret"
    return token


# -- the test -------------------------------------------------------------------------------------------------------

def test_fuzz_listener(broker_factory, tmp_path):
    creds = tmp_path / "users.yaml"
    creds.write_text(yaml.safe_dump({"users": {"alice": {"password": "alice-secret"}}}))
    server = broker_factory(broker={"auto.create.topics.enable": False, "socket.request.max.bytes": MAX_BYTES,
                                    "sasl.credentials.file": str(creds)},
                            listeners="SASL_PLAINTEXT://127.0.0.1:0,PLAINTEXT://127.0.0.1:0")
    plain, sasl = server.address("PLAINTEXT"), server.address("SASL_PLAINTEXT")
    sent = produce_known_good(plain)
    before_offsets = offsets(plain)
    assert before_offsets == {0: (0, 20), 1: (0, 20)}
    before_topics, ids = all_topics(plain)
    assert before_topics == {REAL: [0, 1]}
    before_folders = partition_folders(server.log_dirs)
    before_digests = segment_digests(server.log_dirs)
    assert before_digests

    batch_bytes = wire.batch([b"fuzz-record"])
    # what the "stores nothing" check relies on: a valid batch to an absent topic and a batch with a broken CRC to
    # the real one are refused (UNKNOWN_TOPIC_OR_PARTITION 3, CORRUPT_MESSAGE 2)
    conn = wire.Conn(plain)
    try:
        for version in (3, 9, 11):
            for topic, data, code in ((ABSENT[0], batch_bytes, 3), (REAL, wire.break_crc(batch_bytes), 2)):
                answer = conn.request(wire.produce_request(version, topic, 0, data), version)
                assert int(answer.responses[0].partition_responses[0].error_code) == code, answer
    finally:
        conn.close()
    assert offsets(plain) == before_offsets

    def records(rng: random.Random, topic: str | None) -> bytes | None:
        if rng.random() < 0.05:
            return rng.choice([None, b""])
        if topic == REAL:
            return wire.break_crc(wire.batch([b"must-not-be-stored"] * rng.randint(1, 3)))
        return batch_bytes

    def valid_records(rng: random.Random, topic: str | None) -> bytes:
        return wire.batch([b"must-not-be-stored-before-auth"])

    targets = wire.Targets([REAL], ABSENT, [ids[REAL]], BAD_NAMES, server.log_dirs, records)
    preauth = wire.Targets([REAL], [REAL], [ids[REAL]], BAD_NAMES, server.log_dirs, valid_records)
    # Mutated frames never name the real topic: a flipped or shifted header byte can turn a Fetch or Metadata of
    # it into a DeleteTopics or DeleteRecords of it that parses (bytes after a body are ignored, as Kafka does),
    # and then storing or deleting nothing could not be asserted. The unmutated cases read the real topic.
    unnamed = wire.Targets(ABSENT, ABSENT, [], BAD_NAMES, server.log_dirs, records)

    rng = random.Random(SEED)
    note = f"FUZZ_SEED={SEED}"
    keys = expected_api_keys()
    fz = Fuzzer(plain, "PLAINTEXT", keys)
    sz = Fuzzer(sasl, "SASL_PLAINTEXT", keys)
    started = time.monotonic()
    try:
        crafted_cases(fz, note)
        random_cases(rng, fz, PLAN["random"], note)
        header_cases(rng, fz, PLAN["header"], note)
        valid_cases(rng, fz, targets, SERVED * 3 + [rng.choice(SERVED) for _ in range(PLAN["valid"])], note)
        mutated_cases(rng, fz, unnamed, PLAN["mutated"], note)
        sasl_cases(rng, sz, preauth, PLAN["sasl"], note)
    except CaseFailure as exc:
        alive = server.proc is not None and server.proc.poll() is None
        raise AssertionError(f"{exc} [server running: {alive}]\n--- server log tail ---\n"
                             f"{server.log_text()[-3000:]}") from None
    finally:
        fz.drop()
        sz.drop()
    elapsed = time.monotonic() - started
    total = fz.cases + sz.cases
    print(f"\nfuzz: {total} cases in {elapsed:.1f}s ({dict(fz.kinds + sz.kinds)}), "
          f"probed cases {dict(fz.outcomes + sz.outcomes)}, timeouts {fz.timeouts + sz.timeouts}, seed {SEED}")
    assert total >= 10_000
    assert len(fz.timeouts) + len(sz.timeouts) <= 3, (note, fz.timeouts, sz.timeouts)

    # the server is up and answers correctly
    assert server.proc is not None and server.proc.poll() is None, note
    for version in range(SUPPORTED[18][0], SUPPORTED[18][1] + 1):
        conn = wire.Conn(plain)
        response = conn.request(wire.api_versions(version), 5)
        conn.close()
        assert int(response.error_code) == 0
        assert [(int(k.api_key), int(k.min_version), int(k.max_version)) for k in response.api_keys] == keys
    after_topics, _ = all_topics(plain)
    assert after_topics == before_topics, note
    assert offsets(plain) == before_offsets, note
    got = consume_all(plain, len(sent))
    assert sorted(got) == sorted(sent), note

    assert server.stop() == 0
    assert partition_folders(server.log_dirs) == before_folders, note
    assert segment_digests(server.log_dirs) == before_digests, note
    described = subprocess.run([sys.executable, "-m", "storage_engine", "--config", str(server.config_path),
                                "describe"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert described.returncode == 0, described.stderr
    parts = sorted((p["topic"], p["partition"], p["log_start_offset"], p["log_end_offset"])
                   for d in json.loads(described.stdout)["log_dirs"] for p in d["partitions"]
                   if p["topic"] not in STATE_TOPICS)
    assert parts == [(REAL, 0, 0, 20), (REAL, 1, 0, 20)], note

    log = server.log_text()
    assert "Traceback" not in log, note
    bad = [line for line in log.splitlines() if " ERROR " in line or "Unhandled" in line]
    assert not bad, (note, bad[:10])
    lines = Counter(int(m.group(1)) for m in CLOSE_LINE.finditer(log))
    used = fz.ports + sz.ports
    assert all(lines[port] <= used[port] for port in lines), \
        (note, {p: (n, used[p]) for p, n in lines.items() if n > used[p]})
    closed_lines = sum(lines.values())
    exact = fz.exact_lines + sz.exact_lines
    maybe = fz.maybe_lines + sz.maybe_lines
    assert exact <= closed_lines <= exact + maybe, (note, exact, maybe, closed_lines)
    changes = re.findall(r"(?:created|deleted|auto-created) topic \S+|configs now|moved \S+", log)
    assert changes == [f"created topic {REAL}"], (note, changes[:10])


# -- structure-aware: every served API, field by field -------------------------------------------------------------

STRUCTURED_FRAMES = 3000
SCRATCH = "fuzz-scratch"


def _null_topics_list_offsets() -> bytes:
    """ListOffsets v1 whose topics array is null (-1): kio would hand the handler None."""
    header = struct.pack(">hhih", 2, 1, 41, 4) + b"fuzz"
    return wire.frame(header + struct.pack(">ii", -1, -1))


def test_structured_fuzz_every_api(broker_factory):
    """Requests of every served API and version built from the broker's own schemas, then changed field by field
    (nulls, negatives, extreme integers, huge counts, short and inconsistent record batches, see
    tests/server/fuzz_structured.py). Every frame is answered with a response that parses and carries no
    UNKNOWN_SERVER_ERROR, or its connection is closed with one log line giving the reason; no handler raises (no
    ERROR line, no traceback in the broker's log). The long run is ``python -m tests.server.fuzz_campaign``."""
    from tests.server import fuzz_structured as fs
    from tests.server.fuzz_campaign import create_topic

    server = broker_factory(broker={"auto.create.topics.enable": False, "group.initial.rebalance.delay.ms": 0,
                                    "queued.max.request.bytes": 64 * 1024 * 1024,
                                    "offsets.topic.num.partitions": 3, "transaction.state.log.num.partitions": 3})
    create_topic(server.bootstrap, SCRATCH, 3)
    note = f"FUZZ_SEED={SEED}"

    # the two cases the structured fuzz first found, pinned
    conn = wire.Conn(server.bootstrap)
    try:
        conn.send(_null_topics_list_offsets())
        assert conn.expect_closed(30) == b"", note
    finally:
        conn.close()
    conn = wire.Conn(server.bootstrap)
    try:
        for short in (b"\0" * 30, wire.batch([b"v"])[:40], b"\xff" * 12):
            answer = conn.request(wire.produce_request(9, "no-such-topic", 0, short), 41)
            part = answer.responses[0].partition_responses[0]
            assert int(part.error_code) == 3, (short.hex(), part)     # Kafka: the unknown topic first
            answer = conn.request(wire.produce_request(9, SCRATCH, 0, short), 42)
            part = answer.responses[0].partition_responses[0]
            assert int(part.error_code) == 2, (short.hex(), part)     # CORRUPT_MESSAGE, the connection stays
    finally:
        conn.close()
    assert "non-nullable field topics was serialized as null" in server.log_text()

    assert server.proc is not None
    sampler = fs.RssSampler(server.proc.pid)
    sampler.start()
    try:
        tally = fs.Runner(server.bootstrap, fs.targets_for(SCRATCH, server.log_dirs), SEED).run(STRUCTURED_FRAMES)
    finally:
        samples = sampler.stop()
    assert server.proc.poll() is None, note
    assert server.stop() == 0
    log = server.log_text()
    reasons, silent = fs.close_reasons(log, tally)
    print(f"\nstructured fuzz: {sum(tally.frames.values())} frames ({tally.mutated} changed), {tally.answered} "
          f"answered, {len(tally.closed)} closed, error codes {dict(sorted(tally.codes.items()))}, RSS "
          f"{min(samples) / 2 ** 20:.0f}-{max(samples) / 2 ** 20:.0f} MiB, {note}")
    assert set(tally.frames) == {APIS[k].name for k in SUPPORTED}, note           # every served API
    assert not tally.failures, (note, tally.failures[:5])
    assert not tally.timeouts, (note, tally.timeouts[:5])
    assert not silent, (note, silent[:5])
    assert not fs.handler_failures(log), (note, fs.handler_failures(log)[:5])
    assert tally.answered > STRUCTURED_FRAMES // 3, note     # most changed frames still reach a handler
    assert max(samples) < 400 * 2 ** 20, note
