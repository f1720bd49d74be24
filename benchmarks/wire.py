"""wire: the Kafka wire protocol, librdkafka against the broker process over loopback, each figure set against
the engine's (or the kernel's) own work on the same bytes in the same run.

The broker is ``python -m storage_engine --config CFG serve --listeners PLAINTEXT://127.0.0.1:0`` in a process of
its own (one log dir under ``var/bench/tmp``, default configuration); the client is confluent-kafka (librdkafka)
in this process (and, for the latency rows, Kafka's Java producer in a JVM). Two broker processes run one after
the other: one for the produce rows and the latency run, one for the fetch rows (its log dir holds the pre-written
topic when it starts).

* produce: ``Producer.produce`` of N records (100 B and 1 KiB values, 12-byte keys) to a fresh one-partition
  topic with ``acks=1`` and ``acks=all`` (``linger.ms=5``, default ``batch.size``, no compression, a local queue
  large enough that ``produce`` never waits), from the first ``produce`` to the return of ``flush()``, i.e. the
  last delivery report; one record produced and delivered before the clock starts (connection, metadata and
  leader known; it is not counted). Baseline: ``Log.append_batches`` into a fresh log in this process of the very
  batches librdkafka sent, one call per batch (read back from the broker's segment after the first round: the
  same record counts per batch, the same bytes). Records/s and MB/s count the records and batch bytes in the log.
* fetch: every row reads every record of a topic of ~200 MB of 1 KiB values (500-record batches written in
  process before the broker starts) from offset 0, with the broker's CPU and the client's per round in the notes
  and ``facts["fetch_cpu_s"]``; one untimed read of the whole topic before the rounds takes the broker's one-time
  CRC check of every batch (its CPU in ``facts["fetch_first_read_broker_cpu_s"]``), so no row pays it. Baseline: ``os.sendfile`` of the same ``.log`` bytes to a loopback TCP socket that
  a reader thread drains into a 1 MiB buffer and discards (from the first ``sendfile`` to the reader's last
  byte). A second row, compared with it, is what asking costs: a minimal server in a second process answering one
  1 MiB request at a time with ``sendfile`` (benchmarks/request_sendfile.py); the summary gives the bare 1 MiB
  row's ratio to it too. The rows (benchmarks/wire_consumers.py, benchmarks/fetch_client.py say exactly what each client does):
  the bare Fetch v12 client (request encoded once and patched, response fields read directly, records as a
  memoryview of one receive buffer, every batch header checked for framing and order, records not decoded, CRCs
  not checked) at 1, 16 and 64 MiB per fetch, and at 64 MiB reading through a 1 MiB buffer as the bytes arrive
  (streaming); librdkafka's consumer in this process (``assign`` from offset 0, ``consume(10_000)``,
  ``fetch.min.bytes`` default), with its default sizes (``fetch.max.bytes`` 50 MiB, ``max.partition.fetch.bytes``
  1 MiB: ~1 MiB per fetch of the one partition) and with 64 MiB fetches (both set to 64 MiB), its client CPU
  split into the Python thread's and librdkafka's threads'; and Debian's ``kcat`` (librdkafka from C, its
  defaults; when kcat is on PATH), timed from its spawn to its exit.
* latency (benchmarks/wire_latency.py says exactly how): 1 KiB values, ``acks=1`` and ``acks=all``, produced
  paced at half the peak of the measuring client itself for a few seconds, by two clients: librdkafka from Python
  with a delivery callback per record (its peak measured unpaced with the same producer and callbacks; the produce
  rows' peak, without them, kept beside it) and Kafka's own Java producer (kafka-clients 3.9.1, its defaults plus
  ``acks``; one JVM, benchmarks/java/ProduceLatency.java); per record, callback time minus ``produce``/``send()``
  time, p50 / p99 / p99.9 / max; rounds alternating clients and acks, the load average at the start of each.

``cpu s`` of a wire row is the CPU of the client (this process, all librdkafka threads; kcat's child process for
its row) plus the broker process's (``/proc/<pid>/stat``) over the round; of a baseline row, this process's alone.

``python -m benchmarks --only wire --profile-broker DIR`` runs each broker under cProfile (every thread: the
event loop and the engine's thread pool) and writes ``DIR/wire-produce.pstats`` and ``DIR/wire-fetch.pstats``;
the top functions go to stderr. Figures taken so are slower than unprofiled ones.
"""
from __future__ import annotations

import gc
import glob
import os
import pstats
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import yaml

from storage_engine import layout
from storage_engine.config_file import config_from_mapping
from storage_engine.log.manager import LogManager
from storage_engine.segment.file_records import iter_batches

from include.broker_launcher import BrokerLauncher

from . import wire_fetch
from .request_sendfile import RequestServer, request_round
from .wire_consumers import (CONSUMERS, FETCH_RECORDS_PER_BATCH, FETCH_VALUE_BYTES, KCAT_ROW, ConsumeRun,
                             consume_round, first_read, kcat_round, kcat_version, sendfile_round, write_fetch_topic)
from .harness import (MB, MIB, REPO, Context, Row, Sample, Section, Target, generate_records, process_cpu_s,
                      run_interleaved, scratch_dir, timed)

NAME = "wire"


@dataclass(frozen=True)
class Sizes:
    produce_records: dict[int, int]     # value bytes -> records per produce round
    fetch_bytes: int                    # size of the pre-written topic the consumer reads
    latency_s: float                    # length of one paced latency run
    peak_records: int = 200_000         # records of one unpaced run measuring a latency client's peak


FULL = Sizes({100: 1_500_000, 1024: 400_000}, 200 * MB, 5.0, 200_000)
QUICK = Sizes({100: 20_000, 1024: 5_000}, 8 * MB, 1.0, 5_000)
MAX_ROUNDS = 3                          # each round is seconds long and writes hundreds of MB
VALUE_SIZES = (100, 1024)
ACKS = ("1", "all")
LINGER_MS = 5
DISTINCT_RECORDS = 5_000                # produced records repeat from a pool; their content does not change the work
LATENCY_VALUE_BYTES = 1024
LISTENERS = "PLAINTEXT://127.0.0.1:0"
PRODUCE_TARGET = Target("ratio", 0.5, ">= 0.5x in-process append")
START_TIMEOUT_S = 60.0
IDLE_TIMEOUT_S = 60.0                   # a round that sees no progress for this long fails
PROFILE_DIR: Path | None = None         # ``--profile-broker DIR``: run the brokers under cProfile, stats into DIR
PROFILE_TOP = 25


# Runs ``python -m storage_engine ARGS`` with every thread profiled (cProfile profiles only the thread that enables
# it: each new thread enables its own profiler on its first profile event), then writes all of them as one stats
# file. argv: [-c, OUT, ARGS...].
_PROFILE_BOOTSTRAP = """\
import cProfile, pstats, runpy, sys, threading
out = sys.argv[1]
sys.argv = ["storage_engine"] + sys.argv[2:]
profiles = []
def start_thread_profile(frame, event, arg):
    profile = cProfile.Profile()
    profiles.append(profile)
    profile.enable()
threading.setprofile(start_thread_profile)
main = cProfile.Profile()
profiles.append(main)
main.enable()
try:
    runpy.run_module("storage_engine", run_name="__main__", alter_sys=True)
finally:
    main.disable()
    threading.setprofile(None)
    stats = pstats.Stats(main)
    for profile in profiles[1:]:
        try:
            stats.add(profile)
        except Exception:
            pass
    stats.dump_stats(out)
"""


# ---------------------------------------------------------------------------------------------------------------
# the broker process

class BrokerProcess(BrokerLauncher):
    """``python -m storage_engine serve`` on a free loopback port over ``log_dir``
    (:class:`include.broker_launcher.BrokerLauncher`); ``cpu_s()`` is its CPU so far."""

    def __init__(self, work_dir: str, log_dir: str, *, profile_to: Path | None = None):
        self.work_dir = work_dir
        self.log_dir = log_dir
        self.profile_to = profile_to
        command = None if profile_to is None else [sys.executable, "-c", _PROFILE_BOOTSTRAP, str(profile_to)]
        super().__init__(os.path.join(work_dir, "storage.yaml"), os.path.join(work_dir, "broker.log"),
                         listeners=LISTENERS, cwd=REPO, command=command)

    def __enter__(self) -> "BrokerProcess":
        with open(self.config_path, "w") as f:
            yaml.safe_dump({"broker": {"log.dirs": [self.log_dir], "listeners": LISTENERS}}, f)
        if self.profile_to is not None:
            self.profile_to.parent.mkdir(parents=True, exist_ok=True)
        self.start(START_TIMEOUT_S)
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is not None:
            self._kill()
            return
        self.stop_clean()

    def stop_clean(self) -> None:
        """SIGTERM: the broker answers what is in flight and closes its logs clean (exit 0)."""
        if self.proc is None:
            return
        rc = self.stop(120)
        if rc is None:
            raise RuntimeError(f"the broker did not stop on SIGTERM\n{self.log_tail()}")
        if rc != 0:
            raise RuntimeError(f"the broker exited {rc}\n{self.log_tail()}")

    def _kill(self) -> None:
        self.close()
        self.proc = None

    def cpu_s(self) -> float:
        """User + system CPU seconds of the broker process so far (every thread)."""
        assert self.proc is not None
        return process_cpu_s(self.proc.pid)

    def partition_batches(self, topic: str) -> list[bytes]:
        """The batches of ``topic``-0 as the broker wrote them (read from its segment files)."""
        folder = os.path.join(self.log_dir, layout.partition_dir_name(topic, 0))
        out = []
        for path in sorted(glob.glob(os.path.join(folder, "*.log"))):
            with open(path, "rb") as f:
                data = f.read()
            out += [bytes(data[b.pos:b.pos + b.size_in_bytes]) for b in iter_batches(data)]
        return out


def _progress(text: str) -> None:
    print(f"[wire] {text}", file=sys.stderr, flush=True)


def _client_config(broker: BrokerProcess, **extra: Any) -> dict[str, Any]:
    return {"bootstrap.servers": broker.bootstrap, "client.id": "bench-wire", "log_level": 3, **extra}


def _create_topic(admin: Any, topic: str) -> None:
    from confluent_kafka.admin import NewTopic
    for future in admin.create_topics([NewTopic(topic, 1, 1)], operation_timeout=30).values():
        future.result(timeout=60)


def _delete_topic(admin: Any, topic: str) -> None:
    """Free the disk a round used; a failure only leaves the files until the scratch dir goes."""
    try:
        for future in admin.delete_topics([topic], operation_timeout=30).values():
            future.result(timeout=60)
    except Exception as exc:   # noqa: BLE001 - the measurement is done; the scratch dir is removed anyway
        _progress(f"could not delete {topic}: {exc}")


def _count(batches: list[bytes]) -> int:
    return sum(b.records_count for data in batches for b in iter_batches(data))


# ---------------------------------------------------------------------------------------------------------------
# produce

@dataclass
class ProduceRun:
    sample: Sample
    batches: list[bytes]    # what librdkafka sent, warm-up batch excluded
    broker_cpu_s: float


def _producer(broker: BrokerProcess, acks: str, **extra: Any) -> Any:
    from confluent_kafka import Producer
    return Producer(_client_config(broker, **{
        "acks": acks, "linger.ms": LINGER_MS, "compression.type": "none",
        "queue.buffering.max.messages": 10_000_000, "queue.buffering.max.kbytes": 4 * 1024 * 1024, **extra}))


def _warm_up(producer: Any, topic: str) -> None:
    """One record to ``topic``, delivered: the connection to the partition's leader is up and metadata known."""
    producer.produce(topic, b"warm-up")
    if producer.flush(60) != 0:
        raise RuntimeError(f"the warm-up record to {topic} was not delivered")


def _produce_all(producer: Any, topic: str, items: list[tuple[Any, Any]]) -> int:
    produce = producer.produce
    for key, value in items:
        try:
            produce(topic, value, key)
        except BufferError:     # the local queue is full: serve the client until there is room
            producer.poll(0.01)
            produce(topic, value, key)
    return producer.flush(IDLE_TIMEOUT_S)


def _produce_round(broker: BrokerProcess, admin: Any, topic: str, acks: str, items: list[tuple[Any, Any]]) -> ProduceRun:
    errors: list[Any] = []

    def report(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(err)

    _create_topic(admin, topic)
    producer = _producer(broker, acks, **{"delivery.report.only.error": True, "on_delivery": report})
    _warm_up(producer, topic)
    gc.collect()
    cpu_before = broker.cpu_s()
    sample, left = timed(_produce_all, producer, topic, items)
    broker_cpu = broker.cpu_s() - cpu_before
    if left or errors:
        raise RuntimeError(f"{topic}: {left} records not delivered, {len(errors)} failed: {errors[:3]}")
    batches = broker.partition_batches(topic)
    if not batches or _count(batches[:1]) != 1 or _count(batches[1:]) != len(items):
        raise RuntimeError(f"{topic}: the log holds {_count(batches)} records, expected the warm-up one and "
                           f"{len(items)}")
    _delete_topic(admin, topic)
    assert sample.cpu_s is not None
    return ProduceRun(Sample(sample.wall_s, sample.cpu_s + broker_cpu), batches[1:], broker_cpu)


def _append_round(ctx: Context, batches: list[bytes], records: int, size: int) -> Sample:
    """``Log.append_batches`` of ``batches``, one call each, into a fresh log in this process (default config: no
    roll and no fsync while timing)."""
    with scratch_dir(ctx, "wire-append") as log_dir:
        mgr = LogManager.open(config_from_mapping({"broker": {"log.dirs": [log_dir]}}))
        try:
            log = mgr.get_or_create_log("bench-wire", 0)

            def append_all() -> None:
                append = log.append_batches
                for batch in batches:
                    append(batch)

            sample, _ = timed(append_all)
            if log.log_end_offset != records or log.size_in_bytes() != size:
                raise RuntimeError(f"in-process append holds {log.log_end_offset} records in {log.size_in_bytes()} "
                                   f"bytes, expected {records} in {size}")
        finally:
            mgr.close()
    return sample


# ---------------------------------------------------------------------------------------------------------------
# fetch (the consumers, the topic and the baseline: benchmarks/wire_consumers.py; the bare client:
# benchmarks/fetch_client.py)

# The bare Fetch client's rows, by partition_max_bytes: librdkafka's default 1 MiB, 16 MiB and 64 MiB read whole,
# and 64 MiB read through a 1 MiB buffer as the bytes arrive; (bytes per fetch, streaming).
BARE_FETCHES = {
    "bare Fetch v12 client, 1 MiB per fetch": (MIB, False),
    "bare Fetch v12 client, 16 MiB per fetch": (16 * MIB, False),
    "bare Fetch v12 client, 64 MiB per fetch": (64 * MIB, False),
    "bare Fetch v12 client, 64 MiB per fetch, streaming": (64 * MIB, True),
}
SENDFILE_ROW = "os.sendfile -> loopback reader"
# The second baseline: a minimal server answering one 1 MiB request at a time with sendfile (what asking costs;
# benchmarks/request_sendfile.py). Compared with SENDFILE_ROW, no target; the bare 1 MiB row's ratio to it is in
# the summary.
REQUEST_ROW = "os.sendfile per 1 MiB request -> loopback client (second process)"
# The targets: the bare client 0.7x at 1 MiB per fetch, 0.5x at 64 MiB; librdkafka's consumer with its default
# settings 0.4x (from C too). The other rows (16 MiB, librdkafka at 64 MiB) keep 0.7x.
FETCH_TARGETS = {
    "bare Fetch v12 client, 64 MiB per fetch": Target("ratio", 0.5, ">= 0.5x sendfile"),
    "bare Fetch v12 client, 64 MiB per fetch, streaming": Target("ratio", 0.5, ">= 0.5x sendfile"),
    "librdkafka consumer, default fetch sizes": Target("ratio", 0.4, ">= 0.4x sendfile"),
    KCAT_ROW: Target("ratio", 0.4, ">= 0.4x sendfile"),
}
FETCH_TARGET = Target("ratio", 0.7, ">= 0.7x sendfile")


def _fetch_rows(work: str, fetch_bytes: int, rounds: int, section: Section, broker_cpu: dict[str, list[float]]) -> None:
    """The fetch rows: one broker over a pre-written topic; sendfile, the bare client, librdkafka's consumer from
    Python and (with kcat on PATH) from C, rounds interleaved; each row's broker and client CPU in the notes."""
    fetch_dir = os.path.join(work, "fetch")
    os.makedirs(fetch_dir)
    topic = "wire-fetch"
    records, size, paths = write_fetch_topic(fetch_dir, topic, fetch_bytes)
    profile = _profile_path("fetch")
    fetch_work = os.path.join(work, "fetch-broker")
    os.makedirs(fetch_work)
    kcat = kcat_version()
    runs_of: dict[str, list[ConsumeRun]] = {}
    with BrokerProcess(fetch_work, fetch_dir, profile_to=profile) as broker, RequestServer(paths) as request_server:
        _progress(f"broker on {broker.bootstrap}: fetch rows ({size / MB:,.0f} MB), {rounds} rounds")

        def consume_case(name: str) -> Callable[[], Sample]:
            def case() -> Sample:
                run_ = consume_round(broker, topic, records, CONSUMERS[name])
                runs_of.setdefault(name, []).append(run_)
                return run_.sample
            return case

        def bare_case(name: str) -> Callable[[], Sample]:
            max_bytes, stream = BARE_FETCHES[name]

            def case() -> Sample:
                cpu_before = broker.cpu_s()
                sample, (_, got) = timed(lambda: wire_fetch.fetch_all(broker.bootstrap, topic, records, max_bytes,
                                                                      stream=stream))
                if got != size:
                    raise RuntimeError(f"{name}: received {got} record bytes, the topic holds {size}")
                cpu = broker.cpu_s() - cpu_before
                runs_of.setdefault(name, []).append(ConsumeRun(sample, cpu, sample.cpu_s or 0.0))
                return Sample(sample.wall_s, (sample.cpu_s or 0.0) + cpu)
            return case

        def kcat_case() -> Sample:
            run_ = kcat_round(broker, topic, records, fetch_work)
            runs_of.setdefault(KCAT_ROW, []).append(run_)
            return run_.sample

        for path in paths:      # the page cache holds the segment for every row alike
            with open(path, "rb") as segment:
                while segment.read(MIB):
                    pass
        verify_cpu = first_read(broker, topic, records, size)
        fetch_plan: dict[str, Callable[[], Sample]] = {"sendfile": lambda: sendfile_round(paths, size),
                                                       REQUEST_ROW: lambda: request_round(request_server, size)}
        fetch_plan.update({name: bare_case(name) for name in BARE_FETCHES})
        fetch_plan.update({name: consume_case(name) for name in CONSUMERS})
        if kcat is not None:
            fetch_plan[KCAT_ROW] = kcat_case
        fetch_runs = run_interleaved(fetch_plan, rounds)
    _report_profile(profile, section)
    group = f"{FETCH_VALUE_BYTES} B values, {size / MB:,.0f} MB"
    section.add(Row(group, SENDFILE_ROW, records, size, fetch_runs["sendfile"]))
    section.facts["fetch_first_read_broker_cpu_s"] = verify_cpu
    section.notes.append(f"the broker's first read of the topic (untimed, before the rounds: it CRC-checks every "
                         f"batch once and marks it verified): broker CPU {verify_cpu:.2f} s")
    section.notes.append(f"{SENDFILE_ROW}: CPU (sender + reader) per round "
                         f"{'/'.join(f'{s.cpu_s or 0:.2f}' for s in fetch_runs['sendfile'])} s")
    section.add(Row(group, REQUEST_ROW, records, size, fetch_runs[REQUEST_ROW], baseline=SENDFILE_ROW))
    section.notes.append(f"{REQUEST_ROW}: CPU (server + client) per round "
                         f"{'/'.join(f'{s.cpu_s or 0:.2f}' for s in fetch_runs[REQUEST_ROW])} s")
    for name in [*BARE_FETCHES, *CONSUMERS, *([KCAT_ROW] if kcat is not None else [])]:
        section.add(Row(group, name, records, size, fetch_runs[name], baseline=SENDFILE_ROW,
                        target=FETCH_TARGETS.get(name, FETCH_TARGET)))
        runs = runs_of[name]
        broker_cpu[f"{group}, {name}"] = [r.broker_cpu_s for r in runs]
        section.facts.setdefault("fetch_cpu_s", {})[name] = {
            "broker": [r.broker_cpu_s for r in runs], "client": [r.client_cpu_s for r in runs],
            "client_threads": [r.threads_cpu_s for r in runs], "first_wait_s": [r.first_wait_s for r in runs],
            "longest_wait_s": [r.longest_wait_s for r in runs]}
        note = (f"{name}: broker CPU per round {'/'.join(f'{r.broker_cpu_s:.2f}' for r in runs)} s, client CPU "
                f"{'/'.join(f'{r.client_cpu_s:.2f}' for r in runs)} s")
        if name in CONSUMERS:
            python = "/".join(f"{r.threads_cpu_s.get('python', 0):.2f}" for r in runs)
            rdkafka = "/".join(f"{r.threads_cpu_s.get('librdkafka', 0):.2f}" for r in runs)
            first = "/".join(f"{r.first_wait_s * 1000:.0f}" for r in runs)
            waits = "/".join(f"{r.longest_wait_s * 1000:.0f}" for r in runs)
            note += f" (the Python thread {python} s, librdkafka's threads {rdkafka} s); first records after " \
                    f"{first} ms, longest wait for records after them {waits} ms"
        section.notes.append(note)
    if kcat is None:
        section.notes.append(f"{KCAT_ROW}: not measured, no kcat on PATH (Debian's kcat: make clients)")
    else:
        section.facts["kcat"] = kcat
    section.notes.append(f"{group}: {FETCH_RECORDS_PER_BATCH}-record batches of "
                         f"{size / (records / FETCH_RECORDS_PER_BATCH) / 1000:,.0f} kB")


# ---------------------------------------------------------------------------------------------------------------

def _profile_path(name: str) -> Path | None:
    return None if PROFILE_DIR is None else Path(PROFILE_DIR).resolve() / f"wire-{name}.pstats"


def _report_profile(path: Path | None, section: Section) -> None:
    if path is None or not path.exists():
        return
    _progress(f"broker profile {path} (top {PROFILE_TOP} by own time):")
    stats = pstats.Stats(str(path), stream=sys.stderr)
    stats.sort_stats("tottime").print_stats(PROFILE_TOP)
    section.notes.append(f"PROFILED: the broker ran under cProfile (all threads), so its rows are slower than "
                         f"unprofiled ones; stats in {path} (python -m pstats)")


def _group(value_bytes: int, acks: str) -> str:
    return f"{value_bytes} B values, acks={acks}"


def run(ctx: Context) -> Section:
    from confluent_kafka import libversion
    from confluent_kafka.admin import AdminClient

    sizes = QUICK if ctx.quick else FULL
    rounds = min(ctx.repeats, MAX_ROUNDS)
    section = Section(NAME, "Kafka wire protocol: librdkafka over loopback vs the engine in process / sendfile",
                      {"client": f"librdkafka {libversion()[0]}",
                       "produce_records": ", ".join(f"{n:,} x {v} B" for v, n in sizes.produce_records.items()),
                       "linger_ms": LINGER_MS, "compression": "none",
                       "fetch_topic_mb": round(sizes.fetch_bytes / MB),
                       "latency_s": sizes.latency_s, "rounds": rounds})
    cases = [(v, acks) for v in VALUE_SIZES for acks in ACKS]
    pools = {v: [(r.key, r.value) for r in generate_records(DISTINCT_RECORDS, v, seed=30 + v)] for v in VALUE_SIZES}
    items = {v: [pools[v][i % DISTINCT_RECORDS] for i in range(n)] for v, n in sizes.produce_records.items()}
    broker_cpu: dict[str, list[float]] = {}

    with scratch_dir(ctx, "wire") as work:
        # -- produce, and the latency runs on the same broker ---------------------------------------------------
        produce_dir = os.path.join(work, "produce")
        os.makedirs(produce_dir)
        profile = _profile_path("produce")
        with BrokerProcess(work, produce_dir, profile_to=profile) as broker:
            _progress(f"broker on {broker.bootstrap}: produce rows, {rounds} rounds")
            admin: Any = AdminClient(_client_config(broker))
            captured: dict[tuple[int, str], list[bytes]] = {}      # the batches of each case's first round
            all_runs: dict[tuple[int, str], list[tuple[int, int, float, float]]] = {c: [] for c in cases}
            counter = iter(range(1_000_000))

            def wire_case(value_bytes: int, acks: str) -> Callable[[], Sample]:
                def case() -> Sample:
                    topic = f"wire-produce-{value_bytes}b-acks-{acks}-{next(counter)}"
                    run_ = _produce_round(broker, admin, topic, acks, items[value_bytes])
                    captured.setdefault((value_bytes, acks), run_.batches)
                    # (batches, their bytes, broker CPU, client CPU) of every round; the batches themselves go
                    all_runs[(value_bytes, acks)].append((len(run_.batches), sum(len(b) for b in run_.batches),
                                                          run_.broker_cpu_s,
                                                          (run_.sample.cpu_s or 0.0) - run_.broker_cpu_s))
                    broker_cpu.setdefault(_group(value_bytes, acks), []).append(run_.broker_cpu_s)
                    return run_.sample
                return case

            def append_case(value_bytes: int, acks: str) -> Callable[[], Sample]:
                def case() -> Sample:
                    batches = captured[(value_bytes, acks)]
                    return _append_round(ctx, batches, len(items[value_bytes]), sum(len(b) for b in batches))
                return case

            plan = {}
            for v, acks in cases:
                plan[f"wire {v} {acks}"] = wire_case(v, acks)
                plan[f"append {v} {acks}"] = append_case(v, acks)
            runs = run_interleaved(plan, rounds)

            for v, acks in cases:
                group = _group(v, acks)
                first = captured[(v, acks)]
                size = sum(len(b) for b in first)
                records = len(items[v])
                section.add(Row(group, "in-process Log.append_batches", records, size, runs[f"append {v} {acks}"]))
                section.add(Row(group, "librdkafka produce -> broker", records, size, runs[f"wire {v} {acks}"],
                                baseline="in-process Log.append_batches", target=PRODUCE_TARGET))
                per_round = [r[0] for r in all_runs[(v, acks)]]
                section.facts.setdefault("produce_batches", {})[group] = {
                    "batches_per_round": per_round, "batch_bytes_per_round": [r[1] for r in all_runs[(v, acks)]],
                    "broker_cpu_s_per_round": [r[2] for r in all_runs[(v, acks)]],
                    "client_cpu_s_per_round": [r[3] for r in all_runs[(v, acks)]], "baseline_batches": len(first)}
                section.notes.append(
                    f"{group}: librdkafka sent {'/'.join(f'{n:,}' for n in per_round)} batches (produce requests) "
                    f"per round ({records / len(first):,.0f} records, {size / len(first) / 1000:,.1f} kB each in the "
                    f"round the baseline appends); broker CPU per round "
                    f"{'/'.join(f'{r[2]:.2f} s ({r[2] / r[0] * 1000:.2f} ms/request)' for r in all_runs[(v, acks)])}, "
                    f"client CPU {'/'.join(f'{r[3]:.2f}' for r in all_runs[(v, acks)])} s")

            # -- latency at half the peak of each measuring client, 1 KiB, acks=1 and acks=all -----------------
            from . import wire_latency      # it builds on this module's broker and client helpers
            wire_latency.latency_rows(section, broker, admin, items[LATENCY_VALUE_BYTES], sizes.peak_records,
                                      sizes.latency_s, rounds, work)
            captured.clear()    # the batches go before the fetch cases run
            all_runs.clear()
            plan.clear()
            admin = None        # its client handle goes before the broker does
            gc.collect()
        _report_profile(profile, section)

        # The produce rows' records (~1.9 M objects) go before the fetch rows: kept, every garbage collection that
        # the Python consumer's Message objects start would walk them too (+0.05 s of its ~0.2 s per 200 MB).
        items.clear()
        pools.clear()
        gc.collect()
        _fetch_rows(work, sizes.fetch_bytes, rounds, section, broker_cpu)
    section.facts["broker_cpu_s"] = broker_cpu
    section.notes.append("cpu s of a librdkafka row = this process (client) + the broker process over the round; "
                         "the machine's other load shares the same cores")
    return section
