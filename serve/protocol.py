"""The API's request and response bodies as pydantic models (as vLLM's `protocol.py`), and
`parse_body`, which turns raw request bytes into a checked request or a `RequestError`.

The models are the contract: FastAPI puts them in the OpenAPI schema (`/openapi.json`), and
every field is type-checked before anything uses it (strict types: `"yes"` is not a bool, `"1"`
not a number, `{}` not a string). Each field's `x-must` (in the schema too) is the rule its
400 states, in the project's one template: `` `temperature` must be a number in [0, 2], got 5 ``.
Echoed values are cut to a short prefix (`shown`), so a bad request never gets a large answer.

`parse_body(model_class, raw)` parses with pydantic's own JSON parser, which refuses what the
standard library would accept or choke on: lone surrogates (`"\\ud800"`), nesting deeper than
its recursion limit, NaN and infinities, and bytes that are not UTF-8 (a UTF-16 body). A chat
endpoint declares its own body model and reuses `parse_body`, `RequestError` and `error_body`.

What is checked here is the shape and each field's range; what needs the model (the prompt's
tokens against the context, control values) is checked by the runtime, and the server's own
configurable limits (prompt characters, total sequences) by serve/api.py. A decoding setting's
range is the runtime's (`runtime.config.BOUNDS`), never a looser one: the fields whose whole
range the runtime declares (`repetition_penalty`, `length_penalty`, the low end of `temperature`)
leave the check to it, so their 400 carries its message.
"""

from __future__ import annotations

import types
import typing
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from runtime.config import BOUNDS

SHOWN_CHARS = 40  # characters of a bad value echoed back in an error message
MAX_LOGPROBS = 5  # OpenAI's legacy limit, and the number of alternatives the runtime streams
MAX_STOP_STRINGS = 4  # OpenAI's limit
MAX_STOP_CHARS = 256  # characters of one stop string
MAX_NAME_CHARS = 256  # characters of a model id, a user id, a control name or value
MAX_CONTROLS = 16  # control tokens in one request
MAX_TEMPERATURE = 2.0  # OpenAI's range is [0, 2]
MAX_SEED = 2**63 - 1


def runtime_range(name: str) -> str:
    """The runtime's range of a real-valued setting, as a rule states it.

    >>> runtime_range("repetition_penalty")
    '[0.01, 100]'
    """
    low, high = BOUNDS[name]
    return f"[{low:g}, {high:g}]"


MIN_TEMPERATURE = BOUNDS["temperature"][0]  # the runtime's: below it (but not 0) is a 400 too


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


Name = Annotated[str, Field(min_length=1, max_length=MAX_NAME_CHARS)]
TokenId = Annotated[int, Field(ge=0, le=2**31 - 1)]
StopString = Annotated[str, Field(min_length=1, max_length=MAX_STOP_CHARS)]


class Body(BaseModel):
    """A request body: strict types, unknown fields refused, no NaN or infinities."""

    model_config = ConfigDict(strict=True, extra="forbid", allow_inf_nan=False, frozen=True)
    endpoint: typing.ClassVar[str] = "request"  # how "`x` is not a … parameter" names it


class StreamOptions(Body):
    endpoint: typing.ClassVar[str] = "stream_options"
    include_usage: bool = must("true or false (a last chunk with the token counts)", default=False)


class CompletionBody(Body):
    """`POST /v1/completions`: OpenAI's legacy completions request, plus Scriptorium's
    decoding extras (each a `runtime.GenerationConfig` field, serve/api.py)."""

    endpoint: typing.ClassVar[str] = "completions"
    model: Name = must("a model id string from GET /v1/models", default=...)
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
    max_tokens: int | None = must(
        "an int >= 1 (default 16), or 0 with `echo` (score the prompt only)", ge=0, le=2**31 - 1
    )
    temperature: float | None = must(
        f"a number in [0, {MAX_TEMPERATURE:g}] (0: greedy; else at least {MIN_TEMPERATURE:g})",
        ge=0,
        le=MAX_TEMPERATURE,
    )
    top_p: float | None = must("a number in (0, 1]", gt=0, le=1)
    seed: int | None = must(f"an int in [0, {MAX_SEED}]", ge=0, le=MAX_SEED)
    stop: StopString | Annotated[list[StopString], Field(max_length=MAX_STOP_STRINGS)] | None = (
        must(
            f"a string or a list of at most {MAX_STOP_STRINGS} strings, each of 1 to "
            f"{MAX_STOP_CHARS} characters"
        )
    )
    n: int | None = must("an int >= 1 (completions per prompt)", ge=1, le=2**31 - 1)
    logprobs: int | None = must(f"an int in [0, {MAX_LOGPROBS}] or null", ge=0, le=MAX_LOGPROBS)
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
    top_k: int | None = must("an int >= 0 (0: off)", ge=0, le=2**31 - 1)
    min_p: float | None = must("a number in [0, 1]", ge=0, le=1)
    typical_p: float | None = must("a number in (0, 1]", gt=0, le=1)
    repetition_penalty: float | None = must(
        f"a number in {runtime_range('repetition_penalty')} (1: off)"
    )
    no_repeat_ngram_size: int | None = must("an int >= 0 (0: off)", ge=0, le=2**31 - 1)
    min_tokens: int | None = must("an int >= 0", ge=0, le=2**31 - 1)
    num_beams: int | None = must("an int >= 1 (1: no beam search)", ge=1, le=2**31 - 1)
    length_penalty: float | None = must(f"a number in {runtime_range('length_penalty')}")
    early_stopping: bool | Literal["never"] | None = must('true, false or "never"')
    echo: bool | None = must(
        "true or false (true: the prompt comes back in front of the completion, with its "
        "tokens' log-probabilities when `logprobs` is set)"
    )
    # OpenAI fields accepted only at the value that means "off" (serve/api.py says so).
    best_of: int | None = must("1 (best_of is not supported)")
    suffix: str | None = must("null (suffix is not supported)")
    presence_penalty: float | None = must("0 (penalties are not supported)")
    frequency_penalty: float | None = must("0 (penalties are not supported)")
    logit_bias: dict[str, float] | None = must("null (logit_bias is not supported)")


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
        if isinstance(raw, dict):
            return model.model_validate(raw)
        return model.model_validate_json(raw)
    except ValidationError as error:
        raise request_error(model, error) from None


def request_error(model: type[Body], error: ValidationError) -> RequestError:
    """The first problem pydantic found, as a 400 that names the API field and its rule."""
    first = error.errors(include_url=False)[0]
    kind, loc = first["type"], first["loc"]
    if kind == "json_invalid":
        return RequestError(
            "the request body must be a JSON object in UTF-8 with valid strings and bounded "
            f"nesting: {first['msg'].removeprefix('Invalid JSON: ')}"
        )
    names, parent, owner = [], model, model
    for part in loc:  # walk down nested bodies (stream_options.include_usage)
        if owner is None or not isinstance(part, str) or part not in owner.model_fields:
            break
        names.append(part)
        parent, owner = owner, _body_type(owner.model_fields[part].annotation)
    if kind == "extra_forbidden":
        where = names[-1] if names else model.endpoint
        name = ".".join(str(part) for part in loc)
        return RequestError(f"`{name}` is not a {where} parameter", param=str(loc[0]))
    if not names:
        return RequestError(f"the request body must be a JSON object, got {shown(first['input'])}")
    param, rule = ".".join(names), parent.model_fields[names[-1]].json_schema_extra["x-must"]
    if kind == "missing":
        return RequestError(f"`{param}` must be {rule}, got nothing", param=param)
    # For a part of a field (a list item, a dict value) pydantic gives the part: what is wrong.
    return RequestError(f"`{param}` must be {rule}, got {shown(first['input'])}", param=param)


def _body_type(annotation) -> type[Body] | None:
    """The `Body` subclass inside an annotation (`StreamOptions | None` -> StreamOptions)."""
    if isinstance(annotation, type) and issubclass(annotation, Body):
        return annotation
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        for arg in typing.get_args(annotation):
            if isinstance(arg, type) and issubclass(arg, Body):
                return arg
    return None


# ---- responses (declared for the OpenAPI schema; the server builds plain dicts) -------------


class ErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorResponse(BaseModel):
    error: ErrorDetail


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


class CompletionChoice(BaseModel):
    text: str
    index: int
    logprobs: Logprobs | None = None
    finish_reason: Literal["stop", "length"] | None = None
    scriptorium: ChoiceExtras


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class CompletionResponse(BaseModel):
    id: str
    object: Literal["text_completion"]
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage | None = None


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
