"""`python -m bench summary` (`scriptorium bench summary`): the app's summary of bench/results.

The app's Models tab shows three benchmark tables: our decoding speed against each peer
(decode.json, seq2seq.json), the sampling kernel against each peer (sampling.json) and what
quantization does to perplexity (quality.json). This module reads those results files and writes
the numbers the tab shows into `SUMMARY` (ui/benchmarks.json), a small file the app owns and a
Space ships; the app never reads bench/results. Rerun it after a benchmark rewrites one of those
files (`scriptorium bench all` runs it last); tests/test_bench_summary.py fails when the committed
summary differs from what this module writes from the committed results.

    python -m bench summary [--results DIR] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from .common import REPO, RESULTS

SUMMARY = REPO / "ui" / "benchmarks.json"  # read by ui/models_tab.py (`SUMMARY`)
OURS = "scriptorium"
CEILING = "matmuls only"  # decode.json's bound (the graph's matmuls alone), not a peer
SPEED_FILES = {"decode.json": "causal LM", "seq2seq.json": "seq2seq"}


def _read(results: Path, name: str) -> dict | None:
    try:
        result = json.loads((results / name).read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return result if isinstance(result, dict) else None


def speed_rows(result: dict) -> list[dict]:
    """Every peer and workload of a decode.json / seq2seq.json `tok_per_s` ({"engine/precision":
    {workload: tok/s}}) against ours: scriptorium at the peer's precision, or at fp32 if it has no
    such precision.

    >>> speeds = {"hf/fp32": {"greedy": 20.0}, "scriptorium/fp32": {"greedy": 50.0}}
    >>> speed_rows({"tok_per_s": speeds})
    [{'workload': 'greedy', 'peer': 'hf fp32', 'peer_tok_s': 20.0, 'ours_tok_s': 50.0}]
    """
    speeds = result.get("tok_per_s") or {}
    ours = {key.split("/")[1]: row for key, row in speeds.items() if key.split("/")[0] == OURS}
    rows = []
    for key, peer in speeds.items():
        engine, precision = key.split("/") if "/" in key else (key, "fp32")
        if engine in (OURS, CEILING):
            continue
        mine = ours.get(precision) or ours.get("fp32") or {}
        for workload, value in peer.items():
            if workload in mine and value:
                rows.append(
                    {
                        "workload": workload,
                        "peer": f"{engine} {precision}",
                        "peer_tok_s": value,
                        "ours_tok_s": mine[workload],
                    }
                )
    return rows


def sampling_rows(result: dict) -> list[dict]:
    """Each peer of sampling.json: its time per step over ours, as the median and range of its
    cases.

    >>> times = [{"us": {"scriptorium": 2.0, "np": 20.0}}, {"us": {"scriptorium": 1.0, "np": 4.0}}]
    >>> sampling_rows({"results": times})
    [{'peer': 'np', 'cases': 2, 'median': 7.0, 'low': 4.0, 'high': 10.0}]
    """
    ratios: dict[str, list[float]] = {}
    for row in result.get("results") or []:
        times = row.get("us") or {}
        if not times.get(OURS):
            continue
        for peer, value in times.items():
            if peer != OURS and value:
                ratios.setdefault(peer, []).append(value / times[OURS])
    return [
        {
            "peer": peer,
            "cases": len(values),
            "median": statistics.median(values),
            "low": min(values),
            "high": max(values),
        }
        for peer, values in ratios.items()
    ]


def quality_rows(result: dict) -> list[dict]:
    """Each precision of quality.json: its perplexity and change against fp32 (in %)."""
    perplexity, change = result.get("perplexity") or {}, result.get("change_pct") or {}
    return [
        {"precision": precision, "perplexity": value, "change_pct": change.get(precision, 0.0)}
        for precision, value in perplexity.items()
    ]


def summary(results: Path) -> dict:
    """What the Models tab shows, from the results files in `results`: `speed` (each row with its
    model), `sampling`, and `quality` with the split it was measured on; a table whose file is
    missing or unreadable is empty."""
    speed = []
    for name, model in SPEED_FILES.items():
        result = _read(results, name)
        speed += [{"model": model, **row} for row in speed_rows(result or {})]
    quality = _read(results, "quality.json") or {}
    return {
        "speed": speed,
        "sampling": sampling_rows(_read(results, "sampling.json") or {}),
        "quality": {"split": quality.get("split", "held-out"), "rows": quality_rows(quality)},
    }


def write_summary(results: Path = RESULTS, out: Path = SUMMARY) -> dict:
    """Write `summary(results)` to `out` (indented JSON, one trailing newline); returns it."""
    payload = summary(results)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(payload, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return payload


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench summary", description=__doc__)
    parser.add_argument("--results", type=Path, default=RESULTS, help="bench/results by default")
    parser.add_argument("--out", type=Path, default=SUMMARY, help="ui/benchmarks.json by default")
    args = parser.parse_args(argv)
    payload = write_summary(args.results, args.out)
    rows = len(payload["speed"]) + len(payload["sampling"]) + len(payload["quality"]["rows"])
    print(f"wrote {args.out} ({rows} rows)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
