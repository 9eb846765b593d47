"""The gateway's `/metrics`: Prometheus text with vLLM's metric names where they apply, so a
dashboard built for vLLM reads Scriptorium too.

Every metric has the label `model_name` (the model id). What each counts, and where:

- measured in the gateway, which every request passes (exact for the whole server while the
  gateway has one replica, its default):
  - `vllm:num_requests_running`: generation requests of the model in flight whose answer has
    begun (an unstreamed request counts from when it reaches its replica until it ends);
  - `vllm:num_requests_waiting`: streamed requests sent to a replica that has not yet sent
    their first item (waiting for a place in the batch, or prefilling);
  - `vllm:prompt_tokens_total`, `vllm:generation_tokens_total`: the tokens of finished requests,
    from their usage;
  - `vllm:time_to_first_token_seconds`: streamed requests, from the request's arrival at the
    gateway to its first token's event (so it includes the hop through Ray);
  - `vllm:inter_token_latency_seconds`: between consecutive token events of a stream.
- read from the model's replica at each scrape (`ModelServer.stats`; with several replicas of
  a model, the one Serve's router picks for the scrape):
  - `vllm:kv_cache_usage_perc`: the batch's KV cache in use, as a fraction of its budget
    (0 to 1, as vLLM's), 0 for a model without an engine;
  - `vllm:prefix_cache_queries_total`, `vllm:prefix_cache_hits_total`: prompt positions looked
    up in the prefix cache, and those found there (runtime/prefix_cache.py).

This module keeps the numbers and writes the text; serve/gateway.py feeds it.
"""

from __future__ import annotations

import time
from contextlib import contextmanager

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from .protocol import Usage

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"  # Prometheus' text format
LABEL = "model_name"
# vLLM's buckets for both latencies (seconds).
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0)
TTFT_BUCKETS += (7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0)
ITL_BUCKETS += (7.5, 10.0, 20.0, 40.0, 80.0)


class ServeMetrics:
    """The gateway's metrics, in a registry of their own (one per gateway)."""

    def __init__(self):
        self.registry = CollectorRegistry()
        self.running = Gauge(
            "vllm:num_requests_running",
            "Requests whose answer has begun",
            [LABEL],
            registry=self.registry,
        )
        self.waiting = Gauge(
            "vllm:num_requests_waiting",
            "Streamed requests waiting for their first token",
            [LABEL],
            registry=self.registry,
        )
        self.prompt_tokens = Counter(
            "vllm:prompt_tokens",
            "Prompt tokens of finished requests",
            [LABEL],
            registry=self.registry,
        )
        self.generation_tokens = Counter(
            "vllm:generation_tokens",
            "Generated tokens of finished requests",
            [LABEL],
            registry=self.registry,
        )
        self.ttft = Histogram(
            "vllm:time_to_first_token_seconds",
            "Seconds from a streamed request's arrival to its first token",
            [LABEL],
            buckets=TTFT_BUCKETS,
            registry=self.registry,
        )
        self.itl = Histogram(
            "vllm:inter_token_latency_seconds",
            "Seconds between consecutive tokens of a stream",
            [LABEL],
            buckets=ITL_BUCKETS,
            registry=self.registry,
        )
        self.replicas: dict[str, dict] = {}  # model id -> its replica's last stats
        self.registry.register(_ReplicaCollector(self.replicas))

    def add_usage(self, model: str, usage: Usage) -> None:
        """Count a finished request's tokens."""
        self.prompt_tokens.labels(model).inc(usage.prompt_tokens)
        self.generation_tokens.labels(model).inc(usage.completion_tokens)

    @contextmanager
    def running_request(self, model: str):
        """Counts an unstreamed request as running while the block runs."""
        gauge = self.running.labels(model)
        gauge.inc()
        try:
            yield
        finally:
            gauge.dec()

    def stream(self, model: str, arrived: float) -> StreamTimer:
        """A timer for one stream that arrived at `arrived` (`time.perf_counter()`); it counts
        the stream as waiting until its first token."""
        return StreamTimer(self, model, arrived)

    def text(self) -> bytes:
        """Every metric, in Prometheus' text format."""
        return generate_latest(self.registry)


class StreamTimer:
    """One stream's part of the metrics: waiting until its first token, then running; its time
    to first token and the gaps between its tokens. `close` ends it (idempotent)."""

    def __init__(self, metrics: ServeMetrics, model: str, arrived: float):
        self.metrics, self.model, self.arrived = metrics, model, arrived
        self.last: float | None = None  # when the last token came; None before the first
        self.closed = False
        metrics.waiting.labels(model).inc()

    def token(self) -> None:
        """A token's event is being sent now."""
        now = time.perf_counter()
        if self.last is None:
            self.metrics.ttft.labels(self.model).observe(now - self.arrived)
            self.metrics.waiting.labels(self.model).dec()
            self.metrics.running.labels(self.model).inc()
        else:
            self.metrics.itl.labels(self.model).observe(now - self.last)
        self.last = now

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        gauge = self.metrics.waiting if self.last is None else self.metrics.running
        gauge.labels(self.model).dec()


class _ReplicaCollector:
    """The replicas' own numbers (`ModelServer.stats`), as the gateway last read them."""

    def __init__(self, replicas: dict[str, dict]):
        self.replicas = replicas

    def collect(self):
        usage = GaugeMetricFamily(
            "vllm:kv_cache_usage_perc", "KV-cache usage (1 = the budget)", labels=[LABEL]
        )
        queries = CounterMetricFamily(
            "vllm:prefix_cache_queries", "Prompt positions looked up", labels=[LABEL]
        )
        hits = CounterMetricFamily(
            "vllm:prefix_cache_hits", "Prompt positions found in the prefix cache", labels=[LABEL]
        )
        for model, stats in sorted(self.replicas.items()):
            usage.add_metric([model], stats["kv_cache_usage"])
            queries.add_metric([model], stats["queried_positions"])
            hits.add_metric([model], stats["reused_positions"])
        yield from (usage, queries, hits)
