"""Keyboard and axe-core checks of every tab (issue 45), in headless Chromium (Debian's, through
Playwright), on the shipped models and the tiny Llama ChatML model (tests/app_fixtures.py).

The message box has the focus when the page opens, or is reached within 3 Tab presses; the
hidden copy of the tab bar Gradio measures with takes no Tab press. axe-core (the axe.min.js
that the axe-playwright-python wheel ships, a test extra) finds no serious or critical violation
on any tab outside Gradio's own components (GRADIO_INTERNALS: its table, chat examples, JSON
viewer and empty-value boxes; docs/APP.md lists them), which are printed in the test's output.
"""

from __future__ import annotations

import re
from pathlib import Path

import axe_playwright_python
import pytest

import app
from tests.app_fixtures import chat_model_dir, serve
from tests.browser_fixtures import TIMEOUT, browser, needs_chromium, wait_until
from ui.registry import ModelRegistry

__all__ = ["chat_model_dir", "browser"]  # fixtures, used by name
pytestmark = needs_chromium
ROOT = Path(__file__).resolve().parent.parent
AXE = Path(axe_playwright_python.__file__).with_name("axe.min.js")
TABS = ["Chat", "Generate", "Compare", "Arena", "Rewrite", "Translate", "Paraphrase",
        "Embeddings", "Masked LM", "Models"]  # fmt: skip
# (rule, a pattern of the node's selector) that Gradio 6.17's own markup causes
GRADIO_INTERNALS = [
    ("aria-required-children", r"\.examples|table-wrap|virtual-table-viewport|role=\"grid\""),
    ("label-content-name-mismatch", r"aria-dropeffect|svelte-8prmba"),
    ("nested-interactive", r"aria-dropeffect|svelte-8prmba"),
    ("aria-prohibited-attr", r"\.empty"),
    ("color-contrast", r"json-node|\.string|\.key|\.value"),
]
RUN_AXE = """async () => (await axe.run(document, {resultTypes: ['violations']})).violations
  .filter((v) => ['serious', 'critical'].includes(v.impact))
  .flatMap((v) => v.nodes.map((n) => [v.id, n.target.join(' ')]))"""


@pytest.fixture(scope="module")
def url(chat_model_dir):
    registry = ModelRegistry.discover([ROOT / "models"])
    registry.add("tiny-chat", chat_model_dir)
    demo = app.build(registry)
    yield serve(demo)
    demo.close()


def opened(browser, url):
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    page.set_default_timeout(TIMEOUT * 1000)
    page.goto(url)
    page.locator("#chat-message textarea").wait_for()
    return page


def in_message_box(page) -> bool:
    return page.evaluate("() => !!document.activeElement.closest('#chat-message')")


def test_the_message_box_is_within_three_tab_presses(browser, url):
    page = opened(browser, url)
    presses = 0
    while not in_message_box(page) and presses < 3:
        page.keyboard.press("Tab")
        presses += 1
    assert in_message_box(page), "the message box is more than 3 Tab presses away"
    page.locator("body").click(position={"x": 5, "y": 5})  # from the top of the page
    page.keyboard.press("Tab")
    hidden = "() => !!document.activeElement.closest('.tab-container.visually-hidden')"
    assert not page.evaluate(hidden), "the first Tab lands on the hidden copy of the tab bar"
    page.close()


def test_axe_finds_nothing_serious_in_our_components(browser, url):
    page = opened(browser, url)
    page.add_script_tag(path=str(AXE))
    ours, theirs = {}, {}
    for tab in TABS:
        page.get_by_role("tab", name=tab).first.click()
        page.wait_for_timeout(1000)
        for rule, target in page.evaluate(RUN_AXE):
            gradio = any(r == rule and re.search(p, target) for r, p in GRADIO_INTERNALS)
            (theirs if gradio else ours).setdefault(tab, []).append(f"{rule}: {target}")
    print("Gradio's own:", {tab: len(found) for tab, found in theirs.items()})
    assert not ours, ours
    page.close()


def test_the_phone_tab_menu_is_labelled(browser, url):
    page = browser.new_page(viewport={"width": 390, "height": 844})
    page.set_default_timeout(TIMEOUT * 1000)
    page.goto(url)
    page.locator("#chat-message textarea").wait_for()
    menu = page.get_by_role("button", name="More tabs")
    menu.wait_for()
    menu.click()
    page.locator(".overflow-dropdown").get_by_text("Models", exact=True).click()
    page.get_by_role("heading").first.wait_for()
    assert page.locator("#benchmark-summary").is_visible()  # the Models tab opened
    page.close()


def test_the_phone_tab_menu_shows_the_open_tab_and_the_placeholder_fits(browser, url):
    page = browser.new_page(viewport={"width": 390, "height": 844})
    page.set_default_timeout(TIMEOUT * 1000)
    page.goto(url)
    box = page.locator("#chat-message textarea")
    box.wait_for()
    # the placeholder's text, in the box's font, fits the box's inner width: one line, not cut
    room = """(box) => {
      const style = getComputedStyle(box), canvas = document.createElement('canvas');
      const context = canvas.getContext('2d');
      context.font = `${style.fontWeight} ${style.fontSize} ${style.fontFamily}`;
      const padding = parseFloat(style.paddingLeft) + parseFloat(style.paddingRight);
      const inner = box.clientWidth - padding;
      return inner - context.measureText(box.placeholder).width;
    }"""
    assert box.evaluate(room) >= 0, "the chat placeholder is cut on a phone"
    menu = page.locator(".overflow-menu > button")
    assert menu.get_attribute("aria-label") == "More tabs"
    menu.click()
    page.locator(".overflow-dropdown").get_by_text("Models", exact=True).click()
    page.locator("#benchmark-summary").wait_for()
    shown = "(button) => getComputedStyle(button, '::after').content"
    wait_until(lambda: "Models" in menu.evaluate(shown), "the menu to name the open tab")
    assert menu.get_attribute("aria-label") == "More tabs (open: Models)"
    page.get_by_role("tab", name="Chat").click()
    wait_until(lambda: "Models" not in menu.evaluate(shown), "the menu to drop the tab's name")
    page.close()
