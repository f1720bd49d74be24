"""Paired produce-latency runs and a trace of where a produce request's time goes inside the broker: the tool behind
BENCHMARKS.md's "Produce latency: where the p99 goes". Not a section of ``python -m benchmarks``.

    python -m benchmarks.latency_probe [--variant NAME[=KNOB=VALUE,...]] ... [--rounds N] [--seconds S]
                                       [--rate R] [--acks 1,all] [--trace DIR] [--cpu-rounds N]
    python -m benchmarks.latency_probe hop SWITCH_INTERVAL_S

Every variant is a broker (``python -m storage_engine serve``, default configuration, its own log dir under
``var/bench/tmp``) started at once, side by side; a librdkafka producer in this process produces 1 KiB records
paced at ``--rate`` (default: half the lowest peak of this same client, a delivery callback per record, one
200,000-record acks=all round per broker unpaced: ``benchmarks.wire_latency.peak_round``) for ``--seconds``,
to a fresh topic per round, the brokers and acks alternating round by round (``benchmarks.wire_latency.paced_round``:
delivery callback minus ``produce()`` time per record). Printed per round: p50 / p99 / p99.9 / max, librdkafka's
own ``Message.latency()`` p99 (computed when the delivery report is served, by ``poll()``: the same moment as the
callback, so it is no independent check of the benchmark's loop), the produce requests, the broker's CPU and the
load average; then the medians. ``--cpu-rounds N`` first runs N rounds per broker of 200,000 records produced as
fast as the client goes (acks=all) and prints each broker's CPU: a before/after figure the load hardly moves.

Knobs (set in the broker process before it serves; for experiments, nothing here changes the broker's code):
``NOFREEZE=1`` (start-up's objects left to the collector), ``STREAM_LIMIT=BYTES`` (the listener's stream buffer
limit), ``READ_AHEAD=N`` (frames received ahead), ``INLINE=1`` (appends on the event loop instead of the engine
pool), ``SWITCH=SECONDS`` (``sys.setswitchinterval``), ``SAMPLE=1`` (with ``--trace``: a thread samples the event loop's
stack every millisecond while a callback has run over 1 ms, so each slow callback is named by what it was doing;
it takes the GIL to look, so it costs the loop a little). ``TREE=DIR`` runs that broker from another checkout of the
repository (its own code, e.g. ``git worktree add DIR COMMIT`` with the compiled speedups copied in): a same-run
before/after of a change; the other knobs then act on that checkout's code.

``--trace DIR`` records in every broker, into ``DIR/NAME.json`` (printed as a summary at the end, with each round's
records split into time to the broker, in the broker and back to the delivery callback: :func:`decompose`; the
broker's and this process's ``perf_counter`` are the same clock): each garbage
collection (generation, pause, the collecting thread's CPU), every event-loop callback over 2 ms, each produce
request's stages (frame received -> handling started -> done; each engine call: submitted -> running in its
thread -> ended (with the thread's CPU) -> resumed on the loop) and every ``os.fsync`` (thread, duration). The
trace costs time itself: compare traced brokers with traced brokers.

``hop SWITCH_INTERVAL_S``: an event loop busy in 0.3 ms pieces of Python hands 400 jobs of 0.5 ms to a thread pool;
prints the hand-off's overhead (round trip minus the job) at that switch interval.
"""
from __future__ import annotations

import argparse
import asyncio
import bisect
import concurrent.futures
import contextvars
import gc
import json
import os
import runpy
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

SLOW_CALLBACK_S = 0.002
_APPENDED: contextvars.ContextVar[list[tuple[str, int]] | None] = contextvars.ContextVar("appended", default=None)


# ---------------------------------------------------------------------------------------------------------------
# inside the broker process: ``python -m benchmarks.latency_probe broker OUT KNOBS storage_engine-args...``

class Trace:
    """What one traced broker saw; written as JSON at exit."""

    def __init__(self) -> None:
        self.t0 = time.perf_counter()
        self.gc: list[tuple[float, float, int, str, float]] = []      # at, pause, generation, thread, thread CPU
        # at, duration, callback, stacks sampled, CPU, time waiting for a core
        self.slow: list[tuple[float, float, str, list[str], float, float]] = []
        self.requests: list[tuple[float, float, float, int]] = []     # received, queued, handled, bytes
        self.calls: list[tuple[float, float, float, float, float, str]] = []  # at, to thread, in thread, back, CPU, fn
        self.fsyncs: list[tuple[float, float, str]] = []              # at, duration, thread
        self.trims: list[tuple[float, float, float]] = []             # malloc_trim: at, duration, CPU
        # each Produce request that appended: received, handled (response about to be written; perf_counter
        # seconds, not relative to t0), and the (topic, base offset) of each partition appended
        self.produces: list[tuple[float, float, list[tuple[str, int]]]] = []
        self._gc_start: dict[int, tuple[float, float]] = {}

    def now(self) -> float:
        return time.perf_counter() - self.t0

    def on_gc(self, phase: str, info: dict[str, Any]) -> None:
        tid = threading.get_ident()
        if phase == "start":
            self._gc_start[tid] = (time.perf_counter(), time.thread_time())
            return
        began = self._gc_start.pop(tid, None)
        if began is not None:
            self.gc.append((began[0] - self.t0, time.perf_counter() - began[0], int(info["generation"]),
                            threading.current_thread().name, time.thread_time() - began[1]))

    def dump(self, path: str) -> None:
        # what the next full collection would have walked, and what it costs: the objects in the oldest generation
        # (not frozen), then one timed full collection (the broker has stopped serving by now)
        oldest = gc.get_objects(2)
        old = len(oldest)
        kinds: dict[str, int] = {}
        for o in oldest:
            kinds[type(o).__qualname__] = kinds.get(type(o).__qualname__, 0) + 1
        del oldest
        start, cpu = time.perf_counter(), time.thread_time()
        gc.collect()
        full = (old, time.perf_counter() - start, time.thread_time() - cpu)
        with open(path, "w") as f:
            json.dump({"full_at_exit": full, "oldest_kinds": sorted(kinds.items(), key=lambda kv: -kv[1])[:12], "gc": self.gc, "slow": self.slow, "requests": self.requests, "calls": self.calls,
                       "fsyncs": self.fsyncs, "trims": self.trims, "produces": self.produces}, f)


def _install_trace(trace: Trace, sample: bool) -> None:
    from asyncio import events

    from storage_engine.server import broker as broker_mod
    from storage_engine.server import connection as conn_mod
    from storage_engine.server import limits as limits_mod

    gc.callbacks.append(trace.on_gc)
    run_handle = events.Handle._run
    running: list[float] = [0.0]                  # start of the callback running on the loop, 0 between them
    samples: list[str] = []                       # the loop thread's stacks sampled during the running callback
    loop_thread = threading.get_ident()

    def sampler() -> None:
        # Every millisecond (time.sleep releases the GIL; the check takes it): a callback running for over 1 ms
        # has the loop thread's stack taken, innermost project frames first, so a slow callback is named by what
        # it was doing and not only by the task it stepped.
        while True:
            time.sleep(0.001)
            start = running[0]
            if start and time.perf_counter() - start > 0.001:
                frame = sys._current_frames().get(loop_thread)
                names: list[str] = []
                while frame is not None and len(names) < 6:
                    code = frame.f_code
                    if "asyncio" not in code.co_filename:
                        names.append(f"{Path(code.co_filename).name}:{frame.f_lineno}:{code.co_name}")
                    frame = frame.f_back
                if running[0] == start:
                    samples.append(" < ".join(names))

    def named(handle: Any) -> str:
        callback = getattr(handle, "_callback", None)
        task = getattr(callback, "__self__", None)
        if isinstance(task, asyncio.Task):
            coro = task.get_coro()
            return f"task {getattr(coro, '__qualname__', coro)!r}"
        return repr(callback)[:120]

    # the loop thread's scheduler figures (CPU ns, ns waiting for a core on the run queue, slices), read at each
    # callback's start and, when it was slow, its end: what of its time it was runnable but had no core
    sched: list[int] = []

    def run_queue_ns() -> int:
        if not sched:
            sched.append(os.open(f"/proc/self/task/{threading.get_native_id()}/schedstat", os.O_RDONLY))
        return int(os.pread(sched[0], 100, 0).split()[1])

    def timed_run(self: Any) -> None:
        start, cpu, queued = time.perf_counter(), time.thread_time(), run_queue_ns()
        running[0] = start
        run_handle(self)
        running[0] = 0.0
        took = time.perf_counter() - start
        if took > SLOW_CALLBACK_S:
            trace.slow.append((start - trace.t0, took, named(self), list(samples), time.thread_time() - cpu,
                               (run_queue_ns() - queued) / 1e9))
        samples.clear()
    setattr(events.Handle, "_run", timed_run)
    if sample:
        threading.Thread(target=sampler, name="loop-sampler", daemon=True).start()

    async def call(self: Any, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        stamps = [time.perf_counter(), 0.0, 0.0, 0.0]

        def run() -> Any:
            stamps[1], cpu = time.perf_counter(), time.thread_time()
            try:
                return fn(*args, **kwargs)
            finally:
                stamps[2], stamps[3] = time.perf_counter(), time.thread_time() - cpu
        result = await asyncio.get_running_loop().run_in_executor(self.pool, run)
        name = getattr(fn, "__name__", "?")
        trace.calls.append((stamps[0] - trace.t0, stamps[1] - stamps[0], stamps[2] - stamps[1],
                            time.perf_counter() - stamps[2], stamps[3], name))
        appended = _APPENDED.get()
        if name == "_append" and appended is not None and isinstance(result, dict) and not result["error_code"]:
            appended.append((args[1], result["base_offset"]))      # _append(ctx, topic, partition, records)
        return result
    setattr(broker_mod.Broker, "call", call)

    received: dict[int, float] = {}
    read_frame, handle = conn_mod.Connection._read_frame, conn_mod.Connection.handle

    async def traced_read_frame(self: Any) -> bytearray:
        frame = await read_frame(self)
        received[id(frame)] = time.perf_counter()
        return frame

    async def traced_handle(self: Any, frame: Any) -> Any:
        start = time.perf_counter()
        got = received.pop(id(frame), start)
        appended: list[tuple[str, int]] = []
        token = _APPENDED.set(appended)
        try:
            out = await handle(self, frame)
        finally:
            _APPENDED.reset(token)
        end = time.perf_counter()
        trace.requests.append((got - trace.t0, start - got, end - start, len(frame)))
        if appended:
            trace.produces.append((got, end, appended))
        return out
    setattr(conn_mod.Connection, "_read_frame", traced_read_frame)
    setattr(conn_mod.Connection, "handle", traced_handle)

    trim = limits_mod.trim

    def traced_trim() -> bool:
        start, cpu = time.perf_counter(), time.thread_time()
        try:
            return trim()
        finally:
            trace.trims.append((start - trace.t0, time.perf_counter() - start, time.thread_time() - cpu))
    setattr(limits_mod, "trim", traced_trim)

    fsync = os.fsync

    def traced_fsync(fd: Any) -> None:
        start = time.perf_counter()
        try:
            fsync(fd)
        finally:
            trace.fsyncs.append((start - trace.t0, time.perf_counter() - start, threading.current_thread().name))
    setattr(os, "fsync", traced_fsync)


def _apply_knobs(knobs: dict[str, str]) -> None:
    from storage_engine.server import broker as broker_mod
    from storage_engine.server import connection as conn_mod
    from storage_engine.server import server as server_mod

    if "SWITCH" in knobs:
        sys.setswitchinterval(float(knobs["SWITCH"]))
    if knobs.get("NOFREEZE") == "1":
        setattr(server_mod, "freeze_after_start", lambda: 0)
    if "STREAM_LIMIT" in knobs:
        setattr(server_mod, "STREAM_LIMIT", int(knobs["STREAM_LIMIT"]))
    if "READ_AHEAD" in knobs:
        setattr(conn_mod, "READ_AHEAD", int(knobs["READ_AHEAD"]))
    if knobs.get("INLINE") == "1":
        pooled = broker_mod.Broker.call

        async def inline(self: Any, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
            if getattr(fn, "__name__", "") == "_append":
                return fn(*args, **kwargs)
            return await pooled(self, fn, *args, **kwargs)
        setattr(broker_mod.Broker, "call", inline)


def _broker_main(argv: list[str]) -> None:
    out, knobs_text, rest = argv[0], argv[1], argv[2:]
    knobs = dict(kv.split("=", 1) for kv in knobs_text.split(",") if kv)
    _apply_knobs(knobs)
    if out != "-":
        import atexit
        trace = Trace()
        _install_trace(trace, knobs.get("SAMPLE") == "1")
        atexit.register(trace.dump, out)
    sys.argv = ["storage_engine", *rest]
    runpy.run_module("storage_engine", run_name="__main__", alter_sys=True)


# ---------------------------------------------------------------------------------------------------------------
# the paired runs, in the benchmark's process

def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * (len(ordered) - 1)))] if ordered else float("nan")


def summarize_trace(path: Path) -> list[str]:
    """Lines naming the percentiles of each traced stage (ms)."""
    d = json.loads(path.read_text())

    def line(name: str, seconds: list[float]) -> str:
        ms = [v * 1000 for v in seconds]
        return (f"{name:30} n={len(ms):6} p50 {_pct(ms, .5):8.3f} p99 {_pct(ms, .99):8.3f} p99.9 {_pct(ms, .999):8.3f} "
                f"max {max(ms, default=0):8.3f} ms")
    out = []
    for gen in (0, 1, 2):
        out.append(line(f"gc gen{gen} pause", [g[1] for g in d["gc"] if g[2] == gen]))
        out.append(line(f"gc gen{gen} CPU", [g[4] for g in d["gc"] if g[2] == gen]))
    out.append(line("loop callbacks > 2 ms", [s[1] for s in d["slow"]]))
    if "full_at_exit" in d:
        old, took, cpu = d["full_at_exit"]
        out.append(f"at exit: {old:,} objects in the oldest generation; a full collection of them took "
                   f"{took * 1000:.2f} ms ({cpu * 1000:.2f} ms CPU); most: "
                   + ", ".join(f"{kind} {n:,}" for kind, n in d.get("oldest_kinds", [])))
    out.append("collections: " + ", ".join(f"gen{gen} {sum(1 for g in d['gc'] if g[2] == gen)}" for gen in (0, 1, 2)))
    trims = d.get("trims", [])
    out.append(line("malloc_trim", [t[1] for t in trims]))
    slow = d["slow"]
    for k, what in ((4, "CPU"), (5, "waiting for a core")):
        out.append(line(f"  of which {what}", [x[k] for x in slow if len(x) > k]))
    for at, took, name, stacks, cpu, *queued in slow:
        # a collection that ran inside the callback (on any thread: it stops them all), a malloc_trim in it
        gcs = [g for g in d["gc"] if at <= g[0] <= at + took]
        also = [f"gen{g[2]} {g[1] * 1000:.1f} ms" for g in gcs]
        also += [f"malloc_trim {t[1] * 1000:.1f} ms" for t in trims if at <= t[0] <= at + took]
        wait = f", run queue {queued[0] * 1000:5.2f}" if queued else ""
        out.append(f"  slow callback at {at:8.3f} s: {took * 1000:6.2f} ms (CPU {cpu * 1000:5.2f}{wait}) {name}"
                   + ("; " + ", ".join(also) if also else ""))
        for stack in sorted(set(stacks), key=stacks.count, reverse=True)[:3]:
            out.append(f"      {stacks.count(stack)} x {stack}")
    big = [r for r in d["requests"] if r[3] > 10_000]
    out.append(line("request queued before handling", [r[1] for r in big]))
    out.append(line("request handled", [r[2] for r in big]))
    appends = [c for c in d["calls"] if c[5] == "_append"]
    out.append(line("append: submitted -> thread", [c[1] for c in appends]))
    out.append(line("append: in the thread", [c[2] for c in appends]))
    out.append(line("append: thread CPU", [c[4] for c in appends]))
    out.append(line("append: ended -> resumed", [c[3] for c in appends]))
    out.append(line("fsync", [f[1] for f in d["fsyncs"]]))
    inside = [f for f in d["fsyncs"] if any(c[0] + c[1] <= f[0] <= c[0] + c[1] + c[2] for c in appends)]
    out.append(f"fsyncs inside an append: {len(inside)} of {len(d['fsyncs'])}")
    return out


def decompose(produces: list[Any], topic: str, timeline: list[tuple[int, float, float]]) -> list[str]:
    """Where each record's time went, from a traced broker's Produce requests and the client's timeline of one
    round: to the broker (``produce()`` -> its request's frame read by the broker: linger, librdkafka's batching,
    the send), in the broker (frame read -> response about to be written: waiting behind the connection's
    previous request, decode, append, encode) and back (-> the delivery callback ran: the response's write and
    receipt, librdkafka's delivery report, and the benchmark's ``poll()``). Lines of ms percentiles, then the mean
    of each part over the slowest 1% of records."""
    requests = sorted((offset, got, end) for got, end, parts in produces for t, offset in parts if t == topic)
    if not requests:
        return [f"no traced request appended to {topic}"]
    bases = [r[0] for r in requests]
    rows = []
    for offset, produced, called in timeline:
        i = bisect.bisect_right(bases, offset) - 1
        if i < 0:
            continue
        _, got, end = requests[i]
        rows.append(((called - produced) * 1000, (got - produced) * 1000, (end - got) * 1000, (called - end) * 1000))
    out = []
    for k, name in enumerate(("total", "to the broker", "in the broker", "back to the callback")):
        ms = [r[k] for r in rows]
        out.append(f"{name:22} p50 {_pct(ms, .5):8.2f} p99 {_pct(ms, .99):8.2f} p99.9 {_pct(ms, .999):8.2f} ms")
    slow = sorted(rows)[-max(1, len(rows) // 100):]
    out.append("slowest 1%: mean to the broker {:.2f}, in the broker {:.2f}, back {:.2f} ms (total {:.2f})".format(
        *(statistics.mean(r[k] for r in slow) for k in (1, 2, 3, 0))))
    return out


def _paired(args: argparse.Namespace) -> int:
    from confluent_kafka.admin import AdminClient

    from . import wire, wire_latency
    from .harness import TMP_ROOT, Context, generate_records, scratch_dir

    pool = [(r.key, r.value) for r in generate_records(5_000, 1024, seed=1054)]
    variants = []
    for text in args.variant or ["now="]:
        name, _, knobs = text.partition("=")
        variants.append((name, knobs))
    ctx = Context(quick=False, repeats=1, tmp_root=TMP_ROOT)
    results: dict[str, list[dict[str, Any]]] = {}
    timelines: list[tuple[str, str, str, list[tuple[int, float, float]]]] = []   # variant, acks, topic, timeline
    trace_dir = Path(args.trace).resolve() if args.trace else None
    if trace_dir is not None:
        trace_dir.mkdir(parents=True, exist_ok=True)
    with scratch_dir(ctx, "latency-probe") as work:
        brokers: dict[str, tuple[Any, Any]] = {}
        try:
            for name, knobs in variants:
                folder = os.path.join(work, name)
                os.makedirs(os.path.join(folder, "logs"))
                out = "-" if trace_dir is None else str(trace_dir / f"{name}.json")
                broker = wire.BrokerProcess(folder, os.path.join(folder, "logs"))
                broker.command = [sys.executable, "-m", "benchmarks.latency_probe", "broker", out, knobs]
                tree = dict(kv.split("=", 1) for kv in knobs.split(",") if kv).get("TREE")
                if tree:   # that checkout's code: its directory first on the path, and the broker's cwd
                    broker.cwd = Path(tree).resolve()
                    broker.extra_env["PYTHONPATH"] = str(broker.cwd)
                broker.__enter__()
                brokers[name] = (broker, AdminClient(wire._client_config(broker)))
            cpu: dict[str, list[float]] = {}
            for r in range(args.cpu_rounds):     # the broker's CPU per record, alternating: little moved by load
                for name, (broker, admin) in brokers.items():
                    run = wire._produce_round(broker, admin, f"cpu-{name}-{r}", "all", pool * 40)
                    cpu.setdefault(name, []).append(run.broker_cpu_s)
                    print(f"cpu round {r} {name:12} {len(pool) * 40:,} records acks=all: broker CPU "
                          f"{run.broker_cpu_s:.2f} s, {len(run.batches)} requests, "
                          f"{len(pool) * 40 / run.sample.wall_s:,.0f} records/s, load {os.getloadavg()[0]:.2f}",
                          flush=True)
            for name, seconds in cpu.items():
                print(f"{name:12} broker CPU per {len(pool) * 40:,} 1 KiB records (acks=all, as fast as the client "
                      f"sends): median {statistics.median(seconds):.3f} s, min {min(seconds):.3f} s over "
                      f"{len(seconds)} rounds", flush=True)
            rate = args.rate
            if not rate:
                peaks = []
                for name, (broker, admin) in brokers.items():
                    _, f, _ = wire_latency.peak_round(broker, admin, f"peak-{name}", pool, len(pool) * 40, "all")
                    peaks.append(f["records_per_s"])
                    print(f"peak {name}: {peaks[-1]:,.0f} records/s", flush=True)
                rate = min(peaks) / 2
            print(f"paced at {rate:,.0f} records/s; load average {os.getloadavg()[0]:.2f}", flush=True)
            n = 0
            for r in range(args.rounds):
                for acks in args.acks.split(","):
                    for name, (broker, admin) in brokers.items():
                        n += 1
                        load = os.getloadavg()[0]
                        gc.collect()
                        timeline: list[tuple[int, float, float]] = []
                        if trace_dir is not None:
                            timelines.append((name, acks, f"probe-{n}", timeline))
                        _, f, _ = wire_latency.paced_round(broker, admin, f"probe-{n}", pool, rate, args.seconds, acks,
                                                           timeline)
                        results.setdefault(f"{name} acks={acks}", []).append({**f, "load": load})
                        print(f"round {r} acks={acks:3} {name:12} p50 {f['p50_ms']:7.2f} p99 {f['p99_ms']:8.2f} "
                              f"p99.9 {f['p999_ms']:8.2f} max {f['max_ms']:8.2f} librdkafka p99 "
                              f"{f['librdkafka_p99_ms']:8.2f} ms, {f['batches']} requests, broker CPU "
                              f"{f['broker_cpu_s']:.2f} s, load {load:.2f}", flush=True)
        finally:
            for broker, _ in brokers.values():
                broker.__exit__(None, None, None)
    for key, rounds in results.items():
        print(f"{key:24} {len(rounds)} rounds: median p50 {statistics.median(x['p50_ms'] for x in rounds):7.2f}, "
              f"p99 {statistics.median(x['p99_ms'] for x in rounds):8.2f}, "
              f"p99.9 {statistics.median(x['p999_ms'] for x in rounds):8.2f} ms; best p99 "
              f"{min(x['p99_ms'] for x in rounds):8.2f} ms; load {statistics.mean(x['load'] for x in rounds):.2f}")
    if trace_dir is not None:
        for name, _ in variants:
            print(f"== trace of {name}")
            for text in summarize_trace(trace_dir / f"{name}.json"):
                print("   " + text)
            produces = json.loads((trace_dir / f"{name}.json").read_text())["produces"]
            for variant, acks, topic, timeline in timelines:
                if variant == name:
                    print(f"   -- {topic} acks={acks}: where each record's time went")
                    for text in decompose(produces, topic, timeline):
                        print("      " + text)
    return 0


# ---------------------------------------------------------------------------------------------------------------
# the hand-off alone

def _hop(interval: float) -> None:
    sys.setswitchinterval(interval)

    def work(ms: float) -> None:
        end = time.thread_time() + ms / 1000
        while time.thread_time() < end:
            pass

    async def main() -> None:
        pool = concurrent.futures.ThreadPoolExecutor(8)
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()

        async def busy() -> None:
            while not stop.is_set():
                work(0.3)
                await asyncio.sleep(0)
        task = asyncio.create_task(busy())
        overhead = []
        for _ in range(400):
            start = time.perf_counter()
            await loop.run_in_executor(pool, work, 0.5)
            overhead.append((time.perf_counter() - start) * 1000 - 0.5)
            await asyncio.sleep(0.002)
        stop.set()
        await task
        pool.shutdown()
        print(f"switch interval {interval * 1000:.1f} ms: hand-off overhead p50 {_pct(overhead, .5):.2f}, "
              f"p99 {_pct(overhead, .99):.2f}, max {max(overhead):.2f} ms (load average {os.getloadavg()[0]:.2f})")
    asyncio.run(main())


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["broker"]:
        _broker_main(argv[1:])
        return 0
    if argv[:1] == ["hop"]:
        _hop(float(argv[1]))
        return 0
    p = argparse.ArgumentParser(prog="python -m benchmarks.latency_probe", description=__doc__.splitlines()[0])
    p.add_argument("--variant", action="append", metavar="NAME[=KNOB=VALUE,...]")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--seconds", type=float, default=4.0)
    p.add_argument("--rate", type=float, default=0.0, help="records/s (default: half the lowest peak)")
    p.add_argument("--acks", default="1,all")
    p.add_argument("--trace", default=None, metavar="DIR")
    p.add_argument("--cpu-rounds", type=int, default=0, metavar="N",
                   help="first, N rounds per broker of 200,000 records as fast as the client sends: broker CPU each")
    return _paired(p.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
