"""Text metrics for the Compare tab and the decoding study: pure functions over strings.

- `words`: the tokenization every n-gram metric here uses (lower-cased words and punctuation).
- `distinct_n`: distinct n-grams / all n-grams, pooled over a collection (Li et al., 2016).
- `repetition_rate`: share of a text's word 4-grams that repeat an earlier 4-gram of the same
  text (seq-rep-4, Welleck et al., 2019), averaged over the collection.
- `ungc`: 000's Unique N-gram Count — over the whole collection, the count of n-grams that occur
  exactly once divided by the count of all n-grams, for n = 1..4. Higher = more diverse.
- `self_bleu`: 000's SBLEU — each text scored with BLEU against all the others as references,
  averaged. Higher = less diverse.
- `reference_bleu`: 000's quality — corpus BLEU of the texts, every line of a reference text
  serving as a reference for every candidate.
- `mean`: mean of a list, or None when it is empty (e.g. beam search has no per-token logprobs).

BLEU is sacrebleu's (0–100, default 13a tokenization, sentence BLEU with exponential smoothing
for Self-BLEU). This module runs no model and draws nothing.
"""

from __future__ import annotations

import re
from collections import Counter

WORD = re.compile(r"\w+|[^\w\s]")


def words(text: str) -> list[str]:
    """Lower-cased words and punctuation marks.

    >>> words("Let there be light, and there was light.")
    ['let', 'there', 'be', 'light', ',', 'and', 'there', 'was', 'light', '.']
    """
    return WORD.findall(text.lower())


def ngrams(tokens: list[str], n: int) -> list[tuple[str, ...]]:
    """Consecutive n-grams of `tokens` (none when the text is shorter than n)."""
    return [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]


def distinct_n(texts: list[str], n: int) -> float | None:
    """Distinct n-grams / all n-grams over all texts; None when there is no n-gram.

    >>> distinct_n(["a b a b"], 1), distinct_n(["a b a b"], 2)
    (0.5, 0.6666666666666666)
    """
    grams = [gram for text in texts for gram in ngrams(words(text), n)]
    return len(set(grams)) / len(grams) if grams else None


def repetition_rate(texts: list[str], n: int = 4) -> float | None:
    """Mean over texts of the share of word n-grams already seen earlier in the same text.

    >>> repetition_rate(["a b c d a b c d"])  # 5 four-grams, 1 repeats the first
    0.2
    """
    rates = []
    for text in texts:
        grams = ngrams(words(text), n)
        if grams:
            rates.append((len(grams) - len(set(grams))) / len(grams))
    return sum(rates) / len(rates) if rates else None


def ungc(texts: list[str], max_n: int = 4) -> dict[int, float | None]:
    """{n: n-grams occurring once / all n-gram occurrences} over the pooled collection.

    >>> ungc(["a b", "a c"], max_n=2)
    {1: 0.5, 2: 1.0}
    """
    out = {}
    for n in range(1, max_n + 1):
        counts = Counter(gram for text in texts for gram in ngrams(words(text), n))
        total = sum(counts.values())
        out[n] = sum(1 for c in counts.values() if c == 1) / total if total else None
    return out


def self_bleu(texts: list[str]) -> float | None:
    """Mean sentence BLEU of each text against all others (0–100); None for fewer than 2."""
    import sacrebleu

    texts = [text for text in texts if text.strip()]
    if len(texts) < 2:
        return None
    scores = [
        sacrebleu.sentence_bleu(text, texts[:i] + texts[i + 1 :]).score
        for i, text in enumerate(texts)
    ]
    return sum(scores) / len(scores)


def reference_bleu(texts: list[str], reference: str) -> float | None:
    """Corpus BLEU (0–100) of `texts`, each against every non-empty line of `reference`."""
    import sacrebleu

    lines = [line.strip() for line in reference.splitlines() if line.strip()]
    if not texts or not lines:
        return None
    streams = [[line] * len(texts) for line in lines]  # one reference stream per line
    return sacrebleu.corpus_bleu(texts, streams).score


def mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None
