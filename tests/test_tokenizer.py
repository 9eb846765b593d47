"""Tests for train/tokenizer.py: the GPT-4 split, byte-level round trips on fixture verses in
all three translations, special and control tokens, and loading into transformers."""

import pytest
import regex
from tokenizers import Regex, Tokenizer, pre_tokenizers

from train import data
from train import tokenizer as tk

CONTROLS = ["<|law|>", "<|gospels|>", "<short>", "<ratio_0.8>", "<ratio_1.0>"]
ODD_TEXTS = [
    "¿Con qué limpiará el joven su camino? ¡Oh Jehová! Señor, año, pingüino, Ñandú.",
    "“Don’t be afraid,” he said — ‘it’s I.’ 12345 and 7,000 (about 3.5%).",
    "Two  spaces,\ttab, and\nnew line\r\n  then indent.",
    "Accents: á é í ó ú â ê î ô û Æ æ; Hebrew אֱלֹהִ֑ים; emoji 🙂.",
    "",
]


@pytest.fixture(scope="module")
def fixture_rows():
    return data.load_verses(data.FIXTURE)


@pytest.fixture(scope="module")
def small_tokenizer(fixture_rows, tmp_path_factory):
    texts = tk.training_texts(fixture_rows, ("web", "kjv", "rv1909"))
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    return tk.train_tokenizer(texts, 800, CONTROLS, out_path=path), path


@pytest.mark.parametrize(
    "text",
    [
        "I don't know; you'll see, we've said they're here and I'm sure he'd go.",
        "Yahweh’s house. 1234567 men, 3 days",
        "¿Qué pasó?  ¡Él dijo!\n\nFin  ",
        "  leading spaces and trailing\t",
    ],
)
def test_split_pattern_matches_the_regex_module(text):
    """tokenizers' Oniguruma Split gives the same pieces as the reference `regex` semantics."""
    split = pre_tokenizers.Split(Regex(tk.GPT4_SPLIT_PATTERN), behavior="isolated")
    pieces = [piece for piece, _ in split.pre_tokenize_str(text)]
    assert pieces == regex.findall(tk.GPT4_SPLIT_PATTERN, text)


def test_split_pattern_separates_contractions_and_digit_groups():
    pieces = regex.findall(tk.GPT4_SPLIT_PATTERN, "I don't know, you'll see 1234567")
    assert pieces == [
        "I",
        " don",
        "'t",
        " know",
        ",",
        " you",
        "'ll",
        " see",
        " ",
        "123",
        "456",
        "7",
    ]


def test_fixture_verses_round_trip(fixture_rows, small_tokenizer):
    tokenizer, _ = small_tokenizer
    texts = [row[column] for row in fixture_rows for column in data.TRANSLATIONS if row[column]]
    assert any("ñ" in text for text in texts) and any("¿" in text for text in texts)
    for text, encoding in zip(texts, tokenizer.encode_batch(texts)):
        assert tokenizer.decode(encoding.ids) == text


@pytest.mark.parametrize("text", ODD_TEXTS)
def test_unseen_characters_round_trip_through_bytes(small_tokenizer, text):
    tokenizer, _ = small_tokenizer
    assert tokenizer.decode(tokenizer.encode(text).ids) == text


def test_special_and_control_token_ids(small_tokenizer):
    tokenizer, _ = small_tokenizer
    expected = [tk.BOS, tk.EOS, tk.PAD, *CONTROLS]
    assert [tokenizer.token_to_id(token) for token in expected] == list(range(len(expected)))
    assert tokenizer.get_vocab_size() == 800


@pytest.mark.parametrize("token", [tk.BOS, tk.EOS, tk.PAD, *CONTROLS])
def test_special_tokens_are_single_ids_and_skipped_on_decode(small_tokenizer, token):
    tokenizer, _ = small_tokenizer
    text = f"{token}In the beginning{tk.EOS}"
    ids = tokenizer.encode(text).ids
    assert ids[0] == tokenizer.token_to_id(token) and ids[-1] == tokenizer.token_to_id(tk.EOS)
    assert tokenizer.decode(ids, skip_special_tokens=False) == text
    assert tokenizer.decode(ids, skip_special_tokens=True) == "In the beginning"


def test_saved_file_loads_in_tokenizers_and_transformers(small_tokenizer, fixture_rows):
    tokenizer, path = small_tokenizer
    reloaded = Tokenizer.from_file(str(path))
    fast = tk.as_transformers(path)
    assert (fast.bos_token_id, fast.eos_token_id, fast.pad_token_id) == (0, 1, 2)
    assert fast.convert_tokens_to_ids("<ratio_0.8>") == tokenizer.token_to_id("<ratio_0.8>")
    for text in [row["rv1909"] for row in fixture_rows[:20]] + ODD_TEXTS:
        ids = tokenizer.encode(text).ids
        assert reloaded.encode(text).ids == ids
        assert fast(text)["input_ids"] == ids
        assert fast.decode(ids) == text
    controlled = fast("<|law|>In the beginning")["input_ids"]
    assert fast.decode(controlled, skip_special_tokens=True) == "In the beginning"


def test_vocab_size_must_hold_specials_and_bytes():
    with pytest.raises(ValueError, match="`vocab_size` must be at least 261"):
        tk.train_tokenizer(["text"], 100, ["<a>", "<b>"])


def test_training_texts_use_only_the_training_split(fixture_rows):
    texts = tk.training_texts(fixture_rows, ("web", "rv1909"))
    held_out = {
        row[c] for row in fixture_rows if row["split"] != "train" for c in ("web", "rv1909")
    }
    assert texts and not held_out & set(texts)
    assert len(texts) % 2 == 0  # both languages of each verse


def test_measure_counts_tokens_per_word(small_tokenizer):
    tokenizer, _ = small_tokenizer
    stats = tk.measure(tokenizer, ["In the beginning God created", "the heaven and the earth."])
    assert 1.0 <= stats["tokens_per_word"] < 3.0
    assert stats["max_tokens"] >= stats["mean_tokens"] > 0


def test_default_control_tokens():
    assert len(tk.RATIO_TOKENS) == 20
    assert (tk.RATIO_TOKENS[0], tk.RATIO_TOKENS[-1]) == ("<ratio_0.1>", "<ratio_2.0>")
    assert set(tk.SECTION_TOKENS) == set(data.SECTIONS.values())
    assert len(set(tk.EN_CONTROL_TOKENS)) == len(tk.EN_CONTROL_TOKENS)
