"""export.lean.bart: lean BART / mBART decoder graphs match PyTorch step by step, and quantize."""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from transformers import (
    BartConfig,
    BartForConditionalGeneration,
    MBartConfig,
    MBartForConditionalGeneration,
)

from export.lean.bart import build_bart_decoders

LAYERS, HEADS, WIDTH, VOCAB = 2, 4, 64, 300
SOURCE_LENGTHS = (7, 4, 5)  # a batch of 3 sources, padded to 7


def _tiny_model(kind: str, **overrides):
    torch.manual_seed(0)
    config_class, model_class = {
        "bart": (BartConfig, BartForConditionalGeneration),  # post-LayerNorm
        "mbart": (MBartConfig, MBartForConditionalGeneration),  # pre-LayerNorm, final norm
    }[kind]
    config = config_class(
        d_model=WIDTH,
        encoder_layers=LAYERS,
        decoder_layers=LAYERS,
        encoder_attention_heads=HEADS,
        decoder_attention_heads=HEADS,
        encoder_ffn_dim=96,
        decoder_ffn_dim=96,
        vocab_size=VOCAB,
        max_position_embeddings=64,
        scale_embedding=kind == "mbart",
        init_std=0.3,  # large weights: clear argmax winners, so comparisons are not tie-breaks
        **overrides,
    )
    model = model_class(config).eval()
    with torch.no_grad():
        model.final_logits_bias.normal_()  # zeros by default: make its addition observable
    return model


@pytest.fixture(scope="module", params=["bart", "mbart"])
def built(request, tmp_path_factory):
    model = _tiny_model(request.param)
    root = tmp_path_factory.mktemp(request.param)
    paths = root / "decoder_model.onnx", root / "decoder_with_past_model.onnx"
    build_bart_decoders(model, *paths)
    sessions = [ort.InferenceSession(str(p), providers=["CPUExecutionProvider"]) for p in paths]
    return model, paths, sessions


def _run(session, feeds: dict) -> dict:
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, feeds)))


def test_first_call_and_cached_steps_match_pytorch(built):
    model, _, (first, with_past) = built
    rng = np.random.default_rng(0)
    source = torch.tensor(rng.integers(3, VOCAB, (len(SOURCE_LENGTHS), max(SOURCE_LENGTHS))))
    mask = torch.zeros_like(source)
    for row, n in enumerate(SOURCE_LENGTHS):
        mask[row, :n] = 1  # right padding, as tokenizers pad sources
    decoder_ids = torch.tensor(rng.integers(3, VOCAB, (len(SOURCE_LENGTHS), 3)))  # 3 tokens
    with torch.no_grad():
        hidden = model.model.encoder(input_ids=source, attention_mask=mask).last_hidden_state
        ref = model(encoder_outputs=(hidden,), attention_mask=mask, decoder_input_ids=decoder_ids)
    ours = _run(
        first,
        {
            "encoder_attention_mask": mask.numpy(),
            "input_ids": decoder_ids.numpy(),
            "encoder_hidden_states": hidden.numpy(),
        },
    )
    np.testing.assert_allclose(ours["logits"], ref.logits.numpy(), atol=1e-4, rtol=0)
    assert np.ptp(ref.logits.numpy(), axis=-1).min() > 1.0  # the check is not vacuous
    past = {k.replace("present", "past_key_values", 1): v for k, v in ours.items() if k != "logits"}
    cache = ref.past_key_values
    for _ in range(4):
        token = torch.tensor(rng.integers(3, VOCAB, (len(SOURCE_LENGTHS), 1)))  # (B, 1)
        with torch.no_grad():
            ref = model(
                encoder_outputs=(hidden,),
                attention_mask=mask,
                decoder_input_ids=token,
                past_key_values=cache,
            )
        cache = ref.past_key_values
        ours = _run(
            with_past, {"encoder_attention_mask": mask.numpy(), "input_ids": token.numpy(), **past}
        )
        np.testing.assert_allclose(ours["logits"], ref.logits.numpy(), atol=1e-4, rtol=0)
        past.update(
            {
                k.replace("present", "past_key_values", 1): v
                for k, v in ours.items()
                if k != "logits"
            }
        )
    assert past["past_key_values.0.decoder.key"].shape == (len(SOURCE_LENGTHS), HEADS, 7, 16)


def test_interface_is_optimums(built):
    _, _, (first, with_past) = built
    caches = [
        f"{i}.{side}.{kind}"
        for i in range(LAYERS)
        for side in ("decoder", "encoder")
        for kind in ("key", "value")
    ]
    assert [i.name for i in first.get_inputs()] == [
        "encoder_attention_mask",
        "input_ids",
        "encoder_hidden_states",
    ]
    assert [o.name for o in first.get_outputs()] == ["logits", *[f"present.{c}" for c in caches]]
    assert [i.name for i in with_past.get_inputs()] == [
        "encoder_attention_mask",
        "input_ids",
        *[f"past_key_values.{c}" for c in caches],
    ]
    assert [o.name for o in with_past.get_outputs()] == [
        "logits",
        *[f"present.{c}" for c in caches if ".decoder." in c],
    ]


def test_with_past_graph_is_lean(built):
    _, (_, with_past), _ = built
    ops = Counter(node.op_type for node in onnx.load(str(with_past)).graph.node)
    assert ops["MultiHeadAttention"] == 2 * LAYERS  # self- and cross-attention
    # 15 per layer; embeddings and positions 12 (13 with mBART's first pre-norm); LM head 2
    assert sum(ops.values()) <= 15 * LAYERS + 13 + 2


@pytest.mark.parametrize("precision", ["int8", "int4"])
def test_quantizers_reach_every_projection(built, tmp_path, precision):
    from convert.quantize import QUANTIZED_OPS, quantize_graph

    _, (_, with_past), _ = built
    out = tmp_path / "quantized.onnx"
    report = quantize_graph(with_past, out, precision, keep_lm_head=False)
    assert report["float_weight_matmuls"] == 0
    # per layer: q|k|v, self out, cross q, cross out, fc1, fc2; plus the LM head
    assert sum(report["ops"].values()) >= 6 * LAYERS + 1, report["ops"]
    assert set(report["ops"]) <= set(QUANTIZED_OPS)


def test_unsupported_configs_raise(tmp_path):
    model = _tiny_model("bart", activation_function="relu")
    with pytest.raises(ValueError, match="`activation_function` must be one of"):
        build_bart_decoders(model, tmp_path / "a.onnx", tmp_path / "b.onnx")
