"""Hostile inputs against `scriptorium serve` (issue 44): strict JSON in every answer, one-line
errors for bad `--models` values, what the server exposes, and per-request prefix-cache salts.

Every answer and stream event is parsed with `strict_json`, which refuses NaN and ±Infinity as
a strict client (JavaScript's JSON.parse, Go's encoding/json) would.
"""

from __future__ import annotations

import ipaddress
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np
import psutil
import pytest

import runtime
from runtime.prefix_cache import PrefixCache
from serve import api, chat, cli, protocol, ray_guard
from serve.gateway import _sse
from serve.routes import COMPLETIONS
from tests.app_fixtures import free_port

ROOT = Path(__file__).resolve().parent.parent
BUNDLE = ROOT / "models" / "bible-lm" / "int8"


def _refuse(constant: str):
    raise ValueError(f"not strict JSON: {constant}")


def strict_json(text: str):
    """`json.loads` that refuses NaN, Infinity and -Infinity."""
    return json.loads(text, parse_constant=_refuse)


def test_strict_json_refuses_what_python_writes_for_infinities():
    with pytest.raises(ValueError, match="-Infinity"):
        strict_json(json.dumps({"logprob": -math.inf}))


@pytest.fixture(scope="module")
def bible():
    return runtime.load(BUNDLE, threads=1)


@pytest.fixture(scope="module")
def flagship():
    from convert.flagship import flagship_bundle

    return runtime.load(flagship_bundle(), threads=1)


@pytest.mark.parametrize("logprobs", [0, 1, 5])
def test_a_zero_probability_alternative_streams_as_strict_json(bible, logprobs):
    token = bible.tokenizer.encode("the", add_special_tokens=False).ids[0]
    text = api.token_text(bible.tokenizer, token, special=True)
    alternatives = [(text, 0.0), ("x", 0.0), ("y", 1e-50)]
    event = runtime.StreamEvent(text, token, -math.inf, alternatives)
    choice = api.event_choice(event, 0, bible.tokenizer, logprobs)
    line = _sse(COMPLETIONS.chunk("cmpl-1", "m", 0, [choice]))
    parsed = strict_json(line.removeprefix("data: "))["choices"][0]["logprobs"]
    assert parsed["token_logprobs"] == [protocol.LOGPROB_FLOOR]
    if logprobs:  # the finite one keeps its value; zeros are the floor
        expected = [protocol.LOGPROB_FLOOR, protocol.LOGPROB_FLOOR, math.log(1e-50)][:logprobs]
        assert list(parsed["top_logprobs"][0].values()) == pytest.approx(expected)


def test_a_zero_probability_alternative_is_strict_json_unstreamed(bible):
    ids = bible.tokenizer.encode("in the", add_special_tokens=False).ids
    output = runtime.GenerationOutput(
        "in the", ids, [-math.inf, math.nan], "length", 0, 1, score=-math.inf
    )
    alternatives = [[("a", 0.0), ("b", 0.5)], [("c", 0.0)]]
    choice = api.output_choice(output, 0, bible.tokenizer, 2, alternatives)
    result = {"choices": [choice], "usage": protocol.Usage.of(1, 2)}
    body = strict_json(json.dumps(COMPLETIONS.response("c", "m", result)))
    logprobs = body["choices"][0]["logprobs"]
    assert logprobs["token_logprobs"] == [protocol.LOGPROB_FLOOR] * 2
    assert logprobs["top_logprobs"][0]["a"] == protocol.LOGPROB_FLOOR
    assert logprobs["top_logprobs"][0]["b"] == pytest.approx(math.log(0.5))
    assert body["choices"][0]["scriptorium"]["score"] == protocol.LOGPROB_FLOOR


def test_chat_logprobs_use_the_same_floor(flagship):
    token = flagship.tokenizer.encode("Hello", add_special_tokens=False).ids[0]
    own = flagship.tokenizer.decode([token], skip_special_tokens=False)
    entries = chat.logprob_entries(flagship, [token], [-math.inf], [[(own, 0.0), ("z", 0.0)]], 2)
    line = _sse({"choices": [{"logprobs": entries.answer()}]})
    (entry,) = strict_json(line.removeprefix("data: "))["choices"][0]["logprobs"]["content"]
    assert entry["logprob"] == protocol.LOGPROB_FLOOR
    assert [top["logprob"] for top in entry["top_logprobs"]] == [protocol.LOGPROB_FLOOR] * 2


def test_a_stream_event_with_a_non_finite_number_is_refused_not_written():
    with pytest.raises(ValueError):
        _sse({"logprob": -math.inf})


# ---- bad `--models` values: one line, at once ---------------------------------------------------


def bad_models(tmp_path: Path) -> dict[str, str]:
    """Each bad `--models` value, and the words its one-line error must hold."""
    fifo, loop, folder = tmp_path / "fifo", tmp_path / "loop", tmp_path / "folder"
    os.mkfifo(fifo)
    loop.symlink_to(loop)
    (folder / "sub").mkdir(parents=True)
    (folder / "sub" / "notes.txt").write_text("not a model")
    return {
        "hf://org": "hf://org/repo",
        "hf://a/b/../../x.gguf": "no empty, `.` or `..` part",
        "hf://org//repo": "no empty, `.` or `..` part",
        str(fifo): "a FIFO",
        str(loop): "a symlink loop",
        str(folder): "which holds none",
        str(tmp_path / "absent"): "no such file or directory",
        "/etc/hostname": "not a .gguf file",
    }


def test_every_bad_models_value_is_one_line(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SCRIPTORIUM_CACHE": str(tmp_path / "cache")}
    for value, words in bad_models(tmp_path).items():
        done = subprocess.run(
            [sys.executable, "-m", "serve", "--models", value],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2 and len(lines) == 1, (value, done.stderr)
        assert lines[0].startswith("scriptorium serve: error: ") and words in lines[0], lines


def test_serving_beyond_loopback_without_a_key_is_warned():
    assert "without an API key" in cli.exposure_warning("0.0.0.0", None)
    assert "without an API key" in cli.exposure_warning("::", None)
    assert "without an API key" in cli.exposure_warning("my-host", None)
    assert cli.exposure_warning("0.0.0.0", "secret") is None
    assert cli.exposure_warning("127.0.0.1", None) is None
    assert cli.exposure_warning("::1", None) is None


# ---- prefix-cache salts ---------------------------------------------------------------------


def test_salted_prompts_share_no_prefix_cache_blocks():
    cache = PrefixCache()
    ids = np.arange(40)  # (T,) two full blocks and a partial one
    layers = (np.ones((2, 40, 4), np.float32),)  # one cache tensor (H, T, D)
    cache.store(ids, layers, salt="visitor-a")
    assert cache.lookup(ids, salt="visitor-a") is not None
    assert cache.lookup(ids) is None and cache.lookup(ids, salt="visitor-b") is None
    cache.store(ids, layers)  # unsalted: its own blocks beside the salted ones
    assert len(cache) == 4 and cache.lookup(ids) is not None
    assert cache.queried_positions == 4 * 40


def test_a_request_salt_reaches_the_engine_cache(bible):
    prompt = "In the beginning God created the heaven and the earth. " * 4
    engine = bible.engine
    greedy = runtime.GenerationConfig(max_new_tokens=2)
    before = engine.prefix_cache.hits
    first = bible.generate(prompt, greedy.replace(cache_salt="a"))
    bible.generate(prompt, greedy.replace(cache_salt="b"))
    assert engine.prefix_cache.hits == before  # another salt: nothing found
    again = bible.generate(prompt, greedy.replace(cache_salt="a"))
    assert engine.prefix_cache.hits == before + 1  # its own salt: found
    assert again[0].token_ids == first[0].token_ids
    request = api.parse_completion({"model": "m", "prompt": "x", "cache_salt": "a"})
    assert request.config.cache_salt == "a"
    with pytest.raises(protocol.RequestError, match="cache_salt"):
        chat.parse_chat(
            {"model": "m", "messages": [{"role": "user", "content": "x"}], "cache_salt": ""}
        )


# ---- what a running `scriptorium serve` exposes -------------------------------------------------

KEY = "hostile-test-key"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A `python -m serve` process (its own local Ray cluster, bible-lm, an API key) and its
    base URL, stopped at the end of the module."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    log = (tmp_path_factory.mktemp("serve") / "serve.log").open("w+")
    command = [sys.executable, "-m", "serve", "--models", str(BUNDLE), "--port", str(port)]
    command += ["--api-key", KEY, "--num-cpus", "1"]
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(240):  # bounded: at most about 4 minutes on a busy machine
            if process.poll() is not None:
                log.seek(0)
                pytest.fail(f"serve exited with {process.returncode}: {log.read()[-3000:]}")
            try:
                if httpx.get(f"{base}/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(1)
        else:
            pytest.fail("serve did not answer /health within the loop")
        yield process, base
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=30)
        log.close()


def _loopback(ip: str) -> bool:
    address = ipaddress.ip_address(ip)
    return address.is_loopback or bool(address.ipv4_mapped and address.ipv4_mapped.is_loopback)


def test_every_port_of_the_serve_process_tree_listens_on_loopback_only(served):
    process, base = served
    tree = psutil.Process(process.pid)
    listening = set()
    for member in [tree, *tree.children(recursive=True)]:
        try:
            connections = member.net_connections(kind="inet")
        except psutil.Error:  # a worker that ended meanwhile
            continue
        listening |= {
            (c.laddr.ip, c.laddr.port, member.name())
            for c in connections
            if c.status == psutil.CONN_LISTEN
        }
    port = int(base.rsplit(":", 1)[1])
    assert port in {p for _, p, _ in listening}  # the HTTP proxy is in the tree
    assert len(listening) >= 5  # and Ray's own ports: GCS, raylet, agents, workers
    # each replica's inter-deployment gRPC port too (serve/ray_guard.py)
    assert [entry for entry in listening if not _loopback(entry[0])] == []
    replicas = {name for _, _, name in listening if name.startswith("ray::ServeReplica")}
    assert replicas == {
        "ray::ServeReplica:scriptorium:gateway",
        "ray::ServeReplica:scriptorium:model:int8",
    }, listening


@pytest.mark.parametrize("path", ["/docs", "/openapi.json", "/metrics", "/v1/models"])
def test_the_api_key_covers_every_route_but_the_health_check(served, path):
    _, base = served
    assert httpx.get(base + path, timeout=30).status_code == 401
    headers = {"Authorization": f"Bearer {KEY}"}
    assert httpx.get(base + path, headers=headers, timeout=30).status_code == 200
    assert httpx.get(f"{base}/health", timeout=30).json() == {"status": "ok"}


@pytest.mark.parametrize("path", ["/-/routes", "/-/anything"])
def test_the_api_key_covers_rays_own_routes_but_its_health_check(served, path):
    # answered by Serve's proxy before the gateway: the key check is serve/ray_guard.py's
    _, base = served
    refused = httpx.get(base + path, timeout=30)
    assert refused.status_code == 401
    assert strict_json(refused.text)["error"]["code"] == "invalid_api_key"
    wrong = httpx.get(base + path, headers={"Authorization": "Bearer no"}, timeout=30)
    assert wrong.status_code == 401
    if path == "/-/routes":
        headers = {"Authorization": f"Bearer {KEY}"}
        assert httpx.get(base + path, headers=headers, timeout=30).json() == {"/": "scriptorium"}
    assert httpx.get(f"{base}/-/healthz", timeout=30).status_code == 200


def test_a_replica_binds_its_grpc_port_to_loopback(monkeypatch):
    from ray.serve._private import replica as ray_replica

    bound = []
    monkeypatch.setattr(ray_replica, "add_port_to_grpc_server", lambda _, a: bound.append(a))
    ray_guard.replica_grpc_on_loopback()  # outside a local cluster: nothing
    assert ray_replica.add_port_to_grpc_server(None, "[::]:0") is None and bound == ["[::]:0"]
    monkeypatch.setenv(ray_guard.REPLICA_GRPC_VARIABLE, "1")
    ray_guard.replica_grpc_on_loopback()
    ray_guard.replica_grpc_on_loopback()  # a second call keeps one wrapper
    ray_replica.add_port_to_grpc_server(None, "[::]:0")
    assert bound == ["[::]:0", "127.0.0.1:0"]


def test_a_ray_that_binds_the_replica_port_otherwise_fails_loudly(monkeypatch):
    from ray.serve._private import replica as ray_replica

    monkeypatch.setenv(ray_guard.REPLICA_GRPC_VARIABLE, "1")
    monkeypatch.setattr(ray_guard, "RAY_BINDS", 'add_port_to_grpc_server(self._server, "[::]:1")')
    kept = ray_replica.add_port_to_grpc_server
    with pytest.raises(RuntimeError, match=r"cannot keep it on 127\.0\.0\.1"):
        ray_guard.replica_grpc_on_loopback()
    assert ray_replica.add_port_to_grpc_server is kept


# ---- whose templates: the template pool's client in serve (issue 44, item 2) -------------------


def test_a_request_runs_its_templates_as_its_clients(monkeypatch):
    """The gateway names a request's client by its address; the replica runs the route's work,
    answered or streamed, inside that client's block of the template pool, where every chat
    template and schema is compiled and rendered (tests/test_hostile_templates.py holds the
    pool to its shares)."""
    import asyncio

    from starlette.requests import Request

    from runtime import template_pool
    from serve import gateway, replica

    raw = Request({"type": "http", "client": ("10.1.2.3", 5555), "headers": []})
    assert gateway._client_of(raw) == "10.1.2.3"

    class Route:
        def complete(self, generator, request):
            return {"client": template_pool._CLIENT.get()}

        def stream(self, generator, request):
            yield {"client": template_pool._CLIENT.get()}

    monkeypatch.setattr(replica, "route_of", lambda request: Route())
    server = replica.ModelServer("unused", 1, 2, loader=lambda path, threads: object())

    async def both():
        answered = await server.complete(None, "10.1.2.3")
        streamed = [item async for ready in server.stream(None, "10.1.2.3") for item in ready]
        return answered, streamed

    assert asyncio.run(both()) == ({"client": "10.1.2.3"}, [{"client": "10.1.2.3"}])
    assert template_pool._CLIENT.get() is None


# ---- how a stream crosses from the replica -------------------------------------------------------


def test_a_stream_s_ready_items_leave_the_replica_together_and_a_failure_after_them(monkeypatch):
    """Items the route produced while the gateway was busy go out as one list (one message);
    the order is kept, and a failure still reaches the gateway after the items before it."""
    import asyncio
    import threading

    from serve import replica

    first_taken = threading.Event()

    class Route:
        def __init__(self, fails: bool):
            self.fails = fails

        def stream(self, generator, request):
            yield {"choice": 0}
            first_taken.wait(10)  # the rest are made while the gateway has not come back
            yield from ({"choice": n} for n in range(1, 5))
            if self.fails:
                raise RuntimeError("the batch failed")
            yield {"usage": 5}

    async def lists(fails: bool) -> list:
        first_taken.clear()
        monkeypatch.setattr(replica, "route_of", lambda request: Route(fails))
        server = replica.ModelServer("unused", 1, 2, loader=lambda path, threads: object())
        received, stream = [], server.stream(None)
        try:
            async for ready in stream:
                received.append(ready)
                first_taken.set()
                await asyncio.sleep(0.2)  # busy elsewhere while the rest are made
        except RuntimeError as error:
            received.append(str(error))
        return received

    whole = [{"choice": n} for n in range(5)]
    assert asyncio.run(lists(fails=False)) == [whole[:1], [*whole[1:], {"usage": 5}]]
    assert asyncio.run(lists(fails=True)) == [whole[:1], whole[1:], "the batch failed"]
