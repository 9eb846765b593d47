"""The encoder-decoder models' input format, length tokens, batches and architecture, for the
recipes `rewriter` (KJV -> WEB with seed 004's length-ratio tokens) and `translator` (WEB ->
Reina-Valera 1909), both trained from scratch on verse pairs (train/seq2seq/recipes.py).

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

Does not cover: the recipes built on this (train/seq2seq/recipes.py), the verse table and pair
filters (train/data.py), tokenizers (train/tokenizer.py), the training loop (train/common.py),
metric definitions (train/evaluate.py).
"""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from dataclasses import dataclass

import torch
from tqdm.auto import tqdm

from train import common, data, evaluate
from train.tokenizer import BOS, EN_ES_VOCAB_SIZE, EN_VOCAB_SIZE, EOS, LENGTH_TOKENS

CATEGORY_TOKENS = dict(zip(evaluate.LENGTH_CATEGORIES, LENGTH_TOKENS))
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
    vocab_size: int = EN_VOCAB_SIZE  # tokenizer size when the recipe trains its own
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
    vocab_size=EN_ES_VOCAB_SIZE,
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

    bos, eos = tokenizer.token_to_id(BOS), tokenizer.token_to_id(EOS)
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A {EOS}",
        pair=f"{BOS} $A {EOS} $B {EOS}",
        special_tokens=[(BOS, bos), (EOS, eos)],
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
    def __init__(self, recipe, val_pairs, val_count: int = 256):  # a seq2seq_recipes.PairRecipe
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
