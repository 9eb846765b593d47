"""Text around the token loop: incremental detokenization, stop strings, control tokens, and
`RowTexts`, which turns a search's steps into `StreamEvent`s.

Byte-level BPE can split one UTF-8 character over several tokens; `IncrementalDecoder` only
releases text once it decodes to complete characters, so every streamed piece is valid text.
This module does not run models.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from .manifest import Control
from .outputs import StreamEvent

REPLACEMENT = "\ufffd"  # what a byte-level decoder prints for an incomplete UTF-8 sequence


class IncrementalDecoder:
    """Turns a growing list of token ids into text increments that are always complete text.

    Each step decodes only a short window, so a long generation costs the same per token as a
    short one: the tokens since the last released piece (`read`), plus the few before them
    (from `prefix`), because decoders such as SentencePiece's drop a leading space at the start
    of whatever they decode. The piece released is what the window decodes to beyond its prefix.
    """

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        self.text = ""  # text released so far
        self.prefix = 0  # ids[prefix:read] decode to the end of `text`
        self.read = 0  # ids[read:] are not released yet

    def _window(self) -> tuple[str, str]:
        """(text of ids[prefix:read], text of ids[prefix:])."""
        decode = self.tokenizer.decode
        known = decode(self.ids[self.prefix : self.read], skip_special_tokens=True)
        return known, decode(self.ids[self.prefix :], skip_special_tokens=True)

    def add(self, token_id: int) -> str:
        """Append a token; return the newly completed text ("" while a character is incomplete)."""
        self.ids.append(int(token_id))
        known, text = self._window()
        if text.endswith(REPLACEMENT) or not text.startswith(known):
            return ""
        piece = text[len(known) :]
        self.text += piece
        self.prefix, self.read = self.read, len(self.ids)
        return piece

    def flush(self) -> str:
        """Whatever remains at the end (a truly invalid byte sequence shows as U+FFFD)."""
        known, text = self._window()
        piece = text[len(known) :] if text.startswith(known) else ""
        self.text += piece
        self.prefix, self.read = self.read, len(self.ids)
        return piece


def find_stop(text: str, stops) -> int | None:
    """Index where the earliest stop string starts in `text`, or None."""
    hits = [text.find(stop) for stop in stops]
    hits = [hit for hit in hits if hit >= 0]
    return min(hits) if hits else None


def control_prefix(controls_spec: Mapping[str, Control], chosen: dict | None) -> str:
    """The control-token string to put in front of the text, in manifest order.

    `controls_spec` is the manifest's `controls`; `chosen` maps control names to values. A
    "numeric" control takes any number and uses the nearest listed value.

    >>> spec = {"length_ratio": Control("numeric", {"0.5": "<r0.5>", "1.0": "<r1.0>"}),
    ...         "section": Control("choice", {"law": "<|law|>"})}
    >>> control_prefix(spec, {"section": "law", "length_ratio": 0.8})
    '<r1.0><|law|>'
    """
    chosen = dict(chosen or {})
    unknown = sorted(set(chosen) - set(controls_spec))
    if unknown:
        known = sorted(controls_spec) or "none"
        raise ValueError(f"unknown control {unknown[0]!r}; this model's controls: {known}")
    prefix = []
    for name, spec in controls_spec.items():
        if name not in chosen or chosen[name] is None:
            continue
        value, values = chosen[name], spec.values
        if spec.kind == "numeric":
            try:
                number = float(value)
            except (TypeError, ValueError):
                raise ValueError(f"`{name}` must be a number, got {value!r}") from None
            value = min(values, key=lambda key: abs(float(key) - number))
        elif not isinstance(value, str) or value not in values:
            shown = repr(value) if isinstance(value, str) else f"a {type(value).__name__}"
            raise ValueError(f"`{name}` must be one of {sorted(values)}, got {shown[:60]}")
        prefix.append(values[value])
    return "".join(prefix)


class RowTexts:
    """The text side of a token search: decodes each row's tokens incrementally, ends rows on a
    stop string (`search.finish`), EOS / end ids or the step limit, and makes the events."""

    def __init__(self, tokenizer, plan, rows: int, ends: set):
        self.tokenizer = tokenizer
        self.config, self.max_steps = plan.config, plan.max_steps
        self.limit_reason = plan.limit_reason  # "length" or "context"
        self.ends = ends  # token ids that end a row with finish reason "eos"
        self.decoders = [IncrementalDecoder(tokenizer) for _ in range(rows)]
        self.released = [0] * rows  # characters of each row's text already yielded

    def events(self, step, search) -> list[StreamEvent]:
        """One event per row still generating at `step`."""
        config, events = self.config, []
        for row in np.flatnonzero(step.active):
            token = int(step.tokens[row])
            decoder = self.decoders[row]
            decoder.add(token)
            text = decoder.text
            reason = None
            cut = find_stop(text, config.stop) if config.stop else None
            if cut is not None:
                text, reason = text[:cut], "stop"
                search.finish(row)
            elif token in self.ends:
                reason = "eos"
            elif step.index + 1 == self.max_steps:
                reason = self.limit_reason
            if reason is None and config.stop:
                text = text[: len(text) - _stop_prefix_overlap(text, config.stop)]
            if reason is not None and reason != "stop":
                text = text + decoder.flush()
            events.append(
                StreamEvent(
                    text=text[self.released[row] :],
                    token_id=token,
                    logprob=float(step.logprobs[row]),
                    alternatives=self._alternatives(step, row),
                    index=int(row),
                    finish_reason=reason,
                )
            )
            self.released[row] = max(self.released[row], len(text))
        return events

    def _alternatives(self, step, row) -> list[tuple[str, float]]:
        if step.alternatives is None:
            return []
        values, ids = step.alternatives
        return [
            (self.tokenizer.decode([int(i)], skip_special_tokens=False), float(np.exp(v)))
            for v, i in zip(values[row], ids[row])
        ]


def _stop_prefix_overlap(text: str, stops) -> int:
    """Length of the longest end of `text` that could still grow into a stop string."""
    best = 0
    for stop in stops:
        for size in range(min(len(stop) - 1, len(text)), 0, -1):
            if text.endswith(stop[:size]):
                best = max(best, size)
                break
    return best
