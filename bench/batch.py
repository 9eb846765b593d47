"""Continuous batching: aggregate throughput and latency with batching on and off.

    python -m bench.batch [--streams 1 4 16 32] [--requests-per-stream 2] [--max-tokens 32]
                          [--bundles bible-lm/int8 bible-lm/fp32 smollm2 smollm2-faithful]
                          [--threads 2] [--rounds 1] [--out FILE]

S concurrent streams each send `--requests-per-stream` generations one after the other (a
prompt from a fixed list, sampling at temperature 0.8 with top-k 50 and a seed per request,
exactly `--max-tokens` new tokens) to one bundle: the shipped bible-lm (`bible-lm/int8`,
`bible-lm/fp32`) or the flagship SmolLM2-135M-Instruct (`smollm2`, converted once from its GGUF
by convert/flagship.py; `smollm2-faithful`, its faithful conversion, Chat's default, whose
decode steps run one row per call). For every S it reports the aggregate tokens/s (all generated
tokens over the wall time until the last stream is done) and the p50 / p95 latency of one request,
for two paths over the same bundle and thread count:

- `off`: `runtime.load(..., batching=False)`, each request its own decode loop on its own thread
  (`--no-batching` in the app and Serve);
- `on`: `runtime.load(..., batching=True)`, every request submitted to the engine loop
  (runtime/engine.py), which steps all of them as one batch (the default for these bundles).

A third column bounds what batching can reach: `ceiling`, the tokens/s of the batched model
steps alone at S rows (the `on` path's session, `--max-tokens` steps from an 8-token prompt,
nothing else: no prefill, sampling, text or hand-over), so `ceiling / off` is the most `on / off`
could be with every cost outside the model removed.

It also counts the requests whose text is the same on both paths: the same seed must give the
same text, whatever the batch-mates (the bundles are batch-invariant: fp32, weight-only
MatMulNBits). Rounds interleave the paths so a slow spell on a shared host falls on both.
"""

from __future__ import annotations

import argparse
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from . import common

ROOT = Path(__file__).resolve().parents[1]
BIBLE_LM = ROOT / "models" / "bible-lm"
BUNDLES = ("bible-lm/int8", "bible-lm/fp32", "smollm2", "smollm2-faithful")
PROMPTS = [
    "In the beginning",
    "And God said",
    "Blessed are the",
    "The LORD is my shepherd",
    "Then Jesus said to them,",
    "Now the serpent was",
    "Praise the LORD, all you nations",
    "A wise son makes a glad father,",
]


def _config(request: int, max_tokens: int):
    import runtime

    return runtime.GenerationConfig(
        max_new_tokens=max_tokens,
        min_new_tokens=max_tokens,
        do_sample=True,
        temperature=0.8,
        top_k=50,
        seed=request,
    )


def run_level(gen, streams: int, per_stream: int, max_tokens: int):
    """(wall seconds, latencies, generated tokens, {request: text}) for `streams` streams."""

    def one_stream(stream: int):
        done = []
        for k in range(per_stream):
            request = stream * per_stream + k
            sent = time.perf_counter()
            (out,) = gen.generate(PROMPTS[request % len(PROMPTS)], _config(request, max_tokens))
            done.append((request, time.perf_counter() - sent, len(out.token_ids), out.text))
        return done

    start = time.perf_counter()
    with ThreadPoolExecutor(streams) as pool:
        results = [item for items in pool.map(one_stream, range(streams)) for item in items]
    wall = time.perf_counter() - start
    latencies = [r[1] for r in results]
    return wall, latencies, sum(r[2] for r in results), {r[0]: r[3] for r in results}


def model_ceiling(gen, rows: int, steps: int) -> float:
    """Tokens/s of `steps` batched model steps at `rows` rows (fewer if the context ends first),
    alone (see the module docstring): the median of three runs, each from a fresh 8-token
    prefill (not timed)."""
    import numpy as np

    model, rates = gen.model, []
    prompt = np.array([gen.encode_prompt(PROMPTS[0])[:8]] * rows, dtype=np.int64)  # (rows, 8)
    steps = min(steps, gen.context_length - prompt.shape[1])  # as generation stops at the context
    for _ in range(3):
        logits, state = model.start(prompt, np.ones_like(prompt))
        start = time.perf_counter()
        for _ in range(steps):
            logits, state = model.step(np.argmax(logits, axis=1), state)
        rates.append(rows * steps / (time.perf_counter() - start))
    return statistics.median(rates)


def bundle_path(name: str) -> Path:
    """The directory of a `--bundles` name."""
    if name == "smollm2":
        from convert.flagship import ensure_bundle

        return ensure_bundle()
    if name == "smollm2-faithful":
        from convert.flagship import faithful_flagship_bundle

        return faithful_flagship_bundle()
    return BIBLE_LM / name.removeprefix("bible-lm/")


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, nargs="+", default=[1, 4, 16, 32])
    parser.add_argument("--requests-per-stream", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--bundles", nargs="+", choices=BUNDLES, default=list(BUNDLES[:2]))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--out", type=Path, default=common.RESULTS / "batch.json")
    args = parser.parse_args(argv)

    import runtime

    rows, results = [], []
    for bundle in args.bundles:
        path = bundle_path(bundle)
        paths = {
            "off": runtime.load(path, threads=args.threads, batching=False),
            "on": runtime.load(path, threads=args.threads, batching=True),
        }
        for gen in paths.values():  # warm-up: first calls, the engine's thread
            run_level(gen, 2, 1, 4)
        for streams in args.streams:
            samples = {path: [] for path in paths}
            texts = {}
            for _ in range(args.rounds):
                for path, gen in paths.items():
                    wall, latencies, tokens, texts[path] = run_level(
                        gen, streams, args.requests_per_stream, args.max_tokens
                    )
                    samples[path].append((wall, latencies, tokens))
            same = sum(texts["on"][r] == texts["off"][r] for r in texts["off"])
            entry = {"bundle": bundle, "streams": streams, "same_texts": same}
            entry["requests"] = len(texts["off"])
            for path, runs in samples.items():
                throughput = statistics.median(tokens / wall for wall, _, tokens in runs)
                latencies = [lat for _, lats, _ in runs for lat in lats]
                entry[path] = {
                    "tokens_per_s": throughput,
                    "p50_s": _percentile(latencies, 0.5),
                    "p95_s": _percentile(latencies, 0.95),
                }
            entry["speedup"] = entry["on"]["tokens_per_s"] / entry["off"]["tokens_per_s"]
            entry["ceiling_tokens_per_s"] = model_ceiling(paths["on"], streams, args.max_tokens)
            entry["ceiling_speedup"] = entry["ceiling_tokens_per_s"] / entry["off"]["tokens_per_s"]
            results.append(entry)
            rows.append(
                [
                    bundle,
                    streams,
                    entry["off"]["tokens_per_s"],
                    entry["on"]["tokens_per_s"],
                    entry["speedup"],
                    entry["ceiling_tokens_per_s"],
                    entry["ceiling_speedup"],
                    entry["off"]["p50_s"],
                    entry["on"]["p50_s"],
                    entry["off"]["p95_s"],
                    entry["on"]["p95_s"],
                    f"{same}/{entry['requests']}",
                ]
            )
            print(rows[-1], flush=True)
    header = [
        "bundle",
        "streams",
        "off tok/s",
        "on tok/s",
        "on/off",
        "ceiling tok/s",
        "ceiling/off",
        "off p50 s",
        "on p50 s",
        "off p95 s",
        "on p95 s",
        "same texts",
    ]
    print(common.markdown_table(header, rows))
    common.write_results(
        args.out,
        {
            "benchmark": "batch",
            "bundles": args.bundles,
            "requests_per_stream": args.requests_per_stream,
            "max_tokens": args.max_tokens,
            "rounds": args.rounds,
            "environment": common.environment(args.threads),
            "results": results,
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
