"""Every tokens/s the app shows agrees with a stopwatch, also for a request batched with others.

The model is a tiny Llama converted from a GGUF (the flagship's path: batch-invariant, so it runs
in the engine and concurrent requests share its batches), each batched model step slowed to
`STEP_S` so that a reply takes a second or so. Compare's columns, the Arena's columns, Generate
runs and Chat replies started together, each timed from its request to its last token by the
test's own clock (the moment its shown text stops growing, as the page sees it): the tokens/s
each one shows must be within 20 % of its tokens over that time. This tests the measurement,
not the speed: the bound holds however slow or loaded the machine is.
"""

from __future__ import annotations

import threading
import time

import pytest

import runtime
from ui import arena, chat_tab, compare_tab, generate_tab
from ui.registry import ModelRegistry

STEP_S = 0.02  # seconds added to every batched model step
MAX_TOKENS = 48
TOLERANCE = 0.2
MODEL = "tiny-llama"


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    from convert.gguf import export_gguf
    from tests.gguf_models import write_tiny_gguf

    root = tmp_path_factory.mktemp("true-speed")
    bundle = root / "bundle"
    export_gguf(write_tiny_gguf(root / "model.gguf", "llama", "Q4_1"), bundle)
    gen = runtime.load(bundle, threads=1)
    assert gen.engine is not None  # concurrent requests share batches
    step = gen.model.step

    def slow_step(*args, **kwargs):
        time.sleep(STEP_S)
        return step(*args, **kwargs)

    gen.model.step = slow_step  # the engine calls the model it was given
    registry = ModelRegistry({})
    registry.add(MODEL, bundle, gen)
    return registry


class Stopwatch:
    """Times one run from its start to the moment its token count last changed."""

    def __init__(self):
        self.start = time.perf_counter()
        self.count = 0
        self.last = self.start

    def saw(self, count: int) -> None:
        if count != self.count:
            self.count, self.last = count, time.perf_counter()

    def check(self, shown: float, tokens: int) -> None:
        assert tokens == self.count and tokens >= 8, (tokens, self.count)
        true = tokens / (self.last - self.start)
        assert abs(shown - true) <= TOLERANCE * true, (
            f"shows {shown:.1f} tok/s, stopwatch {true:.1f}"
        )


def test_compare_columns_batched_together_show_their_wall_speed(registry):
    columns = [(MODEL, "greedy"), (MODEL, "top-p 0.95")]
    watches = [Stopwatch(), Stopwatch()]
    for _texts, _rows, collectors in compare_tab.run_columns(
        registry, "In the beginning", {}, columns, MAX_TOKENS, 1, 3
    ):
        for watch, collector in zip(watches, collectors):
            watch.saw(collector.count)
    for watch, row in zip(watches, _rows):
        tokens, shown = row[3], row[4]  # METRIC_HEADERS: …, "tokens", "tokens/s", …
        watch.check(shown, tokens)


def test_arena_columns_batched_together_show_their_wall_speed(registry):
    conversation = [{"role": "user", "content": "Name three rivers."}]
    columns = [(MODEL, "greedy"), (MODEL, "top-k 50")]
    watches = [Stopwatch(), Stopwatch()]
    for _texts, rows in arena.run_arena(registry, conversation, columns, MAX_TOKENS, 5):
        for watch, row in zip(watches, rows):
            watch.saw(row[3])
    for watch, row in zip(watches, rows):
        watch.check(row[4], row[3])


def _together(jobs):
    """Run every job on its own thread, started at once; their results in order."""
    results = [None] * len(jobs)
    barrier = threading.Barrier(len(jobs))

    def run(index):
        barrier.wait(timeout=60)
        results[index] = jobs[index]()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(jobs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert all(result is not None for result in results)
    return results


def test_chat_replies_and_generations_batched_with_others_show_their_wall_speed(registry):
    gen = registry.get(MODEL)

    def chat(seed):
        def reply():
            config = chat_tab.chat_config("sampling", MAX_TOKENS, 1.0, 0, 1.0, 0.0, 1.0, 0, seed)
            asked = [{"role": "user", "content": "Hello there", "tokens": None}]
            watch = Stopwatch()
            for turns, _used in chat_tab.stream_reply(gen, "", asked, config, {}):
                watch.saw(turns[-1]["tokens"])
            return watch, turns[-1]["tokens_per_second"], turns[-1]["tokens"]

        return reply

    def generate(seed):
        def run():
            config = runtime.GenerationConfig(max_new_tokens=MAX_TOKENS, min_new_tokens=MAX_TOKENS)
            config = config.replace(do_sample=True, seed=seed)
            watch = Stopwatch()
            for *_shown, result in generate_tab.stream_generation(
                registry, MODEL, "In the beginning", {}, config
            ):
                if "metrics" in result:  # the last update (the record), right after the last token
                    stats = result["metrics"]
                    watch.saw(stats["tokens"])
            return watch, stats["tokens_per_second"], stats["tokens"]

        return run

    for watch, shown, tokens in _together([chat(1), chat(2), generate(3), generate(4)]):
        watch.check(shown, tokens)
