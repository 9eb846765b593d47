"""Fuzz every API endpoint of the app with random and malformed arguments.

Endpoints are discovered from the served app (`Client.view_api`), so endpoints added later are
fuzzed too. Each call starts from the endpoint's own defaults and replaces one to three
arguments with a value drawn by a seeded generator: wrong types, out-of-range and non-finite
numbers, unknown models, choices and controls, empty, huge (100,000 characters) and odd Unicode
strings (NUL, a lone surrogate, right-to-left marks, emoji). Every call must end within a time
limit, either with a result or with an error message of the app's own (never Gradio's "has
raised an exception" for an unhandled one, never a traceback), and the server must keep serving.
"""

from __future__ import annotations

import json
import random
import time

import httpx
import pytest
from gradio_client import Client
from gradio_client.exceptions import AppError

import app
from tests.app_fixtures import models_tree, serve
from ui.registry import ModelRegistry

__all__ = ["models_tree"]  # a session fixture, used by name
SEED = 14
CALLS_PER_ENDPOINT = 10
CALL_TIMEOUT_S = 30  # a call that takes longer counts as a hang
BUDGET_S = 60  # fuzzing stops starting calls after this (every endpoint gets its turn first)
UNHANDLED = "has raised an exception"  # gradio_client's message for an error the app did not raise

ODD_STRINGS = [
    "",
    "   ",
    "x" * 100_000,
    "word " * 20_000,
    "\x00",
    "In the\x00 beginning",
    "\ud800 lone surrogate",
    "\u202eright-to-left\u202c שלום עולם",
    "👨‍👩‍👧‍👦🙂🔥" * 10,
    "\ufeff\u200b\u200d",
    "e\u0301\u0301\u0301",
    "\n" * 100,
    "a | b\n|\n | ",
    "<script>alert(1)</script>",
    "{'section': 'law'}",
    "no-such-model (fp8)",
]
NUMBERS = [-1, 0, 1, 2, 0.5, -0.0, 1.5, 3, 257, -1e9, 1e9, 10**20, 1e308, -1e308]
NON_FINITE = [float("nan"), float("inf"), float("-inf")]
OTHERS = [None, True, False, [], {}, [1, "a"], {"a": {"b": []}}, [[1, 2], [3]]]
CONTROLS = [
    {"genre": "metal"},
    {"section": "poetry"},
    {"section": 5},
    {"section": None},
    {"section": ["law"]},
    {"length_ratio": "9.9"},
    {"\x00": "\ud800"},
    "law",
    ["section", "law"],
    {"section": "law", "length": "short", "extra": {}},
]


def malformed(rng: random.Random, parameter: dict):
    """A value for `parameter` (from view_api) that is probably wrong: often of the parameter's
    own kind (an unknown choice, an out-of-range number), otherwise of any kind."""
    kind = parameter["python_type"]["type"]
    own = []
    if kind.startswith("Literal["):
        own = ["no-such-choice", "", "(none)", " " + str(parameter.get("parameter_default"))]
    elif kind in ("float", "int"):
        own = NUMBERS + NON_FINITE
    elif kind == "str":
        own = ODD_STRINGS
    elif parameter["component"] == "Json":
        own = CONTROLS
    if own and rng.random() < 0.6:
        return rng.choice(own)
    return rng.choice(ODD_STRINGS + NUMBERS + NON_FINITE + OTHERS + CONTROLS)


@pytest.fixture(scope="module")
def served(models_tree):
    demo = app.build(ModelRegistry.discover([models_tree]))
    yield serve(demo)
    demo.close()


def endpoints(client: Client) -> dict[str, list[dict]]:
    api = client.view_api(return_format="dict", print_info=False)
    return {name: spec["parameters"] for name, spec in api["named_endpoints"].items()}


def call(client: Client, name: str, kwargs: dict) -> str | None:
    """None if the call succeeded or failed with the app's own message; else what went wrong."""
    if not sendable(kwargs):
        return call_raw(client.src, name, kwargs)
    job = client.submit(**kwargs, api_name=name)
    try:
        job.result(timeout=CALL_TIMEOUT_S)
    except AppError as error:
        return judge_error(str(error))
    except TimeoutError:
        job.cancel()
        return f"no answer within {CALL_TIMEOUT_S} s"
    except Exception as error:  # the transport failed: the server answered with no Gradio error
        return f"{type(error).__name__}: {str(error)[:200]}"
    return None


def sendable(kwargs: dict) -> bool:
    """Whether gradio_client can send these: its JSON is UTF-8 without NaN or infinities."""
    try:
        json.dumps(kwargs, ensure_ascii=False, allow_nan=False).encode()
    except (ValueError, UnicodeEncodeError):
        return False
    return True


def call_raw(url: str, name: str, kwargs: dict) -> str | None:
    """`call` over Gradio's HTTP API directly, the JSON escaped (lone surrogates as \\ud800,
    NaN and Infinity as Python's json writes them): what any other client can send."""
    base = f"{url.rstrip('/')}/gradio_api/call{name}"
    body = json.dumps({"data": list(kwargs.values())}, ensure_ascii=True)
    headers = {"Content-Type": "application/json"}
    with httpx.Client(timeout=CALL_TIMEOUT_S) as http:
        posted = http.post(base, content=body, headers=headers)
        if posted.status_code != 200:
            if posted.status_code >= 500:
                return f"HTTP {posted.status_code}: {posted.text[:200]}"
            return None  # refused as a bad request
        event = None
        try:
            with http.stream("GET", f"{base}/{posted.json()['event_id']}") as answer:
                for line in answer.iter_lines():
                    if line.startswith("event: "):
                        event = line.removeprefix("event: ")
                    elif line.startswith("data: ") and event in ("complete", "error"):
                        data = line.removeprefix("data: ")
                        if event == "complete":
                            return None
                        message = (json.loads(data) or {}).get("error")  # null: unhandled
                        return judge_error(message if isinstance(message, str) else "")
        except httpx.TimeoutException:
            return f"no answer within {CALL_TIMEOUT_S} s"
    return f"the event stream ended without a result (last event {event})"


def judge_error(message: str) -> str | None:
    if UNHANDLED in message or "Traceback" in message or not message.strip():
        return f"unhandled error: {message[:200]}"
    return None


def shown(kwargs: dict) -> str:
    short = {
        k: (v[:40] + "…" if isinstance(v, str) and len(v) > 40 else v) for k, v in kwargs.items()
    }
    return json.dumps(short, ensure_ascii=True, default=repr)


def test_every_endpoint_answers_malformed_arguments_clearly(served):
    client = Client(served, verbose=False)
    found = endpoints(client)
    assert {"/generate", "/compare", "/translate", "/list_models"} <= set(found)
    rng = random.Random(SEED)
    problems, calls, start = [], 0, time.monotonic()
    for round_ in range(CALLS_PER_ENDPOINT):
        if round_ and time.monotonic() - start > BUDGET_S:
            break
        for name, parameters in found.items():
            defaults = {p["parameter_name"]: p.get("parameter_default") for p in parameters}
            kwargs = dict(defaults)
            for parameter in rng.sample(parameters, min(len(parameters), rng.randint(1, 3))):
                kwargs[parameter["parameter_name"]] = malformed(rng, parameter)
            calls += 1
            problem = call(client, name, kwargs)
            if problem:
                problems.append(f"{name} {shown(kwargs)}: {problem}")
    assert calls >= len(found), calls
    assert not problems, f"{len(problems)} of {calls} calls:\n" + "\n".join(problems[:15])
    # The server still serves normal calls.
    text = client.predict(
        model="tiny-lm (fp32)",
        prompt="In the beginning",
        mode="greedy",
        max_new_tokens=8,
        api_name="/generate",
    )[0]
    assert text
    assert client.predict(api_name="/list_models")
