"""tiering: copying sealed segments into the object store and reading them back, against the same client moving
the same bytes with nothing of the engine in between; and the two S3 clients against each other.

Setup (not timed): a ``weed server -s3`` (:class:`include.seaweedfs.WeedServer`) in the scratch directory; one
partition of a tiered topic (``remote.storage.enable``) holding ``SEGMENTS`` sealed segments of 16 MiB (4 MiB with
``--quick``) of 1000-record batches of 1 KiB values, plus an active one, closed cleanly. Groups:

* **upload** (target >= 0.8x): the tier job (``storage_engine.jobs.tiering.tier``: per segment
  COPY_SEGMENT_STARTED, every part uploaded and verified, COPY_SEGMENT_FINISHED) copying every sealed segment of
  a fresh copy of that store under a fresh key prefix, against boto3's ``upload_file`` (s3transfer's multipart
  upload, the same client library the object store uses) of the same segments' files (``.log``, ``.index``,
  ``.timeindex``, ``.snapshot``); MB counts each row's own bytes, so the ratio is of throughputs. The store has
  tiered before (its ``__remote_log_metadata`` exists, as after any first copy); the store's very first run, which
  also creates that topic's 50 partitions once, is its own row beside it;
* **cold fetch** (target >= 0.7x): a consumer's fetch loop over the first remote segment through
  ``RemoteReader.read(topic, 0, offset, 1 MiB)`` with an empty cache (the folder emptied and the reader's memory
  dropped with ``RemoteReader.clear_cache`` before every round: each round GETs the offset index and every chunk
  as a new process would), against one plain ``get_object`` of the same ``.log`` object;
* **clients**: boto3 against obstore, with the same files, the same object and 200 small objects of 8 KiB (a
  segment's index, time index, snapshot and epoch parts are small: per-request cost counts), so the object
  store's client can be chosen on figures.

Every case checks its result (bytes in the bucket, bytes read equal to the file's, the tier job's copied count and
the remote view's finished segments) before its time counts.
"""
from __future__ import annotations

import os
import shutil
import uuid
from typing import Any, Callable

from storage_engine.clock import ManualClock
from storage_engine.config import StorageConfig
from storage_engine.config_file import config_from_mapping
from storage_engine.log.manager import LogManager
from storage_engine.record.record_batch import build_batch

from . import object_clients as oc
from .harness import (MIB, NOW_MS, Context, Row, Sample, Section, Target, chunks, generate_records,
                      partition_log, run_interleaved, scratch_dir, timed)

NAME = "tiering"
TOPIC = "bench-tiered"
VALUE_BYTES = 1024
RECORDS_PER_BATCH = 1000
SEGMENTS_FULL, SEGMENTS_QUICK = 4, 2
SMALL_OBJECTS, SMALL_BYTES = 200, 8 * 1024
FETCH_MAX_BYTES = MIB
PART_SUFFIXES = (".log", ".index", ".timeindex", ".snapshot")


def tiered_config(log_dir: str, weed: Any, bucket: str, *, segment_bytes: int, key_prefix: str = "",
                  cache_dir: str | None = None, topics: dict[str, dict] | None = None) -> StorageConfig:
    """A store config whose topics are tiered into ``bucket`` of ``weed``."""
    broker: dict[str, Any] = {
        "log.dirs": [log_dir], "log.segment.bytes": segment_bytes,
        "remote.log.storage.system.enable": True,
        "rsm.config.storage.s3.endpoint.url": weed.endpoint_url,
        "rsm.config.storage.s3.bucket.name": bucket,
        "rsm.config.storage.aws.access.key.id": weed.access_key,
        "rsm.config.storage.aws.secret.access.key": weed.secret_key,
        "rsm.config.key.prefix": key_prefix,
    }
    if cache_dir is not None:
        broker["rsm.config.fetch.chunk.cache.path"] = cache_dir
    return config_from_mapping({"broker": broker,
                                "topics": topics if topics is not None else {TOPIC: {"remote.storage.enable": True}}})


def build_store(log_dir: str, config: StorageConfig, segments: int) -> tuple[list[tuple[int, int, list[str]]], int]:
    """Fill ``TOPIC``-0 until it holds ``segments`` sealed segments; returns (per sealed segment: base offset,
    next offset, its part files), and the log end offset."""
    pool = [build_batch(r) for r in chunks(generate_records(20 * RECORDS_PER_BATCH, VALUE_BYTES, seed=39),
                                           RECORDS_PER_BATCH)]
    mgr = LogManager.open(config, clock=ManualClock(NOW_MS))
    try:
        log = mgr.get_or_create_log(TOPIC, 0)
        i = 0
        while len(log.segments) <= segments:
            log.append_batches(pool[i % len(pool)])
            i += 1
        log.flush()
        sealed = log.segments[:segments]
        ends = [s.base_offset for s in log.segments[1:segments + 1]]
        out = []
        for seg, end in zip(sealed, ends):
            stem = os.path.join(os.path.dirname(seg.path), f"{seg.base_offset:020d}")
            parts = [stem + suffix for suffix in PART_SUFFIXES if os.path.exists(stem + suffix)]
            if suffix_snapshot_missing(parts, end, os.path.dirname(seg.path)):
                parts.append(os.path.join(os.path.dirname(seg.path), f"{end:020d}.snapshot"))
            out.append((seg.base_offset, end, parts))
        leo = partition_log(mgr, TOPIC, 0).log_end_offset
    finally:
        mgr.close()
    return out, leo


def suffix_snapshot_missing(parts: list[str], end: int, pdir: str) -> bool:
    """Kafka copies the producer snapshot at the segment's end (the next segment's base): count it as a part."""
    path = os.path.join(pdir, f"{end:020d}.snapshot")
    return path not in parts and os.path.exists(path)


def _tiering_modules() -> dict[str, Any] | None:
    try:
        from storage_engine.jobs import tiering
        from storage_engine.tiered import object_store, reads, remote_log, settings
    except ImportError:
        return None
    return {"tiering": tiering, "object_store": object_store, "reads": reads, "remote_log": remote_log,
            "settings": settings}


def run(ctx: Context) -> Section:
    from include.seaweedfs import WeedServer
    segments = SEGMENTS_QUICK if ctx.quick else SEGMENTS_FULL
    segment_bytes = (4 if ctx.quick else 16) * MIB
    section = Section(NAME, "tiering into SeaweedFS vs the same S3 client moving the same bytes; boto3 vs obstore",
                      {"segments": segments, "segment_bytes": segment_bytes, "value_bytes": VALUE_BYTES,
                       "records_per_batch": RECORDS_PER_BATCH, "fetch_max_bytes": FETCH_MAX_BYTES,
                       "small_objects": SMALL_OBJECTS, "small_bytes": SMALL_BYTES})
    modules = _tiering_modules()
    with scratch_dir(ctx, "tiering") as root:
        weed = WeedServer(os.path.join(root, "weed")).start()
        try:
            _run(ctx, section, root, weed, segments, segment_bytes, modules)
        finally:
            weed.kill9()     # its folder goes with the scratch dir: a graceful stop only costs time
    if modules is None:
        section.notes.append("SKIPPED the tier job's rows: storage_engine.jobs.tiering / storage_engine.tiered are "
                             "not in this checkout")
    return section


def _run(ctx: Context, section: Section, root: str, weed: Any, segments: int, segment_bytes: int,
         modules: dict[str, Any] | None) -> None:
    client = oc.boto3_client(weed)
    bucket = "bench-tiering"
    client.create_bucket(Bucket=bucket)
    store = oc.obstore_store(weed, bucket) if oc.has_obstore() else None
    if store is None:
        section.notes.append("SKIPPED the obstore rows: obstore is not installed (it is not in requirements.txt; "
                             "pip install obstore to compare the clients)")
    template = os.path.join(root, "template")
    config = tiered_config(template, weed, bucket, segment_bytes=segment_bytes) if modules is not None else \
        config_from_mapping({"broker": {"log.dirs": [template], "log.segment.bytes": segment_bytes}})
    sealed, _leo = build_store(template, config, segments)
    first_template = os.path.join(root, "template-first")
    if modules is not None:
        shutil.copytree(template, first_template)
        _create_metadata_topic(modules, config)
    files = [path for _, _, parts in sealed for path in parts]
    size = sum(os.path.getsize(p) for p in files)
    records = sealed[-1][1] - sealed[0][0]
    serial = iter(range(1_000_000))

    def keyed(prefix: str) -> list[tuple[str, str]]:
        return [(p, f"{prefix}/{os.path.basename(p)}") for p in files]

    def boto3_upload_case() -> Sample:
        batch = keyed(f"boto3-{next(serial)}")
        sample, stored = timed(oc.boto3_upload, client, bucket, batch)
        if stored != size:
            raise RuntimeError(f"boto3 upload_file stored {stored} bytes of {size}")
        return sample

    def obstore_upload_case() -> Sample:
        batch = keyed(f"obstore-{next(serial)}")
        sample, stored = timed(oc.obstore_upload, store, batch)
        if stored != size:
            raise RuntimeError(f"obstore put stored {stored} bytes of {size}")
        return sample

    tier_bytes: list[int] = []

    def tier_case(source: str) -> Sample:
        assert modules is not None
        n = next(serial)
        work = os.path.join(root, f"tier-{n}")
        shutil.copytree(source, work)
        cfg = tiered_config(work, weed, bucket, segment_bytes=segment_bytes, key_prefix=f"tier-{n}/")
        try:
            sample, result = timed(modules["tiering"].tier, cfg, NOW_MS)
            copied = _copied(result)
            if copied != segments:
                raise RuntimeError(f"the tier job copied {copied} segments, expected {segments}: {result}")
            tier_bytes.append(sum(o["Size"] for o in _listed(client, bucket, f"tier-{n}/")))
        finally:
            shutil.rmtree(work, ignore_errors=True)
        return sample

    cases: dict[str, Callable[[], Sample]] = {"boto3 upload": boto3_upload_case}
    if store is not None:
        cases["obstore upload"] = obstore_upload_case
    if modules is not None:
        cases["tier"] = lambda: tier_case(template)
        cases["tier first"] = lambda: tier_case(first_template)
    runs = run_interleaved(cases, ctx.repeats)
    group = f"upload {segments} segments"
    base = "boto3 upload_file of the segments' files"
    section.add(Row(group, base, records, size, runs["boto3 upload"]))
    if "tier" in runs:
        section.add(Row(group, "tier job: copy + verify + metadata", records, min(tier_bytes), runs["tier"],
                        baseline=base, target=Target("ratio", 0.8, ">= 0.8x plain multipart upload")))
        section.add(Row(group, "tier job, the store's first: + creating __remote_log_metadata", records,
                        min(tier_bytes), runs["tier first"], baseline=base))
    if "obstore upload" in runs:
        section.add(Row(group, "obstore put of the segments' files", records, size, runs["obstore upload"],
                        baseline=base))

    _fetch_rows(ctx, section, root, weed, client, store, bucket, template, sealed, segment_bytes, modules)
    _small_rows(ctx, section, client, store, bucket)


def _create_metadata_topic(modules: dict[str, Any], config: StorageConfig) -> None:
    """Create ``__remote_log_metadata`` in the store as the tier job's first copy does (once per store)."""
    mgr = LogManager.open(config, clock=ManualClock(NOW_MS))
    try:
        modules["remote_log"].RemoteLogMetadata().partition_count(mgr)
    finally:
        mgr.close()


def _copied(result: dict) -> int:
    """Segments the tier job copied (its summary's total), or -1 if a partition failed."""
    if result["failures"] or result["errors"]:
        return -1
    return int(result["copied_segments"])


def _listed(client: Any, bucket: str, prefix: str) -> list[dict]:
    out: list[dict] = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        out += page.get("Contents", [])
    return out


def _fetch_rows(ctx: Context, section: Section, root: str, weed: Any, client: Any, store: Any, bucket: str,
                template: str, sealed: list[tuple[int, int, list[str]]], segment_bytes: int,
                modules: dict[str, Any] | None) -> None:
    first_log = sealed[0][2][0]
    seg_bytes = os.path.getsize(first_log)
    seg_records = sealed[0][1] - sealed[0][0]
    key = "get/first-segment.log"
    client.upload_file(first_log, bucket, key)
    cases: dict[str, Callable[[], Sample]] = {}

    def get_case(fn: Callable[[], bytes]) -> Callable[[], Sample]:
        def case() -> Sample:
            sample, got = timed(fn)
            if not oc.same_bytes(got, first_log):
                raise RuntimeError(f"GET returned {len(got)} bytes that differ from the segment's {seg_bytes}")
            return sample
        return case

    cases["boto3 GET"] = get_case(lambda: oc.boto3_get(client, bucket, key))
    cases["boto3 ranges"] = get_case(lambda: oc.boto3_get_ranges(client, bucket, key, seg_bytes, FETCH_MAX_BYTES))
    if store is not None:
        cases["obstore GET"] = get_case(lambda: oc.obstore_get(store, key))
        cases["obstore ranges"] = get_case(lambda: oc.obstore_get_ranges(store, key, seg_bytes, FETCH_MAX_BYTES))
    reader_ctx: dict[str, Any] = {}
    if modules is not None:
        work = os.path.join(root, "fetch-store")
        shutil.copytree(template, work)
        cache = os.path.join(root, "fetch-cache")
        cfg = tiered_config(work, weed, bucket, segment_bytes=segment_bytes, key_prefix="fetch/", cache_dir=cache)
        modules["tiering"].tier(cfg, NOW_MS)
        settings = modules["settings"].RemoteStorageSettings.of(cfg)
        remote = modules["object_store"].ObjectStore(settings)
        mgr = LogManager.open(cfg, clock=ManualClock(NOW_MS))
        view = modules["remote_log"].RemoteLogView.load(mgr)
        finished = view.segments(TOPIC, 0)
        if len(finished) < 1 or finished[0].start_offset != sealed[0][0]:
            mgr.close()
            raise RuntimeError(f"the tier job left {len(finished)} finished remote segments, the first at "
                               f"{finished[0].start_offset if finished else None}")
        reader = modules["reads"].RemoteReader(settings, remote, view)
        seg_key = _segment_log_key(client, bucket, "fetch/", finished[0].start_offset)
        reader_ctx.update(mgr=mgr, cache=cache, key=seg_key)

        def cold_fetch() -> Sample:
            shutil.rmtree(cache, ignore_errors=True)
            os.makedirs(cache, exist_ok=True)
            clear = getattr(reader, "clear_cache", None)
            if callable(clear):
                clear()           # parsed indexes, checked chunks, where the last fetch ended: a new process
            sample, got = timed(_walk, reader, sealed[0][0], sealed[0][1])
            if got != seg_bytes:
                raise RuntimeError(f"the remote fetch walk returned {got} bytes, the segment holds {seg_bytes}")
            return sample

        def tiered_get() -> Sample:
            sample, got = timed(oc.boto3_get, client, bucket, seg_key)
            if not oc.same_bytes(got, first_log):
                raise RuntimeError("the tiered .log object differs from the local segment")
            return sample

        cases["cold fetch"] = cold_fetch
        cases["tiered GET"] = tiered_get
    try:
        runs = run_interleaved(cases, ctx.repeats)
    finally:
        if "mgr" in reader_ctx:
            reader_ctx["mgr"].close()
    group = f"GET one {seg_bytes / MIB:.0f} MiB segment"
    base = "boto3 get_object of the .log"
    section.add(Row(group, base, seg_records, seg_bytes, runs["boto3 GET"]))
    section.add(Row(group, "boto3 ranged GETs of 1 MiB, in turn", seg_records, seg_bytes, runs["boto3 ranges"],
                    baseline=base))
    if "obstore GET" in runs:
        section.add(Row(group, "obstore get of the .log", seg_records, seg_bytes, runs["obstore GET"],
                        baseline=base))
        section.add(Row(group, "obstore get_range of 1 MiB, in turn", seg_records, seg_bytes,
                        runs["obstore ranges"], baseline=base))
    if "cold fetch" in runs:
        tbase = "boto3 get_object of the tiered .log object"
        section.add(Row(group, tbase, seg_records, seg_bytes, runs["tiered GET"]))
        section.add(Row(group, "RemoteReader.read walk, 1 MiB fetches, cold cache", seg_records, seg_bytes,
                        runs["cold fetch"], baseline=tbase, target=Target("ratio", 0.7, ">= 0.7x plain GET")))


def _segment_log_key(client: Any, bucket: str, prefix: str, base_offset: int) -> str:
    wanted = f"/{base_offset:020d}-"
    for obj in _listed(client, bucket, prefix):
        if wanted in obj["Key"] and obj["Key"].endswith(".log"):
            return str(obj["Key"])
    raise RuntimeError(f"no .log object of base offset {base_offset} under {prefix}")


def _walk(reader: Any, start: int, end: int) -> int:
    """Fetch [start, end) the way a consumer does: the next offset after the last whole batch returned."""
    from storage_engine.segment.file_records import iter_batches
    offset, total = start, 0
    while offset < end:
        fetched = reader.read(TOPIC, 0, offset, FETCH_MAX_BYTES)
        if fetched is None:
            raise RuntimeError(f"a remote read at {offset} returned nothing")
        data = fetched.data
        last = None
        for batch in iter_batches(data):
            if batch.base_offset >= end:
                break
            last = batch
            total += batch.size_in_bytes
        if last is None:
            raise RuntimeError(f"a remote read at {offset} returned no batch")
        offset = last.next_offset
    return total


def _small_rows(ctx: Context, section: Section, client: Any, store: Any, bucket: str) -> None:
    blobs = [os.urandom(SMALL_BYTES) for _ in range(SMALL_OBJECTS)]
    serial = iter(range(1_000_000))

    def objects(prefix: str) -> list[tuple[str, bytes]]:
        return [(f"{prefix}/{uuid.uuid4().hex}", b) for b in blobs]

    def case(fn: Callable[[list[tuple[str, bytes]]], int], who: str) -> Callable[[], Sample]:
        def run_case() -> Sample:
            sample, put = timed(fn, objects(f"small-{who}-{next(serial)}"))
            if put != SMALL_OBJECTS * SMALL_BYTES:
                raise RuntimeError(f"{who} put {put} bytes")
            return sample
        return run_case

    cases = {"boto3": case(lambda objs: oc.boto3_put_small(client, bucket, objs), "boto3")}
    if store is not None:
        cases["obstore"] = case(lambda objs: oc.obstore_put_small(store, objs), "obstore")
    runs = run_interleaved(cases, ctx.repeats)
    group = f"PUT {SMALL_OBJECTS} objects of {SMALL_BYTES // 1024} KiB"
    base = "boto3 put_object, one by one"
    section.add(Row(group, base, SMALL_OBJECTS, SMALL_OBJECTS * SMALL_BYTES, runs["boto3"]))
    if "obstore" in runs:
        section.add(Row(group, "obstore put, one by one", SMALL_OBJECTS, SMALL_OBJECTS * SMALL_BYTES,
                        runs["obstore"], baseline=base))

