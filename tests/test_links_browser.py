"""Shareable links and downloads in headless Chromium (Debian's, through Playwright): a link with
run=1 shows the same text as `gradio_client` gives for the same arguments, a link with a bad
parameter names it, the Link button reproduces the link, and the JSON download parses.

One browser for the module; the server runs the tiny models tree on 127.0.0.1.
"""

from __future__ import annotations

import csv
import json
import time
from pathlib import Path
from urllib.parse import urlencode

import pytest

import app
from tests.app_fixtures import models_tree, serve
from tests.browser_fixtures import TIMEOUT, browser, needs_chromium, wait_until
from tests.test_browser import textarea
from ui.registry import ModelRegistry

__all__ = ["models_tree", "browser"]  # fixtures, used by name
pytestmark = needs_chromium
GENERATE = {
    "model": "tiny-lm (fp32)",  # not the default, so restoring the picker is seen
    "prompt": "In the beginning",
    "controls": {},
    "mode": "sampling",
    "max_new_tokens": 12,
    "temperature": 0.8,
    "top_k": 0,
    "top_p": 0.95,
    "min_p": 0.0,
    "repetition_penalty": 1.0,
    "no_repeat_ngram_size": 0,
    "num_beams": 5,
    "samples": 1,
    "seed": 3,
}


@pytest.fixture(scope="module")
def served(models_tree):
    demo = app.build(ModelRegistry.discover([models_tree]))
    url = serve(demo)
    yield url
    demo.close()


@pytest.fixture(scope="module")
def client(served):
    from gradio_client import Client

    return Client(served, verbose=False)


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(TIMEOUT * 1000)
    yield page
    context.close()


def link(tab: str, values: dict, run: bool = True) -> str:
    items = {"tab": tab}
    for name, value in values.items():
        items[name] = json.dumps(value, separators=(",", ":")) if isinstance(value, dict) else value
    if run:
        items["run"] = 1
    return "?" + urlencode(items)


def settled(locator, seconds: float = 1.0) -> str:
    """The text once it has stopped changing for `seconds` (a stream has ended).

    The value is read in the page (`el.value`) rather than with `locator.input_value()`, which
    now and then waited out its whole timeout on a Compare column's textarea that the page
    showed and `document.querySelector` found at once.
    """
    last, since = None, time.monotonic()
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        now = locator.evaluate_all("(els) => (els.length === 1 ? els[0].value : '')")
        if now != last:
            last, since = now, time.monotonic()
        elif now and time.monotonic() - since >= seconds:
            return now
        time.sleep(0.05)
    raise AssertionError("timed out waiting for the text to settle")


def test_generate_link_runs_and_matches_the_api(page, served, client):
    expected = client.predict(**GENERATE, api_name="/generate")[0]
    page.goto(served + link("generate", GENERATE))
    output = textarea(page, "generate-output")
    assert settled(output) == expected
    assert page.locator("#generate-link-button").is_visible(), "the Generate tab is selected"
    page.locator("#generate-link-button").click()
    box = page.locator("#generate-link textarea")
    wait_until(lambda: box.input_value().startswith("http"), "the Link box")
    made = box.input_value()
    assert made.startswith(served + "?tab=generate&model=tiny-lm+(fp32)&prompt=In+the+beginning")
    for part in ("mode=sampling", "seed=3", "max_new_tokens=12", "top_p=0.95", "run=1"):
        assert part in made.split("&")
    page.goto(made)  # the page's own link reproduces the same text
    assert settled(textarea(page, "generate-output")) == expected


def test_compare_link_runs_and_matches_the_api(page, served, client):
    values = {
        "prompt": "The word",
        "controls": {"section": "gospels"},
        "columns": 3,
        "max_new_tokens": 10,
        "samples": 2,
        "seed": 7,
        "model_1": "tiny-lm (int8)",
        "preset_1": "top-k 5",
        "model_2": "tiny-lm (fp32)",
        "preset_2": "greedy",
        "model_3": "tiny-lm (fp32)",
        "preset_3": "min-p 0.1",
    }
    expected = client.predict(**values, api_name="/compare")
    page.goto(served + link("compare", values))
    count = "() => document.querySelectorAll('#compare-output-3 textarea').length"
    wait_until(lambda: page.evaluate(count) == 1, "the Compare tab with three columns")
    for column in (1, 2, 3):
        shown = settled(textarea(page, f"compare-output-{column}"))
        assert shown == expected[column - 1], f"column {column}"
    assert page.locator("#compare-output-3").is_visible(), "columns=3 shows the third column"
    # both download buttons show up, and the page still answers (it once froze for minutes here)
    button = page.locator("#compare-csv")
    button.wait_for(state="visible")
    page.locator("#compare-download").wait_for(state="visible")
    with page.expect_download() as download:
        button.click()
    rows = list(csv.reader(Path(download.value.path()).read_text().splitlines()))
    assert len(rows) == 1 + 3 and rows[0][:3] == ["column", "model", "preset"]
    assert [row[1:3] for row in rows[1:]] == [
        [values[f"model_{i}"], values[f"preset_{i}"]] for i in (1, 2, 3)
    ]


def test_bad_parameters_are_named_and_the_page_loads(page, served):
    page.goto(served + "?tab=generate&temperature=9&colour=red&seed=5&run=1")
    notice = page.locator("#link-notice")
    wait_until(lambda: "colour" in notice.inner_text(), "the link notice")
    text = notice.inner_text()
    assert "temperature must be in [0.05, 2], got 9" in text  # Markdown shows `…` as code
    assert "unknown parameter colour" in text and "Nothing was run" in text
    assert page.locator("#generate-link-button").is_visible(), "the Generate tab is selected"
    time.sleep(1.0)
    assert textarea(page, "generate-output").input_value() == "", "nothing ran"


def test_download_json_after_a_linked_run(page, served, client):
    expected = client.predict(**GENERATE, api_name="/generate")[0]
    page.goto(served + link("generate", GENERATE))
    assert settled(textarea(page, "generate-output")) == expected
    button = page.locator("#generate-download")
    button.wait_for(state="visible")
    with page.expect_download() as download:
        button.click()
    record = json.loads(Path(download.value.path()).read_text())
    assert record["endpoint"] == "generate" and record["settings"] == GENERATE
    (run,) = record["runs"]
    assert run["model"] == GENERATE["model"] and run["outputs"] == [expected]
    assert len(run["token_ids"][0]) == len(run["logprobs"][0]) == record["metrics"]["tokens"]


def test_model_card_images_render(browser):
    """The shipped cards' loss plots (loss.png in each bundle) load in the Models tab."""
    models = Path(__file__).resolve().parents[1] / "models"
    demo = app.build(ModelRegistry.discover([models]))
    url = serve(demo)
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.set_default_timeout(TIMEOUT * 1000)
    try:
        page.goto(url)
        page.get_by_role("tab", name="Models").click()
        image = page.locator('img[alt="loss curve"]:visible').first
        image.wait_for()
        wait_until(lambda: image.evaluate("(img) => img.complete"), "the image to load")
        assert image.evaluate("(img) => img.naturalWidth") > 0
        assert image.get_attribute("src").startswith("data:image/png;base64,")
    finally:
        page.close()
        demo.close()


@pytest.fixture(scope="module")
def served_under_a_prefix(models_tree):
    """The app mounted at /demo/ of a FastAPI app, as behind a reverse proxy's path prefix."""
    import threading

    import gradio as gr
    import uvicorn
    from fastapi import FastAPI

    from tests.app_fixtures import free_port
    from ui.checks import queue_settings

    demo = app.build(ModelRegistry.discover([models_tree])).queue(**queue_settings())
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(
            gr.mount_gradio_app(FastAPI(), demo, path="/demo"),
            host="127.0.0.1",
            port=port,
            log_level="warning",
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + TIMEOUT
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}/demo/"
    server.should_exit = True
    thread.join(timeout=10)


def test_a_link_behind_a_path_prefix_keeps_it_and_runs(page, served_under_a_prefix, client):
    expected = client.predict(**GENERATE, api_name="/generate")[0]
    page.goto(served_under_a_prefix + link("generate", GENERATE))
    assert settled(textarea(page, "generate-output")) == expected
    page.locator("#generate-link-button").click()
    box = page.locator("#generate-link textarea")
    wait_until(lambda: box.input_value().startswith("http"), "the Link box")
    assert box.input_value().startswith(served_under_a_prefix + "?tab=generate&")


@pytest.fixture(scope="module")
def served_from_a_space_folder(models_tree, tmp_path_factory):
    """`python app.py` started inside a folder built by spaces/build.py, as a Space runs it."""
    import subprocess
    import sys
    import urllib.request

    from tests.app_fixtures import free_port

    repo = Path(__file__).resolve().parents[1]
    space = tmp_path_factory.mktemp("space") / "scriptorium"
    build = [sys.executable, str(repo / "spaces" / "build.py"), str(space), "--models"]
    subprocess.run([*build, str(models_tree)], check=True, capture_output=True, timeout=300)
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "app.py", "--port", str(port)],
        cwd=space,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url, timeout=2)
            break
        except OSError:
            time.sleep(0.2)
    yield url
    process.terminate()
    process.wait(timeout=30)


def test_a_link_works_on_a_built_space_folder(page, served_from_a_space_folder):
    from gradio_client import Client

    space = Client(served_from_a_space_folder, verbose=False)
    expected = space.predict(**GENERATE, api_name="/generate")[0]
    page.goto(served_from_a_space_folder + link("generate", GENERATE))
    assert settled(textarea(page, "generate-output")) == expected
