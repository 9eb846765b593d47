"""The Generate tab: one model, one prompt, streamed token by token, with a Stop button.

Endpoint `/generate` streams (text, token view HTML, stats HTML). For a causal LM whose bundle
has the training 8-gram index, the final stats add the memorisation meter (seed 002): the share
of the output's word 8-grams found in the training text and the longest copied span. Stop
cancels the event; Gradio then closes the event's generator, whose `finally` closes the runtime
stream, which ends the decoding loop and frees the CPU. Examples are the prompts seed 002 gave
its Bible models. The stats' time to first token and tokens/s count from the visitor's click,
the queue included, with the server's own figures beside where they differ (ui/click_speed.py).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

import gradio as gr
from gradio.context import Context

from . import checks, click_speed, downloads, examples, expectations, links, widgets
from .streaming import SAMPLE_SEPARATOR, StreamCollector, legend_html, stats_html

UPDATE_EVERY = 0.04  # seconds between UI updates while streaming (the last one always goes out)
# A cancelled event sends no final update, so after Stop the browser itself turns the stats'
# "running" into "stopped" (after a moment, so that updates already on their way land first).
MARK_STOPPED = """() => setTimeout(() => {
  document.querySelectorAll('#generate-stats .stat-value').forEach((cell) => {
    cell.textContent = cell.textContent.replaceAll('running', 'stopped');
  });
}, 800)"""


def stream_generation(registry, model, prompt, controls, config, settings=None):
    """Yield (text, token view, stats, result) as tokens arrive; closing this closes the stream.

    `result` is `gr.skip()` until the last update, which carries the downloadable record
    (ui/downloads.py) of the run with `settings`, the endpoint's arguments."""
    gen = registry.get(model)
    collector = StreamCollector(config.num_return_sequences, gen.tokenizer, gen.eos_token_id)
    stream = gen.stream(prompt, config, controls=controls)
    shown = 0.0
    try:
        for event in stream:
            collector.add(event)
            if time.perf_counter() - shown >= UPDATE_EVERY:
                shown = time.perf_counter()
                view = collector.token_view()
                yield shown_text(gen, collector), view, stats_html(collector.stats()), gr.skip()
    finally:
        stream.close()
    stats = collector.stats()
    if gen.task == "causal-lm":
        stats["memorised"] = memorisation(gen, collector.texts)
    result = downloads.record(
        "generate", settings or {}, [downloads.run_record(registry, model, collector)], stats
    )
    yield shown_text(gen, collector), collector.token_view(), stats_html(stats), result


def shown_text(gen, collector: StreamCollector) -> str:
    """The samples' text as the output box shows it: without the model's format markers
    (`[e:text]` cut short by the token limit; ui/expectations.py), which the token view and
    the downloaded record keep; samples after the first under a "— sample n —" line."""
    texts = [expectations.strip_markup(text, gen.manifest) for text in collector.texts]
    heads = [""] + [SAMPLE_SEPARATOR.format(n=n) for n in range(2, len(texts) + 1)]
    return "".join(head + text for head, text in zip(heads, texts))


def memorisation(gen, texts: list[str]) -> dict | None:
    """The memorisation meter over every sample: the share of their word 8-grams found in the
    training text (pooled) and the longest copied span; None if the bundle has no index."""
    if not getattr(gen, "has_memorisation_index", False):  # e.g. a `--backend` model
        return None
    meters = [gen.memorised(text) for text in texts]
    grams = sum(m.ngrams for m in meters)
    longest = max(meters, key=lambda m: m.longest_span_words)
    share = sum(m.share * m.ngrams for m in meters) / grams if grams else None
    return {"share": share, "span": longest.longest_span, "span_words": longest.longest_span_words}


INTRO = (
    "Continue a prompt with one model, token by token. It opens on the best we ship for this: "
    "the SmolLM2 flagship's fine-tunes (adapters), whose controls (book, author, psalm, …) "
    "steer the text; with controls chosen the prompt may stay empty. The small models are the "
    "seeds' reproductions, one click away in the list."
)


def build(registry) -> None:
    manifests = {name: registry.manifest(name) for name in registry.generators()}
    names = expectations.best_first(list(manifests), manifests)
    with gr.Tab("Generate", id="generate"):
        gr.Markdown(INTRO, elem_classes="model-note")
        with gr.Row():
            with gr.Column(scale=2, min_width=280):
                inputs = _inputs(registry, manifests, names)
            with gr.Column(scale=3, min_width=280):
                outputs = _outputs(registry, inputs.model)
        _wire(registry, inputs, outputs)


@dataclass
class _Inputs:
    model: gr.Dropdown
    prompt: gr.Textbox
    pickers: widgets.ControlPickers
    decoding: widgets.DecodingInputs
    run: gr.Button
    stop: gr.Button

    def components(self) -> list:
        """The `/generate` endpoint's inputs, in its parameters' order."""
        return [self.model, self.prompt, self.pickers.controls, *self.decoding.components()]


@dataclass
class _Outputs:
    errors: gr.Markdown
    loops: gr.Markdown
    stats: gr.HTML
    output: gr.Textbox
    tokens: gr.HTML
    result: gr.State
    download: gr.DownloadButton


def _inputs(registry, manifests: dict, names: list[str]) -> _Inputs:
    """The settings column: model, prompt, controls, decoding settings (opening on the first
    model's own defaults), the buttons, the link and the examples."""
    model = widgets.model_picker(names, registry=registry, elem_id="generate-model")
    widgets.model_card(registry, model)
    prompt = gr.Textbox(label="Prompt", value=examples.GENERATE[0][0], lines=3)
    pickers = widgets.ControlPickers(registry, model, names)
    own = widgets.model_defaults(manifests[names[0]].generation_defaults.given()) if names else {}
    decoding = widgets.decoding_inputs(**own)
    decoding.follow(model, registry)
    with gr.Row():
        run = gr.Button(
            "Generate", variant="primary", interactive=bool(names), elem_id="generate-run"
        )
        stop = gr.Button("Stop", variant="stop")
    links.shareable(
        "generate",
        "generate",
        {"model": model, "prompt": prompt, "controls": pickers.controls} | decoding.by_name(),
    )
    # The examples set the prompt and the settings examples.GENERATE gives after it.
    gr.Examples(
        examples.GENERATE,
        [prompt, decoding["mode"], decoding["temperature"]],
        label="Prompts from seed 002",
        example_labels=examples.labels(examples.GENERATE),
    )
    return _Inputs(model, prompt, pickers, decoding, run, stop)


def _outputs(registry, model: gr.Dropdown) -> _Outputs:
    """The output column: the model's note, the error box, the loop warning, the stats, the
    text, the token view and the download button."""
    widgets.model_note(registry, model, "generate-model-note")
    errors = widgets.error_box("generate-error")
    loops = widgets.loop_warning("generate-loops")
    stats = gr.HTML(stats_html(_empty_stats()), label="Stats", elem_id="generate-stats")
    output = gr.Textbox(label="Output", lines=10, buttons=["copy"], elem_id="generate-output")
    with gr.Accordion("Tokens by probability (hover for the top 5)", open=True):
        tokens = gr.HTML(legend_html(), elem_id="token-view")
    result = gr.State(None)
    download = gr.DownloadButton(
        "Download JSON", visible=False, size="sm", elem_id="generate-download"
    )
    result.change(downloads.button, result, download, queue=False, api_visibility="private")
    return _Outputs(errors, loops, stats, output, tokens, result, download)


def _wire(registry, inputs: _Inputs, outputs: _Outputs) -> None:
    """The `/generate` endpoint on the button and on Enter, Stop, and the error box."""

    @checks.shown_to_user
    @checks.taking(["model", "prompt", "controls", *inputs.decoding.by_name()])
    def generate(model, prompt, controls, **settings):
        """Stream a continuation of `prompt` (text, token view HTML, stats HTML)."""
        arguments = {"model": model, "prompt": prompt, "controls": controls, **settings}
        controls = widgets.controls_value(controls)
        # Controls alone are a valid start (a causal LM writes from its control tokens and
        # its format's `[s:text]`, runtime/generator.py); with neither, a prompt is needed.
        started = bool(controls) or bool(registry.manifest(model).prompt_prefix)
        prompt = checks.text("prompt", prompt, allow_empty=started)
        config = checks.decoding(**settings)
        yield from stream_generation(registry, model, prompt, controls, config, arguments)

    shown = [outputs.output, outputs.tokens, outputs.stats, outputs.result]
    event = inputs.run.click(
        generate,
        inputs.components(),
        shown,
        api_name="generate",
        concurrency_id=checks.CONCURRENCY_ID,
    )
    submitted = inputs.prompt.submit(
        generate,
        inputs.components(),
        shown,
        api_visibility="private",
        concurrency_id=checks.CONCURRENCY_ID,
    )
    inputs.stop.click(None, cancels=[event, submitted], js=MARK_STOPPED)
    Context.root_block.load(None, js=click_speed.GENERATE, api_visibility="private")
    stale = {outputs.output: "", outputs.tokens: legend_html()}
    stale |= {outputs.stats: stats_html(_empty_stats()), outputs.result: None}
    # the last run's file is not this run's
    stale[outputs.download] = gr.DownloadButton(visible=False)
    triggers = ((event, inputs.run.click), (submitted, inputs.prompt.submit))
    for started, trigger in triggers:
        widgets.show_errors(outputs.errors, started, [trigger], stale)
    widgets.label_loops(outputs.loops, outputs.output, samples_of)


def samples_of(text: str) -> list[str]:
    """The samples of the output box's text (StreamCollector.text's "— sample n —" lines)."""
    return re.split(r"\n\n— sample \d+ —\n", text)


def _empty_stats() -> dict:
    return {
        "tokens": 0,
        "time_to_first_token_s": None,
        "tokens_per_second": None,
        "finish_reasons": ["–"],
        "mean_logprob": None,
    }
