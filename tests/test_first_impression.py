"""A new visitor's first look, in headless Chromium (Debian's, through Playwright), on the shipped
models: every tab opens ready, every chart draws, every error stays readable (issue 25).

Each tab gets a fresh page at 1280 px. The test selects the tab and, unless the page has settled
(shown none of these problems for 1 s) within 5 s, fails on a loading indicator still showing, a
JavaScript error (an uncaught exception or a console error), a button or example with no text, a
chart with no data marks, an element running past the viewport or cut by its box, or two tables
overlapping; it takes a full-page screenshot; then it runs the tab's main actions, waits for them
to finish and checks the same again (and that no error box shows), with a second screenshot.
JavaScript errors are kept from the page's first moment to the last check. Screenshots go to
$SCRIPTORIUM_ARTIFACTS if set, else to a temporary test-artifacts directory; docs/APP.md's
screenshots are the `*-run.png` ones.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import app
from runtime.parameters import ADAPTER_PRESET
from tests.app_fixtures import chat_model_dir, serve
from tests.browser_fixtures import TIMEOUT, browser, needs_chromium, wait_until
from tests.test_browser import artifacts
from ui import votes
from ui.registry import ModelRegistry
from ui.rewrite_tab import SWEEP_HEADERS

__all__ = ["artifacts", "browser", "chat_model_dir"]  # fixtures, used by name
pytestmark = needs_chromium
MODELS = Path(__file__).resolve().parents[1] / "models"
WIDTH = 1280
SETTLE = 5.0  # seconds a tab may take to show ready after it is selected
QUIET = 1.0  # seconds a page must show no problem to count as settled
RUN_TIMEOUT = 240  # seconds a tab's actions may take on a loaded 2-core machine

# Every problem the page shows, as one line each (run in the page).
PROBLEMS = """() => {
  const problems = [];
  const width = document.documentElement.clientWidth;
  const shown = (el) => {
    const box = el.getBoundingClientRect();
    return box.width > 0 && box.height > 0 && el.getClientRects().length > 0
      && getComputedStyle(el).visibility !== "hidden";
  };
  const name = (el) => {
    const block = el.closest("[id]:not([id=''])");
    return `${el.tagName.toLowerCase()}.${String(el.className).split(" ")[0]}`
      + (block ? ` in #${block.id}` : "");
  };
  const scrolls = (el) => ["auto", "scroll"].includes(getComputedStyle(el).overflowX);
  const clippedByScroller = (el) => {
    for (let up = el.parentElement; up; up = up.parentElement) {
      if (scrolls(up) && up.getBoundingClientRect().right <= width + 1) return true;
    }
    return false;
  };
  for (const tracker of document.querySelectorAll('[data-testid="status-tracker"]')) {
    if (tracker.classList.contains("hide") || !shown(tracker)) continue;
    if (tracker.querySelector(".progress-text, .eta-bar, svg")) {
      problems.push(`loading indicator: ${name(tracker.parentElement)}`);
    }
  }
  for (const button of document.querySelectorAll("button")) {
    if (!shown(button)) continue;
    const text = button.innerText.trim() || button.getAttribute("aria-label")
      || button.getAttribute("title") || button.querySelector("img[alt]")?.alt;
    if (!text) problems.push(`button without text: ${name(button)}`);
  }
  for (const plot of document.querySelectorAll(".vega-embed")) {
    const block = plot.closest(".block");
    if (!block || !shown(block)) continue;
    const marks = block.querySelector(".marks");
    if (!marks || marks.getBoundingClientRect().height < 50) {
      problems.push(`plot without data marks: ${name(plot)}`);
    }
  }
  if (document.documentElement.scrollWidth > width + 1) {
    problems.push(`the page is ${document.documentElement.scrollWidth} px wide`);
  }
  for (const el of document.querySelectorAll(".gradio-container *")) {
    if (!shown(el)) continue;
    const box = el.getBoundingClientRect();
    if (box.right > width + 1 && !clippedByScroller(el)) {
      problems.push(`past the right edge (${Math.round(box.right)} px): ${name(el)}`);
    }
  }
  for (const block of document.querySelectorAll(".block")) {
    if (!shown(block) || scrolls(block)) continue;
    if (block.scrollWidth > block.clientWidth + 2) {
      problems.push(`content cut by its box (${block.scrollWidth} > ${block.clientWidth} px): `
        + name(block));
    }
  }
  // The part of an element its scrolling or clipping boxes let show.
  const seen = (el) => {
    const box = el.getBoundingClientRect();
    let [left, top, right, bottom] = [box.left, box.top, box.right, box.bottom];
    for (let up = el.parentElement; up; up = up.parentElement) {
      const style = getComputedStyle(up);
      if (style.overflowX === "visible" && style.overflowY === "visible") continue;
      const clip = up.getBoundingClientRect();
      [left, top] = [Math.max(left, clip.left), Math.max(top, clip.top)];
      [right, bottom] = [Math.min(right, clip.right), Math.min(bottom, clip.bottom)];
    }
    return { left, top, right, bottom };
  };
  const tables = [...document.querySelectorAll("table")].filter(shown);
  for (let i = 0; i < tables.length; i++) {
    for (let j = i + 1; j < tables.length; j++) {
      const [a, b] = [tables[i], tables[j]];
      if (a.contains(b) || b.contains(a)) continue;
      const p = seen(a), q = seen(b);
      const x = Math.min(p.right, q.right) - Math.max(p.left, q.left);
      const y = Math.min(p.bottom, q.bottom) - Math.max(p.top, q.top);
      if (x > 2 && y > 2) problems.push(`tables overlap: ${name(a)} and ${name(b)}`);
    }
  }
  for (const box of document.querySelectorAll(".error-box")) {
    if (shown(box)) problems.push(`error shown: ${box.innerText.trim()}`);
  }
  return [...new Set(problems)];
}"""

# Whether any event is still running (a visible loading indicator anywhere).
BUSY = """() => [...document.querySelectorAll('[data-testid="status-tracker"]')].some(
  (t) => !t.classList.contains("hide") && t.getClientRects().length > 0
    && t.querySelector(".progress-text, .eta-bar"))"""


STUDY = "Decoding study (seed 000): top-k and top-p sweeps"
# The main actions of each tab, in order: buttons to click (each waited for), or "open:" an
# accordion, or "fill:" the last field with a label (the one in the section just opened).
ACTIONS = {
    # the tiny chat model (tests/app_fixtures.py) stands in for SmolLM2, which needs converting
    "Chat": ["type:Write a message and press Enter=Hello there", "Send"],
    "Generate": ["Generate"],
    # the study with fewer samples and tokens than its defaults, so that it ends in a minute here
    "Compare": [
        "Compare",
        f"open:{STUDY}",
        "fill:number input for Samples per prompt and setting=2",
        "fill:number input for Max new tokens=12",
        "Run the decoding study",
    ],
    "Rewrite": ["Rewrite", "Sweep every ratio"],
    "Translate": ["Translate"],
    "Paraphrase": ["Paraphrase"],
    "Embeddings": [
        "Compare phrases",
        "Find neighbours",
        "Solve",
        "Neighbours in every model",
        "Compare static and contextual neighbours",
    ],
    "Masked LM": [
        "Fill the mask",
        "Run the study",
        "Run the probes",
        "Average Influence Similarity",
        "Generate",
    ],
    "Models": [],
}
# What shows once each tab's actions are done (true in the page).
RESULTS = {
    "Chat": "() => [...document.querySelectorAll('#chat-turns td.finish')]"
    ".some((cell) => cell.innerText.trim() && !cell.innerText.includes('running'))",
    "Generate": "() => /eos|length|context/"
    ".test(document.querySelector('#generate-stats').innerText)",
    "Compare": "() => document.querySelector('#compare-metrics').innerText.includes('greedy')"
    " && document.querySelector('#decoding-study-chart .vega-embed') !== null",
    "Rewrite": "() => document.querySelectorAll('#rewrite-report .badge').length >= 5"
    " && document.querySelector('#rewrite-plot .vega-embed') !== null",
    "Translate": "() => document.querySelector('#translate-output textarea').value.length > 0",
    "Paraphrase": "() => document.querySelectorAll('#paraphrase-candidates td.candidate').length",
    "Embeddings": "() => document.querySelectorAll('#word-vectors tbody td').length > 0",
    "Masked LM": "() => document.querySelectorAll('.cosines td').length > 0",
    "Models": "() => document.querySelector('#benchmark-summary').innerText.length > 0",
}


def wait_idle(page, timeout: float = RUN_TIMEOUT):
    """Wait until no event shows a loading indicator (one that never stops fails the test)."""
    time.sleep(0.5)  # the click's event has started
    deadline = time.monotonic() + timeout
    while page.evaluate(BUSY):
        if time.monotonic() > deadline:
            raise AssertionError(f"still loading after {timeout} s")
        time.sleep(0.2)


@pytest.fixture(scope="module")
def served(chat_model_dir, tmp_path_factory):
    if not any(MODELS.glob("*/*/manifest.json")):
        pytest.skip("no shipped models")
    registry = ModelRegistry.discover([MODELS])
    registry.add("tiny-chat", chat_model_dir)
    demo = app.build(registry, votes.VoteStore(tmp_path_factory.mktemp("votes") / "votes.sqlite"))
    url = serve(demo)
    yield url
    demo.close()


@pytest.fixture
def page(browser, served):
    """A fresh page on the app, with every JavaScript error it logs in `page.errors`."""
    context = browser.new_context(viewport={"width": WIDTH, "height": 900})
    page = context.new_page()
    page.set_default_timeout(TIMEOUT * 1000)
    page.errors = []
    page.on("pageerror", lambda error: page.errors.append(f"uncaught: {error}"))
    page.on(
        "console",
        lambda message: (
            page.errors.append(f"console: {message.text}") if message.type == "error" else None
        ),
    )
    page.goto(served)
    page.get_by_role("tab", name="Models").wait_for()
    yield page
    context.close()


def problems(page) -> list[str]:
    return page.errors + page.evaluate(PROBLEMS)


def settled_problems(page, within: float = SETTLE) -> list[str]:
    """[] once the page has shown no problem for QUIET seconds, else its problems at `within`
    seconds (polled, so that a tab ready at once is not waited on for the whole of `within`)."""
    deadline = time.monotonic() + within
    clean_since = None
    while True:
        found, now = problems(page), time.monotonic()
        clean_since = None if found else clean_since or now
        if (clean_since and now - clean_since >= QUIET) or now >= deadline:
            return found
        time.sleep(0.2)


@pytest.mark.parametrize("tab", list(ACTIONS))
def test_tab_opens_ready_and_runs_cleanly(page, tab, artifacts):
    page.get_by_role("tab", name=tab, exact=True).click()
    opened = settled_problems(page)
    file = tab.lower().replace(" ", "-")
    page.screenshot(path=artifacts / f"{file}.png", full_page=True)
    assert opened == [], f"{tab}, as opened"
    for step in ACTIONS[tab]:
        if step.startswith("open:"):
            page.get_by_text(step.removeprefix("open:"), exact=True).click()
        elif step.startswith("type:"):
            placeholder, value = step.removeprefix("type:").rsplit("=", 1)
            page.get_by_placeholder(placeholder, exact=True).fill(value)
        elif step.startswith("fill:"):
            label, value = step.removeprefix("fill:").rsplit("=", 1)
            field = page.get_by_label(label, exact=True).last
            field.fill(value)
            field.press("Tab")
        else:
            page.get_by_role("button", name=step, exact=True).click()
            wait_idle(page)
    page.wait_for_function(RESULTS[tab], timeout=RUN_TIMEOUT * 1000)
    time.sleep(1.0)  # the last updates (plots draw after their data arrives)
    page.screenshot(path=artifacts / f"{file}-run.png", full_page=True)
    assert problems(page) == [], f"{tab}, after its actions"


def test_a_page_load_without_a_link_runs_nothing(browser, served):
    """No request other than the page's own assets and its queue's heartbeat: no event runs."""
    context = browser.new_context(viewport={"width": WIDTH, "height": 900})
    page = context.new_page()
    calls = []
    page.on(
        "request",
        lambda request: (
            calls.append(request.url)
            if "/gradio_api/" in request.url and "heartbeat" not in request.url
            else None
        ),
    )
    page.goto(served)
    page.get_by_role("tab", name="Models").wait_for()
    time.sleep(3)
    context.close()
    assert [url for url in calls if "/run/" in url or "/queue/join" in url] == []


# The page's first HTML, and how soon a visitor sees and can use the chat, from navigation start.
# The targets: first paint <= 1 s, Chat usable <= 3 s (quiet host), HTML <= 300 KB;
# docs/APP.md ("How fast the page opens") has the measurements and the method. The time bounds
# hold on CI's 2-core machine with the suite running beside (measured there at load 7-11: paint
# 0.5-2.3 s, usable 2.0-5.8 s). The HTML's size is held on `python app.py` itself
# (tests/test_hostile.py): in this process, Gradio numbers the page's components after every
# Blocks the suite built before (5 KB more digits by this module).
FIRST_PAINT_S = 6.0
CHAT_USABLE_S = 15.0
# performance.now() when the message box and Send can be used (run in the page).
CHAT_USABLE = """() => new Promise((resolve) => {
  const ready = () => {
    const box = document.querySelector("#chat-message textarea");
    const send = document.querySelector("#chat-send");
    return [box, send].every((el) => el && el.getClientRects().length && !el.disabled);
  };
  const check = () => (ready() ? resolve(performance.now()) : requestAnimationFrame(check));
  check();
})"""
FIRST_PAINT = """() => new Promise((resolve) => new PerformanceObserver(
  (list) => resolve(list.getEntriesByName("first-contentful-paint")[0]?.startTime ?? 0)
).observe({ type: "paint", buffered: true }))"""


def test_the_page_is_light_and_the_chat_usable_soon(browser, served):
    from urllib.request import urlopen

    with urlopen(served) as response:
        html = response.read()
    assert b"data:image" not in html, "a model card (its inlined plots) is sent with the page"
    context = browser.new_context(viewport={"width": WIDTH, "height": 900})
    page = context.new_page()
    page.goto(served, wait_until="commit")
    usable_ms = page.evaluate(CHAT_USABLE)
    paint_ms = page.evaluate(FIRST_PAINT)
    context.close()
    assert 0 < paint_ms <= FIRST_PAINT_S * 1000, f"first paint at {paint_ms:.0f} ms"
    assert usable_ms <= CHAT_USABLE_S * 1000, f"the chat usable at {usable_ms:.0f} ms"


def _open(browser, served: str, tab: str) -> tuple:
    """(context, page): the app at `served` in a fresh 1280 px context, on `tab`."""
    context = browser.new_context(viewport={"width": WIDTH, "height": 900})
    page = context.new_page()
    page.set_default_timeout(TIMEOUT * 1000)
    page.goto(served)
    page.get_by_role("tab", name=tab, exact=True).click()
    return context, page


def test_a_model_card_arrives_when_opened_and_follows_the_model(browser, served):
    context, page = _open(browser, served, "Generate")
    panel = page.get_by_role("tabpanel")  # the one shown
    picker = page.locator("#generate-model input")
    picker.fill("bible-lm (int8)")  # with a chat model installed, the tab opens on it
    picker.press("Enter")
    panel.get_by_text("Model card", exact=True).click()
    panel.locator(".prose h1", has_text="bible-lm").wait_for()
    picker.fill("translator (int8)")
    picker.press("Enter")
    panel.locator(".prose h1", has_text="translator").wait_for()
    context.close()


# Each table's key columns, in view without scrolling sideways: (tab, width, the button that
# fills the table or None, the table's container, its key headers).
KEY_COLUMNS = [
    ("Embeddings", 1280, "Compare phrases", "#embeddings-similarity", ["cosine × 100"]),
    # with the adapters' long preset label in every column (COMPARE_PRESET), the widest case
    ("Compare", 1280, "Compare", "#compare-metrics", ["mean log p", "Self-BLEU", "UNGC-4"]),
    ("Rewrite", 1280, None, "#rewrite-sweep-table", SWEEP_HEADERS),  # as it opens: empty
    ("Rewrite", 1280, "Sweep every ratio", "#rewrite-sweep-table", SWEEP_HEADERS),
    ("Chat", 390, None, "#chat-turns", ["tokens / s", "finished"]),
]
COMPARE_PRESET = ADAPTER_PRESET
# [header text, the px of it that shows, its full width in px] for each header (run in the page):
# an element's box cut by every box around it that clips or scrolls, and by the window.
HEADERS_SHOWN = """([selector, names]) => {
  const table = document.querySelector(selector);
  const cells = [...table.querySelectorAll('th')];
  return names.map((name) => {
    const cell = cells.find((th) => th.innerText.trim().replace(/\\s+/g, ' ') === name);
    if (!cell) return [name, 0, 1];
    const text = cell.querySelector('.text, span') || cell;
    const box = text.getBoundingClientRect();
    let [left, right] = [box.left, Math.min(box.right, window.innerWidth)];
    for (let up = text.parentElement; up; up = up.parentElement) {
      if (getComputedStyle(up).overflowX === 'visible') continue;
      const clip = up.getBoundingClientRect();
      [left, right] = [Math.max(left, clip.left), Math.min(right, clip.right)];
    }
    return [name, Math.round(Math.max(right - left, 0)), Math.round(text.scrollWidth)];
  });
}"""


@pytest.mark.parametrize(("tab", "width", "button", "table", "names"), KEY_COLUMNS)
def test_key_columns_show_without_scrolling(browser, served, tab, width, button, table, names):
    context = browser.new_context(viewport={"width": width, "height": 900})
    page = context.new_page()
    page.set_default_timeout(TIMEOUT * 1000)
    page.goto(served)
    page.locator("#chat-message textarea").wait_for()
    if tab != "Chat":
        page.get_by_role("tab", name=tab, exact=True).click()
    if tab == "Compare":
        for preset in page.get_by_role("tabpanel").get_by_label("Decoding preset").all()[:2]:
            preset.fill(COMPARE_PRESET)
            preset.press("Enter")
    if button:
        page.get_by_role("tabpanel").get_by_role("button", name=button, exact=True).click()
        wait_idle(page)
    page.locator(table).locator("th").first.wait_for()
    time.sleep(0.5)  # laid out
    shown = page.evaluate(HEADERS_SHOWN, [table, names])
    context.close()
    cut = [entry for entry in shown if entry[1] < entry[2] - 1]
    assert not cut, f"{tab} at {width} px: [header, px shown, px wide] {cut}"


def test_compare_runs_the_columns_it_shows(browser, served):
    """The issue's race: Columns 3, Compare, Columns 4, and Compare again 1.5 s later showed 3
    outputs and 4 metric rows (Gradio lost the update that showed the never-drawn 4th column)."""
    context, page = _open(browser, served, "Compare")
    panel = page.get_by_role("tabpanel")
    tokens = panel.get_by_label("number input for Max new tokens").first
    tokens.fill("8")
    tokens.press("Enter")
    columns = """() => [1, 2, 3, 4].map((n) => {
      const column = document.querySelector(`#compare-output-${n}`);
      return !!column && column.getClientRects().length > 0; })"""
    panel.get_by_role("radio", name="3", exact=True).click()
    wait_until(lambda: page.evaluate(columns) == [True, True, True, False], "3 columns")
    panel.get_by_role("button", name="Compare", exact=True).click()
    wait_idle(page)  # a click while the run goes on is ignored (Gradio's trigger_mode "once")
    panel.get_by_role("radio", name="4", exact=True).click()
    time.sleep(1.5)
    panel.get_by_role("button", name="Compare", exact=True).click()
    wait_idle(page)
    page.locator("#compare-metrics .virtual-row").nth(3).wait_for()
    shown = page.evaluate(columns)
    texts = [page.locator(f"#compare-output-{n} textarea").input_value() for n in range(1, 5)]
    rows = page.locator("#compare-metrics .virtual-row").count()
    context.close()
    assert shown == [True] * 4 and all(texts) and rows == 4, (shown, texts, rows)


# The px by which each shown "Decoding preset" box's text area runs under its arrow (run in the
# page; <= 0 when the text stops before it).
UNDER_THE_ARROW = """() => [...document.querySelectorAll('input[aria-label="Decoding preset"]')]
  .filter((box) => box.getClientRects().length).map((box) => {
    const arrow = box.closest('.wrap').querySelector('.icon-wrap').getBoundingClientRect();
    const text = box.getBoundingClientRect().right - parseFloat(getComputedStyle(box).paddingRight);
    return Math.round(text - arrow.left);
  })"""


def test_compare_preset_text_stops_before_the_arrow(browser, served):
    context, page = _open(browser, served, "Compare")
    panel = page.get_by_role("tabpanel")
    panel.get_by_role("radio", name="4", exact=True).click()
    for preset in panel.get_by_label("Decoding preset").all():
        preset.fill(COMPARE_PRESET)
        preset.press("Enter")
    wait_until(lambda: len(page.evaluate(UNDER_THE_ARROW)) == 4, "four preset boxes")
    under = page.evaluate(UNDER_THE_ARROW)
    context.close()
    assert all(px <= 0 for px in under), f"px of text under each arrow: {under}"


def test_each_word_vector_question_has_its_own_table(browser, served):
    """Neighbours and a : b :: c : ? wrote into one table, so a visitor could not tell which
    button's answer it showed; each has its own now, and one leaves the other as it was."""
    context, page = _open(browser, served, "Embeddings")
    panel = page.get_by_role("tabpanel")
    neighbours, answers = page.locator("#word-vectors"), page.locator("#word-analogies")
    panel.get_by_role("button", name="Neighbours in every model", exact=True).click()
    neighbours.locator(".virtual-row").first.wait_for()
    shown = neighbours.locator(".virtual-row").first.inner_text()
    panel.get_by_role("button", name="a : b :: c : ?", exact=True).click()
    answers.locator(".virtual-row").first.wait_for()
    wait_idle(page)
    kept, answer = neighbours.locator(".virtual-row").first.inner_text(), answers.inner_text()
    context.close()
    assert kept == shown, "the analogy's answer replaced the neighbours"
    assert "queen" in answer and "queen" not in shown
