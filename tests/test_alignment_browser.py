"""The Rewrite tab's attention heat map in headless Chromium (Debian's, through Playwright), on the
shipped rewriter: a rewrite draws it at 1280 px; a Link's run draws it on a 390 px phone, where a
long verse's map scrolls sideways inside its box, a short one's fits, and the page stays as wide
as the screen.

Screenshots go to $SCRIPTORIUM_ARTIFACTS if set, else to a temporary directory (docs/app/
rewrite-attention-*.png are these, reduced to 64 colours).
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlencode

import pytest

import app
from tests.app_fixtures import serve
from tests.browser_fixtures import TIMEOUT, browser, needs_chromium, wait_until
from ui import votes
from ui.registry import ModelRegistry

__all__ = ["browser"]  # a fixture, used by name
pytestmark = needs_chromium
REWRITER = Path(__file__).resolve().parents[1] / "models" / "rewriter"
VERSE = "Blessed are the meek: for they shall inherit the earth."  # 15 source tokens
LONG_VERSE = (  # 26 source tokens
    "Honour thy father and thy mother: that thy days may be long upon the land which the LORD "
    "thy God giveth thee."
)


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory) -> Path:
    chosen = os.environ.get("SCRIPTORIUM_ARTIFACTS")
    path = Path(chosen) if chosen else tmp_path_factory.mktemp("test-artifacts")
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    if not (REWRITER / "int8" / "manifest.json").exists():
        pytest.skip("the shipped rewriter is not in models/")
    registry = ModelRegistry.discover([REWRITER.parent])
    store = votes.VoteStore(tmp_path_factory.mktemp("votes") / "votes.sqlite")
    demo = app.build(registry, store)
    url = serve(demo)
    yield url
    demo.close()


def open_page(browser, url: str, width: int, height: int):
    page = browser.new_page(viewport={"width": width, "height": height})
    page.set_default_timeout(TIMEOUT * 1000)
    page.goto(url)
    page.locator(".tab-wrapper [role=tab]").first.wait_for()
    return page


def heat_map_drawn(page) -> str:
    """The heat map's caption once Vega has drawn it (an error box fails the test)."""
    plot = page.locator("#rewrite-attention")

    def drawn():
        error = page.locator("#rewrite-error")
        if error.count() and error.is_visible() and error.inner_text().strip():
            raise AssertionError(error.inner_text())
        return plot.locator(".marks").count() >= 1 and plot.locator(".caption").count() >= 1

    wait_until(drawn, "the attention heat map")
    return plot.locator(".caption").inner_text()


def test_a_rewrite_draws_the_heat_map(browser, served, artifacts):
    page = open_page(browser, served, 1280, 900)
    page.locator(".tab-wrapper [role=tab]", has_text="Rewrite").first.click()
    note = page.locator("#rewrite-attention-note")
    assert "Seed 001" in note.inner_text() and "aligns output words" in note.inner_text()
    assert not page.locator("#rewrite-attention").is_visible()  # nothing before a run
    page.get_by_label("Line to rewrite").fill(VERSE)
    page.get_by_role("button", name="Rewrite", exact=True).click()
    caption = heat_map_drawn(page)
    assert caption.startswith("rewriter (int8): each row is an output token")
    assert "left out" not in caption  # a short verse fits
    box = page.locator("#rewrite-attention .marks").bounding_box()
    assert box["width"] > 400 and box["height"] > 200  # one 20 px band per output token
    page.screenshot(path=artifacts / "rewrite-attention-1280.png", full_page=True)
    page.close()


def test_a_link_draws_the_heat_map_on_a_phone_in_a_sideways_scroll(browser, served, artifacts):
    link = "?" + urlencode({"tab": "rewrite", "source": LONG_VERSE, "run": 1})
    page = open_page(browser, served + link, 390, 844)
    heat_map_drawn(page)
    scroll = page.locator(".alignment-scroll").first

    def widths():
        return scroll.evaluate("(box) => [box.scrollWidth, box.clientWidth]")

    assert widths()[0] >= 600 > widths()[1], f"scroll width, box width: {widths()}"
    page_width = page.evaluate("document.documentElement.scrollWidth")
    assert page_width <= 390, f"the page is {page_width} px wide at 390 px"
    page.locator("#rewrite-attention").scroll_into_view_if_needed()
    page.screenshot(path=artifacts / "rewrite-attention-390.png", full_page=True)
    page.get_by_label("Line to rewrite").fill(VERSE)
    page.get_by_role("button", name="Rewrite", exact=True).click()
    wait_until(lambda: widths()[0] == widths()[1], "the short verse's map to fit the screen")
    page.close()
