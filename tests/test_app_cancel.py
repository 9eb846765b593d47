"""A visitor who leaves stops their generation (issue 37, item 4, in the app). Gradio marks the
event of a client that has gone as dead, stops iterating the tab's generator and closes it
(gradio/queueing.py, `reset_iterators`); closing the Generate tab's stream cancels its request,
and the engine drops it at its next step instead of generating to the end."""

from __future__ import annotations

import time
from pathlib import Path

import runtime
from ui.generate_tab import stream_generation
from ui.registry import ModelRegistry

MODELS = Path(__file__).resolve().parent.parent / "models"
NAME = "bible-lm (int8)"


def test_closing_a_tab_stream_stops_its_generation_in_the_engine():
    registry = ModelRegistry.discover([MODELS])
    gen = registry.get(NAME)
    assert gen.engine is not None  # batch-invariant int8: its generations run in the engine
    model_step = gen.model.step

    def slow_step(*args, **kwargs):  # 20 ms a step: 100 steps would take 2 s
        time.sleep(0.02)
        return model_step(*args, **kwargs)

    gen.model.step = slow_step
    config = runtime.GenerationConfig(max_new_tokens=100, min_new_tokens=100)
    stream = stream_generation(registry, NAME, "In the beginning", {}, config)
    next(stream)  # the first update: the generation is running
    stream.close()  # what Gradio does when the event's client has gone
    steps = gen.engine.steps
    time.sleep(0.5)  # 25 more steps' time, were it still running
    assert gen.engine.steps - steps <= 1
    assert gen.engine.steps < 50
