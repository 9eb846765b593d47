"""Training recipe for seed 001's GRU encoder-decoders (modeling/gru_seq2seq.py): the
single-context-vector model and the attention model, on the shipped rewriter's task.

Same task, split and tokenizer as the mBART rewriter (train/seq2seq/bart.py): KJV -> WEB verse pairs
filtered by train/data.py's bounds, whole books held out for validation and test, the
rewriter's English 8,000-token tokenizer (the shipped bundle's tokenizer.json, which wraps a
source as `<|bos|> … <|eos|>`); no length-control tokens. The decoder starts from `<|bos|>` and
learns the target followed by `<|eos|>`.

The pairs are tokenized once into an .npz (`--pairs FILE`: written on the first run from the
verse table, read on every later one), so a machine without Debian's SWORD packages can train
from that file alone. A run is a fixed number of optimizer steps, the same on every device, with
train/common.py's loop: tqdm, loss.csv, resumable checkpoints (`--resume`); `train.log` records
the run. A finished run folder holds what export/gru_seq2seq.py reads: gru_seq2seq.json,
model.pt, tokenizer.json (and loss.csv, loss.png, checkpoint.pt, train.log).

    python -m train.seq2seq.gru --pairs /tmp/pairs.npz --pairs-only     # build the pairs file
    python -m train.seq2seq.gru --variant attention --pairs /tmp/pairs.npz --out RUN --device cuda
    python -m train.seq2seq.gru --pairs /tmp/pairs.npz --evaluate BUNDLE [--eval-pairs 500]
    python -m train.seq2seq.gru --pairs /tmp/pairs.npz --ship context=RUN attention=RUN

Evaluation (`--evaluate`, an exported bundle through the runtime): sacreBLEU, chrF and ROUGE-2
recall against the WEB on the test books, next to the copy baseline (the KJV source itself), as
the rewriter's card reports them, beam 3.

Shipping (`--ship VARIANT=RUN …`): each finished run exported as an int8 bundle into
models/rewriter-gru/int8 and models/rewriter-gru-attention/int8, evaluated on the whole test
split next to the shipped mBART rewriter (train/seq2seq/gru_eval.py: BLEU and chrF overall and
by source length, int8 against fp32), with evaluation.json, loss.png, the card
(train/seq2seq/gru_card.py) and the manifest's metrics and training data, sealed last.

Does not cover: the models (modeling/gru_seq2seq.py), export (export/gru_seq2seq.py), the mBART
recipes (train/seq2seq/recipes.py).
"""

from __future__ import annotations

import argparse
import ast
import json
import logging
import random
import re
import shutil
import sys
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import torch

from modeling import gru_seq2seq as model_definition
from runtime.bundle import sha256_of
from train import common, data, evaluate

from . import bart as seq2seq

REPO = Path(__file__).resolve().parents[2]
REWRITER = REPO / "models" / "rewriter" / "int8"  # the shipped mBART rewriter
TOKENIZER = REWRITER / "tokenizer.json"
SHIP_NAMES = {"context": "rewriter-gru", "attention": "rewriter-gru-attention"}
SAMPLE_VERSES = 3  # fixture test verses whose greedy rewrites a card records (tests check them)
SOURCE, TARGET = "kjv", "web"
POSITIONS = seq2seq.REWRITER_FULL.positions  # the rewriter's pair filter: sources and targets fit
LOG_FILE = "train.log"


@dataclass(frozen=True)
class GRUTrainSize:
    steps: int = 3500  # optimizer steps, the same on every device (under 40 min on 2 CPU cores)
    batch_size: int = 64  # pairs per step, as the rewriter
    lr: float = 2e-3  # peak learning rate (AdamW), cosine decay to a tenth
    warmup: int = 200  # steps of linear warm-up
    val_pairs: int = 256  # validation pairs in the periodic validation loss
    log_every: int = 20  # steps between loss.csv rows
    eval_every: int = 200  # steps between validation losses
    checkpoint_every: int = 200  # steps between checkpoints


FULL = GRUTrainSize()


# ---------------------------------------------------------------------------------------------
# The pairs file


def _ragged(rows: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    """Token lists as one flat int32 array and offsets (len(rows) + 1,)."""
    offsets = np.cumsum([0, *map(len, rows)]).astype(np.int64)
    flat = np.fromiter((t for row in rows for t in row), dtype=np.int32, count=int(offsets[-1]))
    return flat, offsets


def _unragged(flat: np.ndarray, offsets: np.ndarray) -> list[list[int]]:
    return [flat[a:b].tolist() for a, b in zip(offsets[:-1], offsets[1:])]


def _texts(values: list[str]) -> np.ndarray:
    """Lines (verses hold no newline) as UTF-8 bytes: an .npz needs no pickle for them."""
    return np.frombuffer("\n".join(values).encode("utf-8"), dtype=np.uint8)


def write_pairs(verses: Path, tokenizer_path: Path, out: Path) -> dict[str, int]:
    """Tokenize every split's KJV -> WEB pairs (the rewriter's filter) into `out`; return the
    pair count per split."""
    from tokenizers import Tokenizer

    rows = data.load_verses(verses)
    tokenizer = Tokenizer.from_file(str(tokenizer_path))
    arrays: dict[str, np.ndarray] = {"tokenizer_sha256": np.array(sha256_of(tokenizer_path))}
    counts = {}
    for split in data.SPLITS:
        pairs = seq2seq.make_pairs(rows, SOURCE, TARGET, split, tokenizer, POSITIONS)
        counts[split] = len(pairs)
        for side in ("source", "target"):
            flat, offsets = _ragged([getattr(p, f"{side}_ids") for p in pairs])
            arrays[f"{split}_{side}_ids"], arrays[f"{split}_{side}_offsets"] = flat, offsets
            arrays[f"{split}_{side}_text"] = _texts([getattr(p, side) for p in pairs])
        arrays[f"{split}_book"] = _texts([p.book for p in pairs])
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp.npz")
    np.savez_compressed(tmp, **arrays)
    tmp.replace(out)
    return counts


def read_pairs(path: Path, split: str, tokenizer_path: Path | None = None) -> list[seq2seq.Pair]:
    """One split's pairs from a pairs file; with `tokenizer_path`, checks that the file was
    tokenized with that tokenizer."""
    if split not in data.SPLITS:
        raise ValueError(f"`split` must be one of {data.SPLITS}, got {split!r}")
    with np.load(path, allow_pickle=False) as arrays:
        if tokenizer_path is not None and str(arrays["tokenizer_sha256"]) != sha256_of(
            tokenizer_path
        ):
            raise ValueError(
                f"`pairs` must be tokenized with {tokenizer_path}, got {path} made with another "
                "tokenizer (delete it to rebuild)"
            )
        ids = {
            side: _unragged(arrays[f"{split}_{side}_ids"], arrays[f"{split}_{side}_offsets"])
            for side in ("source", "target")
        }
        texts = {
            key: bytes(arrays[f"{split}_{key}"]).decode("utf-8").split("\n")
            for key in ("source_text", "target_text", "book")
        }
    return [
        seq2seq.Pair(s, t, b, si, ti)
        for s, t, b, si, ti in zip(
            texts["source_text"], texts["target_text"], texts["book"], ids["source"], ids["target"]
        )
    ]


# ---------------------------------------------------------------------------------------------
# The task the training loop runs


def special_ids(tokenizer_path: Path) -> dict[str, int]:
    from tokenizers import Tokenizer

    from train.tokenizer import BOS, EOS, PAD

    tokenizer = Tokenizer.from_file(str(tokenizer_path))
    return {
        "bos": tokenizer.token_to_id(BOS),
        "eos": tokenizer.token_to_id(EOS),
        "pad": tokenizer.token_to_id(PAD),
    }


def example(pair: seq2seq.Pair, special: dict[str, int]) -> seq2seq.Example:
    """`<|bos|> source <|eos|>` -> `target <|eos|>`, as the runtime encodes a source."""
    return seq2seq.Example(
        [special["bos"], *pair.source_ids, special["eos"]], [*pair.target_ids, special["eos"]]
    )


class PairsTask(common.Task):
    """Length-bucketed batches of training pairs (a fresh order per epoch) and a fixed
    validation sample; batches go to the model's device when they are used."""

    def __init__(self, train, validation, special, size: GRUTrainSize, device: str, seed: int):
        self.train = [example(p, special) for p in train]
        self.special, self.size, self.device, self.seed = special, size, device, seed
        chosen = random.Random(seed).sample(validation, min(size.val_pairs, len(validation)))
        examples = [example(p, special) for p in chosen]
        self.val_batches = [
            seq2seq.collate(examples[i : i + size.batch_size], special["pad"], special["bos"])
            for i in range(0, len(examples), size.batch_size)
        ]

    def batches(self, epoch: int) -> list[dict]:
        rng = random.Random(self.seed * 1_000_003 + epoch)
        batches = seq2seq.length_batches(self.train, self.size.batch_size, rng)
        return [seq2seq.collate(b, self.special["pad"], self.special["bos"]) for b in batches]

    def _on_device(self, batch: dict) -> dict:
        return {k: v.to(self.device, non_blocking=True) for k, v in batch.items()}

    def loss(self, model, batch: dict) -> torch.Tensor:
        # Matrix products in bfloat16 on either device (weights, gradients and the optimizer in
        # float32): the tied output layer dominates a step, and bfloat16 runs it 2-3x faster on
        # this machine's AVX512-BF16 cores.
        with torch.autocast(self.device, dtype=torch.bfloat16):
            return model(**self._on_device(batch)).loss

    def validation_loss(self, model) -> float:
        nll, tokens = 0.0, 0
        model.eval()
        with torch.no_grad():
            for batch in self.val_batches:
                n = int((batch["labels"] != -100).sum())
                nll += float(model(**self._on_device(batch)).loss) * n
                tokens += n
        return nll / max(tokens, 1)


# ---------------------------------------------------------------------------------------------
# A run


def _logger(out: Path) -> logging.Logger:
    logger = logging.getLogger(f"train.seq2seq.gru.{out}")
    logger.setLevel(logging.INFO)
    if not logger.handlers:
        handler = logging.FileHandler(out / LOG_FILE)
        handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
        logger.addHandler(handler)
    return logger


def run(
    variant: str,
    pairs_path: Path,
    out: Path,
    device: str = "cpu",
    size: GRUTrainSize = FULL,
    tokenizer_path: Path = TOKENIZER,
    resume: bool = False,
    max_steps: int | None = None,
    threads: int = common.THREADS,
    seed: int = 0,
    progress: bool = True,
) -> dict:
    """Train `variant` ("context" or "attention") on the pairs file into `out`; once the step
    budget is reached, write the run folder export reads. Returns the loop's state."""
    if variant not in model_definition.PRESETS:
        raise ValueError(
            f"`variant` must be one of {sorted(model_definition.PRESETS)}, got {variant!r}"
        )
    if device not in ("cpu", "cuda"):
        raise ValueError(f"`device` must be 'cpu' or 'cuda', got {device!r}")
    out.mkdir(parents=True, exist_ok=True)
    log = _logger(out)
    special = special_ids(tokenizer_path)
    config = replace(
        model_definition.PRESETS[variant],
        bos_token_id=special["bos"],
        eos_token_id=special["eos"],
        pad_token_id=special["pad"],
    )
    common.seed_everything(seed)
    model = model_definition.build(config).to(device)
    train_pairs = read_pairs(pairs_path, "train", tokenizer_path)
    task = PairsTask(train_pairs, read_pairs(pairs_path, "validation"), special, size, device, seed)
    train_config = common.TrainConfig(
        steps=size.steps,
        lr=size.lr,
        warmup=min(size.warmup, size.steps - 1),
        log_every=size.log_every,
        eval_every=size.eval_every,
        checkpoint_every=size.checkpoint_every,
        seed=seed,
    )
    parameters = model_definition.count_parameters(model)
    log.info(
        f"{'resume' if resume else 'start'} {variant}: {parameters:,} parameters, "
        f"{len(train_pairs):,} training pairs, {size.steps} steps, device {device}, "
        f"threads {threads}, size {asdict(size)}"
    )
    state = common.train(
        model,
        task,
        train_config,
        out,
        resume=resume,
        max_steps=max_steps,
        progress=progress,
        describe=f"gru {variant}",
        threads=threads,
    )
    rate = common.steps_per_second(out / common.LOSS_CSV)
    log.info(
        f"stopped at step {state['step']} of {size.steps} after {state['train_seconds']:.0f} s "
        f"of training ({rate or 0:.2f} steps/s)"
    )
    if state["finished"]:
        model_definition.save_config(config, out)
        weights = {k: v.detach().cpu() for k, v in model.state_dict().items()}
        torch.save(weights, out / model_definition.WEIGHTS_FILE)
        shutil.copyfile(tokenizer_path, out / "tokenizer.json")
        common.plot_losses(out / common.LOSS_CSV, out / common.LOSS_PNG, f"GRU {variant}")
        log.info(f"finished: {out / model_definition.WEIGHTS_FILE}")
    return state


def evaluate_bundle(
    bundle: Path, pairs_path: Path, count: int = 0, beams: int = 3, seed: int = 0, progress=True
) -> dict:
    """Scores of the bundle's rewrites of `count` test pairs (0: all) against the WEB, and of
    the copy baseline, with four sample rewrites."""
    import runtime

    gen = runtime.load(bundle)
    pairs = read_pairs(pairs_path, "test")
    if count:
        pairs = random.Random(seed).sample(pairs, min(count, len(pairs)))
    sources, references = [p.source for p in pairs], [p.target for p in pairs]
    config = runtime.GenerationConfig(num_beams=beams, max_new_tokens=POSITIONS - 1)
    outputs = seq2seq.generate_all(gen, sources, {}, config, progress=progress)

    def scores(hypotheses: list[str]) -> dict:
        found = evaluate.bleu_chrf(hypotheses, references)
        found["rouge2_recall"] = evaluate.mean_rouge2_recall(hypotheses, references)
        return found

    chosen = random.Random(seed + 2).sample(range(len(pairs)), min(4, len(pairs)))
    return {
        "bundle": bundle.name,
        "test_pairs": len(pairs),
        "num_beams": beams,
        "model": scores(outputs),
        "copy (KJV source)": scores(sources),
        "samples": [
            {"book": pairs[i].book, "kjv": sources[i], "web": references[i], "output": outputs[i]}
            for i in chosen
        ],
    }


# ---------------------------------------------------------------------------------------------
# Shipping: int8 bundles in models/, evaluated against the mBART rewriter, with their cards


def run_summary(run_dir: Path, training_pairs: int) -> dict:
    """What a finished run's loss.csv, train.log and config say: steps, epochs, time, losses,
    threads and sizes (threads None and the default batch size without a train.log)."""
    rows = common.LossLog(run_dir / common.LOSS_CSV).rows()
    last = rows[-1]
    starts = [line for line in _log_lines(run_dir) if " start " in line or " resume " in line]
    size = asdict(FULL)
    threads = None
    if starts:
        size = ast.literal_eval(starts[-1].split(" size ", 1)[1])
        threads = int(re.search(r"threads (\d+)", starts[-1]).group(1))
    steps = int(last["step"])
    return {
        "steps": steps,
        "batch_size": size["batch_size"],
        "epochs": round(steps * size["batch_size"] / training_pairs, 2),
        "target_tokens": int(last["tokens"]),
        "train_seconds": float(last["train_seconds"]),
        "steps_per_second": common.steps_per_second(run_dir / common.LOSS_CSV),
        "threads": threads,
        "lr": size["lr"],
        "warmup": size["warmup"],
        "final_train_loss": float(last["train_loss"]),
        "validation_losses": {
            int(r["step"]): float(r["val_loss"]) for r in rows if r["val_loss"] not in ("", None)
        },
        "model": asdict(model_definition.load_config(run_dir)),
    }


def _log_lines(run_dir: Path) -> list[str]:
    path = run_dir / LOG_FILE
    return path.read_text().splitlines() if path.exists() else []


def training_data(pairs_path: Path, steps: int) -> dict:
    """The manifest's training_data, with the fields of the mBART rewriter's and the steps."""
    return {
        "corpus": f"{SOURCE.upper()} -> {TARGET.upper()} verse pairs from the SWORD modules "
        "engKJV2006eb, engWEB2015eb, spaRV1909eb (canonical books)",
        "source_language": "en",
        "target_language": "en",
        "training pairs": len(read_pairs(pairs_path, "train")),
        "pair filter": f"{data.PAIR_BOUNDS}",
        "split": common.split_description(),
        "licence": "public domain",
        "steps": steps,
    }


def _shown(path: Path) -> str:
    """`path` relative to the repository when inside it, so results read the same anywhere."""
    try:
        return str(Path(path).resolve().relative_to(REPO))
    except ValueError:
        return str(path)


def ship(
    runs: dict[str, Path],
    pairs_path: Path,
    models_dir: Path = REPO / "models",
    rewriter: Path = REWRITER,
    sample_verses: int = SAMPLE_VERSES,
    progress: bool = True,
) -> dict:
    """Export each finished run (variant -> run folder) to models_dir/<SHIP_NAMES>/int8,
    evaluate the int8 bundles (greedy and beam 3) and the mBART rewriter (its defaults) on the
    whole test split (train/seq2seq/gru_eval.py), measure int8 against an fp32 export of the same
    run, then write each bundle's evaluation.json, card and metrics and seal it. Returns the
    evaluation."""
    import tempfile

    from convert.manifest import seal
    from export import gru_seq2seq as gru_export
    from train.seq2seq import gru_card as gru_seq2seq_card
    from train.seq2seq import gru_eval

    unknown = sorted(set(runs) - set(SHIP_NAMES))
    if unknown:
        raise ValueError(f"`runs` variants must be in {sorted(SHIP_NAMES)}, got {unknown}")
    test = read_pairs(pairs_path, "test")
    training_pairs = len(read_pairs(pairs_path, "train"))
    fixture_sources = [r["kjv"] for r in data.load_verses(data.FIXTURE, split="test")]
    fixture_sources = fixture_sources[:sample_verses]
    bundles, summaries, parity, manifests, samples = {}, {}, {}, {}, {}
    systems = []
    with tempfile.TemporaryDirectory() as tmp:
        for variant, run_dir in runs.items():
            name = SHIP_NAMES[variant]
            summaries[name] = run_summary(run_dir, training_pairs)
            bundles[name] = models_dir / name / "int8"
            manifests[name] = gru_export.export_bundle(
                run_dir,
                bundles[name],
                "int8",
                name=name,
                training_data=training_data(pairs_path, summaries[name]["steps"]),
            )
            fp32 = gru_export.export_bundle(run_dir, Path(tmp) / name, "fp32", name=name)
            parity[name] = gru_eval.int8_parity(
                bundles[name], Path(tmp) / name, [p.source for p in test], [p.target for p in test]
            )
            parity[name]["fp32_vs_pytorch_max_abs_logit_diff"] = fp32.parity.logits_max_abs_diff
            samples[name] = gru_eval.greedy_samples(bundles[name], fixture_sources)
            systems += [
                gru_eval.System(f"{name} greedy", bundles[name], 1),
                gru_eval.System(f"{name} beam 3", bundles[name], 3),
            ]
    systems.append(gru_eval.System(f"{rewriter.parent.name} (mBART)", rewriter))
    long_rows = [i for i, p in enumerate(test) if gru_eval.source_words(p.source) > 40][:2]
    results = gru_eval.evaluate_systems(systems, test, sample_rows=long_rows, progress=progress)
    for found in results["systems"].values():
        if "bundle" in found:
            found["bundle"] = _shown(found["bundle"])
    results["int8_vs_fp32"] = parity
    results["training"] = summaries
    for variant, run_dir in runs.items():
        name = SHIP_NAMES[variant]
        evaluation = {**results, "greedy_samples": samples[name]}
        common.write_json(bundles[name] / common.EVALUATION, evaluation)
        shutil.copyfile(run_dir / common.LOSS_PNG, bundles[name] / common.LOSS_PNG)
        metrics = {
            f"{metric} {how}": round(results["systems"][f"{name} {how}"][metric], 2)
            for how in ("greedy", "beam 3")
            for metric in ("bleu", "chrf")
        }
        copy = results["systems"][gru_eval.COPY]
        metrics |= {
            f"{metric} {gru_eval.COPY}": round(copy[metric], 2) for metric in ("bleu", "chrf")
        }
        manifest = replace(manifests[name], metrics=metrics)
        (bundles[name] / "README.md").write_text(
            gru_seq2seq_card.card(manifest, variant, evaluation, FULL.steps)
        )
        seal(bundles[name], manifest, ensure_ascii=False)
        print(f"shipped {bundles[name]}")
    total = sum(p.stat().st_size for p in models_dir.rglob("*") if p.is_file()) / 2**20
    print(f"{models_dir}: {total:.1f} MB in total")
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m train.seq2seq.gru", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--variant", choices=sorted(model_definition.PRESETS))
    parser.add_argument("--pairs", type=Path, required=True, help="tokenized pairs (.npz)")
    parser.add_argument("--pairs-only", action="store_true", help="write --pairs and stop")
    parser.add_argument("--verses", type=Path, default=data.DEFAULT_OUT, help="verse table")
    parser.add_argument("--tokenizer", type=Path, default=TOKENIZER)
    parser.add_argument("--out", type=Path, help="run folder")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--max-steps", type=int, help="stop this invocation at this step")
    parser.add_argument("--steps", type=int, default=FULL.steps, help="the run's step budget")
    parser.add_argument("--threads", type=int, default=common.THREADS)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--evaluate", type=Path, help="score this bundle on the test books")
    parser.add_argument("--eval-pairs", type=int, default=0, help="test pairs scored (0: all)")
    parser.add_argument(
        "--ship",
        nargs="+",
        metavar="VARIANT=RUN",
        help="export these finished runs as int8 bundles into --models-dir, evaluated and carded",
    )
    parser.add_argument("--models-dir", type=Path, default=REPO / "models")
    parser.add_argument("--rewriter", type=Path, default=REWRITER, help="mBART bundle compared")
    args = parser.parse_args(argv)
    if not args.pairs.exists():
        if not args.verses.exists():
            raise FileNotFoundError(
                f"{args.verses} not found: build it with `python -m train.data`"
            )
        counts = write_pairs(args.verses, args.tokenizer, args.pairs)
        print(f"wrote {args.pairs}: {counts}")
    if args.pairs_only:
        return 0
    if args.ship:
        runs = dict(item.split("=", 1) for item in args.ship)
        ship({v: Path(r) for v, r in runs.items()}, args.pairs, args.models_dir, args.rewriter)
        return 0
    if args.evaluate is not None:
        scores = evaluate_bundle(args.evaluate, args.pairs, args.eval_pairs, seed=args.seed)
        print(json.dumps(scores, indent=2, ensure_ascii=False))
        return 0
    if args.variant is None or args.out is None:
        parser.error("--variant and --out are needed to train")
    if args.steps < 1:
        raise ValueError(f"`--steps` must be at least 1, got {args.steps}")
    state = run(
        args.variant,
        args.pairs,
        args.out,
        device=args.device,
        size=replace(FULL, steps=args.steps),
        tokenizer_path=args.tokenizer,
        resume=args.resume,
        max_steps=args.max_steps,
        threads=args.threads,
        seed=args.seed,
    )
    print(f"{args.variant}: step {state['step']}, finished {state['finished']}, out {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
