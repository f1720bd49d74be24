"""``make cluster`` for real: docker-compose.yaml's deployment as local processes (include/cluster), one cluster
for the whole module, used the way an operator uses it and broken the way machines break.

1. The topology comes up: every service alive, every listening socket of their processes on 127.0.0.1, the Spark
   daemons on their configured ports only (REST and worker RPC ports included), both Celery workers answering,
   the Spark master with one alive worker; ``make cluster-cli`` sets and reads a Variable in its PostgreSQL.
2. Every maintenance DAG runs once on Celery and succeeds; log_compaction builds its key maps with spark-submit on
   the standalone master and leaves exactly the latest value of every key. Every task of a storage host's group
   ran on that host's worker, on the host's queue; the run's end ran on ``default``.
3. A backfill of three intervals creates three runs, each acting as of its interval's end.
4. A byte flipped in a segment fails log_verify; the SMTP catcher gets exactly one alert for the run, naming the
   partition.
5. The Storage view, over the PostgreSQL metadata DB, in Debian's chromium: the runs of 2-4 and the damaged
   partition.
6. kill -9 of a Celery worker in the middle of a compaction clean while the broker acknowledges writes to that
   partition; the worker is started again as compose's ``restart: unless-stopped`` would. The task is retried
   (or the run fails with one alert), every acknowledged record is read back through the broker, and the next run
   cleans the same partition (nothing left claimed or locked) with verify finding no damage.
7. kill -9 of the Spark worker (and its executors) while a key-map job's tasks run, then started again: the run
   either cleans with the complete map (exactly the latest value of every key) or fails before cleaning (the
   segments byte-identical); never a partition cleaned with a partial map.

Every wait has a deadline and fails with the last lines of the components' output (``<cluster>/logs/<service>.log``);
nothing asserts a duration. The cluster's process output and task logs are copied to ``var/test-artifacts/cluster/``
when the module ends, with ``summary.json`` (what each step saw).

Test-only Airflow settings, which compose does not set: a 30 s task heartbeat timeout (a task whose worker died is
found in seconds, not 5 minutes), no runs from the DAGs' schedules (only this module's runs and backfills exist),
and the scheduler's health server on a free port (its default, 8974, would clash with another cluster).
"""
from __future__ import annotations

import dataclasses
import json
import os
import shlex
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from include.cluster.run import session_members
from tests.airflow.test_local_airflow import listening_sockets
from tests.cluster.clients import LiveWriter, SocketWatch, compare, keyed, latest_per_key, segment_hashes
from tests.paths import REPO
from tests.cluster.harness import (
    ARTIFACTS, CHROMIUM, CHROMIUM_ARGS, GROUPS, MAINTENANCE_DAGS, RUN_DEADLINE, SUMMARY, kill_session, on_loopback,
    q, service_pids, session_cmdlines, short, tails, wait_for)

pytestmark = [pytest.mark.slow, pytest.mark.airflow, pytest.mark.spark, pytest.mark.kills]


# -- 1. the topology -------------------------------------------------------------------------------------------------

def test_the_topology_comes_up_on_loopback(ctx):
    cluster = ctx.cluster
    expected = set(cluster.services) - {"airflow-init", "seaweedfs-init"}     # the one-off jobs have exited
    assert set(cluster.state["processes"]) == expected
    dead = [name for name in expected if cluster.pid(name) is None]
    assert not dead, f"not running: {dead}" + tails(cluster, *dead)

    sockets = listening_sockets(service_pids(cluster))
    assert [s for s in sockets if not on_loopback(s[1])] == [], sockets
    listening = {port for _, _, port in sockets}
    ports = dataclasses.asdict(cluster.ports)
    for field in ("spark_driver", "spark_block_manager"):        # a driver's, while a Spark job runs
        ports.pop(field)
    assert set(ports.values()) <= listening, {k: v for k, v in ports.items() if v not in listening}
    # The Spark daemons listen on their configured ports and no other: the master's REST submission port (Spark's
    # default 6066) and the worker's RPC port (else a random one) are moved like the rest.
    spark = {name: {port for _, _, port in listening_sockets(set(session_members(cluster.state["processes"][name]["pid"])))}
             for name in ("spark-master", "spark-worker")}
    assert spark == {"spark-master": {cluster.ports.spark_master, cluster.ports.spark_master_ui,
                                      cluster.ports.spark_master_rest},
                     "spark-worker": {cluster.ports.spark_worker, cluster.ports.spark_worker_ui}}, spark

    workers = sorted(f"celery@{cluster._celery_hostname(n)}" for n in cluster.workers())
    assert workers == ["celery@airflow-worker-a", "celery@airflow-worker-b"]
    assert cluster.celery_nodes() == workers
    assert ctx.spark_master()["aliveworkers"] == 1
    SUMMARY["1_topology"] = {"services": sorted(expected), "listening": sorted(listening)}


def test_make_cluster_cli_sets_and_gets_a_variable_in_the_clusters_postgres(ctx):
    """Airflow's CLI through ``make cluster-cli``, as the README shows it: the cluster's own metadata DB."""
    env = dict(ctx.cluster.base_env, CLUSTER_DIR=str(ctx.cluster.dir))

    def cli(*args: str) -> str:
        done = subprocess.run(["make", "-s", "-C", str(REPO), "cluster-cli", f"BIN={Path(sys.executable).parent}",
                               "STAMP=", f"ARGS={shlex.join(args)}"], env=env, capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    cli("variables", "set", "cluster_cli_probe", "set through make cluster-cli")
    with ctx.db.engine.connect() as conn:
        stored = conn.execute(ctx.db.sa.text("SELECT key FROM variable WHERE key = 'cluster_cli_probe'")).all()
    assert len(stored) == 1
    assert cli("variables", "get", "cluster_cli_probe").strip().splitlines()[-1] == "set through make cluster-cli"
    cli("variables", "delete", "cluster_cli_probe")


# -- 2. every maintenance DAG once -----------------------------------------------------------------------------------

def test_every_maintenance_dag_runs_on_celery_with_spark_key_maps(ctx):
    topic = "cluster-compacted"
    ctx.kafka.create_topic(topic, 2, {"cleanup.policy": "compact", "segment.bytes": "262144"})
    ctx.place(topic, {0: "storage-a", 1: "storage-b"})
    expected = {}
    for partition in (0, 1):
        # 3 versions of 2,000 keys, then unique fillers past one segment: every keyed record lies in a sealed,
        # cleanable segment
        records = keyed(f"k{partition}", 2000, 3, 120) + keyed(f"filler{partition}", 2500, 1, 120)
        offsets = ctx.kafka.produce(topic, partition, records)
        expected[partition] = latest_per_key(records, offsets)

    runs = {}
    sockets = SocketWatch(ctx.cluster)       # the task processes, the Spark drivers and executors listen too
    sockets.start()
    try:
        for dag in MAINTENANCE_DAGS:
            conf = {"map_strategy": "spark", "topics": [topic]} if dag == "log_compaction" else {}
            runs[dag] = ctx.run_ok(dag, conf)
            ctx.check_routing(dag, runs[dag])
    finally:
        seen = sockets.stop()
    ctx.seen["runs"] = runs
    assert {k: v for k, v in seen.items() if not on_loopback(k[0])} == {}
    drivers = {port for (_, port), command in seen.items() if "SparkSubmit" in command}
    assert drivers, seen                                             # the drivers listened too, on loopback

    # The key maps were built by spark-submit on the standalone master, one application per partition.
    apps = {a["name"]: a["state"] for a in ctx.spark_master()["completedapps"]}
    for partition in (0, 1):
        assert apps.get(f"build-key-map {topic}-{partition}") == "FINISHED", apps
        ti = ctx.db.ti("log_compaction", runs["log_compaction"], f"{GROUPS[partition]}.build_key_map", 0)
        assert ti is not None and ti["state"] == "success", ctx.story("log_compaction", runs["log_compaction"])
        # Read back through the broker: the latest value of every key, at the offset it was written at.
        compare(f"{topic}-{partition} after compaction", ctx.kafka.read(topic, partition), expected[partition])
    SUMMARY["2_every_dag"] = {"runs": runs, "spark_apps": apps,
                              "listening_during_runs": sorted(f"{a}:{p} {short(c)}" for (a, p), c in seen.items())}


# -- 3. a backfill ---------------------------------------------------------------------------------------------------

def test_a_backfill_of_three_intervals_creates_three_successful_runs(ctx):
    dag = "log_retention"                                          # */5: a 5-minute interval
    start = datetime.now(timezone.utc).replace(second=0, microsecond=0) - timedelta(hours=2)
    start -= timedelta(minutes=start.minute % 5)
    intervals = [(start + timedelta(minutes=5 * i), start + timedelta(minutes=5 * (i + 1))) for i in range(3)]
    backfill = ctx.api.call("POST", "/api/v2/backfills", {
        "dag_id": dag, "from_date": intervals[0][0].isoformat(), "to_date": intervals[-1][0].isoformat(),
        "reprocess_behavior": "completed", "max_active_runs": 1})

    def when(value: str) -> datetime:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))

    def backfill_runs():
        listed = ctx.api.get(f"/api/v2/dags/{dag}/dagRuns?limit=100")["dag_runs"]
        return [r for r in listed if r["run_type"] == "backfill"]

    def finished():
        found = backfill_runs()
        return len(found) == 3 and all(r["state"] in ("success", "failed") for r in found)

    wait_for(f"backfill {backfill['id']}'s three runs finished", finished, 3 * RUN_DEADLINE, ctx.cluster,
             services=("airflow-scheduler", "airflow-apiserver"), interval=3,
             detail=lambda: json.dumps(backfill_runs(), indent=1)[-4000:])
    found = sorted(backfill_runs(), key=lambda r: r["logical_date"])
    assert [(when(r["data_interval_start"]), when(r["data_interval_end"])) for r in found] == intervals
    for r in found:
        assert r["state"] == "success", ctx.story(dag, r["dag_run_id"])
        ctx.check_routing(dag, r["dag_run_id"])
        report = ctx.api.xcom(dag, r["dag_run_id"], "run_report")
        assert (when(report["as_of"]), report["as_of_source"]) == (when(r["data_interval_end"]), "data interval end")
    ctx.seen["backfill"] = [r["dag_run_id"] for r in found]
    SUMMARY["3_backfill"] = {"backfill": backfill["id"], "runs": ctx.seen["backfill"]}


# -- 4. an alert -----------------------------------------------------------------------------------------------------

def test_a_damaged_batch_fails_log_verify_and_sends_one_alert_naming_the_partition(ctx):
    topic, partition = "cluster-damaged", 0
    ctx.kafka.create_topic(topic, 2, {"segment.bytes": "262144"})
    ctx.place(topic, {0: "storage-a", 1: "storage-b"})
    for p in (0, 1):
        ctx.kafka.produce(topic, p, keyed(f"d{p}", 3000, 1, 200))
    pdir = ctx.partition_dir(topic, partition)
    segments = sorted(pdir.glob("*.log"))
    assert len(segments) >= 2, segments
    sealed = segments[0]
    good = sealed.read_bytes()

    def put(byte: int) -> None:          # in place, as a disk flips a bit
        with open(sealed, "r+b") as f:
            f.seek(70)                   # inside the first batch's records: its CRC no longer matches
            f.write(bytes([byte]))
            f.flush()
            os.fsync(f.fileno())

    before = len(ctx.mail())
    try:
        put(good[70] ^ 0xFF)
        run_id = ctx.api.trigger("log_verify", {"topics": [topic]})
        run = ctx.wait_run("log_verify", run_id)
        assert run["state"] == "failed", ctx.story("log_verify", run_id)
    finally:
        put(good[70])                    # the later steps read this topic's dir as undamaged
    assert sealed.read_bytes() == good
    ctx.check_routing("log_verify", run_id)
    group = next(g for g in GROUPS if ctx.log_dir(g) == pdir.parent)
    failed = [t for t in ctx.db.tries("log_verify", run_id) if t["state"] == "failed"]
    assert {t["task_id"] for t in failed} == {f"{group}.verify", "fail_run_if_upstream_failed"}, \
        ctx.story("log_verify", run_id)

    name = f"{topic}-{partition}"
    messages = wait_for("the alert of the failed run in the SMTP catcher", lambda: ctx.alerts_for(run_id), 120,
                        ctx.cluster, services=("mailpit", *ctx.cluster.workers()), interval=2)
    assert len(ctx.mail()) == before + 1, [m["Subject"] for m in ctx.mail()[before:]]
    (alert,) = messages
    assert alert["Subject"].startswith(f"[storage maintenance] FAILED log_verify run {run_id}"), alert["Subject"]
    assert name in alert["Subject"] and name in alert["Snippet"], alert
    assert f"{topic}-1" not in alert["Subject"]
    assert alert["To"] == "storage-oncall@example.com"             # compose's STORAGE_MAINTENANCE_ALERT_EMAILS
    ctx.seen["damaged"] = {"run_id": run_id, "topic": topic, "partition": partition}
    SUMMARY["4_alert"] = {"run": run_id, "subject": alert["Subject"]}


# -- 5. the Storage view ---------------------------------------------------------------------------------------------

def test_the_storage_view_shows_the_runs_and_the_damage(ctx):
    from playwright import sync_api as playwright

    if not os.path.exists(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is missing: `make browser` (or .ci/run) installs Debian's chromium")
    runs, backfill, damaged = ctx.seen.get("runs"), ctx.seen.get("backfill"), ctx.seen.get("damaged")
    if not (runs and backfill and damaged):
        pytest.skip("needs the runs of the three steps before it")
    expected = {(dag, run_id): "success" for dag, run_id in runs.items()}
    expected.update({("log_retention", run_id): "success" for run_id in backfill})
    expected[("log_verify", damaged["run_id"])] = "failed"
    name = f"{damaged['topic']}-{damaged['partition']}"
    base = ctx.api.url + "/storage-maintenance"
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            context = browser.new_context(viewport={"width": 1500, "height": 1000})
            context.add_cookies([{"name": "_token", "value": ctx.api.token, "url": ctx.api.url}])
            page = context.new_page()
            page.set_default_timeout(120_000)

            # The first page: the runs (all of them on one page) and the damaged partition with the run that found it.
            page.goto(base + "/?runs_limit=200")
            for (dag, run_id), state in expected.items():
                row = page.locator(f'#runs tr[data-run="{run_id}"][data-dag="{dag}"]')
                assert row.count() == 1, (dag, run_id, page.locator("#runs").inner_text()[:3000])
                assert row.locator("td").nth(2).inner_text().strip() == state, (dag, run_id, row.inner_text())
            damage = page.locator(f'#damage tr[data-partition="{name}"]')
            assert damage.count() >= 1, page.locator("#damage").inner_text()
            assert damage.first.get_attribute("data-kind") == "damaged"
            assert "record batch is corrupt" in damage.first.inner_text()
            assert damaged["run_id"] in damage.first.inner_text()
            page.screenshot(path=str(ARTIFACTS / "01-overview.png"), full_page=True)

            # The failed run's page names the partition; the compaction run's page lists what it cleaned.
            page.goto(base + f"/runs/log_verify/{q(damaged['run_id'])}")
            assert "failed" in page.locator("#as-of").inner_text()
            assert name in page.locator("#failed").inner_text()
            page.screenshot(path=str(ARTIFACTS / "02-failed-run.png"), full_page=True)
            page.goto(base + f"/runs/log_compaction/{q(runs['log_compaction'])}")
            assert "success" in page.locator("#as-of").inner_text()
            cleaned = {r.get_attribute("data-partition") for r in page.locator("#rows tr[data-partition]").all()}
            assert {"cluster-compacted-0", "cluster-compacted-1"} <= cleaned, cleaned
            page.screenshot(path=str(ARTIFACTS / "03-compaction-run.png"), full_page=True)
            for run_id in backfill:
                page.goto(base + f"/runs/log_retention/{q(run_id)}")
                assert "(data interval end)" in page.locator("#as-of").inner_text()

            # The partition page marks the damage and the run that found it.
            page.goto(base + f"/partitions/{damaged['topic']}/{damaged['partition']}")
            text = page.locator("#damage").inner_text()
            assert "record batch is corrupt" in text and damaged["run_id"] in text, text
            page.screenshot(path=str(ARTIFACTS / "04-damaged-partition.png"), full_page=True)
        finally:
            browser.close()
    SUMMARY["5_storage_view"] = {"runs_shown": len(expected), "damaged": name}


# -- 6. a Celery worker killed mid-task ------------------------------------------------------------------------------

def test_a_celery_worker_killed_mid_clean_loses_no_acknowledged_record(ctx):
    cluster, topic, group = ctx.cluster, "cluster-acked", "storage-a"
    victim = ctx.worker_of(group)
    ctx.kafka.create_topic(topic, 2, {"cleanup.policy": "compact", "segment.bytes": "1048576",
                                      "min.cleanable.dirty.ratio": "0.01"})
    ctx.place(topic, {0: group, 1: "storage-b"})
    pdir = ctx.partition_dir(topic, 0)
    # Unique keys, so compaction keeps every record: about 48 MB in 1 MiB segments for a clean that takes a while;
    # partition 1 only an active segment (nothing to clean on the other host).
    records = [(f"w-{i:07d}".encode(), f"w-{i:07d}:".encode() + b"y" * 390) for i in range(120_000)]
    acked = dict(zip(ctx.kafka.produce(topic, 0, records), records))
    other = dict(zip(ctx.kafka.produce(topic, 1, records[:20]), records[:20]))

    writer = LiveWriter(ctx.kafka, topic, 0, "live")
    writer.start()
    conf = {"topics": [topic], "map_strategy": "local"}
    run_id = ctx.api.trigger("log_compaction", conf)
    task = f"{group}.clean"
    try:
        asked = [time.monotonic()]

        def cleaning():            # the clean has written part of a replacement segment
            names = [n for n in os.listdir(pdir) if n.endswith((".cleaned", ".swap"))]
            if not names and time.monotonic() - asked[0] > 2:
                asked[0] = time.monotonic()
                if ctx.api.run("log_compaction", run_id)["state"] in ("success", "failed"):
                    pytest.fail(f"the run ended before its clean could be killed:\n"
                                f"{ctx.story('log_compaction', run_id)}")
            return names

        seen = wait_for(f"{task} writing a cleaned segment in {pdir}", cleaning, RUN_DEADLINE, cluster,
                        services=("airflow-scheduler", victim), interval=0.01)
        sid = cluster.state["processes"][victim]["pid"]
        killed = kill_session(sid)
        wait_for(f"every process of {victim} gone", lambda: not session_members(sid), 30, cluster,
                 detail=lambda: "\n".join(session_cmdlines(sid)))
        assert any("airflow worker" in k for k in killed), killed          # the task process itself
        ti = ctx.db.ti("log_compaction", run_id, task, 0)
        assert ti is not None and (ti["state"], ti["try_number"], ti["hostname"]) == ("running", 1, victim), ti

        # compose's restart: unless-stopped
        cluster.start_service(victim)
        wait_for(f"{victim} answering again", lambda: f"celery@{victim}" in cluster.celery_nodes(), 300, cluster,
                 services=(victim,), interval=2)
        run = ctx.wait_run("log_compaction", run_id)
    finally:
        writer.stop()
    assert not writer.errors, writer.errors[:5]
    final = ctx.db.ti("log_compaction", run_id, task, 0)
    if run["state"] == "success":
        assert final["try_number"] >= 2 and final["hostname"] == victim, ctx.story("log_compaction", run_id)
        outcome = f"retried: try {final['try_number']} succeeded on {final['hostname']}"
    else:
        alerts = wait_for("the alert of the failed run", lambda: ctx.alerts_for(run_id), 120, cluster,
                          services=("mailpit",), interval=2)
        assert len(alerts) == 1, [a["Subject"] for a in alerts]
        outcome = f"failed ({final['state']} after {final['try_number']} tries), one alert"
    ctx.check_routing("log_compaction", run_id)

    # Every acknowledged record reads back through the broker, at its offset (unique keys: compaction keeps all).
    acked.update(writer.acked)
    read = ctx.kafka.read(topic, 0)
    missing = [o for o in acked if read.get(o) != acked[o]]
    assert not missing, f"{len(missing)} acknowledged record(s) not read back, first offsets {sorted(missing)[:5]}"
    compare(f"{topic}-1", ctx.kafka.read(topic, 1), other)

    # Nothing is left claimed or locked: a new run cleans the same partition (made dirty again) at its first try.
    more = [(f"x-{i:07d}".encode(), f"x-{i:07d}:".encode() + b"z" * 390) for i in range(6000)]
    acked.update(zip(ctx.kafka.produce(topic, 0, more), more))
    again = ctx.run_ok("log_compaction", conf)
    ctx.check_routing("log_compaction", again)
    selection = ctx.api.xcom("log_compaction", again, f"{group}.select_dirtiest_logs")
    assert (topic, 0) in {(s["topic"], s["partition"]) for s in selection["selected"]}, selection
    assert not [s for s in selection["skipped"] if s["topic"] == topic], selection["skipped"]
    clean = ctx.db.ti("log_compaction", again, task, 0)
    assert (clean["state"], clean["try_number"]) == ("success", 1), ctx.story("log_compaction", again)
    read = ctx.kafka.read(topic, 0)
    missing = [o for o in acked if read.get(o) != acked[o]]
    assert not missing, f"after the next run: {len(missing)} acknowledged record(s) missing"
    audit = ctx.verify()
    assert audit["damaged"] is False and audit["problems"] == [], audit["problems"][:5]
    SUMMARY["6_celery_worker_killed"] = {
        "run": run_id, "killed_at": seen, "killed": [short(k) for k in killed], "outcome": outcome,
        "acknowledged": len(acked), "live_writes_during_kill": len(writer.acked), "next_run": again,
        "tries": ctx.db.tries("log_compaction", run_id)}


# -- 7. the Spark worker killed mid-job ------------------------------------------------------------------------------

def test_a_spark_worker_killed_mid_job_never_leaves_a_partial_clean(ctx):
    cluster, topic, group = ctx.cluster, "cluster-spark", "storage-a"
    ctx.kafka.create_topic(topic, 2, {"cleanup.policy": "compact", "segment.bytes": "1048576"})
    ctx.place(topic, {0: group, 1: "storage-b"})
    pdir = ctx.partition_dir(topic, 0)
    # 5 versions of 50,000 keys (about 50 MB, for a job whose tasks run for seconds), then fillers past a segment
    records = keyed("s", 50_000, 5, 200) + keyed("sfill", 6000, 1, 200)
    expected = latest_per_key(records, ctx.kafka.produce(topic, 0, records))
    ctx.kafka.produce(topic, 1, keyed("t", 10, 1, 50))              # an active segment only: nothing to clean
    before = segment_hashes(pdir)
    app_name = f"build-key-map {topic}-0"

    run_id = ctx.api.trigger("log_compaction", {"topics": [topic], "map_strategy": "spark"})
    sid = cluster.state["processes"]["spark-worker"]["pid"]

    asked = [time.monotonic()]

    def tasks_running():         # the application runs and its Python tasks execute on the worker's executor
        executing = any("pyspark.daemon" in c for c in session_cmdlines(sid))
        if not executing and time.monotonic() - asked[0] < 2:
            return False
        asked[0] = time.monotonic()
        master = ctx.spark_master()
        if any(a["name"] == app_name for a in master["completedapps"]):
            pytest.fail(f"{app_name} finished before the Spark worker could be killed:\n"
                        f"{ctx.story('log_compaction', run_id)}")
        return executing and any(a["name"] == app_name and a["state"] == "RUNNING" for a in master["activeapps"])

    wait_for(f"{app_name} running tasks on the Spark worker", tasks_running, RUN_DEADLINE, cluster,
             services=("spark-master", "spark-worker", ctx.worker_of(group)), interval=0.05)
    killed = kill_session(sid)
    wait_for("every process of spark-worker gone", lambda: not session_members(sid), 30, cluster,
             detail=lambda: "\n".join(session_cmdlines(sid)))
    assert any("CoarseGrainedExecutorBackend" in k for k in killed), killed      # its executor died with it
    stage = sorted(str(p.relative_to(cluster.dir)) for p in (cluster.dir / "storage" / "keymaps").rglob("*.rows"))

    cluster.start_service("spark-worker")                             # compose's restart: unless-stopped
    wait_for("a Spark worker alive again", lambda: ctx.spark_master()["aliveworkers"] >= 1, 300, cluster,
             services=("spark-worker", "spark-master"), interval=2)
    run = ctx.wait_run("log_compaction", run_id)
    ctx.check_routing("log_compaction", run_id)
    build = ctx.db.ti("log_compaction", run_id, f"{group}.build_key_map", 0)
    clean = ctx.db.ti("log_compaction", run_id, f"{group}.clean", 0)
    apps = [(a["id"], a["state"]) for a in ctx.spark_master()["completedapps"] if a["name"] == app_name]
    if run["state"] == "success":
        assert build["state"] == clean["state"] == "success", ctx.story("log_compaction", run_id)
        compare(f"{topic}-0 cleaned after the Spark worker was killed", ctx.kafka.read(topic, 0), expected)
        outcome = (f"success: build_key_map try {build['try_number']}, Spark applications {apps}; the partition "
                   "holds exactly the latest value of every key")
    else:
        assert build["state"] == "failed", ctx.story("log_compaction", run_id)
        assert clean["state"] != "success" and not clean["hostname"], ctx.story("log_compaction", run_id)
        assert segment_hashes(pdir) == before, "the partition changed although its key map failed"
        alerts = wait_for("the alert of the failed run", lambda: ctx.alerts_for(run_id), 120, cluster,
                          services=("mailpit",), interval=2)
        assert len(alerts) == 1, [a["Subject"] for a in alerts]
        outcome = f"failed cleanly: build_key_map {build['state']} after {build['try_number']} tries, no clean"
    assert ctx.spark_master()["aliveworkers"] == 1
    SUMMARY["7_spark_worker_killed"] = {"run": run_id, "killed": [short(k) for k in killed],
                                        "stage_files_at_kill": stage,
                                        "outcome": outcome, "tries": ctx.db.tries("log_compaction", run_id)}
