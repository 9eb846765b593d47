"""`scriptorium serve`'s observability and budget (issue 47): `/metrics` in Prometheus text with
vLLM's names, behind the API key; `/tokenize` and `/detokenize` as llama-server's; `--kv-budget`
and refusals that name the token field the client sent.

One server for the module (`scriptorium serve`, one process, in a thread; the Ray path runs the same
gateway, and its `/metrics` answers through Ray's handles in tests/test_hostile_serve.py):
bible-lm int8 (completions) and the flagship (chat), with an API key and a 4 MiB KV budget
(the flagship's 91 positions; bible-lm's whole context fits).
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

import runtime
from runtime.engine import parse_kv_budget
from serve import cli
from serve.deployments import ModelSpec
from tests.app_fixtures import serve_in_thread

ROOT = Path(__file__).resolve().parent.parent
BUNDLE = ROOT / "models" / "bible-lm" / "int8"
KEY = "metrics-test-key"
KV_BUDGET = 4 * 2**20


@pytest.fixture(scope="module")
def flagship_dir() -> Path:
    from convert.flagship import flagship_bundle

    return flagship_bundle()


@pytest.fixture(scope="module")
def server(flagship_dir) -> str:
    """The base URL ("http://127.0.0.1:PORT")."""
    specs = [
        ModelSpec("bible", str(BUNDLE), threads=1),
        ModelSpec("smollm2", str(flagship_dir), threads=1),
    ]
    specs = cli.budget_specs(cli.batching_specs(specs), parse_kv_budget("4M"))
    url, _, stop = serve_in_thread(specs, api_key=KEY)
    yield url.removesuffix("/v1")
    stop()


@pytest.fixture(scope="module")
def client(server):
    headers = {"Authorization": f"Bearer {KEY}"}
    with httpx.Client(base_url=server, timeout=300, headers=headers) as http:
        yield http


def metrics(client) -> dict[tuple[str, str], float]:
    """{(sample name, model): value} of every sample of /metrics (buckets left out)."""
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    values = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            if "le" not in sample.labels:
                values[sample.name, sample.labels.get("model_name", "")] = sample.value
    return values


def change(before: dict, after: dict, name: str, model: str = "bible") -> float:
    return after.get((name, model), 0.0) - before.get((name, model), 0.0)


def test_metrics_count_tokens_and_latencies_with_vllms_names(client, server):
    assert httpx.get(f"{server}/metrics").status_code == 401
    before = metrics(client)
    body = {"model": "bible", "prompt": "In the beginning", "max_tokens": 5, "min_tokens": 5}
    unstreamed = client.post("/v1/completions", json=body).json()["usage"]
    with client.stream("POST", "/v1/completions", json={**body, "stream": True}) as response:
        events = [line for line in response.iter_lines() if line.startswith("data: {")]
    after = metrics(client)
    assert len(events) == 5
    tokens = unstreamed["completion_tokens"] + 5
    assert change(before, after, "vllm:generation_tokens_total") == tokens
    prompt_tokens = change(before, after, "vllm:prompt_tokens_total")
    assert prompt_tokens == 2 * unstreamed["prompt_tokens"]
    assert change(before, after, "vllm:time_to_first_token_seconds_count") == 1
    assert change(before, after, "vllm:inter_token_latency_seconds_count") == 4
    assert after["vllm:num_requests_running", "bible"] == 0
    assert after["vllm:num_requests_waiting", "bible"] == 0
    assert 0 <= after["vllm:kv_cache_usage_perc", "bible"] <= 1
    # the same prompt twice: the second found its cached blocks (when it has any full block)
    assert change(before, after, "vllm:prefix_cache_queries_total") == prompt_tokens
    assert change(before, after, "vllm:prefix_cache_hits_total") >= 0
    assert ("vllm:kv_cache_usage_perc", "smollm2") in after


def test_tokenize_and_detokenize_as_llama_server(client):
    local = runtime.load(BUNDLE, threads=1).tokenizer
    text = "In the beginning God created"
    tokens = client.post("/tokenize", json={"model": "bible", "content": text}).json()["tokens"]
    assert tokens == local.encode(text, add_special_tokens=False).ids
    special = {"model": "bible", "content": text, "add_special": True}
    assert client.post("/tokenize", json=special).json()["tokens"] == local.encode(text).ids
    back = client.post("/detokenize", json={"model": "bible", "tokens": tokens}).json()
    assert back == {"content": local.decode(tokens, skip_special_tokens=False)}
    assert back["content"].strip() == text


@pytest.mark.parametrize(
    "path, body, status, param",
    [
        ("/detokenize", {"model": "bible", "tokens": [10**9]}, 400, "tokens"),
        ("/detokenize", {"model": "bible", "tokens": ["a"]}, 400, "tokens"),
        ("/tokenize", {"model": "bible", "content": 5}, 400, "content"),
        ("/tokenize", {"model": "nope", "content": "x"}, 404, "model"),
    ],
)
def test_bad_tokenize_bodies_are_4xx_naming_the_field(client, path, body, status, param):
    response = client.post(path, json=body)
    assert response.status_code == status, response.text
    assert response.json()["error"]["param"] == param


def test_tokenize_needs_the_key(server):
    response = httpx.post(f"{server}/tokenize", json={"model": "bible", "content": "x"})
    assert response.status_code == 401


@pytest.mark.parametrize("field", ["max_tokens", "max_completion_tokens"])
@pytest.mark.parametrize("stream", [False, True])
def test_a_kv_budget_refusal_names_the_field_the_client_sent(client, field, stream):
    body = {
        "model": "smollm2",
        "messages": [{"role": "user", "content": "Hi"}],
        field: 400,
        "stream": stream,
    }
    response = client.post("/v1/chat/completions", json=body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == field and f"`{field}`" in error["message"]
    assert "KV cache" in error["message"]
    fits = {**body, field: 2, "stream": False}
    assert client.post("/v1/chat/completions", json=fits).status_code == 200
