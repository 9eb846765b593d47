"""ui/downloads.py with the Generate and Compare tabs' own functions on the tiny models: the JSON
record's settings, model digest, outputs, token ids and log-probabilities; the metrics CSV."""

from __future__ import annotations

import csv
import hashlib
import json
from pathlib import Path

import runtime
from tests.app_fixtures import models_tree
from ui import compare_tab, downloads, generate_tab
from ui.registry import ModelRegistry

__all__ = ["models_tree"]  # a session fixture, used by name
MODEL = "tiny-lm (fp32)"


def test_generate_record_round_trips_through_json(models_tree):
    registry = ModelRegistry.discover([models_tree])
    config = runtime.GenerationConfig(
        max_new_tokens=10, do_sample=True, temperature=0.8, num_return_sequences=2, seed=3
    )
    settings = {"model": MODEL, "prompt": "In the beginning", "seed": 3}
    *_, last = generate_tab.stream_generation(
        registry, MODEL, "In the beginning", {}, config, settings
    )
    record = json.loads(Path(downloads.write_json(last[3])).read_text())
    assert record["schema"] == downloads.SCHEMA and record["endpoint"] == "generate"
    assert record["settings"] == settings
    (run,) = record["runs"]
    manifest = registry.paths[MODEL] / "manifest.json"
    assert run["model"] == MODEL
    assert run["manifest_sha256"] == hashlib.sha256(manifest.read_bytes()).hexdigest()
    expected = registry.get(MODEL).generate("In the beginning", config)
    assert run["outputs"] == [out.text for out in expected]
    assert run["token_ids"] == [out.token_ids for out in expected]
    for logprobs, out in zip(run["logprobs"], expected):
        assert logprobs == [float(value) for value in out.logprobs]
    assert record["metrics"]["tokens"] == sum(len(ids) for ids in run["token_ids"])
    assert last[0].startswith(run["outputs"][0])


def test_compare_record_and_metrics_csv(models_tree):
    registry = ModelRegistry.discover([models_tree])
    columns = [(MODEL, "greedy"), ("tiny-lm (int8)", "beam 5")]
    *_, (texts, rows, collectors) = compare_tab.run_columns(
        registry, "The word", {}, columns, 6, 1, 0
    )
    runs = [downloads.run_record(registry, m, c) for (m, _), c in zip(columns, collectors)]
    metric_rows = [dict(zip(compare_tab.METRIC_HEADERS, row)) for row in rows]
    record = downloads.record("compare", {"seed": 0}, runs, metric_rows)
    assert [run["outputs"][0] for run in record["runs"]] == texts
    assert record["runs"][1]["logprobs"] is None, "beam search has no per-token log-probs"
    greedy = registry.get(MODEL).generate("The word", runtime.GenerationConfig(max_new_tokens=6))
    assert record["runs"][0]["token_ids"] == [greedy[0].token_ids]
    with open(compare_tab.metrics_csv(record), newline="") as file:
        table = list(csv.reader(file))
    assert table[0] == compare_tab.METRIC_HEADERS
    assert [row[1:3] for row in table[1:]] == [[MODEL, "greedy"], ["tiny-lm (int8)", "beam 5"]]
    assert table[1][3] == str(rows[0][3])
