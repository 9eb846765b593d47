"""Seed 000's section 4.3: generating text from a masked LM, three ways, greedy.

1. `left_to_right`: append one mask after the text (then the end token), fill it with the most
   probable token, repeat: left context only.
2. `bidirectional`: the same, but the mask goes between the left text and a fixed right text,
   so each new token sees context on both sides.
3. `all_at_once`: put n masks between the left and right text and fill all of them in one
   forward pass, each with its own most probable token.

Special tokens (start, end, padding, mask and the control tokens) are never chosen. Each
function returns the generated tokens' text, joined as the tokenizer decodes them. The causal
Bible LM's continuation of the same prompt comes from its own runtime (`runtime.Generator`).
"""

from __future__ import annotations

import numpy as np


def _banned(gen) -> list[int]:
    decoder = gen.tokenizer.get_added_tokens_decoder()
    return sorted(i for i, token in decoder.items() if token.special)


def _best(gen, logits: np.ndarray) -> int:
    scores = logits.astype(np.float64).copy()
    scores[_banned(gen)] = -np.inf
    return int(scores.argmax())


def _check(tokens: int) -> None:
    if not isinstance(tokens, int) or isinstance(tokens, bool) or not 1 <= tokens <= 64:
        raise ValueError(f"`tokens` must be an int in [1, 64], got {tokens!r}")


def _body(gen, text: str) -> list[int]:
    """Token ids of `text` without the start and end tokens ("" gives none)."""
    if not text.strip():
        return []
    return gen.tokenizer.encode(text, add_special_tokens=False).ids


def _frame(gen, ids: list[int]) -> list[int]:
    bos, eos = (
        gen.manifest.special_tokens.bos_token_id,
        gen.manifest.special_tokens.eos_token_id,
    )
    row = [bos, *ids, eos]
    if len(row) > gen.context_length:
        raise ValueError(
            f"`text` and `tokens` must fit the context of {gen.context_length} tokens, "
            f"got {len(row)}"
        )
    return row


def left_to_right(gen, text: str, tokens: int = 12) -> str:
    _check(tokens)
    left, new = _body(gen, text), []
    for _ in range(tokens):
        row = _frame(gen, [*left, *new, gen.mask_token_id])
        logits, _ = gen.forward([row])
        new.append(_best(gen, logits[0, len(row) - 2]))
    return gen.decode(new)


def bidirectional(gen, text: str, right: str, tokens: int = 12) -> str:
    _check(tokens)
    left, right_ids, new = _body(gen, text), _body(gen, right), []
    for _ in range(tokens):
        row = _frame(gen, [*left, *new, gen.mask_token_id, *right_ids])
        position = 1 + len(left) + len(new)
        logits, _ = gen.forward([row])
        new.append(_best(gen, logits[0, position]))
    return gen.decode(new)


def all_at_once(gen, text: str, right: str, tokens: int = 12) -> str:
    _check(tokens)
    left, right_ids = _body(gen, text), _body(gen, right)
    row = _frame(gen, [*left, *[gen.mask_token_id] * tokens, *right_ids])
    logits, _ = gen.forward([row])
    start = 1 + len(left)
    return gen.decode([_best(gen, logits[0, p]) for p in range(start, start + tokens)])


def all_strategies(gen, text: str, right: str = "", tokens: int = 12) -> dict[str, str]:
    """The three strategies' outputs, by name (right context "" for the first)."""
    return {
        "left to right (one mask at a time)": left_to_right(gen, text, tokens),
        "bidirectional (one mask at a time, right context kept)": bidirectional(
            gen, text, right, tokens
        ),
        "all masks at once": all_at_once(gen, text, right, tokens),
    }
