"""Seed 003's hierarchical character-level language model in PyTorch: its config, its layers,
loading a trained run, and the reference decoding loop.

    characters ─► word encoder ─► sentence encoder (2 layers, GRU | Transformer | SARAh)
              ─► one sentence vector per layer (attention pooling)
              ─► sentence decoder (same kind, each layer's input + that layer's sentence vector)
              ─► word decoder (GRU over the word's previous characters + feed-forward) ─► next char

Sizes are the seed's scaled down for two shared CPU cores (the seed's value in each comment);
docs/PARAPHRASE.md says why. Layers keep the seed's structure. `decode` is the PyTorch reference
of runtime/hierarchical.py's loop (export checks parity against it; bench races it).

The character vocabulary and word limits are the runtime's (`runtime.hierarchical_text`), so the
model, its export and the torch-free runtime spell words the same way.

Does not cover: training data and recipes (train/hierarchical/recipes.py), shipping
(train/hierarchical/ship.py), ONNX export (export/hierarchical.py), generation
(runtime/hierarchical.py).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from runtime import hierarchical_text

KINDS = ("gru", "transformer", "sarah")
CONFIG_FILE = "hierarchical.json"  # model config + character set beside the checkpoint


@dataclass
class HierarchicalConfig:
    kind: str = "sarah"  # sentence encoder/decoder kind: gru | transformer | sarah
    charset: list[str] = field(default_factory=list)  # model characters (specials come first)
    char_dim: int = 32  # character embedding width (seed: 32)
    word_chars: int = (
        hierarchical_text.WORD_CHARS
    )  # characters per word incl. end-of-word (seed: 20)
    word_dim: int = 256  # word encoder FF width = word vector size (seed: 512)
    word_layers: int = 3  # word encoder FF GELU layers (seed: 3)
    value_dim: int = 256  # V: value size, = sentence vector size per layer (seed: 512)
    key_dim: int = 128  # Q: key / query size (seed: 256)
    gru_dim: int = 256  # GRU sentence layer width (seed: 512)
    layers: int = 2  # sentence encoder and decoder layers (seed: 2)
    max_positions: int = (
        hierarchical_text.MAX_WORDS + 2
    )  # Transformer positions: words + BOS/EOS words
    partial_dim: int = 256  # word decoder GRU and partial-word width (seed: 256 GRU, 512 FF)
    head_dims: tuple[int, ...] = (256, 256, 128)  # word decoder MLP (seed: 512, 512, 256)
    dropout: float = 0.1  # on every FF layer and recurrent output (seed: 0.1)
    # WDN (seed 003 §4.2, §4.5): in training only, Gaussian noise of std = this × the RMS of each
    # layer's sentence vector is added to it before decoding; 0 = off (the seed's WDN model: 1)
    sentence_noise: float = 0.0

    @property
    def n_chars(self) -> int:
        return len(hierarchical_text.SPECIALS) + len(self.charset)

    @property
    def layer_dim(self) -> int:
        """Output width of one sentence layer."""
        return self.gru_dim if self.kind == "gru" else self.value_dim + self.key_dim


def attend(query, keys, values, mask=None):
    """Scaled dot-product attention. query [..., Q], keys [..., T, Q], values [..., T, V],
    mask [..., T] (True = visible) → [..., V]."""
    # scores [..., T]
    scores = (keys @ query.unsqueeze(-1)).squeeze(-1) / math.sqrt(query.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, -1e9)
    return (scores.softmax(-1).unsqueeze(-2) @ values).squeeze(-2)  # [..., V]


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
    # history [B, 1, V+Q]: the learned first state
    history = initial.unsqueeze(0).unsqueeze(0).expand(x.size(0), 1, initial.size(0))
    for t in range(x.size(1)):
        step = x[:, t]
        query = step[:, step.size(1) - q :]
        keys = history[:, :, history.size(2) - q :]
        scores = torch.matmul(keys, query.unsqueeze(-1)).squeeze(-1) / math.sqrt(q)  # scores [B, t]
        # summary [B, V]
        summary = torch.matmul(scores.softmax(-1).unsqueeze(1), history[:, :, :v]).squeeze(1)
        state = F.gelu(F.linear(step[:, :v] + summary, weight, bias))
        history = torch.cat([history, state.unsqueeze(1)], 1)  # [B, t+1, V+Q]
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
            history = torch.cat([history, y.unsqueeze(1)], 1)  # [B, t+1, V+Q]
        return torch.stack(outputs, 1)  # [B, T, V+Q]

    def initial_state(self, batch: int, like):
        return self.initial.to(like.dtype).expand(batch, 1, -1)

    def step(self, x, state, position):
        y = self._new_state(x, state)
        return y, torch.cat([state, y.unsqueeze(1)], 1)  # state [B, t+1, V+Q]


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
        state = torch.cat([state, torch.cat([k, v], -1).unsqueeze(1)], 1)  # [B, t+1, Q+V]
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
        # [N, C, char_dim] -> [N, C * char_dim] -> [N, W]
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
        weights = mask.unsqueeze(-1).to(words.dtype)  # [B, T, 1]
        for layer, query in zip(self.layers, self.queries):
            x = layer(x, mask, causal=False)
            mean = (x * weights).sum(1) / weights.sum(1).clamp(min=1)
            vectors.append(attend(query(mean), x[..., -q:], x[..., :v], mask))
        return torch.stack(vectors, 1)  # [B, layers, V]


def condition(x, sentence_vector):
    """Add a layer's sentence vector [B, V] to the first V features of its input [B, (T,) D]."""
    v = sentence_vector.shape[-1]
    if x.dim() == 3:
        sentence_vector = sentence_vector.unsqueeze(1)  # [B, 1, V]
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
        # [L, B, ...]
        return torch.stack([layer.initial_state(batch, like) for layer in self.layers])

    def step(self, word, sentence_vectors, state, position):
        """word [B, W], sentence_vectors [B, L, V], state [L, B, ...] → [B, P], new state."""
        x, states = word, []
        for index, layer in enumerate(self.layers):
            x, layer_state = layer.step(
                condition(x, sentence_vectors[:, index]), state[index], position
            )
            states.append(layer_state)
        return self.project(x), torch.stack(states)  # [B, P], state [L, B, ...]


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
        # partial [N, C, P] + conditioning [N, 1, P]
        return self.out(self.head(self.partial(hidden) + conditioning.unsqueeze(1)))

    def step(self, previous, hidden, conditioning):  # [B] ids, [B, P], [B, P] → [B, chars], [B, P]
        # [B, P]
        hidden = self.gru(self.embedding(previous).unsqueeze(1), hidden.unsqueeze(0))[0].squeeze(1)
        return self.out(self.head(self.partial(hidden) + conditioning)), hidden


def perturb(vectors, scale: float):
    """Sentence vectors [B, layers, V] plus Gaussian noise of std `scale` × each vector's RMS
    (per sentence and layer; the scale is a constant of the draw, so no gradient flows
    through it): runtime paraphrase's heuristic, used in training by the WDN model."""
    rms = vectors.detach().pow(2).mean(-1, keepdim=True).sqrt()  # [B, layers, 1]
    return vectors + torch.randn_like(vectors) * (scale * rms)


class HierarchicalLM(nn.Module):
    """The whole model: a shared character embedding, the word encoder, the sentence encoder and
    decoder, the word decoder. `forward` is the training loss; `decode` below generates."""

    def __init__(self, config: HierarchicalConfig):
        super().__init__()
        self.config = config
        self.embedding = nn.Embedding(
            config.n_chars, config.char_dim, padding_idx=hierarchical_text.PAD
        )
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
        if self.training and self.config.sentence_noise > 0:
            vectors = perturb(vectors, self.config.sentence_noise)
        begin = torch.full_like(target[:, :1], hierarchical_text.PAD)
        begin[:, 0, 0], begin[:, 0, 1] = (
            hierarchical_text.BEGIN_SENTENCE,
            hierarchical_text.END_OF_WORD,
        )
        inputs = torch.cat([begin, target[:, :-1]], 1)  # previous word at each position
        conditioning = self.sentence_decoder(self.word_encoder(inputs), target_mask, vectors)
        words = target[target_mask]  # [N, C]
        length = int((words != hierarchical_text.PAD).sum(1).max())
        words = words[:, :length]
        previous = torch.cat(
            [torch.full_like(words[:, :1], hierarchical_text.BEGIN_WORD), words[:, :-1]], 1
        )
        logits = self.word_decoder(previous, conditioning[target_mask])
        labels = words.masked_fill(words == hierarchical_text.PAD, -100)
        loss = F.cross_entropy(
            # [N * C, chars], [N * C]
            logits.flatten(0, 1),
            labels.flatten(),
            reduction="sum",
            ignore_index=-100,
        )
        return loss, int((labels != -100).sum())


# ---------------------------------------------------------------------------------------------
# Spelling sentences as id tensors


def spell_sentence(
    vocab: hierarchical_text.CharVocab, words: list[str], end: bool
) -> list[list[int]]:
    """Rows of char ids, one per word (+ the end-of-sentence word when `end`), unknown → <unk>."""
    rows = [vocab.spell(w, strict=False) for w in words]
    if end:
        rows.append([hierarchical_text.END_OF_SENTENCE, hierarchical_text.END_OF_WORD])
    return rows


def encodable(words: list[str]) -> bool:
    return 0 < len(words) <= hierarchical_text.MAX_WORDS and all(
        len(w) < hierarchical_text.WORD_CHARS for w in words
    )


def collate(vocab, pairs, word_chars: int) -> dict:
    """Padded id tensors for the model; `labels` counts predicted characters for the loop."""
    sources = [spell_sentence(vocab, s, end=False) for s, _ in pairs]
    targets = [spell_sentence(vocab, t, end=True) for _, t in pairs]

    def pad(sentences):
        ids = torch.zeros(len(sentences), max(map(len, sentences)), word_chars, dtype=torch.long)
        for i, sentence in enumerate(sentences):
            for j, word in enumerate(sentence):
                ids[i, j, : len(word)] = torch.tensor(word)
        return ids, ids[..., 0] != hierarchical_text.PAD

    source, source_mask = pad(sources)
    target, target_mask = pad(targets)
    labels = target.masked_fill(target == hierarchical_text.PAD, -100)
    return {
        "source": source,
        "source_mask": source_mask,
        "target": target,
        "target_mask": target_mask,
        "labels": labels,
    }


# ---------------------------------------------------------------------------------------------
# Decoding (the PyTorch reference of runtime/hierarchical.py's loop)

FORBIDDEN_OUTPUTS = (
    hierarchical_text.PAD,
    hierarchical_text.BEGIN_WORD,
    hierarchical_text.BEGIN_SENTENCE,
    hierarchical_text.UNKNOWN,
)


def allowed_mask(n_chars: int, position: int, word_chars: int) -> torch.Tensor:
    """Characters the word decoder may emit at `position` of a word: never a special input
    symbol; end-of-sentence only as a word's first character, end-of-word never as the first
    (no empty words) and always at the last position."""
    allowed = torch.ones(n_chars, dtype=torch.bool)
    allowed[list(FORBIDDEN_OUTPUTS)] = False
    allowed[
        hierarchical_text.END_OF_WORD if position == 0 else hierarchical_text.END_OF_SENTENCE
    ] = False
    if position == word_chars - 1:
        allowed[:] = False
        allowed[hierarchical_text.END_OF_WORD] = True
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
    previous[:, 0], previous[:, 1] = hierarchical_text.BEGIN_SENTENCE, hierarchical_text.END_OF_WORD
    done = torch.zeros(batch, dtype=torch.bool)
    for position in range(hierarchical_text.MAX_WORDS + 1):
        conditioning, state = model.sentence_decoder.step(
            model.word_encoder(previous), vectors, state, torch.full((batch,), position)
        )
        hidden = conditioning.new_zeros(batch, config.partial_dim)
        char = torch.full((batch,), hierarchical_text.BEGIN_WORD)
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
            spelled[:, index] = char.masked_fill(word_done, hierarchical_text.PAD)
            for row in torch.nonzero(~word_done).flatten().tolist():
                c = int(char[row])
                if keep_logits:
                    results[row]["logits"].append(logits[row].numpy())
                if c in (hierarchical_text.END_OF_WORD, hierarchical_text.END_OF_SENTENCE):
                    word_done[row] = True
                    done[row] |= c == hierarchical_text.END_OF_SENTENCE
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
        words = hierarchical_text.split_words(result["text"])
        if encodable(words) and all(c in vocab.ids for c in result["text"]):
            encoded = encode_texts(model, vocab, [result["text"]])
            result["distance"] = float((encoded - source).norm())
        else:
            result["distance"] = float("inf")
    return sorted(decoded, key=lambda r: r["distance"])


# ---------------------------------------------------------------------------------------------
# Runs


def load_config(run: Path) -> HierarchicalConfig:
    """The config a run saved beside its weights (run/hierarchical.json)."""
    saved = json.loads((run / CONFIG_FILE).read_text())
    saved["head_dims"] = tuple(saved["head_dims"])
    return HierarchicalConfig(**saved)


def load_run(run: Path) -> HierarchicalLM:
    """The trained model of a run directory (hierarchical.json + model.pt), in eval mode."""
    model = HierarchicalLM(load_config(run))
    model.load_state_dict(torch.load(run / "model.pt", map_location="cpu"))
    return model.eval()
