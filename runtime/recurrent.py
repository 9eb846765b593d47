"""Run a recurrent encoder-decoder bundle (seed 001's GRU models, export/gru_seq2seq.py) one
decoding step at a time, with the interface of `runtime.models.Seq2SeqLM`:

    logits, state = model.start(source_ids, source_mask)  # encode once, then the first step
    logits, state = model.step(next_tokens, state)  # one token per row
    state = model.select(state, rows)  # reorder / repeat rows (beams, samples)

so `runtime.search`'s greedy, sampling and beam search loops run it unchanged (the `Generator`
picks this class for a "seq2seq" bundle whose architecture is in RECURRENT_ARCHITECTURES).
Teacher forcing: `all_logits` (N, T, V) for scoring and `cross_attention` (N, T, S), the
attention model's α for each target token over the source tokens.

The bundle's graphs:
- `encoder`: input_ids (N, S), attention_mask (N, S) -> hidden s_0 (N, H) and the memory the
  decoder reads at every step: `context` z (N, H_enc) for the single-context model;
  `annotations` (N, S, 2 H_enc) and `keys` U h_j (N, S, A) for the attention model.
- `decoder`, one step: input_ids (N,) the previous token, hidden (N, H), the memory (and, for
  the attention model, attention_mask) -> logits (N, V), next_hidden (N, H) and, for the
  attention model, attention α (N, S).
The decoder's state is one vector per row, so there is no cache to grow: a step costs the same
at every position.

Does not cover: picking tokens, processors or text (runtime/search.py, runtime/generator.py);
the transformer models' KV caches (runtime/models.py).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

RECURRENT_ARCHITECTURES = ("gru", "gru-attention")  # manifest `architecture` of these bundles
SOURCE_MASK = "attention_mask"  # the decoder input that takes the source mask, when it has one
ATTENTION = "attention"  # the decoder output α, when it has one


@dataclass(frozen=True)
class RecurrentState:
    hidden: np.ndarray  # (N, H) s_i, float32
    memory: dict[str, np.ndarray]  # decoder input name -> (N, ...): what each row's source gave
    source_row: np.ndarray  # (N,) the source each row decodes; rows of one source share memory


class RecurrentSeq2SeqLM:
    """A GRU encoder-decoder bundle's encoder and step graphs (module docstring)."""

    def __init__(self, encoder_session, decoder_session, start_token: int):
        self.encoder = encoder_session
        self.decoder = decoder_session
        self.start_token = start_token
        self.encoder_outputs = [o.name for o in encoder_session.get_outputs()]
        decoder_inputs = [i.name for i in decoder_session.get_inputs()]
        self.decoder_outputs = [o.name for o in decoder_session.get_outputs()]
        self.memory_names = [n for n in decoder_inputs if n not in ("input_ids", "hidden")]
        self.has_attention = ATTENTION in self.decoder_outputs

    def _encode(self, source_ids: np.ndarray, source_mask: np.ndarray):
        """s_0 (N, H) and the memory every step reads."""
        feeds = {
            "input_ids": source_ids.astype(np.int64),
            SOURCE_MASK: source_mask.astype(np.int64),
        }
        outputs = dict(zip(self.encoder_outputs, self.encoder.run(self.encoder_outputs, feeds)))
        outputs[SOURCE_MASK] = feeds[SOURCE_MASK]
        return outputs["hidden"], {name: outputs[name] for name in self.memory_names}

    def _run_step(self, tokens: np.ndarray, hidden: np.ndarray, memory: dict):
        """logits (N, V), next hidden (N, H), α (N, S) or None."""
        feeds = {"input_ids": tokens.reshape(-1).astype(np.int64), "hidden": hidden, **memory}
        outputs = dict(zip(self.decoder_outputs, self.decoder.run(self.decoder_outputs, feeds)))
        return outputs["logits"], outputs["next_hidden"], outputs.get(ATTENTION)

    def start(self, input_ids: np.ndarray, attention_mask: np.ndarray):
        """Encode right-padded sources (N, S) and take the first step from the start token."""
        hidden, memory = self._encode(input_ids, attention_mask)
        batch = input_ids.shape[0]
        first = np.full((batch,), self.start_token, dtype=np.int64)  # (N,)
        logits, hidden, _ = self._run_step(first, hidden, memory)
        return logits, RecurrentState(hidden, memory, np.arange(batch))

    def step(self, tokens: np.ndarray, state: RecurrentState):
        logits, hidden, _ = self._run_step(tokens, state.hidden, state.memory)
        return logits, replace(state, hidden=hidden)

    def select(self, state: RecurrentState, rows: np.ndarray) -> RecurrentState:
        hidden = np.take(state.hidden, rows, axis=0)
        source_row = state.source_row[rows]
        if np.array_equal(source_row, state.source_row):
            # Beams reordered within their own source: the memory rows are already right.
            return replace(state, hidden=hidden)
        memory = {name: np.take(value, rows, axis=0) for name, value in state.memory.items()}
        return RecurrentState(hidden, memory, source_row)

    def _teacher_forced(self, source_ids, source_mask, decoder_ids):
        """Every step's logits (N, T, V) and α (N, T, S) or None, fed `decoder_ids` (N, T)."""
        hidden, memory = self._encode(source_ids, source_mask)
        logits, alphas = [], []
        for position in range(decoder_ids.shape[1]):
            step_logits, hidden, alpha = self._run_step(decoder_ids[:, position], hidden, memory)
            logits.append(step_logits)
            alphas.append(alpha)
        attention = np.stack(alphas, axis=1) if self.has_attention else None  # (N, T, S)
        return np.stack(logits, axis=1), attention  # (N, T, V)

    def all_logits(
        self, source_ids: np.ndarray, source_mask: np.ndarray, decoder_ids: np.ndarray
    ) -> np.ndarray:
        """Decoder logits (N, T, V) for right-padded sources (N, S) and decoder inputs (N, T)
        (the start token, then the target shifted right): teacher forcing."""
        return self._teacher_forced(source_ids, source_mask, decoder_ids)[0]

    def cross_attention(
        self, source_ids: np.ndarray, source_mask: np.ndarray, decoder_ids: np.ndarray
    ) -> np.ndarray:
        """α (N, T, S), teacher-forced: row t is the attention over the source tokens while the
        model predicts the token after decoder_ids[:, t]; each row sums to 1 over the real
        source tokens and is 0 on padding. ValueError for the single-context model."""
        if not self.has_attention:
            raise ValueError(
                "`model` must have attention for cross_attention, got a single-context-vector "
                "model (its decoder reads one vector for the whole source)"
            )
        return self._teacher_forced(source_ids, source_mask, decoder_ids)[1]
