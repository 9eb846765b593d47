"""Search loops: greedy / sampling (`TokenSearch`) and beam search (`beam_search`).

They drive a model from `runtime.models` (start → step → select) and keep the search state:
sequences, scores, which rows are finished. Picking a token from scores is delegated to pure
functions: `runtime.processors` (history-dependent) and `runtime.sampling` (filters, draws).
This module never decodes text; stop strings are checked by the caller through `finish()`.
With a `json_schema` (or `tool_calls`, runtime/tools.py's grammar with JSON inside) in its
config, a `TokenSearch` keeps each row to that schema: each step
its rows' allowed tokens (runtime/structured.py, `JsonRows`) go to the argmax or the sampler,
which choose among them only, and the chosen tokens advance the rows' matchers.
Both loops stop with `runtime.cancel.Cancelled` between steps once their caller's cancel event
is set (`runtime.cancel.cancel_when`), and refuse scores with no finite maximum
(`NonFiniteScores`: NaN or +inf logits, or a row with every token removed) rather than pick a
token from them.

Semantics follow transformers' `generate`: greedy applies processors to raw logits; beam search
applies them to log-softmax scores, keeps `2 * num_beams` candidates per step, scores finished
hypotheses by `sum logprob / generated_length ** length_penalty` and stops by the same
`early_stopping` rules.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from . import cancel, sampling
from .processors import apply_processors
from .structured import JsonRows

NEG = np.float32(-1.0e9)  # transformers' "finished / impossible" score offset


class NonFiniteScores(RuntimeError):
    """A row's scores have no finite maximum: the model's logits or a processor failed."""


def check_finite(scores: np.ndarray, rows: np.ndarray, index: int) -> None:
    """Raise `NonFiniteScores` when one of `rows` (bool (N,)) of `scores` (N, V) has no finite
    maximum (a NaN, a +inf, or every entry -inf)."""
    best = scores.max(axis=1)  # (N,)
    bad = np.flatnonzero(rows & ~np.isfinite(best))
    if len(bad):
        raise NonFiniteScores(
            f"the scores of row {bad[0]} at step {index} are not finite (their maximum is "
            f"{best[bad[0]]}): the model's logits or a logits processor failed"
        )


def _check_allowed(scores: np.ndarray, allowed: list, index: int) -> None:
    """Raise `NonFiniteScores` when a row's processors removed every token its JSON Schema
    allows (a minimum length that forbids the end of a finished document, a banned n-gram)."""
    for row, ids in enumerate(allowed):
        if ids is not None and not np.isfinite(scores[row].take(ids).max()):
            raise NonFiniteScores(
                f"row {row} at step {index} has no token left that its JSON Schema allows: "
                "the logits processors (min_new_tokens, no_repeat_ngram_size, suppressed "
                "tokens) removed them all"
            )


def log_normalizer(logits: np.ndarray) -> np.ndarray:
    """Row-wise log-sum-exp of (N, V) float32 logits, (N, 1): log-softmax is logits minus it."""
    top = logits.max(axis=1, keepdims=True)  # (N, 1)
    weights = np.subtract(logits, top, dtype=np.float32)  # (N, V)
    np.exp(weights, out=weights)
    return top + np.log(weights.sum(axis=1, keepdims=True))


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """Row-wise log-softmax of (N, V) float32 logits."""
    return logits - log_normalizer(logits)


@dataclass
class Step:
    """One decoding step for every row of a `TokenSearch`."""

    index: int  # 0 for the first generated token
    tokens: np.ndarray  # (N,) chosen token; pad for rows already finished before this step
    logprobs: np.ndarray  # (N,) the model's log-probability of the chosen token (raw logits)
    active: np.ndarray  # (N,) bool: the row was still generating at this step
    alternatives: tuple[np.ndarray, np.ndarray] | None  # top log-probs and ids, (N, A) each


class TokenSearch:
    """Greedy decoding or sampling over N rows; iterate it to get one `Step` per token.

    Rows end on EOS (any of them when `eos_token_id` is a tuple), after `max_steps` tokens, or
    when the caller calls `finish(row)` (stop strings). Iteration ends when every row has
    ended; closing the iterator early stops the work at once. A config's `json_schema` or
    `tool_calls` needs the model's `tokenizer` (its tokens are what the grammar allows or not).
    """

    def __init__(
        self,
        model,
        input_ids: np.ndarray,
        attention_mask: np.ndarray,
        config,
        *,
        history: np.ndarray,
        history_mask: np.ndarray,
        eos_token_id: int | tuple[int, ...] | None,
        pad_token_id: int,
        max_steps: int,
        rng: np.random.Generator,
        alternatives: int = 0,
        tokenizer=None,
    ):
        self.model = model
        self.input_ids = input_ids
        self.attention_mask = attention_mask
        self.config = config
        self.history = history  # (N, T) tokens the processors see
        self.history_mask = history_mask  # (N, T) bool, False on padding
        self.eos = eos_token_id
        # (E,) the ending ids, for a comparison that costs microseconds (np.isin sorts)
        self._ends = None if eos_token_id is None else np.array(eos_token_id).reshape(-1)
        self.pad = pad_token_id
        self.max_steps = max_steps
        self.rng = rng
        self.alternatives = alternatives
        self.done = np.zeros(history.shape[0], dtype=bool)
        self.sampler = (
            sampling.Sampler(
                temperature=config.temperature,
                top_k=config.top_k,
                top_p=config.top_p,
                min_p=config.min_p,
                typical_p=config.typical_p,
            )
            if config.do_sample
            else None
        )
        self.json_rows = None
        if config.json_schema is not None or config.tool_calls is not None:
            if tokenizer is None:
                raise ValueError("`json_schema` needs the model's tokenizer, got none")
            ends = () if self._ends is None else tuple(self._ends.tolist())
            text, kind = (
                (config.json_schema, "schema")
                if config.tool_calls is None
                else (config.tool_calls.lark(), "lark")
            )
            self.json_rows = JsonRows(text, tokenizer, ends, len(self.done), kind)

    def finish(self, row: int) -> None:
        self.done[row] = True

    def __iter__(self) -> Iterator[Step]:
        rows = self.history.shape[0]
        # Prefill each distinct prompt once, then repeat its cache for its samples.
        logits, state = self.model.start(self.input_ids, self.attention_mask)
        if logits.shape[0] != rows:
            repeat = np.repeat(np.arange(logits.shape[0]), rows // logits.shape[0])
            logits, state = logits[repeat], self.model.select(state, repeat)
        stop = cancel.current_event()
        for index in range(self.max_steps):
            cancel.check(stop)
            step = self.pick(logits, index)
            yield step
            if self.ended(index):
                return
            logits, state = self.model.step(step.tokens, state)

    def pick(self, logits: np.ndarray, index: int, normalizer=None) -> Step:
        """Choose step `index`'s tokens from the rows' logits (N, V) and extend the history.

        `__iter__` calls it with the model's logits; runtime/engine.py calls it with this
        search's rows of a batch that other searches share, and their `normalizer` (N,) (the
        row-wise log-sum-exp, computed once for the whole batch: each row's is its own).
        """
        rows = self.history.shape[0]
        # Only the chosen tokens' and the alternatives' log-probabilities are reported, so
        # the (N, V) log-softmax is never formed.
        if normalizer is None:
            normalizer = log_normalizer(logits)[:, 0]  # (N,)
        scores = apply_processors(
            logits, self.history, self.history_mask, self.config, index, self.eos
        )
        active = ~self.done
        check_finite(scores, active, index)
        allowed = None if self.json_rows is None else self.json_rows.allowed(active)
        if allowed is not None and scores is not logits:  # processors may have removed tokens
            _check_allowed(scores, allowed, index)
        if self.sampler is None:
            tokens = sampling.greedy(scores, allowed)
        elif allowed is None:
            tokens = self.sampler(scores, self.rng)
        else:
            tokens = self.sampler(scores, self.rng, allowed)
        tokens = np.where(active, tokens, self.pad).astype(np.int64)  # (N,)
        if self.json_rows is not None:
            self.json_rows.advance(tokens, active)
        chosen = logits[np.arange(rows), tokens] - normalizer
        top = None
        if self.alternatives:
            values, ids = sampling.top_k_values(logits, self.alternatives)  # (N, A) each
            top = (values - normalizer[:, None], ids)
        if self._ends is not None:
            self.done |= (tokens[:, None] == self._ends).any(axis=1)  # (N, E) -> (N,)
        self.history = np.concatenate([self.history, tokens[:, None]], axis=1)  # (N, T + 1)
        self.history_mask = np.concatenate([self.history_mask, active[:, None]], axis=1)
        return Step(index, tokens, chosen, active, top)

    def ended(self, index: int) -> bool:
        """Whether the search is over after step `index` (every row ended, or the step limit)."""
        return bool(self.done.all()) or index + 1 == self.max_steps


@dataclass
class Hypothesis:
    tokens: np.ndarray  # generated tokens (EOS included when it ended on EOS)
    logprobs: np.ndarray  # the model's log-probability of each token (raw logits)
    score: float  # sum of log-probs / length ** length_penalty
    finished_on_eos: bool


def beam_search(
    model,
    input_ids: np.ndarray,
    attention_mask: np.ndarray,
    config,
    *,
    prompt_history: np.ndarray,
    prompt_mask: np.ndarray,
    eos_token_id: int | None,
    max_steps: int,
    rng: np.random.Generator,
) -> list[list[Hypothesis]]:
    """Beam search for B prompts: per prompt, `num_return_sequences` hypotheses, best first.

    `prompt_history` (B, T) is what processors see before the first token (the padded prompt of a
    causal LM, the decoder start token of a seq2seq model); `prompt_mask` marks its real tokens.
    With `config.do_sample`, candidates are drawn without replacement from the filtered scores.
    """
    batch, beams = input_ids.shape[0], config.num_beams
    keep = max(2, 1 + (eos_token_id is not None)) * beams  # candidates per prompt and step
    logits, state = model.start(input_ids, attention_mask)
    flat = np.repeat(np.arange(batch), beams)  # (B*beams,)
    logits, state = logits[flat], model.select(state, flat)

    history = prompt_history[flat]  # (B*beams, T)
    history_mask = prompt_mask[flat]
    running = _Beams(
        tokens=np.zeros((batch, beams, 0), dtype=np.int64),
        logprobs=np.zeros((batch, beams, 0), dtype=np.float32),
        scores=np.zeros((batch, beams), dtype=np.float32),
    )
    running.scores[:, 1:] = NEG  # all beams start identical: only the first may expand
    finished: list[list[Hypothesis]] = [[] for _ in range(batch)]
    improvable = np.ones(batch, dtype=bool)
    stop = cancel.current_event()
    for index in range(max_steps):
        cancel.check(stop)
        model_logprobs = log_softmax(logits)  # (B*beams, V)
        scores = _beam_scores(model_logprobs, history, history_mask, config, index, eos_token_id)
        candidates = _candidates(
            scores, model_logprobs, running.scores, keep, config, eos_token_id, rng
        )
        last_step = index + 1 == max_steps
        ends = candidates.hits_eos | last_step  # (B, keep)
        length = index + 1  # generated tokens including this one
        _collect_finished(finished, candidates, ends, running, improvable, length, config)
        running, source_beam = _advance(running, candidates, ends)

        improvable &= _can_improve(finished, running.scores, length, config, max_steps)
        all_full = all(len(f) >= beams for f in finished)
        if (
            last_step
            or ends.all()
            or not improvable.any()
            or (config.early_stopping is True and all_full)
        ):
            break
        next_tokens = running.tokens[:, :, -1]  # (B, beams)
        rows = (source_beam + np.arange(batch)[:, None] * beams).reshape(-1)  # (B*beams,)
        history = np.concatenate([history[rows], next_tokens.reshape(-1, 1)], axis=1)
        history_mask = np.concatenate(
            [history_mask[rows], np.ones((batch * beams, 1), dtype=bool)], axis=1
        )
        state = model.select(state, rows)
        logits, state = model.step(next_tokens.reshape(-1), state)

    return [sorted(f, key=lambda h: -h.score)[: config.num_return_sequences] for f in finished]


@dataclass
class _Beams:
    """The running beams of B prompts: their tokens and the tokens' log-probs (B, beams, t), and
    their summed scores (B, beams)."""

    tokens: np.ndarray
    logprobs: np.ndarray
    scores: np.ndarray


@dataclass
class _Candidates:
    """The `keep` best continuations of each prompt over all its beams, each (B, keep): the
    summed score, the beam it extends, its token, the model's log-prob of that token, and
    whether the token is EOS."""

    scores: np.ndarray
    beam: np.ndarray
    token: np.ndarray
    logprob: np.ndarray
    hits_eos: np.ndarray


def _beam_scores(model_logprobs, history, history_mask, config, index, eos_token_id) -> np.ndarray:
    """The processed (and, when sampling, filtered) scores of every beam's next token."""
    scores = apply_processors(model_logprobs, history, history_mask, config, index, eos_token_id)
    check_finite(scores, np.ones(len(scores), dtype=bool), index)
    if not config.do_sample:
        return scores
    return sampling.filter_logits(
        scores,
        temperature=config.temperature,
        top_k=config.top_k,
        top_p=config.top_p,
        min_p=config.min_p,
        typical_p=config.typical_p,
        min_tokens_to_keep=2,
    )


def _candidates(
    scores, model_logprobs, running_scores, keep, config, eos_token_id, rng
) -> _Candidates:
    """The best (or, when sampling, drawn) `keep` continuations of each prompt."""
    batch, beams = running_scores.shape
    vocab = scores.shape[1]
    total = (scores.reshape(batch, beams, vocab) + running_scores[:, :, None]).reshape(
        batch, beams * vocab
    )  # (B, beams*V)
    if not config.do_sample:
        cand_scores, cand_ids = sampling.top_k_values(total, keep)  # (B, keep)
    else:
        cand_ids = _sample_without_replacement(total, keep, rng)
        cand_scores = np.take_along_axis(total, cand_ids, axis=1)
    cand_token = cand_ids % vocab
    return _Candidates(
        scores=cand_scores,
        beam=cand_ids // vocab,
        token=cand_token,
        logprob=model_logprobs.reshape(batch, beams * vocab)[np.arange(batch)[:, None], cand_ids],
        hits_eos=cand_token == eos_token_id
        if eos_token_id is not None
        else np.zeros_like(cand_token, bool),
    )


def _collect_finished(
    finished: list[list[Hypothesis]],
    candidates: _Candidates,
    ends: np.ndarray,
    running: _Beams,
    improvable: np.ndarray,
    length: int,
    config,
) -> None:
    """Add the candidates that end here to `finished`: only those ranked within the top `beams`
    may finish, and only for prompts that can still improve."""
    beams = config.num_beams
    for b in range(len(finished)):
        if not improvable[b] or (config.early_stopping is True and len(finished[b]) >= beams):
            continue
        for rank in range(beams):
            if not ends[b, rank] or candidates.scores[b, rank] <= NEG / 2:
                continue
            beam = candidates.beam[b, rank]
            hypothesis = Hypothesis(
                tokens=np.append(running.tokens[b, beam], candidates.token[b, rank]),
                logprobs=np.append(running.logprobs[b, beam], candidates.logprob[b, rank]),
                score=float(candidates.scores[b, rank]) / (length**config.length_penalty),
                finished_on_eos=bool(candidates.hits_eos[b, rank]),
            )
            _add_hypothesis(finished[b], hypothesis, beams)


def _advance(
    running: _Beams, candidates: _Candidates, ends: np.ndarray
) -> tuple[_Beams, np.ndarray]:
    """The next running beams, the best `beams` candidates that did not end, and the beam
    (B, beams) each extends."""
    beams = running.scores.shape[1]
    running_candidates = candidates.scores + ends.astype(np.float32) * NEG
    order = np.argsort(-running_candidates, axis=1, kind="stable")[:, :beams]  # (B, beams)
    source_beam = np.take_along_axis(candidates.beam, order, axis=1)
    next_tokens = np.take_along_axis(candidates.token, order, axis=1)
    extended = _Beams(
        tokens=np.concatenate(
            [
                np.take_along_axis(running.tokens, source_beam[:, :, None], axis=1),
                next_tokens[:, :, None],
            ],
            axis=2,
        ),  # (B, beams, t + 1)
        logprobs=np.concatenate(
            [
                np.take_along_axis(running.logprobs, source_beam[:, :, None], axis=1),
                np.take_along_axis(candidates.logprob, order, axis=1)[:, :, None],
            ],
            axis=2,
        ),  # (B, beams, t + 1)
        scores=np.take_along_axis(running_candidates, order, axis=1),
    )
    return extended, source_beam


def _add_hypothesis(hypotheses: list[Hypothesis], new: Hypothesis, beams: int) -> None:
    """Keep the best `beams` finished hypotheses (ties keep the earlier one, as transformers)."""
    if len(hypotheses) < beams:
        hypotheses.append(new)
        return
    worst = min(range(len(hypotheses)), key=lambda i: hypotheses[i].score)
    if new.score > hypotheses[worst].score:
        hypotheses[worst] = new


def _can_improve(finished, running_scores, length, config, max_steps) -> np.ndarray:
    """transformers' early-stop heuristic: can a running beam still beat the worst finished one?

    `length` is the number of tokens generated so far; with early_stopping="never" and a positive
    length penalty the best case is a hypothesis of `max_steps` tokens.
    """
    if config.early_stopping == "never" and config.length_penalty > 0:
        best_length = max_steps
    else:
        best_length = length
    best_running = running_scores[:, 0] / (best_length**config.length_penalty)
    out = np.ones(len(finished), dtype=bool)
    for b, hypotheses in enumerate(finished):
        if len(hypotheses) >= config.num_beams:
            out[b] = best_running[b] > min(h.score for h in hypotheses)
    return out


def _sample_without_replacement(scores: np.ndarray, count: int, rng) -> np.ndarray:
    """Draw `count` distinct column ids per row with probability softmax(scores) (Gumbel top-k)."""
    gumbel = rng.gumbel(size=scores.shape).astype(np.float32)
    _, ids = sampling.top_k_values(scores + gumbel, count)
    return ids
