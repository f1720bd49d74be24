"""fetch_sessions: the broker's CPU per idle fetch of a consumer of 1,000 partitions (200 with ``--quick``), with
and without a fetch session (KIP-227), in the same run.

Setup (not timed): one log dir under ``var/bench/tmp`` holding one topic of 1,000 empty partitions (each folder
with its ``partition.metadata``, opened and closed once by the engine), then ``python -m storage_engine serve`` on
it (default configuration: ``max.incremental.fetch.session.cache.slots`` 1000, no authorizer). The client is a bare
socket in this process, one request in flight: Fetch v12, the consumer at the end of every partition (offset 0 of
an empty log: nothing to send, the idle case of a consumer that has caught up).

Rows (each round is :data:`FETCHES_FULL` fetches, ``--quick`` :data:`FETCHES_QUICK`; best round shown; ``cpu s``
is the BROKER's CPU only, from /proc, for the whole round; records = fetches):

* ``full fetches (no session)``: every fetch names the 1,000 partitions with session 0 / epoch -1, as librdkafka
  always does; the broker reads each partition and answers each;
* ``incremental fetches (session)``: one full fetch with epoch 0 makes the session (not timed), then each fetch
  names no partition and carries the session's next epoch, as Kafka's Java client and kafka-python do once
  caught up; the broker answers no partition.

Two groups: ``max_wait 0`` (answered at once: the cost of reading and answering) and ``max_wait 20 ms`` (the
broker waits in its purgatory for an append that never comes, then answers: what an idle consumer really costs).
The notes give the broker CPU per fetch of each row and the ratio with/without; target: with sessions <= 0.2x the
CPU of full fetches.
"""
from __future__ import annotations

import datetime
import os
import time
from typing import Any

from kio.index import load_response_schema
from kio.schema.fetch.v12 import request as fetch_v12
from kio.serial import entity_reader

from .harness import Context, Row, Sample, Section, run_interleaved, scratch_dir
from .metadata import Client, _broker, _build_store

NAME = "fetch_sessions"
VERSION = 12
PARTITIONS_FULL = 1000
PARTITIONS_QUICK = 200
FETCHES_FULL = 200
FETCHES_QUICK = 50
WAITS_MS = (0, 20)
TARGET_RATIO = 0.2


def _fetch(topic: str, partitions: int, *, session_id: int, epoch: int, max_wait_ms: int) -> Any:
    schema: Any = fetch_v12        # kio's fields are typed by its own int subclasses
    topics = () if partitions == 0 else (schema.FetchTopic(topic=topic, partitions=tuple(
        schema.FetchPartition(partition=p, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1,
                       log_start_offset=-1, partition_max_bytes=1 << 20) for p in range(partitions))),)
    return schema.FetchRequest(replica_id=-1, max_wait=datetime.timedelta(milliseconds=max_wait_ms), min_bytes=1,
               max_bytes=50 << 20, isolation_level=0, session_id=session_id, session_epoch=epoch, topics=topics,
               forgotten_topics_data=(), rack_id="")


def _decode(frame: bytes) -> Any:
    cls = load_response_schema(1, VERSION)
    view = memoryview(frame)
    _header, offset = entity_reader(cls.__header_schema__)(view, 0)
    body, _used = entity_reader(cls)(view, offset)
    return body


def _answered(body: Any) -> int:
    if int(body.error_code) != 0:
        raise RuntimeError(f"the fetch answered error {int(body.error_code)}")
    for t in body.responses:
        for p in t.partitions:
            if int(p.error_code) != 0 or p.records:
                raise RuntimeError(f"partition {p.partition_index} answered error {int(p.error_code)} or records")
    return sum(len(t.partitions) for t in body.responses)


def run(ctx: Context) -> Section:
    partitions = PARTITIONS_QUICK if ctx.quick else PARTITIONS_FULL
    fetches = FETCHES_QUICK if ctx.quick else FETCHES_FULL
    section = Section(NAME, f"broker CPU per idle fetch of a {partitions:,}-partition consumer, with and "
                            "without a fetch session",
                      {"partitions": partitions, "fetches_per_round": fetches, "version": VERSION,
                       "max_wait_ms": ", ".join(map(str, WAITS_MS))})
    with scratch_dir(ctx, "fetch-sessions") as work:
        log_dir = os.path.join(work, "logs")
        [topic] = _build_store(log_dir, (1, partitions))
        broker = _broker(work, log_dir)
        try:
            full_client, session_client = Client(broker.bootstrap), Client(broker.bootstrap)
            try:
                for wait_ms in WAITS_MS:
                    _measure(section, broker, full_client, session_client, topic, partitions, fetches, wait_ms,
                             ctx.repeats)
            finally:
                full_client.close()
                session_client.close()
        finally:
            broker.stop_clean()
    return section


def _measure(section: Section, broker: Any, full_client: Client, session_client: Client, topic: str,
             partitions: int, fetches: int, wait_ms: int, repeats: int) -> None:
    full = _fetch(topic, partitions, session_id=0, epoch=-1, max_wait_ms=wait_ms)
    got = _answered(_decode(full_client.ask(full, VERSION)))
    if got != partitions:
        raise RuntimeError(f"a full fetch answered {got} partitions, expected {partitions}")
    opened = _decode(session_client.ask(_fetch(topic, partitions, session_id=0, epoch=0, max_wait_ms=0), VERSION))
    session_id, epoch = int(opened.session_id), 1
    if session_id == 0 or _answered(opened) != partitions:
        raise RuntimeError("the broker made no fetch session")

    def full_round() -> Sample:
        cpu0, start = broker.cpu_s(), time.perf_counter()
        for _ in range(fetches):
            full_client.ask(full, VERSION)
        return Sample(time.perf_counter() - start, broker.cpu_s() - cpu0)

    def session_round() -> Sample:
        nonlocal epoch
        bodies = []
        for _ in range(fetches):
            bodies.append(_fetch(topic, 0, session_id=session_id, epoch=epoch, max_wait_ms=wait_ms))
            epoch += 1
        cpu0, start = broker.cpu_s(), time.perf_counter()
        for body in bodies:
            frame = session_client.ask(body, VERSION)
        sample = Sample(time.perf_counter() - start, broker.cpu_s() - cpu0)
        last = _decode(frame)
        if int(last.session_id) != session_id or _answered(last) != 0:
            raise RuntimeError(f"an incremental fetch answered session {int(last.session_id)}, "
                               f"{_answered(last)} partitions")
        return sample

    runs = run_interleaved({"full": full_round, "session": session_round}, repeats)
    group = f"{partitions:,} idle partitions, max_wait {wait_ms} ms"
    base = section.add(Row(group, "full fetches (no session)", fetches, fetches, runs["full"]))
    row = section.add(Row(group, "incremental fetches (session)", fetches, fetches, runs["session"],
                          baseline=base.name))
    full_cpu = (base.best_cpu_s or 0.0) / fetches
    session_cpu = (row.best_cpu_s or 0.0) / fetches
    ratio = session_cpu / full_cpu if full_cpu else float("nan")
    section.facts[f"max_wait_{wait_ms}_ms"] = {"broker_cpu_per_full_fetch_s": full_cpu,
                                               "broker_cpu_per_incremental_fetch_s": session_cpu,
                                               "ratio": ratio, "target": TARGET_RATIO,
                                               "met": ratio <= TARGET_RATIO}
    section.notes.append(f"{group}: broker CPU per fetch {full_cpu * 1e6:,.0f} us without a session, "
                         f"{session_cpu * 1e6:,.0f} us with one: {ratio:.3f}x (target <= {TARGET_RATIO}x: "
                         f"{'met' if ratio <= TARGET_RATIO else 'NOT MET'})")
