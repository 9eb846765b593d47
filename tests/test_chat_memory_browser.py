"""Conversations kept in the browser (issue 45), in headless Chromium (Debian's, through
Playwright) on the tiny Llama ChatML model (tests/app_fixtures.py): a reload restores the chat,
its settings and its seed; New chat starts another and keeps the first in the past chats' list,
from which it opens again.
"""

from __future__ import annotations

import pytest

from tests.app_fixtures import chat_app_url, chat_model_dir
from tests.browser_fixtures import TIMEOUT, browser, needs_chromium, wait_until

__all__ = ["chat_app_url", "chat_model_dir", "browser"]  # fixtures, used by name
pytestmark = needs_chromium


@pytest.fixture(scope="module")
def url(chat_app_url):
    return chat_app_url


def user_texts(page) -> list[str]:
    texts = page.locator('#chat-conversation [data-testid="user"]').all_inner_texts()
    return [text.strip() for text in texts]


def ask(page, text: str) -> None:
    before = page.locator("#chat-turns tbody tr").count()
    page.locator("#chat-message textarea").fill(text)
    page.locator("#chat-message textarea").press("Enter")
    finish = page.locator("#chat-turns td.finish")
    wait_until(
        lambda: finish.count() == before + 2 and finish.last.inner_text() not in ("running", ""),
        f"the reply to {text!r}",
    )


def test_a_reload_restores_the_chat_and_past_chats_open_again(browser, url):
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    page.set_default_timeout(TIMEOUT * 1000)
    page.goto(url)
    settings = page.locator("#chat-settings")
    tokens = settings.get_by_label("number input for Max new tokens")
    seed = settings.get_by_label("Seed")
    wait_until(lambda: seed.input_value() not in ("", "0"), "the page's seed")
    tokens.fill("5")
    tokens.press("Enter")
    seed.fill("4321")
    seed.press("Enter")
    ask(page, "Hello there")
    reply = page.locator('#chat-conversation [data-testid="bot"]').last.inner_text()
    page.reload()
    wait_until(lambda: user_texts(page) == ["Hello there"], "the restored chat")
    assert page.locator('#chat-conversation [data-testid="bot"]').last.inner_text() == reply
    assert seed.input_value() == "4321" and tokens.input_value() == "5"
    assert page.locator("#chat-turns tbody tr").count() == 2
    page.locator("#chat-clear").click()  # New chat
    wait_until(lambda: user_texts(page) == [], "an empty chat")
    ask(page, "Second chat")
    page.locator("#chat-past input").click()
    options = page.get_by_role("option")
    wait_until(lambda: options.count() == 2, "two past chats")
    listed = [text.replace("✓", "").strip() for text in options.all_inner_texts()]  # ✓: shown
    assert sorted(listed) == ["Hello there", "Second chat"]
    page.get_by_role("option", name="Hello there").click()
    wait_until(lambda: user_texts(page) == ["Hello there"], "the first chat again")
    page.close()
