"""A tiering run costs what its partitions cost, not partitions x the store: its batch parses the log dir's
checkpoint files once (however many ``__remote_log_metadata`` partitions its view adopts), reads the metadata topic's
partitions once when it loads its view and then, per tiered partition, only the metadata partition that holds that
partition's records, and leaves the checkpoint files as they are when nothing changed. Counted against a real
``weed``, never timed (the times are ``python -m benchmarks --only tiering_scale``)."""
from __future__ import annotations

import os
from collections import Counter

import pytest

from storage_engine import layout
from storage_engine.config_file import load_config
from storage_engine.jobs import tiering
from storage_engine.log import dir_checkpoints
from storage_engine.log import topic_id as topic_ids
from storage_engine.log.manager import LogManager
from storage_engine.tiered import remote_log
from storage_engine.tiered.metadata import metadata_partition
from tests.tiered.tier_helpers import TOPIC, fill, write_config

pytestmark = [pytest.mark.tiered]
PARTITIONS = 8
METADATA_PARTITIONS = 3      # write_config's rlmm.config.remote.log.metadata.topic.num.partitions


def test_an_idle_batch_parses_the_checkpoints_once_and_reads_one_metadata_partition_per_partition(
        tmp_path, weed, bucket, monkeypatch):
    cfg = write_config(tmp_path, weed, bucket)
    for p in range(PARTITIONS):
        fill(cfg, 40 if p == 0 else 2, partition=p)        # partition 0 has sealed segments to copy
    first = tiering.tier(load_config(cfg))
    assert first["failures"] == [] and first["copied_segments"] >= 1, "the metadata topic exists, with records"

    adopted: Counter[tuple[str, int]] = Counter()
    metadata_reads: Counter[int] = Counter()
    parses = Counter[str]()
    real_adopt, real_get_log = LogManager.adopt, LogManager.get_log
    real_parse = dir_checkpoints.parse_offset_checkpoint

    def adopt(self, topic, partition, **kw):
        adopted[(topic, partition)] += 1
        return real_adopt(self, topic, partition, **kw)

    def get_log(self, topic, partition):
        if topic == remote_log.TOPIC:
            metadata_reads[partition] += 1
        return real_get_log(self, topic, partition)

    def parse(data, path=None):
        parses[os.path.basename(path or "")] += 1
        return real_parse(data, path)

    monkeypatch.setattr(LogManager, "adopt", adopt)
    monkeypatch.setattr(LogManager, "get_log", get_log)
    monkeypatch.setattr(dir_checkpoints, "parse_offset_checkpoint", parse)
    log_dir = load_config(cfg).log_dirs[0]
    files = [os.path.join(log_dir, n) for n in (layout.RECOVERY_POINT_CHECKPOINT, layout.LOG_START_OFFSET_CHECKPOINT)]
    before = [(os.stat(f).st_ino, os.stat(f).st_mtime_ns) for f in files]

    idle = tiering.tier(load_config(cfg))

    assert idle["failures"] == [] and idle["errors"] == [] and idle["copied_segments"] == 0
    assert sum(1 for r in idle["partitions"] if r["tiered"]) == PARTITIONS
    assert adopted == Counter({(remote_log.TOPIC, p): 1 for p in range(METADATA_PARTITIONS)}), \
        "the view adopts each metadata partition once for the batch"
    assert parses == Counter({layout.RECOVERY_POINT_CHECKPOINT: 1, layout.LOG_START_OFFSET_CHECKPOINT: 1}), \
        "each checkpoint file parsed once for the batch: at open, not again per adopted partition or at close"
    tid = topic_ids.read_topic_id(os.path.join(log_dir, f"{TOPIC}-0"))
    assert tid is not None
    holding = Counter(metadata_partition(tid, p, METADATA_PARTITIONS) for p in range(PARTITIONS))
    assert metadata_reads == Counter(range(METADATA_PARTITIONS)) + holding, \
        "each metadata partition read once by the view's load, then one per tiered partition: the one holding it"
    assert [(os.stat(f).st_ino, os.stat(f).st_mtime_ns) for f in files] == before, \
        "nothing changed: the checkpoint files are not rewritten"
