"""Seed 003's hierarchical character-level language model, its training data and its recipes.

    characters ─► word encoder ─► sentence encoder (2 layers, GRU | Transformer | SARAh)
              ─► one sentence vector per layer (attention pooling)
              ─► sentence decoder (same kind, each layer's input + that layer's sentence vector)
              ─► word decoder (GRU over the word's previous characters + feed-forward) ─► next char

Task: given a WEB verse, predict the next verse of the same chapter, character by character, word
by word, ending with the end-of-sentence word. The autoencoder recipe freezes everything but the
sentence decoder (and the projection to the word decoder that belongs to it) and trains it to
reconstruct its input (seed 003 §4.3). The style recipe continues training on another corpus.
Metric: nits per character = summed cross-entropy / predicted characters, where every character of
a target word, its end-of-word symbol and the end-of-sentence word count as characters.

Sizes are the seed's scaled down for two shared CPU cores (the seed's value in each comment);
docs/PARAPHRASE.md says why. Layers keep the seed's structure.

Does not cover: ONNX export (export/hierarchical.py), generation (runtime/hierarchical.py), the
Spurgeon corpus (train/spurgeon.py).
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import random
import shutil
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from runtime import hierarchical_text as ht
from train import common, data

KINDS = ("gru", "transformer", "sarah")
CONFIG_FILE = "hierarchical.json"  # model config + character set beside the checkpoint


@dataclass
class HierarchicalConfig:
    kind: str = "sarah"  # sentence encoder/decoder kind: gru | transformer | sarah
    charset: list[str] = field(default_factory=list)  # model characters (specials come first)
    char_dim: int = 32  # character embedding width (seed: 32)
    word_chars: int = ht.WORD_CHARS  # characters per word incl. end-of-word (seed: 20)
    word_dim: int = 256  # word encoder FF width = word vector size (seed: 512)
    word_layers: int = 3  # word encoder FF GELU layers (seed: 3)
    value_dim: int = 256  # V: value size, = sentence vector size per layer (seed: 512)
    key_dim: int = 128  # Q: key / query size (seed: 256)
    gru_dim: int = 256  # GRU sentence layer width (seed: 512)
    layers: int = 2  # sentence encoder and decoder layers (seed: 2)
    max_positions: int = ht.MAX_WORDS + 2  # Transformer positions: words + BOS/EOS words
    partial_dim: int = 256  # word decoder GRU and partial-word width (seed: 256 GRU, 512 FF)
    head_dims: tuple[int, ...] = (256, 256, 128)  # word decoder MLP (seed: 512, 512, 256)
    dropout: float = 0.1  # on every FF layer and recurrent output (seed: 0.1)

    @property
    def n_chars(self) -> int:
        return len(ht.SPECIALS) + len(self.charset)

    @property
    def layer_dim(self) -> int:
        """Output width of one sentence layer."""
        return self.gru_dim if self.kind == "gru" else self.value_dim + self.key_dim


def attend(query, keys, values, mask=None):
    """Scaled dot-product attention. query [..., Q], keys [..., T, Q], values [..., T, V],
    mask [..., T] (True = visible) → [..., V]."""
    scores = (keys @ query.unsqueeze(-1)).squeeze(-1) / math.sqrt(query.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, -1e9)
    return (scores.softmax(-1).unsqueeze(-2) @ values).squeeze(-2)


def ff(d_in: int, d_out: int, dropout: float) -> nn.Sequential:
    return nn.Sequential(nn.Linear(d_in, d_out), nn.GELU(), nn.Dropout(dropout))


class GRULayer(nn.Module):
    """One GRU layer. State: hidden [B, H]."""

    def __init__(self, d_in: int, config: HierarchicalConfig):
        super().__init__()
        self.gru = nn.GRU(d_in, config.gru_dim, batch_first=True)
        self.drop = nn.Dropout(config.dropout)
        self.out_dim = config.gru_dim

    def forward(self, x, mask, causal):  # x [B, T, D_in] → [B, T, H] (always causal)
        return self.drop(self.gru(x)[0])

    def initial_state(self, batch: int, like):
        return like.new_zeros(batch, self.out_dim)

    def step(self, x, state, position):  # x [B, D_in], state [B, H] → y [B, H], state
        y = self.gru(x.unsqueeze(1), state.unsqueeze(0))[0].squeeze(1)
        return y, y


@torch.jit.script_if_tracing
def sarah_scan(
    x: torch.Tensor, initial: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, v: int, q: int
) -> torch.Tensor:
    """SARAhLayer's forward without dropout: x [B, T, D_in] → states [B, T, V+Q]."""
    history = initial.unsqueeze(0).unsqueeze(0).expand(x.size(0), 1, initial.size(0))
    for t in range(x.size(1)):
        step = x[:, t]
        query = step[:, step.size(1) - q :]
        keys = history[:, :, history.size(2) - q :]
        scores = torch.matmul(keys, query.unsqueeze(-1)).squeeze(-1) / math.sqrt(q)
        summary = torch.matmul(scores.softmax(-1).unsqueeze(1), history[:, :, :v]).squeeze(1)
        state = F.gelu(F.linear(step[:, :v] + summary, weight, bias))
        history = torch.cat([history, state.unsqueeze(1)], 1)
    return history[:, 1:]


class SARAhLayer(nn.Module):
    """Self Attentive Recurrent Array (seed 003 §2.4.3). The input splits into a value (first V)
    and a query (last Q); the query attends over the array of previous states (keys = last Q,
    values = first V of each state); value + summary goes through a GELU FF to the new state
    [V + Q], which is the output and is appended to the array. The array starts with one learned
    state so that attention is never empty. State: the array [B, t, V + Q]."""

    def __init__(self, d_in: int, config: HierarchicalConfig):
        super().__init__()
        self.v, self.q = config.value_dim, config.key_dim
        self.initial = nn.Parameter(torch.randn(self.v + self.q) * 0.02)
        self.mlp = ff(self.v, self.v + self.q, config.dropout)
        self.out_dim = self.v + self.q

    def _new_state(self, x, history):  # x [B, D_in], history [B, t, V+Q] → [B, V+Q]
        summary = attend(x[:, -self.q :], history[..., -self.q :], history[..., : self.v])
        return self.mlp(x[:, : self.v] + summary)

    def forward(self, x, mask, causal):  # x [B, T, D_in] → [B, T, V+Q]
        if not self.training:  # one scripted loop: exports as an ONNX Loop over any length
            linear = self.mlp[0]
            return sarah_scan(x, self.initial, linear.weight, linear.bias, self.v, self.q)
        history = self.initial_state(x.shape[0], x)
        outputs = []
        for t in range(x.shape[1]):
            y = self._new_state(x[:, t], history)
            outputs.append(y)
            history = torch.cat([history, y.unsqueeze(1)], 1)
        return torch.stack(outputs, 1)

    def initial_state(self, batch: int, like):
        return self.initial.to(like.dtype).expand(batch, 1, -1)

    def step(self, x, state, position):
        y = self._new_state(x, state)
        return y, torch.cat([state, y.unsqueeze(1)], 1)


class TransformerLayer(nn.Module):
    """Seed 003 §2.4.2: input + position embedding → GELU FF projections to query [Q], key [Q],
    value [V]; attention over the sequence (the encoder sees all words, the decoder the ones up to
    its own); value + attended → GELU FF to [V + Q] (the same output width as SARAh). One learned
    key/value pair is always visible, so padded rows never attend to nothing. State: cached
    keys and values [B, t, Q + V]."""

    def __init__(self, d_in: int, config: HierarchicalConfig):
        super().__init__()
        self.v, self.q = config.value_dim, config.key_dim
        self.position = nn.Embedding(config.max_positions, d_in)
        self.query = ff(d_in, self.q, config.dropout)
        self.key = ff(d_in, self.q, config.dropout)
        self.value = ff(d_in, self.v, config.dropout)
        self.initial = nn.Parameter(torch.randn(self.q + self.v) * 0.02)
        self.mlp = ff(self.v, self.v + self.q, config.dropout)
        self.out_dim = self.v + self.q

    def forward(self, x, mask, causal):  # x [B, T, D_in], mask [B, T] → [B, T, V+Q]
        batch, length = x.shape[:2]
        x = x + self.position.weight[:length]
        q, k, v = self.query(x), self.key(x), self.value(x)
        initial = self.initial_state(batch, x)  # [B, 1, Q+V]
        keys = torch.cat([initial[..., : self.q], k], 1)  # [B, 1+T, Q]
        values = torch.cat([initial[..., self.q :], v], 1)  # [B, 1+T, V]
        visible = torch.cat([mask.new_ones(batch, 1), mask], 1).unsqueeze(1)  # [B, 1, 1+T]
        visible = visible.expand(batch, length, length + 1)
        if causal:
            later = torch.ones(length, length + 1, dtype=torch.bool, device=x.device).triu(2)
            visible = visible & ~later
        attended = attend(q, keys.unsqueeze(1), values.unsqueeze(1), visible)  # [B, T, V]
        return self.mlp(v + attended)

    def initial_state(self, batch: int, like):
        return self.initial.to(like.dtype).expand(batch, 1, -1)

    def step(self, x, state, position):  # x [B, D_in], state [B, t, Q+V], position [B]
        x = x + self.position(position)
        q, k, v = self.query(x), self.key(x), self.value(x)
        state = torch.cat([state, torch.cat([k, v], -1).unsqueeze(1)], 1)
        attended = attend(q, state[..., : self.q], state[..., self.q :])
        return self.mlp(v + attended), state


LAYERS = {"gru": GRULayer, "transformer": TransformerLayer, "sarah": SARAhLayer}


class WordEncoder(nn.Module):
    """Spelling [N, word_chars] ids → concatenated embeddings → 3 GELU FF layers → [N, word_dim]."""

    def __init__(self, config: HierarchicalConfig, embedding: nn.Embedding):
        super().__init__()
        self.embedding = embedding
        widths = [config.char_dim * config.word_chars] + [config.word_dim] * config.word_layers
        self.mlp = nn.Sequential(*(ff(a, b, config.dropout) for a, b in zip(widths, widths[1:])))

    def forward(self, chars):
        return self.mlp(self.embedding(chars).flatten(-2))


class SentenceEncoder(nn.Module):
    """Word vectors [B, T, W] + mask [B, T] → sentence vectors [B, layers, V]: each layer's outputs
    pooled by attention (query: GELU FF of the layer's masked mean output; keys: last Q, values:
    first V of each output)."""

    def __init__(self, config: HierarchicalConfig):
        super().__init__()
        self.config = config
        dims = [config.word_dim] + [config.layer_dim] * config.layers
        self.layers = nn.ModuleList(LAYERS[config.kind](d, config) for d in dims[:-1])
        self.queries = nn.ModuleList(
            ff(config.layer_dim, config.key_dim, 0.0) for _ in range(config.layers)
        )

    def forward(self, words, mask):
        q, v = self.config.key_dim, self.config.value_dim
        vectors, x = [], words
        weights = mask.unsqueeze(-1).to(words.dtype)
        for layer, query in zip(self.layers, self.queries):
            x = layer(x, mask, causal=False)
            mean = (x * weights).sum(1) / weights.sum(1).clamp(min=1)
            vectors.append(attend(query(mean), x[..., -q:], x[..., :v], mask))
        return torch.stack(vectors, 1)


def condition(x, sentence_vector):
    """Add a layer's sentence vector [B, V] to the first V features of its input [B, (T,) D]."""
    v = sentence_vector.shape[-1]
    if x.dim() == 3:
        sentence_vector = sentence_vector.unsqueeze(1)
    return torch.cat([x[..., :v] + sentence_vector, x[..., v:]], -1)


class SentenceDecoder(nn.Module):
    """The encoder's kind without pooling; layer l's input gets sentence vector l added; the last
    layer's output is projected to the word decoder's width (one conditioning vector per word)."""

    def __init__(self, config: HierarchicalConfig):
        super().__init__()
        dims = [config.word_dim] + [config.layer_dim] * config.layers
        self.layers = nn.ModuleList(LAYERS[config.kind](d, config) for d in dims[:-1])
        self.project = nn.Linear(config.layer_dim, config.partial_dim)

    def forward(self, words, mask, sentence_vectors):  # [B, T, W] → [B, T, P]
        x = words
        for index, layer in enumerate(self.layers):
            x = layer(condition(x, sentence_vectors[:, index]), mask, causal=True)
        return self.project(x)

    def initial_state(self, batch: int, like):
        return torch.stack([layer.initial_state(batch, like) for layer in self.layers])

    def step(self, word, sentence_vectors, state, position):
        """word [B, W], sentence_vectors [B, L, V], state [L, B, ...] → [B, P], new state."""
        x, states = word, []
        for index, layer in enumerate(self.layers):
            x, layer_state = layer.step(
                condition(x, sentence_vectors[:, index]), state[index], position
            )
            states.append(layer_state)
        return self.project(x), torch.stack(states)


class WordDecoder(nn.Module):
    """GRU over the previous characters' embeddings → GELU FF = partial-word vector; + the
    sentence decoder's vector → GELU FF layers → logits over characters."""

    def __init__(self, config: HierarchicalConfig, embedding: nn.Embedding):
        super().__init__()
        self.embedding = embedding
        self.gru = nn.GRU(config.char_dim, config.partial_dim, batch_first=True)
        self.partial = ff(config.partial_dim, config.partial_dim, config.dropout)
        widths = [config.partial_dim, *config.head_dims]
        self.head = nn.Sequential(*(ff(a, b, config.dropout) for a, b in zip(widths, widths[1:])))
        self.out = nn.Linear(widths[-1], config.n_chars)

    def forward(self, previous, conditioning):  # [N, C] ids, [N, P] → logits [N, C, chars]
        hidden = self.gru(self.embedding(previous))[0]
        return self.out(self.head(self.partial(hidden) + conditioning.unsqueeze(1)))

    def step(self, previous, hidden, conditioning):  # [B] ids, [B, P], [B, P] → [B, chars], [B, P]
        hidden = self.gru(self.embedding(previous).unsqueeze(1), hidden.unsqueeze(0))[0].squeeze(1)
        return self.out(self.head(self.partial(hidden) + conditioning)), hidden


class HierarchicalLM(nn.Module):
    def __init__(self, config: HierarchicalConfig):
        super().__init__()
        self.config = config
        self.embedding = nn.Embedding(config.n_chars, config.char_dim, padding_idx=ht.PAD)
        self.word_encoder = WordEncoder(config, self.embedding)
        self.sentence_encoder = SentenceEncoder(config)
        self.sentence_decoder = SentenceDecoder(config)
        self.word_decoder = WordDecoder(config, self.embedding)

    def encode(self, source, source_mask):
        """source [B, S, C] ids, source_mask [B, S] → sentence vectors [B, layers, V]."""
        return self.sentence_encoder(self.word_encoder(source), source_mask)

    def forward(self, source, source_mask, target, target_mask):
        """Summed cross-entropy (nits) and the number of predicted characters.

        target [B, T, C]: the target words (end-of-sentence word last), target_mask [B, T]."""
        vectors = self.encode(source, source_mask)
        begin = torch.full_like(target[:, :1], ht.PAD)
        begin[:, 0, 0], begin[:, 0, 1] = ht.BEGIN_SENTENCE, ht.END_OF_WORD
        inputs = torch.cat([begin, target[:, :-1]], 1)  # previous word at each position
        conditioning = self.sentence_decoder(self.word_encoder(inputs), target_mask, vectors)
        words = target[target_mask]  # [N, C]
        length = int((words != ht.PAD).sum(1).max())
        words = words[:, :length]
        previous = torch.cat([torch.full_like(words[:, :1], ht.BEGIN_WORD), words[:, :-1]], 1)
        logits = self.word_decoder(previous, conditioning[target_mask])
        labels = words.masked_fill(words == ht.PAD, -100)
        loss = F.cross_entropy(
            logits.flatten(0, 1), labels.flatten(), reduction="sum", ignore_index=-100
        )
        return loss, int((labels != -100).sum())


# ---------------------------------------------------------------------------------------------
# Data


def spell_sentence(vocab: ht.CharVocab, words: list[str], end: bool) -> list[list[int]]:
    """Rows of char ids, one per word (+ the end-of-sentence word when `end`), unknown → <unk>."""
    rows = [vocab.spell(w, strict=False) for w in words]
    if end:
        rows.append([ht.END_OF_SENTENCE, ht.END_OF_WORD])
    return rows


def encodable(words: list[str]) -> bool:
    return 0 < len(words) <= ht.MAX_WORDS and all(len(w) < ht.WORD_CHARS for w in words)


def verse_pairs(rows: list[dict], split: str) -> list[tuple[list[str], list[str]]]:
    """(verse, next verse of the same chapter) word lists, WEB, one split; both must fit."""
    pairs = []
    for a, b in zip(rows, rows[1:]):
        if a["split"] != split or b["split"] != split or not a["web"] or not b["web"]:
            continue
        if (a["book"], a["chapter"]) != (b["book"], b["chapter"]) or b["verse"] != a["verse"] + 1:
            continue
        source, target = ht.split_words(a["web"]), ht.split_words(b["web"])
        if encodable(source) and encodable(target):
            pairs.append((source, target))
    return pairs


def verse_copies(rows: list[dict], split: str) -> list[tuple[list[str], list[str]]]:
    """(verse, the same verse) word lists for every WEB verse of one split that fits: the
    autoencoder's data, which needs no next verse, so it has more than `verse_pairs`."""
    verses = (ht.split_words(row["web"]) for row in rows if row["split"] == split and row["web"])
    return [(words, words) for words in verses if encodable(words)]


def collate(vocab, pairs, word_chars: int) -> dict:
    """Padded id tensors for the model; `labels` counts predicted characters for the loop."""
    sources = [spell_sentence(vocab, s, end=False) for s, _ in pairs]
    targets = [spell_sentence(vocab, t, end=True) for _, t in pairs]

    def pad(sentences):
        ids = torch.zeros(len(sentences), max(map(len, sentences)), word_chars, dtype=torch.long)
        for i, sentence in enumerate(sentences):
            for j, word in enumerate(sentence):
                ids[i, j, : len(word)] = torch.tensor(word)
        return ids, ids[..., 0] != ht.PAD

    source, source_mask = pad(sources)
    target, target_mask = pad(targets)
    labels = target.masked_fill(target == ht.PAD, -100)
    return {
        "source": source,
        "source_mask": source_mask,
        "target": target,
        "target_mask": target_mask,
        "labels": labels,
    }


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
            collate(
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
    return [collate(vocab, pairs[k : k + size], word_chars) for k in range(0, len(pairs), size)]


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
# Decoding (the PyTorch reference of runtime/hierarchical.py's loop)

FORBIDDEN_OUTPUTS = (ht.PAD, ht.BEGIN_WORD, ht.BEGIN_SENTENCE, ht.UNKNOWN)


def allowed_mask(n_chars: int, position: int, word_chars: int) -> torch.Tensor:
    """Characters the word decoder may emit at `position` of a word: never a special input
    symbol; end-of-sentence only as a word's first character, end-of-word never as the first
    (no empty words) and always at the last position."""
    allowed = torch.ones(n_chars, dtype=torch.bool)
    allowed[list(FORBIDDEN_OUTPUTS)] = False
    allowed[ht.END_OF_WORD if position == 0 else ht.END_OF_SENTENCE] = False
    if position == word_chars - 1:
        allowed[:] = False
        allowed[ht.END_OF_WORD] = True
    return allowed


def encode_texts(model, vocab, texts: list[str]) -> torch.Tensor:
    """Sentence vectors [B, layers, V] of `texts` (ValueError for text the model cannot take)."""
    words = [vocab.check_sentence(t) for t in texts]
    batch = collate(vocab, [(w, w) for w in words], model.config.word_chars)
    return model.encode(batch["source"], batch["source_mask"])


@torch.no_grad()
def decode(
    model,
    vocab,
    texts: list[str],
    temperatures=None,
    noise=None,
    seed: int = 0,
    keep_logits: bool = False,
    vectors=None,
) -> list[dict]:
    """Decode one sentence per text from its (optionally noised) sentence vectors.

    `temperatures` [B] (0 = greedy argmax); `noise` [B, layers, V] is added to the sentence
    vectors. Each result: text, chars, costs (nits under the untempered distribution), sampled
    (False where the chosen character was the argmax), logits (raw, when `keep_logits`).
    """
    model.eval()
    config = model.config
    if vectors is None:
        vectors = encode_texts(model, vocab, texts)
    batch = vectors.shape[0]
    if noise is not None:
        vectors = vectors + noise
    temperatures = torch.zeros(batch) if temperatures is None else torch.as_tensor(temperatures)
    generator = torch.Generator().manual_seed(seed)
    results = [
        {"text": "", "chars": [], "costs": [], "sampled": [], "logits": []} for _ in range(batch)
    ]
    state = model.sentence_decoder.initial_state(batch, vectors)
    previous = torch.zeros(batch, config.word_chars, dtype=torch.long)
    previous[:, 0], previous[:, 1] = ht.BEGIN_SENTENCE, ht.END_OF_WORD
    done = torch.zeros(batch, dtype=torch.bool)
    for position in range(ht.MAX_WORDS + 1):
        conditioning, state = model.sentence_decoder.step(
            model.word_encoder(previous), vectors, state, torch.full((batch,), position)
        )
        hidden = conditioning.new_zeros(batch, config.partial_dim)
        char = torch.full((batch,), ht.BEGIN_WORD)
        word_done = done.clone()
        spelled = torch.zeros(batch, config.word_chars, dtype=torch.long)
        for index in range(config.word_chars):
            logits, hidden = model.word_decoder.step(char, hidden, conditioning)
            masked = logits.masked_fill(
                ~allowed_mask(config.n_chars, index, config.word_chars), -float("inf")
            )
            best = masked.argmax(-1)
            scaled = masked / temperatures.clamp(min=1e-6).unsqueeze(-1)
            drawn = torch.multinomial(scaled.softmax(-1), 1, generator=generator).squeeze(-1)
            char = torch.where(temperatures > 0, drawn, best)
            costs = -logits.log_softmax(-1).gather(-1, char.unsqueeze(-1)).squeeze(-1)
            spelled[:, index] = char.masked_fill(word_done, ht.PAD)
            for row in torch.nonzero(~word_done).flatten().tolist():
                c = int(char[row])
                if keep_logits:
                    results[row]["logits"].append(logits[row].numpy())
                if c in (ht.END_OF_WORD, ht.END_OF_SENTENCE):
                    word_done[row] = True
                    done[row] |= c == ht.END_OF_SENTENCE
                    continue
                results[row]["chars"].append(vocab.char(c))
                results[row]["costs"].append(float(costs[row]))
                results[row]["sampled"].append(c != int(best[row]))
            if bool(word_done.all()):
                break
        previous = spelled
        if bool(done.all()):
            break
    for result in results:
        result["text"] = "".join(result["chars"])
    return results


@torch.no_grad()
def paraphrase(model, vocab, text: str, num_candidates: int = 40, seed: int = 0) -> list[dict]:
    """The PyTorch loop of runtime HierarchicalGenerator.paraphrase (the benchmark's peer): the
    same draws of T ~ U(0, 1), w ~ U(0, 1) and noise (numpy, same seed), characters sampled with
    torch; candidates re-encoded and sorted by distance."""
    model.eval()
    source = encode_texts(model, vocab, [text])  # [1, L, V]
    rng = np.random.default_rng(seed)
    temperatures = rng.uniform(0, 1, num_candidates)
    weights = rng.uniform(0, 1, num_candidates)
    rms = source[0].pow(2).mean(-1, keepdim=True).sqrt().numpy()
    noise = rng.standard_normal((num_candidates, *source.shape[1:])) * rms
    vectors = (source.numpy() + weights[:, None, None] * noise).astype(np.float32)
    decoded = decode(
        model,
        vocab,
        [text] * num_candidates,
        temperatures=temperatures,
        seed=seed,
        vectors=torch.from_numpy(vectors),
    )
    for result in decoded:
        words = ht.split_words(result["text"])
        if encodable(words) and all(c in vocab.ids for c in result["text"]):
            encoded = encode_texts(model, vocab, [result["text"]])
            result["distance"] = float((encoded - source).norm())
        else:
            result["distance"] = float("inf")
    return sorted(decoded, key=lambda r: r["distance"])


# ---------------------------------------------------------------------------------------------
# Recipes


def save_run(model: HierarchicalLM, out: Path) -> None:
    """The model's config and weights for export (out/hierarchical.json, out/model.pt)."""
    common.write_json(out / CONFIG_FILE, asdict(model.config))
    torch.save(model.state_dict(), out / "model.pt")


def load_run(run: Path) -> HierarchicalLM:
    saved = json.loads((run / CONFIG_FILE).read_text())
    saved["head_dims"] = tuple(saved["head_dims"])
    model = HierarchicalLM(HierarchicalConfig(**saved))
    model.load_state_dict(torch.load(run / "model.pt", map_location="cpu"))
    return model.eval()


def web_pairs(verses: Path) -> dict[str, list]:
    rows = data.load_verses(verses)
    return {split: verse_pairs(rows, split) for split in data.SPLITS}, rows


def train_run(model, train_pairs, validation_pairs, test_pairs, args, describe: str) -> dict:
    """Train with common.train, then save the model and its test nits/char into out/."""
    out = args.out
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
    vocab = ht.CharVocab(model.config.charset)
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
    }
    common.write_json(out / "result.json", result)
    print(json.dumps(result))
    return result


def run_lm(args) -> dict:
    """Next-verse prediction on the WEB with one sentence-encoder kind."""
    common.seed_everything(args.seed)
    pairs, rows = web_pairs(args.verses)
    config = HierarchicalConfig(kind=args.kind, charset=ht.default_charset(r["web"] for r in rows))
    if args.tiny:
        config = tiny_config(config)
    model = HierarchicalLM(config)
    return train_run(
        model,
        pairs["train"],
        pairs["validation"][:512],
        pairs["test"],
        args,
        f"hierarchical-{args.kind}",
    )


def tiny_config(config: HierarchicalConfig) -> HierarchicalConfig:
    config.word_dim = config.value_dim = config.gru_dim = config.partial_dim = 32
    config.key_dim, config.head_dims = 16, (32, 16)
    return config


def run_autoencoder(args) -> dict:
    """Seed 003 §4.3: freeze all but the sentence decoder, train it to reconstruct the input
    (every WEB verse that fits, not only those with a next verse). `--train-encoder` also
    trains the sentence encoder: a measurement of what the freeze costs, which `ship` refuses
    (the bundle's two decoders share one encoder)."""
    common.seed_everything(args.seed)
    rows = data.load_verses(args.verses)
    model = load_run(args.init)
    trained = ("sentence_decoder.",) + (("sentence_encoder.",) if args.train_encoder else ())
    for name, parameter in model.named_parameters():
        parameter.requires_grad = name.startswith(trained)
    model.embedding.weight.requires_grad = False
    return train_run(
        model,
        verse_copies(rows, "train"),
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
        model = load_run(args.init)
    else:
        reference = json.loads((args.like / CONFIG_FILE).read_text())
        reference["head_dims"] = tuple(reference["head_dims"])
        model = HierarchicalLM(HierarchicalConfig(**reference))
    return train_run(
        model,
        corpus["train"],
        corpus["validation"][:512],
        corpus["test"],
        args,
        "hierarchical-style",
    )


# ---------------------------------------------------------------------------------------------
# Shipping

RECONSTRUCTION_SENTENCES = (
    "Jesus wept.",
    "In the beginning, God created the heavens and the earth.",
    "The Lord is my shepherd; I shall not lack.",
    "Blessed are the poor in spirit, for theirs is the Kingdom of Heaven.",
    "Now faith is assurance of things hoped for, proof of things not seen.",
    "The cat sat on the mat and looked at the dog.",
)


RECONSTRUCTION_VERSES = 200  # test verses whose greedy reconstructions the card scores


def reconstruction_quality(generator, sentences: list[str]) -> dict:
    """How much of each sentence the autoencoder's greedy reconstruction keeps: the share
    reconstructed exactly (and the three most frequent of those), corpus BLEU and chrF against
    the sentences themselves, and, as the floor, the same scores for other sentences of the
    list (rotated by half its length)."""
    from train.evaluate import bleu_chrf

    sentences = [sentence.strip() for sentence in sentences]
    texts = [generator.reconstruction(sentence).text.strip() for sentence in sentences]
    exact = collections.Counter(t for t, s in zip(texts, sentences) if t == s)
    half = len(sentences) // 2
    scores = bleu_chrf(texts, sentences)
    unrelated = bleu_chrf(sentences[half:] + sentences[:half], sentences)
    return {
        "sentences": len(sentences),
        "exact_share": round(exact.total() / len(sentences), 4),
        "exact": dict(exact.most_common(3)),  # the most frequent sentences reconstructed exactly
        "bleu": round(scores["bleu"], 2),
        "chrf": round(scores["chrf"], 2),
        "unrelated_bleu": round(unrelated["bleu"], 2),
        "unrelated_chrf": round(unrelated["chrf"], 2),
    }


def comparison_plot(results: dict, path: Path) -> None:
    """Seed 003's figure 3.2 for our runs: test nits/char against parameters, one point a kind."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.5))
    for kind, result in results.items():
        ax.scatter(result["parameters"] / 1e6, result["test_nits_per_char"], s=60)
        ax.annotate(
            kind,
            (result["parameters"] / 1e6, result["test_nits_per_char"]),
            textcoords="offset points",
            xytext=(6, 4),
        )
    ax.set_xlabel("parameters (millions)")
    ax.set_ylabel("test nits / character")
    ax.set_title("Sentence encoder kinds, same step budget")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def budget_note(results: dict, shipped: dict, best: str) -> str:
    """How the comparison's budget relates to the shipped run, for the card."""
    steps = {r["steps"] for r in results.values()}
    planned = {r.get("planned_steps", r["steps"]) for r in results.values()}
    note = f"All three kinds: {', '.join(map(str, sorted(steps)))} steps"
    if steps != planned:
        note += f" of the same {', '.join(map(str, sorted(planned)))}-step schedule"
    note += ", same data order, seed 0, batch 32, one thread."
    if shipped["steps"] not in steps:
        precision = "bfloat16 autocast" if shipped.get("bf16") else "float32"
        note += (
            f" The best kind at that budget, {best}, was then trained on its own "
            f"{shipped['steps']}-step schedule (same data order and seed, {precision}, "
            f"{shipped['train_seconds'] / 60:.0f} minutes): that run is the shipped model; the "
            "table compares the kinds at equal budget."
        )
    return note + "\n\n"


def check_shared_weights(lm_run: Path, autoencoder_run: Path) -> None:
    """The bundle stores one word encoder, sentence encoder and word decoder for both sentence
    decoders, so an autoencoder run must have changed nothing else of its language model."""
    lm, autoencoder = load_run(lm_run).state_dict(), load_run(autoencoder_run).state_dict()
    changed = sorted(
        name
        for name, weights in lm.items()
        if not name.startswith("sentence_decoder.") and not torch.equal(weights, autoencoder[name])
    )
    if changed:
        raise ValueError(
            f"`{autoencoder_run}` must change only the sentence decoder of `{lm_run}`, got "
            f"{len(changed)} other changed tensors ({changed[0]}, …): was it trained with "
            "--train-encoder or from another run?"
        )


def comparison_run(runs: Path, kind: str) -> Path:
    """The run of `kind` in the three-way comparison: runs/compare/<kind> when the comparison
    was made at a shorter budget than the shipped run, else runs/lm-<kind>."""
    compare = runs / "compare" / kind
    return compare if compare.exists() else runs / f"lm-{kind}"


def ship(args) -> int:
    """Export the chosen WEB kind (+ autoencoder) to models/paraphraser/<precision> and the
    Spurgeon fine-tune to models/paraphraser-spurgeon/<precision>, each with its model card
    (int8 when it is within INT8_TOLERANCE of fp32, else fp32)."""
    from export import hierarchical as eh
    from runtime.hierarchical import HierarchicalGenerator

    runs = args.runs
    compared = {k: comparison_run(runs, k) for k in KINDS}
    results = {
        k: common.read_json(run / "result.json")
        for k, run in compared.items()
        if (run / "result.json").exists()
    }
    best = args.ship_kind or min(results, key=lambda k: results[k]["test_nits_per_char"])
    shipped = common.read_json(runs / f"lm-{best}" / "result.json")
    autoencoder = common.read_json(runs / "ae" / "result.json")
    check_shared_weights(runs / f"lm-{best}", runs / "ae")
    style = {
        name: common.read_json(runs / f"style-{name}" / "result.json")
        for name in ("finetune", "scratch")
        if (runs / f"style-{name}" / "result.json").exists()
    }
    corpus = json.loads((runs / "spurgeon.json").read_text()) if style else {}
    encoders = {
        k: {"parameters": r["parameters"], "test_nits_per_char": r["test_nits_per_char"]}
        for k, r in results.items()
    }
    table = common.markdown_table(
        (
            "sentence encoder",
            "parameters",
            "test nits/char",
            "validation nits/char",
            "steps",
            "minutes (1 thread, shared host)",
        ),
        [
            (
                k,
                f"{r['parameters']:,}",
                r["test_nits_per_char"],
                r["validation_nits_per_char"],
                r["steps"],
                round(r["train_seconds"] / 60, 1),
            )
            for k, r in results.items()
        ],
    )
    style_table = (
        common.markdown_table(
            ("Spurgeon model", "steps", "held-out Spurgeon nits/char"),
            [
                (
                    (
                        "WEB-pretrained, fine-tuned"
                        if n == "finetune"
                        else "from scratch on the slice"
                    ),
                    r["steps"],
                    r["test_nits_per_char"],
                )
                for n, r in style.items()
            ],
        )
        if style
        else "Not trained."
    )
    common_sections = (
        "## Training\n\n"
        f"Next-verse prediction on consecutive WEB verses ({results[best]['train_pairs']:,} "
        "training pairs: both verses ≤ 30 words of ≤ 19 characters; train / validation / test "
        f"books as every Scriptorium model; split {common.split_description()}). Batch "
        f"{results[best]['batch_size']}, AdamW, peak lr {results[best]['lr']}, on a shared 2-core "
        f"host ({shipped['threads']} torch thread(s) for the shipped run). Nits per character "
        "count every character of a target word, its end-of-word symbol and the end-of-sentence "
        "word. Sizes are seed 003's scaled down: docs/PARAPHRASE.md.\n\n"
        f"## Sentence encoders (seed 003, figure 3.2)\n\n{budget_note(results, shipped, best)}"
        f"{table}\n\n"
        "![test nits per character against parameters](sentence_encoders.png)\n\n"
        + "".join(f"![{k} training curve](loss-{k}.png)\n" for k in results)
        + f"\nThe shipped {best} model's curve ({shipped['steps']} steps):\n\n"
        "![shipped model training curve](loss-shipped.png)\n"
        + f"\n## Style fine-tuning: Spurgeon\n\n{style_table}\n\n"
    )
    if corpus:
        common_sections += (
            "Corpus: C. H. Spurgeon's own EXPOSITION sections of *The Treasury of David* (SWORD "
            f"TDavid), quoted writers dropped; {corpus['words']['train']:,} training words "
            f"(Psalms {corpus['psalms']['train'][0]}-{corpus['psalms']['train'][1]}), held-out "
            f"test Psalms {corpus['psalms']['test'][0]}-{corpus['psalms']['test'][1]} "
            f"({corpus['words']['test']:,} words).\n"
        )
    out = args.models_dir / "paraphraser" / "fp32"
    manifest = eh.export_bundle(
        runs / f"lm-{best}",
        out,
        "paraphraser",
        runs / "ae",
        card={
            "description": "",
            "metrics": {
                "sentence_encoders": encoders,
                "kind": best,
                "test_nits_per_char": shipped["test_nits_per_char"],
                "steps": shipped["steps"],
                "autoencoder_test_nits_per_char": autoencoder["test_nits_per_char"],
                "spurgeon": {n: r["test_nits_per_char"] for n, r in style.items()},
            },
            "training_data": {
                "corpus": "World English Bible (WEB), consecutive verses",
                "split": common.split_description(),
            },
        },
    )
    pairs, verse_rows = web_pairs(args.verses)
    web_test = pairs["test"]
    precision_text, kept = _precisions(out, manifest, web_test, "WEB test (next verse)")
    generator = HierarchicalGenerator.open(kept[0][0])
    rows = []
    for sentence in RECONSTRUCTION_SENTENCES:
        result = generator.reconstruction(sentence)
        rows.append((sentence, result.text, round(result.nits_per_char, 3)))
    reconstruction = common.markdown_table(("sentence", "greedy reconstruction", "nits/char"), rows)
    test_verses = ["".join(words) for words, _ in verse_copies(verse_rows, "test")]
    quality = reconstruction_quality(generator, test_verses[:RECONSTRUCTION_VERSES])
    for _, bundle_manifest in kept:
        bundle_manifest["metrics"]["autoencoder_reconstruction"] = quality
    exact_verses = ", ".join(f"“{text}” × {count}" for text, count in quality["exact"].items())
    examples = generator.paraphrase(RECONSTRUCTION_SENTENCES[1], 40, seed=0)[:4]
    example_rows = [
        (round(c.distance, 3), round(c.temperature, 2), round(c.noise, 2), c.text) for c in examples
    ]
    readme = (
        f"# paraphraser\n\nSeed 003's hierarchical character-level model with a **{best}** "
        f"sentence encoder and decoder ({shipped['steps']} steps), trained to predict "
        "the next WEB verse, plus its autoencoder (the sentence decoder fine-tuned to reconstruct "
        "its input, everything else frozen) for unsupervised paraphrase. Task "
        "`hierarchical-lm`, run by `runtime/hierarchical.py` (numpy + onnxruntime).\n\n"
        f"Test nits/char (next verse): **{shipped['test_nits_per_char']}**; autoencoder "
        f"(reconstruction) test nits/char: **{autoencoder['test_nits_per_char']}** after "
        f"{autoencoder['steps']} steps.\n\n"
        "## Parity with PyTorch\n\n"
        f"Greedy decoding: {manifest['parity']['greedy']['identical']} of "
        f"{manifest['parity']['greedy']['compared']} sentences identical, max |Δlogit| "
        f"{manifest['parity']['greedy']['max_abs_logit_diff']}; per graph max |Δ| "
        f"{manifest['parity']['graphs_max_abs_diff']} (batch 1, 3, 7; lengths 1, 4, 9).\n\n"
        f"## Reconstruction cost (seed 003, table 4.2)\n\n{reconstruction}\n\n"
        f"Over the first {quality['sentences']} test verses, the greedy reconstruction is the "
        f"verse exactly for {quality['exact_share']:.1%} of them ({exact_verses}); against the "
        f"verses themselves it scores BLEU {quality['bleu']} and chrF {quality['chrf']} "
        "(sacreBLEU; a copy scores 100; another verse of the same list scores BLEU "
        f"{quality['unrelated_bleu']}, chrF {quality['unrelated_chrf']}).\n\n"
        "## Paraphrase example (40 candidates, seed 0, closest 4)\n\n"
        + common.markdown_table(("distance", "T", "noise w", "candidate"), example_rows)
        + "\n\n"
        + precision_text
        + common_sections
        + "\n## Licence\n\nPublic domain: trained only on public-domain text.\n"
    )
    for bundle, bundle_manifest in kept:
        _finish_bundle(bundle, bundle_manifest, readme, results, runs)
        print(f"shipped {bundle}")
    if "finetune" in style:
        out = args.models_dir / "paraphraser-spurgeon" / "fp32"
        manifest = eh.export_bundle(
            runs / "style-finetune",
            out,
            "paraphraser-spurgeon",
            card={
                "metrics": {
                    "spurgeon_test_nits_per_char": style["finetune"]["test_nits_per_char"],
                    "from_scratch_test_nits_per_char": style.get("scratch", {}).get(
                        "test_nits_per_char"
                    ),
                    "kind": best,
                },
                "training_data": {
                    "corpus": "WEB (pretraining), then Spurgeon's Treasury of "
                    "David exposition (fine-tuning)"
                },
            },
        )
        precision_text, kept = _precisions(out, manifest, corpus["test"], "held-out Spurgeon")
        readme = (
            "# paraphraser-spurgeon\n\nThe `paraphraser`'s next-sentence model (WEB-pretrained, "
            f"{best}) fine-tuned on C. H. Spurgeon's own exposition in *The Treasury of David*: "
            "the app's second style for the next sentence (Generate and Compare tabs). It has no "
            "autoencoder, so it does not paraphrase.\n\n"
            + precision_text
            + common_sections
            + "\n## Licence\n\nPublic domain text (WEB; Spurgeon, 1869-1885).\n"
        )
        for bundle, bundle_manifest in kept:
            _finish_bundle(bundle, bundle_manifest, readme, results, runs)
            print(f"shipped {bundle}")
    return 0


INT8_TOLERANCE = 0.01  # int8 ships instead of fp32 when its nits/char is at most 1 % worse


def _precisions(fp32: Path, manifest: dict, pairs, what: str):
    """Quantize the fp32 bundle to int8 beside it and measure both through the runtime on
    `pairs` (teacher-forced nits/char); the int8 bundle replaces fp32 when it is within
    INT8_TOLERANCE. Returns (the card's section, [(bundle dir, manifest)] to finish)."""
    from export import hierarchical as eh

    int8_dir = fp32.parent / "int8"
    int8_manifest = eh.quantize_bundle(fp32, int8_dir)
    measured = {
        "fp32": round(eh.runtime_nits_per_char(fp32, pairs), 4),
        "int8": round(eh.runtime_nits_per_char(int8_dir, pairs), 4),
    }
    keep_int8 = measured["int8"] <= measured["fp32"] * (1 + INT8_TOLERANCE)
    for bundle_manifest in (manifest, int8_manifest):
        bundle_manifest["metrics"]["runtime_nits_per_char"] = {**measured, "pairs": what}
    shutil.rmtree(fp32 if keep_int8 else int8_dir)
    verdict = (
        "int8 ships (GRU weights, most of the model, stay float32, so it is only a little smaller)."
        if keep_int8
        else f"int8 is more than {INT8_TOLERANCE:.0%} worse, so fp32 ships."
    )
    section = (
        f"## Precision\n\nTeacher-forced nits/char through the runtime on {len(pairs)} {what} "
        f"pairs: fp32 {measured['fp32']}, int8 {measured['int8']} (dynamic int8 MatMuls; GRU "
        f"nodes stay float32): {verdict} Greedy decoding through the int8 graphs against PyTorch: "
        f"{int8_manifest['parity']['greedy']['identical']} of "
        f"{int8_manifest['parity']['greedy']['compared']} sentences identical.\n\n"
    )
    return section, [(int8_dir, int8_manifest)] if keep_int8 else [(fp32, manifest)]


def _finish_bundle(out: Path, manifest: dict, readme: str, results: dict, runs: Path) -> None:
    from export.manifest import file_entries

    comparison_plot(results, out / "sentence_encoders.png")
    for kind in results:
        shutil.copy(comparison_run(runs, kind) / common.LOSS_PNG, out / f"loss-{kind}.png")
    shutil.copy(runs / f"lm-{manifest['kind']}" / common.LOSS_PNG, out / "loss-shipped.png")
    (out / "README.md").write_text(readme)
    manifest["files"] = file_entries(out)
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m train.hierarchical", description=__doc__)
    parser.add_argument("recipe", choices=("lm", "autoencoder", "style", "ship"))
    parser.add_argument(
        "--runs",
        type=Path,
        default=Path("checkpoints/hier"),
        help="ship: directory of the lm-<kind>, ae and style-* runs",
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
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    if args.tiny and args.verses == data.DEFAULT_OUT:
        args.verses = data.FIXTURE
    if args.recipe == "ship":
        return ship(args)
    if args.out is None:
        parser.error("--out is required")
    {"lm": run_lm, "autoencoder": run_autoencoder, "style": run_style}[args.recipe](args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
