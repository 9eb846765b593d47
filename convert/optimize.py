"""ONNX Runtime's transformer optimizer, per graph, where it has fusions for the architecture.

`optimize_graph` runs `onnxruntime.transformers.optimizer.optimize_model` with the optimizer's
model type for the architecture (`OPTIMIZER_MODEL_TYPES`) and reports which fused operators it
introduced. Whether the result is kept is decided by the exporter, which checks its parity with
PyTorch and falls back to the unoptimized graph when it is worse or does not load.

T5 is optimized as "bert": the optimizer's own "t5" type fuses RelativePositionBias, an operator
onnxruntime implements for CUDA only, so its graphs do not load on CPU; the "bert" type still fuses
T5's (Skip)SimplifiedLayerNormalization. This module does not quantize.
"""

from __future__ import annotations

import collections
import logging
from pathlib import Path

import onnx

# Hugging Face model_type -> onnxruntime transformer optimizer model type.
OPTIMIZER_MODEL_TYPES = {
    "gpt2": "gpt2",
    "bart": "bart",
    "mbart": "bart",
    "marian": "bart",
    "t5": "bert",
    "mt5": "bert",
    "gpt_neox": "gpt_neox",
}


def op_counts(model: onnx.ModelProto) -> collections.Counter:
    """Operator types of the main graph and every subgraph (If branches included)."""
    counts = collections.Counter()

    def visit(graph):
        for node in graph.node:
            counts[node.op_type] += 1
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.GRAPH:
                    visit(attr.g)
                for sub in attr.graphs:
                    visit(sub)

    visit(model.graph)
    return counts


def optimize_graph(
    source: Path,
    target: Path,
    architecture: str,
    num_heads: int,
    hidden_size: int,
    model_type: str | None = None,
) -> dict:
    """Optimize `source` into `target`; return a report. `model_type` is the optimizer's (default:
    OPTIMIZER_MODEL_TYPES[architecture]; export/fill_mask.py passes "bert" for its encoders).

    The report: {"model_type", "nodes_before", "nodes_after", "fused"}.

    `fused` counts operator types that appear in the optimized graph but not in the source
    (SkipLayerNormalization, FastGelu, …). Raises KeyError if the architecture has no entry in
    OPTIMIZER_MODEL_TYPES.
    """
    from onnxruntime.transformers.optimizer import optimize_model

    model_type = model_type or OPTIMIZER_MODEL_TYPES[architecture]
    before = op_counts(onnx.load(str(source)))
    # The optimizer logs every fusion attempt at WARNING level; only errors matter here.
    logger = logging.getLogger("onnxruntime.transformers")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        optimized = optimize_model(
            str(source), model_type=model_type, num_heads=num_heads, hidden_size=hidden_size
        )
    finally:
        logger.setLevel(level)
    optimized.save_model_to_file(str(target), use_external_data_format=False)
    after = op_counts(optimized.model)
    return {
        "model_type": model_type,
        "nodes_before": sum(before.values()),
        "nodes_after": sum(after.values()),
        "fused": {op: n for op, n in sorted(after.items()) if op not in before},
    }
