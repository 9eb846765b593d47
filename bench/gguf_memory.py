"""`scriptorium bench gguf-memory`: the GGUF importer's peak memory on models of real sizes.

GGUF files in the exact shapes of SmolLM2-1.7B (llama, 24 layers of width 2048, 32 heads,
SwiGLU 8192, 49,152 tokens, tied) and Qwen2.5-0.5B (qwen2, 24 layers of width 896, 14 query and
2 KV heads of 64, q|k|v biases, SwiGLU 4864, 151,936 tokens, tied) are written here with the
`gguf` package, tensor by tensor (random blocks with bounded float16 scales; a byte-level BPE
vocabulary with one token per embedding row and as many merges, `vocabulary`). Each is then
imported by `export_gguf` in a child process, whose peak resident memory (`ru_maxrss` from
`os.wait4`, file-backed pages of the mapped GGUF included) and wall time are recorded; the bundle
is loaded in another child to check that it runs (one greedy step) and to record what loading costs.

    python -m bench gguf-memory [--shapes smollm2-1.7b qwen2.5-0.5b] [--quants Q4_K Q4_0 Q8_0]
        [--parity] [--work DIR] [--keep] [--out PATH]

Q4_K needs input widths that are multiples of 256, which Qwen2.5-0.5B's 896 is not (llama.cpp
stores those tensors in another type), so Q4_K runs on the SmolLM2 shape only. `--parity` also
measures the default import with its parity report. Results: bench/results/gguf_memory.json and
docs/GGUF.md, "Converter memory".
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from .common import RESULTS, environment, write_results

# name -> (architecture, layers, width, SwiGLU width, query heads, KV heads, head size, vocab,
# context, rope base, rms eps, q|k|v biases)
SHAPES = {
    "smollm2-1.7b": ("llama", 24, 2048, 8192, 32, 32, 64, 49152, 8192, 130000.0, 1e-5, False),
    "qwen2.5-0.5b": ("qwen2", 24, 896, 4864, 14, 2, 64, 151936, 32768, 1000000.0, 1e-6, True),
}
QUANTS = ("Q4_K", "Q4_0", "Q8_0")
BLOCK_BYTES = {"Q4_0": (32, 18), "Q8_0": (32, 34), "Q4_K": (256, 144)}  # weights, bytes per block
LIMIT_BYTES = 4 << 30  # the goal for a 1.7B model


def _blocks(rng: np.random.Generator, quant: str, rows: int, cols: int) -> np.ndarray:
    """Random `quant` blocks for a (rows, cols) weight, float16 scales in [1e-3, 2e-3]."""
    weights, size = BLOCK_BYTES[quant]
    data = rng.integers(0, 256, (rows, cols // weights, size), dtype=np.uint8)
    scale = (rng.uniform(0.5, 1.0, (rows, cols // weights, 1)) * 2e-3).astype(np.float16)
    data[..., 0:2] = scale.view(np.uint8)
    if quant == "Q4_K":  # d and dmin
        data[..., 2:4] = scale.view(np.uint8)
    return data.reshape(rows, -1)


def _tensors(shape: tuple, quant: str) -> list[tuple[str, tuple, str]]:
    """(name, (rows, cols) or (n,), type) of every tensor, in file order."""
    _, layers, d, ff, heads, kv, head, vocab, _, _, _, bias = shape
    out = [("token_embd.weight", (vocab, d), quant)]
    for i in range(layers):
        p = f"blk.{i}."
        out += [
            (p + "attn_norm.weight", (d,), "F32"),
            (p + "attn_q.weight", (heads * head, d), quant),
            (p + "attn_k.weight", (kv * head, d), quant),
            (p + "attn_v.weight", (kv * head, d), quant),
        ]
        if bias:
            out += [
                (p + "attn_q.bias", (heads * head,), "F32"),
                (p + "attn_k.bias", (kv * head,), "F32"),
                (p + "attn_v.bias", (kv * head,), "F32"),
            ]
        out += [
            (p + "attn_output.weight", (d, heads * head), quant),
            (p + "ffn_norm.weight", (d,), "F32"),
            (p + "ffn_gate.weight", (ff, d), quant),
            (p + "ffn_up.weight", (ff, d), quant),
            (p + "ffn_down.weight", (d, ff), quant),
        ]
    return out + [("output_norm.weight", (d,), "F32")]


def vocabulary(size: int) -> tuple[list[str], list[str]]:
    """A byte-level BPE vocabulary of exactly `size` tokens (GPT-2's 256 byte characters, then
    pairs and triples of them) and its merges, one per token past the bytes: a file as large in
    tokens and merges as the real model's, which llama.cpp loads (it needs one token per row of
    the embedding table) and whose metadata costs the reader what the real one does."""
    from tokenizers import pre_tokenizers

    if size < 256:
        raise ValueError(f"`size` must be at least 256, got {size}")
    tokens = sorted(pre_tokenizers.ByteLevel.alphabet())  # GPT-2's 256 byte characters
    merges, bytes_ = [], tokens[:256]
    for left in tokens:  # grows as it goes: pairs, then triples
        for right in bytes_:
            if len(tokens) == size:
                return tokens, merges
            tokens.append(left + right)
            merges.append(f"{left} {right}")
    return tokens, merges


def write_synthetic_gguf(
    path: Path, shape: tuple, quant: str, seed: int = 0, tokens: int | None = None
) -> Path:
    """Write a model of `shape` (as in SHAPES) with `quant` projections to `path`, one tensor at
    a time (never the whole model in memory); its vocabulary has `tokens` tokens (default: one per
    row of the embedding table; at least 256)."""
    import gguf

    arch, layers, d, ff, heads, kv, head, vocab, context, rope, eps, _ = shape
    rng = np.random.default_rng(seed)
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_name(f"synthetic {path.stem}")
    writer.add_block_count(layers)
    writer.add_context_length(context)
    writer.add_embedding_length(d)
    writer.add_feed_forward_length(ff)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv)
    writer.add_layer_norm_rms_eps(eps)
    writer.add_rope_freq_base(rope)
    writer.add_rope_dimension_count(head)
    writer.add_vocab_size(vocab)
    token_list, merges = vocabulary(tokens or vocab)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("qwen2" if arch == "qwen2" else "default")
    writer.add_token_list(token_list)
    writer.add_token_types([1] * len(token_list))
    writer.add_token_merges(merges)
    writer.add_bos_token_id(0)
    writer.add_eos_token_id(1)
    tensors = _tensors(shape, quant)
    for tensor, shape, kind in tensors:
        if kind == "F32":
            writer.add_tensor_info(tensor, shape, np.dtype(np.float32), 4 * shape[0])
        else:
            weights, size = BLOCK_BYTES[kind]
            nbytes = shape[0] * shape[1] // weights * size
            raw = gguf.GGMLQuantizationType[kind]
            writer.add_tensor_info(
                tensor, (shape[0], shape[1] // weights * size), np.uint8, nbytes, raw
            )
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for tensor, shape, kind in tensors:
        if kind == "F32":
            scale = 0.5 if tensor.endswith("bias") else 0.1
            data = (1.0 + scale * rng.standard_normal(shape)).astype(np.float32)
        else:
            data = _blocks(rng, kind, *shape)
        writer.write_tensor_data(data)
    writer.close()
    return path


CHILD = """
import json, sys, time
from convert.gguf import export_gguf
gguf, out, parity = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
start = time.perf_counter()
manifest = export_gguf(gguf, out, parity=parity)
print(json.dumps({"seconds": time.perf_counter() - start, "parity": manifest.parity.to_json()}))
"""
LOAD = """
import json, sys, time
import numpy as np
from runtime import load
from runtime.config import GenerationConfig
start = time.perf_counter()
generator = load(sys.argv[1], threads=2)
loaded = time.perf_counter() - start
out = generator.generate("!", GenerationConfig(max_new_tokens=1, do_sample=False))[0]
print(json.dumps({"seconds": loaded, "tokens": len(out.token_ids)}))
"""


def measure(script: str, *args: str) -> dict:
    """Run `script` in a child Python; its JSON line, peak resident memory and status."""
    start = time.perf_counter()
    with tempfile.TemporaryFile("w+") as stdout, tempfile.TemporaryFile("w+") as stderr:
        child = subprocess.Popen(
            [sys.executable, "-c", script, *args],
            stdout=stdout,
            stderr=stderr,
            text=True,
            cwd=Path(__file__).resolve().parents[1],
        )
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(status)
        stdout.seek(0)
        stderr.seek(0)
        lines, errors = stdout.read().strip().splitlines(), stderr.read()
    result = {
        "peak_rss_bytes": usage.ru_maxrss * 1024,  # Linux reports KiB
        "wall_seconds": round(time.perf_counter() - start, 1),
        "returncode": child.returncode,
    }
    if child.returncode == 0 and lines:
        result.update(json.loads(lines[-1]))
    else:
        result["error"] = errors[-2000:]
    return result


def _gib(value: int) -> str:
    return f"{value / (1 << 30):.2f} GiB"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scriptorium bench gguf-memory", description=__doc__)
    parser.add_argument("--shapes", nargs="+", choices=list(SHAPES), default=list(SHAPES))
    parser.add_argument("--quants", nargs="+", choices=QUANTS, default=list(QUANTS))
    parser.add_argument("--parity", action="store_true", help="also import with the parity report")
    parser.add_argument(
        "--work", type=Path, help="folder for the GGUFs and bundles (default: temp)"
    )
    parser.add_argument(
        "--keep",
        action="store_true",
        help="keep each GGUF and its bundle in --work (for `bench llm --gguf … --bundle …`)",
    )
    parser.add_argument("--out", type=Path, default=RESULTS / "gguf_memory.json")
    args = parser.parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="gguf-memory-"))
    work.mkdir(parents=True, exist_ok=True)
    runs = []
    try:
        for name in args.shapes:
            for quant in args.quants:
                if quant == "Q4_K" and any(w % 256 for w in SHAPES[name][2:4]):
                    continue  # see the module docstring
                gguf_path = write_synthetic_gguf(work / f"{name}-{quant}.gguf", SHAPES[name], quant)
                for parity in (False, True) if args.parity else (False,):
                    bundle = work / f"{name}-{quant}-bundle"
                    shutil.rmtree(bundle, ignore_errors=True)
                    run = {
                        "shape": name,
                        "quant": quant,
                        "parity": parity,
                        "gguf_bytes": gguf_path.stat().st_size,
                        "convert": measure(
                            CHILD, str(gguf_path), str(bundle), "1" if parity else "0"
                        ),
                    }
                    if run["convert"]["returncode"] == 0:
                        run["load"] = measure(LOAD, str(bundle))
                    runs.append(run)
                    convert = run["convert"]
                    print(
                        f"{name} {quant} parity={parity}: GGUF {_gib(run['gguf_bytes'])}, "
                        f"import peak {_gib(convert['peak_rss_bytes'])} in "
                        f"{convert['wall_seconds']} s"
                        + (
                            f", load peak {_gib(run['load']['peak_rss_bytes'])}"
                            if "load" in run
                            else ""
                        )
                    )
                    if not args.keep:
                        shutil.rmtree(bundle, ignore_errors=True)
                if not args.keep:
                    gguf_path.unlink()
    finally:
        if args.work is None and not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    payload = {
        "benchmark": "gguf-memory",
        "limit_bytes": LIMIT_BYTES,
        "environment": environment(2),
        "load_average": os.getloadavg(),
        "runs": runs,
    }
    write_results(args.out, payload)
    return 0 if all(r["convert"]["returncode"] == 0 for r in runs) else 1


if __name__ == "__main__":
    raise SystemExit(main())
