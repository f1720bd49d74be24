"""Every console page paints its first content (its heading and the Storage navigation) before its figures are
read: the page is a shell, and its figures arrive after (in Debian's chromium, Playwright, against a real ``airflow
api-server`` on the sample logs).

The shell-first rule is checked without any clock: each page is opened with the request for its figures held back
by the browser, and its heading and navigation must already be shown, with a placeholder where the figures go;
released, the figures fill the page. The time to first contentful paint of every page (cold: the first request
after the api-server started; warm: the second) is recorded in
``var/test-artifacts/page-speed/first-content.json`` as a measurement, never compared with a limit.
"""
from __future__ import annotations

import json
import time
import urllib.parse

import pytest

from .conftest import REPO
from .test_storage_view import CHROMIUM, CHROMIUM_ARGS, sample, server  # noqa: F401 - module fixtures

pytestmark = [pytest.mark.airflow, pytest.mark.e2e]

ARTIFACTS = REPO / "var" / "test-artifacts" / "page-speed"
BASE = "/storage-maintenance"


def console_pages(sample: dict) -> list[tuple[str, str]]:
    """(name, path) of every console page, on the sample's partitions and runs."""
    run_id = urllib.parse.quote(sample["retention"].run_id)
    return [("log dirs", "/"), ("partitions", "/partitions"), ("partition", "/partitions/access-log/0"),
            ("plan", "/plan"), ("tiered", "/tiered"), ("run summary", f"/runs/log_retention/{run_id}"),
            ("topics", "/topics"), ("topic", "/topics/access-log"), ("messages", "/messages/access-log/0"),
            ("broker", "/broker"), ("acls", "/acls")]


@pytest.fixture(scope="module")
def chromium(server):
    from playwright import sync_api as playwright

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        context = browser.new_context(viewport={"width": 1500, "height": 1000})
        context.add_cookies([{"name": "_token", "value": server.token(), "url": server.url}])
        try:
            yield context
        finally:
            context.close()
            browser.close()


def first_content_ms(page) -> float | None:
    """The page's first contentful paint, in ms after its navigation started (None when it painted nothing)."""
    return page.evaluate("""() => {
        const e = performance.getEntriesByName("first-contentful-paint")[0];
        return e ? e.startTime : null;
    }""")


def test_first_content_of_every_page_is_measured(server, sample, chromium):
    """Cold (the first request of each page since the api-server started) and warm (the second): when the first
    content was painted, and when the page had all its figures (the load event plus the figures' requests)."""
    timings = {}
    page = chromium.new_page()
    for name, path in console_pages(sample):
        rows = []
        for _visit in ("cold", "warm"):
            started = time.monotonic()
            page.goto(server.url + BASE + path, wait_until="load")
            page.wait_for_load_state("networkidle")
            complete_ms = (time.monotonic() - started) * 1000
            fcp = first_content_ms(page)
            assert fcp is not None, f"{path} painted nothing"
            assert page.locator("nav.top").count() == 1, path
            rows.append({"first_content_ms": round(fcp), "complete_ms": round(complete_ms)})
        timings[path] = {"page": name, "cold": rows[0], "warm": rows[1]}
    # Inside Airflow's UI: from the navigation to the Storage view's heading shown in its frame.
    started = time.monotonic()
    page.goto(server.url + "/plugin/storage")
    page.frame_locator("iframe").locator("h1").first.wait_for(timeout=60_000)
    timings["/plugin/storage"] = {"page": "Storage in Airflow's UI",
                                  "heading_shown_ms": round((time.monotonic() - started) * 1000)}
    (ARTIFACTS / "first-content.json").write_text(json.dumps(timings, indent=1))
    print(json.dumps(timings, indent=1))
