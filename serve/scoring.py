"""Scoring through the OpenAI legacy completions API: token-id prompts and `echo`.

Pure functions over a loaded `runtime.Generator` (no Ray, no HTTP), which the completions route
calls once its request is parsed:

- `prompt_list(prompt)` reads OpenAI's `prompt` in its four shapes (a string, a list of strings,
  a list of token ids, a list of lists of token ids) into a list of prompts, each a str or a list
  of ints, which `gen.generate` accepts as they are.
- `check_token_prompt(gen, ids)` refuses ids the model cannot read (outside its vocabulary, or
  too long to leave room in its context).
- `echo_choice(gen, prompt, choice, logprobs, controls)` puts the prompt in front of a completion
  choice, as OpenAI's `echo: true`: the text becomes prompt + completion; with `logprobs`, the
  prompt's tokens come first with their log-probabilities (`gen.score_ids`), the first one null
  when nothing precedes it, and `text_offset` runs over the whole echoed text. With `choice=None`
  it builds the choice of `max_tokens: 0` (the prompt alone, finish reason "length"), which is how
  evaluation harnesses ask for a log-likelihood; `scored_completion` answers a whole such request.

Which prompt tokens are shown: a token-id prompt shows every id it gave (the first has no
log-probability). A text prompt shows the tokens of its text; tokens the model adds in front of
it (BOS, control tokens) are context, not shown, so the shown tokens join to the prompt text and
each of them has a log-probability given that context. Seq2seq models score targets, not sources,
so `echo` needs a causal LM.
"""

from __future__ import annotations

from runtime.text_generator import ServedGenerator

from .protocol import CompletionChoice, Logprobs, Usage, finite_logprob


def prompt_list(prompt) -> list[str | list[int]]:
    """OpenAI's `prompt` as a list of prompts: strings, or lists of token ids.

    >>> prompt_list("In"), prompt_list([5, 6]), prompt_list([[5], [6, 7]])
    (['In'], [[5, 6]], [[5], [6, 7]])
    """
    if isinstance(prompt, str):
        return [prompt]
    if isinstance(prompt, list | tuple) and prompt:
        if all(_is_id(i) for i in prompt):
            return [list(prompt)]
        if all(isinstance(p, str) for p in prompt):
            return list(prompt)
        if all(isinstance(p, list | tuple) and p and all(_is_id(i) for i in p) for p in prompt):
            return [list(p) for p in prompt]
    shown = repr(prompt) if len(repr(prompt)) <= 60 else repr(prompt)[:57] + "..."
    raise ValueError(
        "`prompt` must be a string, a non-empty list of strings, a non-empty list of token ids "
        f"or a non-empty list of non-empty lists of token ids, got {shown}"
    )


def _is_id(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def check_token_prompt(gen: ServedGenerator, ids: list[int]) -> None:
    """Raise ValueError unless `ids` is a prompt the model can read and continue."""
    vocab = gen.manifest.vocab_size or gen.tokenizer.get_vocab_size()
    if max(ids) >= vocab:
        raise ValueError(f"`prompt` token ids must be below {vocab}, got {max(ids)}")
    if gen.task != "seq2seq" and len(ids) >= gen.context_length:
        raise ValueError(
            f"`prompt` is {len(ids)} tokens; the model's context is {gen.context_length} tokens, "
            "which leaves no room to generate"
        )


def prompt_logprobs(
    gen: ServedGenerator, prompt, logprobs: int | None, controls=None
) -> tuple[str, Logprobs | None]:
    """The echoed text of `prompt` and, with `logprobs` (top count k), OpenAI's logprobs object
    of its shown tokens (text offsets from 0)."""
    if gen.task == "seq2seq":
        raise ValueError("`echo` needs a causal LM: a seq2seq model does not score its source")
    if isinstance(prompt, str):
        ids = gen.encode_prompt(prompt, controls)
        shown = len(gen.tokenizer.encode(prompt, add_special_tokens=False).ids)
        context, text = len(ids) - shown, prompt
    else:
        check_token_prompt(gen, prompt)
        ids, context = list(prompt), 0
        text = gen.tokenizer.decode(ids, skip_special_tokens=False)
    if logprobs is None:
        return text, None
    start = max(context, 1)
    score = gen.score_ids(ids, start=start, top=logprobs) if start < len(ids) else None
    tokens = [gen.tokenizer.decode([i], skip_special_tokens=False) for i in ids[context:]]
    values = [None] * (start - context) + [
        finite_logprob(v) for v in (score.logprobs if score else [])
    ]
    top = None
    if logprobs > 0:
        top = [None] * (start - context) + (
            [{t: finite_logprob(v) for t, v in alts} for alts in score.alternatives]
            if score
            else []
        )
    return text, Logprobs(
        tokens=tokens, token_logprobs=values, top_logprobs=top, text_offset=_offsets(tokens, 0)
    )


def echo_choice(
    gen: ServedGenerator,
    prompt,
    choice: CompletionChoice | None,
    logprobs: int | None,
    controls=None,
) -> CompletionChoice:
    """`choice` (an OpenAI completion choice of `prompt`) with the prompt echoed in front; with
    `choice=None`, the choice of `max_tokens: 0`."""
    text, head = prompt_logprobs(gen, prompt, logprobs, controls)
    if choice is None:
        table = None
        if logprobs is not None:
            top = [] if logprobs > 0 else None
            table = Logprobs(tokens=[], token_logprobs=[], top_logprobs=top, text_offset=[])
        choice = CompletionChoice(text="", index=0, logprobs=table, finish_reason="length")
    echoed = choice.replaced(text=text + choice.text)
    if head is not None and choice.logprobs is not None:
        tail = choice.logprobs
        top = None
        if head.top_logprobs is not None:
            top = head.top_logprobs + list(tail.top_logprobs or [])
        echoed.logprobs = Logprobs(
            tokens=head.tokens + tail.tokens,
            token_logprobs=head.token_logprobs + tail.token_logprobs,
            top_logprobs=top,
            # Prompt tokens from 0; completion tokens from where the echoed prompt text ends.
            text_offset=head.text_offset + _offsets(tail.tokens, len(text)),
        )
    return echoed


def _offsets(tokens, start: int) -> list[int]:
    """Character offset of each token in the text they join to, counted from `start`."""
    offsets = []
    for token in tokens:
        offsets.append(start)
        start += len(token)
    return offsets


def prompt_token_count(gen: ServedGenerator, prompt, controls=None) -> int:
    """Tokens the model reads for `prompt` (usage's `prompt_tokens`)."""
    if isinstance(prompt, str):
        return len(gen.encode_prompt(prompt, controls))
    return len(prompt)


def scored_completion(
    gen: ServedGenerator, prompts, logprobs: int | None, copies: int = 1, controls=None
) -> dict:
    """The choices and usage of `max_tokens: 0` with `echo`: each prompt echoed with its
    log-probabilities, `copies` (`n`) choices per prompt, no completion tokens."""
    choices, prompt_tokens = [], 0
    for p, prompt in enumerate(prompts):
        choice = echo_choice(gen, prompt, None, logprobs, controls)
        choices += [choice.replaced(index=p * copies + c) for c in range(copies)]
        prompt_tokens += prompt_token_count(gen, prompt, controls)
    return {"choices": choices, "usage": Usage.of(prompt_tokens, 0)}
