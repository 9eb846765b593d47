"""Quality of quantization: perplexity change of int8 and int4 against fp32, on a trained LM.

    python -m bench.quality [--bundle models/bible-lm/fp32] [--verses FILE] [--split test]
                            [--tokens 16384] [--work DIR] [--out bench/results/quality.json]

The speed benchmarks run random weights, which have no meaningful perplexity. This one takes a
trained causal LM's fp32 bundle (default: the shipped Bible LM), quantizes its decoder graph with
export/'s own quantizers (`convert.quantize.quantize_graph`, LM head included, as exported bundles
are), and measures the perplexity of each graph on held-out text: the `--split` verses of the
data TSV (data/verses.tsv, which `python -m train.data` builds; without it the small committed
slice tests/fixtures/verses.tsv), World English Bible column, joined with spaces, tokenized with
the bundle's tokenizer, cut into windows of the model's context length and scored teacher-forced
(each window predicts its tokens 2..n), at most `--tokens` tokens. Reported: perplexity per
precision and its change against fp32. The issue's limits are int8 ≤ 1 % and int4 ≤ 3 %.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np

from runtime.manifest import Manifest

from . import common

PRECISIONS = ("fp32", "int8", "int4")
LIMITS = {"int8": 1.0, "int4": 3.0}  # the largest allowed perplexity change, in %
BATCH = 8  # windows per graph call
REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "data" / "verses.tsv"  # built by `python -m train.data`
FIXTURE = REPO / "tests" / "fixtures" / "verses.tsv"  # its committed slice


def windows(ids: list[int], length: int, max_tokens: int) -> np.ndarray:
    """Consecutive, non-overlapping windows of `length` tokens (N, length) int64; the tail that
    does not fill a window is dropped, and so is everything past `max_tokens`.

    >>> windows(list(range(7)), 3, 100).tolist()
    [[0, 1, 2], [3, 4, 5]]
    """
    count = min(len(ids), max_tokens) // length
    if count == 0:
        raise ValueError(
            f"the text must hold at least one window of {length} tokens, got {len(ids)}"
        )
    return np.asarray(ids[: count * length], dtype=np.int64).reshape(count, length)  # (N, T)


def perplexity(logits_of: Callable[[np.ndarray], np.ndarray], batches: np.ndarray) -> float:
    """exp(mean negative log-likelihood) of every window's tokens 2..T given the tokens before.

    `logits_of` maps int64 ids (B, T) to float logits (B, T, V) at every position.

    >>> uniform = lambda ids: np.zeros((*ids.shape, 50), np.float32)
    >>> round(perplexity(uniform, np.zeros((3, 4), np.int64)), 6)
    50.0
    """
    from export.parity import mean_nll

    total, count = 0.0, 0
    for start in range(0, batches.shape[0], BATCH):
        ids = batches[start : start + BATCH]  # (B, T)
        logits = logits_of(ids)[:, :-1]  # (B, T - 1, V): position t predicts ids[:, t + 1]
        targets = ids[:, 1:].reshape(-1)  # (B·(T - 1),)
        total += mean_nll(logits.reshape(targets.shape[0], -1), targets) * targets.shape[0]
        count += targets.shape[0]
    return math.exp(total / count)


def held_out_ids(verses: Path, split: str, tokenizer_path: Path) -> list[int]:
    from tokenizers import Tokenizer

    from train.data import load_verses

    if not verses.exists():
        raise FileNotFoundError(
            f"verses file not found: {verses} (build it with `python -m train.data`, or pass "
            "--verses tests/fixtures/verses.tsv for the small committed slice)"
        )
    text = " ".join(row["web"] for row in load_verses(verses, split=split) if row["web"])
    return Tokenizer.from_file(str(tokenizer_path)).encode(text, add_special_tokens=False).ids


def graphs(bundle: Path, work: Path) -> dict[str, Path]:
    """{precision: decoder graph}: the bundle's fp32 graph and export/'s quantizations of it,
    cached in `work` under the bundle's name and the graph's checksum."""
    from convert.quantize import quantize_graph

    manifest = Manifest.read(bundle / "manifest.json")
    if manifest.task != "causal-lm" or manifest.precision != "fp32":
        raise ValueError(
            "`--bundle` must be a causal-lm bundle in fp32, got "
            f"{manifest.task} in {manifest.precision}"
        )
    graph = manifest.graphs["decoder"].file
    cache = work / f"{manifest.name}-{manifest.files[graph].sha256[:8]}"
    paths = {"fp32": bundle / graph}
    for precision in PRECISIONS[1:]:
        target = cache / common.cache_name("quality", precision) / graph
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            quantize_graph(bundle / graph, target, precision, keep_lm_head=False)
        paths[precision] = target
    return paths


def logits_function(path: Path) -> Callable[[np.ndarray], np.ndarray]:
    from export.parity import OnnxModel

    model = OnnxModel({"decoder": path}, "causal-lm")

    def logits_of(ids: np.ndarray) -> np.ndarray:
        mask = np.ones_like(ids)
        positions = np.broadcast_to(np.arange(ids.shape[1]), ids.shape).copy()  # (B, T)
        return model.causal_prefill(ids, mask, positions)[0]

    return logits_of


def run(bundle: Path, verses: Path, split: str, max_tokens: int, work: Path) -> dict:
    manifest = Manifest.read(bundle / "manifest.json")
    ids = held_out_ids(verses, split, bundle / "tokenizer.json")
    batches = windows(ids, manifest.context_length, max_tokens)
    ppl = {
        p: perplexity(logits_function(path), batches) for p, path in graphs(bundle, work).items()
    }
    return {
        "benchmark": "quality",
        "bundle": str(bundle),
        "verses": str(verses),
        "split": split,
        "tokens_scored": int(batches.shape[0] * (batches.shape[1] - 1)),
        "perplexity": ppl,
        "change_pct": {p: 100.0 * (ppl[p] / ppl["fp32"] - 1.0) for p in PRECISIONS},
    }


def table(result: dict) -> str:
    rows = [
        [
            precision,
            f"{result['perplexity'][precision]:.3f}",
            f"{result['change_pct'][precision]:+.2f} %",
            f"≤ {LIMITS[precision]:g} %" if precision in LIMITS else "",
        ]
        for precision in PRECISIONS
    ]
    return common.markdown_table(["precision", "perplexity", "change vs fp32", "limit"], rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scriptorium bench quality", description=__doc__)
    parser.add_argument("--bundle", type=Path, default=REPO / "models" / "bible-lm" / "fp32")
    parser.add_argument(
        "--verses", type=Path, default=None, help=f"default: {DATA}, else {FIXTURE}"
    )
    parser.add_argument("--split", default="test", choices=["train", "validation", "test"])
    parser.add_argument("--tokens", type=int, default=16384, help="score at most this many")
    parser.add_argument("--work", type=Path, default=common.DEFAULT_WORK)
    parser.add_argument("--out", type=Path, default=common.RESULTS / "quality.json")
    args = parser.parse_args(argv)
    verses = args.verses or (DATA if DATA.exists() else FIXTURE)
    work = args.work.expanduser() / "quality"
    result = run(args.bundle, verses, args.split, args.tokens, work)
    print(table(result))
    print(f"({result['tokens_scored']:,} tokens scored: the {args.split} split of {verses})")
    common.write_results(args.out, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
