"""Three defects of the Hugging Face export path (issue 46, ask 6), each on a real checkpoint.

- Falcon with transformers' default `multi_query=True` keeps one shared KV head: the manifest's
  and `runtime.load`'s KV-head count follow transformers' own attention module, and the exported
  bundle generates transformers' greedy tokens.
- A failure inside optimum-onnx (a GPT-2 with 4 positions, shorter than optimum's dummy inputs)
  reaches the `scriptorium export` user as one line naming the model and the cause.
- The Llama checkpoint path's parity report compares like with like: a checkpoint whose greedy
  continuation picks its end-of-sequence token reports every continuation identical.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from convert.manifest import model_shape
from export.cli import main
from runtime import load
from runtime.bundle import _shape_from_config
from runtime.config import GenerationConfig
from tests.tiny_models import _hf_tokenizer, _train_tokenizer

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

FALCONS = {  # name -> FalconConfig fields beyond the tiny shape
    "multi-query (default)": {},
    "multi-head": {"multi_query": False},
    "new architecture, 2 KV heads": {"new_decoder_architecture": True, "num_kv_heads": 2},
}


def _falcon(out_dir: Path, **fields) -> Path:
    """A tiny random Falcon (2 layers, width 64, 4 heads) with a byte-level BPE tokenizer."""
    tok = _train_tokenizer("gpt2")
    config = transformers.FalconConfig(
        vocab_size=tok.get_vocab_size(),
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        bos_token_id=0,
        eos_token_id=0,
        initializer_range=0.2,
        **fields,
    )
    torch.manual_seed(0)
    transformers.FalconForCausalLM(config).save_pretrained(out_dir)
    _hf_tokenizer("gpt2", tok).save_pretrained(out_dir)
    return out_dir


@pytest.mark.parametrize("fields", list(FALCONS.values()), ids=list(FALCONS))
def test_falcon_kv_heads_follow_transformers(tmp_path, fields):
    checkpoint = _falcon(tmp_path, **fields)
    model = transformers.FalconForCausalLM.from_pretrained(checkpoint)
    attention = model.transformer.h[0].self_attention
    config = json.loads((checkpoint / "config.json").read_text())
    assert model_shape(config, "causal-lm")["num_heads"] == attention.num_kv_heads
    assert _shape_from_config(config, seq2seq=False)["num_heads"] == attention.num_kv_heads


def test_multi_query_falcon_exports_and_generates_as_transformers(tmp_path, capsys):
    checkpoint = _falcon(tmp_path / "checkpoint")
    assert main([str(checkpoint), str(tmp_path / "bundle"), "--precision", "fp32"]) == 0
    assert "greedy: 4/4 identical" in capsys.readouterr().out
    manifest = json.loads((tmp_path / "bundle" / "manifest.json").read_text())
    assert manifest["num_heads"] == 1
    generator = load(tmp_path / "bundle", threads=1)
    model = transformers.FalconForCausalLM.from_pretrained(checkpoint).eval()
    config = GenerationConfig(max_new_tokens=8, min_new_tokens=8, do_sample=False)
    for prompt in ("In the beginning", "The quick brown fox"):
        ids = generator.tokenizer.encode(prompt).ids
        with torch.no_grad():
            out = model.generate(
                torch.tensor([ids]), max_new_tokens=8, min_new_tokens=8, do_sample=False
            )
        assert generator.generate(prompt, config)[0].token_ids == out[0, len(ids) :].tolist()


def test_a_failure_inside_optimum_is_one_line(tmp_path, capsys):
    tok = _train_tokenizer("gpt2")
    config = transformers.GPT2Config(
        vocab_size=tok.get_vocab_size(), n_positions=4, n_embd=32, n_layer=1, n_head=2
    )
    transformers.GPT2LMHeadModel(config).save_pretrained(tmp_path / "short")
    _hf_tokenizer("gpt2", tok).save_pretrained(tmp_path / "short")
    assert main([str(tmp_path / "short"), str(tmp_path / "bundle"), "--precision", "fp32"]) == 1
    err = capsys.readouterr().err.strip().splitlines()  # progress bar lines, then the error
    assert "Traceback" not in "".join(err)
    assert err[-1] == (
        "scriptorium export: error: optimum-onnx could not export short (gpt2): "
        "IndexError: index out of range in self"
    )


def test_llama_parity_report_compares_like_with_like(tmp_path):
    """A checkpoint whose plain greedy continuation picks EOS (id 2) on some parity prompts."""
    from convert.bundle import PARITY_NEW_TOKENS, PARITY_PROMPTS
    from convert.hf_checkpoint import export_hf_llama
    from tests.test_hf_llama import make_checkpoint

    checkpoint = make_checkpoint(tmp_path / "checkpoint", "llama", tied=False)
    model = transformers.AutoModelForCausalLM.from_pretrained(checkpoint).eval()
    with torch.no_grad():
        model.lm_head.weight[2] *= 1.5  # EOS wins some steps, not all
    model.save_pretrained(checkpoint, safe_serialization=True)
    tokenizer = transformers.AutoTokenizer.from_pretrained(checkpoint)
    picks_eos = 0
    for prompt in PARITY_PROMPTS:  # argmax by full passes, independent of the report's code
        ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        with torch.no_grad():
            for _ in range(PARITY_NEW_TOKENS):
                ids.append(int(model(torch.tensor([ids])).logits[0, -1].argmax()))
        picks_eos += 2 in ids[-PARITY_NEW_TOKENS:]
    assert picks_eos >= 1
    theirs = export_hf_llama(checkpoint, tmp_path / "bundle", "fp32").to_json()["parity"]
    theirs = theirs["transformers"]
    assert theirs["max_abs_logit_diff"] < 1e-4 * theirs["max_abs_logit"] + 1e-4
    assert theirs["greedy_identical"] == f"{len(PARITY_PROMPTS)} / {len(PARITY_PROMPTS)}"
    assert theirs["top1_agreement"] == 1.0


def test_a_longrope_export_keeps_to_the_original_context():
    """Past it transformers takes the long rotary factors and the exported graph does not."""
    config = {
        "model_type": "phi3",
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "vocab_size": 100,
        "max_position_embeddings": 128,
        "original_max_position_embeddings": 64,
        "rope_scaling": {"type": "longrope", "short_factor": [1.0] * 8, "long_factor": [2.0] * 8},
    }
    assert model_shape(config, "causal-lm")["context_length"] == 64
    assert _shape_from_config(config, seq2seq=False)["context_length"] == 64
    plain = {**config, "rope_scaling": None}
    assert model_shape(plain, "causal-lm")["context_length"] == 128
