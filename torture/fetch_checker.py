"""The fetching side of the server trials' zero-copy checks (``python -m torture.fetch_checker``): a bare Fetch v12
client (kio) reading every partition given through the broker over and over, from the log start to the high
watermark, with random fetch sizes (1 KiB to 4 MiB), until ``--stop-file`` exists; it reconnects whenever the
broker dies.

Every response is checked as a consumer with ``check.crcs`` would, and more: the records field parses as whole
batches (no partial batch, no bytes after the last one), every batch passes its CRC, offsets rise, the first batch
holds the fetch offset or lies after it, none reaches the high watermark. For a partition no other process rewrites
(``--stable``), a batch at a base offset must have the same CRC on every pass. Any failure is a ``BAD`` line (a
CORRUPT_MESSAGE answer too: nothing in a trial is damaged). Prints ``READ <responses> <batches> <bytes>
<passes> <reconnects>`` at the end.
"""
from __future__ import annotations

import argparse
import datetime
import io
import os
import random
import socket
import struct
import sys
import time

from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.fetch.v12.response import FetchResponse
from kio.schema.types import TopicName
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i8, i16, i32, i32Timedelta, i64

from storage_engine.segment.file_records import iter_batches

_SIZE = struct.Struct(">i")
CORRUPT_MESSAGE, OFFSET_OUT_OF_RANGE = 2, 1


class Checker:
    def __init__(self, bootstrap: str, seed: int):
        self.host, port = bootstrap.rsplit(":", 1)
        self.port = int(port)
        self.rng = random.Random(seed)
        self.sock: socket.socket | None = None
        self.correlation = 0
        self.crcs: dict[tuple[str, int, int], int] = {}
        self.counts = {"responses": 0, "batches": 0, "bytes": 0, "passes": 0, "reconnects": 0}
        self.write_header = entity_writer(FetchRequest.__header_schema__)
        self.write_body = entity_writer(FetchRequest)
        self.read_header = entity_reader(FetchResponse.__header_schema__)
        self.read_body = entity_reader(FetchResponse)

    def bad(self, text: str) -> None:
        print(f"BAD {text}", flush=True)

    def _recv(self, n: int) -> bytes:
        assert self.sock is not None
        buf = bytearray()
        while len(buf) < n:
            got = self.sock.recv(min(n - len(buf), 1 << 20))
            if not got:
                raise ConnectionError("closed")
            buf += got
        return bytes(buf)

    def fetch(self, topic: str, partition: int, offset: int, max_bytes: int) -> object:
        if self.sock is None:
            self.sock = socket.create_connection((self.host, self.port), timeout=30)
        self.correlation += 1
        out = io.BytesIO()
        out.write(b"\0\0\0\0")
        self.write_header(out, FetchRequest.__header_schema__(
            request_api_key=FetchRequest.__api_key__, request_api_version=i16(12),
            correlation_id=i32(self.correlation), client_id="fetch-checker"))
        self.write_body(out, FetchRequest(
            max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=0)), min_bytes=i32(1),
            max_bytes=i32(max_bytes), isolation_level=i8(0), session_id=i32(0), session_epoch=i32(-1),
            forgotten_topics_data=(), rack_id="",
            topics=(FetchTopic(topic=TopicName(topic), partitions=(FetchPartition(
                partition=i32(partition), fetch_offset=i64(offset), partition_max_bytes=i32(max_bytes)),)),)))
        frame = out.getbuffer()
        _SIZE.pack_into(frame, 0, len(frame) - 4)
        self.sock.sendall(frame)
        size = _SIZE.unpack(self._recv(4))[0]
        view = memoryview(self._recv(size)).toreadonly()
        _, at = self.read_header(view, 0)
        body, _ = self.read_body(view, at)
        return body.responses[0].partitions[0]

    def check(self, topic: str, partition: int, offset: int, part: object, stable: bool) -> int | None:
        """The next fetch offset after ``part`` (None: at the high watermark)."""
        code = int(getattr(part, "error_code"))
        hw = int(getattr(part, "high_watermark"))
        if code == CORRUPT_MESSAGE:
            self.bad(f"CORRUPT_MESSAGE for {topic}-{partition} at offset {offset}")
            return None
        if code == OFFSET_OUT_OF_RANGE:
            start = int(getattr(part, "log_start_offset"))
            return max(start, 0) if start > offset else 0 if offset > max(hw, 0) else None
        if code != 0:
            return offset
        records = bytes(getattr(part, "records") or b"")
        if not records:
            return None
        self.counts["responses"] += 1
        self.counts["bytes"] += len(records)
        nxt, prev = offset, -1
        try:
            for b in iter_batches(records, strict=True):
                b.ensure_valid()
                if b.base_offset <= prev or (prev < 0 and b.last_offset < offset) or b.base_offset >= hw:
                    self.bad(f"{topic}-{partition} fetch at {offset} (hw {hw}): batch [{b.base_offset}, "
                             f"{b.last_offset}] out of place after {prev}")
                if stable:
                    crc = self.crcs.setdefault((topic, partition, b.base_offset), b.crc)
                    if crc != b.crc:
                        self.bad(f"{topic}-{partition} batch at {b.base_offset}: crc {b.crc}, earlier {crc}")
                prev = b.base_offset
                nxt = b.last_offset + 1
                self.counts["batches"] += 1
        except Exception as exc:  # noqa: BLE001 - any damage in a response is the finding
            self.bad(f"{topic}-{partition} fetch at {offset} (hw {hw}, {len(records)} bytes): {exc}")
            return None
        return nxt


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m torture.fetch_checker")
    p.add_argument("--name", required=True)
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--partitions", action="append", default=[], help="TOPIC:COUNT[:stable]")
    p.add_argument("--stop-file", required=True)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    checker = Checker(args.bootstrap, args.seed)
    targets = []
    for spec in args.partitions:
        topic, count, *flag = spec.split(":")
        targets += [(topic, i, bool(flag)) for i in range(int(count))]
    offsets = {(t, i): 0 for t, i, _ in targets}
    while not os.path.exists(args.stop_file):
        for topic, i, stable in targets:
            offset = offsets[(topic, i)]
            try:
                part = checker.fetch(topic, i, offset, checker.rng.choice((1024, 16384, 1 << 20, 4 << 20)))
            except (OSError, ConnectionError, struct.error):
                if checker.sock is not None:
                    checker.sock.close()
                checker.sock = None
                checker.counts["reconnects"] += 1
                time.sleep(0.05)
                continue
            nxt = checker.check(topic, i, offset, part, stable)
            if nxt is None:
                offsets[(topic, i)] = 0         # at the end: another pass from the start
                checker.counts["passes"] += 1
            else:
                offsets[(topic, i)] = nxt
    print("READ " + " ".join(str(v) for v in checker.counts.values()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
