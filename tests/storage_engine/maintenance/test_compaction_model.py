"""Model-based test of compaction: random appends, rolls, cleaning rounds, retention and time steps against a
plain dict of everything ever acknowledged.

After every step the log read from its start must agree with the model:

* offsets strictly increase and every record read is the one acknowledged at that offset (never moved, never
  altered);
* every key whose latest live record holds a value reads that value last, at its offset; a key whose latest
  live record is a tombstone reads that tombstone last or not at all; a key with no live record is absent;
* nothing at or above the cleaner checkpoint (the dirty section) is ever removed, and below it every key
  appears at most once;
* a tombstone that is the latest for its key disappears only in a round run at least ``delete.retention.ms``
  after the first round that followed its append (the horizon counts from cleaning time; the tombstones are
  written with timestamps far in the past to catch a horizon taken from the record);
* reopening the partition after an unclean shutdown reads the same records.
"""
from __future__ import annotations

import shutil
import tempfile
from typing import cast

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test

from storage_engine.log.loader import open_log
from storage_engine.clock import ManualClock
from storage_engine.maintenance import cleaner_manager, retention
from storage_engine.record import codecs
from storage_engine.maintenance.cleaner import Cleaner
from storage_engine.config import CleanerConfig, LogConfig
from storage_engine.errors import InvalidRecordForTopicError
from storage_engine.log.log import Log
from storage_engine.record.records import SimpleRecord

pytestmark = pytest.mark.unit

T0 = 1_700_000_000_000
RETENTION = 1_000            # delete.retention.ms
KEYS = [f"k{i}".encode() for i in range(6)]
TOPIC = "t"


def map_config(max_entries: int) -> CleanerConfig:
    """A cleaner whose key map takes at most ``max_entries`` keys (Kafka's sizing: 24 bytes a slot)."""
    slots = int(max_entries / 0.9) + 1
    while int(slots * 0.9) > max_entries:
        slots -= 1
    cc = CleanerConfig(dedupe_buffer_size=slots * 24, io_buffer_load_factor=0.9)
    assert Cleaner(cc).new_offset_map().max_entries == max_entries
    return cc


records = st.lists(st.tuples(st.sampled_from(KEYS), st.one_of(st.none(), st.binary(min_size=0, max_size=40))),
                   min_size=1, max_size=4)


class CompactionModel(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="compaction-model-")
        self._log: Log | None = None

    @property
    def log(self) -> Log:
        assert self._log is not None, "the initialize rule opens the log first"
        return self._log

    @initialize(map_entries=st.sampled_from([1, 2, 4, 100_000]), segment_bytes=st.sampled_from([300, 600, 2000]),
                policy=st.sampled_from(["compact", "compact,delete"]))
    def open_log(self, map_entries, segment_bytes, policy):
        overrides = {"cleanup.policy": policy, "segment.bytes": segment_bytes, "delete.retention.ms": RETENTION}
        if policy == "compact,delete":
            overrides["retention.ms"] = 20 * RETENTION
        self.cfg = LogConfig().with_overrides(overrides)
        self.cc = map_config(map_entries)
        self.now = T0
        self._log, _ = open_log(self.dir, TOPIC, 0, self.cfg, clock=ManualClock(self.now), exclusive=True, create=True)
        self.history: dict[int, tuple[bytes, bytes | None]] = {}   # every acknowledged record
        self.appended_at: dict[int, int] = {}
        self.first_round_after: dict[int, int] = {}                # offset -> time of the first round after it
        self.start = 0
        self.rounds = 0

    def teardown(self):
        if self._log is not None and self._log.lock.is_open:
            self._log.close(clean=False)
        shutil.rmtree(self.dir, ignore_errors=True)

    # -- operations -------------------------------------------------------------------------------------------
    @rule(batches=st.lists(records, min_size=1, max_size=3), codec=st.sampled_from([codecs.NONE, codecs.GZIP,
                                                                                 codecs.ZSTD]))
    def append(self, batches, codec):
        for batch in batches:
            self._append(batch, codec)

    @rule(keys=st.lists(st.sampled_from(KEYS), min_size=1, max_size=3, unique=True))
    def delete_keys(self, keys):
        self._append([(k, None) for k in keys], codecs.NONE)

    def _append(self, batch, codec):
        recs = [SimpleRecord(k, v, self.now - 10 * RETENTION if v is None else self.now) for k, v in batch]
        cast(ManualClock, self.log.clock).set(self.now)
        info = self.log.append_records(recs, codec=codec)
        assert info.first_offset == len(self.history)
        for i, (k, v) in enumerate(batch):
            self.history[info.first_offset + i] = (k, v)
            self.appended_at[info.first_offset + i] = self.now

    @rule()
    def append_keyless(self):
        leo = self.log.log_end_offset
        with pytest.raises(InvalidRecordForTopicError):
            cast(ManualClock, self.log.clock).set(self.now)
            self.log.append_records([SimpleRecord(None, b"no key", self.now)])
        assert self.log.log_end_offset == leo

    @rule()
    def roll(self):
        cast(ManualClock, self.log.clock).set(self.now)
        self.log.roll()

    @rule(ms=st.integers(min_value=1, max_value=2 * RETENTION))
    def tick(self, ms):
        self.now += ms

    @rule()
    def compact(self):
        log = self.log
        latest = self.latest_live()
        before = {r.offset: r for r in log.read_records()}
        checkpoint = cleaner_manager.read_cleaner_checkpoints(log.log_dir).get((TOPIC, 0))
        ltc = cleaner_manager.log_to_clean(log, checkpoint, self.now)
        res = Cleaner(self.cc).clean(ltc, self.now)
        self.rounds += 1
        for off in self.history:
            self.first_round_after.setdefault(off, self.now)
        assert res.groups_abandoned == 0
        assert res.end_offset >= ltc.first_dirty_offset
        if res.checkpoint_written:
            assert res.end_offset <= ltc.first_uncleanable_offset
        # (a round may raise the log start past a first group whose records all went; the model's start does
        # not move, so every latest value must still be read)
        assert log.log_start_offset >= self.start
        after = {r.offset for r in log.read_records()}
        for off, rec in before.items():
            if off in after or rec.value is not None or latest.get(rec.key) != off:
                continue
            # the key's latest record, a tombstone, went in this round: its horizon must have passed
            assert self.now >= self.first_round_after[off] + RETENTION, (
                f"tombstone at {off} removed at {self.now}, first round after it at {self.first_round_after[off]}")
        self.check()

    @rule(batch=records, ms=st.integers(min_value=0, max_value=2 * RETENTION))
    def append_roll_compact(self, batch, ms):
        """The common cycle in one step: new data, sealed, cleaned (so later rounds follow old ones)."""
        self.now += ms
        self._append(batch, codecs.NONE)
        self.roll()
        self.compact()

    @rule(frac=st.floats(min_value=0, max_value=1))
    def delete_records(self, frac):
        leo = self.log.log_end_offset
        target = self.start + int(frac * (leo - self.start))
        cast(ManualClock, self.log.clock).set(self.now)
        self.log.delete_records(target)
        self.start = max(self.start, target)
        assert self.log.log_start_offset >= self.start

    @rule()
    def run_retention(self):
        before = self.log.log_start_offset
        result = retention.run(self.log, self.now)
        assert result["log_start_offset"] >= before
        self.sync_start()

    @rule()
    def reopen_after_crash(self):
        got = self.read()
        self.log.close(clean=False)
        self._log, _ = open_log(self.dir, TOPIC, 0, self.cfg, clock=ManualClock(self.now), exclusive=True,
                               had_clean_shutdown=False, recovery_point_checkpoint=0,
                               log_start_offset_checkpoint=self.start)
        assert self.read() == got
        assert self.log.log_end_offset == len(self.history)

    # -- the model --------------------------------------------------------------------------------------------
    def sync_start(self):
        start = self.log.log_start_offset
        assert start >= self.start
        self.start = start

    def read(self) -> list[tuple[int, bytes | None, bytes | None]]:
        return [(r.offset, r.key, r.value) for r in self.log.read_records()]

    def latest_live(self) -> dict[bytes | None, int]:
        latest: dict[bytes | None, int] = {}
        for off in sorted(self.history):
            if off >= self.start:
                latest[self.history[off][0]] = off
        return latest

    @invariant()
    def check(self):
        if self._log is None:
            return
        log = self.log
        got = self.read()
        offsets = [o for o, _, _ in got]
        assert offsets == sorted(set(offsets)), "offsets must strictly increase"
        assert log.log_end_offset == len(self.history)
        assert all(o >= self.start for o in offsets)
        for o, k, v in got:
            assert self.history[o] == (k, v), f"record at {o} changed"
        last_read: dict[bytes | None, tuple[int, bytes | None]] = {}
        for o, k, v in got:
            last_read[k] = (o, v)
        for k, off in self.latest_live().items():
            _, value = self.history[off]
            if value is not None:
                assert last_read.get(k) == (off, value), f"key {k!r} must read its latest value at {off}"
            else:
                assert last_read.get(k) in (None, (off, None)), f"deleted key {k!r} reads {last_read.get(k)}"
        live_keys = {self.history[o][0] for o in self.history if o >= self.start}
        assert set(last_read) <= live_keys
        # the dirty section (from the checkpoint) is untouched; the clean section holds each key at most once
        checkpoint = cleaner_manager.read_cleaner_checkpoints(log.log_dir).get((TOPIC, 0))
        dirty_from = max(self.start, checkpoint if checkpoint is not None else self.start)
        present = set(offsets)
        missing = [o for o in self.history if o >= dirty_from and o not in present]
        assert not missing, f"records {missing} at or above the checkpoint {dirty_from} were removed"
        clean_keys = [k for o, k, _ in got if o < dirty_from]
        assert len(clean_keys) == len(set(clean_keys)), "the clean section must hold each key at most once"


MODEL_SETTINGS = settings(max_examples=80, stateful_step_count=40, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


def test_compaction_model():
    # A plain test (not the machine's unittest TestCase) so that the package's fixture runs it once per kernel
    # implementation.
    run_state_machine_as_test(CompactionModel, settings=MODEL_SETTINGS)
