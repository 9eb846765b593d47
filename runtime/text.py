"""Text around the token loop: incremental detokenization, stop strings, control tokens.

Byte-level BPE can split one UTF-8 character over several tokens; `IncrementalDecoder` only
releases text once it decodes to complete characters, so every streamed piece is valid text.
This module does not run models.
"""

from __future__ import annotations

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


def control_prefix(controls_spec: dict, chosen: dict | None) -> str:
    """The control-token string to put in front of the text, in manifest order.

    `controls_spec` is the manifest's `controls`; `chosen` maps control names to values. A
    "numeric" control takes any number and uses the nearest listed value.

    >>> spec = {"length_ratio": {"kind": "numeric", "values": {"0.5": "<r0.5>", "1.0": "<r1.0>"}},
    ...         "section": {"kind": "choice", "values": {"law": "<|law|>"}}}
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
        value, values = chosen[name], spec["values"]
        if spec.get("kind") == "numeric":
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
