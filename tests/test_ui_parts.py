"""The app's building blocks without a server: input limits, the stream collector and token view,
model selection by manifest, and the small helpers of the tabs."""

from __future__ import annotations

import json
from pathlib import Path

import gradio as gr
import pytest

import runtime
from runtime import StreamEvent
from tests.manifest_fixtures import manifest_of
from ui import checks, plots, streaming
from ui.compare_tab import preset_config
from ui.embeddings_tab import parse_pairs
from ui.models_tab import benchmark_summary, facts, read_summary
from ui.registry import ModelRegistry, languages
from ui.rewrite_tab import target_controls
from ui.translate_tab import format_translations

# ---- limits ---------------------------------------------------------------------------------


def test_decoding_builds_configs_per_mode():
    greedy = checks.decoding("greedy", 16, temperature=0.3, top_k=5, seed=4)
    assert (greedy.mode, greedy.max_new_tokens, greedy.top_k, greedy.seed) == (
        "greedy",
        16,
        0,
        None,
    )
    sampled = checks.decoding("sampling", 16.0, 0.7, 50, 0.9, 0.05, samples=3)
    assert sampled.mode == "sample"
    assert (sampled.temperature, sampled.top_k, sampled.top_p, sampled.min_p) == (
        0.7,
        50,
        0.9,
        0.05,
    )
    assert sampled.num_return_sequences == 3
    beam = checks.decoding("beam search", 16, num_beams=4, samples=2, no_repeat_ngram_size=2)
    assert (beam.mode, beam.num_beams, beam.num_return_sequences) == ("beam", 4, 2)
    assert beam.no_repeat_ngram_size == 2


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"mode": "nucleus"}, "`mode` must be one of ['greedy', 'sampling', 'beam search']"),
        ({"max_new_tokens": 0}, "`max_new_tokens` must be an int in [1, 256], got 0"),
        ({"max_new_tokens": 257}, "`max_new_tokens` must be an int in [1, 256], got 257"),
        ({"max_new_tokens": 2.5}, "`max_new_tokens` must be an int in [1, 256], got 2.5"),
        ({"mode": "sampling", "temperature": 0}, "`temperature` must be in (0, 2.0], got 0"),
        ({"mode": "sampling", "top_p": 1.5}, "`top_p` must be in (0, 1], got 1.5"),
        ({"mode": "sampling", "top_k": -1}, "`top_k` must be an int in [0, 1000], got -1"),
        ({"mode": "sampling", "min_p": 2}, "`min_p` must be in [0, 1], got 2"),
        ({"repetition_penalty": 9}, "`repetition_penalty` must be in [0.5, 3.0], got 9"),
        ({"no_repeat_ngram_size": 11}, "`no_repeat_ngram_size` must be an int in [0, 10]"),
        ({"samples": 2}, "`samples` must be 1 for greedy decoding"),
        ({"mode": "sampling", "samples": 9}, "`samples` must be an int in [1, 8], got 9"),
        ({"mode": "beam search", "num_beams": 1}, "`num_beams` must be an int in [2, 8]"),
        (
            {"mode": "beam search", "num_beams": 2, "samples": 3},
            "`samples` must be <= `num_beams` (2) for beam search, got 3",
        ),
        ({"mode": "sampling", "seed": -1}, "`seed` must be an int in [0, 4294967295], got -1"),
    ],
)
def test_decoding_rejects_bad_settings_with_clear_messages(kwargs, message):
    settings = {"mode": "greedy", "max_new_tokens": 8, **kwargs}
    with pytest.raises(ValueError) as error:
        checks.decoding(**settings)
    assert message in str(error.value)


@pytest.mark.parametrize(
    ("mode", "unused"),
    [
        ("sampling", {"num_beams": 1}),
        ("sampling", {"num_beams": 0}),
        ("greedy", {"temperature": 0, "top_p": 5, "top_k": -3, "min_p": None, "num_beams": 1}),
        ("greedy", {"seed": -1, "num_beams": "many"}),
        ("beam search", {"temperature": -1.0, "top_p": 0, "seed": 2**40}),
    ],
)
def test_settings_the_mode_does_not_use_are_ignored(mode, unused):
    settings = {"num_beams": 3} if mode == "beam search" else {}
    config = checks.decoding(mode, 8, **{**settings, **unused})
    defaults = runtime.GenerationConfig()
    if mode != "sampling":
        assert (config.temperature, config.top_p, config.top_k, config.seed) == (
            defaults.temperature,
            defaults.top_p,
            defaults.top_k,
            None,
        )
    if mode != "beam search":
        assert config.num_beams == 1


def test_text_limits():
    assert checks.text("prompt", "x" * 2000) == "x" * 2000
    with pytest.raises(ValueError, match=r"`prompt` must be at most 2000 characters, got 2001"):
        checks.text("prompt", "x" * 2001)
    with pytest.raises(ValueError, match="`prompt` must not be empty"):
        checks.text("prompt", "  ")
    assert checks.text("prompt", "", allow_empty=True) == ""
    with pytest.raises(ValueError, match="`prompt` must be a string, got int"):
        checks.text("prompt", 3)


def test_queue_settings_bound_concurrency_and_queue():
    settings = checks.queue_settings()
    assert settings["default_concurrency_limit"] >= 1
    assert settings["max_size"] >= 20  # the concurrency test's 20 calls must fit


def test_shown_to_user_turns_value_errors_into_gradio_errors():
    import gradio as gr

    @checks.shown_to_user
    def plain(x):
        raise ValueError(f"`x` must be positive, got {x}")

    @checks.shown_to_user
    def streamed(x):
        yield 1
        raise ValueError("`x` broke mid-stream")

    with pytest.raises(gr.Error, match="`x` must be positive, got -1"):
        plain(-1)
    stream = streamed(0)
    assert next(stream) == 1
    with pytest.raises(gr.Error, match="`x` broke mid-stream"):
        next(stream)


# ---- streaming ------------------------------------------------------------------------------


class FakeClock:
    def __init__(self, times):
        self.times = list(times)

    def __call__(self):
        return self.times.pop(0)


class FakeTokenizer:
    def encode(self, text, add_special_tokens=False):
        return type("Encoding", (), {"ids": text.split()})()


def event(text, index=0, logprob=-0.1, finish=None, token=5):
    return StreamEvent(text, token, logprob, [("a", 0.5), ("<b>", 0.2)], index, finish)


def test_collector_timing_text_and_stats():
    # start 0.0; tokens arrive at 0.5, 0.6, 0.7, 0.9 -> ttft 0.5, 4 tokens in 0.9 s of wall time
    clock = FakeClock([0.0, 0.5, 0.6, 0.7, 0.9])
    collector = streaming.StreamCollector(2, FakeTokenizer(), eos_token_id=0, clock=clock)
    collector.add(event("In", 0))
    collector.add(event(" the", 1))
    collector.add(event(" end", 0, finish="length"))
    collector.add(event("", 1, logprob=-1.0, token=0, finish="eos"))
    assert collector.texts == ["In end", " the"]
    assert collector.text() == "In end\n\n— sample 2 —\n the"
    assert collector.time_to_first_token == pytest.approx(0.5)
    assert collector.tokens_per_second == pytest.approx(4 / 0.9)
    stats = collector.stats()
    assert stats["tokens"] == 4
    assert stats["finish_reasons"] == ["length", "eos"]
    assert stats["mean_logprob"] == pytest.approx((-0.1 * 3 - 1.0) / 4)
    assert collector.tokens[1][-1].special  # the EOS token shows as ⟨end⟩


def test_token_view_names_hidden_control_tokens():
    """A control token the decoder hides ("<|im_end|>" when it is not the EOS) is shown by its
    name, not as "▯" (issue 45); "▯" stays for a piece of a character."""
    from tokenizers import Tokenizer, models

    tokenizer = Tokenizer(models.WordLevel({"a": 0, "[UNK]": 1}, unk_token="[UNK]"))
    tokenizer.add_special_tokens(["<|im_end|>"])  # id 2
    collector = streaming.StreamCollector(1, tokenizer, eos_token_id=3, clock=FakeClock([0] * 4))
    collector.add(event("a", token=0))
    collector.add(event("", token=1))  # a character's first bytes
    collector.add(event("", token=2))
    view = collector.token_view()
    assert [token.marker for token in collector.tokens[0]] == ["", "", "<|im_end|>"]
    assert view.count("▯") == 1 and "&lt;|im_end|&gt;" in view


def test_collector_counts_beam_sequences_by_their_tokens():
    clock = FakeClock([0.0, 2.0])
    collector = streaming.StreamCollector(1, FakeTokenizer(), clock=clock)
    collector.add(StreamEvent("three whole words", None, None, [], 0, "eos"))
    assert collector.count == 3
    assert collector.tokens_per_second == pytest.approx(1.5)  # all tokens over the whole time
    assert collector.all_logprobs == []
    assert 'class="tok plain"' in collector.token_view()


def test_token_view_escapes_and_colours_by_probability():
    tokens = [
        streaming.Token("<script>", 0.9, [("x&y", 0.9)]),
        streaming.Token("\n", 0.3, []),
        streaming.Token("", 0.01, [], special=True),
    ]
    view = streaming.token_view_html([tokens])
    assert "<script>" not in view and "&lt;script&gt;" in view
    assert "x&amp;y" in view
    assert 'class="tok p80"' in view and 'class="tok p20"' in view
    assert 'class="tok p00 special"' in view and "⟨end⟩" in view
    assert "↵" in view
    assert "sample 1" not in view  # no heading for a single sample
    assert "sample 2" in streaming.token_view_html([tokens, tokens])


def test_stats_html_shows_dashes_before_any_token():
    empty = {
        "tokens": 0,
        "time_to_first_token_s": None,
        "tokens_per_second": None,
        "finish_reasons": ["–"],
        "mean_logprob": None,
    }
    html = streaming.stats_html(empty)
    assert "time to first token" in html and "– s" in html


# ---- model selection ------------------------------------------------------------------------


def _bundle(root: Path, family: str, precision: str, **manifest) -> None:
    path = root / family / precision
    path.mkdir(parents=True)
    base = {
        "schema_version": 1,
        "name": family,
        "task": "causal-lm",
        "precision": precision,
        "files": {},
        "graphs": {"decoder": {"file": "model.onnx"}, "encoder": {"file": "e.onnx"}},
        "num_layers": 1,
        "num_heads": 1,
        "head_size": 1,
    }
    (path / "manifest.json").write_text(json.dumps({**base, **manifest}))


@pytest.fixture
def registry(tmp_path) -> ModelRegistry:
    ratio = {"length_ratio": {"kind": "numeric", "values": {"0.5": "<r5>", "1.0": "<r10>"}}}
    _bundle(tmp_path, "plain-lm", "fp32")
    _bundle(tmp_path, "bible-lm", "fp32", controls={"section": {"kind": "choice", "values": {}}})
    _bundle(tmp_path, "bible-lm", "int8", controls={"section": {"kind": "choice", "values": {}}})
    _bundle(tmp_path, "zz-translator", "int8", task="seq2seq", training_data={"pair": "en-es"})
    _bundle(
        tmp_path,
        "aa-rewriter",
        "int8",
        task="seq2seq",
        controls=ratio,
        embeddings="e.npy",
        training_data={"source_language": "en", "target_language": "en"},
    )
    _bundle(tmp_path, "de-translator", "int8", task="seq2seq", training_data={"pair": "de→en"})
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "manifest.json").write_text("{not json")
    return ModelRegistry.discover([tmp_path, tmp_path / "missing"])


def test_each_tab_gets_its_models_by_manifest_not_by_name(registry):
    assert registry.generators()[:3] == ["bible-lm (int8)", "bible-lm (fp32)", "plain-lm (fp32)"]
    assert registry.rewriters() == ["aa-rewriter (int8)"]
    assert registry.translators() == ["zz-translator (int8)", "de-translator (int8)"]
    assert registry.with_embeddings() == ["aa-rewriter (int8)"]
    assert "broken" in registry.problems and "broken" not in registry.names


def test_languages():
    assert languages(manifest_of(training_data={"pair": "EN→ES"})) == ("en", "es")
    assert languages(manifest_of(training_data={"pair": "en-es"})) == ("en", "es")
    both = {"source_language": "en", "target_language": "es"}
    assert languages(manifest_of(training_data=both)) == ("en", "es")
    assert languages(manifest_of(training_data={"source_language": "en"})) is None
    assert languages(manifest_of()) is None


def test_unknown_and_missing_models_raise_clear_errors(registry):
    with pytest.raises(ValueError, match="`model` must be one of"):
        registry.get("nope")
    with pytest.raises(ValueError, match="no models are installed"):
        ModelRegistry({}).get("anything")


# ---- tab helpers ----------------------------------------------------------------------------


def test_rewrite_target_controls(registry):
    model = "aa-rewriter (int8)"
    assert target_controls(registry, model, "ratio", 0.8, None) == {"length_ratio": 0.8}
    assert target_controls(registry, model, "none", 0.8, None) == {}
    with pytest.raises(ValueError, match="has no `length` control"):
        target_controls(registry, model, "category", 0.8, "short")
    with pytest.raises(ValueError, match=r"`ratio` must be in \[0.1, 2.0\], got 3"):
        target_controls(registry, model, "ratio", 3, None)


def test_presets_cap_samples_where_they_must():
    assert preset_config("greedy", 8, 4, 0).num_return_sequences == 1
    assert preset_config("beam 5", 8, 8, 0).num_return_sequences == 5
    assert preset_config("top-p 0.95", 8, 4, 0).num_return_sequences == 4
    with pytest.raises(ValueError, match="`preset` must be one of"):
        preset_config("top-q", 8, 1, 0)


def test_parse_pairs():
    assert parse_pairs("boy | girl\n\nman|girl") == [("boy", "girl"), ("man", "girl")]
    with pytest.raises(ValueError, match="`pairs` line 1 must look like 'boy | girl'"):
        parse_pairs("boy girl")


def test_format_translations():
    outputs = [type("Out", (), {"text": f" t{i} "})() for i in range(4)]
    assert format_translations(outputs[:2], 2, 1) == "t0\nt1"
    assert format_translations(outputs, 2, 2) == "1. t0\n2. t1\n\n1. t2\n2. t3"


def test_benchmark_summary_shows_the_committed_results(tmp_path):
    """The Models tab's tables hold bench/results' numbers, through the app's own summary
    (ui/benchmarks.json; tests/test_bench_summary.py checks that it matches bench/results)."""
    assert "No benchmark results yet" in benchmark_summary(read_summary(tmp_path / "none.json"))
    results = Path(__file__).resolve().parents[1] / "bench" / "results"
    decode = json.loads((results / "decode.json").read_text())["tok_per_s"]
    summary = benchmark_summary(read_summary())
    for key, speeds in decode.items():  # every peer of every workload, against our precision
        engine, precision = key.split("/")
        if engine in ("scriptorium", "matmuls only"):
            continue
        ours = decode[f"scriptorium/{precision}"]
        for workload, value in speeds.items():
            row = (
                f"| causal LM | {workload} | {engine} {precision} | {value:.1f} | "
                f"{ours[workload]:.1f} | {ours[workload] / value:.2f}× |"
            )
            assert row in summary
    assert "| seq2seq | beam 4 | transformers fp32 |" in summary
    assert "matmuls only" not in summary and "attention" not in summary
    quality = json.loads((results / "quality.json").read_text())
    int8 = quality["perplexity"]["int8"]
    assert f"| int8 | {int8:.2f} | {quality['change_pct']['int8']:+.2f}% |" in summary
    assert "docs/BENCHMARKS.md" in summary


def test_benchmark_summary_rows(tmp_path):
    summary = {
        "speed": [
            {
                "model": "seq2seq",
                "workload": "greedy",
                "peer": "ctranslate2 int8",
                "peer_tok_s": 100.0,
                "ours_tok_s": 80.0,
            }
        ],
        "sampling": [{"peer": "peer", "cases": 2, "median": 7.0, "low": 4.0, "high": 10.0}],
        "quality": {"split": "test", "rows": []},
    }
    shown = benchmark_summary(summary)
    assert "| seq2seq | greedy | ctranslate2 int8 | 100.0 | 80.0 | 0.80× |" in shown
    assert "| peer | 2 | 7.0× | 4.0× – 10.0× |" in shown and "Quantization" not in shown
    (tmp_path / "broken.json").write_text("{")
    assert read_summary(tmp_path / "broken.json") == {}


def test_facts():
    rows = dict(facts(manifest_of("seq2seq", training_data={"pair": "en-es"})))
    assert rows["languages"] == "en → es" and rows["input embeddings"] == "not shipped"


def test_numbered_labels_sort_as_text_in_their_order():
    labels = [f"setting {i}" for i in (3, 1, 2, 10, 11, 4, 5, 6, 7, 8, 9, 12)]
    named = plots.numbered(labels + labels[:2])
    assert list(named) == labels and sorted(named.values()) == [named[x] for x in labels]
    assert named["setting 3"] == "01. setting 3" and named["setting 12"] == "12. setting 12"


def test_lines_is_long_format_and_skips_missing_points():
    frame = plots.lines([0.5, 1.0], {"a": [0.6, None], "b": [0.55, 1.1]})
    assert frame.columns.tolist() == [plots.X, plots.VALUE, plots.SERIES]
    assert frame.values.tolist() == [[0.5, 0.6, "a"], [0.5, 0.55, "b"], [1.0, 1.1, "b"]]
    with pytest.raises(ValueError, match="`series` 'a' must have 2 values, got 1"):
        plots.lines([1, 2], {"a": [1.0]})


def test_plots_are_native_line_plots_with_every_point():
    rows = [
        {"sweep": "top-k", "label": "k = 0", "bleu": 40.0, "self_bleu": 21.0},
        {"sweep": "top-k", "label": "k = 5", "bleu": 12.5, "self_bleu": 80.0},
        {"sweep": "top-p", "label": "p = 0.95", "bleu": None, "self_bleu": 30.0},
    ]
    study = plots.decoding_study(rows)
    # numbered labels keep the settings' order (a `sort` list stops the browser drawing)
    assert isinstance(study, gr.LinePlot) and study.sort is None
    data = study.value  # as the browser receives it
    points = {(x, series): y for x, y, series in data["data"]}
    assert points == {
        ("1. k = 0", "top-k, quality: BLEU"): 40.0,
        ("2. k = 5", "top-k, quality: BLEU"): 12.5,
        ("1. k = 0", "top-k, Self-BLEU (lower = more diverse)"): 21.0,
        ("2. k = 5", "top-k, Self-BLEU (lower = more diverse)"): 80.0,
        ("3. p = 0.95", "top-p, Self-BLEU (lower = more diverse)"): 30.0,
    }
    assert data["mark"] == "line" and data["datatypes"][plots.X] == "nominal"

    ratios = plots.length_sweep([0.5, 1.0], [0.6, 1.1], [0.55, None])
    assert ratios.x_title.startswith("requested ratio") and ratios.sort is None
    data = ratios.value
    assert data["datatypes"][plots.X] == "quantitative"
    assert [row for row in data["data"] if row[2] == "achieved = requested"] == [
        [0.5, 0.5, "achieved = requested"],
        [1.0, 1.0, "achieved = requested"],
    ]
    assert [row[:2] for row in data["data"] if row[2] == "achieved, characters"] == [[0.5, 0.55]]
    categorical = plots.length_sweep(["short", "long"], [0.7, 1.2], [0.8, 1.1])
    assert categorical.sort is None
    assert [row[0] for row in categorical.value["data"]][:2] == ["1. short", "2. long"]
    assert categorical.x_title.startswith("requested length")


def test_masking_study_plot_has_a_line_per_model_and_k_in_percent():
    result = {"ratios": [0.1, 0.5], "top_k": [1, 5], "accuracy": {"1": [0.2, 0.1], "5": [0.6, 0.3]}}
    frame = plots.masking_study({"base": result, "large": result}).value["data"]
    points = {(row[2], row[0]): row[1] for row in frame}
    assert points[("base, top 1", 10.0)] == pytest.approx(20.0)
    assert points[("large, top 5", 50.0)] == pytest.approx(30.0)
    assert len(points) == 8


def test_cosine_table_shades_each_cell_by_its_sign_and_escapes_tokens():
    from ui.masked_lm_tab import cosine_table

    result = {
        "tokens_a": [" <b>", " king"],
        "tokens_b": [" <b>", " queen"],
        "matrix": [[1.0, -0.5], [0.0, 0.25]],
        "average_similarity": 0.1875,
        "ais": 0.625,
    }
    table = cosine_table(result)
    assert "&lt;b&gt;" in table and "<b>" not in table
    assert 'background:rgb(255,0,0)" title="1.000"' in table  # +1: full red
    assert 'background:rgb(128,128,255)" title="-0.500"' in table  # -0.5: half blue
    assert 'background:rgb(255,255,255)" title="0.000"' in table  # 0: white
    assert "AIS 0.625" in table


def test_shipped_model_cards_inline_their_loss_plots():
    import base64

    from ui.registry import ModelRegistry

    models = Path(__file__).resolve().parents[1] / "models"
    registry = ModelRegistry.discover([models])
    for name in registry.names:
        plot = registry.paths[name] / "loss.png"
        if not plot.exists():
            continue
        card = registry.card(name)
        assert "](loss.png)" not in card
        encoded = base64.b64encode(plot.read_bytes()).decode()
        assert f"](data:image/png;base64,{encoded})" in card
