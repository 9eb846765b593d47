"""Generation settings: one dataclass, validated once when generation starts.

Names and semantics follow transformers' `GenerationConfig` wherever a name exists there; `seed`
and `stop` are ours. `validate` turns every bad setting into a `ValueError` with one template:
`` `top_p` must be in (0, 1], got 1.5 ``. This module does not run models or touch logits.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field


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
        if not isinstance(self.do_sample, bool):
            raise ValueError(f"`do_sample` must be a bool, got {self.do_sample!r}")
        if not _finite(self.temperature) or self.temperature <= 0:
            raise ValueError(f"`temperature` must be > 0, got {self.temperature!r}")
        if not _finite(self.top_p) or not 0 < self.top_p <= 1:
            raise ValueError(f"`top_p` must be in (0, 1], got {self.top_p!r}")
        if not _finite(self.min_p) or not 0 <= self.min_p <= 1:
            raise ValueError(f"`min_p` must be in [0, 1], got {self.min_p!r}")
        if not _finite(self.typical_p) or not 0 < self.typical_p <= 1:
            raise ValueError(f"`typical_p` must be in (0, 1], got {self.typical_p!r}")
        if not _finite(self.repetition_penalty) or self.repetition_penalty <= 0:
            raise ValueError(f"`repetition_penalty` must be > 0, got {self.repetition_penalty!r}")
        if not _finite(self.length_penalty):
            raise ValueError(
                f"`length_penalty` must be a finite number, got {self.length_penalty!r}"
            )
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
        if self.seed is not None and (not isinstance(self.seed, int) or self.seed < 0):
            raise ValueError(f"`seed` must be a non-negative int or None, got {self.seed!r}")
        if any(not isinstance(s, str) or not s for s in self.stop):
            raise ValueError(f"`stop` must be non-empty strings, got {self.stop!r}")
        return self


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _int_at_least(name: str, value, low: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise ValueError(f"`{name}` must be an int >= {low}, got {value!r}")
