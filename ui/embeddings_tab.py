"""The Embeddings tab: what a model's input embedding matrix knows (seeds 002, 000, 001).

Phrase similarity is 002's comparison (sum of the phrase's token vectors, cosine × 100:
boy/girl, man/girl, boy + man/teenager); nearest neighbours rank the vocabulary by cosine;
analogies add and subtract vectors (king − man + woman, 000 and 001) and report where an
expected answer ranks. All from `embeddings.npy` in the bundle (ui/embeddings.py); a model
without it gets a clear message. Endpoints: `/embedding_similarity`, `/nearest_neighbours`,
`/analogy`.
"""

from __future__ import annotations

import gradio as gr

from . import examples, limits, widgets
from .embeddings import cosine

SIMILARITY_HEADERS = ["phrase A", "phrase B", "tokens A", "tokens B", "cosine × 100"]
NEIGHBOUR_HEADERS = ["rank", "token", "cosine × 100"]
SPACE_INFO = "encode words as they appear mid-sentence (with a leading space)"


def status(registry, name) -> str:
    if not name:
        return ""
    manifest = registry.manifest(name)
    if not manifest.get("embeddings"):
        return (
            f"**{name}** has no `embeddings.npy` (manifest key `embeddings`): its input "
            "embeddings are not available. Re-export it with the current export/."
        )
    return (
        f"Input embeddings of **{name}**: {manifest.get('vocab_size', '?')} tokens × "
        f"{manifest.get('hidden_size', '?')} dimensions."
    )


def parse_pairs(text: str) -> list[tuple[str, str]]:
    """Lines "phrase A | phrase B" → pairs.

    >>> parse_pairs("boy | girl\\nboy + man | teenager")
    [('boy', 'girl'), ('boy + man', 'teenager')]
    """
    pairs = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        parts = [part.strip() for part in line.split("|")]
        if len(parts) != 2 or not all(parts):
            raise ValueError(f"`pairs` line {number} must look like 'boy | girl', got {line!r}")
        pairs.append((parts[0], parts[1]))
    if not pairs:
        raise ValueError("`pairs` must contain at least one line like 'boy | girl'")
    return pairs


def build(registry) -> None:
    names = registry.with_embeddings() + [
        n for n in registry.names if n not in registry.with_embeddings()
    ]
    with gr.Tab("Embeddings", id="embeddings"):
        with gr.Row():
            model = widgets.model_picker(names)
            leading = gr.Checkbox(True, label="Leading space", info=SPACE_INFO)
        info = gr.Markdown(status(registry, model.value))
        model.change(
            lambda name: status(registry, name),
            model,
            info,
            queue=False,
            api_visibility="private",
        )
        with gr.Row():
            with gr.Column():
                gr.Markdown(
                    "### Phrase similarity (002)\nA phrase is the sum of its tokens' "
                    "vectors; `+` adds phrases."
                )
                pairs = gr.Textbox(examples.SIMILARITY_PAIRS, lines=4, label="Pairs, one per line")
                compare = gr.Button("Compare phrases", variant="primary")
                similarity = gr.Dataframe(
                    headers=SIMILARITY_HEADERS,
                    interactive=False,
                    wrap=True,
                    label="Cosine similarity",
                )
            with gr.Column():
                gr.Markdown("### Nearest neighbours")
                with gr.Row():
                    word = gr.Textbox("light", label="Word or expression", scale=3)
                    k = widgets.setting_slider(
                        1, limits.LIMITS.max_neighbours, value=10, step=1, label="k"
                    )
                words_only = gr.Checkbox(True, label="Only tokens with letters or digits")
                find = gr.Button("Find neighbours")
                neighbours = gr.Dataframe(
                    headers=NEIGHBOUR_HEADERS, interactive=False, label="Nearest tokens"
                )
            with gr.Column():
                gr.Markdown("### Analogy (000, 001)")
                expression = gr.Textbox("king - man + woman", label="Expression")
                expected = gr.Textbox("queen", label="Expected answer (optional)")
                solve = gr.Button("Solve")
                verdict = gr.Markdown()
                answers = gr.Dataframe(
                    headers=NEIGHBOUR_HEADERS, interactive=False, label="Nearest tokens"
                )

        @limits.shown_to_user
        def embedding_similarity(model, pairs, leading_space):
            """Cosine × 100 of each pair's summed token embeddings."""
            space = registry.embedding_space(model, limits.flag("leading_space", leading_space))
            rows = []
            for a, b in parse_pairs(limits.text("pairs", pairs)):
                rows.append(
                    [
                        a,
                        b,
                        " ".join(map(repr, space.tokens(a))),
                        " ".join(map(repr, space.tokens(b))),
                        round(100 * space.similarity(a, b), 1),
                    ]
                )
            return rows

        @limits.shown_to_user
        def nearest_neighbours(model, word, k, words_only, leading_space):
            """The k vocabulary tokens nearest to `word` (an expression is allowed)."""
            space = registry.embedding_space(model, limits.flag("leading_space", leading_space))
            k = limits.integer("k", k, 1, limits.LIMITS.max_neighbours)
            found = space.neighbours(
                limits.text("word", word, max_chars=200), k, limits.flag("words_only", words_only)
            )
            return [
                [rank, token, round(100 * sim, 1)]
                for rank, (token, sim) in enumerate(found, start=1)
            ]

        @limits.shown_to_user
        def analogy(model, expression, expected, leading_space):
            """Tokens nearest to `expression`, and how the expected answer compares."""
            space = registry.embedding_space(model, limits.flag("leading_space", leading_space))
            expression = limits.text("expression", expression, max_chars=200)
            found = space.neighbours(expression, 10, True)
            rows = [
                [rank, token, round(100 * sim, 1)]
                for rank, (token, sim) in enumerate(found, start=1)
            ]
            expected = limits.text("expected", expected or "", allow_empty=True, max_chars=100)
            if not expected.strip():
                return "", rows
            score = cosine(space.vector(expression), space.vector(expected))
            text = f"cosine({expression}, {expected}) × 100 = **{100 * score:.1f}**"
            rank = space.rank(expression, expected)
            if rank is None:
                text += f"; '{expected}' is several tokens, so it has no single rank"
            else:
                text += f"; '{expected}' ranks {rank} of {len(space.matrix)} tokens"
            return text, rows

        compare.click(
            embedding_similarity,
            [model, pairs, leading],
            similarity,
            api_name="embedding_similarity",
            concurrency_id=limits.CONCURRENCY_ID,
        )
        find.click(
            nearest_neighbours,
            [model, word, k, words_only, leading],
            neighbours,
            api_name="nearest_neighbours",
            concurrency_id=limits.CONCURRENCY_ID,
        )
        solve.click(
            analogy,
            [model, expression, expected, leading],
            [verdict, answers],
            api_name="analogy",
            concurrency_id=limits.CONCURRENCY_ID,
        )
