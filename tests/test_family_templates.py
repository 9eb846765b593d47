"""The chat templates of the GGUF families users bring (docs/GGUF.md, "Supported architectures"),
rendered by our sandbox (`runtime.chat.ChatTemplate`) exactly as transformers renders them.

The templates are the models' own, as llama.cpp keeps them for its tests (`models/templates/` of
the llama.cpp that the llama-cpp-python sdist vendors, tests/gguf_convert.py; the test skips with
a reason when the sdist cannot be had). Qwen3, Gemma 2 (Gemma 1 and 3 write turns the same way;
Gemma 2's refuses a system turn), SmolLM3, Granite 3.3 and 4.0, and Phi-3.5; llama.cpp keeps no
OLMo 2 or Gemma 3 template.
"""

from __future__ import annotations

import re

import pytest

from runtime.chat import ChatTemplate
from tests.gguf_convert import llama_cpp_source
from tests.test_chat_template import (
    CONVERSATIONS,
    SPECIAL,
    _hf_tokenizer,
    _rendered_by_transformers,
)

FAMILIES = {
    "qwen3": "Qwen-Qwen3-0.6B",
    "gemma2": "google-gemma-2-2b-it",
    "smollm3": "HuggingFaceTB-SmolLM3-3B",
    "granite": "ibm-granite-granite-3.3-2B-Instruct",
    "granite4": "ibm-granite-granite-4.0",
    "phi3": "microsoft-Phi-3.5-mini-instruct",
}


@pytest.fixture(scope="module")
def templates():
    source = llama_cpp_source()
    if source is None:
        pytest.skip("the llama-cpp-python sdist (llama.cpp's model templates) cannot be had")
    return source / "models" / "templates"


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_a_family_template_renders_as_transformers_renders_it(templates, family):
    text = (templates / f"{FAMILIES[family]}.jinja").read_text()
    ours, tokenizer = ChatTemplate(text, SPECIAL), _hf_tokenizer(text)
    rendered = set()
    for conversation in CONVERSATIONS.values():
        for add_generation_prompt in (True, False):
            expected = _rendered_by_transformers(tokenizer, conversation, add_generation_prompt)
            if isinstance(expected, tuple):  # the template refused it (raise_exception)
                with pytest.raises(ValueError, match=re.escape(expected[1])):
                    ours.render(conversation, add_generation_prompt)
            else:
                rendered.add(ours.render(conversation, add_generation_prompt))
                assert ours.render(conversation, add_generation_prompt) == expected
    assert len(rendered) >= 8  # the conversations differ, so must their renders
