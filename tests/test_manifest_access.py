"""Only runtime/manifest.py reads a manifest by string key: everywhere else a manifest and its
sections are read through their typed fields (docs/bundle.md). Checked by parsing the source
(nothing is imported but runtime.manifest, for the names of its sections).

A read by string key is a subscript with a string (`x.parity["greedy"]`) or a `.get("…")` on:
a typed section, named by the field that holds it (`parity`, `export`, `adapter`, `gguf`, …);
a manifest's JSON document (`x.to_json()["export"]`, or a variable named like `manifest`).
Mappings keyed by data, not by the schema (control names, graph roles, file names, metric
names, the training card's facts), are not sections and may be indexed.
"""

from __future__ import annotations

import ast
import dataclasses
import types
import typing
from collections.abc import Mapping
from pathlib import Path

import pytest

from runtime import manifest as manifest_module

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("runtime", "modeling", "study", "convert", "export", "train", "ui", "serve", "bench")
OWNER = REPO / "runtime" / "manifest.py"
LOOKUPS = ("get", "pop", "setdefault")


def section_fields(mapped: bool = False) -> set[str]:
    """The names of the fields that hold a typed section, on `Manifest` and on every section;
    `mapped`: those that hold a mapping of sections keyed by data (`controls`, `slots`)."""
    sections = [
        value
        for value in vars(manifest_module).values()
        if isinstance(value, type) and issubclass(value, manifest_module._Section)
    ]
    names = set()
    for owner in (manifest_module.Manifest, *sections):
        for name, hint in typing.get_type_hints(owner).items():
            union = typing.get_origin(hint) in (typing.Union, types.UnionType)
            kinds = typing.get_args(hint) if union else (hint,)
            if mapped:
                kinds = [typing.get_args(k)[-1] for k in kinds if typing.get_origin(k) is Mapping]
            if any(isinstance(k, type) and issubclass(k, manifest_module._Section) for k in kinds):
                names.add(name)
    return names


SECTION_FIELDS = section_fields()
MAPPED_FIELDS = section_fields(mapped=True)


def _is_section(node: ast.expr, aliases: set[str]) -> bool:
    """Whether `node` is a typed section or a manifest's JSON document: a section field, a name
    bound to one in the same function (`parity = manifest.parity`), `….to_json()`, or a name
    ending in `manifest`."""
    if isinstance(node, ast.Attribute):
        return node.attr in SECTION_FIELDS
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        return node.func.attr == "to_json"
    return isinstance(node, ast.Name) and (node.id.endswith("manifest") or node.id in aliases)


def _string(node: ast.expr | None) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


def _mapping(node: ast.expr, mappings: set[str]) -> bool:
    """Whether `node` is a mapping of sections (`x.controls`, or a name bound to one)."""
    if isinstance(node, ast.Attribute):
        return node.attr in MAPPED_FIELDS
    return isinstance(node, ast.Name) and node.id in mappings


def _aliases(scope: ast.AST) -> set[str]:
    """The names bound to a section in `scope`: `a = x.parity`, `a, b = x.adapter, x.parity`,
    and the loop variables over a mapping of sections (`for name, spec in x.controls.items()`)."""
    names, mappings = set(), set()
    for node in ast.walk(scope):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                pairs = [(target, node.value)]
                if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple):
                    pairs = list(zip(target.elts, node.value.elts))
                for name, value in pairs:
                    if isinstance(name, ast.Name) and _is_section(value, set()):
                        names.add(name.id)
                    elif isinstance(name, ast.Name) and _mapping(value, set()):
                        mappings.add(name.id)
    for node in ast.walk(scope):
        if not isinstance(node, ast.For | ast.comprehension):
            continue
        loop = node.iter
        if not (isinstance(loop, ast.Call) and isinstance(loop.func, ast.Attribute)):
            continue
        if not _mapping(loop.func.value, mappings):
            continue
        if loop.func.attr == "values" and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif loop.func.attr == "items" and isinstance(node.target, ast.Tuple):
            if isinstance(node.target.elts[-1], ast.Name):
                names.add(node.target.elts[-1].id)
    return names


def string_key_reads(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, source) of every read by string key of a section or a manifest document."""
    found = set()
    scopes = [tree] + [
        node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    ]
    for scope in scopes:
        aliases = _aliases(scope) if scope is not tree else set()
        for node in ast.walk(scope):
            if isinstance(node, ast.Subscript):
                read = _string(node.slice) and _is_section(node.value, aliases)
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                read = (
                    node.func.attr in LOOKUPS
                    and bool(node.args)
                    and _string(node.args[0])
                    and _is_section(node.func.value, aliases)
                )
            else:
                read = False
            if read:
                found.add((node.lineno, ast.unparse(node)))
    return sorted(found)


def source_files() -> list[Path]:
    files = [REPO / "app.py"]
    for package in PACKAGES:
        files += sorted((REPO / package).rglob("*.py"))
    return [path for path in files if path != OWNER]


def test_the_sections_are_known():
    # the fields the issue names, each holding a typed section
    assert {"adapter", "lora", "export", "parity", "generation_defaults"} <= SECTION_FIELDS
    assert {"gguf", "greedy", "logits", "base", "metadata_summary"} <= SECTION_FIELDS
    assert dataclasses.is_dataclass(manifest_module.Parity)


def test_no_manifest_is_read_by_string_key_outside_runtime_manifest():
    reads = [
        f"{path.relative_to(REPO)}:{line}: {code}"
        for path in source_files()
        for line, code in string_key_reads(ast.parse(path.read_text(encoding="utf-8")))
    ]
    assert not reads, "read the typed fields instead:\n" + "\n".join(reads)


@pytest.mark.parametrize(
    "code",
    [
        'manifest.parity["greedy"]',
        'gen.manifest.export.get("parameters")',
        'base.export.gguf["sha256"]',
        'spec.adapter.base["name"]',
        'manifest.to_json()["export"]',
        'int8_manifest["parity"]',
        'def card(m):\n    parity = m.parity\n    return parity["greedy"]',
        'def card(m):\n    spec, parity = m.adapter, m.parity\n    return spec["rank"]',
        'def f(m):\n    for name, spec in m.controls.items():\n        print(spec["values"])',
        'def f(m):\n    controls = m.controls\n    return [s["kind"] for s in controls.values()]',
    ],
)
def test_the_check_finds_a_string_key_read(code):
    assert len(string_key_reads(ast.parse(code))) == 1


@pytest.mark.parametrize(
    "code",
    [
        'manifest.controls["length"]',  # a control's name
        'manifest.graphs["decoder"]',  # a graph's role
        'manifest.metrics["bleu greedy"]',  # a metric's name
        "manifest.parity.greedy",
        'report["greedy"]',  # a report being built, not yet a manifest
        'def card(m):\n    parity = check(m)\n    return parity["greedy"]',
    ],
)
def test_the_check_leaves_data_keys_and_typed_reads(code):
    assert string_key_reads(ast.parse(code)) == []
