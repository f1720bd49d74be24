"""The broker's limits (storage_engine/server/limits.py) against a real broker process: the memory pool
(``queued.max.request.bytes``) holding a connection back, resident memory back at its level once a burst of large
frames is over, idle and slow connections closed, and the derived defaults of ``max.connections`` and
``queued.max.request.bytes``; the pool's rules in process."""
from __future__ import annotations

import asyncio
import socket
import threading

import pytest

from storage_engine.server import limits
from storage_engine.server.limits import Limits, MemoryPool
from tests.server import wire
from tests.server.broker_proc import wait_until
from tests.server.fuzz_structured import RssSampler, rss_bytes

MIB = 1024 * 1024


def produce_frame(size: int, topic: str = "no-such-topic", correlation_id: int = 7) -> bytes:
    """A Produce v9 frame of about ``size`` bytes (one valid batch of one record) to ``topic``."""
    return wire.request_frame(wire.produce_request(9, topic, 0, wire.batch([bytes(max(0, size - 100))])),
                              correlation_id)


def produce_error(conn: wire.Conn, timeout: float = 120.0) -> int:
    corr, body = wire.decode_response(0, 9, conn.read_frame(timeout))
    return int(body.responses[0].partition_responses[0].error_code)


# -- in process: the pool's rules ----------------------------------------------------------------------------------

@pytest.mark.unit
def test_pool_waits_in_order_admits_an_oversized_frame_alone_and_gives_back_a_cancelled_wait():
    async def scenario() -> list[str]:
        pool = MemoryPool(100)
        order: list[str] = []

        async def take(name: str, size: int) -> None:
            await pool.acquire(size)
            order.append(name)

        await pool.acquire(60)
        big = asyncio.create_task(take("big", 70))          # 60 + 70 > 100: waits
        small = asyncio.create_task(take("small", 10))      # would fit, but must not pass the waiting one
        await asyncio.sleep(0)
        assert order == [] and pool.used == 60
        pool.release(60)
        await asyncio.gather(big, small)
        assert order == ["big", "small"] and pool.used == 80
        pool.release(80)
        await pool.acquire(500)                              # larger than the pool: admitted when it is empty
        assert pool.used == 500 and pool.peak == 500
        waiter = asyncio.create_task(pool.acquire(1))
        await asyncio.sleep(0)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        pool.release(500)
        assert pool.used == 0 and pool.waits == 3      # big, small and the cancelled one
        return order

    assert asyncio.run(scenario()) == ["big", "small"]


@pytest.mark.unit
def test_derived_defaults_follow_the_open_file_limit_and_memory():
    assert limits.default_max_connections(memory=1024 * 1024 * MIB, nofile=20000) == (20000 - 1024) // 2
    assert limits.default_max_connections(memory=24 * 1024 * MIB, nofile=20000) == 24 * 1024 // 16
    assert limits.default_max_connections(memory=512 * MIB, nofile=1 << 20) == 512 // 16
    assert limits.default_max_connections(memory=64 * 1024 * MIB, nofile=1024) == 16
    assert limits.default_queued_bytes(100 * MIB, memory=8 * 1024 * MIB) == 1024 * MIB
    assert limits.default_queued_bytes(100 * MIB, memory=256 * MIB) == 100 * MIB
    resolved = Limits.from_server({"socket.request.max.bytes": 100 * MIB, "max.connections": None,
                                   "queued.max.request.bytes": -1, "connections.max.idle.ms": 600000,
                                   "socket.request.receive.timeout.ms": -1})
    assert resolved.max_connections == limits.default_max_connections()
    assert resolved.queued_bytes is None and resolved.idle_s == 600.0 and resolved.receive_s is None


# -- a real broker -----------------------------------------------------------------------------------------------

@pytest.mark.e2e
def test_broker_logs_its_derived_limits(broker_factory):
    server = broker_factory()
    log = wait_until("the limits line", lambda: "limits: max.connections" in server.log_text() and server.log_text())
    expected = (f"limits: max.connections {limits.default_max_connections()}, queued.max.request.bytes "
                f"{limits.default_queued_bytes(100 * MIB)}, connections.max.idle.ms 600000, "
                f"socket.request.receive.timeout.ms 60000")
    assert expected in log


@pytest.mark.e2e
def test_a_frame_that_does_not_fit_the_pool_waits_until_memory_is_released(broker_factory):
    """Connection A holds 700 KiB of a 1 MiB pool with a frame it has not finished sending; B's 500 KiB frame
    must wait (the broker logs it) and is answered only after A's frame is complete and answered."""
    server = broker_factory(broker={"queued.max.request.bytes": MIB, "auto.create.topics.enable": False})
    first = produce_frame(700 * 1024, correlation_id=1)
    second = produce_frame(500 * 1024, correlation_id=2)
    a, b = wire.Conn(server.bootstrap), wire.Conn(server.bootstrap)
    try:
        a.request(wire.api_versions(3), 9)   # A's connection is being read before its big frame starts
        a.send(first[:len(first) // 2])
        _round_trip(server.bootstrap)          # the broker's loop has taken A's bytes (and its pool share)
        b.send(second)
        line = (f"127.0.0.1:{b.local_port} waits for memory: a request of {len(second) - 4} bytes, "
                f"{len(first) - 4} of queued.max.request.bytes={MIB} in use")
        wait_until("B to wait for memory", lambda: line in server.log_text())
        with pytest.raises(TimeoutError):
            b.read_frame(timeout=0.5)          # waiting for memory: nothing of B's frame was even read
        a.send(first[len(first) // 2:])
        assert produce_error(a) == 3           # UNKNOWN_TOPIC_OR_PARTITION: the frame was whole
        assert produce_error(b) == 3
    finally:
        a.close()
        b.close()
    assert "Traceback" not in server.log_text()


def _round_trip(address: str) -> None:
    """One answered request on a fresh connection: several turns of the broker's event loop."""
    c = wire.Conn(address)
    try:
        c.request(wire.api_versions(3), 9)
    finally:
        c.close()


def _burst(address: str, frame: bytes, connections: int) -> list[int]:
    codes: list[int] = []

    def one() -> None:
        conn = wire.Conn(address, timeout=300)
        try:
            conn.send(frame)
            codes.append(produce_error(conn, 300))
        finally:
            conn.close()

    threads = [threading.Thread(target=one) for _ in range(connections)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return codes


@pytest.mark.e2e
@pytest.mark.parametrize("frame_mib, frames, pool_mib", [(90, 4, 128), (20, 12, -1)],
                         ids=["4x90MiB-pool128MiB", "12x20MiB-unbounded"])
def test_rss_returns_to_its_level_after_a_burst_of_large_frames(broker_factory, frame_mib, frames, pool_mib):
    """Four legal 90 MiB frames once left the broker 360 MiB larger for good. Now: with a pool, the peak stays
    within what one frame at a time costs (the frame and the records kio decodes from it: 2 frames) plus a
    margin; with or without one, the resident size comes back to within 24 MiB of where it was (it stayed up when
    the task reading ahead kept a reference to its last frame). 20 MiB frames are below glibc's largest mmap
    threshold (32 MiB), so their memory comes from the heap, which malloc_trim gives back once the pool is empty."""
    pool = pool_mib * MIB if pool_mib > 0 else -1
    server = broker_factory(broker={"queued.max.request.bytes": pool, "auto.create.topics.enable": False})
    assert server.proc is not None
    pid = server.proc.pid
    warm = wire.Conn(server.bootstrap)
    warm.request(wire.api_versions(3), 1)          # imports and caches of a first request are not the burst's
    warm.send(produce_frame(1024))
    assert produce_error(warm) == 3
    warm.close()
    before = rss_bytes(pid)
    sampler = RssSampler(pid, interval=0.05)
    sampler.start()
    frame = produce_frame(frame_mib * MIB)
    try:
        codes = _burst(server.bootstrap, frame, frames)
    finally:
        samples = sampler.stop()
    del frame
    assert codes == [3] * frames
    peak = max(samples)
    if pool_mib > 0:
        assert peak - before <= 2 * frame_mib * MIB + 48 * MIB, (before / MIB, peak / MIB)
    settled = wait_until("the resident size back near its level before the burst",
                         lambda: (rss := rss_bytes(pid)) - before <= 24 * MIB and rss, timeout=60)
    print(f"\nRSS before {before / MIB:.0f} MiB, peak {peak / MIB:.0f} MiB, after {settled / MIB:.0f} MiB "
          f"({frames} x {frame_mib} MiB frames, pool {pool_mib} MiB)")
    assert "Traceback" not in server.log_text()


@pytest.mark.e2e
def test_an_idle_connection_is_closed_but_not_one_with_a_request_in_flight(broker_factory):
    """connections.max.idle.ms = 3 s: a connection that sends nothing more is closed with one line naming the key;
    one whose Fetch waits 7 s for data is not idle meanwhile, so right after the answer it still takes a request
    (had the wait counted as idle, the close would be due the moment the Fetch is answered)."""
    from tests.server.fuzz_campaign import create_topic

    server = broker_factory(broker={"connections.max.idle.ms": 3000})
    create_topic(server.bootstrap, "idle-topic", 1)
    idle = wire.Conn(server.bootstrap)
    busy = wire.Conn(server.bootstrap)
    try:
        idle.request(wire.api_versions(3), 1)
        fetch = wire.build_request(1, 12, replica_id=-1, max_wait=_ms(7000), min_bytes=1, max_bytes=1024,
                                   isolation_level=0, session_id=0, session_epoch=-1, rack_id="",
                                   forgotten_topics_data=[],
                                   topics=[{"topic": "idle-topic", "partitions": [
                                       {"partition": 0, "current_leader_epoch": -1, "fetch_offset": 0,
                                        "last_fetched_epoch": -1, "log_start_offset": -1,
                                        "partition_max_bytes": 1024}]}])
        busy.send(wire.request_frame(fetch, 5))
        assert idle.expect_closed(timeout=60) == b""
        corr, body = wire.decode_response(1, 12, busy.read_frame(60))
        assert corr == 5 and int(body.error_code) == 0
        assert body.responses[0].partitions[0].records in (b"", None)      # it waited for data that never came
        assert int(busy.request(wire.api_versions(3), 6).error_code) == 0
    finally:
        idle.close()
        busy.close()
    log = server.log_text()
    assert f"127.0.0.1:{idle.local_port} on PLAINTEXT://127.0.0.1:0: idle for 3000 ms (connections.max.idle.ms)" \
        in log, log[-2000:]


def _ms(n: int):
    import datetime
    return datetime.timedelta(milliseconds=n)


@pytest.mark.e2e
def test_a_frame_sent_one_byte_at_a_time_is_closed_by_the_receive_timeout(broker_factory):
    """A slow-loris client: one byte every 0.2 s of a 400-byte frame would take 80 s; the broker closes it once
    the frame has taken longer than socket.request.receive.timeout.ms (1 s here), before the frame is whole."""
    server = broker_factory(broker={"socket.request.receive.timeout.ms": 1000})
    frame = wire.request_frame(wire.api_versions(3), 3, "x" * 360)
    conn = wire.Conn(server.bootstrap)
    sent = 0
    closed = False
    try:
        for i in range(len(frame) - 1):         # never the last byte: the frame can never be answered
            try:
                conn.send(frame[i:i + 1])
            except wire.Closed:
                closed = True
                break
            sent += 1
            conn.sock.settimeout(0.2)
            try:
                if conn.sock.recv(1) == b"":
                    closed = True
                    break
            except socket.timeout:
                pass
            except (ConnectionResetError, BrokenPipeError):
                closed = True
                break
    finally:
        conn.close()
    assert closed, f"still open after {sent} of {len(frame)} bytes"
    log = server.log_text()
    assert (f"127.0.0.1:{conn.local_port} on PLAINTEXT://127.0.0.1:0: a request frame took longer than 1.0 s to "
            f"arrive (socket.request.receive.timeout.ms)") in log, log[-2000:]


@pytest.mark.e2e
def test_idle_and_receive_timeouts_can_be_turned_off(broker_factory):
    server = broker_factory(broker={"connections.max.idle.ms": -1, "socket.request.receive.timeout.ms": -1,
                                    "queued.max.request.bytes": -1})
    log = wait_until("the limits line", lambda: "limits:" in server.log_text() and server.log_text())
    assert "queued.max.request.bytes -1, connections.max.idle.ms -1, socket.request.receive.timeout.ms -1" in log
    conn = wire.Conn(server.bootstrap)
    try:
        assert int(conn.request(wire.api_versions(3), 1).error_code) == 0
    finally:
        conn.close()
