"""Paraphrase quality on unseen everyday sentences (study/paraphrase_quality.py): the fixed set,
the closest changed candidate, the hand-judged TSV round trip; and the library ship
(train/hierarchical/library_ship.py) on tiny runs trained on the fixture library, carrying the
shipped WEB paraphraser's measures."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

import runtime
from runtime import hierarchical_text
from study import paraphrase_quality as pq
from train import library
from train.hierarchical import cli as hierarchical_cli
from train.hierarchical import library_ship as hierarchical_library_ship

REPO = Path(__file__).resolve().parents[1]
WEB_BUNDLE = REPO / "models" / "paraphraser" / "int8"


def test_everyday_set_is_fixed_and_fits_the_model():
    sentences = pq.everyday_sentences()
    assert len(sentences) == 60 == len(set(sentences))
    assert all(6 <= len(s.split()) <= 20 for s in sentences)
    charset = set(json.loads((WEB_BUNDLE / "manifest.json").read_text())["charset"])
    assert all(set(s) <= charset for s in sentences)
    assert all(
        len(hierarchical_text.split_words(s)) <= hierarchical_text.MAX_WORDS for s in sentences
    )
    assert sentences[-1] == "Nobody knew where the missing key had gone."


def test_closest_changed_skips_copies_up_to_case_and_spaces():
    candidates = [
        SimpleNamespace(text="the cat  sat."),
        SimpleNamespace(text="The cat sat down."),
        SimpleNamespace(text="A dog ran."),
    ]
    assert pq.closest_changed("The cat sat.", candidates).text == "The cat sat down."
    assert pq.closest_changed("The cat sat.", candidates[:1]) is None


def test_judged_tsv_round_trip_and_checks(tmp_path):
    pairs = [(f"Source {i} is here.", f"Candidate {i} is there.") for i in range(40)]
    pairs[3] = ("Nothing changed here.", None)
    path = tmp_path / "judged.tsv"
    pq.write_unjudged(path, pairs)
    rows = pq.read_judgements(path)
    assert len(rows) == pq.JUDGED_SAMPLE and rows[3]["keeps_meaning"] == "no"
    with pytest.raises(ValueError, match="`keeps_meaning` must be yes or no"):
        pq.meaning_kept(path, pairs)
    for i, row in enumerate(rows):
        row["keeps_meaning"] = row["keeps_meaning"] or ("yes" if i % 3 == 0 else "no")
    with open(path, "w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, pq.TSV_COLUMNS, delimiter="\t", lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    assert pq.meaning_kept(path, pairs) == {"judged": 30, "kept": 9, "share": 0.3}
    pairs[5] = (pairs[5][0], "Another candidate.")
    with pytest.raises(ValueError, match="must judge this bundle's candidates"):
        pq.meaning_kept(path, pairs)


def test_library_ship_carries_the_web_model_and_measures_everyday_sentences(tmp_path, monkeypatch):
    if not (WEB_BUNDLE / "manifest.json").exists():
        pytest.skip("the WEB paraphraser is not shipped")
    # The sentences that are judged by hand, not all 60: the same measures in half the time
    # (test_everyday_set_is_fixed_and_fits_the_model holds the whole set).
    judged_head = pq.everyday_sentences()[: pq.JUDGED_SAMPLE]
    monkeypatch.setattr(pq, "everyday_sentences", lambda: judged_head)
    corpus = tmp_path / "library.jsonl"
    library.build(corpus, library.Inputs.fixture(), progress=False)
    runs, models = tmp_path / "runs", tmp_path / "models"
    common = ["--tiny", "--quiet", "--library", str(corpus)]
    hierarchical_cli.main(["lm", *common, "--steps", "6", "--out", str(runs / "lm-library")])
    hierarchical_cli.main(
        ["autoencoder", *common, "--steps", "3", "--init", str(runs / "lm-library")]
        + ["--out", str(runs / "ae-library")]
    )
    ship = ["ship", "--library-runs", str(runs), "--library", str(corpus)]
    ship += ["--models-dir", str(models), "--verses", str(REPO / "tests/fixtures/verses.tsv")]
    assert hierarchical_cli.main([*ship, "--previous", str(WEB_BUNDLE)]) == 0
    assert not (models / "paraphraser-spurgeon").exists()
    (bundle,) = [p.parent for p in (models / "paraphraser").glob("*/manifest.json")]
    gen = runtime.load(bundle)  # checksums verified
    metrics = gen.manifest.metrics
    web_metrics = json.loads((WEB_BUNDLE / "manifest.json").read_text())["metrics"]
    web = metrics["web_model"]
    assert (
        metrics["sentence_encoders"]
        == web["sentence_encoders"]
        == web_metrics.get("web_model", web_metrics)["sentence_encoders"]
    )
    assert web["everyday"]["meaning_kept"]["judged"] == 30  # the committed WEB judgements
    everyday = metrics["everyday"]
    assert everyday["sentences"] == pq.JUDGED_SAMPLE and 0 <= everyday["changed_share"] <= 1
    assert everyday["meaning_kept"] is None
    sources = gen.manifest.training_data["sources"]
    assert set(sources) == set(library.SOURCES)
    assert sources["gcide"]["licence"].startswith("GPL-2.0-or-later")
    card = (bundle / "README.md").read_text()
    assert "From the WEB runs: sentence encoders" in card and "not judged yet" in card
    assert f"{gen.manifest.training_data['lm_pairs']:,} pairs" in card
    assert (bundle / "sentence_encoders.png").exists() and (bundle / "loss-shipped.png").exists()
    unjudged = pq.read_judgements(runs / "lm-library-everyday-unjudged.tsv")
    assert [r["source"] for r in unjudged] == judged_head

    # a later ship from this bundle carries the WEB model's block as it is
    assert hierarchical_library_ship.web_model_block(bundle, None) == web
    judged = {"judged": 30, "kept": 1, "share": 0.0333}
    metrics["everyday"]["meaning_kept"] = judged
    assert "| 3% (1 of 30) | 0% (0 of 30) |" in hierarchical_library_ship.comparison_table(
        metrics, web
    )

    # --name ships the library model beside the WEB one instead of in its place. It ships from
    # the first bundle (which carries the WEB model's block) on three everyday sentences: the
    # measures are checked above, and taking them again would double the test's time
    everyday_head = judged_head[:3]
    monkeypatch.setattr(pq, "everyday_sentences", lambda: everyday_head)
    beside = [*ship, "--previous", str(bundle), "--name", "paraphraser-library"]
    assert hierarchical_cli.main(beside) == 0
    (other,) = [p.parent for p in (models / "paraphraser-library").glob("*/manifest.json")]
    assert runtime.load(other).manifest.name == "paraphraser-library"
    assert (other / "README.md").read_text().startswith("# paraphraser-library\n")
    assert "It ships beside the WEB-trained paraphraser" in (other / "README.md").read_text()
    assert (bundle / "manifest.json").exists()  # the first ship is left as it was
