"""Editing a sent message and Retry's earlier replies (issue 45), in headless Chromium (Debian's,
through Playwright) on the tiny Llama ChatML model (tests/app_fixtures.py): Retry keeps the
reply it replaces, folded above the new one; editing the user's message answers it again and
drops what followed it; New chat takes the old conversation's download button away.
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


def finished(page) -> bool:
    cells = page.locator("#chat-turns td.finish")
    return cells.count() == 2 and cells.last.inner_text() not in ("running", "")


def test_retry_keeps_the_earlier_reply_and_an_edit_answers_again(browser, url):
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    page.set_default_timeout(TIMEOUT * 1000)
    page.goto(url)
    tokens = page.locator("#chat-settings").get_by_label("number input for Max new tokens")
    tokens.fill("6")
    tokens.press("Enter")
    page.locator("#chat-message textarea").fill("First question")
    page.locator("#chat-message textarea").press("Enter")
    wait_until(lambda: finished(page), "the reply")
    chat = page.locator("#chat-conversation")
    page.locator("#chat-retry").click()
    wait_until(lambda: "Earlier reply 1 of 2" in chat.inner_text() and finished(page), "retry")
    assert page.locator("#chat-turns tbody tr").count() == 2  # the earlier reply is no turn
    user = chat.locator('[data-testid="user"]')
    user.first.hover()
    chat.get_by_role("button", name="Edit").first.click()
    box = chat.locator("textarea.edit-textarea")
    box.fill("Edited question")
    chat.get_by_role("button", name="Submit").first.click()
    wait_until(
        lambda: user.count() == 1 and user.first.inner_text().strip() == "Edited question",
        "the edited message",
    )
    wait_until(lambda: finished(page), "the reply to the edited message")
    assert "Earlier reply" not in chat.inner_text()  # the edit dropped what followed
    download = page.locator("#chat-download")
    assert download.is_visible()
    page.locator("#chat-clear").click()  # New chat: the old conversation's download goes too
    wait_until(lambda: not download.is_visible(), "the download button to go")
    page.close()
