"""Seed 001's evaluations: the analogy and similarity set, and static against contextual
neighbours of words with several senses.

The set (committed, built by hand from World English Bible vocabulary):
- `analogy_pairs.txt`: sections of word pairs (family male → female, pronouns, regular and
  irregular plurals, past tense); every ordered pair of pairs in a section is one question
  "a : b :: c : ?" (answer d), as in Mikolov et al.'s question set;
- `similarity_triples.txt`: "word closer farther" triples; passed when
  cosine(word, closer) > cosine(word, farther).

Every model answers with 3CosAdd on unit vectors, query words excluded (gensim's most_similar,
`runtime.word_vectors`), over its own vocabulary: word2vec's words, or for a transformer's input
embeddings its tokens that are a space plus lower-case letters (" king" → king); a question with
a word outside a model's vocabulary is skipped and counted in its coverage.

Static against contextual (`contextual_neighbours`): word2vec gives a word one neighbour list; a
masked LM, given a sentence with the word masked, ranks the words that fit that slot, so the same
word gets different neighbours in different sentences. `POLYSEMOUS` holds Bible sentence pairs.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import numpy as np

from runtime.word_vectors import WordVectors

HERE = Path(__file__).resolve().parent
PAIRS = HERE / "analogy_pairs.txt"
TRIPLES = HERE / "similarity_triples.txt"
LOWER_WORD = re.compile(r"^ [a-z]+$")
CANDIDATES = 100  # most probable fillers searched for word tokens
POLYSEMOUS = {
    "light": (
        "God said, “Let there be light,” and there was light.",
        "For my yoke is easy, and my burden is light.",
    ),
    "spirit": (
        "God’s Spirit was hovering over the surface of the waters.",
        "Blessed are the poor in spirit, for theirs is the Kingdom of Heaven.",
    ),
    "bread": (
        "Give us today our daily bread.",
        "Jesus said to them, “I am the bread of life.”",
    ),
    "word": (
        "In the beginning was the Word, and the Word was with God.",
        "He did not answer her a word.",
    ),
    "house": (
        "Solomon built the house of Yahweh in seven years.",
        "Hear the word of Yahweh, O house of Israel.",
    ),
}


def load_pairs(path: Path = PAIRS) -> dict[str, list[tuple[str, str]]]:
    sections: dict[str, list[tuple[str, str]]] = {}
    current = None
    for line in path.read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        if line.startswith(":"):
            current = line[1:].strip()
            sections[current] = []
        else:
            a, b = line.split()
            sections[current].append((a, b))
    return sections


def questions(sections: dict[str, list[tuple[str, str]]]) -> list[tuple[str, str, str, str, str]]:
    """(section, a, b, c, d) for every ordered pair of distinct pairs in a section."""
    return [
        (name, a, b, c, d)
        for name, pairs in sections.items()
        for (a, b), (c, d) in itertools.permutations(pairs, 2)
        if len({a, b, c, d}) == 4
    ]


def load_triples(path: Path = TRIPLES) -> list[tuple[str, str, str]]:
    lines = path.read_text().splitlines()
    return [tuple(line.split()) for line in lines if line.strip() and not line.startswith("#")]


def from_embeddings(matrix: np.ndarray, tokenizer, name: str) -> WordVectors:
    """A transformer's input embeddings as word vectors: its " word" tokens (lower case)."""
    words, rows = [], []
    for index in range(min(tokenizer.get_vocab_size(), len(matrix))):
        text = tokenizer.decode([index])
        if LOWER_WORD.match(text):
            words.append(text[1:])
            rows.append(index)
    return WordVectors(words, matrix[rows], name=name)


def evaluate(vectors: WordVectors) -> dict:
    """Analogy accuracy (overall and per section) and similarity-triple accuracy, with coverage."""
    all_questions = questions(load_pairs())
    per_section: dict[str, list[int]] = {}
    covered = correct = 0
    for section, a, b, c, d in all_questions:
        seen = per_section.setdefault(section, [0, 0, 0])  # correct, covered, total
        seen[2] += 1
        if not all(w in vectors for w in (a, b, c, d)):
            continue
        guess = vectors.most_similar(positive=[b, c], negative=[a], topn=1)[0][0]
        covered += 1
        seen[1] += 1
        if guess == d:
            correct += 1
            seen[0] += 1
    triples = load_triples()
    usable = [t for t in triples if all(w in vectors for w in t)]
    passed = sum(
        vectors.similarity(w, near) > vectors.similarity(w, far) for w, near, far in usable
    )
    return {
        "analogy_accuracy": correct / covered if covered else None,
        "analogy_questions": covered,
        "analogy_total": len(all_questions),
        "sections": {
            name: {"accuracy": c / n if n else None, "questions": n, "total": t}
            for name, (c, n, t) in per_section.items()
        },
        "similarity_accuracy": passed / len(usable) if usable else None,
        "similarity_triples": len(usable),
        "similarity_total": len(triples),
    }


def contextual_neighbours(gen, sentence: str, word: str, k: int = 8) -> list[tuple[str, float]]:
    """The masked LM's `k` best word fillers (token text, probability) for `word` masked in
    `sentence` (its first whole-word occurrence, case-insensitive). Only tokens that are words
    (letters, after an optional space) count, as word2vec's neighbours are words: punctuation
    and the mask's own word are skipped among the 100 most probable tokens."""
    match = re.search(rf"\b{re.escape(word)}\b", sentence, flags=re.IGNORECASE)
    if match is None:
        raise ValueError(f"`word` must occur in `sentence`, got {word!r} and {sentence!r}")
    masked = sentence[: match.start()].rstrip() + " " + gen.mask_token
    masked = (masked + sentence[match.end() :]).strip()
    fills = gen.fill_mask(masked, top_k=CANDIDATES)
    found = [(fill["token_str"].strip(), fill["score"]) for fill in fills]
    return [(w, p) for w, p in found if w.isalpha() and w.lower() != word.lower()][:k]
