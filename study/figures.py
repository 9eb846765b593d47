"""Matplotlib figures of the studies, for model cards and `scriptorium study` (not the app).

The app draws its charts with Gradio's native plots (ui/plots.py), so the Space needs no
matplotlib; this module is left out of the Space (spaces/build.py).
"""

from __future__ import annotations

import numpy as np


def masking_plot(
    results: dict[str, dict], title: str = "Masked-word accuracy against masking ratio"
):
    """One panel per model: top-k accuracy against the masking ratio (seed 000, figure 17), plus,
    for several models, a panel with every model's top-1 (figure 16). `results`: {model name:
    masking_study(...)}."""
    from matplotlib.figure import Figure

    names = list(results)
    columns = len(names) + (len(names) > 1)
    figure = Figure(figsize=(4 * columns, 3.4), layout="constrained")
    panels = list(np.atleast_1d(figure.subplots(1, columns, sharey=True)))
    for axes, name in zip(panels, names):
        result = results[name]
        percent = [100 * r for r in result["ratios"]]
        for k in result["top_k"]:
            axes.plot(percent, [100 * a for a in result["accuracy"][str(k)]], marker="o",
                      markersize=3, label=f"top {k}")  # fmt: skip
        axes.set_title(name)
        axes.set_xlabel("masked words (%)")
        axes.grid(alpha=0.3)
        axes.legend(fontsize=8)
    if len(names) > 1:
        for name in names:
            result = results[name]
            percent = [100 * r for r in result["ratios"]]
            panels[-1].plot(percent, [100 * a for a in result["accuracy"]["1"]], marker="o",
                            markersize=3, label=name)  # fmt: skip
        panels[-1].set_title("top 1, every model")
        panels[-1].set_xlabel("masked words (%)")
        panels[-1].grid(alpha=0.3)
        panels[-1].legend(fontsize=8)
    panels[0].set_ylabel("accuracy (%)")
    figure.suptitle(title, fontsize=10)
    return figure
