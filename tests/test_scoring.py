"""`gen.score` / `gen.score_ids` (runtime/scoring.py) against transformers on the same weights.

Tiny random checkpoints (tests/tiny_models.py) are exported with optimum's `main_export` (every
architecture) and, for GPT-2, as a Scriptorium bundle whose lean graph keeps its cache in shared
buffers and has `logits_to_keep`; the PyTorch model gives the reference log-softmax. The shipped
fp32 bible-lm bundle checks that scoring a generated text gives back the generation's own
log-probabilities.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from optimum.exporters.onnx import main_export
from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM, AutoTokenizer

import runtime
from tests.tiny_models import make_checkpoint

BIBLE_LM = Path(__file__).resolve().parents[1] / "models" / "bible-lm" / "fp32"
# (context, text): plain, a context with a trailing space (moved to the text), empty context.
PAIRS = [
    ("In the beginning", " God created the heavens and the earth."),
    ("The quick brown fox ", "jumps over the lazy dog"),
    ("", "Let there be light"),
]


@pytest.fixture(scope="module", params=["gpt2", "gpt2-lean", "bart", "t5", "marian"])
def pair(request, tmp_path_factory):
    """(runtime generator, PyTorch model, HF tokenizer) for one tiny model and graph layout."""
    arch = request.param.split("-")[0]
    root = tmp_path_factory.mktemp(request.param)
    checkpoint = make_checkpoint(arch, root / "checkpoint")
    seq2seq = arch != "gpt2"
    if request.param == "gpt2-lean":
        from export import export_bundle

        export_bundle(checkpoint, root / "bundle", progress=False)
        gen = runtime.load(root / "bundle", threads=1)
        assert gen.model.shared_cache and gen.model.keeps_last_logits
    else:
        task = "text2text-generation-with-past" if seq2seq else "text-generation-with-past"
        main_export(str(checkpoint), output=root / "onnx", task=task, do_validation=False)
        gen = runtime.load(root / "onnx", threads=1)
    auto = AutoModelForSeq2SeqLM if seq2seq else AutoModelForCausalLM
    return gen, auto.from_pretrained(checkpoint).eval(), AutoTokenizer.from_pretrained(checkpoint)


def _reference(model, tokenizer, gen, context: str, text: str) -> tuple[list[int], np.ndarray]:
    """transformers' scored token ids and their log-probabilities, by the rule of runtime/scoring.py
    (lm-evaluation-harness's: tokenize context + text, score the tokens past the context's)."""
    with torch.no_grad():
        if model.config.is_encoder_decoder:
            source = tokenizer(context, return_tensors="pt")
            labels = tokenizer(text_target=text, return_tensors="pt")["input_ids"]
            logits = model(**source, labels=labels).logits[0]  # (T, V)
            target = labels[0].tolist()
            logprobs = torch.log_softmax(logits.float(), -1)[torch.arange(len(target)), target]
            return target, logprobs.numpy()
        spaces = len(context) - len(context.rstrip())
        if spaces:
            context, text = context[:-spaces], context[-spaces:] + text
        head = tokenizer(context, add_special_tokens=False)["input_ids"]
        whole = tokenizer(context + text, add_special_tokens=False)["input_ids"]
        if not head:  # no BOS in these tiny tokenizers: condition on EOS, as the harness does
            head, whole = [gen.eos_token_id], [gen.eos_token_id, *whole]
        logits = model(torch.tensor([whole])).logits[0]  # (T, V)
        logprobs = torch.log_softmax(logits.float(), -1)
        target = whole[len(head) :]
        picked = logprobs[torch.arange(len(head) - 1, len(whole) - 1), target]
        return target, picked.numpy()


@pytest.mark.parametrize("context, text", PAIRS)
def test_score_matches_transformers(pair, context, text):
    gen, model, tokenizer = pair
    if gen.task == "seq2seq" and not context:
        with pytest.raises(ValueError, match="must not be empty"):
            gen.score(text, context)
        return
    score = gen.score(text, context, top=3)
    target, expected = _reference(model, tokenizer, gen, context, text)
    assert list(score.token_ids) == target
    np.testing.assert_allclose(score.logprobs, expected, atol=2e-4, rtol=0)
    assert score.total == pytest.approx(float(expected.sum()), abs=1e-3)
    assert len(score.alternatives) == len(target)
    for alternatives, logprob in zip(score.alternatives, score.logprobs):
        assert [lp for _, lp in alternatives] == sorted(
            (lp for _, lp in alternatives), reverse=True
        )
        assert alternatives[0][1] >= logprob - 1e-6  # the best alternative is at least as likely


def test_causal_tokens_join_to_the_text_and_score_ids_agrees(pair):
    gen, _, tokenizer = pair
    if gen.task == "seq2seq":
        pytest.skip("causal LMs only")
    context, text = PAIRS[1]
    score = gen.score(text, context)
    assert "".join(score.tokens) == " " + text  # the context's trailing space moved to the text
    whole = tokenizer(context.rstrip() + " " + text, add_special_tokens=False)["input_ids"]
    again = gen.score_ids(whole, start=len(score.context_ids))
    assert again.token_ids == score.token_ids
    np.testing.assert_allclose(again.logprobs, score.logprobs, atol=1e-5, rtol=0)


def test_scoring_a_generation_gives_its_logprobs_on_a_shipped_bundle():
    gen = runtime.load(BIBLE_LM, threads=1)
    prompt = "And God said,"
    config = runtime.GenerationConfig(max_new_tokens=12, do_sample=True, seed=3, top_k=40)
    (out,) = gen.generate(prompt, config)
    ids = gen.encode_prompt(prompt)
    score = gen.score_ids(ids + out.token_ids, start=len(ids))
    assert list(score.token_ids) == out.token_ids
    np.testing.assert_allclose(score.logprobs, out.logprobs, atol=1e-4, rtol=0)
    # The same by text: the generated tokens are how context + text tokenize here.
    by_text = gen.score(out.text, prompt)
    if list(by_text.token_ids) == out.token_ids:
        assert by_text.total == pytest.approx(sum(out.logprobs), abs=1e-3)
    assert by_text.context_ids == tuple(ids)


def test_bad_arguments_raise_value_errors():
    gen = runtime.load(BIBLE_LM, threads=1)
    with pytest.raises(ValueError, match="`text` must not be empty"):
        gen.score("", "In the beginning")
    with pytest.raises(ValueError, match="`context` must be a str"):
        gen.score("x", context=3)
    with pytest.raises(ValueError, match=r"`start` must be an int in \[1, 2\], got 0"):
        gen.score_ids([0, 5, 6], start=0)
    with pytest.raises(ValueError, match="`ids` must be a non-empty list of token ids"):
        gen.score_ids([0, -1])
    with pytest.raises(ValueError, match="`ids` must be below the vocabulary size 8000"):
        gen.score_ids([0, 8000])
    with pytest.raises(ValueError, match="`ids` must be at most the model's context of 128"):
        gen.score_ids([0] * 129)
    with pytest.raises(ValueError, match="`source_ids` must be None for a causal LM"):
        gen.score_ids([0, 5], source_ids=[1])


# ---- serve/scoring.py: echo and token-id prompts, on the shipped bundle --------------------------


def test_prompt_list_reads_the_four_shapes_and_refuses_others():
    from serve.scoring import prompt_list

    assert prompt_list("a") == ["a"]
    assert prompt_list(["a", "b"]) == ["a", "b"]
    assert prompt_list([3, 4]) == [[3, 4]]
    assert prompt_list([[3], [4, 5]]) == [[3], [4, 5]]
    for bad in ([], [[]], ["a", 3], [True, 2], [-1], {"a": 1}, None, [[3], "a"]):
        with pytest.raises(ValueError, match="`prompt` must be a string"):
            prompt_list(bad)


def test_echo_of_a_text_prompt_shows_its_tokens_with_their_logprobs():
    from serve import api
    from serve.scoring import echo_choice

    gen = runtime.load(BIBLE_LM, threads=1)
    prompt = "In the beginning God created"
    choice = echo_choice(gen, prompt, None, logprobs=2).answer()  # max_tokens: 0
    logprobs = choice["logprobs"]
    assert choice["text"] == prompt and choice["finish_reason"] == "length"
    assert "".join(logprobs["tokens"]) == prompt  # BOS is context, not shown
    score = gen.score(prompt)  # conditioned on BOS, the same tokens
    assert logprobs["token_logprobs"] == list(score.logprobs)
    assert logprobs["text_offset"] == [0, 2, 6, 16, 20]
    assert [len(top) for top in logprobs["top_logprobs"]] == [2] * 5
    # Echo in front of a generated completion: offsets run on over the completion.
    config = runtime.GenerationConfig(max_new_tokens=5)
    (output,) = gen.generate(prompt, config)
    generated = api.output_choice(output, 0, gen.tokenizer, 1)
    echoed = echo_choice(gen, prompt, generated, logprobs=1).answer()
    assert echoed["text"] == prompt + output.text
    tokens, offsets = echoed["logprobs"]["tokens"], echoed["logprobs"]["text_offset"]
    assert len(tokens) == 5 + len(output.token_ids) == len(offsets)
    assert offsets[5] == len(prompt)
    assert echoed["logprobs"]["token_logprobs"][5:] == output.logprobs
    assert echo_choice(gen, prompt, generated, logprobs=None).text == prompt + output.text


def test_echo_of_token_ids_scores_every_id_after_the_first():
    from serve.scoring import check_token_prompt, echo_choice

    gen = runtime.load(BIBLE_LM, threads=1)
    ids = gen.tokenizer.encode("And God said, Let there be light", add_special_tokens=False).ids
    choice = echo_choice(gen, ids, None, logprobs=0).answer()
    logprobs = choice["logprobs"]
    assert logprobs["tokens"] == [gen.tokenizer.decode([i]) for i in ids]
    assert logprobs["token_logprobs"][0] is None and logprobs["top_logprobs"] is None
    assert logprobs["token_logprobs"][1:] == list(gen.score_ids(ids).logprobs)
    assert choice["text"] == "And God said, Let there be light"
    # The same ids generate like the same text (gen.generate takes encoded prompts as lists).
    config = runtime.GenerationConfig(max_new_tokens=6)
    by_ids = gen.generate([[0, *ids]], config)[0]
    assert by_ids.token_ids == gen.generate("And God said, Let there be light", config)[0].token_ids
    with pytest.raises(ValueError, match="`prompt` token ids must be below 8000, got 9000"):
        check_token_prompt(gen, [9000])
    with pytest.raises(ValueError, match="`prompt` is 128 tokens"):
        check_token_prompt(gen, [5] * 128)


def test_scored_completion_answers_max_tokens_zero_for_every_prompt():
    from serve.scoring import prompt_list, scored_completion

    gen = runtime.load(BIBLE_LM, threads=1)
    ids = gen.tokenizer.encode("Jesus wept.", add_special_tokens=False).ids
    prompts = prompt_list([ids, ids[:2]])
    result = scored_completion(gen, prompts, logprobs=0, copies=2)
    assert [c.index for c in result["choices"]] == [0, 1, 2, 3]
    assert result["usage"].answer() == {
        "prompt_tokens": len(ids) + 2,
        "completion_tokens": 0,
        "total_tokens": len(ids) + 2,
    }
    first = result["choices"][0].logprobs.token_logprobs
    assert first[0] is None and first[1:] == list(gen.score_ids(ids).logprobs)
    assert result["choices"][3].text == gen.tokenizer.decode(ids[:2])
