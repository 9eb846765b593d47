"""The decode ceiling: how fast one decoding step's weight MatMuls alone can run here.

A decoding step multiplies each row's activations by every weight matrix of the model once.
`weights_only_graph` writes a graph that does exactly that and nothing else, for a GPT-2 config:
per layer the four projections (attention QKV and output, MLP in and out), then the LM head, each
a MatMul of a (batch, 1, d) input with a constant weight. There is no embedding lookup, no
attention over the cache, no layer norm, no activation and no Python loop, so no engine built on
onnxruntime's kernels can decode faster than this graph runs, once per token, at the same
precision and thread count. `ceiling_runner` quantizes it with export/'s own quantizer (int8:
`quantize_dynamic`; int4: MatMulNBits) and times it like an engine: one call per new token.

For fp32 the graph reads ~500 MB per token and measures memory bandwidth; for int8 and int4 it
measures onnxruntime's quantized matrix-vector kernels on this CPU. It measures nothing else.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from . import common


def weights_only_graph(config, path: Path) -> None:
    """Write the fp32 graph of one step's weight MatMuls for a `transformers.GPT2Config`."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    width, inner = config.n_embd, config.n_inner or 4 * config.n_embd
    shapes = [(width, 3 * width), (width, width), (width, inner), (inner, width)] * config.n_layer
    shapes.append((width, config.vocab_size))  # the LM head, last so that it makes `logits`
    rng = np.random.default_rng(0)
    nodes, weights, inputs, outputs = [], [], [], []
    for i, (rows, cols) in enumerate(shapes):
        name = "logits" if i == len(shapes) - 1 else f"y{i}"
        weight = (rng.standard_normal((rows, cols)) * 0.02).astype(np.float32)
        weights.append(numpy_helper.from_array(weight, f"w{i}"))
        # Each MatMul has its own input, as in a model, so each quantizes its own activations.
        nodes.append(helper.make_node("MatMul", [f"x{i}", f"w{i}"], [name]))
        inputs.append(helper.make_tensor_value_info(f"x{i}", TensorProto.FLOAT, ["batch", 1, rows]))
        outputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, ["batch", 1, cols]))
    graph = helper.make_graph(nodes, "weights_only_step", inputs, outputs, weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))


def ceiling_runner(
    checkpoint: Path, work: Path, precision: str, threads: int, batch: int, calls: int
):
    """A callable that runs the weights-only step for `batch` rows `calls` times, as an engine
    would once per new token."""
    from transformers import GPT2Config

    from convert.quantize import quantize_graph
    from runtime.sessions import create_session

    fp32 = work / "weights-only-fp32" / "model.onnx"
    if not fp32.exists():
        weights_only_graph(GPT2Config.from_pretrained(checkpoint), fp32)
    path = fp32
    if precision != "fp32":
        path = work / common.cache_name("weights-only", precision) / "model.onnx"
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            quantize_graph(fp32, path, precision, keep_lm_head=False)
    session = create_session(path, ["CPUExecutionProvider"], threads, common.RUNTIME_SPINNING)
    rng = np.random.default_rng(0)
    feeds = {
        node.name: rng.standard_normal((batch, 1, node.shape[-1])).astype(np.float32)
        for node in session.get_inputs()
    }

    def run():
        for _ in range(calls):
            session.run(None, feeds)

    return run
