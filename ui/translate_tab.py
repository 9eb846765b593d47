"""The Translate tab: English → Spanish (seq2seq translators), one line at a time, beam or sampling.

The model list is every seq2seq model but those trained from one language to the same (they
rewrite: the Rewrite tab has them), translators first (manifest training_data names two
languages; English → Spanish first of all, ui/registry.py's `translators`). Each line of the
input is a separate source, translated in one batch; with several samples (sampling) or best
beams, each line's candidates are numbered. Endpoint `/translate` → the translations, one line
per source line.
"""

from __future__ import annotations

import gradio as gr

from . import checks, examples, links, widgets
from .registry import languages


def pair_label(registry, name) -> str:
    pair = languages(registry.manifest(name)) if name else None
    return f"{pair[0]} → {pair[1]}" if pair else "language pair not stated in the manifest"


def format_translations(outputs, lines: int, per_line: int) -> str:
    """One line per source line; several candidates as "1. … / 2. …" lines under each other."""
    texts = [out.text.strip() for out in outputs]
    if per_line == 1:
        return "\n".join(texts)
    blocks = []
    for line in range(lines):
        candidates = texts[line * per_line : (line + 1) * per_line]
        blocks.append("\n".join(f"{n}. {text}" for n, text in enumerate(candidates, start=1)))
    return "\n\n".join(blocks)


INTRO = (
    "Translates English into Spanish one line at a time. The translator was trained from scratch "
    "on Bible verse pairs only (World English Bible → Reina-Valera 1909): verses like the "
    'examples come out close to the Reina-Valera; everyday sentences ("Where is the train '
    'station?") use words it never saw and come out as Bible Spanish or the wrong words.'
)


def build(registry) -> None:
    names = registry.translators()
    with gr.Tab("Translate", id="translate"):
        gr.Markdown(INTRO, elem_classes="model-note")
        if not names:
            gr.Markdown(
                "No encoder-decoder (seq2seq) model that translates is installed (those trained "
                "from one language to the same are on the Rewrite tab).",
                elem_classes="notice",
            )
        with gr.Row():
            with gr.Column(scale=2):
                model = widgets.model_picker(names)
                pair = gr.Markdown(f"**Languages:** {pair_label(registry, model.value)}")
                widgets.model_card(registry, model)
                source = gr.Textbox(
                    "\n".join(examples.WEB[:2]),
                    lines=5,
                    label=f"English (one sentence per line, at most {checks.LIMITS.max_lines})",
                )
                decoding = widgets.decoding_inputs(
                    mode="beam search", max_new_tokens=128, top_p=0.9
                )
                run = gr.Button("Translate", variant="primary", interactive=bool(names))
                links.shareable(
                    "translate", "translate", {"model": model, "text": source} | decoding.by_name()
                )
                gr.Examples(
                    [[line] for line in examples.WEB],
                    [source],
                    label="WEB verses (what the translator was trained on)",
                    example_labels=examples.WEB,
                )
            with gr.Column(scale=2):
                widgets.model_note(registry, model, "translate-model-note")
                errors = widgets.error_box("translate-error")
                loops = widgets.loop_warning("translate-loops")
                output = gr.Textbox(
                    label="Translation", lines=10, buttons=["copy"], elem_id="translate-output"
                )

        model.change(
            lambda name: f"**Languages:** {pair_label(registry, name)}",
            model,
            pair,
            queue=False,
            api_visibility="private",
        )

        @checks.shown_to_user
        @checks.taking(["model", "text", *decoding.by_name()])
        def translate(model, text, **settings):
            """Translate each line of `text`; candidates numbered when samples > 1."""
            text = checks.text("text", text)
            lines = [line.strip() for line in text.splitlines() if line.strip()]
            if len(lines) > checks.LIMITS.max_lines:
                raise ValueError(
                    f"`text` must have at most {checks.LIMITS.max_lines} lines, got {len(lines)}"
                )
            config = checks.decoding(**settings)
            checks.sequences(len(lines), "lines", config)
            outputs = registry.get(model).generate(lines, config)
            return format_translations(outputs, len(lines), config.num_return_sequences)

        translated = run.click(
            translate,
            [model, source, *decoding.components()],
            output,
            api_name="translate",
            concurrency_id=checks.CONCURRENCY_ID,
        )
        widgets.show_errors(errors, translated, [run.click], {output: ""})
        widgets.label_loops(loops, output, str.splitlines, "line")
