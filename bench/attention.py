"""The cost of onnxruntime's CPU attention for one decoding step, per layer.

    python -m bench.attention [--positions 1 32 100 160] [--threads 2] [--repeats 7]
                              [--out bench/results/attention.json]

A decoding step attends one new token to every cached position, in every layer. This times that
alone, at GPT-2 small's shape (12 heads of 64, batch 1), for the two onnxruntime kernels that
append to a preallocated cache in place: GroupQueryAttention (what export/lean/gpt2.py uses) and
DecoderMaskedMultiHeadAttention. Each graph holds `LAYERS` attention nodes and nothing else, with
every layer's cache bound once as its past and present (IO binding, as runtime/models.py does),
and runs in its own session with the runtime's thread settings. Reported: microseconds per layer
for one new token at each number of cached positions, the median of `--repeats` timed runs.
Both kernels compute the same attention (tests/test_bench_attention.py checks that they agree).
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np

from . import common

HEADS, HEAD_SIZE, LAYERS = 12, 64, 12  # GPT-2 small
KERNELS = ("GroupQueryAttention", "DecoderMaskedMultiHeadAttention")


def attention_graph(kernel: str, heads: int, head_size: int, layers: int, capacity: int) -> bytes:
    """A serialized graph of `layers` attention nodes over caches of `capacity` positions.

    Inputs: q, k, v (1, 1, heads·head_size), `positions` (int32 (1,), cached positions before
    the new token), per layer past_key_i / past_value_i (1, heads, capacity, head_size); outputs
    out_i (1, 1, heads·head_size) and the caches again as present_key_i / present_value_i.
    """
    from onnx import TensorProto, helper

    width = heads * head_size
    cache = [1, heads, capacity, head_size]
    inputs = [
        helper.make_tensor_value_info(name, TensorProto.FLOAT, [1, 1, width]) for name in "qkv"
    ]
    inputs.append(helper.make_tensor_value_info("positions", TensorProto.INT32, [1]))
    nodes, outputs = [], []
    if kernel == "GroupQueryAttention":  # it takes T - 1 (`positions`) and the scalar T
        nodes.append(helper.make_node("Add", ["positions", "one"], ["total_1"]))
        nodes.append(helper.make_node("Squeeze", ["total_1"], ["total"]))
    for i in range(layers):
        past = [f"past_key_{i}", f"past_value_{i}"]
        present = [f"present_key_{i}", f"present_value_{i}"]
        inputs += [helper.make_tensor_value_info(n, TensorProto.FLOAT, cache) for n in past]
        outputs.append(helper.make_tensor_value_info(f"out_{i}", TensorProto.FLOAT, [1, 1, width]))
        outputs += [helper.make_tensor_value_info(n, TensorProto.FLOAT, cache) for n in present]
        if kernel == "GroupQueryAttention":
            node_inputs = ["q", "k", "v", *past, "positions", "total"]
            attrs = dict(num_heads=heads, kv_num_heads=heads)
        else:
            node_inputs = ["q", "k", "v", "", "", *past, "positions"]
            attrs = dict(num_heads=heads, past_present_share_buffer=1)
        nodes.append(
            helper.make_node(
                kernel, node_inputs, [f"out_{i}", *present], domain="com.microsoft", **attrs
            )
        )
    initializers = []
    if kernel == "GroupQueryAttention":
        initializers.append(helper.make_tensor("one", TensorProto.INT32, [1], [1]))
    graph = helper.make_graph(nodes, kernel, inputs, outputs, initializers)
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=8).SerializeToString()


class AttentionStep:
    """One session of `attention_graph`, its caches bound in place; call it for one step."""

    def __init__(self, kernel, positions, threads, heads=HEADS, head_size=HEAD_SIZE, layers=LAYERS):
        import onnxruntime as ort

        from runtime.sessions import create_session

        capacity = positions + 1
        model = attention_graph(kernel, heads, head_size, layers, capacity)
        self.session = create_session(
            model, ["CPUExecutionProvider"], threads, spinning=common.RUNTIME_SPINNING
        )
        rng = np.random.default_rng(0)
        self.binding = self.session.io_binding()
        self.caches = []  # numpy memory the OrtValues use; kept alive here
        for i in range(layers):
            self.binding.bind_output(f"out_{i}")
            for kind in ("key", "value"):
                cache = rng.standard_normal((1, heads, capacity, head_size)).astype(np.float32)
                value = ort.OrtValue.ortvalue_from_numpy(cache)
                self.caches.append((cache, value))
                self.binding.bind_ortvalue_input(f"past_{kind}_{i}", value)
                self.binding.bind_ortvalue_output(f"present_{kind}_{i}", value)
        width = heads * head_size
        self.feeds = {name: rng.standard_normal((1, 1, width)).astype(np.float32) for name in "qkv"}
        self.feeds["positions"] = np.array([positions], dtype=np.int32)

    def __call__(self) -> list[np.ndarray]:
        for name, value in self.feeds.items():
            self.binding.bind_cpu_input(name, value)
        self.session.run_with_iobinding(self.binding)
        # Outputs come in binding order: out_i, then layer i's key and value caches.
        return [value.numpy() for value in self.binding.get_outputs()[::3]]


def microseconds_per_layer(step: AttentionStep, layers: int, repeats: int, calls: int = 50):
    for _ in range(calls):  # warm up
        step()
    runs = []
    for _ in range(repeats):
        tick = time.perf_counter()
        for _ in range(calls):
            step()
        runs.append((time.perf_counter() - tick) / calls / layers * 1e6)
    return statistics.median(runs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--positions", type=int, nargs="+", default=[1, 32, 100, 160])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--out", type=Path, default=common.RESULTS / "attention.json")
    args = parser.parse_args(argv)
    results = {}
    for positions in args.positions:
        for kernel in KERNELS:  # one session at a time: idle spinning threads would compete
            step = AttentionStep(kernel, positions, args.threads)
            results[(positions, kernel)] = microseconds_per_layer(step, LAYERS, args.repeats)
            del step
    rows = [
        [positions, *(f"{results[(positions, kernel)]:.1f}" for kernel in KERNELS)]
        for positions in args.positions
    ]
    print(common.markdown_table(["cached positions", *(f"{k} µs/layer" for k in KERNELS)], rows))
    common.write_results(
        args.out,
        {
            "benchmark": "attention",
            "environment": common.environment(args.threads),
            "shape": {"heads": HEADS, "head_size": HEAD_SIZE, "layers": LAYERS, "batch": 1},
            "unit": "median microseconds per layer for one new token",
            "results": [
                {"positions": p, "kernel": k, "us_per_layer": v} for (p, k), v in results.items()
            ],
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
