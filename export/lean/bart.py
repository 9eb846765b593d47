"""Lean ONNX decoder graphs for BART and mBART, built node by node from the PyTorch weights.

`build_bart_decoders(model, decoder_path, with_past_path)` writes the two decoder graphs of
optimum-onnx's `text2text-generation-with-past` export, with its input and output names; export/
merges them into one graph with `use_cache_branch` exactly as it merges optimum's:

    decoder            encoder_attention_mask (int64, [batch, source]), input_ids (int64,
                       [batch, seq]), encoder_hidden_states (float32, [batch, source, d])
                       -> logits (float32, [batch, seq, vocab]),
                          present.{i}.decoder.key|value ([batch, heads, seq, head_size]),
                          present.{i}.encoder.key|value ([batch, heads, source, head_size])
    decoder_with_past  encoder_attention_mask, input_ids, past_key_values.{i}.decoder.key|value
                       ([batch, heads, past, head_size]), past_key_values.{i}.encoder.key|value
                       -> logits, present.{i}.decoder.key|value ([batch, heads, past + seq, ...])

The first graph projects the source once per layer into the cross-attention keys and values it
returns; the second takes them back every step. Optimum's with-past graph for BART-base has ~750
nodes, mostly shape arithmetic, which costs more than its weight products once they are int8.
These graphs use onnxruntime's contrib ops (domain `com.microsoft`), 15 nodes per layer in the
with-past graph:

    embeddings   Gather(embed_tokens · embed_scale) + Gather(embed_positions, offset 2 + past ...)
                 -> LayerNormalization(layernorm_embedding)
    self         MatMul(q), MatMul(k), MatMul(v) -> MultiHeadAttention(+ q|k|v bias, past; causal)
                 -> MatMul(out_proj) -> SkipLayerNormalization(+ residual, + out_proj bias)
    cross        MatMul(q) -> Add(bias) -> MultiHeadAttention(source keys and values; key padding
                 mask) -> MatMul(out_proj) -> SkipLayerNormalization
    feed-forward MatMul(fc1) -> BiasGelu(+ fc1 bias) -> MatMul(fc2) -> SkipLayerNormalization
    LM head      MatMul(lm_head^T) -> Add(final_logits_bias)

BART normalizes after each residual sum (post-LN), so SkipLayerNormalization's output is both the
next residual and the next sublayer's input; mBART normalizes before each sublayer (pre-LN), so
each SkipLayerNormalization applies the next sublayer's LayerNorm and also returns the raw sum,
and the decoder's final `layer_norm` follows the last layer.

Covers `BartForConditionalGeneration` and `MBartForConditionalGeneration` with the exact (erf)
`gelu` activation; the graphs compute in float32. It does not cover other activations, the
encoder (optimum's graph, through onnxruntime's optimizer, serves it), other architectures, or
external-data files (the model must fit in one 2 GB protobuf). Unsupported configs raise
`ValueError`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from onnx import TensorProto, helper

from convert.builder import GraphBuilder

_POSITION_OFFSET = 2  # BART's learned positions start at row 2 of the table
_ACTIVATIONS = ("gelu",)  # exact GELU, which BiasGelu computes


def _check(model) -> bool:
    """Whether the model normalizes before its sublayers (mBART); raises for unsupported ones."""
    config = model.config
    if config.model_type not in ("bart", "mbart"):
        raise ValueError(f"`model_type` must be 'bart' or 'mbart', got {config.model_type!r}")
    if config.activation_function not in _ACTIVATIONS:
        raise ValueError(
            f"`activation_function` must be one of {_ACTIVATIONS}, got "
            f"{config.activation_function!r}"
        )
    if config.d_model % config.decoder_attention_heads:
        raise ValueError(
            f"`d_model` must be a multiple of `decoder_attention_heads`, got {config.d_model} "
            f"and {config.decoder_attention_heads}"
        )
    return config.model_type == "mbart"


def build_bart_decoders(model, decoder_path: Path, with_past_path: Path, opset: int = 17) -> None:
    """Write `model`'s decoder without and with past (a BART or mBART
    `...ForConditionalGeneration`) to the two paths; see the module docstring."""
    pre_norm = _check(model)
    for with_past, path in ((False, decoder_path), (True, with_past_path)):
        _Decoder(model, pre_norm, with_past).save(path, opset)


class _Decoder:
    def __init__(self, model, pre_norm: bool, with_past: bool):
        config = model.config
        self.g = GraphBuilder(model.state_dict())
        self.pre_norm, self.with_past = pre_norm, with_past
        self.layers, self.heads = config.decoder_layers, config.decoder_attention_heads
        self.width, self.vocab = config.d_model, config.vocab_size
        self.head_size = self.width // self.heads
        self.embed_scale = float(np.sqrt(self.width)) if config.scale_embedding else 1.0
        self.inputs, self.outputs = self._interface()
        self._build()

    def _interface(self) -> tuple[list, list]:
        def tensor(name, dtype, dims):
            return helper.make_tensor_value_info(name, dtype, dims)

        def cache(length: str) -> list:
            return ["batch_size", self.heads, length, self.head_size]

        past = "past_decoder_sequence_length"
        total = f"{past} + decoder_sequence_length" if self.with_past else "decoder_sequence_length"
        source = ["batch_size", "encoder_sequence_length"]
        inputs = [
            tensor("encoder_attention_mask", TensorProto.INT64, source),
            tensor("input_ids", TensorProto.INT64, ["batch_size", "decoder_sequence_length"]),
        ]
        if not self.with_past:
            inputs.append(tensor("encoder_hidden_states", TensorProto.FLOAT, [*source, self.width]))
        logits = ["batch_size", "decoder_sequence_length", self.vocab]
        outputs = [tensor("logits", TensorProto.FLOAT, logits)]
        for i in range(self.layers):
            for kind in ("key", "value"):
                if self.with_past:
                    name = f"past_key_values.{i}.decoder.{kind}"
                    inputs.append(tensor(name, TensorProto.FLOAT, cache(past)))
                name = f"present.{i}.decoder.{kind}"
                outputs.append(tensor(name, TensorProto.FLOAT, cache(total)))
            for kind in ("key", "value"):
                on_source = cache("encoder_sequence_length")
                if self.with_past:
                    name = f"past_key_values.{i}.encoder.{kind}"
                    inputs.append(tensor(name, TensorProto.FLOAT, on_source))
                else:
                    outputs.append(
                        tensor(f"present.{i}.encoder.{kind}", TensorProto.FLOAT, on_source)
                    )
        return inputs, outputs

    def save(self, path: Path, opset: int) -> None:
        name = "lean_bart_decoder_with_past" if self.with_past else "lean_bart_decoder"
        self.g.save(path, name, self.inputs, self.outputs, opset)

    # ---- nodes -------------------------------------------------------------------------------

    def _positions(self) -> str:
        """Rows of the position table for the new tokens: offset + past + [0, seq)."""
        g = self.g
        offset = g.const("position_offset", _POSITION_OFFSET, np.int64)  # scalar
        scalar = g.const("scalar_shape", [], np.int64)
        (steps,) = g.node("Shape", ["input_ids"], ["steps_1"], start=1, end=2)  # (1,)
        (steps,) = g.node("Reshape", [steps, scalar], ["steps"])
        start = offset
        if self.with_past:
            (past,) = g.node("Shape", ["past_key_values.0.decoder.key"], ["past_1"], start=2, end=3)
            (past,) = g.node("Reshape", [past, scalar], ["past"])
            (start,) = g.node("Add", [offset, past], ["first_position"])
        (end,) = g.node("Add", [start, steps], ["end_position"])
        one = g.const("one", 1, np.int64)
        (rows,) = g.node("Range", [start, end, one], ["position_rows"])  # (S,)
        return rows

    def _layer_norm(self, x: str, prefix: str, out: str) -> str:
        g = self.g
        (y,) = g.node(
            "LayerNormalization",
            [x, g.weight(prefix + ".weight"), g.weight(prefix + ".bias")],
            [out],
            self.width,
            epsilon=1e-5,
            axis=-1,
        )
        return y

    def _skip_norm(self, x: str, residual: str, bias: str, norm: str, out: str) -> tuple[str, str]:
        """LayerNorm `norm` of x + residual + bias: (normalized, the raw sum)."""
        g = self.g
        normed, _, _, total = g.node(
            "SkipLayerNormalization",
            [x, residual, g.weight(norm + ".weight"), g.weight(norm + ".bias"), g.weight(bias)],
            [out, "", "", out + "_sum"],
            self.width,
            epsilon=1e-5,
        )
        return normed, total

    def _linear(self, x: str, name: str, out: str, width: int | None, bias: bool = False) -> str:
        """x @ weight^T (+ bias); `width` declares the output as a (B, S, width) activation."""
        g = self.g
        (y,) = g.node("MatMul", [x, g.weight(name + ".weight", transpose=True)], [out], width)
        if bias:
            (y,) = g.node("Add", [y, g.weight(name + ".bias")], [out + "_b"], width)
        return y

    def _qkv_bias(self, p: str) -> str:
        """The self-attention's q|k|v biases in one (3d,) vector, as MultiHeadAttention takes them.

        The projections stay three MatMuls: one weight per tensor keeps int8's per-tensor scale
        per projection, as in optimum's graph.
        """
        state = self.g.state
        bias = np.concatenate(
            [state[f"{p}.self_attn.{x}_proj.bias"].float().numpy() for x in "qkv"]
        )
        return self.g.const(f"{p}.self_attn.qkv.bias", bias, np.float32)  # (3d,)

    def _source_kv(self, p: str, i: int, kind: str, heads_shape: str) -> str:
        """The source's cross-attention keys or values, (B, heads, source, head_size)."""
        name = f"{p}.encoder_attn.{kind[0]}_proj"
        # Over the source, not the decoder tokens: no (B, S, d) declaration for these.
        x = self._linear("encoder_hidden_states", name, f"h{i}.x{kind[0]}", None, bias=True)
        (x,) = self.g.node("Reshape", [x, heads_shape], [f"h{i}.x{kind[0]}_heads"])  # (B, S, H, D)
        (x,) = self.g.node("Transpose", [x], [f"present.{i}.encoder.{kind}"], perm=[0, 2, 1, 3])
        return x  # (B, H, S, D)

    def _build(self) -> None:
        g, width = self.g, self.width
        # Embeddings. All activations are (B, S, d).
        (tokens,) = g.node(
            "Gather",
            [g.weight("model.decoder.embed_tokens.weight", scale=self.embed_scale), "input_ids"],
            ["tok_emb"],
            width,
        )
        (positions,) = g.node(
            "Gather",
            [g.weight("model.decoder.embed_positions.weight"), self._positions()],
            ["pos_emb"],
        )  # (S, d)
        (hidden,) = g.node("Add", [tokens, positions], ["embeddings"], width)
        hidden = self._layer_norm(hidden, "model.decoder.layernorm_embedding", "h0.in")
        (mask,) = g.node(
            "Cast", ["encoder_attention_mask"], ["source_mask_i32"], to=TensorProto.INT32
        )
        if not self.with_past:  # (B, source, d) -> (B, source, heads, head_size)
            heads_shape = g.const("heads_shape", [0, -1, self.heads, self.head_size], np.int64)
        p0 = "model.decoder.layers.0"
        normed = hidden
        if self.pre_norm:
            normed = self._layer_norm(hidden, f"{p0}.self_attn_layer_norm", "h0.ln")
        for i in range(self.layers):
            p = f"model.decoder.layers.{i}"
            nxt = f"model.decoder.layers.{i + 1}" if i + 1 < self.layers else None
            # Self-attention over past + new tokens, causal.
            q, k, v = (
                self._linear(normed, f"{p}.self_attn.{x}_proj", f"h{i}.{x}", width) for x in "qkv"
            )
            past = [f"past_key_values.{i}.decoder.key", f"past_key_values.{i}.decoder.value"]
            attn, _, _ = g.node(
                "MultiHeadAttention",
                [q, k, v, self._qkv_bias(p), "", "", *(past if self.with_past else ["", ""])],
                [f"h{i}.self", f"present.{i}.decoder.key", f"present.{i}.decoder.value"],
                width,
                num_heads=self.heads,
                unidirectional=1,
            )
            attn = self._linear(attn, f"{p}.self_attn.out_proj", f"h{i}.self_out", width)
            norm = f"{p}.encoder_attn_layer_norm" if self.pre_norm else f"{p}.self_attn_layer_norm"
            bias = f"{p}.self_attn.out_proj.bias"
            normed, total = self._skip_norm(attn, hidden, bias, norm, f"h{i}.mid")
            hidden = total if self.pre_norm else normed
            # Cross-attention over the source.
            if self.with_past:
                keys = f"past_key_values.{i}.encoder.key"
                values = f"past_key_values.{i}.encoder.value"
            else:
                keys = self._source_kv(p, i, "key", heads_shape)
                values = self._source_kv(p, i, "value", heads_shape)
            q = self._linear(normed, f"{p}.encoder_attn.q_proj", f"h{i}.cq", width, bias=True)
            (attn,) = g.node(
                "MultiHeadAttention",
                [q, keys, values, "", mask],
                [f"h{i}.cross"],
                width,
                num_heads=self.heads,
            )
            attn = self._linear(attn, f"{p}.encoder_attn.out_proj", f"h{i}.cross_out", width)
            norm = f"{p}.final_layer_norm" if self.pre_norm else f"{p}.encoder_attn_layer_norm"
            bias = f"{p}.encoder_attn.out_proj.bias"
            normed, total = self._skip_norm(attn, hidden, bias, norm, f"h{i}.ffn_in")
            hidden = total if self.pre_norm else normed
            # Feed-forward.
            inner = g.state[f"{p}.fc1.weight"].shape[0]
            fc = self._linear(normed, f"{p}.fc1", f"h{i}.fc1", inner)
            (act,) = g.node("BiasGelu", [fc, g.weight(f"{p}.fc1.bias")], [f"h{i}.gelu"], inner)
            ffn = self._linear(act, f"{p}.fc2", f"h{i}.fc2", width)
            if self.pre_norm:
                norm = f"{nxt}.self_attn_layer_norm" if nxt else "model.decoder.layer_norm"
            else:
                norm = f"{p}.final_layer_norm"
            normed, total = self._skip_norm(ffn, hidden, f"{p}.fc2.bias", norm, f"h{i + 1}.in")
            hidden = total if self.pre_norm else normed
        # LM head, as (d, V) so that MatMul quantizers see a constant right-hand side.
        (logits,) = g.node(
            "MatMul", [normed, g.weight("lm_head.weight", transpose=True)], ["logits_no_bias"]
        )
        g.node("Add", [logits, g.weight("final_logits_bias")], ["logits"])
