"""The app's benchmark summary (ui/benchmarks.json) is what bench/app_summary.py writes from the
committed bench/results, so the Models tab and the results cannot drift apart."""

from __future__ import annotations

import json

from bench import app_summary
from bench.common import RESULTS
from ui import models_tab


def test_the_committed_summary_is_what_bench_writes_from_the_committed_results(tmp_path):
    assert app_summary.SUMMARY == models_tab.SUMMARY  # bench writes the file the app reads
    written = tmp_path / "benchmarks.json"
    app_summary.main(["--results", str(RESULTS), "--out", str(written)])
    committed = app_summary.SUMMARY.read_text(encoding="utf-8")
    assert written.read_text(encoding="utf-8") == committed, (
        "ui/benchmarks.json is stale: run `python -m bench summary`"
    )
    summary = json.loads(committed)
    assert len(summary["speed"]) > 10 and summary["sampling"] and summary["quality"]["rows"]


def test_rows_against_each_peer_at_its_precision(tmp_path):
    speeds = {
        "ctranslate2/int8": {"greedy": 100.0, "beam 4": 50.0},
        "transformers/fp16": {"greedy": 10.0},  # ours has no fp16: against our fp32
        "matmuls only/fp32": {"greedy": 500.0},  # a bound, not a peer
        "scriptorium/fp32": {"greedy": 40.0},
        "scriptorium/int8": {"greedy": 80.0},
    }
    (tmp_path / "seq2seq.json").write_text(json.dumps({"tok_per_s": speeds}))
    (tmp_path / "decode.json").write_text("{")  # unreadable: no rows, no error
    quality = {
        "split": "test",
        "perplexity": {"fp32": 50.0, "int8": 50.5},
        "change_pct": {"int8": 1},
    }
    (tmp_path / "quality.json").write_text(json.dumps(quality))
    summary = app_summary.summary(tmp_path)
    assert summary["speed"] == [
        {
            "model": "seq2seq",
            "workload": "greedy",
            "peer": "ctranslate2 int8",
            "peer_tok_s": 100.0,
            "ours_tok_s": 80.0,
        },
        {
            "model": "seq2seq",
            "workload": "greedy",
            "peer": "transformers fp16",
            "peer_tok_s": 10.0,
            "ours_tok_s": 40.0,
        },
    ]
    assert summary["sampling"] == []
    assert summary["quality"] == {
        "split": "test",
        "rows": [
            {"precision": "fp32", "perplexity": 50.0, "change_pct": 0.0},
            {"precision": "int8", "perplexity": 50.5, "change_pct": 1},
        ],
    }
