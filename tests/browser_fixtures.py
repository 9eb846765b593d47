"""What every browser test shares: Debian's Chromium driven by Playwright, one browser per test
module (`browser`, a fixture: import it by name), a bounded wait, and the skip when Chromium is
not installed (`needs_chromium`, a module's `pytestmark`). Playwright's own browser download does
not work here, so the browser is `/usr/bin/chromium` (`apt-get install chromium`; `.ci/run`
installs it). This module starts no app: tests/app_fixtures.py serves one.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
needs_chromium = pytest.mark.skipif(
    not CHROMIUM.exists(), reason="Debian chromium is not installed (apt-get install chromium)"
)
TIMEOUT = 90  # seconds any single wait may take on a loaded 2-core machine


@pytest.fixture(scope="module")
def browser():
    """A headless Chromium for the test module, closed after its last test."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield browser
        browser.close()


def wait_until(condition, what: str, timeout: float = TIMEOUT) -> None:
    """Poll `condition()` until it is true; AssertionError naming `what` after `timeout` s."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)
