"""`/v1/chat/completions` on a real local Ray cluster, called by real chat clients.

One Serve application for the module, on the tests' shared two-CPU cluster (`ray_cluster`,
tests/conftest.py): a tiny random Llama chat model (tests/tiny_models.py, exported with optimum) as
"chat", and the shipped bible-lm int8 (no chat template) to show how a non-chat model is refused,
and an adapter bundle (a random LoRA on a tiny llama GGUF, with metadata controls) whose base is
converted beside it, as a Space ships the flagship. Clients: the `openai` package
(`chat.completions.create`, plain and streamed) and LangChain's `ChatOpenAI`, which only speaks
chat. Every reply is compared with `gen.chat` in this process for the same settings and seed.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import openai
import pytest
from optimum.exporters.onnx import main_export

import runtime
from serve import api
from serve.chat import parse_chat
from serve.deployments import ModelSpec
from tests.app_fixtures import free_port

ROOT = Path(__file__).resolve().parent.parent
PLAIN = "bible-lm/int8"
MESSAGES = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "In the beginning"},
]
SAMPLING = dict(do_sample=True, temperature=0.8, top_k=40, top_p=0.9, seed=7)


@pytest.fixture(scope="module")
def chat_dir(tmp_path_factory) -> Path:
    from tests.tiny_models import make_chat_checkpoint

    root = tmp_path_factory.mktemp("chat")
    checkpoint = make_chat_checkpoint(root / "checkpoint")
    main_export(
        str(checkpoint), output=root / "onnx", task="text-generation-with-past", do_validation=False
    )
    return root / "onnx"


ADAPTER = "tiny-adapter"
ADAPTER_CONTROLS = {
    "translation": {
        "kind": "choice",
        "values": {
            "KJV": "[s:translation]KJV[e:translation] ",
            "WEB": "[s:translation]WEB[e:translation] ",
        },
    }
}


@pytest.fixture(scope="module")
def adapter_dir(tmp_path_factory) -> Path:
    """An adapter bundle with its base converted beside it (found without the cache)."""
    import shutil

    import peft
    import torch
    import transformers

    from convert.flagship import ensure_bundle
    from export.adapter import export_adapter
    from tests.gguf_models import write_tiny_gguf

    root = tmp_path_factory.mktemp("adapter")
    gguf = write_tiny_gguf(root / "tiny.gguf", "llama", "F32")
    model = transformers.AutoModelForCausalLM.from_pretrained(str(root), gguf_file=gguf.name)
    config = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "down_proj"],
                             init_lora_weights=False)  # fmt: skip
    torch.manual_seed(0)
    peft.get_peft_model(model, config).save_pretrained(str(root / "peft"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SCRIPTORIUM_CACHE", str(root / "cache"))
        base = ensure_bundle(gguf)
        export_adapter(
            root / "peft",
            gguf,
            root / "models" / ADAPTER,
            name=ADAPTER,
            controls=ADAPTER_CONTROLS,
            prompt_prefix="[s:text]",
            parity=False,
        )
    shutil.copytree(base, root / "models" / base.name)
    return root / "models" / ADAPTER


@pytest.fixture(scope="module")
def local(chat_dir):
    return runtime.load(chat_dir, threads=1)


@pytest.fixture(scope="module")
def server(ray_cluster, chat_dir, adapter_dir) -> str:
    """The application's base URL ("http://127.0.0.1:PORT/v1") on the tests' shared cluster."""
    from serve.cli import deploy

    port = free_port()
    specs = [
        ModelSpec("chat", str(chat_dir), threads=1, cpus=0.5),
        ModelSpec(PLAIN, str(ROOT / "models" / "bible-lm" / "int8"), threads=1, cpus=0.5),
        ModelSpec(ADAPTER, str(adapter_dir), threads=1, cpus=0.5),
    ]
    deploy(specs, "127.0.0.1", port)
    return f"http://127.0.0.1:{port}/v1"


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server, api_key="unused", max_retries=0, timeout=120)


# ---- the protocol, without Ray ------------------------------------------------------------------


def test_chat_body_maps_onto_the_generation_config():
    request = parse_chat(
        json.dumps(
            {
                "model": "m",
                "messages": [
                    {"role": "developer", "content": "Be brief."},
                    {
                        "role": "user",
                        "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
                    },
                    {"role": "assistant", "content": "c", "name": "bot"},
                ],
                "max_completion_tokens": 9,
                "n": 3,
                "stop": "\n",
                "temperature": 0.8,
                "top_k": 40,
                "top_p": 0.9,
                "seed": 7,
                "logprobs": True,
                "top_logprobs": 2,
                "stream": True,
                "stream_options": {"include_usage": True},
                "tools": [],
                "presence_penalty": 0,
            }
        )
    )
    expected = runtime.GenerationConfig(
        max_new_tokens=9, num_return_sequences=3, stop=("\n",), **SAMPLING
    )
    assert request.config == expected
    assert request.messages == (
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "a\nb"},
        {"role": "assistant", "content": "c"},
    )
    assert (request.top_logprobs, request.stream, request.include_usage) == (2, True, True)
    greedy = parse_chat({"model": "m", "messages": MESSAGES, "temperature": 0, "max_tokens": 5})
    assert greedy.config == runtime.GenerationConfig(max_new_tokens=5)
    assert greedy.top_logprobs is None
    unbounded = parse_chat({"model": "m", "messages": MESSAGES})
    assert unbounded.config.max_new_tokens >= 1 << 30  # until the turn or the context ends


@pytest.mark.parametrize(
    "body, param, message",
    [
        ({"messages": []}, "messages", "`messages` must be a list of 1 to 1024 messages, got []"),
        ({"messages": [{"role": "bot", "content": "4"}]}, "messages[0].role", "must be one of"),
        ({"messages": [{"role": "user"}]}, "messages[0].content", "got nothing"),
        ({"messages": [{"role": "user", "content": "a", "x": 1}]}, "messages", "`x` is not a"),
        ({"top_p": 1.5}, "top_p", "`top_p` must be in (0, 1], got 1.5"),
        ({"temperature": "hot"}, "temperature", "`temperature` must be a number in [0, 2]"),
        ({"top_logprobs": 9, "logprobs": True}, "top_logprobs", "an int in [0, 5]"),
        ({"top_logprobs": 2}, "top_logprobs", "must come with `logprobs` true"),
        ({"tools": [{"type": "function"}]}, "tools[0].function", "got nothing"),
        ({"frequency_penalty": 0.5}, "frequency_penalty", "is not supported by this server"),
        ({"prompt": "a"}, "prompt", "`prompt` is not a chat.completions parameter"),
        ({"n": 2, "temperature": 0}, "n", "`n` must be 1 for greedy"),
        ({"min_tokens": -1}, "min_tokens", "`min_tokens` must be an int >= 0, got -1"),
        ({"n": 65, "seed": 1}, "n", "`n` must be at most 64, got 65"),
    ],
)
def test_bad_bodies_are_refused_with_the_parameter_named(body, param, message):
    with pytest.raises(api.RequestError) as raised:
        parse_chat({"model": "m", "messages": MESSAGES, **body})
    assert message in str(raised.value), str(raised.value)
    assert raised.value.param == param


@pytest.mark.parametrize(
    "body, param, message",
    [
        ({"model": "m" * 257}, "model", "`model` must be a model id string"),
        ({"stop": ["s" * 257]}, "stop", "each of 1 to 256 characters"),
        ({"stop": ""}, "stop", "each of 1 to 256 characters"),
        ({"user": "u" * 257}, "user", "at most 256 characters"),
        ({"controls": {f"c{i}": "x" for i in range(17)}}, "controls", "at most 16 control"),
        ({"controls": {"section": "g" * 257}}, "controls", "at most 16 control"),
        ({"seed": 2**32}, "seed", "`seed` must be an int in [0, 4294967295]"),
        ({"top_k": 2**31}, "top_k", "`top_k` must be an int >= 0"),
        ({"logit_bias": {"1": 5.0}}, "logit_bias", "`logit_bias` is not supported"),
    ],
)
def test_chat_bodies_have_the_caps_of_completion_bodies(body, param, message):
    """Both routes declare their shared fields once (serve/protocol.py), so a value one refuses
    the other refuses with the same words."""
    for parse, base in (
        (parse_chat, {"model": "m", "messages": MESSAGES}),
        (api.parse_completion, {"model": "m", "prompt": "a"}),
    ):
        with pytest.raises(api.RequestError) as raised:
            parse({**base, **body})
        assert message in str(raised.value) and raised.value.param == param


def test_a_conversation_has_the_prompt_caps_of_the_server_limits():
    from runtime.request_caps import ServeLimits

    limits = ServeLimits(max_prompt_chars=100, max_sequences=2)
    long = [{"role": "user", "content": "x" * 60}, {"role": "user", "content": "y" * 41}]
    with pytest.raises(api.RequestError, match="at most 100 characters in all, got 101"):
        parse_chat({"model": "m", "messages": long}, limits)
    with pytest.raises(api.RequestError, match="`n` must be at most 2, got 3") as raised:
        parse_chat({"model": "m", "messages": MESSAGES, "n": 3, "seed": 1}, limits)
    assert raised.value.param == "n"
    named = [{"role": "user", "content": "a", "name": "n" * 257}]
    with pytest.raises(api.RequestError) as raised:
        parse_chat({"model": "m", "messages": named})
    assert raised.value.param == "messages[0].name" and "1 to 256 characters" in str(raised.value)


# ---- the server, through real clients ----------------------------------------------------------


def test_the_models_say_which_can_chat(server):
    listed = httpx.get(server + "/models", timeout=60).json()["data"]
    flags = {m["id"]: m["chat"] for m in listed}
    assert flags["chat"] is True and flags[PLAIN] is False and ADAPTER in flags


def test_openai_client_greedy_reply_is_gen_chat(client, local):
    answer = client.chat.completions.create(
        model="chat", messages=MESSAGES, temperature=0, max_completion_tokens=24
    )
    expected = local.chat(MESSAGES, runtime.GenerationConfig(max_new_tokens=24))[0]
    choice = answer.choices[0]
    assert answer.object == "chat.completion" and answer.id.startswith("chatcmpl-")
    assert choice.message.role == "assistant" and choice.message.content == expected.text
    assert choice.finish_reason == api.openai_finish_reason(expected.finish_reason)
    assert answer.usage.prompt_tokens == local.count_chat_tokens(MESSAGES)
    assert answer.usage.completion_tokens == len(expected.token_ids)


def test_openai_client_seeded_sampling_with_extras_is_gen_chat(client, local):
    answer = client.chat.completions.create(
        model="chat",
        messages=MESSAGES,
        max_tokens=20,
        n=2,
        temperature=0.8,
        top_p=0.9,
        seed=7,
        extra_body={"top_k": 40},
    )
    config = runtime.GenerationConfig(max_new_tokens=20, num_return_sequences=2, **SAMPLING)
    expected = local.chat(MESSAGES, config)
    assert [c.message.content for c in answer.choices] == [o.text for o in expected]
    assert expected[0].text != expected[1].text


def test_openai_client_streamed_reply_is_gen_chat(client, local):
    config = runtime.GenerationConfig(max_new_tokens=30, num_return_sequences=2, **SAMPLING)
    expected = local.chat(MESSAGES, config)
    chunks = list(
        client.chat.completions.create(
            model="chat",
            messages=MESSAGES,
            max_completion_tokens=30,
            n=2,
            temperature=0.8,
            top_p=0.9,
            seed=7,
            extra_body={"top_k": 40},
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    texts, roles, reasons = ["", ""], [[], []], [None, None]
    for chunk in chunks[:-1]:
        assert chunk.object == "chat.completion.chunk" and len(chunk.choices) == 1
        choice = chunk.choices[0]
        texts[choice.index] += choice.delta.content or ""
        roles[choice.index].append(choice.delta.role)
        reasons[choice.index] = choice.finish_reason or reasons[choice.index]
    assert texts == [o.text for o in expected]
    assert [r[0] for r in roles] == ["assistant", "assistant"]  # the role first, once
    assert all(role is None for r in roles for role in r[1:])
    assert reasons == [api.openai_finish_reason(o.finish_reason) for o in expected]
    usage = chunks[-1]
    assert usage.choices == [] and usage.usage.completion_tokens == sum(
        len(o.token_ids) for o in expected
    )


def test_logprobs_in_chat_format(client, local):
    answer = client.chat.completions.create(
        model="chat",
        messages=MESSAGES,
        temperature=0,
        max_completion_tokens=40,
        logprobs=True,
        top_logprobs=3,
    )
    expected = local.chat(MESSAGES, runtime.GenerationConfig(max_new_tokens=40))[0]
    content = answer.choices[0].logprobs.content
    kept = [(t, lp) for t, lp in zip(expected.token_ids, expected.logprobs) if t != 2]
    assert len(content) == len(kept)  # every token of the reply, the end of turn left out
    assert [c.logprob for c in content] == pytest.approx([lp for _, lp in kept], abs=1e-5)
    joined = b"".join(bytes(c.bytes) for c in content)
    assert joined.decode("utf-8", errors="replace") == expected.text
    for entry in content:
        assert len(entry.top_logprobs) == 3
        best = entry.top_logprobs[0].logprob
        assert best >= entry.top_logprobs[-1].logprob and entry.logprob <= best + 1e-6


def test_stop_strings_cut_the_reply(client, local):
    greedy = local.chat(MESSAGES, runtime.GenerationConfig(max_new_tokens=24))[0].text
    stop = greedy[6:9]
    answer = client.chat.completions.create(
        model="chat", messages=MESSAGES, temperature=0, max_tokens=24, stop=[stop]
    )
    expected = local.chat(MESSAGES, runtime.GenerationConfig(max_new_tokens=24, stop=(stop,)))
    assert answer.choices[0].message.content == expected[0].text == greedy[: greedy.index(stop)]
    assert answer.choices[0].finish_reason == "stop"


def test_langchain_chat_model_speaks_to_the_server(server, local):
    from langchain_core.messages import HumanMessage, SystemMessage
    from langchain_openai import ChatOpenAI

    model = ChatOpenAI(
        model="chat",
        base_url=server,
        api_key="unused",
        temperature=0,
        max_tokens=24,
        max_retries=0,
        timeout=120,
    )
    messages = [SystemMessage("Be brief."), HumanMessage("In the beginning")]
    expected = local.chat(MESSAGES, runtime.GenerationConfig(max_new_tokens=24))[0].text
    assert model.invoke(messages).content == expected
    assert "".join(part.content for part in model.stream(messages)) == expected
    seeded = ChatOpenAI(
        model="chat",
        base_url=server,
        api_key="unused",
        temperature=0.8,
        top_p=0.9,
        seed=7,
        max_tokens=20,
        max_retries=0,
        timeout=120,
        extra_body={"top_k": 40},
    )
    config = runtime.GenerationConfig(max_new_tokens=20, **SAMPLING)
    assert seeded.invoke(messages).content == local.chat(MESSAGES, config)[0].text


def test_a_model_without_a_chat_template_is_an_openai_400(client):
    with pytest.raises(openai.BadRequestError) as raised:
        client.chat.completions.create(model=PLAIN, messages=MESSAGES, max_tokens=4)
    error = raised.value.body
    assert error["param"] == "model" and error["code"] == "model_not_chat"
    assert "must be a chat model" in error["message"]


def test_refusals_come_before_the_stream(client, server):
    long = [{"role": "user", "content": "In the beginning " * 40}]
    for stream in (False, True):
        with pytest.raises(openai.BadRequestError, match="the conversation is .* tokens; the"):
            reply = client.chat.completions.create(model="chat", messages=long, stream=stream)
            list(reply) if stream else None
    response = httpx.post(
        server + "/chat/completions", json={"model": "nope", "messages": MESSAGES}, timeout=60
    )
    assert response.status_code == 404 and response.json()["error"]["param"] == "model"


def test_the_schema_declares_both_routes_bodies_and_answers(server):
    schema = httpx.get(server.removesuffix("/v1") + "/openapi.json", timeout=60).json()
    defs = schema["components"]["schemas"]
    for path, body, answer in [
        ("/v1/completions", "CompletionBody", "CompletionResponse"),
        ("/v1/chat/completions", "ChatBody", "ChatCompletionResponse"),
    ]:
        post = schema["paths"][path]["post"]
        declared = post["requestBody"]["content"]["application/json"]["schema"]["$ref"]
        assert declared == f"#/components/schemas/{body}"
        ok = post["responses"]["200"]["content"]["application/json"]["schema"]["$ref"]
        assert ok == f"#/components/schemas/{answer}"
        assert {"400", "404", "413", "415"} <= set(post["responses"])
    chat_fields = defs["ChatBody"]["properties"]
    assert {"messages", "max_completion_tokens", "top_logprobs", "top_k"} <= set(chat_fields)
    assert (
        chat_fields["model"]["maxLength"]
        == defs["CompletionBody"]["properties"]["model"]["maxLength"]
    )
    assert defs["Message"]["properties"]["role"]["x-must"].startswith("one of")


def test_unknown_routes_answer_in_openai_shape(server):
    for method, path, status in [("GET", "/nothing", 404), ("POST", "/models", 405)]:
        response = httpx.request(method, server + path, timeout=60)
        assert response.status_code == status
        error = response.json()["error"]
        assert f"no route {method} /v1{path}" in error["message"]
        assert error["type"] == "invalid_request_error" and "detail" not in response.json()


def test_the_app_backend_chats_through_the_endpoint(server, local):
    """`python app.py --backend URL`: ui/remote.py's generator chats as the local one does."""
    from ui.remote import RemoteRegistry

    registry = RemoteRegistry(server)
    remote, plain = registry.get("chat"), registry.get(PLAIN)
    assert remote.is_chat_model and not plain.is_chat_model
    assert remote.apply_chat_template(MESSAGES) == local.apply_chat_template(MESSAGES)
    assert remote.count_chat_tokens(MESSAGES) == local.count_chat_tokens(MESSAGES)
    config = runtime.GenerationConfig(max_new_tokens=20, **SAMPLING)
    ours, theirs = remote.chat(MESSAGES, config)[0], local.chat(MESSAGES, config)[0]
    assert (ours.text, ours.token_ids, ours.finish_reason, ours.prompt_tokens) == (
        theirs.text,
        theirs.token_ids,
        theirs.finish_reason,
        theirs.prompt_tokens,
    )
    assert ours.logprobs == pytest.approx(theirs.logprobs, abs=1e-5)
    streamed, expected = (
        list(remote.stream_chat(MESSAGES, config)),
        list(local.stream_chat(MESSAGES, config)),
    )
    assert [(e.text, e.token_id, e.finish_reason) for e in streamed] == [
        (e.text, e.token_id, e.finish_reason) for e in expected
    ]
    assert [e.alternatives[0][0] for e in streamed] == [e.alternatives[0][0] for e in expected]
    with pytest.raises(ValueError, match="is not a chat model"):
        plain.chat(MESSAGES)
    with pytest.raises(ValueError, match="the conversation is .* tokens"):
        remote.stream_chat([{"role": "user", "content": "In the beginning " * 40}], config)


def test_an_adapter_is_served_with_its_metadata_controls(client, adapter_dir):
    local = runtime.load(adapter_dir, threads=1)  # its base, beside it, found by sha256
    for controls in ({}, {"translation": "KJV"}):
        reply = client.completions.create(
            model=ADAPTER, prompt="In the beginning", max_tokens=8, temperature=0,
            extra_body={"controls": controls},
        )  # fmt: skip
        expected = local.generate("In the beginning", local.config(max_new_tokens=8), controls)
        assert reply.choices[0].text == expected[0].text
    with pytest.raises(openai.BadRequestError, match="translation"):
        client.completions.create(
            model=ADAPTER, prompt="x", max_tokens=2, extra_body={"controls": {"translation": "X"}}
        )
