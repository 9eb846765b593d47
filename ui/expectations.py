"""What a visitor should expect of a model, and a check for output that is a decoding failure.

`summary(name, manifest)` is one line saying what the model is (parameters, architecture,
training corpus) and what its output is like, read from the manifest only, so a new bundle gets
its line with no code. `best_first` orders a tab's models so that it opens on the best we ship
(the flagship's fine-tunes, then the flagship, the seeds' small reproductions last, labelled as
such by `choice_label`). `strip_markup` takes a model's format markers (`[s:text]`, `[e:author]`,
read from its manifest) out of the text shown, including one cut short by the token limit.
`repetition_loop(text)` says why a text is a repetition loop (a unit of one to forty characters
repeated over much of the text, or one word making up much of it), which small models fall into
("..........", "decir decir decir …"), so the app can label such output instead of presenting it
as a result. Pure functions: no Gradio, no model.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping

from runtime.manifest import Manifest

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


def _corpus(manifest: Manifest) -> str | None:
    """The corpus's name without its provenance: "WEB → RV1909 verse pairs"."""
    corpus = manifest.corpus
    return re.split(r" \(| from ", corpus)[0].replace("->", "→") if corpus else None


def summary(name: str, manifest: Manifest) -> str:
    """One line: what `name` is (parameters, architecture, corpus) and what to expect of it:
    "**lm (int8)**: a 5.2M-parameter gpt2 trained on WEB; continues a prompt in the style of its
    training text. …", "**a**: a rank-8 LoRA adapter on B, fine-tuned on KJV; …"."""
    parameters = manifest.export.parameters
    size = f"a {parameters / 1e6:.1f}M-parameter " if parameters else "a "
    corpus = _corpus(manifest)
    line = f"**{name}**: {size}{manifest.architecture or 'model'}"
    line += f" trained on {corpus}" if corpus else ""
    if adapter := manifest.adapter:
        line = f"**{name}**: a rank-{adapter.rank} LoRA adapter on {adapter.base.name}"
        line += f", fine-tuned on {corpus}" if corpus else ""
    expect = _EXPECT.get(manifest.task, "")
    source, target = manifest.source_language, manifest.target_language
    if manifest.task == "seq2seq" and source and target and source != target:
        expect = f"translates {source} → {target} one sentence at a time"
    if expect:
        line += f"; {expect}."
    caveat = _SMALL.get(manifest.task) if parameters and parameters < SMALL_MODEL else None
    return f"{line} {caveat}" if caveat else line


def seed_reproduction(manifest: Manifest) -> bool:
    """A small model trained from scratch to reproduce a seed's study (not the flagship or an
    adapter of it): under SMALL_MODEL parameters."""
    parameters = manifest.export.parameters
    return manifest.adapter is None and bool(parameters) and parameters < SMALL_MODEL


def choice_label(name: str, manifest: Manifest) -> str:
    """How a model picker lists `name`: a seed reproduction says so, with its size
    ("lm (int8) · seed reproduction, 5.2M")."""
    if not seed_reproduction(manifest):
        return name
    return f"{name} · seed reproduction, {manifest.export.parameters / 1e6:.1f}M"


def adapter_base(manifest: Manifest) -> str | None:
    """The name of the base model an adapter bundle fine-tunes; None for a model of its own."""
    return manifest.adapter.base.name if manifest.adapter else None


def best_first(names: list[str], manifests: Mapping[str, Manifest]) -> list[str]:
    """`names` with the flagship's fine-tunes (adapters whose base is among `names`) first, then
    their bases, then the other models, then seed reproductions, and adapters whose base is
    missing (they cannot run) last; in `names`' order otherwise."""
    bases = {adapter_base(manifests[n]) for n in names} - {None}

    def rank(name):
        manifest = manifests[name]
        if manifest.adapter:
            return 0 if adapter_base(manifest) in names else 4
        if name in bases:
            return 1
        return 3 if seed_reproduction(manifest) else 2

    return sorted(names, key=rank)


_BRACKETED = re.compile(r"\[[^\[\]\s]+\]")


def markers(manifest: Manifest) -> list[str]:
    """The text markers of a model's format: its prompt prefix, stop strings and the bracketed
    pieces of its control strings ("[s:author]C. H. Spurgeon[e:author] " gives two)."""
    found = [manifest.prompt_prefix or "", *(manifest.stop or ())]
    for spec in manifest.controls.values():
        for value in spec.values.values():
            found += _BRACKETED.findall(str(value))
    return sorted({marker for marker in found if marker.startswith("[") and ":" in marker})


def strip_markup(text: str, manifest: Manifest) -> str:
    """`text` without the model's format markers: any `[s:…]` / `[e:…]`-shaped marker whose head
    ("[s:", "[e:") the format uses, and a marker cut short at the end ("…days.[e:"): with the
    prefix "[s:text]", "Amen.[e:author] So it is.[e:te" shows as "Amen. So it is."."""
    heads = sorted({marker[: marker.index(":") + 1] for marker in markers(manifest)})
    if not heads:
        return text
    text = re.sub(f"(?:{'|'.join(map(re.escape, heads))})[^\\[\\]\\s]*\\]", "", text)
    cut = re.search(r"\[[^\[\]\s]*$", text)
    if cut and any(head.startswith(cut[0]) or cut[0].startswith(head) for head in heads):
        text = text[: cut.start()]
    return text
