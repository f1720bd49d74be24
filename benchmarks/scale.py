"""scale: the engine side of maintenance over a store of many partitions (10,000; 500 with ``--quick``).

Setup (timed only as a note): ``include.scale_store.generate``: two log dirs, every partition with 4 sealed
segments and an active one (68 records of ~100 B spread over the 3 days before ``now``), written through the
engine and closed cleanly (checkpoints and the clean-shutdown marker). Every topic is ``compact,delete`` with
``retention.ms`` = 1 day, so retention as of ``now`` deletes 3 of the 5 segments of every partition and every
partition is a compaction candidate. Each group compares what a DAG task runs with the least file-system work
the same decision needs, in the same run (a row's ratio is its time over the baseline's, inverted: 0.25x means
4 times the baseline's time):

* **list**: ``plan_batches`` (the fan-out of every maintenance DAG: folder names, batches of 500) vs
  ``os.scandir`` of the log dirs;
* **retention plan**: ``retention_batch(dry_run=True)`` over every batch (what the DAG's retention decides,
  opening each batch's partitions) and ``status.plan`` (the Storage view's read-only plan: retention for every
  partition and the compaction ranking) vs the raw reads the decision needs: list each partition folder,
  ``stat`` every file, read the last entry of every ``.timeindex``;
* **retention**: ``retention_batch`` over every batch, deleting, on a fresh copy of the store each round (the
  copy is not timed) vs renaming the same files to ``.deleted`` and fsyncing each partition folder once, on
  another copy;
* **compaction selection**: ``compaction_plan`` (the compaction DAG's plan task) vs the raw reads the dirty
  ratio needs: the cleaner-offset checkpoint of each dir and a ``stat`` of every ``.log``.

Work measures: records = partitions; MB = the store's bytes (the same in every row, so the ratio is a time
ratio). No target: the figures show what the DAGs' work costs at 10,000 partitions (ARCHITECTURE.md section 9).
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any, Callable

from storage_engine import layout
from storage_engine.config import StorageConfig
from storage_engine.config_file import config_from_mapping
from storage_engine.jobs import batches, compaction
from storage_engine.inspection import plans

from .harness import Context, Row, Sample, Section, run_interleaved, scratch_dir, timed

NAME = "scale"
PARTITIONS_FULL = 10_000
PARTITIONS_QUICK = 500
SEALED_SEGMENTS = 4
DAY_MS = 86_400_000
NOW_MS = 1_700_006_400_000          # a 5-minute mark: records end here
RETENTION_ROUNDS_MAX = 2            # each needs two fresh copies of the store


def _config(root: str) -> StorageConfig:
    from include.scale_store import _config_data
    data = _config_data(Path(root))
    data["broker"]["log.cleanup.policy"] = "compact,delete"
    return config_from_mapping(data)


def _store_bytes(root: str) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(root):
        total += sum(os.path.getsize(os.path.join(dirpath, f)) for f in files)
    return total


def _partition_dirs(config: StorageConfig) -> list[str]:
    return [os.path.join(d, name) for d in config.log_dirs for name, _tp in layout.partition_dirs(d)]


# -- baselines -------------------------------------------------------------------------------------------------

def raw_list(config: StorageConfig) -> int:
    return sum(1 for d in config.log_dirs for e in os.scandir(d) if e.is_dir() and "-" in e.name)


def raw_retention_reads(config: StorageConfig) -> int:
    """List every partition folder, stat every file, read the last 12-byte entry of every ``.timeindex``."""
    reads = 0
    for d in config.log_dirs:
        for e in os.scandir(d):
            if not e.is_dir() or "-" not in e.name:
                continue
            for f in os.scandir(e.path):
                st = f.stat()
                if f.name.endswith(layout.TIME_INDEX_SUFFIX) and st.st_size >= 12:
                    fd = os.open(f.path, os.O_RDONLY)
                    try:
                        reads += len(os.pread(fd, 12, st.st_size - 12))
                    finally:
                        os.close(fd)
    return reads


def raw_compaction_reads(config: StorageConfig) -> int:
    sizes = 0
    for d in config.log_dirs:
        try:
            with open(os.path.join(d, layout.CLEANER_OFFSET_CHECKPOINT), "rb") as f:
                f.read()
        except FileNotFoundError:
            pass
        for e in os.scandir(d):
            if e.is_dir() and "-" in e.name:
                sizes += sum(f.stat().st_size for f in os.scandir(e.path) if f.name.endswith(layout.LOG_SUFFIX))
    return sizes


def raw_delete(deletions: list[tuple[str, list[int]]]) -> int:
    """Rename each listed segment's files to ``.deleted``, fsync each partition folder once."""
    renamed = 0
    for pdir, bases in deletions:
        for base in bases:
            for suffix in (layout.LOG_SUFFIX, layout.INDEX_SUFFIX, layout.TIME_INDEX_SUFFIX):
                path = layout.segment_file(pdir, base, suffix)
                if os.path.exists(path):
                    os.rename(path, path + layout.DELETED_SUFFIX)
                    renamed += 1
        fd = os.open(pdir, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    return renamed


# -- engine ----------------------------------------------------------------------------------------------------

def engine_retention(config: StorageConfig, *, dry_run: bool) -> tuple[int, int]:
    """(segments deleted, partitions failed) of ``retention_batch`` over every batch of ``plan_batches``."""
    deleted = failed = 0
    for batch in batches.plan_batches(config):
        result = batches.retention_batch(config, batch["partitions"], NOW_MS, dry_run=dry_run)
        deleted += sum(r["segments_deleted"] for r in result["results"])
        failed += len(result["failures"]) + len(result["errors"])
    return deleted, failed


def _planned_deletions(config: StorageConfig) -> list[tuple[str, list[int]]]:
    out = []
    for batch in batches.plan_batches(config):
        result = batches.retention_batch(config, batch["partitions"], NOW_MS, dry_run=True)
        for r in result["results"]:
            pdir = os.path.join(r["log_dir"], layout.partition_dir_name(r["topic"], r["partition"]))
            out.append((pdir, [s["base_offset"] for s in r["segments"]]))
    return out


def run(ctx: Context) -> Section:
    partitions = PARTITIONS_QUICK if ctx.quick else PARTITIONS_FULL
    section = Section(NAME, f"maintenance over {partitions:,} partitions vs the raw file-system work of each step",
                      {"partitions": partitions, "segments_per_partition": SEALED_SEGMENTS + 1,
                       "log_dirs": 2, "batch_size": 500, "rounds": ctx.repeats,
                       "retention_rounds": min(ctx.repeats, RETENTION_ROUNDS_MAX)})
    from include.scale_store import generate
    with scratch_dir(ctx, "scale") as root:
        store = os.path.join(root, "store")
        made = generate(Path(store), partitions, SEALED_SEGMENTS, NOW_MS)
        config = _config(store)
        size = _store_bytes(store)
        section.notes.append(f"setup: generated {partitions:,} partitions ({made['records']:,} records, "
                             f"{size / 1e6:,.1f} MB, {len(_partition_dirs(config)) * (SEALED_SEGMENTS + 1):,} "
                             f"segments) in {made['seconds']} s")
        expected_deletions = partitions * (SEALED_SEGMENTS - 1)
        checks: dict[str, object] = {}

        def case(name: str, fn: Callable[[], Any], check: Callable[[Any], str | None]) -> Callable[[], Sample]:
            def run_case() -> Sample:
                sample, value = timed(fn)
                problem = check(value)
                if problem:
                    raise RuntimeError(f"{name}: {problem}")
                return sample
            return run_case

        def planned(value: Any) -> str | None:
            return None if value == (expected_deletions, 0) else \
                f"(segments to delete, partitions failed) = {value}, expected {(expected_deletions, 0)}"

        def plan_ok(value: Any) -> str | None:
            got = (value["retention"]["segments_deleted"], value["compaction"]["eligible"])
            return None if got == (expected_deletions, partitions) else \
                f"(segments to delete, eligible) = {got}, expected {(expected_deletions, partitions)}"

        def selection_ok(value: Any) -> str | None:
            return None if len(value["selected"]) == partitions and not value["unreadable"] else \
                f"selected {len(value['selected'])} of {partitions}, unreadable {len(value['unreadable'])}"

        read_only = {
            "list raw": case("list raw", lambda: raw_list(config),
                             lambda n: None if n == partitions else f"listed {n}"),
            "list engine": case("plan_batches", lambda: batches.plan_batches(config),
                                lambda b: None if sum(len(x["partitions"]) for x in b) == partitions
                                else "wrong partition count"),
            "plan raw": case("retention reads", lambda: raw_retention_reads(config),
                             lambda n: None if n > 0 else "read nothing"),
            "plan dry run": case("retention dry run", lambda: engine_retention(config, dry_run=True), planned),
            "plan status": case("status.plan", lambda: plans.plan(config, NOW_MS, limit=partitions), plan_ok),
            "select raw": case("compaction reads", lambda: raw_compaction_reads(config),
                               lambda n: None if n > 0 else "read nothing"),
            "select engine": case("compaction_plan",
                                  lambda: compaction.compaction_plan(config, NOW_MS, strategy="local"),
                                  selection_ok),
        }
        runs = run_interleaved(read_only, ctx.repeats)
        deletions = _planned_deletions(config)
        retention_runs: dict[str, list[Sample]] = {"raw": [], "engine": []}
        for _ in range(min(ctx.repeats, RETENTION_ROUNDS_MAX)):
            for which in ("raw", "engine"):
                copy = os.path.join(root, f"copy-{which}")
                shutil.copytree(store, copy, symlinks=True)
                copied = _config(copy)
                if which == "raw":
                    moved = [(pdir.replace(store, copy, 1), bases) for pdir, bases in deletions]
                    sample, renamed = timed(raw_delete, moved)
                    checks["raw renamed"] = renamed
                else:
                    sample, value = timed(lambda: engine_retention(copied, dry_run=False))
                    problem = planned(value)
                    if problem:
                        raise RuntimeError(f"retention: {problem}")
                retention_runs[which].append(sample)
                shutil.rmtree(copy)

    def add(group: str, name: str, samples: list[Sample], baseline: str | None = None) -> None:
        section.add(Row(group, name, partitions, size, samples, baseline=baseline, units=partitions))

    add("list", "os.scandir of the log dirs", runs["list raw"])
    add("list", "plan_batches (every DAG's fan-out)", runs["list engine"], "os.scandir of the log dirs")
    base = "listdir + stat every file + last .timeindex entry"
    add("retention plan", base, runs["plan raw"])
    add("retention plan", "retention_batch dry run, every batch", runs["plan dry run"], base)
    add("retention plan", "status.plan (all partitions + compaction ranking)", runs["plan status"], base)
    base = "rename the same files to .deleted + fsync dir"
    add("retention", base, retention_runs["raw"])
    add("retention", "retention_batch, every batch", retention_runs["engine"], base)
    base = "read cleaner checkpoints + stat every .log"
    add("compaction selection", base, runs["select raw"])
    add("compaction selection", "compaction_plan (strategy local)", runs["select engine"], base)
    section.notes.append(f"retention deletes {expected_deletions:,} segments per round "
                         f"({checks.get('raw renamed', 0):,} files renamed by the baseline)")
    return section
