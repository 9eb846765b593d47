"""Static word vectors (manifest task "word-vectors"): neighbours, analogies and similarities
with numpy only, with gensim `KeyedVectors` semantics.

A bundle holds `vectors.npy` (float32, one row per word) and `vocab.txt` (`word<TAB>count`, in
row order). `runtime.load` returns a `WordVectors` for it. Queries are lower-cased and spaces
become "_", so "Holy Spirit" finds the phrase token `holy_spirit`.

`load_matrix` reads a token model's input embedding matrix (`embeddings.npy`, float16,
[vocab, hidden], named by the manifest's `embeddings`), which the app and study/ also use as static
vectors; it raises `ValueError` with a clear message when a bundle has none.

Does not cover: training (train/word_vectors.py) or contextual vectors (runtime/masked_lm.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .manifest import Manifest


def normalize_word(word: str) -> str:
    """The vocabulary form of a query word or phrase.

    >>> normalize_word("  Holy Spirit ")
    'holy_spirit'
    """
    return "_".join(word.strip().lower().replace("’", "'").split())


def load_matrix(bundle_dir: Path, manifest: Manifest) -> np.ndarray:
    """The input embedding matrix (vocab, hidden) as float32; ValueError if the bundle has none."""
    name = manifest.embeddings
    if not name or not (Path(bundle_dir) / name).exists():
        raise ValueError(
            f"model {manifest.name!r} has no embeddings.npy (manifest key `embeddings`); "
            "re-export it with a version of export/ that writes the input embeddings"
        )
    matrix = np.load(Path(bundle_dir) / name, allow_pickle=False)
    if matrix.ndim != 2:
        raise ValueError(f"{name} must be a [vocab, hidden] matrix, got shape {matrix.shape}")
    return matrix.astype(np.float32)  # (V, D)


class WordVectors:
    """One set of static vectors: `most_similar`, `similarity`, `vector`, `words`."""

    def __init__(
        self,
        words: Sequence[str],
        vectors: np.ndarray,
        name: str = "word vectors",
        manifest: Manifest | None = None,
        counts: Sequence[int] | None = None,
    ):
        if len(words) != len(vectors):
            raise ValueError(f"{name}: {len(words)} words but {len(vectors)} vectors")
        self.name = name
        self.manifest = manifest  # the bundle's; None for vectors made in memory
        self.words = list(words)
        self.counts = list(counts) if counts is not None else None
        self.vectors = np.asarray(vectors, dtype=np.float32)  # (V, D)
        self.index = {word: i for i, word in enumerate(self.words)}
        norms = np.linalg.norm(self.vectors, axis=1, keepdims=True)
        self.unit = self.vectors / np.maximum(norms, 1e-12)  # (V, D) rows of length 1

    @classmethod
    def from_bundle(cls, directory: str | Path, manifest: Manifest) -> WordVectors:
        """The vectors of a "word-vectors" bundle (vectors.npy + vocab.txt)."""
        directory = Path(directory)
        vectors = np.load(directory / manifest.vectors, allow_pickle=False)  # (V, D)
        lines = (directory / manifest.vocab).read_text().splitlines()
        words = [line.split("\t")[0] for line in lines]
        counts = [int(line.split("\t")[1]) for line in lines]
        return cls(words, vectors, manifest.name, manifest, counts)

    def __contains__(self, word: str) -> bool:
        return normalize_word(word) in self.index

    def _row(self, word: str, argument: str) -> int:
        if not isinstance(word, str) or not word.strip():
            raise ValueError(f"`{argument}` must be non-empty words, got {word!r}")
        key = normalize_word(word)
        if key not in self.index:
            raise ValueError(
                f"`{argument}` must be words in {self.name}'s vocabulary, got {word!r}"
            )
        return self.index[key]

    def vector(self, word: str) -> np.ndarray:
        """The raw (not normalized) vector of `word`."""
        return self.vectors[self._row(word, "word")]

    def similarity(self, a: str, b: str) -> float:
        """Cosine similarity of two words (gensim's `KeyedVectors.similarity`)."""
        return float(self.unit[self._row(a, "a")] @ self.unit[self._row(b, "b")])

    def most_similar(
        self, positive: Sequence[str] | str, negative: Sequence[str] = (), topn: int = 10
    ) -> list[tuple[str, float]]:
        """The `topn` words nearest to mean(unit(positive)) − mean… as gensim computes it:
        the unit vectors of `positive` (weight +1) and `negative` (weight −1) are averaged, the
        average is normalized, and every word is ranked by cosine to it (3CosAdd); the query
        words themselves are never returned. Returns [(word, cosine), …], best first."""
        if isinstance(positive, str):
            positive = [positive]
        if isinstance(negative, str):
            negative = [negative]
        if not isinstance(topn, int) or isinstance(topn, bool) or topn < 1:
            raise ValueError(f"`topn` must be a positive int, got {topn!r}")
        if not positive and not negative:
            raise ValueError("`positive` must name at least one word, got none")
        rows = [self._row(w, "positive") for w in positive]
        negative_rows = [self._row(w, "negative") for w in negative]
        weighted = [self.unit[r] for r in rows] + [-self.unit[r] for r in negative_rows]
        mean = np.mean(weighted, axis=0)
        mean = mean / max(np.linalg.norm(mean), 1e-12)
        scores = self.unit @ mean  # (V,)
        scores[rows + negative_rows] = -np.inf
        count = min(topn, len(self.words) - len(set(rows + negative_rows)))
        best = np.argpartition(-scores, count - 1)[:count] if count > 0 else np.array([], int)
        best = best[np.argsort(-scores[best], kind="stable")]
        return [(self.words[i], float(scores[i])) for i in best]

    def analogy(self, a: str, b: str, c: str, topn: int = 5) -> list[tuple[str, float]]:
        """`a` is to `b` as `c` is to …: most_similar(positive=[b, c], negative=[a])."""
        return self.most_similar(positive=[b, c], negative=[a], topn=topn)
