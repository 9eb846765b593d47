"""Matplotlib figures for the decoding study and the length sweep. Pure: data in, Figure out.

Figures are built with `matplotlib.figure.Figure` (not pyplot), so nothing global keeps them
alive between requests; matplotlib is imported on first use, which keeps app startup short.
This module runs no model.
"""

from __future__ import annotations

QUALITY, DIVERSITY = "#d97706", "#4f46e5"


def decoding_study(rows: list[dict]):
    """Two bar panels as in seed 000: the top-k sweep (p = 1) and the top-p sweep (k = 0).

    `rows` hold "sweep" ("top-k" or "top-p"), "label", "bleu" and "self_bleu" (None is drawn as 0).
    """
    from matplotlib.figure import Figure

    figure = Figure(figsize=(10, 3.8), layout="constrained")
    panels = figure.subplots(1, 2, sharey=True)
    for axes, sweep, title in zip(panels, ("top-k", "top-p"), ("top-k (p = 1.0)", "top-p (k = 0)")):
        chosen = [row for row in rows if row["sweep"] == sweep]
        xs = range(len(chosen))
        quality = [row["bleu"] or 0.0 for row in chosen]
        diversity = [row["self_bleu"] or 0.0 for row in chosen]
        bars = axes.bar([x - 0.2 for x in xs], quality, 0.4, color=QUALITY, label="quality: BLEU")
        axes.bar_label(bars, fmt="%.1f", fontsize=8)
        bars = axes.bar(
            [x + 0.2 for x in xs],
            diversity,
            0.4,
            color=DIVERSITY,
            label="Self-BLEU (lower = more diverse)",
        )
        axes.bar_label(bars, fmt="%.1f", fontsize=8)
        axes.set_xticks(list(xs), [row["label"] for row in chosen])
        axes.set_title(title)
        axes.spines[["top", "right"]].set_visible(False)
    panels[0].set_ylabel("score (0–100)")
    figure.legend(
        *panels[0].get_legend_handles_labels(), loc="outside lower center", ncols=2, frameon=False
    )
    return figure


def length_sweep(requested: list, subwords: list, characters: list):
    """Achieved vs requested length: ratios on a line with the diagonal where they would be
    equal, or categories ("short", …) side by side when the requests are not numbers."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=(6, 3.8), layout="constrained")
    axes = figure.subplots()
    numeric = all(isinstance(value, (int, float)) for value in requested)
    xs = list(requested) if numeric else list(range(len(requested)))
    if numeric:
        top = max(xs)
        axes.plot([0, top], [0, top], color="#a8a29e", linestyle="--", label="achieved = requested")
        axes.set_xlim(0, top * 1.05)
        axes.set_xlabel("requested ratio (length_ratio token)")
    else:
        axes.axhline(1.0, color="#a8a29e", linestyle="--", label="same length as the source")
        axes.set_xticks(xs, [str(value) for value in requested])
        axes.set_xlabel("requested length (length token)")
    axes.plot(xs, subwords, marker="o", color=QUALITY, label="achieved, subwords")
    axes.plot(xs, characters, marker="s", color=DIVERSITY, label="achieved, characters")
    axes.set_ylabel("achieved ratio (output / source)")
    axes.spines[["top", "right"]].set_visible(False)
    axes.legend(fontsize=8, frameon=False)
    return figure
