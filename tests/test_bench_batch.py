"""bench/batch.py: a short run on the shipped bible-lm int8 writes a row per level with the same
texts on both paths and a model-alone ceiling."""

from __future__ import annotations

import json

from bench import batch


def test_a_short_batch_run_reports_same_texts_and_a_ceiling(tmp_path):
    out = tmp_path / "batch.json"
    argv = ["--streams", "1", "3", "--requests-per-stream", "2", "--max-tokens", "6"]
    assert (
        batch.main([*argv, "--bundles", "bible-lm/int8", "--threads", "1", "--out", str(out)]) == 0
    )
    results = json.loads(out.read_text())["results"]
    assert [r["streams"] for r in results] == [1, 3]
    for entry in results:
        assert entry["same_texts"] == entry["requests"] == 2 * entry["streams"]
        for path in ("off", "on"):
            assert entry[path]["tokens_per_s"] > 0
            assert 0 < entry[path]["p50_s"] <= entry[path]["p95_s"]
        assert entry["ceiling_tokens_per_s"] > 0
        ratio = entry["ceiling_tokens_per_s"] / entry["off"]["tokens_per_s"]
        assert entry["ceiling_speedup"] == ratio
