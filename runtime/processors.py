"""Logits processors that depend on the tokens generated so far.

Each function takes scores `(N, V)` float32 and returns new scores; inputs are never mutated.
They run in transformers' order (see `apply_processors`): repetition penalty → no-repeat-ngram →
min new tokens → forced BOS → forced EOS → suppressed tokens. The temperature / top-k / top-p /
min-p / typical-p filters that follow live in `runtime.sampling`.

Token histories are `(N, T)` int64 arrays with a boolean mask of real tokens: left padding of
batched prompts is masked out, so padding never counts as a repetition (transformers counts it;
for unpadded prompts the two agree exactly).
"""

from __future__ import annotations

import numpy as np

NEG_INF = np.float32(-np.inf)


def repetition_penalty(
    scores: np.ndarray, history: np.ndarray, mask: np.ndarray, penalty: float
) -> np.ndarray:
    """Penalise every token already in a row's history (CTRL, Keskar et al. 2019).

    A seen token's score s becomes s / penalty if s > 0, else s * penalty. 1.0 = no penalty;
    > 1.0 discourages repetition, < 1.0 encourages it.
    """
    # Masked (padding) slots point at the row's last token, which is real and penalised anyway,
    # so duplicate writes below always write the same penalised value.
    tokens = np.where(mask, history, history[:, -1:])  # (N, T)
    rows = np.arange(scores.shape[0])[:, None]  # (N, 1)
    seen = scores[rows, tokens]  # (N, T)
    out = scores.copy()
    out[rows, tokens] = np.where(seen < 0, seen * penalty, seen / penalty)
    return out


def banned_ngram_tokens(tokens: np.ndarray, n: int) -> np.ndarray:
    """Tokens that would complete an n-gram already present in `tokens` (one row, real tokens).

    >>> banned_ngram_tokens(np.array([5, 6, 7, 5, 6]), 3).tolist()
    [7]
    """
    if len(tokens) < n:
        return np.empty(0, dtype=np.int64)
    windows = np.lib.stride_tricks.sliding_window_view(tokens, n)  # (L - n + 1, n)
    prefix = tokens[len(tokens) - n + 1 :]  # the last n-1 tokens
    hits = np.all(windows[:, : n - 1] == prefix, axis=1) if n > 1 else np.ones(len(windows), bool)
    return np.unique(windows[hits, n - 1])


def no_repeat_ngram(
    scores: np.ndarray, history: np.ndarray, mask: np.ndarray, size: int
) -> np.ndarray:
    """Forbid (-inf) every token that would repeat an n-gram of `size` tokens. 0 = off."""
    out = scores.copy()
    for row in range(scores.shape[0]):
        banned = banned_ngram_tokens(history[row][mask[row]], size)
        out[row, banned] = NEG_INF
    return out


def force_token(scores: np.ndarray, token_id: int) -> np.ndarray:
    """Every row may only produce `token_id` (its score becomes 0, all others -inf)."""
    out = np.full_like(scores, NEG_INF)
    out[:, token_id] = 0.0
    return out


def suppress(scores: np.ndarray, token_ids) -> np.ndarray:
    """Tokens in `token_ids` can never be produced (-inf)."""
    out = scores.copy()
    out[:, list(token_ids)] = NEG_INF
    return out


def apply_processors(
    scores: np.ndarray,
    history: np.ndarray,
    mask: np.ndarray,
    config,
    num_generated: int,
    eos_token_id: int | tuple[int, ...] | None,  # one EOS id, or several (end of turn)
) -> np.ndarray:
    """Run the history-dependent processors of `config` (a validated GenerationConfig) in order.

    `num_generated` is how many tokens each row has generated before this step.
    """
    if config.repetition_penalty != 1.0:
        scores = repetition_penalty(scores, history, mask, config.repetition_penalty)
    if config.no_repeat_ngram_size > 0:
        scores = no_repeat_ngram(scores, history, mask, config.no_repeat_ngram_size)
    if eos_token_id is not None and num_generated < config.min_new_tokens:
        scores = suppress(scores, np.atleast_1d(eos_token_id))
    if config.forced_bos_token_id is not None and num_generated == 0:
        scores = force_token(scores, config.forced_bos_token_id)
    if config.forced_eos_token_id is not None and num_generated == config.max_new_tokens - 1:
        scores = force_token(scores, config.forced_eos_token_id)
    if config.suppress_tokens:
        scores = suppress(scores, config.suppress_tokens)
    return scores
