"""What a visitor should expect of a model, and a check for output that is a decoding failure.

`summary(name, manifest)` is one line saying what the model is (parameters, architecture,
training corpus) and what its output is like, read from the manifest only, so a new bundle gets
its line with no code. `repetition_loop(text)` says why a text is a repetition loop (a unit of
one to forty characters repeated over much of the text, or one word making up much of it), which
small models fall into ("..........", "decir decir decir …"), so the app can label such output
instead of presenting it as a result. Pure functions: no Gradio, no model.
"""

from __future__ import annotations

import re
from collections import Counter

MIN_LOOP_CHARS = 8  # a shorter run ("!!!", "...") is punctuation, not a loop
MIN_REPEATS = 4  # a unit repeated fewer times in a row is not called a loop
LOOP_SHARE = 0.4  # share of the text the repeated run must cover
WORD_SHARE = 0.5  # share of the words one word must make up (texts of MIN_WORDS words or more)
MIN_WORDS = 8
_RUN = re.compile(rf"(.{{1,40}}?)\1{{{MIN_REPEATS - 1},}}", re.DOTALL)
_WORD = re.compile(r"\w+")

SMALL_MODEL = 100e6  # parameters below which a generator's output is often nonsense
_SMALL = {
    "causal-lm": "A model this small often loses the thread or makes no sense.",
    "hierarchical-lm": "A model this small often loses the thread or makes no sense.",
    "seq2seq": "A model this small can loop on text unlike its corpus (names, emoji).",
}
_EXPECT = {
    "causal-lm": "continues a prompt in the style of its training text",
    "seq2seq": "rewrites one sentence at a time",
    "hierarchical-lm": "writes character by character, a sentence at a time",
    "fill-mask": "fills masked words with the ones its training text makes likely",
    "word-vectors": "one vector per word of its training text; unseen words have none",
}


def repetition_loop(text: str) -> str | None:
    """Why `text` looks like a repetition loop, or None when it does not.

    A loop is a unit of 1–40 characters repeated at least MIN_REPEATS times in a row over at
    least LOOP_SHARE of the text (and MIN_LOOP_CHARS characters), or, in a text of MIN_WORDS
    words or more, one word making up at least WORD_SHARE of them.

    >>> repetition_loop("..........")
    '"." repeated 10 times'
    >>> repetition_loop("In the beginning, God created the heavens and the earth.") is None
    True
    """
    stripped = text.strip()
    if len(stripped) >= MIN_LOOP_CHARS:
        longest = max(_RUN.finditer(stripped), key=lambda m: len(m.group(0)), default=None)
        if longest is not None:
            span = len(longest.group(0))
            if span >= max(MIN_LOOP_CHARS, LOOP_SHARE * len(stripped)):
                unit = longest.group(1)
                return f'"{unit.strip() or unit}" repeated {span // len(unit)} times'
    words = _WORD.findall(stripped.lower())
    if len(words) >= MIN_WORDS:
        word, count = Counter(words).most_common(1)[0]
        if count >= WORD_SHARE * len(words):
            return f'"{word}" is {count} of its {len(words)} words'
    return None


def loop_notice(texts: list[str], what: str = "sample") -> str:
    """A Markdown warning naming each of `texts` that is a repetition loop; "" if none is."""
    found = [
        (index, reason)
        for index, reason in enumerate(map(repetition_loop, texts), start=1)
        if reason
    ]
    if not found:
        return ""
    named = "; ".join(
        f"{what} {index}: {reason}" if len(texts) > 1 else reason for index, reason in found
    )
    return (
        f"⚠ **Repetition loop** ({named}): the model got stuck repeating itself; this is a "
        "decoding failure, not a result. Try sampling, a repetition penalty or no-repeat n-grams."
    )


def _corpus(manifest: dict) -> str | None:
    """The corpus's name without its provenance: "WEB → RV1909 verse pairs"."""
    corpus = (manifest.get("training_data") or {}).get("corpus")
    return re.split(r" \(| from ", corpus)[0].replace("->", "→") if corpus else None


def summary(name: str, manifest: dict) -> str:
    """One line: what `name` is (parameters, architecture, corpus) and what to expect of it.

    >>> summary("lm (int8)", {"task": "causal-lm", "architecture": "gpt2",
    ...     "export": {"parameters": 5240320}, "training_data": {"corpus": "WEB (SWORD)"}})[:58]
    '**lm (int8)**: a 5.2M-parameter gpt2 trained on WEB; conti'
    >>> summary("a", {"task": "causal-lm", "adapter": {"rank": 8, "base": {"name": "B"}},
    ...     "training_data": {"corpus": "KJV"}}).split(";")[0]
    '**a**: a rank-8 LoRA adapter on B, fine-tuned on KJV'
    """
    parameters = (manifest.get("export") or {}).get("parameters")
    size = f"a {parameters / 1e6:.1f}M-parameter " if parameters else "a "
    corpus = _corpus(manifest)
    line = f"**{name}**: {size}{manifest.get('architecture', 'model')}"
    line += f" trained on {corpus}" if corpus else ""
    if adapter := manifest.get("adapter"):
        line = f"**{name}**: a rank-{adapter['rank']} LoRA adapter on {adapter['base']['name']}"
        line += f", fine-tuned on {corpus}" if corpus else ""
    task = manifest.get("task")
    expect = _EXPECT.get(task, "")
    data = manifest.get("training_data") or {}
    source, target = data.get("source_language"), data.get("target_language")
    if task == "seq2seq" and source and target and source != target:
        expect = f"translates {source} → {target} one sentence at a time"
    if expect:
        line += f"; {expect}."
    caveat = _SMALL.get(task) if parameters and parameters < SMALL_MODEL else None
    return f"{line} {caveat}" if caveat else line
