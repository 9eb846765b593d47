"""Honest speed on the Chat tab (issue 45): the time to the first token and tokens/s the turns
table shows count from the visitor's message, queue included, and hold within 20 % of a stopwatch
run in the page (from the Send click to the reply's first text, and to its last token), with a
busy process beside. The model is the tiny Llama ChatML model streaming one token per 0.4 s
(tests/app_fixtures.py SlowGenerator), so the figures are long enough to compare.
"""

from __future__ import annotations

import contextlib
import re
import subprocess
import sys

from tests.app_fixtures import chat_model_dir, slow_chat_app_url
from tests.browser_fixtures import TIMEOUT, browser, needs_chromium

__all__ = ["chat_model_dir", "slow_chat_app_url", "browser"]  # fixtures, used by name
pytestmark = needs_chromium
BUSY = "import time\nend = time.time() + 120\nwhile time.time() < end: pass"  # bounded
# In the page: click Send, then resolve with the seconds from the click to the reply's first
# text and to the turns table saying it finished.
STOPWATCH = """() => new Promise((resolve) => {
  const start = performance.now();
  let first = null;
  const seconds = (t) => (t - start) / 1000;
  const watch = new MutationObserver(() => {
    const bots = document.querySelectorAll('#chat-conversation [data-testid="bot"]');
    if (first === null && bots.length && bots[bots.length - 1].innerText.trim()) {
      first = performance.now();
    }
    const cells = document.querySelectorAll('#chat-turns td.finish');
    if (first !== null && cells.length === 2 && cells[1].textContent.trim() !== 'running') {
      watch.disconnect();
      resolve({first: seconds(first), end: seconds(performance.now())});
    }
  });
  watch.observe(document.body, {subtree: true, childList: true, characterData: true});
  [...document.querySelectorAll('button')].find((b) => b.textContent.trim() === 'Send').click();
})"""


def first_number(text: str) -> float:
    return float(re.match(r"\s*([0-9.]+)", text)[1])


def assert_matches_stopwatch(count: int, first: float, rate: float, watched: dict, cells) -> None:
    """The shown time to first token and tokens/s within 20 % of the page's stopwatch."""
    assert count >= 2, cells
    assert abs(first - watched["first"]) <= 0.2 * watched["first"], (cells, watched)
    stopwatch_rate = count / watched["end"]
    assert abs(rate - stopwatch_rate) <= 0.2 * stopwatch_rate, (cells, watched)


@contextlib.contextmanager
def busy_page(browser, url: str):
    """A 1280 px page of the app at `url`, with a busy process beside it while the block runs."""
    busy = subprocess.Popen([sys.executable, "-c", BUSY])
    try:
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        page.set_default_timeout(TIMEOUT * 1000)
        page.goto(url)
        yield page
        page.close()
    finally:
        busy.kill()
        busy.wait(30)


def test_the_shown_speed_is_what_a_stopwatch_in_the_page_measures(browser, slow_chat_app_url):
    with busy_page(browser, slow_chat_app_url) as page:
        tokens = page.locator("#chat-settings").get_by_label("number input for Max new tokens")
        tokens.fill("8")
        tokens.press("Enter")
        page.locator("#chat-message textarea").fill("Tell me a story.")
        watched = page.evaluate(STOPWATCH)
        cells = page.locator("#chat-turns tbody tr").nth(1).locator("td").all_inner_texts()
        count, first, rate = int(cells[2]), first_number(cells[3]), first_number(cells[4])
        assert_matches_stopwatch(count, first, rate, watched, cells)
