"""The message browser (:mod:`storage_engine.inspection.browse`) against the engine's own reads: the same records in
the same order, transactions marked as Kafka's consumer treats them, seeks where the engine's indexes say, damage
stopping the page, and nothing written to the log dirs."""
from __future__ import annotations

import json
import os

import pytest

from storage_engine.clock import ManualClock
from storage_engine.config_file import config_from_mapping
from storage_engine.errors import InvalidRequestError, PartitionNotFoundError
from storage_engine.inspection.browse import browse, hex_dump, render_bytes
from storage_engine.log.manager import LogManager
from storage_engine.record.records import SimpleRecord
from storage_engine.segment.file_records import FileRecords
from tests.storage_engine.helpers import get_log, present

pytestmark = pytest.mark.unit

T0 = 1_700_000_000_000


@pytest.fixture
def config(tmp_path):
    return config_from_mapping({"broker": {"log.dirs": [str(tmp_path / "a"), str(tmp_path / "b")],
                                           "log.segment.bytes": 1024}})


def fill(config, topic: str = "t", records: int = 60, **appends) -> None:
    """``records`` keyed JSON records, one batch each, timestamps T0 + i seconds (about ten segments)."""
    with LogManager.open(config, clock=ManualClock(T0)) as mgr:
        log = mgr.get_or_create_log(topic, 0)
        for i in range(records):
            log.append_records([SimpleRecord(f"k{i % 7}".encode(), json.dumps({"i": i}).encode(), T0 + 1000 * i,
                                             (("h", f"v{i}".encode()),))])


def engine_records(config, topic: str = "t", isolation: str = "read_uncommitted") -> list:
    with LogManager.open(config, partitions=[(topic, 0)]) as mgr:
        return list(get_log(mgr, topic, 0).read_records(isolation_level=isolation))


def listing(dirs) -> dict:
    out = {}
    for root in dirs:
        for d, subdirs, files in os.walk(root):
            for n in [".", *subdirs, *files]:
                p = os.path.join(d, n)
                st = os.lstat(p)
                out[p] = (st.st_mode, st.st_size, st.st_mtime_ns, st.st_ino)
    return out


def test_pages_follow_one_another_across_segments_with_the_engines_records(config):
    fill(config)
    truth = engine_records(config)
    seen, offset = [], None
    while True:
        page = browse(config, "t", 0, offset=offset, limit=7)
        seen += page["records"]
        if page["next_offset"] is None:
            break
        offset = page["next_offset"]
    assert [(r["offset"], r["key"], r["value"], r["timestamp"]) for r in seen] == [
        (r.offset, r.key, r.value, r.timestamp) for r in truth]
    assert seen[3]["headers"] == [("h", b"v3")] and seen[3]["timestamp_type"] == "CreateTime"
    assert page["log_end_offset"] == len(truth) == 60 and page["batches_checked"] >= 1


def test_transactions_are_marked_and_read_committed_reads_as_the_engine_does(config):
    fill(config, records=5)
    with LogManager.open(config, clock=ManualClock(T0)) as mgr:
        log = mgr.get_or_create_log("t", 0)
        log.append_records([SimpleRecord(b"tx", b"aborted")], producer_id=7, producer_epoch=0, base_sequence=0,
                           is_transactional=True)
        log.append_end_txn(7, 0, commit=False, coordinator_epoch=3)
        log.append_records([SimpleRecord(b"tx", b"committed")], producer_id=7, producer_epoch=0, base_sequence=1,
                           is_transactional=True)
        log.append_end_txn(7, 0, commit=True, coordinator_epoch=3)
        log.append_records([SimpleRecord(b"tx", b"open")], producer_id=8, producer_epoch=2, base_sequence=0,
                           is_transactional=True)
        log.append_records([SimpleRecord(b"k", b"after the open one")])
        lso = log.last_stable_offset
    page = browse(config, "t", 0)
    marks = [(r["offset"], r["control"], r["txn"], r["coordinator_epoch"]) for r in page["records"]][5:]
    assert marks == [(5, None, "aborted", None), (6, "ABORT", None, 3), (7, None, "committed", None),
                     (8, "COMMIT", None, 3), (9, None, "open", None), (10, None, None, None)]
    assert page["records"][9]["producer_id"] == 8 and page["records"][9]["producer_epoch"] == 2
    assert page["records"][7]["sequence"] == 1
    assert page["last_stable_offset"] == lso == 9
    assert page["open_transactions"] == [{"producer_id": 8, "first_offset": 9}]
    committed = browse(config, "t", 0, isolation="read_committed")
    assert [r["offset"] for r in committed["records"]] == [r.offset for r in engine_records(config, isolation="read_committed")]
    assert [r["offset"] for r in committed["records"]] == [0, 1, 2, 3, 4, 7]
    assert "last stable offset 9" in committed["notes"][-1]
    # a page that begins inside the aborted transaction still knows its records are aborted
    assert browse(config, "t", 0, offset=5, limit=1)["records"][0]["txn"] == "aborted"


def test_seeks_by_timestamp_newest_and_out_of_range_offsets(config):
    fill(config)
    with LogManager.open(config, partitions=[("t", 0)]) as mgr:
        log = mgr.get_log("t", 0)
        assert log is not None
        for ts in (T0 - 5, T0 + 12_345, T0 + 30_000, T0 + 59_000):
            assert browse(config, "t", 0, timestamp_ms=ts, limit=1)["records"][0]["offset"] == present(log.offset_for_timestamp(ts))[1]
        log.delete_records(20)
    late = browse(config, "t", 0, timestamp_ms=T0 + 10**9)
    assert late["records"] == [] and late["notes"] == ["no record has a timestamp at or after that instant"]
    assert [r["offset"] for r in browse(config, "t", 0, latest=True, limit=3)["records"]] == [57, 58, 59]
    below = browse(config, "t", 0, offset=3, limit=2)
    assert [r["offset"] for r in below["records"]] == [20, 21] and "below the log start offset 20" in below["notes"][0]
    beyond = browse(config, "t", 0, offset=99)
    assert beyond["records"] == [] and beyond["next_offset"] is None and "beyond the log end offset 60" in beyond["notes"][0]


def test_a_key_search_bounded_per_page_finds_every_record_of_the_key(config):
    fill(config)
    wanted = [r.offset for r in engine_records(config) if r.key == b"k3"]
    found, offset, pages = [], None, 0
    while True:
        page = browse(config, "t", 0, key=b"k3", offset=offset, limit=50, max_scan_bytes=500)
        pages += 1
        found += [r["offset"] for r in page["records"]]
        assert all(r["key"] == b"k3" for r in page["records"])
        if page["next_offset"] is None:
            break
        assert page["scan_limited"] and page["seek"] == ("key" if offset is None else "key from offset")
        offset = page["next_offset"]
    assert found == wanted and pages > 2
    assert browse(config, "t", 0, key=b"k3", limit=2)["next_offset"] == wanted[1] + 1


def test_the_newest_records_of_a_key_are_found_from_the_end(config):
    fill(config)
    wanted = [r.offset for r in engine_records(config) if r.key == b"k2"]
    newest = browse(config, "t", 0, key=b"k2", latest=True, limit=3)
    assert [r["offset"] for r in newest["records"]] == wanted[-3:] and newest["seek"] == "key from latest"
    assert newest["next_offset"] is None and not newest["scan_limited"]
    assert newest["batches_checked"] < 60                 # the older segments were not read
    every = browse(config, "t", 0, key=b"k2", latest=True, limit=500)
    assert [r["offset"] for r in every["records"]] == wanted
    bounded = browse(config, "t", 0, key=b"k2", latest=True, limit=500, max_scan_bytes=300)
    assert bounded["scan_limited"] and [r["offset"] for r in bounded["records"]] == [
        o for o in wanted if o >= bounded["start_offset"]]
    assert f"back to offset {bounded['start_offset']}" in bounded["notes"][-1]


def test_damage_ends_the_page_with_the_records_before_it(config):
    fill(config)
    pdir = next(os.path.join(d, "t-0") for d in config.log_dirs if os.path.isdir(os.path.join(d, "t-0")))
    first = sorted(n for n in os.listdir(pdir) if n.endswith(".log"))[1]       # a sealed segment
    path = os.path.join(pdir, first)
    records = FileRecords(path, writable=False)
    victim = list(records.batches())[2]
    records.close()
    with open(path, "r+b") as f:
        f.seek(victim.file_position + 70)
        b = f.read(1)
        f.seek(victim.file_position + 70)
        f.write(bytes([b[0] ^ 1]))
    page = browse(config, "t", 0, limit=500)
    assert [r["offset"] for r in page["records"]] == list(range(victim.base_offset))
    assert page["error"] is not None
    assert page["error"]["path"] == path and page["error"]["position"] == victim.file_position
    assert "crc" in page["error"]["message"] and page["next_offset"] is None


def test_a_batch_still_being_written_is_not_read(config):
    fill(config, records=3)
    pdir = next(os.path.join(d, "t-0") for d in config.log_dirs if os.path.isdir(os.path.join(d, "t-0")))
    active = os.path.join(pdir, sorted(n for n in os.listdir(pdir) if n.endswith(".log"))[-1])
    records = FileRecords(active, writable=False)
    last = list(records.batches())[-1].raw()
    records.close()
    with open(active, "ab") as f:       # the first half of one more batch: what a reader sees of a writer mid-append
        f.write(last[:len(last) // 2])
    page = browse(config, "t", 0)
    assert [r["offset"] for r in page["records"]] == [0, 1, 2] and page["error"] is None


def test_browsing_writes_nothing(config):
    fill(config)
    with LogManager.open(config, clock=ManualClock(T0)) as mgr:
        log = mgr.get_or_create_log("t", 0)
        log.append_records([SimpleRecord(b"tx", b"open")], producer_id=8, producer_epoch=0, base_sequence=0,
                           is_transactional=True)
    before = listing(config.log_dirs)
    browse(config, "t", 0)
    browse(config, "t", 0, key=b"k1", max_scan_bytes=100)
    browse(config, "t", 0, timestamp_ms=T0 + 5000, isolation="read_committed")
    browse(config, "t", 0, latest=True)
    assert listing(config.log_dirs) == before


def test_bad_requests_are_named(config):
    fill(config, records=2)
    with pytest.raises(PartitionNotFoundError, match="t-5"):
        browse(config, "t", 5)
    with pytest.raises(InvalidRequestError, match="isolation must be one of"):
        browse(config, "t", 0, isolation="serializable")
    with pytest.raises(InvalidRequestError, match=r"limit must be in \[1, 500\], got 0"):
        browse(config, "t", 0, limit=0)
    with pytest.raises(InvalidRequestError, match="offset must be >= 0"):
        browse(config, "t", 0, offset=-1)
    with pytest.raises(ValueError):
        browse(config, "../x", 0)


def test_bytes_are_shown_as_text_json_or_hex():
    assert render_bytes(b'{"a":[1,2]}') == {"format": "json", "text": '{"a": [1, 2]}', "size": 11, "truncated": False,
                                           "note": None}
    assert render_bytes(b'{"a":1}', "json")["text"] == '{\n  "a": 1\n}'
    assert render_bytes(b"12", "auto")["format"] == "text"          # valid JSON, but a number reads better as text
    assert render_bytes(b"caf\xc3\xa9")["text"] == "café"
    raw = bytes(range(20))
    assert render_bytes(raw)["format"] == "hex" and render_bytes(raw)["text"] == hex_dump(raw)
    assert hex_dump(b"AB\x00") == "00000000  41 42 00" + " " * 39 + "  |AB.|"
    assert render_bytes(b"\xff\xfe", "text")["note"] == "not UTF-8 text"
    assert render_bytes(b"plain", "json") == {"format": "text", "text": "plain", "size": 5, "truncated": False,
                                             "note": "not JSON"}
    assert render_bytes(None, "hex")["format"] == "null"
    cut = render_bytes("é".encode() * 10, "text", max_bytes=5)      # a character cut by the truncation is dropped
    assert cut["text"] == "éé" and cut["truncated"] and cut["size"] == 20
    with pytest.raises(InvalidRequestError, match="format must be one of"):
        render_bytes(b"x", "yaml")
