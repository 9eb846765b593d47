"""Evaluation of seed 001's GRU rewriters (train/seq2seq/gru.py) against the shipped mBART
rewriter, through the runtime, on the whole test split.

Seed 001 (sections 6.2-6.3) says a single context vector cannot hold a long sentence and that
attention fixes it. So each system's outputs are scored as a whole (sacreBLEU corpus BLEU and
chrF against the WEB) and by the length of the KJV source in words (LENGTH_BUCKETS: corpus BLEU
and chrF of the pairs in each bucket), next to the copy baseline (the KJV source itself scored
against the WEB). `int8_parity` measures what int8 changed against the fp32 bundle of the same
run: greedy tokens on every test source, and teacher-forced logits along the fp32 greedy output.

The Markdown tables of the cards and docs/SEQ2SEQ.md are made here from the results (a dict that
round-trips through JSON), so every number in them comes from one evaluation.

Does not cover: training, export or shipping (train/seq2seq/gru.py, export/gru_seq2seq.py), the
decode-speed benchmark (bench/seq2seq.py --gru).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from convert.manifest import card_table
from train import common, evaluate

from . import bart as seq2seq

# Source-length buckets in KJV words (whitespace-separated), inclusive; None: no upper bound.
LENGTH_BUCKETS = ((1, 10), (11, 20), (21, 30), (31, 40), (41, None))
COPY = "copy (KJV source)"
MAX_NEW_TOKENS = 127  # the rewriter's pair filter: targets fit 128 positions


@dataclass(frozen=True)
class System:
    """One line of the comparison: a bundle and how it decodes (None: its manifest defaults)."""

    name: str
    bundle: Path
    num_beams: int | None = None


def bucket_label(low: int, high: int | None) -> str:
    """ "1–10", or "41+" for the open bucket."""
    return f"{low}+" if high is None else f"{low}–{high}"


def source_words(text: str) -> int:
    return len(text.split())


def bucket_of(words: int) -> str:
    for low, high in LENGTH_BUCKETS:
        if words >= low and (high is None or words <= high):
            return bucket_label(low, high)
    raise ValueError(f"`words` must be at least {LENGTH_BUCKETS[0][0]}, got {words}")


def scores(hypotheses: Sequence[str], references: Sequence[str], buckets: Sequence[str]) -> dict:
    """Corpus BLEU and chrF over all pairs and over each length bucket's pairs."""
    by_length = {}
    for low, high in LENGTH_BUCKETS:
        label = bucket_label(low, high)
        rows = [i for i, bucket in enumerate(buckets) if bucket == label]
        if rows:
            by_length[label] = evaluate.bleu_chrf(
                [hypotheses[i] for i in rows], [references[i] for i in rows]
            )
    return {**evaluate.bleu_chrf(hypotheses, references), "by_length": by_length}


def decoding_config(gen, num_beams: int | None):
    """The bundle's own defaults (manifest generation_defaults), or `num_beams` with at most
    MAX_NEW_TOKENS new tokens."""
    import runtime

    if num_beams is None:
        return gen.defaults
    return runtime.GenerationConfig(num_beams=num_beams, max_new_tokens=MAX_NEW_TOKENS)


def evaluate_systems(
    systems: Sequence[System],
    pairs: Sequence[seq2seq.Pair],
    sample_rows: Sequence[int] = (),
    progress: bool = True,
) -> dict:
    """Every system's outputs for `pairs` scored against the WEB, overall and per source-length
    bucket, with the copy baseline; the outputs of `sample_rows` as samples."""
    import runtime

    sources, references = [p.source for p in pairs], [p.target for p in pairs]
    buckets = [bucket_of(source_words(s)) for s in sources]
    results = {
        "test_pairs": len(pairs),
        "split": common.split_description(),
        "length": "KJV source words (whitespace-separated)",
        "buckets": {
            bucket_label(low, high): buckets.count(bucket_label(low, high))
            for low, high in LENGTH_BUCKETS
        },
        "systems": {},
    }
    samples = [
        {"book": pairs[i].book, "kjv": sources[i], "web": references[i], "outputs": {}}
        for i in sample_rows
    ]
    for system in systems:
        gen = runtime.load(system.bundle)
        config = decoding_config(gen, system.num_beams)
        outputs = seq2seq.generate_all(
            gen, sources, {}, config, desc=system.name, progress=progress
        )
        results["systems"][system.name] = {
            "bundle": str(system.bundle),
            "architecture": gen.manifest.architecture,
            "parameters": gen.manifest.export.parameters,
            "decoding": {"num_beams": config.num_beams, "max_new_tokens": config.max_new_tokens},
            **scores(outputs, references, buckets),
        }
        for sample, row in zip(samples, sample_rows):
            sample["outputs"][system.name] = outputs[row]
    results["systems"][COPY] = scores(sources, references, buckets)
    results["samples"] = samples
    return results


def _padded(rows: Sequence[Sequence[int]], pad: int) -> tuple[np.ndarray, np.ndarray]:
    """Right-padded ids (N, L) and their mask."""
    width = max(map(len, rows))
    ids = np.full((len(rows), width), pad, dtype=np.int64)
    mask = np.zeros_like(ids)
    for row, tokens in enumerate(rows):
        ids[row, : len(tokens)], mask[row, : len(tokens)] = tokens, 1
    return ids, mask


def int8_parity(
    int8_bundle: Path,
    fp32_bundle: Path,
    sources: Sequence[str],
    references: Sequence[str],
    batch: int = 32,
) -> dict:
    """The int8 bundle against the fp32 bundle of the same run on `sources`: greedy decoding
    (identical sequences, token agreement, each one's BLEU and chrF against `references`) and
    teacher-forced logits along the fp32 greedy outputs (max |Δlogit| over real positions, the
    largest |logit| for scale, argmax agreement). Both decode in length-sorted batches of
    `batch`, as the evaluation does."""
    import runtime

    gens = {"int8": runtime.load(int8_bundle), "fp32": runtime.load(fp32_bundle)}
    greedy = runtime.GenerationConfig(num_beams=1, max_new_tokens=MAX_NEW_TOKENS)
    order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
    tokens: dict[str, list[list[int]]] = {name: [] for name in gens}
    texts: dict[str, list[str]] = {name: [""] * len(sources) for name in gens}
    diff, scale, agree, positions = 0.0, 0.0, 0, 0
    for start in range(0, len(order), batch):
        rows = order[start : start + batch]
        part = [sources[i] for i in rows]
        for name, gen in gens.items():
            outputs = gen.generate(part, greedy)
            tokens[name] += [list(out.token_ids) for out in outputs]
            for row, out in zip(rows, outputs):
                texts[name][row] = out.text.strip()
        reference = tokens["fp32"][-len(part) :]
        fp32 = gens["fp32"]
        ids, mask = _padded([fp32.encode_prompt(s) for s in part], fp32.pad_token_id)
        start_token = fp32.manifest.special_tokens.decoder_start_token_id
        decoder_ids, real = _padded([[start_token, *t[:-1]] for t in reference], fp32.pad_token_id)
        logits = {name: gen.model.all_logits(ids, mask, decoder_ids) for name, gen in gens.items()}
        keep = real.astype(bool)  # (N, T): positions of real target tokens
        diff = max(diff, float(np.abs(logits["int8"] - logits["fp32"])[keep].max()))
        scale = max(scale, float(np.abs(logits["fp32"][keep]).max()))
        agree += int((logits["int8"].argmax(-1) == logits["fp32"].argmax(-1))[keep].sum())
        positions += int(keep.sum())
    pairs = list(zip(tokens["fp32"], tokens["int8"]))
    agreement = [sum(a == b for a, b in zip(f, q)) / max(len(f), len(q), 1) for f, q in pairs]
    return {
        "reference": "the fp32 bundle of the same run (runtime/recurrent.py)",
        "sources": len(sources),
        "greedy": {
            "max_new_tokens": MAX_NEW_TOKENS,
            "identical_sequences": sum(f == q for f, q in pairs),
            "token_agreement": float(np.mean(agreement)),
            **{name: evaluate.bleu_chrf(texts[name], references) for name in gens},
        },
        "logits": {
            "max_abs_diff": diff,
            "max_abs_logit": scale,
            "argmax_agreement": agree / max(positions, 1),
            "positions": positions,
        },
    }


def greedy_samples(bundle: Path, sources: Sequence[str]) -> list[dict]:
    """Greedy rewrites of `sources`, each decoded alone (int8 bundles are not batch-invariant,
    so a sample decoded alone reads the same in any batch-free check)."""
    import runtime

    gen = runtime.load(bundle)
    config = runtime.GenerationConfig(num_beams=1, max_new_tokens=MAX_NEW_TOKENS)
    return [{"kjv": s, "output": gen.generate(s, config)[0].text.strip()} for s in sources]


# ---------------------------------------------------------------------------------------------
# Tables


def results_table(results: dict) -> str:
    """One row per system: decoding, BLEU, chrF."""
    rows = []
    for name, found in results["systems"].items():
        decoding = found.get("decoding")
        how = "—" if decoding is None else f"beam {decoding['num_beams']}"
        how = "greedy" if decoding and decoding["num_beams"] == 1 else how
        parameters = found.get("parameters")
        size = f"{parameters / 1e6:.2f} M" if parameters else "—"
        rows.append([name, size, how, f"{found['bleu']:.1f}", f"{found['chrf']:.1f}"])
    return common.markdown_table(["system", "parameters", "decoding", "BLEU", "chrF"], rows)


def bucket_table(results: dict, metric: str = "bleu", minus_copy: bool = False) -> str:
    """`metric` per source-length bucket (columns), one row per system; pairs per bucket in the
    header. `minus_copy`: each cell less the copy baseline's in that bucket (signed), the copy
    row left out."""
    labels = list(results["buckets"])
    header = ["system", *(f"{label} ({results['buckets'][label]})" for label in labels)]
    copy = results["systems"][COPY]["by_length"]
    rows = []
    for name, found in results["systems"].items():
        if minus_copy and name == COPY:
            continue
        values = [found["by_length"][label][metric] for label in labels]
        if minus_copy:
            values = [v - copy[label][metric] for v, label in zip(values, labels)]
        rows.append([name, *(f"{v:+.1f}" if minus_copy else f"{v:.1f}" for v in values)])
    return common.markdown_table(header, rows)


def parity_table(parity: dict) -> str:
    greedy, logits = parity["greedy"], parity["logits"]
    rows = [
        (f"greedy: identical sequences (≤ {greedy['max_new_tokens']} tokens)",
         f"{greedy['identical_sequences']:,} / {parity['sources']:,}"),
        ("greedy: token agreement", f"{greedy['token_agreement']:.4f}"),
        *((f"greedy: BLEU / chrF, {precision}",
           f"{greedy[precision]['bleu']:.2f} / {greedy[precision]['chrf']:.2f}")
          for precision in ("fp32", "int8")),
        ("teacher-forced: max abs Δlogit", f"{logits['max_abs_diff']:.3g}"),
        ("teacher-forced: largest abs logit (scale)", f"{logits['max_abs_logit']:.3g}"),
        (f"teacher-forced: argmax agreement ({logits['positions']:,} positions)",
         f"{logits['argmax_agreement']:.4f}"),
    ]  # fmt: skip
    return "\n".join(card_table(rows))
