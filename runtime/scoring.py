"""Scoring: the model's log-probabilities of given text (`gen.score`, `gen.score_ids`), which is
how evaluation harnesses and OpenAI's legacy `echo` measure a model. `ScoringMixin` gives
`runtime.Generator` these methods; the model runs one teacher-forced call (`all_logits` in
runtime/models.py). This module does not generate.

Token boundaries in `score(text, context)` follow lm-evaluation-harness (`_encode_pair`): trailing
whitespace of the context moves to the start of the text; the context alone and context + text
are tokenized (with BOS and control tokens as for a prompt), and the scored tokens are those of
context + text past the context's token count. Tokenizing the two together gives the tokens the
model sees for that string in training and in generation (a BPE merges " world" into one token
only when the space and the word are encoded together); tokenizing them separately can produce a
split the model never saw, whose log-probability is needlessly low. Harness scores computed here
and through the API (which receives the harness's own token ids) therefore agree. If a merge
crosses the boundary, the first scored token starts inside the context (`Score.tokens` shows it).

With an empty context a causal LM conditions the first token on its BOS token, or, without one,
on its EOS token (as lm-evaluation-harness's rolling log-likelihood does). For a seq2seq model
`context` is the source and `text` the target, tokenized as transformers tokenizes labels (with
the tokenizer's special tokens, so the closing EOS is scored); each target token is conditioned
on the decoder start token and the target before it.
"""

from __future__ import annotations

import numpy as np

from . import sampling
from .outputs import Score
from .search import log_normalizer


class ScoringMixin:
    """`score` and `score_ids` for `runtime.Generator` (which supplies model, tokenizer, task,
    manifest, context_length, bos/eos ids, `prompt_head` and `encode_prompt`)."""

    def score(self, text: str, context: str = "", controls=None, top: int = 0) -> Score:
        """Log-probabilities of the tokens of `text` given `context` (the source, for seq2seq),
        their sum, and with `top` > 0 the `top` most likely tokens at each scored position."""
        for name, value in (("text", text), ("context", context)):
            if not isinstance(value, str):
                raise ValueError(f"`{name}` must be a str, got {type(value).__name__}")
        if not text:
            raise ValueError("`text` must not be empty, got ''")
        if self.task == "seq2seq":
            source = self.encode_prompt(context, controls)
            target = self.tokenizer.encode(text, add_special_tokens=True).ids
            return self.score_ids(target, source_ids=source, top=top)
        spaces = len(context) - len(context.rstrip())
        if spaces:
            context, text = context[:-spaces], context[-spaces:] + text
        prefix = self.prompt_head(controls)
        head = self._causal_ids(prefix + context)
        whole = self._causal_ids(prefix + context + text)
        if not head:
            if self.eos_token_id is None:
                raise ValueError(
                    "`context` must not be empty for a causal LM with neither BOS nor EOS token"
                )
            head, whole = [self.eos_token_id], [self.eos_token_id, *whole]
        return self.score_ids(whole, start=len(head), top=top)

    def score_ids(self, ids, start: int | None = None, source_ids=None, top: int = 0) -> Score:
        """Log-probabilities of token ids `ids[start:]`, each given the ids before it: for a causal
        LM `start` defaults to 1 (the first token has nothing to condition on); for a seq2seq
        model `ids` is the target, `source_ids` the encoded source, and `start` defaults to 0."""
        ids = _token_ids(ids, "ids")
        vocab = self.manifest.vocab_size or self.tokenizer.get_vocab_size()
        if max(ids) >= vocab:
            raise ValueError(f"`ids` must be below the vocabulary size {vocab}, got {max(ids)}")
        seq2seq = self.task == "seq2seq"
        if start is None:
            start = 0 if seq2seq else 1
        first = 0 if seq2seq else 1
        if isinstance(start, bool) or not isinstance(start, int) or not first <= start < len(ids):
            raise ValueError(f"`start` must be an int in [{first}, {len(ids) - 1}], got {start!r}")
        if isinstance(top, bool) or not isinstance(top, int) or top < 0:
            raise ValueError(f"`top` must be an int >= 0, got {top!r}")
        if seq2seq:
            if source_ids is None:
                raise ValueError("`source_ids` must be given for a seq2seq model, got None")
            source = _token_ids(source_ids, "source_ids")
            if max(source) >= vocab:
                raise ValueError(
                    f"`source_ids` must be below the vocabulary size {vocab}, got {max(source)}"
                )
            source = np.array([source], dtype=np.int64)  # (1, S)
            decoder_start = self.manifest.special_tokens.decoder_start_token_id
            decoder = np.array([[decoder_start, *ids[:-1]]], dtype=np.int64)  # (1, T)
            logits = self.model.all_logits(source, np.ones_like(source), decoder)[0]  # (T, V)
            logits = logits[start:]  # position t scores ids[t]
        else:
            if source_ids is not None:
                raise ValueError("`source_ids` must be None for a causal LM, got token ids")
            if len(ids) > self.context_length:
                raise ValueError(
                    f"`ids` must be at most the model's context of {self.context_length} tokens, "
                    f"got {len(ids)}"
                )
            batch = np.array([ids], dtype=np.int64)  # (1, T)
            logits = self.model.all_logits(batch, np.ones_like(batch))[0]  # (T, V)
            logits = logits[start - 1 : len(ids) - 1]  # position t - 1 scores ids[t]
        targets = np.array(ids[start:], dtype=np.int64)
        normalizer = log_normalizer(logits)[:, 0]  # (T',)
        chosen = logits[np.arange(len(targets)), targets] - normalizer
        alternatives = ()
        if top:
            values, top_ids = sampling.top_k_values(logits, min(top, logits.shape[1]))  # (T', k)
            values = values - normalizer[:, None]
            alternatives = tuple(
                tuple((self._token_text(i), float(v)) for v, i in zip(row_values, row_ids))
                for row_values, row_ids in zip(values, top_ids)
            )
        return Score(
            token_ids=tuple(int(t) for t in targets),
            tokens=tuple(self._token_text(t) for t in targets),
            logprobs=tuple(float(v) for v in chosen),
            total=float(chosen.astype(np.float64).sum()),
            context_ids=tuple(ids[:start]),
            alternatives=alternatives,
        )

    def _causal_ids(self, text: str) -> list[int]:
        """`text` as a causal LM's prompt tokens (BOS first when the model adds one)."""
        ids = self.tokenizer.encode(text, add_special_tokens=False).ids
        if self.manifest.add_bos_token and self.bos_token_id is not None:
            ids = [self.bos_token_id, *ids]
        return ids

    def _token_text(self, token_id) -> str:
        return self.tokenizer.decode([int(token_id)], skip_special_tokens=False)


def _token_ids(ids, name: str) -> list[int]:
    """`ids` as a non-empty list of non-negative ints, or ValueError."""
    if isinstance(ids, np.ndarray):
        ids = ids.tolist()
    if (
        not isinstance(ids, (list, tuple))
        or not ids
        or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids)
    ):
        shown = repr(ids) if len(repr(ids)) <= 80 else repr(ids)[:77] + "..."
        raise ValueError(f"`{name}` must be a non-empty list of token ids (ints >= 0), got {shown}")
    return [int(i) for i in ids]
