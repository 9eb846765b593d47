"""The command line of seed 003's hierarchical model: train one recipe (lm, autoencoder, style)
or ship the trained runs.

    python -m train.hierarchical.cli lm --kind sarah --out checkpoints/hier/lm-sarah
    python -m train.hierarchical.cli ship --runs checkpoints/hier
    python -m train.hierarchical.cli ship --library-runs checkpoints/hier \
        --library data/library.jsonl

(`python -m scriptorium train paraphraser …` is the same command.) Recipes:
train/hierarchical/recipes.py; shipping: train/hierarchical/ship.py.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from modeling.hierarchical import KINDS
from train import data
from train.hierarchical.recipes import run_autoencoder, run_lm, run_style

from . import library_ship, ship


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m train.hierarchical.cli", description=__doc__)
    parser.add_argument("recipe", choices=("lm", "autoencoder", "style", "ship"))
    parser.add_argument(
        "--runs",
        type=Path,
        default=Path("checkpoints/hier"),
        help="ship: directory of the lm-<kind>, ae and style-* runs",
    )
    parser.add_argument(
        "--library-runs",
        type=Path,
        help="ship: instead of --runs, export the library runs <dir>/<--lm> + <dir>/<--ae> "
        "(train/hierarchical/library_ship.py; needs --library)",
    )
    parser.add_argument(
        "--name",
        default="paraphraser",
        help="ship --library-runs: the bundle's name (default paraphraser: replaces the WEB "
        "model; another name, e.g. paraphraser-library, ships it beside)",
    )
    parser.add_argument("--lm", default="lm-library", help="ship --library-runs: the LM run")
    parser.add_argument("--ae", default="ae-library", help="ship --library-runs: its autoencoder")
    parser.add_argument(
        "--previous",
        type=Path,
        help="ship --library-runs: the WEB-era bundle whose metrics are carried "
        "(default: the current models/paraphraser bundle)",
    )
    parser.add_argument(
        "--judged",
        type=Path,
        help="ship --library-runs: the new bundle's hand-judged everyday TSV (study/judgements/)",
    )
    parser.add_argument(
        "--previous-judged",
        type=Path,
        default=library_ship.WEB_JUDGED,
        help="ship --library-runs: the WEB bundle's judged TSV",
    )
    parser.add_argument("--models-dir", type=Path, default=Path("models"))
    parser.add_argument("--ship-kind", choices=KINDS, help="ship: kind to ship (default: best)")
    parser.add_argument("--kind", choices=KINDS, default="sarah")
    parser.add_argument("--out", type=Path, help="run directory (not for ship)")
    parser.add_argument("--init", type=Path, help="run to start from (autoencoder, style)")
    parser.add_argument(
        "--like", type=Path, help="run whose config a from-scratch style run copies"
    )
    parser.add_argument("--corpus", type=Path, help="style corpus JSON (train/spurgeon.py)")
    parser.add_argument("--verses", type=Path, default=data.DEFAULT_OUT)
    parser.add_argument(
        "--library",
        type=Path,
        help="lm, autoencoder: train on this library's sentences (python -m train.library)",
    )
    parser.add_argument("--tiny", action="store_true", help="tiny widths on the fixture verses")
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--bf16",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="bfloat16 autocast in training steps (default on; --no-bf16 trains in float32)",
    )
    parser.add_argument("--max-minutes", type=float)
    parser.add_argument(
        "--max-steps", type=int, help="stop (and evaluate) at this step of the --steps schedule"
    )
    parser.add_argument(
        "--train-encoder",
        action="store_true",
        help="autoencoder: also train the sentence encoder (seed 003 freezes it; not shippable)",
    )
    parser.add_argument(
        "--noise",
        type=float,
        default=0.0,
        help="WDN (seed 003 §4.2): in training, add Gaussian noise of std NOISE × RMS to each "
        "layer's sentence vector (the seed's WDN model: 1; default 0: off)",
    )
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    if args.tiny and args.verses == data.DEFAULT_OUT:
        args.verses = data.FIXTURE
    if args.recipe == "ship" and args.library_runs is not None:
        if args.library is None:
            parser.error("ship --library-runs needs --library (the library the runs trained on)")
        return library_ship.ship_library(args)
    if args.recipe == "ship":
        return ship.ship(args)
    if args.out is None:
        parser.error("--out is required")
    {"lm": run_lm, "autoencoder": run_autoencoder, "style": run_style}[args.recipe](args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
