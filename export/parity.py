"""Parity of an exported bundle with its PyTorch checkpoint: the report in the manifest's `parity`.

Three measurements, all against the checkpoint loaded in PyTorch (float32, transformers):

- logits: max |Δlogit| for the prefill of a batch of prompts of different lengths (left-padded
  for a causal LM, with position ids from the attention mask; right-padded sources for seq2seq,
  whose "prefill" is the first decoder step) and for one cached step after it (the KV cache the
  graph returned, fed back). Padding positions are not compared. `argmax_agreement` is the
  fraction of compared positions where both pick the same token.
- greedy: `GREEDY_NEW_TOKENS` tokens per prompt from `runtime.load(bundle).generate` against
  `generate(do_sample=False)` in PyTorch, both forced to generate the full length
  (`min_new_tokens`), with the model's forced/suppressed tokens as the runtime applies them.
- perplexity: of a fixed text (for seq2seq: a fixed target given a fixed source), ONNX against
  PyTorch, and the relative change in percent.

`OnnxModel` runs the graphs with onnxruntime directly (not through the runtime), so logit parity
does not depend on the runtime's decoding code. This module does not export, optimize or quantize.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnxruntime as ort
import torch

from runtime.manifest import Manifest
from runtime.sessions import DEVICE_PROVIDERS, create_session

PROMPTS = [
    "In the beginning",
    "The quick brown fox jumps over the lazy dog while the farmer sleeps.",
    "Once upon a time there was a small village by the sea, and",
    "Blessed are the meek,",
]
PERPLEXITY_TEXT = (
    "The sun rose over the quiet hills, and the shepherd led his sheep down to the river. "
    "Children ran along the road to the market, where bread, fish and honey were sold. "
    "In the evening the bells rang, the doors were closed, and the village went to sleep."
)
PERPLEXITY_SOURCE = (
    "The sun rose over the quiet hills, and the shepherd led his sheep to the river."
)
PERPLEXITY_TARGET = "At dawn the shepherd took his flock down from the hills to drink at the river."
GREEDY_NEW_TOKENS = 32
PERPLEXITY_MAX_TOKENS = 256
_ALL_POSITIONS = np.array(0, dtype=np.int64)  # `logits_to_keep` feed (lean GPT-2 graph)


@dataclass
class Reference:
    """The checkpoint in PyTorch: model, Hugging Face tokenizer and the bundle's token ids."""

    model: torch.nn.Module
    tokenizer: object  # transformers tokenizer of the checkpoint
    task: str  # "causal-lm" or "seq2seq"
    special_tokens: dict  # the manifest's special_tokens
    context_length: int

    def pad_id(self) -> int:
        for key in ("pad_token_id", "eos_token_id"):
            if self.special_tokens.get(key) is not None:
                return int(self.special_tokens[key])
        return 0

    def encode(self, text: str) -> list[int]:
        """Token ids as the checkpoint's own tokenizer makes them (special tokens included)."""
        return list(self.tokenizer(text)["input_ids"])


def _session(path: Path) -> ort.InferenceSession:
    return create_session(path, providers=DEVICE_PROVIDERS["cpu"], errors_only=True)


def _empty_past(session: ort.InferenceSession, batch: int) -> dict[str, np.ndarray]:
    """Zero-length KV-cache inputs, shaped (batch, heads, 0, head_size) from the graph."""
    feeds = {}
    for node in session.get_inputs():
        if node.name.startswith("past_key_values"):
            heads, head_size = node.shape[1], node.shape[3]
            feeds[node.name] = np.zeros((batch, heads, 0, head_size), np.float32)
    return feeds


class OnnxModel:
    """A bundle's graphs run with onnxruntime: prefill and one cached step.

    `graphs` maps roles to files: {"decoder": model.onnx} for a causal LM, {"encoder": …,
    "decoder": decoder_model_merged.onnx} for seq2seq (docs/bundle.md).
    """

    def __init__(self, graphs: dict[str, Path], task: str):
        self.task = task
        self.decoder = _session(graphs["decoder"])
        self.encoder = _session(graphs["encoder"]) if task == "seq2seq" else None
        self.decoder_inputs = {node.name for node in self.decoder.get_inputs()}
        self.output_names = [node.name for node in self.decoder.get_outputs()]

    def _run_decoder(self, feeds: dict) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Logits at every position and present.* outputs; drops feeds the graph does not take
        (position_ids, logits_to_keep)."""
        feeds = {"logits_to_keep": _ALL_POSITIONS, **feeds}
        feeds = {k: v for k, v in feeds.items() if k in self.decoder_inputs}
        values = dict(zip(self.output_names, self.decoder.run(self.output_names, feeds)))
        present = {k: v for k, v in values.items() if k.startswith("present")}
        return values["logits"], present

    def causal_prefill(self, input_ids, attention_mask, position_ids):
        """Logits (B, T, V) and the KV cache for a prompt batch, starting from an empty cache."""
        feeds = {
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "position_ids": position_ids,
        }
        feeds.update(_empty_past(self.decoder, input_ids.shape[0]))
        return self._run_decoder(feeds)

    def causal_step(self, tokens, attention_mask, position_ids, present):
        """Logits (B, 1, V) for one new token per row, given the cache from the previous call."""
        feeds = {
            "input_ids": tokens,
            "attention_mask": attention_mask,
            "position_ids": position_ids,
        }
        feeds.update({k.replace("present", "past_key_values", 1): v for k, v in present.items()})
        return self._run_decoder(feeds)

    def encode(self, input_ids, attention_mask) -> np.ndarray:
        feeds = {"input_ids": input_ids, "attention_mask": attention_mask}
        names = {node.name for node in self.encoder.get_inputs()}
        (hidden,) = self.encoder.run(
            ["last_hidden_state"], {k: v for k, v in feeds.items() if k in names}
        )
        return hidden  # (B, S, hidden)

    def seq2seq_first(self, decoder_ids, hidden, encoder_mask):
        """Decoder logits (B, T, V) for `decoder_ids`, no cache (the merged graph's else branch)."""
        feeds = {
            "input_ids": decoder_ids,
            "encoder_hidden_states": hidden,
            "encoder_attention_mask": encoder_mask,
            "use_cache_branch": np.array([False]),
        }
        feeds.update(_empty_past(self.decoder, decoder_ids.shape[0]))
        return self._run_decoder(feeds)

    def seq2seq_step(self, tokens, hidden, encoder_mask, present):
        """Decoder logits (B, 1, V) for one token per row, reusing self/cross-attention cache."""
        feeds = {
            "input_ids": tokens,
            "encoder_hidden_states": hidden,
            "encoder_attention_mask": encoder_mask,
            "use_cache_branch": np.array([True]),
        }
        feeds.update({k.replace("present", "past_key_values", 1): v for k, v in present.items()})
        return self._run_decoder(feeds)


def _pad(rows: list[list[int]], pad_id: int, left: bool) -> tuple[np.ndarray, np.ndarray]:
    width = max(len(row) for row in rows)
    ids = np.full((len(rows), width), pad_id, np.int64)  # (B, T)
    mask = np.zeros((len(rows), width), np.int64)  # (B, T)
    for i, row in enumerate(rows):
        span = slice(width - len(row), width) if left else slice(0, len(row))
        ids[i, span], mask[i, span] = row, 1
    return ids, mask


def _positions(mask: np.ndarray) -> np.ndarray:
    """Position ids that count real tokens only (1 on left padding), as transformers' generate."""
    positions = np.cumsum(mask, axis=1) - 1  # (B, T)
    return np.where(mask == 0, 1, positions).astype(np.int64)


def _max_diff(a: np.ndarray, b: np.ndarray, keep: np.ndarray) -> float:
    """max |a - b| over positions where `keep` (B, T) is set; a, b are (B, T, V)."""
    return float(np.abs(a - b)[keep.astype(bool)].max())


def _argmax_agree(a: np.ndarray, b: np.ndarray, keep: np.ndarray) -> tuple[int, int]:
    keep = keep.astype(bool)
    same = (a.argmax(-1) == b.argmax(-1))[keep]
    return int(same.sum()), int(same.size)


def logit_parity(onnx: OnnxModel, ref: Reference) -> dict:
    """max |Δlogit| against PyTorch for the prefill (first decoder step) and one cached step."""
    rows = [ref.encode(p)[: ref.context_length - 1] for p in PROMPTS]
    if ref.task == "causal-lm":
        return _causal_logit_parity(onnx, ref, rows)
    return _seq2seq_logit_parity(onnx, ref, rows)


@torch.no_grad()
def _causal_logit_parity(onnx: OnnxModel, ref: Reference, rows) -> dict:
    ids, mask = _pad(rows, ref.pad_id(), left=True)
    positions = _positions(mask)
    uses_positions = "position_ids" in onnx.decoder_inputs
    torch_pos = {"position_ids": torch.from_numpy(positions)} if uses_positions else {}
    out = ref.model(
        input_ids=torch.from_numpy(ids),
        attention_mask=torch.from_numpy(mask),
        use_cache=True,
        **torch_pos,
    )
    expected = out.logits.float().numpy()  # (B, T, V)
    logits, present = onnx.causal_prefill(ids, mask, positions)
    prefill = _max_diff(logits, expected, mask)
    agree, total = _argmax_agree(logits, expected, mask)

    tokens = expected[:, -1].argmax(-1).reshape(-1, 1).astype(np.int64)  # (B, 1)
    step_mask = np.concatenate([mask, np.ones_like(tokens)], axis=1)  # (B, T + 1)
    step_pos = positions[:, -1:] + 1  # (B, 1)
    torch_pos = {"position_ids": torch.from_numpy(step_pos)} if uses_positions else {}
    out = ref.model(
        input_ids=torch.from_numpy(tokens),
        attention_mask=torch.from_numpy(step_mask),
        past_key_values=out.past_key_values,
        use_cache=True,
        **torch_pos,
    )
    expected_step = out.logits.float().numpy()  # (B, 1, V)
    logits_step, _ = onnx.causal_step(tokens, step_mask, step_pos, present)
    ones = np.ones(tokens.shape, np.int64)
    step_agree, step_total = _argmax_agree(logits_step, expected_step, ones)
    return {
        "prefill_max_abs_diff": prefill,
        "cached_step_max_abs_diff": _max_diff(logits_step, expected_step, ones),
        "max_abs_logit": float(np.abs(expected[mask.astype(bool)]).max()),
        "argmax_agreement": (agree + step_agree) / (total + step_total),
        "prompts": len(rows),
    }


@torch.no_grad()
def _seq2seq_logit_parity(onnx: OnnxModel, ref: Reference, rows) -> dict:
    ids, mask = _pad(rows, ref.pad_id(), left=False)
    start = ref.special_tokens["decoder_start_token_id"]
    decoder_ids = np.full((len(rows), 1), start, np.int64)  # (B, 1)
    out = ref.model(
        input_ids=torch.from_numpy(ids),
        attention_mask=torch.from_numpy(mask),
        decoder_input_ids=torch.from_numpy(decoder_ids),
        use_cache=True,
    )
    expected = out.logits.float().numpy()  # (B, 1, V)
    hidden = onnx.encode(ids, mask)
    logits, present = onnx.seq2seq_first(decoder_ids, hidden, mask)
    ones = np.ones(decoder_ids.shape, np.int64)
    first = _max_diff(logits, expected, ones)
    agree, total = _argmax_agree(logits, expected, ones)

    tokens = expected[:, -1].argmax(-1).reshape(-1, 1).astype(np.int64)  # (B, 1)
    out = ref.model(
        encoder_outputs=(out.encoder_last_hidden_state,),
        attention_mask=torch.from_numpy(mask),
        decoder_input_ids=torch.from_numpy(tokens),
        past_key_values=out.past_key_values,
        use_cache=True,
    )
    expected_step = out.logits.float().numpy()  # (B, 1, V)
    logits_step, _ = onnx.seq2seq_step(tokens, hidden, mask, present)
    step_agree, step_total = _argmax_agree(logits_step, expected_step, ones)
    return {
        "prefill_max_abs_diff": first,
        "cached_step_max_abs_diff": _max_diff(logits_step, expected_step, ones),
        "max_abs_logit": float(np.abs(expected).max()),
        "argmax_agreement": (agree + step_agree) / (total + step_total),
        "prompts": len(rows),
    }


def mean_nll(logits: np.ndarray, targets: np.ndarray) -> float:
    """Mean negative log-likelihood of `targets` (T,) under `logits` (T, V), in float64."""
    logits = logits.astype(np.float64)
    top = logits.max(-1, keepdims=True)
    log_norm = np.log(np.exp(logits - top).sum(-1)) + top[:, 0]  # (T,)
    return float((log_norm - logits[np.arange(len(targets)), targets]).mean())


@torch.no_grad()
def perplexity_parity(onnx: OnnxModel, ref: Reference) -> dict:
    """Perplexity of a fixed text under ONNX and PyTorch, and the relative change in percent."""
    limit = min(PERPLEXITY_MAX_TOKENS, ref.context_length)
    if ref.task == "causal-lm":
        ids = np.array([ref.encode(PERPLEXITY_TEXT)[:limit]], np.int64)  # (1, T)
        mask = np.ones_like(ids)
        expected = ref.model(input_ids=torch.from_numpy(ids)).logits.float().numpy()[0]
        logits = onnx.causal_prefill(ids, mask, _positions(mask))[0][0]  # (T, V)
        targets, expected, logits = ids[0, 1:], expected[:-1], logits[:-1]
    else:
        ids = np.array([ref.encode(PERPLEXITY_SOURCE)[:limit]], np.int64)  # (1, S)
        mask = np.ones_like(ids)
        labels = list(ref.tokenizer(text_target=PERPLEXITY_TARGET)["input_ids"])[: limit - 1]
        start = ref.special_tokens["decoder_start_token_id"]
        decoder_ids = np.array([[start, *labels[:-1]]], np.int64)  # (1, T)
        expected = ref.model(
            input_ids=torch.from_numpy(ids),
            attention_mask=torch.from_numpy(mask),
            decoder_input_ids=torch.from_numpy(decoder_ids),
        ).logits.float()
        expected = expected.numpy()[0]
        logits = onnx.seq2seq_first(decoder_ids, onnx.encode(ids, mask), mask)[0][0]  # (T, V)
        targets = np.array(labels, np.int64)
    ppl_torch = math.exp(mean_nll(expected, targets))
    ppl_onnx = math.exp(mean_nll(logits, targets))
    return {
        "tokens": int(len(targets)),
        "pytorch": ppl_torch,
        "onnx": ppl_onnx,
        "relative_change_pct": 100.0 * (ppl_onnx / ppl_torch - 1.0),
    }


def _reference_greedy_config(ref: Reference, generation_defaults: dict):
    """transformers' greedy settings equal to what the runtime runs for the same request."""
    from transformers import GenerationConfig

    special = ref.special_tokens
    forced = ("forced_bos_token_id", "forced_eos_token_id", "suppress_tokens")
    return GenerationConfig(
        max_new_tokens=GREEDY_NEW_TOKENS,
        min_new_tokens=GREEDY_NEW_TOKENS,
        do_sample=False,
        num_beams=1,
        bos_token_id=special.get("bos_token_id"),
        eos_token_id=special.get("eos_token_id"),
        pad_token_id=ref.pad_id(),
        decoder_start_token_id=special.get("decoder_start_token_id"),
        # transformers takes suppressed tokens as a list
        **{
            key: list(value) if isinstance(value, tuple) else value
            for key, value in generation_defaults.items()
            if key in forced
        },
    )


@torch.no_grad()
def greedy_parity(bundle_dir: Path, ref: Reference, generation_defaults: dict) -> dict:
    """Greedy tokens of the runtime on the bundle against PyTorch `generate`, per prompt."""
    import runtime

    generator = runtime.load(bundle_dir)
    config = runtime.GenerationConfig(
        max_new_tokens=GREEDY_NEW_TOKENS, min_new_tokens=GREEDY_NEW_TOKENS, do_sample=False
    )
    # generate() merges unset fields from model.generation_config; replace it so nothing leaks in.
    saved = ref.model.generation_config
    ref.model.generation_config = _reference_greedy_config(ref, generation_defaults)
    identical, matched, total, first_divergence = 0, 0, 0, []
    try:
        for prompt in PROMPTS:
            ours = generator.generate(prompt, config)[0].token_ids
            ids = torch.tensor([ref.encode(prompt)])
            out = ref.model.generate(input_ids=ids, attention_mask=torch.ones_like(ids))
            start = 1 if ref.task == "seq2seq" else ids.shape[1]
            theirs = out[0, start:].tolist()
            prefix = next(
                (i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b),
                min(len(ours), len(theirs)),
            )
            same = ours == theirs
            identical += same
            matched += prefix
            total += max(len(ours), len(theirs))
            first_divergence.append(None if same else prefix)
    finally:
        ref.model.generation_config = saved
    return {
        "prompts": len(PROMPTS),
        "new_tokens": GREEDY_NEW_TOKENS,
        "identical_sequences": identical,
        "token_agreement": matched / total,
        "first_divergence": first_divergence,
    }


def check_bundle(bundle_dir: Path, graphs: dict[str, Path], ref: Reference, manifest: Manifest):
    """The full parity report of a written bundle (see the module docstring)."""
    onnx = OnnxModel(graphs, ref.task)
    logits = logit_parity(onnx, ref)
    return {
        "reference": f"PyTorch {torch.__version__} float32 (transformers)",
        "logits": logits,
        "greedy": greedy_parity(bundle_dir, ref, manifest.generation_defaults.given()),
        "perplexity": perplexity_parity(onnx, ref),
    }
