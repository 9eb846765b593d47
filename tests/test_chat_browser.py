"""The Chat tab and the arena in headless Chromium (Debian's, through Python Playwright): a chat
that streams, Stop, a link with run=1 that reproduces the reply, the JSON download, and a vote in
the arena whose tally shows (and is in the SQLite file).

The app has only the tiny Llama ChatML model (tests/app_fixtures.py), slowed to one token per 120
ms so that a reply is seen streaming and Stop lands mid-reply (the link and arena tests, which need
neither, run it at full speed). Screenshots go to $SCRIPTORIUM_ARTIFACTS if set, else to a
temporary test-artifacts directory.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import pytest

import app
import runtime
from tests.app_fixtures import SlowGenerator, chat_model_dir, serve
from tests.browser_fixtures import CHROMIUM_ARGS, TIMEOUT, browser, needs_chromium, wait_until
from ui import votes
from ui.registry import ModelRegistry

__all__ = ["chat_model_dir", "browser"]  # fixtures, used by name
CHROMIUM_ARGS += ["--disable-background-networking", "--disable-component-update"]
pytestmark = needs_chromium
MODEL = "tiny-chat"


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory) -> Path:
    chosen = os.environ.get("SCRIPTORIUM_ARTIFACTS")
    path = Path(chosen) if chosen else tmp_path_factory.mktemp("test-artifacts")
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="module")
def served(chat_model_dir, tmp_path_factory):
    slow = SlowGenerator(runtime.load(chat_model_dir), delay=0.12)
    registry = ModelRegistry({})
    registry.add(MODEL, chat_model_dir, slow)
    path = tmp_path_factory.mktemp("votes") / "votes.sqlite"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SCRIPTORIUM_VOTES", str(path))
        demo = app.build(registry)
    url = serve(demo)
    yield url, slow, path
    demo.close()


@pytest.fixture
def full_speed(served):
    """The model streams without its delay for one test."""
    _, slow, _ = served
    delay, slow.delay = slow.delay, 0.0
    yield
    slow.delay = delay


@pytest.fixture(scope="module")
def page(browser, served):
    page = browser.new_page(viewport={"width": 1400, "height": 1100}, accept_downloads=True)
    page.set_default_timeout(TIMEOUT * 1000)
    page.goto(served[0])
    page.locator("#chat-message textarea").wait_for()
    yield page
    page.close()


# Records, at every change of the chat or its table in the page, the last reply's state and
# length (the page lags behind the server on a busy machine: polling from here can miss it).
WATCH = """() => {
  window.chatSeen = [];
  const record = () => {
    const cells = [...document.querySelectorAll('#chat-turns td.finish')];
    const bots = [...document.querySelectorAll('#chat-conversation [data-testid="bot"]')];
    const state = cells.length ? cells[cells.length - 1].textContent : '';
    window.chatSeen.push([state, bots.length ? bots[bots.length - 1].innerText.length : 0]);
  };
  const options = {subtree: true, childList: true, characterData: true};
  for (const id of ['#chat-turns', '#chat-conversation']) {
    new MutationObserver(record).observe(document.querySelector(id), options);
  }
}"""


def finished(page) -> bool:
    cells = page.locator("#chat-turns td.finish").all_inner_texts()
    return bool(cells) and cells[-1] in ("eos", "length", "context")


def bot_texts(page) -> list[str]:
    return page.locator('#chat-conversation [data-testid="bot"]').all_inner_texts()


def set_settings(page, max_new_tokens: int, seed: int) -> None:
    settings = page.locator("#chat-settings")
    tokens = settings.get_by_label("number input for Max new tokens")
    tokens.fill(str(max_new_tokens))
    tokens.press("Enter")
    seed_box = settings.get_by_label("Seed")
    seed_box.fill(str(seed))
    seed_box.press("Enter")


def set_system_prompt(page, text: str) -> None:
    box = page.locator("#chat-settings").get_by_label("System prompt")
    box.fill(text)
    box.press("Tab")


def send(page, text: str) -> None:
    box = page.locator("#chat-message textarea")
    box.fill(text)
    box.press("Enter")


def test_chat_is_the_first_tab_and_a_reply_streams(page, served, artifacts):
    assert page.get_by_role("tab", name="Chat").get_attribute("aria-selected") == "true"
    _, slow, _ = served
    set_system_prompt(page, "Be brief.")  # the tiny model's context is 128 tokens
    set_settings(page, 40, 3)
    page.evaluate(WATCH)
    send(page, "Hello")
    wait_until(lambda: finished(page), "the reply")
    seen = page.evaluate("() => window.chatSeen")
    lengths = sorted({length for state, length in seen if state == "running" and length})
    assert lengths, f"no partial reply was shown while streaming: {seen}"
    rows = page.locator("#chat-turns tbody tr")
    assert rows.count() == 2
    assert rows.nth(0).locator("td").nth(1).inner_text() == "user"
    assert int(rows.nth(1).locator("td").nth(2).inner_text()) > 0  # the reply's tokens
    # its time to first token from the click, and the server's own where they differ
    first = rows.nth(1).locator("td").nth(3).inner_text()
    assert float(first.split()[0]) > 0 and re.fullmatch(r"[\d.]+( \(server [\d.]+\))?", first)
    assert "of 128 tokens" in page.locator("#chat-meter").inner_text()
    send(page, "Name a river.")
    wait_until(lambda: page.locator("#chat-turns tbody tr").count() == 4 and finished(page), "2nd")
    page.screenshot(path=artifacts / "chat.png", full_page=True)


def test_stop_frees_the_cpu_and_keeps_the_partial_reply(page, served, artifacts):
    _, slow, _ = served
    page.locator("#chat-clear").click()
    wait_until(lambda: page.locator("#chat-turns tbody tr").count() == 0, "the chat to clear")
    set_settings(page, 100, 3)
    before = slow.events
    send(page, "Tell a long story.")
    wait_until(lambda: slow.open_streams == 1 and slow.events - before > 4, "streaming")
    page.locator("#chat-stop").click()
    wait_until(lambda: slow.open_streams == 0, "the stream to close after Stop")
    events = slow.events
    time.sleep(0.6)
    assert slow.events == events and events - before < 100
    wait_until(lambda: "stopped" in page.locator("#chat-turns").inner_text(), "'stopped'")
    assert bot_texts(page)  # the partial reply stays
    set_settings(page, 8, 3)
    page.locator("#chat-retry").click()  # sampling: the next seed
    wait_until(lambda: finished(page), "the retried reply")
    assert page.locator("#chat-settings").get_by_label("Seed").input_value() == "4"
    assert page.locator("#chat-turns tbody tr").count() == 2
    page.locator("#chat-undo").click()
    wait_until(lambda: page.locator("#chat-turns tbody tr").count() == 0, "undo")
    assert page.locator("#chat-message textarea").input_value() == "Tell a long story."


def test_a_link_reproduces_the_reply_and_the_json_has_the_conversation(
    page, browser, served, artifacts, full_speed
):
    page.locator("#chat-clear").click()
    set_settings(page, 16, 11)
    send(page, "Hello")
    wait_until(lambda: finished(page), "the reply")
    send(page, "Why?")
    wait_until(lambda: page.locator("#chat-turns tbody tr").count() == 4 and finished(page), "2")
    replies = bot_texts(page)
    with page.expect_download() as download_info:
        page.locator("#chat-download").click()
    record = json.loads(Path(download_info.value.path()).read_text())
    run = record["runs"][0]
    assert record["endpoint"] == "chat" and record["settings"]["seed"] == 11
    assert [m["role"] for m in run["messages"]] == ["user", "assistant"] * 2
    # the page shows a cut-off reply's mark under it (chat_tab.reply_marks); the record does not
    shown = [re.split(r"\s*(?:✂|⚠) ", reply)[0].strip() for reply in replies]
    assert [m["content"].strip() for m in run["messages"][1::2]] == shown
    reply = run["messages"][-1]
    assert len(reply["token_ids"]) == len(reply["logprobs"]) == reply["tokens"] > 0
    assert run["files_sha256"] and len(run["files_sha256"]) == 64  # an optimum folder
    page.locator("#chat-link-button").click()
    link = page.locator("#chat-link textarea")
    wait_until(lambda: link.input_value().startswith("http"), "the link")
    url = link.input_value()
    assert "user_turns=" in url and "seed=11" in url and url.endswith("run=1")
    other = browser.new_page(viewport={"width": 1400, "height": 1100})
    other.set_default_timeout(TIMEOUT * 1000)
    other.goto(url)
    wait_until(lambda: other.locator("#chat-turns tbody tr").count() == 4, "the replayed chat")
    wait_until(lambda: finished(other), "the replayed reply")
    assert bot_texts(other) == replies
    other.close()


def test_arena_vote_is_tallied_and_kept(page, served, artifacts, full_speed):
    _, _, path = served
    page.get_by_role("tab", name="Arena").click()
    page.locator("#arena-blind input").uncheck()  # the columns' own contestants, named
    page.get_by_role("button", name="Ask every column").click()
    outputs = [page.locator(f"#arena-output-{n} textarea") for n in (1, 2)]
    wait_until(lambda: all(o.input_value() for o in outputs), "both replies")
    vote = page.locator("#arena-vote")
    wait_until(vote.is_enabled, "the vote button")
    page.locator("#arena-choice").get_by_text("1: tiny-chat · top-p 0.95").click()
    vote.click()
    tally = page.locator("#arena-tally")
    wait_until(lambda: "tiny-chat · greedy" in tally.inner_text(), "the tally")
    assert "Vote recorded: reply 1." in page.locator("#arena-said").inner_text()
    page.locator("#arena-tally").scroll_into_view_if_needed()
    page.screenshot(path=artifacts / "arena.png", full_page=True)
    (tallied,) = votes.VoteStore(path).tally()  # reopened from the file
    assert (tallied.a, tallied.b) == ("tiny-chat · greedy", "tiny-chat · top-p 0.95")
    assert (tallied.a_wins, tallied.b_wins, tallied.ties) == (0, 1, 0)
    wait_until(lambda: not vote.is_enabled(), "the vote to close for this round")
