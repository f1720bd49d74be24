"""The listener's status as the Storage view reads it: written by the running broker, "stopped" after a clean
stop, "not responding" after a kill -9."""
from __future__ import annotations

import time

import pytest
from confluent_kafka import Producer

from storage_engine.config_file import load_config
from storage_engine.inspection.listener import listener_status

pytestmark = [pytest.mark.e2e, pytest.mark.kills]


def _wait_for(config, predicate, timeout=30.0, now_ms=None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        st = listener_status(config, now_ms=now_ms)
        if st is not None and predicate(st):
            return st
        time.sleep(0.2)
    raise AssertionError(f"status never matched: {listener_status(config, now_ms=now_ms)}")


def test_the_status_follows_the_broker(broker_factory):
    b = broker_factory()
    config = load_config(b.config_path)
    p = Producer({"bootstrap.servers": b.bootstrap})
    for i in range(50):
        p.produce("status-topic", key=b"k", value=b"v%d" % i)
    assert p.flush(30) == 0
    st = _wait_for(config, lambda s: s["produce_records"] >= 50)
    assert st["state"] == "running" and st["listeners"] == [f"PLAINTEXT://{b.bootstrap}"]
    assert st["connections"] >= 0 and st["produce_requests"] >= 1
    # start-up's objects are frozen out of the collector (storage_engine/server/server.py), its pauses counted
    gc_state = st["gc"]
    assert gc_state["frozen_objects"] > 10_000
    assert len(gc_state["collections"]) == len(gc_state["pause_max_ms"]) == len(gc_state["pause_total_ms"]) == 3
    assert all(m <= t for m, t in zip(gc_state["pause_max_ms"], gc_state["pause_total_ms"]))
    del p
    assert b.stop() == 0
    stopped = listener_status(config)
    assert stopped is not None and stopped["state"] == "stopped"

    b.restart()
    _wait_for(config, lambda s: s["state"] == "running")
    b.kill()
    later = int(time.time() * 1000) + 60_000
    silent = listener_status(config, now_ms=later)
    assert silent is not None and silent["state"] == "not responding"
