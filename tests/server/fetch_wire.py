"""Fetch requests for the purgatory and fetch-session tests: built by hand (session id, epoch, forgotten topics)
for v12 (topics by name) and v13 (topics by id), and the broker's status counters read from its status file."""
from __future__ import annotations

import datetime
import json
import uuid
from pathlib import Path
from typing import Any

from storage_engine import layout
from tests.server import wire
from tests.server.broker_proc import BrokerProcess


def fetch_request(version: int, topic: str | uuid.UUID, offsets: dict[int, int], *, session_id: int = 0,
                  epoch: int = -1, forgotten: list[int] | None = None, max_wait_ms: int = 0,
                  min_bytes: int = 1) -> Any:
    """A Fetch of ``topic``'s partitions at ``offsets`` ({partition: fetch offset}); v13+ names the topic by id."""
    key = "topic_id" if version >= 13 else "topic"
    parts = [{"partition": p, "current_leader_epoch": -1, "fetch_offset": o, "last_fetched_epoch": -1,
              "log_start_offset": -1, "partition_max_bytes": 1 << 20} for p, o in offsets.items()]
    return wire.build_request(
        1, version, replica_id=-1, max_wait=datetime.timedelta(milliseconds=max_wait_ms), min_bytes=min_bytes,
        max_bytes=1 << 24, isolation_level=0, session_id=session_id, session_epoch=epoch, rack_id="",
        topics=[{key: topic, "partitions": parts}] if parts else [],
        forgotten_topics_data=[{key: topic, "partitions": forgotten}] if forgotten else [])


def answered(response: Any) -> dict[int, Any]:
    """{partition: its entry} of a one-topic Fetch response."""
    return {int(p.partition_index): p for t in response.responses for p in t.partitions}


def records(entry: Any) -> bytes:
    return bytes(entry.records or b"")


def produce(broker: BrokerProcess, topic: str, partition: int, values: list[bytes]) -> None:
    conn = wire.Conn(broker.bootstrap)
    try:
        answer = conn.request(wire.produce_request(9, topic, partition, wire.batch(values)), 1)
        assert int(answer.responses[0].partition_responses[0].error_code) == 0, answer
    finally:
        conn.close()


def status(broker: BrokerProcess) -> dict[str, Any]:
    """The broker's status file as it last wrote it (every 5 s, and at a clean stop)."""
    path = Path(broker.log_dirs[0]) / (layout.ENGINE_PREFIX + "broker-status.json")
    data: dict[str, Any] = json.loads(path.read_text())
    return data
