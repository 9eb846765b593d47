"""bench.common.write_results records paths that hold on any machine: relative to the repository
inside it, `<cache>/…` inside Scriptorium's cache, `~/…` inside the home folder."""

from __future__ import annotations

import json
from pathlib import Path

from bench import common

REPO = Path(__file__).resolve().parents[1]


def test_results_record_paths_relative_to_the_repository(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("SCRIPTORIUM_CACHE", str(cache))
    payload = {
        "bundle": str(REPO / "models" / "bible-lm" / "fp32"),
        "verses": str(REPO / "data" / "verses.tsv"),
        "flagship": str(cache / "gguf" / "b179" / "SmolLM2-135M-Instruct.Q4_1"),
        "work": str(Path.home() / "scratch" / "bench"),
        "command": f"python -m bench.quality --out {REPO / 'bench' / 'results' / 'quality.json'}",
        "runs": [{"path": str(REPO)}, 3, None],
        "url": "http://127.0.0.1:8766/v1/completions",
        "elsewhere": "/opt/models/x",
        "inside_another": f"/opt{REPO}/x",
    }
    out = tmp_path / "results" / "quality.json"
    common.write_results(out, payload)
    assert json.loads(out.read_text()) == {
        "bundle": "models/bible-lm/fp32",
        "verses": "data/verses.tsv",
        "flagship": "<cache>/gguf/b179/SmolLM2-135M-Instruct.Q4_1",
        "work": "~/scratch/bench",
        "command": "python -m bench.quality --out bench/results/quality.json",
        "runs": [{"path": "."}, 3, None],
        "url": "http://127.0.0.1:8766/v1/completions",
        "elsewhere": "/opt/models/x",
        "inside_another": f"/opt{REPO}/x",
    }
