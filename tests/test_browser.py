"""End to end in headless Chromium (Debian's, through Python Playwright): streaming on the Generate
tab seen growing in the page, the Stop button, a 2-column Compare, a rewrite sweep.

The default Generate model is slowed down (one token per 60 ms) so that the text visibly grows.
Screenshots go to $SCRIPTORIUM_ARTIFACTS if set, else to a temporary test-artifacts directory.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

import app
import runtime
from tests.app_fixtures import SlowGenerator, models_tree, serve
from tests.browser_fixtures import CHROMIUM, CHROMIUM_ARGS, TIMEOUT, needs_chromium, wait_until
from ui.registry import ModelRegistry

__all__ = ["models_tree"]  # a session fixture, used by name
pytestmark = needs_chromium


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory) -> Path:
    chosen = os.environ.get("SCRIPTORIUM_ARTIFACTS")
    path = Path(chosen) if chosen else tmp_path_factory.mktemp("test-artifacts")
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="module")
def served(models_tree):
    registry = ModelRegistry.discover([models_tree])
    default = registry.generators()[0]
    slow = SlowGenerator(runtime.load(registry.paths[default]), delay=0.06)
    registry.add(default, registry.paths[default], slow)
    demo = app.build(registry)
    url = serve(demo)
    yield url, slow
    demo.close()


@pytest.fixture(scope="module")
def page(served):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.set_default_timeout(TIMEOUT * 1000)
        page.goto(served[0])
        page.get_by_role("button", name="Generate", exact=True).wait_for()
        yield page
        browser.close()


def textarea(page, elem_id: str):
    return page.locator(f"#{elem_id} textarea")


def test_generate_streams_text_into_the_page(page, artifacts):
    output = textarea(page, "generate-output")
    page.get_by_role("button", name="Generate", exact=True).click()
    lengths = []
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        lengths.append(len(output.input_value()))
        if len(set(lengths)) == 4:
            page.screenshot(path=artifacts / "generate-streaming.png", full_page=True)
        finished = page.locator(".stats").inner_text()
        if lengths[-1] and any(reason in finished for reason in ("eos", "length", "context")):
            break
        time.sleep(0.05)
    growth = sorted(set(lengths))
    assert lengths == sorted(lengths), "the streamed text must only grow"
    assert len([n for n in growth if n > 0]) >= 3, f"saw no streaming, only lengths {growth}"
    page.locator(".tokview .tokens .tok").nth(2).hover()
    page.screenshot(path=artifacts / "generate-done.png", full_page=True)
    assert page.locator(".tokview .tok .alts table").count() > 0


def test_stop_button_stops_generation(page, served, artifacts):
    _, slow = served
    before = slow.events
    output = textarea(page, "generate-output")
    page.get_by_role("button", name="Generate", exact=True).click()
    wait_until(lambda: slow.open_streams == 1 and len(output.input_value()) > 5, "streaming")
    page.get_by_role("button", name="Stop").first.click()
    wait_until(lambda: slow.open_streams == 0, "the stream to close after Stop")
    stopped = len(output.input_value())
    events = slow.events
    time.sleep(0.6)
    assert slow.events == events and len(output.input_value()) == stopped
    assert events - before < 64  # the default max new tokens: it did not run to the end
    wait_until(lambda: "stopped" in page.locator(".stats").inner_text(), "stats to say stopped")
    page.screenshot(path=artifacts / "generate-stopped.png", full_page=True)


def test_compare_two_columns(page, artifacts):
    page.get_by_role("tab", name="Compare").click()
    page.get_by_role("button", name="Compare", exact=True).click()
    table = page.locator("#compare-metrics")
    wait_until(lambda: "top-p 0.95" in table.inner_text(), "the metrics table")
    wait_until(
        lambda: (
            textarea(page, "compare-output-1").input_value()
            and textarea(page, "compare-output-2").input_value()
        ),
        "both columns' text",
    )
    wait_until(
        lambda: "greedy" in table.inner_text(),
        "the second column's metrics",
    )
    page.screenshot(path=artifacts / "compare.png", full_page=True)


def test_rewrite_sweep(page, artifacts):
    page.get_by_role("tab", name="Rewrite").click()
    page.get_by_role("button", name="Sweep every ratio").click()
    table = page.locator("#rewrite-sweep-table")
    wait_until(
        lambda: "0.1" in table.inner_text() and "0.5" in table.inner_text(), "the sweep table"
    )
    plot = page.locator("#rewrite-plot .marks")  # Vega draws the native plot (canvas or svg)
    wait_until(lambda: plot.count() >= 1, "the requested-vs-achieved plot")
    page.get_by_role("button", name="Rewrite", exact=True).click()
    wait_until(lambda: page.locator(".badges .badge").count() >= 5, "the subtitle badges")
    page.screenshot(path=artifacts / "rewrite-sweep.png", full_page=True)
