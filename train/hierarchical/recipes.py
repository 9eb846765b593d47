"""Seed 003's hierarchical character-level language model: its training data and its recipes
(the model itself is modeling/hierarchical.py).

Task: given a WEB verse, predict the next verse of the same chapter, character by character, word
by word, ending with the end-of-sentence word. The autoencoder recipe freezes everything but the
sentence decoder (and the projection to the word decoder that belongs to it) and trains it to
reconstruct its input (seed 003 §4.3). The style recipe continues training on another corpus.
Metric: nits per character = summed cross-entropy / predicted characters, where every character of
a target word, its end-of-word symbol and the end-of-sentence word count as characters.

Does not cover: the model (modeling/hierarchical.py), shipping (train/hierarchical/ship.py), the
command line (train/hierarchical/cli.py), ONNX export (export/hierarchical.py), generation
(runtime/hierarchical.py), the Spurgeon corpus (train/spurgeon.py).
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict
from pathlib import Path

import torch

from modeling import hierarchical as model_definition
from runtime import hierarchical_text
from train import common, data
from train.library import load_library

# ---------------------------------------------------------------------------------------------
# Data


def verse_pairs(rows: list[dict], split: str) -> list[tuple[list[str], list[str]]]:
    """(verse, next verse of the same chapter) word lists, WEB, one split; both must fit."""
    pairs = []
    for a, b in zip(rows, rows[1:]):
        if a["split"] != split or b["split"] != split or not a["web"] or not b["web"]:
            continue
        if (a["book"], a["chapter"]) != (b["book"], b["chapter"]) or b["verse"] != a["verse"] + 1:
            continue
        source, target = (
            hierarchical_text.split_words(a["web"]),
            hierarchical_text.split_words(b["web"]),
        )
        if model_definition.encodable(source) and model_definition.encodable(target):
            pairs.append((source, target))
    return pairs


def verse_copies(rows: list[dict], split: str) -> list[tuple[list[str], list[str]]]:
    """(verse, the same verse) word lists for every WEB verse of one split that fits: the
    autoencoder's data, which needs no next verse, so it has more than `verse_pairs`."""
    verses = (
        hierarchical_text.split_words(row["web"])
        for row in rows
        if row["split"] == split and row["web"]
    )
    return [(words, words) for words in verses if model_definition.encodable(words)]


def library_pairs(
    records: list[dict], charset: list[str]
) -> tuple[list[tuple[list[str], list[str]]], list[list[str]]]:
    """From train/library.py's records: (sentence, next sentence of the same paragraph) pairs
    where both fit the model (words, word length, characters in `charset`), and every sentence
    that fits (the autoencoder's copies). The library already keeps held-out text out."""
    vocab = hierarchical_text.CharVocab(charset)
    pairs, fitting = [], []
    for record in records:
        sentences = [hierarchical_text.split_words(s) for s in record["sentences"]]
        fits = [
            model_definition.encodable(w) and all(c in vocab.ids for word in w for c in word)
            for w in sentences
        ]
        fitting += [w for w, fit in zip(sentences, fits) if fit]
        pairs += [
            (a, b) for a, b, fa, fb in zip(sentences, sentences[1:], fits, fits[1:]) if fa and fb
        ]
    return pairs, fitting


class PairTask(common.Task):
    """Shuffled batches of (source, target) pairs; validation = nits/char on a fixed subset."""

    def __init__(
        self,
        vocab,
        train_pairs,
        validation_pairs,
        batch_size: int,
        seed: int,
        word_chars: int,
        bf16: bool = False,
    ):
        self.vocab, self.train_pairs, self.batch_size = vocab, train_pairs, batch_size
        self.seed, self.word_chars, self.bf16 = seed, word_chars, bf16
        self.validation = batches_of(vocab, validation_pairs, 64, word_chars)

    def batches(self, epoch: int) -> list[dict]:
        order = list(range(len(self.train_pairs)))
        random.Random(self.seed * 1000 + epoch).shuffle(order)
        return [
            model_definition.collate(
                self.vocab,
                [self.train_pairs[i] for i in order[k : k + self.batch_size]],
                self.word_chars,
            )
            for k in range(0, len(order), self.batch_size)
        ]

    def loss(self, model, batch: dict) -> torch.Tensor:
        """Training nits/char of the batch (under bfloat16 autocast with `bf16`; validation and
        test stay float32)."""
        with common.bf16_autocast(self.bf16):
            total, count = model(
                batch["source"], batch["source_mask"], batch["target"], batch["target_mask"]
            )
        return total.float() / count

    def validation_loss(self, model) -> float:
        return nits_per_char(model, self.validation)


def batches_of(vocab, pairs, size: int, word_chars: int) -> list[dict]:
    return [
        model_definition.collate(vocab, pairs[k : k + size], word_chars)
        for k in range(0, len(pairs), size)
    ]


@torch.no_grad()
def nits_per_char(model, batches: list[dict]) -> float:
    """Summed cross-entropy / predicted characters over `batches` (eval mode)."""
    was_training = model.training
    model.eval()
    total = count = 0
    for batch in batches:
        loss, n = model(
            batch["source"], batch["source_mask"], batch["target"], batch["target_mask"]
        )
        total, count = total + float(loss), count + n
    model.train(was_training)
    return total / count


# ---------------------------------------------------------------------------------------------
# Recipes


def save_run(model: model_definition.HierarchicalLM, out: Path) -> None:
    """The model's config and weights for export (out/hierarchical.json, out/model.pt)."""
    common.write_json(out / model_definition.CONFIG_FILE, asdict(model.config))
    torch.save(model.state_dict(), out / "model.pt")


def web_pairs(verses: Path) -> dict[str, list]:
    rows = data.load_verses(verses)
    return {split: verse_pairs(rows, split) for split in data.SPLITS}, rows


def train_run(model, train_pairs, validation_pairs, test_pairs, args, describe: str) -> dict:
    """Train with common.train, then save the model and its test nits/char into out/."""
    out = args.out
    if not args.noise >= 0:
        raise ValueError(f"`noise` must be >= 0, got {args.noise}")
    model.config.sentence_noise = args.noise  # this run's training noise (WDN), saved with it
    config = common.TrainConfig(
        steps=args.steps,
        lr=args.lr,
        warmup=min(50, args.steps // 10),
        min_lr_ratio=0.1,
        weight_decay=0.01,
        clip=5.0,
        log_every=10 if args.steps >= 50 else 1,
        eval_every=(100 if args.steps >= 200 else 10) if args.steps >= 50 else 1,
        checkpoint_every=50,
        seed=args.seed,
    )
    vocab = hierarchical_text.CharVocab(model.config.charset)
    task = PairTask(
        vocab,
        train_pairs,
        validation_pairs,
        args.batch_size,
        args.seed,
        model.config.word_chars,
        bf16=args.bf16,
    )
    state = common.train(
        model,
        task,
        config,
        out,
        resume=args.resume,
        max_steps=args.max_steps,
        progress=not args.quiet,
        describe=describe,
        threads=args.threads,
        max_minutes=args.max_minutes,
    )
    common.plot_losses(out / common.LOSS_CSV, out / common.LOSS_PNG, describe)
    if not state["finished"] and state["step"] != args.max_steps:
        print(f"stopped at step {state['step']} of {config.steps}; continue with --resume")
        return {}
    save_run(model, out)
    result = {
        "kind": model.config.kind,
        "parameters": common.count_parameters(model),
        "steps": state["step"],
        "planned_steps": config.steps,
        "train_seconds": round(state["train_seconds"], 1),
        "train_pairs": len(train_pairs),
        "test_pairs": len(test_pairs),
        "validation_nits_per_char": round(nits_per_char(model, task.validation), 4),
        "test_nits_per_char": round(
            nits_per_char(model, batches_of(vocab, test_pairs, 64, model.config.word_chars)), 4
        ),
        "threads": args.threads,
        "bf16": args.bf16,
        "batch_size": args.batch_size,
        "lr": args.lr,
        "sentence_noise": args.noise,
    }
    common.write_json(out / "result.json", result)
    print(json.dumps(result))
    return result


def run_lm(args) -> dict:
    """Next-verse prediction on the WEB with one sentence-encoder kind; with `--library`, the
    training pairs are consecutive sentences of train/library.py's paragraphs instead
    (validation and test stay the held-out WEB verse pairs)."""
    common.seed_everything(args.seed)
    pairs, rows = web_pairs(args.verses)
    config = model_definition.HierarchicalConfig(
        kind=args.kind, charset=hierarchical_text.default_charset(r["web"] for r in rows)
    )
    if args.tiny:
        config = tiny_config(config)
    if args.library is not None:
        pairs["train"] = library_pairs(load_library(args.library), config.charset)[0]
    model = model_definition.HierarchicalLM(config)
    return train_run(
        model,
        pairs["train"],
        pairs["validation"][:512],
        pairs["test"],
        args,
        f"hierarchical-{args.kind}",
    )


def tiny_config(config: model_definition.HierarchicalConfig) -> model_definition.HierarchicalConfig:
    config.word_dim = config.value_dim = config.gru_dim = config.partial_dim = 32
    config.key_dim, config.head_dims = 16, (32, 16)
    return config


def run_autoencoder(args) -> dict:
    """Seed 003 §4.3: freeze all but the sentence decoder, train it to reconstruct the input
    (every WEB verse that fits, not only those with a next verse; with `--library`, every
    library sentence that fits). `--train-encoder` also trains the sentence encoder: a
    measurement of what the freeze costs, which `ship` refuses (the bundle's two decoders share
    one encoder)."""
    common.seed_everything(args.seed)
    rows = data.load_verses(args.verses)
    model = model_definition.load_run(args.init)
    copies = verse_copies(rows, "train")
    if args.library is not None:
        sentences = library_pairs(load_library(args.library), model.config.charset)[1]
        copies = [(words, words) for words in sentences]
    trained = ("sentence_decoder.",) + (("sentence_encoder.",) if args.train_encoder else ())
    for name, parameter in model.named_parameters():
        parameter.requires_grad = name.startswith(trained)
    model.embedding.weight.requires_grad = False
    return train_run(
        model,
        copies,
        verse_copies(rows, "validation")[:512],
        verse_copies(rows, "test"),
        args,
        "hierarchical-autoencoder",
    )


def run_style(args) -> dict:
    """Next-sentence prediction on an author's sentences (train/spurgeon.py's JSON), from
    `--init` (fine-tune) or from scratch with the WEB run's character set and sizes."""
    common.seed_everything(args.seed)
    corpus = json.loads(args.corpus.read_text())
    if args.init:
        model = model_definition.load_run(args.init)
    else:
        model = model_definition.HierarchicalLM(model_definition.load_config(args.like))
    return train_run(
        model,
        corpus["train"],
        corpus["validation"][:512],
        corpus["test"],
        args,
        "hierarchical-style",
    )
