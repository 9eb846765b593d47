"""Both routes' request and response bodies (`POST /v1/completions`, `POST /v1/chat/completions`,
the model list) as pydantic models, as vLLM keeps its `protocol.py`, and `parse_body`, which
turns raw request bytes into a checked body or a `RequestError`.

The models are the contract: both request bodies and every response are in the OpenAPI schema
(`/openapi.json`, serve/http_app.py), and every field is type-checked before anything uses it
(strict types: `"yes"` is not a bool, `"1"` not a number, `{}` not a string). Each field's
`x-must` (in the schema too) is the rule its 400 states, in the project's one template:
`` `temperature` must be a number in [0, 2], got 5 ``. An OpenAI field Scriptorium does not
implement is accepted only at the values that mean "off" (its `x-off`, checked by `parse_body`).
Echoed values are cut to a short prefix (`shown`), so a bad request never gets a large answer.

`parse_body(model_class, raw)` parses with pydantic's own JSON parser, which refuses what the
standard library would accept or choke on: lone surrogates (`"\\ud800"`), nesting deeper than
its recursion limit, NaN and infinities, and bytes that are not UTF-8 (a UTF-16 body).

What is checked here is the shape and each field's range, with the caps of
runtime/request_caps.py; what needs the model (the prompt's tokens against the context, control
values) is checked by the runtime, and the server's configurable limits (prompt characters,
total sequences) by serve/api.py and serve/chat.py, which map the bodies onto the runtime. A
decoding setting's range is the runtime's (`runtime.config.BOUNDS`), never a looser one: the
fields whose whole range the runtime declares (`repetition_penalty`, `length_penalty`, the low end
of `temperature`) leave the check to it, so their 400 carries its message.
"""

from __future__ import annotations

import types
import typing
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from runtime.config import BOUNDS
from runtime.request_caps import (
    LIMITS,
    MAX_CONTROLS,
    MAX_INT,
    MAX_LOGPROBS,
    MAX_MESSAGES,
    MAX_METADATA_CHARS,
    MAX_METADATA_PAIRS,
    MAX_NAME_CHARS,
    MAX_STOP_CHARS,
    MAX_STOP_STRINGS,
)

SHOWN_CHARS = 40  # characters of a bad value echoed back in an error message


def runtime_range(name: str) -> str:
    """The runtime's range of a real-valued setting, as a rule states it.

    >>> runtime_range("repetition_penalty")
    '[0.01, 100]'
    """
    low, high = BOUNDS[name]
    return f"[{low:g}, {high:g}]"


class RequestError(ValueError):
    """A request the server refuses: HTTP `status` with an OpenAI error `kind`, `param`, `code`."""

    def __init__(self, message, param=None, status=400, kind="invalid_request_error", code=None):
        super().__init__(message)
        self.param, self.status, self.kind, self.code = param, status, kind, code


def error_body(message: str, kind="invalid_request_error", param=None, code=None) -> dict:
    """OpenAI's error object.

    >>> error_body("`top_p` must be in (0, 1], got 1.5", param="top_p")["error"]["type"]
    'invalid_request_error'
    """
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def shown(value) -> str:
    """A value as echoed in an error: its repr, cut to `SHOWN_CHARS` characters.

    >>> shown(1.5), shown("ab")
    ('1.5', "'ab'")
    >>> shown(["stop"] * 1000)
    "['stop', 'stop', 'stop', 'stop', 'stop',… (8000 characters)"
    """
    text = repr(value)
    if len(text) <= SHOWN_CHARS:
        return text
    return f"{text[:SHOWN_CHARS]}… ({len(text)} characters)"


def must(rule: str, default=None, **constraints):
    """A field whose error message (and schema description) states `rule`."""
    return Field(
        default, description=f"Must be {rule}.", json_schema_extra={"x-must": rule}, **constraints
    )


def unsupported(rule: str, *off):
    """An OpenAI field this server does not implement: null, or one of the values `off` that
    mean "off" (`parse_body` refuses any other, saying it is not supported)."""
    return Field(
        None,
        description=f"Must be {rule}.",
        json_schema_extra={"x-must": rule, "x-off": list(off)},
    )


Name = Annotated[str, Field(min_length=1, max_length=MAX_NAME_CHARS)]
Count = Annotated[int, Field(le=MAX_INT)]
TokenId = Annotated[int, Field(ge=0, le=MAX_INT)]
StopString = Annotated[str, Field(min_length=1, max_length=MAX_STOP_CHARS)]
TEMPERATURE_RULE = (
    f"a number in [0, {LIMITS.max_temperature:g}] (0: greedy; else at least "
    f"{BOUNDS['temperature'][0]:g})"
)


class Body(BaseModel):
    """A request body: strict types, unknown fields refused, no NaN or infinities."""

    model_config = ConfigDict(strict=True, extra="forbid", allow_inf_nan=False, frozen=True)
    endpoint: typing.ClassVar[str] = "request"  # how "`x` is not a … parameter" names it


class StreamOptions(Body):
    endpoint: typing.ClassVar[str] = "stream_options"
    include_usage: bool = must("true or false (a last chunk with the token counts)", default=False)


class GenerationBody(Body):
    """What both routes take: the model, OpenAI's sampling fields, streaming, control tokens,
    and Scriptorium's decoding extras (each a `runtime.GenerationConfig` field, serve/api.py's
    `EXTRA_FIELDS`)."""

    model: Name = must("a model id string from GET /v1/models", default=...)
    temperature: float | None = must(TEMPERATURE_RULE, ge=0, le=LIMITS.max_temperature)
    top_p: float | None = must("a number in (0, 1]", gt=0, le=1)
    seed: int | None = must(f"an int in [0, {LIMITS.max_seed}]", ge=0, le=LIMITS.max_seed)
    stop: StopString | Annotated[list[StopString], Field(max_length=MAX_STOP_STRINGS)] | None = (
        must(
            f"a string or a list of at most {MAX_STOP_STRINGS} strings, each of 1 to "
            f"{MAX_STOP_CHARS} characters"
        )
    )
    n: Count | None = must("an int >= 1 (choices per prompt)", ge=1)
    stream: bool | None = must("true or false")
    stream_options: StreamOptions | None = must('an object like {"include_usage": true}')
    user: Annotated[str, Field(max_length=MAX_NAME_CHARS)] | None = must(
        f"a string of at most {MAX_NAME_CHARS} characters"
    )
    controls: Annotated[dict[Name, Name | float | None], Field(max_length=MAX_CONTROLS)] | None = (
        must(
            f"an object of at most {MAX_CONTROLS} control names to strings or numbers, like "
            '{"section": "gospels"}'
        )
    )
    # Scriptorium's extras (runtime.GenerationConfig's names, min_tokens = min_new_tokens).
    top_k: Count | None = must("an int >= 0 (0: off)", ge=0)
    min_p: float | None = must("a number in [0, 1]", ge=0, le=1)
    typical_p: float | None = must("a number in (0, 1]", gt=0, le=1)
    repetition_penalty: float | None = must(
        f"a number in {runtime_range('repetition_penalty')} (1: off)"
    )
    no_repeat_ngram_size: Count | None = must("an int >= 0 (0: off)", ge=0)
    min_tokens: Count | None = must("an int >= 0", ge=0)
    presence_penalty: float | None = unsupported("0 (penalties are not supported)", 0)
    frequency_penalty: float | None = unsupported("0 (penalties are not supported)", 0)
    logit_bias: dict[str, float] | None = unsupported(
        "null or {} (logit_bias is not supported)", {}
    )


class CompletionBody(GenerationBody):
    """`POST /v1/completions`: OpenAI's legacy completions request, plus Scriptorium's
    decoding extras, beam search included."""

    endpoint: typing.ClassVar[str] = "completions"
    prompt: (
        str
        | Annotated[list[str], Field(min_length=1)]
        | Annotated[list[TokenId], Field(min_length=1)]
        | Annotated[list[Annotated[list[TokenId], Field(min_length=1)]], Field(min_length=1)]
    ) = must(
        "a string, a non-empty list of strings, a non-empty list of token ids or a non-empty "
        "list of non-empty lists of token ids",
        default=...,
    )
    max_tokens: Count | None = must(
        "an int >= 1 (default 16), or 0 with `echo` (score the prompt only)", ge=0
    )
    logprobs: int | None = must(f"an int in [0, {MAX_LOGPROBS}] or null", ge=0, le=MAX_LOGPROBS)
    num_beams: Count | None = must("an int >= 1 (1: no beam search)", ge=1)
    length_penalty: float | None = must(f"a number in {runtime_range('length_penalty')}")
    early_stopping: bool | Literal["never"] | None = must('true, false or "never"')
    echo: bool | None = must(
        "true or false (true: the prompt comes back in front of the completion, with its "
        "tokens' log-probabilities when `logprobs` is set)"
    )
    best_of: int | None = unsupported("1 (best_of is not supported)", 1)
    suffix: str | None = unsupported("null (suffix is not supported)")


class TextPart(Body):
    type: Literal["text"] = must('"text" (only text parts are supported)', default=...)
    text: str = must("a string", default=...)


class Message(Body):
    endpoint: typing.ClassVar[str] = "message"
    role: Literal["system", "developer", "user", "assistant"] = must(
        "one of 'system', 'developer', 'user', 'assistant'", default=...
    )
    content: str | list[TextPart] = must(
        'a string or a list of {"type": "text", "text": …} parts', default=...
    )
    name: Name | None = must(
        f"a string of 1 to {MAX_NAME_CHARS} characters (accepted, not shown to the model)"
    )


class ChatBody(GenerationBody):
    """`POST /v1/chat/completions`: OpenAI's chat request, plus Scriptorium's decoding extras
    (no beam search: chat replies are sampled or greedy)."""

    endpoint: typing.ClassVar[str] = "chat.completions"
    messages: Annotated[list[Message], Field(min_length=1, max_length=MAX_MESSAGES)] = must(
        f"a list of 1 to {MAX_MESSAGES} messages", default=...
    )
    max_completion_tokens: Count | None = must("an int >= 1", ge=1)
    max_tokens: Count | None = must("an int >= 1 (max_completion_tokens' older name)", ge=1)
    logprobs: bool | None = must("true or false")
    top_logprobs: int | None = must(
        f"an int in [0, {MAX_LOGPROBS}], with logprobs true", ge=0, le=MAX_LOGPROBS
    )
    tools: list | None = unsupported("null or empty (tools are not supported)", [])
    tool_choice: str | None = unsupported('"none" or null (tools are not supported)', "none")
    parallel_tool_calls: bool | None = must("true, false or null (tools are not supported)")
    response_format: dict | None = unsupported('{"type": "text"} or null', {"type": "text"})
    store: bool | None = unsupported("false or null (nothing is stored)", False)
    metadata: (
        Annotated[
            dict[Name, Annotated[str, Field(max_length=MAX_METADATA_CHARS)]],
            Field(max_length=MAX_METADATA_PAIRS),
        ]
        | None
    ) = must(
        f"an object of at most {MAX_METADATA_PAIRS} names to strings of at most "
        f"{MAX_METADATA_CHARS} characters (accepted, not used)"
    )
    service_tier: Name | None = must("a string (accepted, not used)")


def parse_body(model: type[Body], raw: bytes | str | dict) -> Body:
    """`raw` (the request's bytes, or an already-decoded dict) checked against `model`.

    >>> parse_body(CompletionBody, b'{"model": "m", "prompt": "In", "temperature": 0}').temperature
    0.0
    >>> try:
    ...     parse_body(CompletionBody, b'{"model": "m", "prompt": "In", "temperature": 5}')
    ... except RequestError as error:
    ...     print(error)
    `temperature` must be a number in [0, 2] (0: greedy; else at least 0.001), got 5
    """
    try:
        body = (
            model.model_validate(raw) if isinstance(raw, dict) else model.model_validate_json(raw)
        )
    except ValidationError as error:
        raise request_error(model, error) from None
    for name, info in model.model_fields.items():
        off, value = info.json_schema_extra.get("x-off"), getattr(body, name)
        if off is not None and value is not None and value not in off:
            raise RequestError(
                f"`{name}` is not supported by this server, got {shown(value)}", param=name
            )
    return body


def request_error(model: type[Body], error: ValidationError) -> RequestError:
    """The first problem pydantic found, as a 400 that names the API field and its rule
    (`stream_options.include_usage`, `messages[0].role`)."""
    first = error.errors(include_url=False)[0]
    kind, loc = first["type"], first["loc"]
    if kind == "json_invalid":
        return RequestError(
            "the request body must be a JSON object in UTF-8 with valid strings and bounded "
            f"nesting: {first['msg'].removeprefix('Invalid JSON: ')}"
        )
    # Walk down the nested bodies to the field whose rule applies; between their fields, `loc`
    # has a union's branch names and list indices (kept after a list of bodies: `messages[0]`).
    names, rule, owner = [], None, model
    for part in loc[:-1] if kind == "extra_forbidden" else loc:
        if owner is None:  # inside a value that is not a body: its field's rule applies
            break
        if isinstance(part, int) and names:
            names[-1] += f"[{part}]"
        elif isinstance(part, str) and part in owner.model_fields:
            names.append(part)
            rule = owner.model_fields[part].json_schema_extra["x-must"]
            owner = _body_type(owner.model_fields[part].annotation)
    if kind == "extra_forbidden":
        where = ".".join(names) if names else model.endpoint
        return RequestError(f"`{loc[-1]}` is not a {where} parameter", param=str(loc[0]))
    if not names:
        return RequestError(f"the request body must be a JSON object, got {shown(first['input'])}")
    param = ".".join(names)
    if kind == "missing":
        return RequestError(f"`{param}` must be {rule}, got nothing", param=param)
    # For a part of a field (a list item, a dict value) pydantic gives the part: what is wrong.
    return RequestError(f"`{param}` must be {rule}, got {shown(first['input'])}", param=param)


def _body_type(annotation) -> type[Body] | None:
    """The `Body` subclass inside an annotation (`StreamOptions | None` -> StreamOptions,
    `list[Message]` -> Message), else None."""
    stack = [annotation]
    while stack:
        item = stack.pop()
        if isinstance(item, type) and issubclass(item, Body):
            return item
        if isinstance(item, types.UnionType) or typing.get_origin(item) is not None:
            stack.extend(typing.get_args(item))
    return None


# ---- responses (declared for the OpenAPI schema; the server builds plain dicts) -------------


class ErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorResponse(BaseModel):
    error: ErrorDetail


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class Logprobs(BaseModel):
    tokens: list[str]
    token_logprobs: list[float | None]
    top_logprobs: list[dict[str, float]] | None = None
    text_offset: list[int]


class ChoiceExtras(BaseModel):
    token_ids: list[int]
    finish_reason: str | None = Field(
        description="the runtime's reason: eos, stop, length or context"
    )
    score: float | None = None
    alternatives: list[tuple[str, float]] | None = None
    max_tokens: int | None = Field(None, description="the `max_tokens` applied (the context's)")


class CompletionChoice(BaseModel):
    text: str
    index: int
    logprobs: Logprobs | None = None
    finish_reason: Literal["stop", "length"] | None = None
    scriptorium: ChoiceExtras


class CompletionResponse(BaseModel):
    id: str
    object: Literal["text_completion"]
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage | None = None


class TopLogprob(BaseModel):
    token: str
    logprob: float
    bytes: list[int]


class TokenLogprob(TopLogprob):
    top_logprobs: list[TopLogprob]


class ChatLogprobs(BaseModel):
    content: list[TokenLogprob]
    refusal: None = None


class ChatChoiceExtras(BaseModel):
    token_ids: list[int] = Field(description="the reply's tokens, the end of turn included")
    logprobs: list[float]
    finish_reason: str | None = Field(
        description="the runtime's reason: eos, stop, length or context"
    )
    alternatives: list[tuple[str, float]] | None = None


class ChatMessage(BaseModel):
    role: Literal["assistant"]
    content: str
    refusal: None = None


class ChatChoice(BaseModel):
    index: int
    message: ChatMessage
    logprobs: ChatLogprobs | None = None
    finish_reason: Literal["stop", "length"] | None = None
    scriptorium: ChatChoiceExtras


class ChatCompletionResponse(BaseModel):
    id: str
    object: Literal["chat.completion"]
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage
    system_fingerprint: None = None


class ModelObject(BaseModel):
    id: str
    object: Literal["model"]
    created: int = Field(description="when the bundle's manifest.json was written (Unix time)")
    owned_by: str
    task: str | None = None
    precision: str | None = None
    context_length: int | None = None
    chat: bool = Field(False, description="whether the model has a chat template")


class ModelInfo(ModelObject):
    manifest: dict


class ModelList(BaseModel):
    object: Literal["list"]
    data: list[ModelObject]
