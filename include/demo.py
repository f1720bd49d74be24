"""``make demo``: the project end to end on this machine, with a report an operator can read.

``python -m include.demo [--config CFG] [--seed N] [--scale F] [--dags ID,ID,...] [--keep-going]``

1. resets the demo's state: the log dirs of the default storage config (``var/logs/dir-a``, ``dir-b``) and
   ``var/airflow`` (AIRFLOW_HOME, with its SQLite metadata DB);
2. generates a week of sample logs ending at today's midnight UTC (:mod:`include.sample_data`);
3. starts the object store of tiered storage, a SeaweedFS under ``var/seaweedfs`` at the storage config's
   ``rsm.config.storage.s3.endpoint.url``, with its bucket (:mod:`include.demo_tiered`);
4. serves the store over Kafka's protocol (below) and tiers ``access-log`` over the wire (``remote.storage.enable``,
   a one-day ``local.retention.ms``);
5. prints the logs as they are: per partition segments, bytes, log start and end offsets;
6. initialises Airflow (``airflow db migrate`` on SQLite, the project's ``dags/`` and ``plugins/``, no example
   DAGs, parallelism 4);
7. runs each maintenance DAG once with ``airflow dags test <dag_id> <midnight UTC>`` (``log_checkpoint``,
   ``log_flush``, ``log_retention``, ``log_tiering``, ``log_compaction``, ``log_verify``, ``log_dir_balance``; a DAG id not in
   ``dags/`` yet is skipped
   and said so). The DAGs read
   ``STORAGE_ENGINE_CONFIG`` and act as of their run's ``data_interval_end``, the same instant the sample data
   ends at. A failed run stops the demo with exit code 1 and the end of its output;
8. prints what changed on disk: segments deleted and bytes reclaimed, log start offsets, checkpoint files
   written, ``.deleted`` files waiting for their purge; and checks the logs with the engine's read-only
   ``verify``;
9. prints the tiered topic's local and remote figures as the Storage view shows them, and reads a partition from
   its log start with a Kafka consumer: the first records lie below the local log start, in the object store.

From 4 on the store is served over Kafka's protocol (``serve`` on a free loopback port,
:mod:`include.demo_broker`) and a real Kafka client (librdkafka) creates a compacted topic over the wire and writes
to it and to a sample topic; the broker keeps serving while the DAGs maintain the same partitions from their own
processes, and after them the same client reads everything back before the broker stops clean. The week of
history is written through the engine's API because it is backdated (a client cannot set the broker's clock).

Each Airflow command's full output is kept in ``var/airflow/demo/<name>.log``. Afterwards ``make airflow``
shows the same runs in the UI (same AIRFLOW_HOME); the object store keeps running for it. The demo ends with where
``make airflow`` will serve: its URL, the admin login (written to AIRFLOW_HOME's password file now, which the
api-server keeps at its first start) and the Storage view's address.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from include.airflow_standalone import (AIRFLOW_HOME, DAGS_FOLDER, PLUGINS_FOLDER, REPO, airflow_env, where_to_look,
                                        airflow_executable)
from include import demo_broker, demo_tiered
from include.seaweedfs import WeedServer
from include.sample_data import (DEFAULT_SEED, display_path, format_summary, generate, reset_log_dirs,
                                 short_time, table)
from storage_engine import StorageError, layout, verify_log_dirs
from storage_engine.segment.checkpoint import OffsetCheckpointFile
from storage_engine.config import StorageConfig
from storage_engine.config_file import DEFAULT_CONFIG_PATH, load_config
from storage_engine.log.locks import UNKNOWN, PartitionLock, lock_path
from storage_engine.units import human_bytes

# The plugin's list of the maintenance DAGs (a module that imports nothing), from the plugins folder as Airflow
# puts it on sys.path.
if str(PLUGINS_FOLDER) not in sys.path:
    sys.path.append(str(PLUGINS_FOLDER))
from storage_maintenance.maintenance_dags import MAINTENANCE_DAGS

# Trigger-form values per DAG: the demo builds its compaction key maps on (local) Spark, the mission's path.
DAG_CONF = {"log_compaction": {"map_strategy": "spark"}}
RUN_LOGS = AIRFLOW_HOME / "demo"
CHECKPOINT_FILES = (layout.RECOVERY_POINT_CHECKPOINT, layout.LOG_START_OFFSET_CHECKPOINT,
                    layout.CLEANER_OFFSET_CHECKPOINT)


class DemoFailed(Exception):
    pass


def say(text: str = "") -> None:
    print(text, flush=True)


def step(n: int, text: str) -> None:
    say(f"\n== {n}. {text}")


# ---------------------------------------------------------------------------------------------------------
# What is on disk (read-only: the engine's verify, checkpoint files, partition lock state)

def snapshot(config: StorageConfig) -> dict:
    """Per partition: segments, bytes, offsets, .deleted files; per log dir: checkpoint files."""
    audit = verify_log_dirs(config)
    parts: dict = {}
    checkpoints: dict[str, dict[str, dict[str, Any]]] = {}
    for d in config.log_dirs:
        checkpoints[d] = {}
        for name in CHECKPOINT_FILES:
            path = os.path.join(d, name)
            try:
                st = os.stat(path)
            except FileNotFoundError:
                continue
            entries, err = OffsetCheckpointFile(path).read_or_empty()
            checkpoints[d][name] = {"mtime_ns": st.st_mtime_ns, "entries": {f"{t}-{p}": o for (t, p), o in entries.items()},
                                    "error": err}
    lso_checkpoint = {}
    for dir_files in checkpoints.values():
        lso_checkpoint.update(dir_files.get(layout.LOG_START_OFFSET_CHECKPOINT, {}).get("entries", {}))
    for p in audit["partitions"]:
        name = f"{p['topic']}-{p['partition']}"
        log_dir = next(d for d in config.log_dirs if os.path.isdir(os.path.join(d, name)))
        pdir = os.path.join(log_dir, name)
        files = os.listdir(pdir)
        bases = sorted(layout.offset_from_filename(f) for f in files
                       if f.endswith(layout.LOG_SUFFIX) and layout.is_offset_named(f))
        deleted = [f for f in files if f.endswith(layout.DELETED_SUFFIX)]
        lock = PartitionLock(lock_path(log_dir, name))
        try:
            state = lock.read_state()
        finally:
            lock.close()
        start = max([bases[0] if bases else 0, lso_checkpoint.get(name, 0)]
                    + ([state.log_start_offset] if state.log_start_offset != UNKNOWN else []))
        parts[name] = {
            "topic": p["topic"], "partition": p["partition"], "log_dir": log_dir,
            "policy": ",".join(config.log_config(p["topic"]).cleanup_policy),
            "segments": p["segments"], "size_bytes": p["size_bytes"], "records": p["records"],
            "log_start_offset": start,
            "log_end_offset": p["log_end_offset"] if p["log_end_offset"] is not None else start,
            "deleted_files": len(deleted),
            "deleted_bytes": sum(os.path.getsize(os.path.join(pdir, f)) for f in deleted),
        }
    order = sorted(parts, key=lambda n: (_topic_rank(parts[n]["topic"]), parts[n]["partition"]))
    return {"partitions": {n: parts[n] for n in order}, "checkpoints": checkpoints,
            "problems": audit["problems"], "damaged": audit["damaged"]}


def _topic_rank(topic: str) -> tuple:
    known = ("user-emails", "access-log", "user-sessions")
    return (known.index(topic), topic) if topic in known else (len(known), topic)


def before_table(snap: dict, generated: dict | None) -> str:
    stats = {f"{r['topic']}-{r['partition']}": r for r in (generated or {}).get("partitions", [])}
    rows = []
    for name, p in snap["partitions"].items():
        g = stats.get(name, {})
        rows.append([name, os.path.basename(p["log_dir"]), p["policy"], p["segments"], human_bytes(p["size_bytes"]),
                     p["log_start_offset"], p["log_end_offset"], g.get("tombstones", "-"),
                     f"{short_time(g.get('first_timestamp'))} .. {short_time(g.get('last_timestamp'))}"
                     if g else "-"])
    tot = lambda k: sum(p[k] for p in snap["partitions"].values())  # noqa: E731
    rows.append(["total", "", "", tot("segments"), human_bytes(tot("size_bytes")), "", "",
                 sum(r.get("tombstones", 0) for r in stats.values()) if stats else "-", ""])
    return table(["partition", "dir", "policy", "segments", "bytes", "log start", "log end", "tombstones",
                  "timestamps (UTC)"], rows, right={3, 4, 5, 6, 7})


def _arrow(a: object, b: object, fmt: Callable[[Any], str] = str) -> str:
    return fmt(a) if a == b else f"{fmt(a)} -> {fmt(b)}"


def changes_report(config: StorageConfig, before: dict, after: dict) -> tuple[str, dict]:
    rows, totals = [], {"segments_deleted": 0, "bytes_reclaimed": 0, "deleted_files": 0, "deleted_bytes": 0}
    advanced = []
    for name, a in after["partitions"].items():
        b = before["partitions"].get(name)
        if b is None:
            continue
        rows.append([name, _arrow(b["segments"], a["segments"]),
                     _arrow(b["size_bytes"], a["size_bytes"], human_bytes),
                     _arrow(b["log_start_offset"], a["log_start_offset"]),
                     _arrow(b["log_end_offset"], a["log_end_offset"]),
                     f"{a['deleted_files']} ({human_bytes(a['deleted_bytes'])})" if a["deleted_files"] else "-"])
        totals["segments_deleted"] += max(0, b["segments"] - a["segments"])
        totals["bytes_reclaimed"] += max(0, b["size_bytes"] - a["size_bytes"])
        totals["deleted_files"] += a["deleted_files"]
        totals["deleted_bytes"] += a["deleted_bytes"]
        if a["log_start_offset"] != b["log_start_offset"]:
            advanced.append(name)
    lines = [table(["partition", "segments", "bytes", "log start", "log end", ".deleted files"], rows)]
    lines.append("")
    lines.append(f"Segments deleted: {totals['segments_deleted']}; bytes reclaimed from the live logs: "
                 f"{human_bytes(totals['bytes_reclaimed'])}")
    lines.append(f"Log start offsets advanced: {len(advanced)} partition(s)"
                 + (f" ({', '.join(advanced)})" if advanced else ""))
    written = []
    for d in config.log_dirs:
        for name in CHECKPOINT_FILES:
            a = after["checkpoints"].get(d, {}).get(name)
            b = before["checkpoints"].get(d, {}).get(name)
            if a is None or (b is not None and a["mtime_ns"] == b["mtime_ns"]):
                continue
            changed = (b is None) or a["entries"] != b["entries"]
            written.append(f"  {display_path(os.path.join(d, name))}: {len(a['entries'])} entries"
                           + (", content changed" if changed else ", content unchanged"))
    totals["checkpoint_files_written"] = len(written)
    lines.append(f"Checkpoint files written: {len(written)}" + (":" if written else ""))
    lines.extend(written)
    if totals["deleted_files"]:
        delays = sorted({config.log_config(p["topic"]).file_delete_delay_ms
                         for p in after["partitions"].values() if p["deleted_files"]})
        delay = ", ".join(f"{d / 1000:g} s" for d in delays)
        lines.append(f".deleted files pending purge: {totals['deleted_files']} files, "
                     f"{human_bytes(totals['deleted_bytes'])}: removed once older than file.delete.delay.ms = "
                     f"{delay} by log_retention's purge_deleted task or `python -m storage_engine purge-deleted`")
    else:
        lines.append(".deleted files pending purge: none")
    return "\n".join(lines), totals


# ---------------------------------------------------------------------------------------------------------
# Airflow

def _run_logged(name: str, cmd: list[str], env: dict, timeout: float) -> tuple[int, float, Path]:
    RUN_LOGS.mkdir(parents=True, exist_ok=True)
    log_path = RUN_LOGS / f"{name}.log"
    started = time.monotonic()
    with open(log_path, "wb") as out:
        out.write(("$ " + " ".join(cmd) + "\n").encode())
        out.flush()
        try:
            proc = subprocess.run(cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL, timeout=timeout)
            code = proc.returncode
        except subprocess.TimeoutExpired:
            out.write(f"\n[demo] timed out after {timeout:.0f} s\n".encode())
            code = 124
    return code, time.monotonic() - started, log_path


def _tail(path: Path, n: int = 40) -> str:
    lines = path.read_text(errors="replace").splitlines()
    return "\n".join("    " + line for line in lines[-n:])


def _fail(what: str, log_path: Path) -> DemoFailed:
    return DemoFailed(f"{what}; last lines of {display_path(str(log_path))}:\n{_tail(log_path)}")


_DISCOVER = r"""
import json, sys
from airflow.dag_processing.dagbag import DagBag
bag = DagBag(dag_folder=sys.argv[1])
print("@@DAGS@@" + json.dumps({"dag_ids": sorted(bag.dags),
                               "import_errors": {str(k): str(v) for k, v in bag.import_errors.items()}}))
"""


def discover_dags(env: dict) -> dict:
    """DAG ids and import errors of dags/, parsed the way Airflow parses them (in a subprocess)."""
    code, _, log_path = _run_logged("parse-dags", [sys.executable, "-c", _DISCOVER, str(DAGS_FOLDER)], env, 300)
    text = log_path.read_text(errors="replace")
    marker = next((line for line in text.splitlines() if line.startswith("@@DAGS@@")), None)
    if code != 0 or marker is None:
        raise _fail("parsing dags/ failed", log_path)
    return json.loads(marker[len("@@DAGS@@"):])


def dag_runs(db_path: Path) -> dict[str, dict]:
    """State, data interval and task states of each DAG's latest run, read from the SQLite metadata DB."""
    out: dict[str, dict] = {}
    try:
        con = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
        try:
            for dag_id, run_id, state, end in con.execute(
                    "SELECT dag_id, run_id, state, data_interval_end FROM dag_run ORDER BY id"):
                out[dag_id] = {"run_id": run_id, "state": state, "data_interval_end": end, "tasks": {}}
            for dag_id, run_id, state, n in con.execute(
                    "SELECT dag_id, run_id, state, count(*) FROM task_instance GROUP BY dag_id, run_id, state"):
                if dag_id in out and out[dag_id]["run_id"] == run_id:
                    out[dag_id]["tasks"][state or "none"] = n
        finally:
            con.close()
    except sqlite3.Error:
        return {}
    return out


def record_real_starts(db_path: Path, dag_id: str) -> int:
    """Give the runs of ``dag_id`` that ``airflow dags test <dag_id> <date>`` made the start they really had; the
    number of runs corrected.

    ``dags test`` (Airflow's ``DAG.test()``) records its run as started at the logical date it is given, so a run
    as of midnight UTC that took 5 s shows, in Airflow's UI and the Storage view, as lasting from midnight to
    when it finished (9.5 hours at half past nine). Such a run (its start equal to its logical date, and its
    first task started later) starts when its first task started."""
    try:
        con = sqlite3.connect(f"file:{db_path}?mode=rw", uri=True, timeout=30)    # never creates the file
    except sqlite3.Error:
        return 0
    try:
        with con:
            cur = con.execute(
                "UPDATE dag_run SET start_date = (SELECT min(ti.start_date) FROM task_instance ti"
                "  WHERE ti.dag_id = dag_run.dag_id AND ti.run_id = dag_run.run_id)"
                " WHERE dag_id = ? AND start_date = logical_date AND start_date < (SELECT min(ti.start_date)"
                "  FROM task_instance ti WHERE ti.dag_id = dag_run.dag_id AND ti.run_id = dag_run.run_id)",
                (dag_id,))
            return cur.rowcount
    except sqlite3.Error:        # no metadata DB yet (the run never started): nothing to correct
        return 0
    finally:
        con.close()


# ---------------------------------------------------------------------------------------------------------

def keymap_dir(config: StorageConfig) -> Path | None:
    """Where the compaction DAG leaves Spark key maps ($STORAGE_ENGINE_KEYMAP_DIR, else keymaps/ beside the first
    log dir): demo state too, but only ever removed when it lies under var/."""
    path = Path(os.environ.get("STORAGE_ENGINE_KEYMAP_DIR") or Path(config.log_dirs[0]).parent / "keymaps").resolve()
    return path if path.is_relative_to((REPO / "var").resolve()) else None


def midnight_utc_ms(now: float | None = None) -> int:
    t = time.time() if now is None else now
    return int(t // 86400 * 86400 * 1000)


def run(args: argparse.Namespace) -> int:
    t0 = time.monotonic()
    config_path = Path(args.config or DEFAULT_CONFIG_PATH).resolve()
    config = load_config(config_path)
    now_ms = args.now_ms if args.now_ms is not None else midnight_utc_ms()
    logical = datetime.fromtimestamp(now_ms / 1000, tz=timezone.utc)
    env = airflow_env(storage_config=config_path)
    say(f"Demo: storage config {display_path(str(config_path))}; log dirs "
        f"{', '.join(display_path(d) for d in config.log_dirs)}; 'now' = {logical:%Y-%m-%d %H:%M:%S} UTC")

    step(1, "Reset the demo state")
    removed = reset_log_dirs(config)
    cleared = []
    for path in (AIRFLOW_HOME, keymap_dir(config)):
        if path is not None and path.exists():
            shutil.rmtree(path)
            cleared.append(display_path(str(path)))
    say(f"removed {removed} partition folder(s) from the log dirs"
        + (f", and {', '.join(cleared)}" if cleared else ""))

    step(2, "Generate sample logs (a week of traffic, through the engine's API)")
    generated = generate(config, seed=args.seed, now_ms=now_ms, scale=args.scale, reset=True)
    t = generated["totals"]
    say(f"{t['records']:,} records ({t['tombstones']:,} tombstones) in {len(generated['partitions'])} partitions, "
        f"{t['segments']} segments, {human_bytes(t['size_bytes'])}, written in {generated['elapsed_s']} s")
    if args.verbose:
        say(format_summary(generated))

    step(3, "Start the object store for tiered storage: SeaweedFS (weed server -s3) under var/seaweedfs")
    try:
        weed = demo_tiered.start_object_store(config)
    except (demo_tiered.ObjectStoreError, RuntimeError, TimeoutError) as exc:
        raise DemoFailed(f"the object store did not start: {exc}") from exc
    say(f"S3 API at {weed.endpoint_url} (bucket {config.remote['rsm.config.storage.s3.bucket.name']}, access key "
        f"{weed.access_key}), master http://{weed.host}:{weed.master}, data in {display_path(str(weed.folder))}")

    step(4, "Serve the store over Kafka's protocol; write live data with a Kafka client (librdkafka)")
    broker = demo_broker.start(config_path, RUN_LOGS / "broker.log", REPO)
    finished = False
    try:
        code = _with_broker(args, t0, config, config_path, now_ms, logical, env, generated, broker, weed)
        finished = True
        return code
    finally:
        if broker.proc is not None and broker.proc.poll() is None:
            demo_broker.stop(broker)
        if not finished:
            weed.kill9()


def _with_broker(args: argparse.Namespace, t0: float, config: StorageConfig, config_path: Path, now_ms: int,
                 logical: datetime, env: dict[str, str], generated: dict, broker: demo_broker.Broker,
                 weed: WeedServer) -> int:
    live = demo_broker.produce_live(broker, "access-log")
    if live["errors"]:
        raise DemoFailed(f"the Kafka client's writes failed: {live['errors'][:3]} (broker log: "
                         f"{display_path(str(broker.log_path))})")
    say(f"broker on {broker.bootstrap} (log: {display_path(str(broker.log_path))}); created topic "
        f"{demo_broker.LIVE_TOPIC} over the wire (cleanup.policy=compact) and delivered {live['delivered']:,} "
        f"records to it and to access-log with idempotent producers in {', '.join(demo_broker.CODECS)} "
        f"in {live['seconds']} s")
    demo_tiered.enable_tiering(broker.bootstrap)
    say(f"tiered {demo_tiered.TOPIC} over the wire (IncrementalAlterConfigs): remote.storage.enable=true, "
        f"local.retention.ms={demo_tiered.LOCAL_RETENTION_MS} (a day on local disk, retention.ms over the whole log)")
    config = load_config(config_path)    # the topic configs set over the wire are part of it now

    step(5, "The logs before maintenance")
    before = snapshot(config)
    say(before_table(before, generated))

    step(6, "Initialise Airflow (SQLite metadata DB)")
    airflow = airflow_executable()
    code, secs, log_path = _run_logged("db-migrate", [airflow, "db", "migrate"], env, 600)
    if code != 0:
        raise _fail(f"airflow db migrate failed (exit code {code})", log_path)
    say(f"airflow db migrate: ok in {secs:.1f} s (AIRFLOW_HOME={display_path(str(AIRFLOW_HOME))}, "
        f"dags={display_path(str(DAGS_FOLDER))}, parallelism {env['AIRFLOW__CORE__PARALLELISM']})")
    found = discover_dags(env)
    if found["import_errors"]:
        errors = "\n".join(f"  {f}:\n    " + e.strip().replace("\n", "\n    ")
                           for f, e in found["import_errors"].items())
        raise DemoFailed(f"dags/ has import errors:\n{errors}")
    say(f"DAGs in dags/: {', '.join(found['dag_ids']) or 'none'}")

    step(7, f"Run the maintenance DAGs once: airflow dags test <dag_id> {logical.isoformat()}")
    results: list[tuple[str, str, float | None]] = []
    for dag_id in args.dags:
        if dag_id not in found["dag_ids"]:
            say(f"{dag_id:15} SKIPPED: no DAG with this id in {display_path(str(DAGS_FOLDER))}/ yet")
            results.append((dag_id, "skipped", None))
            continue
        cmd = [airflow, "dags", "test", dag_id, logical.isoformat()]
        if dag_id in DAG_CONF:
            cmd += ["--conf", json.dumps(DAG_CONF[dag_id])]
        code, secs, log_path = _run_logged(dag_id, cmd, env, args.dag_timeout)
        record_real_starts(AIRFLOW_HOME / "airflow.db", dag_id)
        if code != 0:
            err = _fail(f"{dag_id}: the run FAILED (airflow dags test exit code {code})", log_path)
            if not args.keep_going:
                raise err
            say(str(err))
            results.append((dag_id, "failed", secs))
            continue
        say(f"{dag_id:15} success in {secs:.1f} s (output: {display_path(str(log_path))})")
        results.append((dag_id, "success", secs))
    runs = dag_runs(AIRFLOW_HOME / "airflow.db")
    for dag_id, status, _ in results:
        r = runs.get(dag_id)
        if r is None:
            continue
        tasks = ", ".join(f"{n} {s}" for s, n in sorted(r["tasks"].items()))
        say(f"  {dag_id}: run {r['run_id']} {r['state']}, data_interval_end {r['data_interval_end']}, "
            f"tasks: {tasks or 'none'}")
        end = str(r["data_interval_end"] or "")
        if end and not end.startswith(logical.strftime("%Y-%m-%d %H:%M:%S")) \
                and not end.startswith(logical.strftime("%Y-%m-%dT%H:%M:%S")):
            say(f"  note: {dag_id} acted as of {end}, not {logical:%Y-%m-%d %H:%M:%S} (its timetable aligned the "
                "interval); records after that instant count as 'in the future' for it")

    step(8, "What changed on disk")
    after = snapshot(config)
    report, _ = changes_report(config, before, after)
    say(report)
    if after["damaged"]:
        problems = "\n".join(f"  {p.get('file')}: {p.get('message')}" for p in after["problems"])
        raise DemoFailed(f"verify found damage after maintenance:\n{problems}")
    say("verify (read-only audit of every batch, index and checkpoint): no damage found")

    step(9, f"Tiered storage: {demo_tiered.TOPIC} on local disk and in the object store")
    try:
        tiered = demo_tiered.report(config, broker.bootstrap, say)
    except demo_tiered.ObjectStoreError as exc:
        raise DemoFailed(str(exc)) from exc

    step(10, "Read back with the Kafka client while the broker serves, then stop it")
    txn = demo_broker.transactions(broker)
    committed, uncommitted = txn["committed"], txn["uncommitted"]
    if len(committed) != 10 or any(b"cancelled" in v for v in committed) or len(uncommitted) != 15:
        raise DemoFailed(f"{demo_broker.TXN_TOPIC}: read_committed should see the 10 committed orders and "
                         f"read_uncommitted all 15 records, got {len(committed)} and {len(uncommitted)}")
    say(f"{demo_broker.TXN_TOPIC}: a transactional producer committed 10 orders and aborted 5 cancellations; "
        f"read_committed reads {len(committed)}, read_uncommitted {len(uncommitted)}")
    back = demo_broker.read_back(broker, [demo_broker.LIVE_TOPIC, "access-log", "user-emails"])
    for topic, r in back.items():
        say(f"{topic:18} {r['records']:>7,} records read from the log start ({r['partitions']} partitions, "
            f"{r['keys']:,} distinct keys)")
    latest = back[demo_broker.LIVE_TOPIC]["latest"]
    last_round = f"{100 + demo_broker.LIVE_ROUNDS - 1}."
    stale = [k for k, v in latest.items() if not (v or b"").decode().startswith(last_round)]
    if len(latest) != demo_broker.LIVE_KEYS or stale:
        raise DemoFailed(f"{demo_broker.LIVE_TOPIC}: expected the latest value of {demo_broker.LIVE_KEYS} keys, got "
                         f"{len(latest)} keys, {len(stale)} with an older value")
    say(f"{demo_broker.LIVE_TOPIC}: every key's latest value is the last one written")
    exit_code = demo_broker.stop(broker)
    if exit_code != 0:
        raise DemoFailed(f"the broker exited with code {exit_code} on SIGTERM; see {display_path(str(broker.log_path))}")
    say("broker stopped clean (SIGTERM: requests in flight answered, logs closed clean)")

    failed = [d for d, s, _ in results if s == "failed"]
    skipped = [d for d, s, _ in results if s == "skipped"]
    say(f"\nDemo finished in {time.monotonic() - t0:.0f} s: "
        f"{sum(1 for _, s, _ in results if s == 'success')} DAG run(s) succeeded"
        + (f", {len(skipped)} skipped ({', '.join(skipped)})" if skipped else "")
        + (f", {len(failed)} FAILED ({', '.join(failed)})" if failed else "")
        + ". `make airflow` shows these runs in the UI (its Storage view's \"Tiered storage\" page: the figures "
          "above).")
    say(f"Object store: S3 API {weed.endpoint_url} (SeaweedFS; bucket {tiered['bucket']}, access key "
        f"{weed.access_key}, secret in {display_path(str(config_path))}), master UI http://{weed.host}:{weed.master}; "
        f"{tiered['remote_bytes_h']} of {demo_tiered.TOPIC} in it. It keeps running (pid "
        f"{weed.proc.pid if weed.proc else '?'}, data in {display_path(str(weed.folder))}) for `make airflow` and "
        f"`make broker`; the next `make demo` restarts it, `kill {weed.proc.pid if weed.proc else '<pid>'}` stops it.")
    say("\nTo look at these runs and the store: `make airflow` (Ctrl-C stops it), then\n"
        + "\n".join(where_to_look(AIRFLOW_HOME)))
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m include.demo", description=__doc__.split("\n\n")[0])
    p.add_argument("--config", help="storage config (default: include/config/storage.yaml)")
    p.add_argument("--seed", type=int, default=DEFAULT_SEED)
    p.add_argument("--scale", type=float, default=1.0, help="sample data volume (default 1.0)")
    p.add_argument("--now-ms", type=int, default=None, help="'now' of the demo (default: today's midnight UTC)")
    p.add_argument("--dag-timeout", type=float, default=600, help="seconds allowed per DAG run (default 600)")
    p.add_argument("--keep-going", action="store_true", help="run the remaining DAGs after a failed one")
    p.add_argument("--dags", type=lambda text: [d.strip() for d in text.split(",") if d.strip()],
                   default=list(MAINTENANCE_DAGS),
                   help=f"comma-separated DAG ids to run, in order (default: {','.join(MAINTENANCE_DAGS)}; "
                        "log_compaction builds its key maps with spark-submit)")
    p.add_argument("-v", "--verbose", action="store_true", help="also print the generator's per-partition stats")
    args = p.parse_args(argv)
    try:
        return run(args)
    except (DemoFailed, StorageError, FileExistsError) as exc:
        print(f"\nDEMO FAILED: {exc}", file=sys.stderr, flush=True)
        return 1


if __name__ == "__main__":
    sys.exit(main())
