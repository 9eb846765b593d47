"""Subtitle display rules for the Rewrite tab: line breaking, limits, length ratios.

004 gives no numeric display rules; common practice is about 42 characters per line, at most
2 lines, and 15–20 characters per second, so all three are settings (`SubtitleLimits`).
Definitions used here:
- lines: the text broken greedily at spaces into lines of at most `chars_per_line` characters
  (a single word longer than a line stays whole, and that line fails the check);
- characters per second: all characters of the text, spaces included, over the duration;
- achieved ratio: output length / source length, in subwords (the model's tokenizer, no
  special or control tokens) and in characters.
This module is pure: no model, no UI.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SubtitleLimits:
    chars_per_line: int = 42  # longest line allowed
    max_lines: int = 2  # lines a subtitle may take
    chars_per_second: float = 17.0  # fastest reading speed allowed


@dataclass(frozen=True)
class SubtitleCheck:
    lines: list[str]  # the text broken into lines
    longest_line: int  # characters in the longest line
    chars_per_second: float | None  # reading speed; None without a duration
    line_length_ok: bool
    line_count_ok: bool
    reading_speed_ok: bool | None  # None without a duration

    @property
    def passes(self) -> bool:
        return self.line_length_ok and self.line_count_ok and self.reading_speed_ok is not False


def wrap(text: str, width: int) -> list[str]:
    """Break `text` at spaces into lines of at most `width` characters (greedy).

    >>> wrap("In the beginning God created the heaven and the earth.", 20)
    ['In the beginning God', 'created the heaven', 'and the earth.']
    """
    lines: list[str] = []
    for word in text.split():
        if lines and len(lines[-1]) + 1 + len(word) <= width:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return lines


def check(text: str, limits: SubtitleLimits, duration: float | None = None) -> SubtitleCheck:
    """Break `text` into lines and check it against `limits` (and the duration in seconds).

    >>> c = check("And God said, Let there be light: and there was light.", SubtitleLimits(), 2.0)
    >>> c.lines, c.chars_per_second, c.passes
    (['And God said, Let there be light: and', 'there was light.'], 27.0, False)
    """
    lines = wrap(text, limits.chars_per_line)
    longest = max((len(line) for line in lines), default=0)
    speed = len(text.strip()) / duration if duration else None
    return SubtitleCheck(
        lines=lines,
        longest_line=longest,
        chars_per_second=speed,
        line_length_ok=longest <= limits.chars_per_line,
        line_count_ok=len(lines) <= limits.max_lines,
        reading_speed_ok=None if speed is None else speed <= limits.chars_per_second,
    )


def ratio(output: float, source: float) -> float | None:
    """output / source, or None for an empty source.

    >>> ratio(8, 10), ratio(3, 0)
    (0.8, None)
    """
    return output / source if source else None
