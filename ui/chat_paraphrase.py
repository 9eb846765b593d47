"""The Paraphrase tab's comparison with an instruct model: a chat model asked to paraphrase the
sentence, beside seed 003's unsupervised candidates, both scored the same way.

Shown only when a chat model and a paraphraser are installed. One run draws seed 003's candidates
(`gen.paraphrase`, the tab's own settings) and asks the chat model, with `PROMPT`, for as many
sampled replies as the seed's closest candidates shown (seeded, so a run repeats). Every
candidate of both methods gets chrF to the source (sacrebleu's chrF, 0–100: character n-gram
overlap, so a copy scores 100 and a real paraphrase less) and the paraphraser's own ranking
distance (the norm of the difference between its sentence vectors and the source's, as
`gen.paraphrase` ranks; "–" for text the character model cannot re-encode, e.g. a word longer
than it spells). Distances here are computed one sentence at a time for both methods, so they
compare; an int8 encoder's activation scale depends on its batch, so they differ from the
ranking's batched ones in the second or third decimal. This module runs models only through
the registry and draws one table.
"""

from __future__ import annotations

import gradio as gr
import numpy as np
from sacrebleu.metrics import CHRF

import runtime

from . import checks, visitor

PROMPT = "Paraphrase this sentence. Reply with the paraphrase only.\n\n{sentence}"
SHOWN = 4  # candidates per method
MAX_NEW_TOKENS = 64
HEADERS = ["method", "candidate", "chrF to source", "distance"]
_CHRF = CHRF()


def chrf(candidate: str, source: str) -> float:
    """sacrebleu's sentence chrF of `candidate` against `source` (0–100).

    >>> chrf("In the beginning", "In the beginning")
    100.0
    """
    return _CHRF.sentence_score(candidate, [source]).score


def distances(paraphraser, source: str, texts: list[str]) -> list[float | None]:
    """Each text's distance to `source` as `paraphraser.paraphrase` ranks candidates (None for
    text the model cannot encode)."""
    anchor = paraphraser.encode([source])  # (1, L, V)
    found = []
    for text in texts:
        try:
            vectors = paraphraser.encode([text])  # (1, L, V)
        except ValueError:
            found.append(None)
            continue
        found.append(float(np.linalg.norm((vectors - anchor).ravel())))
    return found


def chat_candidates(gen, sentence: str, count: int, seed: int | None) -> list[str]:
    """`count` sampled replies of the chat model to `PROMPT` (surrounding space stripped)."""
    config = runtime.GenerationConfig(
        max_new_tokens=MAX_NEW_TOKENS,
        do_sample=True,
        temperature=0.7,
        top_p=0.95,
        num_return_sequences=count,
        seed=seed,
    )
    asked = [{"role": "user", "content": PROMPT.format(sentence=sentence)}]
    return [out.text.strip() for out in gen.chat(asked, visitor.salted(config))]


def rows(paraphraser, source: str, method: str, texts: list[str]) -> list[list]:
    """Table rows: method, candidate, chrF to the source, distance (rounded; "–" when none)."""
    scored = zip(texts, distances(paraphraser, source, texts))
    return [
        [method, text, round(chrf(text, source), 1), "–" if d is None else round(d, 3)]
        for text, d in scored
    ]


def comparison(registry, paraphraser_name, chat_model, sentence, num_candidates, seed):
    """Rows for seed 003's closest candidates and the chat model's, scored alike."""
    sentence = checks.text("sentence", sentence)
    num_candidates = checks.integer(
        "num_candidates", num_candidates, 1, checks.LIMITS.max_candidates
    )
    seed = checks.integer("seed", seed, -1, checks.offered("seed").limits.high)
    seed = None if seed < 0 else seed  # -1: random, as the tab's own seed
    checks.choice("chat_model", chat_model, registry.chat_models())
    paraphraser = registry.get(paraphraser_name)
    seeds = paraphraser.paraphrase(sentence, num_candidates, seed=seed)[:SHOWN]
    chat = chat_candidates(registry.get(chat_model), sentence, SHOWN, seed)
    own = rows(paraphraser, sentence, f"seed 003 ({paraphraser_name})", [c.text for c in seeds])
    return own + rows(paraphraser, sentence, f"chat ({chat_model})", chat)


def build(registry, model, sentence, count, seed) -> None:
    """The section under the Paraphrase tab, fed by its model, sentence, count and seed."""
    chat_models = registry.chat_models()
    if not chat_models or not registry.paraphrasers():
        return
    with gr.Accordion("Beside an instruct model", open=False):
        gr.Markdown(
            "The chat model is asked to *paraphrase this sentence*; its replies and seed 003's "
            "closest candidates are scored alike: chrF to the source (100 = a copy) and the "
            "paraphraser's distance between sentence vectors."
        )
        with gr.Row():
            chat_model = gr.Dropdown(chat_models, value=chat_models[0], label="Chat model")
            run = gr.Button("Compare with the chat model", elem_id="paraphrase-chat-run")
        table = gr.Dataframe(
            headers=HEADERS, interactive=False, wrap=True, elem_id="paraphrase-chat-table"
        )

    @checks.shown_to_user
    def paraphrase_beside_chat(model, chat_model, sentence, num_candidates, seed):
        """Seed 003's closest candidates and a chat model's paraphrases, both scored by chrF
        to the source and by the paraphraser's distance."""
        return comparison(registry, model, chat_model, sentence, num_candidates, seed)

    run.click(
        paraphrase_beside_chat,
        [model, chat_model, sentence, count, seed],
        table,
        api_name="paraphrase_beside_chat",
        concurrency_id=checks.CONCURRENCY_ID,
    )
