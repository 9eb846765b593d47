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
in the completion text. What is not implemented (`echo`, `best_of` > 1, `suffix`, non-zero
`presence_penalty`/`frequency_penalty`, `logit_bias`) is refused with a 400 that says so.
"""

from __future__ import annotations

import math
import time
import uuid
from dataclasses import dataclass, field

import runtime

MAX_LOGPROBS = 5  # OpenAI's legacy limit, and the number of alternatives the runtime streams
MAX_STOP_STRINGS = 4  # OpenAI's limit
MAX_SEQUENCES = 64  # prompts × n in one request, so one request cannot hold a replica for long
OPENAI_DEFAULT_MAX_TOKENS = 16

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
ACCEPTED = {
    "model",
    "prompt",
    "max_tokens",
    "temperature",
    "top_p",
    "seed",
    "stop",
    "n",
    "logprobs",
    "stream",
    "stream_options",
    "user",
    "controls",
    *EXTRA_FIELDS,
}
# OpenAI fields we accept only at the value that means "off".
NEUTRAL = {
    "echo": False,
    "best_of": 1,
    "suffix": None,
    "presence_penalty": 0,
    "frequency_penalty": 0,
    "logit_bias": None,
}


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


@dataclass(frozen=True)
class CompletionRequest:
    model: str  # model id as listed by GET /v1/models
    prompts: tuple[str, ...]  # one completion (times n) per prompt
    config: runtime.GenerationConfig  # validated settings, the same for every prompt
    controls: dict = field(default_factory=dict)  # control tokens, e.g. {"section": "gospels"}
    logprobs: int | None = None  # None: no logprobs; k: token logprobs plus the top k per token
    stream: bool = False  # answer with server-sent events
    include_usage: bool = False  # streaming: a last chunk with token counts (stream_options)


def parse_completion(body) -> CompletionRequest:
    """Check an OpenAI completions body and map it onto a validated `GenerationConfig`.

    >>> req = parse_completion({"model": "m", "prompt": "In", "temperature": 0, "max_tokens": 8})
    >>> req.config.mode, req.config.max_new_tokens, req.prompts
    ('greedy', 8, ('In',))
    >>> parse_completion({"model": "m", "prompt": "In", "seed": 3}).config.mode
    'sample'
    """
    if not isinstance(body, dict):
        raise RequestError("the request body must be a JSON object")
    for name, neutral in NEUTRAL.items():
        if body.get(name, neutral) not in (neutral, None):
            raise RequestError(
                f"`{name}` is not supported by this server, got {body[name]!r}", param=name
            )
    unknown = sorted(set(body) - ACCEPTED - set(NEUTRAL))
    if unknown:
        raise RequestError(f"`{unknown[0]}` is not a completions parameter", param=unknown[0])
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise RequestError(f"`model` must be a model id string, got {model!r}", param="model")
    prompt = body.get("prompt")
    prompts = (prompt,) if isinstance(prompt, str) else prompt
    if not isinstance(prompts, list | tuple) or not prompts:
        raise RequestError(
            f"`prompt` must be a string or a non-empty list of strings, got {prompt!r}",
            param="prompt",
        )
    if not all(isinstance(p, str) for p in prompts):
        raise RequestError(
            "`prompt` must be a string or a list of strings (token-id prompts are not supported)",
            param="prompt",
        )
    settings = _settings(body)
    try:
        config = runtime.GenerationConfig(**settings).validate()
    except (ValueError, TypeError) as error:
        raise RequestError(str(error), param=param_named_in(str(error))) from error
    sequences = len(prompts) * config.num_return_sequences
    if sequences > MAX_SEQUENCES:
        raise RequestError(
            f"`prompt` × `n` must be at most {MAX_SEQUENCES} sequences, got {sequences}",
            param="n",
        )
    logprobs = body.get("logprobs")
    if logprobs is not None and (
        not isinstance(logprobs, int)
        or isinstance(logprobs, bool)
        or not 0 <= logprobs <= MAX_LOGPROBS
    ):
        raise RequestError(
            f"`logprobs` must be an int in [0, {MAX_LOGPROBS}] or null, got {logprobs!r}",
            param="logprobs",
        )
    controls = body.get("controls") or {}
    if not isinstance(controls, dict):
        raise RequestError(
            f'`controls` must be an object like {{"section": "gospels"}}, got {controls!r}',
            param="controls",
        )
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise RequestError(f"`stream` must be a bool, got {stream!r}", param="stream")
    options = body.get("stream_options") or {}
    if not isinstance(options, dict):
        raise RequestError(
            f"`stream_options` must be an object, got {options!r}", param="stream_options"
        )
    return CompletionRequest(
        model=model,
        prompts=tuple(prompts),
        config=config,
        controls=dict(controls),
        logprobs=logprobs,
        stream=stream,
        include_usage=bool(options.get("include_usage", False)),
    )


def _settings(body: dict) -> dict:
    """GenerationConfig keyword arguments from the body (types are checked by `validate`)."""
    temperature = body.get("temperature")
    temperature = 1.0 if temperature is None else temperature
    if not isinstance(temperature, int | float) or isinstance(temperature, bool):
        raise RequestError(
            f"`temperature` must be a number >= 0, got {temperature!r}", param="temperature"
        )
    if not math.isfinite(temperature) or temperature < 0:
        raise RequestError(
            f"`temperature` must be a number >= 0, got {temperature!r}", param="temperature"
        )
    max_tokens = body.get("max_tokens")
    stop = body.get("stop")
    if stop is None:
        stop = ()
    elif isinstance(stop, str):
        stop = (stop,)
    elif isinstance(stop, list) and len(stop) <= MAX_STOP_STRINGS:
        stop = tuple(stop)
    else:
        raise RequestError(
            f"`stop` must be a string or a list of at most {MAX_STOP_STRINGS} strings, "
            f"got {stop!r}",
            param="stop",
        )
    settings = {
        "max_new_tokens": OPENAI_DEFAULT_MAX_TOKENS if max_tokens is None else max_tokens,
        "do_sample": temperature > 0,
        "temperature": float(temperature) if temperature > 0 else 1.0,
        "top_p": 1.0 if body.get("top_p") is None else body["top_p"],
        "num_return_sequences": 1 if body.get("n") is None else body["n"],
        "seed": body.get("seed"),
        "stop": stop,
    }
    settings.update(
        {field_: body[key] for key, field_ in EXTRA_FIELDS.items() if body.get(key) is not None}
    )
    return settings


OPENAI_NAMES = {"max_new_tokens": "max_tokens", "num_return_sequences": "n"}


def param_named_in(message: str) -> str | None:
    """The request parameter a runtime message is about (its first `name`), in OpenAI's words."""
    if message.count("`") < 2:
        return None
    name = message.split("`")[1]
    reverse = {v: k for k, v in EXTRA_FIELDS.items()}
    return OPENAI_NAMES.get(name) or reverse.get(name) or name


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


def logprobs_object(tokens, logprobs, alternatives, k: int) -> dict:
    """OpenAI's legacy logprobs: tokens, token_logprobs, top_logprobs (k per token), text_offset.

    `alternatives` holds, per token, the model's top (text, probability) pairs (or nothing).
    """
    offsets, position = [], 0
    for token in tokens:
        offsets.append(position)
        position += len(token)
    top = None
    if k > 0:
        top = [
            {text: math.log(prob) if prob > 0 else -math.inf for text, prob in alts[:k]}
            for alts in alternatives
        ]
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


def token_text(tokenizer, token_id: int) -> str:
    """One token as text, special tokens included (so EOS shows as itself)."""
    return tokenizer.decode([token_id], skip_special_tokens=False)


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
        tokens = [token_text(tokenizer, t) for t in output.token_ids]
        choice["logprobs"] = logprobs_object(
            tokens, output.logprobs, alternatives or [[] for _ in tokens], logprobs
        )
    return choice


def event_choice(event, index: int, tokenizer, logprobs: int | None) -> dict:
    """A streamed choice from a `runtime.StreamEvent` (one token, or a whole beam sequence)."""
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
            [token_text(tokenizer, ids[0])], [event.logprob], [event.alternatives], logprobs
        )
    return choice
