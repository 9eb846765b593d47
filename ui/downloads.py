"""Downloadable results: a Generate or Compare run as JSON, Compare's metrics as CSV.

The JSON record (docs/APP.md, "Downloads") holds the endpoint's settings, and per model its
display name and the sha256 of its bundle's manifest.json (which lists every file's checksum, so
it pins the exact model), the outputs, each sample's token ids and per-token log-probabilities
(null for beam search, which has none per token) and the metrics. Files are written to a fresh
temporary folder, from which Gradio serves them. This module runs no model.
"""

from __future__ import annotations

import csv
import json
import tempfile
from pathlib import Path

from runtime.bundle import sha256_of

SCHEMA = "scriptorium-result/1"


def manifest_sha256(registry, model: str) -> str | None:
    """sha256 (hex) of the model's manifest.json; None where it is not on this machine
    (a `--backend` model)."""
    path = Path(registry.paths[model]) / "manifest.json"
    return sha256_of(path) if path.is_file() else None


def run_record(registry, model: str, collector) -> dict:
    """One model's part of a record: the model and what the run produced."""
    beam = not any(collector.logprobs)
    return {
        "model": model,
        "manifest_sha256": manifest_sha256(registry, model),
        "outputs": list(collector.texts),
        "token_ids": [list(ids) for ids in collector.token_ids],
        "logprobs": None if beam else [list(row) for row in collector.logprobs],
        "finish_reasons": list(collector.finish),
    }


def record(endpoint: str, settings: dict, runs: list[dict], metrics: dict | list) -> dict:
    """The whole record of one run of `endpoint` with its `settings` (its API arguments)."""
    return {
        "schema": SCHEMA,
        "endpoint": endpoint,
        "settings": settings,
        "runs": runs,
        "metrics": metrics,
    }


def button(record: dict | None, write=None):
    """A `gr.DownloadButton` update offering `record` (hidden while there is none);
    `write` turns the record into a file path (default: `write_json`)."""
    import gradio as gr

    if record is None:
        return gr.DownloadButton(visible=False)
    return gr.DownloadButton(value=(write or write_json)(record), visible=True)


def _folder() -> Path:
    return Path(tempfile.mkdtemp(prefix="scriptorium-result-"))


def write_json(result: dict) -> str:
    """Write `result` to `<endpoint>.json` in a fresh folder; return the path."""
    path = _folder() / f"{result['endpoint']}.json"
    path.write_text(json.dumps(result, ensure_ascii=False, indent=1))
    return str(path)


def write_csv(headers: list[str], rows: list[list], name: str) -> str:
    """Write a table as `<name>.csv` in a fresh folder; return the path."""
    path = _folder() / f"{name}.csv"
    with path.open("w", newline="") as file:
        writer = csv.writer(file)
        writer.writerow(headers)
        writer.writerows(rows)
    return str(path)
