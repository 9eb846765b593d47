"""The OpenAI completions protocol over `runtime`: request bodies in, response objects out.

Pure functions, no Ray and no HTTP server, so every rule here is testable on its own:

- `parse_completion(body)` checks an OpenAI `POST /v1/completions` body and returns a
  `CompletionRequest` holding the `runtime.GenerationConfig` it maps to. OpenAI's names map to
  transformers' ones: `max_tokens` → `max_new_tokens`, `n` → `num_return_sequences`, `stop` →
  `stop`; `temperature` 0 means greedy decoding (as OpenAI documents it), any other temperature
  means sampling at that temperature (OpenAI's default is 1). Our extras in the same body:
  `top_k`, `min_p`, `typical_p`, `repetition_penalty`, `no_repeat_ngram_size`, `min_tokens`,
  `num_beams`, `length_penalty`, `early_stopping` and `controls` ({"section": "gospels"}).
  With `num_beams` > 1, temperature 0 is beam search and any other temperature beam sampling.
- `completion_response` / `stream_chunk` build OpenAI's `text_completion` objects from
  `runtime.GenerationOutput`s / `StreamEvent`s. Each choice also carries a `scriptorium` object
  with what OpenAI's schema has no field for: the token ids, the runtime's own finish reason
  ("eos", "stop", "length", "context") and, when streaming, the token's top-5 alternatives.
- `error_body` is OpenAI's error shape: `{"error": {"message", "type", "param", "code"}}`.

`logprobs` (an int in [0, 5], as OpenAI's legacy completions) returns the model's own
log-probabilities (before penalties and filters, see runtime/generator.py); `top_logprobs` lists
the model's most likely tokens at each step, and `text_offset` the character offset of each token
in the completion text. `prompt` may also be token ids (a list, or a list of lists); `echo` puts
the prompt in front of each choice, and `max_tokens: 0` with `echo` scores the prompt without
generating (serve/scoring.py). What is not implemented (`best_of` > 1, `suffix`, non-zero
`presence_penalty`/`frequency_penalty`, `logit_bias`) is refused with a 400 that says so.
"""

from __future__ import annotations

import math
import time
import uuid
from dataclasses import dataclass, field

import runtime
from runtime.budget import MAX_SEQUENCES, check_sequences

from . import scoring
from .protocol import (
    MAX_LOGPROBS,
    CompletionBody,
    RequestError,
    error_body,
    parse_body,
    shown,
)

__all__ = ["RequestError", "error_body", "MAX_LOGPROBS", "parse_completion", "Limits"]
OPENAI_DEFAULT_MAX_TOKENS = 16


@dataclass(frozen=True)
class Limits:
    """What one client may ask of the server (docs/SCALING.md, "Limits"; `scriptorium serve`
    flags of the same names)."""

    max_body_bytes: int = 1 << 20  # request body; larger ones get a 413 before being read
    max_prompt_chars: int = 32_768  # characters of one prompt, checked before tokenizing
    max_sequences: int = MAX_SEQUENCES  # prompts × n × num_beams in one request
    max_downloads: int = 4  # file downloads the gateway streams at once; more get a 429


LIMITS = Limits()

# Extras in the request body, each a GenerationConfig field of the same name unless mapped here.
EXTRA_FIELDS = {
    "top_k": "top_k",
    "min_p": "min_p",
    "typical_p": "typical_p",
    "repetition_penalty": "repetition_penalty",
    "no_repeat_ngram_size": "no_repeat_ngram_size",
    "min_tokens": "min_new_tokens",
    "num_beams": "num_beams",
    "length_penalty": "length_penalty",
    "early_stopping": "early_stopping",
}
# OpenAI fields we accept only at the value that means "off".
NEUTRAL = {
    "best_of": 1,
    "suffix": None,
    "presence_penalty": 0,
    "frequency_penalty": 0,
    "logit_bias": None,
}


@dataclass(frozen=True)
class CompletionRequest:
    model: str  # model id as listed by GET /v1/models
    prompts: tuple[str | list[int], ...]  # one completion (times n) per prompt: text or token ids
    config: runtime.GenerationConfig  # validated settings, the same for every prompt
    controls: dict = field(default_factory=dict)  # control tokens, e.g. {"section": "gospels"}
    logprobs: int | None = None  # None: no logprobs; k: token logprobs plus the top k per token
    stream: bool = False  # answer with server-sent events
    include_usage: bool = False  # streaming: a last chunk with token counts (stream_options)
    echo: bool = False  # the prompt (and its logprobs) in front of each choice
    score_only: bool = False  # `max_tokens: 0` with echo: score the prompt, generate nothing


def parse_completion(body: bytes | str | dict, limits: Limits = LIMITS) -> CompletionRequest:
    """Check an OpenAI completions body (raw JSON bytes, or a dict) and map it onto a validated
    `GenerationConfig`; `RequestError` (a 400 naming the API field) for anything wrong.

    >>> req = parse_completion({"model": "m", "prompt": "In", "temperature": 0, "max_tokens": 8})
    >>> req.config.mode, req.config.max_new_tokens, req.prompts
    ('greedy', 8, ('In',))
    >>> parse_completion(b'{"model": "m", "prompt": "In", "seed": 3}').config.mode
    'sample'
    """
    checked = parse_body(CompletionBody, body)
    for name, neutral in NEUTRAL.items():
        value = getattr(checked, name)
        if value is not None and value != neutral:
            raise RequestError(
                f"`{name}` is not supported by this server, got {shown(value)}", param=name
            )
    prompts = tuple(scoring.prompt_list(checked.prompt))
    for prompt in prompts:
        if isinstance(prompt, str):
            _check_text("prompt", prompt, limits.max_prompt_chars)
        elif len(prompt) > limits.max_prompt_chars:
            raise RequestError(
                f"`prompt` must be at most {limits.max_prompt_chars} token ids, got {len(prompt)}",
                param="prompt",
            )
    score_only = checked.max_tokens == 0
    if score_only and not checked.echo:
        raise RequestError(
            "`max_tokens` must be an int >= 1, or 0 with `echo`: true, got 0", param="max_tokens"
        )
    stop = (checked.stop,) if isinstance(checked.stop, str) else tuple(checked.stop or ())
    for string in stop:
        _check_text("stop", string)
    try:
        config = runtime.GenerationConfig(**_settings(checked, stop)).validate()
    except ValueError as error:
        raise RequestError(api_message(str(error)), param=param_named_in(str(error))) from None
    try:
        check_sequences(len(prompts), config, limits.max_sequences)
    except ValueError as error:
        largest = "num_beams" if config.num_beams > config.num_return_sequences else "n"
        raise RequestError(str(error), param=largest) from None
    options = checked.stream_options
    return CompletionRequest(
        model=checked.model,
        prompts=prompts,
        config=config,
        controls={k: v for k, v in (checked.controls or {}).items() if v is not None},
        logprobs=checked.logprobs,
        stream=bool(checked.stream),
        include_usage=options is not None and options.include_usage,
        echo=bool(checked.echo),
        score_only=score_only,
    )


def _check_text(name: str, text: str, max_chars: int | None = None) -> None:
    """A string within `max_chars` characters, with no lone surrogate (JSON decoded elsewhere
    can carry one; tokenizers cannot take it)."""
    if max_chars is not None and len(text) > max_chars:
        raise RequestError(
            f"`{name}` must be at most {max_chars} characters, got {len(text)}", param=name
        )
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise RequestError(
            f"`{name}` must be valid Unicode, got a lone surrogate at character {error.start}",
            param=name,
        ) from None


def _settings(body: CompletionBody, stop: tuple[str, ...]) -> dict:
    """GenerationConfig keyword arguments from a checked body."""
    # max_tokens 0 (echo, scoring only) generates nothing; the config stays a valid one.
    limit = OPENAI_DEFAULT_MAX_TOKENS if not body.max_tokens else body.max_tokens
    return sampling_settings(body, limit, stop, EXTRA_FIELDS)


def sampling_settings(body, max_new_tokens: int, stop: tuple[str, ...], extras: dict) -> dict:
    """GenerationConfig keyword arguments shared by completions and chat: OpenAI's temperature
    (0 = greedy), top_p, n and seed, and the extra fields `extras` maps to the runtime's names."""
    temperature = 1.0 if body.temperature is None else body.temperature
    settings = {
        "max_new_tokens": max_new_tokens,
        "do_sample": temperature > 0,
        "temperature": float(temperature) if temperature > 0 else 1.0,
        "top_p": 1.0 if body.top_p is None else body.top_p,
        "num_return_sequences": 1 if body.n is None else body.n,
        "seed": body.seed,
        "stop": stop,
    }
    for key, name in extras.items():
        if getattr(body, key) is not None:
            settings[name] = getattr(body, key)
    return settings


# The runtime's names for the API's fields, so that its messages can name the API's.
RUNTIME_NAMES = {
    "max_new_tokens": "max_tokens",
    "num_return_sequences": "n",
    **{runtime_name: key for key, runtime_name in EXTRA_FIELDS.items()},
}


def param_named_in(message: str) -> str | None:
    """The request parameter a runtime message is about (its first `name`), in the API's words.

    >>> param_named_in("`max_new_tokens` must be an int >= 1, got 0")
    'max_tokens'
    """
    if message.count("`") < 2:
        return None
    name = message.split("`")[1]
    return RUNTIME_NAMES.get(name, name)


def api_message(message: str) -> str:
    """A runtime message with its field names in the API's words.

    >>> api_message("`num_return_sequences` must be 1 for greedy decoding, got 2")
    '`n` must be 1 for greedy decoding, got 2'
    """
    for runtime_name, name in RUNTIME_NAMES.items():
        message = message.replace(f"`{runtime_name}`", f"`{name}`")
    return message


# ---- responses -------------------------------------------------------------------------------


def new_id() -> str:
    return f"cmpl-{uuid.uuid4().hex}"


def openai_finish_reason(reason: str | None) -> str | None:
    """OpenAI's finish reason: "stop" (EOS or a stop string) or "length" (token or context cap).

    >>> [openai_finish_reason(r) for r in ("eos", "stop", "length", "context", None)]
    ['stop', 'stop', 'length', 'length', None]
    """
    if reason is None:
        return None
    return "stop" if reason in ("eos", "stop") else "length"


def logprobs_object(tokens, logprobs, alternatives, k: int, chosen=None, start: int = 0) -> dict:
    """OpenAI's legacy logprobs: tokens, token_logprobs, top_logprobs (k per token), text_offset.

    `tokens` are the tokens as they appear in the text (a special token such as EOS is ""), so
    that they join to the text; `alternatives` holds, per token, the model's top (text,
    probability) pairs, which name special tokens as themselves, as does `chosen` (each token's
    own text among them). The chosen token's entry in `top_logprobs` is its `token_logprobs`
    value, so the two never differ. `start` is the character offset of the first token (a
    stream's running offset).

    >>> out = logprobs_object(["a", "b"], [-0.1, -0.2], [[("a", 0.9)], [("b", 0.8)]], 1, start=3)
    >>> out["text_offset"], out["top_logprobs"][1]
    ([3, 4], {'b': -0.2})
    """
    offsets, position = [], start
    for token in tokens:
        offsets.append(position)
        position += len(token)
    top = None
    if k > 0:
        top = []
        for own, logprob, alts in zip(chosen or tokens, logprobs, alternatives):
            row = {text: math.log(prob) if prob > 0 else -math.inf for text, prob in alts[:k]}
            if own in row:
                row[own] = logprob
            top.append(row)
    return {
        "tokens": list(tokens),
        "token_logprobs": list(logprobs),
        "top_logprobs": top,
        "text_offset": offsets,
    }


def completion_response(request_id: str, model: str, choices: list[dict], usage: dict) -> dict:
    return {
        "id": request_id,
        "object": "text_completion",
        "created": int(time.time()),
        "model": model,
        "choices": choices,
        "usage": usage,
    }


def usage(prompt_tokens: int, completion_tokens: int) -> dict:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def stream_chunk(request_id: str, model: str, created: int, choices: list[dict], usage=None):
    chunk = {
        "id": request_id,
        "object": "text_completion",
        "created": created,
        "model": model,
        "choices": choices,
    }
    if usage is not None:
        chunk["usage"] = usage
    return chunk


def token_text(tokenizer, token_id: int, special: bool = False) -> str:
    """One token as text: as the completion shows it (a special token such as EOS is ""), or
    with `special` as itself (as the runtime names alternatives)."""
    return tokenizer.decode([token_id], skip_special_tokens=not special)


def output_choice(output, index: int, tokenizer, logprobs: int | None, alternatives=None) -> dict:
    """A completion choice from a `runtime.GenerationOutput`; `alternatives` per token (top-5
    (text, prob) pairs) come from a stream when `logprobs` > 0."""
    choice = {
        "text": output.text,
        "index": index,
        "logprobs": None,
        "finish_reason": openai_finish_reason(output.finish_reason),
        "scriptorium": {
            "token_ids": output.token_ids,
            "finish_reason": output.finish_reason,
            "score": output.score,
        },
    }
    if logprobs is not None:
        ids = output.token_ids
        choice["logprobs"] = logprobs_object(
            [token_text(tokenizer, t) for t in ids],
            output.logprobs,
            alternatives or [[] for _ in ids],
            logprobs,
            [token_text(tokenizer, t, special=True) for t in ids],
        )
    return choice


def event_choice(event, index: int, tokenizer, logprobs: int | None, offset: int = 0) -> dict:
    """A streamed choice from a `runtime.StreamEvent` (one token, or a whole beam sequence);
    `offset` is the characters of this choice's text streamed before it."""
    ids = [] if event.token_id is None else [event.token_id]
    choice = {
        "text": event.text,
        "index": index,
        "logprobs": None,
        "finish_reason": openai_finish_reason(event.finish_reason),
        "scriptorium": {
            "token_ids": ids,
            "finish_reason": event.finish_reason,
            "alternatives": [list(pair) for pair in event.alternatives],
        },
    }
    if logprobs is not None and ids:
        choice["logprobs"] = logprobs_object(
            [token_text(tokenizer, ids[0])],
            [event.logprob],
            [event.alternatives],
            logprobs,
            [token_text(tokenizer, ids[0], special=True)],
            offset,
        )
    return choice
