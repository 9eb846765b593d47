"""bench.startup measures the real app: it starts, answers, is stopped; the result is written."""

from __future__ import annotations

import json

from bench import startup


def test_startup_benchmark_writes_the_median_of_its_runs(tmp_path):
    out = tmp_path / "startup.json"
    assert startup.main(["--repeats", "1", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    (seconds,) = result["runs_seconds"]
    assert 0 < seconds < startup.TIMEOUT_SECONDS
    assert "bible-lm/int8" in result["models"]
    assert f"{seconds:.2f}" in result["table"]
