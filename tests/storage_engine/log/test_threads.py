"""Many threads on one manager, with another process beside them: every acknowledged record survives, once, at the
offset it was acknowledged at, and no reader ever fails (Kafka's ``UnifiedLog`` serves appends, reads, rolls,
retention and cleaning from many threads at once; here they also share the partition with a second process)."""
from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest

import storage_engine
from storage_engine.config import CleanerConfig
from storage_engine.maintenance import cleaner_manager
from storage_engine.maintenance.cleaner import Cleaner
from tests.paths import REPO
from tests.storage_engine.helpers import get_log, present

pytestmark = pytest.mark.slow

WRITERS, READERS = 4, 2
APPENDS_PER_WRITER, RECORDS_PER_APPEND = 250, 4
TOPIC = "events"


def _config(tmp_path):
    path = tmp_path / "storage.yaml"
    path.write_text(
        f"broker:\n  log.dirs: [{tmp_path / 'logs'}]\n  log.segment.bytes: 8192\n  log.index.interval.bytes: 512\n"
        f"topics:\n  {TOPIC}: {{cleanup.policy: compact, min.cleanable.dirty.ratio: 0.01, "
        "file.delete.delay.ms: 0}\n")
    return path


def _value(key: bytes) -> bytes:
    return key + b"=" + key[::-1]


def _maintenance_process(config_path, stop_file):
    """A second process that checkpoints, flushes, runs retention and purges the same log dir in a loop."""
    code = (
        "import os, sys, storage_engine\n"
        "cfg = storage_engine.load_config(sys.argv[1])\n"
        "rounds = 0\n"
        "while not os.path.exists(sys.argv[2]):\n"
        "    storage_engine.checkpoint(cfg)\n"
        "    storage_engine.flush(cfg, due_only=False)\n"
        "    storage_engine.retention_all(cfg)\n"
        "    storage_engine.purge(cfg)\n"
        "    rounds += 1\n"
        "print(rounds)\n")
    return subprocess.Popen([sys.executable, "-c", code, str(config_path), str(stop_file)], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_writers_readers_and_a_cleaner_share_one_manager_beside_a_maintenance_process(tmp_path):
    config_path = _config(tmp_path)
    config = storage_engine.load_config(str(config_path))
    stop_file = tmp_path / "stop"
    acked: list[tuple[int, bytes]] = []     # (offset, key) of every acknowledged record
    acked_lock = threading.Lock()
    errors: list[str] = []
    writers_done = threading.Event()

    with storage_engine.LogManager.open(config) as mgr:
        mgr.get_or_create_log(TOPIC, 0)
        maintainer = _maintenance_process(config_path, stop_file)

        def writer(w: int) -> None:
            try:
                for n in range(APPENDS_PER_WRITER):
                    keys = [f"w{w}-{n}-{i}".encode() for i in range(RECORDS_PER_APPEND)]
                    log = mgr.get_or_create_log(TOPIC, 0)
                    info = log.append_records([storage_engine.SimpleRecord(k, _value(k)) for k in keys])
                    with acked_lock:
                        acked.extend((info.first_offset + i, k) for i, k in enumerate(keys))
            except Exception as exc:  # noqa: BLE001 - every failure is the test's finding
                errors.append(f"writer {w}: {type(exc).__name__}: {exc}")

        def reader(r: int) -> None:
            rounds = 0
            try:
                while not writers_done.is_set() or rounds < 2:
                    log = mgr.get_log(TOPIC, 0)
                    assert log is not None
                    last = -1
                    for rec in log.read_records(0):
                        if rec.offset <= last:
                            errors.append(f"reader {r}: offset {rec.offset} after {last}")
                        if rec.value != _value(present(rec.key)):
                            errors.append(f"reader {r}: offset {rec.offset} holds {rec.key!r}={rec.value!r}")
                        last = rec.offset
                    rounds += 1
            except Exception as exc:  # noqa: BLE001
                errors.append(f"reader {r}: {type(exc).__name__}: {exc}")

        def cleaner() -> None:
            checkpoint = None
            rounds = 0
            try:
                while not writers_done.is_set() or rounds < 1:
                    log = mgr.get_log(TOPIC, 0)
                    assert log is not None
                    ltc = cleaner_manager.log_to_clean(log, checkpoint, int(time.time() * 1000))
                    if ltc.first_uncleanable_offset > ltc.first_dirty_offset:
                        result = Cleaner(CleanerConfig()).clean(ltc, int(time.time() * 1000))
                        checkpoint = result.end_offset
                        rounds += 1
                    else:
                        time.sleep(0.01)
            except Exception as exc:  # noqa: BLE001
                errors.append(f"cleaner: {type(exc).__name__}: {exc}")

        threads = ([threading.Thread(target=writer, args=(w,)) for w in range(WRITERS)]
                   + [threading.Thread(target=reader, args=(r,)) for r in range(READERS)]
                   + [threading.Thread(target=cleaner)])
        for t in threads:
            t.start()
        for t in threads[:WRITERS]:
            t.join()
        writers_done.set()
        for t in threads[WRITERS:]:
            t.join()
        stop_file.write_text("")
        out, err = maintainer.communicate(timeout=120)
        assert maintainer.returncode == 0, err
        assert int(out.strip()) > 0, "the maintenance process never completed a round"
        log = mgr.get_log(TOPIC, 0)
        assert log is not None
        segments = len(log.segments)

    assert not errors, "\n".join(errors[:20])
    offsets = [o for o, _ in acked]
    assert len(offsets) == WRITERS * APPENDS_PER_WRITER * RECORDS_PER_APPEND
    assert len(set(offsets)) == len(offsets), "an offset was acknowledged twice"
    assert segments > 10, "the log never rolled enough for rolls, cleaning and reads to meet"

    # Reopened from disk: every acknowledged record at its offset, nothing else, and the audit finds no damage.
    with storage_engine.LogManager.open(config) as mgr:
        stored = {rec.offset: rec.key for rec in get_log(mgr, TOPIC, 0).read_records(0)}
    expected = dict(acked)
    lost = sorted(set(expected) - set(stored))
    wrong = sorted(o for o in expected if o in stored and stored[o] != expected[o])
    extra = sorted(set(stored) - set(expected))
    assert not lost and not wrong and not extra, (lost[:10], wrong[:10], extra[:10])
    report = storage_engine.verify_log_dirs(config)
    assert not report["damaged"], report["problems"]
