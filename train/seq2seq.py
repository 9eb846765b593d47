"""The encoder-decoder recipes: `rewriter` (KJV -> WEB with seed 004's length-ratio tokens) and
`translator` (WEB -> Reina-Valera 1909), both trained from scratch on verse pairs.

Both use the BART architecture in its pre-LayerNorm form (transformers' mBART; post-LN BART from
scratch did not learn to use its source here, see `build_model`): one code path for the two
models; a shared vocabulary (one embedding table for encoder, decoder and output layer); learned
positions, which a 128-token verse model can afford, started in both stacks from one sinusoidal
table (see `build_model`). Marian would differ only in sinusoidal
positions and its SentencePiece tooling, neither of which helps here, and is post-LN too.
The translator uses the data engineer's joint English + Spanish tokenizer (en_es), the rewriter
the English one (en), which holds the length tokens.

Input format, identical in training and in the runtime: the source text with the chosen control
tokens concatenated in front (manifest order: `length`, then `length_ratio`; no separator), then
encoded with the bundle's tokenizer, whose post-processor wraps it as `<|bos|> … <|eos|>`. The
decoder starts from `<|bos|>` and is trained to produce the target followed by `<|eos|>`.

Length tokens (seed 004): ratio = target subwords / source subwords; category `<short>` (< 0.95),
`<normal>`, `<long>` (> 1.05); value `<ratio_0.1>` … `<ratio_2.0>` (nearest). Each training example
draws afresh every epoch: the category token (40 %), the value token (40 %), both (10 %) or none
(10 %, the baseline), so every combination the app can send was seen in training. KJV and WEB
verses are close in length (three quarters of the pairs are nearest 0.9 or 1.0, fewer than one in
200 nearest 0.6), so the rewriter's epochs also hold a ratio-balanced draw of extra pairs with
their value token (`balanced_draw`): without it the model never learns the rare value tokens and
ignores them.

Evaluation (test books, through the runtime on the exported bundle): the rewriter as 004 does
(baseline ratio without a token; strategy 1: force each token on every test verse, mean achieved
ratio LRsrc; strategy 2: BLEU, chrF and ROUGE-2 recall per true-ratio group; the copy baseline);
the translator with sacreBLEU and chrF next to `apertium -u eng-spa` on the same verses.

Does not cover: the verse table and pair filters (train/data.py), tokenizers (train/tokenizer.py),
the training loop (train/common.py), metric definitions (train/evaluate.py).
"""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm.auto import tqdm

from train import common, data, evaluate
from train import tokenizer as tk

CATEGORY_TOKENS = dict(zip(evaluate.LENGTH_CATEGORIES, tk.LENGTH_TOKENS))
RATIO_TOKENS = {value: f"<ratio_{value:.1f}>" for value in evaluate.RATIO_VALUES}
# Probabilities of the length prefix kinds in training: category, value, both, none.
PREFIX_KINDS = (("category", 0.4), ("value", 0.4), ("both", 0.1), ("none", 0.1))
TARGET_RATIOS = tuple(round(0.6 + step / 10, 1) for step in range(9))  # 004 targets: 0.6 … 1.4
# The rewriter's extra value-token examples per epoch, as a share of its training pairs.
BALANCED_SHARE = 0.3
# Value tokens with fewer training pairs than this are drawn as if they had this many, so that a
# handful of pairs is not repeated without limit.
BALANCE_FLOOR = 50


@dataclass(frozen=True)
class Seq2SeqSize:
    encoder_layers: int  # encoder blocks
    decoder_layers: int  # decoder blocks
    width: int  # d_model
    heads: int  # attention heads
    ffn: int  # feed-forward width
    positions: int  # longest source / target in tokens (specials included)
    batch_size: int  # pairs per optimizer step
    epochs: float  # passes over the training pairs; sets the step count
    lr: float  # peak learning rate
    warmup: int  # warm-up steps
    dropout: float  # residual dropout
    steps: int = 0  # when > 0, a fixed step count instead of `epochs` (tiny mode)
    vocab_size: int = tk.EN_VOCAB_SIZE  # tokenizer size when the recipe trains its own
    eval_beams: int = 3  # beam width for evaluation (seed 004 evaluates with beam 3)
    eval_pairs: int = 0  # test pairs evaluated; 0 = all
    sweep_pairs: int = 500  # test pairs for the value-token sweep of strategy 1
    max_new_tokens: int = 127  # generation cap in evaluation
    label_smoothing: float = 0.0  # training loss only; validation loss is plain cross-entropy


# A step (64 pairs, ~4.5k source + target tokens) costs about as much as a bible-lm step; the
# epochs are chosen so each run is one to two hours on this machine (docs/TRAINING.md).
REWRITER_FULL = Seq2SeqSize(
    encoder_layers=3, decoder_layers=3, width=256, heads=4, ffn=1024, positions=128,
    batch_size=64, epochs=4.0, lr=1e-3, warmup=100, dropout=0.1,
)  # fmt: skip
TRANSLATOR_FULL = Seq2SeqSize(
    encoder_layers=4, decoder_layers=4, width=256, heads=4, ffn=1024, positions=128,
    batch_size=64, epochs=5.0, lr=1e-3, warmup=150, dropout=0.1, label_smoothing=0.1,
    vocab_size=tk.EN_ES_VOCAB_SIZE,
)  # fmt: skip
TINY = Seq2SeqSize(
    encoder_layers=1, decoder_layers=1, width=64, heads=4, ffn=128, positions=256,
    batch_size=8, epochs=1.0, lr=3e-3, warmup=2, dropout=0.0, steps=6, vocab_size=512,
    eval_beams=2, eval_pairs=8, sweep_pairs=4, max_new_tokens=12, label_smoothing=0.1,
)  # fmt: skip


@dataclass
class Pair:
    source: str
    target: str
    book: str
    source_ids: list[int]  # no special tokens
    target_ids: list[int]  # no special tokens

    @property
    def ratio(self) -> float:
        return evaluate.length_ratio(len(self.source_ids), len(self.target_ids))


@dataclass
class Example:
    input_ids: list[int]  # <|bos|> controls source <|eos|>
    labels: list[int]  # target <|eos|>


def with_seq2seq_post_processor(tokenizer):
    """The tokenizer with BART's template `<|bos|> $A <|eos|>` (the runtime encodes seq2seq
    sources with special tokens, so this is how the bundle wraps every source)."""
    from tokenizers import processors

    bos, eos = tokenizer.token_to_id(tk.BOS), tokenizer.token_to_id(tk.EOS)
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{tk.BOS} $A {tk.EOS}",
        pair=f"{tk.BOS} $A {tk.EOS} $B {tk.EOS}",
        special_tokens=[(tk.BOS, bos), (tk.EOS, eos)],
    )
    return tokenizer


def make_pairs(rows, source: str, target: str, split: str, tokenizer, positions: int) -> list[Pair]:
    """Filtered pairs (train/data.py bounds) whose source and target fit `positions` tokens."""
    raw = data.filter_pairs(rows, source, target, split=split)
    sources = tokenizer.encode_batch([p["source"] for p in raw], add_special_tokens=False)
    targets = tokenizer.encode_batch([p["target"] for p in raw], add_special_tokens=False)
    room = positions - 4  # BOS, up to two control tokens, EOS
    return [
        Pair(p["source"], p["target"], p["book"], s.ids, t.ids)
        for p, s, t in zip(raw, sources, targets)
        if len(s.ids) <= room and len(t.ids) < positions - 1
    ]


def length_prefix(ratio: float, kind: str) -> str:
    """The control-token string for a pair of this ratio: kind "category", "value", "both"
    (category then value, the manifest order) or "none".

    >>> [length_prefix(0.84, kind) for kind in ("category", "value", "both", "none")]
    ['<short>', '<ratio_0.8>', '<short><ratio_0.8>', '']
    """
    category = CATEGORY_TOKENS[evaluate.length_category(ratio)]
    value = RATIO_TOKENS[evaluate.nearest_ratio_value(ratio)]
    return {"category": category, "value": value, "both": category + value, "none": ""}[kind]


def length_controls() -> dict:
    """The rewriter's bundle controls (docs/bundle.md), in the order the runtime applies them."""
    return {
        "length": {
            "kind": "choice",
            "values": dict(CATEGORY_TOKENS),
            "description": "output length relative to the source in subwords: short "
            "(< 0.95), normal (0.95-1.05), long (> 1.05)",
        },
        "length_ratio": {
            "kind": "numeric",
            "values": {f"{value:.1f}": token for value, token in RATIO_TOKENS.items()},
            "description": "target length / source length in subwords (nearest of 0.1 … 2.0)",
        },
    }


def balanced_draw(pairs: list[Pair], count: int, rng: random.Random, floor: int) -> list[Pair]:
    """`count` pairs drawn with replacement so that every nearest ratio value is about equally
    likely; a value with n < `floor` pairs gets n / `floor` of a full value's share.

    >>> pairs = [Pair("", "", "", [0] * 10, [0] * n) for n in [10] * 90 + [6] * 10]
    >>> drawn = balanced_draw(pairs, 1000, random.Random(0), floor=1)
    >>> sum(p.ratio == 0.6 for p in drawn)  # 10 % of the pairs, half of the draws
    492
    """
    values = [evaluate.nearest_ratio_value(p.ratio) for p in pairs]
    counts = Counter(values)
    weights = [1 / max(counts[value], floor) for value in values]
    return rng.choices(pairs, weights=weights, k=count)


def draw_kind(rng: random.Random) -> str:
    u, total = rng.random(), 0.0
    for kind, probability in PREFIX_KINDS:
        total += probability
        if u < total:
            return kind
    return "none"


def make_example(pair: Pair, prefix: str, tokenizer, special: dict) -> Example:
    """Source ids as the runtime builds them: tokenize `prefix + source` with the post-processor.

    Control tokens are special tokens, so this equals BOS + control ids + source ids + EOS; the
    shortcut avoids re-tokenizing every source every epoch (tests check the equality).
    """
    controls = [tokenizer.token_to_id(t) for t in _split_tokens(prefix)]
    return Example(
        [special["bos"], *controls, *pair.source_ids, special["eos"]],
        [*pair.target_ids, special["eos"]],
    )


def _split_tokens(prefix: str) -> list[str]:
    """'<short><ratio_0.8>' -> ['<short>', '<ratio_0.8>']."""
    return [f"<{part}" for part in prefix.split("<") if part]


def collate(examples: list[Example], pad_id: int, start_id: int) -> dict[str, torch.Tensor]:
    """Right-padded sources with attention mask; labels padded with -100; decoder inputs = the
    labels shifted right behind `start_id` (what generation starts from), padded with `pad_id`.

    The decoder inputs are explicit because mBART's own shift starts from the last label token
    instead of the decoder start token, which generation would not reproduce.
    """
    src_width = max(len(e.input_ids) for e in examples)
    tgt_width = max(len(e.labels) for e in examples)
    input_ids = torch.full((len(examples), src_width), pad_id, dtype=torch.long)  # (B, S)
    mask = torch.zeros((len(examples), src_width), dtype=torch.long)  # (B, S)
    labels = torch.full((len(examples), tgt_width), -100, dtype=torch.long)  # (B, T)
    decoder_ids = torch.full((len(examples), tgt_width), pad_id, dtype=torch.long)  # (B, T)
    for row, example in enumerate(examples):
        input_ids[row, : len(example.input_ids)] = torch.tensor(example.input_ids)
        mask[row, : len(example.input_ids)] = 1
        labels[row, : len(example.labels)] = torch.tensor(example.labels)
        decoder_ids[row, : len(example.labels)] = torch.tensor([start_id, *example.labels[:-1]])
    return {
        "input_ids": input_ids,
        "attention_mask": mask,
        "decoder_input_ids": decoder_ids,
        "labels": labels,
    }


def length_batches(examples: list[Example], batch_size: int, rng: random.Random) -> list[list]:
    """Shuffle, sort pools of 50 batches by source length (less padding), cut into batches, and
    shuffle the batches. Drops the last incomplete batch."""
    order = list(range(len(examples)))
    rng.shuffle(order)
    pool = 50 * batch_size
    batches = []
    for start in range(0, len(order), pool):
        chunk = sorted(order[start : start + pool], key=lambda i: len(examples[i].input_ids))
        batches += [chunk[i : i + batch_size] for i in range(0, len(chunk), batch_size)]
    batches = [b for b in batches if len(b) == batch_size]
    rng.shuffle(batches)
    return [[examples[i] for i in batch] for batch in batches]


class Seq2SeqTask(common.Task):
    def __init__(self, recipe: PairRecipe, val_pairs, val_count: int = 256):
        self.recipe = recipe
        rng = random.Random(recipe.seed)
        chosen = rng.sample(val_pairs, min(val_count, len(val_pairs)))
        examples = [recipe.example(pair, rng) for pair in chosen]
        size = recipe.size.batch_size
        self.val_batches = [
            collate(examples[i : i + size], recipe.special["pad"], recipe.special["bos"])
            for i in range(0, len(examples), size)
        ]

    def batches(self, epoch: int) -> list[dict]:
        rng = random.Random(self.recipe.seed * 1_000_003 + epoch)
        examples = self.recipe.epoch_examples(rng)
        pad, start = self.recipe.special["pad"], self.recipe.special["bos"]
        batches = length_batches(examples, self.recipe.size.batch_size, rng)
        return [collate(batch, pad, start) for batch in batches]

    def loss(self, model, batch: dict) -> torch.Tensor:
        smoothing = self.recipe.size.label_smoothing
        out = model(**batch)
        if not smoothing:
            return out.loss
        return torch.nn.functional.cross_entropy(
            out.logits.flatten(0, 1),  # (B*T, V)
            batch["labels"].flatten(),  # (B*T,)
            ignore_index=-100,
            label_smoothing=smoothing,
        )

    def validation_loss(self, model) -> float:
        nll, tokens = 0.0, 0
        model.eval()
        with torch.no_grad():
            for batch in self.val_batches:
                n = int((batch["labels"] != -100).sum())
                nll += float(model(**batch).loss) * n
                tokens += n
        return nll / max(tokens, 1)


def build_model(size: Seq2SeqSize, vocab_size: int, special: dict, seed: int):
    """mBART: BART's architecture with pre-LayerNorm blocks (and a final LayerNorm per stack).

    Post-LN BART trained from scratch here did not learn to use its source: after 800 steps the
    rewriter's validation loss was the same with the right and with shuffled sources, and on a
    synthetic copy task (8k vocabulary) post-LN BART stayed at chance for 400 steps while the
    pre-LN variant copied (docs/TRAINING.md).
    """
    from transformers import MBartConfig, MBartForConditionalGeneration

    config = MBartConfig(
        vocab_size=vocab_size,
        d_model=size.width,
        encoder_layers=size.encoder_layers,
        decoder_layers=size.decoder_layers,
        encoder_attention_heads=size.heads,
        decoder_attention_heads=size.heads,
        encoder_ffn_dim=size.ffn,
        decoder_ffn_dim=size.ffn,
        max_position_embeddings=size.positions,
        dropout=size.dropout,
        attention_dropout=0.0,
        activation_dropout=0.0,
        scale_embedding=False,
        bos_token_id=special["bos"],
        eos_token_id=special["eos"],
        pad_token_id=special["pad"],
        decoder_start_token_id=special["bos"],
        forced_bos_token_id=None,
        forced_eos_token_id=None,
        tie_word_embeddings=True,
    )
    torch.manual_seed(seed)
    model = MBartForConditionalGeneration(config)
    # Both stacks start from one sinusoidal table, so that target position t and source position
    # t look alike from the first step and a cross-attention head can align them at once; with
    # independent random tables the rewriter barely used its source for 400 steps
    # (docs/TRAINING.md). The tables stay trainable.
    table = sinusoidal_positions(model.model.encoder.embed_positions.weight.shape, std=0.02)
    with torch.no_grad():
        model.model.encoder.embed_positions.weight.copy_(table)
        model.model.decoder.embed_positions.weight.copy_(table)
    return model


def sinusoidal_positions(shape: tuple[int, int], std: float) -> torch.Tensor:
    """The Transformer's sin/cos position table, rescaled to standard deviation `std` (the
    token embeddings' init) so it does not drown the tokens.

    >>> table = sinusoidal_positions((130, 8), std=0.02)
    >>> tuple(table.shape), round(float(table.std()), 4)
    ((130, 8), 0.02)
    >>> bool((table[5] @ table[5]) > (table[5] @ table[40]))  # a position is most like itself
    True
    """
    rows, width = shape
    position = torch.arange(rows, dtype=torch.float32)[:, None]  # (P, 1)
    frequency = 10000 ** (-torch.arange(0, width, 2, dtype=torch.float32) / width)  # (W/2,)
    table = torch.zeros(rows, width)  # (P, W)
    table[:, 0::2] = torch.sin(position * frequency)
    table[:, 1::2] = torch.cos(position * frequency)
    return table * (std / table.std())


def generate_all(
    gen,
    sources: list[str],
    controls: dict | list[dict],
    config,
    batch: int = 32,
    desc: str = "generate",
    progress: bool = True,
) -> list[str]:
    """Outputs for `sources` through the runtime, batched by length; `controls` is one dict for
    all sources or one per source (sources sharing a dict are batched together)."""
    per_source = controls if isinstance(controls, list) else [controls] * len(sources)
    groups: dict[str, list[int]] = defaultdict(list)
    for index, chosen in enumerate(per_source):
        groups[repr(sorted(chosen.items()))].append(index)
    outputs: list[str] = [""] * len(sources)
    bar = tqdm(total=len(sources), desc=desc, unit="verse", disable=not progress, leave=False)
    with bar:
        for indices in groups.values():
            chosen = per_source[indices[0]]
            indices = sorted(indices, key=lambda i: len(sources[i]))
            for start in range(0, len(indices), batch):
                part = indices[start : start + batch]
                outs = gen.generate([sources[i] for i in part], config, chosen)
                for i, out in zip(part, outs):
                    outputs[i] = out.text.strip()
                bar.update(len(part))
    return outputs


class PairRecipe:
    """Shared by the rewriter and the translator: data, model, task, generation settings."""

    name = ""
    task_kind = "seq2seq"
    source = target = tokenizer_name = ""
    source_language = target_language = ""  # ISO 639-1 codes, for the app's language pairs

    def __init__(self, tiny: bool, verses: Path, tokenizer_dir: Path, out_dir: Path, seed: int):
        self.tiny = tiny
        self.size = TINY if tiny else self.full_size()
        self.seed = seed
        self.rows = data.load_verses(verses)
        tokenizer = common.load_or_train_tokenizer(
            self.rows, tokenizer_dir, out_dir, tiny, self.tokenizer_name, self.size.vocab_size
        )
        self.tokenizer = with_seq2seq_post_processor(tokenizer)
        self.special = {
            "bos": tokenizer.token_to_id(tk.BOS),
            "eos": tokenizer.token_to_id(tk.EOS),
            "pad": tokenizer.token_to_id(tk.PAD),
        }
        self.pairs = {
            split: make_pairs(
                self.rows, self.source, self.target, split, tokenizer, self.size.positions
            )
            for split in data.SPLITS
        }

    def full_size(self) -> Seq2SeqSize:
        raise NotImplementedError

    def example(self, pair: Pair, rng: random.Random) -> Example:
        return make_example(pair, "", self.tokenizer, self.special)

    def examples_per_epoch(self) -> int:
        return len(self.pairs["train"])

    def epoch_examples(self, rng: random.Random) -> list[Example]:
        """One epoch's training examples (unbatched): every training pair once."""
        return [self.example(pair, rng) for pair in self.pairs["train"]]

    def setup(self):
        size = self.size
        task = Seq2SeqTask(self, self.pairs["validation"])
        per_epoch = self.examples_per_epoch() // size.batch_size
        steps = size.steps or max(1, round(size.epochs * per_epoch))
        config = common.TrainConfig(
            steps=steps,
            lr=size.lr,
            warmup=size.warmup,
            log_every=1 if self.tiny else 10,
            eval_every=3 if self.tiny else 100,
            checkpoint_every=2 if self.tiny else 50,
            seed=self.seed,
        )
        model = build_model(size, self.tokenizer.get_vocab_size(), self.special, self.seed)
        return model, task, config

    def generation(self) -> dict:
        return {
            "bos_token_id": self.special["bos"],
            "eos_token_id": self.special["eos"],
            "pad_token_id": self.special["pad"],
            "decoder_start_token_id": self.special["bos"],
            "num_beams": 3,
            "max_new_tokens": self.size.max_new_tokens,
        }

    def eval_config(self):
        import runtime

        return runtime.GenerationConfig(
            num_beams=self.size.eval_beams, max_new_tokens=self.size.max_new_tokens
        )

    def test_pairs(self) -> list[Pair]:
        pairs = self.pairs["test"]
        if self.size.eval_pairs:
            pairs = random.Random(self.seed).sample(pairs, min(self.size.eval_pairs, len(pairs)))
        return pairs

    def training_data(self) -> dict:
        return {
            "corpus": f"{self.source.upper()} -> {self.target.upper()} verse pairs from the "
            "SWORD modules engKJV2006eb, engWEB2015eb, spaRV1909eb (canonical books)",
            "source_language": self.source_language,
            "target_language": self.target_language,
            "training pairs": len(self.pairs["train"]),
            "pair filter": f"{data.PAIR_BOUNDS}",
            "split": common.split_description(),
            "licence": "public domain",
        }

    def memorisation(self, outputs: list[str], references: list[str]) -> dict:
        training = [p.target for p in self.pairs["train"]]
        return {
            "output": evaluate.memorised_share(outputs, training, 8),
            "reference": evaluate.memorised_share(references, training, 8),
        }


class Rewriter(PairRecipe):
    name = "rewriter"
    source, target, tokenizer_name = "kjv", "web", "en"
    source_language = target_language = "en"

    def full_size(self) -> Seq2SeqSize:
        return REWRITER_FULL

    def example(self, pair: Pair, rng: random.Random) -> Example:
        prefix = length_prefix(pair.ratio, draw_kind(rng))
        return make_example(pair, prefix, self.tokenizer, self.special)

    def balanced_count(self) -> int:
        return round(BALANCED_SHARE * len(self.pairs["train"]))

    def examples_per_epoch(self) -> int:
        return len(self.pairs["train"]) + self.balanced_count()

    def epoch_examples(self, rng: random.Random) -> list[Example]:
        """Every training pair once with a random prefix kind, plus a ratio-balanced draw of
        pairs with their value token."""
        extra = balanced_draw(self.pairs["train"], self.balanced_count(), rng, BALANCE_FLOOR)
        return super().epoch_examples(rng) + [
            make_example(pair, length_prefix(pair.ratio, "value"), self.tokenizer, self.special)
            for pair in extra
        ]

    def controls(self) -> dict:
        return length_controls()

    def description(self) -> str:
        s = self.size
        return (
            f"mBART (pre-LayerNorm BART; {s.encoder_layers}+{s.decoder_layers} layers, width "
            f"{s.width}) trained from scratch to rewrite King James Version verses in the World "
            "English Bible's modern wording, with seed 004's length-ratio control tokens "
            "(category and value)."
        )

    def evaluate(self, model, bundle_dir: Path, progress: bool = True) -> dict:
        import runtime

        gen = runtime.load(bundle_dir)
        config = self.eval_config()
        pairs = self.test_pairs()
        sources = [p.source for p in pairs]
        refs = [p.target for p in pairs]

        def count(text: str) -> int:
            return max(1, len(self.tokenizer.encode(text, add_special_tokens=False).ids))

        def run(srcs, controls, desc):
            return generate_all(gen, srcs, controls, config, desc=desc, progress=progress)

        true_ratio = [p.ratio for p in pairs]
        true_category = [evaluate.length_category(r) for r in true_ratio]
        outputs = {"none": run(sources, {}, "no token")}
        for category in evaluate.LENGTH_CATEGORIES:
            outputs[category] = run(sources, {"length": category}, f"<{category}>")
        oracle_value = [{"length_ratio": evaluate.nearest_ratio_value(r)} for r in true_ratio]
        outputs["oracle value"] = run(sources, oracle_value, "true value token")
        outputs["oracle category"] = [
            outputs[category][i] for i, category in enumerate(true_category)
        ]
        sweep = random.Random(self.seed + 1).sample(
            range(len(pairs)), min(self.size.sweep_pairs, len(pairs))
        )
        sweep_sources = [sources[i] for i in sweep]
        values = {}
        for value in evaluate.RATIO_VALUES:
            outs = run(sweep_sources, {"length_ratio": value}, f"<ratio_{value:.1f}>")
            values[f"{value:.1f}"] = evaluate.mean_length_ratio(sweep_sources, outs, count)

        strategy1 = {
            "none": evaluate.mean_length_ratio(sources, outputs["none"], count),
            **{
                c: evaluate.mean_length_ratio(sources, outputs[c], count)
                for c in evaluate.LENGTH_CATEGORIES
            },
        }
        targets = [v for v in TARGET_RATIOS if f"{v:.1f}" in values]
        value_error = sum(abs(values[f"{v:.1f}"] - v) for v in targets) / len(targets)
        achieved = [values[f"{v:.1f}"] for v in targets]
        monotone = all(a < b for a, b in zip(achieved, achieved[1:]))
        cats = [strategy1[c] for c in evaluate.LENGTH_CATEGORIES]

        def scores(hyps, indices):
            h = [hyps[i] for i in indices]
            r = [refs[i] for i in indices]
            s = [sources[i] for i in indices]
            out = evaluate.bleu_chrf(h, r)
            out["rouge2_recall"] = evaluate.mean_rouge2_recall(h, r)
            out["ratio"] = evaluate.mean_length_ratio(s, h, count)
            return out

        groups = {"overall": list(range(len(pairs)))}
        for category in evaluate.LENGTH_CATEGORIES:
            groups[category] = [i for i, c in enumerate(true_category) if c == category]
        systems = {
            "copy (KJV source)": sources,
            "no token": outputs["none"],
            "true category token": outputs["oracle category"],
            "true value token": outputs["oracle value"],
        }
        strategy2 = {
            group: {
                "pairs": len(indices),
                **{name: scores(hyps, indices) for name, hyps in systems.items()},
            }
            for group, indices in groups.items()
            if indices
        }
        copy, plain = strategy2["overall"]["copy (KJV source)"], strategy2["overall"]["no token"]
        samples = []
        for i in random.Random(self.seed + 2).sample(range(len(pairs)), min(4, len(pairs))):
            samples.append(
                {
                    "reference": f"{pairs[i].book}",
                    "kjv": sources[i],
                    "web": refs[i],
                    **{key: outputs[key][i] for key in ("none", *evaluate.LENGTH_CATEGORIES)},
                }
            )
        return {
            "test_pairs": len(pairs),
            "sweep_pairs": len(sweep),
            "decoding": {"num_beams": config.num_beams, "max_new_tokens": config.max_new_tokens},
            "true_ratio_mean": sum(true_ratio) / len(true_ratio),
            "strategy1": strategy1,
            "strategy1_values": values,
            "targets": {
                "category_increasing": cats[0] < cats[1] < cats[2],
                "normal_within_0.05": abs(strategy1["normal"] - 1.0) <= 0.05,
                "value_mean_abs_error_0.6_1.4": value_error,
                "value_error_at_most_0.10": value_error <= 0.10,
                "value_monotone_0.6_1.4": monotone,
                "beats_copy_bleu": plain["bleu"] > copy["bleu"],
                "beats_copy_chrf": plain["chrf"] > copy["chrf"],
            },
            "strategy2": strategy2,
            "memorisation": self.memorisation(outputs["none"], refs),
            "samples": samples,
        }

    def value_token_limits(self, strategy1_values: dict[str, float]) -> str:
        """Where the value tokens work, and how rare the training pairs outside that range are."""
        achieved = {float(k): v for k, v in strategy1_values.items()}
        low, high = evaluate.responsive_range(achieved)
        train = [evaluate.nearest_ratio_value(p.ratio) for p in self.pairs["train"]]
        outside = sum(not low <= v <= high for v in train) / max(1, len(train))
        lowest, highest = min(achieved), max(achieved)
        return (
            f"Value tokens steer the length from {low:.1f} to {high:.1f} (achieved "
            f"{achieved[low]:.2f} to {achieved[high]:.2f}); beyond that range the achieved ratio "
            f"no longer follows the request (`<ratio_{lowest:.1f}>` gives "
            f"{achieved[lowest]:.2f}, `<ratio_{highest:.1f}>` {achieved[highest]:.2f}). Only "
            f"{100 * outside:.1f} % of the training pairs have a true ratio nearest a value "
            "outside that range."
        )

    def metrics(self, evaluation: dict) -> dict:
        s1, overall = evaluation["strategy1"], evaluation["strategy2"]["overall"]
        out = {f"LRsrc {k}": round(v, 3) for k, v in s1.items()}
        out["value tokens mean abs error (0.6-1.4)"] = round(
            evaluation["targets"]["value_mean_abs_error_0.6_1.4"], 3
        )
        for name in ("no token", "copy (KJV source)"):
            for metric in ("bleu", "chrf", "rouge2_recall"):
                out[f"{metric} {name}"] = round(overall[name][metric], 2)
        out["memorised 8-gram share (outputs)"] = round(evaluation["memorisation"]["output"], 3)
        return out

    def card_sections(self, evaluation: dict) -> list[tuple[str, str]]:
        s1, values = evaluation["strategy1"], evaluation["strategy1_values"]
        targets = evaluation["targets"]
        decoding = evaluation["decoding"]
        rows = [["no token (baseline)", s1["none"]]]
        rows += [[f"`<{c}>`", s1[c]] for c in evaluate.LENGTH_CATEGORIES]
        strategy1 = (
            f"Strategy 1 (seed 004): each token forced on every one of the "
            f"{evaluation['test_pairs']} test verses (beam {decoding['num_beams']}); LRsrc = mean "
            "of output subwords / source subwords. The true WEB/KJV ratio of the test verses "
            f"averages {evaluation['true_ratio_mean']:.3f}.\n\n"
            + common.markdown_table(["token", "LRsrc"], rows)
            + f"\n\nValue tokens on {evaluation['sweep_pairs']} test verses "
            f"(mean |achieved − requested| over 0.6–1.4: "
            f"{targets['value_mean_abs_error_0.6_1.4']:.3f}; monotone: "
            f"{targets['value_monotone_0.6_1.4']}):\n\n"
            + common.markdown_table(
                ["requested", "achieved LRsrc"], [[k, v] for k, v in values.items()]
            )
        )
        rows = []
        for group, entry in evaluation["strategy2"].items():
            for name, s in entry.items():
                if name == "pairs":
                    continue
                rows.append(
                    [
                        group,
                        entry["pairs"],
                        name,
                        s["bleu"],
                        s["chrf"],
                        s["rouge2_recall"],
                        s["ratio"],
                    ]
                )
        strategy2 = (
            "Strategy 2 (seed 004): test pairs grouped by their true ratio category; outputs "
            "with no token, with the pair's true category token and with its true value token, "
            "next to the copy baseline (the KJV source scored against the WEB reference). "
            "BLEU and chrF are sacreBLEU corpus scores; ROUGE-2 is the mean per-verse recall.\n\n"
            + common.markdown_table(
                ["true ratio", "pairs", "system", "BLEU", "chrF", "ROUGE-2 R", "LRsrc"], rows
            )
        )
        lines = [
            f"Decoding: beam {decoding['num_beams']}, at most "
            f"{decoding['max_new_tokens']} new tokens.",
            "",
        ]
        for s in evaluation["samples"]:
            lines += [f"- **{s['reference']}** KJV: {s['kjv']}", f"  - WEB: {s['web']}"]
            lines += [f"  - output, {k}: {s[k]}" for k in ("none", *evaluate.LENGTH_CATEGORIES)]
        mem = evaluation["memorisation"]
        limits = (
            f"- Memorisation: {100 * mem['output']:.1f} % of the word 8-grams of the test outputs "
            f"(no token) occur verbatim in the training targets; {100 * mem['reference']:.1f} % "
            "of the WEB references' 8-grams do too (the Bible repeats itself).\n"
            "- Trained on Bible verses only: other archaic English is out of domain.\n"
            f"- {self.value_token_limits(evaluation['strategy1_values'])}\n"
            "- Length tokens steer length, not meaning: to reach a shorter ratio the model drops "
            "words, to reach a longer one it repeats or adds them."
        )
        return [
            ("Length control (strategy 1)", strategy1),
            ("Quality per ratio group (strategy 2)", strategy2),
            ("Samples", "\n".join(lines)),
            ("Known limits", limits),
        ]


class Translator(PairRecipe):
    name = "translator"
    source, target, tokenizer_name = "web", "rv1909", "en_es"
    source_language, target_language = "en", "es"

    def full_size(self) -> Seq2SeqSize:
        return TRANSLATOR_FULL

    def controls(self) -> dict:
        return {}

    def description(self) -> str:
        s = self.size
        return (
            f"mBART (pre-LayerNorm BART; {s.encoder_layers}+{s.decoder_layers} layers, width "
            f"{s.width}) trained from scratch to translate World English Bible verses into the "
            "Spanish of the Reina-Valera 1909, with one joint English + Spanish vocabulary."
        )

    def evaluate(self, model, bundle_dir: Path, progress: bool = True) -> dict:
        import runtime

        gen = runtime.load(bundle_dir)
        config = self.eval_config()
        pairs = self.test_pairs()
        sources = [p.source for p in pairs]
        refs = [p.target for p in pairs]
        outputs = generate_all(gen, sources, {}, config, desc="translate", progress=progress)
        systems = {"model": outputs}
        if evaluate.apertium_available():
            systems["apertium eng-spa"] = evaluate.run_apertium(sources)
        books = sorted({p.book for p in pairs}, key=list(data.BOOKS).index)
        table = {}
        for name, hyps in systems.items():
            table[name] = {"overall": evaluate.bleu_chrf(hyps, refs)}
            for book in books:
                idx = [i for i, p in enumerate(pairs) if p.book == book]
                table[name][book] = evaluate.bleu_chrf(
                    [hyps[i] for i in idx], [refs[i] for i in idx]
                )
        model_scores = table["model"]["overall"]
        apertium = table.get("apertium eng-spa", {}).get("overall")
        chosen = random.Random(self.seed + 2).sample(range(len(pairs)), min(4, len(pairs)))
        samples = [
            {
                "reference": pairs[i].book,
                "web": sources[i],
                "rv1909": refs[i],
                "model": outputs[i],
                **({"apertium": systems["apertium eng-spa"][i]} if apertium else {}),
            }
            for i in chosen
        ]
        return {
            "test_pairs": len(pairs),
            "decoding": {"num_beams": config.num_beams, "max_new_tokens": config.max_new_tokens},
            "scores": table,
            "targets": {
                "beats_apertium_bleu": None
                if apertium is None
                else model_scores["bleu"] > apertium["bleu"],
                "beats_apertium_chrf": None
                if apertium is None
                else model_scores["chrf"] > apertium["chrf"],
            },
            "memorisation": self.memorisation(outputs, refs),
            "samples": samples,
        }

    def metrics(self, evaluation: dict) -> dict:
        out = {}
        for name, scores in evaluation["scores"].items():
            out[f"BLEU {name} (test)"] = round(scores["overall"]["bleu"], 2)
            out[f"chrF {name} (test)"] = round(scores["overall"]["chrf"], 2)
        out["memorised 8-gram share (outputs)"] = round(evaluation["memorisation"]["output"], 3)
        return out

    def card_sections(self, evaluation: dict) -> list[tuple[str, str]]:
        names = list(evaluation["scores"])
        groups = list(evaluation["scores"]["model"])
        rows = [
            [
                g,
                *(
                    x
                    for n in names
                    for x in (
                        evaluation["scores"][n][g]["bleu"],
                        evaluation["scores"][n][g]["chrf"],
                    )
                ),
            ]
            for g in groups
        ]
        header = ["test book", *(f"{m} {n}" for n in names for m in ("BLEU", "chrF"))]
        decoding = evaluation["decoding"]
        scores = (
            f"sacreBLEU (13a) and chrF against the Reina-Valera 1909 on the "
            f"{evaluation['test_pairs']} test verses (beam {decoding['num_beams']}), next to "
            "Debian's rule-based `apertium -u eng-spa` on the same WEB verses.\n\n"
            + common.markdown_table(header, rows)
        )
        lines = [f"Decoding: beam {decoding['num_beams']}.", ""]
        for s in evaluation["samples"]:
            lines += [
                f"- **{s['reference']}** WEB: {s['web']}",
                f"  - RV1909: {s['rv1909']}",
                f"  - model: {s['model']}",
            ]
            if "apertium" in s:
                lines.append(f"  - apertium: {s['apertium']}")
        mem = evaluation["memorisation"]
        limits = (
            f"- Memorisation: {100 * mem['output']:.1f} % of the word 8-grams of the test "
            f"translations occur verbatim in the training targets ({100 * mem['reference']:.1f} "
            "% of the RV1909 references' do).\n"
            "- Translates into 1909 Spanish with its spelling (á as a word, fué, vió): not "
            "modern Spanish. Trained on Bible verses only: other text is out of domain.\n"
            "- A 10M-parameter model trained for about an hour: it keeps the verse's frame "
            "but often loses or swaps content words, and a word it cannot translate can come out "
            "garbled or as one syllable repeated (see the samples)."
        )
        return [
            ("Translation quality", scores),
            ("Samples", "\n".join(lines)),
            ("Known limits", limits),
        ]
