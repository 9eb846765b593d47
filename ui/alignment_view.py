"""The alignment heat map: a `runtime.alignment.Alignment` drawn as a Gradio native scatter plot,
and the line saying what the model's attention is and what seed 001 says to look for in it.

Gradio 6.17's native plots draw a Vega-Lite spec the page builds itself: a plot chooses the mark
(`gr.ScatterPlot`: points), the columns and their types, but not the mark's shape or size. (A
value given as a dict may name another mark, and "rect" fills each cell, but for any mark but
"point" the page sums y over a nominal x, and the rows collapse into one "NaN" row; the canvas
takes no CSS.) So each cell is a small ring whose colour runs from the theme's lightest to its
darkest primary shade with the weight, and cells under `MIN_WEIGHT` are left out (a row's
strongest cell and a column's strongest cell are always kept, so every token keeps its label) so
that where attention goes stands out rather than a field of faint rings. Text axes are sorted as
text by the browser (the `sort=[…]` that would keep their order makes the page draw nothing,
ui/plots.py), so every token is numbered: "03 beginning" keeps its place and two " the" stay two
rows. Source tokens run left to right (x, labels upright to save width), output tokens top to
bottom (y); the plot grows 20 px a row (Vega's default band).

Length: an upright label needs about 13 px. A source of up to `NARROW_TOKENS` tokens fits a
390 px phone beside the output labels; a longer one keeps the plot at least 600 px wide, and it
scrolls sideways inside its box on a phone (ui/style.py, `.alignment-scroll`, `.alignment-wide`).
Each axis shows at most `MAX_TOKENS` tokens (40 fill 600 px); the caption says how many were left
out. This module runs no model.
"""

from __future__ import annotations

import gradio as gr
import numpy as np
import pandas as pd

from runtime.alignment import Alignment
from runtime.manifest import Manifest
from runtime.recurrent import ATTENTION, RECURRENT_ARCHITECTURES

SOURCE, OUTPUT, WEIGHT = "source token", "output token", "attention"
MAX_TOKENS = 40  # per axis: 40 upright labels fit the plot's 600 px minimum
NARROW_TOKENS = 16  # source tokens that fit a phone's width without scrolling
MIN_WEIGHT = 0.05  # weaker cells are left out unless they are their row's or column's strongest
LABEL_CHARACTERS = 14  # a longer token is cut with "…", so labels keep the plot's left edge
# ui/style.py sizes these: the scrolling box, the plot, and a plot that needs 600 px
SCROLL_CLASS, PLOT_CLASS, WIDE_CLASS = "alignment-scroll", "alignment-plot", "alignment-wide"


def token_label(number: int, token: str, width: int) -> str:
    """The axis label of the `number`-th token: zero-padded so text order is token order, the
    token without its surrounding spaces (a blank token as "␣"), cut to `LABEL_CHARACTERS`.

    >>> token_label(3, " beginning", 2)
    '03 beginning'
    >>> token_label(12, " ", 2)
    '12 ␣'
    """
    text = token.strip() or "␣"
    if len(text) > LABEL_CHARACTERS:
        text = text[: LABEL_CHARACTERS - 1] + "…"
    return f"{number:0{width}d} {text}"


def cells(found: Alignment, limit: int = MAX_TOKENS) -> pd.DataFrame:
    """One row per cell drawn, for the first `limit` tokens on each axis: the source label, the
    output label and the weight, output rows in order. A cell is drawn when its weight is at
    least `MIN_WEIGHT` or it is the strongest of its row or of its column.

    >>> weights = np.array([[0.97, 0.03], [0.6, 0.4]])
    >>> cells(Alignment(("a", "b"), ("x", "y"), weights, "")).values.tolist()
    [['1 a', '1 x', 0.97], ['1 a', '2 y', 0.6], ['2 b', '2 y', 0.4]]
    """
    sources, outputs = found.source_tokens[:limit], found.output_tokens[:limit]
    weights = np.asarray(found.weights, dtype=np.float64)[: len(outputs), : len(sources)]  # (T, S)
    drawn = (
        (weights >= MIN_WEIGHT)
        | (weights == weights.max(axis=1, keepdims=True))
        | (weights == weights.max(axis=0, keepdims=True))
    )
    source_labels = [token_label(i, t, len(str(len(sources)))) for i, t in enumerate(sources, 1)]
    output_labels = [token_label(i, t, len(str(len(outputs)))) for i, t in enumerate(outputs, 1)]
    rows = [
        (source_labels[s], output_labels[t], round(float(weights[t, s]), 3))
        for t, s in zip(*np.nonzero(drawn))
    ]
    return pd.DataFrame(rows, columns=[SOURCE, OUTPUT, WEIGHT]).astype({WEIGHT: "float64"})


def caption(model: str, found: Alignment, limit: int = MAX_TOKENS) -> str:
    """What the plot shows, in one line: whose weights, from where, what was left out."""
    line = (
        f"{model}: each row is an output token, coloured where the model looked in the source "
        f"while writing it ({found.method}; a row sums to 1; cells under {MIN_WEIGHT:.0%} are "
        "not drawn)."
    )
    cut = [
        f"{len(tokens) - limit} {name} tokens"
        for name, tokens in (("source", found.source_tokens), ("output", found.output_tokens))
        if len(tokens) > limit
    ]
    if cut:
        line += f" Only the first {limit} of each axis are shown: {' and '.join(cut)} left out."
    return line


def attends(manifest: Manifest) -> bool:
    """Whether the model has source attention to draw: a seq2seq model, and for a recurrent one
    (runtime/recurrent.py) only when its decoder step outputs the attention α."""
    if manifest.task != "seq2seq":
        return False
    if manifest.architecture not in RECURRENT_ARCHITECTURES:
        return True
    decoder = manifest.graphs.get("decoder")
    return decoder is not None and ATTENTION in decoder.outputs


def model_line(manifest: Manifest) -> str:
    """One line: what the model is, how it attends to its source ("**No attention**: a GRU
    encoder–decoder (Cho et al. 2014) that …" for architecture "gru"), and what seed 001 says to
    look for."""
    architecture = manifest.architecture or "model"
    if manifest.task != "seq2seq":
        return f"**No source attention**: a decoder-only {architecture} has no source to align."
    if architecture == "gru":
        return (
            "**No attention, no heat map**: a GRU encoder–decoder (Cho et al. 2014) that squeezes "
            "the whole source into one context vector before it writes a word, so there are no "
            "attention weights to draw. Seed 001: that one vector degrades on long sentences; "
            "rewrite a long verse here and with the GRU attention model to see it."
        )
    if architecture == "gru-attention":
        return (
            "**Attention**: a bidirectional GRU encoder and a GRU decoder with additive attention "
            "(Bahdanau et al. 2015), which weighs every source token anew for each word it "
            "writes: one heat-map row per word. Seed 001: attention aligns output words with "
            "source words (a verse kept word for word draws a diagonal) and holds up on long "
            "sentences, where one context vector degrades."
        )
    layers, heads = manifest.num_layers, manifest.num_heads
    shape = f" ({layers} decoder layers × {heads} heads, averaged)" if layers and heads else ""
    return (
        f"**Attention**: a transformer encoder–decoder ({architecture}) whose decoder reads the "
        f"whole source at every word it writes{shape}. Seed 001: attention aligns output words "
        "with source words (a verse kept word for word draws a diagonal), where a single "
        "context vector degrades on long sentences."
    )


def heat_map(model: str, found: Alignment) -> dict:
    """The update that shows `found`, computed with `model`, in the plot `alignment_plot` made."""
    wide = len(found.source_tokens) > NARROW_TOKENS
    return gr.update(
        value=cells(found),
        caption=caption(model, found),
        elem_classes=[PLOT_CLASS, WIDE_CLASS] if wide else [PLOT_CLASS],
        visible=True,
    )


def alignment_plot(elem_id: str) -> gr.ScatterPlot:
    """The empty, hidden heat map (`heat_map` fills it) in its sideways-scrolling box."""
    with gr.Column(elem_classes=SCROLL_CLASS):
        return gr.ScatterPlot(
            x=SOURCE,
            y=OUTPUT,
            color=WEIGHT,
            x_title="source (what the model read)",
            y_title="output (what it wrote)",
            color_title="attention",
            x_label_angle=-90,
            tooltip="all",
            label="Where the model looked (cross-attention)",
            visible=False,
            elem_id=elem_id,
            elem_classes=PLOT_CLASS,
        )
