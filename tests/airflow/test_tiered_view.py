"""The Storage view's "Tiered storage" page over a topic really tiered into a real SeaweedFS: the sample logs, with
``access-log`` tiered (``remote.storage.enable``, one day of local retention), one tiering run, then one more sealed
segment on partition 0 that is not copied yet. The page, opened in chromium, shows per partition what the bucket
holds (remote bytes and segments, counted from a listing of the objects), the log start at the first remote
segment, the local figures as the engine describes them, the one segment of lag, and the store healthy."""
from __future__ import annotations

import os
import pathlib
import re
from collections import defaultdict

import boto3
import pytest
import yaml

from include.seaweedfs import WeedServer
from storage_engine.clock import ManualClock
from storage_engine.config_file import load_config
from storage_engine.log.manager import LogManager
from storage_engine.record.records import SimpleRecord

from .api_server import ApiServer
from .browser import logged_in
from .conftest import REPO
from .storage_fixtures import T_MS
from tests.typed import present

pytestmark = [pytest.mark.airflow, pytest.mark.e2e, pytest.mark.tiered]

ARTIFACTS = REPO / "var" / "test-artifacts" / "storage-view" / "tiered"
TOPIC = "access-log"
BUCKET = "tiered-view"
DAY_MS = 86_400_000


@pytest.fixture(scope="module")
def tiered(tmp_path_factory):
    from include.sample_data import generate
    from storage_engine.jobs.tiering import tier

    root = tmp_path_factory.mktemp("tiered-view")
    weed = WeedServer(root / "weed").start()
    try:
        data = yaml.safe_load((REPO / "include" / "config" / "storage.yaml").read_text())
        data["broker"]["log.dirs"] = [str(root / "logs" / "dir-a"), str(root / "logs" / "dir-b")]
        data["broker"].update({"rsm.config.storage.s3.endpoint.url": weed.endpoint_url,
                               "rsm.config.storage.s3.bucket.name": BUCKET,
                               "rsm.config.storage.aws.access.key.id": weed.access_key,
                               "rsm.config.storage.aws.secret.access.key": weed.secret_key})
        data["topics"][TOPIC].update({"remote.storage.enable": True, "local.retention.ms": DAY_MS})
        config_path = root / "storage.yaml"
        config_path.write_text(yaml.safe_dump(data))
        s3 = boto3.client("s3", endpoint_url=weed.endpoint_url, aws_access_key_id=weed.access_key,
                          aws_secret_access_key=weed.secret_key, region_name="us-east-1")
        s3.create_bucket(Bucket=BUCKET)
        config = load_config(config_path)
        generate(config, now_ms=T_MS, scale=0.5)
        result = tier(config, now_ms=T_MS)
        # One more sealed segment on partition 0, written after the run: the lag the page must show.
        with LogManager.open(config, clock=ManualClock(T_MS), partitions=[(TOPIC, 0)]) as mgr:
            log = present(mgr.get_log(TOPIC, 0))
            first = log.describe()["segments"][-1]["base_offset"]
            while log.describe()["segments"][-1]["base_offset"] == first:
                log.append_records([SimpleRecord(None, b"x" * 1000, T_MS)] * 20)
            log.flush()
        yield {"config_path": config_path, "config": load_config(config_path), "weed": weed, "s3": s3,
               "result": result}
    finally:
        weed.kill9()


@pytest.fixture(scope="module")
def server(tiered):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    srv = ApiServer(pathlib.Path(os.environ["AIRFLOW_HOME"]), tiered["config_path"], ARTIFACTS / "api-server.log")
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


def bucket_truth(s3) -> dict[int, dict]:
    """Per partition of the topic, from a listing of the bucket (not from the metadata the page reads): the
    ``.log`` objects' sizes and base offsets."""
    out: dict[int, dict] = defaultdict(lambda: {"bytes": 0, "segments": 0, "bases": []})
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET)
    for obj in (o for page in pages for o in page.get("Contents", [])):
        m = re.fullmatch(rf"{TOPIC}-[\w-]{{22}}/(\d+)/(\d{{20}})-[\w-]{{22}}\.log", obj["Key"])
        if m:
            p = out[int(m.group(1))]
            p["bytes"] += obj["Size"]
            p["segments"] += 1
            p["bases"].append(int(m.group(2)))
    return dict(out)


def local_truth(config) -> dict[int, dict]:
    with LogManager.open(config, clock=ManualClock(T_MS), read_only=True) as mgr:
        return {p: log.describe() for (t, p), log in mgr.logs.items() if t == TOPIC}


def test_the_tiered_page_shows_what_the_bucket_and_the_disk_hold(server, tiered):
    remote = bucket_truth(tiered["s3"])
    local = local_truth(tiered["config"])
    assert remote and all(r["segments"] for r in remote.values()), f"nothing was tiered: {tiered['result']}"
    api = server.get_json(f"/storage-maintenance/api/tiered?topic={TOPIC}", server.token())
    assert api["enabled"] and api["store"]["health"]["reachable"] and api["store"]["health"]["bucket_exists"]
    rows = {p["partition"]: p for p in api["partitions"]}
    assert set(rows) == set(local)
    for partition, d in local.items():
        row, r = rows[partition], remote[partition]
        assert (row["remote_bytes"], row["remote_segments"]) == (r["bytes"], r["segments"]), (partition, row, r)
        assert row["log_start_offset"] == min(r["bases"]) == d["log_start_offset"], (partition, row, d)
        assert row["local_log_start_offset"] == d["segments"][0]["base_offset"] > row["log_start_offset"]
        assert (row["local_bytes"], row["local_segments"], row["log_end_offset"]) == (
            d["size_bytes"], len(d["segments"]), d["log_end_offset"])
        assert row["highest_tiered_offset"] >= row["local_log_start_offset"] - 1
        # Partition 0 has one sealed segment written after the run; the others are caught up.
        expected_lag = [s["size_bytes"] for s in d["segments"][:-1] if s["base_offset"] > row["highest_tiered_offset"]]
        assert (row["lag_segments"], row["lag_bytes"]) == (len(expected_lag), sum(expected_lag))
        assert row["lag_segments"] == (1 if partition == 0 else 0), row

    with logged_in(server, viewport={"width": 1500, "height": 1000}) as context:
        page = context.new_page()
        page.goto(server.url + f"/storage-maintenance/topics/{TOPIC}")
        page.locator("#tiered-link").click()
        page.locator("#tiered-partitions").wait_for()
        assert page.locator('#store [data-field="health"]').get_attribute("data-healthy") == "true"
        assert page.locator('#store [data-field="bucket"]').inner_text() == BUCKET
        for partition, r in remote.items():
            tr = page.locator(f'#tiered-partitions tr[data-partition="{TOPIC}-{partition}"]')
            assert tr.locator('[data-field="remote_bytes"]').get_attribute("title") == f"{r['bytes']} bytes"
            assert tr.locator('[data-field="remote_segments"]').inner_text() == str(r["segments"])
            assert tr.locator('[data-field="log_start_offset"]').inner_text() == str(min(r["bases"]))
            assert tr.locator('[data-field="local_log_start_offset"]').inner_text() == \
                str(local[partition]["segments"][0]["base_offset"])
        lag = page.locator(f'#tiered-partitions tr[data-partition="{TOPIC}-0"] [data-field="lag"]')
        assert lag.get_attribute("title") == f"{rows[0]['lag_bytes']} bytes in 1 sealed segment(s)"
        total = page.locator(f'#tiered-topics tr[data-topic="{TOPIC}"]')
        assert total.locator('[data-field="remote_bytes"]').get_attribute("title") == \
            f"{sum(r['bytes'] for r in remote.values())} bytes"
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "tiered.png"), full_page=True)
