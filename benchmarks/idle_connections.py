"""idle_connections: a producer's throughput beside 1,000 idle client connections, against the same producer with
none, in the same run on the same broker.

The broker is ``python -m storage_engine serve`` (default configuration) over one log dir under ``var/bench/tmp``;
the producer is librdkafka (confluent-kafka) in this process: ``Producer.produce`` of N records with 1 KiB values
and 12-byte keys, ``acks=1``, ``linger.ms=5``, to a fresh one-partition topic, from the first ``produce`` to the
return of ``flush()`` (the last delivery report), as the ``wire`` section's produce rows do.

An idle connection is what a client that connected and then has nothing to say leaves on a broker: a TCP
connection from this process that sent one ApiVersions v0 request, read its answer, and then stays open, silent,
for the whole round (the broker holds its connection task and its receive buffer, waiting for a next frame). The
connections are opened and answered before the clock starts and closed after it stops; the rounds without them
run with none open. The two cases alternate, round by round (``run_interleaved``).

Rows: ``producer alone`` (the baseline) and ``producer beside 1,000 idle connections`` (100 with ``--quick``), the
ratio with / without; target: the producer keeps >= 0.9x its throughput. Notes: the broker's CPU per round and its
resident memory with the idle connections open (``VmRSS`` of ``/proc/<pid>/status``) against without.
"""
from __future__ import annotations

import os
import resource
import socket
import struct
from typing import Any, Callable

from .harness import Context, Row, Sample, Section, Target, generate_records, run_interleaved, scratch_dir
from .wire import BrokerProcess, _client_config, _produce_round

NAME = "idle_connections"
IDLE_FULL = 1000
IDLE_QUICK = 100
RECORDS_FULL = 200_000
RECORDS_QUICK = 5_000
VALUE_BYTES = 1024
ACKS = "1"
MAX_ROUNDS = 3
TARGET = Target("ratio", 0.9, ">= 0.9x the producer alone")
CLIENT_ID = b"bench-idle"


def _api_versions_v0(correlation_id: int) -> bytes:
    """An ApiVersions v0 request frame (request header v1: key, version, correlation id, client id; empty body)."""
    body = struct.pack(">hhih", 18, 0, correlation_id, len(CLIENT_ID)) + CLIENT_ID
    return struct.pack(">i", len(body)) + body


def _read_exactly(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise RuntimeError(f"the broker closed an idle connection after {len(out)} of {n} bytes")
        out += chunk
    return bytes(out)


def open_idle(bootstrap: str, count: int) -> list[socket.socket]:
    """``count`` connections, each answered once (ApiVersions v0, error code 0) and then left silent."""
    host, port = bootstrap.rsplit(":", 1)
    socks: list[socket.socket] = []
    try:
        for i in range(count):
            s = socket.create_connection((host, int(port)), timeout=30)
            socks.append(s)
            s.sendall(_api_versions_v0(i))
        for i, s in enumerate(socks):    # all sent first: the broker answers them concurrently
            size = struct.unpack(">i", _read_exactly(s, 4))[0]
            frame = _read_exactly(s, size)
            correlation, error = struct.unpack_from(">ih", frame)
            if correlation != i or error != 0:
                raise RuntimeError(f"idle connection {i}: ApiVersions answered correlation {correlation}, "
                                   f"error {error}")
    except BaseException:
        close_all(socks)
        raise
    return socks


def close_all(socks: list[socket.socket]) -> None:
    for s in socks:
        s.close()
    socks.clear()


def _rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def _raise_nofile(needed: int) -> None:
    """This process and the broker it starts hold ``needed`` sockets each: the soft open-file limit goes up to the
    hard one if it is lower than that (plus room for the logs)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = needed + 1024
    if soft != resource.RLIM_INFINITY and soft < want:
        new = want if hard == resource.RLIM_INFINITY else min(want, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))


def run(ctx: Context) -> Section:
    from confluent_kafka.admin import AdminClient

    idle = IDLE_QUICK if ctx.quick else IDLE_FULL
    records = RECORDS_QUICK if ctx.quick else RECORDS_FULL
    rounds = min(ctx.repeats, MAX_ROUNDS)
    _raise_nofile(idle)
    section = Section(NAME, f"librdkafka produce beside {idle:,} idle connections vs alone",
                      {"idle_connections": idle, "records": records, "value_bytes": VALUE_BYTES, "acks": ACKS,
                       "rounds": rounds})
    pool = [(r.key, r.value) for r in generate_records(5_000, VALUE_BYTES, seed=41)]
    items = [pool[i % len(pool)] for i in range(records)]
    alone_name, beside_name = "producer alone", f"producer beside {idle:,} idle connections"
    cpu: dict[str, list[float]] = {alone_name: [], beside_name: []}
    rss: dict[str, list[int]] = {alone_name: [], beside_name: []}
    sizes: list[int] = []
    with scratch_dir(ctx, "idle-connections") as work:
        log_dir = os.path.join(work, "logs")
        os.makedirs(log_dir)
        with BrokerProcess(work, log_dir) as broker:
            assert broker.proc is not None
            pid = broker.proc.pid
            admin: Any = AdminClient(_client_config(broker))
            counter = iter(range(1_000_000))

            def case(name: str, with_idle: bool) -> Callable[[], Sample]:
                def produce() -> Sample:
                    socks = open_idle(broker.bootstrap, idle) if with_idle else []
                    try:
                        rss[name].append(_rss_bytes(pid))
                        result = _produce_round(broker, admin, f"idle-conns-{next(counter)}", ACKS, items)
                    finally:
                        close_all(socks)
                    cpu[name].append(result.broker_cpu_s)
                    sizes.append(sum(len(b) for b in result.batches))
                    return result.sample
                return produce

            runs = run_interleaved({alone_name: case(alone_name, False), beside_name: case(beside_name, True)},
                                   rounds)
            admin = None
    group = f"{VALUE_BYTES} B values, acks={ACKS}, {records:,} records"
    size = min(sizes)
    section.add(Row(group, alone_name, records, size, runs[alone_name]))
    row = section.add(Row(group, beside_name, records, size, runs[beside_name], baseline=alone_name, target=TARGET))
    section.facts["idle"] = {"connections": idle, "ratio": section.ratio(row),
                             "alone_records_per_s": section.find(group, alone_name).records_per_s,
                             "beside_records_per_s": row.records_per_s,
                             "broker_cpu_s": cpu, "broker_rss_bytes": rss}
    for name in (alone_name, beside_name):
        section.notes.append(f"{name}: broker CPU per round {'/'.join(f'{c:.2f}' for c in cpu[name])} s, broker "
                             f"RSS at the round's start {'/'.join(f'{r / 2**20:,.0f}' for r in rss[name])} MiB")
    return section
