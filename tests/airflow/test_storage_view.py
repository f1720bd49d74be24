"""The Storage view as an operator uses it: a real ``airflow api-server`` over generated sample logs, maintained
by real DAG runs, every page opened in Debian's chromium (headless, driven by Playwright) and its figures
checked against the engine's ``describe``; screenshots under ``var/test-artifacts/storage-view/``.

Every plugin endpoint answers 401 without Airflow's login; the two actions need Airflow's permissions and a
JSON body.
"""
from __future__ import annotations

import json
import os
import pathlib
import urllib.parse

import pytest

from include.broker_launcher import BrokerLauncher
from storage_engine.clock import ManualClock
from storage_engine.log.manager import LogManager

from .browser import logged_in
from .console_sample import UNCLEANABLE
from .conftest import REPO, parse_dag, run_results
from .storage_fixtures import T, T_MS
from tests.typed import present

pytestmark = [pytest.mark.airflow, pytest.mark.e2e]

ARTIFACTS = REPO / "var" / "test-artifacts" / "storage-view"


@pytest.fixture(scope="module")
def sample(console_sample):
    """Sample logs (the demo's three topics, small) maintained by one retention and one compaction run: the worker's
    build of them (tests/airflow/console_sample.py), as built, for this file."""
    with console_sample.fresh() as built:
        yield built


@pytest.fixture(scope="module")
def server(sample, console_sample):
    """The api-server over the sample: the worker's one, started by the first file that uses it and kept for the
    next ones (tests/airflow/console_sample.py)."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return console_sample.api_server(ARTIFACTS / "api-server.log")


def describe(config) -> dict:
    """{(topic, partition): Log.describe()} as the engine sees the logs."""
    with LogManager.open(config, clock=ManualClock(T_MS)) as mgr:
        return {tp: log.describe() for tp, log in mgr.logs.items()}


def plugin_routes():
    from storage_maintenance.ui.app import PREFIX, app

    samples = {"topic": "access-log", "partition": "0", "dag_id": "log_retention", "run_id": "x"}
    for route in app.routes:
        methods = sorted(getattr(route, "methods", None) or [])
        path = route.path  # type: ignore[attr-defined]  # the app's routes are Routes and Mounts, which have a path
        for name, value in samples.items():
            path = path.replace("{%s}" % name, value)
        for method in methods:
            if method != "HEAD":
                yield method, PREFIX + path


def test_every_plugin_endpoint_needs_the_airflow_login(server):
    routes = list(plugin_routes())
    assert {m for m, _ in routes} == {"GET", "POST"} and len(routes) >= 12
    for method, path in routes:
        status, body, _ = server.request(path, method=method, body={} if method == "POST" else None)
        assert status == 401, (method, path, status, body[:200])
    # No unauthenticated documentation either.
    for path in ("/storage-maintenance/docs", "/storage-maintenance/openapi.json"):
        assert server.request(path)[0] in (401, 404)


def test_json_api_matches_describe(server, sample):
    token = server.token()
    truth = describe(sample["config"])
    page = server.get_json("/storage-maintenance/api/partitions?limit=1000", token)
    assert page["total"] == len(truth) == len(page["partitions"]) == 8
    for p in page["partitions"]:
        d = truth[(p["topic"], p["partition"])]
        assert (p["size_bytes"], p["segments"], p["log_start_offset"], p["log_end_offset"]) == (
            d["size_bytes"], len(d["segments"]), d["log_start_offset"], d["log_end_offset"]), p
        assert p["recovery_point"] == d["recovery_point"]
    dirs = server.get_json("/storage-maintenance/api/log-dirs", token)["log_dirs"]
    for d in dirs:
        mine = [v for v in truth.values() if os.path.dirname(v["dir"]) == d["path"]]
        assert d["partitions"] == len(mine) and d["size_bytes"] == sum(v["size_bytes"] for v in mine)
    assert sum(d["deleted_bytes"] for d in dirs) > 0                  # retention's .deleted files, not yet purged
    # Filtering and sorting happen on the server.
    biggest = server.get_json("/storage-maintenance/api/partitions?sort=size&desc=true&limit=3", token)
    assert [p["size_bytes"] for p in biggest["partitions"]] == sorted(
        (v["size_bytes"] for v in truth.values()), reverse=True)[:3]
    only = server.get_json("/storage-maintenance/api/partitions?topic=user-emails", token)
    assert {p["topic"] for p in only["partitions"]} == {"user-emails"} and only["total"] == 3
    # The last retention result per partition links to the run that produced it.
    retention_run = sample["retention"].run_id
    results = {(p["topic"], p["partition"]): p["last_retention"] for p in page["partitions"]}
    assert all(r["run_id"] == retention_run for r in results.values())
    reclaimed = {tp: r["bytes_reclaimed"] for tp, r in results.items() if r["segments_deleted"]}
    assert reclaimed and all(tp[0] in ("access-log", "user-sessions") for tp in reclaimed)


def test_partition_history_and_plan_over_the_api(server, sample):
    token = server.token()
    cleaned = run_results(sample["compaction"])
    (clean,) = [r for (task, _), r in cleaned.items() if task == "clean"][:1] or [None]
    assert clean is not None
    detail = server.get_json(f"/storage-maintenance/api/partitions/{clean['topic']}/{clean['partition']}", token)
    # (the newest compaction event of this run: test_console's sample, in the same metadata DB, compacts the same
    # partitions under the same run id)
    events = [e for e in detail["events"] if e["extra"]["kind"] == "compaction"
              and e["run_id"] == sample["compaction"].run_id]
    assert events, detail["events"]
    event = max(events, key=lambda e: e["timestamp"])
    assert event["extra"]["bytes_reclaimed"] == clean["size_bytes_before"] - clean["size_bytes_after"]
    assert [s["base_offset"] for s in detail["segment_list"]] == [
        s["base_offset"] for s in describe(sample["config"])[(clean["topic"], clean["partition"])]["segments"]]
    # Two days later, access-log (retention 3 days) has more to delete than at T.
    plan = server.get_json("/storage-maintenance/api/plan?as_of=2026-01-03T12:00:00Z", token)
    assert plan["as_of"] == "2026-01-03T12:00:00.000Z"
    later = {(r["topic"], r["partition"]): r for r in plan["retention"]["partitions"]}
    assert any(r["segments_deleted"] for tp, r in later.items() if tp[0] == "access-log")
    assert plan["compaction"]["skipped"][0]["reason"].startswith("uncleanable: CorruptRecordError")
    status, body, _ = server.request("/storage-maintenance/api/plan?as_of=yesterday", token=token)
    assert status == 422 and b"as_of must be an ISO date-time" in body
    assert server.request("/storage-maintenance/api/partitions/nope/0", token=token)[0] == 404


def test_actions_need_permission_and_a_json_body(server, sample):
    from storage_engine.maintenance.cleaner_manager import read_uncleanable

    name = "%s-%d" % UNCLEANABLE
    clear = f"/storage-maintenance/api/partitions/{UNCLEANABLE[0]}/{UNCLEANABLE[1]}/clear-uncleanable"
    viewer, admin = server.token("viewer"), server.token("admin")
    assert server.request(clear, token=viewer, method="POST", body={})[0] == 403
    assert server.request("/storage-maintenance/api/dry-runs", token=viewer, method="POST",
                          body={"dag_id": "log_retention"})[0] == 403
    assert server.request(clear, token=admin, method="POST", body=b"x=1",
                          content_type="application/x-www-form-urlencoded")[0] == 422
    assert any(name in read_uncleanable(d) for d in sample["config"].log_dirs)       # nothing cleared yet
    status, body, _ = server.request("/storage-maintenance/api/dry-runs", token=admin, method="POST",
                                     body={"dag_id": "log_retention", "topics": ["access-log"]})
    assert status == 200, body
    run_id = json.loads(body)["run_id"]
    run = server.get_json(f"/api/v2/dags/log_retention/dagRuns/{urllib.parse.quote(run_id)}", admin)
    assert run["conf"] == {"dry_run": True, "topics": ["access-log"]}
    assert run["logical_date"] is None                  # it will act as of its trigger time
    status, body, _ = server.request("/storage-maintenance/api/dry-runs", token=admin, method="POST",
                                     body={"dag_id": "other_dag"})
    assert status == 422
    # the refusals are in Airflow's audit log and in the console's list of actions, beside the dry run done
    audit = {e: [dict(x, extra=json.loads(x["extra"])) for x in server.get_json(
        f"/api/v2/eventLogs?event=storage.{e}&order_by=-when&limit=100", admin)["event_logs"]]
        for e in ("clear-uncleanable", "dry-run")}
    (refused_clear,) = [e for e in audit["clear-uncleanable"] if e["owner"] == "viewer"]
    assert refused_clear["dag_id"] == "log_compaction"
    assert refused_clear["extra"] == {"outcome": "refused", "topic": UNCLEANABLE[0], "partition": UNCLEANABLE[1],
                                      "detail": "needs edit permission on the DAG log_compaction"}
    dry_runs = [(e["owner"], e["extra"]["outcome"], e["dag_id"], e["extra"]["topics"]) for e in audit["dry-run"]]
    assert ("viewer", "refused", "log_retention", None) in dry_runs
    assert ("admin", "done", "log_retention", ["access-log"]) in dry_runs
    (done,) = [e for e in audit["dry-run"] if e["owner"] == "admin" and e["extra"]["topics"] == ["access-log"]]
    assert done["extra"]["detail"] == f"run {run_id}"
    listed = server.get_json("/storage-maintenance/api/actions?topic=access-log", admin)["actions"]
    assert ("dry-run", "admin", "done") in [(a["action"], a["user"], a["outcome"]) for a in listed]
    assert all(a["target"].get("topic") == "access-log" or "access-log" in a["target"].get("topics", [])
               for a in listed)
    listed = server.get_json("/storage-maintenance/api/actions", admin)["actions"]
    assert {(a["action"], a["user"], a["outcome"]) for a in listed} >= {
        ("clear-uncleanable", "viewer", "refused"), ("dry-run", "viewer", "refused"), ("dry-run", "admin", "done")}


@pytest.fixture(scope="module")
def browser(server):
    with logged_in(server, viewport={"width": 1500, "height": 1000}) as context:
        yield context


def shot(page, name: str) -> pathlib.Path:
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    assert path.stat().st_size > 10_000
    return path


def cell(row, field: str) -> str:
    return row.locator(f'[data-field="{field}"]').inner_text().strip()


def test_pages_show_the_storage_as_describe_sees_it(server, sample, browser):
    truth = describe(sample["config"])
    page = browser.new_page()
    base = server.url + "/storage-maintenance"

    page.goto(base + "/")
    for d in sample["config"].log_dirs:
        row = page.locator(f'#log-dirs tr[data-path="{d}"]')
        mine = [v for v in truth.values() if os.path.dirname(v["dir"]) == d]
        assert cell(row, "partitions") == str(len(mine))
        assert row.locator('[data-field="size_bytes"]').get_attribute("title") == f"{sum(v['size_bytes'] for v in mine)} bytes"
    assert page.locator("#runs").inner_text().count("log_retention") >= 1
    shot(page, "01-log-dirs")

    page.goto(base + "/partitions?sort=size&desc=true")
    rows = page.locator("#partitions tr[data-partition]")
    assert rows.count() == len(truth)
    for i in range(rows.count()):
        row = rows.nth(i)
        topic, _, part = row.get_attribute("data-partition").rpartition("-")
        d = truth[(topic, int(part))]
        assert row.locator('[data-field="size_bytes"]').get_attribute("title") == f"{d['size_bytes']} bytes"
        assert (cell(row, "segments"), cell(row, "log_start_offset"), cell(row, "log_end_offset"),
                cell(row, "recovery_point")) == (str(len(d["segments"])), str(d["log_start_offset"]),
                                                 str(d["log_end_offset"]), str(d["recovery_point"]))
    uncleanable = page.locator('#partitions tr[data-partition="%s-%d"]' % UNCLEANABLE)
    assert "CRC mismatch (test damage)" in uncleanable.inner_text()
    assert uncleanable.get_by_role("button", name="Clear (retry cleaning)").count() == 1
    shot(page, "02-partitions")

    page.goto(base + "/partitions/access-log/0")
    d = truth[("access-log", 0)]
    assert cell(page.locator("#facts"), "log_end_offset") == str(d["log_end_offset"])
    assert page.locator("#segments tr").count() == len(d["segments"]) + 1
    assert page.locator("#chart svg rect.reclaimed").count() >= 1        # retention reclaimed bytes
    assert page.locator("#deleted tr").count() > 1                        # .deleted files awaiting purge
    shot(page, "03-partition-retention")

    clean = next(r for (task, _), r in run_results(sample["compaction"]).items() if task == "clean")
    page.goto(base + f"/partitions/{clean['topic']}/{clean['partition']}")
    assert page.locator("#chart svg polyline.size").count() == 1
    assert "compaction" in page.locator("#events").inner_text()
    shot(page, "04-partition-compaction")

    page.goto(base + "/plan?as_of=2026-01-03T12:00:00Z")
    assert "2026-01-03T12:00:00.000Z" in page.locator("h1").inner_text()
    assert page.locator("#retention tr[data-partition]").count() >= 1
    assert page.locator("#compaction tr[data-partition]").count() >= 1
    shot(page, "05-plan")

    run_id = sample["retention"].run_id
    page.goto(base + f"/runs/log_retention/{urllib.parse.quote(run_id)}")
    report = run_results(sample["retention"])[("run_report", -1)]
    assert "2026-01-01T12:00:00.000Z" in page.locator("#as-of").inner_text()
    assert page.locator("#rows tr[data-partition]").count() == len(report["rows"])
    shot(page, "06-run-summary")


def test_storage_view_inside_the_airflow_ui(server, sample, browser):
    page = browser.new_page()
    page.goto(server.url + "/plugin/storage")
    frame = page.frame_locator("iframe")
    frame.locator("#log-dirs").wait_for(timeout=60_000)
    assert frame.locator("#log-dirs tr[data-path]").count() == 2
    shot(page, "07-airflow-ui-storage")

    run_id = sample["retention"].run_id
    page.goto(server.url + f"/dags/log_retention/runs/{urllib.parse.quote(run_id)}/plugin/run-summary")
    frame = page.frame_locator("iframe")
    frame.locator("#totals").wait_for(timeout=60_000)
    assert "2026-01-01T12:00:00.000Z" in frame.locator("#as-of").inner_text()
    shot(page, "08-airflow-ui-run-summary")


def test_clear_uncleanable_from_the_partition_page(server, sample, browser):
    from storage_engine.maintenance.cleaner_manager import read_uncleanable

    name = "%s-%d" % UNCLEANABLE
    page = browser.new_page()
    page.goto(server.url + "/storage-maintenance/partitions/%s/%d" % UNCLEANABLE)
    page.get_by_role("button", name="Clear (retry cleaning)").click()
    page.locator("#clear-out").filter(has_text="200").wait_for(timeout=30_000)
    assert not any(name in read_uncleanable(d) for d in sample["config"].log_dirs)
    page.reload()
    assert page.get_by_role("button", name="Clear (retry cleaning)").count() == 0
    shot(page, "09-uncleanable-cleared")


def test_the_overview_shows_a_move_in_progress(server, sample, browser):
    """A copy being made for a move (left by a move that stopped) is shown with its source, target and
    progress; giving the move up removes it from the page."""
    from storage_engine.log import mover

    config = sample["config"]
    with LogManager.open(config, clock=ManualClock(T_MS)) as mgr:
        tp = max(mgr.logs, key=lambda t: mgr.logs[t].size_in_bytes())
        log = mgr.logs[tp]
        source, target = log.log_dir, next(d for d in config.log_dirs if d != log.log_dir)
        with mover.FileLock(mover.create_lock_path(config.log_dirs)):
            future = mover._prepare_future(log, target, config.log_dirs, config.log_config(tp[0]),
                                           ManualClock(T_MS), mover.MoveProgress(*tp, source, target))
        data = log.read(log.log_start_offset, 4096)
        future.append_as_follower(present(data).data)          # a first chunk copied, then the move stopped
        future.close(clean=False)
    try:
        page = browser.new_page()
        page.goto(server.url + "/storage-maintenance/")
        row = page.locator('#moves tr[data-partition="%s-%d"]' % tp)
        assert row.count() == 1
        text = row.inner_text()
        assert source in text and target in text and "%" in text
        shot(page, "07-move-in-progress")
        body = server.get_json("/storage-maintenance/api/log-dirs", server.token())
        (moving,) = [m for d in body["log_dirs"] for m in d["moves_in_progress"]]
        assert (moving["topic"], moving["partition"], moving["source_dir"]) == (*tp, source)
        assert 0 < moving["size_bytes"] < moving["source_size_bytes"]
    finally:
        with LogManager.open(config, clock=ManualClock(T_MS)) as mgr:
            mgr.cancel_move(*tp)
    page.goto(server.url + "/storage-maintenance/")
    assert page.locator("#moves tr[data-partition]").count() == 0


def df_percent(path: str) -> int:
    import subprocess
    out = subprocess.run(["df", "-P", path], capture_output=True, text=True, check=True).stdout.splitlines()
    return int(out[1].split()[4].rstrip("%"))


def agrees_with_df(shown: str, df: int) -> bool:
    """Whether a page's "58.0%" can be df's Use%: the page shows used / (used + available) to one decimal, df
    rounds the same fraction up to a whole percent, so "58.0%" (anything in [57.95, 58.05)) is df's 58 or 59."""
    import math
    value = float(shown.rstrip("%"))
    return math.ceil(value - 0.05) <= df <= math.ceil(value + 0.05)


def dirty_ratios(config, now_ms: int) -> dict:
    """{(topic, partition): dirty ratio} of the compacted partitions as the engine's cleaner sees them."""
    from storage_engine.maintenance.cleaner_manager import log_to_clean, read_cleaner_checkpoints

    with LogManager.open(config, clock=ManualClock(now_ms)) as mgr:
        return {tp: round(log_to_clean(log, read_cleaner_checkpoints(log.log_dir).get(tp),
                                       now_ms).cleanable_ratio, 6)
                for tp, log in mgr.logs.items() if log.config.compact}


def test_the_first_page_shows_space_damage_and_the_dirtiest_partitions(server, sample, browser):
    """One click from Airflow's navigation: each log dir's space as df counts it, the damage, and the dirtiest
    compacted partitions, dirtiest first as the engine's cleaner ranks them."""
    import time

    from storage_engine.record.records import SimpleRecord

    with LogManager.open(sample["config"], clock=ManualClock(T_MS)) as mgr:     # new values for old keys: dirty
        for partition, n in ((1, 300), (2, 60)):
            log = present(mgr.get_log("user-emails", partition))
            log.append_records([SimpleRecord(b"user-%05d" % i, b"changed-%d@example.com" % i, T_MS) for i in range(n)])
            log.roll()
    page = browser.new_page()
    page.goto(server.url + "/")
    page.get_by_role("button", name="Browse").click()
    page.get_by_role("menuitem", name="Storage").click()
    frame = page.frame_locator("iframe")
    frame.locator("#dirtiest").wait_for(timeout=60_000)
    for d in sample["config"].log_dirs:
        # Other processes write to the same filesystem meanwhile: the page is rendered between two df readings
        # (a page rendered before the first one could show an older figure that both readings agree against),
        # and compared when they agree.
        for _attempt in range(5):
            before = df_percent(d)
            page.reload()
            frame = page.frame_locator("iframe")
            frame.locator("#dirtiest").wait_for(timeout=60_000)
            shown = cell(frame.locator(f'#log-dirs tr[data-path="{d}"]'), "used_percent")
            if df_percent(d) == before:
                break
        assert agrees_with_df(shown, before), (shown, before)
    rows = frame.locator("#dirtiest tr[data-partition]")
    ratios = dirty_ratios(sample["config"], int(time.time() * 1000))
    ranked = sorted(ratios.items(), key=lambda kv: -kv[1])
    assert rows.count() == min(len(ranked), 10)
    shown_ratios = [cell(rows.nth(i), "dirty_ratio") for i in range(rows.count())]
    assert shown_ratios == [f"{100 * r:.1f}%" for _tp, r in ranked][:rows.count()]
    assert rows.first.get_attribute("data-partition") == "user-emails-1" and ranked[0][1] > ranked[1][1] > 0
    assert rows.nth(1).get_attribute("data-partition") == "user-emails-2"
    assert frame.locator("#damage").count() == 1
    shot(page, "10-first-page-space-damage-dirtiest")
    # The whole table, by dirty ratio, is one click further.
    frame.locator("#all-by-dirty-ratio").click()
    frame.locator("#partitions").wait_for()
    first = frame.locator("#partitions tr[data-partition]").first
    assert cell(first, "dirty_ratio") == f"{100 * ranked[0][1]:.1f}%"


def test_damage_is_marked_on_every_page_until_a_later_run_finds_it_gone(server, sample, browser):
    """A CRC error found by log_verify, a .log replaced by a directory (log_checkpoint fails on it) and a partition
    folder replaced by a file: each marked on the first page, the partition table and the partition page; once the
    files are repaired, what the files showed goes at once and what the runs found stays until the next run of the
    same check finds it gone."""
    import datetime

    config = sample["config"]
    truth = describe(config)
    corrupt_tp, unreadable_tp, missing_tp = ("access-log", 0), ("user-emails", 0), ("user-sessions", 0)
    segments = truth[corrupt_tp]["segments"]
    assert len(segments) >= 2
    sealed = pathlib.Path(truth[corrupt_tp]["dir"]) / f"{segments[0]['base_offset']:020d}.log"
    good = sealed.read_bytes()
    bad = bytearray(good)
    bad[70] ^= 0xFF                               # inside the first batch's records: its CRC no longer matches
    unreadable_dir = pathlib.Path(truth[unreadable_tp]["dir"])
    victim = unreadable_dir / f"{truth[unreadable_tp]['segments'][0]['base_offset']:020d}.log"
    victim_bytes = victim.read_bytes()
    missing_dir = pathlib.Path(truth[missing_tp]["dir"])
    moved_away = missing_dir.with_name("moved-away")
    base = server.url + "/storage-maintenance"
    page = browser.new_page()
    try:
        sealed.write_bytes(bytes(bad))
        victim.unlink()
        victim.mkdir()
        verify = parse_dag("log_verify").test(logical_date=T + datetime.timedelta(days=1))
        assert verify.state == "failed"
        checkpoint = parse_dag("log_checkpoint").test(logical_date=T + datetime.timedelta(days=1))
        assert checkpoint.state == "failed"
        missing_dir.rename(moved_away)
        missing_dir.write_text("a file where a partition folder was")

        page.goto(base + "/")
        damage = page.locator("#damage")
        corrupt = damage.locator(f'tr[data-partition="{corrupt_tp[0]}-{corrupt_tp[1]}"]')
        assert corrupt.count() == 1 and corrupt.get_attribute("data-kind") == "damaged"
        assert "record batch is corrupt" in corrupt.inner_text() and verify.run_id in corrupt.inner_text()
        kinds = {row.get_attribute("data-kind")
                 for row in damage.locator(f'tr[data-partition="{unreadable_tp[0]}-{unreadable_tp[1]}"]').all()}
        assert {"unreadable", "failed"} <= kinds                       # the files, and the failed checkpoint run
        missing = damage.locator(f'tr[data-partition="{missing_tp[0]}-{missing_tp[1]}"]')
        assert missing.get_attribute("data-kind") == "missing" and "not a folder" in missing.inner_text()
        for d in {str(sealed.parent.parent), str(unreadable_dir.parent), str(missing_dir.parent)}:
            assert "problem(s)" in cell(page.locator(f'#log-dirs tr[data-path="{d}"]'), "damage")
        assert "user-sessions-0" in page.locator(f'[data-dir-extra="{missing_dir.parent}"]').inner_text()
        shot(page, "11-first-page-damage")

        page.goto(base + "/partitions?sort=damage&desc=true")
        rows = page.locator("#partitions tr[data-partition]").all()
        flags = [r.get_attribute("data-damaged") == "true" for r in rows]
        assert flags == sorted(flags, reverse=True)                    # every damaged partition first
        assert {"access-log-0", "user-emails-0", "user-sessions-0"} <= {
            r.get_attribute("data-partition") for r, damaged in zip(rows, flags) if damaged}
        assert rows[0].get_attribute("data-partition") == "user-emails-0"     # the most problems
        assert "not a folder" in cell(page.locator('#partitions tr[data-partition="user-sessions-0"]'), "error")
        assert "damaged: log_verify" in cell(page.locator('#partitions tr[data-partition="access-log-0"]'), "damage")
        shot(page, "12-partitions-by-damage")

        page.goto(base + "/partitions/user-emails/0")
        problem = page.locator(f'#segments tr[data-base-offset="{truth[unreadable_tp]["segments"][0]["base_offset"]}"]')
        assert problem.get_attribute("data-problem") == "true"
        assert "is a directory" in cell(problem, "problem") and "KiB" not in problem.inner_text()
        kinds = {r.get_attribute("data-kind") for r in page.locator("#damage tr[data-kind]").all()}
        assert {"unreadable", "failed"} <= kinds
        shot(page, "13-partition-unreadable-segment")
        page.goto(base + "/partitions/access-log/0")
        assert "record batch is corrupt" in page.locator("#damage").inner_text()
        shot(page, "14-partition-damaged")
    finally:
        sealed.write_bytes(good)
        if victim.is_dir():
            victim.rmdir()
        victim.write_bytes(victim_bytes)
        if moved_away.exists():
            missing_dir.unlink()
            moved_away.rename(missing_dir)

    # Repaired: what the files showed is gone; what the runs found stays until the same checks run again.
    page.goto(base + "/")
    assert page.locator('#damage tr[data-partition="user-sessions-0"]').count() == 0
    left = {r.get_attribute("data-kind") for r in page.locator('#damage tr[data-partition="user-emails-0"]').all()}
    assert "failed" in left and "unreadable" not in left
    assert page.locator('#damage tr[data-partition="access-log-0"]').get_attribute("data-kind") == "damaged"
    shot(page, "15-damage-until-a-later-run")
    assert parse_dag("log_verify").test(logical_date=T + datetime.timedelta(days=2)).state == "success"
    assert parse_dag("log_checkpoint").test(logical_date=T + datetime.timedelta(days=2)).state == "success"
    page.goto(base + "/")
    for name in ("access-log-0", "user-emails-0", "user-sessions-0"):
        assert page.locator(f'#damage tr[data-partition="{name}"]').count() == 0
    page.goto(base + "/partitions/access-log/0")
    assert cell(page.locator("#facts"), "damage") == "none"
    shot(page, "16-damage-gone")


def test_the_partition_table_sorts_by_any_column(server, sample, browser):
    """Every column's name sorts the table by it (descending first for figures, again for ascending), on the
    server: the order is the engine's, the values in order."""
    token = server.token()
    page = browser.new_page()
    page.goto(server.url + "/storage-maintenance/partitions")
    keys = [h.get_attribute("data-sort") for h in page.locator("#partitions th[data-sort]").all()]
    assert keys == ["name", "log_dir", "size", "segments", "log_start_offset", "log_end_offset", "recovery_point",
                    "dirty_ratio", "cleaner_checkpoint", "uncleanable", "deleted", "damage", "last_retention",
                    "last_compaction"]
    for key in keys:
        for _click in range(2):
            page.locator(f'#partitions th[data-sort="{key}"] a').click()
            page.locator(f'#partitions th[data-sort="{key}"][aria-sort]').wait_for()
            desc = page.locator(f'#partitions th[data-sort="{key}"]').get_attribute("aria-sort") == "descending"
            shown = [r.get_attribute("data-partition") for r in page.locator("#partitions tr[data-partition]").all()]
            api = server.get_json(f"/storage-maintenance/api/partitions?sort={key}&desc={str(desc).lower()}", token)
            assert shown == [f"{p['topic']}-{p['partition']}" for p in api["partitions"]], key
    page.locator('#partitions th[data-sort="dirty_ratio"] a').click()
    page.locator('#partitions th[data-sort="dirty_ratio"][aria-sort="descending"]').wait_for()
    api = server.get_json("/storage-maintenance/api/partitions?sort=dirty_ratio&desc=true", token)
    ratios = [p["dirty_ratio"] for p in api["partitions"] if p.get("dirty_ratio") is not None]
    assert ratios == sorted(ratios, reverse=True) and len(ratios) >= 2
    sizes = [p["size_bytes"] for p in server.get_json("/storage-maintenance/api/partitions?sort=size&desc=false",
                                                      token)["partitions"]]
    assert sizes == sorted(sizes)
    shot(page, "17-partitions-by-dirty-ratio")
    assert server.request("/storage-maintenance/api/partitions?sort=bogus", token=token)[0] == 422


def test_the_run_list_is_paginated_and_ordered_by_when_runs_ran(server, sample, browser):
    """Runs backfilled out of order (intervals 3, 1, 2 run in that order) are listed by when they ran, newest
    first, not by their interval; the list is paginated."""
    import datetime

    from sqlalchemy import func, select

    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session

    from storage_maintenance.maintenance_dags import MAINTENANCE_DAGS

    dag = parse_dag("log_flush")
    ran = [dag.test(logical_date=T + datetime.timedelta(days=d)) for d in (13, 11, 12)]
    assert all(r.state == "success" for r in ran)
    with create_session() as session:
        total = session.scalar(select(func.count()).select_from(DagRun).where(DagRun.dag_id.in_(MAINTENANCE_DAGS)))
        ends = dict(session.execute(select(DagRun.run_id, DagRun.end_date).where(DagRun.dag_id == "log_flush")).all())
    page = browser.new_page()
    page.goto(server.url + "/storage-maintenance/?runs_limit=2")
    assert f"{total} run(s)" in page.locator("#runs-summary").inner_text()
    first = [r.get_attribute("data-run") for r in page.locator("#runs tr[data-run]").all()]
    assert first == [ran[2].run_id, ran[1].run_id]             # interval 12 ran last, then 11
    shot(page, "18-runs-page-1")
    page.locator('#runs-pager a[rel="next"]').click()
    page.locator("#runs-pager a[rel=prev]").wait_for()
    second = [r.get_attribute("data-run") for r in page.locator("#runs tr[data-run]").all()]
    assert second[0] == ran[0].run_id                          # interval 13 ran before both
    assert "page 2 of" in page.locator("#runs-summary").inner_text()
    listed = server.get_json(f"/storage-maintenance/api/log-dirs?runs_limit={total}", server.token())["runs"]
    assert len(listed) == total
    finished = [r["end_date"] for r in listed if r["end_date"] and r["state"] not in ("running", "queued")]
    assert finished == sorted(finished, reverse=True)
    assert [r["end_date"] for r in listed if r["dag_id"] == "log_flush"][:3] == [
        present(ends[ran[2].run_id]).isoformat(), present(ends[ran[1].run_id]).isoformat(), present(ends[ran[0].run_id]).isoformat()]
    shot(page, "19-runs-page-2")


def test_the_console_shows_consumer_groups_their_lag_and_what_retention_would_take(server, sample, browser, tmp_path):
    """A broker serving the sample's log dirs; a group commits offset 5 on access-log-0: the overview lists the
    group with its lag (log end offset minus 5), and the retention plan as of far ahead names the group as losing
    the unread records the deletion would take; an open transaction is listed until it is aborted. (Last in the
    module: the broker leaves __consumer_offsets and __transaction_state, and an aborted batch in access-log-0.)"""
    import time

    from confluent_kafka import Consumer, Producer, TopicPartition

    broker = BrokerLauncher(sample["config_path"], tmp_path / "broker.log", listeners="PLAINTEXT://127.0.0.1:0",
                            cwd=REPO).start()
    try:
        bootstrap = broker.bootstrap
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "view-group", "enable.auto.commit": False})
        consumer.commit(offsets=[TopicPartition("access-log", 0, 5)], asynchronous=False)
        consumer.close()
        token = server.token()
        deadline = time.monotonic() + 60
        groups = []
        while time.monotonic() < deadline:       # the broker reports its groups every few seconds
            groups = server.get_json("/storage-maintenance/api/log-dirs", token)["groups"]
            if any(g["group_id"] == "view-group" for g in groups):
                break
            time.sleep(0.5)
        (group,) = [g for g in groups if g["group_id"] == "view-group"]
        end = describe(sample["config"])[("access-log", 0)]["log_end_offset"]
        assert group["partitions"] == [{"topic": "access-log", "partition": 0, "committed": 5, "log_end_offset": end,
                                        "lag": end - 5}]
        page = browser.new_page()
        page.goto(server.url + "/storage-maintenance/")
        row = page.locator('#groups tr[data-group="view-group"]')
        assert row.count() == 1 and cell(row, "lag") == str(end - 5)
        shot(page, "08-consumer-groups")

        plan = server.get_json("/storage-maintenance/api/plan?as_of=2099-01-01T00:00:00Z", token)
        (risk,) = [g for g in plan["groups_at_risk"] if g["group_id"] == "view-group"]
        row0 = next(r for r in plan["retention"]["partitions"] if (r["topic"], r["partition"]) == ("access-log", 0))
        assert risk["log_start_after"] == row0["log_start_after"] > 5
        assert risk["unread_records_lost"] == row0["log_start_after"] - 5
        page.goto(server.url + "/storage-maintenance/plan?as_of=2099-01-01T00:00:00Z")
        assert page.locator('#groups-at-risk tr[data-group="view-group"]').count() == 1
        # the group's state topic is listed with the others, marked internal, compacted
        page.goto(server.url + "/storage-maintenance/partitions?q=__consumer_offsets")
        internal = page.locator('tr[data-partition^="__consumer_offsets-"]')
        assert internal.count() >= 1
        assert internal.first.locator('[data-field="internal"]').inner_text().strip() == "internal"
        assert "compact" in internal.first.inner_text()

        # an open transaction is listed with its partitions until it ends
        producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "view-txn"})
        producer.init_transactions(60)
        producer.begin_transaction()
        producer.produce("access-log", value=b"in a transaction", partition=0)
        assert producer.flush(60) == 0
        page.goto(server.url + "/storage-maintenance/")
        txn_row = page.locator('#transactions tr[data-txn="view-txn"]')
        deadline = time.monotonic() + 60
        while txn_row.count() == 0 and time.monotonic() < deadline:   # the status is written every 5 s
            time.sleep(0.5)
            page.reload()
        assert txn_row.count() == 1
        assert cell(txn_row, "txn-state") == "Ongoing"
        assert "access-log-0" in txn_row.inner_text()
        shot(page, "09-open-transaction")
        producer.abort_transaction(60)
        deadline = time.monotonic() + 60
        while txn_row.count() == 1 and time.monotonic() < deadline:
            time.sleep(0.5)
            page.reload()
        assert txn_row.count() == 0
        assert "CompleteAbort 1" in page.locator("#txn-summary").inner_text()
        del producer            # its connections close before the broker stops
    finally:
        assert broker.stop(60) == 0, broker.log_tail()
