"""ui/links.py: building a tab's link and reading one back (types, ranges, choices, unknowns)."""

from __future__ import annotations

from urllib.parse import parse_qsl, urlsplit

import gradio as gr
import pytest

from ui import links


@pytest.fixture(scope="module")
def share():
    with gr.Blocks() as demo, gr.Tabs(), gr.Tab("Generate", id="generate"):
        inputs = {
            "model": gr.Dropdown(["bible-lm (int8)", "bible-lm (fp32)"], value="bible-lm (int8)"),
            "prompt": gr.Textbox("x", max_length=20),
            "controls": gr.JSON({}),
            "mode": gr.Radio(["greedy", "sampling", "beam search"], value="sampling"),
            "columns": gr.Radio([2, 3, 4], value=2),
            "temperature": gr.Slider(0.05, 2.0, value=0.8, step=0.05),
            "max_new_tokens": gr.Slider(1, 256, value=64, step=1),
            "seed": gr.Number(0, precision=0, minimum=0, maximum=2**32 - 1),
            "leading_space": gr.Checkbox(True),
        }
        share = links.shareable("generate", "generate", inputs)
    assert links._PAGES[demo].shares == {"generate": share}
    return share


def query(url: str) -> dict:
    assert url.startswith("?"), "the link is relative, so a path prefix is kept"
    return dict(parse_qsl(urlsplit(url).query))


def test_build_query_has_the_api_names_tab_and_run(share):
    values = {
        "model": "bible-lm (int8)",
        "prompt": "In the beginning",
        "controls": {"section": "gospels"},
        "mode": "sampling",
        "columns": 3,
        "temperature": 0.8,
        "max_new_tokens": 24.0,  # sliders may hand integers over as floats
        "seed": 3,
        "leading_space": False,
    }
    url = links.build_query(share, values)
    assert url.startswith("?tab=generate&model=bible-lm+(int8)&prompt=In+the+beginning&")
    assert url.endswith("&run=1")
    assert query(url) == {
        "tab": "generate",
        "model": "bible-lm (int8)",
        "prompt": "In the beginning",
        "controls": '{"section":"gospels"}',
        "mode": "sampling",
        "columns": "3",
        "temperature": "0.8",
        "max_new_tokens": "24",
        "seed": "3",
        "leading_space": "false",
        "run": "1",
    }
    assert "run" not in query(links.build_query(share, values, run=False))
    assert "model" not in query(links.build_query(share, {"model": None}))


def test_round_trip_restores_typed_values(share):
    values = {
        "model": "bible-lm (fp32)",
        "prompt": "a & b = c?",
        "controls": {"section": "law"},
        "mode": "beam search",
        "columns": 4,
        "temperature": 1.35,
        "max_new_tokens": 7,
        "seed": 4294967295,
        "leading_space": True,
    }
    parsed = links.parse_query(query(links.build_query(share, values)), {"generate": share})
    assert parsed.problems == []
    assert parsed.share is share and parsed.run
    assert parsed.values == values
    assert type(parsed.values["max_new_tokens"]) is int and type(parsed.values["columns"]) is int


@pytest.mark.parametrize(
    "params, problem",
    [
        ({"bogus": "1"}, "unknown parameter `bogus` for the generate tab"),
        ({"temperature": "9"}, "`temperature` must be in [0.05, 2], got 9"),
        ({"temperature": "hot"}, "`temperature` must be a number, got 'hot'"),
        ({"seed": "1.5"}, "`seed` must be an integer, got '1.5'"),
        ({"seed": "-1"}, "`seed` must be in [0, 4.29497e+09], got -1"),
        ({"mode": "nucleus"}, "`mode` must be one of greedy, sampling, beam search; got 'nucleus'"),
        (
            {"model": "gpt-5"},
            "`model` must be one of bible-lm (int8), bible-lm (fp32); got 'gpt-5'",
        ),
        ({"controls": "{"}, "`controls` must be JSON, got '{'"),
        ({"prompt": "x" * 21}, "`prompt` must be at most 20 characters, got 21"),
        ({"leading_space": "maybe"}, "`leading_space` must be true or false, got 'maybe'"),
        ({"run": "yes"}, "`run` must be 0 or 1, got 'yes'"),
    ],
)
def test_bad_parameters_are_named_and_nothing_runs(share, params, problem):
    parsed = links.parse_query(
        {"tab": "generate", "prompt": "ok", "run": "1"} | params, {"generate": share}
    )
    assert parsed.problems == [problem]
    assert not parsed.run
    if "prompt" not in params:
        assert parsed.values["prompt"] == "ok", "the valid parameters are still restored"


def test_unknown_or_missing_tab(share):
    parsed = links.parse_query({"tab": "nope", "seed": "1"}, {"generate": share})
    assert parsed.share is None
    assert parsed.problems == ["`tab` must be one of generate; got 'nope'"]
    parsed = links.parse_query({"seed": "1"}, {"generate": share})
    assert parsed.problems == ["`tab` is missing, so seed were not used"]
    assert links.parse_query({}, {"generate": share}).problems == []


@pytest.fixture(scope="module")
def sections():
    """Two link targets on one tab, as the Masked LM and Embeddings tabs have."""
    with gr.Blocks(), gr.Tabs(), gr.Tab("Masked LM", id="masked-lm"):
        text = gr.Textbox("the <|mask|> of God")
        fill = links.shareable(
            "masked-lm",
            "fill_mask_view",
            {"text": text, "top_k": gr.Slider(1, 20, step=1)},
            section="fill_mask",
        )
        probes = links.shareable("masked-lm", "token_probes_view", {}, section="token_probes")
        with pytest.raises(ValueError, match="registered once per section"):
            links.shareable("masked-lm", "again", {"text": text}, section="fill_mask")
        with pytest.raises(ValueError, match="registered once per section"):
            links.shareable("masked-lm", "whole_tab", {"text": text})
    return {share.key: share for share in (fill, probes)}


def test_a_section_link_names_its_section_and_reads_back(sections):
    fill = sections["masked-lm-fill_mask"]
    url = links.build_query(fill, {"text": "the <|mask|> of God", "top_k": 3.0})
    assert url == "?tab=masked-lm&section=fill_mask&text=the+%3C%7Cmask%7C%3E+of+God&top_k=3&run=1"
    parsed = links.parse_query(query(url), sections)
    assert parsed.share is fill and parsed.run and parsed.problems == []
    assert parsed.values == {"text": "the <|mask|> of God", "top_k": 3}
    parsed = links.parse_query(
        {"tab": "masked-lm", "section": "token_probes", "run": "1"}, sections
    )
    assert parsed.share is sections["masked-lm-token_probes"] and parsed.values == {}
    assert parsed.run


@pytest.mark.parametrize(
    "params, problem",
    [
        (
            {"tab": "masked-lm", "text": "x"},
            "`section` must be one of fill_mask, token_probes for the masked-lm tab; got None",
        ),
        (
            {"tab": "masked-lm", "section": "nope"},
            "`section` must be one of fill_mask, token_probes for the masked-lm tab; got 'nope'",
        ),
        (
            {"tab": "masked-lm", "section": "token_probes", "text": "x"},
            "unknown parameter `text` for the masked-lm tab's token_probes section",
        ),
    ],
)
def test_bad_sections_are_named_and_nothing_runs(sections, params, problem):
    parsed = links.parse_query(params | {"run": "1"}, sections)
    assert parsed.problems == [problem] and not parsed.run


def test_a_section_on_a_tab_without_sections_is_named(share):
    parsed = links.parse_query({"tab": "generate", "section": "x"}, {"generate": share})
    assert parsed.problems == ["the generate tab has no sections, got `section` 'x'"]
