"""Seed 000's masking-ratio study: mask n random words of a sentence, up to 80 % of it, and
count how often the masked LM's top-1, 2, 3 and 5 predictions contain each original word.

Words: a sentence's maskable words are its tokens that are whole words on their own (a token
that starts with a space and letters, followed by a token that starts a new word or is
punctuation), since the tokenizer is subword BPE and BERT's study masks whole words. Nearly every
common Bible word is one token. For each ratio r and repetition, n = max(1, round(r × words))
distinct words are drawn at random (seeded) and replaced by the mask token; every masked word is
one prediction. Accuracy at k = share of predictions whose original token is among the k most
probable tokens at its position. The seed repeats 500 times on one story; we use many held-out
verses and a few repetitions each, which gives as many predictions with less text bias.

Content words (issue 24): given `content_words` (a predicate on a word, e.g.
study.content_words.ContentWords), the same predictions are also scored over the masked words
that are content words (nouns, verbs, adjectives; see study/content_words.py), under
result["content"]. The study masks whole words that are one token each, so a masked position is
one word, looked up as its token's text; words of several tokens are never masked, in either
count. Drawing the masks does not depend on `content_words`: the all-word numbers are the same
with or without it.

Does not cover: figures (study/figures.py), choosing the sentences (`held_out_sentences`).
"""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np

RATIOS = (0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8)
TOP_K = (1, 2, 3, 5)
WORD_TOKEN = re.compile(r"^ [A-Za-z]+$")


def word_positions(gen, ids: list[int]) -> list[int]:
    """Positions in `ids` of tokens that are whole words on their own (see module docstring)."""
    texts = [gen.decode([i]) for i in ids]
    out = []
    for index in range(1, len(ids) - 1):
        following = texts[index + 1]
        ends_word = ids[index + 1] in gen.frame_ids or not following[:1].isalpha()
        if WORD_TOKEN.match(texts[index]) and ends_word:
            out.append(index)
    return out


def held_out_sentences(rows: list[dict], count: int, seed: int = 0, split: str = "validation"):
    """`count` WEB verses of `split` with 8 to 40 words, drawn with `seed`."""
    verses = [r["web"] for r in rows if r["split"] == split and r["web"]]
    verses = [v for v in verses if 8 <= len(v.split()) <= 40]
    rng = np.random.default_rng(seed)
    return [verses[i] for i in sorted(rng.choice(len(verses), min(count, len(verses)), False))]


def masking_study(
    gen,
    sentences,
    ratios=RATIOS,
    repetitions: int = 3,
    seed: int = 0,
    top_k=TOP_K,
    content_words: Callable[[str], bool] | None = None,
) -> dict:
    """Accuracy at each k against the masking ratio: {"ratios", "top_k", "accuracy": {k: [...]},
    "predictions": [...]} with one value per ratio (predictions = masked words scored); with
    `content_words`, also "content": {"accuracy": {k: [...]}, "predictions": [...]} over the
    masked words for which `content_words(word)` is true."""
    if not sentences:
        raise ValueError("`sentences` must hold at least one sentence, got none")
    if not all(0 < r <= 0.8 for r in ratios):
        raise ValueError(f"`ratios` must be in (0, 0.8], got {list(ratios)}")
    if not isinstance(repetitions, int) or repetitions < 1:
        raise ValueError(f"`repetitions` must be a positive int, got {repetitions!r}")
    rng = np.random.default_rng(seed)
    largest = max(top_k)
    hits = np.zeros((len(ratios), len(top_k)))
    counts = np.zeros(len(ratios), dtype=int)
    content_hits = np.zeros((len(ratios), len(top_k)))
    content_counts = np.zeros(len(ratios), dtype=int)
    for sentence in sentences:
        ids = gen.tokenizer.encode(sentence).ids
        if len(ids) > gen.context_length:
            continue  # a verse longer than the context is left out, never truncated
        words = word_positions(gen, ids)
        if len(words) < 2:
            continue
        if content_words is not None:
            content = {p for p in words if content_words(gen.decode([ids[p]]).strip())}
        rows, targets = [], []
        for r_index, ratio in enumerate(ratios):
            n = max(1, round(ratio * len(words)))
            for _ in range(repetitions):
                chosen = rng.choice(words, n, replace=False)
                masked = list(ids)
                for position in chosen:
                    masked[position] = gen.mask_token_id
                rows.append(masked)
                targets.append((r_index, chosen))
        logits, _ = gen.forward(rows)  # (rows, T, V)
        for row, (r_index, chosen) in enumerate(targets):
            scores = logits[row, chosen]  # (n, V)
            best = np.argpartition(-scores, largest - 1, axis=-1)[:, :largest]
            order = np.take_along_axis(scores, best, -1).argsort(-1)[:, ::-1]
            best = np.take_along_axis(best, order, -1)  # (n, largest), best first
            truth = np.array([ids[p] for p in chosen])[:, None]
            found = np.stack([(best[:, :k] == truth).any(-1) for k in top_k], -1)  # (n, len(k))
            hits[r_index] += found.sum(0)
            counts[r_index] += len(chosen)
            if content_words is not None:
                is_content = np.array([p in content for p in chosen])
                content_hits[r_index] += found[is_content].sum(0)
                content_counts[r_index] += int(is_content.sum())
    result = {
        "ratios": list(ratios),
        "top_k": list(top_k),
        **_accuracy(hits, counts, top_k),
        "sentences": len(sentences),
        "repetitions": repetitions,
    }
    if content_words is not None:
        result["content"] = _accuracy(content_hits, content_counts, top_k)
    return result


def _accuracy(hits: np.ndarray, counts: np.ndarray, top_k) -> dict:
    accuracy = hits / np.maximum(counts, 1)[:, None]
    return {
        "accuracy": {str(k): [float(a) for a in accuracy[:, i]] for i, k in enumerate(top_k)},
        "predictions": [int(c) for c in counts],
    }
