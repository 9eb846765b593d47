"""A lean ONNX decoder graph for GPT-2, built node by node from the PyTorch weights.

`build_gpt2_graph(model, path)` writes one self-contained `.onnx` file (weights embedded) with
the input and output names of optimum-onnx's `text-generation-with-past` GPT-2 export, plus one:

    inputs   input_ids (int64, [batch, seq]), past_key_values.{i}.key|value
             (float32, [batch, heads, past, head_size]; past may be 0), attention_mask
             (int64, [batch, past + seq], 0 on left padding), position_ids (int64, [batch, seq]),
             logits_to_keep (int64 scalar k >= 0: logits of the last k positions; 0 = all)
    outputs  logits (float32, [batch, k or seq, vocab]), present.{i}.key|value
             (float32, [batch, heads, past + seq, head_size])

`logits_to_keep` is the one input optimum's graph lacks (transformers' argument of that name):
generation reads only the last position's logits, so a prompt of T tokens need not pay for
T rows of the LM head, which is a third of GPT-2 small's weights.

Run plainly, it behaves like optimum's graph: each present is past plus the new positions. Its
attention is GroupQueryAttention, which can also share one buffer between past and present: bind
the same preallocated (batch, heads, capacity, head_size) tensor as both (IO binding), and a step
writes its new positions at [past, past + seq) in place instead of copying the cache, reading the
past length from `attention_mask` (runtime/models.py does this; the manifest marks the graph
`"kv_cache": "shared-buffer"`). One limit of the op: a call with more than one new token after a
non-empty past needs batch 1 (the runtime's steps are one token each).

Optimum's graph spends most of its ~2,700 nodes (GPT-2 small) on shape arithmetic; once the
weights are int8 or int4 the per-node overhead dominates a decoding step. This graph has 9 nodes
per layer, 4 for the LM head and 14 that turn the mask into GroupQueryAttention's inputs once,
and uses onnxruntime's contrib ops (domain `com.microsoft`):

    mask         seqlens_k = past + seq - 1 per row, total_sequence_length = past + seq,
                 bias (batch, 1, seq, past + seq) = -10000 on padding, else 0
    embeddings   Gather(wte, input_ids), Gather(wpe, position_ids)
                 SkipLayerNormalization(tokens, positions; ln_1 of layer 0) -> ln, residual
    per layer    MatMul(c_attn) -> Add(c_attn bias)
                 GroupQueryAttention(packed q|k|v, past_key, past_value, seqlens_k,
                                     total_sequence_length, bias; causal)
                     -> attn, present_key, present_value
                 MatMul(attn c_proj) -> SkipLayerNormalization(+ residual, + c_proj bias; ln_2)
                 MatMul(c_fc) -> FastGelu(+ c_fc bias) -> MatMul(mlp c_proj)
                 -> SkipLayerNormalization(+ residual, + c_proj bias; next ln_1, or ln_f)
    LM head      Slice(hidden, last logits_to_keep positions)
                 MatMul(hidden, lm_head.weight^T): one [kept, d] x [d, vocab] product

Every projection is a plain MatMul with a constant weight, so `quantize_dynamic` (int8) and
`MatMulNBitsQuantizer` (int4) both quantize all of them, the LM head included. Padding is masked
by a finite bias (-10000) rather than -inf, so rows made only of padding stay finite (their
outputs are never used) and never poison the cache with NaN.

Covers the GPT-2 family as `transformers.GPT2LMHeadModel`: gpt2, distilgpt2 and any width, depth,
head count, inner size, vocabulary and context length, with the `gelu_new` (or identical
`gelu_pytorch_tanh`) activation and scaled dot-product attention; the LM head may be tied to the
token embedding or not; the graph computes in float32 whatever the model's dtype. It does not
cover other activations, `scale_attn_by_inverse_layer_idx`, `reorder_and_upcast_attn`, cross
attention, pruned heads or `scale_attn_weights=False` (all raise `ValueError`), other
architectures, or external-data files: the model must fit in one protobuf (2 GB).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from onnx import TensorProto, helper

from convert.builder import GraphBuilder

# FastGelu computes 0.5·x·(1 + tanh(0.797885·x + 0.035677·x³)), which is this formula.
_TANH_GELU = ("gelu_new", "gelu_pytorch_tanh")


def _check_config(config) -> None:
    """Raise ValueError for any GPT-2 option this graph does not reproduce."""
    if config.model_type != "gpt2":
        raise ValueError(f"`model_type` must be 'gpt2', got {config.model_type!r}")
    if config.activation_function not in _TANH_GELU:
        raise ValueError(
            f"`activation_function` must be one of {_TANH_GELU}, got {config.activation_function!r}"
        )
    for flag in (
        "scale_attn_by_inverse_layer_idx",
        "reorder_and_upcast_attn",
        "add_cross_attention",
    ):
        if getattr(config, flag, False):
            raise ValueError(f"`{flag}` must be False, got True")
    if not getattr(config, "scale_attn_weights", True):
        raise ValueError("`scale_attn_weights` must be True, got False")
    if getattr(config, "pruned_heads", None):
        raise ValueError(f"`pruned_heads` must be empty, got {config.pruned_heads!r}")
    if config.n_embd % config.n_head != 0:
        raise ValueError(
            f"`n_embd` must be a multiple of `n_head`, got {config.n_embd} and {config.n_head}"
        )


def _attention_inputs(g: GraphBuilder) -> tuple[str, str, str]:
    """GroupQueryAttention's view of `attention_mask` (B, T), T = past + S, left-padded rows:
    seqlens_k (B,) int32 = T - 1 for every row (each row's cache holds T positions), the scalar
    total_sequence_length T (int32), and an additive bias (B, 1, S, T): -10000 on padding, else 0.
    """
    const = g.const
    one = const("one_i64", [1], np.int64)
    (total,) = g.node("Shape", ["attention_mask"], ["total_length_1"], start=1, end=2)  # (1,)
    (batch,) = g.node("Shape", ["attention_mask"], ["batch_size_1"], start=0, end=1)  # (1,)
    (steps,) = g.node("Shape", ["input_ids"], ["sequence_length_1"], start=1, end=2)  # (1,)
    (last,) = g.node("Sub", [total, one], ["last_position_1"])
    (last,) = g.node("Expand", [last, batch], ["last_positions"])  # (B,)
    (seqlens_k,) = g.node("Cast", [last], ["seqlens_k"], to=TensorProto.INT32)
    (total,) = g.node("Reshape", [total, const("scalar_shape", [], np.int64)], ["total_scalar"])
    (total,) = g.node("Cast", [total], ["total_sequence_length"], to=TensorProto.INT32)
    (mask,) = g.node("Cast", ["attention_mask"], ["mask_f32"], to=TensorProto.FLOAT)  # (B, T)
    (bias,) = g.node("Sub", [mask, const("one_f32", 1.0, np.float32)], ["mask_minus_one"])
    (bias,) = g.node("Mul", [bias, const("mask_value", 10000.0, np.float32)], ["mask_bias_2d"])
    (bias,) = g.node("Unsqueeze", [bias, const("axes_1_2", [1, 2], np.int64)], ["mask_bias_4d"])
    (shape,) = g.node(
        "Concat", [const("ones_2", [1, 1], np.int64), steps, one], ["bias_shape"], axis=0
    )
    (bias,) = g.node("Expand", [bias, shape], ["mask_bias"])  # (B, 1, S, T)
    return seqlens_k, total, bias


def build_gpt2_graph(model, path: Path, opset: int = 17) -> None:
    """Write `model` (a `transformers.GPT2LMHeadModel`) as a lean ONNX decoder graph to `path`.

    The file has optimum-onnx's GPT-2 input and output names (see the module docstring) and embeds
    its weights.
    `opset` is the default-domain opset, ≥ 17. Raises ValueError for configs it cannot reproduce.
    """
    config = model.config
    _check_config(config)
    if opset < 17:
        raise ValueError(f"`opset` must be >= 17, got {opset}")
    width, eps = config.n_embd, float(config.layer_norm_epsilon)
    g = GraphBuilder(model.state_dict())
    inputs, outputs = _io(config)

    # All activations are (B, S, d); ln_1 of layer 0 is fused with the embeddings' sum.
    tokens, positions = _embeddings(g, width)
    mask = _attention_inputs(g)
    normed, residual = _skip_layer_norm(
        g, tokens, positions, "transformer.h.0.ln_1.", ("h0.ln_1", "h0.residual_in"), width, eps
    )
    for i in range(config.n_layer):
        p = f"transformer.h.{i}."
        attn_out = _attention(g, i, normed, mask, config.n_head, width)
        normed, residual = _skip_layer_norm(
            g,
            attn_out,
            residual,
            p + "ln_2.",
            (f"h{i}.ln_2", f"h{i}.residual_mid"),
            width,
            eps,
            bias=p + "attn.c_proj.bias",
        )
        mlp_out = _mlp(g, i, normed, config.n_inner or 4 * width, width)
        # The residual stream's next norm: ln_1 of the next layer, or ln_f after the last one.
        last = i == config.n_layer - 1
        normed, residual = _skip_layer_norm(
            g,
            mlp_out,
            residual,
            "transformer.ln_f." if last else f"transformer.h.{i + 1}.ln_1.",
            ("ln_f", "") if last else (f"h{i + 1}.ln_1", f"h{i}.residual_out"),
            width,
            eps,
            bias=p + "mlp.c_proj.bias",
        )
    _lm_head(g, normed, width)
    g.save(path, "lean_gpt2", inputs, outputs, opset)


def _io(config) -> tuple[list, list]:
    """The graph's inputs and outputs, named and shaped as in the module docstring."""
    info = helper.make_tensor_value_info
    head_size = config.n_embd // config.n_head
    past = ["batch_size", config.n_head, "past_sequence_length", head_size]
    present = ["batch_size", config.n_head, "past_sequence_length + sequence_length", head_size]
    inputs = [info("input_ids", TensorProto.INT64, ["batch_size", "sequence_length"])]
    outputs = [info("logits", TensorProto.FLOAT, ["batch_size", "kept", config.vocab_size])]
    for i in range(config.n_layer):
        for kind in ("key", "value"):
            inputs.append(info(f"past_key_values.{i}.{kind}", TensorProto.FLOAT, past))
            outputs.append(info(f"present.{i}.{kind}", TensorProto.FLOAT, present))
    inputs += [
        info(
            "attention_mask",
            TensorProto.INT64,
            ["batch_size", "past_sequence_length + sequence_length"],
        ),
        info("position_ids", TensorProto.INT64, ["batch_size", "sequence_length"]),
        info("logits_to_keep", TensorProto.INT64, []),
    ]
    return inputs, outputs


def _embeddings(g: GraphBuilder, width: int) -> tuple[str, str]:
    """The token and position embeddings of `input_ids` and `position_ids`, each (B, S, d)."""
    (tokens,) = g.node(
        "Gather", [g.weight("transformer.wte.weight"), "input_ids"], ["tok_emb"], width
    )
    (positions,) = g.node(
        "Gather", [g.weight("transformer.wpe.weight"), "position_ids"], ["pos_emb"], width
    )
    return tokens, positions


def _skip_layer_norm(
    g: GraphBuilder,
    x: str,
    residual: str,
    ln: str,
    names: tuple[str, str],
    width: int,
    eps: float,
    bias: str | None = None,
) -> tuple[str, str]:
    """LayerNorm `ln` (a parameter prefix) of x + residual (+ the parameter `bias`): returns
    the normed sum and the sum itself (the next residual), named `names` ("" drops the sum)."""
    inputs = [x, residual, g.weight(ln + "weight"), g.weight(ln + "bias")]
    if bias is not None:
        inputs.append(g.weight(bias))
    normed, _, _, total = g.node(
        "SkipLayerNormalization", inputs, [names[0], "", "", names[1]], width, epsilon=eps
    )
    return normed, total


def _attention(
    g: GraphBuilder, i: int, normed: str, mask: tuple[str, str, str], heads: int, width: int
) -> str:
    """Layer i's causal self-attention over its cache, before the c_proj bias (which the next
    SkipLayerNormalization adds). `mask`: seqlens_k, total_sequence_length and the padding bias
    from `_attention_inputs`."""
    p = f"transformer.h.{i}."
    seqlens_k, total_length, mask_bias = mask
    (qkv,) = g.node(
        "MatMul", [normed, g.weight(p + "attn.c_attn.weight")], [f"h{i}.qkv"], 3 * width
    )
    (qkv,) = g.node("Add", [qkv, g.weight(p + "attn.c_attn.bias")], [f"h{i}.qkv_b"], 3 * width)
    attn, _, _ = g.node(
        "GroupQueryAttention",
        [
            qkv,  # packed (B, S, 3d): q, k, v
            "",  # key: packed in the query
            "",  # value: packed in the query
            f"past_key_values.{i}.key",
            f"past_key_values.{i}.value",
            seqlens_k,
            total_length,
            "",  # cos_cache: no rotary embedding
            "",  # sin_cache
            "",  # position_ids (rotary only)
            mask_bias,  # attention_bias (B, 1, S, T)
        ],
        [f"h{i}.attn", f"present.{i}.key", f"present.{i}.value"],
        width,
        num_heads=heads,
        kv_num_heads=heads,
    )
    (attn_out,) = g.node(
        "MatMul", [attn, g.weight(p + "attn.c_proj.weight")], [f"h{i}.attn_out"], width
    )
    return attn_out


def _mlp(g: GraphBuilder, i: int, normed: str, inner: int, width: int) -> str:
    """Layer i's MLP, c_fc -> tanh GELU -> c_proj, before the c_proj bias (which the next
    SkipLayerNormalization adds)."""
    p = f"transformer.h.{i}."
    (fc,) = g.node("MatMul", [normed, g.weight(p + "mlp.c_fc.weight")], [f"h{i}.fc"], inner)
    (act,) = g.node("FastGelu", [fc, g.weight(p + "mlp.c_fc.bias")], [f"h{i}.gelu"], inner)
    (mlp_out,) = g.node(
        "MatMul", [act, g.weight(p + "mlp.c_proj.weight")], [f"h{i}.mlp_out"], width
    )
    return mlp_out


def _lm_head(g: GraphBuilder, normed: str, width: int) -> None:
    """`logits` of the last `logits_to_keep` positions of the final hidden states `normed`."""
    # Slice from -k, and -0 = 0 keeps them all.
    (start,) = g.node("Neg", ["logits_to_keep"], ["kept_start"])
    (start,) = g.node("Unsqueeze", [start, g.const("axes_0", [0], np.int64)], ["kept_start_1"])
    end, axis = g.const("end_of_sequence", [2**63 - 1], np.int64), g.const("axes_1", [1], np.int64)
    (kept,) = g.node("Slice", [normed, start, end, axis], ["ln_f_kept"])
    g.value_info.append(
        helper.make_tensor_value_info(kept, TensorProto.FLOAT, ["batch_size", "kept", width])
    )  # (B, k, d)
    # The LM head as (d, V) so that MatMul quantizers see a constant right-hand side.
    g.node("MatMul", [kept, g.weight("lm_head.weight", transpose=True)], ["logits"])
