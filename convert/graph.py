"""A lean ONNX decoder graph for the Llama family (convert/gguf_read.py's ARCHITECTURES:
llama, qwen2, qwen3, gemma, gemma2, gemma3, phi3, granite, olmo2, smollm3), built from a GGUF
file's weights.

`build_llama_graph(model, path)` writes the graph with the input and output names the runtime
already feeds for export's lean GPT-2 graph (docs/bundle.md), plus the two inputs that
onnxruntime's GroupQueryAttention reads per row, so that a caller batching requests of different
lengths can set them itself:

    inputs   input_ids (int64, [B, S]), past_key_values.{i}.key|value (float32,
             [B, kv_heads, past, head_size]), attention_mask (int64, [B, past + S], 0 on left
             padding), seqlens_k (int32, [B]: each row's cache length after this call, minus 1),
             total_sequence_length (int32 scalar: past + S), logits_to_keep (int64 scalar k:
             logits of the last k positions; 0 = all)

There is no position_ids input: GroupQueryAttention rotates each new position by its slot in
the row's cache (seqlens_k). A left-padded row thus counts its padding too, which changes
nothing but rounding, since rotary attention depends on position differences only (tested against
single prompts). Given position ids, onnxruntime 1.32 ignores them in a call with an empty cache
(it uses 0..S-1) but honours them in later steps, which would mix the two numberings.
    outputs  logits (float32, [B, k or S, vocab]), present.{i}.key|value

Nodes, using onnxruntime's contrib ops:

    embeddings   Gather from the token table; a quantized table is gathered as its codes and
                 dequantized in the graph (a few elementwise nodes over B·S rows), so a tied LM
                 head and the embedding share one stored copy of the blocks; gemma*: times
                 sqrt(hidden) (their (1 + w) norms arrive from llama.cpp's converter as
                 weights), granite: times its embedding scale
    per layer    SimplifiedLayerNormalization (RMSNorm) on layer 0, then
                 q|k|v projection (one MatMulNBits or MatMul, + bias for qwen2; phi3 stores it
                     fused)
                 qwen3, gemma3: Split, RMSNorm over each query and key head (Reshape to heads);
                     olmo2: RMSNorm over all query and all key heads together
                 GroupQueryAttention(do_rotary, cos/sin caches, seqlens_k,
                     total_sequence_length, padding bias) -> attn, present key, present value
                     gemma2: softcap; gemma2, gemma3: local_window_size on the sliding layers,
                     gemma3's with their own rotary caches (local base); phi3: partial rotary
                     (narrower caches) and LongRoPE's short factors and attention factor in the
                     caches; smollm3: no rotary on every 4th layer; granite: its scale
                 o projection (gemma2, gemma3, olmo2: RMSNorm post_attention_norm; granite:
                     times the residual scale)
                 -> SkipSimplifiedLayerNormalization(+ residual; ffn_norm)
                 gate|up projection -> Split -> gate·Sigmoid(gate)·up (SwiGLU; gemma*:
                     FastGelu(gate)·up, GELU's tanh form) -> down projection
                 -> SkipSimplifiedLayerNormalization(+ residual; next attn_norm, or output_norm)
                 olmo2 has no norm before attention and MLP: plain Adds to the residual
    LM head      Slice(last logits_to_keep positions) -> projection by the output (or token) table
                 (granite: then / logit scale; gemma2, gemma3: then cap·Tanh(logits / cap))

A projection of 32-weight blocks with a per-block offset (Q4_1, Q4_K; convert/gguf_read.py)
adds to MatMulNBits' output the block sums of its input times an [K/32, N] offset matrix: Reshape +
ReduceSum once per input (shared by q|k|v and by gate|up) and one small MatMul + Add. llama.cpp
stores the q and k rows of llama, granite and smollm3 permuted for its adjacent-pair rotary
embedding, so their graphs use GroupQueryAttention's interleaved rotary on the weights as stored;
the others use the half-split form.

With a `lora_path` a second graph is written beside the first, sharing its weights file
(`model.onnx.data`): the same graph where every projection has a LoRA *slot* (docs/GGUF.md,
"Adapters"; a separate file because zero-rank slots cost measured decode speed): two more graph
inputs, `lora.{i}.{slot}.A` (float32 [K, r]) and `lora.{i}.{slot}.B` ([r, N]), whose default
initializers have rank r = 0, feeding x·A·B into the projection's output. With no adapter they
are zero-rank no-ops; onnxruntime's LoraAdapter (export/adapter.py) feeds an adapter's factors
by those names. A fused projection (q|k|v, gate|up) has one slot for its parts; `lora_slots` in the
report says which modules (Hugging Face names) each slot covers and their output rows.

Run plainly each present is past plus the new positions; bound as one buffer for past and
present (runtime/models.py, `"kv_cache": "shared-buffer"`) a step writes in place. The graph
computes in float32. Large models, and any written with a slot graph, keep their weights in
external data (`model.onnx.data`).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from runtime.manifest import LoraSlot

from .builder import MICROSOFT, GraphBuilder
from .gguf_read import BLOCK, DEFAULT_ZERO, FLOATS, GGUFModel, Linear, concat

OPSET = 17
ACCURACY_LEVEL = 4  # MatMulNBits computes with int8 activations (measured: docs/GGUF.md)
GELU_MLP = ("gemma", "gemma2", "gemma3")  # GeGLU (GELU's tanh form) rather than SwiGLU
# llama.cpp's converter permutes q and k rows for its adjacent-pair rotary (rope type NORM)
INTERLEAVED_ROTARY = ("llama", "granite", "smollm3")
EXTERNAL_DATA_BYTES = 1_500_000_000  # above this (float32 size), weights go to model.onnx.data
INLINE_BYTES = 1024  # smaller arrays stay in the graph file (onnx.save's default threshold)
PAGE = 4096  # external tensors start on a page, so that onnxruntime can map them
# GGUF tensor name -> the Hugging Face (peft target) module it holds
HF_MODULES = {
    "attn_q": "q_proj",
    "attn_k": "k_proj",
    "attn_v": "v_proj",
    "attn_qkv": "qkv_proj",  # phi3's fused q|k|v
    "attn_output": "o_proj",
    "ffn_gate": "gate_proj",
    "ffn_up": "up_proj",
    "ffn_down": "down_proj",
}


class LlamaGraph(GraphBuilder):
    """GraphBuilder over numpy arrays, with the projection forms of `Linear`."""

    def __init__(
        self,
        accuracy_level: int,
        lora: bool = False,
        head_accuracy_level: int | None = None,
        data_file=None,
        data_location: str = "",
    ):
        super().__init__({})
        # an open binary file that each weight is written to as soon as it is made (named
        # `data_location` beside the graph), so that no more than one weight is held at a time
        self.data_file, self.data_location = data_file, data_location
        self.accuracy_level = accuracy_level
        # the LM head's own level (None: `accuracy_level`), see build_llama_graph
        self.head_accuracy_level = (
            accuracy_level if head_accuracy_level is None else head_accuracy_level
        )
        self.block_sums: dict[str, str] = {}  # input name -> its (B, S, K/32) block sums
        self.weight_bytes = 0
        self.lora = lora  # give every projection a LoRA slot
        self.slots: dict[str, LoraSlot] = {}  # slot name -> its inputs, width and parts
        self.slot_inputs: list = []  # the slots' graph inputs (overridable initializers)

    def slot(self, x: str, y: str, name: str, k: int, parts: list[list]) -> str:
        """y + x·A·B, with A (K, r) and B (r, N) graph inputs whose defaults have rank 0."""
        n = sum(rows for _, rows in parts)
        a, b = f"{name}.A", f"{name}.B"
        self.array(a, np.zeros((k, 0), np.float32))
        self.array(b, np.zeros((0, n), np.float32))
        info = helper.make_tensor_value_info
        self.slot_inputs += [
            info(a, TensorProto.FLOAT, [k, f"{name}.rank"]),
            info(b, TensorProto.FLOAT, [f"{name}.rank", n]),
        ]
        # x·A as (Aᵀ·xᵀ)ᵀ: one (r, K)·(K, S) product per row of the batch, so a row's sums never
        # depend on how many rows there are. A plain (B·S, K)·(K, r) product is split among
        # threads by its row count, and with 2 threads rounds a row differently beside 4 or more
        # batch-mates (docs/RUNTIME.md, "Batch invariance").
        (a_t,) = self.node("Transpose", [a], [f"{name}.At"], perm=[1, 0])  # (r, K)
        (x_t,) = self.node("Transpose", [x], [f"{name}.xt"], perm=[0, 2, 1])  # (B, K, S)
        (low_t,) = self.node("MatMul", [a_t, x_t], [f"{name}.xat"])  # (B, r, S)
        (low,) = self.node("Transpose", [low_t], [f"{name}.xa"], perm=[0, 2, 1])  # (B, S, r)
        (delta,) = self.node("MatMul", [low, b], [f"{name}.delta"])  # (B, S, N)
        (y,) = self.node("Add", [y, delta], [f"{name}.out"])
        self.slots[name] = LoraSlot(A=a, B=b, k=k, parts=tuple(tuple(part) for part in parts))
        return y

    def array(self, name: str, value: np.ndarray) -> str:
        value = np.ascontiguousarray(value)
        self.weight_bytes += value.nbytes
        if self.data_file is None or value.nbytes < INLINE_BYTES:
            self.initializers.append(numpy_helper.from_array(value, name))
            return name
        offset = -self.data_file.tell() % PAGE
        self.data_file.write(b"\0" * offset)
        offset = self.data_file.tell()
        self.data_file.write(memoryview(value).cast("B"))
        tensor = TensorProto(
            name=name, dims=value.shape, data_type=helper.np_dtype_to_tensor_dtype(value.dtype)
        )
        tensor.data_location = TensorProto.EXTERNAL
        for key, entry in (("location", self.data_location), ("offset", offset)):
            tensor.external_data.add(key=key, value=str(entry))
        tensor.external_data.add(key="length", value=str(value.nbytes))
        self.initializers.append(tensor)
        return name

    def _sums(self, x: str, k: int) -> str:
        if x not in self.block_sums:
            shape = self.const(f"{x}.block_shape", [0, 0, k // BLOCK, BLOCK], np.int64)
            (blocks,) = self.node("Reshape", [x, shape], [f"{x}.blocks"])  # (B, S, K/32, 32)
            axes = self.const(f"{x}.last_axis", [-1], np.int64)
            (sums,) = self.node("ReduceSum", [blocks, axes], [f"{x}.block_sums"], keepdims=0)
            self.block_sums[x] = sums  # (B, S, K/32)
        return self.block_sums[x]

    def linear(
        self, x: str, lin: Linear, name: str, stored: str | None = None, head: bool = False
    ) -> str:
        """x (B, S, K) -> (B, S, N). `stored` names initializers already holding `lin`'s blocks
        (the tied token table: packed, scales and offsets stored (N, K/32)); `head` computes at
        the LM head's accuracy level."""
        if not lin.quantized:
            (y,) = self.node("MatMul", [x, self.array(f"{name}.weight_t", lin.weight.T)], [name])
            return y
        if stored is None:
            packed = self.array(f"{name}.packed", lin.packed)
            scales = self.array(f"{name}.scales", lin.scales)
        else:
            packed, scales = f"{stored}.packed", f"{stored}.scales"
        (y,) = self.node(
            "MatMulNBits",
            [x, packed, scales],
            [name if lin.offsets is None else f"{name}.nbits"],
            K=lin.k,
            N=lin.n,
            bits=lin.bits,
            block_size=BLOCK,
            accuracy_level=self.head_accuracy_level if head else self.accuracy_level,
        )
        if lin.offsets is None:
            return y
        if stored is None:
            offsets = self.array(f"{name}.offsets_t", lin.offsets.T)  # (K/32, N)
        else:  # onnxruntime folds this Transpose of a constant once, at session creation
            (offsets,) = self.node("Transpose", [f"{stored}.offsets"], [f"{name}.offsets_t"])
        (shift,) = self.node("MatMul", [self._sums(x, lin.k), offsets], [f"{name}.offset"])
        (y,) = self.node("Add", [y, shift], [name])
        return y

    def embed(self, table: Linear, ids: str) -> str:
        """Gather rows of the token table (N = vocab, K = hidden) -> (B, S, K) float32."""
        if not table.quantized:
            (x,) = self.node("Gather", [self.array("token_embd.weight", table.weight), ids], ["x"])
            return x
        nb = table.k // BLOCK
        packed = self.array("token_embd.packed", table.packed)  # (V, K/32, bytes)
        scales = self.array("token_embd.scales", table.scales)  # (V, K/32)
        (codes,) = self.node("Gather", [packed, ids], ["emb.codes"])  # (B, S, K/32, bytes)
        (codes,) = self.node("Cast", [codes], ["emb.codes_f"], to=TensorProto.FLOAT)
        if table.bits == 4:  # byte = low + 16·high; element 2i is the low nibble
            (high,) = self.node(
                "Mul", [codes, self.const("one_16th", 0.0625, np.float32)], ["emb.high_raw"]
            )
            (high,) = self.node("Floor", [high], ["emb.high"])
            (low,) = self.node(
                "Mul", [high, self.const("sixteen", 16.0, np.float32)], ["emb.high_16"]
            )
            (low,) = self.node("Sub", [codes, low], ["emb.low"])
            axis = self.const("axes_last", [-1], np.int64)
            (low,) = self.node("Unsqueeze", [low, axis], ["emb.low_1"])
            (high,) = self.node("Unsqueeze", [high, axis], ["emb.high_1"])
            (codes,) = self.node("Concat", [low, high], ["emb.pairs"], axis=-1)  # (.., 16, 2)
            shape = self.const("emb.block_shape", [0, 0, nb, BLOCK], np.int64)
            (codes,) = self.node("Reshape", [codes, shape], ["emb.codes_32"])  # (B, S, K/32, 32)
        zero = self.const("emb.zero", float(DEFAULT_ZERO[table.bits]), np.float32)
        (w,) = self.node("Sub", [codes, zero], ["emb.centred"])
        axis = self.const("axes_last_1", [-1], np.int64)
        (scale,) = self.node("Gather", [scales, ids], ["emb.scale"])  # (B, S, K/32)
        (scale,) = self.node("Unsqueeze", [scale, axis], ["emb.scale_1"])
        (w,) = self.node("Mul", [w, scale], ["emb.scaled"])
        if table.offsets is not None:
            offsets = self.array("token_embd.offsets", table.offsets)  # (V, K/32)
            (offset,) = self.node("Gather", [offsets, ids], ["emb.offset"])
            (offset,) = self.node("Unsqueeze", [offset, axis], ["emb.offset_1"])
            (w,) = self.node("Add", [w, offset], ["emb.shifted"])
        shape = self.const("emb.shape", [0, 0, table.k], np.int64)
        (x,) = self.node("Reshape", [w, shape], ["x"])  # (B, S, K)
        return x

    def tied_head(self, x: str, table: Linear, k: int, name: str = "logits") -> str:
        """Logits from the token table itself: MatMulNBits over its blocks, or Gemm with transB
        over the float table (no transposed copy)."""
        if table.quantized:
            return self.linear(x, table, name, stored="token_embd", head=True)
        (flat,) = self.node("Reshape", [x, self.const("rows", [-1, k], np.int64)], ["x_rows"])
        (y,) = self.node("Gemm", [flat, "token_embd.weight"], ["logits_rows"], transB=1)
        (batch,) = self.node("Shape", [x], ["x_shape_2"], start=0, end=2)
        vocab = self.const("vocab_1", [table.n], np.int64)
        (shape,) = self.node("Concat", [batch, vocab], ["logits_shape"], axis=0)
        (y,) = self.node("Reshape", [y, shape], [name])  # (B, k, V)
        return y

    def _model(self, nodes, inputs, outputs, initializers) -> onnx.ModelProto:
        graph = helper.make_graph(
            nodes, "lean_llama", inputs, outputs, initializers, value_info=self.value_info
        )
        opsets = [helper.make_opsetid("", OPSET), helper.make_opsetid(MICROSOFT, 1)]
        return helper.make_model(
            graph,
            opset_imports=opsets,
            producer_name="scriptorium.export.lean_llama",
            ir_version=helper.find_min_ir_version_for(opsets, ignore_unknown=True),
        )

    def save_model(
        self, path: Path, inputs: list, outputs: list, lora_path: Path | None = None
    ) -> None:
        """Write the graph without its LoRA slots to `path`; with `lora_path`, also the graph
        with them, both reading their weights from one `<path>.data` file (written once)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        slot_nodes = {n.name for n in self.nodes if n.output[0].startswith("lora.")}
        slot_weights = {name for slot in self.slots.values() for name in (slot.A, slot.B)}
        renamed = {f"{name}.out": None for name in self.slots}  # each slot's sum -> the plain y
        for node in self.nodes:
            if node.output[0] in renamed:
                renamed[node.output[0]] = node.input[0]
        plain_nodes = []
        for node in self.nodes:
            if node.name in slot_nodes:
                continue
            if any(name in renamed for name in node.input):
                node = onnx.NodeProto.FromString(node.SerializeToString())
                node.input[:] = [renamed.get(name, name) for name in node.input]
            plain_nodes.append(node)
        weights = [t for t in self.initializers if t.name not in slot_weights]
        plain = self._model(plain_nodes, inputs, outputs, weights)
        # streamed weights are in the data file already; the graph holds references to them
        onnx.save(plain, str(path))
        if lora_path is None:
            return
        # the same references (location, offset, length) into the one data file
        lora = self._model(self.nodes, inputs + self.slot_inputs, outputs, self.initializers)
        onnx.save(lora, str(lora_path))


def rotary_caches(model: GGUFModel, local: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin (context, rotated dimensions / 2), float32, computed as transformers does
    (float32 inverse frequencies times float32 positions); `local`: the sliding layers' own
    (gemma3: their own base, no scaling)."""
    dim = model.rotary_dim or model.head_size
    base, scale = (model.rope_base_local, 1.0) if local else (model.rope_base, model.rope_scale)
    exponents = np.arange(0, dim, 2, dtype=np.int64).astype(np.float32) / np.float32(dim)
    inv_freq = (1.0 / (np.float32(base) ** exponents)).astype(np.float32)
    if model.rope_factors is not None:
        inv_freq = (inv_freq / model.rope_factors).astype(np.float32)
    positions = np.arange(model.context, dtype=np.float32) / np.float32(scale)
    angles = np.outer(positions, inv_freq).astype(np.float32)  # (context, D/2)
    factor = np.float32(model.rope_attn_factor)  # phi3's LongRoPE: q and k both scaled
    return (np.cos(angles) * factor).astype(np.float32), (np.sin(angles) * factor).astype(
        np.float32
    )


def _io(model: GGUFModel) -> tuple[list, list]:
    info = helper.make_tensor_value_info
    kv = ["batch_size", model.kv_heads, "past_sequence_length", model.head_size]
    present = ["batch_size", model.kv_heads, "total_sequence_length", model.head_size]
    inputs = [info("input_ids", TensorProto.INT64, ["batch_size", "sequence_length"])]
    outputs = [info("logits", TensorProto.FLOAT, ["batch_size", "kept", model.vocab])]
    for i in range(model.layers):
        for kind in ("key", "value"):
            inputs.append(info(f"past_key_values.{i}.{kind}", TensorProto.FLOAT, kv))
            outputs.append(info(f"present.{i}.{kind}", TensorProto.FLOAT, present))
    inputs += [
        info("attention_mask", TensorProto.INT64, ["batch_size", "total_sequence_length"]),
        info("seqlens_k", TensorProto.INT32, ["batch_size"]),
        info("total_sequence_length", TensorProto.INT32, []),
        info("logits_to_keep", TensorProto.INT64, []),
    ]
    return inputs, outputs


def _padding_bias(g: LlamaGraph) -> str:
    """attention_mask (B, T) -> additive bias (B, 1, S, T): -10000 on padding, else 0 (finite,
    so rows made only of padding stay finite)."""
    (steps,) = g.node("Shape", ["input_ids"], ["sequence_length_1"], start=1, end=2)  # (1,)
    (mask,) = g.node("Cast", ["attention_mask"], ["mask_f32"], to=TensorProto.FLOAT)
    (bias,) = g.node("Sub", [mask, g.const("one_f32", 1.0, np.float32)], ["mask_minus_one"])
    (bias,) = g.node("Mul", [bias, g.const("mask_value", 10000.0, np.float32)], ["mask_bias_2d"])
    (bias,) = g.node("Unsqueeze", [bias, g.const("axes_1_2", [1, 2], np.int64)], ["mask_bias_4d"])
    one = g.const("one_i64", [1], np.int64)
    ones = g.const("ones_2", [1, 1], np.int64)
    (shape,) = g.node("Concat", [ones, steps, one], ["bias_shape"], axis=0)
    (bias,) = g.node("Expand", [bias, shape], ["mask_bias"])  # (B, 1, S, T)
    return bias


def build_llama_graph(
    model: GGUFModel,
    path: Path,
    fp32: bool = False,
    accuracy_level: int = ACCURACY_LEVEL,
    lora_path: Path | None = None,
    head_accuracy_level: int | None = None,
) -> dict:
    """Write `model` as a lean decoder graph to `path`. With `fp32` every weight is dequantized to
    float32; otherwise quantized types are carried over (convert/gguf_read.py), computed by
    MatMulNBits at `accuracy_level`, and the LM head at `head_accuracy_level` (None: the same; what
    each costs and buys: docs/GGUF.md, "accuracy_level"). With `lora_path` the same graph with a
    zero-rank LoRA slot on every projection is written there too, sharing the weights file.
    Returns a report: node count, accuracy levels, per GGUF tensor type how its projections were
    stored, and the LoRA slots."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    external = lora_path is not None or 4 * parameter_count(model) > EXTERNAL_DATA_BYTES
    location = path.name + ".data"
    with open(path.parent / location, "wb") if external else contextlib.nullcontext() as data:
        report = _build(model, path, fp32, accuracy_level, lora_path, head_accuracy_level, data)
    return report


def parameter_count(model: GGUFModel) -> int:
    """The model's weight count (GGUF tensors, or a checkpoint's numpy arrays)."""
    return sum(int(np.prod([int(d) for d in t.shape])) for t in model.tensors.values())


def _build(model, path, fp32, accuracy_level, lora_path, head_accuracy_level, data) -> dict:
    g = LlamaGraph(
        accuracy_level,
        lora=lora_path is not None,
        head_accuracy_level=head_accuracy_level,
        data_file=data,
        data_location=path.name + ".data",
    )
    weights = _Weights(model, fp32)
    table = weights.linear("token_embd.weight")
    x = g.embed(table, "input_ids")
    if model.embedding_scale:  # gemma: sqrt(hidden) rounded to float32; granite
        scale = g.const("embedding_scale", model.embedding_scale, np.float32)
        (x,) = g.node("Mul", [x, scale], ["x_scaled"])
    cos, sin = rotary_caches(model)
    rotary = {False: (g.array("cos_cache", cos), g.array("sin_cache", sin))}
    if model.rope_base_local:
        cos, sin = rotary_caches(model, local=True)
        rotary[True] = g.array("cos_cache_local", cos), g.array("sin_cache_local", sin)
    bias = _padding_bias(g)
    if model.architecture == "olmo2":
        normed = _olmo2_layers(g, weights, x, rotary, bias)
    else:
        normed = _pre_norm_layers(g, weights, x, rotary, bias)
    _lm_head(g, weights, normed, table)
    inputs, outputs = _io(model)
    g.save_model(path, inputs, outputs, lora_path)
    return {
        "nodes": len(g.nodes),
        "weight_bytes": g.weight_bytes,
        "accuracy_level": accuracy_level if not fp32 else None,
        "head_accuracy_level": None if fp32 else g.head_accuracy_level,
        "storage": weights.storage,
        "notes": weights.notes,
        "tied_embeddings": "output.weight" not in model.tensors,
        "lora_slots": g.slots,
    }


def _pre_norm_layers(g: LlamaGraph, weights: _Weights, x: str, rotary: dict, bias: str) -> str:
    """The layers with a norm before attention and before the MLP (every family but olmo2):
    the output-normed last hidden state."""
    model = weights.model
    normed = _rms_norm(g, model, x, "blk.0.attn_norm", "h0.attn_in")
    residual = x
    for i in range(model.layers):
        p = f"blk.{i}."
        attn_out = _post_norm(g, model, _attention(g, weights, i, normed, rotary, bias), p)
        normed, residual = _skip_rms_norm(
            g,
            model,
            _scaled(g, model, attn_out, p + "attn_scaled"),
            residual,
            p + "ffn_norm",
            (p + "ffn_in", p + "residual_mid"),
        )
        down = _post_norm(g, model, _mlp(g, weights, i, normed), p, "post_ffw_norm")
        # The residual stream's next norm: the next layer's attn_norm, or output_norm.
        last = i == model.layers - 1
        normed, residual = _skip_rms_norm(
            g,
            model,
            _scaled(g, model, down, p + "mlp_scaled"),
            residual,
            "output_norm" if last else f"blk.{i + 1}.attn_norm",
            ("final", "") if last else (f"blk.{i + 1}.attn_in", p + "residual"),
        )
    return normed


def _olmo2_layers(g: LlamaGraph, weights: _Weights, x: str, rotary: dict, bias: str) -> str:
    """olmo2's layers: attention and MLP read the residual stream itself and their outputs are
    normed before they join it, h += norm(attn(h)), h += norm(mlp(h))."""
    model = weights.model
    for i in range(model.layers):
        p = f"blk.{i}."
        attn_out = _post_norm(g, model, _attention(g, weights, i, x, rotary, bias), p)
        (x,) = g.node("Add", [x, attn_out], [p + "residual_mid"])
        down = _post_norm(g, model, _mlp(g, weights, i, x), p, "post_ffw_norm")
        (x,) = g.node("Add", [x, down], [p + "residual"])
    return _rms_norm(g, model, x, "output_norm", "final")


def _scaled(g: LlamaGraph, model: GGUFModel, x: str, name: str) -> str:
    """x times granite's residual scale (as `name`) before it joins the residual stream, else
    x."""
    if not model.residual_scale:
        return x
    scale = g.const(name + ".factor", model.residual_scale, np.float32)
    (y,) = g.node("Mul", [x, scale], [name])
    return y


@dataclass
class _Weights:
    """The model's projections as `Linear`s, recording how each GGUF tensor type was stored and
    the projections that had to be re-quantized (the report's `storage` and `notes`)."""

    model: GGUFModel
    fp32: bool
    storage: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def linear(self, name: str) -> Linear:
        lin = self.model.linear(name, self.fp32)  # a copy: the file's pages are not needed again
        self.model.release(name)
        self.storage[lin.source] = _storage(lin)
        return lin


def _project(
    g: LlamaGraph, weights: _Weights, x: str, names: list[str], out: str
) -> str | list[str]:
    """x times the GGUF projections `names`: one output `out` when they can share one kernel
    (fused), else one output per projection (`out.0`, `out.1`, …)."""
    parts = [weights.linear(n) for n in names]
    weights.notes += [f"{name}: {part.note}" for name, part in zip(names, parts) if part.note]
    fused = concat(parts)
    if fused is not None:
        groups = [(fused, names, parts, out)]
    else:
        groups = [(p, [n], [p], f"{out}.{j}") for j, (p, n) in enumerate(zip(parts, names))]
    outs = []
    for lin, members, pieces, name in groups:
        y = g.linear(x, lin, name)
        biases = [weights.model.bias(m.removesuffix(".weight") + ".bias") for m in members]
        if any(b is not None for b in biases):  # qwen2's q|k|v; before the slot, so that
            # both graphs fuse projection and bias alike (same rounding)
            prefix = members[0].rsplit(".", 2)[0] + "."  # "blk.3."
            letters = "".join(m.split(".")[2].removeprefix("attn_") for m in members)
            bias = g.array(f"{prefix}{letters}_bias", np.concatenate(biases))
            (y,) = g.node("Add", [y, bias], [f"{prefix}{letters}_b"])
        if g.lora:  # e.g. "blk.3.attn_q.weight" + … -> slot "lora.3.q_proj+k_proj+v_proj"
            modules = [_hf_module(weights.model, m) for m in members]
            slot = f"lora.{members[0].split('.')[1]}.{'+'.join(modules)}"
            rows = [[m, piece.n] for m, piece in zip(modules, pieces)]
            y = g.slot(x, y, slot, lin.k, rows)
        outs.append(y)
    return outs[0] if fused is not None else outs


def _hf_module(model: GGUFModel, name: str) -> str:
    """The Hugging Face module a GGUF tensor holds ("blk.3.attn_q.weight" -> "q_proj")."""
    kind = name.split(".")[2]
    if model.architecture == "phi3" and kind == "ffn_up":  # phi3's fused gate|up
        return "gate_up_proj"
    return HF_MODULES[kind]


def _attention(
    g: LlamaGraph, weights: _Weights, i: int, normed: str, rotary: dict, bias: str
) -> str:
    """Layer i's rotary self-attention over its cache, through the o projection. `rotary`: the
    cos and sin caches by whether the layer slides; `bias`: the padding bias (B, 1, S, T)."""
    model, p = weights.model, f"blk.{i}."
    names = [p + "attn_q.weight", p + "attn_k.weight", p + "attn_v.weight"]
    if p + "attn_qkv.weight" in model.tensors:  # phi3: stored fused
        names = [p + "attn_qkv.weight"]
    qkv = _project(g, weights, normed, names, p)
    qkv = [qkv] if isinstance(qkv, str) else qkv
    query, key, value = (qkv[0], "", "") if len(qkv) == 1 else qkv
    if p + "attn_q_norm.weight" in model.tensors:  # norms of q and k, before rotary
        if len(qkv) == 1:
            sizes = [model.heads * model.head_size] + [model.kv_heads * model.head_size] * 2
            split = g.const(p + "qkv_split", sizes, np.int64)
            query, key, value = g.node(
                "Split", [query, split], [p + "q", p + "k", p + "v"], axis=-1
            )
        query = _qk_norm(g, model, query, p + "attn_q_norm", model.heads)
        key = _qk_norm(g, model, key, p + "attn_k_norm", model.kv_heads)
    slides, rotates = model.slides(i), model.rotates(i)
    cos, sin = rotary[slides and model.rope_base_local > 0] if rotates else ("", "")
    attn, _, _ = g.node(
        "GroupQueryAttention",
        [
            query,  # (B, S, (H + 2·KV)·D) packed, or (B, S, H·D)
            key,
            value,
            f"past_key_values.{i}.key",
            f"past_key_values.{i}.value",
            "seqlens_k",
            "total_sequence_length",
            cos,
            sin,
            "",  # position_ids: derived from seqlens_k (see the module docstring)
            bias,
        ],
        [f"{p}attn", f"present.{i}.key", f"present.{i}.value"],
        num_heads=model.heads,
        kv_num_heads=model.kv_heads,
        do_rotary=int(rotates),  # smollm3: every 4th layer without
        rotary_interleaved=int(model.architecture in INTERLEAVED_ROTARY),
        softcap=model.attention_softcap,
        # the sliding layers (gemma2's even ones, gemma3's all but every 6th): the same count
        # as transformers' `sliding_window` (measured: one less differs from transformers past
        # the window, tests/test_gguf_families.py)
        local_window_size=model.sliding_window if slides else -1,
        **({"scale": model.attention_scale} if model.attention_scale else {}),
    )
    return _project(g, weights, attn, [p + "attn_output.weight"], p + "attn_out")


def _rms_norm(g: LlamaGraph, model: GGUFModel, x: str, norm: str, out: str) -> str:
    """x RMS-normed over its last axis by the GGUF tensor `norm` (its name without `.weight`),
    as `out`."""
    (y,) = g.node(
        "SimplifiedLayerNormalization",
        [x, g.array(norm, model.norm(norm + ".weight"))],
        [out],
        axis=-1,
        epsilon=model.rms_eps,
    )
    return y


def _post_norm(g: LlamaGraph, model: GGUFModel, x: str, p: str, norm="post_attention_norm") -> str:
    """x RMS-normed by layer `p`'s `norm` before it joins the residual (gemma2), else x."""
    if f"{p}{norm}.weight" not in model.tensors:
        return x
    return _rms_norm(g, model, x, p + norm, f"{p}{norm}.out")


def _qk_norm(g: LlamaGraph, model: GGUFModel, x: str, norm: str, heads: int) -> str:
    """RMSNorm `norm` (a GGUF tensor name without `.weight`) of x (B, S, heads·D): over each head
    separately when it has one weight per head dimension (qwen3, gemma3), else over all heads
    together (olmo2)."""
    d = model.head_size
    if model.tensors[norm + ".weight"].shape[0] != d:
        return _rms_norm(g, model, x, norm, f"{norm}.out")
    (per_head,) = g.node(
        "Reshape", [x, g.const(f"{norm}.heads", [0, 0, heads, d], np.int64)], [f"{norm}.in"]
    )  # (B, S, heads, D)
    normed = _rms_norm(g, model, per_head, norm, f"{norm}.normed")
    (y,) = g.node(
        "Reshape", [normed, g.const(f"{norm}.flat", [0, 0, heads * d], np.int64)], [f"{norm}.out"]
    )  # (B, S, heads·D)
    return y


def _mlp(g: LlamaGraph, weights: _Weights, i: int, normed: str) -> str:
    """Layer i's gated MLP: down(act(gate(x)) · up(x)), act SiLU (SwiGLU) or, for gemma, GELU
    with tanh (GeGLU)."""
    p = f"blk.{i}."
    names = [p + "ffn_gate.weight", p + "ffn_up.weight"]
    if names[0] not in weights.model.tensors:  # phi3: gate|up stored fused in ffn_up
        names = names[1:]
    gate_up = _project(g, weights, normed, names, p + "gate_up")
    if isinstance(gate_up, str):
        split = g.const(p + "split", [weights.model.intermediate] * 2, np.int64)
        gate, up = g.node("Split", [gate_up, split], [p + "gate", p + "up"], axis=-1)
    else:
        gate, up = gate_up
    if weights.model.architecture in GELU_MLP:  # GELU, tanh approximation (GeGLU)
        (act,) = g.node("FastGelu", [gate], [p + "gelu"])
    else:
        (sig,) = g.node("Sigmoid", [gate], [p + "gate_sigmoid"])
        (act,) = g.node("Mul", [gate, sig], [p + "silu"])
    (act,) = g.node("Mul", [act, up], [p + "gated"])
    return _project(g, weights, act, [p + "ffn_down.weight"], p + "down")


def _skip_rms_norm(
    g: LlamaGraph, model: GGUFModel, x: str, residual: str, norm: str, names: tuple[str, str]
) -> tuple[str, str]:
    """RMSNorm `norm` (a GGUF tensor name without `.weight`) of x + residual: returns the normed
    sum and the sum itself (the next residual), named `names` ("" drops the sum)."""
    normed, _, _, total = g.node(
        "SkipSimplifiedLayerNormalization",
        [x, residual, g.array(norm, model.norm(norm + ".weight"))],
        [names[0], "", "", names[1]],
        epsilon=model.rms_eps,
    )
    return normed, total


def _lm_head(g: LlamaGraph, weights: _Weights, normed: str, table: Linear) -> None:
    """`logits` of the last `logits_to_keep` positions of `normed`, by the output table, or by
    the token `table` when the model ties them."""
    # Slice from -k (-0 = 0: all).
    (start,) = g.node("Neg", ["logits_to_keep"], ["kept_start"])
    (start,) = g.node("Unsqueeze", [start, g.const("axes_0", [0], np.int64)], ["kept_start_1"])
    end, axis = g.const("end_of_sequence", [2**63 - 1], np.int64), g.const("axes_1", [1], np.int64)
    (kept,) = g.node("Slice", [normed, start, end, axis], ["final_kept"])  # (B, k, d)
    cap, divisor = weights.model.final_softcap, weights.model.logit_scale
    name = "logits_raw" if cap or divisor else "logits"
    if "output.weight" in weights.model.tensors:
        g.linear(kept, weights.linear("output.weight"), name, head=True)
    else:
        g.tied_head(kept, table, weights.model.hidden, name)
    if divisor:  # granite: logits / logit_scale
        g.node("Div", [name, g.const("logit_scale", divisor, np.float32)], ["logits"])
    if cap:  # gemma2, gemma3: cap·tanh(logits / cap)
        (y,) = g.node("Div", [name, g.const("final_softcap", cap, np.float32)], ["logits_scaled"])
        (y,) = g.node("Tanh", [y], ["logits_tanh"])
        g.node("Mul", [y, "final_softcap"], ["logits"])


def _storage(lin: Linear) -> str:
    if not lin.quantized:
        return "float32 MatMul" + ("" if lin.source in FLOATS else " (dequantized)")
    if lin.note:
        return f"re-quantized: {lin.note} (MatMulNBits {lin.bits}-bit)"
    offsets = ", + per-block offsets" if lin.offsets is not None else ""
    return f"carried over: MatMulNBits {lin.bits}-bit, block {BLOCK}, default zero point{offsets}"
