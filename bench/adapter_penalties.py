"""`python -m bench.adapter_penalties`: how often the SmolLM2 adapters loop, per repetition penalty.

For each adapter bundle under models/ (a manifest with `adapter`) and each repetition penalty,
generate from its controls alone (the format's `[s:text]` start; a few control choices) with
sampling at the bundle's own temperature and top-p and with greedy decoding, over a few seeds, and
count the outputs that loop: a word 4-gram that occurs twice or more ("a goodly city, and a goodly
city"). Prints a Markdown
table (docs/APP.md, "Adapter defaults") and writes it as JSON with `--out`. Kept small (a few
minutes on two cores): the choice it informs is the default penalty, not a study.
"""

from __future__ import annotations

import argparse
import json
import re
from collections import Counter
from pathlib import Path

from tqdm import tqdm

import runtime
from runtime.bundle import read_manifest
from runtime.manifest import Manifest

ROOT = Path(__file__).resolve().parents[1]
WORD = re.compile(r"\w+")


def repeats_4gram(text: str) -> bool:
    """True if some word 4-gram (lower-cased) occurs at least twice in `text`.

    >>> repeats_4gram("a goodly city, and a goodly city, and a goodly city")
    True
    >>> repeats_4gram("In the beginning, God created the heavens and the earth.")
    False
    """
    words = WORD.findall(text.lower())
    grams = Counter(zip(words, words[1:], words[2:], words[3:]))
    return any(count >= 2 for count in grams.values())


def control_choices(manifest: Manifest, count: int) -> list[dict]:
    """`count` control choices: the first value of every control, then the second, …"""
    controls = manifest.controls
    choices = []
    for index in range(count):
        choice = {}
        for name, spec in controls.items():
            values = list(spec.values)
            choice[name] = values[(index * 7) % len(values)]  # spread over long value lists
        choices.append(choice)
    return choices


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=Path, default=ROOT / "models")
    parser.add_argument("--penalties", type=float, nargs="+", default=[1.0, 1.1, 1.2, 1.3])
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)

    adapters = sorted(
        path.parent
        for path in args.models.glob("*/manifest.json")
        if read_manifest(path.parent, verify=False).adapter
    )
    rows = []
    for folder in adapters:
        gen = runtime.load(folder)
        defaults = gen.manifest.generation_defaults
        sampling = {
            "do_sample": True,
            "temperature": 1.0 if defaults.temperature is None else defaults.temperature,
            "top_p": 1.0 if defaults.top_p is None else defaults.top_p,
        }
        runs = [
            (mode, fields, controls, seed)
            for mode, fields in (("sampling", sampling), ("greedy", {}))
            for controls in control_choices(gen.manifest, 2 if mode == "sampling" else 4)
            for seed in (range(args.seeds) if mode == "sampling" else [0])
        ]
        for penalty in args.penalties:
            texts = []
            for mode, fields, controls, seed in tqdm(runs, desc=f"{folder.name} {penalty}"):
                config = runtime.GenerationConfig(
                    max_new_tokens=args.max_new_tokens,
                    repetition_penalty=penalty,
                    seed=seed,
                    **fields,
                )
                out = gen.generate("", config, controls=controls)[0]
                texts.append((mode, out.text))
            for mode in ("sampling", "greedy"):
                chosen = [text for kind, text in texts if kind == mode]
                rows.append(
                    {
                        "adapter": folder.name,
                        "decoding": mode,
                        "repetition_penalty": penalty,
                        "outputs": len(chosen),
                        "repeated_4gram": sum(map(repeats_4gram, chosen)) / len(chosen),
                        "mean_words": sum(len(t.split()) for t in chosen) / len(chosen),
                        "example": chosen[0][:160],
                    }
                )
    print("| adapter | decoding | repetition penalty | outputs | repeated 4-gram | mean words |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        print(
            f"| {row['adapter']} | {row['decoding']} | {row['repetition_penalty']} | "
            f"{row['outputs']} | {row['repeated_4gram']:.0%} | {row['mean_words']:.1f} |"
        )
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
