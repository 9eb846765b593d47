"""bench.ct2_peer: CTranslate2, converted from the same checkpoint, gives transformers' greedy and
beam tokens on the same weights, and exactly the requested number of tokens at every setting the
decode and seq2seq benchmarks time."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import BartForConditionalGeneration, GPT2LMHeadModel

from bench import ct2_peer

pytest.importorskip("ctranslate2")

NEW_TOKENS = 12


@pytest.fixture(scope="module")
def converted(tiny_checkpoint, tmp_path_factory):
    """arch -> (checkpoint, {precision: CTranslate2 model dir}) for tiny GPT-2 and BART."""
    out = {}
    for arch in ("gpt2", "bart"):
        work = tmp_path_factory.mktemp(f"ct2-{arch}")
        checkpoint = tiny_checkpoint(arch)
        out[arch] = checkpoint, {p: ct2_peer.convert(checkpoint, work, p) for p in ("fp32", "int8")}
    return out


def _hf(model, ids: np.ndarray, exact_length: bool = True, **kwargs) -> list[list[int]]:
    """transformers' tokens after the prompt (decoder-only) or the start token (seq2seq), padding
    left out; exactly NEW_TOKENS of them, or up to NEW_TOKENS with `exact_length=False`."""
    input_ids = torch.tensor(ids)
    with torch.no_grad():
        out = model.generate(
            input_ids=input_ids,
            attention_mask=torch.ones_like(input_ids),
            max_new_tokens=NEW_TOKENS,
            min_new_tokens=NEW_TOKENS if exact_length else 0,
            do_sample=False,
            pad_token_id=model.config.pad_token_id or 0,
            **kwargs,
        )
    start = 1 if model.config.is_encoder_decoder else ids.shape[1]
    if exact_length:
        return out[:, start:].tolist()
    return [[t for t in row if t != model.config.pad_token_id] for row in out[:, start:].tolist()]


def test_decoder_greedy_matches_transformers_on_the_same_weights(converted):
    checkpoint, dirs = converted["gpt2"]
    model = GPT2LMHeadModel.from_pretrained(checkpoint).eval()
    prompts = np.random.default_rng(0).integers(1, model.config.vocab_size, size=(3, 7))
    generator = ct2_peer.generator(dirs["fp32"], "fp32", threads=1)
    ours = ct2_peer.generate_ids(generator, ct2_peer.vocabulary(dirs["fp32"]), prompts, NEW_TOKENS)
    assert ours == _hf(model, prompts)


@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_decoder_sampling_gives_the_requested_length_reproducibly(converted, precision):
    _, dirs = converted["gpt2"]
    tokens = ct2_peer.vocabulary(dirs[precision])
    prompts = np.random.default_rng(1).integers(1, len(tokens), size=(4, 5))
    settings = dict(do_sample=True, temperature=0.8, top_k=50, top_p=0.95)
    samples = []
    for _ in range(2):
        generator = ct2_peer.generator(dirs[precision], precision, threads=1, seed=3)
        samples.append(ct2_peer.generate_ids(generator, tokens, prompts, NEW_TOKENS, **settings))
    first, again = samples
    assert [len(row) for row in first] == [NEW_TOKENS] * 4
    assert first == again
    greedy = ct2_peer.generate_ids(generator, tokens, prompts, NEW_TOKENS)
    assert first != greedy  # the sampling settings reach CTranslate2


@pytest.mark.parametrize("num_beams", [1, 4])
def test_seq2seq_greedy_and_beam_match_transformers_on_the_same_weights(converted, num_beams):
    checkpoint, dirs = converted["bart"]
    model = BartForConditionalGeneration.from_pretrained(checkpoint).eval()
    source = np.random.default_rng(0).integers(5, model.config.vocab_size, size=(4, 9))
    translator = ct2_peer.translator(dirs["fp32"], "fp32", threads=1)
    tokens = ct2_peer.vocabulary(dirs["fp32"], "source")
    # Greedy also with the benchmark's forced length; beam search as the libraries define it.
    exact = num_beams == 1
    ours = ct2_peer.translate_ids(translator, tokens, source, NEW_TOKENS, num_beams, exact)
    assert ours == _hf(model, source, exact_length=exact, num_beams=num_beams)


def test_int8_seq2seq_gives_the_requested_length(converted):
    _, dirs = converted["bart"]
    translator = ct2_peer.translator(dirs["int8"], "int8", threads=1)
    tokens = ct2_peer.vocabulary(dirs["int8"], "source")
    source = np.random.default_rng(2).integers(5, len(tokens), size=(1, 6))
    for num_beams in (1, 4):
        (ids,) = ct2_peer.translate_ids(translator, tokens, source, NEW_TOKENS, num_beams)
        assert len(ids) == NEW_TOKENS


def test_conversion_is_cached_and_precision_checked(converted, tmp_path):
    checkpoint, dirs = converted["gpt2"]
    model_bin = dirs["int8"] / "model.bin"
    before = model_bin.stat().st_mtime_ns
    assert ct2_peer.convert(checkpoint, dirs["int8"].parent, "int8") == dirs["int8"]
    assert model_bin.stat().st_mtime_ns == before
    assert model_bin.stat().st_size < (dirs["fp32"] / "model.bin").stat().st_size / 2
    with pytest.raises(ValueError, match="`precision` must be one of"):
        ct2_peer.convert(checkpoint, tmp_path, "int4")


def test_the_decode_benchmarks_checkpoint_layout_converts_and_loads(tmp_path):
    """bench.decode's checkpoint: word-level tokenizer with EOS but no unknown token."""
    from transformers import GPT2Config

    from bench import common

    config = GPT2Config(
        n_layer=1, n_embd=16, n_head=2, vocab_size=40, bos_token_id=0, eos_token_id=0
    )
    checkpoint = tmp_path / "checkpoint"
    torch.manual_seed(0)
    GPT2LMHeadModel(config).eval().save_pretrained(checkpoint)
    tokenizer = common.word_tokenizer(config.vocab_size, ["<|endoftext|>"])
    common.save_tokenizer(
        tokenizer, checkpoint, bos_token="<|endoftext|>", eos_token="<|endoftext|>"
    )
    model_dir = ct2_peer.convert(checkpoint, tmp_path, "int8")
    tokens = ct2_peer.vocabulary(model_dir)
    assert tokens[:3] == ["<|endoftext|>", "t1", "t2"]
    generator = ct2_peer.generator(model_dir, "int8", threads=1)
    prompts = np.arange(1, 9).reshape(2, 4)
    assert [len(row) for row in ct2_peer.generate_ids(generator, tokens, prompts, 20)] == [20, 20]
