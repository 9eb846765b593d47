"""The memorisation meter: the index builder (export/ngram_index.py), `runtime.memorisation`, and
the shipped Bible LM's index (a training verse is all copied, a test-book verse is not)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

import runtime
from export.ngram_index import add_ngram_index, build_ngram_index
from runtime.memorisation import memorised
from tests.manifest_fixtures import manifest_of
from train import data, evaluate
from ui.compare_tab import METRIC_HEADERS, run_columns
from ui.generate_tab import memorisation
from ui.registry import ModelRegistry
from ui.streaming import stats_html

REPO = Path(__file__).resolve().parents[1]
BIBLE_LM = REPO / "models" / "bible-lm" / "int8"
TRAINING = [
    "In the beginning God created the heavens and the earth and all that is in them.",
    "The earth was formless and empty and darkness was on the surface of the deep.",
]


@pytest.fixture(scope="module")
def bible_lm():
    return runtime.load(BIBLE_LM)


def verse(book: str, chapter: int, number: int) -> dict:
    rows = data.load_verses(REPO / "tests" / "fixtures" / "verses.tsv")  # committed slice
    return next(r for r in rows if (r["book"], r["chapter"], r["verse"]) == (book, chapter, number))


@pytest.mark.parametrize(
    "text",
    [
        "In the beginning God created the heavens and the earth and all of it was good.",
        "xx In the beginning God created the heavens and the earth and all that is in them.",
        "the surface of the deep. In the beginning God created the heavens and",
        "too short to count",
        "",
    ],
)
def test_share_equals_the_training_metric(text):
    meter = memorised(text, build_ngram_index(TRAINING))
    assert meter.share == evaluate.memorised_share([text], TRAINING, 8)


def test_longest_span_is_the_longest_copied_run():
    text = (
        "So In the beginning God created the heavens and the earth and so on, then formless "
        "and empty and darkness was on the surface"
    )
    meter = memorised(text, build_ngram_index(TRAINING))
    assert meter.longest_span == "In the beginning God created the heavens and the earth and"
    assert meter.longest_span_words == 11
    assert 0 < meter.share < 1


def test_the_bible_lm_knows_its_training_verses_only(bible_lm):
    genesis = verse("Genesis", 1, 2)  # a training book
    assert genesis["split"] == "train"
    meter = bible_lm.memorised(genesis["web"])
    assert meter.share == 1.0 and meter.longest_span == " ".join(genesis["web"].split())
    john = verse("John", 3, 16)  # a test book
    assert john["split"] == "test"
    assert bible_lm.memorised(john["web"]).share < 0.2


def test_the_shipped_index_is_listed_with_its_checksum():
    manifest = json.loads((BIBLE_LM / "manifest.json").read_text())
    entry = manifest["memorisation_index"]
    assert entry["n"] == 8 and entry["file"] in manifest["files"]
    index = np.load(BIBLE_LM / entry["file"])
    assert index.dtype == np.uint64 and index.shape == (entry["ngrams"],)
    assert (np.diff(index) > 0).all()  # sorted, unique


def test_a_bundle_without_the_index_says_so(tmp_path):
    bundle = shutil.copytree(BIBLE_LM, tmp_path / "bible-lm")
    manifest = json.loads((bundle / "manifest.json").read_text())
    del manifest["memorisation_index"], manifest["files"]["training_ngrams.npy"]
    (bundle / "training_ngrams.npy").unlink()
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    gen = runtime.load(bundle)
    assert not gen.has_memorisation_index
    with pytest.raises(ValueError, match="`model` must have a training n-gram index"):
        gen.memorised("In the beginning")
    # Adding it back (export/ngram_index.py) makes the meter work, checksummed.
    add_ngram_index(bundle, TRAINING, "two test sentences")
    assert runtime.load(bundle).memorised(TRAINING[0]).share == 1.0


def test_only_causal_lm_bundles_get_an_index(tmp_path):
    (tmp_path / "manifest.json").write_text(json.dumps(manifest_of("seq2seq").to_json()))
    with pytest.raises(ValueError, match="`bundle` must be a causal-lm bundle"):
        add_ngram_index(tmp_path, TRAINING, "x")


def test_the_generate_tab_shows_the_share_and_highlights_the_span(bible_lm):
    genesis = verse("Genesis", 1, 2)["web"]
    meter = memorisation(bible_lm, [genesis, "nothing copied here at all, not one word of it"])
    copied = len(genesis.split()) - 7  # every 8-gram of the verse; none of the 3 of the other
    assert meter["share"] == pytest.approx(copied / (copied + 3))
    assert meter["span"] == " ".join(genesis.split())
    shown = stats_html(
        {
            "tokens": 3,
            "time_to_first_token_s": 0.1,
            "tokens_per_second": 9.0,
            "mean_logprob": -1.0,
            "finish_reasons": ["length"],
            "memorised": meter,
        }
    )
    assert f"<mark>{' '.join(genesis.split())}</mark>" in shown
    assert f"{100 * meter['share']:.0f} %" in shown and "copied 8-grams" in shown


def test_the_compare_tab_measures_each_finished_column():
    registry = ModelRegistry.discover([BIBLE_LM.parent])
    name = registry.generators()[0]
    columns = [(name, "greedy"), (name, "top-p 0.95")]
    *_, (texts, rows, _) = run_columns(registry, "In the beginning, God", {}, columns, 24, 1, 0)
    for text, row in zip(texts, rows):
        meter = dict(zip(METRIC_HEADERS, row))
        expected = registry.get(name).memorised(text)
        assert meter["copied 8-grams"] == round(expected.share, 3)
        assert meter["longest copy (words)"] == expected.longest_span_words
