"""Seed 001's GRU encoder-decoders (single context vector, Bahdanau attention) end to end on tiny
random models: the PyTorch model (padding, matched presets), the pairs file and the training
recipe on the fixture verses, the ONNX export (parity, one embedding table in the step graph,
int8) and the torch-free runtime (greedy tokens identical to PyTorch's loop, beam search,
sampling, scoring, α, loading from the manifest)."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch

import runtime
from export import gru_seq2seq as gru_export
from modeling import gru_seq2seq as model_definition
from runtime.bundle import read_manifest
from runtime.manifest import Manifest
from runtime.recurrent import RecurrentSeq2SeqLM
from train import common, data
from train.seq2seq import gru as recipe
from train.seq2seq import gru_eval

VARIANTS = ("context", "attention")
SOURCES = (
    "And God said, Let there be light: and there was light.",
    "Jesus wept.",
    "The LORD is my shepherd; I shall not want.",
)
TINY = {"embedding": 16, "encoder_hidden": 12, "decoder_hidden": 20, "attention_size": 8}


def _tiny_run(directory: Path, variant: str, seed: int = 0) -> Path:
    """A run folder (what training leaves) holding a tiny randomly initialised model, with a
    two-row loss log and its plot."""
    special = recipe.special_ids(recipe.TOKENIZER)
    config = replace(
        model_definition.PRESETS[variant],
        **TINY,
        bos_token_id=special["bos"],
        eos_token_id=special["eos"],
        pad_token_id=special["pad"],
    )
    torch.manual_seed(seed)
    model = model_definition.build(config)
    directory.mkdir(parents=True)
    model_definition.save_config(config, directory)
    torch.save(model.state_dict(), directory / model_definition.WEIGHTS_FILE)
    shutil.copyfile(recipe.TOKENIZER, directory / "tokenizer.json")
    log = common.LossLog(directory / common.LOSS_CSV)
    log.start()
    for step, val_loss in ((1, ""), (2, 8.5)):
        log.append({"step": step, "epoch": 0, "tokens": 40 * step, "lr": 1e-3,
                    "train_loss": 9.0 - step / 10, "val_loss": val_loss,
                    "train_seconds": float(step)})  # fmt: skip
    common.plot_losses(directory / common.LOSS_CSV, directory / common.LOSS_PNG, variant)
    return directory


@pytest.fixture(scope="module")
def bundles(tmp_path_factory) -> dict[str, Path]:
    """variant -> an fp32 bundle of a tiny random model; its run folder beside it."""
    root = tmp_path_factory.mktemp("gru")
    made = {}
    for variant in VARIANTS:
        run = _tiny_run(root / f"run-{variant}", variant)
        made[variant] = root / variant
        gru_export.export_bundle(run, made[variant], "fp32", name=f"gru-{variant}")
    return made


def _model(bundles, variant):
    return model_definition.load(bundles[variant].parent / f"run-{variant}")


def _sources(gen) -> tuple[np.ndarray, np.ndarray]:
    encoded = [gen.encode_prompt(s) for s in SOURCES]
    width = max(map(len, encoded))
    ids = np.full((len(encoded), width), gen.pad_token_id, dtype=np.int64)
    mask = np.zeros_like(ids)
    for row, tokens in enumerate(encoded):
        ids[row, : len(tokens)], mask[row, : len(tokens)] = tokens, 1
    return ids, mask


# ---- the PyTorch models ----------------------------------------------------------------------


def test_presets_have_matched_parameter_counts():
    counts = [model_definition.count_parameters(model_definition.build(c)) for c in (
        model_definition.CONTEXT, model_definition.ATTENTION
    )]  # fmt: skip
    assert abs(counts[0] - counts[1]) / counts[0] < 0.001
    assert 1.5e6 < counts[0] < 5e6


@pytest.mark.parametrize("variant", VARIANTS)
def test_padding_changes_nothing_and_steps_match_teacher_forcing(variant):
    config = replace(model_definition.PRESETS[variant], **TINY)
    torch.manual_seed(0)
    model = model_definition.build(config).eval()
    ids = torch.randint(3, config.vocab_size, (2, 9))  # (N, S)
    mask = torch.ones_like(ids)
    mask[1, 5:] = 0
    decoder_ids = torch.randint(3, config.vocab_size, (2, 6))  # (N, T)
    with torch.no_grad():
        batch = model(ids, mask, decoder_ids)
        alone = model(ids[1:, :5], mask[1:, :5], decoder_ids[1:])
        hidden, *memory = model.encode(ids, mask)
        for position in range(decoder_ids.shape[1]):
            logits, hidden, *_ = model.step(decoder_ids[:, position], hidden, *memory)
            torch.testing.assert_close(logits, batch.logits[:, position])
    torch.testing.assert_close(alone.logits[0], batch.logits[1], atol=1e-5, rtol=1e-5)


def test_reverse_rows_reverses_only_the_real_tokens():
    x = torch.arange(10.0).reshape(2, 5, 1)  # (N, S, 1)
    flipped = model_definition.reverse_rows(x, torch.tensor([5, 3]))
    assert flipped[:, :, 0].tolist() == [[4, 3, 2, 1, 0], [7, 6, 5, 8, 9]]
    assert torch.equal(model_definition.reverse_rows(flipped, torch.tensor([5, 3])), x)


# ---- data and training -----------------------------------------------------------------------


def test_pairs_file_round_trips_the_rewriters_pairs(tmp_path):
    counts = recipe.write_pairs(data.FIXTURE, recipe.TOKENIZER, tmp_path / "pairs.npz")
    train = recipe.read_pairs(tmp_path / "pairs.npz", "train", recipe.TOKENIZER)
    assert len(train) == counts["train"] > 0
    first = train[0]
    assert first.source_ids and first.target_ids
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(recipe.TOKENIZER))
    assert tokenizer.encode(first.source, add_special_tokens=False).ids == first.source_ids
    assert tokenizer.encode(first.target, add_special_tokens=False).ids == first.target_ids
    other = tmp_path / "other.json"
    other.write_text(recipe.TOKENIZER.read_text().replace('"<short>"', '"<shortish>"'))
    with pytest.raises(ValueError, match="tokenized with"):
        recipe.read_pairs(tmp_path / "pairs.npz", "train", other)


def test_training_run_resumes_and_leaves_an_exportable_folder(tmp_path):
    pairs = tmp_path / "pairs.npz"
    recipe.write_pairs(data.FIXTURE, recipe.TOKENIZER, pairs)
    size = recipe.GRUTrainSize(steps=3, batch_size=4, val_pairs=4, log_every=1, eval_every=1,
                               checkpoint_every=1)  # fmt: skip
    out = tmp_path / "run"
    first = recipe.run("attention", pairs, out, size=size, max_steps=2, progress=False)
    assert (first["step"], first["finished"]) == (2, False)
    assert not (out / model_definition.WEIGHTS_FILE).exists()
    state = recipe.run("attention", pairs, out, size=size, resume=True, progress=False)
    assert state["finished"]
    rows = (out / "loss.csv").read_text().splitlines()
    assert [row.split(",")[0] for row in rows[1:]] == ["1", "2", "3"]
    assert "resume attention" in (out / recipe.LOG_FILE).read_text()
    manifest = gru_export.export_bundle(out, tmp_path / "bundle", "int8")
    assert manifest.architecture == "gru-attention"
    assert runtime.load(tmp_path / "bundle").generate("Jesus wept.")[0].token_ids
    scores = recipe.evaluate_bundle(tmp_path / "bundle", pairs, count=3, beams=2, progress=False)
    assert scores["test_pairs"] == 3 and len(scores["samples"]) == 3
    assert 0 <= scores["model"]["bleu"] < scores["copy (KJV source)"]["bleu"]


def test_bad_run_arguments_raise_value_error(tmp_path):
    with pytest.raises(ValueError, match="`variant` must be one of"):
        recipe.run("transformer", tmp_path / "p.npz", tmp_path / "run")
    with pytest.raises(ValueError, match="`device` must be"):
        recipe.run("context", tmp_path / "p.npz", tmp_path / "run", device="tpu")


def test_length_buckets_cover_every_source_length():
    assert [gru_eval.bucket_of(n) for n in (1, 10, 11, 40, 41, 300)] == [
        "1–10", "1–10", "11–20", "31–40", "41+", "41+"
    ]  # fmt: skip
    with pytest.raises(ValueError, match="`words` must be at least 1"):
        gru_eval.bucket_of(0)
    found = gru_eval.scores(["a b c d", "x y"], ["a b c d", "p q"], ["1–10", "41+"])
    assert found["by_length"]["1–10"]["bleu"] == pytest.approx(100.0)
    assert found["by_length"]["41+"]["bleu"] == pytest.approx(0.0)
    assert set(found["by_length"]) == {"1–10", "41+"}  # empty buckets are left out


def _rewriter_training_fields() -> set[str]:
    return set(Manifest.read(recipe.REWRITER / "manifest.json").training_data)


def test_ship_writes_evaluated_sealed_bundles_with_their_cards(tmp_path):
    pairs = tmp_path / "pairs.npz"
    recipe.write_pairs(data.FIXTURE, recipe.TOKENIZER, pairs)
    runs = {v: _tiny_run(tmp_path / f"run-{v}", v, seed=i) for i, v in enumerate(VARIANTS)}
    models = tmp_path / "models"
    results = recipe.ship(runs, pairs, models, sample_verses=2, progress=False)
    test_pairs = len(recipe.read_pairs(pairs, "test"))
    assert results["test_pairs"] == test_pairs == sum(results["buckets"].values())
    assert set(results["systems"]) == {
        "rewriter-gru greedy", "rewriter-gru beam 3", "rewriter-gru-attention greedy",
        "rewriter-gru-attention beam 3", "rewriter (mBART)", gru_eval.COPY,
    }  # fmt: skip
    mbart = results["systems"]["rewriter (mBART)"]
    assert mbart["decoding"] == {"num_beams": 3, "max_new_tokens": 127}  # its manifest defaults
    assert mbart["bleu"] > results["systems"]["rewriter-gru greedy"]["bleu"]  # tiny random GRU
    for variant, name in recipe.SHIP_NAMES.items():
        bundle = models / name / "int8"
        manifest = read_manifest(bundle)  # every checksum, README.md and evaluation.json included
        assert {"README.md", "evaluation.json", "loss.png"} <= set(manifest.files)
        assert manifest.architecture == model_definition.PRESETS[variant].architecture
        assert set(manifest.training_data) == _rewriter_training_fields() | {"steps"}
        assert manifest.training_data["source_language"] == "en"
        assert manifest.training_data["target_language"] == "en"
        assert manifest.training_data["steps"] == 2
        assert manifest.metrics["bleu greedy"] == round(
            results["systems"][f"{name} greedy"]["bleu"], 2
        )
        evaluation = common.read_json(bundle / "evaluation.json")
        assert evaluation["int8_vs_fp32"][name]["sources"] == test_pairs
        card = (bundle / "README.md").read_text()
        for heading in ("## BLEU by source length", "## int8 against fp32", "![loss curve]"):
            assert heading in card
        gen = runtime.load(bundle)
        greedy = runtime.GenerationConfig(num_beams=1, max_new_tokens=127)
        for sample in evaluation["greedy_samples"]:
            assert gen.generate(sample["kjv"], greedy)[0].text.strip() == sample["output"]
            assert f"greedy: {sample['output']}" in card


def test_ship_refuses_an_unknown_variant(tmp_path):
    with pytest.raises(ValueError, match="`runs` variants must be in"):
        recipe.ship({"transformer": tmp_path}, tmp_path / "pairs.npz", tmp_path / "models")


@pytest.mark.parametrize("name", sorted(recipe.SHIP_NAMES.values()))
def test_shipped_bundle_writes_what_its_card_says(name):
    bundle = recipe.REPO / "models" / name / "int8"
    if not (bundle / "manifest.json").exists():
        pytest.skip(f"{name} is not shipped")
    gen = runtime.load(bundle)  # checks every sha256 first
    manifest = gen.manifest
    assert set(manifest.training_data) == _rewriter_training_fields() | {"steps"}
    assert manifest.training_data["source_language"] == manifest.training_data["target_language"]
    evaluation = common.read_json(bundle / "evaluation.json")
    assert evaluation["test_pairs"] == sum(evaluation["buckets"].values())
    card = (bundle / "README.md").read_text()
    greedy = runtime.GenerationConfig(num_beams=1, max_new_tokens=127)
    assert evaluation["greedy_samples"]
    for sample in evaluation["greedy_samples"]:
        assert f"KJV: {sample['kjv']}" in card and f"greedy: {sample['output']}" in card
        assert gen.generate(sample["kjv"], greedy)[0].text.strip() == sample["output"]


# ---- export ----------------------------------------------------------------------------------


@pytest.mark.parametrize("variant", VARIANTS)
def test_export_parity_is_recorded_in_the_manifest(bundles, variant):
    manifest = Manifest.read(bundles[variant] / "manifest.json")
    assert manifest.task == "seq2seq"
    assert manifest.architecture == model_definition.PRESETS[variant].architecture
    parity = manifest.parity
    assert parity.logits_max_abs_diff < 1e-4
    assert parity.greedy.identical_sequences == parity.sentences
    assert (parity.attention_max_abs_diff is not None) == (variant == "attention")
    assert ("attention" in manifest.graphs["decoder"].outputs) == (variant == "attention")


@pytest.mark.parametrize("variant", VARIANTS)
def test_step_graph_holds_one_embedding_table(bundles, variant):
    config = _model(bundles, variant).config
    graph = onnx.load(str(bundles[variant] / gru_export.DECODER_FILE)).graph
    tables = [i for i in graph.initializer if set(i.dims) == {config.vocab_size, config.embedding}]
    assert len(tables) == 1


def test_int8_bundle_is_quantized_smaller_and_keeps_greedy(bundles, tmp_path):
    run = bundles["attention"].parent / "run-attention"
    manifest = gru_export.export_bundle(run, tmp_path / "int8", "int8")
    fp32 = Manifest.read(bundles["attention"] / "manifest.json")
    sizes = [sum(f.size for f in m.files.values()) for m in (manifest, fp32)]
    assert sizes[0] < 0.6 * sizes[1]
    assert manifest.export.quantization[gru_export.DECODER_FILE]["MatMulInteger"] >= 5
    assert manifest.batch_invariant is False
    assert manifest.parity.logits_max_abs_diff < 0.05


def test_graphs_without_the_tied_pair_are_refused():
    graph = onnx.helper.make_model(onnx.helper.make_graph([], "empty", [], []))
    with pytest.raises(ValueError, match="tied embedding"):
        gru_export.share_output_embedding(graph, np.zeros((4, 2), dtype=np.float32))


# ---- the runtime -----------------------------------------------------------------------------


@pytest.mark.parametrize("variant", VARIANTS)
def test_registry_loads_the_bundle_from_its_manifest(bundles, variant):
    from ui.registry import ModelRegistry

    registry = ModelRegistry.discover([bundles[variant].parent])
    assert sorted(registry.names) == sorted(
        VARIANTS
    )  # the bundles, not the run folders beside them
    gen = registry.get(variant)
    assert isinstance(gen.model, RecurrentSeq2SeqLM)
    assert gen.task == "seq2seq"


@pytest.mark.parametrize("variant", VARIANTS)
def test_greedy_tokens_match_pytorch_and_logits_stay_close(bundles, variant):
    gen = runtime.load(bundles[variant])
    model = _model(bundles, variant)
    config = runtime.GenerationConfig(max_new_tokens=12, num_beams=1, do_sample=False)
    outputs = gen.generate(list(SOURCES), config)
    ids, mask = _sources(gen)
    expected = model.greedy(torch.from_numpy(ids), torch.from_numpy(mask), 12)
    assert [list(out.token_ids) for out in outputs] == expected
    decoder_ids = np.full((len(ids), 12), gen.pad_token_id, dtype=np.int64)  # (N, T)
    for row, tokens in enumerate(expected):
        decoder_ids[row, : len(tokens)] = [model.config.bos_token_id, *tokens[:-1]]
    with torch.no_grad():
        reference = model(
            torch.from_numpy(ids), torch.from_numpy(mask), torch.from_numpy(decoder_ids)
        )
    logits = gen.model.all_logits(ids, mask, decoder_ids)
    assert np.abs(logits - reference.logits.numpy()).max() < 1e-4


@pytest.mark.parametrize("variant", VARIANTS)
def test_beam_search_and_sampling_run_unchanged(bundles, variant):
    gen = runtime.load(bundles[variant])
    beams = gen.generate(
        list(SOURCES[:2]),
        runtime.GenerationConfig(max_new_tokens=8, num_beams=3, num_return_sequences=2),
    )
    assert len(beams) == 4 and all(out.token_ids for out in beams)
    assert beams[0].token_ids != beams[1].token_ids  # two different beams of the first source
    greedy = gen.generate(SOURCES[0], runtime.GenerationConfig(max_new_tokens=8))[0]
    assert (
        gen.score(beams[0].text, context=SOURCES[0]).total
        >= gen.score(greedy.text, context=SOURCES[0]).total - 1e-3
    )
    sampled = runtime.GenerationConfig(max_new_tokens=8, do_sample=True, seed=3, top_k=50)
    first = [out.text for out in gen.generate(list(SOURCES), sampled)]
    assert first == [out.text for out in gen.generate(list(SOURCES), sampled)]


def test_attention_rows_sum_to_one_over_the_real_source_tokens(bundles):
    gen = runtime.load(bundles["attention"])
    model = _model(bundles, "attention")
    ids, mask = _sources(gen)
    decoder_ids = np.full((len(ids), 5), model.config.bos_token_id, dtype=np.int64)
    alpha = gen.model.cross_attention(ids, mask, decoder_ids)
    assert alpha.shape == (len(ids), 5, ids.shape[1])
    np.testing.assert_allclose(alpha.sum(-1), 1.0, atol=1e-5)
    assert np.all(alpha[mask[:, None, :].repeat(5, 1) == 0] == 0)
    with torch.no_grad():
        reference = model(
            torch.from_numpy(ids), torch.from_numpy(mask), torch.from_numpy(decoder_ids)
        )
    np.testing.assert_allclose(alpha, reference.attention.numpy(), atol=1e-5)


def test_context_model_has_no_attention_to_show(bundles):
    gen = runtime.load(bundles["context"])
    ids, mask = _sources(gen)
    with pytest.raises(ValueError, match="must have attention"):
        gen.model.cross_attention(ids, mask, ids[:, :2])


def test_alignment_reads_the_attention_models_weights(bundles):
    from runtime.alignment import alignment

    gen = runtime.load(bundles["attention"])
    output = gen.generate(SOURCES[0], runtime.GenerationConfig(max_new_tokens=6))[0].text
    found = alignment(gen, SOURCES[0], output or "light")
    assert found.weights.shape == (len(found.output_tokens), len(found.source_tokens))
    np.testing.assert_allclose(found.weights.sum(-1), 1.0, atol=1e-5)


def test_speed_bench_runs_a_model_that_would_stop_at_once(tmp_path):
    from bench import seq2seq as bench

    run = _tiny_run(tmp_path / "run", "attention")
    weights = torch.load(run / model_definition.WEIGHTS_FILE)
    weights["output_bias"][model_definition.load_config(run).eos_token_id] = 100.0
    torch.save(weights, run / model_definition.WEIGHTS_FILE)
    source = np.random.default_rng(0).integers(3, 8000, size=(1, bench.SOURCE_TOKENS))
    runners = bench.gru_runners(bench.prepare_gru(tmp_path, "attention", run), 1, source)
    assert set(runners) == {("pytorch", "fp32"), ("scriptorium", "fp32"), ("scriptorium", "int8")}
    for run_once in runners.values():
        run_once()  # each decodes exactly NEW_TOKENS tokens, EOS suppressed
