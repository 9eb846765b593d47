"""Honest speed on the Generate and Compare tabs (issue 45): the time to the first token and
tokens/s they show count from the click on Generate or Compare, queue included, and hold
within 20 % of a stopwatch run in the page (from the click to the output's first text, and to
the stats saying it finished, or on Compare to each column's last token count), with a busy
process beside. The model is the tiny Llama model streaming one token per 0.4 s
(tests/app_fixtures.py SlowGenerator), so the figures are long enough to compare.
"""

from __future__ import annotations

import re

from tests.app_fixtures import chat_model_dir, slow_chat_app_url
from tests.browser_fixtures import browser, needs_chromium, wait_until
from tests.test_chat_speed_browser import assert_matches_stopwatch, busy_page, first_number

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
    with busy_page(browser, slow_chat_app_url) as page:
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


# In the page: click Compare, then resolve with the seconds from the click to the first new text
# of any column, and, per row of the metrics table, its last token count and the seconds from the
# click to when it was first shown; once the run's record arrives (click_speed.RECORD_ARRIVED).
COMPARE_STOPWATCH = """() => new Promise((resolve, reject) => {
  setTimeout(() => reject(new Error('no record 120 s after the click')), 120000);
  const start = performance.now();
  let first = null;
  const grown = {};
  const seconds = (t) => (t - start) / 1000;
  const boxes = () => [...document.querySelectorAll('[id^="compare-output-"] textarea')];
  const before = boxes().map((box) => box.value);  // a second run starts beside the first's text
  const watch = () => {
    const now = performance.now();
    if (first === null && boxes().some((box, n) => box.value.trim() && box.value !== before[n]))
      first = now;
    const table = document.querySelector('#compare-metrics');
    const at = [...table.querySelectorAll('thead th')]
      .findIndex((th) => th.querySelector('.header-content')?.textContent.trim() === 'tokens');
    table.querySelectorAll('.virtual-row').forEach((row, n) => {
      const count = Number(row.querySelectorAll('.body-cell')[at]?.innerText);
      if (count > 0 && grown[n]?.count !== count) grown[n] = {count, end: seconds(now)};
    });
    if (first !== null && (window.compareRecordAt || 0) > start) {  // this run's record
      resolve({first: seconds(first), columns: Object.values(grown)});
    } else {
      requestAnimationFrame(watch);
    }
  };
  document.querySelector('#compare-run').click();
  requestAnimationFrame(watch);
})"""


def test_compare_shows_its_speed_from_the_click(browser, slow_chat_app_url):
    with busy_page(browser, slow_chat_app_url) as page:
        page.get_by_role("tab", name="Compare", exact=True).click()
        tokens = page.get_by_role("tabpanel").get_by_label("number input for Max new tokens")
        note = page.locator("#compare-click-speed")
        for max_tokens in ("6", "5"):  # a second run in the same page, its buttons already shown
            tokens.first.fill(max_tokens)
            tokens.first.press("Enter")
            watched = page.evaluate(COMPARE_STOPWATCH)
            wait_until(lambda: "first token after" in note.inner_text(), "the click's speed")
            said = note.inner_text()
            shown = re.findall(r"column \d+ ([0-9]+\.[0-9])", said)
            assert len(shown) == len(watched["columns"]) == 2, (said, watched)
            for rate, column in zip(shown, watched["columns"]):
                assert column["count"] >= 2, watched
                stopwatch = column["count"] / column["end"]
                assert abs(float(rate) - stopwatch) <= 0.2 * stopwatch, (said, watched)
            first = float(re.search(r"first token after ([0-9.]+) s", said)[1])
            assert abs(first - watched["first"]) <= 0.2 * watched["first"], (said, watched)
