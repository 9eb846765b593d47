"""Which nodes of a slot graph (a GGUF import) round a row differently by the batch it is in.

`python -m bench row-invariance [--bundle DIR] [--threads 1 2] [--rows 1 2 3 4 8 16]` prefills
one random prompt, then runs one decode step of that row alone, and of the same row at the
first, middle and last position of batches of `--rows` rows whose other rows hold other tokens
and other caches. Every node output of the step is a graph output, so for each batch it reports
the first node (in graph order) whose output for the row differs in any bit from the same row's
in a batch of two, and the largest logit difference. The CPU's flags and onnxruntime's version
head the table; results go to `--out` (bench/results/row_invariance.json). What it found, and
what the runtime does about it: docs/RUNTIME.md, "Batch invariance".

Exposing every node as an output keeps onnxruntime from fusing across it; the lean graph is
built of contrib ops already (MatMulNBits, GroupQueryAttention, SkipSimplifiedLayerNormalization),
so the kernels measured are those the runtime runs.
"""

from __future__ import annotations

import argparse
import json
import platform
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

from runtime.bundle import read_manifest
from runtime.sessions import DEVICE_PROVIDERS, create_session

from .common import RESULTS

PROMPT_LENGTH = 20
# Ops whose first output is float32 in a slot graph: the arithmetic a row's logits come from.
FLOAT_OPS = {
    "MatMulNBits",
    "MatMul",
    "Add",
    "Mul",
    "Sigmoid",
    "ReduceSum",
    "Transpose",
    "Split",
    "GroupQueryAttention",
    "SimplifiedLayerNormalization",
    "SkipSimplifiedLayerNormalization",
}


def cpu_flags() -> list[str]:
    """The vector-extension flags of this CPU (Linux), e.g. ["avx2", "avx512f", "avx512_vnni"]."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return []
    line = next((ln for ln in text.splitlines() if ln.startswith("flags")), "")
    wanted = ("avx", "fma", "vnni", "amx", "f16c")
    return sorted({f for f in line.split()[2:] if f.startswith(wanted)})


def _probe_session(bundle: Path, threads: int) -> tuple[ort.InferenceSession, list[tuple]]:
    """A session of the bundle's decoder with every float node output as a graph output, and
    the (op type, node name, output) of those outputs in graph order."""
    model = onnx.load(str(bundle / "model.onnx"), load_external_data=False)
    declared = {o.name for o in model.graph.output}
    watched = []
    for node in model.graph.node:
        out = node.output[0] if node.output else ""
        if out and out not in declared and node.op_type in FLOAT_OPS:
            model.graph.output.append(helper.make_tensor_value_info(out, TensorProto.FLOAT, None))
            watched.append((node.op_type, node.name, out))
    probe = bundle / ".row_invariance.onnx"  # beside model.onnx.data, which it refers to
    onnx.save(model, str(probe))
    try:
        session = create_session(probe, DEVICE_PROVIDERS["cpu"], threads)
    finally:
        probe.unlink()
    return session, watched


def _feeds(session, tokens, caches, length) -> dict:
    """A decode step's feeds: one token per row (N,), each row's cache (N, H, length, D)."""
    rows = len(tokens)
    feeds = {
        "input_ids": np.asarray(tokens, np.int64).reshape(rows, 1),  # (N, 1)
        "attention_mask": np.ones((rows, length + 1), np.int64),
        "seqlens_k": np.full(rows, length, np.int32),
        "total_sequence_length": np.array(length + 1, np.int32),
        "logits_to_keep": np.array(1, np.int64),
    }
    names = [i.name for i in session.get_inputs() if i.name.startswith("past_key_values")]
    feeds.update(zip(names, caches))
    return feeds


def measure(bundle: Path, threads: int, rows_list: list[int]) -> list[dict]:
    session, watched = _probe_session(bundle, threads)
    outputs = [o.name for o in session.get_outputs()]
    past = [i for i in session.get_inputs() if i.name.startswith("past_key_values")]
    heads, size = past[0].shape[1], past[0].shape[3]
    vocab = read_manifest(bundle, verify=False).vocab_size
    rng = np.random.default_rng(0)
    prompt = rng.integers(0, vocab, size=(1, PROMPT_LENGTH))
    empty = [np.zeros((1, heads, 0, size), np.float32)] * len(past)
    prefill = {
        **_feeds(session, prompt[0, :1], empty, 0),
        "input_ids": prompt,
        "attention_mask": np.ones_like(prompt),
        "seqlens_k": np.array([PROMPT_LENGTH - 1], np.int32),
        "total_sequence_length": np.array(PROMPT_LENGTH, np.int32),
    }
    cache = dict(zip(outputs, session.run(outputs, prefill)))
    own = [cache[p.name.replace("past_key_values", "present")] for p in past]

    def step(tokens, position):
        caches = [np.repeat(c * 0.9, len(tokens), axis=0) for c in own]  # others' caches
        for c, mine in zip(caches, own):
            c[position] = mine[0]
        values = session.run(outputs, _feeds(session, tokens, caches, PROMPT_LENGTH))
        # the row's slice of every output laid out by rows (N, …); others (a weight's
        # transpose, a shape) are not the row's
        rows = len(tokens)
        return {n: v[position] for n, v in zip(outputs, values) if v.ndim and len(v) == rows}

    token = int(rng.integers(vocab))
    others = rng.integers(0, vocab, size=max(rows_list))
    reference = step([token, int(others[1])], 0)
    results = []
    for rows in rows_list:
        for position in sorted({0, rows // 2, rows - 1}):
            tokens = [int(t) for t in others[:rows]]
            tokens[position] = token
            got = step(tokens, position)
            first = next(
                (
                    (op, name)
                    for op, name, out in watched
                    if out in got
                    and out in reference
                    and got[out].shape == reference[out].shape
                    and not np.array_equal(got[out], reference[out])
                ),
                None,
            )
            delta = float(np.abs(got["logits"] - reference["logits"]).max())
            results.append(
                {
                    "threads": threads,
                    "rows": rows,
                    "position": position,
                    "max_logit_delta": delta,
                    "first_node": first and {"op": first[0], "name": first[1]},
                }
            )
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="bench row-invariance", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--bundle", type=Path, help="a GGUF import (default: the flagship)")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 2, 3, 4, 8, 16])
    parser.add_argument("--out", type=Path, default=RESULTS / "row_invariance.json")
    parser.add_argument(
        "--label", default="", help="how the CPU was had, e.g. 'qemu-x86_64 -cpu Haswell'"
    )
    args = parser.parse_args(argv)
    if args.bundle is None:
        from convert.flagship import flagship_bundle

        args.bundle = flagship_bundle()
    header = {
        "onnxruntime": ort.__version__,
        "cpu": platform.processor() or platform.machine(),
        "cpu_flags": cpu_flags(),
        "bundle": args.bundle.name,
        "label": args.label,  # under emulation /proc/cpuinfo shows the host's flags, not these
    }
    print(json.dumps(header))
    print("threads rows position  max |Δ logit| vs a batch of 2  first differing node")
    results = []
    for threads in args.threads:
        for row in measure(args.bundle, threads, args.rows):
            results.append(row)
            node = row["first_node"]
            where = f"{node['op']} {node['name']}" if node else "none"
            delta = row["max_logit_delta"]
            print(f"{threads:7d} {row['rows']:4d} {row['position']:8d}  {delta:27.3g}  {where}")
    args.out.write_text(json.dumps({**header, "results": results}, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
