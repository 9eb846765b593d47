"""Generation settings: one dataclass, validated once when generation starts.

Names and semantics follow transformers' `GenerationConfig` wherever a name exists there; `seed`
and `stop` are ours. `validate` turns every bad setting into a `ValueError` with one template:
`` `top_p` must be in (0, 1], got 1.5 ``. This module does not run models or touch logits.

Every setting is bounded to a range where the maths it drives is defined for any finite float32
logits a model emits (`BOUNDS` for the real-valued ones): a repetition penalty of 1e-300 is 0 in
float32, and dividing a logit by it gives +inf, which no sampler can draw from; a temperature of
1e300 is +inf in float32 and turns -inf logits into NaN; `length ** length_penalty` overflows a
float for a penalty of 1e300. Counts need only a lower bound (the maths holds for any int; the
memory they cost is capped by the front ends' sequence cap, runtime/budget.py, and the engine's
KV-cache budget, runtime/engine.py). Front ends (serve/, ui/) may ask for narrower ranges, never
wider ones.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

# Closed ranges [low, high] of the real-valued settings: outside them the maths is undefined
# or degenerate in float32 (1e-300 is 0 there; 100 keeps logits * penalty finite for any logit
# below 3e36; a temperature of 0.001 is already greedy-like, 100 already near-uniform;
# length ** 10 stays finite for any context length). top_p, min_p and typical_p are in (0, 1].
BOUNDS = {
    "temperature": (1e-3, 100.0),
    "repetition_penalty": (0.01, 100.0),
    "length_penalty": (-10.0, 10.0),
}


@dataclass(frozen=True)
class GenerationConfig:
    max_new_tokens: int = 64  # tokens to generate at most (excluding the prompt)
    min_new_tokens: int = 0  # EOS is forbidden until this many tokens exist
    do_sample: bool = False  # False: greedy (num_beams=1) or beam search; True: sampling
    temperature: float = 1.0  # logits / temperature before filtering; 1.0 = unchanged
    top_k: int = 0  # keep the k most likely tokens (ties at the k-th survive); 0 = off
    top_p: float = 1.0  # keep the smallest top set with mass >= top_p; 1.0 = off
    min_p: float = 0.0  # drop tokens with prob < min_p * max prob; 0.0 = off
    typical_p: float = 1.0  # locally typical sampling mass; 1.0 = off
    repetition_penalty: float = 1.0  # divide (>0) / multiply (<0) scores of seen tokens; 1.0 = off
    no_repeat_ngram_size: int = 0  # forbid repeating any n-gram of this size; 0 = off
    num_beams: int = 1  # beam width; 1 = no beam search
    length_penalty: float = 1.0  # beam score = sum logprob / length**length_penalty
    early_stopping: bool | str = (
        False  # beam stopping rule: True, False or "never" (as transformers)
    )
    num_return_sequences: int = 1  # sequences returned per prompt (<= num_beams for beam search)
    seed: int | None = None  # seeds the sampler; None = fresh entropy each call
    stop: tuple[str, ...] = field(default_factory=tuple)  # stop strings, cut from the text
    # Forced tokens and suppressed tokens come from the model's manifest defaults (BART, Marian).
    forced_bos_token_id: int | None = None  # token forced as the first generated token
    forced_eos_token_id: int | None = None  # token forced when max_new_tokens is reached
    suppress_tokens: tuple[int, ...] = field(default_factory=tuple)  # never generated

    def replace(self, **changes) -> GenerationConfig:
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_dict(cls, values: dict) -> GenerationConfig:
        """A config from a dict (manifest defaults), ignoring keys this class does not know."""
        known = {f.name for f in dataclasses.fields(cls)}
        kwargs = {k: v for k, v in values.items() if k in known}
        for key in ("stop", "suppress_tokens"):
            if key in kwargs and kwargs[key] is not None:
                kwargs[key] = tuple(kwargs[key])
        return cls(**kwargs)

    @property
    def mode(self) -> str:
        """The decoding mode, picked once: "greedy", "sample", "beam" or "beam_sample"."""
        if self.num_beams > 1:
            return "beam_sample" if self.do_sample else "beam"
        return "sample" if self.do_sample else "greedy"

    def validate(self) -> GenerationConfig:
        """Check every field; return self so callers can chain. Raises ValueError."""
        _int_at_least("max_new_tokens", self.max_new_tokens, 1)
        _int_at_least("min_new_tokens", self.min_new_tokens, 0)
        _int_at_least("top_k", self.top_k, 0)
        _int_at_least("no_repeat_ngram_size", self.no_repeat_ngram_size, 0)
        _int_at_least("num_beams", self.num_beams, 1)
        _int_at_least("num_return_sequences", self.num_return_sequences, 1)
        for name in ("forced_bos_token_id", "forced_eos_token_id"):
            if getattr(self, name) is not None:
                _int_at_least(name, getattr(self, name), 0)
        for token in self.suppress_tokens:
            _int_at_least("suppress_tokens", token, 0)
        if not isinstance(self.do_sample, bool):
            raise ValueError(f"`do_sample` must be a bool, got {self.do_sample!r}")
        for name, (low, high) in BOUNDS.items():
            value = getattr(self, name)
            if not _finite(value) or not low <= value <= high:
                raise ValueError(f"`{name}` must be in [{low:g}, {high:g}], got {value!r}")
        if not _finite(self.top_p) or not 0 < self.top_p <= 1:
            raise ValueError(f"`top_p` must be in (0, 1], got {self.top_p!r}")
        if not _finite(self.min_p) or not 0 <= self.min_p <= 1:
            raise ValueError(f"`min_p` must be in [0, 1], got {self.min_p!r}")
        if not _finite(self.typical_p) or not 0 < self.typical_p <= 1:
            raise ValueError(f"`typical_p` must be in (0, 1], got {self.typical_p!r}")
        if self.early_stopping not in (True, False, "never"):
            raise ValueError(
                f"`early_stopping` must be True, False or 'never', got {self.early_stopping!r}"
            )
        if self.num_beams > 1 and self.num_return_sequences > self.num_beams:
            raise ValueError(
                f"`num_return_sequences` must be <= `num_beams` ({self.num_beams}) for beam "
                f"search, got {self.num_return_sequences}"
            )
        if self.num_beams == 1 and not self.do_sample and self.num_return_sequences > 1:
            raise ValueError(
                "`num_return_sequences` must be 1 for greedy decoding (it would repeat one "
                f"sequence), got {self.num_return_sequences}; set do_sample=True or num_beams"
            )
        if self.seed is not None and (not _is_int(self.seed) or self.seed < 0):
            raise ValueError(f"`seed` must be a non-negative int or None, got {self.seed!r}")
        if any(not isinstance(s, str) or not s for s in self.stop):
            raise ValueError(f"`stop` must be non-empty strings, got {self.stop!r}")
        return self


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _int_at_least(name: str, value, low: int) -> None:
    if not _is_int(value) or value < low:
        raise ValueError(f"`{name}` must be an int >= {low}, got {value!r}")
