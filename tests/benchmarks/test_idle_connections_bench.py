"""The idle-connections benchmark at a tiny size: a broker process, idle connections that were answered once and
stay open, a librdkafka producer beside them and alone, the ratio in the results. Nothing here judges a time."""
from __future__ import annotations

import json

import pytest

from benchmarks import __main__ as bench_main
from benchmarks import harness, idle_connections, wire


@pytest.mark.slow   # one broker process, 2 x 2 rounds of a few thousand records over loopback (~10 s)
def test_idle_connections_benchmark_runs_tiny_and_writes_its_rows(tmp_path, monkeypatch):
    monkeypatch.setattr(idle_connections, "IDLE_QUICK", 40)
    monkeypatch.setattr(idle_connections, "RECORDS_QUICK", 2_000)
    monkeypatch.setattr(harness, "TMP_ROOT", tmp_path / "scratch")
    out = tmp_path / "results.json"
    assert bench_main.main(["--only", "idle_connections", "--quick", "--out", str(out)]) == 0
    section = json.loads(out.read_text())["benchmarks"]["idle_connections"]
    rows = {r["name"]: r for r in section["rows"]}
    alone, beside = rows["producer alone"], rows["producer beside 40 idle connections"]
    assert alone["records"] == beside["records"] == 2_000 and beside["baseline"] == "producer alone"
    assert len(alone["runs"]) == len(beside["runs"]) == 2
    idle = section["facts"]["idle"]
    assert idle["connections"] == 40 and idle["ratio"] == pytest.approx(beside["ratio_vs_baseline"])
    # the broker held the idle connections: its memory was read with them open
    assert all(r > 0 for r in idle["broker_rss_bytes"]["producer beside 40 idle connections"])


@pytest.mark.slow
def test_idle_connections_are_answered_then_silent(tmp_path):
    (tmp_path / "logs").mkdir()
    with wire.BrokerProcess(str(tmp_path), str(tmp_path / "logs")) as broker:
        socks = idle_connections.open_idle(broker.bootstrap, 25)
        _silent(socks)


def _silent(socks: list) -> None:
    try:
        assert len(socks) == 25
        for s in socks:       # nothing more comes from the broker on a silent connection
            s.setblocking(False)
            with pytest.raises(BlockingIOError):
                s.recv(1)
    finally:
        idle_connections.close_all(socks)
    assert socks == []
