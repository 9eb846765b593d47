"""Both routes' request and response bodies (`POST /v1/completions`, `POST /v1/chat/completions`,
the model list) as pydantic models, as vLLM keeps its `protocol.py`, and `parse_body`, which
turns raw request bytes into a checked body or a `RequestError`.

The models are the contract: both request bodies and every response are in the OpenAPI schema
(`/openapi.json`, serve/http_app.py). Every answer of both routes is built from the response
models (`Answer`: undeclared fields are an error, optional ones not given are not written), so
what a route sends is what its schema says. Every request field is type-checked before anything
uses it
(strict types: `"yes"` is not a bool, `"1"` not a number, `{}` not a string). Each field's
`x-must` (in the schema too) is the rule its 400 states, in the project's one template:
`` `temperature` must be a number in [0, 2], got 5 ``. An OpenAI field Scriptorium does not
implement is accepted only at the values that mean "off" (its `x-off`, checked by `parse_body`).
Echoed values are cut to a short prefix (`shown`), so a bad request never gets a large answer.

`parse_body(model_class, raw)` parses with pydantic's own JSON parser, which refuses what the
standard library would accept or choke on: lone surrogates (`"\\ud800"`), nesting deeper than
its recursion limit, NaN and infinities, and bytes that are not UTF-8 (a UTF-16 body).

The decoding parameters a request passes through to the runtime are not declared here: each
body takes them from their one declaration, runtime/parameters.py (`decoding_field`: type, rule,
range), completions all of those with a request field, chat those a chat reply reads. Their
range is the runtime's, or the app's for those runtime/request_caps.py's `SERVE_APP_RANGES`
names; where it is the runtime's whole range of a real number, the runtime checks it, so the 400
carries its message. What needs the model (the prompt's tokens against the context, control
values) is checked by the runtime too, and the server's configurable limits (prompt characters,
total sequences) by serve/api.py and serve/chat.py, which map the bodies onto the runtime. The
other caps are runtime/request_caps.py's.
"""

from __future__ import annotations

import json
import math
import types
import typing
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from runtime.parameters import (
    CHAT_MODES,
    GREEDY_TEMPERATURE,
    MODES,
    NAMED,
    PARAMETERS,
    Parameter,
    Range,
)
from runtime.request_caps import (
    MAX_CONTROLS,
    MAX_INT,
    MAX_LOGPROBS,
    MAX_MESSAGES,
    MAX_METADATA_CHARS,
    MAX_METADATA_PAIRS,
    MAX_NAME_CHARS,
    MAX_STOP_CHARS,
    MAX_STOP_STRINGS,
    MAX_TOOL_CALLS,
    MAX_TOOLS,
    SERVE_APP_RANGES,
)

SHOWN_CHARS = 40  # characters of a bad value echoed back in an error message


class RequestError(ValueError):
    """A request the server refuses: HTTP `status` with an OpenAI error `kind`, `param`, `code`."""

    def __init__(self, message, param=None, status=400, kind="invalid_request_error", code=None):
        super().__init__(message)
        self.param, self.status, self.kind, self.code = param, status, kind, code


def error_body(message: str, kind="invalid_request_error", param=None, code=None) -> dict:
    """OpenAI's error object.

    >>> error_body("`n` must be 1 for greedy decoding, got 2", param="n")["error"]["type"]
    'invalid_request_error'
    """
    detail = ErrorDetail(message=message, type=kind, param=param, code=code)
    return ErrorResponse(error=detail).answer()


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


def served_range(parameter: Parameter) -> Range:
    """The range the API allows a parameter: the app's (`allowed`) for those
    runtime/request_caps.py's `SERVE_APP_RANGES` names, else the runtime's (`valid`)."""
    return parameter.limits if parameter.name in SERVE_APP_RANGES else parameter.valid


# OpenAI's temperature: 0 asks for greedy decoding, any other value samples at that temperature,
# within the range the API allows the runtime's (runtime/parameters.py's `temperature`).
TEMPERATURE = served_range(NAMED["temperature"])
TEMPERATURE_RULE = (
    f"a number in [{GREEDY_TEMPERATURE}, {TEMPERATURE.high:g}] (0: greedy; else at least "
    f"{NAMED['temperature'].valid.low:g})"
)


class Body(BaseModel):
    """A request body: strict types, unknown fields refused, no NaN or infinities."""

    model_config = ConfigDict(strict=True, extra="forbid", allow_inf_nan=False, frozen=True)
    endpoint: typing.ClassVar[str] = "request"  # how "`x` is not a … parameter" names it


class StreamOptions(Body):
    endpoint: typing.ClassVar[str] = "stream_options"
    include_usage: bool = must("true or false (a last chunk with the token counts)", default=False)


class JsonSchemaFormat(Body):
    endpoint: typing.ClassVar[str] = "response_format.json_schema"
    name: Name = must(f"a string of 1 to {MAX_NAME_CHARS} characters", default=...)
    description: str | None = must("a string (accepted, not shown to the model)")
    schema_: dict | None = must(
        "a JSON Schema object (absent: any JSON)", alias="schema", serialization_alias="schema"
    )
    strict: bool | None = must("true, false or null (the schema is always enforced)")


class ResponseFormat(Body):
    endpoint: typing.ClassVar[str] = "response_format"
    type: Literal["text", "json_object", "json_schema"] = must(
        "'text', 'json_object' or 'json_schema'", default=...
    )
    json_schema: JsonSchemaFormat | None = must(
        'an object like {"name": "person", "schema": {…}}, with type "json_schema" only'
    )


class GenerationBody(Body):
    """What both routes take besides the decoding parameters they pass through to the runtime
    (`decoding_field`): the model, OpenAI's temperature (0: greedy), stop strings, streaming,
    control tokens, the response format (free text, JSON, or JSON to a schema), and the OpenAI
    fields accepted only "off"."""

    model: Name = must("a model id string from GET /v1/models", default=...)
    temperature: float | None = must(TEMPERATURE_RULE, ge=GREEDY_TEMPERATURE, le=TEMPERATURE.high)
    stop: StopString | Annotated[list[StopString], Field(max_length=MAX_STOP_STRINGS)] | None = (
        must(
            f"a string or a list of at most {MAX_STOP_STRINGS} strings, each of 1 to "
            f"{MAX_STOP_CHARS} characters"
        )
    )
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
    response_format: ResponseFormat | None = must(
        '{"type": "text"}, {"type": "json_object"} or {"type": "json_schema", "json_schema": '
        '{"name": …, "schema": {…}}} (a schema llguidance supports)'
    )
    cache_salt: Name | None = must(
        f"a string of 1 to {MAX_NAME_CHARS} characters: requests with different salts never "
        "share prefix-cache blocks, so none can time another's cached prompt (vLLM's name)"
    )
    presence_penalty: float | None = unsupported("0 (penalties are not supported)", 0)
    frequency_penalty: float | None = unsupported("0 (penalties are not supported)", 0)
    logit_bias: dict[str, float] | None = unsupported(
        "null or {} (logit_bias is not supported)", {}
    )


class _CompletionFields(GenerationBody):
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
    echo: bool | None = must(
        "true or false (true: the prompt comes back in front of the completion, with its "
        "tokens' log-probabilities when `logprobs` is set)"
    )
    best_of: int | None = unsupported("1 (best_of is not supported)", 1)
    suffix: str | None = unsupported("null (suffix is not supported)")


class TextPart(Body):
    type: Literal["text"] = must('"text" (only text parts are supported)', default=...)
    text: str = must("a string", default=...)


FUNCTION_NAME_RULE = "a string of 1 to 64 letters, digits, underscores or dashes"
FunctionName = Annotated[str, Field(pattern=r"^[a-zA-Z0-9_-]{1,64}$")]


class CalledFunction(Body):
    endpoint: typing.ClassVar[str] = "tool_calls[].function"
    name: FunctionName = must(FUNCTION_NAME_RULE, default=...)
    arguments: str = must("a string of a JSON object (the call's arguments)", default=...)


class ToolCall(Body):
    """An earlier call, in an assistant message (as the server returned it)."""

    endpoint: typing.ClassVar[str] = "tool_calls[]"
    id: Name = must(f"a string of 1 to {MAX_NAME_CHARS} characters", default=...)
    type: Literal["function"] = must('"function"', default=...)
    function: CalledFunction = must('an object like {"name": …, "arguments": "{…}"}', default=...)


class Message(Body):
    endpoint: typing.ClassVar[str] = "message"
    role: Literal["system", "developer", "user", "assistant", "tool"] = must(
        "one of 'system', 'developer', 'user', 'assistant', 'tool'", default=...
    )
    content: str | list[TextPart] | None = must(
        'a string or a list of {"type": "text", "text": …} parts (null: an assistant message '
        "with tool_calls)",
        default=...,
    )
    name: Name | None = must(
        f"a string of 1 to {MAX_NAME_CHARS} characters (accepted, not shown to the model)"
    )
    tool_calls: Annotated[list[ToolCall], Field(max_length=MAX_TOOL_CALLS)] | None = must(
        f"a list of at most {MAX_TOOL_CALLS} calls, in an assistant message only"
    )
    tool_call_id: Name | None = must(
        f"a string of 1 to {MAX_NAME_CHARS} characters (the call answered), in a tool message only"
    )


class FunctionDefinition(Body):
    endpoint: typing.ClassVar[str] = "tools[].function"
    name: FunctionName = must(FUNCTION_NAME_RULE, default=...)
    description: str | None = must("a string (shown to the model through its chat template)")
    parameters: dict | None = must(
        'a JSON Schema of type "object" llguidance supports (absent: no arguments)'
    )
    strict: bool | None = must("true, false or null (the schema is always enforced)")


class Tool(Body):
    endpoint: typing.ClassVar[str] = "tools[]"
    type: Literal["function"] = must('"function"', default=...)
    function: FunctionDefinition = must(
        'an object like {"name": …, "description": …, "parameters": {…}}', default=...
    )


class ChosenFunction(Body):
    endpoint: typing.ClassVar[str] = "tool_choice.function"
    name: FunctionName = must(FUNCTION_NAME_RULE + ", one of `tools`", default=...)


class NamedToolChoice(Body):
    endpoint: typing.ClassVar[str] = "tool_choice"
    type: Literal["function"] = must('"function"', default=...)
    function: ChosenFunction = must('an object like {"name": …}', default=...)


class _ChatFields(GenerationBody):
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
    tools: Annotated[list[Tool], Field(max_length=MAX_TOOLS)] | None = must(
        f'a list of at most {MAX_TOOLS} {{"type": "function", "function": {{…}}}} tools'
    )
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = must(
        '"none", "auto", "required" or {"type": "function", "function": {"name": …}}'
    )
    parallel_tool_calls: bool | None = must(
        "true, false or null (true, the default: a reply may make several calls)"
    )
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


class TokenizeBody(Body):
    """`POST /tokenize`, as llama-server's (plus `model`, which a server of several needs)."""

    endpoint: typing.ClassVar[str] = "tokenize"
    model: Name = must("a model id string from GET /v1/models", default=...)
    content: str = must("a string", default=...)
    add_special: bool = must(
        "true or false (true: the special tokens the tokenizer adds, such as BOS)", default=False
    )


class DetokenizeBody(Body):
    """`POST /detokenize`, as llama-server's (plus `model`)."""

    endpoint: typing.ClassVar[str] = "detokenize"
    model: Name = must("a model id string from GET /v1/models", default=...)
    tokens: list[TokenId] = must("a list of token ids", default=...)


class TokenizeResponse(BaseModel):
    tokens: list[int]


class DetokenizeResponse(BaseModel):
    content: str


# ---- the decoding parameters, from their declaration (runtime/parameters.py) -----------------


def decoding_field(parameter: Parameter) -> tuple[object, object]:
    """The body field of a decoding parameter that a request passes through to the runtime:
    its JSON type, its rule and its range, all from the declaration.

    Where the API allows the runtime's whole range of a real number, the runtime checks it (a
    400 with its own message, in the API's words); the schema still states the range. An int
    is checked here, up to `MAX_INT` when its range has no top, with the runtime's words.
    """
    span = served_range(parameter)
    constraints, shown_range = {}, {}
    if parameter.choices:  # strict: a bool choice is a JSON bool, never 0 or 1
        bools = {choice for choice in parameter.choices if isinstance(choice, bool)}
        others = tuple(choice for choice in parameter.choices if not isinstance(choice, bool))
        kind = bool if bools == {True, False} else Literal[tuple(bools)]
        if others:
            kind = kind | Literal[others]
        *first, last = (json.dumps(choice) for choice in parameter.choices)
        rule = f"{', '.join(first)} or {last}"
    elif parameter.type is bool:
        kind, rule = bool, "true or false"
    elif parameter.type is int:
        kind = int
        constraints = {"ge": span.low, "le": MAX_INT if span.high is None else span.high}
        rule = f"an int >= {span.low}" if span.high is None else f"an int in {_span(span)}"
    else:
        kind, rule = float, f"a number in {_span(span)}"
        low = "exclusiveMinimum" if span.low_open else "minimum"
        shown_range = {low: span.low, "maximum": span.high}
        if span != parameter.valid:
            low_check = "gt" if span.low_open else "ge"
            constraints = {low_check: span.low, "le": span.high}
    extra = {"x-must": rule, **{k: v for k, v in shown_range.items() if v is not None}}
    description = f"{parameter.help[0].upper()}{parameter.help[1:]}. Must be {rule}."
    info = Field(None, description=description, json_schema_extra=extra, **constraints)
    return kind | None, info


def _span(span: Range) -> str:
    """A range as the runtime's messages write it: "(0, 1]", "[0, 4294967295]"."""
    low, high = (
        f"{end:g}" if isinstance(end, float) else str(end) for end in (span.low, span.high)
    )
    return f"{'(' if span.low_open else '['}{low}, {high}]"


def _passed_through(base: type[Body], modes: tuple[str, ...]) -> dict:
    """The decoding fields a body built on `base` adds: each parameter with a request field that
    `base` does not declare itself and that a decoding mode in `modes` reads."""
    return {
        parameter.request_field: decoding_field(parameter)
        for parameter in PARAMETERS
        if parameter.request_field
        and parameter.request_field not in base.model_fields
        and set(parameter.modes) & set(modes)
    }


CompletionBody = create_model(
    "CompletionBody",
    __base__=_CompletionFields,
    __doc__="`POST /v1/completions`: OpenAI's legacy completions request, and every decoding "
    "parameter of runtime/parameters.py that has a request field (beam search included).",
    __module__=__name__,
    **_passed_through(_CompletionFields, MODES),
)
ChatBody = create_model(
    "ChatBody",
    __base__=_ChatFields,
    __doc__="`POST /v1/chat/completions`: OpenAI's chat request, and the decoding parameters a "
    "chat reply reads (no beam search: chat replies are sampled or greedy).",
    __module__=__name__,
    **_passed_through(_ChatFields, CHAT_MODES),
)
DECODING_FIELDS = frozenset(
    parameter.request_field for parameter in PARAMETERS if parameter.request_field
)  # what `runtime.parameters.from_request` reads of a body


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


# ---- responses: built from these models by both routes (serve/routes.py sends them) --------

# A log-probability below this is written as it: JSON has no -Infinity (nor NaN), and a float32
# probability of 0 (a log-probability below about -104) would otherwise be log(0). vLLM's floor.
LOGPROB_FLOOR = -9999.0


def finite_logprob(value: float | None) -> float | None:
    """A log-probability as every answer writes it: `value` when it is a finite number at or
    above `LOGPROB_FLOOR`, else `LOGPROB_FLOOR` (-inf, NaN and anything lower); None stays None
    (a token with nothing before it). Both routes' bodies and stream events go through it.

    >>> finite_logprob(-0.5), finite_logprob(float("-inf")), finite_logprob(float("nan"))
    (-0.5, -9999.0, -9999.0)
    """
    if value is None:
        return None
    value = float(value)
    return value if value >= LOGPROB_FLOOR else LOGPROB_FLOOR  # NaN compares false: the floor


def logprob_of(probability: float) -> float:
    """The finite log-probability of a probability (`finite_logprob` of its log; 0 gives the
    floor).

    >>> logprob_of(1.0), logprob_of(0.0)
    (0.0, -9999.0)
    """
    return finite_logprob(math.log(probability)) if probability > 0 else LOGPROB_FLOOR


class Answer(BaseModel):
    """A response object, or a part of one. Each is built from its fields by the code that
    answers (serve/api.py, serve/chat.py, serve/scoring.py, serve/tools.py) and written by
    `answer()`: the fields that were given, in the order declared here; an optional field that
    was not given is not written (a streamed token's choice has no `score`). An undeclared field
    is an error, so what a route sends is what its OpenAPI schema says."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    def answer(self) -> dict:
        """The JSON-able object sent: the fields given, in declared order."""
        return self.model_dump(mode="json", exclude_unset=True)

    def replaced(self, **changes) -> Answer:
        """A copy with `changes`, checked as an assignment is (nested parts are shared)."""
        copy = self.model_copy()
        for name, value in changes.items():
            setattr(copy, name, value)
        return copy


class ErrorDetail(Answer):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorResponse(Answer):
    error: ErrorDetail


class Usage(Answer):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int

    @classmethod
    def of(cls, prompt_tokens: int, completion_tokens: int) -> Usage:
        total = prompt_tokens + completion_tokens
        return cls(
            prompt_tokens=prompt_tokens, completion_tokens=completion_tokens, total_tokens=total
        )


# ---- /v1/completions -------------------------------------------------------------------------


class Logprobs(Answer):
    tokens: list[str]
    token_logprobs: list[float | None]
    top_logprobs: list[dict[str, float] | None] | None = Field(
        None, description="null for a prompt's first token, which has nothing before it"
    )
    text_offset: list[int]


class ChoiceExtras(Answer):
    token_ids: list[int]
    finish_reason: str | None = Field(
        description="the runtime's reason: eos, stop, length or context"
    )
    score: float | None = None
    alternatives: list[tuple[str, float]] | None = None
    max_tokens: int | None = Field(None, description="the `max_tokens` applied (the context's)")


class CompletionChoice(Answer):
    text: str
    index: int
    logprobs: Logprobs | None = None
    finish_reason: Literal["stop", "length"] | None = None
    scriptorium: ChoiceExtras | None = Field(
        None, description="absent from an echoed prompt without a completion (`max_tokens` 0)"
    )


class CompletionResponse(Answer):
    """A completion, and (with one token's choices) each of its server-sent events."""

    id: str
    object: Literal["text_completion"]
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage | None = None


# ---- /v1/chat/completions --------------------------------------------------------------------


class TopLogprob(Answer):
    token: str
    logprob: float
    bytes: list[int]


class TokenLogprob(TopLogprob):
    top_logprobs: list[TopLogprob]


class ChatLogprobs(Answer):
    content: list[TokenLogprob]
    refusal: None = None


class ChatChoiceExtras(Answer):
    token_ids: list[int] = Field(description="the reply's tokens, the end of turn included")
    logprobs: list[float]
    finish_reason: str | None = Field(
        description="the runtime's reason: eos, stop, length or context"
    )
    alternatives: list[tuple[str, float]] | None = None


class ReturnedFunction(Answer):
    name: str
    arguments: str = Field(description="the arguments, JSON text valid to the function's schema")


class ReturnedToolCall(Answer):
    id: str
    type: Literal["function"]
    function: ReturnedFunction


class ChatMessage(Answer):
    role: Literal["assistant"]
    content: str | None
    refusal: None = None
    tool_calls: list[ReturnedToolCall] | None = None


class ChatChoice(Answer):
    index: int
    message: ChatMessage
    logprobs: ChatLogprobs | None = None
    finish_reason: Literal["stop", "length", "tool_calls"] | None = None
    scriptorium: ChatChoiceExtras


class ChatCompletionResponse(Answer):
    id: str
    object: Literal["chat.completion"]
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage
    system_fingerprint: None


class FunctionDelta(Answer):
    name: str | None = Field(None, description="in a call's first delta only")
    arguments: str


class ToolCallDelta(Answer):
    index: int
    id: str | None = Field(None, description="in a call's first delta only")
    type: Literal["function"] | None = None
    function: FunctionDelta


class ChatDelta(Answer):
    role: Literal["assistant"] | None = Field(None, description="in a choice's first delta only")
    content: str | None = None
    tool_calls: list[ToolCallDelta] | None = None


class ChatChunkChoice(Answer):
    index: int
    delta: ChatDelta
    logprobs: ChatLogprobs | None = None
    finish_reason: Literal["stop", "length", "tool_calls"] | None = None
    scriptorium: ChatChoiceExtras


class ChatCompletionChunk(Answer):
    """One server-sent event of a streamed chat completion; the last, with `usage`, has no
    choices."""

    id: str
    object: Literal["chat.completion.chunk"]
    created: int
    model: str
    choices: list[ChatChunkChoice]
    system_fingerprint: None
    usage: Usage | None = None


# ---- /v1/models ------------------------------------------------------------------------------


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
