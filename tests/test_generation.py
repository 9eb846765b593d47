"""The runtime's generation against transformers' `generate`, on tiny random models.

Each architecture is exported once with optimum-onnx's `main_export` into a plain export
directory, which `runtime.load` opens by inferring its manifest; the same checkpoint is loaded in
PyTorch as the reference. Greedy and beam search must give identical tokens, also for batches of
prompts of different lengths.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from optimum.exporters.onnx import main_export
from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM, AutoTokenizer

import runtime
from tests.tiny_models import PROMPTS, make_checkpoint

ARCHS = ["gpt2", "bart", "t5", "marian"]


@pytest.fixture(scope="module", params=ARCHS)
def pair(request, tmp_path_factory):
    """(runtime generator, PyTorch model, HF tokenizer, arch) for one tiny architecture."""
    arch = request.param
    root = tmp_path_factory.mktemp(arch)
    checkpoint = make_checkpoint(arch, root / "checkpoint")
    seq2seq = arch != "gpt2"
    task = "text2text-generation-with-past" if seq2seq else "text-generation-with-past"
    main_export(str(checkpoint), output=root / "onnx", task=task, do_validation=False)
    auto = AutoModelForSeq2SeqLM if seq2seq else AutoModelForCausalLM
    model = auto.from_pretrained(checkpoint).eval()
    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    if not seq2seq:
        tokenizer.padding_side = "left"
        tokenizer.pad_token = tokenizer.eos_token
    return runtime.load(root / "onnx", threads=1), model, tokenizer, root / "onnx"


def reference(model, tokenizer, prompts, **kwargs) -> list[list[int]]:
    """transformers' generated tokens per returned sequence, cut after the first EOS."""
    batch = tokenizer(prompts, return_tensors="pt", padding=True)
    with torch.no_grad():
        out = model.generate(**batch, pad_token_id=tokenizer.pad_token_id, **kwargs)
    start = 1 if model.config.is_encoder_decoder else batch["input_ids"].shape[1]
    eos = model.generation_config.eos_token_id
    result = []
    for row in out[:, start:].tolist():
        result.append(row[: row.index(eos) + 1] if eos in row else row)
    return result


def test_greedy_matches_transformers_one_prompt_at_a_time(pair):
    gen, model, tokenizer, _ = pair
    config = runtime.GenerationConfig(max_new_tokens=16)
    for prompt in PROMPTS:
        ours = gen.generate(prompt, config)[0].token_ids
        assert ours == reference(model, tokenizer, [prompt], max_new_tokens=16, do_sample=False)[0]


def test_greedy_matches_transformers_on_padded_batches(pair):
    gen, model, tokenizer, _ = pair
    config = runtime.GenerationConfig(max_new_tokens=16)
    for start in range(0, len(PROMPTS), 5):
        prompts = PROMPTS[start : start + 5]
        ours = [out.token_ids for out in gen.generate(prompts, config)]
        assert ours == reference(model, tokenizer, prompts, max_new_tokens=16, do_sample=False)


@pytest.mark.parametrize(
    "beams, returned, length_penalty, early_stopping",
    [(3, 1, 1.0, False), (4, 2, 0.6, True), (2, 2, 1.5, "never")],
)
def test_beam_search_matches_transformers(pair, beams, returned, length_penalty, early_stopping):
    gen, model, tokenizer, _ = pair
    settings = dict(
        max_new_tokens=12,
        num_beams=beams,
        num_return_sequences=returned,
        length_penalty=length_penalty,
        early_stopping=early_stopping,
    )
    config = runtime.GenerationConfig(**settings)
    for start in range(0, 10, 5):
        prompts = PROMPTS[start : start + 5]
        outs = gen.generate(prompts, config)
        assert [o.token_ids for o in outs] == reference(
            model, tokenizer, prompts, do_sample=False, **settings
        )
    for out in outs:  # per-token log-probabilities add up to the unpenalised beam score
        assert len(out.logprobs) == len(out.token_ids)
        length = len(out.token_ids) ** length_penalty
        assert out.score == pytest.approx(sum(out.logprobs) / length, rel=1e-4, abs=1e-4)


def test_greedy_logprobs_match_transformers_transition_scores(pair):
    """Each token's reported log-probability is the model's own, as transformers normalises it."""
    gen, model, tokenizer, _ = pair
    for prompt in PROMPTS[:5]:
        ours = gen.generate(prompt, runtime.GenerationConfig(max_new_tokens=8))[0]
        batch = tokenizer([prompt], return_tensors="pt")
        with torch.no_grad():
            out = model.generate(
                **batch,
                max_new_tokens=8,
                do_sample=False,
                pad_token_id=tokenizer.pad_token_id,
                output_logits=True,
                return_dict_in_generate=True,
            )
        scores = model.compute_transition_scores(out.sequences, out.logits, normalize_logits=True)
        theirs = scores[0, : len(ours.token_ids)].numpy()
        np.testing.assert_allclose(ours.logprobs, theirs, rtol=1e-4, atol=1e-4)


def test_penalties_match_transformers(pair):
    gen, model, tokenizer, _ = pair
    settings = dict(max_new_tokens=20, repetition_penalty=1.3, no_repeat_ngram_size=2)
    config = runtime.GenerationConfig(min_new_tokens=5, **settings)
    for prompt in PROMPTS[:10]:
        ours = gen.generate(prompt, config)[0].token_ids
        ref = reference(model, tokenizer, [prompt], do_sample=False, min_new_tokens=5, **settings)
        assert ours == ref[0]


def test_forced_eos_token_matches_transformers(pair):
    gen, model, tokenizer, _ = pair
    eos = model.generation_config.eos_token_id
    config = runtime.GenerationConfig(max_new_tokens=6, num_beams=2, forced_eos_token_id=eos)
    ours = [out.token_ids for out in gen.generate(PROMPTS[:4], config)]
    ref = reference(
        model, tokenizer, PROMPTS[:4], max_new_tokens=6, num_beams=2, forced_eos_token_id=eos
    )
    assert ours == ref
    assert all(tokens[-1] == eos for tokens in ours)


def test_io_binding_path_gives_the_same_tokens(pair):
    """The device-resident KV cache path (used with CUDA) exercised on CPU."""
    gen, _, _, directory = pair
    bound = runtime.load(directory, threads=1, io_binding=True)
    for config in (
        runtime.GenerationConfig(max_new_tokens=10),
        runtime.GenerationConfig(max_new_tokens=10, num_beams=3, num_return_sequences=2),
        runtime.GenerationConfig(max_new_tokens=10, do_sample=True, top_p=0.9, seed=1),
    ):
        ours = [o.token_ids for o in bound.generate(PROMPTS[:4], config)]
        assert ours == [o.token_ids for o in gen.generate(PROMPTS[:4], config)]


def test_seq2seq_select_shares_source_tensors_within_a_source(pair):
    """Reordering beams of one source reuses the cross-attention cache; moving a row to another
    source copies it (and both give the rows' own values)."""
    gen, _, _, _ = pair
    if gen.manifest.task != "seq2seq":
        pytest.skip("causal LMs have no source-side cache")
    _, input_ids, mask = gen._batch(PROMPTS[:2], None)  # right-padded sources, (2, S)
    _, state = gen.model.start(input_ids, mask)
    beams = gen.model.select(state, np.array([0, 0, 1, 1]))
    reordered = gen.model.select(beams, np.array([1, 0, 3, 3]))
    assert reordered.cross_past[0] is beams.cross_past[0]
    assert reordered.encoder_hidden is beams.encoder_hidden
    swapped = gen.model.select(beams, np.array([2, 3, 0, 1]))
    assert swapped.source_row.tolist() == [1, 1, 0, 0]
    np.testing.assert_array_equal(swapped.cross_past[0][0], beams.cross_past[0][2])
    np.testing.assert_array_equal(swapped.encoder_mask[2], mask[0])
