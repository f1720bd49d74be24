"""The Storage view's pages whose figures take long to read (log dirs, partitions, plan, tiered) send their shell
(the head, the Storage navigation, a "Loading" line) before reading them, against a real ``airflow api-server`` on
the sample logs.

The shell-first rule is checked without any clock: the response's first HTTP chunk is the shell, holding the
navigation and no figure; the whole page has them, and in Debian's chromium (Playwright) the "Loading" line is
hidden once they came. The time to first contentful paint of every console page (cold: the first request after
the api-server started; warm: the second) and of the Storage view inside Airflow's UI is recorded in
``var/test-artifacts/page-speed/first-content.json`` as a measurement, never compared with a limit.
"""
from __future__ import annotations

import http.client
import json
import time
import urllib.parse
from typing import Any

import pytest

from .conftest import REPO
from .browser import logged_in
from .test_storage_view import sample, server  # noqa: F401 - module fixtures

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
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with logged_in(server, viewport={"width": 1500, "height": 1000}) as context:
        yield context


def paint_times(page) -> dict:
    """ms after the page's navigation started: its first byte (``first_byte_ms``) and first contentful paint
    (``first_content_ms``, None when it painted nothing)."""
    return page.evaluate("""() => {
        const e = performance.getEntriesByName("first-contentful-paint")[0];
        const n = performance.getEntriesByType("navigation")[0];
        return {first_byte_ms: n ? Math.round(n.responseStart) : null, first_content_ms: e ? Math.round(e.startTime) : null};
    }""")


def test_first_content_of_every_page_is_measured(server, sample, chromium):
    """Cold (the first request of each page since the api-server started) and warm (the second): when the first
    content was painted, and when the page had all its figures (the load event plus the figures' requests)."""
    timings: dict[str, dict[str, Any]] = {}
    page = chromium.new_page()
    page.goto(server.url + "/api/v2/version")         # the browser's own first navigation, not counted
    for name, path in console_pages(sample):
        rows = []
        for _visit in ("cold", "warm"):
            started = time.monotonic()
            page.goto(server.url + BASE + path, wait_until="load")
            page.wait_for_load_state("networkidle")
            complete_ms = (time.monotonic() - started) * 1000
            times = paint_times(page)
            assert times["first_content_ms"] is not None, f"{path} painted nothing"
            assert page.locator("nav.top").count() == 1, path
            rows.append({**times, "complete_ms": round(complete_ms)})
        timings[path] = {"page": name, "cold": rows[0], "warm": rows[1]}
    # Inside Airflow's UI: from the navigation to the Storage view's heading shown in its frame, and how much of
    # that passed before Airflow's application asked for the frame's page.
    for visit in ("cold", "warm"):
        requests: list[list] = []

        def note(request, requests=requests) -> None:
            requests.append([urllib.parse.urlsplit(request.url).path, time.monotonic(), None])

        def done(request, requests=requests) -> None:
            path = urllib.parse.urlsplit(request.url).path
            for r in requests:
                if r[0] == path and r[2] is None:
                    r[2] = time.monotonic()
                    break

        started = time.monotonic()
        page.on("request", note)
        page.on("requestfinished", done)
        page.goto(server.url + "/plugin/storage")
        page.frame_locator("iframe").locator("h1").first.wait_for(timeout=60_000)
        shown = time.monotonic()
        page.remove_listener("request", note)
        page.remove_listener("requestfinished", done)
        asked = [r[1] for r in requests if r[0] == BASE + "/"]
        timings[f"/plugin/storage ({visit})"] = {
            "page": "Storage in Airflow's UI", "heading_shown_ms": round((shown - started) * 1000),
            "frame_asked_ms": round((asked[0] - started) * 1000) if asked else None,
            "requests_ms": [[p, round((a - started) * 1000), round((b - started) * 1000) if b else None]
                            for p, a, b in requests]}
    (ARTIFACTS / "first-content.json").write_text(json.dumps(timings, indent=1))
    print(json.dumps(timings, indent=1))


STREAMED = [("/", "log dirs", 'id="log-dirs"'), ("/partitions?sort=size&desc=true", "partitions", 'id="partitions"'),
            ("/plan", "the plan", 'id="retention"'), ("/tiered", "tiered storage", "<h1>")]


@pytest.mark.parametrize(("path", "what", "figures"), STREAMED)
def test_the_shell_is_sent_before_the_figures_are_read(server, sample, path, what, figures):
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    try:
        conn.request("GET", BASE + path, headers={"Authorization": f"Bearer {server.token()}"})
        resp = conn.getresponse()
        assert resp.status == 200 and resp.getheader("Transfer-Encoding") == "chunked"
        shell = resp.read1().decode()             # exactly the first chunk
        rest = resp.read().decode()
    finally:
        conn.close()
    assert '<nav class="top"' in shell and f"Loading {what}" in shell and figures not in shell
    assert figures in rest and rest.rstrip().endswith("</html>")


def test_a_wrong_parameter_of_a_streamed_page_is_still_an_http_error(server):
    token = server.token()
    status, body, _ = server.request(BASE + "/partitions?sort=nope", token=token)
    assert status == 422 and b"sort must be one of" in body
    status, body, _ = server.request(BASE + "/plan?as_of=yesterday", token=token)
    assert status == 422 and b"as_of must be an ISO date-time" in body


def test_the_loading_line_goes_once_the_figures_came(server, sample, chromium):
    page = chromium.new_page()
    for path, what, _figures in STREAMED:
        page.goto(server.url + BASE + path)
        assert page.locator("#page-loading").count() == 1 and not page.locator("#page-loading").is_visible(), path
        assert page.locator("h1").first.is_visible(), path
