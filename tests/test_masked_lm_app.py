"""The Masked LM tab and the Embeddings tab's word2vec section through their API endpoints
(gradio_client), with two tiny masked LMs, the shipped word2vec bundles and a tiny causal LM."""

from __future__ import annotations

import time
from pathlib import Path
from urllib.parse import urlencode

import pytest
from gradio_client import Client
from gradio_client.exceptions import AppError

import app
from tests.app_fixtures import models_tree, serve
from tests.test_browser import CHROMIUM, CHROMIUM_ARGS
from ui.registry import ModelRegistry

__all__ = ["models_tree"]  # a session fixture, used by name
ROOT = Path(__file__).resolve().parent.parent
BASE, LARGE = "masked-lm-base (int8)", "masked-lm-large (int8)"


@pytest.fixture(scope="module")
def registry(models_tree, tmp_path_factory) -> ModelRegistry:
    from export.fill_mask import export_fill_mask_bundle
    from train import common, data, masked_lm

    root = tmp_path_factory.mktemp("masked")
    paths = {}
    for name in ("masked-lm-base", "masked-lm-large"):
        out = root / name
        recipe = masked_lm.MaskedLM(name, True, data.FIXTURE, Path("data/tokenizers"), out, 0)
        model, task, config = recipe.setup()
        common.train(model, task, config, out / "run", progress=False, threads=1)
        model_dir = out / "model"
        common.save_model_dir(model.eval(), recipe.tokenizer, model_dir, {}, {"name": name}, {})
        recipe.finish_model_dir(model_dir)
        export_fill_mask_bundle(model_dir, out / "int8", "int8", optimize=False, name=name)
        paths[f"{name} (int8)"] = out / "int8"
    paths["tiny-lm (fp32)"] = models_tree / "tiny-lm" / "fp32"
    for variant in ("skipgram", "cbow"):
        paths[f"word2vec ({variant})"] = ROOT / "models" / "word2vec" / variant
    return ModelRegistry(paths)


@pytest.fixture(scope="module")
def url(registry):
    demo = app.build(registry)
    yield serve(demo)
    demo.close()


@pytest.fixture(scope="module")
def client(url):
    return Client(url, verbose=False)


def test_masked_lms_and_word_vectors_are_not_generators(registry):
    assert registry.generators() == ["tiny-lm (fp32)"]
    assert registry.masked_lms() == [BASE, LARGE]  # fewer parameters first
    assert registry.word_vector_sets() == ["word2vec (skipgram)", "word2vec (cbow)"]


def test_fill_mask_endpoint_returns_the_pipeline_format(client, registry):
    found = client.predict(BASE, "In the <|mask|> God", 3, api_name="/fill_mask")
    assert [set(p) for p in found] == [{"score", "token", "token_str", "sequence"}] * 3
    assert found == registry.get(BASE).fill_mask("In the <|mask|> God", 3)
    two = client.predict(LARGE, "<|mask|> and <|mask|>", 2, api_name="/fill_mask")
    assert len(two) == 2 and all(len(row) == 2 for row in two)


def test_study_endpoints(client):
    study = client.predict(2, 1, api_name="/masking_study")
    assert set(study) == {BASE, LARGE}
    assert study[BASE]["ratios"][0] == 0.05 and len(study[BASE]["accuracy"]["5"]) == 10
    probes = client.predict(api_name="/token_probes")
    assert probes[LARGE]["word_order"]["original"] == pytest.approx(1.0, abs=1e-5)
    same = client.predict(BASE, "the man slept", "the man slept", api_name="/influence")
    assert same["ais"] == pytest.approx(1.0, abs=1e-5)
    rows = client.predict("In the beginning", "and it was good.", 3, api_name="/bert_generation")
    strategies = (
        [row[1] for row in rows["data"]] if isinstance(rows, dict) else [r[1] for r in rows]
    )
    assert len(strategies) == 7 and strategies[-1].startswith("causal LM")


def test_word_vector_endpoints(client):
    neighbours = client.predict("light", 5, api_name="/word_neighbours")
    assert len(neighbours["word2vec (skipgram)"]) == 5
    assert [w for w, _ in neighbours["word2vec (cbow)"][:2]] == ["lamp", "darkness"]
    analogy = client.predict("man", "king", "woman", 3, api_name="/word_analogy")
    assert analogy["word2vec (cbow)"][0][0] == "queen"
    rows = client.predict(
        "bread", "Give us today our daily bread.", "I am the bread of life.", 5,
        api_name="/static_vs_contextual",
    )  # fmt: skip
    assert [row[:2] for row in rows][-4:] == [
        [BASE, "sentence 1"], [BASE, "sentence 2"], [LARGE, "sentence 1"], [LARGE, "sentence 2"]
    ]  # fmt: skip


@pytest.mark.parametrize(
    "endpoint, args, message",
    [
        ("/fill_mask", (BASE, "no mask here", 5), "must contain the mask token"),
        ("/fill_mask", ("word2vec (cbow)", "a <|mask|>", 5), "`model` must be one of"),
        ("/fill_mask", (BASE, "a <|mask|>", 0), "`top_k` must be an int in [1, 50]"),
        ("/influence", (BASE, "the man slept", "the old man slept"), "must have as many tokens"),
        ("/bert_generation", ("In the beginning", "", 99), "`tokens` must be an int in [1, 32]"),
        ("/word_analogy", ("", "king", "woman", 3), "`a` must not be empty"),
        ("/static_vs_contextual", ("bread", "no such word", "x", 3), "`word` must occur"),
    ],
)
def test_bad_inputs_get_clear_messages(client, endpoint, args, message):
    with pytest.raises(AppError) as error:
        client.predict(*args, api_name=endpoint)
    assert message in str(error.value)
    assert client.predict(BASE, "In the <|mask|>", 1, api_name="/fill_mask")  # still serving


@pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian chromium is not installed")
def test_the_tabs_in_a_browser(url):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.set_default_timeout(90_000)
            page.goto(url)
            page.get_by_role("tab", name="Masked LM").click()
            page.get_by_role("button", name="Fill the mask").click()
            page.locator("#fill-mask-1").get_by_text("%").first.wait_for()
            page.get_by_role("tab", name="Embeddings").click()
            page.get_by_role("button", name="Neighbours in every model").click()
            table = page.locator("#word-vectors")
            deadline = time.monotonic() + 90
            while "darkness" not in table.inner_text():
                assert time.monotonic() < deadline, "the neighbours table never filled"
                time.sleep(0.1)
        finally:
            browser.close()


@pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian chromium is not installed")
def test_section_links_rerun_their_section_in_a_browser(url, client):
    """A Masked LM and an Embeddings section link (`section=`) run that section's button and
    show what the API gives for the same arguments; the section's Link button makes such a link."""
    from playwright.sync_api import sync_playwright

    text = "In the <|mask|> God created"
    filled = client.predict(LARGE, text, 3, api_name="/fill_mask")
    neighbours = client.predict("bread", 3, api_name="/word_neighbours")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.set_default_timeout(90_000)
            page.goto(url + "?" + urlencode({"tab": "masked-lm", "section": "fill_mask"})
                      + "&" + urlencode({"text": text, "top_k": 3, "run": 1}))  # fmt: skip
            large = page.locator("#fill-mask-1")  # LARGE's column
            wait_for_text(large, repr(filled[0]["token_str"]))
            assert all(repr(p["token_str"]) in large.inner_text() for p in filled)
            page.locator("#masked-lm-fill_mask-link-button").click()
            box = page.locator("#masked-lm-fill_mask-link textarea")
            wait_for_value(box, "section=fill_mask")
            assert "top_k=3" in box.input_value().split("&")

            page.goto(url + "?tab=embeddings&section=word_neighbours&word=bread&topn=3&run=1")
            table = page.locator("#word-vectors")
            words = [found[0][0] for found in neighbours.values() if found]
            assert len(words) >= 2, neighbours  # skip-gram and CBOW know "bread"
            for word in words:
                wait_for_text(table, word)
        finally:
            browser.close()


def wait_for_text(locator, text: str, seconds: float = 90) -> None:
    deadline = time.monotonic() + seconds
    while text not in locator.inner_text():
        assert time.monotonic() < deadline, f"{text!r} never appeared"
        time.sleep(0.1)


def wait_for_value(locator, text: str, seconds: float = 90) -> None:
    deadline = time.monotonic() + seconds
    while text not in locator.input_value():
        assert time.monotonic() < deadline, f"{text!r} never appeared in the box"
        time.sleep(0.1)
