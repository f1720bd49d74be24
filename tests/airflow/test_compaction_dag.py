"""log_compaction end to end with dag.test(): a backfill-style sequence of intervals, a re-run, Spark maps."""
from __future__ import annotations

import datetime
import hashlib
import json
import os
import sys

import pytest

from storage_engine import layout
from storage_engine.clock import ManualClock
from storage_engine.maintenance.cleaner_manager import read_cleaner_checkpoints
from storage_engine.log.manager import LogManager
from storage_engine.record.records import SimpleRecord

from .conftest import asset_events, parse_dag, run_results, task_instances
from .storage_fixtures import HOUR_MS, T, T_MS, StorageFixture
from tests.typed import present

pytestmark = pytest.mark.airflow

TOPICS = {"ue": {"cleanup.policy": "compact", "segment.bytes": 1024, "min.cleanable.dirty.ratio": 0.01,
                 "delete.retention.ms": 0}}
N = 360


@pytest.fixture
def keyed(tmp_path, monkeypatch):
    """ue-0: 360 keyed records (20 keys) one every 30 s over the 3 hours before T."""
    fixture = StorageFixture(tmp_path / "storage", topics=TOPICS)
    monkeypatch.setenv("STORAGE_ENGINE_CONFIG", str(fixture.config_path))
    start = T_MS - 3 * HOUR_MS
    latest = {}
    with LogManager.open(fixture.config(), clock=ManualClock(T_MS)) as mgr:
        log = mgr.get_or_create_log("ue", 0)
        for i in range(N):
            key, value, ts = b"k%d" % (i % 20), b"value-%d" % i, start + i * 30_000
            assert isinstance(log.clock, ManualClock)   # the clock the test opened the store with
            log.clock.set(ts)
            log.append_records([SimpleRecord(key, value, ts)])
            latest[key] = (i, value, ts)
    return fixture, latest


def checkpoint(fixture) -> int | None:
    for d in fixture.log_dirs:
        cp = read_cleaner_checkpoints(str(d)).get(("ue", 0))
        if cp is not None:
            return cp
    return None


def read_back(fixture):
    with LogManager.open(fixture.config(), clock=ManualClock(T_MS)) as mgr:
        return list(present(mgr.get_log("ue", 0)).read_records())


def snapshot(fixture) -> dict:
    out = {}
    for d in fixture.log_dirs:
        for root, _dirs, files in os.walk(d):
            for f in files:
                if f == layout.DIR_LOCK_FILE or f.startswith(layout.ENGINE_PREFIX):
                    continue
                with open(os.path.join(root, f), "rb") as fh:
                    out[os.path.join(root, f)] = hashlib.sha256(fh.read()).hexdigest()
    return out


def test_backfill_sequence_advances_the_checkpoint_in_order_and_a_rerun_is_a_no_op(keyed):
    fixture, latest = keyed
    dag = parse_dag("log_compaction")
    ends = [T - datetime.timedelta(hours=2), T - datetime.timedelta(hours=1), T]
    checkpoints: list[int] = []
    for end in ends:
        run = dag.test(logical_date=end, run_conf={"map_strategy": "local"})
        assert run.state == "success"
        assert run.data_interval_end == end
        results = run_results(run)
        plan = results[("select_dirtiest_logs", -1)]
        assert plan["upper_time_bound_ms"] == int(end.timestamp() * 1000)
        cp = checkpoint(fixture)
        checkpoints.append(present(cp))
        # Bounded by the interval end: nothing at or after it was cleaned.
        end_ms = int(end.timestamp() * 1000)
        records = read_back(fixture)
        assert all(r.timestamp < end_ms for r in records if r.offset < cp)
        cleaned = [r for (task, _), r in results.items() if task == "clean"]
        assert len(cleaned) == 1 and cleaned[0]["map"] == "local"
        assert cleaned[0]["size_bytes_after"] < cleaned[0]["size_bytes_before"]
        # Its asset event, read back from the metadata DB, carries the same figures.
        (event,) = asset_events(run_id=run.run_id)
        assert event["uri"] == "kafka-log://ue/0" and event["source_task_id"] == "clean"
        assert event["extra"]["kind"] == "compaction"
        assert event["extra"]["records_removed"] == cleaned[0]["records_removed"]
        assert event["extra"]["bytes_reclaimed"] == cleaned[0]["size_bytes_before"] - cleaned[0]["size_bytes_after"]
        assert event["extra"]["as_of"] == end.strftime("%Y-%m-%dT%H:%M:%S.000Z")
        report = results[("run_report", -1)]
        assert [(r["task"], r["partition"], r["status"]) for r in report["rows"]] == [("clean", "ue-0", "changed")]
    assert checkpoints == sorted(checkpoints) and checkpoints[0] < checkpoints[-1]

    # Latest value per key survives, offsets strictly increasing and unchanged.
    records = read_back(fixture)
    offsets = [r.offset for r in records]
    assert offsets == sorted(set(offsets))
    by_key = {}
    for r in records:
        by_key[r.key] = (r.offset, r.value)
    assert by_key == {k: (i, v) for k, (i, v, _ts) in latest.items()}

    # Re-running the first interval changes nothing and says so.
    before = snapshot(fixture)
    rerun = dag.test(logical_date=ends[0], run_conf={"map_strategy": "local"})
    assert rerun.state == "success"
    plan = run_results(rerun)[("select_dirtiest_logs", -1)]
    assert plan["nothing_to_do"] is True and plan["selected"] == []
    assert checkpoint(fixture) == checkpoints[-1]
    assert snapshot(fixture) == before
    assert task_instances(rerun)[("clean", -1)].state == "skipped"
    assert asset_events(run_id=rerun.run_id) == []


def test_dry_run_selects_and_reports_without_changing_a_byte(keyed):
    fixture, _latest = keyed
    before = snapshot(fixture)
    run = parse_dag("log_compaction").test(logical_date=T, run_conf={"dry_run": True, "map_strategy": "local"})
    assert run.state == "success"
    results = run_results(run)
    assert results[("select_dirtiest_logs", -1)]["selected"][0]["dirty_ratio"] > 0.01
    (clean,) = [r for (task, _), r in results.items() if task == "clean"]
    assert clean["dry_run"] is True and clean["records_removed"] > 0
    assert snapshot(fixture) == before
    assert checkpoint(fixture) is None


@pytest.mark.spark
def test_spark_strategy_submits_the_key_map_job_and_cleans_with_its_map(keyed, monkeypatch):
    fixture, latest = keyed
    venv_bin = os.path.dirname(sys.executable)
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "local[2]"}))
    monkeypatch.setenv("PATH", venv_bin + os.pathsep + os.environ.get("PATH", ""))
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)
    monkeypatch.setenv("SPARK_LOCAL_IP", "127.0.0.1")
    monkeypatch.setenv("STORAGE_ENGINE_KEYMAP_DIR", str(fixture.root / "keymaps"))
    run = parse_dag("log_compaction").test(logical_date=T, run_conf={"map_strategy": "spark"})
    assert run.state == "success"
    tis = task_instances(run)
    assert tis[("build_key_map", 0)].state == "success"
    assert tis[("build_key_map", 0)].rendered_map_index == "ue-0"
    results = run_results(run)
    (clean,) = [r for (task, _), r in results.items() if task == "clean"]
    assert clean["map"] == "spark" and clean["map_keys"] == 20
    assert clean["checkpoint_written"]
    # The run-scoped map was written under STORAGE_ENGINE_KEYMAP_DIR and removed once the swap was durable,
    # with the run's folder.
    assert (fixture.root / "keymaps").is_dir()
    assert list((fixture.root / "keymaps").iterdir()) == []
    by_key = {r.key: r.value for r in read_back(fixture)}
    assert by_key == {k: v for k, (_i, v, _ts) in latest.items()}


def test_key_map_tasks_take_path_and_pyspark_python_from_the_worker_when_they_run(storage, monkeypatch):
    # Parsing the DAG file bakes in no environment of the parsing process: the spark-submit a key-map task runs
    # gets the PATH and PYSPARK_PYTHON of the worker at run time (its interpreter's folder first on PATH, so the
    # pip package's spark-submit is found), and a task's own env_vars win over both.
    from storage_maintenance.tasks.compaction import BuildKeyMapOperator
    monkeypatch.setenv("PATH", "/parser/bin")
    monkeypatch.setenv("PYSPARK_PYTHON", "/parser/python")
    (task,) = [t for t in parse_dag("log_compaction").tasks if t.task_id.endswith("build_key_map")]
    assert not task.partial_kwargs.get("env_vars")
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "local[2]"}))
    monkeypatch.setenv("PATH", "/worker/bin")
    monkeypatch.delenv("PYSPARK_PYTHON")
    op = BuildKeyMapOperator(task_id="build_key_map", topic="ue", partition=0, conn_id="spark_default",
                             application_args=["--topic", "ue"])
    hook = op._get_hook()
    hook._build_spark_submit_command(op.application)
    assert hook._env == {"PATH": os.path.dirname(sys.executable) + os.pathsep + "/worker/bin",
                         "PYSPARK_PYTHON": sys.executable}
    monkeypatch.setenv("PYSPARK_PYTHON", "/worker/python")
    hook = op._get_hook()
    hook._build_spark_submit_command(op.application)
    assert hook._env is not None and hook._env["PYSPARK_PYTHON"] == "/worker/python"
    op = BuildKeyMapOperator(task_id="build_key_map", topic="ue", partition=0, conn_id="spark_default",
                             application_args=["--topic", "ue"], env_vars={"PYSPARK_PYTHON": "/task/python"})
    hook = op._get_hook()
    hook._build_spark_submit_command(op.application)
    assert hook._env is not None and hook._env["PYSPARK_PYTHON"] == "/task/python"
    assert op.env_vars == {"PYSPARK_PYTHON": "/task/python"}


def test_key_map_submissions_carry_the_jobs_spark_settings(monkeypatch):
    # The spark-submit command the provider's hook builds for a key-map task: the job's own settings (no web UI,
    # a C1-only driver JVM), which a DAG's conf can override one by one.
    from spark_jobs.build_key_map import SUBMIT_CONF
    from storage_maintenance.tasks.compaction import BuildKeyMapOperator
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "local[2]"}))
    commands = []
    for conf in (None, {"spark.ui.enabled": "true"}):
        op = BuildKeyMapOperator(task_id="build_key_map", topic="ue", partition=0, conn_id="spark_default",
                                 conf=conf, application_args=["--topic", "ue"])
        commands.append(" ".join(op._get_hook()._build_spark_submit_command(op.application)))
    assert SUBMIT_CONF["spark.driver.extraJavaOptions"] == "-XX:TieredStopAtLevel=1"
    for command in commands:
        assert "--master local[2]" in command
        assert "--conf spark.driver.extraJavaOptions=-XX:TieredStopAtLevel=1" in command
    assert "--conf spark.ui.enabled=false" in commands[0] and "spark.ui.enabled=true" not in commands[0]
    assert "--conf spark.ui.enabled=true" in commands[1] and "spark.ui.enabled=false" not in commands[1]


def test_missing_spark_connection_fails_the_selection_instead_of_submitting_to_yarn(keyed, monkeypatch):
    monkeypatch.delenv("AIRFLOW_CONN_SPARK_DEFAULT", raising=False)
    run = parse_dag("log_compaction").test(logical_date=T, run_conf={"map_strategy": "spark"})
    assert run.state == "failed"
    assert task_instances(run)[("select_dirtiest_logs", -1)].state == "failed"


def test_a_partition_compaction_cannot_read_fails_its_clean_task_and_the_others_are_cleaned(tmp_path, monkeypatch):
    fixture = StorageFixture(tmp_path / "storage", topics=TOPICS)
    monkeypatch.setenv("STORAGE_ENGINE_CONFIG", str(fixture.config_path))
    with LogManager.open(fixture.config(), clock=ManualClock(T_MS)) as mgr:
        for p in (0, 1):
            log = mgr.get_or_create_log("ue", p)
            for i in range(120):
                ts = T_MS - 3 * HOUR_MS + i * 30_000
                assert isinstance(mgr.clock, ManualClock)   # the clock the test opened the store with
                mgr.clock.set(ts)
                log.append_records([SimpleRecord(b"k%d" % (i % 5), b"v%d" % i, ts)])
    broken = sorted(fixture.partition_dir("ue", 1).glob("*.timeindex"))[-1]
    broken.unlink()
    broken.mkdir()

    run = parse_dag("log_compaction").test(logical_date=T, run_conf={"map_strategy": "local"})

    # ue-0 is cleaned; ue-1's own clean task fails naming the file (no retry: it reads the same files), so the
    # run fails.
    assert run.state == "failed"
    results = run_results(run)
    plan = results[("select_dirtiest_logs", -1)]
    assert [(s["topic"], s["partition"]) for s in plan["selected"]] == [("ue", 0)]
    (skipped,) = plan["skipped"]
    assert (skipped["topic"], skipped["partition"]) == ("ue", 1)
    assert skipped["reason"].startswith("cannot be read: StorageIOError: cannot open time index")
    (blocked,) = plan["blocked"]
    assert (blocked["topic"], blocked["partition"], blocked["error_type"]) == ("ue", 1, "StorageIOError")
    states = {(task, ti.map_index): (ti.state, ti.try_number) for (task, _), ti in task_instances(run).items()
              if task == "clean"}
    assert sorted(states.values()) == [("failed", 1), ("success", 1)]
    (clean,) = [r for (task, _), r in results.items() if task == "clean" and "records_removed" in r]
    assert (clean["topic"], clean["partition"]) == ("ue", 0) and clean["records_removed"] > 0
    (failed,) = [r for (task, _), r in results.items() if task == "clean" and r.get("failures")]
    (failure,) = failed["failures"]
    assert (failure["topic"], failure["partition"]) == ("ue", 1) and str(broken) in failure["error"]


# -- damage under compaction (ARCHITECTURE.md section 6) ----------------------------------------------------------

def damage_a_dirty_batch(fixture) -> tuple[str, int]:
    """Flip one bit inside the records of the second batch of the second sealed segment of ue-0 (a CRC mismatch
    only: the records still decode). Returns (file, byte position of the batch)."""
    import struct
    logs = sorted(fixture.partition_dir("ue", 0).glob("*.log"))
    path = str(logs[1])
    with open(path, "r+b") as f:
        data = f.read()
        position = 12 + struct.unpack_from(">i", data, 8)[0]
        assert struct.unpack_from(">i", data, position + 8)[0] > 60
        f.seek(position + 64)
        f.write(bytes([data[position + 64] ^ 0x01]))
    return path, position


@pytest.fixture
def alerting(monkeypatch, smtp_server, webhook_server):
    monkeypatch.setenv("STORAGE_MAINTENANCE_ALERT_EMAILS", "ops@example.com")
    monkeypatch.setenv("STORAGE_MAINTENANCE_ALERT_WEBHOOK", webhook_server.url)
    return smtp_server, webhook_server


def assert_failed_once_naming_the_partition(fixture, run, alerting, task_id: str, path: str, position: int,
                                            before: dict) -> str:
    """The task failed at once naming ue-0 and the damage; ue-0 is marked uncleanable with it (shown by the
    Storage view's data); not a byte of the log changed, the checkpoint did not move; one alert names ue-0."""
    from storage_engine.inspection.detail import partition_detail
    mailbox, webhook = alerting
    assert run.state == "failed"
    tis = task_instances(run)
    (failed,) = [ti for (task, _), ti in tis.items() if task == task_id]
    assert failed.state == "failed" and failed.try_number == 1          # no retry: it reads the same bytes
    reason = partition_detail(fixture.config(), "ue", 0)["uncleanable"]
    assert reason and path in reason and f"byte position {position}" in reason and "offsets [" in reason
    assert snapshot(fixture) == before and checkpoint(fixture) is None
    assert not [p for p in before if p.endswith(".deleted")]
    assert len(mailbox.messages) == 1 and len(webhook.received) == 1
    assert mailbox.messages[0]["Subject"].endswith(": 1 task(s), 1 partition(s): ue-0")
    alert = webhook.received[0]["body"]
    assert alert["failed_partitions"] == ["ue-0"]
    (task,) = alert["failed_tasks"]
    assert task["task_id"] == task_id and task["label"] == "ue-0"
    assert "ue-0" in task["error"] and path in task["error"] and f"byte position {position}" in task["error"]
    (part,) = task["partitions"]
    assert (part["topic"], part["partition"], part["permanent"]) == ("ue", 0, True) and path in part["error"]
    report = run_results(run)[("run_report", -1)]
    assert (task_id, "ue-0", "failed") in {(r["task"], r["partition"], r["status"]) for r in report["rows"]}
    return reason


def test_damage_fails_the_clean_task_marks_the_partition_uncleanable_and_alerts_once(keyed, alerting):
    fixture, _latest = keyed
    path, position = damage_a_dirty_batch(fixture)
    before = snapshot(fixture)
    run = parse_dag("log_compaction").test(logical_date=T, run_conf={"map_strategy": "local"})
    reason = assert_failed_once_naming_the_partition(fixture, run, alerting, "clean", path, position, before)
    assert "key-map phase" in reason
    # The alert names the fix: repair, then clear the mark.
    mailbox, webhook = alerting
    (cause,) = webhook.received[0]["body"]["root_causes"]
    clear = f"--config {fixture.config_path} compact --clear-uncleanable --topic ue --partition 0"
    assert cause["key"] == "corrupt:ue-0" and any(c.endswith(clear) for c in cause["commands"])
    # While it stays marked, every run fails its clean task again (at once, no retry), naming the mark and the
    # command that clears it; the root cause was alerted, so no run sends another alert.
    for minute in (5, 10):
        rerun = parse_dag("log_compaction").test(logical_date=T.replace(minute=minute),
                                                 run_conf={"map_strategy": "local"})
        assert rerun.state == "failed" and len(mailbox.messages) == 1 and len(webhook.received) == 1
        (skipped,) = run_results(rerun)[("select_dirtiest_logs", -1)]["skipped"]
        assert skipped["reason"] == f"uncleanable: {reason}"
        (failed,) = [ti for (task, _), ti in task_instances(rerun).items() if task == "clean"]
        assert failed.state == "failed" and failed.try_number == 1
        (failure,) = run_results(rerun)[("clean", failed.map_index)]["failures"]
        assert failure["error_type"] == "CorruptRecordError" and path in failure["error"]
        assert "marked uncleanable" in failure["error"] and "compact --clear-uncleanable --topic ue --partition 0" \
            in failure["error"]
        report = run_results(rerun)[("run_report", -1)]
        assert report["alert"]["sent"] is False
    assert snapshot(fixture) == before
    from storage_engine.jobs import compaction
    compaction.clear_uncleanable(fixture.config(), "ue", 0)
    assert parse_dag("log_compaction").test(logical_date=T, run_conf={"map_strategy": "local"}).state == "failed"
    assert len(mailbox.messages) == 2 and snapshot(fixture) == before


@pytest.mark.spark
def test_damage_under_the_spark_key_map_fails_that_task_marks_the_partition_and_alerts_once(keyed, alerting,
                                                                                           monkeypatch):
    fixture, _latest = keyed
    venv_bin = os.path.dirname(sys.executable)
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "local[2]"}))
    monkeypatch.setenv("PATH", venv_bin + os.pathsep + os.environ.get("PATH", ""))
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)
    monkeypatch.setenv("SPARK_LOCAL_IP", "127.0.0.1")
    monkeypatch.setenv("STORAGE_ENGINE_KEYMAP_DIR", str(fixture.root / "keymaps"))
    path, position = damage_a_dirty_batch(fixture)
    before = snapshot(fixture)
    run = parse_dag("log_compaction").test(logical_date=T, run_conf={"map_strategy": "spark"})
    reason = assert_failed_once_naming_the_partition(fixture, run, alerting, "build_key_map", path, position,
                                                     before)
    assert "key map was not built: damaged batch in ue-0" in reason
    assert {ti.state for (task, _), ti in task_instances(run).items() if task == "clean"} == {"upstream_failed"}
    # No map and no damage report are left behind.
    left = [os.path.join(root, f) for root, _dirs, files in os.walk(fixture.root / "keymaps") for f in files]
    assert left == []
    # The next run fails ue-0's clean task on the mark (no Spark job), the same root cause: no second alert.
    rerun = parse_dag("log_compaction").test(logical_date=T.replace(minute=5), run_conf={"map_strategy": "spark"})
    assert rerun.state == "failed" and run_results(rerun)[("spark_submissions", -1)] == []
    (failed,) = [ti for (task, _), ti in task_instances(rerun).items() if task == "clean"]
    assert failed.state == "failed"
    mailbox, webhook = alerting
    assert len(mailbox.messages) == 1 and len(webhook.received) == 1
