"""tiering_scale: a tiering run over many tiered partitions with nothing to copy (10,000 and 1,000; 1,000 and 100
with ``--quick``), and the same 10,000 with segments to copy (at most 2 rounds of each), so the cost per partition and per copied segment
can be read apart.

Setup (timed only as a note): ``include.scale_store.generate`` with no sealed segment per partition (4 records in
the active segment: nothing a tiering run may copy), two log dirs, every topic ``remote.storage.enable``, the
object store a ``weed server -s3`` in the scratch directory. A first run of each store (not timed) writes what a
first run writes once (the topic ids); then ``SEEDED`` partitions get one sealed segment each and a second run
copies them, so ``__remote_log_metadata`` exists with records in it, as in any store that has ever tiered a
segment (every batch of a run then reads the topic's partitions). Then, interleaved:

* **nothing to copy**: the ``log_tiering`` DAG's work as its tasks run it: ``plan_batches`` (batches of 500) and
  ``tier_batch`` of every batch: each partition's orphans, copy, local and remote retention, with its claim;
* **with segments to copy**: before each round (not timed) ``COPY_PARTITIONS`` partitions of the 10,000 get one
  sealed segment each (records appended until the segment rolls); the same run then copies them (checked).

Rows: records = partitions, MB = the store's bytes; the 1,000-partition run is the baseline of the
10,000-partition one, so a ratio of 1.0x means the cost grows linearly with the partitions (0.5x: twice as
much per partition at 10,000); ``units`` = segments copied. The target printed is the issue's: a run over 10,000
partitions with nothing to copy in under 60 s (checked on the best round, wall time).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable

from storage_engine.config import StorageConfig
from storage_engine.config_file import config_from_mapping

from .harness import Context, Row, Sample, Section, Target, run_interleaved, scratch_dir, timed

NAME = "tiering_scale"
PARTITIONS_FULL = (1_000, 10_000)
PARTITIONS_QUICK = (100, 1_000)
COPY_PARTITIONS = 100
NOW_MS = 1_700_006_400_000
BATCH_SIZE = 500
ROUNDS_MAX = 2          # a 10,000-partition run takes tens of seconds: at most 2 rounds of each case
SEEDED = [("t00", 1), ("t00", 2)]     # copied during the setup: the metadata topic exists before any timed run


def tiered_store_config(root: str, weed: Any, bucket: str) -> StorageConfig:
    from include.scale_store import _config_data
    data = _config_data(Path(root))
    data["broker"].update({
        "remote.log.storage.system.enable": True,
        "rsm.config.storage.s3.endpoint.url": weed.endpoint_url,
        "rsm.config.storage.s3.bucket.name": bucket,
        "rsm.config.storage.aws.access.key.id": weed.access_key,
        "rsm.config.storage.aws.secret.access.key": weed.secret_key,
        "log.retention.ms": -1,
    })
    from storage_engine import layout
    topics = sorted({tp[0] for d in data["broker"]["log.dirs"] if os.path.isdir(d)
                     for _name, tp in layout.partition_dirs(d) if not tp[0].startswith("__")})
    data["topics"] = {t: {"remote.storage.enable": True} for t in topics}
    return config_from_mapping(data)


def tier_all(config: StorageConfig) -> tuple[int, int, int]:
    """The DAG's tiering: every batch of ``plan_batches``; (partitions tiered, segments copied, failures)."""
    from storage_engine.jobs import batches, tiering
    tiered = copied = failed = 0
    for batch in batches.plan_batches(config, batch_size=BATCH_SIZE):
        result = tiering.tier_batch(config, batch["partitions"], NOW_MS)
        tiered += sum(1 for r in result["results"] if r.get("tiered"))
        copied += sum(int(r.get("copied_segments", 0)) for r in result["results"])
        failed += len(result["failures"]) + len(result["errors"])
    return tiered, copied, failed


def seal_one_segment(config: StorageConfig, partitions: list[tuple[str, int]], round_no: int) -> None:
    """Append to each partition until its active segment rolls: one sealed segment to copy in each."""
    from storage_engine.clock import ManualClock
    from storage_engine.log.manager import LogManager
    from storage_engine.record.records import SimpleRecord
    with LogManager.open(config, clock=ManualClock(NOW_MS - 1000), partitions=partitions) as mgr:
        for topic, p in partitions:
            log = mgr.get_log(topic, p)
            if log is None:
                raise RuntimeError(f"partition {topic}-{p} is not in the store")
            before = len(log.segments)
            i = 0
            while len(log.segments) == before:
                log.append_records([SimpleRecord(b"r%d-%d" % (round_no, i), b"v" * 80, NOW_MS - 1000)])
                i += 1


def _store_bytes(root: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(root) for f in fs)


def run(ctx: Context) -> Section:
    from include.scale_store import generate
    from include.seaweedfs import WeedServer

    from .object_clients import boto3_client
    small, large = PARTITIONS_QUICK if ctx.quick else PARTITIONS_FULL
    section = Section(NAME, f"a tiering run over {small:,} and {large:,} tiered partitions, nothing to copy, and "
                            f"with {COPY_PARTITIONS} segments to copy",
                      {"partitions": [small, large], "batch_size": BATCH_SIZE, "copy_partitions": COPY_PARTITIONS,
                       "rounds": min(ctx.repeats, ROUNDS_MAX)})
    with scratch_dir(ctx, "tiering-scale") as root:
        weed = WeedServer(os.path.join(root, "weed")).start()
        try:
            client = boto3_client(weed)
            stores: dict[int, tuple[StorageConfig, int]] = {}
            for n in (small, large):
                bucket = f"scale-{n}"
                client.create_bucket(Bucket=bucket)
                made = generate(Path(root) / f"store-{n}", n, 0, NOW_MS)
                config = tiered_store_config(str(Path(root) / f"store-{n}"), weed, bucket)
                tiered, copied, failed = tier_all(config)       # the first run's one-time writes, not timed
                if (tiered, copied, failed) != (n, 0, 0):
                    raise RuntimeError(f"first run over {n} partitions: (tiered, copied, failed) = "
                                       f"{(tiered, copied, failed)}, expected {(n, 0, 0)}")
                seal_one_segment(config, SEEDED, -1)            # the metadata topic made by real copies, not timed
                got = tier_all(config)
                if got != (n, len(SEEDED), 0):
                    raise RuntimeError(f"seeding run over {n} partitions: (tiered, copied, failed) = {got}, "
                                       f"expected {(n, len(SEEDED), 0)}")
                stores[n] = (config, _store_bytes(str(Path(root) / f"store-{n}")))
                section.notes.append(f"setup: {n:,} partitions generated in {made['seconds']} s")
            targets = [(f"t{i // 1000:02d}", i % 1000) for i in range(0, large, large // COPY_PARTITIONS)]
            rounds = iter(range(1_000_000))

            def idle(n: int) -> Callable[[], Sample]:
                def case() -> Sample:
                    sample, got = timed(tier_all, stores[n][0])
                    if got != (n, 0, 0):
                        raise RuntimeError(f"{n} partitions: (tiered, copied, failed) = {got}")
                    return sample
                return case

            def copying() -> Sample:
                config = stores[large][0]
                seal_one_segment(config, targets, next(rounds))
                sample, got = timed(tier_all, config)
                if got != (large, len(targets), 0):
                    raise RuntimeError(f"with segments to copy: (tiered, copied, failed) = {got}, expected "
                                       f"{(large, len(targets), 0)}")
                return sample

            runs = run_interleaved({"small": idle(small), "large": idle(large), "copy": copying},
                                   min(ctx.repeats, ROUNDS_MAX))
        finally:
            weed.kill9()
    group = "tier run"
    base = f"{small:,} partitions, nothing to copy"
    section.add(Row(group, base, small, stores[small][1], runs["small"], units=0))
    section.add(Row(group, f"{large:,} partitions, nothing to copy", large, stores[large][1], runs["large"],
                    baseline=base, units=0,
                    target=Target("records_per_s", large / 60, f"< 60 s ({large / 60:,.0f} partitions/s)")
                    if large == 10_000 else None))
    section.add(Row(group, f"{large:,} partitions, {len(targets)} segments to copy", large, stores[large][1],
                    runs["copy"], baseline=f"{large:,} partitions, nothing to copy", units=len(targets)))
    idle_s = min(s.wall_s for s in runs["large"])
    copy_s = min(s.wall_s for s in runs["copy"])
    section.facts.update({"idle_small_s": min(s.wall_s for s in runs["small"]), "idle_large_s": idle_s,
                          "copy_run_s": copy_s, "per_copied_segment_s": (copy_s - idle_s) / len(targets)})
    section.notes.append(f"per copied segment: {(copy_s - idle_s) / len(targets) * 1000:,.1f} ms over the idle run; "
                         f"per partition with nothing to copy: {idle_s / large * 1000:,.2f} ms")
    return section
