"""study/content_words.py: WordNet's index and exception files parsed from the committed fixture
(tests/fixtures/wordnet/, real WordNet 3.0 lines), morphy's base forms, the function-word list,
and, where Debian's WordNet is installed, the same answers from the full database."""

from __future__ import annotations

import shutil

import pytest

from study.content_words import (
    FIXTURE_DIR,
    FUNCTION_WORDS,
    WORDNET_DIR,
    ContentWords,
)


@pytest.fixture(scope="module")
def words():
    return ContentWords.from_wordnet(FIXTURE_DIR)


def test_index_lemmas_skip_the_licence_header(words):
    lines = (FIXTURE_DIR / "index.noun").read_text().splitlines()
    assert sum(line.startswith("  ") for line in lines) == 29  # WordNet's licence text
    assert len(words.lemmas["noun"]) == len(lines) - 29
    assert {"god", "love", "man", "water"} <= words.lemmas["noun"]
    assert not any(lemma[:1].isspace() or lemma.isdigit() for lemma in words.lemmas["noun"])
    assert words.exceptions["verb"]["went"] == ["go"]
    assert words.exceptions["adj"]["better"] == ["good", "well"]


@pytest.mark.parametrize(
    ("word", "part", "forms"),
    [
        ("love", "verb", ["love"]),
        ("loves", "noun", ["love"]),  # "s" -> ""
        ("loved", "verb", ["love"]),  # "ed" -> "e"
        ("walked", "verb", ["walk"]),  # "ed" -> ""
        ("walking", "verb", ["walk"]),  # "ing" -> ""
        ("cities", "noun", ["city"]),  # "ies" -> "y"
        ("greatest", "adj", ["great"]),  # "est" -> ""
        ("went", "verb", ["go"]),  # verb.exc
        ("men", "noun", ["man"]),  # noun.exc (and the "men" -> "man" rule)
        ("better", "adj", ["good"]),  # adj.exc: "good well", only good is in the fixture index
        ("Lord", "noun", ["lord"]),  # looked up lower-cased
        ("went", "noun", []),
        ("jehoshaphat", "noun", []),
    ],
)
def test_base_forms_follow_morphy(words, word, part, forms):
    assert words.base_forms(word, part) == forms


@pytest.mark.parametrize(
    ("word", "content"),
    [
        ("love", True),  # noun and verb: both count
        ("said", True),  # verb.exc: said -> say
        ("Kings", True),
        ("heart", True),
        ("good", True),
        ("God", True),
        ("will", False),  # a WordNet noun and verb, but a modal
        ("can", False),
        ("in", False),  # WordNet's inch and indium
        ("I", False),  # WordNet's iodine
        ("one", False),  # a number
        ("then", False),
        ("the", False),  # not in WordNet at all
        ("Jehoshaphat", False),
        ("", False),
        ("  ", False),
    ],
)
def test_content_words_are_nouns_verbs_adjectives_but_not_function_words(words, word, content):
    assert words.is_content(word) is content
    assert words(word) is content


def test_function_words_known_to_wordnet_are_excluded(words):
    known = [
        w
        for w in ("will", "can", "may", "might", "one", "now", "i", "in")
        if w in words.lemmas["noun"]
    ]
    assert len(known) == 8 and all(w in FUNCTION_WORDS for w in known)
    assert words.parts_of_speech("will") == ["noun", "verb"] and not words.is_content("will")
    assert words.parts_of_speech("love") == ["noun", "verb"]


def test_bad_part_and_missing_wordnet(words, tmp_path):
    with pytest.raises(ValueError, match="`part` must be one of noun, verb, adj, got 'adv'"):
        words.base_forms("well", "adv")
    shutil.copytree(FIXTURE_DIR, tmp_path / "dict")
    (tmp_path / "dict" / "verb.exc").unlink()
    with pytest.raises(FileNotFoundError, match=r"has no verb\.exc: install Debian's WordNet"):
        ContentWords.from_wordnet(tmp_path / "dict")


@pytest.mark.skipif(
    not (WORDNET_DIR / "index.noun").exists(), reason="Debian's wordnet-base is not installed"
)
def test_the_full_wordnet_agrees_with_the_fixture(words):
    full = ContentWords.from_wordnet()
    assert len(full.lemmas["noun"]) > 100_000
    for word in ("love", "said", "Kings", "went", "better", "cities", "will", "one", "the"):
        assert full.is_content(word) is words.is_content(word)
    assert full.is_content("commandments") and full.is_content("neighbor")
    assert not full.is_content("yourselves") and not full.is_content("hundred")
