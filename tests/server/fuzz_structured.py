"""Structure-aware fuzzing of every served API against a real broker, shared by the suite's smoke test
(``tests/server/test_fuzz.py::test_structured_fuzz_every_api``) and the long campaign
(``python -m tests.server.fuzz_campaign``).

Each case is a request that kio encodes from the very schema the broker decodes with (:func:`wire.sample_request`:
valid values, unknown topics, negative partitions...), then, most of the time, changed *field by field*: the
frame is walked with that schema (:func:`spans`) and one to three fields are rewritten in place: an integer set
to 0, -1, a negative or an extreme value; an array count or a string length set to null (-1), to a huge count or
off by one; a records field replaced by a short, torn or inconsistent batch (re-checksummed, so the engine's own
validation is what meets it). The broker must then either answer with a response that parses, or close the
connection with one log line giving the reason (a body that does not parse, as Kafka's ``InvalidRequestException``
closes it). After every case an ApiVersions probe on the same connection tells the two apart.

A handler exception (an ``ERROR`` line or a traceback in the broker's log) is a failure, and so is an error code
of -1 (UNKNOWN_SERVER_ERROR: Kafka answers a specific code for every bad input), a closed connection without a
log line, an answer that does not parse, or one that is late.
"""
from __future__ import annotations

import dataclasses
import random
import re
import struct
import threading
from collections import Counter
from pathlib import Path
from typing import Any

from kio.index import load_request_schema

from storage_engine.record import codecs
from storage_engine.record.record_batch import build_batch, finish_batch
from storage_engine.server import frame_check
from storage_engine.server.handlers import APIS, SUPPORTED
from tests.server import wire

SERVED = sorted((k, v) for k, (lo, hi) in SUPPORTED.items() for v in range(lo, hi + 1))
PROBE_CORR = 0x50524F42
PROBE = wire.request_frame(wire.api_versions(3), PROBE_CORR, "fuzz-probe")
CLOSE_LINE = re.compile(r"closing connection from 127\.0\.0\.1:(\d+) on \S+: (.*)")
EXTREMES = {1: [0x7F, 0x80, 0xFF], 2: [0x7FFF, 0x8000, 0xFFFF], 4: [0x7FFFFFFF, 0x80000000, 0xFFFFFFFF],
            8: [2 ** 63 - 1, 2 ** 63, 2 ** 64 - 1]}
# fields whose large values make a valid request legitimately wait (Fetch, JoinGroup, SyncGroup): left alone
WAITING = {"max_wait", "rebalance_timeout", "session_timeout", "timeout", "transaction_timeout"}
TIMESTAMP_NOW = 1_700_000_000_000


# -- the request's fields on the wire --------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Span:
    path: str
    kind: str             # "int" | "count" (array) | "length" (string/bytes) | "records"
    pos: int              # where the field (for count/length: its length prefix) starts
    width: int            # bytes of the int or of the length prefix
    flexible: bool        # a compact (uvarint) length
    extra: int = 0        # records: the data's length


def spans(cls: Any, payload: bytes) -> list[Span]:
    """Every field of ``cls``'s body in ``payload`` (header and body, no size prefix), in wire order."""
    buf = memoryview(payload)
    client_id = struct.unpack_from(">h", payload, 8)[0]
    pos = 10 + max(client_id, 0)
    if cls.__header_schema__.__flexible__:
        pos = _skip_tags(buf, pos)
    out: list[Span] = []
    _walk(cls, buf, pos, out, cls.__name__)
    return out


def _uvarint(buf: memoryview, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = buf[pos]
        value |= (byte & 0x7F) << shift
        pos += 1
        if not byte & 0x80:
            return value, pos
        shift += 7


def _skip_tags(buf: memoryview, pos: int) -> int:
    count, pos = _uvarint(buf, pos)
    for _ in range(count):
        _, pos = _uvarint(buf, pos)
        size, pos = _uvarint(buf, pos)
        pos += size
    return pos


def _length(buf: memoryview, pos: int, flexible: bool, width: int) -> tuple[int, int]:
    if flexible:
        raw, end = _uvarint(buf, pos)
        return raw - 1, end
    return int.from_bytes(buf[pos:pos + width], "big", signed=True), pos + width


def _walk(cls: Any, buf: memoryview, pos: int, out: list[Span], path: str) -> int:
    regular, _ = frame_check.plan(cls)
    flexible = bool(cls.__flexible__)
    for field in regular:
        fpath = f"{path}.{field.name}"
        if field.array:
            start = pos
            count, pos = _length(buf, pos, flexible, 4)
            out.append(Span(fpath, "count", start, pos - start, flexible))
            for i in range(max(count, 0)):
                pos = _value(field, buf, pos, out, f"{fpath}[{i}]", flexible)
        else:
            pos = _value(field, buf, pos, out, fpath, flexible)
    if flexible:
        pos = _skip_tags(buf, pos)
    return pos


def _value(field: Any, buf: memoryview, pos: int, out: list[Span], path: str, flexible: bool) -> int:
    size = frame_check.FIXED.get(field.kind)
    if size is not None:
        if field.kind not in ("bool", "uuid"):
            out.append(Span(path, "int", pos, size, False))
        return pos + size
    if field.kind == "struct":
        if field.nullable and not field.array:
            if buf[pos] == 0xFF:
                return pos + 1
            pos += 1
        return _walk(field.struct, buf, pos, out, path)
    start = pos
    n, pos = _length(buf, pos, flexible, 2 if field.kind == "string" else 4)
    kind = "records" if field.kind == "records" else "length"
    out.append(Span(path, kind, start, pos - start, flexible, max(n, 0)))
    return pos + max(n, 0)


def _encode_length(n: int, span: Span) -> bytes:
    if span.flexible:
        value, out = n + 1, bytearray()
        while True:
            byte = value & 0x7F
            value >>= 7
            out.append(byte | (0x80 if value else 0))
            if not value:
                return bytes(out)
    return n.to_bytes(span.width, "big", signed=True)


def mutate_fields(rng: random.Random, payload: bytes, cls: Any, values_only: bool = False) -> tuple[bytes, list[str]]:
    """``payload`` with one to three of its body's fields rewritten (see the module docstring); ``values_only``:
    integers and records only, so the frame still parses and reaches its handler. Fields are changed from the
    last to the first, so a rewritten length never moves a field still to change."""
    found = [s for s in spans(cls, payload) if s.path.rsplit(".", 1)[-1].split("[")[0] not in WAITING
             and not (values_only and s.kind in ("count", "length"))]
    if not found:
        return payload, []
    # integers and records are changed more often than lengths: a wrong length mostly ends in a body that does
    # not parse (closed before any handler), a wrong value reaches the handler
    weighted = [s for s in found for _ in range(1 if s.kind in ("count", "length") else 3)]
    chosen: list[Span] = []
    for _ in range(rng.choice([1, 1, 2, 3])):
        pick = rng.choice(weighted)
        if pick not in chosen:
            chosen.append(pick)
    chosen.sort(key=lambda s: -s.pos)
    data = bytearray(payload)
    ops = []
    for span in chosen:
        if span.kind == "int":
            choice = rng.random()
            if choice < 0.3:
                value = rng.choice([0, -1, -2, 1])
            elif choice < 0.7:
                value = rng.choice(EXTREMES[span.width])
            else:
                value = rng.getrandbits(8 * span.width)
            data[span.pos:span.pos + span.width] = (value % (1 << 8 * span.width)).to_bytes(span.width, "big")
            ops.append(f"{span.path}={value}")
        elif span.kind == "records":
            records, label = records_case(rng)
            end = span.pos + span.width + span.extra
            encoded = _encode_length(-1 if records is None else len(records), span) + (records or b"")
            data[span.pos:end] = encoded
            ops.append(f"{span.path}:{label}")
        else:
            old, after = _length(memoryview(payload), span.pos, span.flexible, span.width)
            what = rng.choice(["null", "huge", "plus", "minus", "zero", "zero"])
            n = {"null": -1, "huge": rng.choice([0x7FFFFFFF, 2 ** 20, 65535]) if not span.flexible
                 else rng.choice([2 ** 31 - 2, 2 ** 20, 65535]),
                 "plus": old + 1, "minus": old - 1, "zero": 0}[what]
            if span.width == 2 and not span.flexible:
                n = max(-1, min(n, 0x7FFF))
            data[span.pos:after] = _encode_length(max(n, -1), span)
            ops.append(f"{span.path}:{span.kind}={n}")
    return bytes(data), ops


# -- records: valid, short, torn and inconsistent batches ------------------------------------------------------------

def _batch(rng: random.Random, **kw: Any) -> bytes:
    values = [bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 40))) for _ in range(rng.randint(1, 4))]
    return build_batch([(None, v, TIMESTAMP_NOW, ()) for v in values], **kw)


def _rechecksum(batch: bytearray) -> bytes:
    from crc32c import crc32c
    if len(batch) >= 21:
        struct.pack_into(">I", batch, 17, crc32c(memoryview(batch)[21:]))
    return bytes(batch)


def records_case(rng: random.Random) -> tuple[bytes | None, str]:
    """Records for a Produce partition: None, empty, valid (plain, idempotent, transactional, compressed) or
    broken in one of the ways a client could break them, re-checksummed where that reaches deeper checks."""
    what = rng.choice(["null", "empty", "valid", "idempotent", "transactional", "short-header", "torn",
                       "length-short", "length-long", "count", "varint", "magic", "codec", "control", "two",
                       "offset-delta", "trailing", "bad-crc"])
    if what == "null":
        return None, what
    if what == "empty":
        return b"", what
    if what == "valid":
        return _batch(rng, codec=rng.choice([codecs.NONE, codecs.NONE, codecs.GZIP, codecs.LZ4, codecs.ZSTD,
                                             codecs.SNAPPY])), what
    if what == "idempotent":
        return _batch(rng, producer_id=rng.choice([0, 1, 77, 2 ** 40]), producer_epoch=rng.choice([0, 1, -1]),
                      base_sequence=rng.choice([0, 5, -1, 2 ** 31 - 1])), what
    if what == "transactional":
        return _batch(rng, producer_id=rng.choice([0, 1, 77]), producer_epoch=0, base_sequence=0,
                      is_transactional=True), what
    good = bytearray(_batch(rng, codec=rng.choice([codecs.NONE, codecs.GZIP])))
    if what == "short-header":
        return bytes(good[:rng.randint(1, 60)]), what
    if what == "torn":
        return bytes(good[:rng.randint(61, len(good) - 1)]) if len(good) > 62 else bytes(good[:61]), what
    if what == "length-short":
        struct.pack_into(">i", good, 8, rng.choice([0, 1, 48, 49, len(good) - 13]))
        return _rechecksum(good), what
    if what == "length-long":
        struct.pack_into(">i", good, 8, rng.choice([len(good), 2 ** 31 - 1, 2 ** 20]))
        return _rechecksum(good), what
    if what == "count":
        struct.pack_into(">i", good, 57, rng.choice([0, -1, 2 ** 31 - 1, 1000, 2 ** 16]))
        return _rechecksum(good), what
    if what == "varint":
        for _ in range(rng.randint(1, 4)):
            if len(good) > 61:
                good[rng.randrange(61, len(good))] = rng.choice([0x00, 0x7F, 0x80, 0xFF, rng.getrandbits(8)])
        return _rechecksum(good), what
    if what == "magic":
        good[16] = rng.choice([0, 1, 3, 0xFF])
        return _rechecksum(good), what
    if what == "codec":
        attrs = struct.unpack_from(">h", good, 21)[0]
        struct.pack_into(">h", good, 21, (attrs & ~7) | rng.choice([1, 2, 3, 4, 5, 7]))
        return _rechecksum(good), what
    if what == "control":
        return _batch(rng, producer_id=3, producer_epoch=0, is_transactional=True, is_control=True), what
    if what == "two":
        return bytes(good) + _batch(rng), what
    if what == "offset-delta":
        struct.pack_into(">i", good, 23, rng.choice([-1, 100, 2 ** 31 - 1]))
        return _rechecksum(good), what
    if what == "trailing":
        return bytes(good) + bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 20))), what
    payload = finish_batch(b"\x00", 0, 0, -1, 0, TIMESTAMP_NOW, TIMESTAMP_NOW, -1, -1, -1, 1)
    broken = bytearray(payload)
    broken[18] ^= 0xFF
    return bytes(broken), what


# -- running cases -----------------------------------------------------------------------------------------------------

def error_codes(value: Any) -> list[int]:
    """Every error code in a decoded response, nested ones included."""
    out: list[int] = []
    if dataclasses.is_dataclass(value):
        for f in dataclasses.fields(value):
            inner = getattr(value, f.name)
            if f.name == "error_code":
                out.append(int(inner))
            else:
                out.extend(error_codes(inner))
    elif isinstance(value, tuple):
        for item in value:
            out.extend(error_codes(item))
    return out


@dataclasses.dataclass
class Tally:
    frames: Counter[str] = dataclasses.field(default_factory=Counter)          # per API name
    mutated: int = 0
    codes: Counter[int] = dataclasses.field(default_factory=Counter)           # every error code answered
    codes_by_api: dict[str, Counter[int]] = dataclasses.field(default_factory=dict)
    answered: int = 0
    closed: list[tuple[int, str]] = dataclasses.field(default_factory=list)   # (local port, the case), in order
    failures: list[str] = dataclasses.field(default_factory=list)
    timeouts: list[str] = dataclasses.field(default_factory=list)


class Runner:
    """Cases on a persistent connection to ``address`` (a closed one is replaced by the next case)."""

    def __init__(self, address: str, targets: wire.Targets, seed: int, read_timeout: float = 15.0):
        self.address = address
        self.targets = targets
        self.rng = random.Random(seed)
        self.seed = seed
        self.read_timeout = read_timeout
        self.conn: wire.Conn | None = None
        self.tally = Tally()

    def _drop(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def case(self, n: int) -> None:
        rng = self.rng
        key, version = rng.choice(SERVED)
        cls = load_request_schema(key, version)
        body = wire.sample_request(rng, key, version, self.targets)
        payload = wire.encode(body, n + 1)
        ops: list[str] = []
        choice = rng.random()
        if choice < 0.8:   # half of the changed frames keep their shape, so they reach the handler
            payload, ops = mutate_fields(rng, payload, cls, values_only=choice < 0.4)
            self.tally.mutated += bool(ops)
        name = APIS[key].name
        self.tally.frames[name] += 1
        where = f"seed {self.seed} case {n}: {name} v{version} {ops or 'unmutated'}"
        if self.conn is None:
            self.conn = wire.Conn(self.address, timeout=self.read_timeout)
        conn = self.conn
        answers: list[bytes] = []
        try:
            conn.send(wire.frame(payload) + PROBE)
            while True:
                got = conn.read_frame(self.read_timeout)
                if struct.unpack_from(">i", got)[0] == PROBE_CORR:
                    break
                answers.append(got)
        except wire.Closed:
            self.tally.closed.append((conn.local_port, where))
            self._drop()
            return
        except TimeoutError:
            self.tally.timeouts.append(where)
            self._drop()
            return
        self.tally.answered += 1
        acks0 = key == 0 and _acks(cls, payload) == 0
        if len(answers) != (0 if acks0 else 1):
            self.tally.failures.append(f"{where}: {len(answers)} answers")
            return
        for got in answers:
            try:
                corr, response = wire.decode_response(key, version, got)
            except Exception as exc:   # noqa: BLE001 - recorded as a failure
                self.tally.failures.append(f"{where}: answer does not parse: {type(exc).__name__}: {exc}")
                return
            if corr != n + 1:
                self.tally.failures.append(f"{where}: correlation id {corr}")
            codes = error_codes(response)
            self.tally.codes.update(codes)
            self.tally.codes_by_api.setdefault(name, Counter()).update(codes)
            if -1 in codes:
                self.tally.failures.append(f"{where}: UNKNOWN_SERVER_ERROR in {response}"[:600])

    def run(self, frames: int) -> Tally:
        try:
            for n in range(frames):
                self.case(n)
        finally:
            self._drop()
        return self.tally


def _acks(cls: Any, payload: bytes) -> int | None:
    """The acks of a Produce payload that the broker answered (so it parsed)."""
    span = next(s for s in spans(cls, payload) if s.path.endswith(".acks"))
    return struct.unpack_from(">h", payload, span.pos)[0]


def close_reasons(log: str, tally: Tally) -> tuple[Counter[str], list[str]]:
    """The broker's reason for each connection the cases saw closed (numbers folded, so reasons group), and the
    cases closed without a line."""
    lines: dict[int, list[str]] = {}
    for m in CLOSE_LINE.finditer(log):       # a local port is reused over thousands of connections: in order
        lines.setdefault(int(m.group(1)), []).append(m.group(2))
    reasons: Counter[str] = Counter()
    silent = []
    for port, where in tally.closed:
        queue = lines.get(port)
        if not queue:
            silent.append(where)
        else:
            reasons[re.sub(r"\d+", "#", queue.pop(0))[:140]] += 1
    return reasons, silent


def handler_failures(log: str) -> list[str]:
    """Lines of the broker's log that show a handler raising (ERROR lines, tracebacks)."""
    return [line for line in log.splitlines() if re.search(r"(^|\s)(ERROR|CRITICAL)\s", line)
            or line.startswith("Traceback")]


class RssSampler(threading.Thread):
    """The resident size of process ``pid`` from ``/proc``, every ``interval`` seconds, until stopped."""

    def __init__(self, pid: int, interval: float = 0.2):
        super().__init__(daemon=True)
        self.pid = pid
        self.interval = interval
        self.samples: list[int] = []
        self._stop_event = threading.Event()

    def rss(self) -> int:
        return rss_bytes(self.pid)

    def run(self) -> None:
        while not self._stop_event.is_set():
            try:
                self.samples.append(self.rss())
            except (OSError, ValueError):
                return
            self._stop_event.wait(self.interval)

    def stop(self) -> list[int]:
        self._stop_event.set()
        self.join(10)
        return self.samples


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise ValueError(f"no VmRSS for process {pid}")


def targets_for(topic: str, log_dirs: list[str]) -> wire.Targets:
    """Reads and Produce name ``topic`` (or absent ones); every other write names only absent topics."""
    return wire.Targets([topic], ["zz-absent-x", "no-such-topic-here"], [], ["!!!!!!", "*?*?*?*?", "   "],
                        log_dirs, lambda rng, _topic: records_case(rng)[0])

