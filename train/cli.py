"""`scriptorium train …`: every training recipe, one subcommand each.

    scriptorium train RECIPE [--tiny] [--out DIR] [--resume] [--max-steps N] [--max-minutes M]
                      [--eval-only] [--no-eval] [--ship]
    scriptorium train ship RECIPE [--out DIR] [--models-dir models]
    scriptorium train COMMAND [ARGS…]      (COMMANDS: data, tokenizer, library, paraphraser, …)
    scriptorium train [--help]             (lists them all)

RECIPE: bible-lm, rewriter, translator, masked-lm-base or masked-lm-large.

A run trains (checkpointing to DIR/checkpoint.pt, logging DIR/loss.csv), then, once the step
budget is reached, plots DIR/loss.png, writes the Hugging Face checkpoint DIR/model/, exports an
int8 bundle DIR/bundle-int8/ and evaluates it through the runtime into DIR/evaluation.json.
`ship` exports the evaluated model into models/<name>/<precision>/ with the full model card.
`--tiny` runs the whole chain in seconds on the committed fixture slice (tests use it).

A COMMAND is a recipe with its own command line (its module's `main`, also `python -m
train.<module>`): `scriptorium train COMMAND ARGS…` hands ARGS to that module's parser, so
`scriptorium train COMMAND --help` shows its options.

Does not cover: what a recipe trains or measures (train/lm.py, train/seq2seq/recipes.py,
train/masked_lm.py; their contract: train/recipe.py), or the COMMANDS' own options.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
from collections.abc import Callable
from pathlib import Path

from train import common, data
from train.recipe import Recipe

RECIPES = ("bible-lm", "rewriter", "translator", "masked-lm-base", "masked-lm-large")
DEFAULT_PRECISIONS = {
    "bible-lm": ("int8", "fp32"),
    "rewriter": ("int8",),
    "translator": ("int8",),
    "masked-lm-base": ("int8",),
    "masked-lm-large": ("int8",),
}
# The recipes with their own command line: words after `scriptorium train` -> (module, summary).
# The longest matching words win, so `adapter ship` reaches its own module.
COMMANDS = {
    ("data",): ("train.data", "the verse table data/verses.tsv from Debian's SWORD Bibles"),
    ("tokenizer",): ("train.tokenizer", "the BPE tokenizers data/tokenizers/{en,en_es}.json"),
    ("library",): ("train.library", "the library data/library.jsonl of public-domain English"),
    ("spurgeon",): ("train.spurgeon", "Spurgeon's sentence pairs for the paraphraser's style"),
    ("paraphraser",): (
        "train.hierarchical.cli",
        "seed 003's hierarchical paraphraser: lm|autoencoder|style|ship",
    ),
    ("masked-lm",): ("train.masked_lm", "plots: the masking-study plot on both masked-LM cards"),
    ("word-vectors",): ("train.word_vectors", "word2vec skip-gram and CBOW bundles (seed 001)"),
    ("adapter",): (
        "train.adapter.finetune",
        "train: a LoRA on the flagship (SmolLM2-135M-Instruct)",
    ),
    ("adapter", "ship"): ("train.adapter.ship", "the trained LoRA as a measured adapter bundle"),
    ("requantize",): ("train.requantize", "bible-lm's int8 bundle again from its fp32, evaluated"),
    ("gru-seq2seq",): (
        "train.seq2seq.gru",
        "seed 001's GRU encoder-decoders (context vector, attention) on the rewriter's task",
    ),
}
MODELS_DIR = Path("models")
MODELS_LIMIT_MB = 250  # models/ must stay below this in total
EVAL_PRECISION = "int8"  # the shipped default; evaluation measures what the app runs


def recipe_class(name: str) -> Callable[..., Recipe]:
    """The recipe `name` (train/recipe.py's contract), to be built with (tiny, verses,
    tokenizer_dir, out_dir, seed)."""
    import functools

    from train import lm, masked_lm
    from train.seq2seq import recipes as seq2seq_recipes

    if name.startswith("masked-lm-"):
        return functools.partial(masked_lm.MaskedLM, name)
    return {
        "bible-lm": lm.BibleLM,
        "rewriter": seq2seq_recipes.Rewriter,
        "translator": seq2seq_recipes.Translator,
    }[name]


def default_out(name: str, tiny: bool) -> Path:
    return Path("checkpoints") / (name + ("-tiny" if tiny else ""))


def make_recipe(args) -> tuple[Recipe, Path]:
    verses = args.verses or (data.FIXTURE if args.tiny else data.DEFAULT_OUT)
    if not Path(verses).exists():
        raise FileNotFoundError(f"{verses} not found: build it with `python -m train.data`")
    out = args.out or default_out(args.recipe, args.tiny)
    out.mkdir(parents=True, exist_ok=True)
    extra = {}
    if args.corpus is not None:
        if not args.recipe.startswith("masked-lm-"):
            raise ValueError(f"`--corpus` must go with a masked-lm recipe, got {args.recipe!r}")
        extra["library"] = args.corpus
    if args.steps is not None:
        if not args.recipe.startswith("masked-lm-"):
            raise ValueError(f"`--steps` must go with a masked-lm recipe, got {args.recipe!r}")
        if args.steps < 1:
            raise ValueError(f"`--steps` must be at least 1, got {args.steps}")
        extra["steps"] = args.steps
    if args.init is not None:
        if not args.recipe.startswith("masked-lm-"):
            raise ValueError(f"`--init` must go with a masked-lm recipe, got {args.recipe!r}")
        if not (args.init / common.CHECKPOINT).exists():
            raise ValueError(f"`--init` must be a run with a {common.CHECKPOINT}, got {args.init}")
        extra["init"] = args.init
    recipe = recipe_class(args.recipe)(
        args.tiny, Path(verses), args.tokenizers, out, args.seed, **extra
    )
    return recipe, out


def card(recipe: Recipe, metrics: dict) -> dict:
    training_data = recipe.training_data()
    licence = training_data.get("licence")
    return {
        "name": recipe.name,
        "description": recipe.description(),
        "metrics": metrics,
        "training_data": training_data,
        "license": "Public domain: weights trained only on public-domain Bible translations"
        if licence == "public domain"
        else f"Weights trained on sources under these licences: {licence}",
    }


def run(args) -> int:
    import torch

    recipe, out = make_recipe(args)
    model, task, config = recipe.setup()
    parameters = common.count_parameters(model)
    print(f"{recipe.name}: {parameters:,} parameters, {config.steps} steps, out {out}")
    checkpoint = out / common.CHECKPOINT
    if args.eval_only:
        if not checkpoint.exists():
            raise FileNotFoundError(f"{checkpoint} not found: train first")
        saved = torch.load(checkpoint, map_location="cpu", weights_only=False)
        model.load_state_dict(saved["model"])
        state = saved["state"]
        state["finished"] = state["step"] >= config.steps
    else:
        state = common.train(
            model,
            task,
            config,
            out,
            resume=args.resume,
            max_steps=args.max_steps,
            max_minutes=args.max_minutes,
            progress=not args.quiet,
            describe=recipe.name,
            threads=args.threads,
        )
    common.plot_losses(out / common.LOSS_CSV, out / common.LOSS_PNG, recipe.name)
    sps = common.steps_per_second(out / common.LOSS_CSV)
    training = {
        "parameters": parameters,
        "steps": state["step"],
        "planned_steps": config.steps,
        "epochs": state["epoch"] + 1 if state["index"] else state["epoch"],
        "tokens": state["tokens"],
        "train_seconds": round(state["train_seconds"], 1),
        "steps_per_second": sps,
        "tokens_per_second": state["tokens"] / state["train_seconds"]
        if state["train_seconds"]
        else None,
        "config": {k: v for k, v in vars(config).items()},
        "size": {k: v for k, v in vars(recipe.size).items()},
        "threads": args.threads,
    }
    common.write_json(out / "training.json", training)
    if not state["finished"]:
        print(f"stopped at step {state['step']} of {config.steps}; continue with --resume")
        return 0
    if args.no_eval:
        return 0
    model.eval()
    model_dir = out / common.MODEL_DIR
    common.save_model_dir(
        model, recipe.tokenizer, model_dir, recipe.controls(), card(recipe, {}), recipe.generation()
    )
    recipe.finish_model_dir(model_dir)
    bundle = out / f"bundle-{EVAL_PRECISION}"
    recipe.export(
        model_dir,
        bundle,
        EVAL_PRECISION,
        recipe.name,
        progress=not args.quiet,
        optimize=not recipe.tiny,
    )
    started = time.perf_counter()
    evaluation = recipe.evaluate(model, bundle, progress=not args.quiet)
    evaluation["evaluated_precision"] = EVAL_PRECISION
    evaluation["evaluation_seconds"] = round(time.perf_counter() - started, 1)
    evaluation["training"] = training
    common.write_json(out / common.EVALUATION, evaluation)
    metrics = recipe.metrics(evaluation)
    common.write_json(model_dir / "scriptorium_card.json", card(recipe, metrics))
    for key, value in metrics.items():
        print(f"  {key}: {value}")
    if args.ship:
        ship(recipe, out, args.models_dir, args.precisions, progress=not args.quiet)
    return 0


def training_section(evaluation: dict) -> str:
    t = evaluation["training"]
    minutes = t["train_seconds"] / 60
    # a run of a few steps can take less than the log's 0.1 s resolution: no rate then
    rates = (
        f"{t['steps_per_second']:.3f} steps/s, {t['tokens_per_second']:.0f} tokens/s"
        if t["steps_per_second"] and t["tokens_per_second"]
        else "too short to time"
    )
    return (
        f"{t['parameters']:,} parameters; {t['steps']} steps ({t['epochs']} epoch(s), "
        f"{t['tokens']:,} target tokens) in {minutes:.0f} minutes of training on a 2-core CPU "
        f"({rates}; time "
        "during which the run was paused is not counted). Seed "
        f"{t['config']['seed']}; AdamW, peak lr {t['config']['lr']}, {t['config']['warmup']} "
        "warm-up steps, cosine decay. Metrics above were measured on the "
        f"{evaluation['evaluated_precision']} bundle through the runtime "
        f"({evaluation['evaluation_seconds'] / 60:.0f} minutes).\n\n"
        "![loss curve](loss.png)"
    )


def ship(
    recipe: Recipe, out: Path, models_dir: Path, precisions, progress: bool = True
) -> list[Path]:
    """Export the evaluated model into models_dir/<name>/<precision>/ with the full card. The
    card's description, metrics and training data are made again from `recipe` and the run's
    evaluation.json, so a run evaluated by an older recipe ships with the current card."""
    evaluation = common.read_json(out / common.EVALUATION)
    card_data = card(recipe, recipe.metrics(evaluation))
    common.write_json(out / common.MODEL_DIR / "scriptorium_card.json", card_data)
    sections = [*recipe.card_sections(evaluation), ("Training", training_section(evaluation))]
    shipped = []
    for precision in precisions:
        target = models_dir / recipe.name / precision
        recipe.export(
            out / common.MODEL_DIR,
            target,
            precision,
            recipe.name,
            progress,
            optimize=not recipe.tiny,
        )
        common.finish_card(target, sections, [out / common.LOSS_PNG, *recipe.card_files(out)])
        shipped.append(target)
        print(f"shipped {target}")
    total = sum(p.stat().st_size for p in models_dir.rglob("*") if p.is_file()) / 2**20
    print(f"{models_dir}: {total:.1f} MB in total (limit {MODELS_LIMIT_MB} MB)")
    if total >= MODELS_LIMIT_MB:
        print(f"warning: {models_dir} is over {MODELS_LIMIT_MB} MB", file=sys.stderr)
    return shipped


def _parser(prog: str, ship_only: bool) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n")[0])
    parser.add_argument("recipe", choices=RECIPES)
    parser.add_argument("--tiny", action="store_true", help="seconds-long run on the fixture")
    parser.add_argument("--out", type=Path, help="run directory (default checkpoints/<recipe>)")
    parser.add_argument("--verses", type=Path, help="verse table (default data/verses.tsv)")
    parser.add_argument(
        "--corpus",
        type=Path,
        help="masked-lm: train on this library (python -m train.library) instead of the WEB",
    )
    parser.add_argument(
        "--steps", type=int, help="masked-lm: optimizer steps of the schedule (default per size)"
    )
    parser.add_argument(
        "--init", type=Path, help="masked-lm: start from this run's weights (e.g. one on --corpus)"
    )
    parser.add_argument(
        "--tokenizers",
        type=Path,
        default=Path("data/tokenizers"),
        help="directory with en.json and en_es.json",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--models-dir", type=Path, default=MODELS_DIR)
    parser.add_argument(
        "--precisions",
        type=lambda s: tuple(s.split(",")),
        help="bundles to ship, e.g. int8,fp32 (default per recipe)",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    if ship_only:
        return parser
    parser.add_argument("--resume", action="store_true", help="continue from the checkpoint")
    parser.add_argument("--max-steps", type=int, help="stop this invocation at this step")
    parser.add_argument("--max-minutes", type=float, help="stop after this much training time")
    parser.add_argument("--eval-only", action="store_true", help="evaluate the checkpoint")
    parser.add_argument("--no-eval", action="store_true", help="train only")
    parser.add_argument("--ship", action="store_true", help="export into --models-dir")
    parser.add_argument(
        "--threads",
        type=int,
        default=common.THREADS,
        help=f"torch threads (default {common.THREADS})",
    )
    return parser


def usage() -> str:
    lines = [
        "usage: scriptorium train RECIPE|ship RECIPE|COMMAND [ARGS…]  (each takes --help)",
        "",
        "recipes (train, export to DIR/bundle-int8, evaluate; `ship RECIPE` ships one):",
        *(f"  {name}" for name in RECIPES),
        "",
        "commands:",
    ]
    lines += [f"  {' '.join(words):<16} {summary}" for words, (_, summary) in COMMANDS.items()]
    return "\n".join(lines)


def find_command(argv: list[str]) -> tuple[str, list[str]] | None:
    """The module of the longest COMMANDS entry that `argv` opens with, and the words after it."""
    for words in sorted(COMMANDS, key=len, reverse=True):
        if tuple(argv[: len(words)]) == words:
            return COMMANDS[words][0], argv[len(words) :]
    return None


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return 0
    command = find_command(argv)
    if command is not None:
        module, rest = command
        return importlib.import_module(module).main(rest) or 0
    if argv[0] == "ship":
        args = _parser("scriptorium train ship", ship_only=True).parse_args(argv[1:])
        recipe, out = make_recipe(args)
        ship(
            recipe,
            out,
            args.models_dir,
            args.precisions or DEFAULT_PRECISIONS[args.recipe],
            progress=not args.quiet,
        )
        return 0
    if argv[0] not in RECIPES:
        print(
            f"scriptorium train: unknown recipe {argv[0]!r} (`scriptorium train` lists them)",
            file=sys.stderr,
        )
        return 2
    args = _parser("scriptorium train", ship_only=False).parse_args(argv)
    args.precisions = args.precisions or DEFAULT_PRECISIONS[args.recipe]
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
