"""The wire section's latency rows: 1 KiB values produced at half the peak of the measuring client, with
``acks=1`` and ``acks=all``, by two clients against the produce rows' broker (benchmarks/wire.py runs this after
its produce rows).

* librdkafka from Python (confluent-kafka, the produce rows' settings: ``linger.ms=5``, no compression), with a
  delivery callback per record. Its peak is measured with that same client: unpaced, every record with its
  callback, ``poll(0)`` after every :data:`UNPACED_CHUNK` records (the paced loop polls after each burst), records
  over the time from the first ``produce`` to the last callback; the best of the rounds is the peak. The produce
  rows' peak (``delivery.report.only.error``: no callback per record, so a faster client) stays in the facts as
  ``produce_row_peak_records_per_s`` for comparison; pacing at half of it asked the callback client for more than
  its own peak on a loaded machine.
* Kafka's own Java producer, kafka-clients 3.9.1 (benchmarks/java/ProduceLatency.java, one JVM for the section:
  the peak runs warm its JIT before the paced runs): the client's defaults (``linger.ms=0``, ``batch.size``
  16 KiB, ``max.in.flight.requests.per.connection`` 5, idempotence on with ``acks=all``, off with ``acks=1``) plus
  ``acks``; per record, the time its send callback ran minus the time ``send()`` was called (``System.nanoTime``),
  as the OpenMessaging Benchmark's Kafka driver measures it. Its peak: unpaced ``send()`` of the records, best of
  the rounds; then paced at half of it.

Every run goes to a fresh one-partition topic after one delivered warm-up record; the log is then read back and
must hold exactly the warm-up record and every record sent (and the callbacks' offsets must be exactly those), or
the run fails. Per run: p50 / p99 / p99.9 / max of the latencies, the produce requests (batches in the log), the
broker's CPU and the client's, and the load average at its start. The rounds alternate the clients and acks.
"""
from __future__ import annotations

import gc
import os
import time
from pathlib import Path
from typing import Any

from include import java_clients

from . import wire
from .harness import Row, Sample, Section
from .java_latency import JavaProducer

VALUE_BYTES = 1024
ACKS = ("1", "all")
UNPACED_CHUNK = 1_000       # librdkafka's unpaced runs serve their callbacks (poll(0)) after every this many records
RDKAFKA_PACED_ROW = "paced produce (latency run)"
RDKAFKA_PEAK_ROW = "librdkafka produce, a delivery callback per record, unpaced (its peak)"
JAVA_PACED_ROW = "Java producer (kafka-clients), paced (latency run)"
JAVA_PEAK_ROW = "Java producer (kafka-clients), unpaced (its peak)"


def rdkafka_group(acks: str) -> str:
    return f"{VALUE_BYTES} B values, acks={acks}, paced at half the peak"


def rdkafka_peak_group(acks: str) -> str:
    return f"{VALUE_BYTES} B values, acks={acks}, librdkafka with per-record callbacks, unpaced"


def java_group(acks: str) -> str:
    return f"{VALUE_BYTES} B values, acks={acks}, Java producer paced at half its peak"


def java_peak_group(acks: str) -> str:
    return f"{VALUE_BYTES} B values, acks={acks}, Java producer unpaced"


def percentile(sorted_values: list[float], q: float) -> float:
    """The value at rank round(q * (n - 1)) of ``sorted_values`` (ProduceLatency.java computes it alike)."""
    if not sorted_values:
        return float("nan")
    return sorted_values[min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))]


def paced_round(broker: wire.BrokerProcess, admin: Any, topic: str, items: list[tuple[Any, Any]], rate: float,
                seconds: float, acks: str = "all",
                timeline: list[tuple[int, float, float]] | None = None) -> tuple[Sample, dict[str, Any], int]:
    """Produce ``rate * seconds`` records at ``rate`` per second with ``acks``; (sample, latency figures, batch
    bytes). ``timeline`` gets each record's (offset, ``produce`` time, delivery callback time) in
    ``time.perf_counter`` seconds (CLOCK_MONOTONIC: comparable with another process's on this machine)."""
    return _callback_round(broker, admin, topic, items, max(1, int(rate * seconds)), rate, acks, timeline)


def peak_round(broker: wire.BrokerProcess, admin: Any, topic: str, items: list[tuple[Any, Any]], records: int,
               acks: str = "all") -> tuple[Sample, dict[str, Any], int]:
    """``records`` records as fast as the client goes, with the paced run's producer and a delivery callback per
    record; the figures' ``records_per_s`` is the records over first ``produce`` to last callback."""
    return _callback_round(broker, admin, topic, items, records, None, acks, None)


def _callback_round(broker: wire.BrokerProcess, admin: Any, topic: str, items: list[tuple[Any, Any]], count: int,
                    rate: float | None, acks: str,
                    timeline: list[tuple[int, float, float]] | None) -> tuple[Sample, dict[str, Any], int]:
    produced_at = [0.0] * count
    delivered: list[tuple[float, int, float]] = []
    errors: list[Any] = []
    clock = time.perf_counter

    def report(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(err)
        else:
            delivered.append((clock(), msg.offset(), msg.latency()))

    wire._create_topic(admin, topic)
    producer = wire._producer(broker, acks, on_delivery=report)
    wire._warm_up(producer, topic)
    delivered.clear()
    gc.collect()
    produce, poll = producer.produce, producer.poll
    pool = len(items)
    cpu_before, broker_before = time.process_time(), broker.cpu_s()
    start = clock()
    i = 0
    while i < count:
        due = min(count, i + UNPACED_CHUNK if rate is None else int((clock() - start) * rate) + 1)
        while i < due:
            key, value = items[i % pool]
            produced_at[i] = clock()
            produce(topic, value, key)
            i += 1
        poll(0)
        if i < count and rate is not None:
            wait = start + i / rate - clock()
            if wait > 0:
                poll(min(wait, 0.001))
    last_produce = clock()
    left = producer.flush(wire.IDLE_TIMEOUT_S)
    wall = clock() - start
    broker_cpu = broker.cpu_s() - broker_before
    client_cpu = time.process_time() - cpu_before
    sample = Sample(wall, client_cpu + broker_cpu)
    if left or errors or len(delivered) != count:
        raise RuntimeError(f"{topic}: {len(delivered)} of {count} delivered, {left} left, errors {errors[:3]}")
    if sorted(offset for _, offset, _ in delivered) != list(range(1, count + 1)):
        raise RuntimeError(f"{topic}: the delivery reports' offsets are not exactly 1..{count}")
    batches = broker.partition_batches(topic)
    if wire._count(batches[:1]) != 1 or wire._count(batches[1:]) != count:
        raise RuntimeError(f"{topic}: the log holds {wire._count(batches)} records, expected {count + 1}")
    wire._delete_topic(admin, topic)
    # offset 0 is the warm-up record; record i (in produce order) is at offset i + 1
    callback_ms = sorted((t - produced_at[offset - 1]) * 1000 for t, offset, _ in delivered)
    if timeline is not None:
        timeline.extend((offset, produced_at[offset - 1], t) for t, offset, _ in delivered)
    client_ms = sorted(lat * 1000 for _, _, lat in delivered)
    last_callback = max(t for t, _, _ in delivered)
    figures = {
        "records": count, "target_records_per_s": rate, "achieved_records_per_s": count / (last_produce - start),
        "records_per_s": count / (last_callback - start),
        "p50_ms": percentile(callback_ms, 0.50), "p99_ms": percentile(callback_ms, 0.99),
        "p999_ms": percentile(callback_ms, 0.999), "max_ms": callback_ms[-1],
        "librdkafka_p50_ms": percentile(client_ms, 0.50), "librdkafka_p99_ms": percentile(client_ms, 0.99),
        "batches": len(batches) - 1, "broker_cpu_s": broker_cpu, "client_cpu_s": client_cpu,
    }
    return sample, figures, sum(len(b) for b in batches[1:])


def _java_round(java: JavaProducer, broker: wire.BrokerProcess, admin: Any, topic: str, acks: str,
                rate: float | None, seconds: float, records: int) -> tuple[Sample, dict[str, Any], int]:
    """One command of the Java producer to a fresh topic, the log checked; (sample, figures, batch bytes)."""
    wire._create_topic(admin, topic)
    broker_before = broker.cpu_s()
    if rate is None:
        figures = java.peak(topic, acks, records, VALUE_BYTES)
    else:
        figures = java.paced(topic, acks, rate, seconds, VALUE_BYTES)
    figures["broker_cpu_s"] = broker.cpu_s() - broker_before     # the JVM's own start of the command included
    batches = broker.partition_batches(topic)
    if wire._count(batches[:1]) != 1 or wire._count(batches[1:]) != figures["records"]:
        raise RuntimeError(f"{topic}: the log holds {wire._count(batches)} records, expected the warm-up one and "
                           f"{figures['records']}")
    wire._delete_topic(admin, topic)
    figures["batches"] = len(batches) - 1
    return (Sample(figures["wall_s"], figures["client_cpu_s"] + figures["broker_cpu_s"]), figures,
            sum(len(b) for b in batches[1:]))


def _summary(peak_rounds: list[dict[str, Any]], rate: float, acks: str, seconds: float,
             rounds: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    best = min(rounds, key=lambda f: f["p99_ms"])
    return {"peak_records_per_s": max(f["records_per_s"] for f in peak_rounds), "peak_rounds": peak_rounds,
            "rate_records_per_s": rate, "value_bytes": VALUE_BYTES, "acks": acks, "seconds": seconds,
            "rounds": rounds, "best_p99_ms": best["p99_ms"], "p50_ms_of_best": best["p50_ms"],
            "p999_ms_of_best": best["p999_ms"], **extra}


def _note(client: str, acks: str, f: dict[str, Any], peak: float) -> str:
    return (f"latency {client} acks={acks} at {f['target_records_per_s']:,.0f} records/s (half its peak {peak:,.0f}; "
            f"achieved {f['achieved_records_per_s']:,.0f}, {f['batches']:,} produce requests, load average "
            f"{f['loadavg_at_start']:.2f}): send -> callback p50 {f['p50_ms']:.2f} ms, p99 {f['p99_ms']:.2f} ms, "
            f"p99.9 {f['p999_ms']:.2f} ms, max {f['max_ms']:.2f} ms; broker CPU {f['broker_cpu_s']:.2f} s "
            f"({f['broker_cpu_s'] / max(1, f['batches']) * 1000:.2f} ms per produce request), client CPU "
            f"{f['client_cpu_s']:.2f} s")


def _peak_note(client: str, acks: str, runs: list[dict[str, Any]]) -> str:
    return (f"peak {client} acks={acks}, unpaced: "
            + " / ".join(f"{f['records_per_s']:,.0f} records/s ({f['records']:,} records, {f['batches']:,} requests, "
                         f"p99 {f['p99_ms']:,.0f} ms, client CPU {f['client_cpu_s']:.2f} s, broker CPU "
                         f"{f['broker_cpu_s']:.2f} s, load {f['loadavg_at_start']:.2f})" for f in runs))


def latency_rows(section: Section, broker: wire.BrokerProcess, admin: Any, items: list[tuple[Any, Any]],
                 peak_records: int, seconds: float, rounds: int, work: str) -> None:
    """The latency rows and facts of both clients into ``section``; the produce rows must be in it already (their
    peak is kept beside the callback client's). Without a JDK or the kafka-clients jars the Java rows are left out
    with a note saying what is missing (``make java-clients`` installs both)."""
    produce_peaks = {acks: section.find(wire._group(VALUE_BYTES, acks), "librdkafka produce -> broker").records_per_s
                     for acks in ACKS}
    plan = [(r, acks) for r in range(rounds) for acks in ACKS]
    java: JavaProducer | None = None
    try:
        java = JavaProducer(broker.bootstrap, Path(work) / "java-producer.log")
    except java_clients.JavaUnavailable as exc:
        section.notes.append(f"Java producer: not measured, {exc} (make java-clients)")
    clients = ("rdkafka", "java") if java is not None else ("rdkafka",)

    def one(client: str, acks: str, r: int, rate: float | None) -> tuple[Sample, dict[str, Any], int]:
        load = os.getloadavg()[0]
        gc.collect()
        kind = "peak" if rate is None else "latency"
        if client == "java":
            assert java is not None
            got = _java_round(java, broker, admin, f"wire-{kind}-java-{acks}-{r}", acks, rate, seconds, peak_records)
        elif rate is None:
            got = peak_round(broker, admin, f"wire-{kind}-rdkafka-{acks}-{r}", items, peak_records, acks)
        else:
            got = paced_round(broker, admin, f"wire-{kind}-{acks}-{r}", items, rate, seconds, acks)
        got[1]["loadavg_at_start"] = load
        return got

    peak: dict[tuple[str, str], list[tuple[Sample, dict[str, Any], int]]] = {}
    paced: dict[tuple[str, str], list[tuple[Sample, dict[str, Any], int]]] = {}
    try:
        wire._progress(f"latency: the peaks of {' and '.join(clients)}, unpaced, {peak_records:,} records, "
                       f"{rounds} rounds")
        for r, acks in plan:                # the peaks of the clients, unpaced, alternating
            for client in clients:
                peak.setdefault((client, acks), []).append(one(client, acks, r, None))
        rates = {key: max(f["records_per_s"] for _, f, _ in runs) / 2 for key, runs in peak.items()}
        wire._progress("latency: paced at half the peaks (" + ", ".join(
            f"{client} acks={acks} {rate:,.0f}" for (client, acks), rate in rates.items())
            + f" records/s) for {seconds} s, {rounds} rounds")
        for r, acks in plan:                # paced at half of them, alternating
            for client in clients:
                paced.setdefault((client, acks), []).append(one(client, acks, r, rates[(client, acks)]))
    finally:
        if java is not None:
            java.close()
    version = paced[("java", ACKS[0])][0][1]["client_version"] if java is not None else "-"
    by_acks: dict[str, dict[str, Any]] = {}
    java_by_acks: dict[str, dict[str, Any]] = {}
    for acks in ACKS:
        for client in clients:
            group, name, peak_group, peak_name = (
                (rdkafka_group(acks), RDKAFKA_PACED_ROW, rdkafka_peak_group(acks), RDKAFKA_PEAK_ROW)
                if client == "rdkafka" else (java_group(acks), JAVA_PACED_ROW, java_peak_group(acks), JAVA_PEAK_ROW))
            runs, peaks = paced[(client, acks)], peak[(client, acks)]
            section.add(Row(peak_group, peak_name, peak_records, min(b for _, _, b in peaks), [s for s, _, _ in peaks]))
            section.add(Row(group, name, runs[0][1]["records"], min(b for _, _, b in runs), [s for s, _, _ in runs]))
            figures = [f for _, f, _ in runs]
            peak_figures = [f for _, f, _ in peaks]
            label = "librdkafka" if client == "rdkafka" else f"Java producer {version}"
            section.notes.append(_peak_note(label, acks, peak_figures))
            section.notes.extend(_note(label, acks, f, rates[(client, acks)] * 2) for f in figures)
            if client == "rdkafka":
                by_acks[acks] = _summary(peak_figures, rates[(client, acks)], acks, seconds, figures,
                                         produce_row_peak_records_per_s=produce_peaks[acks])
            else:
                java_by_acks[acks] = _summary(peak_figures, rates[(client, acks)], acks, seconds, figures,
                                              client=f"kafka-clients {version}")
        section.notes.append(f"librdkafka acks={acks}: its peak with a callback per record "
                             f"{by_acks[acks]['peak_records_per_s']:,.0f} records/s; the produce row's peak (no "
                             f"callback per record) {produce_peaks[acks]:,.0f}")
    section.facts["latency_by_acks"] = by_acks
    section.facts["latency"] = by_acks["all"]       # the acks=all figures, where older runs kept them
    if java is not None:
        section.facts["java_latency_by_acks"] = java_by_acks
        section.params["java_client"] = f"kafka-clients {version}"
