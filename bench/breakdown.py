"""Where Scriptorium's decoding time goes, per new token, next to the matmuls-only ceiling.

    python -m bench.breakdown [--precision int8] [--scenario "batch 1, greedy"] [--threads 2]
                              [--repeats 7] [--work DIR] [--out bench/results/breakdown.json]

The model and settings of bench.decode (GPT-2 small, random 32-token prompts, 128 new tokens).
One `generate` call is split by timing, from inside it, the model's `start` (the prompt's graph
call) and `step` calls (one cached graph call each, with the runtime's feeds and cache handling):
- prefill: the prompt's call, spread over the new tokens;
- graph steps: the cached steps' calls;
- outside the model: everything else of the call (search loop, log-probabilities, sampling,
  detokenising, events).
Next to them, the ceiling (bench/ceiling.py): the same weight MatMuls alone, once per new token.
Each round runs the generate call and then the ceiling; reported are medians over the rounds.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from . import ceiling, common, decode

PARTS = ("prefill", "graph steps", "outside the model")


def time_parts(gen, prompts: list[str], config, ceiling_run: Callable, repeats: int) -> dict:
    """Median seconds of each part of `gen.generate(prompts, config)`, of the whole call and of
    `ceiling_run()`, over `repeats` rounds (after one warm-up round)."""
    model = gen.model
    spent = {"start": 0.0, "step": 0.0}

    def timed(name: str, call: Callable) -> Callable:
        def wrapper(*args):
            tick = time.perf_counter()
            try:
                return call(*args)
            finally:
                spent[name] += time.perf_counter() - tick

        return wrapper

    original = model.start, model.step
    model.start, model.step = timed("start", model.start), timed("step", model.step)
    rounds = []
    try:
        for _ in range(repeats + 1):
            spent.update(start=0.0, step=0.0)
            tick = time.perf_counter()
            gen.generate(prompts, config)
            total = time.perf_counter() - tick
            tick = time.perf_counter()
            ceiling_run()
            matmuls = time.perf_counter() - tick
            outside = total - spent["start"] - spent["step"]
            rounds.append((spent["start"], spent["step"], outside, total, matmuls))
    finally:
        model.start, model.step = original
    names = (*PARTS, "total", "ceiling")
    return {name: statistics.median(values) for name, values in zip(names, zip(*rounds[1:]))}


def table(seconds: dict, new_tokens: int) -> str:
    def row(name: str) -> list:
        ms = seconds[name] / new_tokens * 1e3
        return [name, f"{ms:.2f}", f"{seconds[name] / seconds['total']:.0%}"]

    rows = [row(name) for name in (*PARTS, "total")]
    rows.append([*row("ceiling")[:2], f"{seconds['ceiling'] / seconds['total']:.0%} of total"])
    rows[-1][0] = "ceiling: weight MatMuls alone"
    return common.markdown_table(["part", "ms per new token", "share"], rows)


def main(argv: list[str] | None = None) -> int:
    import runtime

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--precision", default="int8", choices=["fp32", "int8", "int4"])
    parser.add_argument("--scenario", default="batch 1, greedy", choices=list(decode.SCENARIOS))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--work", type=Path, default=common.DEFAULT_WORK)
    parser.add_argument("--out", type=Path, default=common.RESULTS / "breakdown.json")
    args = parser.parse_args(argv)

    paths = decode.prepare(args.work.expanduser() / "gpt2-small")
    settings = dict(decode.SCENARIOS[args.scenario])
    batch = settings.pop("batch")
    rng = np.random.default_rng(0)
    prompts = [
        " ".join(f"t{i}" for i in row)
        for row in rng.integers(1, 50257, size=(batch, decode.PROMPT_TOKENS))
    ]
    new_tokens = decode.NEW_TOKENS
    config = runtime.GenerationConfig(
        max_new_tokens=new_tokens, min_new_tokens=new_tokens, seed=0, **settings
    )
    gen = runtime.load(
        paths[args.precision], threads=args.threads, spinning=common.RUNTIME_SPINNING
    )
    ceiling_run = ceiling.ceiling_runner(
        paths["checkpoint"], paths["checkpoint"].parent, args.precision, args.threads, batch,
        new_tokens,
    )  # fmt: skip
    seconds = time_parts(gen, prompts, config, ceiling_run, args.repeats)
    print(f"scriptorium {args.precision}, {args.scenario}, {new_tokens} new tokens per row")
    print(table(seconds, new_tokens))
    common.write_results(
        args.out,
        {
            "benchmark": "breakdown",
            "environment": common.environment(args.threads),
            "precision": args.precision,
            "scenario": args.scenario,
            "new_tokens": new_tokens,
            "repeats": args.repeats,
            "median_seconds": seconds,
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
