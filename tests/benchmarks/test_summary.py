"""The BENCHMARKS.md summary generator: it reads results as the harness writes them and rewrites only the table
between its markers."""
from __future__ import annotations

import json

import pytest

from benchmarks import summary
from benchmarks.harness import REPO, Row, Sample, Section

pytestmark = pytest.mark.unit


def results(impl: str, rate_samples: list[Sample]) -> dict:
    section = Section("compaction", "t", {})
    section.add(Row("100 B values", "raw copy (read + write + fsync)", 2_000_000, 246_000_000, [Sample(0.2, 0.1)]))
    section.add(Row("100 B values", "clean round (map + clean)", 2_000_000, 246_000_000, rate_samples,
                    baseline="raw copy (read + write + fsync)"))
    load = Section("load", "t", {})
    load.add(Row("128 MiB segments", "raw read of all .log files", 1, 268_000_000, [Sample(0.1, 0.1)]))
    load.add(Row("128 MiB segments", "LogManager.open, unclean (recover from 0)", 1, 268_000_000, [Sample(2.0, 2.0)],
                 baseline="raw read of all .log files"))
    meta = {"date_utc": "2026-11-23T00:00:00Z", "git_head": "0123456789abcdef", "engine_files_modified": [],
            "implementation": {"summary": impl, "STORAGE_ENGINE_PURE_PYTHON": "1" if impl == "python" else None},
            "loadavg_at_start": [0.5, 0.5, 0.5], "loadavg_at_end": [0.7, 0.5, 0.5], "argv": ["--only", "x"]}
    return {"meta": meta, "benchmarks": {"compaction": section.to_json(), "load": load.to_json()}}


def test_table_judges_targets_and_shows_both_implementations(tmp_path):
    runs = {"c": results("c", [Sample(1.0, 0.9), Sample(0.8, 0.7)]), "python": results("python", [Sample(8.0, 8.0)]),
            "large": None, "large-python": None}
    text = summary.render(runs)
    row = next(line for line in text.splitlines() if line.startswith("| Compaction round, 100 B values |"))
    assert "2,500,000 records/s" in row and "| yes |" in row and "250,000 records/s" in row
    assert "raw copy (read + write + fsync): 10,000,000 records/s" in row and "0.250x" in row
    assert "0123456" in row and "2026-11-23T00:00:00Z" in row and "0.50 -> 0.70" in row
    recovery = next(line for line in text.splitlines() if line.startswith("| Unclean recovery, 128 MiB"))
    assert "134.0 MB/s" in recovery and "**no**" in recovery
    missing = next(line for line in text.splitlines() if line.startswith("| Spark key map, 100 M keys"))
    assert missing.endswith("| - | <= 150 s wall | - | - | - | - | - | - | - |")


def test_write_replaces_only_the_summary(tmp_path):
    path = tmp_path / "BENCHMARKS.md"
    path.write_text("# Benchmarks\n\nverbatim tables\n")
    runs = {"c": results("c", [Sample(1.0, 1.0)]), "python": None, "large": None, "large-python": None}
    summary.write(path, summary.render(runs))
    first = path.read_text()
    assert first.startswith("# Benchmarks\n\n" + summary.BEGIN) and first.endswith("verbatim tables\n")
    runs["c"] = results("c", [Sample(0.5, 0.5)])
    summary.write(path, summary.render(runs))
    second = path.read_text()
    assert second.count(summary.BEGIN) == 1 and "4,000,000 records/s" in second and second.endswith("verbatim tables\n")
    json.dumps(runs)  # the documents the generator reads are plain JSON


def test_write_on_the_real_page_changes_only_its_table(tmp_path):
    page = (REPO / "BENCHMARKS.md").read_text()
    assert page.count(summary.BEGIN) == 1 and page.count(summary.END) == 1
    head, _, rest = page.partition(summary.BEGIN)
    tail = rest.partition(summary.END)[2]
    path = tmp_path / "BENCHMARKS.md"
    path.write_text(page)
    runs = {"c": results("c", [Sample(1.0, 1.0)]), "python": None, "large": None, "large-python": None}
    summary.write(path, summary.render(runs))
    new = path.read_text()
    assert new.startswith(head + summary.BEGIN) and new.endswith(summary.END + tail)
    assert "2,000,000 records/s" in new.partition(summary.END)[0]


def test_a_metric_no_run_measured_keeps_its_last_value_commit_and_run():
    old = results("c", [Sample(1.0, 1.0)])
    old["meta"].update({"date_utc": "2026-11-20T00:00:00Z", "git_head": "aaaaaaaaaaaa"})
    old["meta"]["argv"] = ["--only", "compaction,load"]
    page = "# Benchmarks\n\n" + summary.render({"c": old, "python": None}) + "\n\nprose\n"
    # a later run of another section only: the compaction and load rows keep the old run's figures and label
    newer = results("c", [Sample(0.5, 0.5)])
    del newer["benchmarks"]["compaction"]
    newer["meta"].update({"date_utc": "2026-11-29T00:00:00Z", "git_head": "bbbbbbbbbbbb"})
    text = summary.render({"c": newer, "python": None}, page)
    row = next(line for line in text.splitlines() if line.startswith("| Compaction round, 100 B values |"))
    assert "2,000,000 records/s" in row and "aaaaaaaaa" in row and "2026-11-20T00:00:00Z" in row
    recovery = next(line for line in text.splitlines() if line.startswith("| Unclean recovery, 128 MiB"))
    assert "bbbbbbbbb" in recovery and "2026-11-29T00:00:00Z" in recovery
    runs_line = next(line for line in text.splitlines() if line.startswith("Runs: "))
    assert "2026-11-20T00:00:00Z): `python -m benchmarks --only compaction,load`" in runs_line
    assert "(2026-11-29T00:00:00Z)" in runs_line
    never = next(line for line in text.splitlines() if line.startswith("| Spark key map, 100 M keys"))
    assert never.endswith("| - | <= 150 s wall | - | - | - | - | - | - | - |")
    # a results file older than the page's row does not replace it
    stale = results("c", [Sample(4.0, 4.0)])
    stale["meta"].update({"date_utc": "2026-11-01T00:00:00Z", "git_head": "cccccccccccc"})
    row = next(line for line in summary.render({"c": stale}, text).splitlines()
               if line.startswith("| Compaction round, 100 B values |"))
    assert "aaaaaaaaa" in row and "2,000,000 records/s" in row
    # once the carried row is measured again, the old run leaves the list
    again = summary.render({"c": results("c", [Sample(0.5, 0.5)]), "python": None}, text)
    assert "2026-11-20T00:00:00Z" not in again


def test_latency_idle_connections_and_fetch_session_rows():
    def latency(p99: float) -> dict:
        return {"rounds": [{"p99_ms": p99, "loadavg_at_start": 0.5}], "best_p99_ms": p99, "p50_ms_of_best": 4.0,
                "p999_ms_of_best": p99 * 2, "rate_records_per_s": 50_000, "peak_records_per_s": 100_000}
    wire = Section("wire", "t", {})
    wire.facts["latency_by_acks"] = {"1": latency(12.0), "all": latency(9.5)}
    sessions = Section("fetch_sessions", "t", {"partitions": 1000})
    sessions.facts["max_wait_0_ms"] = {"broker_cpu_per_full_fetch_s": 0.004, "broker_cpu_per_incremental_fetch_s": 0.0004}
    sessions.facts["max_wait_20_ms"] = {"broker_cpu_per_full_fetch_s": 0.004, "broker_cpu_per_incremental_fetch_s": 0.002}
    idle = Section("idle_connections", "t", {})
    idle.facts["idle"] = {"connections": 1000, "ratio": 0.95, "alone_records_per_s": 200_000,
                          "beside_records_per_s": 190_000}
    doc = results("c", [Sample(1.0, 1.0)])
    doc["benchmarks"].update({"wire": wire.to_json(), "fetch_sessions": sessions.to_json(), "idle_connections": idle.to_json()})
    lines = summary.table({"c": doc}).splitlines()

    def row(prefix: str) -> str:
        return next(line for line in lines if line.startswith("| " + prefix))
    assert "p99 12.0 ms, p50 4.0 ms, p99.9 24.0 ms" in row("Produce latency at half the peak rate, 1 KiB values, acks=1 |")
    assert "| p99 <= 10 ms | p99 9.5 ms" in row("Produce latency at half the peak rate, 1 KiB values, acks=all |")
    assert "| yes |" in row("Produce latency at half the peak rate, 1 KiB values, acks=all |")
    assert "0.950x | yes" in row("Produce beside 1,000 idle connections")
    assert "400 us" in row("Idle fetches of a 1,000-partition consumer, broker CPU with a fetch session, max_wait 0 |")
    assert "0.100x | yes" in row("Idle fetches of a 1,000-partition consumer, broker CPU with a fetch session, max_wait 0 |")
    assert "0.500x | **no**" in row("Idle fetches of a 1,000-partition consumer, broker CPU with a fetch session, max_wait 20 ms |")
