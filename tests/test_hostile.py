"""Hostile clients against both servers: bounded memory, no 500s, nothing served unpublished.

Every request of issue 26 is sent from 127.0.0.1, a bounded number of times, and each test
asserts the status, that the answer came within `ANSWER_S` seconds (a hang is a failure; this is
a bound, not a speed measurement), and the resident memory of the serving processes afterwards:

- `scriptorium serve` (one Serve application on the tests' shared local Ray cluster with
  `num_cpus=2`, bible-lm int8 behind an API key): each replica, the gateway and the HTTP proxy
  stay under `SERVE_RSS_MB` and grow by at most `GROWTH_MB` over the hostile requests.
- `python app.py` in a subprocess (the shipped models): the process grows by at most
  `GROWTH_MB` over the hostile requests, and memory settles over a soak of `SOAK_CALLS` calls.
- `scriptorium serve` with no flags but a port, in a subprocess of its own: it becomes ready on
  this 2-core machine with every shipped text generator, and SIGTERM stops it promptly.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import psutil
import pytest

from runtime.request_caps import ServeLimits
from serve.deployments import ModelSpec, deployment_name
from tests.app_fixtures import free_port

ROOT = Path(__file__).resolve().parent.parent
BUNDLE = ROOT / "models" / "bible-lm" / "int8"
MODEL = "bible-lm/int8"
KEY = "test-key-" + uuid.uuid4().hex[:8]
AUTH = {"Authorization": f"Bearer {KEY}"}
JSON = {"content-type": "application/json", **AUTH}
ANSWER_S = 15  # any hostile request must be answered within this (a hang fails the test)
SERVE_RSS_MB = 400  # each replica, the gateway and the proxy after the hostile requests
GROWTH_MB = 60  # growth of one process over a test's hostile requests
DOWNLOAD_GROWTH_MB = 100  # growth of one process over the download test
DOWNLOADS = 30  # sequential downloads of model.onnx (13.6 MB)
SOAK_WARM_UP = 150  # calls first (Gradio keeps the state of 100 sessions), one in ten /generate
SOAK_CALLS = 400  # then the same mix, measured
SOAK_GROWTH_KB_PER_CALL = 8  # the app's growth per call over those calls
HTML_BYTES = 300_000  # the app's first page (its config: ui/light_page.py)
LIMITS = ServeLimits(max_downloads=2)
OK = {"model": MODEL, "prompt": "In the beginning", "max_tokens": 4, "temperature": 0}


def rss_mb(pid: int) -> float:
    return psutil.Process(pid).memory_info().rss / 2**20


# ---- scriptorium serve ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(ray_cluster):
    """(base URL, {role: pid}) of a Serve application with an API key and 2 concurrent
    downloads; roles: "replica", "gateway", "proxy"."""
    from serve.cli import deploy

    port = free_port()
    deploy([ModelSpec(MODEL, str(BUNDLE), cpus=0.5)], "127.0.0.1", port, LIMITS, KEY)
    # The cluster runs no dashboard for Ray's state API: its actors are found by the titles Ray
    # gives their processes ("ray::<class>[.<method>]"), under this process (its raylet's parent).
    titles = {
        "replica": "ray::ServeReplica:scriptorium:" + deployment_name(MODEL),
        "gateway": "ray::ServeReplica:scriptorium:gateway",
        "proxy": "ray::ProxyActor",
    }
    pids = {}
    for process in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error, IndexError):
            title = process.cmdline()[0]
            pids |= {role: process.pid for role, start in titles.items() if title.startswith(start)}
    assert set(pids) == set(titles), pids
    return f"http://127.0.0.1:{port}/v1", pids


@pytest.fixture
def client(server):
    with httpx.Client(base_url=server[0] + "/", timeout=ANSWER_S) as http:
        yield http


class Memory:
    """RSS of processes before and after a block: `growth()` and `now()` in MB."""

    def __init__(self, pids: dict):
        self.pids, self.before = pids, {k: rss_mb(p) for k, p in pids.items()}

    def now(self) -> dict:
        return {k: rss_mb(p) for k, p in self.pids.items()}

    def growth(self) -> dict:
        return {k: v - self.before[k] for k, v in self.now().items()}


def timed(send):
    start = time.monotonic()
    response = send()
    return response, time.monotonic() - start


def assert_bounded(memory: Memory) -> None:
    now, growth = memory.now(), memory.growth()
    assert all(v < SERVE_RSS_MB for v in now.values()), now
    assert all(v < GROWTH_MB for v in growth.values()), growth


def test_oversized_bodies_and_prompts_are_refused_before_they_cost_memory(server, client):
    memory = Memory(server[1])
    big = json.dumps({**OK, "prompt": "word " * 1_000_000}).encode()  # 5 MB
    for _ in range(3):
        response, took = timed(lambda: client.post("completions", content=big, headers=JSON))
        assert response.status_code == 413 and took < ANSWER_S
        assert response.json()["error"]["code"] == "body_too_large"

    def chunks():  # no Content-Length: refused while the body streams in
        for _ in range(40):
            yield b" " * 65536

    response = client.post("completions", content=chunks(), headers=JSON)
    assert response.status_code == 413
    long_prompt = {**OK, "prompt": "word " * 40_000}  # 200,000 characters in a 200 KB body
    for stream in (False, True):
        response, took = timed(
            lambda s=stream: client.post(
                "completions", json={**long_prompt, "stream": s}, headers=AUTH
            )
        )
        assert response.status_code == 400 and took < ANSWER_S
        assert "at most 32768 characters" in response.json()["error"]["message"]
    normal, took = timed(lambda: client.post("completions", json=OK, headers=AUTH))
    assert normal.status_code == 200 and took < ANSWER_S
    assert_bounded(memory)


DEEP = "[" * 100_000 + "]" * 100_000
HOSTILE = [  # (raw body, content type, status, words of the message)
    (DEEP, "application/json", 400, "nesting"),
    (f'{{"model": "{MODEL}", "prompt": {DEEP}}}', "application/json", 400, "nesting"),
    (f'{{"model": "{MODEL}", "prompt": {{"a": {DEEP}}}}}', "application/json", 400, "nesting"),
    (json.dumps({**OK, "prompt": "\ud800 In"}), "application/json", 400, "valid strings"),
    (json.dumps({**OK, "prompt": "\ud800 In", "stream": True}), "application/json", 400, "valid"),
    (json.dumps({**OK, "controls": {"section": ["x"]}}), "application/json", 400, "`controls`"),
    (json.dumps({**OK, "controls": {"section": {}}, "stream": True}), "application/json", 400, ""),
    (json.dumps(OK), "text/plain", 415, "application/json"),
    (json.dumps(OK), None, 415, "application/json"),
    (json.dumps(OK), "application/json; charset=utf-16", 415, "UTF-8"),
    (json.dumps(OK).encode("utf-16"), "application/json", 400, "UTF-8"),
    (json.dumps({**OK, "stop": ["abcdefgh"] * 1000}), "application/json", 400, "`stop`"),
    (
        json.dumps({**OK, "stream": True, "stream_options": {"include_usage": "yes"}}),
        "application/json",
        400,
        "include_usage",
    ),
    (json.dumps({**OK, "num_beams": 2000, "max_tokens": 32}), "application/json", 400, "64"),
    (json.dumps({**OK, "num_beams": 8, "n": 8, "prompt": ["a", "b"]}), "application/json", 400, ""),
    (json.dumps({**OK, "max_tokens": "16"}), "application/json", 400, "`max_tokens`"),
    (json.dumps({**OK, "seed": 1.5}), "application/json", 400, "`seed`"),
]


def test_malformed_bodies_get_a_short_400_or_415_never_a_500(server, client):
    memory = Memory(server[1])
    for raw, content_type, status, words in HOSTILE:
        headers = {**AUTH, **({"content-type": content_type} if content_type else {})}
        response, took = timed(
            lambda raw=raw, headers=headers: client.post(
                "completions", content=raw, headers=headers
            )
        )
        error = response.json()["error"]
        assert (response.status_code, took < ANSWER_S) == (status, True), (raw[:80], error)
        assert words in error["message"] and len(error["message"]) < 300, error
    assert client.post("completions", json=OK, headers=AUTH).status_code == 200
    assert_bounded(memory)


def test_the_api_key_is_required_everywhere(client):
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": KEY}):
        assert client.post("completions", json=OK, headers=headers).status_code == 401
        assert client.get("models", headers=headers).status_code == 401
        answer = client.get(f"models/{MODEL}/files/tokenizer.json", headers=headers)
        assert answer.status_code == 401
        assert answer.headers["www-authenticate"] == "Bearer"
    assert client.get("models", headers=AUTH).status_code == 200


def test_files_stream_from_disk_with_etags_and_bounded_concurrency(server, client):
    memory = Memory(server[1])
    onnx = (BUNDLE / "model.onnx").read_bytes()
    sha = json.loads((BUNDLE / "manifest.json").read_text())["files"]["model.onnx"]["sha256"]
    settled = None
    for index in range(DOWNLOADS):
        response = client.get(f"models/{MODEL}/files/model.onnx", headers=AUTH)
        assert response.status_code == 200 and response.content == onnx
        if index == DOWNLOADS // 3:
            settled = memory.now()
    assert response.headers["etag"] == f'"{sha}"'
    assert response.headers["content-type"] == "application/octet-stream"
    cached = client.get(
        f"models/{MODEL}/files/model.onnx", headers={**AUTH, "If-None-Match": f'"{sha}"'}
    )
    assert cached.status_code == 304 and not cached.content
    card = client.get(f"models/{MODEL}/files/README.md", headers=AUTH)
    assert card.headers["content-type"].startswith("text/markdown")
    for name in ("manifest.json.bak", "..%2Fmanifest.json", "%2Fetc%2Fpasswd"):
        assert client.get(f"models/{MODEL}/files/{name}", headers=AUTH).status_code == 404

    def slow_reader(_):  # holds its download open while reading slowly
        with httpx.stream(
            "GET", f"{server[0]}/models/{MODEL}/files/model.onnx", headers=AUTH, timeout=60
        ) as answer:
            if answer.status_code != 200:
                return answer.status_code
            size = 0
            for chunk in answer.iter_bytes(1 << 20):
                size += len(chunk)
                time.sleep(0.02)
            return 200 if size == len(onnx) else -1

    with ThreadPoolExecutor(6) as pool:
        statuses = list(pool.map(slow_reader, range(6)))
    assert statuses.count(200) >= 2 and statuses.count(429) >= 1, statuses
    assert set(statuses) <= {200, 429}, statuses
    now, growth = memory.now(), memory.growth()
    assert all(v < SERVE_RSS_MB for v in now.values()), now
    # Sending files warms the gateway's and proxy's buffers once (≈ 55–65 MB here); after the
    # first third of the downloads they creep by ≈ 0.4–1 MB per 13.6 MB download (allocator
    # fragmentation; 26 MB over the last 20 plus the 6 slow ones on a loaded host). Holding each
    # file, as before the fix, grew them by the file's size per download: ≈ 270 MB over those.
    assert all(v < DOWNLOAD_GROWTH_MB for v in growth.values()), growth
    late = {k: v - settled[k] for k, v in now.items()}
    assert all(v < 1.5 * DOWNLOADS for v in late.values()), late


# ---- python app.py ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def app_process(tmp_path_factory):
    """(URL, Popen, stderr path) of `python app.py` on a free port, once its models are
    loaded (its memory steady)."""
    port = free_port()
    log = tmp_path_factory.mktemp("app") / "stderr.txt"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GRADIO_ANALYTICS_ENABLED": "False"}
    with log.open("w") as stderr:
        process = subprocess.Popen(
            [sys.executable, str(ROOT / "app.py"), "--host", "127.0.0.1", "--port", str(port)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            try:
                if httpx.get(url + "/", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(1)
        last, steady = 0.0, 0
        while time.monotonic() < deadline:  # preloading the models after the page is up
            time.sleep(2)
            now = rss_mb(process.pid)
            # three quiet checks in a row: one model's load can pause for two seconds (a busy
            # host, a model probing its kernels) and look steady between two of them
            steady = steady + 1 if abs(now - last) < 2 else 0
            if steady == 3:
                break
            last = now
        yield url, process, log
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()


def gradio_call(
    url: str, name: str, data: list, http: httpx.Client | None = None
) -> tuple[int, str]:
    """POST /gradio_api/call/NAME, then read its result event; (status, the final event's
    data, or the POST's own answer when it was refused). Many calls share one `http` client:
    a client of its own costs each call ≈ 25 ms of CPU."""
    if http is None:
        with httpx.Client(timeout=ANSWER_S) as own:
            return gradio_call(url, name, data, own)
    posted = http.post(f"{url}/gradio_api/call/{name}", json={"data": data})
    if posted.status_code != 200:
        return posted.status_code, posted.text
    event_id = posted.json()["event_id"]
    with http.stream("GET", f"{url}/gradio_api/call/{name}/{event_id}") as answer:
        lines = [line for line in answer.iter_lines() if line.startswith("data: ")]
    return 200, lines[-1].removeprefix("data: ") if lines else ""


GENERATE = [MODEL.replace("/", " (") + ")", "In the beginning", {}, "greedy", 8]
GENERATE += [1.0, 0, 1.0, 0.0, 1.0, 0, 2, 1, 0]


def test_the_app_refuses_large_bodies_and_bad_inputs_cheaply(app_process):
    url, process, log = app_process
    big = json.dumps({"data": ["word " * 1_000_000]}).encode()  # 5 MB, 2 of 14 inputs
    half = json.dumps({"data": ["bible-lm (int8)", "word " * 40_000]}).encode()  # 2 of 14
    # A malformed call and a generation first: the model's first generation allocates its
    # engine's buffers (≈ 30 MB, more in a full run), which no hostile request is to blame for.
    gradio_call(url, "generate", json.loads(half)["data"])
    gradio_call(url, "generate", GENERATE)
    before = rss_mb(process.pid)
    for _ in range(4):
        response, took = timed(
            lambda: httpx.post(
                f"{url}/gradio_api/call/generate",
                content=big,
                headers={"content-type": "application/json"},
                timeout=ANSWER_S,
            )
        )
        assert response.status_code == 413 and took < ANSWER_S
    status, _ = gradio_call(url, "generate", json.loads(half)["data"])
    assert status in (200, 422)
    status, answer = gradio_call(
        url, "generate", [*GENERATE[:2], {"section": ["x"]}, *GENERATE[3:]]
    )
    assert status == 200 and "`section` must be one of" in answer
    status, answer = gradio_call(url, "generate", GENERATE)
    assert status == 200 and json.loads(answer)[0]  # the server still generates
    assert rss_mb(process.pid) - before < GROWTH_MB
    longest = max(len(line) for line in log.read_text().splitlines() or [""])
    assert longest < 2_200  # a bad request is logged in bounded lines


def test_the_app_serves_only_its_own_files_and_takes_no_uploads(app_process):
    url, _, _ = app_process
    shared = Path("/tmp/gradio") / f"planted-{uuid.uuid4().hex}.txt"
    shared.parent.mkdir(exist_ok=True)
    shared.write_text("not published")
    try:
        for path in (f"/gradio_api/file={shared}", f"/file={shared}"):
            answer = httpx.get(url + path, timeout=ANSWER_S)
            assert answer.status_code in (403, 404) and "not published" not in answer.text
    finally:
        shared.unlink()
    upload = httpx.post(
        f"{url}/gradio_api/upload", files={"files": ("a.txt", b"x" * 1000)}, timeout=ANSWER_S
    )
    assert upload.status_code == 404


def test_the_app_caps_total_sequences(app_process):
    url, _, _ = app_process
    lines = "\n".join(["In the beginning"] * 16)
    data = ["translator (int8)", lines, "beam search", 8, 1.0, 0, 1.0, 0.0, 1.0, 0, 8, 1, 0]
    status, answer = gradio_call(url, "translate", data)
    message = json.loads(answer)["error"]
    assert status == 200 and "must be at most 64 sequences, got 16 × 1 × 8 = 128" in message


def test_the_apps_first_html_is_light(app_process):
    """The page `python app.py` sends first, as a visitor gets it (issue 45: at most
    `HTML_BYTES`; 768,517 bytes before ui/light_page.py, 1.09 MB with the model cards in it)."""
    html = httpx.get(app_process[0] + "/", timeout=ANSWER_S).content
    assert len(html) <= HTML_BYTES, f"the page's HTML is {len(html):,} bytes"
    assert b"window.gradio_config" in html and b"data:image" not in html


def test_the_apps_memory_settles_over_a_soak(app_process):
    """After a warm-up that fills Gradio's sessions, `SOAK_CALLS` more calls (one in ten a
    generation) grow the app by less than `SOAK_GROWTH_KB_PER_CALL` a call (≈ 21 KB a call
    before `ui.server.ForgetFinishedEvents`)."""
    url, process, _ = app_process

    def soak(calls: int, http: httpx.Client) -> None:
        for index in range(calls):
            name, data = ("generate", GENERATE) if index % 10 == 0 else ("list_models", [])
            status, answer = gradio_call(url, name, data, http)
            assert status == 200 and json.loads(answer)[0], answer

    with httpx.Client(timeout=ANSWER_S) as http:
        soak(SOAK_WARM_UP, http)
        before = rss_mb(process.pid)
        soak(SOAK_CALLS, http)
    growth_kb = (rss_mb(process.pid) - before) * 1024 / SOAK_CALLS
    assert growth_kb < SOAK_GROWTH_KB_PER_CALL, f"{growth_kb:.1f} KB per call"


def test_the_app_forgets_finished_events(monkeypatch):
    """Gradio 6.17.3 keeps every finished event (its request and inputs) and a time for every
    session it ever opened; behind `server.launch_settings` none of that outlives the answer."""
    import gradio as gr

    from ui import server

    monkeypatch.setattr(server, "EVENTS_KEPT", 5)
    with gr.Blocks() as demo:
        text = gr.Textbox()
        text.submit(str.upper, text, text, api_name="upper")
    demo.queue().launch(
        server_name="127.0.0.1",
        server_port=free_port(),
        prevent_thread_lock=True,
        quiet=True,
        **server.launch_settings(),
    )
    try:
        with httpx.Client(timeout=ANSWER_S) as http:
            for index in range(30):
                assert gradio_call(demo.local_url.rstrip("/"), "upper", [f"x{index}"], http) == (
                    200,
                    f'["X{index}"]',
                )
        httpx.get(demo.local_url, timeout=ANSWER_S)  # one more request after the last event
        queue, holder = demo._queue, demo.state_holder
        assert not queue.event_ids_to_events and not queue.pending_event_ids_session
        assert not queue.pending_messages_per_session and len(queue._asyncio_tasks) <= 1
        statuses = [entry["status"] for entry in queue.event_analytics.values()]
        assert statuses == ["success"] * 5
        assert set(holder.time_last_used) <= set(holder.session_data)
    finally:
        demo.close()


# ---- scriptorium serve with no flags ----------------------------------------------------------


def test_serve_on_ray_with_every_default_model_is_ready_and_stops_promptly_on_sigterm(tmp_path):
    port = free_port()
    log = tmp_path / "serve.txt"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RAY_USAGE_STATS_ENABLED": "0"}
    with log.open("w") as output:
        process = subprocess.Popen(
            [sys.executable, "-m", "serve", "--ray", "--port", str(port)],
            cwd=ROOT,
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline, models = time.monotonic() + 300, None
        while time.monotonic() < deadline and process.poll() is None:
            try:
                answer = httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=5)
                if answer.status_code == 200:
                    models = [m["id"] for m in answer.json()["data"]]
                    break
            except httpx.HTTPError:
                time.sleep(2)
        assert models and {"bible-lm/int8", "bible-lm/fp32"} <= set(models), log.read_text()[-2000:]
        for model in models:  # every model is placed and answers
            body = {"model": model, "prompt": "In the beginning", "max_tokens": 2, "temperature": 0}
            answer = httpx.post(f"http://127.0.0.1:{port}/v1/completions", json=body, timeout=120)
            assert answer.status_code == 200, answer.text
        start = time.monotonic()
        process.send_signal(signal.SIGTERM)
        # 0, or 15 when Ray's own SIGTERM handler ends the driver (after stopping the cluster)
        assert process.wait(30) in (0, 15)
        assert time.monotonic() - start < 20
        text = log.read_text()
        if os.cpu_count() < 4:  # 4 text generators: their reservations were fitted, and said
            assert "CPU cluster: each reserves" in text
        assert "failed to shut down" not in text
    finally:
        if process.poll() is None:
            process.kill()


# ---- a schema-driven fuzz run ---------------------------------------------------------------

FUZZ_SEED = 22
FUZZ_CALLS = 120
ODD = [None, True, False, 0, -1, 1.5, float("nan"), "", "x" * 300, "\u202e\U0001f642", [], {}, [[]]]


def schema_values(schema: dict, defs: dict, rng) -> list:
    """Values for a JSON schema: its edges (valid and one step outside) and odd values."""
    if "$ref" in schema:
        return schema_values(defs[schema["$ref"].rsplit("/", 1)[-1]], defs, rng)
    if "anyOf" in schema:
        return [v for option in schema["anyOf"] for v in schema_values(option, defs, rng)]
    if "const" in schema or "enum" in schema:
        return [schema.get("const"), *schema.get("enum", []), "other"]
    kind, values = schema.get("type"), []
    if kind in ("integer", "number"):
        low = schema.get("minimum", schema.get("exclusiveMinimum", -3))
        high = schema.get("maximum", schema.get("exclusiveMaximum", 3))
        values = [low - 1, low, low + 1, min(high, 3), high, high + 1, 2]
        values += [v + 0.5 for v in values[:2]] if kind == "number" else [2.0, "2"]
    elif kind == "string":
        longest = schema.get("maxLength", 64)
        values = ["In", "", "a" * longest, "a" * (longest + 1), "gospels", "\x00"]
    elif kind == "boolean":
        values = [True, False, "true", 1]
    elif kind == "null":
        values = [None]
    elif kind == "array":
        items = schema_values(schema.get("items", {}), defs, rng) or ODD
        count = schema.get("maxItems", 3)
        values = [[rng.choice(items) for _ in range(n)] for n in (0, 1, count, count + 1)]
    elif kind == "object":
        inner = schema.get("additionalProperties") or {}
        inner_values = schema_values(inner, defs, rng) if inner else ODD
        values = [{}, {"section": rng.choice(inner_values)}, {"include_usage": True}]
    return values or ODD


def test_a_schema_driven_fuzz_run_finds_no_500_and_no_hang(server, client):
    """Bodies built from the OpenAPI schema's CompletionBody: each call changes 1–3 fields of a
    valid body to a value from the schema's edges (or an odd one); every answer must be 200
    with a completion or an OpenAI error with a 4xx status, within the time bound."""
    import random

    from serve.protocol import CompletionResponse

    memory = Memory(server[1])
    schema = httpx.get(server[0].removesuffix("/v1") + "/openapi.json", headers=AUTH).json()
    defs = schema["components"]["schemas"]
    fields = defs["CompletionBody"]["properties"]
    rng = random.Random(FUZZ_SEED)
    statuses = {}
    for _ in range(FUZZ_CALLS):
        body = {**OK}
        for name in rng.sample(sorted(fields), rng.randint(1, 3)):
            values = schema_values(fields[name], defs, rng) + ODD
            body[name] = rng.choice(values)
        raw = json.dumps(body, allow_nan=True)
        response, took = timed(
            lambda raw=raw: client.post("completions", content=raw, headers=JSON)
        )
        statuses[response.status_code] = statuses.get(response.status_code, 0) + 1
        assert took < ANSWER_S * 2, (body, took)
        assert response.status_code in (200, 400, 404), (body, response.text[:300])
        if response.status_code != 200:
            error = response.json()["error"]
            assert set(error) == {"message", "type", "param", "code"} and error["message"]
        elif not body.get("stream"):
            CompletionResponse.model_validate(response.json())
        else:
            assert response.text.rstrip().endswith("data: [DONE]")
    assert statuses.get(200, 0) >= 5 and statuses.get(400, 0) >= 5, statuses
    assert_bounded(memory)
