"""The bundles shipped in models/: they verify, load without torch's help, and do their job.

These are behaviour checks on the real default models (the app starts on them): the Bible LM
follows its section token, the rewriter's length tokens change the output length in the
requested direction, the translator writes Spanish that overlaps the Reina-Valera reference.
Held-out test-split verses of the committed fixture are the inputs. A model that is not shipped
yet is skipped; the full evaluations are in each model card (docs/TRAINING.md).
"""

from __future__ import annotations

from pathlib import Path

import pytest

import runtime
from train import data, evaluate

MODELS = Path(__file__).resolve().parents[1] / "models"
BEAM = runtime.GenerationConfig(num_beams=3, max_new_tokens=96)


def bundle(name: str, precision: str = "int8") -> Path:
    path = MODELS / name / precision
    if not (path / "manifest.json").exists():
        pytest.skip(f"{name} ({precision}) is not shipped")
    return path


def held_out_verses(limit: int = 12) -> list[dict]:
    return data.load_verses(data.FIXTURE, split="test")[:limit]


@pytest.mark.parametrize(
    "name,precision",
    [("bible-lm", "int8"), ("bible-lm", "fp32"), ("rewriter", "int8"), ("translator", "int8")],
)
def test_bundle_verifies_and_loads(name, precision):
    gen = runtime.load(bundle(name, precision))  # checks every sha256 first
    assert gen.manifest.precision == precision
    assert gen.manifest.license.startswith("Public domain")
    greedy = gen.manifest.parity.greedy
    if precision == "fp32":  # export fails otherwise; int8 may drift after a near-tie
        assert greedy.identical_sequences == greedy.prompts
    assert greedy.token_agreement >= 0.5


def test_bible_lm_section_token_steers_the_text():
    gen = runtime.load(bundle("bible-lm"))
    config = runtime.GenerationConfig(
        do_sample=True, top_p=0.95, max_new_tokens=48, seed=3, num_return_sequences=16
    )
    law_words = ("offering", "priest", "Moses", "Israel", "LORD", "altar", "tent")
    letter_words = ("Christ", "brothers", "grace", "faith", "Jesus", "Lord", "love", "gospel")

    def counts(section: str) -> tuple[int, int]:
        # 16 samples of one prompt share its random generator; 16 copies of the prompt would
        # each get the one sample the prompt gets alone (runtime/engine.py)
        text = " ".join(o.text for o in gen.generate("", config, {"section": section}))
        return sum(map(text.count, law_words)), sum(map(text.count, letter_words))

    (law_in_law, letters_in_law), (law_in_letters, letters_in_letters) = map(
        counts, ("law", "letters")
    )
    assert law_in_law > law_in_letters and letters_in_letters > 2 * letters_in_law


def test_rewriter_length_tokens_set_the_length():
    gen = runtime.load(bundle("rewriter"))
    verses = [r["kjv"] for r in held_out_verses()]

    def subwords(text: str) -> int:
        return len(gen.tokenizer.encode(text, add_special_tokens=False).ids)

    def mean_ratio(controls: dict) -> float:
        outputs = gen.generate(verses, BEAM, controls)
        return sum(subwords(o.text) / subwords(v) for o, v in zip(outputs, verses)) / len(verses)

    short, normal, long = (mean_ratio({"length": c}) for c in ("short", "normal", "long"))
    assert short < normal < long
    low, middle, high = (mean_ratio({"length_ratio": v}) for v in (0.6, 1.0, 1.4))
    assert low < middle < high


def test_rewriter_output_reads_like_the_web():
    gen = runtime.load(bundle("rewriter"))
    rows = held_out_verses()
    outputs = [o.text for o in gen.generate([r["kjv"] for r in rows], BEAM)]
    scores = evaluate.bleu_chrf(outputs, [r["web"] for r in rows])
    copy = evaluate.bleu_chrf([r["kjv"] for r in rows], [r["web"] for r in rows])
    assert scores["chrf"] > copy["chrf"] - 5  # at least about as close to the WEB as the KJV is
    archaic = sum(o.count(w) for o in outputs for w in (" thee ", " thou ", "eth "))
    assert archaic <= sum(r["kjv"].count(w) for r in rows for w in (" thee ", " thou ", "eth "))


def test_translator_writes_spanish():
    gen = runtime.load(bundle("translator"))
    rows = held_out_verses()
    outputs = [o.text for o in gen.generate([r["web"] for r in rows], BEAM)]
    words = " ".join(outputs).lower().split()
    spanish = sum(words.count(w) for w in ("de", "y", "el", "la", "que", "los"))
    english = sum(words.count(w) for w in ("the", "and", "of", "that"))
    assert spanish > 5 * max(english, 1)
    assert evaluate.bleu_chrf(outputs, [r["rv1909"] for r in rows])["chrf"] > 25
