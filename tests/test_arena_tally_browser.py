"""The Arena's tally in headless Chromium (issue 36, item 3): votes stay.

A visitor votes three times, reloads the page, and the tally shows those three votes; a second,
fresh page shows them too. The app is tests/app_fixtures.py's tiny chat model, served in this
process on 127.0.0.1 with its votes in a temporary file.
"""

from __future__ import annotations

import pytest

import app
from tests.app_fixtures import chat_model_dir, serve
from tests.browser_fixtures import TIMEOUT, browser, needs_chromium, wait_until
from ui import arena, votes
from ui.registry import ModelRegistry

__all__ = ["chat_model_dir", "browser"]  # fixtures, used by name
pytestmark = needs_chromium
MODEL = "tiny-chat"
CHOICES = ["1: tiny-chat · top-p 0.95", "2: tiny-chat · greedy", "2: tiny-chat · greedy"]
ROUNDS = len(CHOICES)


@pytest.fixture(scope="module")
def served(chat_model_dir, tmp_path_factory):
    registry = ModelRegistry({})
    registry.add(MODEL, chat_model_dir)
    path = tmp_path_factory.mktemp("votes") / "votes.sqlite"
    demo = app.build(registry, votes.VoteStore(path))
    url = serve(demo)
    yield url, path
    demo.close()


def open_arena(browser, url: str):
    page = browser.new_page(viewport={"width": 1400, "height": 1100})
    page.set_default_timeout(TIMEOUT * 1000)
    page.goto(url)
    page.get_by_role("tab", name="Arena").click()
    page.locator("#arena-tally").wait_for()
    page.locator("#arena-blind input").uncheck()  # the columns' own contestants, named
    return page


def tally_votes(page) -> list[str]:
    """The "votes" cell of every row of the page's tally table (read from its text: the cells
    follow the last header, "votes", one a line)."""
    text = page.locator("#arena-tally").inner_text()
    cells = [line.strip() for line in text.rpartition("votes")[2].splitlines() if line.strip()]
    width = len(arena.TALLY_HEADERS)
    return cells[width - 1 :: width]


def vote(page, choice: str) -> None:
    page.get_by_role("button", name="Ask every column").click()
    button = page.locator("#arena-vote")
    wait_until(button.is_enabled, "the vote button")
    page.locator("#arena-choice").get_by_text(choice).click()
    button.click()
    wait_until(lambda: not button.is_enabled(), "the vote to be taken")


def test_votes_survive_a_reload_and_show_on_a_fresh_page(browser, served):
    url, path = served
    page = open_arena(browser, url)
    for n, choice in enumerate(CHOICES, start=1):
        vote(page, choice)
        wait_until(lambda n=n: tally_votes(page) == [str(n)], f"vote {n} in the tally")
    (kept,) = votes.VoteStore(path).tally()  # a: greedy, b: top-p 0.95
    assert (kept.a_wins, kept.b_wins, kept.ties) == (2, 1, 0)
    page.reload()
    page.get_by_role("tab", name="Arena").click()
    wait_until(lambda: tally_votes(page) == [str(ROUNDS)], "the tally after a reload")
    text = page.locator("#arena-tally").inner_text()
    assert "tiny-chat · greedy" in text and "tiny-chat · top-p 0.95" in text
    fresh = open_arena(browser, url)
    wait_until(lambda: tally_votes(fresh) == [str(ROUNDS)], "the tally on a fresh page")
    fresh.close()
    page.close()
