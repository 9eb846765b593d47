"""The Embeddings tab: what a model's input embedding matrix knows (seeds 002, 000, 001).

Phrase similarity is 002's comparison (sum of the phrase's token vectors, cosine × 100:
boy/girl, man/girl, boy + man/teenager); nearest neighbours rank the vocabulary by cosine;
analogies add and subtract vectors (king − man + woman, 000 and 001) and report where an
expected answer ranks. All from `embeddings.npy` in the bundle (ui/embeddings.py); a model
without it gets a clear message. Endpoints: `/embedding_similarity`, `/nearest_neighbours`,
`/analogy`.

The "Static word vectors (001)" section puts word2vec skip-gram, CBOW (bundles with task
"word-vectors") and the causal and masked LMs' input embeddings (their " word" tokens) side by
side: neighbours and "a : b :: c : ?" analogies, each with gensim's 3CosAdd on unit vectors
(runtime.word_vectors). "Static against contextual" gives word2vec's one neighbour list for a
word beside each masked LM's fillers for that word masked in two sentences. Endpoints:
`/word_neighbours`, `/word_analogy`, `/static_vs_contextual`.
"""

from __future__ import annotations

from typing import NamedTuple

import gradio as gr

from study import word_analogies

from . import checks, examples, links, widgets
from .embeddings import cosine

# the cosine beside the phrases, so that it shows in the tab's narrow column without scrolling
SIMILARITY_HEADERS = ["phrase A", "phrase B", "cosine × 100", "tokens A", "tokens B"]
NEIGHBOUR_HEADERS = ["rank", "token", "cosine × 100"]
SPACE_INFO = "encode words as they appear mid-sentence (with a leading space)"


def status(registry, name) -> str:
    if not name:
        return ""
    manifest = registry.manifest(name)
    if not manifest.embeddings:
        return (
            f"**{name}** has no `embeddings.npy` (manifest key `embeddings`): its input "
            "embeddings are not available. Re-export it with the current export/."
        )
    return (
        f"Input embeddings of **{name}**: {manifest.vocab_size or '?'} tokens × "
        f"{manifest.hidden_size or '?'} dimensions."
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


def word_models(registry) -> list[str]:
    """Word-vector sets, then the first causal LM and every masked LM with input embeddings."""
    embedded = set(registry.with_embeddings())
    lms = [n for n in registry.causal_lms() if n in embedded][:1]
    return registry.word_vector_sets() + lms + [n for n in registry.masked_lms() if n in embedded]


def side_by_side(columns: dict[str, list[tuple[str, float]]]) -> list[list]:
    """Rows "rank, model A word (cosine), model B word (cosine), …" from per-model lists."""
    depth = max((len(found) for found in columns.values()), default=0)
    rows = []
    for rank in range(depth):
        row = [rank + 1]
        for found in columns.values():
            row.append(f"{found[rank][0]} ({found[rank][1]:.2f})" if rank < len(found) else "")
        rows.append(row)
    return rows


class _Section(NamedTuple):
    """One section of the tab: its event's inputs by parameter name (in the function's order),
    its button, error box, outputs and each output's empty value after a failed run."""

    inputs: dict
    button: gr.Button
    errors: gr.Markdown
    outputs: gr.components.Component | list
    stale: dict


def build(registry) -> None:
    with gr.Tab("Embeddings", id="embeddings"):
        model, leading = _model_row(registry)
        with gr.Row():
            similarity = _similarity_column(model, leading)
            neighbours = _neighbours_column(model, leading)
            analogies = _analogy_column(model, leading)
        embedding_similarity, nearest_neighbours, analogy = _embedding_endpoints(registry)
        wiring = (
            (similarity, embedding_similarity, "embedding_similarity"),
            (neighbours, nearest_neighbours, "nearest_neighbours"),
            (analogies, analogy, "analogy"),
        )
        events = [
            section.button.click(
                endpoint,
                list(section.inputs.values()),
                section.outputs,
                api_name=api_name,
                concurrency_id=checks.CONCURRENCY_ID,
            )
            for section, endpoint, api_name in wiring
        ]
        for (section, _, _), event in zip(wiring, events):
            widgets.show_errors(section.errors, event, [section.button.click], section.stale)

        build_word_vectors(registry)


def _model_row(registry) -> tuple[gr.Dropdown, gr.Checkbox]:
    """The model picker (models with embeddings first), the leading-space switch and the
    model's embeddings status."""
    vector_names = set(registry.word_vector_sets())
    names = registry.with_embeddings() + [
        n for n in registry.names if n not in registry.with_embeddings() and n not in vector_names
    ]
    with gr.Row():
        model = widgets.model_picker(names)
        leading = gr.Checkbox(True, label="Leading space", info=SPACE_INFO)
    widgets.model_note(registry, model, "embeddings-model-note")
    info = gr.Markdown(status(registry, model.value))
    model.change(
        lambda name: status(registry, name),
        model,
        info,
        queue=False,
        api_visibility="private",
    )
    return model, leading


def _similarity_column(model, leading) -> _Section:
    with gr.Column():
        gr.Markdown(
            "### Phrase similarity (002)\nA phrase is the sum of its tokens' "
            "vectors; `+` adds phrases."
        )
        pairs = gr.Textbox(examples.SIMILARITY_PAIRS, lines=4, label="Pairs, one per line")
        compare = gr.Button("Compare phrases", variant="primary")
        errors = widgets.error_box("embedding-similarity-error")
        inputs = {"model": model, "pairs": pairs, "leading_space": leading}
        links.shareable(
            "embeddings", "embedding_similarity", inputs, section="embedding_similarity"
        )
        similarity = gr.Dataframe(
            headers=SIMILARITY_HEADERS,
            interactive=False,
            wrap=True,
            label="Cosine similarity",
            elem_id="embeddings-similarity",
        )
    return _Section(inputs, compare, errors, similarity, {similarity: None})


def _neighbours_column(model, leading) -> _Section:
    with gr.Column():
        gr.Markdown("### Nearest neighbours")
        with gr.Row():
            word = gr.Textbox("light", label="Word or expression", scale=3)
            k = widgets.setting_slider(1, checks.LIMITS.max_neighbours, value=10, step=1, label="k")
        words_only = gr.Checkbox(True, label="Only tokens with letters or digits")
        find = gr.Button("Find neighbours")
        errors = widgets.error_box("nearest-neighbours-error")
        inputs = {"model": model, "word": word, "k": k, "words_only": words_only}
        inputs |= {"leading_space": leading}
        links.shareable("embeddings", "nearest_neighbours", inputs, section="nearest_neighbours")
        neighbours = gr.Dataframe(
            headers=NEIGHBOUR_HEADERS, interactive=False, label="Nearest tokens"
        )
    return _Section(inputs, find, errors, neighbours, {neighbours: None})


def _analogy_column(model, leading) -> _Section:
    with gr.Column():
        gr.Markdown("### Analogy (000, 001)")
        expression = gr.Textbox("king - man + woman", label="Expression")
        expected = gr.Textbox("queen", label="Expected answer (optional)")
        solve = gr.Button("Solve")
        errors = widgets.error_box("analogy-error")
        inputs = {"model": model, "expression": expression, "expected": expected}
        inputs |= {"leading_space": leading}
        links.shareable("embeddings", "analogy", inputs, section="analogy")
        verdict = gr.Markdown()
        answers = gr.Dataframe(headers=NEIGHBOUR_HEADERS, interactive=False, label="Nearest tokens")
    return _Section(inputs, solve, errors, [verdict, answers], {verdict: "", answers: None})


def _embedding_endpoints(registry) -> tuple:
    """The functions behind `/embedding_similarity`, `/nearest_neighbours` and `/analogy`, over
    `registry`'s embedding spaces."""

    @checks.shown_to_user
    def embedding_similarity(model, pairs, leading_space):
        """Cosine × 100 of each pair's summed token embeddings."""
        space = registry.embedding_space(model, checks.flag("leading_space", leading_space))
        rows = []
        for a, b in parse_pairs(checks.text("pairs", pairs)):
            rows.append(
                [
                    a,
                    b,
                    round(100 * space.similarity(a, b), 1),
                    " ".join(map(repr, space.tokens(a))),
                    " ".join(map(repr, space.tokens(b))),
                ]
            )
        return rows

    @checks.shown_to_user
    def nearest_neighbours(model, word, k, words_only, leading_space):
        """The k vocabulary tokens nearest to `word` (an expression is allowed)."""
        space = registry.embedding_space(model, checks.flag("leading_space", leading_space))
        k = checks.integer("k", k, 1, checks.LIMITS.max_neighbours)
        found = space.neighbours(
            checks.text("word", word, max_chars=checks.LIMITS.max_expression_chars),
            k,
            checks.flag("words_only", words_only),
        )
        return [
            [rank, token, round(100 * sim, 1)] for rank, (token, sim) in enumerate(found, start=1)
        ]

    @checks.shown_to_user
    def analogy(model, expression, expected, leading_space):
        """Tokens nearest to `expression`, and how the expected answer compares."""
        space = registry.embedding_space(model, checks.flag("leading_space", leading_space))
        expression = checks.text(
            "expression", expression, max_chars=checks.LIMITS.max_expression_chars
        )
        found = space.neighbours(expression, 10, True)
        rows = [
            [rank, token, round(100 * sim, 1)] for rank, (token, sim) in enumerate(found, start=1)
        ]
        expected = checks.text(
            "expected", expected or "", allow_empty=True, max_chars=checks.LIMITS.max_word_chars
        )
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

    return embedding_similarity, nearest_neighbours, analogy


def word_vector_link(section: str, inputs: dict) -> None:
    """A Link for one word-vector section: it reruns the section's button (every model)."""
    links.shareable("embeddings", f"{section}_view", inputs, section=section)


def build_word_vectors(registry) -> None:
    models = word_models(registry)
    neighbours, analogies = _static_sections(models)
    contrast = _contrast_section()
    word_neighbours, word_analogy, static_vs_contextual = _word_vector_endpoints(registry, models)

    def neighbour_rows(word, topn):
        return side_by_side(word_neighbours(word, topn))

    def analogy_rows(a, b, c):
        return side_by_side(word_analogy(a, b, c, 5))

    def contrast_rows(word, sentence_1, sentence_2):
        rows = static_vs_contextual(word, sentence_1, sentence_2)
        return gr.Dataframe(rows, headers=["model", "where", "neighbours"])

    found = _view_and_endpoint(neighbours, neighbour_rows, word_neighbours, "word_neighbours")
    solved = _view_and_endpoint(analogies, analogy_rows, word_analogy, "word_analogy")
    contrasted = _view_and_endpoint(
        contrast, contrast_rows, static_vs_contextual, "static_vs_contextual"
    )
    # Neighbours and analogies share one table and one error box.
    triggers = [neighbours.button.click, analogies.button.click]
    for event in (found, solved):
        widgets.show_errors(neighbours.errors, event, triggers, neighbours.stale)
    widgets.show_errors(contrast.errors, contrasted, [contrast.button.click], contrast.stale)


def _view_and_endpoint(section: _Section, view, endpoint, api_name: str):
    """checks.view_and_endpoint on `section`'s button, inputs and outputs."""
    inputs = list(section.inputs.values())
    return checks.view_and_endpoint(
        section.button, view, inputs, section.outputs, endpoint, api_name
    )


def _static_sections(models: list[str]) -> tuple[_Section, _Section]:
    """The word-vector neighbours and analogy sections, each with its side-by-side table (a
    column per model), and one error box for both."""
    gr.Markdown(
        "### Static word vectors (001)\nword2vec skip-gram and CBOW (with Mikolov phrases: "
        "`holy spirit`, `son of man`) beside the language models' input embeddings; every column "
        "uses 3CosAdd on unit vectors, query words left out."
        if models
        else "### Static word vectors (001)\nNo word-vector bundle installed."
    )
    errors = widgets.error_box("word-vectors-error")
    headers = ["rank", *models] if models else ["rank"]
    # each question its own table, named after its button (one shared table left a visitor
    # guessing which button's answer it showed); full width, so that every model's column shows
    with gr.Row():
        with gr.Column():
            word = gr.Textbox("light", label="Word or phrase")
            topn = widgets.setting_slider(
                1, checks.LIMITS.max_neighbours, value=8, step=1, label="neighbours"
            )
            find = gr.Button("Neighbours in every model")
            neighbour_inputs = {"word": word, "topn": topn}
            word_vector_link("word_neighbours", neighbour_inputs)
        with gr.Column():
            with gr.Row():
                a = gr.Textbox("man", label="a")
                b = gr.Textbox("king", label="b")
                c = gr.Textbox("woman", label="c")
            solve = gr.Button("a : b :: c : ?")
            analogy_inputs = {"a": a, "b": b, "c": c}
            word_vector_link("word_analogy", analogy_inputs)
    table = {"headers": headers, "interactive": False, "wrap": True}
    neighbours = gr.Dataframe(
        label="Neighbours in every model, side by side", elem_id="word-vectors", **table
    )
    answers = gr.Dataframe(label="a : b :: c : ? in every model", elem_id="word-analogies", **table)
    return (
        _Section(neighbour_inputs, find, errors, neighbours, {neighbours: None}),
        _Section(analogy_inputs, solve, errors, answers, {answers: None}),
    )


def _contrast_section() -> _Section:
    """A word in two sentences: its static neighbours beside the masked LMs' fillers."""
    gr.Markdown(
        "### Static against contextual (001)\nword2vec gives a word one list of neighbours; a "
        "masked LM, with the word masked in a sentence, ranks the words that fit there, so its "
        "neighbours change with the sense."
    )
    with gr.Row():
        sense_word = gr.Textbox("light", label="Word")
        first = gr.Textbox(word_analogies.POLYSEMOUS["light"][0], label="Sentence 1")
        second = gr.Textbox(word_analogies.POLYSEMOUS["light"][1], label="Sentence 2")
    contrast = gr.Button("Compare static and contextual neighbours")
    inputs = {"word": sense_word, "sentence_1": first, "sentence_2": second}
    word_vector_link("static_vs_contextual", inputs)
    errors = widgets.error_box("static-vs-contextual-error")
    table = gr.Dataframe(interactive=False, wrap=True, label="Neighbours")
    return _Section(inputs, contrast, errors, table, {table: None})


def _word_vector_endpoints(registry, models: list[str]) -> tuple:
    """The functions behind `/word_neighbours`, `/word_analogy` and `/static_vs_contextual`,
    over `models` (word_models) and the registry's masked LMs."""

    def _check(model: str) -> str:
        if model not in models:
            raise ValueError(f"`model` must be one of {models}, got {model!r}")
        return model

    @checks.shown_to_user
    def word_neighbours(word: str, topn: int = 8) -> dict:
        """{model: [(word, cosine), …]}: `word`'s nearest words in every static model; a model
        whose vocabulary lacks the word gets an empty list."""
        word = checks.text("word", word, max_chars=checks.LIMITS.max_word_chars)
        topn = checks.integer("topn", topn, 1, checks.LIMITS.max_neighbours)
        out = {}
        for name in models:
            space = registry.word_space(_check(name))
            out[name] = space.most_similar(word, topn=topn) if word in space else []
        return out

    @checks.shown_to_user
    def word_analogy(a: str, b: str, c: str, topn: int = 5) -> dict:
        """{model: [(word, cosine), …]} answering "a : b :: c : ?" (most_similar(b + c − a))."""
        words = [
            checks.text(n, v, max_chars=checks.LIMITS.max_word_chars)
            for n, v in (("a", a), ("b", b), ("c", c))
        ]
        topn = checks.integer("topn", topn, 1, checks.LIMITS.max_neighbours)
        out = {}
        for name in models:
            space = registry.word_space(name)
            known = all(w in space for w in words)
            out[name] = space.analogy(*words, topn=topn) if known else []
        return out

    @checks.shown_to_user
    def static_vs_contextual(word: str, sentence_1: str, sentence_2: str, topn: int = 8) -> list:
        """Rows (model, where, neighbours): each word-vector set's static list, then each
        masked LM's fillers for `word` masked in each sentence."""
        word = checks.text("word", word, max_chars=checks.LIMITS.max_word_chars)
        topn = checks.integer("topn", topn, 1, checks.LIMITS.max_neighbours)
        rows = []
        for name in registry.word_vector_sets():
            space = registry.word_space(name)
            found = space.most_similar(word, topn=topn) if word in space else []
            rows.append([name, "static (any sentence)", ", ".join(w for w, _ in found)])
        for name in registry.masked_lms():
            for index, sentence in enumerate((sentence_1, sentence_2), start=1):
                sentence = checks.text(
                    f"sentence_{index}", sentence, max_chars=checks.LIMITS.max_masked_text_chars
                )
                found = word_analogies.contextual_neighbours(
                    registry.get(name), sentence, word, topn
                )
                rows.append([name, f"sentence {index}", ", ".join(w for w, _ in found)])
        return rows

    return word_neighbours, word_analogy, static_vs_contextual
