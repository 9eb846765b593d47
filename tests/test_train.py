"""Training recipes: tiny end-to-end runs, resume, input formats, evaluation measures.

Each recipe's `--tiny` mode runs once per module (train a few steps on the fixture slice ->
export an int8 bundle -> evaluate through the runtime); the tests check its real outputs.
"""

from __future__ import annotations

import csv
import doctest
import json
import random

import pytest
import torch

import runtime
from export import corpus
from runtime.manifest import Control
from train import cli, common, data, evaluate, lm
from train import tokenizer as tk
from train.seq2seq import bart as seq2seq
from train.seq2seq import recipes as seq2seq_recipes
from ui import registry as ui_registry

RECIPES = ("bible-lm", "rewriter", "translator")


@pytest.fixture(scope="module")
def tiny_runs(tmp_path_factory):
    """Run directory of each recipe's tiny mode (each run once, lazily)."""
    runs = {}

    def get(recipe: str):
        if recipe not in runs:
            out = tmp_path_factory.mktemp(recipe)
            assert cli.main([recipe, "--tiny", "--out", str(out), "--quiet"]) == 0
            runs[recipe] = out
        return runs[recipe]

    return get


def _rows(path):
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


@pytest.mark.parametrize("recipe", RECIPES)
def test_tiny_run_trains_logs_and_exports(tiny_runs, recipe):
    out = tiny_runs(recipe)
    training = json.loads((out / "training.json").read_text())
    rows = _rows(out / common.LOSS_CSV)
    assert [int(r["step"]) for r in rows] == list(range(1, training["planned_steps"] + 1))
    assert all(float(r["train_loss"]) > 0 for r in rows)
    assert any(r["val_loss"] for r in rows)
    assert (out / common.LOSS_PNG).read_bytes()[:4] == b"\x89PNG"
    assert training["steps"] == training["planned_steps"] and training["train_seconds"] > 0
    evaluation = json.loads((out / common.EVALUATION).read_text())
    assert evaluation["evaluated_precision"] == "int8"
    manifest = json.loads((out / "bundle-int8" / "manifest.json").read_text())
    assert manifest["name"] == recipe and manifest["precision"] == "int8"
    assert manifest["license"].startswith("Public domain")
    assert manifest["training_data"]["licence"] == "public domain"
    card = json.loads((out / "model" / "scriptorium_card.json").read_text())
    assert card["metrics"] and all(isinstance(v, (int, float)) for v in card["metrics"].values())


def test_lm_bundle_controls_reproduce_training_format(tiny_runs):
    out = tiny_runs("bible-lm")
    gen = runtime.load(out / "bundle-int8")
    assert gen.controls == {"section": list(lm.SECTION_KEYS.values())}
    assert gen.manifest.add_bos_token is True
    tokenizer = lm.with_bos_post_processor(
        __import__("tokenizers").Tokenizer.from_file(str(out / "tokenizer-en.json"))
    )
    special = lm.special_ids(tokenizer)
    plain = gen.encode_prompt("In the beginning")
    law = gen.encode_prompt("In the beginning", {"section": "law"})
    assert law != plain
    # Training's passage for a chapter whose first verse is the prompt: BOS, section, verse.
    chapter = corpus.Chapter("Genesis", 1, "Law", ["In the beginning", "God said."])
    encoded = lm.EncodedChapter(chapter, tokenizer)
    passage = lm.make_passages([encoded], special, 128)[0]
    assert passage.ids[: len(law)] == law
    assert passage.ids[-1] == special["eos"]
    outs = gen.generate(
        "",
        runtime.GenerationConfig(max_new_tokens=5, do_sample=True, seed=0),
        {"section": "gospels"},
    )
    assert len(outs[0].token_ids) >= 1


def test_rewriter_bundle_controls_reproduce_training_format(tiny_runs):
    out = tiny_runs("rewriter")
    gen = runtime.load(out / "bundle-int8")
    assert gen.controls["length"] == ["short", "normal", "long"]
    assert gen.controls["length_ratio"] == list(evaluate.RATIO_VALUES)
    tokenizer = seq2seq.with_seq2seq_post_processor(
        __import__("tokenizers").Tokenizer.from_file(str(out / "tokenizer-en.json"))
    )
    special = {"bos": 0, "eos": 1, "pad": 2}
    source = "And God said, Let there be light: and there was light."
    ids = tokenizer.encode(source, add_special_tokens=False).ids
    pair = seq2seq.Pair(source, "God said.", "Genesis", ids, [5, 6])
    for controls, prefix in (
        ({}, ""),
        ({"length": "short"}, "<short>"),
        ({"length_ratio": 0.83}, "<ratio_0.8>"),
        ({"length": "long", "length_ratio": 1.26}, "<long><ratio_1.3>"),
    ):
        expected = seq2seq.make_example(pair, prefix, tokenizer, special).input_ids
        assert gen.encode_prompt(source, controls) == expected
        assert tokenizer.encode(prefix + source).ids == expected
    assert gen.encode_prompt(source, {"length": "short"}) != gen.encode_prompt(source)
    outs = gen.generate(source, runtime.GenerationConfig(max_new_tokens=4), {"length": "long"})
    assert outs[0].finish_reason in ("length", "eos", "stop")


def test_rewriter_evaluation_tables(tiny_runs):
    evaluation = json.loads((tiny_runs("rewriter") / common.EVALUATION).read_text())
    assert set(evaluation["strategy1"]) == {"none", "short", "normal", "long"}
    assert set(evaluation["strategy1_values"]) == {f"{v:.1f}" for v in evaluate.RATIO_VALUES}
    overall = evaluation["strategy2"]["overall"]
    assert overall["pairs"] == evaluation["test_pairs"]
    # The copy baseline is a real score: the KJV source is close to the WEB reference.
    assert overall["copy (KJV source)"]["bleu"] > 10
    assert 0 <= overall["no token"]["chrf"] <= 100


def test_translator_has_no_controls_and_scores(tiny_runs):
    out = tiny_runs("translator")
    gen = runtime.load(out / "bundle-int8")
    assert gen.controls == {}
    # The app's Translate tab lists the model by the language pair its manifest names.
    assert ui_registry.languages(gen.manifest) == ("en", "es")
    evaluation = json.loads((out / common.EVALUATION).read_text())
    assert "model" in evaluation["scores"]
    if evaluate.apertium_available():
        assert evaluation["scores"]["apertium eng-spa"]["overall"]["chrf"] > 20


def test_ship_writes_full_card(tiny_runs, tmp_path):
    out = tiny_runs("bible-lm")
    models = tmp_path / "models"
    args = [
        "ship",
        "bible-lm",
        "--tiny",
        "--out",
        str(out),
        "--models-dir",
        str(models),
        "--precisions",
        "int8",
        "--quiet",
    ]
    assert cli.main(args) == 0
    bundle = models / "bible-lm" / "int8"
    readme = (bundle / "README.md").read_text()
    for heading in (
        "## Perplexity",
        "## Conditioning check",
        "## Samples",
        "## Known limits",
        "## Training",
        "## Parity with PyTorch",
    ):
        assert heading in readme
    assert "verbatim in the training text" in readme
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert "loss.png" in manifest["files"]
    assert manifest["metrics"]["section classifier chance"] == round(1 / 7, 3)
    runtime.load(bundle)  # checksums verified, README and plot included


# ---- resume ---------------------------------------------------------------------------------


def test_resume_continues_from_saved_step_with_identical_losses(tmp_path):
    whole, split = tmp_path / "whole", tmp_path / "split"
    base = ["bible-lm", "--tiny", "--no-eval", "--quiet"]
    assert cli.main([*base, "--out", str(whole)]) == 0
    assert cli.main([*base, "--out", str(split), "--max-steps", "4"]) == 0
    assert json.loads((split / "training.json").read_text())["steps"] == 4
    with pytest.raises(FileExistsError):
        cli.main([*base, "--out", str(split)])
    assert cli.main([*base, "--out", str(split), "--resume"]) == 0
    a, b = _rows(whole / common.LOSS_CSV), _rows(split / common.LOSS_CSV)
    assert [r["step"] for r in b] == [str(s) for s in range(1, 9)]
    for left, right in zip(a, b):
        assert float(left["train_loss"]) == pytest.approx(float(right["train_loss"]), abs=1e-4)
        assert left["val_loss"] == "" or float(left["val_loss"]) == pytest.approx(
            float(right["val_loss"]), abs=1e-4
        )
        assert left["tokens"] == right["tokens"] and left["lr"] == right["lr"]


# ---- formats --------------------------------------------------------------------------------


def test_passage_spans_and_labels():
    assert lm.passage_spans([3, 3, 3], [4, 4, 4], capacity=8, first_capacity=8) == [(0, 2), (2, 3)]
    special = {
        "bos": 0,
        "eos": 1,
        "pad": 2,
        **{label: 3 + i for i, label in enumerate(data.SECTIONS)},
    }

    class Fake:
        section = "Gospels"
        first = [[10, 11], [12]]
        cont = [[20, 21], [22, 23]]

    passages = lm.make_passages([Fake()], special, context=16)
    assert [p.ids for p in passages] == [[0, special["Gospels"], 10, 11, 22, 23, 1]]
    passages = lm.make_passages([Fake()], special, context=6)  # capacity 3: one verse each
    assert [p.ids for p in passages] == [[0, 7, 10, 11], [0, 7, 12, 1]]
    batch = lm.collate(passages + [lm.Passage([0, 10], "Gospels", 0)], pad_id=2)
    assert batch["labels"].tolist() == [
        [-100, -100, 10, 11],
        [-100, -100, 12, 1],
        [-100, 10, -100, -100],
    ]
    assert batch["attention_mask"].tolist()[2] == [1, 1, 0, 0]


def test_section_dropout_and_moving_boundaries():
    special = {
        "bos": 0,
        "eos": 1,
        "pad": 2,
        **{label: 3 + i for i, label in enumerate(data.SECTIONS)},
    }

    class Fake:
        section = "Law"
        first = [[10 + i] * 5 for i in range(40)]
        cont = [[10 + i] * 6 for i in range(40)]

    runs = [lm.make_passages([Fake()], special, 64, random.Random(s), 0.5) for s in range(6)]
    assert len({tuple(len(p.ids) for p in run) for run in runs}) > 1
    dropped = [p for run in runs for p in run if p.controls == 0]
    assert dropped and all(p.ids[1] != special["Law"] for p in dropped)


def test_length_prefix_draws_every_kind():
    rng = random.Random(0)
    kinds = [seq2seq.draw_kind(rng) for _ in range(2000)]
    shares = {k: kinds.count(k) / len(kinds) for k, _ in seq2seq.PREFIX_KINDS}
    for kind, probability in seq2seq.PREFIX_KINDS:
        assert shares[kind] == pytest.approx(probability, abs=0.04)
    assert seq2seq.length_prefix(1.0, "both") == "<normal><ratio_1.0>"
    assert seq2seq.length_prefix(1.5, "category") == "<long>"


@pytest.mark.parametrize("floor", [1, 50])
def test_balanced_draw_evens_out_ratio_values_above_the_floor(floor):
    # 900 pairs nearest 1.0, 90 nearest 0.6, 9 nearest 1.4 (source 10 tokens, target 10/6/14).
    lengths = [10] * 900 + [6] * 90 + [14] * 9
    pairs = [seq2seq.Pair("", "", "", [0] * 10, [0] * n) for n in lengths]
    drawn = seq2seq.balanced_draw(pairs, 30_000, random.Random(0), floor)
    share = {v: sum(p.ratio == v for p in drawn) / len(drawn) for v in (1.0, 0.6, 1.4)}
    # Weight of a value = min(1, n / floor): floor 1 -> 1 : 1 : 1; floor 50 -> 1 : 1 : 9/50.
    mass = {1.0: 1.0, 0.6: 1.0, 1.4: min(1.0, 9 / floor)}
    for value, weight in mass.items():
        assert share[value] == pytest.approx(weight / sum(mass.values()), abs=0.015)


def test_rewriter_epochs_add_balanced_value_token_examples(tmp_path):
    recipe = seq2seq_recipes.Rewriter(True, data.FIXTURE, tmp_path / "tokenizers", tmp_path, seed=0)
    train = recipe.pairs["train"]
    examples = recipe.epoch_examples(random.Random(0))
    assert len(examples) == recipe.examples_per_epoch() == len(train) + recipe.balanced_count()
    ratio_ids = {recipe.tokenizer.token_to_id(t) for t in seq2seq.RATIO_TOKENS.values()}
    extra = examples[len(train) :]
    assert extra and all(e.input_ids[1] in ratio_ids for e in extra)
    assert all(e.input_ids[2] not in ratio_ids for e in extra)  # the value token alone


def test_seq2seq_collate_pads_and_masks():
    examples = [seq2seq.Example([0, 5, 6, 1], [7, 1]), seq2seq.Example([0, 5, 1], [7, 8, 9, 1])]
    batch = seq2seq.collate(examples, pad_id=2, start_id=0)
    assert batch["input_ids"].tolist() == [[0, 5, 6, 1], [0, 5, 1, 2]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1, 1], [1, 1, 1, 0]]
    assert batch["labels"].tolist() == [[7, 1, -100, -100], [7, 8, 9, 1]]
    assert batch["decoder_input_ids"].tolist() == [[0, 7, 2, 2], [0, 7, 8, 9]]


def test_seq2seq_stacks_start_from_one_position_table():
    special = {"bos": 0, "eos": 1, "pad": 2}
    model = seq2seq.build_model(seq2seq.TINY, vocab_size=32, special=special, seed=0)
    encoder = model.model.encoder.embed_positions.weight
    decoder = model.model.decoder.embed_positions.weight
    assert encoder.requires_grad and decoder.requires_grad
    assert torch.equal(encoder, decoder)
    # Sinusoidal: each position's row is most similar to itself.
    similarity = encoder @ encoder.T  # (P, P)
    assert (similarity.argmax(dim=1) == torch.arange(len(encoder))).all()


def test_tokenizer_controls_are_single_tokens():
    tokenizer = tk.train_tokenizer(["In the beginning God created."] * 5, 320, tk.EN_CONTROL_TOKENS)
    for token in (
        *seq2seq.CATEGORY_TOKENS.values(),
        *seq2seq.RATIO_TOKENS.values(),
        *data.SECTIONS.values(),
    ):
        assert tokenizer.encode(token, add_special_tokens=False).ids == [
            tokenizer.token_to_id(token)
        ]


# ---- evaluation measures ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "ratio, category",
    [
        (0.5, "short"),
        (0.949, "short"),
        (0.95, "normal"),
        (1.0, "normal"),
        (1.05, "normal"),
        (1.051, "long"),
        (3.2, "long"),
    ],
)
def test_length_category(ratio, category):
    assert evaluate.length_category(ratio) == category


@pytest.mark.parametrize(
    "ratio, value",
    [
        (0.5, 0.5),
        (0.949, 0.9),
        (0.951, 1.0),
        (1.049, 1.0),
        (1.051, 1.1),
        (1.96, 2.0),
        (0.04, 0.1),
        (3.2, 2.0),
    ],
)
def test_nearest_ratio_value(ratio, value):
    assert evaluate.nearest_ratio_value(ratio) == value


def test_nearest_value_matches_runtime_rule():
    spec = seq2seq.length_controls()["length_ratio"]
    for ratio in [i / 100 for i in range(0, 230)]:
        controls = {"length_ratio": Control(**spec)}
        token = runtime.text.control_prefix(controls, {"length_ratio": ratio})
        assert token == seq2seq.RATIO_TOKENS[evaluate.nearest_ratio_value(ratio)]


def test_mean_length_ratio_is_lrsrc():
    words = lambda s: len(s.split())  # noqa: E731
    sources = ["a b c d", "a b c d e f g h i j"]
    outputs = ["a b", "a b c d e f g h i j k l"]
    assert evaluate.mean_length_ratio(sources, outputs, words) == pytest.approx((0.5 + 1.2) / 2)
    with pytest.raises(ValueError, match="equal length"):
        evaluate.mean_length_ratio(sources, outputs[:1], words)


@pytest.mark.parametrize(
    "hypothesis, reference, recall",
    [
        ("the cat sat on the mat", "the cat sat on the mat", 1.0),
        ("the cat sat", "the cat sat on the mat", 2 / 5),
        ("mat the on sat cat the", "the cat sat on the mat", 0.0),
        ("The cat, the cat!", "the cat the cat", 1.0),  # case and punctuation ignored
        ("the cat", "the cat the cat", 1 / 3),  # clipped: "the cat" counted once
        ("anything", "word", 0.0),  # reference without bigrams
    ],
)
def test_rouge2_recall(hypothesis, reference, recall):
    assert evaluate.rouge2_recall(hypothesis, reference) == pytest.approx(recall)


def test_mean_rouge2_recall_in_percent():
    hyps, refs = ["a b c", "x y"], ["a b c", "a b"]
    assert evaluate.mean_rouge2_recall(hyps, refs) == pytest.approx(50.0)


def test_memorised_share_of_8grams():
    training = ["one two three four five six seven eight nine ten"]
    # 3 generated 8-grams: the first two are verbatim in training, the third is not.
    generated = ["one two three four five six seven eight nine eleven"]
    assert evaluate.memorised_share(generated, training) == pytest.approx(2 / 3)
    assert evaluate.memorised_share(["two three four five six seven eight nine"], training) == 1
    assert evaluate.memorised_share(["short text"], training) == 0.0
    # Case differs: not verbatim.
    assert evaluate.memorised_share(["One two three four five six seven eight"], training) == 0


def test_bleu_chrf_and_accuracy_table():
    scores = evaluate.bleu_chrf(["the cat sat on the mat"], ["a dog lay under a rug"])
    assert scores["bleu"] == pytest.approx(0.0) and scores["chrf"] < 20
    table = evaluate.accuracy_table(["a", "a", "c"], ["a", "b", "c"], ["a", "b", "c"])
    assert table["b"]["labelled_as"] == {"a": 1, "b": 0, "c": 0}
    assert table["overall"]["accuracy"] == pytest.approx(2 / 3)
    assert table["overall"]["chance"] == pytest.approx(1 / 3)


def test_section_classifier_learns_sections():
    texts = ["the law of sacrifice and offering"] * 5 + ["jesus said to his disciples"] * 5
    labels = ["law"] * 5 + ["gospels"] * 5
    classifier = evaluate.section_classifier(texts, labels)
    assert list(classifier.predict(["an offering of the law", "jesus said"])) == ["law", "gospels"]


@pytest.mark.skipif(not evaluate.apertium_available(), reason="apertium eng-spa not installed")
def test_apertium_keeps_one_line_per_text():
    out = evaluate.run_apertium(["In the beginning.", "God said,\n“Let there be light.”", "Yes."])
    assert len(out) == 3 and out[0].startswith("En")


@pytest.mark.parametrize("module", [evaluate, common, lm, seq2seq], ids=lambda m: m.__name__)
def test_module_doctests(module):
    assert doctest.testmod(module).failed == 0
