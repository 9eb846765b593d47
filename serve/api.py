"""The completions route over `runtime`: request bodies in, the replica's work, response objects
out; and the mapping both routes share (serve/chat.py uses it).

Pure functions, no Ray and no HTTP server, so every rule here is testable on its own:

- `parse_completion(body, limits)` checks an OpenAI `POST /v1/completions` body (serve/protocol.py's
  `CompletionBody`) and returns a `CompletionRequest` holding the `runtime.GenerationConfig` it
  maps to. OpenAI's names map to transformers' ones: `max_tokens` → `max_new_tokens`, `n` →
  `num_return_sequences`, `stop` → `stop`; `temperature` 0 means greedy decoding (as OpenAI
  documents it), any other temperature means sampling at that temperature (OpenAI's default is
  1). The other decoding parameters (Scriptorium's extras in the same body: top-k, beam search
  and the rest) are runtime/parameters.py's, each under its declared request field and mapped by
  `runtime.parameters.from_request`; `controls` ({"section": "gospels"}) picks control tokens.
  With `num_beams` > 1, temperature 0 is beam search and any other temperature beam sampling.
- `complete(gen, request)` / `stream(gen, request)` are the replica's work (serve/replica.py runs
  them, as it runs chat's, in its thread pool): every prompt in turn, `max_tokens` capped by what
  the context leaves after it (`scriptorium.max_tokens` says the cap applied).
- `output_choice` / `event_choice` build a `text_completion`'s choices (serve/protocol.py's
  `CompletionChoice`) from `runtime.GenerationOutput`s / `StreamEvent`s; serve/routes.py puts
  them in the answer's envelope, the same for both routes. Each choice also carries a
  `scriptorium` object with what OpenAI's schema has no field for: the token ids, the runtime's
  own finish reason ("eos", "stop", "length", "context") and, when streaming, the token's top-5
  alternatives. A streamed beam search sends each sequence whole, as the unstreamed answer's
  choice: nothing is final before the search ends.

`logprobs` (an int in [0, 5], as OpenAI's legacy completions) returns the model's own
log-probabilities (before penalties and filters, see runtime/generator.py); `top_logprobs` lists
the model's most likely tokens at each step, and `text_offset` the character offset of each token
in the completion text. `prompt` may also be token ids (a list, or a list of lists); `echo` puts
the prompt in front of each choice, and `max_tokens: 0` with `echo` scores the prompt without
generating (serve/scoring.py). `response_format` (both routes) asks for JSON (`json_object`) or
JSON that matches a schema (`json_schema`), as OpenAI defines them: its schema becomes the
config's `json_schema` (runtime/parameters.py), enforced token by token (runtime/structured.py);
a schema that is not valid JSON Schema, or that uses a keyword the grammar compiler does not
implement, is a 400 naming `response_format` and the problem; `max_tokens` reached inside a
document ends it with finish_reason "length". What is not implemented (`best_of` > 1, `suffix`,
non-zero `presence_penalty`/`frequency_penalty`, `logit_bias`) is refused with a 400 that says so.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import runtime
from runtime.budget import check_sequences
from runtime.parameters import PARAMETERS, from_request
from runtime.request_caps import SERVE_LIMITS, ServeLimits
from runtime.text_generator import ServedGenerator

from . import scoring
from .protocol import (
    DECODING_FIELDS,
    ChoiceExtras,
    CompletionBody,
    CompletionChoice,
    GenerationBody,
    Logprobs,
    RequestError,
    Usage,
    finite_logprob,
    logprob_of,
    parse_body,
)

OPENAI_DEFAULT_MAX_TOKENS = 16

OPENAI_DEFAULT_TEMPERATURE = 1.0  # a request without `temperature` samples at 1
# The runtime's names of the API's fields, so that its messages can name the API's.
RUNTIME_NAMES = {
    parameter.name: parameter.request_field
    for parameter in PARAMETERS
    if parameter.request_field not in (None, parameter.name)
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


def parse_completion(
    body: bytes | str | dict, limits: ServeLimits = SERVE_LIMITS
) -> CompletionRequest:
    """Check an OpenAI completions body (raw JSON bytes, or a dict) and map it onto a validated
    `GenerationConfig`; `RequestError` (a 400 naming the API field) for anything wrong.

    >>> req = parse_completion({"model": "m", "prompt": "In", "temperature": 0, "max_tokens": 8})
    >>> req.config.mode, req.config.max_new_tokens, req.prompts
    ('greedy', 8, ('In',))
    >>> parse_completion(b'{"model": "m", "prompt": "In", "temperature": 0.5}').config.mode
    'sample'
    """
    checked = parse_body(CompletionBody, body)
    prompts = tuple(scoring.prompt_list(checked.prompt))
    for prompt in prompts:
        if isinstance(prompt, str):
            check_text("prompt", prompt, limits.max_prompt_chars)
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
    # max_tokens 0 (echo, scoring only) generates nothing; the config stays a valid one.
    limit = checked.max_tokens or OPENAI_DEFAULT_MAX_TOKENS
    config = generation_config(checked, limit, RUNTIME_NAMES)
    check_sequence_cap(len(prompts), config, limits)
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


def check_sequence_cap(prompts: int, config: runtime.GenerationConfig, limits: ServeLimits):
    """A `RequestError` (naming `n`, or `num_beams` when that is larger) when the request asks
    for more than the server's `max_sequences` (prompts × `n` × `num_beams`), on both routes.

    >>> check_sequence_cap(1, runtime.GenerationConfig(do_sample=True, num_return_sequences=65),
    ...                    SERVE_LIMITS)
    Traceback (most recent call last):
    serve.protocol.RequestError: `n` must be at most 64, got 65
    """
    try:
        check_sequences(prompts, config, limits.max_sequences)
    except ValueError as error:
        largest = "num_beams" if config.num_beams > config.num_return_sequences else "n"
        raise RequestError(str(error), param=largest) from None


def check_text(name: str, text: str, max_chars: int | None = None) -> None:
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


def generation_config(
    body: GenerationBody, max_new_tokens: int, names: dict
) -> runtime.GenerationConfig:
    """The validated GenerationConfig of a checked body, for both routes: its decoding fields
    mapped by their declaration (`runtime.parameters.from_request`: temperature 0 = greedy, any
    other samples at it; absent, OpenAI's default 1), its stop strings, `max_new_tokens` and its
    `cache_salt` (prompts of different salts share no prefix-cache blocks); a runtime refusal
    is a `RequestError` in the API's words (`names`)."""
    stop = (body.stop,) if isinstance(body.stop, str) else tuple(body.stop or ())
    for string in stop:
        check_text("stop", string)
    fields = {key: getattr(body, key) for key in DECODING_FIELDS if key in type(body).model_fields}
    if body.temperature is None:
        fields["temperature"] = OPENAI_DEFAULT_TEMPERATURE
    if body.response_format is not None:
        _check_response_format(body.response_format)
        fields["response_format"] = body.response_format.model_dump(
            by_alias=True, exclude_none=True
        )
    try:
        settings = {**from_request(fields), "max_new_tokens": max_new_tokens, "stop": stop}
        settings["cache_salt"] = body.cache_salt
        return runtime.GenerationConfig(**settings).validate()
    except ValueError as error:
        message = api_message(str(error), names)
        raise RequestError(message, param=param_named_in(str(error), names)) from None


def _check_response_format(response_format) -> None:
    """A `json_schema` member with type "json_schema", and only then."""
    if (response_format.type == "json_schema") != (response_format.json_schema is not None):
        raise RequestError(
            '`response_format.json_schema` must be given with type "json_schema" and only '
            f"then, got type {response_format.type!r} "
            f"{'with' if response_format.json_schema else 'without'} it",
            param="response_format.json_schema",
        )


def param_named_in(message: str, names: dict = RUNTIME_NAMES) -> str | None:
    """The request parameter a runtime message is about (its first `name`), in the API's words
    (`names`: the runtime's names of the fields whose API names differ).

    >>> param_named_in("`max_new_tokens` must be an int >= 1, got 0")
    'max_tokens'
    """
    if message.count("`") < 2:
        return None
    name = message.split("`")[1]
    return names.get(name, name)


def api_message(message: str, names: dict = RUNTIME_NAMES) -> str:
    """A runtime message with its field names in the API's words.

    >>> api_message("`num_return_sequences` must be 1 for greedy decoding, got 2")
    '`n` must be 1 for greedy decoding, got 2'
    """
    for runtime_name, name in names.items():
        message = message.replace(f"`{runtime_name}`", f"`{name}`")
    return message


# ---- responses -------------------------------------------------------------------------------


def openai_finish_reason(reason: str | None) -> str | None:
    """OpenAI's finish reason: "stop" (EOS or a stop string) or "length" (token or context cap).

    >>> [openai_finish_reason(r) for r in ("eos", "stop", "length", "context", None)]
    ['stop', 'stop', 'length', 'length', None]
    """
    if reason is None:
        return None
    return "stop" if reason in ("eos", "stop") else "length"


def logprobs_object(
    tokens, logprobs, alternatives, k: int, chosen=None, start: int = 0
) -> Logprobs:
    """OpenAI's legacy logprobs: tokens, token_logprobs, top_logprobs (k per token), text_offset.

    `tokens` are the tokens as they appear in the text (a special token such as EOS is ""), so
    that they join to the text; `alternatives` holds, per token, the model's top (text,
    probability) pairs, which name special tokens as themselves, as does `chosen` (each token's
    own text among them). The chosen token's entry in `top_logprobs` is its `token_logprobs`
    value, so the two never differ. `start` is the character offset of the first token (a
    stream's running offset). Every log-probability is finite (`protocol.finite_logprob`: an
    alternative whose probability is 0 has `protocol.LOGPROB_FLOOR`).

    >>> out = logprobs_object(["a", "b"], [-0.1, -0.2], [[("a", 0.9)], [("b", 0.8)]], 1, start=3)
    >>> out.text_offset, out.top_logprobs[1]
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
            row = {text: logprob_of(prob) for text, prob in alts[:k]}
            if own in row:
                row[own] = finite_logprob(logprob)
            top.append(row)
    return Logprobs(
        tokens=list(tokens),
        token_logprobs=[finite_logprob(value) for value in logprobs],
        top_logprobs=top,
        text_offset=offsets,
    )


def token_text(tokenizer, token_id: int, special: bool = False) -> str:
    """One token as text: as the completion shows it (a special token such as EOS is ""), or
    with `special` as itself (as the runtime names alternatives)."""
    return tokenizer.decode([token_id], skip_special_tokens=not special)


def _ids_logprobs(tokenizer, ids, logprobs, alternatives, k: int, start: int) -> Logprobs:
    """`logprobs_object` of token ids: each token as the text shows it, and as itself among
    the alternatives."""
    shown = [token_text(tokenizer, t) for t in ids]
    chosen = [token_text(tokenizer, t, special=True) for t in ids]
    return logprobs_object(shown, logprobs, alternatives, k, chosen, start)


def output_choice(
    output, index: int, tokenizer, logprobs: int | None, alternatives=None, start: int = 0
) -> CompletionChoice:
    """A completion choice from a `runtime.GenerationOutput`; `alternatives` per token (top-5
    (text, prob) pairs) come from a stream when `logprobs` > 0; `start` is the text offset of
    its first token (after an echoed prompt already streamed)."""
    extras = ChoiceExtras(
        token_ids=output.token_ids,
        finish_reason=output.finish_reason,
        score=finite_logprob(output.score),
    )
    table = None
    if logprobs is not None:
        ids = output.token_ids
        alternatives = alternatives or [[] for _ in ids]
        table = _ids_logprobs(tokenizer, ids, output.logprobs, alternatives, logprobs, start)
    return CompletionChoice(
        text=output.text,
        index=index,
        logprobs=table,
        finish_reason=openai_finish_reason(output.finish_reason),
        scriptorium=extras,
    )


def event_choice(
    event, index: int, tokenizer, logprobs: int | None, offset: int = 0
) -> CompletionChoice:
    """A streamed choice from a `runtime.StreamEvent` (one token, or a last flush of text
    without one); `offset` is the characters of this choice's text streamed before it."""
    ids = [] if event.token_id is None else [event.token_id]
    extras = ChoiceExtras(
        token_ids=ids, finish_reason=event.finish_reason, alternatives=event.alternatives
    )
    table = None
    if logprobs is not None and ids:
        table = _ids_logprobs(
            tokenizer, ids, [event.logprob], [event.alternatives], logprobs, offset
        )
    return CompletionChoice(
        text=event.text,
        index=index,
        logprobs=table,
        finish_reason=openai_finish_reason(event.finish_reason),
        scriptorium=extras,
    )


# ---- the replica's work ----------------------------------------------------------------------


def complete(gen: ServedGenerator, request: CompletionRequest) -> dict:
    """The choices and usage of a non-streamed completion, every prompt in turn (so a prompt's
    output does not depend on the request's other prompts); `ValueError` for a setting or prompt
    the runtime refuses."""
    copies = request.config.num_return_sequences
    if request.score_only:
        return scoring.scored_completion(
            gen, request.prompts, request.logprobs, copies, request.controls
        )
    config, controls = request.config, request.controls
    choices, prompt_tokens, completion_tokens = [], 0, 0
    for p, prompt in enumerate(request.prompts):
        tokens, cap = _room(gen, prompt, request)
        prompt_tokens += tokens
        if request.logprobs:  # top logprobs come with the stream's per-token alternatives
            rows = collect(gen.stream(prompt, config, controls), copies)
        else:
            rows = [(o, None) for o in gen.generate([prompt], config, controls)]
        for row, (output, alternatives) in enumerate(rows):
            choice = output_choice(
                output, p * copies + row, gen.tokenizer, request.logprobs, alternatives
            )
            if request.echo:
                choice = scoring.echo_choice(gen, prompt, choice, request.logprobs, controls)
            choice.scriptorium.max_tokens = cap
            choices.append(choice)
            completion_tokens += len(output.token_ids)
    return {"choices": choices, "usage": Usage.of(prompt_tokens, completion_tokens)}


def stream(gen: ServedGenerator, request: CompletionRequest) -> Iterator[dict]:
    """{"choice": …} per token of every prompt in turn (an echoed prompt first, once per
    choice), then {"usage": …}; `ValueError` for a setting or prompt the runtime refuses."""
    copies = request.config.num_return_sequences
    if request.score_only:
        result = complete(gen, request)
        for choice in result["choices"]:
            yield {"choice": choice}
        yield {"usage": result["usage"]}
        return
    prompt_tokens = completion_tokens = 0
    for p, prompt in enumerate(request.prompts):
        tokens, cap = _room(gen, prompt, request)
        prompt_tokens += tokens
        offsets = [0] * copies  # characters of each choice's text sent so far
        if request.echo:  # the prompt (and its logprobs) first, once per choice
            head = scoring.echo_choice(gen, prompt, None, request.logprobs, request.controls)
            for copy in range(copies):
                offsets[copy] = len(head.text)
                yield {"choice": head.replaced(index=p * copies + copy, finish_reason=None)}
        if request.config.num_beams > 1:  # nothing is final before the search ends
            outputs = gen.generate([prompt], request.config, request.controls)
            for row, output in enumerate(outputs):
                choice = output_choice(
                    output, p * copies + row, gen.tokenizer, request.logprobs, start=offsets[row]
                )
                choice.scriptorium.max_tokens = cap
                completion_tokens += len(output.token_ids)
                yield {"choice": choice}
            continue
        events = gen.stream(prompt, request.config, request.controls)
        try:
            for event in events:
                completion_tokens += event.token_id is not None  # not a last flush of text
                choice = event_choice(
                    event, p * copies + event.index, gen.tokenizer, request.logprobs,
                    offsets[event.index],
                )  # fmt: skip
                offsets[event.index] += len(event.text)
                if event.finish_reason:
                    choice.scriptorium.max_tokens = cap
                yield {"choice": choice}
        finally:
            events.close()
    yield {"usage": Usage.of(prompt_tokens, completion_tokens)}


def _room(
    gen: ServedGenerator, prompt: str | list[int], request: CompletionRequest
) -> tuple[int, int]:
    """(prompt tokens, tokens that can follow them): `max_tokens`, capped by what the context
    leaves, as the runtime caps it. Raises ValueError for a prompt too long."""
    if isinstance(prompt, str):
        tokens = len(gen.encode_prompt(prompt, request.controls))
    else:
        scoring.check_token_prompt(gen, prompt)
        tokens = len(prompt)
    room = gen.context_length - (1 if gen.task == "seq2seq" else tokens)
    return tokens, min(request.config.max_new_tokens, room)


def collect(events, copies: int, prompt_tokens: int = 0) -> list[tuple]:
    """(runtime.GenerationOutput, per-token alternatives) per sequence of one stream: what
    `generate` returns, plus the alternatives only a stream gives."""
    rows = [(runtime.GenerationOutput("", [], [], "", 0, prompt_tokens), []) for _ in range(copies)]
    for event in events:
        output, alternatives = rows[event.index]
        output.add(event)
        if event.token_id is not None:
            alternatives.append(event.alternatives)
    return rows
