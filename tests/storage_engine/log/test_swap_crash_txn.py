"""Producer snapshots and ``.txnindex`` files through a cleaner killed at every step of its swap (real processes,
real SIGKILL through ``STORAGE_ENGINE_CRASH_AT``), then a restart.

A compacted partition written by a transactional producer (every third transaction aborted) and an idempotent
one, in small segments, so the swap replaces segments that have a ``.txnindex`` and a producer snapshot at their
base. Whatever step the cleaner died at, the restart must resolve the swap with those files as with the others:

* rolled back: every snapshot and ``.txnindex`` of the old segments is back under its own name;
* completed: the snapshots of the replaced segments (except the one at the new segment's base) went to
  ``.deleted`` with their segments, and the new segment's ``.txnindex`` has its final name;

and in both cases ``read_committed`` returns exactly the latest committed value of every key (no aborted record
comes back, no committed one is lost), both producers can go on with their next sequence, and ``verify`` is
clean.
"""
from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys

import pytest

from storage_engine import crashpoints, layout
from storage_engine.config_file import load_config
from storage_engine.log.reads import READ_COMMITTED
from storage_engine.log.manager import LogManager
from storage_engine.record.records import SimpleRecord
from storage_engine.inspection.verify import verify_log_dirs
from tests.paths import REPO
from tests.storage_engine.helpers import present
from tests.storage_engine.kernels import split_by_process_fixture

pytestmark = pytest.mark.slow

# Once, not once per kernel implementation: the work is in child processes (see split_by_process_fixture).
kernels = split_by_process_fixture()

TOPIC = "txn"
TIMEOUT_S = 120
# Every step but swap.delete-after: no group of this data loses all its records (test_swap_crash covers it).
SWAP_STEPS = [s for s, (protocol, _) in crashpoints.STEPS.items() if protocol == "swap" and s != "swap.delete-after"]
TXN_PID, IDEM_PID = 4000, 5000


def write_config(tmp_path: pathlib.Path) -> str:
    path = tmp_path / "storage.yaml"
    path.write_text("broker:\n  log.dirs: [logs]\n  log.segment.bytes: 4096\n  log.index.interval.bytes: 256\n"
                    f"topics:\n  {TOPIC}: {{cleanup.policy: compact, min.cleanable.dirty.ratio: 0.01}}\n",
                    encoding="utf-8")
    return str(path)


def cli(cfg: str, *args: str, crash_at: str | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop(crashpoints.ENV_VAR, None)
    if crash_at:
        env[crashpoints.ENV_VAR] = crash_at
    return subprocess.run([sys.executable, "-m", "storage_engine", "--config", cfg, *args], cwd=str(REPO),
                          env=env, capture_output=True, text=True, timeout=TIMEOUT_S)


def fill(cfg: str) -> tuple[dict[bytes, bytes], dict[int, int]]:
    """Transactions of 4 records over 60 keys (every third aborted) between idempotent batches of 3 records over
    the same keys; returns the latest committed value of every key and each producer's next sequence."""
    latest: dict[bytes, bytes] = {}
    seq = {TXN_PID: 0, IDEM_PID: 0}
    with LogManager.open(load_config(cfg)) as mgr:
        log = mgr.get_or_create_log(TOPIC, 0)
        for t in range(120):
            recs = [SimpleRecord(f"k{(t * 4 + j) % 60}".encode(), f"txn{t}.{j}".encode()) for j in range(4)]
            log.append_records(recs, producer_id=TXN_PID, producer_epoch=0, base_sequence=seq[TXN_PID],
                               is_transactional=True)
            seq[TXN_PID] += len(recs)
            commit = t % 3 != 2
            log.append_end_txn(TXN_PID, 0, commit=commit)
            if commit:
                latest.update({present(r.key): present(r.value) for r in recs})
            recs = [SimpleRecord(f"k{(t * 7 + j) % 60}".encode(), f"idem{t}.{j}".encode()) for j in range(3)]
            log.append_records(recs, producer_id=IDEM_PID, producer_epoch=0, base_sequence=seq[IDEM_PID])
            seq[IDEM_PID] += len(recs)
            latest.update({present(r.key): present(r.value) for r in recs})
    return latest, seq


def names(part: pathlib.Path) -> set[str]:
    return set(os.listdir(part))


def with_suffix(files: set[str], suffix: str) -> set[int]:
    return {layout.offset_from_filename(n) for n in files if n.endswith(suffix) and layout.is_offset_named(n)}


@pytest.mark.parametrize("step", SWAP_STEPS)
def test_snapshots_and_txn_indexes_follow_a_swap_killed_at_each_step(tmp_path, step):
    cfg = write_config(tmp_path)
    expected, seq = fill(cfg)
    part = pathlib.Path(load_config(cfg).log_dirs[0]) / f"{TOPIC}-0"
    before = names(part)
    bases_before = with_suffix(before, layout.LOG_SUFFIX)
    snaps_before = with_suffix(before, layout.SNAPSHOT_SUFFIX)
    txn_before = with_suffix(before, layout.TXN_INDEX_SUFFIX)
    assert len(bases_before) > 3 and len(snaps_before) > 3 and txn_before, sorted(before)

    compact = cli(cfg, "compact", "--topic", TOPIC, crash_at=step)
    assert compact.returncode == -signal.SIGKILL, (compact.returncode, compact.stderr)

    with LogManager.open(load_config(cfg)) as mgr:   # a restart: the load resolves the dead cleaner's swap
        log = mgr.get_log(TOPIC, 0)
        assert log is not None
        found = {r.key: r.value for r in log.read_records(isolation_level=READ_COMMITTED)}
        assert found == expected
        bases_after = {s.base_offset for s in log.segments}
        after = names(part)
        assert not [n for n in after if n.endswith((layout.SWAP_SUFFIX, layout.CLEANED_SUFFIX))], sorted(after)
        snaps_after = with_suffix(after, layout.SNAPSHOT_SUFFIX)
        deleted_snaps = with_suffix(after, layout.SNAPSHOT_SUFFIX + layout.DELETED_SUFFIX)
        replaced = bases_before - bases_after
        if not replaced:   # rolled back: every old snapshot and transaction index is back under its name
            assert snaps_before <= snaps_after, (step, sorted(snaps_before - snaps_after))
            assert txn_before <= with_suffix(after, layout.TXN_INDEX_SUFFIX), step
        else:              # completed: the snapshots of the replaced segments went to .deleted with them
            assert not replaced & snaps_after, (step, sorted(replaced & snaps_after))
            assert replaced & snaps_before <= deleted_snaps, (step, sorted((replaced & snaps_before) - deleted_snaps))
        # Every .txnindex left is a segment's; every aborted transaction is still indexed for read_committed.
        assert with_suffix(after, layout.TXN_INDEX_SUFFIX) <= bases_after
        # Both producers go on where they were (the state survived in snapshots and the kept batches).
        log.append_records([SimpleRecord(b"k0", b"next-txn")], producer_id=TXN_PID, producer_epoch=0,
                           base_sequence=seq[TXN_PID], is_transactional=True)
        log.append_end_txn(TXN_PID, 0, commit=True)
        log.append_records([SimpleRecord(b"k1", b"next-idem")], producer_id=IDEM_PID, producer_epoch=0,
                           base_sequence=seq[IDEM_PID])
    report = verify_log_dirs(load_config(cfg))
    assert not report["damaged"], report["problems"]
    res = cli(cfg, "compact", "--topic", TOPIC)   # and the next compaction completes normally
    assert res.returncode == 0, res.stderr
    with LogManager.open(load_config(cfg)) as mgr:
        log = mgr.get_log(TOPIC, 0)
        assert log is not None
        found = {r.key: r.value for r in log.read_records(isolation_level=READ_COMMITTED)}
    assert found == {**expected, b"k0": b"next-txn", b"k1": b"next-idem"}
