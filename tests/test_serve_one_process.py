"""`scriptorium serve` in one process, its default (serve/one_process.py): the gateway and
replicas in one process.

The same routes as on Ray (tests/test_serve.py covers them there), checked where the one process
differs: texts equal `runtime.generate`'s for the same seed, streamed and not; a client that
disconnects mid-stream cancels its generation in the replica; the API key and `/metrics`; the
command's refusal of Ray's flags; and the command itself, started, asked and stopped by SIGTERM.
The real flagship's concurrent replies through this server: tests/test_flagship_serve.py.
"""

from __future__ import annotations

import functools
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

import runtime
from serve.deployments import ModelSpec
from tests.app_fixtures import free_port, serve_in_thread, slow_load

ROOT = Path(__file__).resolve().parent.parent
BUNDLE = ROOT / "models" / "bible-lm" / "int8"
PROMPT = "In the beginning"
KEY = "secret"
SAMPLING = dict(temperature=0.8, top_k=40, top_p=0.9, seed=7)


@pytest.fixture(scope="module")
def served():
    specs = [
        ModelSpec("bible", str(BUNDLE)),
        ModelSpec("slow", str(BUNDLE), loader=functools.partial(slow_load, delay=0.05)),
    ]
    url, gateway, stop = serve_in_thread(specs, api_key=KEY)
    yield url, gateway
    stop()


@pytest.fixture
def client(served):
    url, _ = served
    headers = {"Authorization": f"Bearer {KEY}"}
    with httpx.Client(base_url=url + "/", timeout=60, headers=headers) as http:
        yield http


def test_texts_are_the_runtimes_streamed_or_not(client):
    body = {"model": "bible", "prompt": PROMPT, "max_tokens": 16, **SAMPLING}
    answer = client.post("completions", json=body)
    assert answer.status_code == 200, answer.text
    with client.stream("POST", "completions", json={**body, "stream": True}) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in response.iter_lines() if line]
    assert lines[-1] == "data: [DONE]"
    streamed = "".join(json.loads(line[6:])["choices"][0]["text"] for line in lines[:-1])
    config = runtime.GenerationConfig(max_new_tokens=16, do_sample=True, **SAMPLING)
    expected = runtime.load(BUNDLE, threads=1).generate(PROMPT, config)[0].text
    assert answer.json()["choices"][0]["text"] == expected
    assert streamed == expected


def test_a_client_that_leaves_cancels_its_generation(client, served):
    _, gateway = served
    replica = gateway.models["slow"].server
    before = replica.stats()["cancelled"]
    body = {"model": "slow", "prompt": PROMPT, "max_tokens": 200, "stream": True}
    with client.stream("POST", "completions", json=body) as response:
        lines = response.iter_lines()
        assert next(line for line in lines if line).startswith("data: ")
    deadline = time.monotonic() + 10  # 200 tokens at 50 ms would take 10 s: it must stop first
    while replica.stats()["running"] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert replica.stats()["running"] == 0
    assert replica.stats()["cancelled"] == before + 1


def test_the_key_guards_the_routes_and_metrics_count_tokens(client, served):
    url, _ = served
    assert httpx.get(url + "/models").status_code == 401
    assert httpx.get(url.removesuffix("/v1") + "/health").json() == {"status": "ok"}
    client.post("completions", json={"model": "bible", "prompt": PROMPT, "max_tokens": 4})
    metrics = client.get(url.removesuffix("/v1") + "/metrics")
    assert metrics.status_code == 200
    generated = [
        float(line.split()[-1])
        for line in metrics.text.splitlines()
        if line.startswith('vllm:generation_tokens_total{model_name="bible"}')
    ]
    assert generated and generated[0] >= 4


def test_refused_input_is_a_400_and_the_server_keeps_serving(client):
    refused = client.post("completions", json={"model": "bible", "prompt": PROMPT, "top_p": 1.5})
    assert refused.status_code == 400
    assert "`top_p`" in refused.json()["error"]["message"]
    assert client.post("completions", json={"model": "bible", "prompt": PROMPT}).status_code == 200


@pytest.mark.parametrize(
    "flags, named",
    [
        (["--replicas", "2"], "`--replicas`"),
        (["--autoscale", "1:2"], "`--autoscale`"),
        (["--address", "auto", "--num-cpus", "2"], "`--address`, `--num-cpus`"),
    ],
)
def test_ray_only_flags_are_refused(flags, named, capsys):
    from serve.cli import main

    with pytest.raises(SystemExit) as stopped:
        main(["--no-ray", "--models", str(BUNDLE.parent), *flags])
    assert stopped.value.code == 2
    assert named in capsys.readouterr().err


def test_the_command_serves_in_one_process_by_default_and_stops_on_sigterm():
    port = free_port()
    command = [sys.executable, "-m", "serve", "--models", str(BUNDLE.parent)]
    process = subprocess.Popen(
        [*command, "--port", str(port)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        said = process.stdout.readline()
        assert "(one process)" in said, said
        url = f"http://127.0.0.1:{port}/v1"
        models = httpx.get(url + "/models", timeout=30).json()["data"]
        assert {model["id"] for model in models} == {"fp32", "int8"}
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=20) == 0
    finally:
        process.kill()
