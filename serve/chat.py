"""The chat route (`POST /v1/chat/completions`) over `runtime`'s chat methods: request bodies in,
the replica's work, response objects out.

Three parts, each testable without a server, laid out as serve/api.py lays out completions:

- the request: `parse_chat(raw, limits)` checks a body (serve/protocol.py's `ChatBody`) and maps
  it onto a validated `runtime.GenerationConfig` with serve/api.py's mapping:
  `max_completion_tokens` (or the older `max_tokens`; neither: until the end of the turn or of
  the context) → `max_new_tokens`, `n` → `num_return_sequences`, `temperature` 0 → greedy, any
  other → sampling (OpenAI's default is 1), `stop`, `controls`, and the decoding parameters a
  chat reply reads (runtime/parameters.py's; completions' without beam search). Messages have
  a role (system, user, assistant; "developer" is OpenAI's newer name for system) and text
  content (a string, or a list of text parts, joined by newlines), at most
  `limits.max_prompt_chars` characters in all (the tools' and earlier calls' JSON included);
  `name` is accepted and not shown to the model. `response_format` (JSON mode, or JSON to a
  schema) is completions' (serve/api.py). `tools`, `tool_choice` and `parallel_tool_calls`,
  tool messages and earlier calls are serve/tools.py's. Penalties and `logit_bias` are refused
  unless at the value that means "off".
- the replica's work: `complete(gen, request)` and `stream(gen, request)` run `gen.chat` /
  `gen.stream_chat` (serve/replica.py runs them, as it runs completions', in its thread pool),
  with the tools and their calls' grammar for the model's template (`tools.constraint`).
- the response: OpenAI's `chat.completion` object, or `chat.completion.chunk` server-sent events
  (`chunk`): per choice a first `delta` with the role, then content deltas, the finish reason on
  the last; with `stream_options.include_usage` a last chunk with `usage` and no choices; then
  `data: [DONE]`. A reply that calls functions has `message.tool_calls` and finish reason
  "tool_calls"; streamed, `delta.tool_calls` (serve/tools.py). `logprobs: true` (+
  `top_logprobs` ≤ 5) gives `choices[].logprobs.content[]`,
  each with token, logprob, UTF-8 bytes and the top alternatives; the end-of-turn token is not
  listed (it is not in the text). Each choice also carries a `scriptorium` object, as
  completions do: the token ids (end of turn included), their log-probabilities, the runtime's
  own finish reason and, streamed, the token's top-5 alternatives (what ui/remote.py needs to
  stand in for a local generator).

A model whose bundle has no chat template gets a 400 naming `model` (`not_a_chat_model`; it
serves /v1/completions).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache

from tokenizers import decoders

import runtime
from runtime.chat import check_messages
from runtime.request_caps import SERVE_LIMITS, ServeLimits
from runtime.text_generator import ServedGenerator

from . import api, tools
from .protocol import (
    ChatBody,
    ChatChoice,
    ChatChoiceExtras,
    ChatChunkChoice,
    ChatDelta,
    ChatLogprobs,
    ChatMessage,
    RequestError,
    TokenLogprob,
    TopLogprob,
    Usage,
    finite_logprob,
    logprob_of,
    parse_body,
)

UNTIL_CONTEXT = 1 << 30  # max_new_tokens when the request sets no limit: the context caps it
# The runtime's names of the API's fields, so that its messages can name the API's.
RUNTIME_NAMES = {
    **api.RUNTIME_NAMES,
    "max_new_tokens": "max_completion_tokens",
    "tool_calls": "tools",
}


# ---- the request -----------------------------------------------------------------------------


@dataclass(frozen=True)
class ChatRequest:
    model: str  # model id as listed by GET /v1/models
    messages: tuple[dict, ...]  # {"role", "content", …} as the runtime takes them
    config: runtime.GenerationConfig  # validated settings
    tools: tools.ToolRequest | None = None  # the functions a reply may or must call
    controls: dict = field(default_factory=dict)  # control tokens, e.g. {"section": "gospels"}
    top_logprobs: int | None = None  # None: no logprobs; k: each token's logprob and the top k
    stream: bool = False  # answer with server-sent events
    include_usage: bool = False  # streaming: a last chunk with token counts
    # the token limit's field as the client sent it, which refusals name
    token_field: str = "max_completion_tokens"

    @property
    def names(self) -> dict:
        """The runtime's names of this request's fields, in the client's words."""
        return {**RUNTIME_NAMES, "max_new_tokens": self.token_field}


def parse_chat(raw: bytes | str | dict, limits: ServeLimits = SERVE_LIMITS) -> ChatRequest:
    """Check a chat completions body (raw JSON, or a dict) and map it onto a validated
    `GenerationConfig`; `RequestError` (a 400 naming the field) for anything wrong.

    >>> req = parse_chat({"model": "m", "messages": [{"role": "user", "content": "Hi"}],
    ...                   "temperature": 0, "max_completion_tokens": 8})
    >>> req.config.mode, req.config.max_new_tokens, req.messages
    ('greedy', 8, ({'role': 'user', 'content': 'Hi'},))
    """
    body = parse_body(ChatBody, raw)
    if body.top_logprobs and not body.logprobs:
        raise RequestError(
            f"`top_logprobs` must come with `logprobs` true, got {body.top_logprobs} without",
            param="top_logprobs",
        )
    messages = tuple(tools.chat_messages(body.messages))
    offered = tools.parse_tools(body)
    characters = sum(len(m["content"]) for m in messages)
    characters += sum(len(json.dumps(m["tool_calls"])) for m in messages if "tool_calls" in m)
    if body.tools:
        characters += len(json.dumps([tool.model_dump() for tool in body.tools]))
    if characters > limits.max_prompt_chars:
        raise RequestError(
            f"`messages` must be at most {limits.max_prompt_chars} characters in all, "
            f"got {characters}",
            param="messages",
        )
    for index, message in enumerate(messages):
        api.check_text(f"messages[{index}].content", message["content"])
    try:
        check_messages(list(messages))
    except ValueError as error:
        raise RequestError(str(error), param=api.param_named_in(str(error))) from None
    limit = body.max_completion_tokens or body.max_tokens or UNTIL_CONTEXT
    sent_old_name = body.max_tokens is not None and body.max_completion_tokens is None
    token_field = "max_tokens" if sent_old_name else "max_completion_tokens"
    config = api.generation_config(body, limit, {**RUNTIME_NAMES, "max_new_tokens": token_field})
    api.check_sequence_cap(1, config, limits)
    return ChatRequest(
        model=body.model,
        messages=messages,
        config=config,
        tools=offered,
        controls={k: v for k, v in (body.controls or {}).items() if v is not None},
        top_logprobs=(body.top_logprobs or 0) if body.logprobs else None,
        stream=bool(body.stream),
        include_usage=body.stream_options is not None and body.stream_options.include_usage,
        token_field=token_field,
    )


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


def logprob_entries(
    gen: ServedGenerator, token_ids, logprobs, alternatives, k: int
) -> ChatLogprobs:
    """OpenAI's chat `logprobs`: per token its text, logprob, bytes and top-k alternatives
    (end-of-turn tokens left out: they are not part of the reply). An alternative that is the
    chosen token carries the chosen token's own logprob, so the two never differ. Every logprob
    is finite (`protocol.finite_logprob`: a probability of 0 is `protocol.LOGPROB_FLOOR`)."""
    ends = set(gen.end_of_turn_token_ids)
    entries = []
    for token_id, logprob, alts in zip(token_ids, logprobs, alternatives):
        if token_id in ends:
            continue
        raw = bytes(token_bytes(gen.tokenizer, token_id))
        own = gen.tokenizer.decode([token_id], skip_special_tokens=False)
        top = [
            TopLogprob(
                token=text,
                logprob=finite_logprob(logprob) if text == own else logprob_of(prob),
                bytes=list(text.encode("utf-8")),
            )
            for text, prob in alts[:k]
        ]
        entries.append(
            TokenLogprob(
                token=raw.decode("utf-8", errors="replace"),
                logprob=finite_logprob(logprob),
                bytes=list(raw),
                top_logprobs=top,
            )
        )
    return ChatLogprobs(content=entries, refusal=None)


def _choice_extras(token_ids, logprobs, finish_reason, alternatives=None) -> ChatChoiceExtras:
    """What OpenAI's schema has no field for: the token ids (end of turn included), each
    token's log-probability, the runtime's own finish reason; streamed, the token's top-5."""
    extras = {"token_ids": list(token_ids), "logprobs": [finite_logprob(v) for v in logprobs]}
    extras["finish_reason"] = finish_reason
    if alternatives is not None:
        extras["alternatives"] = alternatives
    return ChatChoiceExtras(**extras)


@contextmanager
def _in_clients_words(request: ChatRequest):
    """A runtime refusal raised inside names the fields as the client sent them (the token
    limit as `max_tokens` when the client used that older name, e.g. for the KV budget)."""
    try:
        yield
    except ValueError as error:
        raise ValueError(api.api_message(str(error), request.names)) from None


def complete(gen: ServedGenerator, request: ChatRequest) -> dict:
    """The choices and usage of a non-streamed chat completion; `ValueError` (in the client's
    words) for a conversation or setting the runtime refuses."""
    with _in_clients_words(request):
        return _complete(gen, request)


def _prepared(
    gen: ServedGenerator, request: ChatRequest
) -> tuple[list[dict], list | None, object, str | None]:
    """(the conversation, the tools for the template, the config, the calls' format) for
    `gen`: the request's own when it offers no tools."""
    messages = list(request.messages)
    if request.tools is None:
        return messages, None, request.config, None
    messages, template_tools, calls = tools.constraint(gen, messages, request.tools)
    return messages, template_tools, request.config.replace(tool_calls=calls), calls.format


def _complete(gen: ServedGenerator, request: ChatRequest) -> dict:
    messages, offered, config, call_format = _prepared(gen, request)
    if request.top_logprobs is None:
        outputs = gen.chat(messages, config, request.controls, offered)
        alternatives = [[] for _ in outputs]
    else:  # the alternatives come with the stream's events
        prompt_tokens = len(gen.encode_chat(messages, request.controls, offered))
        events = gen.stream_chat(messages, config, request.controls, offered)
        rows = api.collect(events, request.config.num_return_sequences, prompt_tokens)
        outputs, alternatives = [output for output, _ in rows], [alts for _, alts in rows]
    choices = []
    for index, (output, alts) in enumerate(zip(outputs, alternatives)):
        logprobs = None
        if request.top_logprobs is not None:
            logprobs = logprob_entries(
                gen, output.token_ids, output.logprobs, alts, request.top_logprobs
            )
        message = ChatMessage(role="assistant", content=output.text, refusal=None)
        finish_reason = api.openai_finish_reason(output.finish_reason)
        if call_format is not None:
            message, finish_reason = tools.reply_message(output.text, finish_reason, call_format)
        choices.append(
            ChatChoice(
                index=index,
                message=message,
                logprobs=logprobs,
                finish_reason=finish_reason,
                scriptorium=_choice_extras(output.token_ids, output.logprobs, output.finish_reason),
            )
        )
    prompt_tokens = outputs[0].prompt_tokens if outputs else 0
    completion_tokens = sum(len(o.token_ids) for o in outputs)
    return {"choices": choices, "usage": Usage.of(prompt_tokens, completion_tokens)}


def stream(gen: ServedGenerator, request: ChatRequest) -> Iterator[dict]:
    """{"choice": …} per token (a `chat.completion.chunk` choice), then {"usage": …}; the checks
    run before the first item, and a `ValueError` from them propagates (in the client's
    words)."""
    with _in_clients_words(request):
        yield from _stream(gen, request)


def _stream(gen: ServedGenerator, request: ChatRequest) -> Iterator[dict]:
    messages, offered, config, call_format = _prepared(gen, request)
    events = gen.stream_chat(messages, config, request.controls, offered)
    prompt_tokens = len(gen.encode_chat(messages, request.controls, offered))
    completion_tokens = 0
    started: set[int] = set()
    calls: dict[int, tools.CallDeltas] = {}  # per choice, when the reply may call functions
    try:
        for event in events:
            completion_tokens += 1
            finish_reason = api.openai_finish_reason(event.finish_reason)
            if call_format is None:
                delta = ChatDelta(content=event.text)
            else:
                reading = calls.setdefault(event.index, tools.CallDeltas(call_format))
                delta = reading.feed(event.text, finished=finish_reason is not None)
                finish_reason = reading.finish_reason(finish_reason)
            if event.index not in started:  # a choice's first chunk names the role
                started.add(event.index)
                delta.role = "assistant"
            logprobs = None
            if request.top_logprobs is not None:
                logprobs = logprob_entries(
                    gen,
                    [event.token_id],
                    [event.logprob],
                    [event.alternatives],
                    request.top_logprobs,
                )
            yield {
                "choice": ChatChunkChoice(
                    index=event.index,
                    delta=delta,
                    logprobs=logprobs,
                    finish_reason=finish_reason,
                    scriptorium=_choice_extras(
                        [event.token_id], [event.logprob], event.finish_reason, event.alternatives
                    ),
                )
            }
    finally:
        events.close()
    yield {"usage": Usage.of(prompt_tokens, completion_tokens)}


# ---- refusals --------------------------------------------------------------------------------


def not_a_chat_model(model: str) -> RequestError:
    return RequestError(
        f"`model` must be a chat model (a bundle with a chat template), got {model!r}, which "
        "has none: use /v1/completions with it",
        param="model",
        code="model_not_chat",
    )
