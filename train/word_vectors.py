"""Seed 001's static word vectors: word2vec skip-gram and CBOW (gensim) on the World English
Bible's training books, after Mikolov's phrase detection, shipped without pickle.

Text: each training verse, lower-cased, split into words (letters with inner apostrophes).
Phrases: gensim `Phrases` with Mikolov et al.'s scoring, seed 001's
S = (C(wi wj) − δ) / (C(wi) C(wj)) (gensim's "default" scorer, which also multiplies by the
vocabulary size), δ = `min_count` = 5, threshold 10, and English connector words, so that
"son of man" can join across "of"; two passes, so that phrases of phrases form ("holy spirit").
Both models then train on the same phrased sentences with the same settings (100 dimensions,
window 5, negative sampling, 20 epochs, one worker, seed 0); only `sg` differs. gensim seeds
each initial vector from Python's string hash, so runs repeat exactly only with PYTHONHASHSEED=0.

A bundle (`models/word2vec/<skipgram|cbow>/`): `vectors.npy` (float32, one row per word, rows in
`vocab.txt` order, most frequent first), `vocab.txt` (`word<TAB>count`), manifest.json with task
"word-vectors" and checksums, README.md (card). `runtime.word_vectors` serves it with numpy.

    python -m train.word_vectors [--tiny] [--out models/word2vec] [--verses data/verses.tsv]
    python -m train.word_vectors --corpus data/library.jsonl   # train/library.py's sentences
    python -m train.word_vectors --ship checkpoints/word2vec-library --max-words 30000 \
        --compare checkpoints/word2vec-web/skipgram checkpoints/word2vec-web/cbow

`--ship DIR --max-words N` trains nothing: it writes DIR's two bundles to `--out` restricted to
their N most frequent words (the first N rows: gensim's `restrict_vocab`, rows being in
descending frequency order) and writes the cards, which compare them with DIR's full vectors and
the `--compare` bundles (e.g. the earlier WEB-only vectors) on the same analogy set.

Does not cover: serving (runtime/word_vectors.py), the analogy and similarity set and its
evaluation (study/word_analogies.py).
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys
import time
from pathlib import Path

import numpy as np

from runtime.manifest import Manifest
from train import data

WORD = re.compile(r"[a-z]+(?:[’'][a-z]+)*")
VARIANTS = {"skipgram": 1, "cbow": 0}
SETTINGS = {"vector_size": 100, "window": 5, "min_count": 5, "negative": 5, "epochs": 20}
TINY_SETTINGS = {"vector_size": 16, "window": 3, "min_count": 1, "negative": 3, "epochs": 2}
PHRASE_SETTINGS = {"min_count": 5, "threshold": 10.0, "passes": 2}
TINY_PHRASE_SETTINGS = {"min_count": 1, "threshold": 1.0, "passes": 1}
DEFAULT_OUT = Path("models/word2vec")
TASK = "word-vectors"


def words(text: str) -> list[str]:
    """Lower-cased words of a verse; curly apostrophes become straight ones.

    >>> words("The Son of Man’s Spirit, 12 times.")
    ['the', 'son', 'of', "man's", 'spirit', 'times']
    """
    return [w.replace("’", "'") for w in WORD.findall(text.lower())]


def training_sentences(rows: list[dict]) -> list[list[str]]:
    return [words(r["web"]) for r in rows if r["split"] == "train" and r["web"]]


def library_sentences(path: Path) -> list[list[str]]:
    """Words of every sentence of train/library.py's output (held-out text already removed)."""
    from train.library import load_library

    return [words(s) for record in load_library(path) for s in record["sentences"]]


WEB_TRAINING_DATA = {
    "corpus": "World English Bible (SWORD module engWEB2015eb), training books",
    "licence": "public domain",
}


def library_training_data(path: Path) -> dict:
    """The manifest's training_data for a run on the library: its sources and their licences."""
    from train.library import SOURCES, load_library

    sources = list(dict.fromkeys(record["source"] for record in load_library(path)))
    return {
        "corpus": "train/library.py's sentences ("
        + ", ".join(SOURCES[s][0] for s in sources)
        + "; held-out books, Psalms and verses removed)",
        "library": str(path),
        "licence": "Trained on " + "; ".join(f"{s}: {SOURCES[s][1]}" for s in sources),
    }


def phrase(sentences: list[list[str]], min_count: int, threshold: float, passes: int):
    """The sentences with detected phrases joined by "_", and the frozen phrasers in order."""
    from gensim.models.phrases import ENGLISH_CONNECTOR_WORDS, Phrases

    phrasers = []
    for _ in range(passes):
        model = Phrases(
            sentences,
            min_count=min_count,
            threshold=threshold,
            scoring="default",
            connector_words=ENGLISH_CONNECTOR_WORDS,
        ).freeze()
        sentences = [model[s] for s in sentences]
        phrasers.append(model)
    return sentences, phrasers


def train_variant(sentences, sg: int, settings: dict, seed: int = 0):
    from gensim.models import Word2Vec

    return Word2Vec(sentences, sg=sg, workers=1, seed=seed, **settings)


def save_bundle(keyed_vectors, out_dir: Path, manifest: Manifest) -> None:
    """vectors.npy + vocab.txt + manifest.json (checksums); keyed_vectors is gensim's."""
    from convert.manifest import seal

    out_dir.mkdir(parents=True, exist_ok=True)
    np.save(out_dir / "vectors.npy", keyed_vectors.vectors.astype(np.float32))
    lines = [f"{w}\t{keyed_vectors.get_vecattr(w, 'count')}" for w in keyed_vectors.index_to_key]
    (out_dir / "vocab.txt").write_text("\n".join(lines) + "\n")
    seal(out_dir, manifest)


def restrict(source: Path, out_dir: Path, max_words: int) -> None:
    """`source`'s bundle with only its `max_words` most frequent words: its first rows, in its
    order (gensim's `restrict_vocab`); the manifest records what was cut."""
    from convert.manifest import seal

    manifest = Manifest.read(source / "manifest.json")
    vectors = np.load(source / manifest.vectors, allow_pickle=False)  # (V, D)
    lines = (source / manifest.vocab).read_text().splitlines()
    counts = [int(line.split("\t")[1]) for line in lines]
    if any(a < b for a, b in zip(counts, counts[1:])):
        raise ValueError(f"`source` rows must be in descending frequency order, got {source}")
    if not 0 < max_words <= len(lines):
        raise ValueError(f"`max_words` must be in [1, {len(lines)}], got {max_words}")
    out_dir.mkdir(parents=True, exist_ok=True)
    np.save(out_dir / "vectors.npy", vectors[:max_words].astype(np.float32))
    (out_dir / "vocab.txt").write_text("\n".join(lines[:max_words]) + "\n")
    restricted = {
        "from": str(source),
        "vocab_size": len(lines),
        "min_count_kept": counts[max_words - 1],
    }
    seal(out_dir, dataclasses.replace(manifest, vocab_size=max_words, restricted=restricted))


def label(manifest: Manifest, vocab_size: int | None = None) -> str:
    """A word2vec bundle's row name in the cards' tables: name, corpus and vocabulary size."""
    corpus = "library" if "library" in manifest.training_data else "WEB"
    return f"{manifest.name} ({corpus}, {vocab_size or manifest.vocab_size:,} words)"


def evaluations(out: Path, reference: Path | None, compare: list[Path] = ()) -> dict[str, dict]:
    """study.word_analogies.evaluate of both variants in `out`, of the `compare` bundles and of
    the reference bundle's input embeddings (e.g. the Bible LM's), by `label`."""
    import runtime
    from runtime.word_vectors import load_matrix
    from study import word_analogies as wa

    results = {}
    for bundle in [out / variant for variant in VARIANTS] + list(compare):
        vectors = runtime.load(bundle)
        results[label(vectors.manifest)] = wa.evaluate(vectors)
    if reference is not None and reference.exists():
        gen = runtime.load(reference)
        name = f"{gen.manifest.name} input embeddings"
        vectors = wa.from_embeddings(load_matrix(gen.directory, gen.manifest), gen.tokenizer, name)
        results[name] = wa.evaluate(vectors)
    return results


def rounded(share: float | None) -> float | None:
    """A share for the manifest: 3 decimals, None when no question was answerable."""
    return None if share is None else round(share, 3)


def percent(share: float | None, decimals: int = 0) -> str:
    """A share for the card: "57.6 %", or "–" when no question was answerable."""
    return "–" if share is None else f"{100 * share:.{decimals}f} %"


def card_metrics(manifest: Manifest, results: dict[str, dict]) -> dict:
    """The manifest's metrics of one bundle: its analogy and similarity scores, and for a
    restricted bundle how many analogy questions its full vocabulary leaves out."""
    own = results[label(manifest)]
    metrics = {
        "analogy accuracy (3CosAdd, top 1)": rounded(own["analogy_accuracy"]),
        "analogy questions answered": own["analogy_questions"],
        "analogy questions out of vocabulary": own["analogy_total"] - own["analogy_questions"],
        "similarity triples passed": rounded(own["similarity_accuracy"]),
    }
    restricted = manifest.restricted  # set by `restrict`
    if restricted:
        full = results[label(manifest, restricted["vocab_size"])]
        metrics["analogy questions out of vocabulary, full vocabulary"] = (
            full["analogy_total"] - full["analogy_questions"]
        )
    return metrics


def vocabulary_text(manifest: Manifest, results: dict[str, dict]) -> tuple[str, str]:
    """The card's vocabulary row and, for a restricted bundle, its paragraph comparing the
    restricted vocabulary with the full one ("" otherwise)."""
    restricted, settings = manifest.restricted, manifest.settings
    if not restricted:
        return f"{manifest.vocab_size:,} words and phrases (min count {settings['min_count']})", ""
    own = results[label(manifest)]
    full = results[label(manifest, restricted["vocab_size"])]
    vocabulary = (
        f"the {manifest.vocab_size:,} most frequent of {restricted['vocab_size']:,} words "
        f"and phrases (min count {settings['min_count']}; those kept: count ≥ "
        f"{restricted['min_count_kept']})"
    )
    restriction = (
        f"\nThis bundle keeps the {manifest.vocab_size:,} most frequent of the "
        f"{restricted['vocab_size']:,} words its run learnt (the first rows, as gensim's "
        f"`restrict_vocab`; full vectors: `{restricted['from']}`). Out of vocabulary: "
        f"{own['analogy_total'] - own['analogy_questions']} of {own['analogy_total']} "
        f"analogy questions restricted, {full['analogy_total'] - full['analogy_questions']} "
        f"with the full vocabulary; similarity triples usable: {own['similarity_triples']} "
        f"restricted, {full['similarity_triples']} full, of {own['similarity_total']}.\n"
    )
    return vocabulary, restriction


def evaluation_table(manifest: Manifest, results: dict[str, dict]) -> str:
    """Every evaluated model's analogy accuracy (overall and per section of this bundle's
    evaluation) and similarity triples passed, one row a model."""
    from train.common import markdown_table

    sections = list(results[label(manifest)]["sections"])
    rows = [
        [name, percent(r["analogy_accuracy"], 1), r["analogy_questions"]]
        + [percent(r["sections"][s]["accuracy"]) for s in sections]
        + [f"{percent(r['similarity_accuracy'])} of {r['similarity_triples']}"]
        for name, r in results.items()
    ]
    return markdown_table(["model", "analogies", "questions", *sections, "similarity"], rows)


def nearest_neighbours(vectors) -> str:
    """A bullet a probe word (the polysemous words and two phrases) in the vocabulary: its 8
    nearest neighbours."""
    from study import word_analogies

    return "\n".join(
        f"- **{word}**: " + ", ".join(w for w, _ in vectors.most_similar(word, topn=8))
        for word in [*word_analogies.POLYSEMOUS, "holy_spirit", "son_of_man"]
        if word in vectors
    )


def licence_text(training_data: dict) -> str:
    """The card's licence: the WEB's public domain, or the library's licence (with GCIDE's
    GPL caveat when it names the GPL)."""
    if not training_data.get("library"):
        return "Public domain: trained only on the public-domain World English Bible"
    licence = training_data["licence"]
    if "GPL" in licence:
        licence += (
            ".\n\nGCIDE is not public domain as a compilation: Debian licenses it under the GNU "
            "GPL, version 2 or later (docs/DATA.md). Whether vectors trained on it must carry the "
            "GPL is not settled; redistribute them as GPL-2.0-or-later material to be safe"
        )
    return licence


def card_text(manifest: Manifest, vectors, results: dict[str, dict]) -> str:
    """README.md (model card) of one bundle: its settings, training text, evaluation against
    the other models in `results`, nearest neighbours and licence."""
    settings, phrases, corpus = manifest.settings, manifest.phrases, manifest.training_data
    vocabulary, restriction = vocabulary_text(manifest, results)
    window = f"{settings['window']}, {settings['negative']}, {settings['epochs']}"
    phrase_line = (
        f"{corpus['phrases_detected']:,} detected, {phrases['passes']} passes, Mikolov scoring, "
        f"threshold {phrases['threshold']}, δ = min count {phrases['min_count']}"
    )
    library = corpus.get("library")  # set when trained on train/library.py's output
    unit = "sentences" if library else "verses"
    trained_on = corpus["corpus"] if library else "the World English Bible's training books"
    text_line = f"{corpus['sentences']:,} {unit}, {corpus['tokens']:,} tokens after phrasing"
    return f"""# {manifest.name}

Static word vectors (seed 001): word2vec {"skip-gram" if settings["sg"] else "CBOW"} trained
with gensim on {trained_on} after Mikolov phrase detection.

| | |
|---|---|
| task | word-vectors (`runtime.load` → `WordVectors`: `most_similar`, `similarity`) |
| vocabulary | {vocabulary} |
| dimensions | {settings["vector_size"]} |
| window, negative samples, epochs | {window} |
| phrases | {phrase_line} |
| training text | {text_line} |
| training time | {manifest.train_seconds} s, one worker, shared 2-core machine |
| files | `vectors.npy` (float32, no pickle), `vocab.txt` (word, count), `manifest.json` |

## Evaluation

The analogy and similarity set of `study/analogy_pairs.txt` and `study/similarity_triples.txt`
(built from Bible vocabulary; docs/MASKED_LM.md): "a : b :: c : ?" answered with 3CosAdd on unit
vectors, query words excluded, top 1 must be the answer; a question with a word out of a
model's vocabulary is skipped ("questions": those answered). Rows: each model's name, training
text (WEB or library) and vocabulary size; the Bible LM's input embeddings are evaluated the
same way over its " word" tokens.
{restriction}
{evaluation_table(manifest, results)}

## Nearest neighbours

{nearest_neighbours(vectors)}

## Licence

{licence_text(corpus)}.
"""


def write_card(bundle: Path, results: dict[str, dict]) -> None:
    """README.md (model card) of one bundle, then manifest.json's metrics and checksums."""
    import runtime
    from convert.manifest import seal

    manifest = Manifest.read(bundle / "manifest.json")
    vectors = runtime.load(bundle)
    (bundle / "README.md").write_text(card_text(manifest, vectors, results))
    seal(bundle, dataclasses.replace(manifest, metrics=card_metrics(manifest, results)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m train.word_vectors", description=__doc__)
    parser.add_argument("--verses", type=Path, default=None)
    parser.add_argument(
        "--corpus", type=Path, help="train on this library (python -m train.library), not the WEB"
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--tiny", action="store_true", help="seconds-long run on the fixture")
    parser.add_argument(
        "--reference",
        type=Path,
        default=Path("models/bible-lm"),
        help="bundle whose input embeddings the cards compare with",
    )
    parser.add_argument(
        "--compare",
        type=Path,
        nargs="*",
        default=[],
        help="word2vec bundles the cards compare with",
    )
    parser.add_argument(
        "--ship", type=Path, help="train nothing: restrict this run's bundles into --out"
    )
    parser.add_argument("--max-words", type=int, help="with --ship: keep the N most frequent words")
    args = parser.parse_args(argv)
    if args.ship is not None:
        if args.max_words is None:
            parser.error("--ship needs --max-words")
        for variant in VARIANTS:
            restrict(args.ship / variant, args.out / variant, args.max_words)
        return write_cards(
            args.out, args.reference, [args.ship / v for v in VARIANTS] + args.compare
        )
    verses = args.verses or (data.FIXTURE if args.tiny else data.DEFAULT_OUT)
    rows = data.load_verses(verses)
    settings = TINY_SETTINGS if args.tiny else SETTINGS
    phrase_settings = TINY_PHRASE_SETTINGS if args.tiny else PHRASE_SETTINGS
    if args.corpus is not None:
        texts, training_data = library_sentences(args.corpus), library_training_data(args.corpus)
    else:
        texts, training_data = training_sentences(rows), WEB_TRAINING_DATA
    sentences, phrasers = phrase(texts, **phrase_settings)
    phrases = sorted(
        {w for model in phrasers for w in model.phrasegrams}, key=lambda p: -len(p)
    )  # phrasegrams keys are "a_b" strings in gensim 4
    print(f"{len(sentences)} sentences, {sum(map(len, sentences))} tokens, {len(phrases)} phrases")
    for variant, sg in VARIANTS.items():
        started = time.perf_counter()
        model = train_variant(sentences, sg, settings)
        seconds = time.perf_counter() - started
        manifest = Manifest(
            name=f"word2vec-{variant}",
            task=TASK,
            architecture=f"word2vec {'skip-gram' if sg else 'CBOW'} (gensim)",
            precision="fp32",
            batch_invariant=False,  # no graph: nothing is batched
            vectors="vectors.npy",
            vocab="vocab.txt",
            vector_size=settings["vector_size"],
            vocab_size=len(model.wv),
            settings={**settings, "sg": sg, "seed": 0, "workers": 1},
            phrases={**phrase_settings, "scoring": "default (Mikolov)", "connector_words": True},
            training_data={
                **training_data,
                "sentences": len(sentences),
                "tokens": sum(map(len, sentences)),
                "phrases_detected": len(phrases),
            },
            train_seconds=round(seconds, 1),
        )
        save_bundle(model.wv, args.out / variant, manifest)
        print(f"{variant}: {len(model.wv)} words in {seconds:.0f} s -> {args.out / variant}")
    return write_cards(args.out, args.reference, args.compare)


def write_cards(out: Path, reference: Path | None, compare: list[Path]) -> int:
    """Evaluate (`evaluations`), write both cards in `out`, print the results."""
    results = evaluations(out, reference, compare)
    for variant in VARIANTS:
        write_card(out / variant, results)
    for name, result in results.items():
        answered = f"{result['analogy_questions']}/{result['analogy_total']}"
        print(f"{name}: analogies {result['analogy_accuracy']} of {answered}, similarity "
              f"{result['similarity_accuracy']}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
