"""The Masked LM tab: seed 000's BERT-Base against BERT-Large, on our two masked LMs.

Sections: fill-mask with every masked LM side by side (scores as bars, the first mask; all
masks in the table); the masking-ratio study, run live on a few held-out verses (the cards hold
the full run); the token-vector probes (king / queen cosines by context, word order, Average
Influence Similarity with its heat map); BERT as a generator, three ways, beside the causal
Bible LM's greedy continuation of the same prompt. Endpoints: `/fill_mask`, `/masking_study`,
`/token_probes`, `/influence`, `/bert_generation`. Masked LMs are found by manifest task
("fill-mask"), never by name.
"""

from __future__ import annotations

import html

import gradio as gr

import runtime
from study import bert_generation as strategies
from study import masking, probes

from . import checks, expectations, links, plots, widgets

EXAMPLE = "Jesus said to them, “I am the <|mask|> of life.”"
STUDY_SENTENCES = (
    "In the beginning, God created the heavens and the earth.",
    "The earth was formless and empty, and darkness was on the surface of the deep.",
    "Then Jesus went up into the mountain, and he sat there with his disciples.",
    "The Lord is my shepherd; I shall lack nothing.",
    "He said to them, “Go into all the world, and preach the Good News to the whole creation.”",
    "The king of Egypt called for the midwives and said to them, “Why have you done this?”",
    "Now the man knew Eve his wife. She conceived, and gave birth to Cain.",
    "Moses went up to God, and Yahweh called to him out of the mountain.",
)
MAX_STUDY_SENTENCES = len(STUDY_SENTENCES)
PROBE_HEADERS = ["model", "context", "comparison", "cosine"]
GENERATION_HEADERS = ["model", "strategy", "output"]


def _models(registry, model: str | None = None) -> list[str]:
    names = registry.masked_lms()
    if not names:
        raise ValueError("no masked LM is installed (a bundle with manifest task 'fill-mask')")
    if model is not None and model not in names:
        raise ValueError(f"`model` must be one of {names}, got {model!r}")
    return [model] if model else names


def bars(predictions) -> dict[str, float]:
    """gr.Label's {label: score} for one mask's predictions (the first mask if several)."""
    first = predictions[0] if predictions and isinstance(predictions[0], list) else predictions
    return {repr(p["token_str"]): p["score"] for p in first}


def cosine_table(result: dict) -> str:
    """`study.probes.influence`'s all-to-all cosine matrix as an HTML table, each cell shaded
    from blue (-1) through white (0) to red (1): seed 000's heat maps (figures 18-19)."""

    def cell(value: float) -> str:
        strength = round(255 * (1 - min(abs(value), 1.0)))
        color = f"255,{strength},{strength}" if value >= 0 else f"{strength},{strength},255"
        return f'<td style="background:rgb({color})" title="{value:.3f}">{value:.2f}</td>'

    header = "".join(f"<th>{html.escape(t.strip())}</th>" for t in result["tokens_b"])
    rows = "".join(
        f"<tr><th>{html.escape(token.strip())}</th>{''.join(cell(v) for v in values)}</tr>"
        for token, values in zip(result["tokens_a"], result["matrix"])
    )
    caption = f"average {result['average_similarity']:.3f}, AIS {result['ais']:.3f}"
    return (
        f'<div class="cosines-wrap"><table class="cosines"><caption>{caption}</caption>'
        f"<tr><th></th>{header}</tr>{rows}</table></div>"
    )


def section_link(section: str, inputs: dict) -> None:
    """A Link for one section: it reruns the section's button (every masked LM side by side)."""
    links.shareable("masked-lm", f"{section}_view", inputs, section=section)


def build(registry) -> None:
    names = registry.masked_lms()
    with gr.Tab("Masked LM", id="masked-lm"):
        if not names:
            gr.Markdown("No masked LM installed (a bundle with manifest task `fill-mask`).")
        gr.Markdown(
            "Seed 000's BERT-Base vs BERT-Large, scaled down: BERT masked LMs trained here on a "
            "library of Bible commentaries and dictionaries, then the World English Bible. The "
            "mask token is `<|mask|>` and takes the space before it (`the <|mask|> of God`)."
        )
        gr.Markdown(
            "\n\n".join(expectations.summary(n, registry.manifest(n)) for n in names),
            elem_classes="model-note",
        )
        build_fill_mask(registry, names)
        build_masking_study(registry)
        build_token_probes(registry)
        build_influence(registry, names)
        build_bert_generation(registry)


def build_fill_mask(registry, names: list[str]) -> None:
    """Fill-mask with every masked LM side by side, and the `/fill_mask` endpoint."""
    with gr.Row():
        text = gr.Textbox(EXAMPLE, label="Text with one or more <|mask|>", scale=4)
        top_k = widgets.setting_slider(
            1, checks.LIMITS.fill_mask_top_k_shown, value=5, step=1, label="top k", scale=1
        )
    fill = gr.Button("Fill the mask", variant="primary")
    fill_errors = widgets.error_box("fill-mask-error")
    section_link("fill_mask", {"text": text, "top_k": top_k})
    with gr.Row():
        labels = [
            gr.Label(
                label=name,
                num_top_classes=checks.LIMITS.fill_mask_top_k_shown,
                elem_id=f"fill-mask-{index}",
            )
            for index, name in enumerate(names)
        ]
    every_mask = gr.Dataframe(
        headers=["model", "mask", "rank", "token", "score", "sequence"],
        interactive=False,
        wrap=True,
        label="Every mask",
    )

    @checks.shown_to_user
    def fill_mask(model: str, text: str, top_k: int = 5) -> list:
        """Transformers' fill-mask pipeline output for `text` from `model` (a masked LM)."""
        _models(registry, model)
        top_k = checks.integer("top_k", top_k, 1, checks.LIMITS.max_fill_mask_top_k)
        return registry.get(model).fill_mask(checks.text("text", text), top_k)

    @checks.shown_to_user
    def fill_side_by_side(text, top_k):
        results, rows = [], []
        for name in _models(registry):
            found = fill_mask(name, text, top_k)
            results.append(bars(found))
            per_mask = found if isinstance(found[0], list) else [found]
            for mask, predictions in enumerate(per_mask, start=1):
                for rank, p in enumerate(predictions, start=1):
                    rows.append(
                        [name, mask, rank, p["token_str"], round(p["score"], 4), p["sequence"]]
                    )
        return *results, rows

    filled = checks.view_and_endpoint(
        fill, fill_side_by_side, [text, top_k], [*labels, every_mask], fill_mask, "fill_mask"
    )
    stale = {label: None for label in labels} | {every_mask: None}
    widgets.show_errors(fill_errors, filled, [fill.click], stale)


def build_masking_study(registry) -> None:
    """The masking-ratio study, run live on a few verses, and the `/masking_study` endpoint."""
    gr.Markdown(
        "### Masking ratio (000, figures 16-17)\nMask n random words (5 to 80 % of each "
        "verse), repeat, and count how often the top-k predictions hold the original word. "
        "A small live run; the model cards show the full one."
    )
    with gr.Row():
        sentences = widgets.setting_slider(1, MAX_STUDY_SENTENCES, value=4, step=1, label="verses")
        repetitions = widgets.setting_slider(
            1, checks.LIMITS.max_masking_repetitions, value=2, step=1, label="repetitions"
        )
        run_study = gr.Button("Run the study")
    study_errors = widgets.error_box("masking-study-error")
    section_link("masking_study", {"sentences": sentences, "repetitions": repetitions})
    study_plot = gr.LinePlot(label="Accuracy against masking ratio")

    @checks.shown_to_user
    def masking_study(sentences: int = 4, repetitions: int = 2) -> dict:
        """Top-1/2/3/5 accuracy against the masking ratio for every masked LM."""
        count = checks.integer("sentences", sentences, 1, MAX_STUDY_SENTENCES)
        repeat = checks.integer(
            "repetitions", repetitions, 1, checks.LIMITS.max_masking_repetitions
        )
        return {
            name: masking.masking_study(
                registry.get(name), STUDY_SENTENCES[:count], repetitions=repeat
            )
            for name in _models(registry)
        }

    def study_figure(sentences, repetitions):
        return plots.masking_study(masking_study(sentences, repetitions))

    studied = checks.view_and_endpoint(
        run_study,
        study_figure,
        [sentences, repetitions],
        study_plot,
        masking_study,
        "masking_study",
    )
    widgets.show_errors(study_errors, studied, [run_study.click], {study_plot: None})


def build_token_probes(registry) -> None:
    """The king / queen and word-order probes, and the `/token_probes` endpoint."""
    gr.Markdown(
        "### Token-vector probes (000, section 4.2)\nCosines of last-layer vectors: the word "
        "alone, in a short and in an extended context; word order; and the Average Influence "
        "Similarity of two sentences that differ in one word."
    )
    run_probes = gr.Button("Run the probes")
    probe_errors = widgets.error_box("token-probes-error")
    section_link("token_probes", {})
    probe_table = gr.Dataframe(headers=PROBE_HEADERS, interactive=False, label="Probes")

    @checks.shown_to_user
    def token_probes() -> dict:
        """King / queen cosines by context and the word-order cosines, per masked LM."""
        out = {}
        for name in _models(registry):
            gen = registry.get(name)
            out[name] = {
                "analogy": probes.analogy_table(gen),
                "word_order": probes.word_order(gen),
            }
        return out

    def probe_rows():
        rows = []
        for name, result in token_probes().items():
            for context, comparisons in result["analogy"].items():
                for comparison, value in comparisons.items():
                    rows.append([name, context, comparison, round(value, 3)])
            for ordering, value in result["word_order"].items():
                context = f"word order: {ordering}"
                rows.append([name, context, "queen vs original", round(value, 3)])
        return rows

    probed = checks.view_and_endpoint(
        run_probes, probe_rows, None, probe_table, token_probes, "token_probes"
    )
    widgets.show_errors(probe_errors, probed, [run_probes.click], {probe_table: None})


def build_influence(registry, names: list[str]) -> None:
    """Average Influence Similarity of two sentences as heat maps, and the `/influence`
    endpoint."""
    with gr.Row():
        sentence_a = gr.Textbox("the king was tired so he went to sleep", label="Sentence A")
        sentence_b = gr.Textbox("the queen was tired so he went to sleep", label="Sentence B")
        compare = gr.Button("Average Influence Similarity")
    influence_errors = widgets.error_box("influence-error")
    section_link("influence", {"sentence_a": sentence_a, "sentence_b": sentence_b})
    with gr.Column():  # one under the other: side by side, a long sentence's tables overlap
        heatmaps = [gr.HTML(label=name, elem_classes="heatmap") for name in names]

    @checks.shown_to_user
    def influence(model: str, sentence_a: str, sentence_b: str) -> dict:
        """All-to-all cosines, their average and the Average Influence Similarity."""
        _models(registry, model)
        a = checks.text("sentence_a", sentence_a, max_chars=checks.LIMITS.max_sentence_chars)
        b = checks.text("sentence_b", sentence_b, max_chars=checks.LIMITS.max_sentence_chars)
        return probes.influence(registry.get(model), a, b)

    def influence_figures(sentence_a, sentence_b):
        return [
            f"<b>{html.escape(name)}</b>" + cosine_table(influence(name, sentence_a, sentence_b))
            for name in _models(registry)
        ]

    compared = checks.view_and_endpoint(
        compare, influence_figures, [sentence_a, sentence_b], heatmaps, influence, "influence"
    )
    stale = {heatmap: "" for heatmap in heatmaps}
    widgets.show_errors(influence_errors, compared, [compare.click], stale)


def build_bert_generation(registry) -> None:
    """BERT as a generator beside the causal Bible LM, and the `/bert_generation` endpoint."""
    gr.Markdown(
        "### BERT as a generator (000, section 4.3)\nGreedy, one mask at a time from the "
        "left, one mask at a time with the right context kept, or all masks at once, beside "
        "the causal Bible LM (greedy) on the same prompt."
    )
    with gr.Row():
        prompt = gr.Textbox(
            "In the beginning, God created the heavens and the earth. The earth was",
            label="Prompt (left context)",
            scale=3,
        )
        right = gr.Textbox("and God saw that it was good.", label="Right context", scale=2)
        tokens = widgets.setting_slider(
            1, checks.LIMITS.max_masked_lm_new_tokens, value=10, step=1, label="new tokens", scale=1
        )
    generate = gr.Button("Generate")
    generation_errors = widgets.error_box("bert-generation-error")
    section_link("bert_generation", {"prompt": prompt, "right": right, "tokens": tokens})
    generated = gr.Dataframe(
        headers=GENERATION_HEADERS, interactive=False, wrap=True, label="Outputs"
    )

    @checks.shown_to_user
    def bert_generation(prompt: str, right: str = "", tokens: int = 10) -> list:
        """Each masked LM's three strategies and the causal LM's greedy continuation."""
        prompt = checks.text("prompt", prompt, max_chars=checks.LIMITS.max_masked_text_chars)
        right = checks.text(
            "right", right or "", allow_empty=True, max_chars=checks.LIMITS.max_masked_text_chars
        )
        tokens = checks.integer("tokens", tokens, 1, checks.LIMITS.max_masked_lm_new_tokens)
        rows = []
        for name in _models(registry):
            for strategy, text in strategies.all_strategies(
                registry.get(name), prompt, right, tokens
            ).items():
                rows.append([name, strategy, text])
        for name in registry.causal_lms()[:1]:
            config = runtime.GenerationConfig(max_new_tokens=tokens, do_sample=False)
            text = registry.get(name).generate(prompt, config)[0].text
            rows.append([name, "causal LM, greedy (left context only)", text])
        return rows

    def generation_rows(prompt, right, tokens):
        """The outputs, each repetition loop labelled as one (ui/expectations.py)."""
        rows = bert_generation(prompt, right, tokens)
        for row in rows:
            reason = expectations.repetition_loop(row[2])
            row[2] += f"  ⚠ repetition loop ({reason}), not a result" if reason else ""
        return rows

    generated_event = checks.view_and_endpoint(
        generate,
        generation_rows,
        [prompt, right, tokens],
        generated,
        bert_generation,
        "bert_generation",
    )
    widgets.show_errors(generation_errors, generated_event, [generate.click], {generated: None})
