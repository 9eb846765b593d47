"""Sampling-kernel speed: runtime.sampling.Sampler vs transformers' warpers vs a numpy full sort.

    python -m bench.sampling [--threads 1] [--repeats 5] [--vocab 50257 8000] [--batch 1 8 32]
                             [--out bench/results/sampling.json]

One step = filter a batch of logits and draw one token per row. Three implementations, the same
logits for each, the same thread count (torch.set_num_threads and BLAS threads):
- scriptorium: `runtime.sampling.Sampler(...)(logits, rng)` (no full sort of the vocabulary);
- transformers: TemperatureLogitsWarper → TopKLogitsWarper → TopPLogitsWarper (those the setting
  enables, as generate() adds them), then softmax and torch.multinomial;
- numpy-sort: the textbook numpy version: divide, argsort each row, softmax, cumulative sum, cut,
  inverse-CDF draw.
Settings: "temperature 0.8 + top-k 50 + top-p 0.95" and "top-p 0.95 alone".

Logits (fixed seed): like a trained LM's, Zipf-shaped: row r has logit -a_r·ln(rank) + 0.3·N(0, 1)
for the token of each rank, ranks shuffled over the vocabulary, with a_r uniform in [1.0, 2.0] (at
V = 50,257 top-p 0.95 then keeps from ~10 to ~27,000 tokens; the median row keeps ~370). Each run
cycles through 64 distinct rows (64 // batch batches, at least 2), so a time averages that spread.
Reported: the median over `--repeats` runs of microseconds per step. The implementations take
turns run by run, and with --threads 1 the clock is the process's CPU time (equal to wall time on
an idle machine, and robust to other load on a shared one).
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np

from . import common

SETTINGS = {
    "temperature 0.8 + top-k 50 + top-p 0.95": dict(temperature=0.8, top_k=50, top_p=0.95),
    "top-p 0.95 alone": dict(top_p=0.95),
}
ROWS_PER_RUN = 64  # distinct logits rows per timed run (at least 2 steps)
MIN_RUN_SECONDS = 0.05  # each timed run repeats its steps until it lasts this long


def zipf_logits(steps: int, batch: int, vocab: int, seed: int = 0) -> np.ndarray:
    """(steps, batch, vocab) float32 Zipf-shaped logits, as described in the module docstring."""
    rng = np.random.default_rng(seed)
    log_rank = np.log(np.arange(1, vocab + 1, dtype=np.float64))  # (V,)
    out = np.empty((steps, batch, vocab), dtype=np.float32)
    for step in range(steps):
        exponent = rng.uniform(1.0, 2.0, size=(batch, 1))  # (B, 1)
        by_rank = -exponent * log_rank + 0.3 * rng.standard_normal((batch, vocab))  # (B, V)
        out[step] = rng.permuted(by_rank, axis=1)
    return out


def scriptorium_step(settings: dict):
    from runtime import sampling

    sampler = sampling.Sampler(**settings)
    rng = np.random.default_rng(0)
    return lambda logits: sampler(logits, rng)


def transformers_step(settings: dict):
    import torch
    from transformers.generation.logits_process import (
        TemperatureLogitsWarper,
        TopKLogitsWarper,
        TopPLogitsWarper,
    )

    warpers = []
    if settings.get("temperature", 1.0) != 1.0:
        warpers.append(TemperatureLogitsWarper(settings["temperature"]))
    if settings.get("top_k", 0):
        warpers.append(TopKLogitsWarper(settings["top_k"]))
    if settings.get("top_p", 1.0) < 1.0:
        warpers.append(TopPLogitsWarper(settings["top_p"]))
    generator = torch.Generator().manual_seed(0)

    def step(logits: np.ndarray) -> np.ndarray:
        scores = torch.from_numpy(logits)
        for warper in warpers:
            scores = warper(None, scores)
        probs = torch.softmax(scores, dim=-1)
        return torch.multinomial(probs, 1, generator=generator)[:, 0].numpy()

    return step


def numpy_sort_step(settings: dict):
    temperature = settings.get("temperature", 1.0)
    top_k, top_p = settings.get("top_k", 0), settings.get("top_p", 1.0)
    rng = np.random.default_rng(0)

    def step(logits: np.ndarray) -> np.ndarray:
        scores = logits / np.float32(temperature)  # (B, V)
        order = np.argsort(-scores, axis=1)  # (B, V) descending
        ranked = np.take_along_axis(scores, order, axis=1)
        if top_k:
            ranked[:, top_k:] = -np.inf
        probs = np.exp(ranked - ranked[:, :1])
        probs /= probs.sum(axis=1, keepdims=True)
        before = np.cumsum(probs, axis=1) - probs  # (B, V) mass ranked above each token
        probs[before >= top_p] = 0.0  # keep the smallest prefix reaching top_p
        cdf = np.cumsum(probs, axis=1)
        u = rng.random((scores.shape[0], 1)) * cdf[:, -1:]
        picks = (cdf <= u).sum(axis=1)  # (B,) first rank whose cumulative mass exceeds u
        return order[np.arange(scores.shape[0]), picks]

    return step


def seconds_per_step(steps: dict, batches: np.ndarray, repeats: int, clock) -> dict[str, float]:
    """name -> median seconds per step over `repeats` runs, each cycling through `batches`.

    The implementations take turns run by run, so a change in machine load hits all of them.
    """
    passes = {}
    for name, step in steps.items():
        step(batches[0])  # warm-up: imports, caches
        passes[name] = 1
        while True:  # enough passes over the batches for a run to last MIN_RUN_SECONDS
            start = clock()
            for _ in range(passes[name]):
                for logits in batches:
                    step(logits)
            if clock() - start >= MIN_RUN_SECONDS:
                break
            passes[name] *= 2
    times = {name: [] for name in steps}
    for _ in range(repeats):
        for name, step in steps.items():
            start = clock()
            for _ in range(passes[name]):
                for logits in batches:
                    step(logits)
            times[name].append((clock() - start) / (passes[name] * len(batches)))
    return {name: statistics.median(values) for name, values in times.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--vocab", type=int, nargs="+", default=[50_257, 8_000])
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--out", type=Path, default=common.RESULTS / "sampling.json")
    args = parser.parse_args(argv)

    import threadpoolctl

    # Single-threaded runs are timed in process CPU time, which equals wall time on an idle
    # machine and ignores time spent descheduled on a busy one; threaded runs in wall time.
    clock = time.process_time if args.threads == 1 else time.perf_counter
    common.set_torch_threads(args.threads)
    implementations = {
        "scriptorium": scriptorium_step,
        "transformers": transformers_step,
        "numpy-sort": numpy_sort_step,
    }
    results = []
    with threadpoolctl.threadpool_limits(args.threads):
        for vocab in args.vocab:
            for batch in args.batch:
                steps = max(2, ROWS_PER_RUN // batch)
                batches = zipf_logits(steps, batch, vocab)
                for setting, settings in SETTINGS.items():
                    steps = {name: make(settings) for name, make in implementations.items()}
                    seconds = seconds_per_step(steps, batches, args.repeats, clock)
                    micros = {name: 1e6 * value for name, value in seconds.items()}
                    results.append(dict(vocab=vocab, batch=batch, setting=setting, us=micros))
                    print(
                        f"V={vocab} B={batch} {setting}: "
                        + ", ".join(f"{name} {us:,.0f} µs" for name, us in micros.items())
                    )

    header = ["V", "batch", "setting", "scriptorium µs", "transformers µs", "numpy-sort µs"]
    header += ["vs transformers", "vs numpy-sort"]
    rows = []
    for r in results:
        us = r["us"]
        rows.append(
            [r["vocab"], r["batch"], r["setting"], us["scriptorium"], us["transformers"]]
            + [us["numpy-sort"], f"{us['transformers'] / us['scriptorium']:.1f}×"]
            + [f"{us['numpy-sort'] / us['scriptorium']:.1f}×"]
        )
    print(common.markdown_table(header, rows))
    common.write_results(
        args.out,
        {
            "benchmark": "sampling",
            "environment": common.environment(args.threads),
            "logits": "Zipf-shaped, fixed seed: see bench/sampling.py",
            "unit": "median microseconds per step (filter + one draw per row)",
            "clock": clock.__name__,
            "repeats": args.repeats,
            "results": results,
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
