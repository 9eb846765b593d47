"""The decoding study of seed 000, on the Compare tab: top-k and top-p sweeps on one model.

As 000 did: pure sampling (temperature 1.0), top-k ∈ {0, 5, 10, 1000} with p = 1.0 and
top-p ∈ {1.0, 0.95, 0.9, 0.8} with k = 0 (k = 0, p = 1.0 is one setting, run once), a batch of
samples per prompt and seed. Quality = BLEU of all samples against a reference text, every
line a reference (000 scored against its training set); diversity = Self-BLEU (lower = more
diverse); UNGC-1..4 and distinct-2 as well. Endpoint `/decoding_study` returns the chart (a
line per sweep and score) and the table.
"""

from __future__ import annotations

import gradio as gr

import runtime

from . import checks, examples, metrics, plots, widgets

PROGRESS = gr.Progress()  # Gradio fills this parameter with the request's progress bar

TOP_K = (0, 5, 10, 1000)
TOP_P = (1.0, 0.95, 0.9, 0.8)
HEADERS = [
    "sweep",
    "setting",
    "BLEU",
    "Self-BLEU",
    "UNGC-1",
    "UNGC-2",
    "UNGC-3",
    "UNGC-4",
    "distinct-2",
    "samples",
]


def settings() -> list[tuple[str, str, int, float]]:
    """(sweep, label, top_k, top_p) in display order; the shared k = 0, p = 1.0 is in both."""
    rows = [("top-k", f"k = {k}", k, 1.0) for k in TOP_K]
    rows += [("top-p", f"p = {p:g}", 0, p) for p in TOP_P]
    return rows


def run_study(gen, prompts, reference, samples, max_new_tokens, seed, progress=None):
    """Rows of the study: one per setting, with the samples' scores."""
    done: dict[tuple[int, float], dict] = {}
    rows = []
    plan = settings()
    for step, (sweep, label, top_k, top_p) in enumerate(plan):
        if progress is not None:
            progress(step / len(plan), desc=f"{sweep}: {label}")
        if (top_k, top_p) not in done:
            texts = []
            for index, prompt in enumerate(prompts):
                config = runtime.GenerationConfig(
                    max_new_tokens=max_new_tokens,
                    do_sample=True,
                    top_k=top_k,
                    top_p=top_p,
                    num_return_sequences=samples,
                    seed=seed + index,
                )
                texts += [out.text for out in gen.generate(prompt, config)]
            unique = metrics.ungc(texts)
            done[(top_k, top_p)] = {
                "bleu": metrics.reference_bleu(texts, reference),
                "self_bleu": metrics.self_bleu(texts),
                **{f"ungc_{n}": unique[n] for n in range(1, 5)},
                "distinct_2": metrics.distinct_n(texts, 2),
                "samples": len(texts),
            }
        rows.append({"sweep": sweep, "label": label, **done[(top_k, top_p)]})
    return rows


def table(rows: list[dict]) -> list[list]:
    keys = ["bleu", "self_bleu", "ungc_1", "ungc_2", "ungc_3", "ungc_4", "distinct_2"]

    def cell(value):
        return "–" if value is None else round(value, 3)

    return [[r["sweep"], r["label"], *(cell(r[k]) for k in keys), r["samples"]] for r in rows]


def build(registry, names: list[str]) -> None:
    with gr.Accordion("Decoding study (seed 000): top-k and top-p sweeps", open=False):
        gr.Markdown(
            "Samples at temperature 1.0 for k ∈ {0, 5, 10, 1000} (p = 1) and "
            "p ∈ {1.0, 0.95, 0.9, 0.8} (k = 0). **Quality** = BLEU of the samples against the "
            "reference text (each line a reference); **diversity** = Self-BLEU, lower is more "
            "diverse. 000 found k = 5/10 collapse into repetition and recommended p = 0.95."
        )
        with gr.Row():
            model = gr.Dropdown(names, value=names[0] if names else None, label="Model")
            samples = widgets.setting_slider(
                2,
                checks.LIMITS.max_study_samples,
                value=5,
                step=1,
                label="Samples per prompt and setting",
            )
            max_tokens = widgets.setting_slider(
                8, checks.LIMITS.max_study_new_tokens, value=40, step=1, label="Max new tokens"
            )
            seed = widgets.setting("seed")
        with gr.Row():
            prompts = gr.Textbox(examples.STUDY_PROMPTS, lines=4, label="Prompts (one per line)")
            reference = gr.Textbox(examples.REFERENCE, lines=4, label="Reference text")
        run = gr.Button("Run the decoding study", interactive=bool(names))
        errors = widgets.error_box("decoding-study-error")
        chart = gr.LinePlot(
            label="Quality and diversity per setting",
            show_label=False,
            elem_id="decoding-study-chart",
        )
        result = gr.Dataframe(headers=HEADERS, label="Decoding study", interactive=False)

        @checks.shown_to_user
        def decoding_study(
            model, prompts, reference, samples, max_new_tokens, seed, progress=PROGRESS
        ):
            """The chart and table of 000's sweep on `model`."""
            lines = [line for line in checks.text("prompts", prompts).splitlines() if line.strip()]
            if len(lines) > checks.LIMITS.max_study_prompts:
                raise ValueError(
                    f"`prompts` must be at most {checks.LIMITS.max_study_prompts} lines, "
                    f"got {len(lines)}"
                )
            reference = checks.text(
                "reference", reference, max_chars=checks.LIMITS.max_reference_chars
            )
            samples = checks.integer("samples", samples, 2, checks.LIMITS.max_study_samples)
            max_new_tokens = checks.integer(
                "max_new_tokens", max_new_tokens, 1, checks.LIMITS.max_study_new_tokens
            )
            seed = checks.setting("seed", seed)
            rows = run_study(
                registry.get(model), lines, reference, samples, max_new_tokens, seed, progress
            )
            return plots.decoding_study(rows), table(rows)

        studied = run.click(
            decoding_study,
            [model, prompts, reference, samples, max_tokens, seed],
            [chart, result],
            api_name="decoding_study",
            concurrency_id=checks.CONCURRENCY_ID,
        )
        widgets.show_errors(errors, studied, [run.click], {chart: None, result: None})
