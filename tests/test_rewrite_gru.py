"""Seed 001's GRU encoder–decoders (models/rewriter-gru: one context vector; models/rewriter-gru-
attention: Bahdanau attention) in the app beside the mBART rewriter: the registry lists a
same-language seq2seq model as a rewriter and keeps it off the Translate tab (read from the
manifest, never the name); a model without length controls ignores the target inputs and is
refused by the sweep; the Rewrite endpoint runs on each GRU, the heat map shows for the attention
model and the line alone for the context model; Compare's JSON record names them; in Chromium,
a rewrite with the attention model draws its map at 1280 px and its Link reproduces the run on a
390 px phone.

The shipped bundles' tests skip, naming the missing path, until they are in models/. Screenshots
go to $SCRIPTORIUM_ARTIFACTS if set, else to a temporary directory (docs/app/rewrite-gru-*.png
are these, reduced to 64 colours).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from tests.browser_fixtures import TIMEOUT, browser, needs_chromium, wait_until
from tests.manifest_fixtures import manifest_of
from ui import alignment_view, compare_tab, downloads, rewrite_tab
from ui.registry import ModelRegistry

__all__ = ["browser"]  # a fixture, used by name
MODELS = Path(__file__).resolve().parents[1] / "models"
CONTEXT, ATTENTION = "rewriter-gru (int8)", "rewriter-gru-attention (int8)"
BUNDLES = {CONTEXT: "rewriter-gru/int8", ATTENTION: "rewriter-gru-attention/int8"}
MBART = "rewriter (int8)"
VERSE = "Blessed are the meek: for they shall inherit the earth."
SAME_LANGUAGE = {"source_language": "en", "target_language": "en"}


def _write(root: Path, family: str, task: str = "seq2seq", **fields) -> None:
    folder = root / family / "int8"
    folder.mkdir(parents=True)
    document = manifest_of(task, name=family, precision="int8", **fields).to_json()
    (folder / "manifest.json").write_text(json.dumps(document))


GRU_GRAPHS = {
    "encoder": {"file": "encoder_model.onnx", "outputs": ["hidden", "context"]},
    "decoder": {"file": "decoder_step.onnx", "outputs": ["logits", "next_hidden"]},
}
ATTENTION_GRAPHS = {
    "encoder": {"file": "encoder_model.onnx", "outputs": ["hidden", "annotations", "keys"]},
    "decoder": {"file": "decoder_step.onnx", "outputs": ["logits", "next_hidden", "attention"]},
}
RATIO = {"length_ratio": {"kind": "numeric", "values": {"0.5": "<r5>", "1.0": "<r10>"}}}


@pytest.fixture
def registry(tmp_path) -> ModelRegistry:
    """Manifests only: names that say the opposite of what each model is."""
    _write(
        tmp_path, "a-translator", architecture="gru", graphs=GRU_GRAPHS, training_data=SAME_LANGUAGE
    )
    _write(tmp_path, "b-rewriter", training_data={"pair": "en-es"})
    _write(tmp_path, "c-plain", architecture="gru-attention", graphs=ATTENTION_GRAPHS)
    _write(tmp_path, "d-lm", "causal-lm", controls=RATIO, training_data=SAME_LANGUAGE)
    _write(tmp_path, "e-length", controls=RATIO, training_data=SAME_LANGUAGE)
    return ModelRegistry.discover([tmp_path])


def test_a_same_language_seq2seq_model_rewrites_and_leaves_translate(registry):
    """A rewrite (one language to the same) is listed by Rewrite after the length-controlled
    models, and not by Translate; a seq2seq model naming no languages stays a translator; a
    causal LM with a length control is no rewriter."""
    assert registry.rewriters() == ["e-length (int8)", "a-translator (int8)"]
    assert registry.translators() == ["b-rewriter (int8)", "c-plain (int8)"]
    assert registry.length_controls("a-translator (int8)") == []
    assert registry.length_controls("e-length (int8)") == ["length_ratio"]


def test_a_model_without_length_controls_ignores_the_target_and_refuses_the_sweep(registry):
    model = "a-translator (int8)"
    for target, ratio in (("ratio", 5), ("category", 0.8), ("none", None)):
        assert rewrite_tab.target_controls(registry, model, target, ratio, "short") == {}
    with pytest.raises(ValueError, match="`target` must be one of"):
        rewrite_tab.target_controls(registry, model, "longer", 0.8, None)
    with pytest.raises(ValueError, match="must have a `length_ratio` or `length` control to sweep"):
        rewrite_tab.sweep_values(registry, model)
    state = rewrite_tab.target_state(registry, model)
    assert state["target"] == "none" and state["applies"] is False
    assert state["note"].startswith(f"**{model}** has no length control")
    assert rewrite_tab.target_state(registry, "e-length (int8)")["note"] == ""


def test_the_model_line_says_what_each_gru_is_and_whether_it_has_a_map():
    context = manifest_of("seq2seq", architecture="gru", graphs=GRU_GRAPHS)
    attention = manifest_of("seq2seq", architecture="gru-attention", graphs=ATTENTION_GRAPHS)
    assert not alignment_view.attends(context) and alignment_view.attends(attention)
    assert alignment_view.attends(manifest_of("seq2seq", architecture="mbart"))
    assert not alignment_view.attends(manifest_of(architecture="gpt2"))
    line = alignment_view.model_line(context)
    assert "one context vector" in line and "Seed 001" in line and "no attention" in line
    line = alignment_view.model_line(attention)
    assert "bidirectional GRU encoder" in line and "Bahdanau" in line and "Seed 001" in line


# ---- the shipped bundles ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def shipped() -> ModelRegistry:
    """The shipped GRU bundles, with the mBART rewriter when it is there too."""
    missing = [MODELS / path for path in BUNDLES.values() if not (MODELS / path).is_dir()]
    if missing:
        pytest.skip(f"the GRU bundles are not shipped yet: {', '.join(map(str, missing))}")
    paths = {name: MODELS / path for name, path in BUNDLES.items()}
    if (MODELS / "rewriter" / "int8" / "manifest.json").is_file():
        paths[MBART] = MODELS / "rewriter" / "int8"
    return ModelRegistry(paths)


@pytest.fixture(scope="module")
def served(shipped, tmp_path_factory):
    import app
    from tests.app_fixtures import serve
    from ui import votes

    store = votes.VoteStore(tmp_path_factory.mktemp("votes") / "votes.sqlite")
    demo = app.build(shipped, store)
    yield serve(demo)
    demo.close()


def test_the_shipped_grus_are_rewriters_after_mbart(shipped):
    rewriters = shipped.rewriters()
    assert set(rewriters[-2:]) == {CONTEXT, ATTENTION}
    if MBART in shipped.names:
        assert rewriters[0] == MBART  # the default: it has the length controls
    assert not {CONTEXT, ATTENTION} & set(shipped.translators())


def test_the_rewrite_endpoint_runs_on_each_gru_and_maps_only_the_attention(shipped, served):
    from gradio_client import Client

    client = Client(served, verbose=False)
    for model in (CONTEXT, ATTENTION):
        # The target inputs keep their defaults (a ratio of 0.8): they do not apply to a GRU.
        text, report, measured = client.predict(model=model, source=VERSE, api_name="/rewrite")
        assert text and "badge" in report and measured["source_subwords"] > 5
        untargeted = client.predict(model=model, source=VERSE, target="none", api_name="/rewrite")
        assert untargeted[0] == text
        shown = {"model": model, "source": VERSE, "controls": {}, "text": text}
        plot, line = rewrite_tab.attention_view(shipped, shown)
        if model == ATTENTION:
            assert plot["visible"] is True
            assert plot["caption"].startswith(f"{ATTENTION}: each row is an output token")
            assert "bidirectional GRU" in line and "No heat map" not in line
        else:
            assert plot["visible"] is False
            assert line.startswith("**No attention, no heat map**")
    with pytest.raises(Exception, match="must have a `length_ratio` or `length` control"):
        client.predict(model=CONTEXT, source=VERSE, api_name="/rewrite_sweep")


def test_compare_offers_both_grus_and_its_json_record_names_them(shipped):
    columns = [(CONTEXT, "greedy"), (ATTENTION, "beam 5")]
    assert {CONTEXT, ATTENTION} <= set(shipped.generators())
    *_, (texts, rows, collectors) = compare_tab.run_columns(shipped, VERSE, {}, columns, 40, 1, 0)
    runs = [downloads.run_record(shipped, m, c) for (m, _), c in zip(columns, collectors)]
    record = downloads.record("compare", {"prompt": VERSE, "seed": 0}, runs, [])
    saved = json.loads(Path(downloads.write_json(record)).read_text())
    assert [run["model"] for run in saved["runs"]] == [CONTEXT, ATTENTION]
    for run, model in zip(saved["runs"], (CONTEXT, ATTENTION)):
        manifest = shipped.paths[model] / "manifest.json"
        assert run["manifest_sha256"] == hashlib.sha256(manifest.read_bytes()).hexdigest()
    assert [run["outputs"][0] for run in saved["runs"]] == texts and all(texts)


# ---- in Chromium ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory) -> Path:
    chosen = os.environ.get("SCRIPTORIUM_ARTIFACTS")
    path = Path(chosen) if chosen else tmp_path_factory.mktemp("test-artifacts")
    path.mkdir(parents=True, exist_ok=True)
    return path


def open_rewrite(browser, url: str, width: int, height: int):
    page = browser.new_page(viewport={"width": width, "height": height})
    page.set_default_timeout(TIMEOUT * 1000)
    page.goto(url)
    page.locator(".tab-wrapper [role=tab]").first.wait_for()
    return page


def pick_model(page, model: str) -> None:
    page.locator(".tab-wrapper [role=tab]", has_text="Rewrite").first.click()
    panel = page.locator("[role=tabpanel]:visible").first
    panel.get_by_label("Model", exact=True).first.click()
    page.get_by_role("option", name=model, exact=True).click()
    note = page.locator("#rewrite-target-note")
    wait_until(lambda: "has no length control" in note.inner_text(), "the target's note")


def rewritten(page, before: str = "") -> str:
    """The rewrite's text once it is there (an error box fails the test)."""
    box = page.locator("#rewrite-output textarea")

    def done():
        error = page.locator("#rewrite-error")
        if error.count() and error.is_visible() and error.inner_text().strip():
            raise AssertionError(error.inner_text())
        return box.input_value().strip() not in ("", before)

    wait_until(done, "the rewrite")
    return box.input_value()


def heat_map_caption(page) -> str:
    plot = page.locator("#rewrite-attention")
    wait_until(
        lambda: plot.locator(".marks").count() >= 1 and plot.locator(".caption").count() >= 1,
        "the attention heat map",
    )
    return plot.locator(".caption").inner_text()


@needs_chromium
def test_the_attention_gru_draws_its_map_and_its_link_reproduces_it(browser, served, artifacts):
    page = open_rewrite(browser, served, 1280, 900)
    pick_model(page, ATTENTION)
    assert page.locator("#rewrite-sweep-button").is_disabled()
    assert "bidirectional GRU" in page.locator("#rewrite-attention-note").inner_text()
    page.get_by_label("Line to rewrite").fill(VERSE)
    page.get_by_role("button", name="Rewrite", exact=True).click()
    text = rewritten(page)
    assert heat_map_caption(page).startswith(f"{ATTENTION}: each row is an output token")
    page.locator("#rewrite-link-button").click()
    link = page.locator("#rewrite-link textarea")
    wait_until(lambda: "run=1" in link.input_value(), "the link")
    url = link.input_value()
    assert "model=rewriter-gru-attention+(int8)" in url and "target=none" in url
    page.screenshot(path=artifacts / "rewrite-gru-attention-1280.png", full_page=True)
    page.close()
    phone = open_rewrite(browser, url, 390, 844)
    assert rewritten(phone) == text
    heat_map_caption(phone)
    width = phone.evaluate("document.documentElement.scrollWidth")
    assert width <= 390, f"the page is {width} px wide at 390 px"
    phone.locator("#rewrite-attention").scroll_into_view_if_needed()
    phone.screenshot(path=artifacts / "rewrite-gru-attention-390.png", full_page=True)
    phone.close()


@needs_chromium
def test_the_context_gru_rewrites_with_its_line_and_no_map(browser, served):
    page = open_rewrite(browser, served, 1280, 900)
    pick_model(page, CONTEXT)
    target = page.get_by_role("radio", name="none", exact=True)
    assert target.is_checked() and target.is_disabled()
    page.get_by_label("Line to rewrite").fill(VERSE)
    page.get_by_role("button", name="Rewrite", exact=True).click()
    rewritten(page)
    note = page.locator("#rewrite-attention-note")
    wait_until(lambda: "no attention weights to draw" in note.inner_text(), "the line")
    assert not page.locator("#rewrite-attention").is_visible()
    page.close()
