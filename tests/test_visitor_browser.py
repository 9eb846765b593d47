"""A visitor's second look (issue 36), in headless Chromium (Debian's, through Playwright), on the
shipped models and the SmolLM2 flagship: the phone layout, the adapters' control pickers, a
controls-only adapter generation, adapter text without format markup, and the tabs' defaults.

The app serves models/ and the flagship's converted bundle (skipped when either is missing: the
flagship is converted once by `python -m convert.flagship`). Generations are kept short (24 new
tokens or fewer) so that the module runs in about a minute on two cores.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from urllib.parse import urlencode

import pytest

import app
from tests.app_fixtures import serve
from tests.browser_fixtures import TIMEOUT, browser, needs_chromium
from ui import checks, votes
from ui.registry import ModelRegistry

__all__ = ["browser"]  # a fixture, used by name
pytestmark = needs_chromium
MODELS = Path(__file__).resolve().parents[1] / "models"
BIBLE, TREASURY = "smollm2-bible", "smollm2-treasury"
PHONE = {"width": 390, "height": 844}
MARKUP = ("[e:", "[s:", "▯")


@pytest.fixture(scope="module")
def registry():
    from convert.flagship import flagship_bundle

    if not all((MODELS / name / "manifest.json").exists() for name in (BIBLE, TREASURY)):
        pytest.skip("the SmolLM2 adapters are not in models/")
    try:
        flagship = flagship_bundle()
    except Exception as error:  # no GGUF here and no network: nothing to test against
        pytest.skip(f"the flagship is not converted ({error})")
    return ModelRegistry.discover([MODELS, flagship.parent])


@pytest.fixture(scope="module")
def served(registry, tmp_path_factory):
    demo = app.build(registry, votes.VoteStore(tmp_path_factory.mktemp("votes") / "votes.sqlite"))
    url = serve(demo)
    yield url
    demo.close()


def open_page(browser, url: str, viewport: dict):
    page = browser.new_page(viewport=viewport)
    page.set_default_timeout(TIMEOUT * 1000)
    page.goto(url)
    page.locator(".tab-wrapper [role=tab]").first.wait_for()
    return page


def wait_for(condition, what: str, timeout: float = TIMEOUT):
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)
    return value


def panel(page):
    """The tab panel on show."""
    return page.locator("[role=tabpanel]:visible").first


def select(page, tab: str) -> None:
    page.locator(".tab-wrapper [role=tab]", has_text=tab).first.click()


def choose(page, label: str, option: str) -> None:
    """Pick `option` in the shown tab's dropdown labelled `label`."""
    panel(page).get_by_label(label, exact=True).first.click()
    page.get_by_role("option", name=option, exact=True).click()


def right_edge(locator) -> float:
    box = locator.bounding_box()
    return box["x"] + box["width"]


def test_phone_every_tab_reachable_and_nothing_wider_than_the_screen(browser, served):
    page = open_page(browser, served, PHONE)
    # the names from Gradio's hidden copy of the tab bar (hidden: their text, not inner text)
    copy = page.locator(".tab-wrapper .visually-hidden button").all_text_contents()
    names = [name.strip() for name in copy]
    assert len(names) >= 9, names
    for name in names:
        tab = page.locator(".tab-wrapper [role=tab]", has_text=name)
        if tab.count() and tab.first.is_visible():
            assert right_edge(tab.first) <= PHONE["width"], f"tab {name} is off-screen"
            tab.first.click()
        else:
            menu = page.locator(".tab-wrapper .overflow-menu > button")
            assert right_edge(menu) <= PHONE["width"], "the tab menu is off-screen"
            menu.click()
            item = page.locator(".tab-wrapper .overflow-dropdown button", has_text=name)
            assert right_edge(item) <= PHONE["width"], f"tab {name} is off-screen in the menu"
            item.click()
        selected = page.locator(".tab-wrapper button.selected").first
        wait_for(lambda s=selected, n=name: s.inner_text().strip() == n, f"tab {name} to open")
        time.sleep(0.5)  # the tab's content is laid out
        width = page.evaluate("document.documentElement.scrollWidth")
        assert width <= PHONE["width"], f"{name}: the page is {width} px wide at 390 px"


def shown_pickers(page, labels: set[str]) -> list[str]:
    """The control pickers on show in the current tab, by label."""
    shown = panel(page).locator("[data-testid=block-info]:visible").all_inner_texts()
    return sorted(text.strip() for text in shown if text.strip() in labels)


def picker_labels(registry, model: str) -> list[str]:
    return sorted(c.replace("_", " ").capitalize() for c in registry.controls_of(model))


def test_adapter_pickers_are_the_chosen_models_in_every_switch_order(browser, served, registry):
    base = registry.manifest(BIBLE).adapter.base.name
    every = {label for name in registry.generators() for label in picker_labels(registry, name)}
    # every ordered pair of (bible, treasury, base) once: t→b, b→base, base→t, t→base, base→b, b→t
    walk = [TREASURY, BIBLE, base, TREASURY, base, BIBLE, TREASURY]
    page = open_page(browser, served, {"width": 1280, "height": 900})
    select(page, "Generate")
    for model in walk:
        choose(page, "Model", model)
        expected = picker_labels(registry, model)
        try:
            wait_for(lambda e=expected: shown_pickers(page, every) == e, f"{model}'s pickers", 5)
        except AssertionError:
            raise AssertionError(
                f"after switching to {model}: pickers {shown_pickers(page, every)}, "
                f"expected {expected}"
            ) from None
    page.close()


def generate_link(model: str, prompt: str, controls: dict, max_new_tokens: int, seed: int) -> str:
    """A Generate link (ui/links.py) that runs `model` with sampling settings spelled out."""
    query = {
        "tab": "generate",
        "model": model,
        "prompt": prompt,
        "controls": json.dumps(controls),
        "mode": "sampling",
        "max_new_tokens": max_new_tokens,
        "temperature": 0.8,
        "top_k": 0,
        "top_p": 0.95,
        "min_p": 0,
        "repetition_penalty": 1.1,
        "no_repeat_ngram_size": 0,
        "samples": 1,
        "seed": seed,
        "run": 1,
    }
    return "?" + urlencode(query)


def generated(page) -> str:
    """The Generate tab's output once its run has finished (an error fails the test)."""

    def done():
        for error in (page.locator("#generate-error"), page.locator(".toast-body").first):
            if error.count() and error.is_visible() and error.inner_text().strip():
                raise AssertionError(error.inner_text())
        stats = page.locator("#generate-stats").inner_text()
        return any(reason in stats for reason in ("eos", "length", "stop", "context"))

    wait_for(done, "the generation to finish")
    return page.locator("#generate-output textarea").input_value()


def test_controls_only_adapter_generation_writes_text(browser, served):
    controls = {"author": "C. H. Spurgeon", "psalm": "23"}
    link = generate_link(TREASURY, "", controls, max_new_tokens=16, seed=0)
    page = open_page(browser, served + link, {"width": 1280, "height": 900})
    text = generated(page)
    assert re.search(r"\w", text), f"no text from controls alone: {text!r}"
    assert not any(mark in text for mark in MARKUP), text
    page.close()


def test_adapter_text_shown_without_format_markup(browser, served, registry):
    """A generation cut by its token limit inside the adapter's end marker (`[e:text]`) shows
    no piece of it: the run is found with the runtime, at the link's own settings."""
    gen = registry.get(BIBLE)
    prompt = "In the beginning God created the heaven and the earth"
    controls = {"translation": "KJV"}
    for seed in range(6):
        config = checks.decoding("sampling", 24, 0.8, 0, 0.95, 0, 1.1, 0, 1, 1, seed)
        ids = [e.token_id for e in gen.stream(prompt, config, controls) if e.token_id is not None]
        pieces = [gen.tokenizer.decode(ids[: n + 1]) for n in range(len(ids))]
        cut = next((n + 1 for n, text in enumerate(pieces) if text.endswith("[e:")), None)
        if cut is not None:
            break
    else:
        pytest.skip("no seed ends its verse within 24 tokens")
    page = open_page(
        browser,
        served + generate_link(BIBLE, prompt, controls, cut, seed),
        {"width": 1280, "height": 900},
    )
    text = generated(page)
    assert text.strip(), "nothing shown"
    assert not any(mark in text for mark in MARKUP), text
    page.close()


def test_generate_and_compare_open_on_the_flagship(browser, served, registry):
    base = registry.manifest(BIBLE).adapter.base.name
    page = open_page(browser, served, {"width": 1280, "height": 900})
    select(page, "Generate")
    assert panel(page).get_by_label("Model", exact=True).first.input_value() == BIBLE
    select(page, "Compare")
    columns = [panel(page).get_by_label(f"Model {n}", exact=True).input_value() for n in (1, 2)]
    assert columns == [base, BIBLE]
    page.close()
