"""A store with many partitions, and the measurement of a scheduled ``log_retention`` run over it.

``python -m include.scale_store generate [--partitions 10000] [--segments 4] [--root var/scale]``
    writes ``<root>/storage.yaml`` (two log dirs) and the partitions, each with ``--segments`` sealed
    segments of records spread over the three days before the next 5-minute boundary plus an active one;
    ``retention.ms`` is one day, so a retention run as of that boundary deletes about two thirds of each
    partition. Partitions are written through the engine (``open_log(create=True)``, appends, a clean close,
    one at a time: the process never holds more than a few files), then each log dir gets its checkpoint
    files and clean-shutdown marker, as a closing ``LogManager`` would write them.

``python -m include.scale_store measure [--port 8080] [--timeout 900]``
    with ``STORAGE_ENGINE_CONFIG=<root>/storage.yaml make airflow`` running: unpauses ``log_retention``
    (only), waits for the scheduled run the scheduler creates, and prints its wall time (start to end),
    the number of task instances, the batches' durations and the run summary's totals, as JSON.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import sys
import time
import urllib.parse
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
DAY_MS = 86_400_000
FIVE_MIN_MS = 300_000


def _config_data(root: Path) -> dict:
    return {"broker": {"log.dirs": [str(root / "logs" / "dir-a"), str(root / "logs" / "dir-b")],
                       "log.segment.bytes": 2048, "log.retention.ms": DAY_MS,
                       "log.segment.delete.delay.ms": 60_000, "log.index.size.max.bytes": 4096},
            "topics": {}}


def _write_partitions(args: tuple) -> int:
    """Worker: create and fill the partitions [first, last) of topic ``t<i // 1000>``; returns records."""
    config_path, first, last, segments, now_ms = args
    from storage_engine.clock import ManualClock
    from storage_engine.config_file import load_config
    from storage_engine.log.loader import open_log
    from storage_engine.record.records import SimpleRecord

    config = load_config(config_path)
    records = 0
    per_segment = 16                        # 16 records of ~100 B: a little under segment.bytes (2 KiB)
    total = per_segment * segments + 4
    for n in range(first, last):
        topic, partition = f"t{n // 1000:02d}", n % 1000
        log_dir = config.log_dirs[n % len(config.log_dirs)]
        clock = ManualClock(now_ms)
        log, _ = open_log(log_dir, topic, partition, config.log_config(topic), clock=clock, exclusive=True,
                          create=True)
        try:
            for i in range(total):
                ts = now_ms - 3 * DAY_MS + (3 * DAY_MS * i) // total
                clock.set(ts)
                log.append_records([SimpleRecord(b"k%d" % i, b"v" * 80, ts)])
            records += total
        finally:
            log.close(clean=True)
    return records


def generate(root: Path, partitions: int, segments: int, now_ms: int) -> dict:
    from storage_engine import layout
    from storage_engine.config_file import load_config
    from storage_engine.segment.checkpoint import OffsetCheckpointFile
    from storage_engine.segment.clean_shutdown import write_clean_shutdown
    from storage_engine.inspection.snapshot import LogSnapshot

    root.mkdir(parents=True, exist_ok=True)
    config_path = root / "storage.yaml"
    config_path.write_text(yaml.safe_dump(_config_data(root), sort_keys=False))
    config = load_config(config_path)
    for d in config.log_dirs:
        if os.path.isdir(d) and layout.partition_dirs(d):
            raise SystemExit(f"{d} already holds partitions: remove {root} first")
        os.makedirs(d, exist_ok=True)
    t0 = time.monotonic()
    step = 250
    jobs = [(str(config_path), i, min(i + step, partitions), segments, now_ms) for i in range(0, partitions, step)]
    with concurrent.futures.ProcessPoolExecutor(max_workers=2) as pool:
        records = sum(pool.map(_write_partitions, jobs))
    for d in config.log_dirs:
        recovery = {}
        for _name, (topic, partition) in layout.partition_dirs(d):
            with LogSnapshot(config, d, topic, partition) as snap:
                recovery[(topic, partition)] = snap.log_end_offset
        OffsetCheckpointFile(os.path.join(d, layout.RECOVERY_POINT_CHECKPOINT)).write(recovery)
        OffsetCheckpointFile(os.path.join(d, layout.LOG_START_OFFSET_CHECKPOINT)).write({})
        write_clean_shutdown(d)
    return {"config": str(config_path), "partitions": partitions, "segments_per_partition": segments + 1,
            "records": records, "now_ms": now_ms, "seconds": round(time.monotonic() - t0, 1)}


def _api(port: int, path: str, token: str, method: str = "GET", body: object = None) -> Any:
    import urllib.request

    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method,
                                 headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
                                 data=None if body is None else json.dumps(body).encode())
    with urllib.request.urlopen(req, timeout=60) as resp:
        return json.loads(resp.read() or b"null")


def measure(port: int, timeout_s: float) -> dict:
    from include.airflow_standalone import AIRFLOW_HOME, PASSWORD_FILE_NAME, api_token, read_password

    password = read_password()
    if password is None:
        raise SystemExit(f"no admin password in {AIRFLOW_HOME / PASSWORD_FILE_NAME}: is Airflow running (make airflow)?")
    token = api_token(port, "admin", password)
    dag = "log_retention"
    _api(port, f"/api/v2/dags/{dag}", token, "PATCH", {"is_paused": False})
    deadline = time.monotonic() + timeout_s
    run = None
    while time.monotonic() < deadline:
        runs = _api(port, f"/api/v2/dags/{dag}/dagRuns?run_type=scheduled&order_by=-run_after&limit=1",
                    token)["dag_runs"]
        if runs and runs[0]["state"] in ("success", "failed"):
            run = runs[0]
            break
        time.sleep(5)
    _api(port, f"/api/v2/dags/{dag}", token, "PATCH", {"is_paused": True})
    if run is None:
        raise SystemExit(f"no scheduled {dag} run finished within {timeout_s:.0f} s")
    run_id = urllib.parse.quote(run["dag_run_id"])
    tis = _api(port, f"/api/v2/dags/{dag}/dagRuns/{run_id}/taskInstances?limit=1000", token)["task_instances"]
    report = _api(port, f"/api/v2/dags/{dag}/dagRuns/{run_id}/taskInstances/run_report/xcomEntries/return_value",
                  token)["value"]
    from datetime import datetime

    def secs(a: str, b: str) -> float:
        return round((datetime.fromisoformat(b) - datetime.fromisoformat(a)).total_seconds(), 1)

    batches = [ti for ti in tis if ti["task_id"] == "retention"]
    return {"run_id": run["dag_run_id"], "state": run["state"], "data_interval_end": run["data_interval_end"],
            "wall_s": secs(run["start_date"], run["end_date"]), "task_instances": len(tis),
            "batches": len(batches), "batch_duration_s": sorted(ti["duration"] for ti in batches),
            "totals": {k: v for k, v in report["totals"].items() if k != "task_states"}, "as_of": report["as_of"]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m include.scale_store", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    g = sub.add_parser("generate")
    g.add_argument("--partitions", type=int, default=10_000)
    g.add_argument("--segments", type=int, default=4, help="sealed segments per partition (plus the active one)")
    g.add_argument("--root", type=Path, default=REPO / "var" / "scale")
    g.add_argument("--now-ms", type=int, default=None, help="records end here (default: the next 5-minute mark)")
    m = sub.add_parser("measure")
    m.add_argument("--port", type=int, default=int(os.environ.get("AIRFLOW_PORT", "8080")))
    m.add_argument("--timeout", type=float, default=900)
    args = p.parse_args(argv)
    if args.command == "generate":
        now_ms = args.now_ms or (int(time.time() * 1000) // FIVE_MIN_MS + 1) * FIVE_MIN_MS
        print(json.dumps(generate(args.root.resolve(), args.partitions, args.segments, now_ms)))
    else:
        print(json.dumps(measure(args.port, args.timeout), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
