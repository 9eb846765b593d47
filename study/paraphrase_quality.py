"""How good seed 003's paraphrases are (issue 24): the autoencoder's reconstructions, and on a
fixed set of unseen everyday sentences the closest candidate that changes the sentence, with a
hand-judged share of those that keep the meaning.

- The set: `everyday_sentences.txt` (60 sentences written by hand for this study, 6-14 words, no
  Bible or corpus text; `everyday_sentences()` loads it). It never changes, so every model is
  measured on the same sentences.
- Paraphrase as the app runs it: `gen.paraphrase(sentence, 40, seed=0)` with temperature and
  noise weight drawn from (0, 1), the Paraphrase tab's defaults (ui/paraphrase_tab.py). The
  **closest changed candidate** is the best-ranked candidate whose text differs from the source
  once both are case-folded and their whitespace collapsed (`closest_changed`).
- `everyday_measures`: the share of sentences with any changed candidate, and the closest
  changed candidates' chrF to their sources (sacreBLEU chrF, default settings): the mean of the
  sentence-level scores (the headline, `chrf_mean`) and the corpus score (`chrf_corpus`), with
  a floor (the same scores for another sentence of the set, the list rotated by half its
  length); plus `reconstruction_quality` on the same sentences.
- `reconstruction_quality`: the greedy reconstruction's exact share, corpus BLEU and chrF
  against the sentences, and the same floor (train/hierarchical/ship.py scores the WEB test
  verses with it).
- Meaning kept, judged by hand: `write_unjudged` writes the first JUDGED_SAMPLE sources and their
  closest changed candidates to a TSV (columns index, source, candidate, keeps_meaning); a person
  fills keeps_meaning with yes or no by JUDGING_RULE; `meaning_kept` checks that the TSV holds
  this bundle's candidates and returns the share of yes. Committed judgements live in
  study/judgements/.

    python -m study.paraphrase_quality --bundle models/paraphraser/int8 \
        [--judged study/judgements/paraphraser-web.tsv] [--write-unjudged FILE.tsv] [--json OUT]

Does not cover: generating candidates (runtime/hierarchical.py), the Paraphrase tab
(ui/paraphrase_tab.py), shipping (train/hierarchical/ship.py, train/hierarchical/library_ship.py).
"""

from __future__ import annotations

import argparse
import collections
import csv
import json
import sys
from pathlib import Path

import sacrebleu

SENTENCES_FILE = Path(__file__).with_name("everyday_sentences.txt")
JUDGEMENTS_DIR = Path(__file__).with_name("judgements")
NUM_CANDIDATES = 40  # the Paraphrase tab's defaults: 40 candidates, T and w from (0, 1), seed 0
TEMPERATURE_RANGE = (0.0, 1.0)
NOISE_RANGE = (0.0, 1.0)
SEED = 0
JUDGED_SAMPLE = 30  # the first sentences of the set whose closest changed candidate is judged
JUDGING_RULE = (
    "yes when a reader would accept the candidate as saying the same thing as the source "
    "(other words, order or grammar slips allowed); no when it changes who or what the "
    "sentence is about, what was done, or when, where, how many; no when it is nonsense or "
    "says only part of the source"
)
TSV_COLUMNS = ("index", "source", "candidate", "keeps_meaning")


def everyday_sentences(path: Path = SENTENCES_FILE) -> list[str]:
    """The sentences of `path`, one a line; lines starting with # and blank lines are skipped.

    >>> sentences = everyday_sentences()
    >>> len(sentences), sentences[0]
    (60, 'She put the kettle on and made two cups of tea.')
    """
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def normalized(text: str) -> str:
    """Case-folded, whitespace collapsed: two texts that differ only so are the same sentence.

    >>> normalized("  The cat  SAT. ") == normalized("the cat sat.")
    True
    """
    return " ".join(text.split()).casefold()


def closest_changed(source: str, candidates: list):
    """The best-ranked of `candidates` (sorted closest first) whose text is not the source's
    (compared `normalized`), or None when every candidate repeats the source."""
    return next((c for c in candidates if normalized(c.text) != normalized(source)), None)


def closest_changed_texts(generator, sentences: list[str], seed: int = SEED) -> list[str | None]:
    """Each sentence's closest changed candidate text under the app's default settings, the
    same seed for every sentence (as a user who keeps the tab's seed); None where none changed."""
    texts = []
    for sentence in sentences:
        candidates = generator.paraphrase(
            sentence,
            NUM_CANDIDATES,
            seed=seed,
            temperature_range=TEMPERATURE_RANGE,
            noise_range=NOISE_RANGE,
        )
        changed = closest_changed(sentence, candidates)
        texts.append(None if changed is None else changed.text.strip())
    return texts


def _chrf(hypotheses: list[str], references: list[str]) -> tuple[float, float]:
    """(mean sentence-level chrF, corpus chrF) of hypotheses against their references."""
    scores = [sacrebleu.sentence_chrf(h, [r]).score for h, r in zip(hypotheses, references)]
    mean = sum(scores) / len(scores)
    return mean, sacrebleu.corpus_chrf(hypotheses, [references]).score


def _rotated(sentences: list[str]) -> list[str]:
    half = len(sentences) // 2
    return sentences[half:] + sentences[:half]


def reconstruction_quality(generator, sentences: list[str]) -> dict:
    """How much of each sentence the autoencoder's greedy reconstruction keeps: the share
    reconstructed exactly (and the three most frequent of those), corpus BLEU and chrF against
    the sentences themselves, and, as the floor, the same scores for other sentences of the
    list (rotated by half its length)."""
    sentences = [sentence.strip() for sentence in sentences]
    texts = [generator.reconstruction(sentence).text.strip() for sentence in sentences]
    exact = collections.Counter(t for t, s in zip(texts, sentences) if t == s)
    scores = _bleu_chrf(texts, sentences)
    unrelated = _bleu_chrf(_rotated(sentences), sentences)
    return {
        "sentences": len(sentences),
        "exact_share": round(exact.total() / len(sentences), 4),
        "exact": dict(exact.most_common(3)),  # the most frequent sentences reconstructed exactly
        "bleu": round(scores["bleu"], 2),
        "chrf": round(scores["chrf"], 2),
        "unrelated_bleu": round(unrelated["bleu"], 2),
        "unrelated_chrf": round(unrelated["chrf"], 2),
    }


def _bleu_chrf(hypotheses: list[str], references: list[str]) -> dict[str, float]:
    """Corpus sacreBLEU (13a) and chrF, as train/evaluate.py's bleu_chrf."""
    return {
        "bleu": sacrebleu.corpus_bleu(hypotheses, [references]).score,
        "chrf": sacrebleu.corpus_chrf(hypotheses, [references]).score,
    }


def everyday_measures(generator, sentences: list[str] | None = None, seed: int = SEED) -> dict:
    """The closest changed candidates of `sentences` (default: the everyday set) and their
    measures; see the module docstring. "pairs" lists (source, candidate or None)."""
    sentences = everyday_sentences() if sentences is None else list(sentences)
    if not sentences:
        raise ValueError("`sentences` must be non-empty, got 0 sentences")
    texts = closest_changed_texts(generator, sentences, seed)
    changed = [(s, t) for s, t in zip(sentences, texts) if t is not None]
    result = {
        "sentences": len(sentences),
        "num_candidates": NUM_CANDIDATES,
        "seed": seed,
        "changed_share": round(len(changed) / len(sentences), 4),
        "chrf_mean": None,
        "chrf_corpus": None,
    }
    if changed:
        sources, candidates = [s for s, _ in changed], [t for _, t in changed]
        mean, corpus = _chrf(candidates, sources)
        result["chrf_mean"], result["chrf_corpus"] = round(mean, 2), round(corpus, 2)
    floor_mean, floor_corpus = _chrf(_rotated(sentences), sentences)
    result["floor_chrf_mean"], result["floor_chrf_corpus"] = (
        round(floor_mean, 2),
        round(floor_corpus, 2),
    )
    result["reconstruction"] = reconstruction_quality(generator, sentences)
    result["pairs"] = list(zip(sentences, texts))
    return result


def write_unjudged(path: Path, pairs: list[tuple[str, str | None]]) -> None:
    """The first JUDGED_SAMPLE (source, closest changed candidate) pairs as a TSV with an empty
    keeps_meaning column; a sentence without a changed candidate is written with candidate ""
    and keeps_meaning "no" (nothing was offered)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle, delimiter="\t", lineterminator="\n")
        writer.writerow(TSV_COLUMNS)
        for index, (source, candidate) in enumerate(pairs[:JUDGED_SAMPLE]):
            writer.writerow((index, source, candidate or "", "" if candidate else "no"))


def read_judgements(path: Path) -> list[dict]:
    """The rows of a judged TSV (dicts keyed by TSV_COLUMNS)."""
    with open(path, encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle, delimiter="\t"))
    if rows and tuple(rows[0]) != TSV_COLUMNS:
        raise ValueError(f"`judged` must have the columns {TSV_COLUMNS}, got {tuple(rows[0])}")
    return rows


def meaning_kept(path: Path, pairs: list[tuple[str, str | None]] | None = None) -> dict:
    """The share of judged pairs whose keeps_meaning is "yes". With `pairs` (this bundle's
    measured pairs), every row must hold the same source and candidate: a TSV judged for another
    model's candidates raises ValueError, and so does a row left unjudged."""
    rows = read_judgements(path)
    if not rows:
        raise ValueError(f"`judged` must hold at least one judged pair, got none in {path}")
    for row in rows:
        if row["keeps_meaning"] not in ("yes", "no"):
            raise ValueError(
                f"`keeps_meaning` must be yes or no, got {row['keeps_meaning']!r} in row "
                f"{row['index']} of {path}"
            )
        if pairs is not None:
            source, candidate = pairs[int(row["index"])]
            if (row["source"], row["candidate"]) != (source, candidate or ""):
                raise ValueError(
                    f"`judged` must judge this bundle's candidates, got row {row['index']} "
                    f"{row['candidate']!r} where the bundle gives {candidate!r}"
                )
    kept = sum(row["keeps_meaning"] == "yes" for row in rows)
    return {"judged": len(rows), "kept": kept, "share": round(kept / len(rows), 4)}


def summary_lines(name: str, result: dict) -> list[str]:
    """The measures of one bundle as printable lines."""
    recon = result["reconstruction"]
    lines = [
        f"{name}: {result['sentences']} everyday sentences, {result['num_candidates']} "
        f"candidates, seed {result['seed']}",
        f"  any changed candidate: {result['changed_share']:.1%}",
        f"  closest changed candidate chrF to the source: mean sentence-level "
        f"{result['chrf_mean']}, corpus {result['chrf_corpus']} (floor: another sentence "
        f"{result['floor_chrf_mean']}, {result['floor_chrf_corpus']})",
        f"  greedy reconstruction: exact {recon['exact_share']:.1%}, BLEU {recon['bleu']}, "
        f"chrF {recon['chrf']} (floor BLEU {recon['unrelated_bleu']}, "
        f"chrF {recon['unrelated_chrf']})",
    ]
    if "meaning_kept" in result:
        kept = result["meaning_kept"]
        lines.append(
            f"  meaning kept (judged by hand): {kept['kept']} of {kept['judged']} "
            f"= {kept['share']:.1%}"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    import runtime

    parser = argparse.ArgumentParser(prog="python -m study.paraphrase_quality", description=__doc__)
    parser.add_argument("--bundle", type=Path, default=Path("models/paraphraser/int8"))
    parser.add_argument("--sentences", type=Path, default=SENTENCES_FILE)
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--judged", type=Path, help="a judged TSV of this bundle's candidates")
    parser.add_argument(
        "--write-unjudged", type=Path, help="write this bundle's pairs to judge to this TSV"
    )
    parser.add_argument("--json", type=Path, help="write the measures as JSON here")
    args = parser.parse_args(argv)
    generator = runtime.load(args.bundle)
    result = everyday_measures(generator, everyday_sentences(args.sentences), args.seed)
    if args.judged:
        result["meaning_kept"] = meaning_kept(args.judged, result["pairs"])
    if args.write_unjudged:
        write_unjudged(args.write_unjudged, result["pairs"])
        print(f"wrote {args.write_unjudged}: fill keeps_meaning (yes/no) by: {JUDGING_RULE}")
    print("\n".join(summary_lines(generator.name, result)))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
