"""The blind arena (issue 45) and its vote limit (issue 44, item 8), in headless Chromium
(Debian's, through Playwright) on the tiny Llama ChatML model (tests/app_fixtures.py).

A blind round shows no contestant's name while the replies stream and before the vote (the
pickers are hidden, the metrics table says "hidden until the vote"), then names both with the
tally; `?tab=arena` opens the tab without a notice and the Arena has a Link button; the page keeps
its width when the Arena opens. A session that votes more than `arena.VOTES_PER_MINUTE` times a
minute is refused with a message naming the limit.
"""

from __future__ import annotations

import gradio as gr
import pytest

import app
from tests.app_fixtures import chat_model_dir, serve
from tests.browser_fixtures import TIMEOUT, browser, needs_chromium, wait_until
from ui import arena, votes
from ui.registry import ModelRegistry

__all__ = ["chat_model_dir", "browser"]  # fixtures, used by name
pytestmark = needs_chromium
MODEL = "tiny-chat"


@pytest.fixture(scope="module")
def served(chat_model_dir, tmp_path_factory):
    registry = ModelRegistry({})
    registry.add(MODEL, chat_model_dir)
    path = tmp_path_factory.mktemp("votes") / "votes.sqlite"
    demo = app.build(registry, votes.VoteStore(path))
    url = serve(demo)
    yield url, path, demo
    demo.close()


def container_width(page) -> float:
    return page.evaluate("() => document.querySelector('.gradio-container').clientWidth")


def test_a_blind_round_names_its_contestants_only_after_the_vote(browser, served):
    url, path, _ = served
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    page.set_default_timeout(TIMEOUT * 1000)
    page.goto(url + "?tab=arena")
    page.locator("#arena-link-button").wait_for(state="visible")  # opened on the Arena
    assert not page.locator("#link-notice").is_visible(), "?tab=arena is refused"
    page.goto(url)
    page.locator("#chat-message textarea").wait_for()
    width = container_width(page)
    page.get_by_role("tab", name="Arena").click()
    page.locator("#arena-run").wait_for(state="visible")
    assert abs(container_width(page) - width) <= 1, "the page changed width"
    assert page.get_by_label("Model 1").count() == 0, "a picker names the contestants"
    page.locator("#arena-run").click()
    outputs = [page.locator(f"#arena-output-{n} textarea") for n in (1, 2)]
    wait_until(lambda: all(o.input_value() for o in outputs), "both replies")
    vote = page.locator("#arena-vote")
    wait_until(vote.is_enabled, "the vote button")
    before = page.locator("#arena-metrics").inner_text()
    before += page.locator("#arena-choice").inner_text()
    assert MODEL not in before and "hidden until the vote" in before, before
    page.locator("#arena-choice").get_by_text("reply 1", exact=True).click()
    vote.click()
    said = page.locator("#arena-said")
    wait_until(lambda: "contestants were" in said.inner_text(), "the reveal")
    text = said.inner_text()
    assert text.startswith("Vote recorded: reply 1.") and text.count(f"{MODEL} · ") == 2, text
    (tallied,) = votes.VoteStore(path).tally()
    shown = [line.split(": ", 1)[1].strip(" ;") for line in text.split("reply ")[2:]]
    assert {tallied.a, tallied.b} == set(shown), (tallied, shown)
    assert (tallied.a_wins, tallied.b_wins) in ((1, 0), (0, 1)) and tallied.a_wins + tallied.b_wins
    winner = tallied.a if tallied.a_wins else tallied.b
    assert winner == shown[0], "the vote went to the reply the visitor chose"
    wait_until(lambda: MODEL in page.locator("#arena-metrics").inner_text(), "named metrics")
    page.locator("#arena-link-button").click()
    box = page.locator("#arena-link textarea")
    wait_until(lambda: "tab=arena" in box.input_value(), "the Arena's link")
    assert "blind=true" in box.input_value()
    page.close()


def test_votes_beyond_the_limit_are_refused_by_name(served):
    _, path, demo = served
    (cast,) = [fn for fn in demo.fns.values() if getattr(fn.fn, "__name__", "") == "cast"]
    contestants = [f"{MODEL} · greedy", f"{MODEL} · top-k 5"]
    request = gr.Request(session_hash="one-session")
    before = sum(t.votes for t in votes.VoteStore(path).tally())
    for _ in range(arena.VOTES_PER_MINUTE):
        current = {"contestants": contestants, "voted": False, "blind": False, "rows": []}
        cast.fn(arena.TIE, current, request)
    with pytest.raises(gr.Error, match=r"at most 6 every 60 s; vote again in \d+ s"):
        cast.fn(arena.TIE, dict(current), request)
    other = gr.Request(session_hash="another-session")  # the limit is per session
    cast.fn(arena.TIE, dict(current), other)
    after = sum(t.votes for t in votes.VoteStore(path).tally())
    assert after - before == arena.VOTES_PER_MINUTE + 1
