"""Seed 001's recurrent sequence-to-sequence models (sections 6.1-6.4) in PyTorch: two GRU
encoder-decoders for the same task, one with a single context vector and one with attention.

    context   (Cho et al. 2014)      x ─► GRU ─► z = h_T (one vector for the whole source)
                                     s_0 = tanh(W z);  s_i = GRU(s_{i-1}, [y_{i-1}; z])
    attention (Bahdanau et al. 2015) x ─► bidirectional GRU ─► annotations h_j = [→h_j; ←h_j]
                                     s_0 = tanh(W ←h_1)
                                     e_ij = v^T tanh(W s_{i-1} + U h_j),  α_ij = softmax_j(e_ij)
                                     c_i = Σ_j α_ij h_j;  s_i = GRU(s_{i-1}, [y_{i-1}; c_i])

Both predict y_i from t_i = tanh(R [s_i; y_{i-1}; c_i]) (c_i = z for the context model) with an
output layer tied to the token embedding (logits = t_i E^T + b), so the output layer costs no
parameters beyond the projection R, and both presets have the same parameter count (the
attention model spends on its alignment MLP and backward GRU what the context model spends on a
wider encoder). The decoder's GRU cell is written out (`GRUCell`, PyTorch's formula) so its
weights are plain matrix products, which int8 dynamic quantization can take; the encoders use
`nn.GRU` (an ONNX GRU node, kept in float32).

Sources are right-padded. The backward GRU reads each row's real tokens in reverse
(`reverse_rows`) so padding never reaches an annotation of a real token, and the context vector
is the forward GRU's state at each row's last real token.

Each model exposes the decoding contract its ONNX graphs keep (export/gru_seq2seq.py):
`encode(source_ids, source_mask) -> (s_0, *memory)` once per source, then
`step(previous_token, hidden, *memory) -> (logits, hidden[, α])` once per token; `forward` is
the teacher-forced training pass and `greedy` the reference decoding loop.

Does not cover: data and training (train/seq2seq/gru.py), ONNX export (export/gru_seq2seq.py),
generation without torch (runtime/recurrent.py).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

CONFIG_FILE = "gru_seq2seq.json"  # the config beside a run's weights
WEIGHTS_FILE = "model.pt"  # a finished run's state dict (weights only)
ARCHITECTURES = {False: "gru", True: "gru-attention"}  # manifest `architecture` per variant


@dataclass(frozen=True)
class GRUSeq2SeqConfig:
    attention: bool  # False: one context vector (Cho et al.); True: Bahdanau attention
    vocab_size: int = 8000  # shared source / target vocabulary (the rewriter's tokenizer)
    embedding: int = 128  # token embedding width E, tied to the output layer
    encoder_hidden: int = 256  # encoder GRU width; per direction when bidirectional
    decoder_hidden: int = 256  # decoder GRU width (s_i)
    attention_size: int = 256  # width of the alignment MLP (W s_{i-1} + U h_j); attention only
    dropout: float = 0.1  # on embeddings and on the readout t_i, in training only
    bos_token_id: int = 0  # the decoder's start token
    eos_token_id: int = 1
    pad_token_id: int = 2

    @property
    def architecture(self) -> str:
        return ARCHITECTURES[self.attention]

    @property
    def memory_size(self) -> int:
        """Width of what the decoder reads from the source: z, or an annotation h_j."""
        return 2 * self.encoder_hidden if self.attention else self.encoder_hidden


# Matched presets (about 1.97 M parameters each): the context model's wider encoder and bridge
# cost what the attention model's backward GRU, bridge and alignment MLP cost.
CONTEXT = GRUSeq2SeqConfig(attention=False, encoder_hidden=256)
ATTENTION = GRUSeq2SeqConfig(attention=True, encoder_hidden=128)
PRESETS = {"context": CONTEXT, "attention": ATTENTION}


class Seq2SeqOutput(NamedTuple):
    loss: torch.Tensor | None  # mean cross-entropy over labels != -100, when labels are given
    logits: torch.Tensor  # (N, T, V)
    attention: torch.Tensor | None  # α (N, T, S) for the attention model, else None


class GRUCell(nn.Module):
    """PyTorch's GRU cell (`nn.GRUCell`'s gate order r, z, n and formula) with the input-side
    products passed in, so a sequence's can be computed for every step at once."""

    def __init__(self, hidden: int):
        super().__init__()
        self.recurrent = nn.Linear(hidden, 3 * hidden)

    def forward(self, input_gates: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
        """input_gates (N, 3H) = W_i x + b_i; hidden (N, H) -> the next hidden (N, H)."""
        x_r, x_z, x_n = input_gates.chunk(3, dim=-1)  # (N, H) each
        h_r, h_z, h_n = self.recurrent(hidden).chunk(3, dim=-1)  # (N, H) each
        reset = torch.sigmoid(x_r + h_r)
        update = torch.sigmoid(x_z + h_z)
        candidate = torch.tanh(x_n + reset * h_n)
        return (1 - update) * candidate + update * hidden


def reverse_rows(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Each row's first `lengths[row]` positions in reverse order, padding left in place; its own
    inverse. x (N, S, D), lengths (N,)."""
    positions = torch.arange(x.shape[1], device=x.device).unsqueeze(0)  # (1, S)
    last = (lengths - 1).unsqueeze(1)  # (N, 1)
    index = torch.where(positions <= last, last - positions, positions)  # (N, S)
    return x.gather(1, index.unsqueeze(-1).expand_as(x))  # (N, S, D)


class RecurrentSeq2Seq(nn.Module):
    """What both variants share: the tied embedding, the decoder cell, the readout and the
    teacher-forced loss. Subclasses define `encode` and `attend`."""

    memory_names: tuple[str, ...] = ()  # the encoder's outputs besides s_0, fed to every step

    def __init__(self, config: GRUSeq2SeqConfig):
        super().__init__()
        self.config = config
        e, h, m = config.embedding, config.decoder_hidden, config.memory_size
        self.embed = nn.Embedding(config.vocab_size, e)
        self.drop = nn.Dropout(config.dropout)
        self.bridge = nn.Linear(config.encoder_hidden, h)  # s_0 = tanh(W ·)
        self.token_gates = nn.Linear(e, 3 * h)  # the decoder input's y_{i-1} part
        self.context_gates = nn.Linear(m, 3 * h, bias=False)  # its c_i (or z) part
        self.cell = GRUCell(h)
        self.readout = nn.Linear(h + e + m, e)  # t_i = tanh(R [s_i; y_{i-1}; c_i])
        self.output_bias = nn.Parameter(torch.zeros(config.vocab_size))
        # Unit-variance embeddings (PyTorch's default) give the tied output layer logits of
        # standard deviation ~5 at the start; E^-1/2 starts it near uniform.
        nn.init.normal_(self.embed.weight, std=e**-0.5)

    def encode(self, source_ids: torch.Tensor, source_mask: torch.Tensor) -> tuple:
        raise NotImplementedError

    def attend(self, hidden: torch.Tensor, memory: tuple) -> tuple:
        """(c_i (N, M), α (N, S) or None) for decoder state s_{i-1} (N, H)."""
        raise NotImplementedError

    def logits(self, readout_input: torch.Tensor) -> torch.Tensor:
        """[s_i; y_{i-1}; c_i] (..., H + E + M) -> logits (..., V) through the tied embedding."""
        t = self.drop(torch.tanh(self.readout(readout_input)))  # (..., E)
        return t @ self.embed.weight.T + self.output_bias

    def step(self, previous_token: torch.Tensor, hidden: torch.Tensor, *memory) -> tuple:
        """One decoder step: previous_token (N,), s_{i-1} (N, H) -> logits (N, V), s_i (N, H)
        and, for the attention model, α (N, S)."""
        y = self.drop(self.embed(previous_token))  # (N, E)
        context, alpha = self.attend(hidden, memory)
        hidden = self.cell(self.token_gates(y) + self.context_gates(context), hidden)
        logits = self.logits(torch.cat([hidden, y, context], dim=-1))
        return (logits, hidden) if alpha is None else (logits, hidden, alpha)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        decoder_input_ids: torch.Tensor,
        labels: torch.Tensor | None = None,
    ) -> Seq2SeqOutput:
        """Teacher forcing: sources (N, S) right-padded with their mask, decoder inputs (N, T)
        (the start token, then the target shifted right) and labels (N, T), -100 = ignored."""
        hidden, *memory = self.encode(input_ids, attention_mask)
        y = self.drop(self.embed(decoder_input_ids))  # (N, T, E)
        # Every step's y part at once: (N, 3H) per step. `unbind`, not indexing, because the
        # gradient of each index would be a zero tensor the size of all steps.
        token_gates = self.token_gates(y).unbind(1)
        states, contexts, alphas = [], [], []
        for gates in token_gates:
            context, alpha = self.attend(hidden, memory)
            hidden = self.cell(gates + self.context_gates(context), hidden)
            states.append(hidden)
            contexts.append(context)
            alphas.append(alpha)
        readout_input = torch.cat(
            [torch.stack(states, 1), y, torch.stack(contexts, 1)], dim=-1
        )  # (N, T, H + E + M)
        logits = self.logits(readout_input)  # (N, T, V)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100)
        attention = None if alphas[0] is None else torch.stack(alphas, 1)  # (N, T, S)
        return Seq2SeqOutput(loss, logits, attention)

    @torch.no_grad()
    def greedy(
        self, source_ids: torch.Tensor, source_mask: torch.Tensor, max_new_tokens: int
    ) -> list[list[int]]:
        """The reference decoding loop: each row's argmax tokens up to and including EOS."""
        hidden, *memory = self.encode(source_ids, source_mask)
        token = torch.full(
            (source_ids.shape[0],), self.config.bos_token_id, device=source_ids.device
        )
        outputs: list[list[int]] = [[] for _ in range(source_ids.shape[0])]
        done = [False] * len(outputs)
        for _ in range(max_new_tokens):
            logits, hidden, *_ = self.step(token, hidden, *memory)
            token = logits.argmax(-1)
            for row, value in enumerate(token.tolist()):
                if not done[row]:
                    outputs[row].append(value)
                    done[row] = value == self.config.eos_token_id
            if all(done):
                break
        return outputs


class ContextSeq2Seq(RecurrentSeq2Seq):
    """Cho et al.'s encoder-decoder: the source squeezed into z = h_T, which initialises the
    decoder and is fed to it at every step."""

    memory_names = ("context",)

    def __init__(self, config: GRUSeq2SeqConfig):
        super().__init__(config)
        self.encoder = nn.GRU(config.embedding, config.encoder_hidden, batch_first=True)

    def encode(self, source_ids, source_mask):
        """-> s_0 (N, H), z (N, H_enc)."""
        states, _ = self.encoder(self.drop(self.embed(source_ids)))  # (N, S, H_enc)
        last = source_mask.sum(1) - 1  # (N,) each row's last real token
        index = last.view(-1, 1, 1).expand(-1, 1, states.shape[-1])  # (N, 1, H_enc)
        context = states.gather(1, index).squeeze(1)  # (N, H_enc)
        return torch.tanh(self.bridge(context)), context

    def attend(self, hidden, memory):
        (context,) = memory
        return context, None


class AttentionSeq2Seq(RecurrentSeq2Seq):
    """Bahdanau et al.'s encoder-decoder: a bidirectional encoder's annotations, read through
    additive attention afresh at every step."""

    memory_names = ("annotations", "keys", "source_mask")

    def __init__(self, config: GRUSeq2SeqConfig):
        super().__init__(config)
        e, a = config.embedding, config.attention_size
        self.forward_encoder = nn.GRU(e, config.encoder_hidden, batch_first=True)
        self.backward_encoder = nn.GRU(e, config.encoder_hidden, batch_first=True)
        self.query = nn.Linear(config.decoder_hidden, a, bias=False)  # W
        self.key = nn.Linear(config.memory_size, a)  # U (its bias is the MLP's one bias)
        self.energy = nn.Linear(a, 1, bias=False)  # v

    def encode(self, source_ids, source_mask):
        """-> s_0 (N, H), annotations h (N, S, 2 H_enc), keys U h (N, S, A), the mask (N, S)."""
        x = self.drop(self.embed(source_ids))  # (N, S, E)
        lengths = source_mask.sum(1)  # (N,)
        forward_states, _ = self.forward_encoder(x)  # (N, S, H_enc)
        backward_states, _ = self.backward_encoder(reverse_rows(x, lengths))
        backward_states = reverse_rows(backward_states, lengths)  # (N, S, H_enc), ←h_j at j
        annotations = torch.cat([forward_states, backward_states], dim=-1)  # (N, S, 2 H_enc)
        hidden = torch.tanh(self.bridge(backward_states[:, 0]))  # from ←h_1
        return hidden, annotations, self.key(annotations), source_mask

    def attend(self, hidden, memory):
        annotations, keys, source_mask = memory
        query = self.query(hidden).unsqueeze(1)  # (N, 1, A)
        energies = self.energy(torch.tanh(query + keys)).squeeze(-1)  # (N, S): e_ij
        energies = energies.masked_fill(source_mask == 0, float("-inf"))
        alpha = energies.softmax(-1)  # (N, S)
        context = (alpha.unsqueeze(1) @ annotations).squeeze(1)  # (N, 2 H_enc): c_i
        return context, alpha


def build(config: GRUSeq2SeqConfig) -> RecurrentSeq2Seq:
    return (AttentionSeq2Seq if config.attention else ContextSeq2Seq)(config)


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def save_config(config: GRUSeq2SeqConfig, directory: Path) -> None:
    (directory / CONFIG_FILE).write_text(json.dumps(asdict(config), indent=2) + "\n")


def load_config(directory: Path) -> GRUSeq2SeqConfig:
    return GRUSeq2SeqConfig(**json.loads((directory / CONFIG_FILE).read_text()))


def load(directory: str | Path) -> RecurrentSeq2Seq:
    """A finished run's model (directory with gru_seq2seq.json and model.pt), in eval mode."""
    directory = Path(directory)
    model = build(load_config(directory))
    state = torch.load(directory / WEIGHTS_FILE, map_location="cpu", weights_only=True)
    model.load_state_dict(state)
    return model.eval()
