"""Debian's chromium, headless, driven by Playwright, and the Airflow login of the console's browser tests.

One place for what every browser test of the console does: launch the browser (failing clearly when ``make browser``
has not installed it: the tests run, never skip) and open a browser context logged in to an api-server as a user,
through the UI's ``_token`` cookie from ``POST /auth/token`` (:meth:`tests.airflow.api_server.ApiServer.token`).
"""
from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@contextlib.contextmanager
def chromium() -> Iterator[Any]:
    """A Playwright ``Browser`` on Debian's chromium, closed when the block ends."""
    from playwright import sync_api as playwright

    if not os.path.exists(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is missing: `make browser` (or .ci/run) installs Debian's chromium")
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


def log_in(browser: Any, server: Any, user: str = "admin", **options: Any) -> Any:
    """A new context of ``browser`` (``options``: Playwright's ``new_context`` ones, the viewport say) logged in to
    ``server`` (an ApiServer) as ``user``; the caller closes it."""
    context = browser.new_context(**options)
    context.add_cookies([{"name": "_token", "value": server.token(user), "url": server.url}])
    return context


@contextlib.contextmanager
def logged_in(server: Any, user: str = "admin", **options: Any) -> Iterator[Any]:
    """:func:`chromium` with one context logged in as ``user`` (:func:`log_in`), both closed when the block ends."""
    with chromium() as browser:
        context = log_in(browser, server, user, **options)
        try:
            yield context
        finally:
            context.close()
