"""bench.breakdown: one generate call split into prefill, graph steps and the rest."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import runtime
from bench import breakdown

BIBLE_LM = Path(__file__).resolve().parents[1] / "models" / "bible-lm" / "int8"


def test_parts_add_up_to_the_call_and_the_model_is_restored():
    gen = runtime.load(BIBLE_LM, threads=1)
    start, step = gen.model.start, gen.model.step
    config = runtime.GenerationConfig(max_new_tokens=12, min_new_tokens=12, seed=0)
    calls = []

    def ceiling_run():
        calls.append(1)
        time.sleep(0.002)

    seconds = breakdown.time_parts(gen, ["In the beginning"], config, ceiling_run, repeats=3)
    assert len(calls) == 4  # a warm-up round, then one per repeat
    assert seconds["ceiling"] >= 0.002
    assert all(seconds[part] > 0 for part in breakdown.PARTS)
    # Medians of parts need not add up exactly; with 3 quiet rounds they come close.
    assert sum(seconds[part] for part in breakdown.PARTS) == pytest.approx(
        seconds["total"], rel=0.25
    )
    assert (gen.model.start, gen.model.step) == (start, step)
    table = breakdown.table(seconds, 12)
    assert "| graph steps |" in table and "ceiling: weight MatMuls alone" in table
