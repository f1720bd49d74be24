"""The wire section's fetch rows alone, each with the broker's CPU and the client's CPU per round.

``python -m benchmarks.wire_fetch [--mb 200] [--rounds 3] [--sizes 1,16,64] [--stream-sizes 64] [--consumers]
[--kio] [--profile FILE]``: a topic of ~MB megabytes (1 KiB values, 500-record batches) written in process, one
broker process over it, one untimed read of the whole topic (the broker CRC-checks each batch on its first read and
marks it verified; this way that one-time check falls on no row: its CPU is printed apart), then per round, cases
alternating (``harness.run_interleaved``):

* ``sendfile``, the baseline: ``os.sendfile`` of the segment files to a loopback TCP socket that a reader thread
  drains into one 1 MiB buffer and discards (no field read); its CPU is this process's (sender and reader);
* ``sendfile per 1 MiB request``, the second baseline (:mod:`benchmarks.request_sendfile`): a minimal server in a
  second process answering one 1 MiB request at a time with ``os.sendfile``, as a fetch must be answered; the bare
  client's ratio to it is printed too;
* ``bare N MiB``: the lean Fetch v12 client (:mod:`benchmarks.fetch_client`: the request encoded once and patched,
  each response read whole into one receive buffer per connection, as large as the largest response, the header
  fields read directly, the records taken as a memoryview, every batch header checked for framing and order;
  records not decoded, CRCs not checked) at N MiB per fetch; its client CPU includes connecting and making that
  buffer (at 64 MiB, faulting in 64 MiB of fresh memory, ~0.02-0.04 s on this VM, and receiving into a buffer far
  larger than the CPU's caches are most of it);
* ``bare N MiB streaming``: the same client reading each response through one 1 MiB buffer as the bytes arrive,
  the batch headers checked as they pass, the bodies overwritten unread: a whole-response client's work minus
  holding the response;
* ``kio N MiB`` (``--kio``): the previous bare client, kept to compare in the same run: the request encoded and the
  whole response decoded by kio per fetch (kio copies the records out of the receive buffer), the next offset
  from the last batch header;
* ``--consumers``: librdkafka's consumer from Python with its default sizes and with 64 MiB fetches
  (:func:`benchmarks.wire_consumers.consume_round`: its client CPU split into the Python thread's and librdkafka's
  threads', and the longest wait between two ``consume()`` calls that returned records), and Debian's ``kcat``
  (:func:`benchmarks.wire_consumers.kcat_round`: librdkafka from C with its defaults, as a child process timed
  from its spawn to its exit; when kcat is on PATH).

The broker's CPU is read from ``/proc/<pid>/stat`` before and after each round; the client's is this process's
``time.process_time`` over the round (every thread). Both are printed per round, in seconds per the topic's bytes.
"""
from __future__ import annotations

import datetime
import io
import socket
import struct
from typing import Callable

from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.fetch.v12.response import FetchResponse
from kio.schema.types import TopicName
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i8, i16, i32, i32Timedelta, i64

from . import fetch_client

VERSION = 12
REQUEST_ROW = "sendfile per 1 MiB request"
_SIZE = struct.Struct(">i")
_ENTRY = struct.Struct(">qi")


def fetch_all(address: str, topic: str, end_offset: int, partition_max_bytes: int,
              *, stream: bool = False) -> tuple[int, int]:
    """The lean client (:func:`benchmarks.fetch_client.fetch_all`); (responses, bytes of whole batches)."""
    stats = fetch_client.fetch_all(address, topic, end_offset, partition_max_bytes, stream=stream)
    return stats.responses, stats.record_bytes


# -- the previous bare client: kio per fetch, kept for comparison (``--kio``) -----------------------------------

def _next_offset(records: bytes | memoryview, current: int) -> int:
    pos, nxt = 0, current
    view = memoryview(records)
    while pos + 27 <= len(view):
        base, length = _ENTRY.unpack_from(view, pos)
        if pos + 12 + length > len(view):
            break                                            # a partial batch at the end: fetched again
        nxt = base + struct.unpack_from(">i", view, pos + 23)[0] + 1
        pos += 12 + length
    return nxt


def kio_fetch_all(address: str, topic: str, end_offset: int, partition_max_bytes: int) -> tuple[int, int]:
    """Fetch ``topic``-0 from offset 0 to ``end_offset``, kio encoding each request and decoding each response;
    (responses, record bytes received)."""
    header_cls = FetchRequest.__header_schema__
    write_header, write_body = entity_writer(header_cls), entity_writer(FetchRequest)
    read_header, read_body = entity_reader(FetchResponse.__header_schema__), entity_reader(FetchResponse)
    host, port = address.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    buf = bytearray(partition_max_bytes + 1024 * 1024)
    offset = responses = received = 0
    try:
        while offset < end_offset:
            out = io.BytesIO()
            out.write(b"\0\0\0\0")
            write_header(out, header_cls(request_api_key=FetchRequest.__api_key__, request_api_version=i16(VERSION),
                                         correlation_id=i32(responses), client_id="bench"))
            write_body(out, FetchRequest(
                max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=500)), min_bytes=i32(1),
                max_bytes=i32(partition_max_bytes), isolation_level=i8(0), session_id=i32(0), session_epoch=i32(-1),
                forgotten_topics_data=(), rack_id="",
                topics=(FetchTopic(topic=TopicName(topic), partitions=(FetchPartition(
                    partition=i32(0), fetch_offset=i64(offset), partition_max_bytes=i32(partition_max_bytes)),)),)))
            frame = out.getbuffer()
            _SIZE.pack_into(frame, 0, len(frame) - 4)
            sock.sendall(frame)
            size = _SIZE.unpack(_recv_exactly(sock, memoryview(bytearray(4)), 4))[0]
            if size > len(buf):
                buf = bytearray(size)
            view = _recv_exactly(sock, memoryview(buf), size).toreadonly()
            _, at = read_header(view, 0)
            body, _ = read_body(view, at)
            part = body.responses[0].partitions[0]
            if int(part.error_code) != 0:
                raise RuntimeError(f"fetch at offset {offset}: error {part.error_code}")
            records = part.records or b""
            received += len(records)
            offset = _next_offset(records, offset)
            responses += 1
    finally:
        sock.close()
    return responses, received


def _recv_exactly(sock: socket.socket, view: memoryview, n: int) -> memoryview:
    fetch_client.recv_exactly(sock, view, n)
    return view[:n]


# -- the command --------------------------------------------------------------------------------------------------

def _broker_rss_kib(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) of ``pid`` in KiB."""
    found = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                found[key] = int(rest.split()[0])
    return found["VmRSS"], found["VmHWM"]


def _sizes(text: str) -> list[int]:
    return [int(n) for n in text.split(",") if n.strip()]


def main(argv: list[str] | None = None) -> int:
    import argparse
    import os
    import sys
    import tempfile
    from pathlib import Path

    from . import request_sendfile, wire, wire_consumers as consumers
    from .harness import MB, MIB, Sample, run_interleaved, timed

    parser = argparse.ArgumentParser(prog="python -m benchmarks.wire_fetch",
                                     description="The wire section's fetch rows alone (see the module docstring).")
    parser.add_argument("--mb", type=int, default=200, help="topic size in MB (default 200)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sizes", default="1,16,64", help="the bare client's MiB per fetch (default 1,16,64)")
    parser.add_argument("--stream-sizes", default="64",
                        help="MiB per fetch of the bare client reading through a 1 MiB buffer (default 64; '' none)")
    parser.add_argument("--kio", action="store_true", help="add the previous kio-decoding client at --sizes")
    parser.add_argument("--consumers", action="store_true",
                        help="add the librdkafka consumer rows (Python) and kcat's (C, if kcat is on PATH)")
    parser.add_argument("--profile", metavar="FILE", help="run the broker under cProfile, stats into FILE")
    args = parser.parse_args(argv)
    bare: dict[str, tuple[int, str]] = {f"bare {n} MiB": (n * MIB, "whole") for n in _sizes(args.sizes)}
    bare.update({f"bare {n} MiB streaming": (n * MIB, "stream") for n in _sizes(args.stream_sizes)})
    if args.kio:
        bare.update({f"kio {n} MiB": (n * MIB, "kio") for n in _sizes(args.sizes)})
    kcat = consumers.kcat_version() if args.consumers else None
    with tempfile.TemporaryDirectory(prefix="wire-fetch-") as work:
        log_dir = os.path.join(work, "data")
        os.makedirs(log_dir)
        topic = "wire-fetch"
        records, size, paths = consumers.write_fetch_topic(log_dir, topic, args.mb * MB)
        for path in paths:
            with open(path, "rb") as segment:
                while segment.read(MIB):
                    pass
        broker_work = os.path.join(work, "broker")
        os.makedirs(broker_work)
        profile = None if args.profile is None else Path(args.profile).resolve()
        with wire.BrokerProcess(broker_work, log_dir, profile_to=profile) as broker, \
                request_sendfile.RequestServer(paths) as request_server:
            assert broker.proc is not None
            verify_cpu = consumers.first_read(broker, topic, records, size)
            done: dict[str, list[consumers.ConsumeRun]] = {}

            def bare_case(name: str) -> Callable[[], Sample]:
                max_bytes, how = bare[name]

                def run() -> tuple[int, int]:
                    if how == "kio":
                        return kio_fetch_all(broker.bootstrap, topic, records, max_bytes)
                    return fetch_all(broker.bootstrap, topic, records, max_bytes, stream=how == "stream")

                def case() -> Sample:
                    before = broker.cpu_s()
                    sample, (_, got) = timed(run)
                    if got != size:
                        raise RuntimeError(f"{name}: received {got} record bytes, the topic holds {size}")
                    done.setdefault(name, []).append(
                        consumers.ConsumeRun(sample, broker.cpu_s() - before, sample.cpu_s or 0.0))
                    return sample
                return case

            def consumer(name: str) -> Callable[[], Sample]:
                def case() -> Sample:
                    if name == consumers.KCAT_ROW:
                        run_ = consumers.kcat_round(broker, topic, records, broker_work)
                    else:
                        run_ = consumers.consume_round(broker, topic, records, consumers.CONSUMERS[name])
                    done.setdefault(name, []).append(run_)
                    return run_.sample
                return case

            plan: dict[str, Callable[[], Sample]] = {
                "sendfile": lambda: consumers.sendfile_round(paths, size),
                REQUEST_ROW: lambda: request_sendfile.request_round(request_server, size)}
            plan.update({name: bare_case(name) for name in bare})
            if args.consumers:
                plan.update({name: consumer(name) for name in consumers.CONSUMERS})
                if kcat is not None:
                    plan[consumers.KCAT_ROW] = consumer(consumers.KCAT_ROW)
            runs = run_interleaved(plan, args.rounds)
            rss, hwm = _broker_rss_kib(broker.proc.pid)
        best = {name: max(size / MB / s.wall_s for s in samples) for name, samples in runs.items()}
        print(f"{size / MB:,.1f} MB, {records:,} records, {args.rounds} rounds (best MB/s; ratio to sendfile's best; "
              f"CPU seconds per round = per {size / MB:,.0f} MB)")
        for name, samples in runs.items():
            rates = "/".join(f"{size / MB / s.wall_s:,.0f}" for s in samples)
            ratio = best[name] / best["sendfile"]
            if name in done:
                rs = done[name]
                extra = (f"  broker CPU {'/'.join(f'{r.broker_cpu_s:.2f}' for r in rs)} s, "
                         f"client CPU {'/'.join(f'{r.client_cpu_s:.2f}' for r in rs)} s")
                if name in consumers.CONSUMERS:
                    python = "/".join(f"{r.threads_cpu_s.get('python', 0):.2f}" for r in rs)
                    rdkafka = "/".join(f"{r.threads_cpu_s.get('librdkafka', 0):.2f}" for r in rs)
                    first = "/".join(f"{r.first_wait_s * 1000:.0f}" for r in rs)
                    waits = "/".join(f"{r.longest_wait_s * 1000:.0f}" for r in rs)
                    extra += (f" (Python thread {python}, librdkafka threads {rdkafka}; first records after {first} ms, "
                              f"longest wait after them {waits} ms)")
            else:
                extra = f"  CPU (sender + reader) {'/'.join(f'{s.cpu_s or 0:.2f}' for s in samples)} s"
            if name == "bare 1 MiB":
                extra += f"; {best[name] / best[REQUEST_ROW]:.3f}x {REQUEST_ROW}"
            print(f"  {name:52s} {best[name]:9,.1f} MB/s  {ratio:6.3f}x  (rounds {rates}){extra}")
        print(f"  broker RSS at the end {rss / 1024:,.0f} MiB, peak (VmHWM) {hwm / 1024:,.0f} MiB; its first read of "
              f"the topic (untimed, before the rounds: CRC check of every batch, once) {verify_cpu:.2f} s CPU")
        if args.consumers:
            print(f"  {consumers.KCAT_ROW}: {kcat or 'not measured: no kcat on PATH (Debian kcat: make clients)'}")
        if profile is not None:
            import pstats
            pstats.Stats(str(profile), stream=sys.stdout).sort_stats("tottime").print_stats(30)
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
