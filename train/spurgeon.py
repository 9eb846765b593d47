"""The style corpus: C. H. Spurgeon's own exposition in *The Treasury of David* (SWORD module
TDavid, Debian sword-comm-tdavid), as consecutive-sentence pairs for train/hierarchical/recipes.py.

The module's OSIS text marks sections with `<title type="x-s">` headings. Spurgeon's own words are
the EXPOSITION sections; the quoted writers are in "EXPLANATORY NOTES AND QUAINT SAYINGS" and the
other sections, which are dropped, as are poetry lines (`<l>`, mostly quoted verse). Paragraphs
are split into sentences (after . ! ? followed by a space and a capital or quote), sentences into
words with runtime.hierarchical_text; a pair is two consecutive sentences of one paragraph that
both fit the model (≤ 30 words, ≤ 19 characters a word, characters in the model's set).
Psalms are taken in order: the first ones until the training slice reaches `train_words`, then
the next ones for validation, then for test (held-out Psalms, not held-out sentences).

    python -m train.spurgeon --out checkpoints/hier/spurgeon.json [--imp tdavid.imp]

Does not cover: the model and its training (train/hierarchical/recipes.py).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

from runtime import hierarchical_text
from train import data

MODULE = "TDavid"
KEPT_SECTION = "EXPOSITION"
_TITLE_RE = re.compile(r'<title type="x-s">(.*?)</title>', re.S)
_PARAGRAPH_END_RE = re.compile(r'<div eID="[^"]*" type="x-p"/>')
_POETRY_RE = re.compile(r"<l [^>]*sID[^>]*/>.*?<l [^>]*eID[^>]*/>", re.S)
_TAG_RE = re.compile(r"<[^>]*>")
_SENTENCE_END_RE = re.compile(r"(?<=[.!?])[\"”’']?\s+(?=[\"“‘']?[A-Z])")


def exposition_paragraphs(imp_lines) -> list[tuple[int, str]]:
    """(psalm, paragraph text) of every EXPOSITION section, in order."""
    paragraphs = []
    for psalm, section, paragraph in section_paragraphs(imp_lines):
        if section != KEPT_SECTION:
            continue
        text = hierarchical_text.normalize(_TAG_RE.sub(" ", paragraph).replace(" —", "—"))
        text = re.sub(r"\s+([,.;:?!])", r"\1", text)
        if text:
            paragraphs.append((psalm, text))
    return paragraphs


def section_paragraphs(imp_lines):
    """(psalm, SECTION TITLE, raw OSIS paragraph) of every paragraph of the module, in order;
    poetry lines are dropped. A section runs from its `<title type="x-s">` heading to the
    next (the text before a psalm's first heading continues the previous psalm's last one)."""
    section = None
    for book, chapter, _, raw in data.parse_imp(imp_lines):
        if book != "Psalms" or chapter == 0:
            continue
        parts = _TITLE_RE.split(raw)  # text, title, text, title, ...
        for index, part in enumerate(parts):
            if index % 2:
                section = _TAG_RE.sub("", part).strip().rstrip(".").upper()
                continue
            for paragraph in _PARAGRAPH_END_RE.split(_POETRY_RE.sub(" ", part)):
                yield chapter, section, paragraph


def sentence_pairs(
    paragraph: str, vocab: hierarchical_text.CharVocab
) -> list[tuple[list[str], list[str]]]:
    sentences = [hierarchical_text.split_words(s) for s in _SENTENCE_END_RE.split(paragraph)]
    fits = [
        0 < len(w) <= hierarchical_text.MAX_WORDS
        and all(len(x) < hierarchical_text.WORD_CHARS and all(c in vocab.ids for c in x) for x in w)
        for w in sentences
    ]
    return [(a, b) for a, b, fa, fb in zip(sentences, sentences[1:], fits, fits[1:]) if fa and fb]


def build(imp_lines, charset: list[str], train_words: int = 100_000, held_out_words: int = 12_000):
    """{"train"|"validation"|"test": [(source words, target words)], "psalms": {split: [first,
    last]}, "words": {split: target words}}."""
    vocab = hierarchical_text.CharVocab(charset)
    by_psalm: dict[int, list] = {}
    for psalm, paragraph in exposition_paragraphs(imp_lines):
        by_psalm.setdefault(psalm, []).extend(sentence_pairs(paragraph, vocab))
    budgets = {"train": train_words, "validation": held_out_words, "test": held_out_words}
    corpus = {split: [] for split in budgets}
    psalms = {split: [] for split in budgets}
    splits = iter(budgets)
    split = next(splits)
    for psalm in sorted(by_psalm):
        if sum(len(t) for _, t in corpus[split]) >= budgets[split]:
            split = next(splits, None)
            if split is None:
                break
        corpus[split].extend(by_psalm[psalm])
        psalms[split].append(psalm)
    return {
        **corpus,
        "psalms": {s: [p[0], p[-1]] for s, p in psalms.items() if p},
        "words": {s: sum(len(t) for _, t in pairs) for s, pairs in corpus.items()},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m train.spurgeon", description=__doc__)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--imp", type=Path, help="mod2imp output (default: run mod2imp TDavid)")
    parser.add_argument(
        "--verses",
        type=Path,
        default=data.DEFAULT_OUT,
        help="verse table whose WEB text gives the model's character set",
    )
    args = parser.parse_args(argv)
    if args.imp:
        lines = args.imp.read_text(encoding="utf-8").splitlines()
    else:
        lines = subprocess.run(
            ["mod2imp", MODULE], capture_output=True, text=True, check=True
        ).stdout.splitlines()
    charset = hierarchical_text.default_charset(r["web"] for r in data.load_verses(args.verses))
    corpus = build(lines, charset)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(corpus))
    print(
        {k: len(corpus[k]) for k in ("train", "validation", "test")},
        corpus["psalms"],
        corpus["words"],
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
