"""`response_format` on both routes: the body's shape (no server), then the real thing.

A tiny random Llama with a chat template (tests/gguf_models.py, converted as the flagship is)
served by `scriptorium serve` (one process) in a thread (the Ray path runs the same gateway and
routes: tests/test_serve.py), called by the `openai` client: JSON to a schema
(`response_format` on `chat.completions.create`, `client.beta.chat.completions.parse` with a
pydantic model, a stream, and `/v1/completions`), each reply the runtime's own for the same
settings; `max_tokens` inside a document gives finish_reason "length"; a bad schema is a 400
naming `response_format`. The model is random: the schemas bound every string and number, so
the grammar alone ends each document.
"""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import openai
import pydantic
import pytest

import runtime
from serve.api import parse_completion
from serve.chat import parse_chat
from serve.deployments import ModelSpec
from serve.protocol import RequestError
from tests.app_fixtures import serve_in_thread

MODEL = "tiny-chat"
MESSAGES = [{"role": "user", "content": "Who was Abraham?"}]


class Person(pydantic.BaseModel):
    name: str = pydantic.Field(max_length=10)
    age: int = pydantic.Field(ge=0, le=150)


PERSON = Person.model_json_schema()
PERSON_FORMAT = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}}


# ---- the body, without a server ----------------------------------------------------------------


@pytest.mark.parametrize(
    "response_format, param, message",
    [
        ({"type": "xml"}, "response_format.type", "must be 'text', 'json_object' or"),
        ({"type": "json_schema"}, "response_format.json_schema", 'with type "json_schema"'),
        (
            {"type": "json_object", "json_schema": {"name": "a"}},
            "response_format.json_schema",
            "and only then, got type 'json_object' with it",
        ),
        (
            {"type": "json_schema", "json_schema": {"name": "a", "schema": {"type": "strin"}}},
            "response_format",
            "(Invalid type: strin)",
        ),
        (
            {"type": "json_schema", "json_schema": {"name": "a", "schema": {"not": {}}}},
            "response_format",
            'Unimplemented keys: ["not"]',
        ),
        ({"type": "json_object", "x": 1}, "response_format", "`x` is not a response_format"),
    ],
)
def test_bad_response_formats_are_refused_naming_the_field(response_format, param, message):
    bodies = (
        (parse_chat, {"model": "m", "messages": MESSAGES}),
        (parse_completion, {"model": "m", "prompt": "In"}),
    )
    for parse, body in bodies:
        with pytest.raises(RequestError) as error:
            parse({**body, "response_format": response_format})
        assert error.value.param == param and message in str(error.value)


def test_response_formats_become_the_config_s_schema():
    def schema(response_format):
        body = {"model": "m", "messages": MESSAGES, "response_format": response_format}
        return parse_chat(body).config.json_schema

    assert schema(None) is None and schema({"type": "text"}) is None
    assert json.loads(schema({"type": "json_object"})) == {"type": "object"}
    assert json.loads(schema(PERSON_FORMAT)) == PERSON
    completion = parse_completion({"model": "m", "prompt": "In", "response_format": PERSON_FORMAT})
    assert json.loads(completion.config.json_schema) == PERSON
    with pytest.raises(RequestError, match="`response_format` must be None with beam search"):
        parse_completion(
            {"model": "m", "prompt": "In", "num_beams": 2, "response_format": PERSON_FORMAT}
        )


# ---- served ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    from convert.gguf import export_gguf
    from tests.gguf_models import write_tiny_gguf

    root = tmp_path_factory.mktemp("tiny-chat")
    export_gguf(write_tiny_gguf(root / "tiny.gguf", "llama", "Q4_1"), root / "bundle")
    return root / "bundle"


@pytest.fixture(scope="module")
def local(bundle):
    return runtime.load(bundle, threads=1)


@pytest.fixture(scope="module")
def client(bundle):
    url, _, stop = serve_in_thread([ModelSpec(MODEL, str(bundle), threads=1)])
    yield openai.OpenAI(base_url=url, api_key="unused", max_retries=0, timeout=120)
    stop()


def _local_reply(local, schema: dict, **settings) -> runtime.GenerationOutput:
    config = runtime.GenerationConfig(json_schema=json.dumps(schema), **settings)
    return local.chat(MESSAGES, config)[0]


def test_chat_replies_to_a_schema_as_the_runtime_does(client, local):
    reply = client.chat.completions.create(
        model=MODEL, messages=MESSAGES, temperature=0, max_tokens=60, response_format=PERSON_FORMAT
    )
    choice = reply.choices[0]
    assert choice.finish_reason == "stop"
    jsonschema.validate(json.loads(choice.message.content), PERSON)
    assert choice.message.content == _local_reply(local, PERSON, max_new_tokens=60).text


def test_the_openai_client_parses_replies_into_a_pydantic_model(client, local):
    reply = client.beta.chat.completions.parse(
        model=MODEL,
        messages=MESSAGES,
        temperature=0.9,
        seed=3,
        max_tokens=60,
        response_format=Person,
    )
    parsed = reply.choices[0].message.parsed
    assert isinstance(parsed, Person) and reply.choices[0].finish_reason == "stop"
    expected = _local_reply(
        local,
        Person.model_json_schema(),
        max_new_tokens=60,
        do_sample=True,
        temperature=0.9,
        seed=3,
    )
    assert parsed == Person.model_validate_json(expected.text)


def test_a_streamed_reply_and_a_completion_follow_the_schema(client):
    chunks = client.chat.completions.create(
        model=MODEL,
        messages=MESSAGES,
        temperature=0,
        max_tokens=60,
        response_format=PERSON_FORMAT,
        stream=True,
    )
    text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
    jsonschema.validate(json.loads(text), PERSON)
    completion = client.completions.create(
        model=MODEL,
        prompt="Abraham as JSON:",
        temperature=0,
        max_tokens=60,
        extra_body={"response_format": PERSON_FORMAT},
    )
    assert completion.choices[0].finish_reason == "stop"
    jsonschema.validate(json.loads(completion.choices[0].text), PERSON)


def test_max_tokens_inside_a_document_ends_it_with_length(client):
    reply = client.chat.completions.create(
        model=MODEL, messages=MESSAGES, temperature=0, max_tokens=4, response_format=PERSON_FORMAT
    )
    assert reply.choices[0].finish_reason == "length"
    assert reply.choices[0].message.content.startswith("{")


def test_a_bad_schema_is_a_400_naming_response_format(client):
    bad = {"type": "json_schema", "json_schema": {"name": "a", "schema": {"type": "strin"}}}
    with pytest.raises(openai.BadRequestError) as error:
        client.chat.completions.create(model=MODEL, messages=MESSAGES, response_format=bad)
    assert error.value.status_code == 400
    assert error.value.body["param"] == "response_format"
    assert "Invalid type: strin" in error.value.body["message"]
