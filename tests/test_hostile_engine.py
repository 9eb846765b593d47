"""Hostile requests against the engine (issue 37, items 1 and 4): one request never harms another.

- Every decoding setting is bounded to a range where its maths is defined (runtime/config.py);
  outside it `GenerationConfig.validate` raises the one ValueError template, and serve answers
  400 with that message (its schema declares no looser range of its own).
- A request that fails in the engine's loop (a logits processor, the sampler, NaN logits, the
  detokenizer: tests/engine_faults.py) ends alone: its caller gets the error, and every
  batch-mate gets exactly (token for token, log-probability for log-probability) what it gets
  alone, in every causal-LM family (tests/test_engine.py's `generators`).
- The engine's KV cache (its rows × positions, by its own accounting) never exceeds its budget
  under a burst, results stay those alone, and a request that could not fit alone is refused.
- A generation whose caller has gone stops in the engine at its next step: through
  `runtime.cancel.cancel_when`, a replica's cancelled request (`ModelServer`, in process), and a
  client that disconnects from `scriptorium serve` (a local Ray cluster on 127.0.0.1), streamed
  or not; there four concurrent streams, one of them bad, leave the other three whole.
"""

from __future__ import annotations

import asyncio
import functools
import json
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import pytest

import runtime
from runtime.cancel import Cancelled, cancel_when
from runtime.parameters import NAMED
from tests.engine_faults import BAD_SEED, BAD_TEMPERATURE, CAUSES, FAIL_AT, faulty_load, inject
from tests.test_engine import _same_length_prompts, _same_tokens, generators  # noqa: F401

ROOT = Path(__file__).resolve().parent.parent
BUNDLE = ROOT / "models" / "bible-lm" / "int8"
MODEL = "bible-lm/int8"
BAD = runtime.GenerationConfig(
    max_new_tokens=20, do_sample=True, temperature=BAD_TEMPERATURE, top_k=40, seed=BAD_SEED
)
MATES = [
    runtime.GenerationConfig(max_new_tokens=18),
    runtime.GenerationConfig(max_new_tokens=22, do_sample=True, top_k=30, seed=5),
    runtime.GenerationConfig(
        max_new_tokens=16, do_sample=True, top_p=0.9, seed=9, num_return_sequences=2
    ),
]


# ---- settings: bounded where their maths is defined ----------------------------------------


@pytest.mark.parametrize(
    "name, value, rule",
    [
        ("repetition_penalty", 1e-300, "in [0.01, 100]"),
        ("repetition_penalty", 1e300, "in [0.01, 100]"),
        ("repetition_penalty", 0.0, "in [0.01, 100]"),
        ("temperature", 1e-300, "in [0.001, 100]"),
        ("temperature", 1e300, "in [0.001, 100]"),
        ("length_penalty", 1e300, "in [-10, 10]"),
        ("length_penalty", -1e3, "in [-10, 10]"),
        ("suppress_tokens", (5, -1), "an int >= 0"),
        ("forced_bos_token_id", -3, "an int >= 0"),
    ],
)
def test_settings_outside_their_defined_range_are_refused(name, value, rule):
    shown = value[-1] if isinstance(value, tuple) else value
    message = f"`{name}` must be {rule}, got {shown!r}"
    with pytest.raises(ValueError, match=re.escape(message)):
        runtime.GenerationConfig(**{name: value}).validate()


@pytest.mark.parametrize("name", ["repetition_penalty", "temperature"])
def test_settings_at_their_bounds_keep_every_score_finite(name):
    """Logits of any magnitude a model emits (here up to 1e30) stay finite through the
    processors and the sampler at both ends of each range, so a row always has a token."""
    from runtime import processors, sampling

    rng = np.random.default_rng(0)
    logits = (rng.standard_normal((4, 300)) * 10.0 ** rng.integers(0, 31, (4, 1))).astype(
        np.float32
    )  # (4, 300)
    history = rng.integers(0, 300, (4, 12))  # (4, 12)
    for value in (NAMED[name].valid.low, NAMED[name].valid.high):
        config = runtime.GenerationConfig(do_sample=True, **{name: value}).validate()
        scores = processors.apply_processors(logits, history, history > -1, config, 0, None)
        assert np.isfinite(scores.max(axis=1)).all()
        sampler = sampling.Sampler(temperature=config.temperature, top_p=0.9)
        kept = sampler.filter(scores)
        tokens = sampler(scores, np.random.default_rng(1))
        assert np.isfinite(kept[np.arange(4), tokens]).all()


# ---- failure isolation -----------------------------------------------------------------------


def _run(gen, prompt: str, config, stream: bool):
    """The outputs of one request (its stream folded into outputs), or the exception it raised."""
    try:
        if not stream:
            return gen.generate(prompt, config)
        outputs: dict[int, runtime.GenerationOutput] = {}
        for event in gen.stream(prompt, config):
            out = outputs.setdefault(event.index, runtime.GenerationOutput("", [], [], ""))
            out.text += event.text
            out.token_ids.append(event.token_id)
            out.logprobs.append(event.logprob)
            out.finish_reason = event.finish_reason or out.finish_reason
        return [outputs[i] for i in sorted(outputs)]
    except Exception as error:  # noqa: BLE001 (the test inspects it)
        return error


def _together(gen, jobs: list[tuple[str, runtime.GenerationConfig, bool]]) -> list:
    """Each job's `_run`, all submitted at once from their own threads."""
    barrier = threading.Barrier(len(jobs))

    def one(job):
        barrier.wait(timeout=60)
        return _run(gen, *job)

    with ThreadPoolExecutor(len(jobs)) as pool:
        return list(pool.map(one, jobs, timeout=300))


@pytest.mark.parametrize("cause", CAUSES)
def test_a_failing_request_ends_alone(generators, cause, monkeypatch):  # noqa: F811
    plain, batched, prompts = generators
    mates = [(prompts[i + 1], config) for i, config in enumerate(MATES)]
    alone = [plain.generate(prompt, config) for prompt, config in mates]
    inject(cause, monkeypatch.setattr)
    failure = _run(plain, prompts[0], BAD, stream=False)  # unbatched, it fails as well
    assert isinstance(failure, RuntimeError), failure
    assert "injected" in str(failure) or "not finite" in str(failure)
    engine = batched.engine
    steps, rows = engine.steps, engine.rows_stepped
    bad_streams = cause in ("sampler", "detokenizer")  # a stream's reader, or a waiting caller
    jobs = [(prompts[0], BAD, bad_streams)] + [(p, c, i == 1) for i, (p, c) in enumerate(mates)]
    failed, *others = _together(batched, jobs)
    assert type(failed) is type(failure) and str(failed) == str(failure)
    for got, expected in zip(others, alone):
        assert not isinstance(got, Exception), got
        _same_tokens(got, expected)
    assert engine.rows_stepped - rows > engine.steps - steps  # they really shared a batch
    assert engine.steps - steps > FAIL_AT  # and the batch went on after the failure
    _same_tokens(batched.generate(*mates[0]), alone[0])  # the loop serves on


def test_a_prompt_whose_prefill_fails_fails_alone(bible, monkeypatch):
    """Equal-length prompts prefill as one batch; when that fails, each is retried alone, and
    only the one that fails alone fails."""
    batched, plain = bible
    bad, good = _same_length_prompts(plain, ["In the beginning God", "And God said, Let"], 2)
    bad_ids = plain.encode_prompt(bad)
    start = batched.model.start

    def failing_start(input_ids, attention_mask):
        if any(row.tolist() == bad_ids for row in input_ids):
            raise RuntimeError("injected: the prefill failed")
        return start(input_ids, attention_mask)

    monkeypatch.setattr(batched.model, "start", failing_start)
    failed, got = _together(batched, [(bad, MATES[0], False), (good, MATES[1], True)])
    assert isinstance(failed, RuntimeError) and "prefill failed" in str(failed)
    _same_tokens(got, plain.generate(good, MATES[1]))


# ---- the cache budget ------------------------------------------------------------------------


def test_the_cache_budget_holds_under_a_burst(generators, monkeypatch):  # noqa: F811
    plain, batched, prompts = generators
    engine = batched.engine
    assert engine.max_cache_positions * engine.bytes_per_position <= engine.max_cache_bytes
    rng = np.random.default_rng(3)
    jobs = []
    for index in range(12):
        config = runtime.GenerationConfig(
            max_new_tokens=int(rng.integers(4, 24)),
            do_sample=bool(index % 2),
            seed=index,
            num_return_sequences=1 + index % 3 if index % 2 else 1,
        )
        jobs.append((prompts[index % len(prompts)], config, bool(index % 3 == 0)))
    needs = [
        config.num_return_sequences * (len(plain.encode_prompt(p)) + config.max_new_tokens)
        for p, config, _ in jobs
    ]
    budget = 2 * max(needs)  # two of the largest at most, of the 12 (and 22 rows) sent at once
    monkeypatch.setattr(engine, "max_cache_positions", budget)
    engine.peak_cache_positions = 0
    results = _together(batched, jobs)
    assert 0 < engine.peak_cache_positions <= budget
    # nothing left behind: the engine accounts for a finished batch just after its last event
    _until(lambda: engine.cache_positions == 0, "the engine releasing the batch's cache")
    for (prompt, config, _), got in zip(jobs, results):
        _same_tokens(got, plain.generate(prompt, config))
    # A request whose own rows could never fit is refused before it waits.
    too_wide = runtime.GenerationConfig(max_new_tokens=budget, do_sample=True, seed=1)
    with pytest.raises(ValueError, match=r"`max_new_tokens` .* must fit the engine's KV cache"):
        batched.generate(prompts[0], too_wide.replace(num_return_sequences=8))


# ---- abandoned requests ----------------------------------------------------------------------


def _slow_steps(monkeypatch, gen, delay: float = 0.02) -> None:
    step = gen.model.step

    def slow_step(tokens, state):
        time.sleep(delay)
        return step(tokens, state)

    monkeypatch.setattr(gen.model, "step", slow_step)


def _until(condition, what: str, seconds: float = 30.0) -> None:
    """Poll `condition` (bounded: a hang fails the test)."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"{what} did not happen"
        time.sleep(0.005)


@pytest.fixture(scope="module")
def bible():
    return runtime.load(BUNDLE, threads=1), runtime.load(BUNDLE, threads=1, batching=False)


@pytest.mark.parametrize("kind", ["engine", "unbatched", "beam"])
def test_a_cancelled_generation_stops_at_its_next_step(bible, kind, monkeypatch):
    batched, plain = bible
    gen = batched if kind == "engine" else plain
    calls = []
    step = gen.model.step

    def counted_step(tokens, state):
        calls.append(len(tokens))
        time.sleep(0.01)
        return step(tokens, state)

    monkeypatch.setattr(gen.model, "step", counted_step)
    config = runtime.GenerationConfig(max_new_tokens=100, min_new_tokens=100)
    if kind == "beam":
        config = config.replace(num_beams=2)
    stop, outcome = threading.Event(), []

    def abandoned():
        with cancel_when(stop):
            outcome.append(_run(gen, "In the beginning", config, stream=False))

    thread = threading.Thread(target=abandoned)
    thread.start()
    _until(lambda: len(calls) >= 5, "the generation's fifth step")
    stop.set()
    thread.join(timeout=30)
    assert isinstance(outcome[0], Cancelled), outcome
    stepped = len(calls)
    assert stepped < 50  # of 99: it stopped at the next step, not at its end
    if kind == "engine":
        _until(lambda: gen.engine.cache_positions == 0, "the engine dropping the cancelled rows")
        _same_tokens(gen.generate("Blessed are", MATES[0]), plain.generate("Blessed are", MATES[0]))
    else:
        gen.generate("Blessed are", MATES[0])
    assert len(calls) > stepped  # later requests run as before


def test_a_replica_stops_generating_when_its_request_is_cancelled():
    """`ModelServer.complete` (non-streamed) cancelled, as Serve cancels a request whose client
    disconnected: the replica's thread stops at its engine's next step."""
    from serve import api
    from serve.deployments import ModelServer

    server = ModelServer(
        str(BUNDLE), 1, 2, functools.partial(faulty_load, delay=0.02, faults=False)
    )
    engine = server.generator.engine
    request = api.parse_completion(
        {"model": MODEL, "prompt": "In the beginning", "max_tokens": 120, "temperature": 0}
    )

    async def abandon() -> None:
        steps = engine.steps
        task = asyncio.ensure_future(server.complete(request))
        while engine.steps < steps + 5:
            await asyncio.sleep(0.005)
        assert server.stats()["running"] == 1
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    steps = engine.steps
    asyncio.run(asyncio.wait_for(abandon(), 60))
    _until(lambda: server.stats()["running"] == 0, "the replica's request ending")
    assert server.stats()["cancelled"] == 1
    _until(lambda: engine.cache_positions == 0, "the engine dropping its rows")
    assert engine.steps - steps < 60  # of its 119: it stopped at the next step


# ---- over HTTP: scriptorium serve on a local Ray cluster --------------------------------------


@pytest.fixture(scope="module")
def server(ray_cluster) -> str:
    """A Serve application on the tests' shared Ray cluster: bible-lm int8 whose steps take
    50 ms and whose requests seeded BAD_SEED fail midway (tests/engine_faults.py)."""
    from serve.cli import deploy
    from serve.deployments import ModelSpec
    from tests.app_fixtures import free_port

    port = free_port()
    loader = functools.partial(faulty_load, delay=0.05)
    deploy([ModelSpec(MODEL, str(BUNDLE), threads=1, cpus=0.5, loader=loader)], "127.0.0.1", port)
    return f"http://127.0.0.1:{port}/v1"


def _stats() -> dict:
    from ray import serve

    from serve.deployments import deployment_name

    handle = serve.get_deployment_handle(deployment_name(MODEL), app_name="scriptorium")
    return handle.stats.remote().result()


def _stream(base: str, body: dict) -> tuple[int, list[dict]]:
    """(status, JSON chunks or the error body) of one streamed completion."""
    body = {"model": MODEL, "prompt": "In the beginning", "stream": True, **body}
    with httpx.Client(base_url=base + "/", timeout=120) as client:
        with client.stream("POST", "completions", json=body) as response:
            if response.status_code != 200:
                return response.status_code, [json.loads(response.read())]
            lines = [line for line in response.iter_lines() if line]
    assert lines[-1] == "data: [DONE]"
    return 200, [json.loads(line.removeprefix("data: ")) for line in lines[:-1]]


GOOD = [dict(max_tokens=20, temperature=0.9, top_k=40, seed=seed) for seed in (1, 2, 3)]


def _runtime_text(local, body: dict) -> str:
    config = runtime.GenerationConfig(
        max_new_tokens=body["max_tokens"], do_sample=True, temperature=0.9, top_k=40
    )
    return local.generate("In the beginning", config.replace(seed=body["seed"]))[0].text


@pytest.mark.parametrize(
    "bad, status",
    [(dict(repetition_penalty=1e-300), 400), (dict(seed=BAD_SEED, temperature=0.9), 200)],
    ids=["undefined-setting", "fails-midway"],
)
def test_four_streams_one_bad_the_others_finish_whole(server, bible, bad, status):
    local = bible[1]
    bad = {"max_tokens": 20, **bad}
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(functools.partial(_stream, server), [bad, *GOOD]))
    (bad_status, bad_chunks), *good = results
    assert bad_status == status
    if status == 400:  # the runtime's own message, in the API's words
        error = bad_chunks[0]["error"]
        assert error["param"] == "repetition_penalty"
        assert error["message"] == "`repetition_penalty` must be in [0.01, 100], got 1e-300"
    else:  # some tokens, then an error event naming the failure
        assert "injected" in bad_chunks[-1]["error"]["message"]
        assert len(bad_chunks) == 1 + FAIL_AT
    for body, (code, chunks) in zip(GOOD, good):
        assert code == 200 and all("error" not in c for c in chunks), chunks[-1]
        assert "".join(c["choices"][0]["text"] for c in chunks) == _runtime_text(local, body)
        assert chunks[-1]["choices"][0]["finish_reason"] == "length"


@pytest.mark.parametrize("stream", [False, True])
def test_a_client_that_disconnects_stops_its_generation(server, stream):
    before = _stats()
    body = {"model": MODEL, "prompt": "In the beginning", "max_tokens": 120, "temperature": 0}
    with httpx.Client(base_url=server + "/", timeout=1.5) as client:  # 1.5 s: 30 of 120 steps
        if stream:  # a reader that takes the first chunk and goes
            with client.stream("POST", "completions", json=body | {"stream": True}) as reply:
                assert next(line for line in reply.iter_lines() if line.startswith("data: "))
        else:  # a client that gives up waiting
            with pytest.raises(httpx.ReadTimeout):
                client.post("completions", json=body)
    _until(lambda: _stats()["cancelled"] == before["cancelled"] + 1, "the cancellation", seconds=60)
    after = _stats()
    assert after["running"] == 0
    assert after["steps"] - before["steps"] < 100  # it stopped well before its 119 steps
