"""`gen.chat` / `gen.stream_chat` against transformers, on a tiny random Llama chat model.

The model (tests/tiny_models.py `make_chat_checkpoint`: a ChatML template, <|im_end|> ends a turn)
is exported once with optimum-onnx's `main_export`; `runtime.load` opens the export directory and
reads the chat template from it. The reference is transformers' greedy `generate` on
`tokenizer.apply_chat_template(..., add_generation_prompt=True)`, stopped at <|im_end|>.
"""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from optimum.exporters.onnx import main_export
from transformers import AutoModelForCausalLM, AutoTokenizer

import runtime

CONVERSATIONS = [
    [{"role": "user", "content": "Hello"}],
    [{"role": "user", "content": "In the beginning"}],
    [{"role": "user", "content": "Give us this day our daily bread"}],
    [{"role": "user", "content": "Καλημέρα ☕"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Why"}],
    [
        {"role": "user", "content": "Name a river."},
        {"role": "assistant", "content": "The Jordan."},
        {"role": "user", "content": ""},
    ],
]
END = 2  # <|im_end|>


@pytest.fixture(scope="module")
def chat_model(tmp_path_factory):
    """(runtime generator, PyTorch model, HF tokenizer, export directory)."""
    from tests.tiny_models import make_chat_checkpoint

    root = tmp_path_factory.mktemp("chat")
    checkpoint = make_chat_checkpoint(root / "checkpoint")
    main_export(
        str(checkpoint), output=root / "onnx", task="text-generation-with-past", do_validation=False
    )
    model = AutoModelForCausalLM.from_pretrained(checkpoint).eval()
    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    return runtime.load(root / "onnx", threads=1), model, tokenizer, root / "onnx"


def prompt_ids(tokenizer, messages) -> list[int]:
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    return list(ids["input_ids"] if isinstance(ids, dict) else ids)


def reference(model, tokenizer, messages, max_new_tokens, eos=END) -> list[int]:
    """transformers' greedy reply tokens, up to and including the end-of-turn token."""
    ids = torch.tensor([prompt_ids(tokenizer, messages)])
    with torch.no_grad():
        out = model.generate(
            ids, max_new_tokens=max_new_tokens, do_sample=False, eos_token_id=eos, pad_token_id=0
        )
    return out[0, ids.shape[1] :].tolist()


def test_the_export_is_a_chat_model_whose_rendering_is_transformers(chat_model):
    gen, _, tokenizer, _ = chat_model
    assert gen.is_chat_model and gen.end_of_turn_token_ids == (END,)
    for messages in CONVERSATIONS:
        for add in (True, False):
            expected = tokenizer.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=add
            )
            assert gen.apply_chat_template(messages, add_generation_prompt=add) == expected
        assert gen.count_chat_tokens(messages) == len(prompt_ids(tokenizer, messages))


def test_greedy_chat_equals_transformers_generate(chat_model):
    gen, model, tokenizer, _ = chat_model
    reasons = set()
    for messages in CONVERSATIONS:
        out = gen.chat(messages, runtime.GenerationConfig(max_new_tokens=40))[0]
        expected = reference(model, tokenizer, messages, 40)
        assert out.token_ids == expected
        assert out.text == tokenizer.decode(expected, skip_special_tokens=True)
        assert "<|im_end|>" not in out.text and "<|im_start|>" not in out.text
        assert out.finish_reason == ("eos" if expected[-1] == END else "length")
        assert out.prompt_tokens == len(prompt_ids(tokenizer, messages))
        reasons.add(out.finish_reason)
    assert reasons == {"eos", "length"}  # the model ends some turns itself and not others


def test_stream_chat_gives_the_same_reply_token_by_token(chat_model):
    gen, _, _, _ = chat_model
    config = runtime.GenerationConfig(max_new_tokens=30, do_sample=True, top_k=20, seed=7)
    for messages in CONVERSATIONS[:3]:
        events = list(gen.stream_chat(messages, config))
        whole = gen.chat(messages, config)[0]
        assert "".join(e.text for e in events) == whole.text
        assert [e.token_id for e in events] == whole.token_ids
        assert events[-1].finish_reason == whole.finish_reason
        assert all(len(e.alternatives) == 5 for e in events)


def test_seeded_sampling_is_reproducible_and_seed_dependent(chat_model):
    gen, _, _, _ = chat_model
    messages = CONVERSATIONS[0]
    config = runtime.GenerationConfig(max_new_tokens=20, do_sample=True, num_return_sequences=3)
    first = gen.chat(messages, config.replace(seed=1))
    assert [o.token_ids for o in first] == [
        o.token_ids for o in gen.chat(messages, config.replace(seed=1))
    ]
    assert [o.token_ids for o in first] != [
        o.token_ids for o in gen.chat(messages, config.replace(seed=2))
    ]
    assert len(first) == 3


def test_every_end_of_turn_token_ends_the_reply(chat_model, tmp_path):
    """generation_config.json's eos_token_id list (as Llama 3's) gives several end tokens."""
    gen, model, tokenizer, directory = chat_model
    messages = CONVERSATIONS[1]
    tokens = reference(model, tokenizer, messages, 40)
    other = next(t for t in tokens[3:] if t != END and t not in tokens[:3])  # mid-reply token
    copy = shutil.copytree(directory, tmp_path / "two-ends")
    config = json.loads((copy / "generation_config.json").read_text())
    (copy / "generation_config.json").write_text(
        json.dumps({**config, "eos_token_id": [END, other]})
    )
    two_ends = runtime.load(copy, threads=1)
    assert two_ends.end_of_turn_token_ids == (END, other)
    out = two_ends.chat(messages, runtime.GenerationConfig(max_new_tokens=40))[0]
    assert out.token_ids == tokens[: tokens.index(other) + 1]
    assert out.token_ids == reference(model, tokenizer, messages, 40, eos=[END, other])
    assert out.finish_reason == "eos"


def test_a_conversation_over_the_context_is_refused_before_generating(chat_model):
    gen, _, _, _ = chat_model
    long = [{"role": "user", "content": "In the beginning " * 40}]
    tokens = gen.count_chat_tokens(long)
    assert tokens >= gen.context_length == 128
    with pytest.raises(
        ValueError, match=f"the conversation is {tokens} tokens; the model's context is 128"
    ):
        gen.chat(long, runtime.GenerationConfig(max_new_tokens=4))
    with pytest.raises(ValueError, match="the conversation is"):
        gen.stream_chat(long, runtime.GenerationConfig(max_new_tokens=4))  # before any event
    short = gen.chat(
        [{"role": "user", "content": "Hi"}], runtime.GenerationConfig(max_new_tokens=200)
    )[0]
    assert short.finish_reason in ("eos", "context")  # 200 new tokens do not fit: capped


@pytest.mark.parametrize(
    "messages, config, message",
    [
        ([{"role": "bot", "content": "x"}], None, "`messages[0]['role']` must be one of"),
        ([{"role": "user", "content": 3}], None, "`messages[0]['content']` must be a str"),
        ([], None, "`messages` must be a non-empty list"),
        (CONVERSATIONS[0], runtime.GenerationConfig(num_beams=2), "`num_beams` must be 1 for chat"),
        (CONVERSATIONS[0], runtime.GenerationConfig(top_p=1.5), "`top_p` must be in (0, 1]"),
    ],
)
def test_bad_arguments_raise_value_error(chat_model, messages, config, message):
    gen, _, _, _ = chat_model
    with pytest.raises(ValueError) as caught:
        gen.chat(messages, config)
    assert message in str(caught.value)


def test_a_model_without_a_template_is_not_a_chat_model(chat_model, tmp_path):
    _, _, _, directory = chat_model
    copy = shutil.copytree(directory, tmp_path / "plain")
    (copy / "chat_template.jinja").unlink()
    plain = runtime.load(copy, threads=1)
    assert not plain.is_chat_model
    for call in (
        lambda: plain.chat(CONVERSATIONS[0]),
        lambda: plain.stream_chat(CONVERSATIONS[0]),
        lambda: plain.apply_chat_template(CONVERSATIONS[0]),
    ):
        with pytest.raises(
            ValueError, match="is not a chat model: its bundle has no chat template"
        ):
            call()
    assert plain.generate("Hello", runtime.GenerationConfig(max_new_tokens=4))[0].token_ids


def test_a_bundle_carries_its_chat_object_as_the_gguf_importer_writes_it(chat_model, tmp_path):
    """manifest.json's `chat`: {"template", "end_of_turn_token_ids"}; the template's special
    tokens are then the tokens of the manifest's special token ids."""
    from runtime.bundle import infer_manifest, sha256_of

    _, model, tokenizer, directory = chat_model
    bundle = shutil.copytree(directory, tmp_path / "bundle")
    manifest = {k: v for k, v in infer_manifest(bundle).to_json().items() if k != "inferred"}
    manifest["files"] = {
        name: {"sha256": sha256_of(bundle / name)} for name in ("model.onnx", "tokenizer.json")
    }
    template = (
        "{{ bos_token }}{% for m in messages %}{{ m.role }}: {{ m.content }}{{ eos_token }}"
        "{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}"
    )
    manifest["chat"] = {"template": template, "end_of_turn_token_ids": [END]}
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    gen = runtime.load(bundle, threads=1)
    messages = CONVERSATIONS[0]
    assert gen.apply_chat_template(messages) == "<|im_start|>user: Hello<|im_end|>assistant:"
    out = gen.chat(messages, runtime.GenerationConfig(max_new_tokens=40))[0]
    ids = torch.tensor(
        [tokenizer(gen.apply_chat_template(messages), add_special_tokens=False)["input_ids"]]
    )
    with torch.no_grad():
        expected = model.generate(
            ids, max_new_tokens=40, do_sample=False, eos_token_id=END, pad_token_id=0
        )
    assert out.token_ids == expected[0, ids.shape[1] :].tolist()
