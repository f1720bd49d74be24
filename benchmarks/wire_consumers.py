"""The wire benchmark's fetch side: the topic every fetch row reads, the ``sendfile`` baseline, and the consumers.

* :func:`write_fetch_topic`: ~200 MB of 1 KiB values in 500-record batches, written in process before the broker
  starts.
* :func:`first_read`: one untimed read of the whole topic before the rounds, so the broker's one-time CRC check of
  every batch (its first read marks the bytes verified; later reads ``sendfile`` them) falls on no row; its broker
  CPU is reported apart.
* :func:`sendfile_round`, the baseline: ``os.sendfile`` of the same ``.log`` files to a loopback TCP socket that a
  reader thread drains into one 1 MiB buffer and discards (no field read); timed from the first ``sendfile`` to the
  reader's last byte; its CPU is this process's (sender and reader).
* :func:`consume_round`: confluent-kafka's ``Consumer`` (librdkafka) in this process, ``assign`` from offset 0 and
  ``consume(10_000)`` until every record is returned, timed from ``assign`` (connected and metadata known before
  the clock); every record's error is checked, and the count and last offset. Besides the broker's CPU it reports
  the client's CPU per thread, read from ``/proc/self/task`` before the consumer closes: the Python thread (the
  ``consume()`` loop: librdkafka handing over messages, one Python ``Message`` per record with its value copied
  into ``bytes``, their garbage collection) and librdkafka's own threads (``rdk:*``: receive, parse, queue), the
  wait from ``assign`` to the first records, and the longest wait between two calls that returned records after
  them (librdkafka's ``fetch.queue.backoff.ms``, 1 s, stops
  fetching when the local queue holds ``queued.max.messages.kbytes`` (64 MiB) or ``queued.min.messages``: a
  Python loop that falls that far behind waits up to a second with an empty queue).
* :func:`kcat_round`: Debian's ``kcat`` (C, librdkafka's legacy per-partition consumer API, the librdkafka that
  Debian ships, its defaults) as a child process: ``kcat -C -t T -p 0 -o beginning -c N -e -f '%o\\n'``, stdout
  into a file; timed from the spawn to its exit, so the wall time includes its start-up, bootstrap connection,
  metadata and the ``ListOffsets`` of ``beginning`` (tens of ms) that the Python row does before its clock. It
  stops after N messages (``-c``): ``-e`` alone would end only on the empty fetch at the high watermark, which
  the broker holds for ``fetch.wait.max.ms`` (500 ms), as Kafka does. The offsets it printed are checked to be
  0 .. N-1 after the round. Its CPU is the child's (``wait4`` rusage).
"""
from __future__ import annotations

import gc
import os
import shlex
import shutil
import socket
import subprocess
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from storage_engine.config_file import config_from_mapping
from storage_engine.log.manager import LogManager
from storage_engine.record.record_batch import build_batch

from .harness import MIB, Sample, chunks, generate_records, timed

FETCH_VALUE_BYTES = 1024
FETCH_RECORDS_PER_BATCH = 500
FETCH_MAX_BYTES = 64 * MIB
# The consumer rows: librdkafka's defaults (fetch.max.bytes 50 MiB, but max.partition.fetch.bytes 1 MiB: with one
# partition a fetch returns at most ~1 MiB), and big fetches of up to 64 MiB.
CONSUMERS: dict[str, dict[str, Any]] = {
    "librdkafka consumer, default fetch sizes": {},
    "librdkafka consumer, 64 MiB fetches": {"fetch.max.bytes": FETCH_MAX_BYTES,
                                            "max.partition.fetch.bytes": FETCH_MAX_BYTES,
                                            "receive.message.max.bytes": FETCH_MAX_BYTES + MIB},
}
KCAT_ROW = "kcat consumer (librdkafka from C), default settings"
CONSUME_BATCH = 10_000
IDLE_TIMEOUT_S = 60.0
KCAT_TIMEOUT_S = 300.0                  # a kcat round (~1 s for 200 MB) still running after this is killed
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


class Broker(Protocol):
    @property
    def bootstrap(self) -> str: ...

    def cpu_s(self) -> float: ...


@dataclass
class ConsumeRun:
    sample: Sample              # wall, and CPU of the client (this process) + the broker
    broker_cpu_s: float
    client_cpu_s: float
    threads_cpu_s: dict[str, float] = field(default_factory=dict)   # "python" / "librdkafka" / other
    first_wait_s: float = 0.0       # from assign to the first consume() call that returned records
    longest_wait_s: float = 0.0     # the longest time between two consume() calls that returned records after that


def write_fetch_topic(log_dir: str, topic: str, target_bytes: int) -> tuple[int, int, list[str]]:
    """Write ~``target_bytes`` of 1 KiB-value batches into ``topic``-0; (records, bytes, .log paths)."""
    pool = [build_batch(records) for records in
            chunks(generate_records(10 * FETCH_RECORDS_PER_BATCH, FETCH_VALUE_BYTES, seed=31), FETCH_RECORDS_PER_BATCH)]
    mgr = LogManager.open(config_from_mapping({"broker": {"log.dirs": [log_dir]}}))
    try:
        log = mgr.get_or_create_log(topic, 0)
        i = 0
        while log.size_in_bytes() < target_bytes:
            log.append_batches(pool[i % len(pool)])
            i += 1
        log.flush()
        return log.log_end_offset, log.size_in_bytes(), [seg.path for seg in log.segments]
    finally:
        mgr.close()


def first_read(broker: Broker, topic: str, records: int, size: int) -> float:
    """One untimed read of the whole topic by the bare client before the rounds; the broker's CPU for it. The
    broker checks each batch's CRC on its first read and marks the range verified (later reads send it with
    ``sendfile``): without this pass the first row of the first round would pay that one-time check alone."""
    from . import fetch_client
    before = broker.cpu_s()
    stats = fetch_client.fetch_all(broker.bootstrap, topic, records, MIB)
    if stats.record_bytes != size:
        raise RuntimeError(f"the first read got {stats.record_bytes} record bytes, the topic holds {size}")
    return broker.cpu_s() - before


def _threads_cpu_s() -> dict[str, float]:
    """CPU seconds so far of each live thread of this process, summed by kind: "python" (the main thread),
    "librdkafka" (threads named rdk:*), "other"."""
    out: dict[str, float] = {}
    main = str(os.getpid())
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                text = f.read()
        except FileNotFoundError:
            continue                        # the thread ended
        name = text[text.index("(") + 1:text.rindex(")")]
        fields = text[text.rindex(")") + 2:].split()
        kind = "python" if tid == main else "librdkafka" if name.startswith("rdk:") else "other"
        out[kind] = out.get(kind, 0.0) + (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS
    return out


def consume_round(broker: Broker, topic: str, records: int, settings: dict[str, Any]) -> ConsumeRun:
    from confluent_kafka import Consumer, TopicPartition
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "client.id": "bench-wire", "log_level": 3,
                         "group.id": "bench-wire", "enable.auto.commit": False, "enable.auto.offset.store": False,
                         **settings})
    waits: list[float] = []
    try:
        consumer.list_topics(topic, timeout=30)     # connected, metadata known, before the clock
        gc.collect()

        def consume_all() -> tuple[int, int]:
            consumer.assign([TopicPartition(topic, 0, 0)])
            count, last, idle_since = 0, -1, time.monotonic()
            consume = consumer.consume
            while count < records:
                msgs = consume(min(CONSUME_BATCH, records - count), 1.0)   # never wait for more than are left
                if not msgs:
                    if time.monotonic() - idle_since > IDLE_TIMEOUT_S:
                        raise RuntimeError(f"no record for {IDLE_TIMEOUT_S} s after {count} of {records}")
                    continue
                for m in msgs:
                    if m.error() is not None:
                        raise RuntimeError(f"consume error: {m.error()}")
                count += len(msgs)
                offset = msgs[-1].offset()
                last = -1 if offset is None else offset
                now = time.monotonic()
                waits.append(now - idle_since)
                idle_since = now
            return count, last

        threads_before = _threads_cpu_s()
        cpu_before = broker.cpu_s()
        sample, (count, last) = timed(consume_all)
        broker_cpu = broker.cpu_s() - cpu_before
        threads_after = _threads_cpu_s()        # before close(): librdkafka's threads end with the consumer
    finally:
        consumer.close()
    if count != records or last != records - 1:
        raise RuntimeError(f"consumed {count} records up to offset {last}, the topic holds {records}")
    assert sample.cpu_s is not None
    threads = {kind: cpu - threads_before.get(kind, 0.0) for kind, cpu in threads_after.items()}
    return ConsumeRun(Sample(sample.wall_s, sample.cpu_s + broker_cpu), broker_cpu, sample.cpu_s, threads,
                      waits[0], max(waits[1:], default=0.0))


def kcat_version() -> str | None:
    """``kcat X (librdkafka Y)`` of the kcat on PATH, or None without one."""
    path = shutil.which("kcat")
    if path is None:
        return None
    text = subprocess.run([path, "-V"], capture_output=True, text=True, timeout=30).stdout
    kcat = next((line.split()[1] for line in text.splitlines() if line.startswith("Version ")), "?")
    rdkafka = text.split("librdkafka ", 1)[1].split()[0] if "librdkafka " in text else "?"
    return f"kcat {kcat} (librdkafka {rdkafka})"


def kcat_round(broker: Broker, topic: str, records: int, out_dir: str) -> ConsumeRun:
    """``kcat`` consuming ``topic``-0 from the beginning to ``records`` messages (see the module docstring)."""
    out_path = os.path.join(out_dir, "kcat-offsets.txt")
    argv = ["kcat", "-C", "-b", broker.bootstrap, "-t", topic, "-p", "0", "-o", "beginning", "-c", str(records),
            "-e", "-f", "%o\n"]
    with open(out_path, "wb") as out:
        cpu_before = broker.cpu_s()
        start = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.PIPE)
        watchdog = threading.Timer(KCAT_TIMEOUT_S, proc.kill)      # a stuck kcat fails the round, named below
        watchdog.start()
        assert proc.stderr is not None
        err = proc.stderr.read()                # until kcat exits (it writes little to stderr)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        broker_cpu = broker.cpu_s() - cpu_before
        watchdog.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)
        proc.stderr.close()
    if proc.returncode != 0:
        raise RuntimeError(f"{shlex.join(argv)} exited {proc.returncode}"
                           f"{f' (killed after {KCAT_TIMEOUT_S:.0f} s)' if wall >= KCAT_TIMEOUT_S else ''}: "
                           f"{err.decode(errors='replace')[-2000:]}")
    with open(out_path, "rb") as f:
        printed = f.read()
    os.unlink(out_path)
    if printed != b"".join(b"%d\n" % i for i in range(records)):
        lines = printed.splitlines()
        raise RuntimeError(f"kcat printed {len(lines)} offsets ({lines[:1]} .. {lines[-1:]}), expected 0 .. "
                           f"{records - 1}: {err.decode(errors='replace')[-2000:]}")
    client = usage.ru_utime + usage.ru_stime
    return ConsumeRun(Sample(wall, client + broker_cpu), broker_cpu, client, {"kcat": client})


def sendfile_round(paths: list[str], size: int) -> Sample:
    """``os.sendfile`` of every file to a loopback TCP connection drained by a reader thread that discards."""
    server = socket.create_server(("127.0.0.1", 0))
    sender = socket.create_connection(server.getsockname())
    receiver, _ = server.accept()
    server.close()
    received = [0]

    def drain() -> None:
        buf = memoryview(bytearray(MIB))
        total = 0
        recv_into = receiver.recv_into
        while total < size:
            got = recv_into(buf)
            if not got:
                break
            total += got
        received[0] = total

    reader = threading.Thread(target=drain, name="sendfile-reader")
    reader.start()
    out = sender.fileno()

    def send_all() -> None:
        for path in paths:
            fd = os.open(path, os.O_RDONLY)
            try:
                length, offset = os.fstat(fd).st_size, 0
                while offset < length:
                    offset += os.sendfile(out, fd, offset, length - offset)
            finally:
                os.close(fd)
        reader.join()

    try:
        sample, _ = timed(send_all)
    finally:
        sender.close()
        reader.join()
        receiver.close()
    if received[0] != size:
        raise RuntimeError(f"the reader got {received[0]} bytes, the segments hold {size}")
    return sample
