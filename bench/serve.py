"""Serving throughput and latency: the in-process app against Ray Serve, same model, same run.

    python -m bench.serve [--clients 1 8 32] [--requests-per-client 4] [--rounds 3]
                          [--max-tokens 32] [--out FILE]

Each of C concurrent clients sends `--requests-per-client` completions one after the other
(the shipped bible-lm int8, a prompt from a fixed list, sampling at temperature 0.8 with top-k
50 and a seed per request, `--max-tokens` new tokens at most). For every C it reports the
aggregate tokens/s (generated tokens of all clients over the wall time until the last one is
done) and the p50 / p95 latency of one request (sent → full answer). Three paths:

- `app (in-process)`: the runtime called from a thread pool of the app's concurrency limit
  (ui/checks.py), one generator loaded with the app's default threads, as the Gradio app does;
- `serve 1x2`: `scriptorium serve` with 1 replica × 2 threads, called over HTTP (/v1/completions);
- `serve 2x1`: 2 replicas × 1 thread.

Both Serve configurations are deployed side by side in one application on a local Ray cluster
(idle replicas do not spin), and rounds interleave the paths so a slow spell on a shared host
falls on all of them. The HTTP clients run in this process, on the same cores as the server.
Before timing, a served completion is checked to equal the in-process one for the same seed.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from . import common

ROOT = Path(__file__).resolve().parents[1]
BUNDLE = ROOT / "models" / "bible-lm" / "int8"
PROMPTS = [
    "In the beginning",
    "And God said",
    "Blessed are the",
    "The Lord is my shepherd",
    "Then Jesus answered",
    "Now the serpent was",
]
IN_PROCESS = "app (in-process)"
SERVE_CONFIGS = {"serve 1x2": (1, 2), "serve 2x1": (2, 1)}  # model id: (replicas, threads)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def body(index: int, max_tokens: int) -> dict:
    """The completion request number `index` of a level (OpenAI fields plus our top_k)."""
    return {
        "prompt": PROMPTS[index % len(PROMPTS)],
        "max_tokens": max_tokens,
        "temperature": 0.8,
        "top_k": 50,
        "seed": index,
    }


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0-100) by linear interpolation between closest ranks.

    >>> percentile([1.0, 2.0, 3.0, 4.0], 50), percentile([1.0, 2.0, 3.0, 4.0], 95)
    (2.5, 3.85)
    """
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return round(ordered[low] + (ordered[high] - ordered[low]) * (position - low), 10)


def run_level(send, clients: int, per_client: int) -> tuple[float, list[float], int]:
    """(wall seconds, latency of every request, tokens generated) for `clients` clients each
    sending `per_client` requests in turn through `send(index) -> tokens`."""

    def client(number: int):
        latencies, tokens = [], 0
        for k in range(per_client):
            start = time.perf_counter()
            tokens += send(number * per_client + k)
            latencies.append(time.perf_counter() - start)
        return latencies, tokens

    start = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        results = list(pool.map(client, range(clients)))
    wall = time.perf_counter() - start
    return wall, [s for lat, _ in results for s in lat], sum(t for _, t in results)


def in_process_sender(max_tokens: int):
    """send(index) through a thread pool like the app's queue (its concurrency limit)."""
    import runtime
    from runtime.request_caps import LIMITS

    gen = runtime.load(BUNDLE)  # the app's registry loads with the default threads
    pool = ThreadPoolExecutor(LIMITS.concurrency)

    def config(index):
        request = body(index, max_tokens)
        return request["prompt"], runtime.GenerationConfig(
            max_new_tokens=max_tokens, do_sample=True, temperature=0.8, top_k=50, seed=index
        )

    def send(index: int) -> int:
        prompt, settings = config(index)
        outputs = pool.submit(gen.generate, prompt, settings).result()
        return len(outputs[0].token_ids)

    return send, gen, config


def http_sender(base_url: str, model: str, max_tokens: int):
    import httpx

    client = httpx.Client(
        base_url=base_url + "/", timeout=300, limits=httpx.Limits(max_connections=64)
    )

    def send(index: int) -> int:
        response = client.post("completions", json={"model": model, **body(index, max_tokens)})
        response.raise_for_status()
        return response.json()["usage"]["completion_tokens"]

    return send, client


def checked_senders(base_url: str, max_tokens: int) -> dict:
    """A `send(index)` per path (in-process, then each Serve configuration), once each served
    configuration has returned the in-process text for seed 3."""
    local_send, gen, local_config = in_process_sender(max_tokens)
    senders = {IN_PROCESS: local_send}
    for name in SERVE_CONFIGS:
        senders[name], client = http_sender(base_url, name, max_tokens)
        prompt, settings = local_config(3)
        served = client.post("completions", json={"model": name, **body(3, max_tokens)})
        if served.json()["choices"][0]["text"] != gen.generate(prompt, settings)[0].text:
            raise RuntimeError(f"{name} does not return the in-process text for seed 3")
    return senders


def measure(senders: dict, client_counts: list[int], rounds: int, per_client: int) -> dict:
    """(path, clients) -> one (wall, latencies, tokens) per round; rounds interleave the paths."""
    for send in senders.values():  # warm-up: sessions, connections, replicas' first calls
        run_level(send, 4, 2)
    samples = {(path, c): [] for path in senders for c in client_counts}
    for round_ in range(rounds):
        for clients in client_counts:
            for path, send in senders.items():
                wall, latencies, tokens = run_level(send, clients, per_client)
                samples[path, clients].append((wall, latencies, tokens))
                print(
                    f"round {round_ + 1}/{rounds} {path:>17} × {clients:>2} clients: "
                    f"{tokens / wall:7.1f} tok/s, p50 {statistics.median(latencies):.3f} s",
                    flush=True,
                )
    return samples


def summarise(samples: dict) -> list[dict]:
    """Per (path, clients): the median tokens/s over rounds and the latency percentiles."""
    results = []
    for (path, clients), runs in samples.items():
        rates = [tokens / wall for wall, _, tokens in runs]
        latencies = [s for _, lat, _ in runs for s in lat]
        results.append(
            {
                "path": path,
                "clients": clients,
                "tokens_per_second": statistics.median(rates),
                "tokens_per_second_runs": rates,
                "latency_p50_s": percentile(latencies, 50),
                "latency_p95_s": percentile(latencies, 95),
                "requests": len(latencies),
            }
        )
    return results


def results_table(results: list[dict], client_counts: list[int]) -> str:
    """The results as markdown, each path's throughput also as a multiple of in-process's."""
    rows = []
    for clients in client_counts:
        base = next(r for r in results if r["clients"] == clients and r["path"] == IN_PROCESS)
        for r in (r for r in results if r["clients"] == clients):
            rows.append(
                [
                    clients,
                    r["path"],
                    r["tokens_per_second"],
                    r["tokens_per_second"] / base["tokens_per_second"],
                    r["latency_p50_s"],
                    r["latency_p95_s"],
                ]
            )
    return common.markdown_table(
        ["clients", "path", "tokens/s (median)", "× in-process", "p50 latency s", "p95 latency s"],
        rows,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--requests-per-client", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--out", type=Path, default=common.RESULTS / "serve.json")
    args = parser.parse_args(argv)

    from ray import serve

    from serve.cli import connect, deploy
    from serve.deployments import ModelSpec

    # Logical CPUs for both configurations at once; only one of them gets traffic at a time.
    connect(num_cpus=4)
    port = _free_port()
    specs = [
        ModelSpec(name, str(BUNDLE), replicas=replicas, threads=threads)
        for name, (replicas, threads) in SERVE_CONFIGS.items()
    ]
    deploy(specs, "127.0.0.1", port)
    try:
        senders = checked_senders(f"http://127.0.0.1:{port}/v1", args.max_tokens)
        samples = measure(senders, args.clients, args.rounds, args.requests_per_client)
    finally:
        serve.shutdown()
        import ray

        ray.shutdown()

    results = summarise(samples)
    table = results_table(results, args.clients)
    print(table)
    common.write_results(
        args.out,
        {
            "benchmark": "serve",
            "environment": common.environment(threads=os.cpu_count() or 1),
            "model": "bible-lm/int8",
            "settings": {
                "requests_per_client": args.requests_per_client,
                "rounds": args.rounds,
                "max_tokens": args.max_tokens,
                "sampling": {"temperature": 0.8, "top_k": 50, "seed": "request index"},
                "serve_configs": {
                    k: {"replicas": r, "threads": t} for k, (r, t) in SERVE_CONFIGS.items()
                },
                "in_process_pool": "ui.checks.LIMITS.concurrency workers",
            },
            "results": results,
            "table": table,
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
