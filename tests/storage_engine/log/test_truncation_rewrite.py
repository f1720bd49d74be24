"""Truncation by rewrite (storage_engine.log.rewrite): a truncation that cuts a segment's .log writes the kept
prefix to a new file and swaps it in, so the old file is never changed: a send in flight from it (sendfile from a
duplicated descriptor, as the broker's fetch does) delivers the old bytes, whole, while another process truncates
the partition and writes new batches where the sent ones were."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from storage_engine import layout
from storage_engine.config import StorageConfig
from storage_engine.config_file import config_from_mapping
from storage_engine.inspection.verify import verify_log_dirs
from storage_engine.log import intent
from storage_engine.log.manager import LogManager
from storage_engine.record.record_batch import build_batch
from storage_engine.segment.file_records import iter_batches
from storage_engine.segment.file_slice import FileSlice
from tests.paths import REPO

from .. import helpers
from ..helpers import TRUNCATE_AND_REFILL, present

TOPIC = "t"
TS = 1700000000000


def _store(tmp_path: Path, topic_cfg: dict | None = None) -> tuple[str, StorageConfig]:
    log_dir = str(tmp_path / "logs")
    return log_dir, config_from_mapping({"broker": {"log.dirs": [log_dir], "log.index.interval.bytes": 1024},
                                         "topics": {TOPIC: topic_cfg or {}}})


def _fill(log, batches: int, tag: bytes = b"old") -> None:
    for i in range(batches):
        log.append_batches(build_batch([(b"k%d" % i, tag + b"-%d-" % i + b"o" * 700, TS + i, ())] * 3))


def _send_some(sock: socket.socket, sl: FileSlice, sent: int = 0) -> int:
    """sendfile ``sl`` from its byte ``sent`` on into a non-blocking socket until its buffer is full; returns the
    bytes of the slice sent in all."""
    while sent < sl.length:
        try:
            n = os.sendfile(sock.fileno(), sl.fd, sl.position + sent, sl.length - sent)
        except BlockingIOError:
            break
        sent += n
    return sent


@pytest.mark.slow
def test_a_send_in_flight_from_the_old_file_gets_the_old_bytes_while_another_process_truncates_and_refills(tmp_path):
    """A slice of verified bytes is half sent (the socket's buffer holds pages queued by reference); another process
    truncates the partition below them and appends new batches until the segment is longer than before. The rest of
    the send, with the broker's check before each piece, delivers exactly the old bytes: the path names a new file
    with other bytes, the old inode never changed. (In place, the refill rewrote the queued pages.)"""
    log_dir, cfg = _store(tmp_path)
    with LogManager.open(cfg) as mgr:
        log = mgr.get_or_create_log(TOPIC, 0)
        _fill(log, 120)
        log.flush()
        assert log.read_slice(0, 64 << 20) is not None      # checked: the range is now verified
        data = log.read_slice(0, 64 << 20)
        assert data is not None and isinstance(data.slice, FileSlice), data
        sl = data.slice
        path = log.active_segment.path
        old = Path(path).read_bytes()
        inode = os.stat(path).st_ino
        assert sl.position == 0 and sl.length == len(old)
        a, b = socket.socketpair()
        try:
            a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
            b.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            a.setblocking(False)
            sent = _send_some(a, sl)
            assert 0 < sent < sl.length

            subprocess.run([sys.executable, "-c", TRUNCATE_AND_REFILL, log_dir, TOPIC, "30", str(len(old) + 4096)],
                           cwd=str(REPO), check=True, timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})
            now = Path(path).read_bytes()
            assert os.stat(path).st_ino != inode and len(now) > len(old)
            first_new = next(x for x in iter_batches(now) if x.base_offset == 30)
            assert first_new.file_position < sent        # new bytes where queued ones were
            assert now[first_new.file_position:first_new.file_position + 200] != old[first_new.file_position:
                                                                                     first_new.file_position + 200]

            received = bytearray()
            b.settimeout(60)
            while len(received) < sl.length:
                if sent < sl.length:
                    sl.check_whole()
                    sent = _send_some(a, sl, sent)
                received += b.recv(1 << 16)
        finally:
            a.close()
            b.close()
            sl.close()
    assert bytes(received) == old
    assert [x.base_offset for x in iter_batches(bytes(received), strict=True)] == list(range(0, 360, 3))


@pytest.mark.unit
def test_a_truncation_writes_the_kept_prefix_to_a_new_file_and_leaves_the_old_one_whole(tmp_path):
    log_dir, cfg = _store(tmp_path)
    with LogManager.open(cfg) as mgr:
        log = mgr.get_or_create_log(TOPIC, 0)
        _fill(log, 60)
        seg = log.active_segment
        path, folder = seg.path, log.dir
        old = Path(path).read_bytes()
        old_entries = seg.offset_index.packed_entries_below(1 << 40)
        assert len(old_entries) >= 16, "the index has several entries"
        fd = os.open(path, os.O_RDONLY)
        try:
            assert log.truncate_to(91)      # batch granular: the batch 90-92 goes
            assert os.pread(fd, len(old) + 1, 0) == old and os.fstat(fd).st_nlink == 1     # renamed .deleted
        finally:
            os.close(fd)
        cut = next(x.file_position for x in iter_batches(old) if x.base_offset == 90)
        assert Path(path).read_bytes() == old[:cut]
        assert Path(path + layout.DELETED_SUFFIX).read_bytes() == old
        active = log.active_segment
        assert active is not seg and active.path == path and log.log_end_offset == 90
        kept = active.offset_index.packed_entries_below(1 << 40)
        assert kept and old_entries.startswith(kept) and active.offset_index.last_offset < 90
        assert active.time_index.last_entry[1] < 90 and active.offset_index.max_entries > active.offset_index.entries
        assert not [n for n in os.listdir(folder) if n.endswith((layout.CLEANED_SUFFIX, layout.SWAP_SUFFIX))]
        assert not intent.exists(log_dir, layout.partition_dir_name(TOPIC, 0))
        _fill(log, 5, b"new")
        assert [r.offset for r in log.read_records(85)] == list(range(85, 105))
    with LogManager.open(cfg) as mgr:     # a full load finds the same log
        log = helpers.get_log(mgr, TOPIC)
        values = [present(r.value) for r in log.read_records(0)]
        assert len(values) == 105 and values[89].startswith(b"old-29-") and values[90].startswith(b"new-0-")
    report = verify_log_dirs(cfg)
    assert not report["damaged"], report["problems"]


@pytest.mark.unit
def test_a_full_truncation_at_a_segments_base_empties_it_by_a_new_file(tmp_path):
    log_dir, cfg = _store(tmp_path, {"segment.bytes": 16 * 1024})
    with LogManager.open(cfg) as mgr:
        log = mgr.get_or_create_log(TOPIC, 0)
        _fill(log, 60)
        base = log.segments[2].base_offset
        path = log.segments[2].path
        old, inode = Path(path).read_bytes(), os.stat(path).st_ino
        log.truncate_fully_and_start_at(base)
        assert [s.base_offset for s in log.segments] == [base] and log.log_start_offset == base == log.log_end_offset
        assert os.stat(path).st_ino != inode and os.path.getsize(path) == 0
        assert Path(path + layout.DELETED_SUFFIX).read_bytes() == old
        _fill(log, 2, b"new")
        assert [present(r.value)[:6] for r in log.read_records(base)] == [b"new-0-"] * 3 + [b"new-1-"] * 3


@pytest.mark.unit
def test_a_truncation_at_a_segment_boundary_rewrites_only_the_segment_it_cuts(tmp_path):
    """Truncating to the base of the second segment deletes the later ones and empties the second (Kafka keeps an
    empty segment at the offset) by a new file; the first keeps every byte, so its file stays as it is."""
    log_dir, cfg = _store(tmp_path, {"segment.bytes": 16 * 1024})
    with LogManager.open(cfg) as mgr:
        log = mgr.get_or_create_log(TOPIC, 0)
        _fill(log, 60)
        first, second = log.segments[0], log.segments[1]
        paths = first.path, second.path
        inodes = os.stat(paths[0]).st_ino, os.stat(paths[1]).st_ino
        assert len(log.segments) > 2 and second.size > 0
        assert log.truncate_to(second.base_offset)
        assert [s.base_offset for s in log.segments] == [0, second.base_offset]
        assert log.segments[0] is first and os.stat(paths[0]).st_ino == inodes[0]
        assert os.stat(paths[1]).st_ino != inodes[1] and os.path.getsize(paths[1]) == 0 == log.active_segment.size
        assert log.log_end_offset == second.base_offset


@pytest.mark.unit
def test_a_preallocated_active_segment_is_rewritten_and_takes_appends(tmp_path):
    log_dir, cfg = _store(tmp_path, {"preallocate": True, "segment.bytes": 1024 * 1024})
    with LogManager.open(cfg) as mgr:
        log = mgr.get_or_create_log(TOPIC, 0)
        _fill(log, 30)
        assert os.path.getsize(log.active_segment.path) == 1024 * 1024
        assert log.truncate_to(45)
        assert log.log_end_offset == 45 and log.active_segment.size == os.path.getsize(log.active_segment.path)
        _fill(log, 3, b"new")
        assert [r.offset for r in log.read_records(40)] == list(range(40, 54))
    with LogManager.open(cfg) as mgr:
        log = helpers.get_log(mgr, TOPIC)
        assert log.log_end_offset == 54
        assert [present(r.value)[:6] for r in log.read_records(44)][:2] == [b"old-14", b"new-0-"]
