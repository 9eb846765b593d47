"""Generation settings: one dataclass, validated once when generation starts.

Names and semantics follow transformers' `GenerationConfig` wherever a name exists there; `seed`
and `stop` are ours. Each decoding field's meaning, default and range are declared once in
runtime/parameters.py (`PARAMETERS`), and `validate` checks each field against it, turning every
bad setting into a `ValueError` with one template: `` `top_p` must be in (0, 1], got 1.5 ``;
here are the checks across fields and those of the settings a manifest fixes (stop strings,
forced and suppressed tokens). Front ends (serve/, ui/) may ask for narrower ranges, never wider
ones. A `json_schema` is checked by compiling it (runtime/structured.py), and only greedy
decoding and sampling take one; `tool_calls` (runtime/tools.py) likewise, in place of a schema.
This module does not run models or touch logits.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field

from .parameters import NAMED, PARAMETERS, is_int
from .structured import check_schema
from .tools import ToolCalls


def _default(name: str):
    return NAMED[name].default


@dataclass(frozen=True)
class GenerationConfig:
    # The decoding fields: their meaning and range in runtime/parameters.py.
    max_new_tokens: int = _default("max_new_tokens")
    min_new_tokens: int = _default("min_new_tokens")
    do_sample: bool = _default("do_sample")
    temperature: float = _default("temperature")
    top_k: int = _default("top_k")
    top_p: float = _default("top_p")
    min_p: float = _default("min_p")
    typical_p: float = _default("typical_p")
    repetition_penalty: float = _default("repetition_penalty")
    no_repeat_ngram_size: int = _default("no_repeat_ngram_size")
    num_beams: int = _default("num_beams")
    length_penalty: float = _default("length_penalty")
    early_stopping: bool | str = _default("early_stopping")
    num_return_sequences: int = _default("num_return_sequences")
    seed: int | None = _default("seed")
    json_schema: str | None = _default("json_schema")
    # The function calls a chat reply may or must make (runtime/tools.py; serve/chat.py builds
    # it from a request's `tools`); None: none.
    tool_calls: ToolCalls | None = None
    stop: tuple[str, ...] = field(default_factory=tuple)  # stop strings, cut from the text
    # Prompts with different salts never share prefix-cache blocks (runtime/prefix_cache.py), so
    # one client cannot learn from its first token's time what another sent; None: shared.
    cache_salt: str | None = None
    # Forced tokens and suppressed tokens come from the model's manifest defaults (BART, Marian).
    forced_bos_token_id: int | None = None  # token forced as the first generated token
    forced_eos_token_id: int | None = None  # token forced when max_new_tokens is reached
    suppress_tokens: tuple[int, ...] = field(default_factory=tuple)  # never generated

    def replace(self, **changes) -> GenerationConfig:
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_dict(cls, values: Mapping) -> GenerationConfig:
        """A config from a dict of its fields (a manifest's `generation_defaults`); a key that is
        not one is a `ValueError` naming it."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = [key for key in values if key not in known]
        if unknown:
            raise ValueError(f"`generation_defaults` has unknown key `{unknown[0]}`")
        kwargs = dict(values)
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
        for parameter in PARAMETERS:
            parameter.check(getattr(self, parameter.name))
        for name in ("forced_bos_token_id", "forced_eos_token_id"):
            if getattr(self, name) is not None:
                _int_at_least(name, getattr(self, name), 0)
        for token in self.suppress_tokens:
            _int_at_least("suppress_tokens", token, 0)
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
        if self.json_schema is not None:
            if self.num_beams > 1:
                raise ValueError(
                    "`json_schema` must be None with beam search (a schema constrains each "
                    f"row's next token, not a beam's), got one with num_beams={self.num_beams}"
                )
            check_schema(self.json_schema)
        if self.tool_calls is not None:
            if not isinstance(self.tool_calls, ToolCalls):
                raise ValueError(f"`tool_calls` must be a ToolCalls, got {self.tool_calls!r}")
            if self.json_schema is not None or self.num_beams > 1:
                raise ValueError(
                    "`tool_calls` must be None with a `json_schema` or beam search, got both "
                    f"(num_beams={self.num_beams})"
                )
            self.tool_calls.check()
        if self.cache_salt is not None and (
            not isinstance(self.cache_salt, str) or not self.cache_salt
        ):
            raise ValueError(
                f"`cache_salt` must be a non-empty string or None, got {self.cache_salt!r}"
            )
        if any(not isinstance(s, str) or not s for s in self.stop):
            raise ValueError(f"`stop` must be non-empty strings, got {self.stop!r}")
        return self


def _int_at_least(name: str, value, low: int) -> None:
    if not is_int(value) or value < low:
        raise ValueError(f"`{name}` must be an int >= {low}, got {value!r}")
