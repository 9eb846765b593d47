"""Honest speed on the Generate tab (issue 45): the time to the first token and tokens/s its stats
show count from the click on Generate, queue included, and hold within 20 % of a stopwatch run in
the page (from the click to the output's first text, and to the stats saying it finished), with
a busy process beside. The model is the tiny Llama model streaming one token per 0.4 s
(tests/app_fixtures.py SlowGenerator), so the figures are long enough to compare.
"""

from __future__ import annotations

import subprocess
import sys

from tests.app_fixtures import chat_model_dir, slow_chat_app_url
from tests.browser_fixtures import TIMEOUT, browser, needs_chromium
from tests.test_chat_speed_browser import BUSY, assert_matches_stopwatch, first_number

__all__ = ["chat_model_dir", "slow_chat_app_url", "browser"]  # fixtures, used by name
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


def test_the_shown_speed_is_what_a_stopwatch_in_the_page_measures(browser, slow_chat_app_url):
    busy = subprocess.Popen([sys.executable, "-c", BUSY])
    try:
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        page.set_default_timeout(TIMEOUT * 1000)
        page.goto(slow_chat_app_url)
        page.get_by_role("tab", name="Generate", exact=True).click()
        panel = page.get_by_role("tabpanel")  # the one shown
        tokens = panel.get_by_label("number input for Max new tokens")
        tokens.fill("8")
        tokens.press("Enter")
        watched = page.evaluate(STOPWATCH)
        page.locator("#generate-stats .from-click").first.wait_for()
        cells = page.locator("#generate-stats .stat-value").all_inner_texts()
        count, first, rate = int(cells[0]), first_number(cells[1]), first_number(cells[2])
        assert_matches_stopwatch(count, first, rate, watched, cells)
        page.close()
    finally:
        busy.kill()
        busy.wait(30)
