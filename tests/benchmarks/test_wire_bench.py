"""The wire benchmark at a tiny size: it starts the broker process, produces and consumes with librdkafka, measures
its baselines in the same run, runs the latency rows of librdkafka and of Kafka's Java producer, and writes its rows
into the results JSON. Nothing here judges a time."""
from __future__ import annotations

import json
import os
import shutil

import pytest

from benchmarks import __main__ as bench_main
from benchmarks import harness, wire, wire_latency

TINY = wire.Sizes({100: 2_000, 1024: 500}, 2 * harness.MB, 0.3, 1_000)


@pytest.mark.slow   # two broker processes, a JVM and a few thousand records over loopback (~30 s)
def test_wire_benchmark_runs_tiny_and_writes_its_rows(tmp_path, monkeypatch):
    monkeypatch.setattr(wire, "QUICK", TINY)
    monkeypatch.setattr(harness, "TMP_ROOT", tmp_path / "scratch")
    profiles = tmp_path / "profiles"
    out = tmp_path / "results.json"
    try:
        assert bench_main.main(["--only", "wire", "--quick", "--profile-broker", str(profiles), "--out", str(out)]) == 0
    finally:
        wire.PROFILE_DIR = None
    doc = json.loads(out.read_text())
    assert doc["meta"]["benchmarks"] == ["wire"]
    section = doc["benchmarks"]["wire"]
    rows = {(r["group"], r["name"]): r for r in section["rows"]}

    for value_bytes in (100, 1024):
        for acks in ("1", "all"):
            group = f"{value_bytes} B values, acks={acks}"
            wire_row = rows[(group, "librdkafka produce -> broker")]
            base = rows[(group, "in-process Log.append_batches")]
            assert wire_row["records"] == base["records"] == TINY.produce_records[value_bytes]
            assert wire_row["bytes"] == base["bytes"] > wire_row["records"] * value_bytes
            assert wire_row["baseline"] == "in-process Log.append_batches"
            assert wire_row["ratio_vs_baseline"] > 0 and wire_row["target"]["minimum"] == 0.5
            assert len(wire_row["runs"]) == len(base["runs"]) == 2   # --quick: 2 interleaved rounds

    fetch = [r for r in section["rows"] if r["group"].startswith("1024 B values, ") and r["group"].endswith(" MB")]
    names = {r["name"] for r in fetch}
    kcat = shutil.which("kcat") is not None         # Debian's kcat (make clients): the C consumer row
    assert names == {"os.sendfile -> loopback reader", wire.REQUEST_ROW, *wire.BARE_FETCHES, *wire.CONSUMERS,
                     *([wire.KCAT_ROW] if kcat else [])}
    assert len({(r["records"], r["bytes"]) for r in fetch}) == 1 and fetch[0]["bytes"] >= TINY.fetch_bytes
    # the second baseline: a request/response sendfile server, compared with streaming sendfile, no target
    request = next(r for r in fetch if r["name"] == wire.REQUEST_ROW)
    assert request["baseline"] == "os.sendfile -> loopback reader" and request.get("target") is None
    assert len(request["runs"]) == 2 and request["ratio_vs_baseline"] > 0
    targets = {r["name"]: r["target"]["minimum"] for r in fetch if r.get("target")}
    assert targets == {"bare Fetch v12 client, 1 MiB per fetch": 0.7, "bare Fetch v12 client, 16 MiB per fetch": 0.7,
                       "bare Fetch v12 client, 64 MiB per fetch": 0.5,
                       "bare Fetch v12 client, 64 MiB per fetch, streaming": 0.5,
                       "librdkafka consumer, default fetch sizes": 0.4, "librdkafka consumer, 64 MiB fetches": 0.7,
                       **({wire.KCAT_ROW: 0.4} if kcat else {})}
    # every consumer row's broker and client CPU per round; the Python consumer's split by thread (in clock ticks:
    # this tiny run's may be 0)
    cpu = section["facts"]["fetch_cpu_s"]
    assert set(cpu) == set(targets)
    for name, figures in cpu.items():
        assert len(figures["broker"]) == len(figures["client"]) == 2 and min(figures["client"]) > 0, name
    for name in wire.CONSUMERS:
        assert all({"python", "librdkafka"} <= set(threads) for threads in cpu[name]["client_threads"]), name
    assert section["facts"]["fetch_first_read_broker_cpu_s"] >= 0     # the untimed first read, apart from the rows
    if kcat:
        assert section["facts"]["kcat"].startswith("kcat ") and "librdkafka " in section["facts"]["kcat"]
    else:
        assert any(note.startswith(f"{wire.KCAT_ROW}: not measured") for note in section["notes"])

    assert section["facts"]["latency"] == section["facts"]["latency_by_acks"]["all"]
    assert section["params"]["java_client"] == "kafka-clients 3.9.1"
    for acks in ("1", "all"):     # each client paced at half its own peak, rounds alternating
        produce_peak = rows[(f"1024 B values, acks={acks}", "librdkafka produce -> broker")]["records_per_s"]
        for key, peak_row, paced_row in (
                ("latency_by_acks", (wire_latency.rdkafka_peak_group(acks), wire_latency.RDKAFKA_PEAK_ROW),
                 (wire_latency.rdkafka_group(acks), wire_latency.RDKAFKA_PACED_ROW)),
                ("java_latency_by_acks", (wire_latency.java_peak_group(acks), wire_latency.JAVA_PEAK_ROW),
                 (wire_latency.java_group(acks), wire_latency.JAVA_PACED_ROW))):
            latency = section["facts"][key][acks]
            assert len(latency["rounds"]) == len(latency["peak_rounds"]) == 2, key
            # the peak is the measuring client's own, unpaced, best of its rounds; the rate half of it
            assert [f["records"] for f in latency["peak_rounds"]] == [TINY.peak_records] * 2
            assert latency["peak_records_per_s"] == max(f["records_per_s"] for f in latency["peak_rounds"])
            assert latency["rate_records_per_s"] == pytest.approx(latency["peak_records_per_s"] / 2)
            assert rows[peak_row]["records"] == TINY.peak_records and len(rows[peak_row]["runs"]) == 2
            assert rows[paced_row]["records"] == latency["rounds"][0]["records"] and len(rows[paced_row]["runs"]) == 2
            for figures in latency["rounds"] + latency["peak_rounds"]:
                assert figures["loadavg_at_start"] >= 0 and figures["batches"] >= 1 and figures["broker_cpu_s"] >= 0
                assert 0 < figures["p50_ms"] <= figures["p99_ms"] <= figures["p999_ms"] <= figures["max_ms"]
            for figures in latency["rounds"]:
                assert figures["records"] == max(1, int(latency["rate_records_per_s"] * TINY.latency_s))
                assert figures["target_records_per_s"] == pytest.approx(latency["rate_records_per_s"])
            assert latency["p999_ms_of_best"] >= latency["best_p99_ms"]
        # the produce row's peak (no callback per record) kept beside the callback client's own
        assert section["facts"]["latency_by_acks"][acks]["produce_row_peak_records_per_s"] == pytest.approx(produce_peak)
        assert section["facts"]["java_latency_by_acks"][acks]["client"] == "kafka-clients 3.9.1"

    # --profile-broker: one cProfile stats file per broker, with the engine's append in it
    import pstats
    produce_stats = pstats.Stats(str(profiles / "wire-produce.pstats"))
    assert any(func[2] == "append_batches" for func in produce_stats.stats)  # type: ignore[attr-defined]  # Stats keeps its table in .stats (not in typeshed)
    assert (profiles / "wire-fetch.pstats").exists()
    scratch = tmp_path / "scratch"
    assert not scratch.exists() or not os.listdir(scratch)    # every broker dir and scratch log removed


@pytest.mark.unit
def test_summary_shows_the_wire_rows_from_the_newest_run():
    from benchmarks import summary
    from benchmarks.harness import Row, Sample, Section

    def doc(date: str, rate_s: float) -> dict:
        section = Section("wire", "t", {})
        group = "1024 B values, acks=all"
        section.add(Row(group, "in-process Log.append_batches", 1000, 1_000_000, [Sample(0.01, 0.01)]))
        section.add(Row(group, "librdkafka produce -> broker", 1000, 1_000_000, [Sample(rate_s, rate_s)],
                        baseline="in-process Log.append_batches"))
        meta = {"date_utc": date, "git_head": "abcdef0123", "engine_files_modified": [],
                "implementation": {"summary": "c", "STORAGE_ENGINE_PURE_PYTHON": None},
                "loadavg_at_start": [1.0], "loadavg_at_end": [2.0], "argv": ["--only", "wire"]}
        return {"meta": meta, "benchmarks": {"wire": section.to_json()}}

    runs = {"c": doc("2026-01-01T00:00:00Z", 0.04), "python": None, "large": None, "large-python": None,
            "wire": doc("2026-02-01T00:00:00Z", 0.02)}
    line = next(x for x in summary.table(runs).splitlines() if x.startswith("| Produce over the wire, 1 KiB values, acks=all"))
    assert "50,000 records/s" in line and "0.500x" in line and "| yes |" in line and "2026-02-01" in line
    runs["wire"] = None
    line = next(x for x in summary.table(runs).splitlines() if x.startswith("| Produce over the wire, 1 KiB values, acks=all"))
    assert "25,000 records/s" in line and "0.250x" in line and "**no**" in line and "2026-01-01" in line


@pytest.mark.unit
def test_summary_compares_the_bare_1_mib_row_with_the_request_response_baseline():
    from benchmarks import summary
    from benchmarks.harness import Row, Sample, Section

    section = Section("wire", "t", {})
    group = "1024 B values, 200 MB"
    section.add(Row(group, wire.SENDFILE_ROW, 1000, 200_000_000, [Sample(0.05, 0.05)]))
    section.add(Row(group, wire.REQUEST_ROW, 1000, 200_000_000, [Sample(0.1, 0.1)], baseline=wire.SENDFILE_ROW))
    section.add(Row(group, "bare Fetch v12 client, 1 MiB per fetch", 1000, 200_000_000, [Sample(0.125, 0.1)],
                    baseline=wire.SENDFILE_ROW, target=wire.FETCH_TARGET))
    meta = {"date_utc": "2026-02-01T00:00:00Z", "git_head": "abcdef0123", "engine_files_modified": [],
            "implementation": {"summary": "c", "STORAGE_ENGINE_PURE_PYTHON": None},
            "loadavg_at_start": [1.0], "loadavg_at_end": [2.0], "argv": ["--only", "wire"]}
    lines = summary.table({"c": None, "python": None, "large": None, "large-python": None,
                           "wire": {"meta": meta, "benchmarks": {"wire": section.to_json()}}}).splitlines()

    def row(prefix: str) -> str:
        return next(x for x in lines if x.startswith("| " + prefix))
    bare = row("Fetch over the wire, 1 KiB values, bare Fetch client, 1 MiB per fetch |")
    assert "| 1,600.0 MB/s (200 MB) | 0.400x | **no** |" in bare          # against streaming: its target
    against = row("Fetch over the wire, 1 KiB values, bare Fetch client, 1 MiB per fetch, against sendfile per request")
    assert "sendfile per 1 MiB request: 2,000.0 MB/s | - (no target) | 1,600.0 MB/s (200 MB) | 0.800x | - |" in against
    request = row("Fetch over the wire, 1 KiB values, sendfile per 1 MiB request")
    assert "sendfile: 4,000.0 MB/s | - (no target) | 2,000.0 MB/s (200 MB) | 0.500x | - |" in request


@pytest.mark.unit
def test_summary_shows_both_clients_latency_and_whose_peak_was_halved():
    from benchmarks import summary

    def figures(p99: float, **extra: object) -> dict:
        return {"peak_records_per_s": 20_000.0, "rate_records_per_s": 10_000.0, "best_p99_ms": p99,
                "p50_ms_of_best": 1.0, "p999_ms_of_best": p99 + 1,
                "rounds": [{"p99_ms": p99, "loadavg_at_start": 1.5}, {"p99_ms": p99 + 2, "loadavg_at_start": 2.5}],
                **extra}

    facts = {"latency_by_acks": {a: figures(12.0, produce_row_peak_records_per_s=30_000.0) for a in ("1", "all")},
             "java_latency_by_acks": {a: figures(4.0, client="kafka-clients 3.9.1") for a in ("1", "all")}}
    meta = {"date_utc": "2026-02-01T00:00:00Z", "git_head": "abcdef0123", "engine_files_modified": [],
            "implementation": {"summary": "c", "STORAGE_ENGINE_PURE_PYTHON": None},
            "loadavg_at_start": [1.0], "loadavg_at_end": [2.0], "argv": ["--only", "wire"]}
    runs = {"c": None, "python": None, "large": None, "large-python": None,
            "wire": {"meta": meta, "benchmarks": {"wire": {"rows": [], "facts": facts}}}}
    lines = summary.table(runs).splitlines()
    java = next(x for x in lines if x.startswith("| Produce latency, Java producer (kafka-clients), 1 KiB values, "
                                                 "acks=all, paced at half its peak |"))
    assert "p99 4.0 ms" in java and "| yes |" in java and "p99 <= 10 ms" in java
    assert "half the peak 20,000 of kafka-clients 3.9.1 (unpaced, same client)" in java
    rdkafka = next(x for x in lines if x.startswith("| Produce latency at half the peak rate, 1 KiB values, acks=all |"))
    assert "p99 12.0 ms" in rdkafka and "**no**" in rdkafka and "load average 1.50-2.50" in rdkafka
    assert "with its per-record callbacks (the produce row's, without: 30,000)" in rdkafka


@pytest.mark.unit
@pytest.mark.kills      # the watchdog SIGKILLs kcat
@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed (make clients)")
def test_a_kcat_round_that_never_ends_is_killed_and_named(tmp_path, monkeypatch):
    """kcat pointed at a port nobody serves keeps retrying: the round's watchdog kills it and the error names it."""
    from benchmarks import wire_consumers

    class Nobody:
        bootstrap = "127.0.0.1:1"

        def cpu_s(self) -> float:
            return 0.0

    monkeypatch.setattr(wire_consumers, "KCAT_TIMEOUT_S", 1.0)
    with pytest.raises(RuntimeError, match=r"(?s)kcat -C -b 127\.0\.0\.1:1 .* exited -9 \(killed after 1 s\)"):
        wire_consumers.kcat_round(Nobody(), "t", 10, str(tmp_path))
