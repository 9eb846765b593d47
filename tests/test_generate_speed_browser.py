"""Honest speed on the Generate tab (issue 45): the time to the first token and tokens/s its stats
show count from the click on Generate, queue included, and hold within 20 % of a stopwatch run in
the page (from the click to the output's first text, and to the stats saying it finished), with
a busy process beside. The model is the tiny Llama model streaming one token per 0.4 s
(tests/app_fixtures.py SlowGenerator), so the figures are long enough to compare.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

import app
import runtime
from tests.app_fixtures import SlowGenerator, chat_model_dir, serve
from tests.browser_fixtures import TIMEOUT, browser, needs_chromium
from tests.test_chat_speed_browser import BUSY, first_number
from ui.registry import ModelRegistry

__all__ = ["chat_model_dir", "browser"]  # fixtures, used by name
pytestmark = needs_chromium
# In the page: click Generate, then resolve with the seconds from the click to the output's
# first text and to the stats saying every sample finished (polled every frame: a textarea's
# value changes no DOM node).
STOPWATCH = """() => new Promise((resolve) => {
  const start = performance.now();
  let first = null;
  const seconds = (t) => (t - start) / 1000;
  const watch = () => {
    if (first === null && document.querySelector('#generate-output textarea').value.trim()) {
      first = performance.now();
    }
    const cells = document.querySelectorAll('#generate-stats .stat-value');
    const finish = cells.length ? cells[4].textContent.trim() : '';
    if (first !== null && finish && finish !== '–' && !finish.includes('running')) {
      resolve({first: seconds(first), end: seconds(performance.now())});
    } else {
      requestAnimationFrame(watch);
    }
  };
  document.querySelector('#generate-run').click();
  requestAnimationFrame(watch);
})"""


@pytest.fixture(scope="module")
def url(chat_model_dir):
    registry = ModelRegistry({})
    slow = SlowGenerator(runtime.load(chat_model_dir), delay=0.4)
    registry.add("tiny-chat", chat_model_dir, slow)
    demo = app.build(registry)
    yield serve(demo)
    demo.close()


def test_the_shown_speed_is_what_a_stopwatch_in_the_page_measures(browser, url):
    busy = subprocess.Popen([sys.executable, "-c", BUSY])
    try:
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        page.set_default_timeout(TIMEOUT * 1000)
        page.goto(url)
        page.get_by_role("tab", name="Generate", exact=True).click()
        panel = page.get_by_role("tabpanel")  # the one shown
        tokens = panel.get_by_label("number input for Max new tokens")
        tokens.fill("8")
        tokens.press("Enter")
        watched = page.evaluate(STOPWATCH)
        page.locator("#generate-stats .from-click").first.wait_for()
        cells = page.locator("#generate-stats .stat-value").all_inner_texts()
        count, first, rate = int(cells[0]), first_number(cells[1]), first_number(cells[2])
        assert count >= 2, cells
        assert abs(first - watched["first"]) <= 0.2 * watched["first"], (cells, watched)
        stopwatch_rate = count / watched["end"]
        assert abs(rate - stopwatch_rate) <= 0.2 * stopwatch_rate, (cells, watched)
        page.close()
    finally:
        busy.kill()
        busy.wait(30)
