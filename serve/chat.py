"""OpenAI's chat completions (`POST /v1/chat/completions`) over `runtime`'s chat methods.

Three parts, each testable without a server:

- the request: `ChatBody` (pydantic: strict types, unknown fields refused) and `parse_chat(raw)`,
  which maps it onto a validated `runtime.GenerationConfig` as serve/api.py does for completions:
  `max_completion_tokens` (or the older `max_tokens`; neither: until the end of the turn or of the
  context) → `max_new_tokens`, `n` → `num_return_sequences`, `temperature` 0 → greedy, any other
  → sampling (OpenAI's default is 1), `top_p`, `seed`, `stop`; the same extras as completions
  except beam search (`top_k`, `min_p`, `typical_p`, `repetition_penalty`,
  `no_repeat_ngram_size`, `min_tokens`, `controls`). Messages have a role (system, user,
  assistant; "developer" is OpenAI's newer name for system) and text content (a string, or a
  list of text parts, joined by newlines); `name` is accepted and not shown to the model. Tools,
  penalties, `logit_bias` and non-text responses are refused unless at the value that means
  "off".
- the replica side: `replica_complete(gen, request)` and `replica_stream(gen, request)` run
  `gen.chat` / `gen.stream_chat` (serve/deployments.py runs them in the replica's thread pool).
- the response: OpenAI's `chat.completion` object, or `chat.completion.chunk` server-sent events
  (`sse_events`): per choice a first `delta` with the role, then content deltas, the finish
  reason on the last; with `stream_options.include_usage` a last chunk with `usage` and no
  choices; then `data: [DONE]`. `logprobs: true` (+ `top_logprobs` ≤ 5) gives
  `choices[].logprobs.content[]`, each with token, logprob, UTF-8 bytes and the top
  alternatives; the end-of-turn token is not listed (it is not in the text). Each choice also
  carries a `scriptorium` object, as completions do: the token ids (end of turn included), their
  log-probabilities, the runtime's own finish reason and, streamed, the token's top-5
  alternatives (what ui/remote.py needs to stand in for a local generator).

A model whose bundle has no chat template gets a 400 naming `model` (it serves /v1/completions).
"""

from __future__ import annotations

import json
import math
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cache
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from tokenizers import decoders

import runtime
from runtime.chat import check_messages

from . import api, protocol

MAX_TOP_LOGPROBS = 5  # the runtime streams its top 5 alternatives
MAX_STOP_STRINGS = 4  # OpenAI's limit
MAX_MESSAGES = 1024  # turns in one conversation
MAX_TOKENS = 2**31 - 1
UNTIL_CONTEXT = 1 << 30  # max_new_tokens when the request sets no limit: the context caps it
# Completions' extras, without beam search (chat replies are sampled or greedy).
EXTRA_FIELDS = {
    key: name
    for key, name in api.EXTRA_FIELDS.items()
    if name not in ("num_beams", "length_penalty", "early_stopping")
}


# ---- the request -----------------------------------------------------------------------------


def must(rule: str, default=None, **constraints):
    """A field whose 400 (and schema description) states `rule`."""
    return Field(
        default, description=f"Must be {rule}.", json_schema_extra={"x-must": rule}, **constraints
    )


class Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", allow_inf_nan=False, frozen=True)


class TextPart(Strict):
    type: Literal["text"] = must('"text" (only text parts are supported)', default=...)
    text: str = must("a string", default=...)


class Message(Strict):
    role: Literal["system", "developer", "user", "assistant"] = must(
        "one of 'system', 'developer', 'user', 'assistant'", default=...
    )
    content: str | list[TextPart] = must(
        'a string or a list of {"type": "text", "text": …} parts', default=...
    )
    name: str | None = must("a string (accepted, not shown to the model)")


class StreamOptions(Strict):
    include_usage: bool = must("true or false (a last chunk with the token counts)", default=False)


class ChatBody(Strict):
    """`POST /v1/chat/completions`: OpenAI's chat request plus Scriptorium's extras."""

    model: Annotated[str, Field(min_length=1)] = must("a model id from GET /v1/models", default=...)
    messages: Annotated[list[Message], Field(min_length=1, max_length=MAX_MESSAGES)] = must(
        f"a list of 1 to {MAX_MESSAGES} messages", default=...
    )
    max_completion_tokens: int | None = must("an int >= 1", ge=1, le=MAX_TOKENS)
    max_tokens: int | None = must("an int >= 1 (max_completion_tokens' older name)", ge=1)
    temperature: float | None = must(
        f"a number in [0, 2] (0: greedy; else at least {protocol.MIN_TEMPERATURE:g})", ge=0, le=2
    )
    top_p: float | None = must("a number in (0, 1]", gt=0, le=1)
    n: int | None = must("an int >= 1 (replies to return)", ge=1, le=MAX_TOKENS)
    stop: str | Annotated[list[str], Field(max_length=MAX_STOP_STRINGS)] | None = must(
        f"a string or a list of at most {MAX_STOP_STRINGS} strings"
    )
    seed: int | None = must("an int >= 0", ge=0, le=2**63 - 1)
    logprobs: bool | None = must("true or false")
    top_logprobs: int | None = must(
        f"an int in [0, {MAX_TOP_LOGPROBS}], with logprobs true", ge=0, le=MAX_TOP_LOGPROBS
    )
    stream: bool | None = must("true or false")
    stream_options: StreamOptions | None = must('an object like {"include_usage": true}')
    user: str | None = must("a string")
    controls: dict[str, str | float | None] | None = must(
        'an object of control names to values, like {"section": "gospels"}'
    )
    top_k: int | None = must("an int >= 0 (0: off)", ge=0, le=MAX_TOKENS)
    min_p: float | None = must("a number in [0, 1]", ge=0, le=1)
    typical_p: float | None = must("a number in (0, 1]", gt=0, le=1)
    repetition_penalty: float | None = must(
        f"a number in {protocol.runtime_range('repetition_penalty')} (1: off)"
    )
    no_repeat_ngram_size: int | None = must("an int >= 0 (0: off)", ge=0, le=MAX_TOKENS)
    min_tokens: int | None = must("an int >= 0", ge=0, le=MAX_TOKENS)
    # OpenAI fields accepted only at the value that means "off".
    presence_penalty: float | None = must("0 (penalties are not supported)")
    frequency_penalty: float | None = must("0 (penalties are not supported)")
    logit_bias: dict[str, float] | None = must("null (logit_bias is not supported)")
    tools: list | None = must("null or empty (tools are not supported)")
    tool_choice: str | None = must('"none" or null (tools are not supported)')
    parallel_tool_calls: bool | None = must("true, false or null (tools are not supported)")
    response_format: dict | None = must('{"type": "text"} or null')
    store: bool | None = must("false or null (nothing is stored)")
    metadata: dict | None = must("an object (accepted, not used)")
    service_tier: str | None = must("a string (accepted, not used)")


# Each OpenAI field that is accepted only "off", with the values that mean off.
NEUTRAL = {
    "presence_penalty": (0,),
    "frequency_penalty": (0,),
    "logit_bias": ({},),
    "tools": ([],),
    "tool_choice": ("none",),
    "response_format": ({"type": "text"},),
    "store": (False,),
}


@dataclass(frozen=True)
class ChatRequest:
    model: str  # model id as listed by GET /v1/models
    messages: tuple[dict, ...]  # {"role", "content"} as the runtime takes them
    config: runtime.GenerationConfig  # validated settings
    controls: dict = field(default_factory=dict)  # control tokens, e.g. {"section": "gospels"}
    top_logprobs: int | None = None  # None: no logprobs; k: each token's logprob and the top k
    stream: bool = False  # answer with server-sent events
    include_usage: bool = False  # streaming: a last chunk with token counts


def _request_error(error: ValidationError) -> api.RequestError:
    """The first problem pydantic found, as a 400 naming the field (`messages[0].role`)."""
    first = error.errors(include_url=False)[0]
    kind, loc = first["type"], first["loc"]
    if kind == "json_invalid":
        return api.RequestError(f"the request body must be JSON: {first['msg']}")
    if kind == "extra_forbidden":
        where = "chat.completions" if len(loc) == 1 else ".".join(map(str, loc[:-1]))
        return api.RequestError(f"`{loc[-1]}` is not a {where} parameter", param=str(loc[0]))
    # Walk the location down the models to the field whose rule applies.
    owner, rule, parts = ChatBody, None, []
    for part in loc:
        if isinstance(part, int):
            parts[-1] += f"[{part}]"
            continue
        fields = getattr(owner, "model_fields", {})
        if part not in fields:
            continue  # a union's branch name (e.g. "str", "list[TextPart]")
        parts.append(part)
        rule = fields[part].json_schema_extra["x-must"]
        owner = _model_in(fields[part].annotation)
    if not parts:
        return api.RequestError(
            f"the request body must be a JSON object, got {protocol.shown(first['input'])}"
        )
    param = ".".join(parts)
    got = "nothing" if kind == "missing" else protocol.shown(first["input"])
    return api.RequestError(f"`{param}` must be {rule}, got {got}", param=param)


def _model_in(annotation):
    """The pydantic model inside an annotation (`list[Message]` → Message), else None."""
    stack = [annotation]
    while stack:
        item = stack.pop()
        if isinstance(item, type) and issubclass(item, BaseModel):
            return item
        stack.extend(getattr(item, "__args__", ()))
        stack.extend(getattr(item, "__origin__", None) and [item.__origin__] or [])
    return None


def parse_chat(raw: bytes | str | dict) -> ChatRequest:
    """Check a chat completions body (raw JSON, or a dict) and map it onto a validated
    `GenerationConfig`; `api.RequestError` (a 400 naming the field) for anything wrong.

    >>> req = parse_chat({"model": "m", "messages": [{"role": "user", "content": "Hi"}],
    ...                   "temperature": 0, "max_completion_tokens": 8})
    >>> req.config.mode, req.config.max_new_tokens, req.messages
    ('greedy', 8, ({'role': 'user', 'content': 'Hi'},))
    """
    try:
        body = (
            ChatBody.model_validate(raw)
            if isinstance(raw, dict)
            else (ChatBody.model_validate_json(raw))
        )
    except ValidationError as error:
        raise _request_error(error) from None
    for name, neutral in NEUTRAL.items():
        value = getattr(body, name)
        if value is not None and value not in neutral:
            raise api.RequestError(
                f"`{name}` is not supported by this server, got {protocol.shown(value)}", param=name
            )
    if body.top_logprobs and not body.logprobs:
        raise api.RequestError(
            f"`top_logprobs` must come with `logprobs` true, got {body.top_logprobs} without",
            param="top_logprobs",
        )
    messages = tuple(
        {
            "role": "system" if m.role == "developer" else m.role,
            "content": m.content
            if isinstance(m.content, str)
            else "\n".join(p.text for p in m.content),
        }
        for m in body.messages
    )
    try:
        check_messages(list(messages))
        config = runtime.GenerationConfig(**_settings(body)).validate()
    except ValueError as error:
        message = _api_words(str(error))
        raise api.RequestError(message, param=api.param_named_in(message)) from None
    if config.num_return_sequences > api.MAX_SEQUENCES:
        raise api.RequestError(
            f"`n` must be at most {api.MAX_SEQUENCES}, got {config.num_return_sequences}",
            param="n",
        )
    return ChatRequest(
        model=body.model,
        messages=messages,
        config=config,
        controls={k: v for k, v in (body.controls or {}).items() if v is not None},
        top_logprobs=(body.top_logprobs or 0) if body.logprobs else None,
        stream=bool(body.stream),
        include_usage=body.stream_options is not None and body.stream_options.include_usage,
    )


# The runtime's names of the fields whose API names differ.
API_NAMES = {
    "max_new_tokens": "max_completion_tokens",
    "num_return_sequences": "n",
    **{name: key for key, name in EXTRA_FIELDS.items() if name != key},
}


def _api_words(message: str) -> str:
    """A runtime message with its field names in the API's words.

    >>> _api_words("`num_return_sequences` must be 1 for greedy decoding, got 2")
    '`n` must be 1 for greedy decoding, got 2'
    """
    for name, key in API_NAMES.items():
        message = message.replace(f"`{name}`", f"`{key}`")
    return message


def _settings(body: ChatBody) -> dict:
    """GenerationConfig keyword arguments from a checked body."""
    limit = body.max_completion_tokens or body.max_tokens or UNTIL_CONTEXT
    stop = (body.stop,) if isinstance(body.stop, str) else tuple(body.stop or ())
    return api.sampling_settings(body, limit, stop, EXTRA_FIELDS)


# ---- the replica side ------------------------------------------------------------------------


@cache
def _byte_decoder() -> dict[str, int]:
    """Byte-level BPE's printable character for each byte, inverted (GPT-2's table)."""
    printable = [*range(33, 127), *range(161, 173), *range(174, 256)]
    chars, extra = {}, 0
    for byte in range(256):
        if byte in printable:
            chars[chr(byte)] = byte
        else:
            chars[chr(256 + extra)] = byte
            extra += 1
    return chars


def token_bytes(tokenizer, token_id: int) -> list[int]:
    """The UTF-8 bytes a token adds to the text (part of a character for some tokens)."""
    piece = tokenizer.id_to_token(token_id)
    if isinstance(tokenizer.decoder, decoders.ByteLevel) and piece is not None:
        table = _byte_decoder()
        if all(ch in table for ch in piece):
            return [table[ch] for ch in piece]
    if piece is not None and len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
        return [int(piece[3:5], 16)]  # SentencePiece byte fallback
    return list(tokenizer.decode([token_id], skip_special_tokens=False).encode("utf-8"))


def logprob_entries(gen, token_ids, logprobs, alternatives, k: int) -> list[dict]:
    """OpenAI's `logprobs.content`: per token its text, logprob, bytes and top-k alternatives
    (end-of-turn tokens left out: they are not part of the reply). An alternative that is the
    chosen token carries the chosen token's own logprob, so the two never differ."""
    ends = set(gen.end_of_turn_token_ids)
    entries = []
    for token_id, logprob, alts in zip(token_ids, logprobs, alternatives):
        if token_id in ends:
            continue
        raw = bytes(token_bytes(gen.tokenizer, token_id))
        own = gen.tokenizer.decode([token_id], skip_special_tokens=False)
        top = [
            {
                "token": text,
                "logprob": logprob if text == own else (math.log(prob) if prob > 0 else -9999.0),
                "bytes": list(text.encode("utf-8")),
            }
            for text, prob in alts[:k]
        ]
        entries.append(
            {
                "token": raw.decode("utf-8", errors="replace"),
                "logprob": logprob,
                "bytes": list(raw),
                "top_logprobs": top,
            }
        )
    return entries


def _choice_extras(token_ids, logprobs, finish_reason, alternatives=None) -> dict:
    """What OpenAI's schema has no field for: the token ids (end of turn included), each
    token's log-probability, the runtime's own finish reason; streamed, the token's top-5."""
    extras = {"token_ids": list(token_ids), "logprobs": list(logprobs)}
    extras["finish_reason"] = finish_reason
    if alternatives is not None:
        extras["alternatives"] = [list(pair) for pair in alternatives]
    return extras


def replica_complete(gen, request: ChatRequest) -> dict:
    """The choices and usage of a non-streamed chat completion, or {"error": message} for a
    conversation or setting the runtime refuses."""
    try:
        messages = list(request.messages)
        if request.top_logprobs is None:
            outputs = gen.chat(messages, request.config, request.controls)
            alternatives = [[] for _ in outputs]
        else:  # the alternatives come with the stream's events
            outputs, alternatives = _collect(gen, request)
    except ValueError as error:
        return {"error": str(error)}
    choices = []
    for index, (output, alts) in enumerate(zip(outputs, alternatives)):
        logprobs = None
        if request.top_logprobs is not None:
            content = logprob_entries(
                gen, output.token_ids, output.logprobs, alts, request.top_logprobs
            )
            logprobs = {"content": content, "refusal": None}
        choices.append(
            {
                "index": index,
                "message": {"role": "assistant", "content": output.text, "refusal": None},
                "logprobs": logprobs,
                "finish_reason": api.openai_finish_reason(output.finish_reason),
                "scriptorium": _choice_extras(
                    output.token_ids, output.logprobs, output.finish_reason
                ),
            }
        )
    prompt_tokens = outputs[0].prompt_tokens if outputs else 0
    completion_tokens = sum(len(o.token_ids) for o in outputs)
    return {"choices": choices, "usage": api.usage(prompt_tokens, completion_tokens)}


def _collect(gen, request: ChatRequest):
    """(outputs, per-token alternatives of each) from `stream_chat`."""
    copies = request.config.num_return_sequences
    prompt_tokens = len(gen.encode_chat(list(request.messages), request.controls))
    outputs = [runtime.GenerationOutput("", [], [], "", 0, prompt_tokens) for _ in range(copies)]
    alternatives = [[] for _ in range(copies)]
    for event in gen.stream_chat(list(request.messages), request.config, request.controls):
        output = outputs[event.index]
        output.text += event.text
        output.token_ids.append(event.token_id)
        output.logprobs.append(event.logprob)
        alternatives[event.index].append(event.alternatives)
        if event.finish_reason:
            output.finish_reason = event.finish_reason
    return outputs, alternatives


def replica_stream(gen, request: ChatRequest) -> Iterator[dict]:
    """Items for the gateway: {"choice": …} per token (a `chat.completion.chunk` choice), then
    {"usage": …}. The checks run before the first item; a `ValueError` from them propagates."""
    messages = list(request.messages)
    events = gen.stream_chat(messages, request.config, request.controls)
    prompt_tokens = len(gen.encode_chat(messages, request.controls))
    completion_tokens = 0
    started: set[int] = set()
    try:
        for event in events:
            completion_tokens += 1
            delta = {"content": event.text}
            if event.index not in started:  # a choice's first chunk names the role
                started.add(event.index)
                delta = {"role": "assistant", **delta}
            logprobs = None
            if request.top_logprobs is not None:
                content = logprob_entries(
                    gen,
                    [event.token_id],
                    [event.logprob],
                    [event.alternatives],
                    request.top_logprobs,
                )
                logprobs = {"content": content, "refusal": None}
            yield {
                "choice": {
                    "index": event.index,
                    "delta": delta,
                    "logprobs": logprobs,
                    "finish_reason": api.openai_finish_reason(event.finish_reason),
                    "scriptorium": _choice_extras(
                        [event.token_id], [event.logprob], event.finish_reason, event.alternatives
                    ),
                }
            }
    finally:
        events.close()
    yield {"usage": api.usage(prompt_tokens, completion_tokens)}


# ---- the response ----------------------------------------------------------------------------


def new_id() -> str:
    return f"chatcmpl-{uuid.uuid4().hex}"


def chat_response(request_id: str, model: str, result: dict) -> dict:
    return {
        "id": request_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": result["choices"],
        "usage": result["usage"],
        "system_fingerprint": None,
    }


def chunk(request_id: str, model: str, created: int, choices: list[dict], usage=None) -> dict:
    body = {
        "id": request_id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": choices,
        "system_fingerprint": None,
    }
    if usage is not None:
        body["usage"] = usage
    return body


def sse_line(item: dict, request: ChatRequest, request_id: str, created: int) -> str | None:
    """One replica item as a server-sent event line (None: nothing to send)."""
    if "error" in item:
        message = item["error"]
        body = api.error_body(message, param=api.param_named_in(message))
    elif "choice" in item:
        body = chunk(request_id, request.model, created, [item["choice"]])
    elif request.include_usage:
        body = chunk(request_id, request.model, created, [], item["usage"])
    else:
        return None
    return f"data: {json.dumps(body, ensure_ascii=False)}\n\n"


def not_a_chat_model(model: str) -> api.RequestError:
    return api.RequestError(
        f"`model` must be a chat model (a bundle with a chat template), got {model!r}, which "
        "has none: use /v1/completions with it",
        param="model",
        code="model_not_chat",
    )


async def stream_response(open_stream, request: ChatRequest, failure, unavailable, retries: int):
    """The SSE response of a streamed chat: wait for the replica's first item (so a refused
    conversation still gets a 400), then stream. `open_stream()` starts the replica's stream (a
    Serve response generator), `failure(error)` turns an exception into an OpenAI error
    response; a replica in `unavailable` is retried `retries` times while nothing was sent."""
    from fastapi.responses import StreamingResponse

    for attempt in range(retries + 1):
        responses = open_stream()
        try:
            first = await responses.__anext__()
            break
        except unavailable:
            if attempt == retries:
                raise
        except BaseException:
            responses.cancel()
            raise
    if "error" in first:
        return failure(api.RequestError(first["error"], param=api.param_named_in(first["error"])))
    request_id, created = new_id(), int(time.time())

    async def events():
        finished = False
        try:
            if (line := sse_line(first, request, request_id, created)) is not None:
                yield line
            async for item in responses:
                if (line := sse_line(item, request, request_id, created)) is not None:
                    yield line
            finished = True
        except Exception as error:  # mid-stream: headers are sent, so an error event
            yield f"data: {failure(error).body.decode()}\n\n"
        finally:
            if not finished:
                responses.cancel()
        yield "data: [DONE]\n\n"

    return StreamingResponse(events(), media_type="text/event-stream")
