"""The Rewrite tab (seed 004): rewrite a line to a target length, checked against subtitle rules.

The target is a ratio (the `length_ratio` control; the runtime takes the nearest listed value)
or a category (the `length` control), whichever the model has. A model without either (seed
001's GRU encoder–decoders) rewrites at the length it chooses: the target inputs are disabled and
say so, the endpoints ignore them, and the sweep is off for it (its endpoint refuses it). The
output is measured against the source (achieved ratio in subwords and in characters,
ui/subtitles.py) and against configurable subtitle limits, with pass/fail badges. The sweep
rewrites the line at every ratio the model knows (or every category) and plots requested against
achieved. After each rewrite the attention heat map shows where in the source the model looked
for each output token (runtime/alignment.py, drawn by ui/alignment_view.py), under one line on
what the model is, how it attends and what seed 001 says to look for; a model without attention
gets the line and no map. Which models are listed: ui/registry.py's `rewriters`.
Endpoints: `/rewrite` → (text, report HTML, measurements), `/rewrite_sweep` → (plot, table).
"""

from __future__ import annotations

import html
import re
from collections.abc import Mapping
from dataclasses import dataclass

import gradio as gr

from runtime import alignment

from . import alignment_view, checks, examples, links, plots, subtitles, widgets

PROGRESS = gr.Progress()  # Gradio fills this parameter with the request's progress bar

TARGETS = ("ratio", "category", "none")
SWEEP_HEADERS = [
    "requested",
    "output",
    "achieved (subwords)",
    "achieved (characters)",
    "trained to steer",
    "lines",
    "longest line",
    "chars/s",
    "fits",
]


def target_controls(registry, model, target, ratio, category) -> dict:
    """The controls for the chosen target, checked against what the model offers; none for a
    model without length controls, whatever the target inputs hold (they do not apply to it)."""
    checks.choice("target", target, TARGETS)
    if not registry.length_controls(model):
        return {}
    controls = registry.controls_of(model)
    if target == "ratio":
        if "length_ratio" not in controls:
            raise ValueError(f"model {model!r} has no `length_ratio` control; pick a category")
        return {"length_ratio": checks.number("ratio", ratio, 0.1, checks.LIMITS.max_length_ratio)}
    if target == "category":
        if "length" not in controls:
            raise ValueError(f"model {model!r} has no `length` control; pick a ratio")
        return {"length": checks.choice("category", category, list(controls["length"].values))}
    return {}


def measure(gen, source: str, output: str, limits_: subtitles.SubtitleLimits, duration) -> dict:
    """Achieved ratios and the subtitle check of `output` as a plain dict."""

    def subwords(text):
        return len(gen.tokenizer.encode(text, add_special_tokens=False).ids)

    check = subtitles.check(output, limits_, duration or None)
    return {
        "subword_ratio": subtitles.ratio(subwords(output), subwords(source)),
        "character_ratio": subtitles.ratio(len(output), len(source)),
        "source_subwords": subwords(source),
        "output_subwords": subwords(output),
        "lines": check.lines,
        "longest_line": check.longest_line,
        "chars_per_second": check.chars_per_second,
        "line_length_ok": check.line_length_ok,
        "line_count_ok": check.line_count_ok,
        "reading_speed_ok": check.reading_speed_ok,
        "fits": check.passes,
    }


def _badge(ok, text) -> str:
    kind = "info" if ok is None else ("pass" if ok else "fail")
    mark = "" if ok is None else ("✓ " if ok else "✗ ")
    return f'<span class="badge {kind}">{mark}{html.escape(text)}</span>'


def report_html(measured: dict, limits_: subtitles.SubtitleLimits) -> str:
    def fmt(value):
        return "–" if value is None else f"{value:.2f}"

    speed = measured["chars_per_second"]
    badges = [
        _badge(None, f"ratio {fmt(measured['subword_ratio'])} in subwords"),
        _badge(None, f"ratio {fmt(measured['character_ratio'])} in characters"),
        _badge(
            measured["line_length_ok"],
            f"longest line {measured['longest_line']} / {limits_.chars_per_line} chars",
        ),
        _badge(measured["line_count_ok"], f"{len(measured['lines'])} / {limits_.max_lines} lines"),
        _badge(
            measured["reading_speed_ok"],
            "no duration given"
            if speed is None
            else f"{speed:.1f} / {limits_.chars_per_second:g} chars/s",
        ),
        _badge(measured["fits"], "fits the subtitle" if measured["fits"] else "does not fit"),
    ]
    lines = []
    for number, line in enumerate(measured["lines"], start=1):
        over = number > limits_.max_lines or len(line) > limits_.chars_per_line
        css = ' class="over"' if over else ""
        lines.append(f"<div{css}>{html.escape(line)}</div>")
    preview = f'<div class="subtitle-preview">{"".join(lines) or "&nbsp;"}</div>'
    return f'<div class="badges">{"".join(badges)}</div>{preview}'


def subtitle_limits(chars_per_line, max_lines, chars_per_second) -> subtitles.SubtitleLimits:
    return subtitles.SubtitleLimits(
        chars_per_line=checks.integer(
            "chars_per_line", chars_per_line, 10, checks.LIMITS.max_chars_per_line
        ),
        max_lines=checks.integer("max_lines", max_lines, 1, checks.LIMITS.max_subtitle_lines),
        chars_per_second=checks.number(
            "chars_per_second", chars_per_second, 1, checks.LIMITS.max_chars_per_second
        ),
    )


def sweep_values(registry, model) -> tuple[str, list]:
    """The control to sweep and its values: every length ratio, else every category."""
    controls = registry.controls_of(model)
    if "length_ratio" in controls:
        values = sorted(float(v) for v in controls["length_ratio"].values)
        return "length_ratio", [v for v in values if 0.1 <= v <= 2.0]
    if "length" in controls:
        return "length", list(controls["length"].values)
    raise ValueError(
        f"`model` must have a `length_ratio` or `length` control to sweep, got {model!r}, which "
        "rewrites at the length it chooses: use Rewrite"
    )


STEERED = re.compile(r"value tokens.*?\(\s*([\d.]+)\s*-\s*([\d.]+)\s*\)")


def steered(metrics: Mapping) -> tuple[float, float, float] | None:
    """(low, high, mean error) of the length ratios the model's value tokens were shown to steer,
    from its manifest's evaluation `metrics` ("value tokens mean abs error (0.6-1.4)": 0.08), or
    None.

    >>> steered({"value tokens mean abs error (0.6-1.4)": 0.08})
    (0.6, 1.4, 0.08)
    """
    for key, value in metrics.items():
        if (found := STEERED.search(key)) and isinstance(value, (int, float)):
            return float(found[1]), float(found[2]), float(value)
    return None


def intro(registry, names: list[str]) -> str:
    """The tab's line: what the first model does and where its length control works."""
    line = (
        "Rewrites a King James verse in modern (World English Bible) wording at a target length, "
        "checked against subtitle rules; the models were trained on Bible verse pairs only, so "
        "other English is rewritten poorly."
    )
    found = steered(registry.manifest(names[0]).metrics) if names else None
    if found:
        low, high, error = found
        line += (
            f" The ratio tokens steer the length between {low:g} and {high:g} of the source "
            f"(mean error {error:.2f} on test verses); outside that range they were too rare in "
            "training to have an effect, and a short verse often has no shorter modern wording: "
            "the sweep's achieved columns show what each ratio did."
        )
    return line


@dataclass
class RewriteInputs:
    """The tab's inputs and buttons."""

    model: gr.Dropdown
    source: gr.Textbox
    target: gr.Radio
    ratio: gr.Slider
    category: gr.Dropdown
    target_note: gr.Markdown  # says when the target does not apply to the model
    decoding: widgets.DecodingInputs
    subtitle: dict  # chars_per_line, max_lines, chars_per_second, duration -> component
    run: gr.Button
    sweep: gr.Button

    def by_name(self) -> dict:
        """The endpoints' inputs by their API parameter names, in order."""
        named = {"model": self.model, "source": self.source, "target": self.target}
        named |= {"ratio": self.ratio, "category": self.category}
        return named | self.decoding.by_name() | self.subtitle


@dataclass
class RewriteOutputs:
    """The tab's outputs: the rewrite, its checks, its alignment and the sweep."""

    errors: gr.Markdown
    loops: gr.Markdown
    output: gr.Textbox
    report: gr.HTML
    measured: gr.JSON
    shown: gr.State  # what the heat map shows: model, source, controls and text of the last run
    attention_note: gr.Markdown
    attention_plot: gr.ScatterPlot
    chart: gr.LinePlot
    table: gr.Dataframe


def build(registry) -> None:
    names = registry.rewriters()
    with gr.Tab("Rewrite", id="rewrite"):
        gr.Markdown(intro(registry, names), elem_classes="model-note")
        if not names:
            gr.Markdown(
                "No installed model rewrites: none is a seq2seq model with a `length_ratio` or "
                "`length` control (seed 004's length tokens) or trained from one language to "
                'the same (docs/APP.md, "How models are chosen").',
                elem_classes="notice",
            )
        with gr.Row():
            with gr.Column(scale=2):
                inputs = input_column(registry, names)
            with gr.Column(scale=3):
                outputs = output_column(registry, inputs.model)
        follow_model(registry, inputs, outputs)
        wire(registry, inputs, outputs)


def input_column(registry, names: list[str]) -> RewriteInputs:
    """The model, the line, the target length, decoding and subtitle limits, the buttons, the
    Link and the example verses."""
    model = widgets.model_picker(names)
    widgets.model_card(registry, model)
    source = gr.Textbox(examples.KJV[0], label="Line to rewrite", lines=3)
    target, ratio, category, target_note = target_inputs(registry, model.value)
    decoding = widgets.decoding_inputs(mode="beam search", max_new_tokens=96, with_samples=False)
    subtitle = subtitle_inputs()
    with gr.Row():
        run = gr.Button("Rewrite", variant="primary", interactive=bool(names))
        sweep = gr.Button(
            "Sweep every ratio",
            interactive=bool(names) and bool(registry.length_controls(model.value)),
            elem_id="rewrite-sweep-button",
        )
    inputs = RewriteInputs(
        model, source, target, ratio, category, target_note, decoding, subtitle, run, sweep
    )
    links.shareable("rewrite", "rewrite", inputs.by_name())
    gr.Examples(
        [[line] for line in examples.KJV],
        [source],
        label="KJV verses",
        example_labels=examples.KJV,
    )
    return inputs


def without_length_control(model: str) -> str:
    """The line under the target inputs for a model that has no length control."""
    return (
        f"**{model}** has no length control (it was not trained with seed 004's length tokens): "
        "it rewrites at the length it chooses, so the target length does not apply and the "
        "sweep is off."
    )


def target_state(registry, model: str | None) -> dict:
    """What the target inputs show for `model`: the target kind, the categories, whether they
    apply (a model without length controls ignores them) and the line saying so."""
    has = registry.controls_of(model) if model else {}
    categories = list(has["length"].values) if "length" in has else []
    applies = not model or bool(registry.length_controls(model))
    if not applies:
        kind = "none"
    else:
        kind = "ratio" if "length_ratio" in has else "category"
    return {
        "target": kind,
        "categories": categories,
        "applies": applies,
        "note": "" if applies else without_length_control(model),
    }


def target_inputs(registry, model: str | None):
    """The target kind, the ratio, the category and the line saying when they do not apply, for
    the first `model`."""
    state = target_state(registry, model)
    with gr.Row():
        target = gr.Radio(
            list(TARGETS),
            value=state["target"],
            label="Target length",
            interactive=state["applies"],
        )
        ratio = widgets.setting_slider(
            0.1,
            checks.LIMITS.max_length_ratio,
            value=0.8,
            step=0.1,
            label="Ratio (output / source)",
            scale=2,
            min_width=200,  # narrower, the slider's maximum label is cut off
            interactive=state["applies"],
        )
        category = gr.Dropdown(
            state["categories"],
            value=state["categories"][0] if state["categories"] else None,
            label="Category",
            allow_custom_value=True,
            interactive=state["applies"],
        )
    note = gr.Markdown(state["note"], elem_id="rewrite-target-note", elem_classes="model-note")
    return target, ratio, category, note


def subtitle_inputs() -> dict:
    """Characters per line, lines, characters per second and duration, in an open accordion,
    by the endpoints' names."""
    with gr.Accordion("Subtitle limits", open=True):
        with gr.Row():
            return {
                "chars_per_line": widgets.setting_number(
                    42,
                    precision=0,
                    minimum=10,
                    maximum=checks.LIMITS.max_chars_per_line,
                    label="Characters per line",
                ),
                "max_lines": widgets.setting_number(
                    2,
                    precision=0,
                    minimum=1,
                    maximum=checks.LIMITS.max_subtitle_lines,
                    label="Lines",
                ),
                "chars_per_second": widgets.setting_number(
                    17,
                    minimum=1,
                    maximum=checks.LIMITS.max_chars_per_second,
                    label="Characters per second",
                ),
                "duration": widgets.setting_number(
                    4.0,
                    minimum=0,
                    maximum=checks.LIMITS.max_subtitle_seconds,
                    label="Duration (s, 0 = none)",
                ),
            }


def output_column(registry, model: gr.Dropdown) -> RewriteOutputs:
    """The model's note, errors, the rewrite and its subtitle check, the attention heat map with
    its line, and the sweep's plot and table."""
    widgets.model_note(registry, model, "rewrite-model-note")
    errors = widgets.error_box("rewrite-error")
    loops = widgets.loop_warning("rewrite-loops")
    output = gr.Textbox(label="Rewrite", lines=3, buttons=["copy"], elem_id="rewrite-output")
    report = gr.HTML(label="Subtitle check", elem_id="rewrite-report")
    with gr.Accordion("Measurements", open=False):
        measured = gr.JSON(label="Measurements")
    attention_note = gr.Markdown(
        alignment_view.model_line(registry.manifest(model.value)) if model.value else "",
        elem_id="rewrite-attention-note",
        elem_classes="model-note",
    )
    attention_plot = alignment_view.alignment_plot("rewrite-attention")
    chart = gr.LinePlot(
        label="Requested vs achieved length", show_label=False, elem_id="rewrite-plot"
    )
    table = gr.Dataframe(
        headers=SWEEP_HEADERS,
        label="Every ratio",
        interactive=False,
        wrap=True,
        # each header's longest word fits its column (13 px type, ui/style.py `numbers`)
        column_widths=["12%", "16%", "13%", "15%", "10%", "8%", "10%", "10%", "6%"],
        elem_id="rewrite-sweep-table",
        elem_classes="numbers",
    )
    shown = gr.State(None)
    return RewriteOutputs(
        errors, loops, output, report, measured, shown, attention_note, attention_plot, chart, table
    )


def follow_model(registry, inputs: RewriteInputs, outputs: RewriteOutputs) -> None:
    """A picked model sets the target kind and categories it offers (or disables the target
    inputs and the sweep when it has no length control), and the attention line."""

    def for_model(name):
        state = target_state(registry, name)
        categories = state["categories"]
        applies = state["applies"]
        return (
            gr.update(value=state["target"], interactive=applies),
            gr.update(interactive=applies),
            gr.update(
                choices=categories,
                value=categories[0] if categories else None,
                interactive=applies,
            ),
            state["note"],
            gr.update(interactive=applies),
            alignment_view.model_line(registry.manifest(name)) if name else "",
        )

    inputs.model.change(
        for_model,
        inputs.model,
        [
            inputs.target,
            inputs.ratio,
            inputs.category,
            inputs.target_note,
            inputs.sweep,
            outputs.attention_note,
        ],
        queue=False,
        api_visibility="private",
    )


def wire(registry, inputs: RewriteInputs, outputs: RewriteOutputs) -> None:
    """The Rewrite and Sweep buttons, the heat map after each rewrite, errors and loop labels."""
    names = list(inputs.by_name())
    rewritten = inputs.run.click(
        rewrite_endpoint(registry, names),
        list(inputs.by_name().values()),
        [outputs.output, outputs.report, outputs.measured, outputs.shown],
        api_name="rewrite",
        concurrency_id=checks.CONCURRENCY_ID,
    )
    swept = inputs.sweep.click(
        sweep_endpoint(registry, names),
        list(inputs.by_name().values()),
        [outputs.chart, outputs.table],
        api_name="rewrite_sweep",
        concurrency_id=checks.CONCURRENCY_ID,
    )
    # On the state rather than after the click, so a Link's run (which calls the endpoint
    # itself) draws the heat map too; an identical rerun leaves the state, and the map, as is.
    outputs.shown.change(
        lambda shown: attention_view(registry, shown),
        outputs.shown,
        [outputs.attention_plot, outputs.attention_note],
        concurrency_id=checks.CONCURRENCY_ID,
        api_visibility="private",
    )
    stale = {
        outputs.output: "",
        outputs.report: "",
        outputs.measured: None,
        outputs.shown: None,
        outputs.chart: None,
        outputs.table: None,
    }
    widgets.show_errors(outputs.errors, rewritten, [inputs.run.click, inputs.sweep.click], stale)
    widgets.show_errors(outputs.errors, swept, [], stale)
    widgets.label_loops(outputs.loops, outputs.output, lambda text: [text])


def attention_view(registry, shown: dict | None) -> tuple:
    """(plot update, attention line) for the run `shown` describes: the heat map, or, for a
    model without attention or whose attention cannot be read, the plot hidden and the line
    (saying why, for the latter)."""
    if not shown:
        return gr.update(visible=False), gr.skip()
    manifest = registry.manifest(shown["model"])
    line = alignment_view.model_line(manifest)
    if not alignment_view.attends(manifest):
        return gr.update(visible=False), line
    try:
        found = alignment.alignment(
            registry.get(shown["model"]), shown["source"], shown["text"], shown["controls"]
        )
    except ValueError as error:
        return gr.update(visible=False), f"{line} No heat map: {error}."
    return alignment_view.heat_map(shown["model"], found), line


def _prepare(registry, model, source, settings, subtitle_values):
    source = checks.text("source", source)
    config = checks.decoding(**settings)
    limits_ = subtitle_limits(*subtitle_values[:3])
    duration = checks.number(
        "duration", subtitle_values[3] or 0, 0, checks.LIMITS.max_subtitle_seconds
    )
    return registry.get(model), source, config, limits_, duration


def rewrite_endpoint(registry, names: list[str]):
    """`/rewrite`, taking the API parameters `names`: the rewrite, its subtitle report and
    measurements (and, off the API, what the heat map is to show)."""

    @checks.shown_to_user
    @checks.taking(names)
    def rewrite(
        model,
        source,
        target,
        ratio,
        category,
        chars_per_line,
        max_lines,
        chars_per_second,
        duration,
        **settings,
    ):
        """Rewrite `source` to the target length; return (text, report HTML, measurements)."""
        subtitle = (chars_per_line, max_lines, chars_per_second, duration)
        gen, source, config, limits_, duration = _prepare(
            registry, model, source, settings, subtitle
        )
        controls = target_controls(registry, model, target, ratio, category)
        text = gen.generate(source, config, controls=controls)[0].text.strip()
        numbers = measure(gen, source, text, limits_, duration)
        shown = {"model": model, "source": source, "controls": controls, "text": text}
        return text, report_html(numbers, limits_), numbers, shown

    return rewrite


def sweep_endpoint(registry, names: list[str]):
    """`/rewrite_sweep`, taking the API parameters `names`: the line rewritten at every ratio
    (or category), as a plot and a table."""

    @checks.shown_to_user
    @checks.taking(names)
    def rewrite_sweep(
        model,
        source,
        target,
        ratio,
        category,
        chars_per_line,
        max_lines,
        chars_per_second,
        duration,
        progress=PROGRESS,
        **settings,
    ):
        """Rewrite `source` at every ratio (or category); return (plot, table)."""
        subtitle = (chars_per_line, max_lines, chars_per_second, duration)
        gen, source, config, limits_, duration = _prepare(
            registry, model, source, settings, subtitle
        )
        control, values = sweep_values(registry, model)
        found = steered(registry.manifest(model).metrics) if control == "length_ratio" else None

        def in_range(value):
            if found is None:
                return "–"
            return "yes" if found[0] - 1e-9 <= value <= found[1] + 1e-9 else "no"

        rows, subword_ratios, char_ratios = [], [], []
        for value in progress.tqdm(values, desc="rewriting"):
            text = gen.generate(source, config, controls={control: value})[0].text.strip()
            numbers = measure(gen, source, text, limits_, duration)
            subword_ratios.append(numbers["subword_ratio"])
            char_ratios.append(numbers["character_ratio"])
            rows.append(
                [
                    value,
                    text,
                    _round(numbers["subword_ratio"]),
                    _round(numbers["character_ratio"]),
                    in_range(value),
                    len(numbers["lines"]),
                    numbers["longest_line"],
                    _round(numbers["chars_per_second"]),
                    "✓" if numbers["fits"] else "✗",
                ]
            )
        return plots.length_sweep(values, subword_ratios, char_ratios), rows

    return rewrite_sweep


def _round(value):
    return "–" if value is None else round(value, 2)
