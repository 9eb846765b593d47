"""`scriptorium serve` on a real local Ray cluster: the OpenAI-compatible API and the thin app.

One Serve application for the whole module, on the tests' shared two-CPU cluster (`ray_cluster`,
tests/conftest.py): the shipped bible-lm int8 as "bible-lm/int8" (2 replicas × 1 thread) and the
same bundle as "slow" (1 replica, one stream event per 50 ms, so a test can stop or kill a
generation midway).
Every text is compared with `runtime.generate` in this process for the same settings and seed.
"""

from __future__ import annotations

import functools
import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

import runtime
from serve import api, protocol
from serve.deployments import ModelSpec, deployment_name
from tests.app_fixtures import free_port, slow_load

ROOT = Path(__file__).resolve().parent.parent
BUNDLE = ROOT / "models" / "bible-lm" / "int8"
MODEL = "bible-lm/int8"
PROMPT = "In the beginning"
SAMPLING = dict(do_sample=True, temperature=0.8, top_k=40, top_p=0.9, seed=7)
SAMPLING_BODY = dict(temperature=0.8, top_k=40, top_p=0.9, seed=7)


@pytest.fixture(scope="module")
def server(ray_cluster) -> str:
    """The application's base URL ("http://127.0.0.1:PORT/v1")."""
    from serve.cli import deploy

    port = free_port()
    specs = [
        ModelSpec(MODEL, str(BUNDLE), replicas=2, threads=1, cpus=0.5),
        ModelSpec(
            "slow",
            str(BUNDLE),
            threads=1,
            cpus=0.5,
            autoscaling=(1, 1),  # the autoscaling path, with a fixed replica count
            loader=functools.partial(slow_load, delay=0.05),
        ),
    ]
    deploy(specs, "127.0.0.1", port)
    return f"http://127.0.0.1:{port}/v1"


@pytest.fixture(scope="module")
def local():
    return runtime.load(BUNDLE, threads=1)


@pytest.fixture
def client(server):
    with httpx.Client(base_url=server + "/", timeout=120) as http:
        yield http


def complete(client, **body) -> dict:
    response = client.post("completions", json={"model": MODEL, "prompt": PROMPT, **body})
    assert response.status_code == 200, response.text
    return response.json()


def sse(client, **body) -> list[dict]:
    """The JSON chunks of a streamed completion (asserting the stream ends with [DONE])."""
    chunks = []
    body = {"model": MODEL, "prompt": PROMPT, "stream": True, **body}
    with client.stream("POST", "completions", json=body) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in response.iter_lines() if line]
    assert lines[-1] == "data: [DONE]"
    for line in lines[:-1]:
        assert line.startswith("data: ")
        chunks.append(json.loads(line[len("data: ") :]))
    return chunks


def stats(model: str) -> dict:
    from ray import serve

    handle = serve.get_deployment_handle(deployment_name(model), app_name="scriptorium")
    return handle.stats.remote().result()


# ---- the protocol, without Ray ------------------------------------------------------------------


def test_openai_body_maps_onto_the_generation_config():
    body = {"model": "m", "prompt": ["a", "b"], "max_tokens": 9, "n": 3, "stop": "\n"}
    request = api.parse_completion({**body, **SAMPLING_BODY, "min_tokens": 2})
    expected = runtime.GenerationConfig(
        max_new_tokens=9, num_return_sequences=3, stop=("\n",), min_new_tokens=2, **SAMPLING
    )
    assert request.config == expected and request.prompts == ("a", "b")
    greedy = api.parse_completion({"model": "m", "prompt": "a", "temperature": 0})
    assert greedy.config == runtime.GenerationConfig(max_new_tokens=16)
    beam = api.parse_completion({"model": "m", "prompt": "a", "temperature": 0, "num_beams": 4})
    assert beam.config.mode == "beam"


@pytest.mark.parametrize(
    "body, param, message",
    [
        ({"top_p": 1.5}, "top_p", "`top_p` must be in (0, 1], got 1.5"),
        ({"temperature": -1}, "temperature", "`temperature` must be a number in [0, 2]"),
        ({"temperature": 5}, "temperature", "`temperature` must be a number in [0, 2]"),
        ({"max_tokens": 0}, "max_tokens", "`max_tokens` must be an int >= 1, or 0 with `echo`"),
        ({"max_tokens": -1}, "max_tokens", "`max_tokens` must be an int >= 1 (default 16)"),
        ({"logprobs": 9}, "logprobs", "`logprobs` must be an int in [0, 5] or null, got 9"),
        ({"echo": "yes"}, "echo", "`echo` must be true or false"),
        ({"echo": 1}, "echo", "`echo` must be true or false"),
        ({"prompt": [1, -2]}, "prompt", "lists of token ids, got [1, -2]"),
        ({"prompt": [[1], []]}, "prompt", "lists of token ids, got [[1], []]"),
        ({"prompt": [1, "a"]}, "prompt", "`prompt` must be a string"),
        ({"stop": ["a"] * 5}, "stop", "at most 4 strings"),
        ({"best_off": 2}, "best_off", "`best_off` is not a completions parameter"),
        ({"prompt": ["a"] * 9, "n": 8, "seed": 1}, "n", "at most 64 sequences, got 9 × 8 × 1 = 72"),
        ({"num_beams": 100, "temperature": 0}, "num_beams", "`num_beams` must be at most 64, got"),
        ({"n": 2, "temperature": 0}, "n", "`n` must be 1 for greedy"),
        ({"min_tokens": -1}, "min_tokens", "`min_tokens` must be an int >= 0, got -1"),
        ({"controls": {"section": ["x"]}}, "controls", "got ['x']"),
        ({"controls": {"section": {}}}, "controls", "`controls` must be an object"),
        ({"stream_options": {"include_usage": "yes"}}, "stream_options.include_usage", "'yes'"),
        ({"stream": "true"}, "stream", "`stream` must be true or false, got 'true'"),
        ({"prompt": "\ud800 In"}, "prompt", "lone surrogate"),
        ({"prompt": "x" * 40_000}, "prompt", "at most 32768 characters, got 40000"),
        ({"stop": ["abcdefgh"] * 1000}, "stop", "… (12000 characters)"),
    ],
)
def test_bad_bodies_are_refused_with_the_parameter_named(body, param, message):
    with pytest.raises(api.RequestError) as raised:
        api.parse_completion({"model": "m", "prompt": "a", **body})
    assert message in str(raised.value) and raised.value.param == param
    assert len(str(raised.value)) < 300  # echoes are cut short


@pytest.mark.parametrize(
    "raw, message",
    [
        (b'{"model": "m", "prompt": "\\ud800 In"}', "hex escape"),  # a lone surrogate
        (b'{"model": "m", "prompt": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "recursion"),
        (b"[" * 100_000 + b"]" * 100_000, "recursion"),
        ('{"model": "m", "prompt": "In"}'.encode("utf-16"), "expected value"),
        (b'{"model": "m", "prompt": "In", "temperature": NaN}', "got nan"),
        (b"[1]", "must be a JSON object"),
    ],
)
def test_raw_bodies_that_json_cannot_carry_safely_are_refused(raw, message):
    with pytest.raises(api.RequestError) as raised:
        api.parse_completion(raw)
    assert message in str(raised.value) and raised.value.status == 400


def test_the_command_line_finds_every_bundle_and_checks_its_flags():
    from serve.cli import application, main, model_specs, parse_autoscale

    specs = {s.model_id: s for s in model_specs([ROOT / "models"], replicas=3, threads=2)}
    assert MODEL in specs and "bible-lm/fp32" in specs
    assert specs[MODEL].path == str(BUNDLE)
    tasks = {json.loads(Path(s.path, "manifest.json").read_text())["task"] for s in specs.values()}
    assert tasks == {"causal-lm", "seq2seq"}  # no masked LMs, word vectors or paraphrasers
    assert (specs[MODEL].replicas, specs[MODEL].threads) == (3, 2)
    assert parse_autoscale("0:4") == (0, 4)
    with pytest.raises(ValueError, match="`--autoscale` must be MIN:MAX"):
        parse_autoscale("4:1")
    with pytest.raises(SystemExit):
        main(["--replicas", "0"])
    assert type(application({"models": [str(BUNDLE)], "replicas": "2"})).__name__ == "Application"
    with pytest.raises(SystemExit):
        main(["--max-body-bytes", "0"])


# ---- the server ---------------------------------------------------------------------------------


def test_models_are_listed_with_their_manifests(client, local):
    listed = client.get("models").json()
    assert listed["object"] == "list"
    assert sorted(m["id"] for m in listed["data"]) == [MODEL, "slow"]
    info = client.get(f"models/{MODEL}").json()
    assert info["id"] == MODEL and info["manifest"] == local.manifest.to_json()
    tokenizer = client.get(f"models/{MODEL}/files/tokenizer.json")
    assert tokenizer.content == (BUNDLE / "tokenizer.json").read_bytes()
    missing = client.get(f"models/{MODEL}/files/model.onnx.secret")
    assert missing.status_code == 404 and "not a file" in missing.json()["error"]["message"]


def test_greedy_completion_is_the_runtimes_text(client, local):
    answer = complete(client, max_tokens=24, temperature=0)
    expected = local.generate(PROMPT, runtime.GenerationConfig(max_new_tokens=24))[0]
    choice = answer["choices"][0]
    assert answer["object"] == "text_completion" and answer["model"] == MODEL
    assert answer["id"].startswith("cmpl-") and isinstance(answer["created"], int)
    assert choice["text"] == expected.text and choice["index"] == 0
    assert choice["finish_reason"] == api.openai_finish_reason(expected.finish_reason)
    assert choice["scriptorium"]["token_ids"] == expected.token_ids
    usage = protocol.Usage.of(expected.prompt_tokens, len(expected.token_ids))
    assert answer["usage"] == usage.answer()


def test_seeded_sampling_with_extras_is_the_runtimes_text(client, local):
    prompts = [PROMPT, "And God said"]
    answer = complete(client, prompt=prompts, max_tokens=20, n=2, **SAMPLING_BODY)
    config = runtime.GenerationConfig(max_new_tokens=20, num_return_sequences=2, **SAMPLING)
    # Each prompt is generated on its own: its text is what it gets alone, with the same seed.
    expected = [output for prompt in prompts for output in local.generate(prompt, config)]
    assert [c["text"] for c in answer["choices"]] == [o.text for o in expected]
    with_logprobs = complete(
        client, prompt=prompts, max_tokens=20, n=2, logprobs=1, **SAMPLING_BODY
    )
    assert [c["text"] for c in with_logprobs["choices"]] == [o.text for o in expected]
    assert [c["index"] for c in answer["choices"]] == [0, 1, 2, 3]
    gospels = complete(client, max_tokens=20, controls={"section": "gospels"}, **SAMPLING_BODY)
    config = runtime.GenerationConfig(max_new_tokens=20, **SAMPLING)
    assert (
        gospels["choices"][0]["text"]
        == local.generate(PROMPT, config, controls={"section": "gospels"})[0].text
    )


def test_logprobs_are_the_models_own(client, local):
    answer = complete(client, max_tokens=8, temperature=0, logprobs=2)
    expected = local.generate(PROMPT, runtime.GenerationConfig(max_new_tokens=8))[0]
    logprobs = answer["choices"][0]["logprobs"]
    assert logprobs["token_logprobs"] == pytest.approx(expected.logprobs, abs=1e-5)
    assert len(logprobs["tokens"]) == len(expected.token_ids) == len(logprobs["top_logprobs"])
    assert "".join(logprobs["tokens"]) == answer["choices"][0]["text"]
    for chosen, top in zip(logprobs["token_logprobs"], logprobs["top_logprobs"]):
        assert len(top) == 2 and max(top.values()) == pytest.approx(chosen, abs=1e-4)  # greedy


def test_logprobs_join_to_the_text_and_match_their_top_logprobs(client, local):
    config = runtime.GenerationConfig(max_new_tokens=100, do_sample=True, seed=2)
    assert local.generate(PROMPT, config)[0].finish_reason == "eos"  # ends on EOS
    answer = complete(client, max_tokens=100, seed=2, logprobs=3)
    choice = answer["choices"][0]
    logprobs = choice["logprobs"]
    assert choice["scriptorium"]["finish_reason"] == "eos"
    assert "".join(logprobs["tokens"]) == choice["text"]  # EOS is "" in tokens, as in text
    for token_logprob, top in zip(logprobs["token_logprobs"], logprobs["top_logprobs"]):
        # the chosen token's top_logprobs entry is its token_logprob exactly (or not in the top)
        assert token_logprob in top.values() or token_logprob < min(top.values())


def test_streamed_text_offsets_run_and_caps_are_said(client, local):
    chunks = sse(client, max_tokens=12, temperature=0, logprobs=1)
    offsets = [c["choices"][0]["logprobs"]["text_offset"][0] for c in chunks]
    lengths = [len(c["choices"][0]["text"]) for c in chunks]
    assert offsets == [sum(lengths[:i]) for i in range(len(lengths))] and offsets[-1] > 0
    prompt_tokens = len(local.encode_prompt(PROMPT))
    answer = complete(client, max_tokens=10_000, temperature=0)
    extras = answer["choices"][0]["scriptorium"]
    assert extras["max_tokens"] == 128 - prompt_tokens  # capped to the context, and said
    assert extras["finish_reason"] in ("eos", "context")
    assert chunks[-1]["choices"][0]["scriptorium"]["max_tokens"] == 12


def test_the_schema_declares_the_bodies_and_models_have_dates(client):
    schema = client.get(str(client.base_url).removesuffix("/v1/") + "/openapi.json").json()
    body = schema["paths"]["/v1/completions"]["post"]["requestBody"]
    assert body["content"]["application/json"]["schema"]["$ref"].endswith("/CompletionBody")
    fields = schema["components"]["schemas"]["CompletionBody"]["properties"]
    assert {"model", "prompt", "max_tokens", "controls", "num_beams", "echo"} <= set(fields)
    assert fields["max_tokens"]["anyOf"][0]["minimum"] == 0  # 0 with echo: scoring
    assert fields["echo"]["anyOf"][0]["type"] == "boolean"
    shapes = [str(shape) for shape in fields["prompt"]["anyOf"]]
    assert any("'integer'" in shape and "'array'" in shape for shape in shapes)  # token ids
    responses = schema["paths"]["/v1/completions"]["post"]["responses"]
    assert {"200", "400", "404", "413", "415"} <= set(responses)
    files = schema["paths"]["/v1/models/{model}/files/{name}"]["get"]["responses"]["200"]
    assert "application/octet-stream" in files["content"]
    assert all(m["created"] > 1_600_000_000 for m in client.get("models").json()["data"])


def test_echo_with_max_tokens_0_scores_the_prompt_as_the_runtime(client, local):
    text = " Jesus wept."
    answer = complete(client, prompt=[PROMPT, text], max_tokens=0, echo=True, logprobs=1)
    for choice, prompt in zip(answer["choices"], (PROMPT, text)):
        logprobs = choice["logprobs"]
        assert choice["text"] == prompt and choice["finish_reason"] == "length"
        assert "".join(logprobs["tokens"]) == prompt
        assert logprobs["text_offset"] == [
            sum(len(t) for t in logprobs["tokens"][:i]) for i in range(len(logprobs["tokens"]))
        ]
        expected = local.score(prompt)  # each token given the BOS and the tokens before it
        assert len(expected.logprobs) == len(logprobs["tokens"])
        assert logprobs["token_logprobs"] == pytest.approx(list(expected.logprobs), abs=1e-5)
        for chosen, top in zip(logprobs["token_logprobs"], logprobs["top_logprobs"]):
            assert len(top) == 1 and max(top.values()) >= chosen - 1e-5
    prompt_tokens = sum(len(local.encode_prompt(p)) for p in (PROMPT, text))
    assert answer["usage"] == {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": 0,
        "total_tokens": prompt_tokens,
    }
    # token ids: every id shown, the first without a log-probability (nothing precedes it)
    ids = local.encode_prompt(PROMPT)
    scored = complete(client, prompt=ids, max_tokens=0, echo=True, logprobs=0)["choices"][0]
    assert scored["logprobs"]["token_logprobs"][0] is None
    tail = local.score_ids(ids).logprobs
    assert scored["logprobs"]["token_logprobs"][1:] == pytest.approx(list(tail), abs=1e-5)
    assert scored["logprobs"]["top_logprobs"] is None


def test_a_token_id_prompt_completes_as_its_text_and_echo_leads_each_choice(client, local):
    ids = local.encode_prompt(PROMPT)
    by_text = complete(client, max_tokens=12, temperature=0)["choices"][0]
    by_ids = complete(client, prompt=ids, max_tokens=12, temperature=0)["choices"][0]
    assert by_ids["text"] == by_text["text"] and len(by_text["text"]) > 0
    assert by_ids["scriptorium"]["token_ids"] == by_text["scriptorium"]["token_ids"]
    echoed = complete(client, max_tokens=12, temperature=0, echo=True, logprobs=0)["choices"][0]
    assert echoed["text"] == PROMPT + by_text["text"]
    logprobs = echoed["logprobs"]
    assert "".join(logprobs["tokens"]) == echoed["text"]
    shown = len(local.score(PROMPT).logprobs)  # the prompt's own tokens, then the completion's
    assert logprobs["token_logprobs"][:shown] == pytest.approx(
        list(local.score(PROMPT).logprobs), abs=1e-5
    )
    assert logprobs["text_offset"][shown] == len(PROMPT)
    chunks = sse(client, max_tokens=12, temperature=0, echo=True, logprobs=0)
    first = chunks[0]["choices"][0]
    assert first["text"] == PROMPT and first["finish_reason"] is None
    assert first["logprobs"]["token_logprobs"] == logprobs["token_logprobs"][:shown]
    assert "".join(c["choices"][0]["text"] for c in chunks) == echoed["text"]
    offsets = [o for c in chunks for o in c["choices"][0]["logprobs"]["text_offset"]]
    assert offsets == logprobs["text_offset"]
    too_big = client.post("completions", json={"model": MODEL, "prompt": [10**6]})
    assert too_big.status_code == 400 and "token ids must be below" in too_big.text


def test_stream_concatenates_to_the_same_text(client, local):
    chunks = sse(client, max_tokens=24, n=2, **SAMPLING_BODY)
    config = runtime.GenerationConfig(max_new_tokens=24, num_return_sequences=2, **SAMPLING)
    expected = local.generate(PROMPT, config)
    for index, output in enumerate(expected):
        mine = [c["choices"][0] for c in chunks if c["choices"][0]["index"] == index]
        assert "".join(c["text"] for c in mine) == output.text
        assert mine[-1]["finish_reason"] == api.openai_finish_reason(output.finish_reason)
        assert all(c["finish_reason"] is None for c in mine[:-1])
    assert {c["object"] for c in chunks} == {"text_completion"} and len(
        {c["id"] for c in chunks}
    ) == 1
    with_usage = sse(client, max_tokens=5, temperature=0, stream_options={"include_usage": True})
    assert with_usage[-1]["choices"] == [] and with_usage[-1]["usage"]["completion_tokens"] == 5


def test_the_openai_client_gets_the_same_text(server, local):
    import openai

    client = openai.OpenAI(base_url=server, api_key="unused")
    config = runtime.GenerationConfig(max_new_tokens=20, **SAMPLING)
    expected = local.generate(PROMPT, config)[0].text
    answer = client.completions.create(
        model=MODEL,
        prompt=PROMPT,
        max_tokens=20,
        temperature=0.8,
        top_p=0.9,
        seed=7,
        extra_body={"top_k": 40},
    )
    assert answer.choices[0].text == expected and answer.usage.completion_tokens > 0
    stream = client.completions.create(
        model=MODEL,
        prompt=PROMPT,
        max_tokens=20,
        temperature=0.8,
        top_p=0.9,
        seed=7,
        extra_body={"top_k": 40},
        stream=True,
    )
    assert "".join(chunk.choices[0].text for chunk in stream) == expected
    assert [m.id for m in client.models.list()] == [MODEL, "slow"]
    with pytest.raises(openai.BadRequestError, match=r"`top_p` must be in \(0, 1\], got 2.0"):
        client.completions.create(model=MODEL, prompt=PROMPT, top_p=2.0)
    with pytest.raises(openai.NotFoundError, match="must be one of"):
        client.completions.create(model="gpt-4", prompt=PROMPT)


@pytest.mark.parametrize(
    "body, status, param, message",
    [
        ({"top_p": 1.5}, 400, "top_p", "`top_p` must be in (0, 1], got 1.5"),
        ({"model": "nope"}, 404, "model", "`model` must be one of"),
        ({"prompt": "word " * 300}, 400, "prompt", "the model's context is 128 tokens"),
        ({"n": 2, "temperature": 0}, 400, "n", "`n` must be 1 for greedy"),
        ({"controls": {"section": "psalms"}}, 400, None, "psalms"),
        (
            {"stream": True, "repetition_penalty": 0},
            400,
            "repetition_penalty",
            "`repetition_penalty` must be in [0.01, 100], got 0.0",
        ),
        ({"stream": True, "prompt": "word " * 300}, 400, "prompt", "context is 128 tokens"),
    ],
)
def test_bad_input_gets_an_openai_error_and_the_server_keeps_serving(
    client, body, status, param, message
):
    response = client.post("completions", json={"model": MODEL, "prompt": PROMPT, **body})
    error = response.json()["error"]
    assert response.status_code == status and message in error["message"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error"
    if param:
        assert error["param"] == param
    assert complete(client, max_tokens=2)["choices"][0]["text"]


def test_a_body_that_is_not_json_is_a_400(client):
    json_type = {"content-type": "application/json"}
    response = client.post("completions", content=b"{not json", headers=json_type)
    assert response.status_code == 400
    assert "must be a JSON object" in response.json()["error"]["message"]


def test_sixteen_concurrent_clients_are_all_served(client, local):
    def one(seed):
        return complete(client, max_tokens=16, temperature=0.9, seed=seed)["choices"][0]["text"]

    with ThreadPoolExecutor(16) as pool:
        texts = list(pool.map(one, range(16)))
    for seed, text in enumerate(texts):
        config = runtime.GenerationConfig(max_new_tokens=16, do_sample=True, temperature=0.9)
        assert text == local.generate(PROMPT, config.replace(seed=seed))[0].text


def test_a_client_disconnect_cancels_the_generation(client):
    before = stats("slow")["cancelled"]
    body = {"model": "slow", "prompt": PROMPT, "max_tokens": 100, "temperature": 0, "stream": True}
    with client.stream("POST", "completions", json=body) as response:
        lines = response.iter_lines()
        assert next(line for line in lines if line.startswith("data: "))
    deadline = time.monotonic() + 30  # 100 tokens at 50 ms each would take 5 s
    while stats("slow")["cancelled"] == before and time.monotonic() < deadline:
        time.sleep(0.1)
    now = stats("slow")
    assert now["cancelled"] == before + 1 and now["running"] == 0


def test_the_app_is_a_thin_client_with_the_same_output(server, local):
    from gradio_client import Client

    import app
    from runtime.word_vectors import load_matrix
    from tests.app_fixtures import serve as serve_app
    from ui import checks
    from ui.compare_tab import preset_config
    from ui.embeddings import EmbeddingSpace
    from ui.remote import RemoteRegistry
    from ui.streaming import SAMPLE_SEPARATOR

    registry = RemoteRegistry(server)
    assert registry.generators()[:1] == [MODEL] and "Bible" in registry.card(MODEL)
    demo = app.build(registry)
    url = serve_app(demo)
    try:
        gradio = Client(url, verbose=False)
        settings = dict(model=MODEL, prompt=PROMPT, api_name="/generate")
        decoding = dict(
            max_new_tokens=20,
            temperature=0.8,
            top_k=40,
            top_p=0.9,
            min_p=0.0,
            repetition_penalty=1.2,
            no_repeat_ngram_size=0,
            num_beams=2,
            samples=1,
            seed=5,
        )
        for mode in ("greedy", "beam search", "sampling"):
            shown = gradio.predict(mode=mode, **settings, **decoding)
            config = checks.decoding(mode, **decoding)
            assert shown[0] == local.generate(PROMPT, config)[0].text
        sampled = shown
        *columns, _ = gradio.predict(
            prompt=PROMPT,
            columns=2,
            max_new_tokens=12,
            samples=2,
            seed=3,
            model_1=MODEL,
            preset_1="top-p 0.95",
            model_2=MODEL,
            preset_2="beam 5",
            api_name="/compare",
        )
        for column, preset in zip(columns, ("top-p 0.95", "beam 5")):
            outputs = local.generate(PROMPT, preset_config(preset, 12, 2, 3))
            assert column == outputs[0].text + SAMPLE_SEPARATOR.format(n=2) + outputs[1].text
        neighbours = gradio.predict(
            model=MODEL,
            word="Lord",
            k=5,
            words_only=True,
            leading_space=True,
            api_name="/nearest_neighbours",
        )
        space = EmbeddingSpace(load_matrix(BUNDLE, local.manifest), local.tokenizer, True)
        expected = [token for token, _ in space.neighbours("Lord", 5, True)]
        assert [row[1] for row in neighbours["data"]] == expected
        assert 'class="tok p' in sampled[1]  # the token view got the alternatives

        before = stats("slow")["cancelled"]
        slow = {**settings, **decoding, "model": "slow", "max_new_tokens": 100}
        job = gradio.submit(mode="greedy", **slow)
        deadline = time.monotonic() + 60
        while len(job.outputs()) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert stats("slow")["running"] == 1
        job.cancel()  # the Stop button
        while stats("slow")["cancelled"] == before and time.monotonic() < deadline:
            time.sleep(0.1)
        after = stats("slow")
        assert (after["running"], after["cancelled"]) == (0, before + 1)
    finally:
        demo.close()


def test_a_killed_replica_fails_clearly_or_is_retried_and_comes_back(ray_cluster, client, local):
    """Kill the slow model's only replica while two streams and two plain requests use it."""
    import threading

    from ray import serve

    body = {"model": "slow", "prompt": PROMPT, "max_tokens": 60, "temperature": 0}
    expected = local.generate(PROMPT, runtime.GenerationConfig(max_new_tokens=60))[0].text
    streaming = threading.Semaphore(0)  # released once per stream that got its first chunk

    def plain():
        response = client.post("completions", json=body)
        return response.status_code, response.json()

    def streamed():
        chunks = []
        with client.stream("POST", "completions", json={**body, "stream": True}) as response:
            for line in response.iter_lines():
                if line.startswith("data: {"):
                    chunks.append(json.loads(line[len("data: ") :]))
                    if len(chunks) == 1:
                        streaming.release()
        errors = [c for c in chunks if "error" in c]
        return (503, errors[0]) if errors else (200, chunks)

    replicas = [  # Serve's named actors (the cluster runs no dashboard for the state API)
        actor["name"]
        for actor in ray_cluster.util.list_named_actors(all_namespaces=True)
        if actor["namespace"] == "serve"
        and actor["name"].startswith(f"SERVE_REPLICA::scriptorium#{deployment_name('slow')}#")
    ]
    assert len(replicas) == 1
    with ThreadPoolExecutor(4) as pool:
        streams = [pool.submit(streamed) for _ in range(2)]
        plains = [pool.submit(plain) for _ in range(2)]
        assert all(streaming.acquire(timeout=60) for _ in streams)  # both mid-stream
        ray_cluster.kill(ray_cluster.get_actor(replicas[0], namespace="serve"))
        stream_outcomes = [future.result(timeout=120) for future in streams]
        plain_outcomes = [future.result(timeout=120) for future in plains]
    for status, answer in stream_outcomes:  # 60 tokens take 3 s: both were cut, and say so
        assert status == 503 and answer["error"]["code"] == "replica_unavailable"
        assert "stopped" in answer["error"]["message"] and answer["error"]["type"] == "server_error"
    for status, answer in plain_outcomes:  # done before the kill, or retried on the new replica
        assert status == 200 and answer["choices"][0]["text"] == expected
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        status = serve.status().applications["scriptorium"].deployments[deployment_name("slow")]
        if status.status == "HEALTHY":
            break
        time.sleep(0.5)
    assert status.status == "HEALTHY"
    answer = client.post("completions", json={**body, "max_tokens": 5}).json()
    assert (
        answer["choices"][0]["text"]
        == local.generate(PROMPT, runtime.GenerationConfig(max_new_tokens=5))[0].text
    )
