"""The Chat marks a reply cut off by the token limit in the reply itself, with a one-click
Continue (issue 45), in headless Chromium (Debian's, through Playwright) on the tiny Llama
ChatML model (tests/app_fixtures.py), whose replies to a few tokens are always cut off.
"""

from __future__ import annotations

import time

import pytest

from tests.app_fixtures import chat_app_url, chat_model_dir
from tests.browser_fixtures import TIMEOUT, browser, needs_chromium, wait_until
from ui import chat_tab

__all__ = ["chat_app_url", "chat_model_dir", "browser"]  # fixtures, used by name
SEED = 1234  # both replies of this seed run to the token limit
pytestmark = needs_chromium


@pytest.fixture(scope="module")
def url(chat_app_url):
    return chat_app_url


def test_a_cut_off_reply_says_so_and_continue_asks_for_more(browser, url):
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    page.set_default_timeout(TIMEOUT * 1000)
    page.goto(url)
    # A fixed seed: a fresh page draws one, and the tiny random model ends a reply within 4
    # tokens with a few of them (a full run once met one: the continuation ended "eos").
    seed = page.locator("#chat-seed input")
    wait_until(lambda: seed.input_value() not in ("", "0"), "the page to draw its seed")
    seed.fill(str(SEED))
    seed.press("Tab")
    tokens = page.locator("#chat-settings").get_by_label("number input for Max new tokens")
    tokens.fill("4")
    tokens.press("Enter")
    user = page.locator('#chat-conversation [data-testid="user"]')
    page.locator("#chat-continue").click()  # nothing cut off yet: refused, nothing sent
    time.sleep(1.0)
    assert user.count() == 0
    page.locator("#chat-message textarea").fill("Tell me a long story.")
    page.locator("#chat-message textarea").press("Enter")
    finish = page.locator("#chat-turns td.finish")
    wait_until(lambda: finish.count() == 2 and finish.nth(1).inner_text() == "length", "a reply")
    assert seed.input_value() == str(SEED)
    bot = page.locator('#chat-conversation [data-testid="bot"]')
    wait_until(lambda: "Cut off" in bot.last.inner_text(), "the mark in the reply")
    assert "limit of 4 new tokens" in bot.last.inner_text()
    page.locator("#chat-continue").click()
    wait_until(lambda: user.count() == 2, "Continue's message")
    assert user.last.inner_text().strip() == chat_tab.CONTINUE
    wait_until(lambda: finish.count() == 4 and finish.nth(3).inner_text() == "length", "more")
    page.close()
