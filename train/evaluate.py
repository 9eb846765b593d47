"""Evaluation measures of the default models, as pure functions over texts and numbers.

Covers: seed 004's length-ratio bookkeeping (ratio = target subwords / source subwords, the
category and nearest value tokens, the mean achieved ratio LRsrc), ROUGE-2 recall, corpus BLEU and
chrF (sacreBLEU), memorisation (share of generated 8-grams found verbatim in the training text),
seed 000's conditioning check (a TF-IDF + logistic-regression section classifier and its accuracy
table on generated samples), and Debian's rule-based `apertium` as a translation baseline.

Does not cover: generating the outputs (the recipes in train/lm.py and train/seq2seq/bart.py do that
through the runtime) or loading data.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections import Counter
from collections.abc import Callable, Iterable, Sequence

# Seed 004: category thresholds on the subword ratio and the value tokens' grid 0.1 ... 2.0.
SHORT_BELOW = 0.95
LONG_ABOVE = 1.05
LENGTH_CATEGORIES = ("short", "normal", "long")
RATIO_VALUES = tuple(round(step / 10, 1) for step in range(1, 21))


def length_ratio(source_subwords: int, target_subwords: int) -> float:
    """Seed 004's length ratio: target subwords / source subwords.

    >>> length_ratio(20, 17)
    0.85
    """
    if source_subwords <= 0:
        raise ValueError(f"`source_subwords` must be > 0, got {source_subwords}")
    return target_subwords / source_subwords


def length_category(ratio: float) -> str:
    """Seed 004's category of a ratio: "short" below 0.95, "long" above 1.05, else "normal".

    >>> [length_category(r) for r in (0.94, 0.95, 1.05, 1.06)]
    ['short', 'normal', 'normal', 'long']
    """
    if ratio < SHORT_BELOW:
        return "short"
    if ratio > LONG_ABOVE:
        return "long"
    return "normal"


def nearest_ratio_value(ratio: float, values: Sequence[float] = RATIO_VALUES) -> float:
    """The value token nearest to `ratio`; at an exact tie the first listed (smaller) one.

    This is the runtime's rule for a numeric control (runtime/text.py `control_prefix`), so a
    training example gets the token the runtime would pick for its ratio.

    >>> [nearest_ratio_value(r) for r in (0.0, 0.84, 0.86, 1.25, 3.0)]
    [0.1, 0.8, 0.9, 1.2, 2.0]
    """
    return min(values, key=lambda value: abs(value - ratio))


def responsive_range(achieved: dict[float, float]) -> tuple[float, float]:
    """The widest run of requested ratios around 1.0 (consecutive value tokens) over which the
    achieved ratio strictly increases: where the value tokens do what they say.

    >>> responsive_range({0.6: 0.99, 0.7: 0.78, 0.8: 0.84, 0.9: 0.91, 1.0: 0.98, 1.1: 1.04,
    ...                   1.2: 1.10, 1.3: 1.16, 1.4: 1.13})
    (0.7, 1.3)
    """
    values = sorted(achieved)
    low = high = values.index(min(values, key=lambda v: abs(v - 1.0)))
    while low > 0 and achieved[values[low - 1]] < achieved[values[low]]:
        low -= 1
    while high < len(values) - 1 and achieved[values[high + 1]] > achieved[values[high]]:
        high += 1
    return values[low], values[high]


def mean_length_ratio(
    sources: Sequence[str], outputs: Sequence[str], count: Callable[[str], int]
) -> float:
    """LRsrc: the mean over pairs of count(output) / count(source), `count` giving subwords.

    >>> mean_length_ratio(["a b c d", "a b"], ["a b c", "a b c"], lambda s: len(s.split()))
    1.125
    """
    if len(sources) != len(outputs) or not sources:
        raise ValueError(
            f"`sources` and `outputs` must be non-empty and of equal length, got "
            f"{len(sources)} and {len(outputs)}"
        )
    return sum(count(o) / count(s) for s, o in zip(sources, outputs)) / len(sources)


_ROUGE_TOKEN_RE = re.compile(r"\w+")


def rouge_tokens(text: str) -> list[str]:
    """ROUGE's tokenization: lower case, runs of letters and digits.

    >>> rouge_tokens("God said, “Let there be light.”")
    ['god', 'said', 'let', 'there', 'be', 'light']
    """
    return _ROUGE_TOKEN_RE.findall(text.lower())


def rouge2_recall(hypothesis: str, reference: str) -> float:
    """ROUGE-2 recall of one pair: matched reference bigrams (clipped counts) / reference bigrams.

    A reference with no bigram gives 0.0.

    >>> rouge2_recall("the cat sat on the mat", "the cat sat on a mat")
    0.6
    """
    tokens = rouge_tokens(reference)
    reference_bigrams = Counter(zip(tokens, tokens[1:]))
    total = sum(reference_bigrams.values())
    if total == 0:
        return 0.0
    hyp = rouge_tokens(hypothesis)
    matched = reference_bigrams & Counter(zip(hyp, hyp[1:]))
    return sum(matched.values()) / total


def mean_rouge2_recall(hypotheses: Sequence[str], references: Sequence[str]) -> float:
    """Mean per-pair ROUGE-2 recall, in percent (as rouge-score averages it)."""
    if len(hypotheses) != len(references) or not hypotheses:
        raise ValueError(
            "`hypotheses` and `references` must be non-empty and of equal length, got "
            f"{len(hypotheses)} and {len(references)}"
        )
    return 100 * sum(rouge2_recall(h, r) for h, r in zip(hypotheses, references)) / len(hypotheses)


def bleu_chrf(hypotheses: Sequence[str], references: Sequence[str]) -> dict[str, float]:
    """Corpus sacreBLEU (13a tokenization) and chrF (sacreBLEU defaults), both 0-100.

    >>> scores = bleu_chrf(["the cat sat on the mat"], ["the cat sat on the mat"])
    >>> round(scores["bleu"], 1), round(scores["chrf"], 1)
    (100.0, 100.0)
    """
    import sacrebleu

    if len(hypotheses) != len(references) or not hypotheses:
        raise ValueError(
            "`hypotheses` and `references` must be non-empty and of equal length, got "
            f"{len(hypotheses)} and {len(references)}"
        )
    refs = [list(references)]
    return {
        "bleu": sacrebleu.corpus_bleu(list(hypotheses), refs).score,
        "chrf": sacrebleu.corpus_chrf(list(hypotheses), refs).score,
    }


def ngrams(words: Sequence[str], n: int) -> list[tuple[str, ...]]:
    return [tuple(words[i : i + n]) for i in range(len(words) - n + 1)]


def memorised_share(generated: Iterable[str], training: Iterable[str], n: int = 8) -> float:
    """Share of the generated word n-grams that occur verbatim in the training text.

    Words are whitespace-separated tokens, compared exactly (case and punctuation included).
    Each training text is one running passage (n-grams may cross its verse boundaries); each
    generated text is counted on its own. Returns 0.0 when no generated text has n words.

    >>> train = ["In the beginning God created the heavens and the earth and all of it."]
    >>> round(memorised_share(["In the beginning God created the heavens and the sea was calm."],
    ...                       train, n=4), 3)  # 6 of its 9 4-grams are in `train`
    0.667
    """
    seen = {gram for text in training for gram in ngrams(text.split(), n)}
    grams = [gram for text in generated for gram in ngrams(text.split(), n)]
    return sum(gram in seen for gram in grams) / len(grams) if grams else 0.0


def section_classifier(texts: Sequence[str], labels: Sequence[str], seed: int = 0):
    """Seed 000's discriminator, made simple: TF-IDF (words and word pairs) + logistic regression.

    Classes are balanced by weight, so a large section (History) does not win by prior alone.
    Returns a fitted scikit-learn pipeline (`predict`, `classes_`).
    """
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline

    pipeline = make_pipeline(
        TfidfVectorizer(ngram_range=(1, 2), min_df=2, sublinear_tf=True),
        LogisticRegression(max_iter=2000, C=4.0, class_weight="balanced", random_state=seed),
    )
    return pipeline.fit(list(texts), list(labels))


def accuracy_table(
    predicted: Sequence[str], requested: Sequence[str], classes: Sequence[str]
) -> dict[str, dict]:
    """Per requested class: samples, accuracy (share labelled as requested) and the confusion row.

    Also an "overall" row. `classes` fixes the row order (and chance = 1 / len(classes)).

    >>> table = accuracy_table(["a", "b", "a", "a"], ["a", "a", "b", "b"], ["a", "b"])
    >>> table["a"]["accuracy"], table["b"]["accuracy"], table["overall"]["accuracy"]
    (0.5, 0.0, 0.25)
    """
    if len(predicted) != len(requested):
        raise ValueError(
            f"`predicted` and `requested` must have equal length, got {len(predicted)} and "
            f"{len(requested)}"
        )
    table = {}
    for name in classes:
        rows = [p for p, r in zip(predicted, requested) if r == name]
        counts = Counter(rows)
        table[name] = {
            "samples": len(rows),
            "accuracy": counts[name] / len(rows) if rows else 0.0,
            "labelled_as": {other: counts[other] for other in classes},
        }
    correct = sum(p == r for p, r in zip(predicted, requested))
    table["overall"] = {
        "samples": len(requested),
        "accuracy": correct / len(requested) if requested else 0.0,
        "chance": 1 / len(classes),
    }
    return table


APERTIUM_SEPARATOR = "\n"  # apertium keeps line breaks, so one verse per line maps back


def apertium_available(pair: str = "eng-spa") -> bool:
    """Whether the `apertium` command and its language pair are installed."""
    if shutil.which("apertium") is None:
        return False
    probe = subprocess.run(
        ["apertium", "-u", pair], input="Hello.\n", capture_output=True, text=True
    )
    return probe.returncode == 0 and bool(probe.stdout.strip())


def run_apertium(texts: Sequence[str], pair: str = "eng-spa") -> list[str]:
    """Translate `texts` with one `apertium -u PAIR` process, one text per line.

    `-u` drops apertium's unknown-word marks (`*word`). Runs of spaces are collapsed. Raises
    RuntimeError when apertium is missing or does not give back one line per text.
    """
    if shutil.which("apertium") is None:
        raise RuntimeError(
            "apertium is not installed; run: apt-get install -y apertium apertium-eng-spa"
        )
    cleaned = [" ".join(text.split()) for text in texts]
    result = subprocess.run(
        ["apertium", "-u", pair],
        input=APERTIUM_SEPARATOR.join(cleaned) + "\n",
        capture_output=True,
        text=True,
        check=True,
    )
    lines = result.stdout.rstrip("\n").split(APERTIUM_SEPARATOR)
    if len(lines) != len(texts):
        raise RuntimeError(f"apertium returned {len(lines)} lines for {len(texts)} texts")
    return [" ".join(line.split()) for line in lines]
