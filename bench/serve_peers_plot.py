"""bench serve-peers' plot: output tokens/s, TTFT p95 and peak memory against clients, one colour
per server (bench/serve_peers.py measures; this module only draws)."""

from __future__ import annotations

from pathlib import Path

from .serve_peers_schemas import OURS, OURS_RAY, PEER


def plot(results: list[dict], path: Path, title: str) -> None:
    """Output tokens/s, TTFT p95 and peak memory (the process tree's PSS, and the engine
    process's dashed) against clients, one colour per server, as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (rate, ttft, memory) = plt.subplots(1, 3, figsize=(15, 4))
    colours = {OURS: "tab:blue", OURS_RAY: "tab:green", PEER: "tab:orange"}
    for server, colour in colours.items():
        rows = sorted((r for r in results if r["server"] == server), key=lambda r: r["clients"])
        if not rows:
            continue
        counts = [r["clients"] for r in rows]
        rate.plot(counts, [r["tokens_per_second"] for r in rows], "o-", color=colour, label=server)
        ttft_p95 = [r["ttft_p95_s"] or float("nan") for r in rows]
        ttft.plot(counts, ttft_p95, "o-", color=colour, label=server)
        tree = [r["peak_tree_pss_mb"] / 1000 for r in rows]
        engine = [r["peak_engine_pss_mb"] / 1000 or float("nan") for r in rows]  # 0: unseen
        memory.plot(counts, tree, "o-", color=colour, label=f"{server}: process tree")
        memory.plot(counts, engine, "s--", color=colour, label=f"{server}: engine process")
    counts = sorted({r["clients"] for r in results})
    labels = (
        (rate, "aggregate output tokens/s"),
        (ttft, "time to first token p95 (s)"),
        (memory, "peak PSS (GB)"),
    )
    for axes, label in labels:
        axes.set_xscale("log", base=2)
        axes.set_xticks(counts, [str(c) for c in counts])
        axes.minorticks_off()
        axes.set_xlabel("concurrent clients (3-turn conversations)")
        axes.set_ylabel(label)
        axes.set_ylim(bottom=0)
        axes.grid(alpha=0.3)
        axes.legend(fontsize=8)
    figure.suptitle(title)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    print(f"wrote {path}")
