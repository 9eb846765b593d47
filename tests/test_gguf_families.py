"""GGUF architectures beyond llama and qwen2, as users get them: tiny random transformers
checkpoints converted by llama.cpp's own convert_hf_to_gguf.py (tests/gguf_convert.py), imported
by `export_gguf`, and compared with transformers running the checkpoint itself.

- f32 files: greedy continuations through `runtime.load` token for token identical to
  transformers' (`min_new_tokens` on both sides), and logits over prompt and continuation
  (longer than gemma2's sliding window) within 1e-4 of the logit scale.
- q8_0 files (every projection and the token table in 8-bit blocks, carried over), at accuracy
  level 0 (float activations): within 5 % of the logit scale and at least 90 % of teacher-forced
  top-1 picks equal to transformers' on the float weights; the rounding is the 8-bit weights'.

Skips, saying why, when the llama-cpp-python sdist that holds the converter cannot be had.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from convert.bundle import full_logits, parity_session
from convert.gguf import export_gguf
from convert.gguf_read import read_gguf
from runtime import load
from runtime.config import GenerationConfig
from tests.gguf_convert import convert, llama_cpp_source, make_checkpoint

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

PROMPTS = ["In the beginning God created the heaven", "The capital of France is"]
NEW_TOKENS = 12
OUTTYPES = ("f32", "q8_0")
FAMILIES = {  # name -> (model_type, config fields)
    "qwen3": ("qwen3", {}),
    "qwen3-tied": ("qwen3", {"tie_word_embeddings": True}),
    "gemma": ("gemma", {}),
    # llama.cpp scales queries by 1/sqrt(head size) (Gemma 2 2B / 9B); a window shorter than
    # the prompts, so that the sliding layers' window is exercised
    "gemma2": ("gemma2", {"query_pre_attn_scalar": 32, "sliding_window": 4}),
    # 6 layers: llama.cpp's pattern (the GGUF has none) makes layer 5 global, 0-4 sliding,
    # each kind with its own rotary base
    "gemma3": (
        "gemma3_text",
        {"query_pre_attn_scalar": 32, "sliding_window": 4, "num_hidden_layers": 6},
    ),
    # Phi-4-mini's form: partial rotary, LongRoPE (short factors and attention factor within
    # the original context, which the prompts and continuations stay inside)
    "phi3": (
        "phi3",
        {
            "partial_rotary_factor": 0.5,
            "max_position_embeddings": 128,
            "original_max_position_embeddings": 64,
            "rope_scaling": {
                "type": "longrope",
                "long_factor": [1.0 + 0.5 * i for i in range(8)],
                "short_factor": [1.0 + 0.2 * i for i in range(8)],
            },
        },
    ),
    "granite": (
        "granite",
        {
            "embedding_multiplier": 2.0,
            "residual_multiplier": 0.5,
            "attention_multiplier": 0.1,
            "logits_scaling": 4.0,
        },
    ),
    "olmo2": ("olmo2", {}),
    "smollm3": ("smollm3", {"num_hidden_layers": 4}),  # layer 3 without rotary
}


@pytest.fixture(scope="module")
def source():
    found = llama_cpp_source()
    if found is None:
        pytest.skip("llama-cpp-python's sdist (llama.cpp's convert_hf_to_gguf.py) cannot be had")
    return found


@pytest.fixture(scope="module")
def converted(tmp_path_factory, source):
    """(family, outtype) -> (checkpoint, GGUF file, bundle, transformers model, HF tokenizer);
    every family converted to every outtype in one converter process (torch imported once)."""
    roots = {family: tmp_path_factory.mktemp(family) for family in FAMILIES}
    checkpoints = {
        family: make_checkpoint(roots[family] / "checkpoint", model_type, **fields)
        for family, (model_type, fields) in FAMILIES.items()
    }
    files = convert(
        source,
        {checkpoints[f]: {t: roots[f] / f"{t}.gguf" for t in OUTTYPES} for f in FAMILIES},
    )
    loaded = {}

    def make(family: str, outtype: str):
        checkpoint = checkpoints[family]
        if family not in loaded:
            model = transformers.AutoModelForCausalLM.from_pretrained(
                checkpoint, dtype=torch.float32
            ).eval()
            loaded[family] = (model, transformers.AutoTokenizer.from_pretrained(checkpoint))
        bundle = roots[family] / outtype
        export_gguf(files[checkpoint][outtype], bundle, accuracy_level=0, parity=False)
        return (checkpoint, files[checkpoint][outtype], bundle, *loaded[family])

    return make


def _transformers(model, ids: list[int]) -> tuple[np.ndarray, list[int]]:
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].numpy()
        out = model.generate(
            torch.tensor([ids]),
            max_new_tokens=NEW_TOKENS,
            min_new_tokens=NEW_TOKENS,
            do_sample=False,
            pad_token_id=0,
        )
    return logits, out[0, len(ids) :].tolist()


@pytest.mark.parametrize("family", list(FAMILIES))
def test_f32_file_matches_transformers(converted, family):
    checkpoint, gguf_path, bundle, model, tokenizer = converted(family, "f32")
    assert read_gguf(gguf_path).architecture == FAMILIES[family][0].removesuffix("_text")
    session, gguf_model = parity_session(bundle / "model.onnx"), read_gguf(gguf_path)
    generator = load(bundle, threads=1)
    config = GenerationConfig(max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False)
    for prompt in PROMPTS:
        ids = tokenizer(prompt)["input_ids"]
        assert generator.tokenizer.encode(prompt).ids == ids
        _, continuation = _transformers(model, ids)
        assert generator.generate(prompt, config)[0].token_ids == continuation, prompt
        # teacher-forced past gemma2's window: prompt and continuation together
        expected, _ = _transformers(model, ids + continuation)
        ours = full_logits(session, gguf_model, ids + continuation)
        assert np.abs(ours - expected).max() <= 1e-4 * np.abs(expected).max(), prompt


@pytest.mark.parametrize("family", list(FAMILIES))
def test_q8_0_file_is_close_to_transformers(converted, family):
    checkpoint, gguf_path, bundle, model, tokenizer = converted(family, "q8_0")
    manifest = load(bundle, threads=1).manifest
    assert "Q8_0" in manifest.export.quantization.storage
    session, gguf_model = parity_session(bundle / "model.onnx"), read_gguf(gguf_path)
    agree = total = 0
    for prompt in PROMPTS:
        ids = tokenizer(prompt)["input_ids"]
        _, continuation = _transformers(model, ids)
        sequence = ids + continuation
        expected, _ = _transformers(model, sequence)
        ours = full_logits(session, gguf_model, sequence)
        assert np.abs(ours - expected).max() <= 0.05 * np.abs(expected).max(), prompt
        agree += int((ours.argmax(-1) == expected.argmax(-1)).sum())
        total += len(sequence)
    print(f"{family} q8_0: teacher-forced top-1 agreement {agree}/{total}")
    assert agree >= 0.9 * total


def test_supported_list_is_shown_where_users_look(tmp_path, capsys):
    """One line from gguf_read's tables, in `serve --models`' help, the Models tab and a refusal;
    docs/GGUF.md's table has a row per architecture."""
    import gradio as gr

    from convert.flagship import gguf_support
    from convert.gguf_read import ARCHITECTURES, CARRIED, supported_gguf
    from serve.cli import main as serve_main
    from tests.gguf_models import write_tiny_gguf
    from ui import models_tab
    from ui.registry import ModelRegistry

    line = supported_gguf()
    assert all(name in line for name in ARCHITECTURES + CARRIED)
    with pytest.raises(SystemExit):
        serve_main(["--help"])
    assert " ".join(line.split()) in " ".join(capsys.readouterr().out.split())
    with gr.Blocks() as demo:  # the line app.py hands the tab
        models_tab.build(ModelRegistry({}), gguf=gguf_support())
    shown = [getattr(block, "value", "") or "" for block in demo.blocks.values()]
    assert any(line in str(text) for text in shown)
    refused = write_tiny_gguf(tmp_path / "q8k.gguf", "llama", "Q8_K")
    with pytest.raises(ValueError, match="Q8_K") as error:
        export_gguf(refused, tmp_path / "bundle", parity=False)
    assert line in str(error.value)
    table = (Path(__file__).resolve().parents[1] / "docs" / "GGUF.md").read_text()
    assert all(f"| `{name}` |" in table for name in ARCHITECTURES)
