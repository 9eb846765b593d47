"""Every class that writes text has the members of its protocols (runtime/text_generator.py),
checked on the classes themselves, without loading a model: each method's parameters by name,
kind and order, with a default wherever the protocol has one (a class may add parameters that
have defaults); each property as a property or class attribute; each declared attribute
assigned in `__init__`. `isinstance` against a runtime-checkable protocol would check the names
alone."""

from __future__ import annotations

import ast
import inspect
import textwrap
from functools import cached_property

import pytest

import runtime
from runtime.hierarchical import HierarchicalGenerator
from runtime.text_generator import ChatGenerator, ServedGenerator, TextGenerator
from ui.remote import RemoteGenerator

PROTOCOL_BASES = {"Protocol", "Generic", "object"}


def _members(protocol) -> dict:
    """The protocol's members (its own and its protocol bases'), the nearest declaration first."""
    members = {}
    for klass in reversed(protocol.__mro__):
        if klass.__name__ in PROTOCOL_BASES:
            continue
        for name in klass.__dict__.get("__annotations__", {}):
            members[name] = "attribute"
        for name, value in vars(klass).items():
            if name.startswith("_"):  # typing's machinery
                continue
            if inspect.isfunction(value) or isinstance(value, property):
                members[name] = value
    return members


def _assigned_in_init(cls) -> set[str]:
    """Attributes `self.x = …` in the `__init__` of `cls` or a base."""
    names = set()
    for klass in cls.__mro__:
        init = vars(klass).get("__init__")
        if not inspect.isfunction(init):
            continue
        tree = ast.parse(textwrap.dedent(inspect.getsource(init)))
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                if isinstance(node.value, ast.Name) and node.value.id == "self":
                    names.add(node.attr)
    return names


def _signature_problems(name: str, wanted, got) -> list[str]:
    want = list(inspect.signature(wanted).parameters.values())
    have = list(inspect.signature(got).parameters.values())
    problems = []
    for position, parameter in enumerate(want):
        if position >= len(have):
            problems.append(f"{name}: no parameter `{parameter.name}`")
            continue
        own = have[position]
        if (own.name, own.kind) != (parameter.name, parameter.kind):
            problems.append(f"{name}: parameter {position} is `{own}`, wants `{parameter}`")
        elif parameter.default is not inspect.Parameter.empty and own.default is own.empty:
            problems.append(f"{name}: `{own.name}` has no default")
    for extra in have[len(want) :]:
        if extra.default is extra.empty and extra.kind not in (
            extra.VAR_POSITIONAL,
            extra.VAR_KEYWORD,
        ):
            problems.append(f"{name}: extra parameter `{extra.name}` without a default")
    return problems


def problems(cls, protocol) -> list[str]:
    """How `cls` falls short of `protocol`; [] when it has every member."""
    found = []
    assigned = _assigned_in_init(cls)
    for name, wanted in _members(protocol).items():
        own = inspect.getattr_static(cls, name, None)
        if wanted == "attribute":
            if own is None and name not in assigned:
                found.append(f"{name}: not an attribute")
        elif isinstance(wanted, property):
            if not isinstance(own, property | cached_property) and (own is None or callable(own)):
                found.append(f"{name}: not a property")
        elif not inspect.isfunction(own):
            found.append(f"{name}: not a method")
        else:
            found += _signature_problems(name, wanted, own)
    return found


@pytest.mark.parametrize(
    "cls, protocol",
    [
        (runtime.Generator, ServedGenerator),
        (runtime.Generator, ChatGenerator),
        (runtime.Generator, TextGenerator),
        (RemoteGenerator, ChatGenerator),
        (HierarchicalGenerator, TextGenerator),
    ],
    ids=lambda value: value.__name__,
)
def test_class_has_its_protocols_members(cls, protocol):
    assert problems(cls, protocol) == []


def test_the_check_finds_what_a_class_lacks():
    class Partial:
        name = "m"
        task = "causal-lm"

        def generate(self, prompts, config=None):  # no `controls`
            return []

        def stream(self, prompt, config, controls=None):  # `config` without its default
            yield from ()

    assert problems(Partial, TextGenerator) == [
        "controls: not a property",
        "generate: no parameter `controls`",
        "stream: `config` has no default",
    ]
    assert "chat: not a method" in problems(Partial, ChatGenerator)
    assert "tokenizer: not an attribute" in problems(Partial, ServedGenerator)
