"""Masked language models (manifest task "fill-mask"): fill in mask tokens, contextual vectors.

`runtime.load` returns a `MaskedLM` for a fill-mask bundle (export/fill_mask.py). Its one ONNX
graph maps input_ids, attention_mask (and token_type_ids) to the MLM logits and the encoder's
last hidden state. Text is encoded with the bundle's tokenizer, whose post-processor adds the
start and end tokens (BERT's [CLS] … [SEP]); text longer than the context raises `ValueError`,
nothing is truncated.

`fill_mask` follows transformers' fill-mask pipeline: the softmax of the logits at each mask,
its `top_k` best tokens as {"score", "token", "token_str", "sequence"}; with several masks, one
list per mask (in order), each sequence filling only that mask and keeping the special tokens,
exactly as the pipeline decodes it. Nothing here imports torch or transformers.

Does not cover: generating from a masked LM or the studies (study/), static vectors
(runtime/word_vectors.py).
"""

from __future__ import annotations

from dataclasses import astuple, dataclass
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

from .manifest import Manifest
from .sessions import available_providers, create_session


@dataclass
class TokenVectors:
    tokens: list[str]  # each token of the text as it decodes (" king"), special tokens left out
    ids: list[int]  # their token ids
    vectors: np.ndarray  # (tokens, hidden) last-layer hidden states, float32


def softmax(logits: np.ndarray) -> np.ndarray:
    """Softmax over the last axis, in float64 for stable scores."""
    shifted = logits.astype(np.float64) - logits.max(axis=-1, keepdims=True)
    exp = np.exp(shifted)
    return exp / exp.sum(axis=-1, keepdims=True)


class MaskedLM:
    """A loaded fill-mask bundle: `fill_mask`, `token_vectors`, `forward`, `mask_token`."""

    def __init__(self, directory: str | Path, manifest: Manifest, providers=None, threads=None):
        directory = Path(directory)
        self.directory = directory
        self.manifest = manifest
        self.name = manifest.name
        self.tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
        self.mask_token: str = manifest.mask_token
        self.mask_token_id: int = manifest.mask_token_id
        self.pad_token_id: int = manifest.special_tokens.pad_token_id
        self.context_length: int = manifest.context_length
        # the start, end and padding tokens: left out of token_vectors (the mask token stays)
        self.frame_ids = {v for v in astuple(manifest.special_tokens) if v is not None}
        self.providers = available_providers(providers)
        self.session = create_session(
            directory / manifest.graphs["model"].file, self.providers, threads
        )
        self.input_names = [i.name for i in self.session.get_inputs()]
        self.controls: dict = {}

    # ---- encoding ------------------------------------------------------------------------------

    def encode(self, text: str) -> list[int]:
        """Token ids of `text` with the start and end tokens; ValueError over the context."""
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"`text` must be a non-empty string, got {text!r}")
        ids = self.tokenizer.encode(text).ids
        if len(ids) > self.context_length:
            raise ValueError(
                f"`text` must be at most {self.context_length} tokens with the start and end "
                f"tokens, got {len(ids)}"
            )
        return ids

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        return self.tokenizer.decode(list(map(int, ids)), skip_special_tokens=skip_special_tokens)

    # ---- the graph -----------------------------------------------------------------------------

    def forward(self, batch: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
        """Logits (N, T, V) and last hidden states (N, T, H) of right-padded token id rows."""
        if not batch:
            raise ValueError("`batch` must hold at least one row, got none")
        width = max(map(len, batch))
        if width > self.context_length:
            raise ValueError(f"rows must be at most {self.context_length} tokens, got {width}")
        ids = np.full((len(batch), width), self.pad_token_id, dtype=np.int64)
        mask = np.zeros_like(ids)
        for row, tokens in enumerate(batch):
            ids[row, : len(tokens)] = tokens
            mask[row, : len(tokens)] = 1
        feeds = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self.input_names:
            feeds["token_type_ids"] = np.zeros_like(ids)
        logits, hidden = self.session.run(["logits", "last_hidden_state"], feeds)
        return logits, hidden

    # ---- public API ----------------------------------------------------------------------------

    def fill_mask(self, text: str, top_k: int = 5) -> list[dict] | list[list[dict]]:
        """The `top_k` fillers of each mask token in `text` (transformers' pipeline format)."""
        if not isinstance(top_k, int) or isinstance(top_k, bool) or top_k < 1:
            raise ValueError(f"`top_k` must be a positive int, got {top_k!r}")
        vocab = int(self.manifest.vocab_size)
        if top_k > vocab:
            raise ValueError(f"`top_k` must be at most the vocabulary size {vocab}, got {top_k}")
        ids = self.encode(text)
        positions = [i for i, t in enumerate(ids) if t == self.mask_token_id]
        if not positions:
            raise ValueError(f"`text` must contain the mask token {self.mask_token}, got {text!r}")
        logits, _ = self.forward([ids])
        probs = softmax(logits[0, positions])  # (masks, V)
        single = len(positions) == 1
        result = []
        for position, row_probs in zip(positions, probs):
            best = np.argsort(-row_probs, kind="stable")[:top_k]
            row = []
            for token in best:
                filled = np.array(ids)
                filled[position] = token
                filled = filled[filled != self.pad_token_id]
                row.append(
                    {
                        "score": float(row_probs[token]),
                        "token": int(token),
                        "token_str": self.decode([token]),
                        "sequence": self.decode(filled, skip_special_tokens=single),
                    }
                )
            result.append(row)
        return result[0] if single else result

    def token_vectors(self, text: str) -> TokenVectors:
        """The last-layer vector of every token of `text` (start, end and padding tokens
        left out)."""
        ids = self.encode(text)
        _, hidden = self.forward([ids])
        keep = [i for i, t in enumerate(ids) if t not in self.frame_ids]
        return TokenVectors(
            tokens=[self.decode([ids[i]]) for i in keep],
            ids=[ids[i] for i in keep],
            vectors=hidden[0, keep].astype(np.float32),
        )
