"""Seed 003's hierarchical character model end to end on the fixture verses: the training
recipes, the ONNX export (parity with PyTorch, GRU export pitfalls, dynamic axes), the torch-free
runtime (next sentence, paraphrase ranking, determinism, bad input) and the Paraphrase endpoint
through gradio_client."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import export
import runtime
from export import hierarchical as hierarchical_export
from modeling import hierarchical as model_definition
from runtime import hierarchical_text as ht
from train.hierarchical import cli as hierarchical_cli
from train.hierarchical import recipes as hierarchical_training
from train.hierarchical import ship as hierarchical_ship

REPO = Path(__file__).resolve().parents[1]
SENTENCE = "In the beginning, God created the heavens and the earth."


def _train(recipe: str, out: Path, *extra: str) -> dict:
    hierarchical_cli.main([recipe, "--tiny", "--out", str(out), "--quiet", *extra])
    return json.loads((out / "result.json").read_text())


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("hierarchical")
    _train("lm", root / "lm-sarah", "--kind", "sarah", "--steps", "6")
    _train("autoencoder", root / "ae", "--init", str(root / "lm-sarah"), "--steps", "3")
    return root


@pytest.fixture(scope="module")
def bundle(runs) -> tuple[Path, dict]:
    out = runs / "bundle"
    manifest = hierarchical_export.export_bundle(
        runs / "lm-sarah", out, "tiny-paraphraser", runs / "ae"
    )
    return out, manifest


@pytest.fixture(scope="module")
def gen(bundle):
    return runtime.load(bundle[0])


def test_words_round_trip_and_bad_sentences():
    text = "God’s word, 12 times—“Amen!”"
    assert "".join(ht.split_words(text)) == text
    vocab = ht.CharVocab(ht.default_charset([text]))
    with pytest.raises(ValueError, match="non-empty"):
        vocab.check_sentence("   ")
    with pytest.raises(ValueError, match="at most 30 words"):
        vocab.check_sentence("a " * 31)
    with pytest.raises(ValueError, match="at most 19 characters"):
        vocab.check_sentence("a" * 20)
    with pytest.raises(ValueError, match="not in the model's character set"):
        vocab.check_sentence("naïve ☃")


def test_recipes_write_results_and_autoencoder_changes_only_the_sentence_decoder(runs):
    result = json.loads((runs / "lm-sarah" / "result.json").read_text())
    assert result["steps"] == 6 and 0 < result["test_nits_per_char"] < 10
    lm, ae = model_definition.load_run(runs / "lm-sarah"), model_definition.load_run(runs / "ae")
    changed = {
        k.split(".")[0]
        for k, v in lm.state_dict().items()
        if not torch.equal(v, ae.state_dict()[k])
    }
    assert changed == {"sentence_decoder"}
    hierarchical_ship.check_shared_weights(runs / "lm-sarah", runs / "ae")


def test_ship_refuses_an_autoencoder_whose_encoder_was_trained(runs, tmp_path):
    lm = runs / "lm-sarah"
    _train("autoencoder", tmp_path / "ae", "--init", str(lm), "--steps", "2", "--train-encoder")
    with pytest.raises(ValueError, match="must change only the sentence decoder"):
        hierarchical_ship.check_shared_weights(lm, tmp_path / "ae")


def test_autoencoder_data_is_every_fitting_verse_copied():
    rows = [
        {"split": "train", "book": "Gen", "chapter": 1, "verse": v, "web": text}
        for v, text in enumerate(["In the beginning.", "", "a" * 25, "Last verse."], start=1)
    ]
    rows.append({**rows[0], "split": "test"})
    copies = hierarchical_training.verse_copies(rows, "train")
    # the empty and the over-long verse are dropped; the last verse has no next verse but counts
    assert copies == [
        (ht.split_words(t), ht.split_words(t)) for t in ("In the beginning.", "Last verse.")
    ]
    assert hierarchical_training.verse_pairs(rows, "train") == []


def test_export_parity_with_pytorch(bundle):
    _, manifest = bundle
    assert manifest.task == "hierarchical-lm"
    parity = manifest.parity
    assert max(parity.graphs_max_abs_diff.values()) < 1e-4
    greedy = parity.greedy
    assert greedy.identical == greedy.compared == 8
    assert greedy.max_abs_logit_diff < 1e-4
    assert parity.gru_linear_before_reset["word_decoder"] == (1,)


@pytest.mark.parametrize("kind", model_definition.KINDS)
def test_every_kind_exports_with_parity_at_any_batch_and_length(kind, tmp_path):
    torch.manual_seed(0)
    config = hierarchical_training.tiny_config(
        model_definition.HierarchicalConfig(kind=kind, charset=list("abc ."))
    )
    model = model_definition.HierarchicalLM(config).eval()
    graphs = hierarchical_export.export_graphs(model, tmp_path)
    gru_roles = ("sentence_encoder", "sentence_decoder") if kind == "gru" else ()
    for role in (*gru_roles, "word_decoder"):
        assert set(hierarchical_export.gru_linear_before_reset(tmp_path / graphs[role])) == {1}
    # graph_parity runs every graph at batch sizes 1, 3, 7 and lengths 1, 4, 9
    diffs = hierarchical_export.graph_parity(model, tmp_path, graphs, {"sentence_decoder": model})
    assert max(diffs.values()) < 1e-4


def test_graphs_that_drifted_from_pytorch_fail_the_parity_check(tmp_path):
    torch.manual_seed(0)
    config = hierarchical_training.tiny_config(
        model_definition.HierarchicalConfig(kind="gru", charset=list("abc ."))
    )
    model = model_definition.HierarchicalLM(config).eval()
    graphs = hierarchical_export.export_graphs(model, tmp_path)
    diffs = hierarchical_export.graph_parity(model, tmp_path, graphs, {"sentence_decoder": model})
    hierarchical_export.check_graph_parity(diffs)  # the graphs as exported pass
    with torch.no_grad():  # the PyTorch word decoder changes after its graph was written
        model.word_decoder.out.bias += 0.1
    diffs = hierarchical_export.graph_parity(model, tmp_path, graphs, {"sentence_decoder": model})
    with pytest.raises(export.ParityError, match="word_decoder"):
        hierarchical_export.check_graph_parity(diffs)


def test_generate_and_stream_agree_and_follow_the_seed(gen):
    config = gen.config(do_sample=True, temperature=0.9, top_p=0.95, seed=3, max_new_tokens=40)
    first = gen.generate(SENTENCE, config)[0]
    again = gen.generate(SENTENCE, config)[0]
    streamed = "".join(e.text for e in gen.stream(SENTENCE, config))
    assert first.text == again.text == streamed
    assert len(first.token_ids) == len(first.logprobs) == len(first.text) <= 40
    assert first.finish_reason in ("eos", "length")
    assert all(lp <= 0 for lp in first.logprobs)


def test_paraphrase_is_sorted_deterministic_and_ranked_by_re_encoding(gen):
    candidates = gen.paraphrase(SENTENCE, num_candidates=12, seed=5)
    distances = [c.distance for c in candidates]
    assert len(candidates) == 12 and distances == sorted(distances)
    again = gen.paraphrase(SENTENCE, num_candidates=12, seed=5)
    assert [c.text for c in again] == [c.text for c in candidates]
    other = gen.paraphrase(SENTENCE, num_candidates=12, seed=6)
    assert [c.text for c in other] != [c.text for c in candidates]
    source = gen.encode([SENTENCE])
    for c in candidates:
        assert 0 <= c.temperature <= 1 and 0 <= c.noise <= 1
        assert "".join(s.char for s in c.steps) == c.text
        assert all(s.nits >= 0 for s in c.steps)
        if np.isfinite(c.distance):
            expected = np.linalg.norm(gen.encode([c.text]) - source)
            assert c.distance == pytest.approx(expected, rel=1e-4)


def test_greedy_candidates_have_only_argmax_characters(gen):
    candidates = gen.paraphrase(SENTENCE, 3, seed=0, temperature_range=(0, 0), noise_range=(0, 0))
    assert len({c.text for c in candidates}) == 1
    assert not any(s.sampled for c in candidates for s in c.steps)
    assert candidates[0].text == gen.reconstruction(SENTENCE).text


@pytest.mark.parametrize(
    "text, kwargs, message",
    [
        ("", {}, "non-empty"),
        ("word " * 31, {}, "at most 30 words"),
        ("Supercalifragilisticexpialidocious", {}, "at most 19 characters"),
        ("Ünïcödé ☃", {}, "character set"),
        (SENTENCE, {"num_candidates": 0}, "num_candidates"),
        (SENTENCE, {"temperature_range": (1, 0)}, "temperature_range"),
        (SENTENCE, {"noise_range": "big"}, "noise_range"),
    ],
)
def test_bad_input_raises_value_error(gen, text, kwargs, message):
    with pytest.raises(ValueError, match=message):
        gen.paraphrase(text, **kwargs)


@pytest.mark.parametrize(
    "setting",
    [
        {"num_beams": 2},
        {"repetition_penalty": 1.2},
        {"no_repeat_ngram_size": 2},
        {"min_new_tokens": 3},
        {"stop": ("x",)},
    ],
)
def test_settings_a_character_model_cannot_apply_are_refused(gen, setting):
    (name,) = setting
    with pytest.raises(ValueError, match=f"`{name}` must be .* character-level"):
        gen.generate(SENTENCE, runtime.GenerationConfig(**setting))


def test_the_sampler_s_settings_are_honoured(gen):
    config = runtime.GenerationConfig(
        do_sample=True, temperature=0.8, top_k=5, top_p=0.9, min_p=0.01, typical_p=0.95, seed=1
    )
    assert gen.generate(SENTENCE, config)[0].text == gen.generate(SENTENCE, config)[0].text


def test_runtime_hierarchical_runs_without_torch(bundle):
    code = (
        "import sys, runtime\n"
        f"g = runtime.load({str(bundle[0])!r})\n"
        f"g.paraphrase({SENTENCE!r}, 4)\n"
        "assert not any(m.split('.')[0] in ('torch', 'transformers') for m in sys.modules)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)


def test_paraphrase_endpoint(bundle, tmp_path):
    from gradio_client import Client
    from gradio_client.exceptions import AppError

    import app
    from tests.app_fixtures import serve
    from ui.registry import ModelRegistry

    registry = ModelRegistry({"tiny-paraphraser": bundle[0]})
    assert registry.paraphrasers() == ["tiny-paraphraser"]
    demo = app.build(registry)
    url = serve(demo)
    try:
        client = Client(url, verbose=False)
        table, summary, listing = client.predict(
            "tiny-paraphraser", SENTENCE, 10, 0.0, 1.0, 0.0, 1.0, 1, api_name="/paraphrase"
        )
        assert [item["shown_as"] for item in listing] == ["closest"] * 4 + ["random"] * 4
        closest = [item["distance"] or float("inf") for item in listing[:4]]  # None: ∞
        assert closest == sorted(closest)
        assert 'class="char-sampled"' in table or 'class="char-argmax"' in table
        assert "nits" in table and "nits/char" in summary
        with pytest.raises(AppError, match="character set"):
            client.predict(
                "tiny-paraphraser", "☃", 10, 0.0, 1.0, 0.0, 1.0, 1, api_name="/paraphrase"
            )
        text, _, stats = client.predict(
            model="tiny-paraphraser", prompt=SENTENCE, api_name="/generate"
        )
        assert isinstance(text, str) and stats
    finally:
        demo.close()


@pytest.mark.skipif(not Path("/usr/bin/chromium").exists(), reason="Debian chromium missing")
def test_paraphrase_tab_in_the_browser(bundle):
    from playwright.sync_api import sync_playwright

    import app
    from tests.app_fixtures import serve
    from tests.test_browser import CHROMIUM, CHROMIUM_ARGS, TIMEOUT
    from ui.registry import ModelRegistry

    demo = app.build(ModelRegistry({"tiny-paraphraser": bundle[0]}))
    url = serve(demo)
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.set_default_timeout(TIMEOUT * 1000)
            page.goto(url)
            page.get_by_role("tab", name="Paraphrase").click()
            page.get_by_role("button", name="Paraphrase", exact=True).click()
            spans = page.locator("#paraphrase-candidates td.candidate span")
            spans.first.wait_for()
            title = spans.first.get_attribute("title")
            classes = set(spans.evaluate_all("nodes => nodes.map(n => n.className)"))
            assert title.endswith("nits") or title.endswith("(sampled)")
            assert classes <= {"char-argmax", "char-sampled"} and classes
            page.get_by_text("nits/char").wait_for()
            # A shareable link reruns the same paraphrase: the API's candidates, in its order.
            from urllib.parse import urlencode

            from gradio_client import Client

            settings = {"model": "tiny-paraphraser", "sentence": "The earth was empty.",
                        "num_candidates": 6, "temperature_low": 0.0, "temperature_high": 1.0,
                        "noise_low": 0.0, "noise_high": 1.0, "seed": 2}  # fmt: skip
            listing = Client(url, verbose=False).predict(**settings, api_name="/paraphrase")[2]
            page.goto(url + "?" + urlencode({"tab": "paraphrase", **settings, "run": 1}))
            cells = page.locator("#paraphrase-candidates td.candidate")
            cells.nth(len(listing) - 1).wait_for()
            shown = [text.replace("\xa0", " ") for text in cells.all_inner_texts()]  # nbsp drawn
            assert shown == [item["text"] for item in listing]
            browser.close()
    finally:
        demo.close()


def shipped(name: str) -> Path:
    path = REPO / "models" / name
    if not any(path.glob("*/manifest.json")):
        pytest.skip(f"{name} is not shipped")
    return path


@pytest.mark.parametrize("name", ["paraphraser", "paraphraser-spurgeon"])
def test_shipped_bundles_verify_and_match_pytorch(name):
    for manifest_path in shipped(name).glob("*/manifest.json"):
        gen = runtime.load(manifest_path.parent)  # checks every sha256 first
        parity = gen.manifest.parity
        exported = parity.fp32_greedy or parity.greedy
        assert exported.identical == exported.compared
        # int8's greedy strings drift from fp32's after a near-tie (2 of 8 identical for the
        # paraphraser); what ships it is its teacher-forced cost, within 1 % of fp32's:
        measured = gen.manifest.metrics["runtime_nits_per_char"]
        assert measured["int8"] <= measured["fp32"] * 1.01


def test_shipped_paraphraser_reconstructs_and_paraphrases_held_out_verses():
    gen = runtime.load(shipped("paraphraser"))
    metrics = gen.manifest.metrics
    assert set(metrics["sentence_encoders"]) == {"gru", "transformer", "sarah"}
    verse = "Jesus wept."
    assert 0 < gen.reconstruction(verse).nits_per_char < 2 * metrics["test_nits_per_char"]
    candidates = gen.paraphrase(verse, num_candidates=8, seed=0)
    assert np.isfinite(candidates[0].distance)


def test_shipped_autoencoder_keeps_more_of_a_verse_than_another_verse_shares():
    """Greedy reconstructions of the fixture's held-out verses score clearly higher chrF against
    their own verse than other verses of the list do (21.8 against 15.0 as shipped; an
    autoencoder whose output ignores its input scores about the same as another verse)."""
    from train import data

    rows = data.load_verses(data.FIXTURE)
    verses = ["".join(words) for words, _ in hierarchical_training.verse_copies(rows, "test")]
    gen = runtime.load(shipped("paraphraser"))
    quality = hierarchical_ship.reconstruction_quality(gen, verses)
    assert quality["sentences"] == 46
    assert quality["chrf"] >= quality["unrelated_chrf"] + 4
    recorded = gen.manifest.metrics["autoencoder_reconstruction"]
    assert recorded["chrf"] >= recorded["unrelated_chrf"] + 4
