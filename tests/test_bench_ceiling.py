"""bench.ceiling's graph is one decoding step's weight MatMuls and nothing else, at each precision;
bench.common.interleaved_medians times engines in turn."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from transformers import GPT2Config

from bench import ceiling, common
from convert.quantize import QUANTIZED_OPS

CONFIG = GPT2Config(n_layer=2, n_embd=32, n_head=2, n_inner=48, vocab_size=50)


def test_weights_only_graph_holds_every_weight_matrix_once(tmp_path):
    path = tmp_path / "model.onnx"
    ceiling.weights_only_graph(CONFIG, path)
    model = onnx.load(str(path))
    assert {node.op_type for node in model.graph.node} == {"MatMul"}
    shapes = sorted(tuple(w.dims) for w in model.graph.initializer)
    per_layer = [(32, 96), (32, 32), (32, 48), (48, 32)]
    assert shapes == sorted(per_layer * 2 + [(32, 50)])
    assert model.graph.output[-1].name == "logits"


@pytest.mark.parametrize("precision", ["fp32", "int8", "int4"])
def test_ceiling_runner_runs_the_quantized_step(tmp_path, monkeypatch, precision):
    checkpoint = tmp_path / "checkpoint"
    CONFIG.save_pretrained(checkpoint)
    run = ceiling.ceiling_runner(checkpoint, tmp_path, precision, threads=1, batch=3, calls=2)
    run()
    if precision != "fp32":
        graph = tmp_path / common.cache_name("weights-only", precision) / "model.onnx"
        ops = {node.op_type for node in onnx.load(str(graph)).graph.node}
        assert ops & set(QUANTIZED_OPS) and "MatMul" not in ops  # every weight is quantized


def test_interleaved_medians_runs_engines_in_turn():
    order = []
    runs = {name: (lambda name=name: order.append(name)) for name in "ab"}
    medians = common.interleaved_medians(runs, repeats=3, warmup=1)
    assert order == ["a", "b"] * 4
    assert set(medians) == {"a", "b"} and all(np.isfinite(list(medians.values())))
