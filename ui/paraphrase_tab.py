"""The Paraphrase tab: seed 003's unsupervised paraphrase with a hierarchical character model.

The model list is every "hierarchical-lm" bundle with an autoencoder graph (ui/registry.py).
One call decodes N candidates in a batch (runtime/hierarchical.py: a temperature and a noise
weight drawn per candidate from the given ranges), ranks them by the distance of their sentence
vectors to the source's, and shows the closest 4 plus 4 others drawn at random (seeded), as the
seed's figure does: each candidate character by character, the most likely character on a white
background and a sampled one shaded grey, its cost in nits on hover. Below: the autoencoder's
greedy reconstruction and the source's own cost in nits per character (the seed's table 4.2).

Endpoint `/paraphrase` → (candidates HTML, reconstruction Markdown, shown candidates as JSON).
With a chat model installed, a section sets an instruct model's paraphrases beside these
(ui/chat_paraphrase.py, endpoint `/paraphrase_beside_chat`).
"""

from __future__ import annotations

import html

import gradio as gr
import numpy as np

from . import chat_paraphrase, checks, links, widgets

CLOSEST = 4  # candidates shown by distance
RANDOM_OTHERS = 4  # further candidates shown at random
EXAMPLES = (
    "In the beginning, God created the heavens and the earth.",
    "The Lord is my shepherd; I shall not lack.",
    "Blessed are the poor in spirit, for theirs is the Kingdom of Heaven.",
)
ARGMAX_STYLE = "background:#ffffff"
SAMPLED_STYLE = "background:#c8c8c8"


def choose_shown(candidates: list, seed: int | None) -> list[tuple[str, object]]:
    """The closest CLOSEST candidates, then RANDOM_OTHERS of the rest in random order (seeded),
    each as ("closest" | "random", candidate)."""
    shown = [("closest", c) for c in candidates[:CLOSEST]]
    rest = candidates[CLOSEST:]
    picks = np.random.default_rng(seed).permutation(len(rest))[:RANDOM_OTHERS]
    return shown + [("random", rest[i]) for i in sorted(picks)]


def candidate_html(candidate) -> str:
    """One candidate as character spans: grey = sampled, white = argmax; nits in the title."""
    spans = "".join(
        f'<span class="{"char-sampled" if s.sampled else "char-argmax"}" '
        f'style="{SAMPLED_STYLE if s.sampled else ARGMAX_STYLE}" '
        f'title="{s.nits:.2f} nits{" (sampled)" if s.sampled else ""}">'
        f"{html.escape(s.char)}</span>"
        for s in candidate.steps
    )
    return spans or "<em>(empty)</em>"


def candidates_html(source: str, shown) -> str:
    rows = [
        f'<tr><td class="distance">{_distance(c.distance)}</td><td>{kind}</td>'
        f"<td>{c.temperature:.2f}</td><td>{c.noise:.2f}</td>"
        f'<td class="candidate">{candidate_html(c)}</td></tr>'
        for kind, c in shown
    ]
    return (
        '<div class="paraphrases-wrap"><table class="paraphrases"><thead><tr><th>distance</th>'
        "<th>shown as</th><th>T</th><th>noise w</th>"
        "<th>candidate (grey: sampled character; hover: nits)</th></tr></thead>"
        f'<tbody><tr style="background:#dde7f5"><td>0</td><td>source</td><td></td><td></td>'
        f'<td class="source">{html.escape(source)}</td></tr>{"".join(rows)}'
        "</tbody></table></div>"
    )


def _distance(value: float) -> str:
    return f"{value:.3f}" if np.isfinite(value) else "∞ (cannot be re-encoded)"


def paraphrase(
    registry,
    model,
    sentence,
    num_candidates,
    temperature_low,
    temperature_high,
    noise_low,
    noise_high,
    seed,
):
    """(candidates HTML, reconstruction Markdown, shown candidates as a list of dicts)."""
    sentence = checks.text("sentence", sentence)
    num_candidates = checks.integer(
        "num_candidates", num_candidates, 1, checks.LIMITS.max_candidates
    )
    temperature_low = checks.number(
        "temperature_low", temperature_low, 0.0, checks.LIMITS.max_paraphrase_range
    )
    temperature_high = checks.number(
        "temperature_high", temperature_high, 0.0, checks.LIMITS.max_paraphrase_range
    )
    noise_low = checks.number("noise_low", noise_low, 0.0, checks.LIMITS.max_paraphrase_range)
    noise_high = checks.number("noise_high", noise_high, 0.0, checks.LIMITS.max_paraphrase_range)
    seed = (
        None
        if seed is None
        else checks.integer("seed", seed, -1, checks.offered("seed").limits.high)
    )
    seed = None if seed is None or seed < 0 else seed
    gen = registry.get(model)
    candidates = gen.paraphrase(
        sentence,
        num_candidates,
        seed=seed,
        temperature_range=(temperature_low, temperature_high),
        noise_range=(noise_low, noise_high),
    )
    shown = choose_shown(candidates, seed)
    reconstruction = gen.reconstruction(sentence)
    summary = (
        f"**Autoencoder reconstruction** (greedy, no noise): {reconstruction.text}\n\n"
        f"Cost of the sentence itself: **{reconstruction.nits_per_char:.3f} nits/char**"
    )
    listing = [
        {
            "shown_as": kind,
            "text": c.text,
            "distance": c.distance if np.isfinite(c.distance) else None,
            "temperature": c.temperature,
            "noise": c.noise,
        }
        for kind, c in shown
    ]
    return candidates_html(sentence, shown), summary, listing


INTRO = (
    "Writes other sentences near yours (seed 003): a character-level hierarchical model "
    "(1.4M parameters) encodes the sentence and samples new ones around its code, ranked by "
    "closeness. It was trained on Bible verses only (the library model also on old commentaries "
    "and dictionaries), and at this size most candidates keep the verse's rhythm, not its "
    'meaning; even a verse can come back garbled ("Give us today our daily bread." → "As '
    'one for Holy Antioon Praise you."). It shows the method, not a usable paraphraser.'
)


def build(registry) -> None:
    names = registry.paraphrasers()
    with gr.Tab("Paraphrase", id="paraphrase"):
        gr.Markdown(INTRO, elem_classes="model-note")
        if not names:
            gr.Markdown(
                "No hierarchical model with an autoencoder is installed.", elem_classes="notice"
            )
        with gr.Row():
            with gr.Column(scale=2):
                inputs, run = settings_column(registry, names)
            with gr.Column(scale=3):
                widgets.model_note(registry, inputs["model"], "paraphrase-model-note")
                errors = widgets.error_box("paraphrase-error")
                table = gr.HTML(label="Candidates", elem_id="paraphrase-candidates")
                summary = gr.Markdown(elem_id="paraphrase-reconstruction")
                listing = gr.JSON(label="Shown candidates", visible=False)

        @checks.shown_to_user
        def run_paraphrase(
            model,
            sentence,
            num_candidates,
            temperature_low,
            temperature_high,
            noise_low,
            noise_high,
            seed,
        ):
            """Paraphrase candidates of `sentence` (closest 4 + 4 random) and the reconstruction."""
            return paraphrase(
                registry,
                model,
                sentence,
                num_candidates,
                temperature_low,
                temperature_high,
                noise_low,
                noise_high,
                seed,
            )

        paraphrased = run.click(
            run_paraphrase,
            list(inputs.values()),
            [table, summary, listing],
            api_name="paraphrase",
            concurrency_id=checks.CONCURRENCY_ID,
        )
        stale = {table: "", summary: "", listing: None}
        widgets.show_errors(errors, paraphrased, [run.click], stale)
        chat_paraphrase.build(  # with a chat model only
            registry, inputs["model"], inputs["sentence"], inputs["num_candidates"], inputs["seed"]
        )


def settings_column(registry, names: list[str]) -> tuple[dict, gr.Button]:
    """The model, sentence and sampling settings, keyed (in order) by `paraphrase`'s parameter
    names, with their Link and examples; and the button that runs them."""
    model = widgets.model_picker(names)
    widgets.model_card(registry, model)
    sentence = gr.Textbox(EXAMPLES[0], label="Sentence (at most 30 words)", lines=2)
    count = widgets.setting_slider(
        1, checks.LIMITS.max_candidates, value=40, step=1, label="Candidates"
    )
    with gr.Row():
        temperature_low = widgets.setting_number(0.0, label="Temperature from", minimum=0)
        temperature_high = widgets.setting_number(1.0, label="Temperature to", minimum=0)
    with gr.Row():
        noise_low = widgets.setting_number(0.0, label="Noise w from", minimum=0)
        noise_high = widgets.setting_number(1.0, label="Noise w to", minimum=0)
    seed = widgets.setting_number(0, label="Seed (-1: random)", precision=0)
    run = gr.Button("Paraphrase", variant="primary", interactive=bool(names))
    inputs = {
        "model": model,
        "sentence": sentence,
        "num_candidates": count,
        "temperature_low": temperature_low,
        "temperature_high": temperature_high,
        "noise_low": noise_low,
        "noise_high": noise_high,
        "seed": seed,
    }
    links.shareable("paraphrase", "paraphrase", inputs)
    gr.Examples(
        [[e] for e in EXAMPLES],
        [sentence],
        label="WEB verses (what the paraphrasers were trained on)",
        example_labels=EXAMPLES,
    )
    return inputs, run
