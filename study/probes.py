"""Seed 000's token-vector probes (section 4.2) on a masked LM's last hidden states.

- `word_vector(gen, template, word)`: the contextual vector of `word` placed in `template` (its
  "{}"): the mean of the last-layer vectors of the word's tokens, found by character offsets.
- `analogy_table`: cosines of king / man / woman and king − man + woman against queen, with no
  context (the word alone), a short context and an extended one (`CONTEXTS`, the seed's
  sentences in Bible words). Start and end tokens are in the input, as the model always sees them,
  but their vectors are never compared.
- `word_order`: the cosine between "queen" in the seed's sentence and in three reorderings.
- `influence(gen, a, b)`: two sentences of equal token length that differ in exactly one token.
  Returns the all-to-all cosine matrix of their token vectors (rows: a's tokens, columns: b's),
  its mean (the seed's "overall average similarity"), and the Average Influence Similarity: the
  mean cosine of the same-position token pairs other than the differing one, i.e. how little the
  differing word moved the vectors of its context (1.0 for identical sentences).

Does not cover: static word vectors (runtime/word_vectors.py).
"""

from __future__ import annotations

import numpy as np

WORDS = ("king", "queen", "man", "woman")
PRONOUNS = {"king": "he", "man": "he", "queen": "she", "woman": "she"}
CONTEXTS = {
    "no context": "{word}",
    "short context": "The {word} went to sleep.",
    "extended context": "The {word} was weary, so {pronoun} went to sleep.",
}
ORDERINGS = {
    "original": "the queen was tired so she went to sleep",
    "two words swapped": "the queen was sleep so she went to tired",
    "reversed": "sleep to went she so tired was queen the",
    "shuffled": "tired the queen was so to sleep she went",
}


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    norms = float(np.linalg.norm(a) * np.linalg.norm(b))
    return float(a @ b / norms) if norms else 0.0


def word_vector(gen, text: str, start: int, end: int) -> np.ndarray:
    """Mean last-layer vector of the tokens of `text` overlapping characters [start, end)."""
    encoding = gen.tokenizer.encode(text)
    if len(encoding.ids) > gen.context_length:
        raise ValueError(f"`text` must be at most {gen.context_length} tokens, got {text!r}")
    rows = [
        i
        for i, (s, e) in enumerate(encoding.offsets)
        if e > s and s < end and e > start and encoding.ids[i] not in gen.frame_ids
    ]
    if not rows:
        raise ValueError(f"no token of {text[start:end]!r} found in {text!r}")
    _, hidden = gen.forward([encoding.ids])
    return hidden[0, rows].mean(axis=0)


def vector_in(gen, template: str, word: str) -> np.ndarray:
    pronoun = PRONOUNS.get(word, "they")
    before, after = template.split("{word}")
    text = before + word + after.format(pronoun=pronoun)
    return word_vector(gen, text, len(before), len(before) + len(word))


def analogy_table(gen, contexts: dict[str, str] = CONTEXTS) -> dict[str, dict[str, float]]:
    """{context name: {comparison: cosine}} for Q, KQ, WQ, MQ and KMWQ as in the seed."""
    table = {}
    for name, template in contexts.items():
        v = {word: vector_in(gen, template, word) for word in WORDS}
        table[name] = {
            "queen vs queen": cosine(v["queen"], v["queen"]),
            "king vs queen": cosine(v["king"], v["queen"]),
            "woman vs queen": cosine(v["woman"], v["queen"]),
            "man vs queen": cosine(v["man"], v["queen"]),
            "king − man + woman vs queen": cosine(v["king"] - v["man"] + v["woman"], v["queen"]),
        }
    return table


def word_order(gen, orderings: dict[str, str] = ORDERINGS, word: str = "queen") -> dict:
    """Cosine between `word`'s vector in the first ordering and in each ordering."""
    vectors = {}
    for name, text in orderings.items():
        start = f" {text} ".index(f" {word} ")
        vectors[name] = word_vector(gen, text, start, start + len(word))
    first = next(iter(vectors.values()))
    return {name: cosine(first, vector) for name, vector in vectors.items()}


def influence(gen, a: str, b: str) -> dict:
    """All-to-all cosines, their mean, and the Average Influence Similarity (module docstring)."""
    va, vb = gen.token_vectors(a), gen.token_vectors(b)
    if len(va.ids) != len(vb.ids):
        raise ValueError(
            f"`b` must have as many tokens as `a` ({len(va.ids)}), got {len(vb.ids)}: the "
            "sentences must differ in one word that is one token in both"
        )
    differing = [i for i, (x, y) in enumerate(zip(va.ids, vb.ids)) if x != y]
    if len(differing) > 1:
        raise ValueError(
            f"`b` must differ from `a` in at most one token, got {len(differing)} differing tokens"
        )
    unit_a = va.vectors / np.linalg.norm(va.vectors, axis=1, keepdims=True)  # (T, H)
    unit_b = vb.vectors / np.linalg.norm(vb.vectors, axis=1, keepdims=True)  # (T, H)
    matrix = unit_a @ unit_b.T  # (T, T)
    same = [i for i in range(len(va.ids)) if i not in differing]
    diagonal = np.diag(matrix)
    return {
        "tokens_a": va.tokens,
        "tokens_b": vb.tokens,
        "matrix": matrix.tolist(),
        "average_similarity": float(matrix.mean()),
        "ais": float(diagonal[same].mean()) if same else float("nan"),
        "differing_position": differing[0] if differing else None,
        "differing_cosine": float(diagonal[differing[0]]) if differing else 1.0,
    }
