"""Remote reads against a real SeaweedFS: a segment copied to the object store reads back byte for byte as the
local one (fetch bytes, offsets for timestamps, aborted transactions), every byte checked; a damaged, truncated or
missing object raises with the segment's offsets and is never handed out; the cache stays within its bound."""
from __future__ import annotations

import dataclasses
import uuid

import pytest

from storage_engine.clock import ManualClock
from storage_engine.config_file import config_from_mapping
from storage_engine.errors import RemoteObjectDamagedError, RemoteObjectMissingError
from storage_engine.log.manager import LogManager
from storage_engine.record import codecs
from storage_engine.record.records import SimpleRecord
from storage_engine.tiered.cache import ChunkCache
from storage_engine.tiered.keys import segment_keys
from storage_engine.tiered.object_store import ObjectStore
from storage_engine.tiered.reads import RemoteReader
from storage_engine.tiered.settings import RemoteStorageSettings
from tests.tiered.conftest import s3_client
from tests.tiered.remote_copy import StaticView, copy_sealed

pytestmark = [pytest.mark.tiered]

TOPIC = "events"
PID = 4000


def _config(tmp_path, weed, bucket, **broker):
    return config_from_mapping({
        "broker": {"log.dirs": [str(tmp_path / "logs")], "remote.log.storage.system.enable": True,
                   "rsm.config.storage.s3.endpoint.url": weed.endpoint_url,
                   "rsm.config.storage.s3.bucket.name": bucket,
                   "rsm.config.storage.aws.access.key.id": weed.access_key,
                   "rsm.config.storage.aws.secret.access.key": weed.secret_key, **broker},
        "topics": {TOPIC: {"segment.bytes": 4096, "index.interval.bytes": 300, "remote.storage.enable": True}}})


def _fill(log) -> None:
    """~17 segments of 4 KiB: plain and compressed batches, one aborted and one committed transaction that span
    segment boundaries (the aborted one's marker in the segment after its records), timestamps rising with a few
    out of order."""
    clock_ts = 1_700_000_000_000
    seq = 0
    for i in range(400):
        n = 1 + i % 5
        recs = [SimpleRecord(b"k%d" % (j % 7), b"value-%d-%d-" % (i, j) + b"x" * (i % 40), clock_ts + 10 * i
                             + (-500 if j == 2 else 0)) for j in range(n)]
        if i in (100, 101, 102, 250, 251):
            log.append_records(recs, producer_id=PID, producer_epoch=0, base_sequence=seq, is_transactional=True)
            seq += n
            if i in (102, 251):
                if i == 102:
                    log.roll()          # the ABORT marker goes to the next segment, its txnindex with it
                log.append_end_txn(PID, 0, commit=(i == 251))
        else:
            log.append_records(recs, codec=codecs.GZIP if i % 3 == 0 else codecs.NONE)
    log.roll()


def _tiered(tmp_path, weed, bucket):
    config = _config(tmp_path, weed, bucket)
    settings = RemoteStorageSettings.of(config)
    store = ObjectStore(settings)
    with LogManager.open(config, clock=ManualClock(1_700_000_000_000)) as mgr:
        log = mgr.get_or_create_log(TOPIC, 0)
        _fill(log)
        segments = copy_sealed(log, settings, store, uuid.uuid4())
        reader = RemoteReader(settings, store, StaticView(segments))
        yield log, reader, segments, settings


@pytest.fixture(scope="module")
def shared(tmp_path_factory, weed):
    """One copied log for the tests that only read (the others damage objects: :func:`tiered`)."""
    bucket = f"reads-shared-{uuid.uuid4().hex[:12]}"
    s3_client(weed).create_bucket(Bucket=bucket)
    yield from _tiered(tmp_path_factory.mktemp("shared"), weed, bucket)


@pytest.fixture
def tiered(tmp_path, weed, bucket):
    yield from _tiered(tmp_path, weed, bucket)


def test_remote_fetch_bytes_equal_the_local_ones(shared):
    log, reader, segments, _ = shared
    assert len(segments) > 12
    end = segments[-1].end_offset
    for offset in range(0, end + 1, 3):
        for max_bytes in (1, 700, 5000):
            local = log.read(offset, max_bytes)
            remote = reader.read(TOPIC, 0, offset, max_bytes)
            assert local is not None and remote is not None
            assert remote.data == local.data, (offset, max_bytes)
    assert reader.cache.stats.hits > 0


def test_remote_offsets_for_timestamps_and_aborted_transactions_equal_the_local_ones(shared):
    log, reader, segments, _ = shared
    end = segments[-1].end_offset
    for ts in range(1_699_999_999_000, 1_700_000_004_500, 97):
        assert reader.offset_for_timestamp(TOPIC, 0, ts, 0) == log.offset_for_timestamp(ts), ts
    assert reader.offset_for_timestamp(TOPIC, 0, 1_800_000_000_000, 0) is None
    found_any = False
    bounds = [s.end_offset + 1 for s in segments]             # a fetch of one segment asks up to its end
    for start in range(0, end, 37):
        for upper in (start + 1, start + 200, end + 1, *(b for b in bounds if start < b <= start + 400)):
            remote = reader.aborted_transactions(TOPIC, 0, start, upper)
            local = log.aborted_transactions(start, upper)
            assert sorted(remote.aborted) == sorted(local), (start, upper)
            found_any = found_any or bool(local)
    assert found_any


def test_remote_batches_are_the_local_batches(shared):
    log, reader, segments, _ = shared
    remote = [(b.base_offset, b.raw()) for b in reader.batches(TOPIC, 0, 57)]
    local: list[tuple[int, bytes]] = []
    for seg in log.segments[:-1]:
        local.extend((b.base_offset, b.raw()) for b in seg.checked_batches(max(57, seg.base_offset)))
    assert remote == local


def _keys(settings, seg):
    return segment_keys(settings.key_prefix, seg.topic, seg.topic_id, seg.partition, seg.start_offset, seg.segment_id)


def _fresh(reader, tmp_path, name):
    return RemoteReader(reader.settings, reader.store, reader.view,
                        cache=ChunkCache(str(tmp_path / name), 1 << 30))


def test_a_damaged_log_object_is_never_handed_out(tiered, weed, bucket, tmp_path):
    log, reader, segments, settings = tiered
    seg = segments[5]
    key = _keys(settings, seg)["log"]
    s3 = s3_client(weed)
    raw = bytearray(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
    raw[len(raw) // 2] ^= 0x10
    s3.put_object(Bucket=bucket, Key=key, Body=bytes(raw))
    fresh = _fresh(reader, tmp_path, "c1")
    with pytest.raises(RemoteObjectDamagedError) as info:
        for offset in range(seg.start_offset, seg.end_offset + 1):
            fresh.read(TOPIC, 0, offset, 100)
    assert key in str(info.value)
    assert str(seg.start_offset) in str(info.value) and str(seg.end_offset) in str(info.value)
    with pytest.raises(RemoteObjectDamagedError):
        list(fresh.batches(TOPIC, 0, seg.start_offset))
    other = segments[6]                            # the other segments still read
    assert fresh.read(TOPIC, 0, other.start_offset, 1000).data == log.read(other.start_offset, 1000).data


def test_a_truncated_log_object_is_damage(tiered, weed, bucket, tmp_path):
    _, reader, segments, settings = tiered
    seg = segments[3]
    key = _keys(settings, seg)["log"]
    s3 = s3_client(weed)
    raw = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    s3.put_object(Bucket=bucket, Key=key, Body=raw[:len(raw) - 100])
    with pytest.raises(RemoteObjectDamagedError) as info:
        _fresh(reader, tmp_path, "c2").read(TOPIC, 0, seg.end_offset, 100)
    assert "shorter" in str(info.value)


def test_a_damaged_index_object_is_damage(tiered, weed, bucket, tmp_path):
    _, reader, segments, settings = tiered
    seg = max(segments[:-1], key=lambda s: s.size_bytes)        # a full segment: several index entries
    key = _keys(settings, seg)["index"]
    s3 = s3_client(weed)
    raw = bytearray(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
    assert len(raw) >= 16
    raw[0:8], raw[8:16] = raw[8:16], raw[0:8]       # two entries out of order
    s3.put_object(Bucket=bucket, Key=key, Body=bytes(raw))
    with pytest.raises(RemoteObjectDamagedError) as info:
        _fresh(reader, tmp_path, "c3").read(TOPIC, 0, seg.start_offset, 100)
    assert key in str(info.value)


@pytest.mark.parametrize("part", ["log", "index"])
def test_a_missing_object_raises_with_its_offsets(tiered, weed, bucket, tmp_path, part):
    _, reader, segments, settings = tiered
    seg = segments[7]
    key = _keys(settings, seg)[part]
    s3_client(weed).delete_object(Bucket=bucket, Key=key)
    with pytest.raises(RemoteObjectMissingError) as info:
        _fresh(reader, tmp_path, "c4").read(TOPIC, 0, seg.start_offset + 1, 100)
    assert key in str(info.value)
    assert str(seg.start_offset) in str(info.value) and str(seg.end_offset) in str(info.value)


def test_the_cache_stays_within_its_bound_over_a_whole_read(shared, tmp_path):
    log, reader, segments, _ = shared
    bound = 5 * 4096
    small = RemoteReader(reader.settings, reader.store, reader.view, cache=ChunkCache(str(tmp_path / "c5"), bound))
    offset = 0
    while offset <= segments[-1].end_offset:
        data = small.read(TOPIC, 0, offset, 1000)
        assert data is not None and data.data == log.read(offset, 1000).data
        offset = _next_offset(data.data)
        assert small.cache.size_bytes() <= bound
    assert small.cache.stats.evictions > 0


def _next_offset(data: bytes) -> int:
    from storage_engine.record.record_batch import RecordBatch
    pos, last = 0, -1
    while pos < len(data):
        b = RecordBatch(data, pos)
        last = b.last_offset
        pos += b.size_in_bytes
    return last + 1


def test_an_offset_in_no_remote_segment_is_out_of_range(shared):
    from storage_engine.errors import OffsetOutOfRangeError
    _, reader, segments, _ = shared
    with pytest.raises(OffsetOutOfRangeError):
        reader.read(TOPIC, 0, segments[-1].end_offset + 1, 100)
    gone = RemoteReader(reader.settings, reader.store, StaticView(segments[3:]), cache=reader.cache)
    with pytest.raises(OffsetOutOfRangeError):
        gone.read(TOPIC, 0, segments[0].start_offset, 100)
    assert dataclasses.is_dataclass(segments[0])


def test_reads_across_chunk_boundaries_equal_the_local_ones(shared, tmp_path, monkeypatch):
    """Chunks smaller than a segment and not aligned with its batches (the 4 MiB default holds these whole)."""
    from storage_engine.tiered import reads
    log, reader, segments, _ = shared
    monkeypatch.setattr(reads, "CHUNK_BYTES", 777)
    small = _fresh(reader, tmp_path, "chunks")
    for offset in range(0, segments[-1].end_offset + 1, 5):
        for max_bytes in (1, 1500):
            local, remote = log.read(offset, max_bytes), small.read(TOPIC, 0, offset, max_bytes)
            assert local is not None and remote is not None and remote.data == local.data, (offset, max_bytes)
    for seg, local_seg in zip(segments, log.segments):
        data, where = small.segment_bytes(seg)
        with open(local_seg.path, "rb") as f:
            assert data == f.read(), where
    assert small.cache.stats.misses > 3 * len(segments)      # several chunks per segment were fetched


class _CountingStore:
    """The real object store, recording every GET: whole objects by key, ranged GETs by (key, start, end)."""

    def __init__(self, store):
        self.store, self.gets, self.ranges = store, [], []

    def get(self, key, offsets=None):
        self.gets.append(key)
        return self.store.get(key, offsets)

    def get_range(self, key, start, end_exclusive, offsets=None):
        self.ranges.append((key, start, end_exclusive))
        return self.store.get_range(key, start, end_exclusive, offsets)

    def get_range_pieces(self, key, start, end_exclusive, piece_bytes, offsets=None):
        self.ranges.append((key, start, end_exclusive))
        return self.store.get_range_pieces(key, start, end_exclusive, piece_bytes, offsets)


def _walk(reader, segments, log=None, max_bytes=300):
    offset = 0
    while offset <= segments[-1].end_offset:
        data = reader.read(TOPIC, 0, offset, max_bytes)
        assert data is not None and data.data
        if log is not None:
            assert data.data == log.read(offset, max_bytes).data, offset
        offset = _next_offset(data.data)


def test_a_cold_walk_in_small_fetches_gets_each_chunk_once_and_checks_its_file_once(shared, tmp_path, monkeypatch):
    """A consumer's fetch loop over cold segments: one ranged GET per run of READ_AHEAD_CHUNKS chunks (each chunk
    fetched once, read from the GET's body as the fetches need it), one GET of each segment's offset index, and no
    cache file read back during the walk (the chunks this process checked are served from memory while their
    files are in the folder). A new process's view (memory dropped) reads each file once and asks the store
    nothing."""
    from storage_engine.tiered import chunk_fetch, reads
    log, reader, segments, settings = shared
    chunk = 777
    monkeypatch.setattr(reads, "CHUNK_BYTES", chunk)
    monkeypatch.setattr(chunk_fetch, "STALE_S", 3600.0)      # a loaded machine's pause never closes a stream here
    counting = _CountingStore(reader.store)
    walker = RemoteReader(settings, counting, reader.view, cache=ChunkCache(str(tmp_path / "walk"), 1 << 30))
    _walk(walker, segments, log)
    window = reads.READ_AHEAD_CHUNKS
    expected = []
    for seg in segments:
        key = _keys(settings, seg)["log"]
        for first in range(0, seg.size_bytes, window * chunk):
            expected.append((key, first, min(seg.size_bytes, first + window * chunk)))
    assert sorted(counting.ranges) == sorted(expected)
    assert sorted(counting.gets) == sorted(_keys(settings, s)["index"] for s in segments)
    chunks = sum((s.size_bytes + chunk - 1) // chunk for s in segments)
    stats = walker.cache.stats
    assert stats.misses == chunks + len(segments)                  # every chunk and index kept once
    assert stats.hits > 0 and stats.hits == stats.memory_hits      # no file read back
    walker.clear_cache()
    before = stats.hits - stats.memory_hits
    _walk(walker, segments)
    assert len(counting.ranges) == len(expected) and len(counting.gets) == len(segments)
    assert stats.hits - stats.memory_hits - before == chunks + len(segments)   # each file read and checked once


def test_memory_holds_no_chunk_the_cache_folder_does_not(tiered, weed, bucket, tmp_path):
    """An entry removed from the folder (evicted by another process, deleted by an operator) is gone for this
    process too: the next read goes to the store, so a .log object deleted behind the store's back is then an error
    with its offsets, never data this process read before."""
    log, reader, segments, settings = tiered
    seg = segments[4]
    key = _keys(settings, seg)["log"]
    counting = _CountingStore(reader.store)
    cache = ChunkCache(str(tmp_path / "c6"), 1 << 30)
    walker = RemoteReader(settings, counting, reader.view, cache=cache)
    first = walker.read(TOPIC, 0, seg.start_offset, 100)
    assert first is not None and first.data == log.read(seg.start_offset, 100).data
    again = walker.read(TOPIC, 0, seg.start_offset, 100)
    assert again is not None and again.data == first.data and len(counting.ranges) == 1   # from memory
    for entry in (tmp_path / "c6").glob("*.entry"):
        entry.unlink()
    again = walker.read(TOPIC, 0, seg.start_offset, 100)
    assert again is not None and again.data == first.data
    assert [r[0] for r in counting.ranges] == [key, key]        # fetched again, not served from memory
    for entry in (tmp_path / "c6").glob("*.entry"):
        entry.unlink()
    s3_client(weed).delete_object(Bucket=bucket, Key=key)
    with pytest.raises(RemoteObjectMissingError) as info:
        walker.read(TOPIC, 0, seg.start_offset, 100)
    assert key in str(info.value) and f"{seg.start_offset} to {seg.end_offset}" in str(info.value)


def test_a_ranged_get_left_unread_is_not_read_on(tiered, weed, bucket, tmp_path, monkeypatch):
    """Chunks a GET received ahead of the reads are taken only by reads that follow closely (within STALE_S):
    later, the read asks the store again, so an object deleted meanwhile is an error, not bytes received before."""
    from storage_engine.tiered import chunk_fetch, reads
    _, reader, segments, settings = tiered
    monkeypatch.setattr(reads, "CHUNK_BYTES", 512)
    seg = max(segments, key=lambda s: s.size_bytes)
    key = _keys(settings, seg)["log"]
    counting = _CountingStore(reader.store)
    walker = RemoteReader(settings, counting, reader.view, cache=ChunkCache(str(tmp_path / "c7"), 1 << 30))
    assert len(walker.chunk(seg, key, 0)) == 512                  # its GET covers chunks 0-3
    assert counting.ranges == [(key, 0, 4 * 512)]
    assert len(walker.chunk(seg, key, 1)) == 512                  # read on from the same GET
    assert len(counting.ranges) == 1
    s3_client(weed).delete_object(Bucket=bucket, Key=key)
    monkeypatch.setattr(chunk_fetch, "STALE_S", 0.0)             # as if the next read came much later
    with pytest.raises(RemoteObjectMissingError):
        walker.chunk(seg, key, 2)
    assert counting.ranges[1:] == [(key, 2 * 512, min(seg.size_bytes, 6 * 512))]
