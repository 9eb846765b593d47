"""Whether the peers in their own virtual environment (onnxruntime-genai, OpenVINO through
optimum-intel and through OpenVINO GenAI: bench/venv_peers.py) keep a request's output
independent of its batch-mates.

    python -m bench.peer_batch [--gguf FILE] [--bundle DIR] [--threads 2] [--new-tokens 32]
                               [--engines onnxruntime-genai openvino openvino-genai]

Four different prompts (the first `BATCH` chats of bench/fidelity.py, rendered by the flagship's
chat template: different lengths, so the batch is padded) are generated greedily, exactly
`--new-tokens` tokens each, by each engine's own batching API (bench/venv_peers.py's `batch` call:
onnxruntime-genai's Generator with `batch_size` 4, optimum-intel's `generate` and OpenVINO GenAI's
`LLMPipeline.generate` on a padded batch), and each prompt again alone through the same API (a batch
of 1). Per prompt: whether the greedy tokens are identical, the first step where they differ, and
the largest difference between the logits each step's token was chosen from (0.0 = bit-identical;
"n/a" for OpenVINO GenAI, which does not expose them). Models are those bench/llm.py builds
(`prepare`), the same GGUF. Results: a table, and JSON in `--out`.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import numpy as np

from runtime.bundle import sha256_of

from . import common, llm, venv_peers
from .fidelity import CHATS

BATCH = 4


def compare(alone: dict, together: dict, row: int) -> dict:
    """One prompt's output alone (`alone`: a batch of 1) against row `row` of `together`:
    {"tokens_identical", "first_difference" (the first step whose tokens differ, or None),
    "max_abs_logit_diff" (over every step, 0.0 when bit-identical; None when the engine
    returns no logits)}."""
    mine, theirs = alone["tokens"][0], together["tokens"][row]
    different = [step for step, (a, b) in enumerate(zip(mine, theirs)) if a != b]
    gap = None
    if alone["logits"] is not None:
        gap = float(np.abs(alone["logits"][0] - together["logits"][row]).max())  # over (N, V)
    return {
        "tokens_identical": mine == theirs,
        "first_difference": different[0] if different else None,
        "max_abs_logit_diff": gap,
    }


def results_table(results: dict) -> str:
    """One row an engine and prompt: its length, tokens identical, first differing step and
    max |Δlogit| alone against in the batch."""
    header = ["engine", "prompt tokens", "greedy tokens identical", "first difference"]
    header.append("max |Δlogit|")
    rows = [
        [
            engine,
            row["prompt_tokens"],
            "yes" if row["tokens_identical"] else "no",
            "" if row["first_difference"] is None else row["first_difference"],
            "n/a" if row["max_abs_logit_diff"] is None else f"{row['max_abs_logit_diff']:.3g}",
        ]
        for engine, result in results.items()
        for row in result["rows"]
    ]
    return common.markdown_table(header, rows)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gguf", type=Path, default=None, help="default: the flagship's GGUF")
    parser.add_argument("--bundle", type=Path, default=None, help="default: the GGUF converted")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument(
        "--engines", nargs="+", choices=list(llm.VENV_PEERS), default=list(llm.VENV_PEERS)
    )
    parser.add_argument("--work", type=Path, default=common.DEFAULT_WORK)
    parser.add_argument("--out", type=Path, default=common.RESULTS / "peer_batch.json")
    args = parser.parse_args(argv)
    llm.check_and_convert(parser, args)  # fills in --gguf and --bundle; --new-tokens ≥ 2
    return args


def main(argv: list[str] | None = None) -> int:
    import runtime

    args = parse_args(argv)
    skipped = llm.skip_unavailable(args)
    venv = venv_peers.venv_dir(args.work)
    paths = llm.prepare(args.gguf, llm.work_dir(args.work, args.gguf), args.engines, venv)
    gen = runtime.load(args.bundle, threads=args.threads)
    prompts = [gen.encode_chat(messages) for messages in CHATS[:BATCH]]
    results = {}
    for engine in args.engines:
        peer = llm.VENV_PEERS[engine]
        child = venv_peers.PeerProcess(venv, peer.MODULE, paths[engine], args.threads)
        together = child.call("batch", prompts=prompts, new_tokens=args.new_tokens)
        rows = []
        for row, prompt in enumerate(prompts):
            alone = child.call("batch", prompts=[prompt], new_tokens=args.new_tokens)
            rows.append({"prompt_tokens": len(prompt), **compare(alone, together, row)})
        results[engine] = {"versions": child.call("versions"), "rows": rows}
        child.close()
    table = results_table(results)
    print(table)
    common.write_results(
        args.out,
        {
            "benchmark": "peer_batch",
            "environment": common.environment(args.threads),
            "load_average": list(os.getloadavg()),
            "gguf": {"file": args.gguf.name, "sha256": sha256_of(args.gguf)},
            "new_tokens": args.new_tokens,
            "batch": BATCH,
            "skipped": skipped,
            "results": results,
            "table": table,
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
