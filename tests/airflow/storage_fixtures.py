"""Real log dirs for the Airflow tests: a storage YAML in a temp dir and data written through the engine."""
from __future__ import annotations

import contextlib
import datetime
import os
import pathlib
import subprocess
import sys
import textwrap

import yaml

from storage_engine.clock import ManualClock
from storage_engine.config import StorageConfig
from storage_engine.config_file import load_config
from storage_engine.log.manager import LogManager
from storage_engine.record.records import SimpleRecord
from tests.typed import present

MINUTE_MS = 60_000
HOUR_MS = 60 * MINUTE_MS

# The end of the data interval the tests run: "now" for every maintenance task. A five-minute boundary, so
# dag.test(logical_date=T) gets the interval [T - 5 min, T) from the DAGs' */5 cron timetables.
T = datetime.datetime(2026, 1, 1, 12, 0, tzinfo=datetime.timezone.utc)
T_MS = int(T.timestamp()) * 1000

DEFAULT_TOPICS = {
    "events": {"retention.ms": HOUR_MS, "segment.bytes": 1024},
    "audit": {"retention.ms": -1, "segment.bytes": 1024},
}


class StorageFixture:
    """A storage config with two log dirs under ``root``; helpers to write records and read the files back."""

    def __init__(self, root: pathlib.Path, topics: dict | None = None, **broker):
        self.root = root
        root.mkdir(parents=True)
        self.config_path = root / "storage.yaml"
        self.log_dirs = [root / "logs" / "dir-a", root / "logs" / "dir-b"]
        self.write_config(topics, **broker)

    def write_config(self, topics: dict | None = None, hosts: dict | None = None, **broker) -> None:
        """``hosts``: {storage host: [log dir, ...]} (the config's ``hosts:``), none when None."""
        data = {
            "broker": {"log.dirs": [str(d.relative_to(self.root)) for d in self.log_dirs],
                       "log.segment.bytes": 1024,
                       "log.segment.delete.delay.ms": MINUTE_MS,
                       **{k.replace("_", "."): v for k, v in broker.items()}},
            "topics": DEFAULT_TOPICS if topics is None else topics,
        }
        if hosts is not None:
            data["hosts"] = {host: [str(d) for d in dirs] for host, dirs in hosts.items()}
        self.config_path.write_text(yaml.safe_dump(data, sort_keys=False))

    def config(self) -> StorageConfig:
        return load_config(self.config_path)

    # -- writing ------------------------------------------------------------------------------------------------
    def produce(self, topic: str, partition: int, timestamps_ms, value_size: int = 50) -> None:
        """Append one record per timestamp (one batch each) and close the logs cleanly."""
        with LogManager.open(self.config(), clock=ManualClock(T_MS)) as mgr:
            log = mgr.get_or_create_log(topic, partition)
            for i, ts in enumerate(timestamps_ms):
                assert isinstance(log.clock, ManualClock)   # the clock the test opened the store with
                log.clock.set(ts)
                log.append_records([SimpleRecord(f"k{i}".encode(), b"v" * value_size, ts)])

    def produce_then_crash(self, topic: str, partition: int, timestamps_ms, value_size: int = 50) -> None:
        """Append records in a child process that dies without closing the logs (no flush, no checkpoint)."""
        script = textwrap.dedent(f"""
            import os
            from storage_engine.clock import ManualClock
            from storage_engine.config_file import load_config
            from storage_engine.log.manager import LogManager
            from storage_engine.record.records import SimpleRecord
            mgr = LogManager.open(load_config({str(self.config_path)!r}), clock=ManualClock({T_MS}))
            log = mgr.get_or_create_log({topic!r}, {partition})
            for i, ts in enumerate({list(timestamps_ms)!r}):
                mgr.clock.set(ts)
                log.append_records([SimpleRecord(b"c%d" % i, b"w" * {value_size}, ts)])
            os._exit(0)
        """)
        subprocess.run([sys.executable, "-c", script], check=True, env=os.environ.copy())

    @contextlib.contextmanager
    def live_writer(self, appends: dict, value_size: int = 50):
        """A second process (an application) that appends ``{(topic, partition): [timestamps]}`` and keeps the
        logs open, unflushed, until the ``with`` block ends; then it closes them cleanly."""
        script = textwrap.dedent(f"""
            import sys
            from storage_engine.clock import ManualClock
            from storage_engine.config_file import load_config
            from storage_engine.log.manager import LogManager
            from storage_engine.record.records import SimpleRecord
            mgr = LogManager.open(load_config({str(self.config_path)!r}), clock=ManualClock({T_MS}))
            for (topic, partition), timestamps in {appends!r}.items():
                log = mgr.get_or_create_log(topic, partition)
                for i, ts in enumerate(timestamps):
                    mgr.clock.set(ts)
                    log.append_records([SimpleRecord(b"w%d" % i, b"x" * {value_size}, ts)])
            print("ready", flush=True)
            sys.stdin.readline()
            mgr.close()
        """)
        proc = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                text=True, env=os.environ.copy())
        assert proc.stdin is not None and proc.stdout is not None   # both PIPE
        try:
            assert proc.stdout.readline().strip() == "ready", "the writer process did not start"
            yield proc
        finally:
            proc.stdin.write("\n")
            proc.stdin.close()
            assert proc.wait(timeout=60) == 0

    def delete_records(self, topic: str, partition: int, offset: int) -> None:
        with LogManager.open(self.config(), clock=ManualClock(T_MS)) as mgr:
            present(mgr.get_log(topic, partition)).delete_records(offset)

    # -- reading ------------------------------------------------------------------------------------------------
    def partition_dir(self, topic: str, partition: int) -> pathlib.Path:
        for d in self.log_dirs:
            p = d / f"{topic}-{partition}"
            if p.is_dir():
                return p
        raise FileNotFoundError(f"{topic}-{partition} is in none of {self.log_dirs}")

    def files(self, topic: str, partition: int) -> list[str]:
        return sorted(os.listdir(self.partition_dir(topic, partition)))

    def describe(self) -> dict:
        """{(topic, partition): Log.describe()} as the engine sees the logs now."""
        with LogManager.open(self.config(), clock=ManualClock(T_MS)) as mgr:
            return {tp: log.describe() for tp, log in mgr.logs.items()}

    def snapshot(self) -> dict[str, bytes]:
        """Every Kafka-layout file under the log dirs (partition folders and checkpoints) -> its bytes.

        The engine's own dot-files (``.lock``, ``.engine+*`` holding cross-process partition state,
        ``.kafka_cleanshutdown``) are left out: they record that a process opened the logs, not what the logs hold."""
        out = {}
        for d in self.log_dirs:
            for dirpath, _, names in os.walk(d):
                for name in names:
                    if name.startswith("."):
                        continue
                    path = pathlib.Path(dirpath) / name
                    out[str(path.relative_to(self.root))] = path.read_bytes()
        return out

    def checkpoint_text(self, log_dir: pathlib.Path, name: str) -> str:
        return (log_dir / name).read_text()


def expired_segments(describe: dict, now_ms: int, retention_ms: int) -> list[int]:
    """Base offsets of the segments that time retention removes at ``now_ms``: the leading sealed segments
    whose largest timestamp is more than ``retention_ms`` before ``now_ms`` (the rule, restated independently)."""
    segments = describe["segments"]
    out = []
    for seg in segments[:-1]:            # the active segment here always holds recent records
        if now_ms - seg["largest_timestamp"] > retention_ms:
            out.append(seg["base_offset"])
        else:
            break
    return out


def old_then_recent(old: int = 40, recent: int = 10) -> list[int]:
    """Timestamps: ``old`` records one minute apart from T - 3 h, then ``recent`` ones from T - 30 min."""
    return ([T_MS - 3 * HOUR_MS + i * MINUTE_MS for i in range(old)]
            + [T_MS - 30 * MINUTE_MS + i * MINUTE_MS for i in range(recent)])
