"""Text ↔ characters for the hierarchical character-level model (seed 003), shared by train/ and
runtime/ (no torch, no numpy).

Covers: splitting a sentence into words the seed's way (a run of letters, a run of digits or a
run of other non-space characters is one word) with the space before a word kept as the word's
first character, so that joining the words gives the text back exactly; the character set with
its special symbols; spelling words as rows of character ids; the checks that turn bad input into
`ValueError`.

Does not cover: the model (train/hierarchical/recipes.py) or generation (runtime/hierarchical.py).
"""

from __future__ import annotations

import re
import string

PAD, END_OF_WORD, BEGIN_WORD, END_OF_SENTENCE, BEGIN_SENTENCE, UNKNOWN = range(6)
SPECIALS = ("<pad>", "<eow>", "<bow>", "<eos>", "<bos>", "<unk>")
WORD_CHARS = 20  # characters per word including the end-of-word symbol (the seed's limit)
MAX_WORDS = 30  # words per sentence, not counting the end-of-sentence word (the seed's limit)

_WORD_RE = re.compile(r" ?(?:[^\W\d_]+|\d+|[^\w\s]+|_+)")


def normalize(text: str) -> str:
    """Collapse every run of whitespace to one space and strip both ends."""
    return " ".join(text.split())


def split_words(text: str) -> list[str]:
    """Words of normalized `text`; a word keeps the space before it, so ''.join gives it back.

    >>> split_words("God’s word, 12 times.")
    ['God', '’', 's', ' word', ',', ' 12', ' times', '.']
    """
    return _WORD_RE.findall(normalize(text))


def default_charset(texts) -> list[str]:
    """Sorted characters of `texts` plus printable ASCII (so other authors' text fits)."""
    chars = set(string.ascii_letters + string.digits + string.punctuation + " ")
    for text in texts:
        chars.update(normalize(text))
    return sorted(chars)


class CharVocab:
    """Character ids: the six specials first, then `charset` in order."""

    def __init__(self, charset: list[str]):
        self.charset = list(charset)
        self.ids = {c: i + len(SPECIALS) for i, c in enumerate(self.charset)}

    def __len__(self) -> int:
        return len(SPECIALS) + len(self.charset)

    def char(self, index: int) -> str:
        """The character of id `index` ('' for a special symbol)."""
        return self.charset[index - len(SPECIALS)] if index >= len(SPECIALS) else ""

    def spell(self, word: str, strict: bool = True) -> list[int]:
        """Ids of `word`'s characters then end-of-word; unknown characters raise ValueError
        (`strict`) or become <unk>."""
        ids = []
        for c in word:
            if c in self.ids:
                ids.append(self.ids[c])
            elif strict:
                raise ValueError(f"character {c!r} is not in the model's character set")
            else:
                ids.append(UNKNOWN)
        return [*ids, END_OF_WORD]

    def check_sentence(self, text: str, max_words: int = MAX_WORDS) -> list[str]:
        """The words of `text`, or ValueError when it cannot be encoded."""
        if not isinstance(text, str) or not normalize(text):
            raise ValueError(f"`text` must be a non-empty string, got {text!r}")
        words = split_words(text)
        if len(words) > max_words:
            raise ValueError(f"`text` must have at most {max_words} words, got {len(words)}")
        for word in words:
            if len(word) + 1 > WORD_CHARS:
                raise ValueError(
                    f"words must have at most {WORD_CHARS - 1} characters, got {word.strip()!r}"
                )
            self.spell(word)
        return words
