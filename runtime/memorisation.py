"""The memorisation meter: how much of a text is copied verbatim from a model's training text.

Words are whitespace-separated, compared exactly (case and punctuation included), as in
`train.evaluate.memorised_share`. A bundle may carry an index of its training text's word
n-grams (n = 8): the sorted unique 64-bit hashes of every n-gram, each the first 8 bytes
(little-endian) of BLAKE2b over the n words joined by U+001F, in a .npy file that the manifest's
`memorisation_index` names (docs/bundle.md). `Generator.memorised(text)` uses it.

    >>> index = ngram_hashes("a b c d e f g h i".split(), 8)  # 2 n-grams
    >>> m = memorised("x a b c d e f g h i y", np.unique(index), 8)
    >>> m.share, m.longest_span
    (0.5, 'a b c d e f g h i')
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

WORD_NGRAM = 8  # seed 002's meter: word 8-grams
_SEPARATOR = "\x1f"


def ngram_hashes(words: list[str], n: int = WORD_NGRAM) -> np.ndarray:
    """The hash of each of the len(words) - n + 1 word n-grams, in order (uint64, maybe empty)."""
    count = max(len(words) - n + 1, 0)
    out = np.empty(count, dtype=np.uint64)
    for i in range(count):
        digest = hashlib.blake2b(_SEPARATOR.join(words[i : i + n]).encode(), digest_size=8)
        out[i] = int.from_bytes(digest.digest(), "little")
    return out


@dataclass(frozen=True)
class Memorisation:
    share: float  # share of the text's word n-grams found in the index (0.0 with none)
    ngrams: int  # how many word n-grams the text has
    longest_span: str  # the longest run of words whose every n-gram is found ("" if none)
    longest_span_words: int


def memorised(text: str, index: np.ndarray, n: int = WORD_NGRAM) -> Memorisation:
    """Memorisation of `text` against `index`, sorted unique uint64 n-gram hashes."""
    words = text.split()
    hashes = ngram_hashes(words, n)
    if not hashes.shape[0]:
        return Memorisation(0.0, 0, "", 0)
    positions = np.minimum(index.searchsorted(hashes), max(index.shape[0] - 1, 0))
    found = index[positions] == hashes if index.shape[0] else np.zeros(hashes.shape, bool)
    best_start, best_grams, run = 0, 0, 0
    for i, hit in enumerate(found.tolist()):
        run = run + 1 if hit else 0
        if run > best_grams:
            best_start, best_grams = i - run + 1, run
    span_words = best_grams + n - 1 if best_grams else 0
    span = " ".join(words[best_start : best_start + span_words])
    return Memorisation(float(found.mean()), int(hashes.shape[0]), span, span_words)
