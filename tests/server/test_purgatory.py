"""The purgatory against a real broker process: a fetch waiting for data is woken by an append ANOTHER process
makes (the CLI's ``produce``), through the file watcher's inotify event on the partition's folder, not by
polling (the broker's counters: watch events seen, no stat polls), and answers the records long before its
max_wait."""
from __future__ import annotations

import subprocess
import sys

import pytest

from tests.server import wire
from tests.server.broker_proc import ROOT, wait_until
from tests.server.fetch_wire import answered, fetch_request, records, status
from tests.server.fuzz_campaign import create_topic

pytestmark = pytest.mark.e2e


def test_an_append_by_another_process_wakes_a_waiting_fetch_through_the_file_watcher(broker_factory):
    broker = broker_factory()
    create_topic(broker.bootstrap, "elsewhere", 2)
    conn = wire.Conn(broker.bootstrap)
    try:
        # a fetch of both partitions that would wait ten minutes: only a wake-up can answer it with records
        conn.send(wire.request_frame(fetch_request(12, "elsewhere", {0: 0, 1: 0}, max_wait_ms=600_000), 1))
        wait_until("the fetch waiting in the purgatory", lambda: status(broker).get("fetch_waits", 0) >= 1, 30)
        cli = subprocess.run([sys.executable, "-m", "storage_engine", "--config", str(broker.config_path),
                              "produce", "--topic", "elsewhere", "--partition", "1"], cwd=ROOT, text=True,
                             input='{"value": "one"}\n{"value": "two"}\n', capture_output=True, timeout=120)
        assert cli.returncode == 0, cli.stderr
        corr, response = wire.decode_response(1, 12, conn.read_frame(120))
        assert corr == 1 and int(response.error_code) == 0
        entries = answered(response)
        assert int(entries[1].high_watermark) == 2 and b"one" in records(entries[1])
        assert int(entries[0].high_watermark) == 0 and not records(entries[0])
    finally:
        conn.close()
    assert broker.stop() == 0
    counted = status(broker)
    assert counted["file_watch_inotify"] == 1
    assert counted["file_watch_events"] >= 1 and counted["file_watch_polls"] == 0
    # the CLI's writes before its append (its lock, the partition's state file) may wake the fetch first: it then
    # re-reads that partition, finds nothing and waits again; every wait still ended by a change, none timed out
    assert counted["fetch_waits"] >= 1 and counted["fetch_wakeups"] >= counted["fetch_waits"]
