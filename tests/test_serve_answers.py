"""Both routes' answers are built from serve/protocol.py's response models (issue 48, ask 3).

Two checks: every answer a server sends, streamed or not, on both routes, parses as its route's
declared model with no field the model lacks (`extra="forbid"`), so the OpenAPI schema is what
clients get, and a stream's usage is the unstreamed answer's (beam search included: its
sequences stream whole, counted by their tokens); and the modules that answer build no
response object as a dict literal, so a new field cannot bypass the models. Byte-for-byte
equality of the answers with the dict-built ones they replaced was checked once, by hand, over
72 requests (the closing note of issue 48).
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import httpx
import pytest
from pydantic import ValidationError

from serve import protocol
from serve.deployments import ModelSpec
from serve.routes import CHAT, COMPLETIONS
from tests.app_fixtures import serve_in_thread
from tests.test_serve_one_process import BUNDLE
from tests.test_serve_tools import tiny_bundle  # noqa: F401 (a fixture)

ROOT = Path(__file__).resolve().parent.parent
ANSWERING = ["serve/api.py", "serve/chat.py", "serve/scoring.py", "serve/tools.py"]
# Keys only a response object has: a dict literal with one is an answer built by hand (a
# replica's result, {"choices", "usage"}, holds models).
ANSWER_KEYS = {"finish_reason", "token_logprobs", "top_logprobs", "text_offset"}
ANSWER_KEYS |= {"delta", "prompt_tokens", "completion_tokens", "refusal", "scriptorium"}
SAMPLING = dict(temperature=0.8, top_k=40, top_p=0.9, seed=7)
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
COMPLETION_BODIES = [
    dict(prompt="In the beginning", max_tokens=6, n=2, logprobs=2, echo=True, **SAMPLING),
    dict(prompt=[[5, 6], [7, 8, 9]], max_tokens=0, echo=True, logprobs=1),
    dict(prompt="In the beginning", max_tokens=6, num_beams=3, n=2, temperature=0),
]
CHAT_BODIES = [
    dict(max_completion_tokens=6, n=2, logprobs=True, top_logprobs=2, **SAMPLING),
    dict(tools=[WEATHER], tool_choice="required", max_completion_tokens=40, temperature=0),
]


@pytest.fixture(scope="module")
def url(tiny_bundle):  # noqa: F811
    specs = [ModelSpec("bible", str(BUNDLE)), ModelSpec("tiny", str(tiny_bundle))]
    url, _, stop = serve_in_thread(specs)
    yield url
    stop()


def _answers(url: str, path: str, body: dict) -> tuple[dict, list[dict]]:
    """The answer to `body`, and its streamed events (usage included)."""
    with httpx.Client(base_url=url + "/", timeout=120) as http:
        whole = http.post(path, json=body)
        assert whole.status_code == 200, whole.text
        streamed = http.post(
            path, json={**body, "stream": True, "stream_options": {"include_usage": True}}
        )
    lines = [line.removeprefix("data: ") for line in streamed.text.split("\n\n") if line]
    assert lines[-1] == "[DONE]"
    return whole.json(), [json.loads(line) for line in lines[:-1]]


@pytest.mark.parametrize("body", COMPLETION_BODIES)
def test_completions_answers_are_their_declared_models(url, body):
    whole, events = _answers(url, "completions", {"model": "bible", **body})
    COMPLETIONS.response_model.model_validate(whole)
    for event in events:
        COMPLETIONS.chunk_model.model_validate(event)
    assert events[-1]["choices"] == [] and events[-1]["usage"] == whole["usage"]


@pytest.mark.parametrize("body", CHAT_BODIES)
def test_chat_answers_are_their_declared_models(url, body):
    messages = [{"role": "user", "content": "Weather in Paris?"}]
    whole, events = _answers(
        url, "chat/completions", {"model": "tiny", "messages": messages, **body}
    )
    CHAT.response_model.model_validate(whole)
    for event in events:
        CHAT.chunk_model.model_validate(event)
    assert whole["system_fingerprint"] is None and "usage" not in events[0]


def test_a_field_the_model_lacks_is_an_error_not_a_silent_extra():
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        protocol.Usage(prompt_tokens=1, completion_tokens=2, total_tokens=3, cached_tokens=0)
    extras = protocol.ChoiceExtras(token_ids=[1], finish_reason="eos")
    with pytest.raises(ValidationError):
        extras.max_tokens = "many"  # assignments are checked too


def test_optional_fields_not_given_are_not_written():
    choice = protocol.CompletionChoice(text="a", index=0, logprobs=None, finish_reason=None)
    assert choice.answer() == {"text": "a", "index": 0, "logprobs": None, "finish_reason": None}


def _hand_built_answers(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Dict):
            keys = {k.value for k in node.keys if isinstance(k, ast.Constant)}
            if keys & ANSWER_KEYS:
                found.append(f"{path.name}:{node.lineno} {sorted(keys & ANSWER_KEYS)}")
    return found


@pytest.mark.parametrize("module", ANSWERING)
def test_the_answering_modules_build_no_answer_as_a_dict(module):
    assert _hand_built_answers(ROOT / module) == []


def test_the_dict_check_finds_a_hand_built_answer(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text('def answer(text):\n    return {"text": text, "finish_reason": "stop"}\n')
    assert _hand_built_answers(planted) == ["planted.py:2 ['finish_reason']"]
