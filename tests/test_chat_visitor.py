"""The Chat tab's pure parts a visitor meets first: a fresh seed per conversation, defaults and
example prompts taken from the chat-defaults study, and errors that never echo a huge argument.

The browser side (two pages, the Link, the example chips) is tests/test_chat_visitor_browser.py.
"""

from __future__ import annotations

import pytest

from ui import chat_tab, limits


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
        limits.choice("mode", "z" * 100_000, ("greedy", "sampling"))
    assert len(str(refused.value)) < 300
    assert "100002 characters" in str(refused.value)  # its repr's length, quotes included
