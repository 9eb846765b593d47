"""The Chat tab's pure parts a visitor meets first: defaults and example prompts taken from the
chat-defaults study, and errors that never echo a huge argument.

The browser side (a fresh seed per page, the Link, the example chips) is
tests/test_chat_visitor_browser.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ui import chat_tab, checks

STUDY = Path(__file__).resolve().parents[1] / "bench" / "results" / "chat_defaults.json"


@pytest.mark.parametrize(
    "value",
    ["x" * 200_061, ["y" * 200_061], {"turns": "z" * 200_061}],
    ids=["a long string", "a long turn", "a long dict"],
)
def test_a_refused_user_turns_is_named_not_echoed(value):
    with pytest.raises(ValueError) as refused:
        chat_tab.user_turns_value(value)
    message = str(refused.value)
    assert message.startswith("`user_turns")
    assert len(message) < 300, len(message)


def test_a_huge_choice_is_cut_in_its_error():
    with pytest.raises(ValueError) as refused:
        checks.choice("mode", "z" * 100_000, ("greedy", "sampling"))
    assert len(str(refused.value)) < 300
    assert "100002 characters" in str(refused.value)  # its repr's length, quotes included


def test_the_defaults_and_examples_are_the_studys_best():
    study = json.loads(STUDY.read_text())
    best = next(row for row in study["rows"] if row["setting"] == study["best_sampled"])
    sampled = [row for row in study["rows"] if row["settings"]["do_sample"]]
    assert best["score"] == max(row["score"] for row in sampled)
    assert chat_tab.SYSTEM_PROMPT == best["system_prompt"]
    settings = {"top_p": 1.0, "min_p": 0.0, "repetition_penalty": 1.0} | best["settings"]
    assert chat_tab.DEFAULTS == {name: settings[name] for name in chat_tab.DEFAULTS}
    answered = study["best_sampled_by_question"]
    assert all(answered[prompt] == 1.0 for prompt in chat_tab.EXAMPLES)
