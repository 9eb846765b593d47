"""The Chat tab as a new visitor meets it, in headless Chromium (Debian's, through Playwright):
two fresh pages draw different seeds and show them, the Link carries the shown seed, an
example chip fills the conversation and sends it, and no message scrolls under the bin. The app
has only the tiny Llama ChatML model (tests/app_fixtures.py); replies are gibberish, which is not
what is tested here.
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


# The messages (and their buttons) that the chat's bin overlaps, as shown in the scrolling
# conversation (run in the page).
UNDER_THE_BIN = """() => {
  const chat = document.querySelector('#chat-conversation');
  const bin = chat.querySelector('button[aria-label="Clear"]').getBoundingClientRect();
  const view = chat.querySelector('.bubble-wrap').getBoundingClientRect();
  return [...chat.querySelectorAll('.message-content, .message-buttons')].filter((m) => {
    const box = m.getBoundingClientRect();
    const [top, bottom] = [Math.max(box.top, view.top), Math.min(box.bottom, view.bottom)];
    return Math.min(bin.right, box.right) > Math.max(bin.left, box.left)
      && Math.min(bin.bottom, bottom) > Math.max(bin.top, top);
  }).length;
}"""


def test_no_message_scrolls_under_the_bin(browser, url):
    page = fresh_page(browser, url)
    page.locator("#chat-message textarea").fill("Hello there, how are you doing today?")
    page.locator("#chat-send").click()
    page.locator('#chat-conversation [data-testid="bot"]').wait_for()
    # tall messages, so that the conversation scrolls past the bin at every offset
    page.add_style_tag(content="#chat-conversation .message-content { min-height: 300px; }")
    view = page.locator("#chat-conversation .bubble-wrap")
    wait_until(lambda: view.evaluate("(e) => e.scrollHeight > e.clientHeight"), "a scroll")
    under = {}
    for offset in range(0, view.evaluate("(e) => e.scrollHeight - e.clientHeight") + 1, 8):
        view.evaluate(f"(e) => {{ e.scrollTop = {offset}; }}")
        under[offset] = page.evaluate(UNDER_THE_BIN)
    page.close()
    assert not any(under.values()), {offset: n for offset, n in under.items() if n}
