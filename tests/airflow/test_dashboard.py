"""Storage on Airflow's own home page: the plugin's ``react_apps`` entry (destination ``dashboard``) loaded by
Airflow 3.3's UI in Debian's chromium (Playwright) from a real ``airflow api-server`` over the sample logs, after a
``log_verify`` run found a corrupt batch and failed. The panel shows each log dir's space as ``df`` counts it, the
damage, the dirtiest compacted partitions as the cleaner ranks them and the last failed maintenance run; following
a row's link opens its page inside the UI. Screenshots under ``var/test-artifacts/storage-view/dashboard/``.
"""
from __future__ import annotations

import datetime
import json
import pathlib
import time
import urllib.parse

import pytest

from .conftest import REPO, parse_dag
from .storage_fixtures import T
from .browser import logged_in
from .test_storage_view import (agrees_with_df, describe, df_percent, dirty_ratios,  # noqa: F401 - fixtures
                                sample, server)

pytestmark = [pytest.mark.airflow, pytest.mark.e2e]

ARTIFACTS = REPO / "var" / "test-artifacts" / "storage-view" / "dashboard"
CORRUPT = ("access-log", 0)


@pytest.fixture(scope="module")
def failed_verify(sample):
    """A corrupt batch in a sealed segment of access-log-0, found by a ``log_verify`` run, which fails; new values
    for old keys in user-emails-1 and -2 (300 and 60): the two dirtiest partitions, in that order."""
    from storage_engine.clock import ManualClock
    from storage_engine.log.manager import LogManager
    from storage_engine.record.records import SimpleRecord

    from .storage_fixtures import T_MS

    with LogManager.open(sample["config"], clock=ManualClock(T_MS)) as mgr:
        for partition, n in ((1, 300), (2, 60)):
            log = mgr.get_log("user-emails", partition)
            assert log is not None
            log.append_records([SimpleRecord(b"user-%05d" % i, b"changed-%d@example.com" % i, T_MS) for i in range(n)])
            log.roll()
    truth = describe(sample["config"])[CORRUPT]
    sealed = pathlib.Path(truth["dir"]) / f"{truth['segments'][0]['base_offset']:020d}.log"
    bad = bytearray(sealed.read_bytes())
    bad[70] ^= 0xFF                               # inside the first batch's records: its CRC no longer matches
    sealed.write_bytes(bytes(bad))
    run = parse_dag("log_verify").test(logical_date=T + datetime.timedelta(days=1))
    assert run.state == "failed"
    return run


@pytest.fixture(scope="module")
def home(server, failed_verify):
    """A logged-in browser context (the UI's ``_token`` cookie) whose pages' script errors are kept."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with logged_in(server, viewport={"width": 1500, "height": 1400}) as context:
        yield context


def open_home(context, url: str):
    """Airflow's home page with the Storage panel's figures loaded; the page's script errors in ``page.errors``."""
    page = context.new_page()
    page.errors = []
    page.on("pageerror", lambda exc: page.errors.append(str(exc)))
    page.goto(url + "/")
    page.locator('#storage-maintenance-panel[data-loaded="true"]').wait_for(timeout=60_000)
    return page


def test_airflow_lists_the_panel_as_a_dashboard_react_app(server, failed_verify):
    plugins = server.get_json("/api/v2/plugins", server.token())["plugins"]
    (plugin,) = [p for p in plugins if p["name"] == "storage_maintenance"]
    (app,) = plugin["react_apps"]
    assert app["destination"] == "dashboard" and app["bundle_url"] == "/storage-maintenance/static/dashboard.js"
    # The module is served behind the login, as JavaScript.
    assert server.request(app["bundle_url"])[0] == 401
    status, body, headers = server.request(app["bundle_url"], token=server.token())
    assert status == 200 and headers["content-type"].startswith("text/javascript")
    assert b"globalThis.AirflowPlugin = StoragePanel" in body


def test_the_panel_on_airflows_home_page_shows_space_damage_dirtiest_and_the_failed_run(server, sample, failed_verify,
                                                                                      home):
    config = sample["config"]
    truth = describe(config)
    page = open_home(home, server.url)
    panel = page.locator("#storage-maintenance-panel")
    # Space: each log dir, as df counts it (rendered between two agreeing df readings: other processes write).
    for d in config.log_dirs:
        for _attempt in range(5):
            before = df_percent(d)
            page.reload()
            page.locator('#storage-maintenance-panel[data-loaded="true"]').wait_for(timeout=60_000)
            row = panel.locator(f'#storage-space tr[data-path="{d}"]')
            shown = row.locator('[data-field="used_percent"]').inner_text()
            if df_percent(d) == before:
                break
        assert agrees_with_df(shown, before), (shown, before)
        mine = [v for v in truth.values() if str(pathlib.Path(v["dir"]).parent) == d]
        assert row.locator("td").nth(1).inner_text() == str(len(mine))
    # Damage: the corrupt batch log_verify found, named by its partition.
    damage = panel.locator('#storage-damage tr[data-partition="%s-%d"]' % CORRUPT)
    assert damage.count() >= 1 and "record batch is corrupt" in damage.first.inner_text()
    # Dirtiest: as the cleaner ranks them now.
    ranked = sorted(dirty_ratios(config, int(time.time() * 1000)).items(), key=lambda kv: -kv[1])[:5]
    rows = panel.locator("#storage-dirtiest tr[data-partition]")
    assert rows.count() == len(ranked) and ranked[0][1] > ranked[1][1] > ranked[2][1]
    assert [rows.nth(i).get_attribute("data-partition") for i in range(2)] == ["user-emails-1", "user-emails-2"]
    assert [rows.nth(i).locator('[data-field="dirty_ratio"]').inner_text() for i in range(rows.count())] == \
        [f"{100 * r:.1f}%" for _tp, r in ranked]
    # The last failed maintenance run and its failed task.
    failed = panel.locator("#storage-last-failed")
    assert failed.get_attribute("data-dag") == "log_verify"
    assert failed.get_attribute("data-run") == failed_verify.run_id
    assert "failed: " in failed.inner_text() and "verify" in failed.inner_text()
    assert page.errors == []
    page.screenshot(path=str(ARTIFACTS / "01-home-panel.png"), full_page=True)


def test_following_a_row_opens_its_page_inside_airflows_ui(server, sample, failed_verify, home):
    page = open_home(home, server.url)
    panel = page.locator("#storage-maintenance-panel")
    # A damaged partition: its page in the Storage view's frame, with the damage marked.
    panel.locator('#storage-damage tr[data-partition="%s-%d"] a' % CORRUPT).first.click()
    page.wait_for_url("**/plugin/storage/storage-maintenance/partitions/%s/%d" % CORRUPT, timeout=60_000)
    frame = page.frame_locator("iframe")
    frame.locator("#facts").wait_for(timeout=60_000)
    assert "record batch is corrupt" in frame.locator("body").inner_text()
    page.screenshot(path=str(ARTIFACTS / "02-damaged-partition.png"), full_page=True)
    # The dirtiest partition: its page.
    page = open_home(home, server.url)
    first = page.locator("#storage-dirtiest tr[data-partition]").first
    topic, _, part = present_attr(first, "data-partition").rpartition("-")
    first.locator("a").click()
    page.wait_for_url(f"**/plugin/storage/storage-maintenance/partitions/{urllib.parse.quote(topic)}/{part}",
                      timeout=60_000)
    page.frame_locator("iframe").locator("#facts").wait_for(timeout=60_000)
    # The failed run: its "Run summary" tab on Airflow's run page.
    page = open_home(home, server.url)
    page.locator("#storage-last-failed a").click()
    page.wait_for_url(f"**/dags/log_verify/runs/{urllib.parse.quote(failed_verify.run_id, safe='')}/plugin/run-summary",
                      timeout=60_000)
    page.frame_locator("iframe").locator("#totals").wait_for(timeout=60_000)
    page.screenshot(path=str(ARTIFACTS / "03-failed-run-summary.png"), full_page=True)


def test_the_panels_figures_are_the_storage_views(server, sample, failed_verify):
    """The panel's API and the Storage view's first page agree (one source: the engine's overview)."""
    token = server.token()
    panel = server.get_json("/storage-maintenance/api/dashboard", token)
    view = server.get_json("/storage-maintenance/api/log-dirs", token)
    assert [(d["path"], d["partitions"], d["size_bytes"]) for d in panel["space"]] == \
        [(d["path"], d["partitions"], d["size_bytes"]) for d in view["log_dirs"]]
    assert [(p["topic"], p["partition"]) for p in panel["dirtiest"]] == \
        [(p["topic"], p["partition"]) for p in view["dirtiest"][:5]]
    assert panel["damaged_partitions"] == len(view["damaged"])
    assert json.dumps(panel["last_failed_run"]["failed_tasks"]).count("verify") >= 1


def present_attr(locator, name: str) -> str:
    value = locator.get_attribute(name)
    assert value is not None, name
    return value
