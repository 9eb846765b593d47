"""The app's pure metric modules on hand-computed examples: ui/metrics.py (distinct-n,
repetition rate, UNGC, Self-BLEU, reference BLEU), ui/subtitles.py (line breaking, limits,
ratios) and ui/embeddings.py (cosine, expressions, neighbours, analogies)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from tokenizers import Tokenizer, models, pre_tokenizers

from ui import embeddings, metrics, subtitles

# ---- metrics --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("texts", "n", "expected"),
    [
        (["the cat the cat"], 1, 2 / 4),  # {the, cat} of 4 words
        (["the cat the cat"], 2, 2 / 3),  # {the cat, cat the} of 3 bigrams
        (["a b", "a c"], 1, 3 / 4),  # pooled over the collection: {a, b, c} of 4
        (["a b", "a c"], 2, 2 / 2),
        (["Light, light."], 1, 3 / 4),  # lower-cased; punctuation counts: light , light .
        (["one"], 2, None),  # no bigram at all
    ],
)
def test_distinct_n(texts, n, expected):
    assert metrics.distinct_n(texts, n) == (None if expected is None else pytest.approx(expected))


def test_repetition_rate_counts_repeated_four_grams_per_text():
    # "a b c d a b c d": 4-grams abcd bcda cdab dabc abcd -> 1 of 5 repeats.
    # "w x y z": one 4-gram, no repeat. Mean of 0.2 and 0.0.
    assert metrics.repetition_rate(["a b c d a b c d", "w x y z"]) == pytest.approx(0.1)
    assert metrics.repetition_rate(["too short"]) is None
    assert metrics.repetition_rate(["x x x x x x"]) == pytest.approx(2 / 3)  # 3 grams, 2 repeat


def test_ungc_is_share_of_ngram_occurrences_that_occur_once():
    texts = ["the sun rises", "the sun sets"]
    # unigrams: the×2 sun×2 rises sets -> 2 once of 6; bigrams: "the sun"×2, "sun rises",
    # "sun sets" -> 2 of 4; trigrams: 2 distinct, each once -> 2 of 2; no 4-gram.
    assert metrics.ungc(texts) == {1: pytest.approx(2 / 6), 2: 0.5, 3: 1.0, 4: None}


def test_self_bleu_identical_disjoint_and_too_few():
    assert metrics.self_bleu(["in the beginning god created"] * 3) == pytest.approx(100)
    assert metrics.self_bleu(["alpha beta gamma delta", "one two three four"]) == pytest.approx(0)
    middle = metrics.self_bleu(["the light shines in the dark", "the light shines in a room"])
    assert 0 < middle < 100
    assert metrics.self_bleu(["only one"]) is None
    assert metrics.self_bleu(["text", "  "]) is None  # blank samples do not count


def test_reference_bleu_uses_every_line_as_a_reference():
    reference = "In the beginning God created the heaven and the earth.\nJesus wept for his friend."
    assert metrics.reference_bleu(["Jesus wept for his friend."], reference) == pytest.approx(100)
    exact = "In the beginning God created the heaven and the earth."
    assert metrics.reference_bleu([exact], reference) == pytest.approx(100)
    assert metrics.reference_bleu(["zzz qqq"], reference) == pytest.approx(0)
    assert metrics.reference_bleu([], reference) is None
    assert metrics.reference_bleu(["x"], "\n \n") is None


def test_mean():
    assert metrics.mean([-1.0, -2.0, -3.0]) == -2.0
    assert metrics.mean([]) is None


# ---- subtitles ------------------------------------------------------------------------------


def test_wrap_is_greedy_at_spaces_and_keeps_long_words_whole():
    assert subtitles.wrap("aa bb cc dd", 5) == ["aa bb", "cc dd"]
    assert subtitles.wrap("aa bb cc", 4) == ["aa", "bb", "cc"]
    assert subtitles.wrap("extraordinarily long", 5) == ["extraordinarily", "long"]
    assert subtitles.wrap("   ", 10) == []


def test_check_against_limits():
    limits = subtitles.SubtitleLimits(chars_per_line=10, max_lines=2, chars_per_second=5)
    ok = subtitles.check("one two three", limits, duration=3.0)  # 13 chars / 3 s = 4.33
    assert ok.lines == ["one two", "three"]
    assert ok.longest_line == 7
    assert ok.chars_per_second == pytest.approx(13 / 3)
    assert (ok.line_length_ok, ok.line_count_ok, ok.reading_speed_ok, ok.passes) == (
        True,
        True,
        True,
        True,
    )
    too_many = subtitles.check("one two three four five six", limits, duration=10.0)
    assert len(too_many.lines) == 3 and not too_many.line_count_ok and not too_many.passes
    too_fast = subtitles.check("one two three", limits, duration=2.0)  # 6.5 chars/s
    assert too_fast.reading_speed_ok is False and not too_fast.passes
    too_wide = subtitles.check("incomprehensibilities", limits)
    assert not too_wide.line_length_ok and too_wide.longest_line == 21
    no_duration = subtitles.check("one two", limits)
    assert no_duration.chars_per_second is None and no_duration.reading_speed_ok is None
    assert no_duration.passes


def test_default_limits_are_common_practice():
    assert subtitles.SubtitleLimits() == subtitles.SubtitleLimits(42, 2, 17.0)


def test_ratio():
    assert subtitles.ratio(8, 10) == 0.8
    assert subtitles.ratio(5, 0) is None


# ---- embeddings -----------------------------------------------------------------------------

# A vocabulary whose vectors make the analogy work: king − man + woman = queen exactly.
VECTORS = {
    "king": [1.0, 1.0, 0.0, 0.0],
    "man": [1.0, 0.0, 0.0, 0.0],
    "woman": [0.0, 0.0, 1.0, 0.0],
    "queen": [0.0, 1.0, 1.0, 0.0],
    "boy": [1.0, 0.0, 0.0, 1.0],
    "girl": [0.0, 0.0, 1.0, 1.0],
    "teenager": [1.0, 0.0, 0.0, 2.0],
    "!": [0.0, 0.0, 0.0, 0.0],
    "[UNK]": [0.0, 0.0, 0.0, 0.0],
}


@pytest.fixture(scope="module")
def space() -> embeddings.EmbeddingSpace:
    vocab = {word: i for i, word in enumerate(VECTORS)}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.add_special_tokens(["[UNK]"])
    matrix = np.array(list(VECTORS.values()), dtype=np.float32)
    return embeddings.EmbeddingSpace(matrix, tokenizer, leading_space=False)


def test_cosine():
    assert embeddings.cosine(np.array([1.0, 0.0]), np.array([0.0, 3.0])) == 0.0
    assert embeddings.cosine(np.array([2.0, 2.0]), np.array([1.0, 1.0])) == pytest.approx(1.0)
    assert embeddings.cosine(np.array([1.0, 0.0]), np.array([-1.0, 0.0])) == pytest.approx(-1.0)
    assert embeddings.cosine(np.zeros(2), np.array([1.0, 0.0])) == 0.0


def test_parse_expression():
    assert embeddings.parse_expression("boy + man") == [(1, "boy"), (1, "man")]
    assert embeddings.parse_expression("-man+ woman") == [(-1, "man"), (1, "woman")]
    with pytest.raises(ValueError, match="`expression` must contain at least one word"):
        embeddings.parse_expression(" + - ")


def test_phrase_similarity_sums_token_vectors(space):
    # boy·girl = 1, |boy| = |girl| = √2 -> 0.5
    assert space.similarity("boy", "girl") == pytest.approx(0.5)
    # "boy man" (one phrase, two tokens) = boy + man = [2, 0, 0, 1]
    assert np.allclose(space.vector("boy man"), [2, 0, 0, 1])
    # boy + man = [2,0,0,1]; teenager = [1,0,0,2] -> 4 / 5
    assert space.similarity("boy + man", "teenager") == pytest.approx(0.8)
    assert space.tokens("king - man") == ["king", "man"]


def test_analogy_and_neighbours(space):
    found = space.neighbours("king - man + woman", k=3)
    assert found[0] == ("queen", pytest.approx(1.0))
    assert all(token not in ("king", "man", "woman", "[UNK]", "!") for token, _ in found)
    assert space.rank("king - man + woman", "queen") == 1
    # girl = [0,0,1,1] against queen's direction [0,1,1,0]: cosine 0.5, below queen only.
    assert space.rank("king - man + woman", "girl") == 2
    with_symbols = space.neighbours("woman", k=10, words_only=False)
    assert "!" in [token for token, _ in with_symbols]


def test_unknown_only_phrase_is_an_error(space):
    with pytest.raises(ValueError, match="`phrase` must contain at least one known token"):
        space.vector("zebra")  # only [UNK], a special token


def test_nearest_orders_by_cosine_and_respects_exclusions():
    matrix = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [0.0, 0.0]])
    assert [row for row, _ in embeddings.nearest(matrix, np.array([1.0, 0.1]), 3)] == [0, 2, 1]
    best = embeddings.nearest(matrix, np.array([1.0, 0.1]), 2, exclude={0})
    assert [row for row, _ in best] == [2, 1]
    assert math.isclose(best[0][1], 1.1 / (math.sqrt(2) * math.sqrt(1.01)))
