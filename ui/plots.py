"""The app's charts as Gradio native plots: pure functions from results to `gr.LinePlot` values.

Gradio draws its native plots in the browser from a pandas DataFrame (pandas is a Gradio
dependency), so the Space needs no plotting library. Every chart here is "lines over x for
several series": `lines` builds that chart's long-format frame (one row per point: x, value,
series) and `line_plot` the `gr.LinePlot` showing it, with the x order fixed when x is text.
`decoding_study` and `length_sweep` are the two charts the app draws with them.
This module runs no model.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import gradio as gr
import pandas as pd

QUALITY, DIVERSITY, GUIDE = "#d97706", "#4f46e5", "#a8a29e"
X, VALUE, SERIES = "x", "value", "series"


def lines(xs: Sequence, series: dict[str, Sequence[float | None]]) -> pd.DataFrame:
    """Long-format frame of `series` (name → one y per x, None for no point) over `xs`.

    Columns are `X`, `VALUE` and `SERIES`; rows follow the series' order, then x's order, and a
    None is left out, so a line simply skips it.

    >>> lines(["a", "b"], {"s": [1.0, None], "t": [2.0, 3.0]}).values.tolist()
    [['a', 1.0, 's'], ['a', 2.0, 't'], ['b', 3.0, 't']]
    """
    for name, ys in series.items():
        if len(ys) != len(xs):
            raise ValueError(f"`series` {name!r} must have {len(xs)} values, got {len(ys)}")
    rows = [
        (x, float(y), name) for name, ys in series.items() for x, y in zip(xs, ys) if y is not None
    ]
    frame = pd.DataFrame(rows, columns=[X, VALUE, SERIES])
    return frame.astype({VALUE: "float64"})


def numbered(labels: Sequence[str]) -> dict[str, str]:
    """Each distinct label, numbered in order of first appearance so that sorting the numbered
    labels as text keeps that order.

    >>> numbered(["k = 5", "k = 0", "k = 5"])
    {'k = 5': '1. k = 5', 'k = 0': '2. k = 0'}
    """
    distinct = list(dict.fromkeys(labels))
    width = len(str(len(distinct)))
    return {label: f"{i:0{width}d}. {label}" for i, label in enumerate(distinct, start=1)}


def line_plot(
    frame: pd.DataFrame,
    *,
    x_title: str,
    y_title: str,
    colors: dict[str, str] | None = None,
    **plot_arguments,
) -> gr.LinePlot:
    """A `gr.LinePlot` of a `lines` frame: one coloured line per series. When x is text, the
    x axis keeps the frame's order of first appearance: each label is numbered in that order
    (`numbered`), as the browser sorts text labels. (Gradio 6.17's `sort=[...]` would keep the
    order, but the browser then cannot clone the chart's spec and draws nothing.)
    Extra keyword arguments go to `gr.LinePlot` (e.g. `title`, `y_lim`)."""
    if not pd.api.types.is_numeric_dtype(frame[X]):
        frame = frame.assign(**{X: frame[X].map(numbered(frame[X]))})
    return gr.LinePlot(
        frame,
        x=X,
        y=VALUE,
        color=SERIES,
        x_title=x_title,
        y_title=y_title,
        color_title="",
        color_map=colors,
        **plot_arguments,
    )


def decoding_study(rows: list[dict]) -> gr.LinePlot:
    """Quality (BLEU) and diversity (Self-BLEU, lower = more diverse) per setting, in the order
    of `rows`, a line per sweep and score: seed 000's top-k sweep (p = 1) and top-p sweep (k = 0).

    `rows` hold "sweep" ("top-k" or "top-p"), "label", "bleu" and "self_bleu" (None: no point).
    """
    labels = [row["label"] for row in rows]
    series, colors = {}, {}
    for sweep in dict.fromkeys(row["sweep"] for row in rows):
        for key, score, color in (
            ("bleu", "quality: BLEU", QUALITY),
            ("self_bleu", "Self-BLEU (lower = more diverse)", DIVERSITY),
        ):
            name = f"{sweep}, {score}"
            series[name] = [row[key] if row["sweep"] == sweep else None for row in rows]
            colors[name] = color
    return line_plot(
        lines(labels, series),
        x_title="setting (top-k sweep with p = 1, then top-p sweep with k = 0)",
        y_title="score (0–100)",
        colors=colors,
        y_lim=[0, 100],  # both scores are 0–100 (an open bound, None, stopped the chart drawing)
    )


def length_sweep(requested: list, subwords: list, characters: list) -> gr.LinePlot:
    """Achieved vs requested length: ratios with the diagonal where they would be equal, or
    categories ("short", …) in their order with the line where output and source are as long."""
    numeric = all(isinstance(value, (int, float)) for value in requested)
    guide = (
        ("achieved = requested", list(requested))
        if numeric
        else ("same length as the source", [1.0] * len(requested))
    )
    frame = lines(
        requested if numeric else [str(value) for value in requested],
        {
            guide[0]: guide[1],
            "achieved, subwords": subwords,
            "achieved, characters": characters,
        },
    )
    return line_plot(
        frame,
        x_title="requested ratio (length_ratio token)"
        if numeric
        else "requested length (length token)",
        y_title="achieved ratio (output / source)",
        colors={guide[0]: GUIDE, "achieved, subwords": QUALITY, "achieved, characters": DIVERSITY},
    )


def short_names(names: list[str]) -> dict[str, str]:
    """Each name without the words all of them share, so a legend of several series per model
    fits under its chart: "masked-lm-base (int8)" and "masked-lm-large (int8)" become "base" and
    "large". A single name, or names that would become empty, are kept.

    >>> short_names(["masked-lm-base (int8)", "masked-lm-large (int8)"])
    {'masked-lm-base (int8)': 'base', 'masked-lm-large (int8)': 'large'}
    """
    words = {name: re.split(r"[-\s]+", name) for name in names}
    shared = set.intersection(*map(set, words.values())) if len(names) > 1 else set()
    short = {name: " ".join(w for w in parts if w not in shared) for name, parts in words.items()}
    return (
        short
        if all(short.values()) and len(set(short.values())) == len(names)
        else {name: name for name in names}
    )


def masking_study(results: dict[str, dict]) -> gr.LinePlot:
    """Top-k accuracy (%) against the share of masked words (%), a line per model and k (seed
    000, figures 16-17). `results`: {model name: study.masking.masking_study(...)}."""
    short = short_names(list(results))
    frames = [
        lines(
            [100 * ratio for ratio in result["ratios"]],
            {
                f"{short[name]}, top {k}": [100 * a for a in result["accuracy"][str(k)]]
                for k in result["top_k"]
            },
        )
        for name, result in results.items()
    ]
    return line_plot(
        pd.concat(frames, ignore_index=True),
        x_title="masked words (%)",
        y_title="accuracy (%)",
        y_lim=[0, 100],
    )
