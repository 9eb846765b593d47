"""From runtime stream events to what the UI shows: text per sample, a token view, timing stats.

`StreamCollector` takes `runtime.StreamEvent`s as they arrive (samples interleaved, as
`Generator.stream` yields them) and keeps each sample's text, its tokens with probabilities and
top-5 alternatives, and the timing, on the caller's wall clock: time to first token (from the
request until the first token arrived) and tokens/s (every token of every sample over the wall
time from the request to the last token's arrival, the time a stopwatch beside the page
measures). Arrival, not production, is what a caller can time: the engine may hand a request's
events over late (a batch-mate's step, or all at once at the end for a caller that does not
stream), and beam search delivers whole sequences at once, so only the last arrival and the
request's start bound the wall time a request spent being generated, whatever ran beside it.
`token_view_html` colours every token by its probability in five bands and puts the
alternatives in a tooltip. This module runs no model and builds no components.
"""

from __future__ import annotations

import html
import math
import time
from dataclasses import dataclass, field

# Lower edge of each probability band and its CSS class (ui/style.py colours them).
BANDS = ((0.8, "p80"), (0.5, "p50"), (0.2, "p20"), (0.05, "p05"), (0.0, "p00"))
SAMPLE_SEPARATOR = "\n\n— sample {n} —\n"


@dataclass
class Token:
    text: str  # the text this token added ("" while a character is still incomplete)
    prob: float | None  # the model's probability of it (None for beam search output)
    alternatives: list[tuple[str, float]] = field(default_factory=list)  # top-5 (text, prob)
    special: bool = False  # the end-of-sequence token
    marker: str = ""  # a control token's name ("<|im_start|>") when the decoder hides its text


def band(prob: float) -> str:
    """CSS class of the probability band `prob` falls in.

    >>> band(0.93), band(0.5), band(0.01)
    ('p80', 'p50', 'p00')
    """
    return next(name for low, name in BANDS if prob >= low)


def _shown(text: str) -> str:
    return html.escape(text).replace("\n", "↵\n")


def token_html(token: Token) -> str:
    if token.prob is None:
        return f'<span class="tok plain">{_shown(token.text)}</span>'
    # "▯": a piece of a character that the next token completes
    label = "⟨end⟩" if token.special else (_shown(token.text) or html.escape(token.marker) or "▯")
    rows = "".join(
        f"<tr><td>{html.escape(repr(text))}</td><td>{prob:.3f}</td></tr>"
        for text, prob in token.alternatives
    )
    tip = (
        f'<span class="alts"><b>p = {token.prob:.3f}</b>'
        f"<table><tr><th>top 5</th><th>p</th></tr>{rows}</table></span>"
    )
    kind = " special" if token.special or (token.marker and not token.text) else ""
    return f'<span class="tok {band(token.prob)}{kind}" tabindex="0">{label}{tip}</span>'


def legend_html() -> str:
    chips = "".join(
        f'<span class="tok {name}">p ≥ {low:g}</span> ' for low, name in BANDS if low > 0
    )
    return f'<div class="legend">{chips}<span class="tok p00">p &lt; 0.05</span></div>'


def token_view_html(samples: list[list[Token]]) -> str:
    """Every sample's tokens, coloured by probability, alternatives on hover or focus."""
    blocks = []
    for n, tokens in enumerate(samples, start=1):
        heading = f'<div class="sample-head">sample {n}</div>' if len(samples) > 1 else ""
        body = "".join(token_html(token) for token in tokens)
        blocks.append(f'<div class="sample">{heading}<div class="tokens">{body}</div></div>')
    return f'<div class="tokview">{legend_html()}{"".join(blocks)}</div>'


class StreamCollector:
    """Accumulates the events of one `Generator.stream` call with `samples` sequences."""

    def __init__(
        self, samples: int, tokenizer, eos_token_id=None, clock=time.perf_counter, since=None
    ):
        """`since`: when the visitor asked, on `clock` (the click, queue included), when that
        was before now; the figures count from it, and the `served_…` ones from now."""
        self.clock = clock  # a wall clock (seconds); the stream starts now
        self.stream_start = clock()
        self.start = self.stream_start if since is None else min(since, self.stream_start)
        self.first: float | None = None  # when the first token arrived
        self.last: float | None = None  # when the latest token arrived
        self.tokenizer = tokenizer
        self.eos_token_id = eos_token_id
        self.texts = [""] * samples
        self.tokens: list[list[Token]] = [[] for _ in range(samples)]
        self.logprobs: list[list[float]] = [[] for _ in range(samples)]
        self.token_ids: list[list[int]] = [[] for _ in range(samples)]
        self.finish: list[str | None] = [None] * samples
        self.count = 0  # tokens generated, all samples together
        self._markers: dict | None = None  # control tokens' names by id, read when first needed

    def add(self, event) -> None:
        now = self.clock()
        self.first = self.first if self.first is not None else now
        self.last = now
        row = event.index
        self.texts[row] += event.text
        if event.finish_reason:
            self.finish[row] = event.finish_reason
        if event.token_id is None:  # beam search: a whole sequence at once
            self.tokens[row].append(Token(event.text, None))
            ids = self.tokenizer.encode(event.text, add_special_tokens=False).ids
            if not self.logprobs[row]:  # beam search, not a sampled row's final flush
                self.token_ids[row] += ids
            self.count += len(ids)
            return
        self.count += 1
        self.token_ids[row].append(event.token_id)
        self.logprobs[row].append(event.logprob)
        special = event.token_id == self.eos_token_id and not event.text
        marker = "" if event.text or special else self._marker(event.token_id)
        prob = math.exp(event.logprob)
        token = Token(event.text, prob, list(event.alternatives), special, marker)
        self.tokens[row].append(token)

    def _marker(self, token_id: int) -> str:
        """The name of the control token `token_id` ("<|im_end|>"), whose text the decoder
        hides, else "" (a piece of a character, or a tokenizer that does not say)."""
        if self._markers is None:
            added = getattr(self.tokenizer, "get_added_tokens_decoder", None)
            found = added() if added else {}
            self._markers = {i: t.content for i, t in found.items() if t.special}
        return self._markers.get(token_id, "")

    @property
    def time_to_first_token(self) -> float | None:
        return None if self.first is None else self.first - self.start

    @property
    def tokens_per_second(self) -> float | None:
        """Tokens over the wall time from the request to the last token; None before one."""
        if self.first is None:
            return None
        elapsed = self.last - self.start
        return self.count / elapsed if elapsed > 0 else None

    @property
    def served_time_to_first_token(self) -> float | None:
        """From the stream's start (the server's own figure) to the first token."""
        return None if self.first is None else self.first - self.stream_start

    @property
    def served_tokens_per_second(self) -> float | None:
        """Tokens over the wall time from the stream's start to the last token."""
        if self.first is None:
            return None
        elapsed = self.last - self.stream_start
        return self.count / elapsed if elapsed > 0 else None

    @property
    def all_logprobs(self) -> list[float]:
        return [value for row in self.logprobs for value in row]

    def text(self) -> str:
        """All samples' text; samples after the first under a "— sample n —" line."""
        if len(self.texts) == 1:
            return self.texts[0]
        parts = [self.texts[0]] + [
            SAMPLE_SEPARATOR.format(n=n) + text for n, text in enumerate(self.texts[1:], start=2)
        ]
        return "".join(parts)

    def token_view(self) -> str:
        return token_view_html(self.tokens)

    def stats(self) -> dict:
        """tokens, time to first token (s), tokens/s, finish reasons, mean token logprob."""
        logprobs = self.all_logprobs
        return {
            "tokens": self.count,
            "time_to_first_token_s": self.time_to_first_token,
            "tokens_per_second": self.tokens_per_second,
            "finish_reasons": [reason or "running" for reason in self.finish],
            "mean_logprob": sum(logprobs) / len(logprobs) if logprobs else None,
        }


def stats_html(stats: dict) -> str:
    """The stats as a row of small cards; with `memorised` (see generate_tab.memorisation), a
    card for the copied share and the longest copied span, highlighted, below them."""

    def fmt(value, spec):
        return "–" if value is None else format(value, spec)

    cards = [
        ("tokens", str(stats["tokens"])),
        ("time to first token", f"{fmt(stats['time_to_first_token_s'], '.3f')} s"),
        ("tokens / s", fmt(stats["tokens_per_second"], ".1f")),
        ("mean log p", fmt(stats["mean_logprob"], ".2f")),
        ("finished", ", ".join(stats["finish_reasons"])),
    ]
    copied = ""
    if "memorised" in stats:
        meter = stats["memorised"]
        if meter is None:
            cards.append(("copied 8-grams", "no index in this bundle"))
        else:
            percent = None if meter["share"] is None else 100 * meter["share"]
            cards.append(("copied 8-grams", f"{fmt(percent, '.0f')} %"))
            if meter["span_words"]:
                span = html.escape(meter["span"])
                copied = (
                    '<div class="copied">longest span copied from the training text '
                    f"({meter['span_words']} words): <mark>{span}</mark></div>"
                )
    # the server's own figures, which ui/click_speed.py's script shows beside its own from the click
    stream = {
        "time to first token": stats["time_to_first_token_s"],
        "tokens / s": stats["tokens_per_second"],
    }

    def value_cell(label: str, value: str) -> str:
        figure = stream.get(label)
        data = "" if figure is None else f' data-stream="{figure:.6g}"'
        return f'<div class="stat-value"{data}>{html.escape(value)}</div>'

    body = "".join(
        f'<div class="stat">{value_cell(label, value)}<div class="stat-label">{label}</div></div>'
        for label, value in cards
    )
    return f'<div class="stats">{body}</div>{copied}'
