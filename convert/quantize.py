"""Weight quantization of single ONNX graphs, and merging a seq2seq decoder pair.

- int8, weight-only (causal LMs): 8-bit MatMulNBits (`MatMulNBitsQuantizer`, `INT8_NBITS_FORMAT`:
  blocks of 32 weights with a scale each, accuracy level 4). The kernel quantizes each row's
  activations on its own, so a row's logits do not depend on the other rows of the batch: what
  continuous batching needs (runtime/engine.py).
- int8, dynamic (seq2seq, fill-mask, paraphraser): onnxruntime's dynamic quantization
  (`quantize_dynamic`, unsigned 8-bit weights with one scale and zero point per tensor;
  activations quantized on the fly by `DynamicQuantizeLinear`, one scale per tensor, so a
  batch-mate changes every row's scale). MatMul only.
- int4: weight-only 4-bit MatMulNBits (`MatMulNBitsQuantizer`, `INT4_FORMAT`: blocks of 128
  weights with a scale and zero point each, accuracy level 4: int8 activations inside the
  kernel). A result without MatMulNBits is an error, never a silently unquantized "int4" graph.

`batch_invariant(model)` says whether a graph computes each row from that row alone (no
per-tensor activation quantization): the manifest's `batch_invariant` flag (docs/bundle.md).

Both quantizers handle MatMul with a constant weight only, and GPT-2's Conv1D layers export as
Gemm: `gemm_to_matmul` rewrites every Gemm with a constant weight into MatMul (+ Add for the bias)
first. The LM head (the MatMul that produces `logits`) can be kept in float32.

Merged seq2seq decoders hold the two decoders in the branches of an If node; instead of
quantizing inside subgraphs, the exporter quantizes decoder and decoder-with-past separately and
merges them afterwards with optimum's `merge_decoders` (`merge_decoder_pair`), which stores
weights that are equal in both once. This module does not optimize graphs or check parity.
"""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

from .optimize import op_counts

# On this AVX-512 VNNI / AMX machine, onnxruntime's kernel for uint8 activations x uint8 weights
# decodes GPT-2 small at batch 1 about a quarter faster than int8 weights per channel (README,
# "Benchmarks"); the trained Bible LM's perplexity change stays well inside 1 % (+0.15 %).
INT8_WEIGHT_TYPE = "QUInt8"  # onnxruntime.quantization.QuantType member name
INT8_PER_CHANNEL = False
INT8_FORMAT = f"{INT8_WEIGHT_TYPE} weights, per {'channel' if INT8_PER_CHANNEL else 'tensor'}"
# Weight-only 8-bit for causal LMs: symmetric blocks of 32, int8 activations per row inside the
# kernel. Measured on the Bible LM (docs/RUNTIME.md "Continuous batching"): seeded sampling beside
# 15 random batch-mates changed 0 of 12 texts (dynamic int8: 10 of 12), with batch-1 speed equal
# to dynamic int8's.
INT8_BLOCK_SIZE = 32
INT8_SYMMETRIC = True
INT8_ACCURACY_LEVEL = 4
INT8_NBITS_FORMAT = (
    f"block {INT8_BLOCK_SIZE}, {'symmetric' if INT8_SYMMETRIC else 'asymmetric'}, "
    f"accuracy level {INT8_ACCURACY_LEVEL}"
)
# Blocks of 128 weights per scale run GPT-2 small's MLP products about a fifth faster than blocks
# of 32 here (2.3 against 2.9 ms a token); on 15k tokens of the Bible LM's test text the
# perplexity change is +0.78 % against +0.61 % (the issue allows 3 %).
INT4_BLOCK_SIZE = 128
INT4_SYMMETRIC = False  # a zero point per block as well as a scale
INT4_ACCURACY_LEVEL = 4  # MatMulNBits computes with int8 activations
INT4_FORMAT = (
    f"block {INT4_BLOCK_SIZE}, {'symmetric' if INT4_SYMMETRIC else 'asymmetric'}, "
    f"accuracy level {INT4_ACCURACY_LEVEL}"
)
# Operators that hold quantized weights or compute on quantized values, for reports and tests.
QUANTIZED_OPS = (
    "MatMulInteger",
    "DynamicQuantizeLinear",
    "DynamicQuantizeMatMul",
    "MatMulIntegerToFloat",
    "MatMulNBits",
    "DequantizeLinear",
    "GatherBlockQuantized",
)
# Operators that quantize a whole tensor's activations with one scale: they mix a batch's rows.
ROW_MIXING_OPS = ("DynamicQuantizeLinear", "DynamicQuantizeMatMul", "DynamicQuantizeLSTM")
# Operators between the LM head's MatMul and the `logits` output (bias, scaling, reshapes).
_HEAD_PASSTHROUGH = ("Add", "Mul", "Div", "Reshape", "Cast", "Identity", "Squeeze", "Unsqueeze")


class QuantizationError(ValueError):
    """Quantization did not produce the quantized graph it promised."""


def check_int4_available() -> None:
    """Raise QuantizationError unless onnxruntime's 4-bit quantizer imports (it needs onnx-ir)."""
    try:
        import onnxruntime.quantization.matmul_nbits_quantizer  # noqa: F401
    except ImportError as error:
        raise QuantizationError(
            f"int4 export needs onnxruntime's MatMulNBits quantizer, which failed to import "
            f"({error}); install the missing package (`pip install onnx-ir`)"
        ) from error


def gemm_to_matmul(model: onnx.ModelProto) -> int:
    """Rewrite, in place, each Gemm with a constant weight into MatMul (+ Add); return the count.

    Only Gemm nodes with alpha = beta = 1 and transA = 0 are rewritten (what exporters write for
    linear layers); a transposed weight (transB = 1) is stored transposed as a new initializer.
    """
    graph = model.graph
    initializers = {init.name: init for init in graph.initializer}
    nodes, rewritten, transposed = [], 0, set()
    for node in graph.node:
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        plain = attrs.get("alpha", 1.0) == 1.0 and attrs.get("beta", 1.0) == 1.0
        if (
            node.op_type != "Gemm"
            or not plain
            or attrs.get("transA", 0)
            or (node.input[1] not in initializers)
        ):
            nodes.append(node)
            continue
        weight_name = node.input[1]
        if attrs.get("transB", 0):
            weight = numpy_helper.to_array(initializers[weight_name]).T  # (K, N) from (N, K)
            transposed.add(weight_name)
            weight_name = f"{weight_name}_transposed"
            graph.initializer.append(
                numpy_helper.from_array(np.ascontiguousarray(weight), weight_name)
            )
        has_bias = len(node.input) > 2 and node.input[2]
        product = f"{node.output[0]}_matmul" if has_bias else node.output[0]
        nodes.append(
            helper.make_node(
                "MatMul", [node.input[0], weight_name], [product], f"{node.name}_MatMul"
            )
        )
        if has_bias:
            nodes.append(
                helper.make_node(
                    "Add", [product, node.input[2]], [node.output[0]], f"{node.name}_Add"
                )
            )
        rewritten += 1
    del graph.node[:]
    graph.node.extend(nodes)
    used = {name for node in graph.node for name in node.input}
    for init in [init for init in graph.initializer if init.name in transposed - used]:
        graph.initializer.remove(init)  # replaced by its transposed copy
    return rewritten


def float_weight_matmuls(model: onnx.ModelProto) -> list[str]:
    """Names of MatMul/Gemm nodes that still multiply by a float constant weight."""
    floats = {
        init.name
        for init in model.graph.initializer
        if init.data_type in (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16)
    }
    return [
        node.name
        for node in model.graph.node
        if node.op_type in ("MatMul", "Gemm") and node.input[1] in floats
    ]


def lm_head_node(model: onnx.ModelProto) -> str | None:
    """Name of the MatMul/Gemm whose result becomes the `logits` output, or None."""
    producers = {out: node for node in model.graph.node for out in node.output}
    initializers = {init.name for init in model.graph.initializer}
    node = producers.get("logits")
    while node is not None and node.op_type in _HEAD_PASSTHROUGH:
        # Follow the input that is computed, not a constant (bias, scale, shape).
        computed = [name for name in node.input if name in producers and name not in initializers]
        if len(computed) != 1:
            return None
        node = producers[computed[0]]
    if node is not None and node.op_type in ("MatMul", "Gemm"):
        return node.name
    return None


@contextlib.contextmanager
def _quiet_quantizer_logs():
    """The quantizers log per node at INFO and advise pre-processing on the root logger."""
    loggers = [logging.getLogger("onnxruntime.quantization"), logging.getLogger()]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


def batch_invariant(model: onnx.ModelProto) -> bool:
    """Whether the graph computes each row of a batch from that row alone: no operator (in the
    graph or its subgraphs) quantizes activations with one scale per tensor (`ROW_MIXING_OPS`).
    Float graphs and weight-only MatMulNBits graphs are; dynamic int8 graphs are not."""
    counts = op_counts(model)
    return not any(counts[op] for op in ROW_MIXING_OPS)


def quantize_graph(
    source: Path, target: Path, precision: str, keep_lm_head: bool, weight_only: bool = False
) -> dict:
    """Quantize the graph in `source` to `precision` ("int8" or "int4") into `target`.

    int4 is always weight-only MatMulNBits; int8 is 8-bit weight-only MatMulNBits when
    `weight_only` (what causal LMs get: batch-invariant), else onnxruntime's dynamic int8.
    Returns {"gemm_rewritten", "float_weight_matmuls" (left unquantized), "lm_head",
    "lm_head_quantized", "ops": {quantized op: count}, "batch_invariant"}. `keep_lm_head` leaves
    the LM head in float32; measured on a small GPT-2 trained on the World English Bible (4
    layers, width 128, perplexity 85.5 on held-out John), quantizing the LM head changed
    perplexity by +0.002 % at int8 and -0.006 % at int4, so it is quantized by default.
    """
    model = onnx.load(str(source))
    rewritten = gemm_to_matmul(model)
    head = lm_head_node(model)
    exclude = [head] if keep_lm_head and head else []
    with _quiet_quantizer_logs():
        if precision == "int8" and not weight_only:
            from onnxruntime.quantization import QuantType, quantize_dynamic

            quantize_dynamic(
                model,
                str(target),
                op_types_to_quantize=["MatMul"],
                per_channel=INT8_PER_CHANNEL,
                weight_type=QuantType[INT8_WEIGHT_TYPE],
                nodes_to_exclude=exclude,
                # Optimizer-fused contrib ops (FastGelu, …) defeat shape inference; their
                # outputs are float32.
                extra_options={
                    "MatMulConstBOnly": True,
                    "DefaultTensorType": onnx.TensorProto.FLOAT,
                },
            )
        elif precision == "int8":
            _matmul_nbits(
                model, target, 8, INT8_BLOCK_SIZE, INT8_SYMMETRIC, INT8_ACCURACY_LEVEL, exclude
            )
        elif precision == "int4":
            _matmul_nbits(
                model, target, 4, INT4_BLOCK_SIZE, INT4_SYMMETRIC, INT4_ACCURACY_LEVEL, exclude
            )
        else:
            raise ValueError(f"`precision` must be 'int8' or 'int4' to quantize, got {precision!r}")
    result = onnx.load(str(target))
    counts = op_counts(result)
    ops = {op: counts[op] for op in QUANTIZED_OPS if counts[op]}
    if (precision == "int4" or weight_only) and not counts["MatMulNBits"]:
        raise QuantizationError(
            f"{precision} quantization of {source.name} produced no MatMulNBits node: the graph "
            "has no MatMul with a constant weight that the MatMulNBits quantizer can take"
        )
    if precision == "int8" and not (
        counts["MatMulInteger"] or counts["DynamicQuantizeMatMul"] or counts["MatMulNBits"]
    ):
        raise QuantizationError(
            f"int8 quantization of {source.name} produced no quantized MatMul: the graph has no "
            "MatMul with a constant weight"
        )
    return {
        "gemm_rewritten": rewritten,
        "float_weight_matmuls": len(float_weight_matmuls(result)),
        "lm_head": head,
        "lm_head_quantized": bool(head) and not keep_lm_head,
        "ops": ops,
        "batch_invariant": batch_invariant(result),
    }


def _matmul_nbits(model, target: Path, bits, block_size, symmetric, accuracy_level, exclude):
    """Weight-only `bits`-bit MatMulNBits for every MatMul with a constant weight, into `target`."""
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    quantizer = MatMulNBitsQuantizer(
        model,
        bits=bits,
        block_size=block_size,
        is_symmetric=symmetric,
        accuracy_level=accuracy_level,
        nodes_to_exclude=exclude,
        op_types_to_quantize=("MatMul",),
    )
    quantizer.process()
    quantizer.model.save_model_to_file(str(target), use_external_data_format=False)


def merge_decoder_pair(decoder: Path, decoder_with_past: Path, target: Path) -> None:
    """Merge a decoder and a decoder-with-past into one graph with a `use_cache_branch` input."""
    from optimum.onnx import merge_decoders

    merge_decoders(decoder, decoder_with_past, save_path=str(target), strict=False)
