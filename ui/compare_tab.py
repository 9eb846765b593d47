"""The Compare tab: 2–4 columns, each a model and a decoding preset, one prompt and seed.

Endpoint `/compare` streams every column's text and a metrics table. The columns' streams are
advanced in turn, one token each, so they all grow at once on one worker; each column's time to
first token and tokens/s are on the wall clock (ui/streaming.py); under the table the page shows
the first token and tokens/s from the visitor's click, the queue included (ui/click_speed.py).
Metrics per column (ui/metrics.py): tokens/s, distinct-1/2, repetition rate, mean token
logprob, with two or more samples Self-BLEU and UNGC-1..4, and once a column is done, for a
causal LM with the training 8-gram index, the memorisation meter (share of copied 8-grams and
the longest copy's length in words; ui/generate_tab.py). Chosen controls apply to the
columns whose model has them. The decoding study (seed 000) lives in ui/study_section.py; the
chat arena (ui/arena.py) has a tab of its own (app.py). The tab opens on the flagship against
its fine-tunes when they are installed (`default_columns`).
"""

from __future__ import annotations

import inspect
import time
from dataclasses import dataclass, field

import gradio as gr
from gradio.context import Context

import runtime
from runtime.parameters import ADAPTER_PRESET, PRESETS

from . import (
    checks,
    click_speed,
    downloads,
    expectations,
    links,
    metrics,
    study_section,
    visitor,
    widgets,
)
from .generate_tab import memorisation, samples_of, shown_text
from .streaming import StreamCollector

UPDATE_EVERY = 0.05  # seconds between UI updates while streaming

INTRO = (
    "The same prompt to 2–4 models or decoding presets side by side, with metrics per column. "
    "It opens on the SmolLM2 flagship against its Bible fine-tune (an adapter), so you see what "
    "fine-tuning does; the chat arena (vote on replies) has its own tab."
)
DEFAULT_PRESETS = ["top-p 0.95", "greedy", "top-k 5", "beam 5"]
METRIC_HEADERS = [
    "column",
    "model",
    "preset",
    "tokens",
    "tokens/s",
    "distinct-1",
    "distinct-2",
    "repetition rate",
    "mean log p",
    "Self-BLEU",
    "UNGC-1",
    "UNGC-2",
    "UNGC-3",
    "UNGC-4",
    "copied 8-grams",
    "longest copy (words)",
]
# px per column of the metrics table: with the adapters' long preset label the widths Gradio
# measured from the content ran the table past 1280 px, UNGC-4 last; these keep every column up
# to UNGC-4 in view (each wide enough for its header's longest word, in the table's 13 px type).
METRIC_WIDTHS = [60, 110, 140, 60, 80, 90, 90, 92, 60, 84, 64, 64, 64, 64, 72, 72]


def preset_config(preset: str, max_new_tokens: int, samples: int, seed: int):
    """The GenerationConfig of a preset; samples are capped where the preset cannot give more;
    with the private prefix cache on, it has the visitor's `cache_salt` (ui/visitor.py)."""
    checks.choice("preset", preset, PRESETS)
    fields = dict(PRESETS[preset])
    if fields.get("do_sample"):
        fields["num_return_sequences"] = samples
    elif fields.get("num_beams", 1) > 1:
        fields["num_return_sequences"] = min(samples, fields["num_beams"])
    config = runtime.GenerationConfig(max_new_tokens=max_new_tokens, seed=seed, **fields)
    return visitor.salted(config.validate())


def metric_row(
    column: int, model: str, preset: str, collector: StreamCollector, meter: dict | None = None
) -> list:
    """One column's metrics; `meter` is its memorisation meter (generate_tab.memorisation), once
    the column is done and if its model has the index, else "–"."""
    texts = collector.texts
    several = len(texts) > 1
    unique = metrics.ungc(texts) if several else {}
    values = [
        collector.count,
        collector.tokens_per_second,
        metrics.distinct_n(texts, 1),
        metrics.distinct_n(texts, 2),
        metrics.repetition_rate(texts),
        metrics.mean(collector.all_logprobs),
        metrics.self_bleu(texts) if several else None,
        *(unique.get(n) for n in range(1, 5)),
        meter and meter["share"],
        meter and meter["span_words"],
    ]
    shown = [round(v, 3) if isinstance(v, float) else ("–" if v is None else v) for v in values]
    return [column, model, preset, *shown]


def run_columns(registry, prompt, controls, columns, max_new_tokens, samples, seed):
    """Yield ([text per column], metrics rows, [collector per column]) while all columns
    stream."""
    streams, collectors, gens = [], [], []
    try:
        for model, preset in columns:
            gen = registry.get(model)
            gens.append(gen)
            config = preset_config(preset, max_new_tokens, samples, seed)
            own = {k: v for k, v in controls.items() if k in registry.controls_of(model)}
            collector = StreamCollector(
                config.num_return_sequences, gen.tokenizer, gen.eos_token_id
            )
            streams.append(gen.stream(prompt, config, controls=own))
            collectors.append(collector)
        running, shown = set(range(len(streams))), 0.0
        meters = [None] * len(streams)
        while running:
            for i in sorted(running):
                event = next(streams[i], None)
                if event is None:
                    running.discard(i)
                    meters[i] = memorisation(registry.get(columns[i][0]), collectors[i].texts)
                else:
                    collectors[i].add(event)
            if time.perf_counter() - shown >= UPDATE_EVERY or not running:
                shown = time.perf_counter()
                rows = [
                    metric_row(i + 1, model, preset, collectors[i], meters[i])
                    for i, (model, preset) in enumerate(columns)
                ]
                yield [shown_text(g, c) for g, c in zip(gens, collectors)], rows, collectors
    finally:
        for stream in streams:
            stream.close()


def build(registry, sections=()) -> None:
    """The tab, then each of `sections` (functions of the registry) drawn inside it."""
    manifests = {name: registry.manifest(name) for name in registry.generators()}
    names = expectations.best_first(list(manifests), manifests)
    with gr.Tab("Compare", id="compare"):
        gr.Markdown(INTRO, elem_classes="model-note")
        page = _settings(registry, names)
        _columns(registry, names, manifests, page)
        with gr.Row():
            page.run = gr.Button(
                "Compare", variant="primary", interactive=bool(names), elem_id="compare-run"
            )
            page.stop = gr.Button("Stop", variant="stop")
        page.errors = widgets.error_box("compare-error")
        links.shareable("compare", "compare", page.by_name())
        _results(page)
        _wire_columns(page)
        _wire_compare(registry, page)
        study_section.build(registry, names)
        for build_section in sections:  # e.g. ui/arena.py's, which imports this module
            build_section(registry)


@dataclass
class _Page:
    """The tab's components, filled in part by part."""

    prompt: gr.Textbox
    count: gr.Radio  # how many columns show
    max_tokens: gr.Slider
    samples: gr.Slider
    seed: gr.Number
    pickers: widgets.ControlPickers
    columns: list = field(default_factory=list)  # (model, preset) dropdowns per column
    outputs: list = field(default_factory=list)  # each column's text
    blocks: list = field(default_factory=list)  # each column
    loops: list = field(default_factory=list)  # each column's loop warning
    run: gr.Button = None
    stop: gr.Button = None
    errors: gr.Markdown = None
    table: gr.Dataframe = None
    result: gr.State = None
    json_file: gr.DownloadButton = None
    csv_file: gr.DownloadButton = None

    def column_inputs(self) -> dict:
        """model_1, preset_1, model_2, … by the endpoint's names."""
        return {
            f"{kind}_{n}": component
            for n, pair in enumerate(self.columns, start=1)
            for kind, component in zip(("model", "preset"), pair)
        }

    def by_name(self) -> dict:
        """The `/compare` endpoint's inputs by its parameter names, in their order."""
        return {
            "prompt": self.prompt,
            "controls": self.pickers.controls,
            "columns": self.count,
            "max_new_tokens": self.max_tokens,
            "samples": self.samples,
            "seed": self.seed,
        } | self.column_inputs()


def _settings(registry, names: list[str]) -> _Page:
    """The prompt, the number of columns, the settings every column shares, the controls."""
    with gr.Row():
        prompt = gr.Textbox(label="Prompt", value="In the beginning", lines=2, scale=4)
        count = gr.Radio([2, 3, 4], value=2, label="Columns", scale=1)
    with gr.Row():
        max_tokens = widgets.setting("max_new_tokens", value=48)
        samples = widgets.setting(
            "samples", label="Samples per column (≥ 2 adds Self-BLEU and UNGC)"
        )
        seed = widgets.setting("seed")
    pickers = widgets.ControlPickers(registry, None, names)
    return _Page(prompt, count, max_tokens, samples, seed, pickers)


def _columns(registry, names: list[str], manifests: dict, page: _Page) -> None:
    """`LIMITS.max_columns` columns (two shown), each a model, a preset, the model's note, its
    text and its loop warning."""
    choices = [(expectations.choice_label(n, manifests[n]), n) for n in names]
    columns = default_columns(registry, names)
    with gr.Row(equal_height=True):
        for i in range(checks.LIMITS.max_columns):
            with gr.Column(min_width=240, elem_classes=_column_classes(i, 2)) as block:
                model = gr.Dropdown(choices, value=columns[i][0], label=f"Model {i + 1}")
                preset = gr.Dropdown(list(PRESETS), value=columns[i][1], label="Decoding preset")
                widgets.model_note(registry, model, f"compare-model-note-{i + 1}")
                output = gr.Textbox(
                    label=f"Output {i + 1}",
                    lines=12,
                    elem_classes="column-output",
                    elem_id=f"compare-output-{i + 1}",
                )
                page.loops.append(widgets.loop_warning(f"compare-loops-{i + 1}"))
            page.columns.append((model, preset))
            page.outputs.append(output)
            page.blocks.append(block)


def _results(page: _Page) -> None:
    """The metrics table and the two download buttons, shown once a run has a record."""
    page.table = gr.Dataframe(
        headers=METRIC_HEADERS,
        label="Metrics per column",
        interactive=False,
        wrap=True,
        column_widths=[f"{width}px" for width in METRIC_WIDTHS],
        elem_id="compare-metrics",
        elem_classes="numbers",
    )
    # filled in the page by click_speed.COMPARE: the speed from the visitor's click
    gr.HTML('<p id="compare-click-speed" class="model-note"></p>', padding=False)
    page.result = gr.State(None)
    with gr.Row():
        page.json_file = gr.DownloadButton(
            "Download JSON", visible=False, size="sm", elem_id="compare-download"
        )
        page.csv_file = gr.DownloadButton(
            "Download metrics (CSV)", visible=False, size="sm", elem_id="compare-csv"
        )
    # One event per button: Gradio 6.17's page froze for minutes (Chromium's main thread busy
    # in Svelte's flush) when one event showed both buttons at once, as in gradio#12932.
    page.result.change(
        downloads.button, page.result, page.json_file, queue=False, api_visibility="private"
    ).then(
        lambda record: downloads.button(record, metrics_csv),
        page.result,
        page.csv_file,
        queue=False,
        api_visibility="private",
    ).then(None, js=click_speed.RECORD_ARRIVED, queue=False, api_visibility="private")


def _column_classes(column: int, shown: int) -> list[str]:
    """The CSS classes of `column` (from 0) when `shown` columns show. Every column is drawn
    and the ones beyond `shown` are hidden by CSS (ui/style.py): Gradio 6.17 lost the update
    that showed a never-drawn column (Columns 3 then 4 showed 3 columns while Compare ran 4),
    and shows a column created `visible="hidden"`."""
    return ["compare-column"] if column < shown else ["compare-column", "column-off"]


def _wire_columns(page: _Page) -> None:
    """The column count shows that many columns; a control picker shows only while a shown
    column's model has that control."""
    page.count.change(
        lambda n: [
            gr.update(elem_classes=_column_classes(i, n)) for i in range(checks.LIMITS.max_columns)
        ],
        page.count,
        page.blocks,
        queue=False,
        api_visibility="private",
    )
    pickers = page.pickers
    models = [model for model, _ in page.columns]
    defaults = [model.value for model in models]
    for picker, used in zip(pickers.dropdowns, pickers.visible_for(page.count.value, defaults)):
        picker.visible = widgets.shown(used)
    for trigger in (page.count, *models):
        trigger.change(
            pickers.for_columns,
            [page.count, *models],
            pickers.dropdowns,
            queue=False,
            api_visibility="private",
        )


def _wire_compare(registry, page: _Page) -> None:
    """The `/compare` endpoint on the button, Stop, the error box and the loop warnings."""

    @checks.shown_to_user
    def compare(
        prompt,
        controls,
        columns,
        max_new_tokens,
        samples,
        seed,
        model_1,
        preset_1,
        model_2,
        preset_2,
        model_3=None,
        preset_3=None,
        model_4=None,
        preset_4=None,
    ):
        """Stream each column's text and the metrics table (one row per column)."""
        arguments = locals()  # the API arguments (and closure names), for the record
        settings = {name: arguments[name] for name in inspect.signature(compare).parameters}
        prompt = checks.text("prompt", prompt)
        columns = checks.integer("columns", columns, 2, checks.LIMITS.max_columns)
        max_new_tokens = checks.setting("max_new_tokens", max_new_tokens)
        samples = checks.setting("samples", samples)
        seed = checks.setting("seed", seed)
        pairs = [
            (model_1, preset_1),
            (model_2, preset_2),
            (model_3, preset_3),
            (model_4, preset_4),
        ][:columns]
        controls = widgets.controls_value(controls)
        blank = [""] * (checks.LIMITS.max_columns - columns)
        texts, rows, collectors = [], [], []
        updates = run_columns(registry, prompt, controls, pairs, max_new_tokens, samples, seed)
        for update in updates:
            texts, rows, collectors = update
            yield *texts, *blank, rows, gr.skip()
        runs = [
            downloads.run_record(registry, model, collector)
            for (model, _), collector in zip(pairs, collectors)
        ]
        metric_rows = [dict(zip(METRIC_HEADERS, row)) for row in rows]
        record = downloads.record("compare", settings, runs, metric_rows)
        yield *texts, *blank, rows, record  # the last update again, with the record

    event = page.run.click(
        compare,
        list(page.by_name().values()),
        [*page.outputs, page.table, page.result],
        api_name="compare",
        concurrency_id=checks.CONCURRENCY_ID,
    )
    page.stop.click(None, cancels=[event])
    Context.root_block.load(None, js=click_speed.COMPARE, api_visibility="private")
    stale = {output: "" for output in page.outputs} | {page.table: None, page.result: None}
    buttons = (page.json_file, page.csv_file)
    stale |= {button: gr.DownloadButton(visible=False) for button in buttons}
    widgets.show_errors(page.errors, event, [page.run.click], stale)
    for output, box in zip(page.outputs, page.loops):
        widgets.label_loops(box, output, samples_of)


def metrics_csv(record: dict) -> str:
    """Write a Compare record's metrics table as CSV (one row per column); return the path."""
    rows = [[row.get(header) for header in METRIC_HEADERS] for row in record["metrics"]]
    return downloads.write_csv(METRIC_HEADERS, rows, "compare-metrics")


def default_columns(registry, names: list[str]) -> list[tuple[str | None, str]]:
    """(model, preset) of each column as the tab opens. With the flagship and its fine-tunes
    (`names` in expectations.best_first order, an adapter first): the base in column 1 against
    its fine-tunes, all with the adapters' own sampling settings, so that the default comparison
    shows what fine-tuning does; else `_default_model` with DEFAULT_PRESETS."""
    base = expectations.adapter_base(registry.manifest(names[0])) if names else None
    if base not in names:
        return [(_default_model(registry, names, i), DEFAULT_PRESETS[i]) for i in range(4)]
    tunes = [n for n in names if registry.manifest(n).adapter]
    models = [base, *tunes, *tunes][: checks.LIMITS.max_columns]
    return [(model, ADAPTER_PRESET) for model in models]


def _default_model(registry, names, column):
    """Column defaults: the first model everywhere, but another precision of its family in
    column 2 when there is one (so the default comparison shows what quantization does)."""
    if not names:
        return None
    first = names[0]
    family = registry.manifest(first).name
    siblings = [n for n in names[1:] if registry.manifest(n).name == family]
    if column == 1 and siblings:
        return siblings[0]
    return first
