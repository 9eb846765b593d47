"""Probe: decoding speed of optimum's GPT-2 graph vs the lean graph, fp32 / int8 / int4.

Builds a GPT-2-small-shaped model (GPT2Config() defaults, random weights, seed 0), writes
optimum-onnx's `text-generation-with-past` export and `export.lean.gpt2`'s graph into `--work`,
quantizes each (int8: `quantize_dynamic`, QInt8 weights per tensor and per channel, and QUInt8
weights per tensor, export/'s int8 format; int4: `MatMulNBitsQuantizer` in export/'s int4 format,
after rewriting optimum's Gemm nodes to MatMul + Add so that the quantizer
sees them), and times a bare numpy greedy loop around
onnxruntime (batch 1, `--prompt` tokens, `--new-tokens` new tokens, median of `--runs`).
Tokens per second count the new tokens over the whole call, prefill included (`best`: the
fastest run); `step ms` is the median cached step alone and `p10` its 10th percentile, a hint of
the uncontended step time when other jobs share the CPU; `cpu ms/tok` is the CPU time of all
onnxruntime threads per new token (with spinning off, roughly the work done). With `--profile`
it also runs onnxruntime's profiler on each graph and prints where a cached step's time goes, by
operator type.

It measures only these bare loops (no runtime, no peers) and writes `--work`/lean_probe.json.
Both graphs run plainly here, each step returning new `present` tensors; the runtime runs the lean
graph with one shared cache buffer per layer instead (runtime/models.py, `SharedCache`).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import onnx
from tqdm import tqdm

from runtime.sessions import create_session

CPU = ["CPUExecutionProvider"]  # every variant is timed on CPU, as the runtime runs it there
VOCAB = 50257
# int8*: quantize_dynamic (int8 weights and activations; int8-uint8: unsigned weights);
# int8-nbits: MatMulNBits with 8-bit weights; int4: MatMulNBits with 4-bit weights (both in
# export/'s int4 block format).
PRECISIONS = (
    "fp32", "int8", "int8-per-channel", "int8-uint8", "int8-fp32-head", "int8-nbits", "int4"
)  # fmt: skip


def _write_graphs(work: Path) -> dict[str, Path]:
    """fp32 graphs {"optimum": path, "lean": path}; reuses files already in `work`."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    from export.lean.gpt2 import build_gpt2_graph

    paths = {"optimum": work / "optimum" / "model.onnx", "lean": work / "lean" / "model.onnx"}
    if all(p.exists() for p in paths.values()):
        return paths
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config()).eval()
    if not paths["optimum"].exists():
        from optimum.exporters.onnx import main_export

        model.save_pretrained(work / "hf")
        main_export(
            str(work / "hf"), output=str(paths["optimum"].parent), task="text-generation-with-past"
        )
    if not paths["lean"].exists():
        build_gpt2_graph(model, paths["lean"])
    return paths


def _quantize(fp32: Path, precision: str, graph: str) -> Path:
    """Write (once) and return the `precision` variant of the fp32 graph at `fp32`."""
    out = fp32.with_name(f"model_{precision}.onnx")
    if precision == "fp32" or out.exists():
        return fp32 if precision == "fp32" else out
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    from convert.quantize import (
        INT4_ACCURACY_LEVEL,
        INT4_BLOCK_SIZE,
        INT4_SYMMETRIC,
        gemm_to_matmul,
    )

    if precision in ("int8", "int8-per-channel", "int8-uint8", "int8-fp32-head"):
        head = [n.name for n in onnx.load(str(fp32), load_external_data=False).graph.node
                if "logits" in n.output]  # fmt: skip
        quantize_dynamic(
            fp32,
            out,
            weight_type=QuantType.QUInt8 if precision == "int8-uint8" else QuantType.QInt8,
            per_channel=precision == "int8-per-channel",
            nodes_to_exclude=head if precision == "int8-fp32-head" else None,
            extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
        )
    else:
        model = onnx.load(str(fp32))
        if graph == "optimum":
            gemm_to_matmul(model)
        bits = 8 if precision == "int8-nbits" else 4
        quantizer = MatMulNBitsQuantizer(
            model,
            bits=bits,
            block_size=INT4_BLOCK_SIZE,
            is_symmetric=INT4_SYMMETRIC,
            accuracy_level=INT4_ACCURACY_LEVEL,
        )
        quantizer.process()
        quantizer.model.save_model_to_file(str(out))
    return out


def _greedy(session, prompt: np.ndarray, new_tokens: int) -> tuple[float, float, list[float]]:
    """Decode `new_tokens` greedily from `prompt` (1, T): wall seconds, CPU seconds (all threads
    of this process) and the wall seconds of each cached step."""
    past_inputs = [i for i in session.get_inputs() if i.name.startswith("past_key_values")]
    heads, head_size = past_inputs[0].shape[1], past_inputs[0].shape[3]
    present = [o.name for o in session.get_outputs() if o.name.startswith("present")]
    names = [i.name for i in past_inputs]
    wanted = {i.name for i in session.get_inputs()}
    empty = np.zeros((1, heads, 0, head_size), dtype=np.float32)  # (1, H, 0, D)
    length = prompt.shape[1]
    feeds = {
        "input_ids": prompt,
        "attention_mask": np.ones((1, length), dtype=np.int64),
        "position_ids": np.arange(length, dtype=np.int64)[None],  # (1, T)
        **{name: empty for name in names},
    }
    # The lean graph can skip the LM head of all but the last position; optimum's cannot.
    keep_last = (
        {"logits_to_keep": np.array(1, dtype=np.int64)} if "logits_to_keep" in wanted else {}
    )
    feeds.update(keep_last)
    steps = []
    start, cpu_start = time.perf_counter(), time.process_time()
    for step in range(new_tokens):
        tick = time.perf_counter()
        logits, *past = session.run(["logits", *present], feeds)
        if step:
            steps.append(time.perf_counter() - tick)
        token = logits[:, -1].argmax(axis=-1).reshape(1, 1)  # (1, 1)
        total = length + step + 1
        feeds = {
            "input_ids": token,
            "attention_mask": np.ones((1, total), dtype=np.int64),
            "position_ids": np.array([[total - 1]], dtype=np.int64),
            **dict(zip(names, past)),
            **keep_last,
        }
    return time.perf_counter() - start, time.process_time() - cpu_start, steps


def _size(path: Path) -> tuple[int, float]:
    """Node count and megabytes (external data included) of the graph at `path`."""
    nodes = len(onnx.load(str(path), load_external_data=False).graph.node)
    return nodes, sum(f.stat().st_size for f in path.parent.glob(path.name + "*")) / 1e6


def _measure(variants: dict[tuple, Path], args) -> dict[tuple, dict]:
    """Time every (graph, precision, spinning) variant, round-robin so shared-CPU load hits all."""
    prompt = np.random.default_rng(0).integers(0, VOCAB, (1, args.prompt))  # (1, T)
    sessions = {}
    for key, path in tqdm(variants.items(), desc="sessions"):
        sessions[key] = create_session(path, CPU, args.threads, spinning=bool(key[2]))
        _greedy(sessions[key], prompt, 8)  # warm-up: first-run allocations and prepacking
    totals, cpu, steps = defaultdict(list), defaultdict(list), defaultdict(list)
    for _ in tqdm(range(args.runs), desc="timed runs"):
        for key, session in sessions.items():
            total, cpu_seconds, step = _greedy(session, prompt, args.new_tokens)
            totals[key].append(total)
            cpu[key].append(cpu_seconds)
            steps[key].extend(step)
    return {
        key: {
            "tok_s": args.new_tokens / statistics.median(totals[key]),
            "step_ms": 1000 * statistics.median(steps[key]),
            "step_ms_p10": 1000 * float(np.percentile(steps[key], 10)),
            "cpu_ms_per_token": 1000 * statistics.median(cpu[key]) / args.new_tokens,
            "tok_s_runs": [args.new_tokens / t for t in totals[key]],
        }
        for key in sessions
    }


def _profile(path: Path, args, steps: int = 32) -> dict:
    """Where a cached step's time goes, from onnxruntime's profiler: ms per step by operator type
    (plus the kernels whose output has a vocabulary-sized last dimension: the LM head) and the
    number of kernels run per step."""
    session = create_session(path, CPU, args.threads, profile_prefix=args.work / "ort_profile")
    prompt = np.random.default_rng(0).integers(0, VOCAB, (1, args.prompt))  # (1, T)
    _greedy(session, prompt, steps + 1)
    events = json.loads(Path(session.end_profiling()).read_text())
    runs = [e for e in events if e.get("name") == "model_run"]
    prefill_end = runs[0]["ts"] + runs[0]["dur"]
    kernels = [
        e
        for e in events
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time") and e["ts"] >= prefill_end
    ]
    by_op: dict[str, float] = defaultdict(float)
    for event in kernels:
        by_op[event["args"].get("op_name", "?")] += event["dur"]
        shapes = [
            dims for out in event["args"].get("output_type_shape", []) for dims in out.values()
        ]
        if any(dims and dims[-1] == VOCAB for dims in shapes):
            by_op["(vocab-sized outputs)"] += event["dur"]
    by_op["(whole run)"] = sum(e["dur"] for e in runs[1:])
    return {
        "kernels_per_step": len(kernels) / steps,
        "ms_per_step": {
            op: us / 1000 / steps for op, us in sorted(by_op.items(), key=lambda kv: -kv[1])
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path("/tmp/lean_probe"))
    parser.add_argument("--graphs", nargs="+", default=["optimum", "lean"])
    parser.add_argument("--precisions", nargs="+", default=list(PRECISIONS), choices=PRECISIONS)
    parser.add_argument("--prompt", type=int, default=32, help="prompt tokens")
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--runs", type=int, default=5, help="timed runs; the median is reported")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--spinning", nargs="+", type=int, default=[0], help="session.intra_op.allow_spinning"
    )
    parser.add_argument("--profile", action="store_true", help="also profile each graph")
    args = parser.parse_args(argv)

    args.work.mkdir(parents=True, exist_ok=True)
    fp32 = _write_graphs(args.work)
    jobs = [(g, p) for g in args.graphs for p in args.precisions]
    paths = {(g, p): _quantize(fp32[g], p, g) for g, p in tqdm(jobs, desc="graphs")}
    variants = {(g, p, spin): path for (g, p), path in paths.items() for spin in args.spinning}
    load_before = os.getloadavg()[0]
    timings = _measure(variants, args)
    rows = []
    for (graph, precision, spinning), path in variants.items():
        nodes, mb = _size(path)
        row = {"graph": graph, "precision": precision, "spinning": spinning, "nodes": nodes}
        row.update(mb=mb, **timings[(graph, precision, spinning)])
        if args.profile and spinning == args.spinning[0]:
            row["profile"] = _profile(path, args)
        rows.append(row)

    print(
        f"\nGPT-2 small shape, batch 1, greedy, prompt {args.prompt}, {args.new_tokens} new tokens,"
        f" {args.threads} threads, median of {args.runs} round-robin runs;"
        f" load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after"
    )
    print(
        f"{'graph':8} {'precision':17} {'spin':>4} {'nodes':>6} {'MB':>6} {'tok/s':>7} "
        f"{'best':>7} {'step ms':>8} {'p10':>6} {'cpu ms/tok':>10}"
    )
    for r in rows:
        print(
            f"{r['graph']:8} {r['precision']:17} {r['spinning']:>4} {r['nodes']:>6} "
            f"{r['mb']:>6.0f} {r['tok_s']:>7.1f} {max(r['tok_s_runs']):>7.1f} {r['step_ms']:>8.2f} "
            f"{r['step_ms_p10']:>6.2f} {r['cpu_ms_per_token']:>10.2f}"
        )
    for r in rows:
        if "profile" in r:
            ops = ", ".join(
                f"{op} {ms:.2f}" for op, ms in list(r["profile"]["ms_per_step"].items())[:10]
            )
            print(
                f"profile {r['graph']} {r['precision']}: {r['profile']['kernels_per_step']:.0f} "
                f"kernels/step; ms/step: {ops}"
            )
    (args.work / "lean_probe.json").write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
