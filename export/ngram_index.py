"""The memorisation meter's index: a causal-LM bundle's training text as word 8-gram hashes.

`build_ngram_index(texts)` hashes every word n-gram of each text (one running passage each, as
`train.evaluate.memorised_share` counts them) with `runtime.memorisation.ngram_hashes` and
returns them sorted and unique (uint64). `add_ngram_index(bundle, texts)` writes them to
`training_ngrams.npy` in the bundle, and records `memorisation_index` and the file's sha256 in
its manifest (docs/bundle.md).

    python -m export.ngram_index BUNDLE [BUNDLE ...] [--verses data/verses.tsv]

indexes the Bible LM's training text: the WEB chapters of the training books (train/lm.py).
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from convert.manifest import seal
from export.corpus import chapters, load_verses
from runtime.manifest import Manifest, MemorisationIndex
from runtime.memorisation import WORD_NGRAM, ngram_hashes

INDEX_FILE = "training_ngrams.npy"


def build_ngram_index(texts: Iterable[str], n: int = WORD_NGRAM) -> np.ndarray:
    """Sorted unique uint64 hashes of every word n-gram of `texts` (n-grams stay in a text)."""
    parts = [ngram_hashes(text.split(), n) for text in texts]
    return np.unique(np.concatenate(parts)) if parts else np.empty(0, np.uint64)


def write_ngram_index(
    bundle: Path, texts: Iterable[str], corpus: str, n: int = WORD_NGRAM
) -> MemorisationIndex:
    """Write the index of `texts` to `bundle`/training_ngrams.npy; returns the manifest's
    `memorisation_index` entry for it (the caller seals the manifest)."""
    index = build_ngram_index(texts, n)
    np.save(Path(bundle) / INDEX_FILE, index, allow_pickle=False)
    return MemorisationIndex(
        file=INDEX_FILE,
        n=n,
        ngrams=int(index.shape[0]),
        hash="blake2b-64 (little-endian) of the n words joined by U+001F",
        corpus=corpus,
    )


def add_ngram_index(bundle: str | Path, texts: Iterable[str], corpus: str, n: int = WORD_NGRAM):
    """Write the index of `texts` into `bundle` and list it in the manifest; returns the index."""
    bundle = Path(bundle)
    manifest = Manifest.read(bundle / "manifest.json")
    if manifest.task != "causal-lm":
        raise ValueError(f"`bundle` must be a causal-lm bundle, got task {manifest.task!r}")
    index = write_ngram_index(bundle, texts, corpus, n)
    seal(bundle, dataclasses.replace(manifest, memorisation_index=index), ensure_ascii=False)
    return np.load(bundle / INDEX_FILE, allow_pickle=False)


def bible_training_text(verses: Path) -> list[str]:
    """The Bible LM's training text: each training-book WEB chapter as one passage."""
    return [" ".join(chapter.verses) for chapter in chapters(load_verses(verses), "train")]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m export.ngram_index",
        description="Add the memorisation meter's training 8-gram index to Bible LM bundles.",
    )
    parser.add_argument("bundles", nargs="+", type=Path)
    parser.add_argument("--verses", type=Path, default=Path("data/verses.tsv"))
    args = parser.parse_args(argv)
    texts = bible_training_text(args.verses)
    for bundle in args.bundles:
        index = add_ngram_index(bundle, texts, "WEB chapters of the training books")
        print(f"{bundle}: {index.shape[0]:,} word 8-grams, {index.nbytes / 1e6:.1f} MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
