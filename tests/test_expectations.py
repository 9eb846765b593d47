"""ui/expectations.py: the repetition-loop detector on outputs the shipped models gave (issue 25)
and on ordinary text, and the one-line model summaries read from manifests."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from runtime.manifest import Manifest
from tests.manifest_fixtures import manifest_of
from ui.expectations import (
    best_first,
    choice_label,
    loop_notice,
    repetition_loop,
    strip_markup,
    summary,
)

MODELS = Path(__file__).resolve().parents[1] / "models"


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("..........", '"." repeated 10 times'),
        ("““““““““", '"“" repeated 8 times'),
        ("decir decir decir decir decirlelele", '"decir" repeated 4 times'),
        ("decir decir decirlelelelelelelelele", '"le" repeated 9 times'),
        ("God God God God God God God God God", '"God" repeated 8 times'),
        ("and the and the and the and the", '"and" is 4 of its 8 words'),
        ("  ........  \n", '"." repeated 8 times'),  # surrounding space does not count
    ],
)
def test_loops_are_found_and_named(text, reason):
    assert repetition_loop(text) == reason


@pytest.mark.parametrize(
    "text",
    [
        "",
        "...",  # too short to call a loop
        "hahaha!",
        "the the",
        "Blessed are the meek: for they shall inherit the earth.",
        "Y dijo Dios: Sea la luz; y fue la luz.",
        "Holy, holy, holy, is the Lord God, the Almighty, who was and who is and who is to come!",
        "He said, “Amen! Amen!” and went out; the people answered, “Amen!”",
    ],
)
def test_ordinary_text_is_not_a_loop(text):
    assert repetition_loop(text) is None


def test_a_short_run_inside_a_long_text_is_not_a_loop():
    text = "In the beginning, God created the heavens and the earth...... The earth was empty."
    assert repetition_loop(text) is None
    assert repetition_loop(text + "." * 60) == '"." repeated 61 times'


def test_loop_notice_names_the_looping_samples_only():
    assert loop_notice(["In the beginning", "All is well."]) == ""
    notice = loop_notice(["In the beginning, God created", "..........", "ha ha ha ha ha ha ha ha"])
    assert 'sample 2: "." repeated 10 times' in notice
    assert 'sample 3: "ha" repeated 7 times' in notice and "sample 1" not in notice
    assert loop_notice([".........."]).startswith('⚠ **Repetition loop** ("." repeated 10')


def test_summary_of_every_shipped_model_names_its_size_and_corpus():
    manifests = sorted(MODELS.glob("*/*/manifest.json"))
    if not manifests:
        pytest.skip("no shipped models")
    for path in manifests:
        manifest = Manifest.read(path)
        line = summary("m", manifest)
        assert line.startswith("**m**: a ") and "\n" not in line
        assert "trained on " in line, line
        parameters = manifest.export.parameters
        if parameters:
            assert f"{parameters / 1e6:.1f}M-parameter" in line


def test_summary_says_what_a_translator_does_and_warns_about_small_generators():
    manifest = manifest_of(
        "seq2seq",
        architecture="mbart",
        export={"parameters": 10_513_408},
        training_data={
            "corpus": "WEB -> RV1909 verse pairs from the SWORD modules engWEB2015eb",
            "source_language": "en",
            "target_language": "es",
        },
    )
    line = summary("translator (int8)", manifest)
    assert line == (
        "**translator (int8)**: a 10.5M-parameter mbart trained on WEB → RV1909 verse pairs; "
        "translates en → es one sentence at a time. A model this small can loop on text unlike "
        "its corpus (names, emoji)."
    )
    big = dataclasses.replace(manifest, export={"parameters": 500_000_000})
    assert "small" not in summary("x", big)
    assert summary("x", manifest_of("word-vectors")) == (
        "**x**: a model; one vector per word of its training text; unseen words have none."
    )


SMALL_LM = {"export": {"parameters": 5_240_320}}
ADAPTER = {"adapter": {"rank": 8, "base": {"name": "base", "sha256": "0" * 64}, "file": "a.onnx"}}


def test_summary_of_a_language_model_and_of_an_adapter():
    lm = manifest_of(architecture="gpt2", training_data={"corpus": "WEB (SWORD)"}, **SMALL_LM)
    assert summary("lm (int8)", lm).startswith(
        "**lm (int8)**: a 5.2M-parameter gpt2 trained on WEB; continues a prompt in the style"
    )
    tune = manifest_of(training_data={"corpus": "KJV"}, **ADAPTER)
    line = summary("a", tune)
    assert line.split(";")[0] == "**a**: a rank-8 LoRA adapter on base, fine-tuned on KJV"


def test_seed_reproductions_are_labelled_and_fine_tunes_come_first():
    found = {"lm": manifest_of(**SMALL_LM), "base": manifest_of(), "tune": manifest_of(**ADAPTER)}
    assert choice_label("lm (int8)", found["lm"]) == "lm (int8) · seed reproduction, 5.2M"
    assert choice_label("base", found["base"]) == "base"
    assert best_first(["lm", "base", "tune"], found) == ["tune", "base", "lm"]
    assert best_first(["tune", "lm"], found) == ["lm", "tune"]  # its base missing: last


def test_strip_markup_takes_out_the_formats_markers_only():
    marked = manifest_of(prompt_prefix="[s:text]", stop=["[e:text]"])
    assert strip_markup("Amen.[e:author] So it is.[e:te", marked) == "Amen. So it is."
    assert strip_markup("a [1] b [", manifest_of()) == "a [1] b ["
