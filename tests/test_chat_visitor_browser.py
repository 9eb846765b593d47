"""The Chat tab as a new visitor meets it, in headless Chromium (Debian's, through Playwright):
two fresh pages draw different seeds and show them, the Link carries the shown seed, and an
example chip fills the conversation and sends it. The app has only the tiny Llama ChatML model
(tests/app_fixtures.py); replies are gibberish, which is not what is tested here.
"""

from __future__ import annotations

import time
from urllib.parse import parse_qs, urlparse

import pytest

from tests.app_fixtures import chat_app_url, chat_model_dir
from tests.browser_fixtures import TIMEOUT, browser, needs_chromium, wait_until
from ui import chat_tab

__all__ = ["chat_app_url", "chat_model_dir", "browser"]  # fixtures, used by name
pytestmark = needs_chromium


@pytest.fixture(scope="module")
def url(chat_app_url):
    return chat_app_url


def fresh_page(browser, url: str):
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.set_default_timeout(TIMEOUT * 1000)
    page.goto(url)
    page.locator("#chat-message textarea").wait_for()
    return page


def shown_seed(page) -> str:
    """The Seed field's value once the page has drawn it (0, the field's default, is never
    drawn)."""
    box = page.locator("#chat-settings").get_by_label("Seed")
    wait_until(lambda: box.input_value() not in ("", "0"), "the page to draw its seed")
    return box.input_value()


def test_fresh_pages_draw_different_seeds_and_the_link_carries_it(browser, url):
    first, second = fresh_page(browser, url), fresh_page(browser, url)
    seeds = [shown_seed(first), shown_seed(second)]
    assert seeds[0] != seeds[1]
    first.locator("#chat-link-button").click()
    box = first.locator("#chat-link textarea")
    wait_until(lambda: "seed=" in box.input_value(), "the link")
    assert parse_qs(urlparse(box.input_value()).query)["seed"] == [seeds[0]]
    # A link's own seed is kept, not replaced by a fresh one.
    linked = fresh_page(browser, f"{url}?tab=chat&seed=4242")
    box = linked.locator("#chat-settings").get_by_label("Seed")
    wait_until(lambda: box.input_value() == "4242", "the link's seed")
    time.sleep(1)  # a fresh draw, had there been one, would have landed by now
    assert box.input_value() == "4242"
    for page in (first, second, linked):
        page.close()


def test_an_example_chip_fills_and_sends_its_prompt(browser, url):
    page = fresh_page(browser, url)
    chips = page.locator("#chat-conversation button.example")
    assert chips.all_inner_texts() == list(chat_tab.EXAMPLES)
    chips.nth(1).click()
    user = page.locator('#chat-conversation [data-testid="user"]')
    wait_until(lambda: user.count() == 1, "the example as the user's message")
    assert user.inner_text().strip() == chat_tab.EXAMPLES[1]
    finish = page.locator("#chat-turns td.finish")
    wait_until(lambda: finish.count() == 2 and finish.nth(1).inner_text() != "running", "a reply")
    assert finish.nth(1).inner_text() in ("eos", "length", "context")
    assert page.locator("#chat-conversation button.example").count() == 0  # chips give way
    assert page.locator("#chat-about").inner_text().startswith("SmolLM2-135M-Instruct is a 135M")
    page.close()
