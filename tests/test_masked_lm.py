"""Masked LMs and static word vectors: the recipe's tiny chain, fill-mask parity with
transformers' pipeline on the fp32 export, token vectors, the studies, gensim parity of
`most_similar` on the shipped word2vec vectors, and bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import runtime
from runtime.masked_lm import MaskedLM
from runtime.word_vectors import WordVectors, load_matrix
from tests.manifest_fixtures import manifest_of

ROOT = Path(__file__).resolve().parent.parent
WORD2VEC = ROOT / "models" / "word2vec"


@pytest.fixture(scope="module")
def tiny_mlm(tmp_path_factory):
    """(checkpoint directory, fp32 bundle) of a 4-step masked-lm-base trained on the fixture."""
    from export.fill_mask import export_fill_mask_bundle
    from train import common, data, masked_lm

    out = tmp_path_factory.mktemp("mlm")
    recipe = masked_lm.MaskedLM(
        "masked-lm-base", True, data.FIXTURE, Path("data/tokenizers"), out, seed=0
    )
    model, task, config = recipe.setup()
    common.train(model, task, config, out, progress=False, threads=1)
    model_dir = out / "model"
    common.save_model_dir(model.eval(), recipe.tokenizer, model_dir, {}, {"name": "tiny"}, {})
    recipe.finish_model_dir(model_dir)
    bundle = out / "fp32"
    export_fill_mask_bundle(model_dir, bundle, "fp32", optimize=False)
    return model_dir, bundle


@pytest.fixture(scope="module")
def pipeline(tiny_mlm):
    from transformers import AutoModelForMaskedLM, AutoTokenizer
    from transformers import pipeline as make_pipeline

    model_dir, _ = tiny_mlm
    return make_pipeline(
        "fill-mask",
        model=AutoModelForMaskedLM.from_pretrained(model_dir),
        tokenizer=AutoTokenizer.from_pretrained(model_dir),
    )


@pytest.fixture(scope="module")
def gen(tiny_mlm):
    return runtime.load(tiny_mlm[1])


def _same(ours, theirs):
    assert [p["token"] for p in ours] == [p["token"] for p in theirs]
    assert [p["token_str"] for p in ours] == [p["token_str"] for p in theirs]
    assert [p["sequence"] for p in ours] == [p["sequence"] for p in theirs]
    np.testing.assert_allclose([p["score"] for p in ours], [p["score"] for p in theirs], rtol=1e-4)


def test_training_loss_is_bert_for_masked_lm_loss(tmp_path):
    """The recipe's loss (MLM head at masked positions only) equals BertForMaskedLM's own."""
    import torch

    from train import data, masked_lm

    recipe = masked_lm.MaskedLM(
        "masked-lm-large", True, data.FIXTURE, Path("data/tokenizers"), tmp_path, seed=0
    )
    model, task, _ = recipe.setup()
    model.eval()
    with torch.no_grad():
        for batch in task.batches(0)[:3]:
            assert (batch["labels"] != -100).any()
            ours = masked_lm.masked_cross_entropy(model, batch)
            torch.testing.assert_close(ours, model(**batch).loss, rtol=1e-5, atol=1e-6)


def test_scriptorium_export_takes_a_masked_lm_checkpoint(tiny_mlm, tmp_path, capsys):
    from export import cli

    model_dir, _ = tiny_mlm
    out = tmp_path / "int8"
    assert cli.main([str(model_dir), str(out), "--precision", "int8", "--no-optimize"]) == 0
    printed = capsys.readouterr().out
    assert "(fill-mask, bert, int8)" in printed and "masked-position argmax agreement" in printed
    gen = runtime.load(out)
    assert isinstance(gen, MaskedLM) and gen.fill_mask(f"In the {gen.mask_token}", top_k=2)
    assert cli.main([str(model_dir), str(tmp_path / "int4"), "--precision", "int4"]) == 1
    assert "`precision` must be one of fp32, int8, got 'int4'" in capsys.readouterr().err


def test_load_picks_the_masked_lm_from_the_manifest(gen, tiny_mlm):
    manifest = json.loads((tiny_mlm[1] / "manifest.json").read_text())
    assert manifest["task"] == "fill-mask" and manifest["mask_token"] == "<|mask|>"
    assert isinstance(gen, MaskedLM) and gen.mask_token == "<|mask|>"
    assert manifest["graphs"]["model"]["outputs"] == ["logits", "last_hidden_state"]
    assert manifest["parity"]["bundle"]["masked_argmax_agreement"] == 1.0


@pytest.mark.parametrize(
    "text",
    ["In the <|mask|>, God created the heavens.", "The <|mask|> said to the <|mask|>, “Go.”"],
)
def test_fill_mask_matches_the_transformers_pipeline(gen, pipeline, text):
    ours, theirs = gen.fill_mask(text, top_k=4), pipeline(text, top_k=4)
    if text.count("<|mask|>") == 1:
        _same(ours, theirs)
    else:
        assert len(ours) == len(theirs) == 2
        for a, b in zip(ours, theirs):
            _same(a, b)


def test_token_vectors_are_the_last_hidden_states(gen, tiny_mlm):
    import torch
    from transformers import AutoModelForMaskedLM

    model = AutoModelForMaskedLM.from_pretrained(tiny_mlm[0]).eval()
    text = "the king was tired"
    vectors = gen.token_vectors(text)
    ids = gen.encode(text)
    with torch.no_grad():
        hidden = model(torch.tensor([ids]), output_hidden_states=True).hidden_states[-1][0]
    np.testing.assert_allclose(vectors.vectors, hidden[1:-1].numpy(), atol=1e-4)
    assert "".join(vectors.tokens) == text


def test_masked_lm_bad_input(gen):
    with pytest.raises(ValueError, match="must contain the mask token"):
        gen.fill_mask("no mask here")
    with pytest.raises(ValueError, match="`top_k` must be a positive int"):
        gen.fill_mask("a <|mask|>", top_k=0)
    with pytest.raises(ValueError, match="`text` must be at most 128 tokens"):
        gen.fill_mask("word " * 300 + "<|mask|>")
    with pytest.raises(ValueError, match="`text` must be a non-empty string"):
        gen.token_vectors("  ")


def test_studies_run_on_the_runtime(gen):
    from study import bert_generation, masking, probes

    result = masking.masking_study(
        gen, ["In the beginning, God created the heavens and the earth."], (0.2, 0.8), 2
    )
    assert result["predictions"][1] > result["predictions"][0] > 0
    for k in ("1", "5"):
        assert all(0 <= a <= 1 for a in result["accuracy"][k])
    assert result["accuracy"]["5"][0] >= result["accuracy"]["1"][0]
    same = probes.influence(gen, "the man went to sleep", "the man went to sleep")
    assert same["ais"] == pytest.approx(1.0, abs=1e-5) and same["differing_position"] is None
    with pytest.raises(ValueError, match="must have as many tokens"):
        probes.influence(gen, "the man went", "the man went to sleep")
    table = probes.analogy_table(gen)
    assert table["short context"]["queen vs queen"] == pytest.approx(1.0, abs=1e-5)
    outputs = bert_generation.all_strategies(gen, "In the beginning", "and it was good.", 3)
    assert len(outputs) == 3 and all(isinstance(text, str) and text for text in outputs.values())
    with pytest.raises(ValueError, match="`tokens` must be an int"):
        bert_generation.left_to_right(gen, "In the beginning", 0)


def test_masking_study_scores_content_words_among_the_same_predictions(gen):
    """Content words are a subset of the same masked words: the masks and the all-word numbers
    do not change, a predicate true for every word gives the all-word numbers, and the fixture
    WordNet's content words are fewer."""
    from study import masking
    from study.content_words import FIXTURE_DIR, ContentWords

    sentences = [
        "The king said to the man, “Go and see the land.”",
        "God made the heavens and the earth, and the light was good.",
    ]
    plain = masking.masking_study(gen, sentences, (0.15, 0.5), 2)
    assert "content" not in plain
    every = masking.masking_study(gen, sentences, (0.15, 0.5), 2, content_words=lambda w: True)
    assert {k: every[k] for k in plain} == plain
    assert every["content"] == {"accuracy": plain["accuracy"], "predictions": plain["predictions"]}
    none = masking.masking_study(gen, sentences, (0.15, 0.5), 2, content_words=lambda w: False)
    assert none["content"]["predictions"] == [0, 0]
    words = ContentWords.from_wordnet(FIXTURE_DIR)
    seen = []
    result = masking.masking_study(
        gen, sentences, (0.15, 0.5), 2, content_words=lambda w: seen.append(w) or words(w)
    )
    assert {k: result[k] for k in plain} == plain
    assert all(w and w == w.strip() and w.isalpha() for w in seen)
    content = sum(words(w) for w in set(seen))
    assert 0 < content < len(set(seen))
    assert 0 < result["content"]["predictions"][1] < plain["predictions"][1]


def test_library_run_evaluates_and_ships_with_its_own_card(tmp_path):
    """The coordinator's sequence on the fixture library: train with --no-eval, evaluate with
    --eval-only, then `train ship` with --corpus and --steps: the card names the library, its
    licences and the content-word metrics."""
    from train import cli, library

    corpus = tmp_path / "library.jsonl"
    library.build(corpus, library.Inputs.fixture(), progress=False)
    out, models = tmp_path / "run", tmp_path / "models"
    base = ["masked-lm-base", "--tiny", "--corpus", str(corpus), "--steps", "2", "--out", str(out)]
    assert cli.main([*base, "--no-eval", "--quiet"]) == 0
    assert not (out / "evaluation.json").exists()
    too_early = ["masked-lm-base", "--tiny", "--init", str(out), "--out", str(tmp_path / "early")]
    with pytest.raises(ValueError, match="`--init` must be an evaluated run"):
        cli.make_recipe(cli._parser("train", ship_only=False).parse_args(too_early))
    assert cli.main([*base, "--eval-only", "--quiet"]) == 0
    study = json.loads((out / "evaluation.json").read_text())["masking_study"]
    assert study["content"]["predictions"][2] <= study["predictions"][2]
    assert cli.main(["ship", *base, "--models-dir", str(models), "--quiet"]) == 0
    gen = runtime.load(models / "masked-lm-base" / "int8")
    manifest = gen.manifest.to_json()
    assert "content-word top-5 accuracy at 15 % (held-out verses)" in manifest["metrics"]
    everyday = json.loads((out / "evaluation.json").read_text())["everyday_study"]
    assert everyday["sentences"] == 60 and everyday["ratios"] == [0.15]
    assert 0 < everyday["content"]["predictions"][0] < everyday["predictions"][0]
    top5 = manifest["metrics"]["content-word top-5 accuracy at 15 % (everyday sentences)"]
    assert top5 == round(everyday["content"]["accuracy"]["5"][0], 3)
    assert "English library" in manifest["export"]["description"]
    assert "gcide: GPL-2.0-or-later" in manifest["license"]
    assert manifest["training_data"]["sentences"] > 0
    readme = (models / "masked-lm-base" / "int8" / "README.md").read_text()
    assert "| content top 1 | content top 5 | content predictions |" in readme
    assert "## Masking-ratio study" in readme and "on one book" not in readme
    assert "On 60 unseen everyday sentences (study/everyday_sentences.txt), 1 random" in readme
    assert json.loads((out / "training.json").read_text())["planned_steps"] == 2

    # then on the WEB, starting from the library run's weights (--init)
    import torch

    web_run = tmp_path / "web-run"
    on_web = ["masked-lm-base", "--tiny", "--init", str(out), "--steps", "2", "--out", str(web_run)]
    recipe, _ = cli.make_recipe(cli._parser("train", ship_only=False).parse_args(on_web))
    model, _, _ = recipe.setup()
    saved = torch.load(out / "checkpoint.pt", map_location="cpu", weights_only=False)["model"]
    assert all(torch.equal(saved[k], v) for k, v in model.state_dict().items())
    assert cli.main([*on_web, "--quiet"]) == 0
    assert cli.main(["ship", *on_web, "--models-dir", str(tmp_path / "m2"), "--quiet"]) == 0
    manifest = runtime.load(tmp_path / "m2" / "masked-lm-base" / "int8").manifest.to_json()
    data = manifest["training_data"]
    assert data["pretraining"]["steps"] == 2 and data["pretraining"]["run"] == str(out)
    readme = (tmp_path / "m2" / "masked-lm-base" / "int8" / "README.md").read_text()
    assert f"| pretraining | run: {out}; steps: 2; training_data: (corpus: " in readme
    assert "{'" not in readme  # nested records read as text, not as Python dicts
    assert data["fine_tuning"]["licence"] == "public domain"
    assert data["corpus"] == "the library, then World English Bible (2 steps, then 2)"
    assert "gcide: GPL-2.0-or-later" in manifest["license"]
    assert "then on the World English Bible" in manifest["export"]["description"]
    with pytest.raises(ValueError, match="`--init` must be a run with a checkpoint.pt"):
        cli.make_recipe(
            cli._parser("train", ship_only=False).parse_args([*on_web[:3], str(tmp_path)])
        )


def test_runtime_stays_torch_free_with_the_new_tasks(tiny_mlm):
    code = (
        "import sys, runtime\n"
        f"g = runtime.load({str(tiny_mlm[1])!r}); g.fill_mask('a <|mask|> b')\n"
        f"w = runtime.load({str(WORD2VEC / 'cbow')!r}); w.most_similar('king')\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers', 'gensim')]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


# ---- word vectors -------------------------------------------------------------------------------


@pytest.fixture(scope="module", params=["skipgram", "cbow"])
def shipped(request):
    from gensim.models import KeyedVectors

    vectors = runtime.load(WORD2VEC / request.param)
    keyed = KeyedVectors(vectors.vectors.shape[1])
    keyed.add_vectors(vectors.words, np.load(WORD2VEC / request.param / "vectors.npy"))
    return vectors, keyed


@pytest.mark.parametrize(
    "positive, negative",
    [
        (["king"], []),
        (["light"], []),
        (["king", "woman"], ["man"]),
        (["sons", "daughter"], ["son"]),
    ],
)
def test_most_similar_matches_gensim(shipped, positive, negative):
    vectors, keyed = shipped
    ours = vectors.most_similar(positive, negative, topn=10)
    theirs = keyed.most_similar(positive=positive, negative=negative, topn=10)
    assert [w for w, _ in ours] == [w for w, _ in theirs]
    np.testing.assert_allclose([s for _, s in ours], [s for _, s in theirs], atol=1e-5)
    assert vectors.similarity("king", "queen") == pytest.approx(
        float(keyed.similarity("king", "queen")), abs=1e-6
    )


def test_phrases_are_tokens_and_bad_words_raise(shipped):
    vectors, _ = shipped
    assert isinstance(vectors, WordVectors)
    assert "Holy Spirit" in vectors and "son of man" in vectors
    with pytest.raises(ValueError, match="must be words in"):
        vectors.most_similar("zzzqqq")
    with pytest.raises(ValueError, match="`topn` must be a positive int"):
        vectors.most_similar("king", topn=0)
    with pytest.raises(ValueError, match="must be words in"):
        vectors.similarity("king", "nosuchword")


def test_card_metrics_match_the_analogy_evaluation(shipped):
    from study import word_analogies

    vectors, _ = shipped
    result = word_analogies.evaluate(vectors)
    metrics = vectors.manifest.metrics
    assert metrics["analogy accuracy (3CosAdd, top 1)"] == round(result["analogy_accuracy"], 3)
    assert result["analogy_questions"] == result["analogy_total"]  # every word is in the vocab
    assert metrics["analogy questions out of vocabulary"] == 0
    # the library vectors ship their 30,000 most frequent words, in frequency order
    assert len(vectors.words) == vectors.manifest.vocab_size == 30_000
    assert vectors.manifest.restricted["vocab_size"] == 63_169
    assert vectors.counts == sorted(vectors.counts, reverse=True)


def test_load_matrix_needs_the_manifest_entry(tmp_path):
    with pytest.raises(ValueError, match="has no embeddings.npy"):
        load_matrix(tmp_path, manifest_of())
    np.save(tmp_path / "embeddings.npy", np.ones((3, 2), dtype=np.float16))
    matrix = load_matrix(tmp_path, manifest_of(embeddings="embeddings.npy"))
    assert matrix.dtype == np.float32 and matrix.shape == (3, 2)


def test_tiny_word2vec_chain_and_its_restricted_ship(tmp_path):
    from train import word_vectors

    none = str(tmp_path / "none")
    word_vectors.main(["--tiny", "--out", str(tmp_path / "full"), "--reference", none])
    for variant in word_vectors.VARIANTS:
        vectors = runtime.load(tmp_path / "full" / variant)  # checksums verified
        assert vectors.manifest.task == "word-vectors"
        assert len(vectors.most_similar("god", topn=3)) == 3
        assert (tmp_path / "full" / variant / "README.md").exists()
    ship = [
        "--ship",
        str(tmp_path / "full"),
        "--out",
        str(tmp_path / "shipped"),
        "--reference",
        none,
    ]
    word_vectors.main([*ship, "--max-words", "50"])
    for variant in word_vectors.VARIANTS:
        full = runtime.load(tmp_path / "full" / variant)
        shipped = runtime.load(tmp_path / "shipped" / variant)
        assert shipped.words == full.words[:50] and shipped.counts == full.counts[:50]
        np.testing.assert_array_equal(shipped.vectors, full.vectors[:50])
        assert shipped.manifest.restricted["vocab_size"] == len(full.words) > 50
        card = (tmp_path / "shipped" / variant / "README.md").read_text()
        assert f"the 50 most frequent of {len(full.words):,} words" in card
        assert f"(WEB, {len(full.words):,} words)" in card  # the full vectors' row
    with pytest.raises(ValueError, match=r"`max_words` must be in \[1, "):
        word_vectors.main([*ship, "--max-words", "0"])


@pytest.mark.parametrize("name", ["masked-lm-base", "masked-lm-large"])
def test_shipped_masked_lms_verify_and_match_pytorch(name):
    path = ROOT / "models" / name / "int8"
    if not (path / "manifest.json").exists():
        pytest.skip(f"{name} is not shipped")
    gen = runtime.load(path)  # checks every sha256 first
    parity = gen.manifest.parity.bundle
    assert parity.masked_argmax_agreement >= 0.9 and parity.min_hidden_cosine > 0.95
    found = gen.fill_mask("I am the <|mask|> of life.", top_k=5)
    scores = [p["score"] for p in found]
    assert scores == sorted(scores, reverse=True) and 0 < sum(scores) <= 1


def test_module_doctests():
    import doctest

    from convert import manifest
    from runtime import word_vectors as served
    from train import masked_lm
    from train import word_vectors as trained

    for module in (served, trained, manifest, masked_lm):
        assert doctest.testmod(module).failed == 0


def test_study_masking_on_everyday_sentences(tiny_mlm, capsys):
    """`scriptorium study masking --everyday` studies the 60 everyday sentences, not verses."""
    from scriptorium import study_cli
    from study.content_words import FIXTURE_DIR

    argv = ["masking", "--everyday", "--repetitions", "1", "--models", str(tiny_mlm[1])]
    assert study_cli.main([*argv, "--wordnet", str(FIXTURE_DIR)]) == 0
    assert ": 60 sentences × 1 repetitions" in capsys.readouterr().out


@pytest.mark.parametrize(
    "run, size",
    [
        ("checkpoints/masked-lm-base", "masked-lm-base"),
        ("checkpoints/masked-lm-large-library-web", "masked-lm-large"),
        ("checkpoints/masked-lm-base-library", "masked-lm-base"),
    ],
)
def test_a_runs_size_comes_from_its_name(run, size):
    from train.masked_lm import size_of

    assert size_of(Path(run)) == size


def test_a_run_named_after_no_size_is_refused():
    from train.masked_lm import size_of

    with pytest.raises(ValueError, match="run name must start with one of"):
        size_of(Path("checkpoints/masked-lm-largest"))
