"""Example texts for the tabs: Bible verses (public domain) and the prompts of the seeds.

Verses come from tests/fixtures/verses.tsv: World English Bible (WEB), King James Version (KJV),
Reina-Valera 1909. Seed 002's prompts are the ones it gave its Bible models. Data, and `labels`,
the examples' button texts: Gradio 6.17 draws an example button empty (and throws in the page)
when it renders the example from its component, but a label it draws as text.
"""

from __future__ import annotations

# Seed 002's prompts for its Bible models, with the temperatures it compared (1.0/0.8/0.5).
GENERATE = [
    ["The meaning of life is this:", "sampling", 1.0],
    ["Go to Heaven for the climate, Hell for the company.", "sampling", 0.8],
    ["Only the free of sin can freely kill whomever he wants.", "sampling", 0.8],
    ["He who is without sin", "sampling", 0.5],
    ["In the beginning", "greedy", 1.0],
]


def labels(rows: list[list]) -> list[str]:
    """A button text per Generate example: the prompt, the decoding and, when sampling, the
    temperature.

    >>> labels([["In the beginning", "greedy", 1.0], ["He who", "sampling", 0.5]])
    ['In the beginning (greedy)', 'He who (sampling, T = 0.5)']
    """
    return [
        f"{prompt} ({mode}, T = {temperature})" if mode == "sampling" else f"{prompt} ({mode})"
        for prompt, mode, temperature in rows
    ]


# KJV lines to rewrite into modern English (004's task on the KJV → WEB pairs).
KJV = [
    "And God said, Let there be light: and there was light.",
    "Blessed are the meek: for they shall inherit the earth.",
    "Honour thy father and thy mother: that thy days may be long upon the land which the LORD "
    "thy God giveth thee.",
    "Surely goodness and mercy shall follow me all the days of my life: and I will dwell in the "
    "house of the LORD for ever.",
    "And now abideth faith, hope, charity, these three; but the greatest of these is charity.",
]

# WEB lines to translate into Spanish.
WEB = [
    "In the beginning, God created the heavens and the earth.",
    "Blessed are the peacemakers, for they shall be called children of God.",
    "The light shines in the darkness, and the darkness hasn’t overcome it.",
    "He makes me lie down in green pastures. He leads me beside still waters.",
    "There came a man sent from God, whose name was John.",
]

# Reference text for the decoding study's quality score: WEB verses from several sections.
REFERENCE = "\n".join(
    [
        "In the beginning, God created the heavens and the earth.",
        "God said, “Let there be light,” and there was light.",
        "God saw the light, and saw that it was good. God divided the light from the darkness.",
        "“Honor your father and your mother, that your days may be long in the land which "
        "Yahweh your God gives you.",
        "A Psalm by David. Yahweh is my shepherd; I shall lack nothing.",
        "He makes me lie down in green pastures. He leads me beside still waters.",
        "It will be health to your body, and nourishment to your bones.",
        "But let justice roll on like rivers, and righteousness like a mighty stream.",
        "Blessed are the gentle, for they shall inherit the earth.",
        "In those days, Jesus came from Nazareth of Galilee, and was baptized by John in the "
        "Jordan.",
        "The light shines in the darkness, and the darkness hasn’t overcome it.",
        "But now faith, hope, and love remain—these three. The greatest of these is love.",
    ]
)

# Prompts for the decoding study.
STUDY_PROMPTS = "In the beginning\nJesus said to them,\nBlessed are the"

# Seed 002's embedding comparisons (cosine × 100 with GPT-2: 62, 39, 44, 19).
SIMILARITY_PAIRS = "boy | girl\nman | girl\nboy + man | teenager\na one a two a three | !!!"
