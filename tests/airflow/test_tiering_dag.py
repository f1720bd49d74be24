"""log_tiering end to end with dag.test(): real log dirs, a real SeaweedFS (``weed server -s3``), the real metadata DB
and a real SMTP server. A run copies the sealed segments of a tiered topic into the bucket and deletes the local
copies past ``local.retention.ms``; its asset event carries the totals; a dry run changes nothing; a backfilled run
acts as of its interval; with the object store down the run fails with one alert naming the fix, and neither it
nor the retention DAG deletes a segment that has no finished remote copy."""
from __future__ import annotations

import datetime
import html
import pathlib
from collections.abc import Iterator
from typing import Any

import boto3
import pytest

from include.broker_launcher import free_port
from include.seaweedfs import WeedServer

from .conftest import asset_events, parse_dag, partition_results, run_results, task_instances, without_retry_delay
from .storage_fixtures import HOUR_MS, MINUTE_MS, T, T_MS, StorageFixture

pytestmark = [pytest.mark.airflow, pytest.mark.e2e, pytest.mark.tiered]

TOPIC = "tiered"
TOPICS = {
    # local copies kept 1 h once tiered, the whole log (local and remote) 3 h
    TOPIC: {"remote.storage.enable": True, "local.retention.ms": HOUR_MS, "retention.ms": 3 * HOUR_MS,
            "segment.bytes": 1024},
    "plain": {"retention.ms": -1, "segment.bytes": 1024},
}


@pytest.fixture(scope="module")
def weed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WeedServer]:
    server = WeedServer(tmp_path_factory.mktemp("weed")).start()
    yield server
    server.kill9()      # its folder is thrown away: a graceful stop only costs time


def s3(server: WeedServer) -> Any:
    return boto3.client("s3", endpoint_url=server.endpoint_url, aws_access_key_id=server.access_key,
                        aws_secret_access_key=server.secret_key, region_name="us-east-1")


def objects(server: WeedServer, bucket: str) -> dict[str, int]:
    """{key: size} of every object in ``bucket``."""
    out = {}
    for page in s3(server).get_paginator("list_objects_v2").paginate(Bucket=bucket):
        out.update({o["Key"]: o["Size"] for o in page.get("Contents", [])})
    return out


def tiered_config(storage: StorageFixture, server: WeedServer, bucket: str, topics: dict | None = None) -> None:
    broker: dict[str, Any] = {
        "remote.log.storage.system.enable": True,
        "rlmm.config.remote.log.metadata.topic.num.partitions": 2,
        "rsm.config.storage.s3.endpoint.url": server.endpoint_url,
        "rsm.config.storage.s3.bucket.name": bucket,
        "rsm.config.storage.aws.access.key.id": server.access_key,
        "rsm.config.storage.aws.secret.access.key": server.secret_key,
    }
    storage.write_config(topics or TOPICS, **broker)


def new_bucket(server: WeedServer, request: pytest.FixtureRequest) -> str:
    name = "dag-" + "".join(c if c.isalnum() else "-" for c in request.node.name.lower())[:40].strip("-")
    s3(server).create_bucket(Bucket=name)
    return name


@pytest.fixture
def tiered(storage: StorageFixture, weed: WeedServer, request: pytest.FixtureRequest) -> tuple[StorageFixture, str]:
    """``tiered-0``: 24 records at T-4h, 24 at T-150min, 4 at T-10min (1 KiB segments: several sealed segments of
    each age, the last one active); ``plain-0`` (not tiered); a fresh bucket."""
    bucket = new_bucket(weed, request)
    tiered_config(storage, weed, bucket)
    storage.produce(TOPIC, 0, [T_MS - 4 * HOUR_MS + i * 1000 for i in range(24)]
                    + [T_MS - 150 * MINUTE_MS + i * 1000 for i in range(24)]
                    + [T_MS - 10 * MINUTE_MS + i * 1000 for i in range(4)])
    storage.produce("plain", 0, [T_MS - 4 * HOUR_MS + i * 1000 for i in range(24)])
    return storage, bucket


def sealed(describe: dict) -> list[dict]:
    return describe["segments"][:-1]


def log_keys(found: dict[str, int], partition: int = 0) -> dict[int, int]:
    """{base offset: size} of the ``.log`` objects of ``tiered-<partition>``."""
    out = {}
    for key, size in found.items():
        name = key.rsplit("/", 1)[-1]
        if key.startswith(f"{TOPIC}-") and key.split("/")[-2] == str(partition) and name.endswith(".log"):
            out[int(name[:20])] = size
    return out


def bases(describe: dict) -> list[int]:
    return [s["base_offset"] for s in describe["segments"]]


def local_bases(storage: StorageFixture) -> list[int]:
    return bases(storage.describe()[(TOPIC, 0)])


def test_a_run_copies_the_sealed_segments_and_deletes_the_local_copies_past_local_retention(tiered, weed):
    storage, bucket = tiered
    before = storage.describe()
    log = before[(TOPIC, 0)]
    copied = {s["base_offset"]: s["size_bytes"] for s in sealed(log)}
    # past local.retention.ms (1 h) at T: the segments of T-4h and T-150min; the active one stays local
    locally_expired = [s["base_offset"] for s in sealed(log) if s["largest_timestamp"] < T_MS - HOUR_MS]
    # past retention.ms (3 h) at T, so gone from the whole log: the segments of T-4h only
    expired = [s["base_offset"] for s in sealed(log) if s["largest_timestamp"] < T_MS - 3 * HOUR_MS]
    assert len(copied) >= 4 and expired and len(expired) < len(locally_expired)

    run = without_retry_delay(parse_dag("log_tiering")).test(logical_date=T)

    assert run.state == "success"
    results = run_results(run)
    by_partition = partition_results(results, "tier")
    r = by_partition[(TOPIC, 0)]
    assert (r["copied_segments"], r["local_segments_deleted"], r["remote_segments_deleted"]) == (
        len(copied), len(locally_expired), len(expired))
    assert r["copied_bytes"] == sum(copied.values()) and r["lag_segments"] == 0
    assert set(by_partition) == {(TOPIC, 0)}                 # only the tiered topic's partitions are planned
    assert [b["partitions"] for b in results[("plan_batches", -1)]] == [[[TOPIC, 0]]]
    # In the bucket: the .log of every sealed segment that has not expired from the whole log, of its local size.
    found = objects(weed, bucket)
    assert log_keys(found) == {b: size for b, size in copied.items() if b not in expired}
    # Locally: the segments within local.retention.ms and the active one. The log starts where the remote copies
    # begin (remote retention raised it past the expired ones), not at the first local segment.
    after = storage.describe()
    assert bases(after[(TOPIC, 0)]) == [b for b in bases(log) if b not in locally_expired]
    assert after[(TOPIC, 0)]["log_start_offset"] == min(b for b in copied if b not in expired)
    assert after[(TOPIC, 0)]["log_end_offset"] == log["log_end_offset"]
    assert after[("plain", 0)] == before[("plain", 0)]

    # The run's asset event, read back from the metadata DB, carries the totals.
    (event,) = asset_events("kafka-log-maintenance://log_tiering", run_id=run.run_id)
    extra = event["extra"]
    assert {k: extra[k] for k in ("copied_segments", "copied_bytes", "local_segments_deleted",
                                  "remote_segments_deleted", "orphan_segments", "orphan_objects", "lag_segments")} == {
        "copied_segments": len(copied), "copied_bytes": r["copied_bytes"],
        "local_segments_deleted": len(locally_expired), "remote_segments_deleted": len(expired),
        "orphan_segments": 0, "orphan_objects": 0, "lag_segments": 0}
    assert extra["as_of"] == "2026-01-01T12:00:00.000Z" and event["source_task_id"] == "run_report"
    report = results[("run_report", -1)]
    assert report["totals"]["copied_segments"] == len(copied) and report["alert"] is None

    # The next interval: nothing left to copy or delete.
    later = parse_dag("log_tiering").test(logical_date=T + datetime.timedelta(minutes=5))
    assert later.state == "success"
    (later_event,) = asset_events("kafka-log-maintenance://log_tiering", run_id=later.run_id)
    assert later_event["extra"]["copied_segments"] == 0 and later_event["extra"]["local_segments_deleted"] == 0
    assert objects(weed, bucket) == found


def test_without_tiered_storage_a_run_has_nothing_to_do(storage):
    """remote.log.storage.system.enable off (every store before tiering), or on with no topic tiered: no batch, no
    object store asked (none runs here), the run green with zero totals."""
    storage.produce("events", 0, [T_MS - 4 * HOUR_MS + i * 1000 for i in range(24)])
    before = storage.snapshot()

    dag = parse_dag("log_tiering")
    runs = [dag.test(logical_date=T)]
    storage.write_config(**{"remote.log.storage.system.enable": True,        # a store nothing listens on
                            "rsm.config.storage.s3.endpoint.url": f"http://127.0.0.1:{free_port()}",
                            "rsm.config.storage.s3.bucket.name": "tiered-storage"})
    runs.append(dag.test(logical_date=T + datetime.timedelta(minutes=5)))

    for run in runs:
        assert run.state == "success"
        assert run_results(run)[("plan_batches", -1)] == [] and storage.snapshot() == before
        (event,) = asset_events("kafka-log-maintenance://log_tiering", run_id=run.run_id)
        assert all(event["extra"][k] == 0 for k in ("partitions", "copied_segments", "copied_bytes", "lag_segments"))


def test_a_dry_run_reports_the_plan_and_changes_nothing(tiered, weed):
    storage, bucket = tiered
    before = storage.snapshot()
    sealed_count = len(sealed(storage.describe()[(TOPIC, 0)]))

    run = parse_dag("log_tiering").test(logical_date=T, run_conf={"dry_run": True})

    assert run.state == "success"
    r = partition_results(run_results(run), "tier")[(TOPIC, 0)]
    assert r["copied_segments"] == sealed_count and r["nothing_to_do"] is False
    assert objects(weed, bucket) == {}
    assert storage.snapshot() == before


def test_a_backfilled_run_acts_as_of_its_interval(tiered, weed):
    storage, bucket = tiered
    before = storage.describe()[(TOPIC, 0)]
    old = [s["base_offset"] for s in sealed(before) if s["largest_timestamp"] < T_MS - 3 * HOUR_MS]
    # As of T - 2h only the segments of T-4h are past local.retention.ms, and nothing is past retention.ms yet.
    backfill = parse_dag("log_tiering").test(logical_date=T - 2 * datetime.timedelta(hours=1))

    assert backfill.state == "success"
    r = partition_results(run_results(backfill), "tier")[(TOPIC, 0)]
    assert r["copied_segments"] == len(sealed(before))
    assert r["local_segments_deleted"] == len(old) and r["remote_segments_deleted"] == 0
    assert local_bases(storage)[0] == [b for b in bases(before) if b not in old][0]
    assert set(log_keys(objects(weed, bucket))) == {s["base_offset"] for s in sealed(before)}
    # As of T the segments of T-4h have expired from the whole log: their remote copies go, the log start moves.
    run = parse_dag("log_tiering").test(logical_date=T)
    assert run.state == "success"
    r = partition_results(run_results(run), "tier")[(TOPIC, 0)]
    assert r["copied_segments"] == 0 and r["remote_segments_deleted"] == len(old)
    assert set(log_keys(objects(weed, bucket))) == {s["base_offset"] for s in sealed(before)} - set(old)
    assert storage.describe()[(TOPIC, 0)]["log_start_offset"] == [
        b for b in bases(before) if b not in old][0]


@pytest.mark.kills
def test_with_the_store_down_the_run_fails_with_one_alert_naming_the_fix_and_nothing_uncopied_is_deleted(
        storage, tmp_path: pathlib.Path, monkeypatch, smtp_server, request):
    """A private weed: the first run copies the sealed segments; then weed dies (kill -9), more records come in,
    and the next tiering run fails at its first task with one alert naming the fix, nothing local deleted; the
    retention DAG then deletes the local copies that have a finished remote copy and none of the others."""
    monkeypatch.setenv("STORAGE_MAINTENANCE_ALERT_EMAILS", "ops@example.com")
    server = WeedServer(tmp_path / "weed").start()
    try:
        bucket = new_bucket(server, request)
        # nothing expires from the whole log: only local retention deletes
        tiered_config(storage, server, bucket, {TOPIC: {**TOPICS[TOPIC], "retention.ms": -1}})
        storage.produce(TOPIC, 0, [T_MS - 4 * HOUR_MS + i * 1000 for i in range(24)]
                        + [T_MS - 150 * MINUTE_MS + i * 1000 for i in range(2)])
        # as of T - 3h30: every segment is within local.retention.ms (1 h): copied, none deleted locally
        first = parse_dag("log_tiering").test(logical_date=T - datetime.timedelta(hours=3, minutes=30))
        assert first.state == "success"
        tiered_bases = set(log_keys(objects(server, bucket)))
        assert tiered_bases
    finally:
        server.kill9()
    storage.produce(TOPIC, 0, [T_MS - 150 * MINUTE_MS + i * 1000 for i in range(24)]
                    + [T_MS - 10 * MINUTE_MS + i * 1000 for i in range(4)])
    before = storage.describe()[(TOPIC, 0)]
    files_before = storage.files(TOPIC, 0)
    uncopied = [s["base_offset"] for s in sealed(before) if s["base_offset"] not in tiered_bases]
    assert uncopied

    run = without_retry_delay(parse_dag("log_tiering")).test(logical_date=T)

    assert run.state == "failed"
    tis = task_instances(run)
    assert tis[("plan_batches", -1)].state == "failed"
    assert storage.files(TOPIC, 0) == files_before
    (message,) = smtp_server.messages
    body = html.unescape(message.get_body(preferencelist=("html",)).get_content())
    assert "object store unreachable" in body
    assert f"The object store at {server.endpoint_url} does not answer: start it" in body
    assert f"rsm.config.storage.s3.endpoint.url in {storage.config_path}" in body
    report = run_results(run)[("run_report", -1)]
    assert report["alert"]["sent"] is True

    # Retention as of T (every sealed segment is past local.retention.ms) deletes the local copies whose remote copy
    # finished, and none of the others.
    assert tiered_bases < set(bases(before))
    retention = parse_dag("log_retention").test(logical_date=T)
    assert retention.state == "success"
    deleted = partition_results(run_results(retention), "retention")[(TOPIC, 0)]["deleted_base_offsets"]
    assert sorted(deleted) == sorted(tiered_bases)
    left = local_bases(storage)
    assert set(uncopied) <= set(left) and not set(left) & tiered_bases
    assert storage.describe()[(TOPIC, 0)]["log_start_offset"] == 0
    assert storage.describe()[(TOPIC, 0)]["log_end_offset"] == before["log_end_offset"]


@pytest.mark.parametrize("fault", ["bucket missing", "credentials refused"])
def test_a_missing_bucket_or_refused_credentials_fail_the_run_at_once_with_one_alert_naming_the_fix(
        storage, weed, monkeypatch, smtp_server, fault):
    monkeypatch.setenv("STORAGE_MAINTENANCE_ALERT_EMAILS", "ops@example.com")
    tiered_config(storage, weed, "no-such-bucket")
    storage.produce(TOPIC, 0, [T_MS - 4 * HOUR_MS + i * 1000 for i in range(24)])
    if fault == "credentials refused":
        bucket = "dag-credentials"
        s3(weed).create_bucket(Bucket=bucket)
        text = storage.config_path.read_text().replace("no-such-bucket", bucket)
        storage.config_path.write_text(text.replace(weed.secret_key, "not-the-secret"))
    before = storage.snapshot()

    run = without_retry_delay(parse_dag("log_tiering")).test(logical_date=T)

    assert run.state == "failed"
    plan = task_instances(run)[("plan_batches", -1)]
    assert plan.state == "failed" and plan.try_number == 1        # no retry can fix it
    assert storage.snapshot() == before
    (message,) = smtp_server.messages
    body = html.unescape(message.get_body(preferencelist=("html",)).get_content())
    if fault == "bucket missing":
        assert "object store bucket missing" in body
        assert (f"Bucket no-such-bucket does not exist in the object store at {weed.endpoint_url}: create it (the "
                f"engine never creates buckets), or correct rsm.config.storage.s3.bucket.name in "
                f"{storage.config_path}") in body
        assert f"aws --endpoint-url {weed.endpoint_url} s3api create-bucket --bucket no-such-bucket" in body
    else:
        assert "object store refused the credentials" in body
        assert (f"correct rsm.config.storage.aws.access.key.id and rsm.config.storage.aws.secret.access.key in "
                f"{storage.config_path}") in body
        assert "not-the-secret" not in body


def test_the_store_causes_are_one_root_cause_per_store_whatever_met_them(tmp_path):
    """Every batch of a run that meets the store down is one root cause, keyed by the store, naming the fix."""
    from storage_maintenance.reporting.root_causes import Where, causes_of_run

    where = Where(str(tmp_path / "storage.yaml"), [], None,
                  {"endpoint_url": "http://weed:8333", "bucket": "logs"})
    from storage_engine.errors import (RemoteBucketMissingError, RemoteCredentialsError, RemoteObjectDamagedError,
                                       RemoteStoreUnreachableError)
    from storage_engine.jobs.summaries import partition_failure

    down = RemoteStoreUnreachableError("http://weed:8333", "Could not connect to the endpoint URL")
    failure = partition_failure((TOPIC, 0), down)
    alert = {"dag_id": "log_tiering", "run_id": "r", "failed_tasks": [
        {"task_id": "tier", "label": "a", "partitions": [failure, {**failure, "partition": 1}]},
        {"task_id": "tier", "label": "b", "partitions": [{**failure, "partition": 2}]},
        {"task_id": "plan_batches", "error": f"AirflowFailException: RemoteStoreUnreachableError: {down}"}]}
    (cause,) = causes_of_run(alert, where)
    assert cause["key"] == "store-unreachable:http://weed:8333" and cause["scope"] == "store"
    assert cause["seen_in"] == ["tier [a]", "tier [b]", "plan_batches"]
    assert "start it" in cause["fix"] and f"rsm.config.storage.s3.endpoint.url in {tmp_path}" in cause["fix"]

    bucket = partition_failure((TOPIC, 0), RemoteBucketMissingError("logs", "http://weed:8333"))
    credentials = partition_failure((TOPIC, 0), RemoteCredentialsError("InvalidAccessKeyId: unknown key"))
    damaged = partition_failure((TOPIC, 0), RemoteObjectDamagedError(
        "tiered-AAAAAAAAAAAAAAAAAAAAAA/0/00000000000000000042-BBBBBBBBBBBBBBBBBBBBBB.log", (42, 57),
        "ETag 1 expected, 2 found"))
    alert["failed_tasks"] = [{"task_id": "tier", "partitions": [bucket, credentials, damaged]}]
    kinds = {c["kind"]: c for c in causes_of_run(alert, where)}
    assert set(kinds) == {"store-bucket", "store-credentials", "remote-damaged"}
    assert kinds["store-bucket"]["key"] == "store-bucket:http://weed:8333/logs"
    assert "Bucket logs does not exist in the object store at http://weed:8333: create it" in \
        kinds["store-bucket"]["fix"]
    assert "rsm.config.storage.aws.access.key.id" in kinds["store-credentials"]["fix"]
    damaged_cause = kinds["remote-damaged"]
    assert damaged_cause["key"] == f"remote-damaged:{TOPIC}-0"
    # met by a copy's check after upload: the copy is not finished, the next run copies again
    assert "(offsets 42-57) in bucket logs no longer matches what was copied (size or checksum) right after its " \
        "upload" in damaged_cause["fix"] and "the next run removes the objects and copies the segment again" in \
        damaged_cause["fix"]
    # met by another reader: restore it, or move the log start offset past it
    (read_cause,) = causes_of_run({**alert, "dag_id": "log_verify",
                                   "failed_tasks": [{"task_id": "verify", "partitions": [damaged]}]}, where)
    assert "Restore the object from a backup" in read_cause["fix"]
    assert any("delete-records --topic tiered --partition 0 --offset 58" in c for c in read_cause["commands"])
