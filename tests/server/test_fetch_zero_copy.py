"""Fetches sent from the segment files (verified ranges and sendfile: storage_engine.segment.verified,
slice_read, file_slice) while other processes change the partition under the broker: a truncation by another
process followed by new, damaged bytes where verified ones were is answered CORRUPT_MESSAGE, never with those
bytes; a response blocked mid-send while retention deletes its segment, the cleaner swaps it or a truncation
rewrites it still delivers exactly the bytes that were checked, every batch whole and CRC-valid; verified bytes in
the page cache are read on the event loop, everything else in the read threads."""
from __future__ import annotations

import datetime
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from storage_engine import layout
from storage_engine.config_file import config_from_mapping
from storage_engine.log.manager import LogManager
from storage_engine.record.record_batch import build_batch
from storage_engine.segment.file_records import iter_batches
from tests.server import wire
from tests.server.broker_proc import BrokerProcess
from tests.server.fetch_wire import status
from tests.storage_engine.helpers import TRUNCATE_AND_REFILL

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]
TOPIC = "zc"
CORRUPT_MESSAGE = 2


def _write(log_dir: str, topics: dict[str, dict[str, Any]], batches: int, records: int, value: int,
           keys: int | None = None) -> None:
    """``batches`` batches of ``records`` records into each topic's partition 0, written before the broker runs;
    batch ``i`` uses the keys of batch ``i % keys`` (default: every key new)."""
    cfg = config_from_mapping({"broker": {"log.dirs": [log_dir]}, "topics": topics})
    mgr = LogManager.open(cfg)
    try:
        for topic in topics:
            log = mgr.get_or_create_log(topic, 0)
            for i in range(batches):
                log.append_batches(build_batch([(f"k{i % (keys or batches)}-{j}".encode(), f"{i}:{j}:".encode() + b"v" * value,
                                                 1700000000000, ()) for j in range(records)]))
            log.flush()
    finally:
        mgr.close()


def _fetch_request(topic: str, offset: int, max_bytes: int) -> Any:
    return wire.build_request(
        1, 12, replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=1, max_bytes=max_bytes, isolation_level=0, session_id=0,
        session_epoch=-1, forgotten_topics_data=[], rack_id="",
        topics=[{"topic": topic, "partitions": [{"partition": 0, "current_leader_epoch": -1, "fetch_offset": offset,
                                                 "last_fetched_epoch": -1, "log_start_offset": -1,
                                                 "partition_max_bytes": max_bytes}]}])


def _fetch(conn: wire.Conn, topic: str, offset: int, max_bytes: int = 1 << 20) -> tuple[int, bytes]:
    answer = conn.request(_fetch_request(topic, offset, max_bytes), 7)
    part = answer.responses[0].partitions[0]
    return int(part.error_code), bytes(part.records or b"")


def _checked(records: bytes) -> list[int]:
    """Base offsets of the batches in ``records``; every batch must be whole and pass its CRC."""
    out = []
    for batch in iter_batches(records, strict=True):
        batch.ensure_valid()
        out.append(batch.base_offset)
    return out


def _segment_files(log_dir: str, topic: str) -> list[str]:
    folder = os.path.join(log_dir, layout.partition_dir_name(topic, 0))
    return sorted(os.path.join(folder, f) for f in os.listdir(folder) if f.endswith(".log"))


def test_new_bytes_written_after_a_truncation_by_another_process_are_checked_again(tmp_path):
    broker = BrokerProcess(tmp_path, log_dirs=1)
    log_dir = broker.log_dirs[0]
    _write(log_dir, {TOPIC: {}}, batches=40, records=3, value=600)
    broker.start()
    conn = wire.Conn(broker.bootstrap)
    try:
        # every batch fetched once: the whole segment is verified in the broker
        offset, seen = 0, []
        while offset < 120:
            code, records = _fetch(conn, TOPIC, offset, 16 * 1024)
            assert code == 0
            seen += _checked(records)
            offset = seen[-1] + 3
        assert seen == list(range(0, 120, 3))
        [path] = _segment_files(log_dir, TOPIC)
        size, inode = os.path.getsize(path), os.stat(path).st_ino

        subprocess.run([sys.executable, "-c", TRUNCATE_AND_REFILL, log_dir, TOPIC, "30", str(size + 4096)],
                       cwd=ROOT, check=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
        # a new file (truncation by rewrite), longer; an inode number may come back once the old file is purged,
        # which is why a mark also holds the generation
        assert os.stat(path).st_ino != inode and os.path.getsize(path) > size
        data = bytearray(Path(path).read_bytes())
        # new bytes, below the old end, past the first new batch (a read from 30 checks that one, then walks on)
        damaged = next(b for b in iter_batches(data) if b.base_offset == 39)
        assert damaged.file_position + damaged.size_in_bytes < size
        with open(path, "r+b") as f:
            f.seek(damaged.file_position + damaged.size_in_bytes - 10)
            f.write(bytes([data[damaged.file_position + damaged.size_in_bytes - 10] ^ 0x20]))

        # a read reaching the damaged batch fails whole: nothing of it goes out (10 KiB: the walk ends inside
        # the old verified range, where a stale mark would have been trusted)
        for start in (30, 31, 36, 39):
            assert _fetch(conn, TOPIC, start, 10 * 1024) == (CORRUPT_MESSAGE, b""), start
        # and the broker says so, naming the partition, the fetch offset and the damaged file
        logged = [line for line in broker.log_text().splitlines() if f"fetch of {TOPIC}-0 at offset " in line]
        assert len(logged) == 4 and all("answered CORRUPT_MESSAGE" in line and path in line for line in logged), logged
        code, records = _fetch(conn, TOPIC, 30, 2500)        # the new batch before it, alone: whole and valid
        assert code == 0 and _checked(records) == [30]
        code, records = _fetch(conn, TOPIC, 0, 9 * 1024)     # below the cut: the old bytes, still whole
        assert code == 0 and _checked(records)[0] == 0
    finally:
        conn.close()
        broker.close()


@pytest.mark.parametrize("change", ["retention", "compaction"])
def test_a_response_blocked_mid_send_keeps_the_checked_bytes_while_its_segment_goes(tmp_path, change):
    """A client that reads nothing holds the broker in the middle of sending an 8 MB segment; meanwhile
    retention (delete-records, retention, purge with no delay) deletes that segment or the cleaner swaps it for
    a compacted one. The response that then arrives is exactly the segment as it was when checked."""
    topic_cfg: dict[str, Any] = {"segment.bytes": 8 * 1024 * 1024, "file.delete.delay.ms": 0}
    if change == "compaction":
        topic_cfg.update({"cleanup.policy": "compact", "min.cleanable.dirty.ratio": 0.01})
    broker = BrokerProcess(tmp_path, log_dirs=1, topics={TOPIC: topic_cfg})
    log_dir = broker.log_dirs[0]
    # ~10 MB: two segments; the last 50 batches write the keys of the first 50 again (the cleaner drops those)
    _write(log_dir, {TOPIC: topic_cfg}, batches=100, records=100, value=1000, keys=50)
    first = _segment_files(log_dir, TOPIC)[0]
    before = Path(first).read_bytes()
    inode = os.stat(first).st_ino
    broker.start()
    host, port = broker.bootstrap.rsplit(":", 1)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((host, int(port)))
    try:
        sock.sendall(wire.request_frame(_fetch_request(TOPIC, 0, 64 * 1024 * 1024), 9))
        head = b""
        while len(head) < 4:
            got = sock.recv(4 - len(head))
            assert got, "the broker closed the connection"
            head += got
        size = int.from_bytes(head, "big")
        if size <= len(before):              # not the whole first segment: say what the broker answered
            sock.settimeout(60)
            small = b""
            while len(small) < size:
                got = sock.recv(size - len(small))
                assert got, "the broker closed the connection"
                small += got
            _, short = wire.decode_response(1, 12, small)
            part = short.responses[0].partitions[0]
            folder = os.path.dirname(first)
            files = {f: os.path.getsize(os.path.join(folder, f)) for f in sorted(os.listdir(folder))}
            pytest.fail(f"a {size}-byte answer, not the {len(before)}-byte segment: top error {short.error_code}, "
                        f"partition error {part.error_code}, high watermark {part.high_watermark}, log start "
                        f"{part.log_start_offset}, {len(part.records or b'')} bytes of records; {folder}: {files}; "
                        f"the broker's log:\n{broker.log_tail()}")

        def engine(*args: str) -> None:
            subprocess.run([sys.executable, "-m", "storage_engine", "--config", str(broker.config_path), *args],
                           cwd=ROOT, check=True, timeout=300, capture_output=True,
                           env={**os.environ, "PYTHONPATH": str(ROOT)})

        if change == "retention":
            engine("delete-records", "--topic", TOPIC, "--partition", "0", "--offset", "9000")
            engine("retention")
            engine("purge-deleted")
            assert not os.path.exists(first)
        else:
            engine("compact")
            assert not os.path.exists(first) or os.stat(first).st_ino != inode
        sock.settimeout(60)
        body = bytearray()
        while len(body) < size:
            got = sock.recv(1 << 20)
            assert got, f"the broker closed the connection after {len(body)} of {size} bytes"
            body += got
    finally:
        sock.close()
        broker.close()
    _, answer = wire.decode_response(1, 12, bytes(body))
    records = bytes(answer.responses[0].partitions[0].records)
    assert records == before[:len(records)] and len(records) == len(before)
    assert len(_checked(records)) == len(list(iter_batches(before)))


def test_a_64_mib_fetch_answers_every_byte_from_a_broker_of_small_memory(tmp_path):
    """Bounded streaming: a 64 MiB fetch of a 60 MB segment (read and checked in 1 MiB pieces, sent from the
    file) raises the broker's peak RSS by far less than the response's size. The client reads it whole."""
    topic_cfg = {"segment.bytes": 128 * 1024 * 1024}
    broker = BrokerProcess(tmp_path, log_dirs=1, topics={TOPIC: topic_cfg})
    log_dir = broker.log_dirs[0]
    _write(log_dir, {TOPIC: topic_cfg}, batches=600, records=100, value=1000)
    [path] = _segment_files(log_dir, TOPIC)
    broker.start()
    assert broker.proc is not None
    conn = wire.Conn(broker.bootstrap)
    try:
        assert _fetch(conn, TOPIC, 0, 1024)[0] == 0
        before_kib = _status_kib(broker.proc.pid, "VmRSS")
        for _ in range(2):          # unverified (checked in pieces), then verified (headers only)
            code, records = _fetch(conn, TOPIC, 0, 64 * 1024 * 1024)
            assert code == 0 and len(records) == os.path.getsize(path)
            assert len(_checked(records)) == 600
        peak_kib = _status_kib(broker.proc.pid, "VmHWM")
    finally:
        conn.close()
        broker.close()
    # a response held in memory would add at least its 60 MB (the former read path: several copies of it)
    assert peak_kib - before_kib < 24 * 1024, f"broker RSS {before_kib} KiB, then a peak of {peak_kib} KiB"


def _status_kib(pid: int, key: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(key + ":"))


def test_a_tls_listener_sends_the_same_bytes_read_in_pieces(tmp_path):
    """TLS cannot sendfile: the slice is read in 1 MiB pieces and written through the TLS transport; the client
    gets exactly the segment's bytes, on the TLS port as on the plaintext one."""
    import ssl

    from tests.server.test_security import make_certificate

    keystore, ca = make_certificate(tmp_path, "keystore-pass")
    topic_cfg = {"segment.bytes": 64 * 1024 * 1024}
    broker = BrokerProcess(tmp_path, log_dirs=1, topics={TOPIC: topic_cfg},
                           broker={"ssl.keystore.location": str(keystore), "ssl.key.password": "keystore-pass"},
                           listeners="SSL://127.0.0.1:0,PLAINTEXT://127.0.0.1:0")
    log_dir = broker.log_dirs[0]
    _write(log_dir, {TOPIC: topic_cfg}, batches=50, records=100, value=1000)     # ~5 MB
    [path] = _segment_files(log_dir, TOPIC)
    segment = Path(path).read_bytes()
    broker.start()
    try:
        host, port = broker.address("SSL").rsplit(":", 1)
        ctx = ssl.create_default_context(cafile=str(ca))
        with ctx.wrap_socket(socket.create_connection((host, int(port)), timeout=60),
                             server_hostname="127.0.0.1") as tls:
            for correlation in (1, 2):      # unverified, then verified bytes
                tls.sendall(wire.request_frame(_fetch_request(TOPIC, 0, 64 * 1024 * 1024), correlation))
                body = bytearray()
                while len(body) < 4 or len(body) < 4 + int.from_bytes(body[:4], "big"):
                    got = tls.recv(1 << 20)
                    assert got, "the broker closed the TLS connection"
                    body += got
                corr, answer = wire.decode_response(1, 12, bytes(body[4:]))
                part = answer.responses[0].partitions[0]
                assert corr == correlation and int(part.error_code) == 0
                assert bytes(part.records) == segment
        plain = wire.Conn(broker.address("PLAINTEXT"))
        try:
            assert _fetch(plain, TOPIC, 0, 64 * 1024 * 1024) == (0, segment)
        finally:
            plain.close()
    finally:
        broker.close()


def test_a_truncation_under_a_blocked_send_delivers_the_whole_response_with_the_old_bytes(tmp_path):
    """Another process truncates the segment a response is being sent from and appends new batches where the sent
    ones were: a truncation rewrites the segment (a new file, storage_engine.log.rewrite), so the file the response
    is sent from never changes and the client gets the whole response, every byte the old one, every batch whole
    and CRC-valid. (Cut in place, bytes ``sendfile`` had already queued by reference changed under the send.)"""
    topic_cfg: dict[str, Any] = {"segment.bytes": 8 * 1024 * 1024}
    broker = BrokerProcess(tmp_path, log_dirs=1, topics={TOPIC: topic_cfg})
    log_dir = broker.log_dirs[0]
    _write(log_dir, {TOPIC: topic_cfg}, batches=100, records=100, value=1000)
    first = _segment_files(log_dir, TOPIC)[0]
    before = Path(first).read_bytes()
    broker.start()
    host, port = broker.bootstrap.rsplit(":", 1)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((host, int(port)))
    try:
        sock.sendall(wire.request_frame(_fetch_request(TOPIC, 0, 64 * 1024 * 1024), 9))
        head = b""
        while len(head) < 4:
            got = sock.recv(4 - len(head))
            assert got, "the broker closed the connection"
            head += got
        size = int.from_bytes(head, "big")
        assert size > len(before)
        inode = os.stat(first).st_ino
        subprocess.run([sys.executable, "-c", TRUNCATE_AND_REFILL, log_dir, TOPIC, "100", str(len(before) // 2)],
                       cwd=ROOT, check=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
        now = Path(first).read_bytes()
        assert os.stat(first).st_ino != inode and len(now) >= len(before) // 2 and now != before[:len(now)]
        sock.settimeout(60)
        body = bytearray()
        while len(body) < size:
            got = sock.recv(1 << 20)
            assert got, f"the broker closed the connection after {len(body)} of {size} bytes"
            body += got
    finally:
        sock.close()
        broker.close()
    _, answer = wire.decode_response(1, 12, bytes(body))
    records = bytes(answer.responses[0].partitions[0].records)
    assert records == before
    assert len(_checked(records)) == len(list(iter_batches(before)))
    assert "a fetch response was cut short" not in broker.log_text()


def test_verified_bytes_in_the_page_cache_are_read_on_the_event_loop(tmp_path):
    """A consumer reads a partition twice. Every fetch is tried on the event loop first; the first pass must check
    the bytes, so each of its fetches goes to the read threads; the second pass, every byte verified and in the
    page cache, is read on the event loop (all but its first fetch, whose offset index position is checked first).
    The bytes are the same."""
    broker = BrokerProcess(tmp_path, log_dirs=1)
    log_dir = broker.log_dirs[0]
    _write(log_dir, {TOPIC: {}}, batches=40, records=3, value=600)
    broker.start()
    conn = wire.Conn(broker.bootstrap)
    passes = []
    try:
        for _ in range(2):
            offset, got = 0, []
            while offset < 120:
                code, records = _fetch(conn, TOPIC, offset, 16 * 1024)
                assert code == 0
                got.append(records)
                offset = _checked(records)[-1] + 3
            passes.append(got)
    finally:
        conn.close()
    assert broker.stop() == 0
    assert passes[0] == passes[1] and len(passes[0]) > 3
    counted = status(broker)
    fetches = len(passes[0])
    assert (counted["fetch_reads_pooled"], counted["fetch_reads_inline"]) == (fetches + 1, fetches - 1), counted
