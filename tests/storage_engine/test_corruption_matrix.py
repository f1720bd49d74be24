"""The corruption matrix: one test per kind of damage, each checking what ``consume``, ``verify`` and the next
``produce`` do (RELIABILITY.md lists the cases and the behaviour each test asserts).

The rules (ARCHITECTURE.md section 6): damage is never returned as data (``consume`` exits 1 naming the file
and the byte position, records before it are printed); ``verify`` reports it (exit 1); a load never lets a
damaged or incomplete file replace good data, and reports what it repaired; an append acknowledged after a repair
is readable. Every test damages a real log written by the engine, through the CLI in this process.
"""
from __future__ import annotations

import io
import json
import os
import shutil
import struct
import sys
import types

import pytest

from storage_engine import layout
from storage_engine.config_file import load_config
from storage_engine.log.manager import LogManager
from storage_engine.record.record_batch import build_batch
from storage_engine.record.records import SimpleRecord
from storage_engine.segment.checkpoint import OffsetCheckpointFile
from storage_engine.cli import main
from tests.storage_engine.kernels import PARAMS as KERNEL_PARAMS
from tests.storage_engine.kernels import use as use_kernels

pytestmark = pytest.mark.unit

TOPIC = "events"
RECORDS = 300


@pytest.fixture
def store(tmp_path):
    """300 records (3 per batch) of a delete-policy topic in 4 KiB segments, closed cleanly (the clean-shutdown
    marker is there)."""
    cfg = tmp_path / "storage.yaml"
    cfg.write_text(json.dumps({"broker": {"log.dirs": [str(tmp_path / "logs")], "log.segment.bytes": 4096,
                                          "log.index.interval.bytes": 256}}), encoding="utf-8")
    config = load_config(str(cfg))
    with LogManager.open(config) as mgr:
        log = mgr.get_or_create_log(TOPIC, 0)
        for i in range(0, RECORDS, 3):
            log.append_records([SimpleRecord(f"k{j}".encode(), f"value-{j:05d}".encode()) for j in range(i, i + 3)])
    d = os.path.join(str(tmp_path / "logs"), f"{TOPIC}-0")
    bases = sorted(layout.offset_from_filename(n) for n in os.listdir(d) if n.endswith(".log"))
    assert len(bases) >= 4
    return types.SimpleNamespace(cfg=str(cfg), config=config, dir=d, bases=bases, log_dir=str(tmp_path / "logs"))


def run(capsys, monkeypatch, *argv, stdin: bytes = b""):
    monkeypatch.setattr(sys, "stdin", types.SimpleNamespace(buffer=io.BytesIO(stdin)))
    rc = main.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return rc, out, err


def consume(capsys, monkeypatch, store, *extra):
    rc, out, err = run(capsys, monkeypatch, "--config", store.cfg, "consume", "--topic", TOPIC, "--partition", 0,
                       *extra)
    return rc, [json.loads(line) for line in out.splitlines()], err


def verify(capsys, monkeypatch, store):
    rc, out, _ = run(capsys, monkeypatch, "--config", store.cfg, "verify")
    return rc, json.loads(out)


def produce(capsys, monkeypatch, store, value: str):
    line = json.dumps({"key": "new", "value": value}).encode() + b"\n"
    rc, out, err = run(capsys, monkeypatch, "--config", store.cfg, "produce", "--topic", TOPIC, "--partition", 0,
                       stdin=line)
    return rc, (json.loads(out) if rc == 0 else None), err


def seg(store, base: int, suffix: str = layout.LOG_SUFFIX, extra: str = "") -> str:
    return layout.segment_file(store.dir, base, suffix, extra)


def flip(path: str, position: int, mask: int = 0x01) -> None:
    with open(path, "r+b") as f:
        f.seek(position)
        b = f.read(1)
        f.seek(position)
        f.write(bytes([b[0] ^ mask]))


def batch_positions(path: str) -> list[int]:
    data = open(path, "rb").read()
    out, pos = [], 0
    while pos + 12 <= len(data):
        out.append(pos)
        pos += 12 + struct.unpack_from(">i", data, pos + 8)[0]
    return out


def load_report(store) -> str:
    """What a writable open of the dir loads and repairs, as JSON text (``describe`` opens read-only and repairs
    nothing: the next writable open does, as here)."""
    with LogManager.open(load_config(store.cfg)) as mgr:
        return json.dumps(mgr.describe())


def remove_marker(store) -> None:
    os.remove(os.path.join(store.log_dir, layout.CLEAN_SHUTDOWN_FILE))


def values(records) -> list[str]:
    return [r["value"] for r in records]


ALL = [f"value-{j:05d}" for j in range(RECORDS)]


def assert_intact(capsys, monkeypatch, store) -> None:
    rc, records, err = consume(capsys, monkeypatch, store)
    assert rc == 0, err
    assert values(records) == ALL and [r["offset"] for r in records] == list(range(RECORDS))


def assert_produce_is_readable(capsys, monkeypatch, store) -> int:
    rc, ack, err = produce(capsys, monkeypatch, store, "acknowledged")
    assert rc == 0, err
    rc, records, err = consume(capsys, monkeypatch, store, "--from-offset", ack["base_offset"])
    assert rc == 0, err
    assert [(r["offset"], r["value"]) for r in records] == [(ack["base_offset"], "acknowledged")]
    return ack["base_offset"]


# -- damaged records ---------------------------------------------------------------------------------------------

def test_a_flipped_bit_in_a_sealed_segments_record_fails_consume_and_verify(capsys, monkeypatch, store):
    path = seg(store, store.bases[1])
    flip(path, batch_positions(path)[2] + 70)
    rc, records, err = consume(capsys, monkeypatch, store)
    assert rc == 1 and "corrupt" in err and path in err and "byte position" in err
    assert values(records) == ALL[:len(records)] and len(records) < RECORDS  # what precedes the damage, only
    rc, report = verify(capsys, monkeypatch, store)
    assert rc == 1 and any(p["file"] == path for p in report["problems"])


def test_a_flipped_bit_in_a_batchs_base_offset_fails_consume_instead_of_misplacing_records(capsys, monkeypatch,
                                                                                           store):
    path = seg(store, store.bases[1])
    flip(path, batch_positions(path)[2] + 7, 0x04)  # the base offset lies outside the CRC
    rc, records, err = consume(capsys, monkeypatch, store)
    assert rc == 1 and "out of order" in err and path in err
    assert [r["offset"] for r in records] == list(range(len(records)))
    rc, report = verify(capsys, monkeypatch, store)
    assert rc == 1 and any("out of order" in p["message"] for p in report["problems"])


def test_a_base_offset_flipped_upwards_in_the_last_batch_of_a_segment_fails_consume(capsys, monkeypatch, store):
    path = seg(store, store.bases[1])
    flip(path, batch_positions(path)[-1] + 5, 0x10)  # + 2**20: beyond the next segment's base
    rc, _, err = consume(capsys, monkeypatch, store, "--from-offset", store.bases[1])
    assert rc == 1 and "beyond the segment's end" in err


def test_a_flipped_bit_in_a_batchs_length_fails_consume(capsys, monkeypatch, store):
    path = seg(store, store.bases[2])
    flip(path, batch_positions(path)[1] + 11, 0x02)
    rc, _, err = consume(capsys, monkeypatch, store)
    assert rc == 1 and path in err
    assert verify(capsys, monkeypatch, store)[0] == 1


def test_a_sealed_segment_cut_inside_a_batch_fails_consume_instead_of_skipping_the_rest(capsys, monkeypatch,
                                                                                         store):
    path = seg(store, store.bases[1])
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) - 10)
    rc, _, err = consume(capsys, monkeypatch, store)
    assert rc == 1 and "truncated" in err and path in err
    assert verify(capsys, monkeypatch, store)[0] == 1


def test_damage_in_the_active_segment_below_its_last_index_entry_fails_consume_but_not_appends(capsys, monkeypatch,
                                                                                              store):
    path = seg(store, store.bases[-1])
    flip(path, batch_positions(path)[0] + 70)
    offset = assert_produce_is_readable(capsys, monkeypatch, store)  # an append after it is readable
    rc, records, err = consume(capsys, monkeypatch, store, "--from-offset", store.bases[-1])
    assert rc == 1 and path in err and records == []
    assert offset == RECORDS


def test_a_flipped_bit_in_the_unflushed_active_segment_is_cut_at_recovery(capsys, monkeypatch, store):
    """Without the clean-shutdown marker, recovery truncates at the first bad batch (Kafka's rule for unflushed
    data) and says so; what it keeps reads back, and new appends follow it."""
    path = seg(store, store.bases[-1])
    positions = batch_positions(path)
    flip(path, positions[1] + 70)
    remove_marker(store)
    OffsetCheckpointFile(os.path.join(store.log_dir, layout.RECOVERY_POINT_CHECKPOINT)).write(
        {(TOPIC, 0): store.bases[-1]})
    rc, records, err = consume(capsys, monkeypatch, store)
    assert rc == 0, err
    assert values(records) == ALL[:store.bases[-1] + 3]
    assert assert_produce_is_readable(capsys, monkeypatch, store) == store.bases[-1] + 3


# -- tails the clean-shutdown marker vouches for -----------------------------------------------------------------

def test_a_torn_active_tail_is_cut_even_with_the_clean_shutdown_marker(capsys, monkeypatch, store):
    path = seg(store, store.bases[-1])
    batch = build_batch([SimpleRecord(b"torn", b"x" * 200)], base_offset=RECORDS)
    with open(path, "ab") as f:
        f.write(batch[: len(batch) // 2])
    offset = assert_produce_is_readable(capsys, monkeypatch, store)
    assert offset == RECORDS
    assert_intact_prefix(capsys, monkeypatch, store)
    rc, report = verify(capsys, monkeypatch, store)
    assert rc == 0, report["problems"]


def test_a_garbage_active_tail_is_cut_even_with_the_clean_shutdown_marker(capsys, monkeypatch, store):
    path = seg(store, store.bases[-1])
    with open(path, "ab") as f:
        f.write(os.urandom(300))
    offset = assert_produce_is_readable(capsys, monkeypatch, store)
    assert offset == RECORDS
    assert_intact_prefix(capsys, monkeypatch, store)


def assert_intact_prefix(capsys, monkeypatch, store) -> None:
    rc, records, err = consume(capsys, monkeypatch, store)
    assert rc == 0, err
    assert values(records)[:RECORDS] == ALL


def test_a_torn_tail_without_the_marker_is_cut_by_recovery(capsys, monkeypatch, store):
    path = seg(store, store.bases[-1])
    with open(path, "ab") as f:
        f.write(build_batch([SimpleRecord(b"t", b"y" * 100)], base_offset=RECORDS)[:40])
    remove_marker(store)
    assert assert_produce_is_readable(capsys, monkeypatch, store) == RECORDS
    assert_intact_prefix(capsys, monkeypatch, store)


def test_an_empty_active_log_with_a_stale_index_takes_appends(capsys, monkeypatch, store):
    """A zero-length active .log whose index still names batches: the load rebuilds the index (and says so), the
    produce acknowledges (exit 0) and the record reads back (it used to be written, then fail on the index with
    exit 1)."""
    base = store.bases[-1]
    with open(seg(store, base), "r+b") as f:
        f.truncate(0)
    assert "recovered despite the clean-shutdown marker" in load_report(store)
    assert assert_produce_is_readable(capsys, monkeypatch, store) == base
    rc, report = verify(capsys, monkeypatch, store)
    assert rc == 0, report["problems"]


# -- leftovers of the swap ---------------------------------------------------------------------------------------

def test_an_orphan_swap_full_of_garbage_is_discarded_and_reported(capsys, monkeypatch, store):
    base = store.bases[1]
    with open(seg(store, base, extra=layout.SWAP_SUFFIX), "wb") as f:
        f.write(os.urandom(3000))
    rc, report = verify(capsys, monkeypatch, store)
    assert rc == 1 and any("does not validate" in p["message"] for p in report["problems"])
    remove_marker(store)
    assert_intact(capsys, monkeypatch, store)                    # read-only: the .swap is read around, kept
    assert os.path.exists(seg(store, base, extra=layout.SWAP_SUFFIX))
    load_report(store)                                           # the next writable open discards it
    assert not os.path.exists(seg(store, base, extra=layout.SWAP_SUFFIX))
    assert_intact(capsys, monkeypatch, store)
    rc, report = verify(capsys, monkeypatch, store)
    assert rc == 0, report["problems"]


def test_an_orphan_swap_holding_half_a_segment_is_discarded_and_reported(capsys, monkeypatch, store):
    base = store.bases[1]
    path = seg(store, base)
    positions = batch_positions(path)
    with open(path, "rb") as f:
        half = f.read(positions[len(positions) // 2])
    with open(seg(store, base, extra=layout.SWAP_SUFFIX), "wb") as f:
        f.write(half)
    rc, report = verify(capsys, monkeypatch, store)
    assert rc == 1 and any("would replace segment" in p["message"] for p in report["problems"])
    assert_intact(capsys, monkeypatch, store)
    load_report(store)                                           # the next writable open discards it
    assert not os.path.exists(seg(store, base, extra=layout.SWAP_SUFFIX))
    assert_intact(capsys, monkeypatch, store)


def test_an_orphan_swap_whose_originals_are_deleted_and_which_does_not_validate_gets_them_back(capsys, monkeypatch,
                                                                                               store):
    base = store.bases[1]
    with open(seg(store, base, extra=layout.SWAP_SUFFIX), "wb") as f:
        f.write(b"\x00" * 100 + os.urandom(500))
    for suffix in layout.SEGMENT_SUFFIXES[:3]:
        if os.path.exists(seg(store, base, suffix)):
            os.replace(seg(store, base, suffix), seg(store, base, suffix, layout.DELETED_SUFFIX))
    assert_intact(capsys, monkeypatch, store)                    # read-only: read from the .deleted originals
    load_report(store)                                           # the next writable open restores them
    assert os.path.exists(seg(store, base))
    assert_intact(capsys, monkeypatch, store)


def test_a_valid_orphan_swap_is_completed(capsys, monkeypatch, store):
    """What a Kafka broker killed after its .swap files were all written leaves: the load completes it."""
    base = store.bases[1]
    shutil.copyfile(seg(store, base), seg(store, base, extra=layout.SWAP_SUFFIX))
    os.replace(seg(store, base), seg(store, base, extra=layout.DELETED_SUFFIX))
    rc, report = verify(capsys, monkeypatch, store)
    assert rc == 0 and any("completed swap" in p["message"] for p in report["pending"])
    assert_intact(capsys, monkeypatch, store)


def test_a_cleaned_leftover_is_removed_and_changes_nothing(capsys, monkeypatch, store):
    shutil.copyfile(seg(store, store.bases[0]), seg(store, store.bases[0], extra=layout.CLEANED_SUFFIX))
    rc, report = verify(capsys, monkeypatch, store)
    assert rc == 0 and any("cleaner" in p["message"] for p in report["pending"])
    assert_intact(capsys, monkeypatch, store)


# -- checkpoints and missing files -------------------------------------------------------------------------------

def test_a_log_start_offset_checkpoint_far_past_the_end_is_reported_and_ignored(capsys, monkeypatch, store):
    cp = OffsetCheckpointFile(os.path.join(store.log_dir, layout.LOG_START_OFFSET_CHECKPOINT))
    cp.write({(TOPIC, 0): 1_000_000})
    rc, report = verify(capsys, monkeypatch, store)
    assert rc == 1 and any("past the log end" in p["message"] for p in report["problems"])
    out = load_report(store)
    assert "is past the log end 300" in out and "ignored" in out  # the load's report
    assert_intact(capsys, monkeypatch, store)
    rc, out, _ = run(capsys, monkeypatch, "--config", store.cfg, "retention")
    assert rc == 0 and json.loads(out)["segments_deleted"] == 0
    assert_intact(capsys, monkeypatch, store)


def test_a_recovery_point_checkpoint_past_the_end_is_reported(capsys, monkeypatch, store):
    cp = OffsetCheckpointFile(os.path.join(store.log_dir, layout.RECOVERY_POINT_CHECKPOINT))
    cp.write({(TOPIC, 0): 1_000_000})
    rc, report = verify(capsys, monkeypatch, store)
    assert rc == 1 and any("recovery-point checkpoint" in p["message"] for p in report["problems"])
    remove_marker(store)
    assert_intact(capsys, monkeypatch, store)


def test_a_deleted_sealed_segment_is_reported_as_an_offset_gap(capsys, monkeypatch, store):
    for suffix in (layout.LOG_SUFFIX, layout.INDEX_SUFFIX, layout.TIME_INDEX_SUFFIX):
        os.remove(seg(store, store.bases[2], suffix))
    rc, report = verify(capsys, monkeypatch, store)
    gap = f"offsets [{store.bases[2]}, {store.bases[3]}) are missing"
    assert rc == 1 and any(gap in p["message"] for p in report["problems"]), report["problems"]


def test_a_deleted_first_segment_is_reported_as_an_offset_gap(capsys, monkeypatch, store):
    for suffix in (layout.LOG_SUFFIX, layout.INDEX_SUFFIX, layout.TIME_INDEX_SUFFIX):
        os.remove(seg(store, store.bases[0], suffix))
    rc, report = verify(capsys, monkeypatch, store)
    assert rc == 1 and any(f"offsets [0, {store.bases[1]}) are missing" in p["message"]
                           for p in report["problems"]), report["problems"]


def test_a_corrupt_recovery_point_checkpoint_means_recovery_from_zero(capsys, monkeypatch, store):
    with open(os.path.join(store.log_dir, layout.RECOVERY_POINT_CHECKPOINT), "wb") as f:
        f.write(b"0\n1\nevents 0 zz\n")
    rc, report = verify(capsys, monkeypatch, store)
    assert rc == 1 and any(layout.RECOVERY_POINT_CHECKPOINT in p["file"] for p in report["problems"])
    remove_marker(store)
    assert_intact(capsys, monkeypatch, store)


def test_garbage_in_an_index_is_rebuilt_and_never_read_as_damaged_records(capsys, monkeypatch, store):
    path = seg(store, store.bases[1], layout.INDEX_SUFFIX)
    size = os.path.getsize(path)
    with open(path, "wb") as f:
        f.write(os.urandom(size))
    rc, report = verify(capsys, monkeypatch, store)
    assert rc == 1 and any(p["file"] == path for p in report["problems"])
    assert_intact(capsys, monkeypatch, store)


def test_an_index_entry_pointing_inside_a_batch_does_not_fail_reads(capsys, monkeypatch, store):
    """An entry whose position was damaged but still rises passes the sanity check; a read that starts there
    scans from the segment's start instead of reporting the records as damaged."""
    path = seg(store, store.bases[1], layout.INDEX_SUFFIX)
    assert os.path.getsize(path) >= 16
    flip(path, 8 + 7, 0x01)  # the second entry's position, now inside a batch
    assert_intact(capsys, monkeypatch, store)
    rc, records, err = consume(capsys, monkeypatch, store, "--from-offset", store.bases[1] + 20)
    assert rc == 0, err
    assert values(records) == ALL[store.bases[1] + 20:]


def test_missing_index_files_are_rebuilt(capsys, monkeypatch, store):
    os.remove(seg(store, store.bases[1], layout.INDEX_SUFFIX))
    os.remove(seg(store, store.bases[2], layout.TIME_INDEX_SUFFIX))
    rc, report = verify(capsys, monkeypatch, store)
    assert rc == 0 and any("missing offset index" in p["message"] for p in report["pending"])
    assert_intact(capsys, monkeypatch, store)


def test_an_unknown_file_in_a_partition_folder_is_reported_and_ignored(capsys, monkeypatch, store):
    with open(os.path.join(store.dir, "notes.txt"), "w") as f:
        f.write("hello")
    rc, report = verify(capsys, monkeypatch, store)
    assert rc == 0 and any("not a file of Kafka's partition layout" in p["message"] for p in report["pending"])
    assert_intact(capsys, monkeypatch, store)


# -- damage under compaction (ARCHITECTURE.md section 6) ---------------------------------------------------------
# Every maintenance read is a checked read: the key-map phase (in process and the Spark source) and the clean phase
# verify each batch before using it. Damage fails the partition's cleaning naming the file, the byte position and
# the offsets; no damaged byte reaches a cleaned segment or a key map, the damaged segment stays on disk as it is
# (never renamed .deleted), the cleaner checkpoint does not move, and the partition is marked uncleanable with the
# reason until an operator clears it. Each case runs with the compiled kernels and with their Python twins.

KV = "kv"
KEYS = 30


@pytest.fixture(params=KERNEL_PARAMS)
def kv(request, tmp_path, monkeypatch):
    """A compacted topic: 300 records over 30 keys (3 per batch, unique values) in 4 KiB segments, then rolled:
    every record lies in a sealed segment and the whole log is dirty."""
    use_kernels(monkeypatch, request.param)
    cfg = tmp_path / "storage.yaml"
    cfg.write_text(json.dumps({"broker": {"log.dirs": [str(tmp_path / "logs")], "log.segment.bytes": 4096,
                                          "log.index.interval.bytes": 256},
                               "topics": {KV: {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": 0.01}}}),
                   encoding="utf-8")
    config = load_config(str(cfg))
    append_kv(config, 0, RECORDS)
    d = os.path.join(str(tmp_path / "logs"), f"{KV}-0")
    return types.SimpleNamespace(cfg=str(cfg), config=config, dir=d, log_dir=str(tmp_path / "logs"))


def append_kv(config, start: int, end: int, keys: int = KEYS) -> None:
    """Records ``value-<j>`` with key ``k<j % keys>`` for j in [start, end), 3 per batch; then a roll."""
    with LogManager.open(config) as mgr:
        log = mgr.get_or_create_log(KV, 0)
        for i in range(start, end, 3):
            log.append_records([SimpleRecord(f"k{j % keys}".encode(), f"value-{j:05d}".encode())
                                for j in range(i, i + 3)])
        log.roll()


def kv_logs(kv) -> dict[int, str]:
    return {layout.offset_from_filename(n): os.path.join(kv.dir, n) for n in sorted(os.listdir(kv.dir))
            if n.endswith(layout.LOG_SUFFIX) and layout.is_offset_named(n)}


def kv_files(kv) -> dict[str, bytes]:
    """Every segment file of the partition (.log and indexes, any suffix) with its bytes."""
    return {n: open(os.path.join(kv.dir, n), "rb").read() for n in sorted(os.listdir(kv.dir))
            if layout.is_offset_named(n)}


def compact(capsys, monkeypatch, kv, *extra):
    rc, out, err = run(capsys, monkeypatch, "--config", kv.cfg, "compact", "--topic", KV, *extra)
    return rc, json.loads(out) if out.strip() else None, err


def cleaner_checkpoint(kv):
    return OffsetCheckpointFile(os.path.join(kv.log_dir, layout.CLEANER_OFFSET_CHECKPOINT)).read_or_empty()[0].get(
        (KV, 0))


def uncleanable(kv):
    from storage_engine.inspection.detail import partition_detail
    return partition_detail(kv.config, KV, 0)["uncleanable"]     # what the Storage view shows


def find_value(kv, value: bytes) -> tuple[str, int]:
    for path in kv_logs(kv).values():
        data = open(path, "rb").read()
        if value in data:
            return path, data.index(value)
    raise AssertionError(f"{value!r} is in no segment")


def batch_holding(path: str, position: int) -> tuple[int, bytes]:
    """(position, bytes) of the batch of ``path`` that holds byte ``position``."""
    data = open(path, "rb").read()
    starts = batch_positions(path) + [len(data)]
    i = max(k for k in range(len(starts) - 1) if starts[k] <= position)
    return starts[i], data[starts[i]:starts[i + 1]]


def assert_damage_kept_out(kv, path: str, damaged: bytes, before: dict[str, bytes], checkpoint, phase: str,
                           position: int, result: dict, err: str) -> None:
    """The round failed naming the file, the position and the phase; the damaged segment is on disk unchanged
    (not .deleted), no .cleaned or .swap file is left, no other segment holds the damaged batch, the cleaner
    checkpoint did not move and the partition is marked uncleanable with the reason."""
    (entry,) = result["results"]
    assert result["failed"] == [f"{KV}-0"] and entry["marked_uncleanable"] is True
    for text in (entry["error"], err or entry["error"]):
        assert path in text and f"byte position {position}" in text and f"{KV}-0" in text and phase in text, text
    assert "offsets [" in entry["error"]
    assert open(path, "rb").read().count(damaged) == 1
    names = os.listdir(kv.dir)
    assert not [n for n in names if n.endswith((layout.CLEANED_SUFFIX, layout.SWAP_SUFFIX))]
    for name in names:            # not renamed .deleted, not copied anywhere: in its own file only
        other = os.path.join(kv.dir, name)
        if other != path and os.path.isfile(other):
            assert damaged not in open(other, "rb").read(), other
    assert cleaner_checkpoint(kv) == checkpoint
    reason = uncleanable(kv)
    assert reason and path in reason and f"byte position {position}" in reason and phase in reason
    if phase == "key-map phase":       # failed before any group: not a byte of the partition changed
        assert kv_files(kv) == before


def test_damage_in_the_dirty_section_fails_the_key_map_phase_and_changes_nothing(capsys, monkeypatch, kv):
    logs = kv_logs(kv)
    path = logs[sorted(logs)[2]]
    position = batch_positions(path)[1]
    flip(path, position + 70)
    damaged = batch_holding(path, position)[1]
    before = kv_files(kv)
    rc, result, err = compact(capsys, monkeypatch, kv)
    assert rc == 1
    assert_damage_kept_out(kv, path, damaged, before, None, "key-map phase", position, result, err)
    # Skipped, and a failure of every run (said why), until an operator clears it; cleared, it fails the same way
    # on the same damage.
    rc, result, err = compact(capsys, monkeypatch, kv)
    assert rc == 1 and result["results"] == [] and any(
        s["reason"].startswith("uncleanable: ") and path in s["reason"] for s in result["skipped"])
    assert [(f["topic"], f["partition"]) for f in result["failures"]] == [(KV, 0)] and path in err
    rc, cleared, _ = compact(capsys, monkeypatch, kv, "--partition", 0, "--clear-uncleanable")
    assert rc == 0 and uncleanable(kv) is None
    rc, result, err = compact(capsys, monkeypatch, kv)
    assert rc == 1
    assert_damage_kept_out(kv, path, damaged, before, None, "key-map phase", position, result, err)


def test_damage_in_the_clean_section_fails_the_clean_phase_before_anything_of_it_is_copied(capsys, monkeypatch,
                                                                                             kv):
    rc, result, err = compact(capsys, monkeypatch, kv)         # the whole log becomes the clean section
    assert rc == 0, err
    checkpoint = cleaner_checkpoint(kv)
    assert checkpoint == RECORDS
    append_kv(kv.config, RECORDS, RECORDS + 90)                # a new dirty section; the key map reads only it
    logs = kv_logs(kv)
    path = logs[max(b for b in logs if b < checkpoint)]        # the last cleaned segment: the last group
    position = batch_positions(path)[0]
    flip(path, position + 70)
    damaged = batch_holding(path, position)[1]
    before = kv_files(kv)
    rc, result, err = compact(capsys, monkeypatch, kv)
    assert rc == 1
    assert_damage_kept_out(kv, path, damaged, before, checkpoint, "clean phase", position, result, err)


def test_the_map_phase_checks_offsets_outside_the_crc(capsys, monkeypatch, kv):
    """A magic-2 batch's base offset lies outside its CRC: the offset order catches a flipped bit there."""
    logs = kv_logs(kv)
    path = logs[sorted(logs)[1]]
    position = batch_positions(path)[2]
    flip(path, position + 5, 0x10)  # + 2**20: beyond the next segment's base
    damaged = batch_holding(path, position)[1]
    before = kv_files(kv)
    rc, result, err = compact(capsys, monkeypatch, kv)
    assert rc == 1 and "beyond the segment's end" in result["results"][0]["error"]
    assert_damage_kept_out(kv, path, damaged, before, None, "key-map phase", position, result, err)


def test_issue_reproducer_16_flipped_bytes_in_a_sealed_segment_are_not_compacted_away(capsys, monkeypatch, kv):
    """The reproducer: 16 bytes flipped inside a batch of a sealed segment of a compacted topic; the next compaction was
    green and the damaged segment became .deleted. The bytes flipped are inside the values of a batch whose records
    all have newer values (it is removed whole), so the records still decode: only the CRC tells."""
    spots = [find_value(kv, f"value-{j:05d}".encode()) for j in (3, 4, 5)]
    path = spots[0][0]
    assert {p for p, _ in spots} == {path} and path == kv_logs(kv)[0]
    for n, (_p, at) in enumerate(spots):
        for i in range(6 if n == 0 else 5):
            flip(path, at + i, 0x01)
    position, damaged = batch_holding(path, spots[0][1])
    assert position == batch_positions(path)[1] and batch_holding(path, spots[2][1])[0] == position
    before = kv_files(kv)
    rc, result, err = compact(capsys, monkeypatch, kv)
    assert rc == 1
    assert_damage_kept_out(kv, path, damaged, before, None, "key-map phase", position, result, err)
    assert all(not n.endswith(layout.DELETED_SUFFIX) for n in os.listdir(kv.dir))


@pytest.mark.parametrize("section", ["dirty", "clean"])
def test_issue_reproducer_evil_in_a_record_that_survives_compaction_is_not_copied(capsys, monkeypatch, kv, section):
    """The reproducer: "EVIL" written into a record that survives compaction; compact exited 0, the damaged batch was
    copied into the cleaned segment and the checkpoint moved past it. Written into the dirty section the key-map
    phase finds it; into the clean section (a batch an earlier round kept, which this round copies again), the
    clean phase."""
    checkpoint = None
    value = f"value-{RECORDS - 5:05d}".encode()                # the latest value of its key: it survives
    if section == "clean":
        assert compact(capsys, monkeypatch, kv)[0] == 0
        checkpoint = cleaner_checkpoint(kv)
        append_kv(kv.config, RECORDS, RECORDS + 90, keys=10)   # rewrites k0..k9 only: k25 keeps value-00295
    path, at = find_value(kv, value)
    with open(path, "r+b") as f:
        f.seek(at + 2)
        f.write(b"EVIL")
    position, damaged = batch_holding(path, at)
    before = kv_files(kv)
    rc, result, err = compact(capsys, monkeypatch, kv)
    assert rc == 1
    phase = "key-map phase" if section == "dirty" else "clean phase"
    assert_damage_kept_out(kv, path, damaged, before, checkpoint, phase, position, result, err)
    for other in kv_logs(kv).values():
        if other != path:
            assert b"EVIL" not in open(other, "rb").read()


class _InProcessSpark:
    """The key-map job's SparkContext, its tasks run in this process (the job's code as Spark's Python workers run
    it, without a JVM): ``parallelize(items).map(f).collect()``."""
    master, version, applicationId, defaultParallelism = "in-process", "-", "test", 2

    def __init__(self, items=None):
        self.items = list(items or [])

    def parallelize(self, items, _n=None):
        return _InProcessSpark(items)

    def map(self, f):
        return _InProcessSpark([f(x) for x in self.items])

    def collect(self):
        return self.items

    def stop(self):
        pass


def test_damage_under_the_spark_key_map_fails_the_job_and_no_map_is_written(capsys, monkeypatch, kv, tmp_path):
    """The Spark source hands no damaged batch to the key map: the job (its driver and tasks, in process here;
    tests/spark and tests/airflow submit it for real) exits 3 naming the partition, file, position and offsets, writes
    no map, and leaves the damage report the Airflow task marks the partition uncleanable with."""
    import pyspark
    from spark_jobs import build_key_map, key_map_tasks
    logs = kv_logs(kv)
    path = logs[sorted(logs)[1]]
    position = batch_positions(path)[2]
    flip(path, position + 70)
    damaged_first = struct.unpack_from(">q", open(path, "rb").read(), position)[0]
    before = kv_files(kv)
    written: list[int] = []
    split = key_map_tasks.split_group

    def spying_split(index, group, start, end, bits, stage):
        got = split(index, group, start, end, bits, stage)
        for root, _dirs, files in os.walk(stage):
            for name in files:
                rows = open(os.path.join(root, name), "rb").read()
                written.extend(struct.unpack_from("<q", rows, k + 16)[0] for k in range(0, len(rows), 24))
        return got

    monkeypatch.setattr(key_map_tasks, "split_group", spying_split)
    monkeypatch.setattr(pyspark, "SparkContext", lambda conf: _InProcessSpark())
    out = tmp_path / "keymaps" / "kv-0"
    rc = build_key_map.main(["--config", kv.cfg, "--topic", KV, "--partition", "0", "--start-offset", "0",
                             "--end-offset", str(RECORDS), "--output", str(out)])
    err = capsys.readouterr().err
    assert rc == build_key_map.EXIT_DAMAGED == 3
    (line,) = err.strip().splitlines()
    assert line.startswith("error: ") and f"{KV}-0" in line and path in line and f"byte position {position}" in line
    assert f"offsets [{damaged_first}, " in line
    assert not out.exists() and not (tmp_path / "keymaps" / "kv-0.tmp").exists()
    assert all(not (damaged_first <= o < damaged_first + 3) for o in written)   # no row of the damaged batch
    report = json.load(open(build_key_map.damage_report_path(str(out))))
    assert (report["topic"], report["partition"], report["path"], report["position"]) == (KV, 0, path, position)
    assert kv_files(kv) == before and cleaner_checkpoint(kv) is None
    # What the Airflow task does with the report (tests/airflow/test_compaction_dag.py runs it for real): the
    # partition is marked uncleanable with the reason, which the Storage view shows and an operator clears.
    from storage_engine.jobs import compaction
    compaction.mark_uncleanable(kv.config, KV, 0, report["error"])
    assert path in uncleanable(kv) and f"byte position {position}" in uncleanable(kv)
    rc, result, _ = compact(capsys, monkeypatch, kv)
    assert rc == 1 and result["results"] == [] and kv_files(kv) == before
    assert [(f["topic"], f["partition"]) for f in result["failures"]] == [(KV, 0)]
