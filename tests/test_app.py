"""The app served on a local port with the tiny models tree, called through `gradio_client`:
every endpoint, 20 concurrent calls, same-seed determinism, server-side validation messages,
Stop really stopping generation, and an app with no models at all."""

from __future__ import annotations

import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor, wait
from pathlib import Path

import pytest
from gradio_client import Client
from gradio_client.exceptions import AppError

import app
from tests.app_fixtures import models_tree, registry_with_slow_model, serve
from ui.models_tab import NO_MODELS
from ui.registry import ModelRegistry

__all__ = ["models_tree"]  # a session fixture, used by name
REPO = Path(__file__).resolve().parents[1]
LM, LM_INT8 = "tiny-lm (fp32)", "tiny-lm (int8)"
REWRITER, TRANSLATOR, SLOW = "tiny-rewriter (fp32)", "tiny-translator (fp32)", "slow-lm (fp32)"
SAMPLE = {"mode": "sampling", "temperature": 1.0, "top_p": 0.95, "max_new_tokens": 24}


@pytest.fixture(scope="module")
def served(models_tree):
    registry, slow = registry_with_slow_model(models_tree)
    demo = app.build(registry)
    url = serve(demo)
    yield url, slow
    demo.close()


@pytest.fixture(scope="module")
def client(served) -> Client:
    return Client(served[0], verbose=False)


def generate(client, **kwargs):
    return client.predict(
        **{"model": LM, "prompt": "In the beginning", **kwargs}, api_name="/generate"
    )


def test_generate_streams_text_tokens_and_stats(client):
    job = client.submit(model=LM, prompt="In the beginning", seed=3, api_name="/generate", **SAMPLE)
    text, tokens, stats = job.result(timeout=120)
    updates = job.outputs()
    assert len(updates) >= 2  # streamed, not returned once
    assert all(update[0] == text[: len(update[0])] for update in updates)  # the text only grows
    assert text and 'class="tok p' in tokens and "alts" in tokens
    assert "time to first token" in stats and "tokens / s" in stats
    assert "copied 8-grams" in stats and "no index in this bundle" in stats  # tiny-lm has none


def test_settings_the_mode_does_not_use_do_not_fail(client):
    sampled = generate(client, num_beams=1, seed=3, **SAMPLE)[0]
    assert sampled == generate(client, num_beams=5, seed=3, **SAMPLE)[0]
    unused = dict(temperature=0, top_p=5, top_k=-1, num_beams=1, seed=-1)
    greedy = generate(client, mode="greedy", max_new_tokens=8, **unused)[0]
    assert greedy == generate(client, mode="greedy", max_new_tokens=8)[0]
    beam = generate(client, mode="beam search", num_beams=2, max_new_tokens=8, temperature=0)[0]
    assert beam == generate(client, mode="beam search", num_beams=2, max_new_tokens=8)[0]


def test_controls_change_the_prompt(client):
    plain = generate(client, mode="greedy", max_new_tokens=12)[0]
    law = generate(client, mode="greedy", max_new_tokens=12, controls={"section": "law"})[0]
    gospels = generate(client, mode="greedy", max_new_tokens=12, controls={"section": "gospels"})
    assert len({plain, law, gospels[0]}) > 1


def test_beam_search_and_several_samples(client):
    text = generate(client, mode="beam search", num_beams=3, samples=2, max_new_tokens=10)[0]
    assert "— sample 2 —" in text
    sampled = generate(client, seed=1, samples=3, **SAMPLE)[0]
    assert "— sample 3 —" in sampled


CONCURRENT_CALLS = 20
# gradio_client 2.5 (the version gradio pins) runs each prediction and its two helpers (the
# cancel check and the SSE stream) on one thread pool, so a client with fewer than
# 3 × calls + 1 workers can deadlock with every worker waiting on a helper that never gets a
# thread (gradio-app/gradio PR 13760). The default 40 workers stalled this test in 2 of 6 runs;
# 40 concurrent calls on 40 workers reproduce it at once.
CLIENT_WORKERS = 3 * CONCURRENT_CALLS + 4


def test_twenty_concurrent_calls_succeed_and_same_seed_gives_same_text(served):
    client = Client(served[0], verbose=False, max_workers=CLIENT_WORKERS)
    single = generate(client, seed=11, **SAMPLE)[0]
    other = generate(client, seed=12, **SAMPLE)[0]
    assert single != other  # the seed matters, so equality below means something

    def call(index):
        if index % 4 == 3:  # a quarter of the calls hit other endpoints meanwhile
            return client.predict(
                prompt="In the beginning", columns=2, max_new_tokens=8, api_name="/compare"
            )
        return generate(client, seed=11, **SAMPLE)

    pool = ThreadPoolExecutor(max_workers=CONCURRENT_CALLS)
    futures = [pool.submit(call, index) for index in range(CONCURRENT_CALLS)]
    done, waiting = wait(futures, timeout=180)
    pool.shutdown(wait=False, cancel_futures=True)  # a stuck call must fail the test, not hang it
    assert not waiting, f"{len(waiting)} of {CONCURRENT_CALLS} calls unanswered after 180 s"
    results = [future.result() for future in futures]
    texts = [result[0] for index, result in enumerate(results) if index % 4 != 3]
    assert len(texts) == 15 and all(text == single for text in texts)
    assert all(len(result[4]["data"]) == 2 for i, result in enumerate(results) if i % 4 == 3)


def test_compare_streams_every_column_with_metrics(client):
    job = client.submit(
        prompt="In the beginning",
        columns=3,
        max_new_tokens=16,
        samples=3,
        seed=0,
        model_1=LM,
        preset_1="top-p 0.95",
        model_2=LM_INT8,
        preset_2="greedy",
        model_3=LM,
        preset_3="beam 5",
        api_name="/compare",
    )
    *texts, table = job.result(timeout=120)
    assert len(job.outputs()) >= 2
    assert all(texts[:3]) and texts[3] == ""
    headers, rows = table["headers"], table["data"]
    assert [row[1:3] for row in rows] == [[LM, "top-p 0.95"], [LM_INT8, "greedy"], [LM, "beam 5"]]
    sampled = dict(zip(headers, rows[0]))
    assert isinstance(sampled["Self-BLEU"], float) and isinstance(sampled["UNGC-2"], float)
    assert isinstance(sampled["mean log p"], float) and sampled["tokens"] > 0
    assert dict(zip(headers, rows[1]))["Self-BLEU"] == "–"  # greedy has one sample
    assert sampled["copied 8-grams"] == "–"  # tiny-lm has no training n-gram index


def test_decoding_study(client):
    chart, table = client.predict(
        model=LM_INT8,
        prompts="In the beginning\nThe",
        samples=2,
        max_new_tokens=8,
        api_name="/decoding_study",
    )
    plot = chart["value"]  # the endpoint returns the LinePlot's update: its props and value
    assert plot["mark"] == "line" and plot["columns"] == ["x", "value", "series"]
    assert chart.get("sort") is None  # the x labels are numbered in the table's order instead
    plotted = {(x, series): y for x, y, series in plot["data"]}
    for number, row in enumerate(table["data"], start=1):
        series = f"{row[0]}, quality: BLEU"
        at = (f"{number}. {row[1]}", series)
        assert row[2] == "–" or plotted[at] == pytest.approx(row[2], abs=1e-3)
    assert [row[1] for row in table["data"]] == [
        "k = 0",
        "k = 5",
        "k = 10",
        "k = 1000",
        "p = 1",
        "p = 0.95",
        "p = 0.9",
        "p = 0.8",
    ]
    assert table["data"][0][2:] == table["data"][4][2:]  # k = 0 and p = 1 are one setting


def test_rewrite_measures_against_subtitle_limits(client):
    source = "And God said, Let there be light: and there was light."
    text, report, numbers = client.predict(
        model=REWRITER,
        source=source,
        target="ratio",
        ratio=0.5,
        max_new_tokens=24,
        chars_per_line=42,
        max_lines=2,
        chars_per_second=17,
        duration=3,
        api_name="/rewrite",
    )
    assert text and "badge" in report and "subtitle-preview" in report
    assert numbers["character_ratio"] == pytest.approx(len(text) / len(source))
    assert numbers["fits"] == (
        numbers["line_length_ok"] and numbers["line_count_ok"] and numbers["reading_speed_ok"]
    )
    category = client.predict(
        model=REWRITER,
        source=source,
        target="category",
        category="short",
        max_new_tokens=16,
        api_name="/rewrite",
    )
    assert category[0]


def test_rewrite_sweep_covers_every_ratio(client):
    chart, table = client.predict(
        model=REWRITER, source="Blessed are the meek.", max_new_tokens=12, api_name="/rewrite_sweep"
    )
    assert chart["value"]["mark"] == "line" and chart.get("sort") is None  # numeric ratios
    achieved = [y for _, y, series in chart["value"]["data"] if series == "achieved, characters"]
    assert len(achieved) == 20
    assert [row[0] for row in table["data"]] == [r / 10 for r in range(1, 21)]


def test_translate_each_line(client):
    text = client.predict(
        model=TRANSLATOR,
        text="Hello\nThe sun rises",
        max_new_tokens=10,
        mode="beam search",
        num_beams=2,
        samples=1,
        api_name="/translate",
    )
    assert len(text.split("\n")) == 2


def test_embedding_endpoints(client):
    table = client.predict(
        model=LM,
        pairs="boy | girl\nboy + man | teenager",
        leading_space=True,
        api_name="/embedding_similarity",
    )
    assert [row[:2] for row in table["data"]] == [["boy", "girl"], ["boy + man", "teenager"]]
    assert all(-100 <= row[2] <= 100 for row in table["data"])
    neighbours = client.predict(
        model=LM,
        word="light",
        k=5,
        words_only=True,
        leading_space=True,
        api_name="/nearest_neighbours",
    )
    assert [row[0] for row in neighbours["data"]] == [1, 2, 3, 4, 5]
    verdict, answers = client.predict(
        model=LM,
        expression="king - man + woman",
        expected="queen",
        leading_space=True,
        api_name="/analogy",
    )
    assert "cosine(king - man + woman, queen)" in verdict and len(answers["data"]) == 10


def test_models_endpoints(client):
    card, facts, parity = client.predict(model=LM, api_name="/model_info")
    assert card.startswith("# tiny-lm") and parity["greedy"]["prompts"] > 0
    assert ["controls", "section (2 values)"] in facts["data"]
    listing = client.predict(api_name="/list_models")
    assert listing[TRANSLATOR]["languages"] == ["en", "es"]
    assert "rewrite" in listing[REWRITER]["tabs"] and listing[LM]["controls"]["section"]


@pytest.mark.parametrize(
    ("endpoint", "kwargs", "message"),
    [
        ("/generate", {"prompt": "x" * 2001}, "`prompt` must be at most 2000 characters"),
        ("/generate", {"max_new_tokens": 10_000}, "256"),
        ("/generate", {"mode": "greedy", "samples": 3}, "`samples` must be 1 for greedy"),
        ("/generate", {"mode": "sampling", "temperature": 0}, "`temperature` must be in (0, 2.0]"),
        ("/generate", {"mode": "beam search", "num_beams": 1}, "`num_beams` must be an int in [2"),
        ("/generate", {"mode": "sampling", "seed": -1}, "`seed` must be an int in [0,"),
        (
            "/generate",
            {"mode": "beam search", "num_beams": 2, "samples": 4},
            "`samples` must be <= `num_beams` (2)",
        ),
        ("/generate", {"controls": {"section": "poetry"}}, "`section` must be one of"),
        ("/generate", {"controls": {"genre": "metal"}}, "unknown control 'genre'"),
        ("/generate", {"controls": "law"}, "`controls` must be an object"),
        ("/generate", {"model": TRANSLATOR, "prompt": ""}, "`prompt` must not be empty"),
        ("/generate", {"prompt": " "}, "`prompt` must not be empty"),  # a causal LM too
        ("/generate", {"mode": "sampling", "seed": 1e20}, "in [0, 4294967295], got 1e+20"),
        ("/compare", {"prompt": ""}, "`prompt` must not be empty"),
        ("/translate", {"model": TRANSLATOR, "text": "   "}, "`text` must not be empty"),
        ("/translate", {"model": TRANSLATOR, "text": "a\n" * 17}, "at most 16 lines"),
        ("/rewrite", {"model": REWRITER, "source": "Hi", "target": "ratio", "ratio": 5}, "2"),
        (
            "/decoding_study",
            {"model": LM, "prompts": "a\nb\nc\nd\ne\nf"},
            "`prompts` must be at most 5 lines",
        ),
        (
            "/embedding_similarity",
            {"model": LM, "pairs": "boy girl"},
            "`pairs` line 1 must look like 'boy | girl'",
        ),
    ],
)
def test_bad_inputs_get_clear_messages(client, endpoint, kwargs, message, caplog):
    defaults = {
        "/generate": {"model": LM, "prompt": "In the beginning"},
        "/compare": {"prompt": "x", "model_1": LM, "preset_1": "greedy", "model_2": LM},
    }.get(endpoint, {})
    with caplog.at_level("WARNING", logger="scriptorium.app"):
        with pytest.raises(AppError) as error:
            client.predict(**{**defaults, **kwargs}, api_name=endpoint)
    assert message in str(error.value)
    # the server logs the user's mistake as one line, without a traceback
    (logged,) = [r for r in caplog.records if r.name == "scriptorium.app"]
    assert message in logged.getMessage() and logged.exc_info is None
    assert "\n" not in logged.getMessage()


def test_stop_ends_the_generation_loop(served, client):
    _, slow = served
    before = slow.events
    job = client.submit(
        model=SLOW,
        prompt="In the beginning",
        mode="greedy",
        max_new_tokens=200,
        api_name="/generate",
    )
    deadline = time.monotonic() + 60
    while len(job.outputs()) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert slow.open_streams == 1  # running
    job.cancel()
    while slow.open_streams and time.monotonic() < deadline:
        time.sleep(0.05)
    assert slow.open_streams == 0  # the stream was closed, not left running
    stopped_at = slow.events
    time.sleep(0.5)
    assert slow.events == stopped_at  # and no token is produced any more
    assert stopped_at - before < 120  # far fewer than a full run (the context holds ~124)


def test_an_app_without_models_says_so():
    demo = app.build(ModelRegistry.discover([]))
    markdown = [block.value for block in demo.blocks.values() if type(block).__name__ == "Markdown"]
    assert NO_MODELS in markdown
    url = serve(demo)
    try:
        with pytest.raises(AppError, match="no models are installed"):
            Client(url, verbose=False).predict(None, "hi", api_name="/generate")
    finally:
        demo.close()


def test_bundle_without_embeddings_gets_a_clear_message(models_tree, tmp_path):
    import json
    import shutil

    bundle = tmp_path / "no-embeddings"
    shutil.copytree(models_tree / "tiny-lm" / "int8", bundle)
    manifest = json.loads((bundle / "manifest.json").read_text())
    del manifest["embeddings"], manifest["files"]["embeddings.npy"]
    (bundle / "embeddings.npy").unlink()
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    registry = ModelRegistry.discover([bundle])
    with pytest.raises(ValueError, match="has no embeddings.npy"):
        registry.embedding_space("no-embeddings")


def test_command_line_flags():
    result = subprocess.run(
        [sys.executable, str(REPO / "app.py"), "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert result.returncode == 0
    for flag in ("--models", "--share", "--host", "--port"):
        assert flag in result.stdout
