"""Static word vectors from a model's input embedding matrix: 002's and 000's comparisons.

A phrase's vector is the sum of the input embeddings of its tokens (002: `model.wte(ids).sum`);
an expression such as "king - man + woman" or "boy + man" adds and subtracts phrase vectors.
Cosine similarity compares two vectors; nearest neighbours rank every vocabulary token by cosine.
The matrix comes from the bundle's `embeddings.npy` through `runtime.word_vectors.load_matrix`.
This module runs no model and builds no UI.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

import numpy as np

TERM = re.compile(r"\s*([+-])?\s*([^+-]+)")
WORDLIKE = re.compile(r"\w")


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    """Cosine similarity of two vectors; 0.0 when either is all zeros.

    >>> cosine(np.array([1.0, 0.0]), np.array([1.0, 1.0]))
    0.7071067811865475
    """
    norms = float(np.linalg.norm(a) * np.linalg.norm(b))
    return float(np.dot(a, b) / norms) if norms else 0.0


def parse_expression(expression: str) -> list[tuple[int, str]]:
    """Signed phrases of an expression, in order: [(+1 | -1, phrase), …].

    >>> parse_expression("king - man + woman")
    [(1, 'king'), (-1, 'man'), (1, 'woman')]
    >>> parse_expression("a one a two a three")
    [(1, 'a one a two a three')]
    """
    terms = []
    for sign, phrase in TERM.findall(expression):
        if phrase.strip():
            terms.append((-1 if sign == "-" else 1, phrase.strip()))
    if not terms:
        raise ValueError(f"`expression` must contain at least one word, got {expression!r}")
    return terms


def cosines(matrix: np.ndarray, vector: np.ndarray) -> np.ndarray:
    """Cosine of `vector` with every row of `matrix` (0 for all-zero rows), shape (V,)."""
    norms = np.linalg.norm(matrix, axis=1) * (np.linalg.norm(vector) or 1.0)  # (V,)
    return (matrix @ vector) / np.where(norms == 0, 1.0, norms)


def nearest(
    matrix: np.ndarray, vector: np.ndarray, k: int, exclude: set[int] = frozenset()
) -> list[tuple[int, float]]:
    """The k rows of `matrix` most cosine-similar to `vector`, as (row, cosine), best first.

    >>> m = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    >>> [(row, round(sim, 3)) for row, sim in nearest(m, np.array([1.0, 0.2]), 2)]
    [(0, 0.981), (2, 0.832)]
    """
    sims = cosines(matrix, vector)  # (V,)
    if exclude:
        sims[list(exclude)] = -np.inf
    k = min(k, int(np.isfinite(sims).sum()))
    top = np.argpartition(-sims, k - 1)[:k] if k else np.array([], dtype=int)
    top = top[np.argsort(-sims[top], kind="stable")]
    return [(int(row), float(sims[row])) for row in top]


@dataclass
class EmbeddingSpace:
    """A tokenizer and its model's input embeddings; phrases become summed token vectors."""

    matrix: np.ndarray  # (V, D) float32
    tokenizer: object  # tokenizers.Tokenizer
    leading_space: bool = True  # encode words as they appear mid-sentence (" king")

    def token_ids(self, phrase: str) -> list[int]:
        text = (" " + phrase.strip()) if self.leading_space else phrase.strip()
        ids = self.tokenizer.encode(text, add_special_tokens=False).ids
        ids = [i for i in ids if i < len(self.matrix) and i not in self._special_ids]
        if not ids:
            raise ValueError(f"`phrase` must contain at least one known token, got {phrase!r}")
        return ids

    def tokens(self, expression: str) -> list[str]:
        """The tokens of every phrase of the expression, as text."""
        ids = [i for _, phrase in parse_expression(expression) for i in self.token_ids(phrase)]
        return [self.tokenizer.decode([i]) for i in ids]

    def rank(self, expression: str, phrase: str) -> int | None:
        """1-based rank of `phrase` among the expression's nearest tokens, leaving out the
        expression's own tokens (as `neighbours` does); None if `phrase` is several tokens."""
        ids = self.token_ids(phrase)
        if len(ids) != 1:
            return None
        own = {i for _, p in parse_expression(expression) for i in self.token_ids(p)}
        sims = cosines(self.matrix, self.vector(expression))  # (V,)
        others = np.delete(sims, sorted(own | {ids[0]}))
        return 1 + int((others > sims[ids[0]]).sum())

    def vector(self, expression: str) -> np.ndarray:
        """Sum of signed phrase vectors, each the sum of its tokens' embeddings."""
        total = np.zeros(self.matrix.shape[1], dtype=np.float32)  # (D,)
        for sign, phrase in parse_expression(expression):
            total += sign * self.matrix[self.token_ids(phrase)].sum(axis=0)
        return total

    def similarity(self, a: str, b: str) -> float:
        return cosine(self.vector(a), self.vector(b))

    @functools.cached_property
    def _special_ids(self) -> set[int]:
        decoder = self.tokenizer.get_added_tokens_decoder()
        return {i for i, token in decoder.items() if token.special and i < len(self.matrix)}

    @functools.cached_property
    def _nonword_ids(self) -> set[int]:
        rows = range(min(self.tokenizer.get_vocab_size(), len(self.matrix)))
        return {i for i in rows if not WORDLIKE.search(self.tokenizer.decode([i]))}

    def neighbours(
        self, expression: str, k: int = 10, words_only: bool = True
    ) -> list[tuple[str, float]]:
        """Tokens nearest to the expression's vector, leaving out the expression's own tokens
        (and, with `words_only`, tokens without a letter or digit, and special tokens)."""
        exclude = {i for _, phrase in parse_expression(expression) for i in self.token_ids(phrase)}
        exclude |= self._special_ids | (self._nonword_ids if words_only else set())
        found = nearest(self.matrix, self.vector(expression), k, exclude)
        return [(self.tokenizer.decode([row]), sim) for row, sim in found]
