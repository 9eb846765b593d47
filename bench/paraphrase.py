"""Paraphrase speed: a 40-candidate paraphrase of a 20-word sentence with the shipped
`paraphraser` bundle through the runtime (numpy + onnxruntime, candidates decoded as one batch)
against the PyTorch model's own loop (modeling.hierarchical.paraphrase) on the same weights.

    python -m bench.paraphrase [--bundle models/paraphraser/int8] [--run DIR] [--threads 1]
                               [--repeats 5] [--out bench/results/paraphrase.json]

`--run` is the autoencoder's training run (default: the one the bundle's manifest names); its
weights are the bundle's. Both engines draw the candidates' temperatures and noise from the same
seed; characters are sampled by each engine's own generator, so the candidates (and the work)
differ a little: the table reports the characters decoded per call too. Medians of `--repeats`
interleaved runs after one warm-up (bench.common.interleaved_medians), same thread count.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from . import common

# 20 words as the model splits them (punctuation marks are words)
SENTENCE = "The Lord is my shepherd; I shall not lack. He makes me lie down in green pastures."
CANDIDATES = 40
TARGET_SECONDS = 2.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bundle", type=Path, default=Path("models/paraphraser/int8"))
    parser.add_argument("--run", type=Path, help="the autoencoder's training run")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, default=common.RESULTS / "paraphrase.json")
    args = parser.parse_args(argv)

    import modeling.hierarchical
    from runtime.hierarchical import HierarchicalGenerator
    from runtime.hierarchical_text import CharVocab, split_words

    common.set_torch_threads(args.threads)
    ours = HierarchicalGenerator.open(args.bundle, threads=args.threads)
    run = args.run or Path(ours.manifest.export.autoencoder_source)
    model = modeling.hierarchical.load_run(run)
    vocab = CharVocab(model.config.charset)
    words = len(split_words(SENTENCE))
    chars = {}

    def runtime_call():
        candidates = ours.paraphrase(SENTENCE, CANDIDATES, seed=0)
        chars["runtime"] = sum(len(c.text) for c in candidates)

    def torch_call():
        candidates = modeling.hierarchical.paraphrase(model, vocab, SENTENCE, CANDIDATES, seed=0)
        chars["pytorch"] = sum(len(c["text"]) for c in candidates)

    medians = common.interleaved_medians(
        {"runtime": runtime_call, "pytorch": torch_call}, repeats=args.repeats
    )
    rows = [
        [engine, f"{seconds:.3f}", chars[engine], f"{seconds / medians['runtime']:.2f}"]
        for engine, seconds in medians.items()
    ]
    table = common.markdown_table(
        ["engine", "median seconds", "characters decoded", "× runtime"], rows
    )
    print(f"{CANDIDATES} candidates of a {words}-word sentence, {args.threads} thread(s)")
    print(table)
    common.write_results(
        args.out,
        {
            "sentence": SENTENCE,
            "words": words,
            "candidates": CANDIDATES,
            "median_seconds": medians,
            "characters_decoded": chars,
            "target_seconds": TARGET_SECONDS,
            "bundle": str(args.bundle),
            "environment": common.environment(args.threads),
            "table": table,
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
