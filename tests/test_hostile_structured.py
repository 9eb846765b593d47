"""Hostile JSON Schemas (runtime/structured.py, runtime/schema_limits.py): each is refused with a
clear `ValueError` naming `json_schema` (a 400 naming `response_format` through serve's bodies),
and none takes the process down.

Every case here once crashed the process (llguidance overflowing its stack on a chain of
`$defs`), ran for seconds and kept hundreds of MB (a pattern's nested repetitions), held up
other requests (0.8 MB enums) or failed as a server error (a schema with no finite document).
The limits refuse each in milliseconds; a schema that slips past them is compiled in a sandbox
process, so the crash tests run with the limits lifted, in a child process that must exit
cleanly with the refusal (were llguidance run in that process, it would die by SIGSEGV). Each
test has a pytest-timeout guard (the time bound); no test asserts a timing.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from tokenizers import Tokenizer

import runtime
from runtime import schema_limits, structured
from serve.chat import parse_chat
from serve.protocol import RequestError

ROOT = Path(__file__).resolve().parents[1]
TOKENIZER = ROOT / "models" / "bible-lm" / "fp32" / "tokenizer.json"
FRESH = itertools.count(2)  # a new repetition count for each pattern bomb


def chain(length: int, wrapped: bool = False) -> dict:
    """`$defs` d0 … d{length}, each `$ref`-ing the next (inside a required property if
    `wrapped`), the last an integer."""

    def link(i):
        ref = {"$ref": f"#/$defs/d{i + 1}"}
        return {"type": "object", "properties": {"x": ref}, "required": ["x"]} if wrapped else ref

    defs = {f"d{i}": link(i) for i in range(length)}
    return {"$ref": "#/$defs/d0", "$defs": {**defs, f"d{length}": {"type": "integer"}}}


def pattern_bomb() -> dict:
    pattern = f"^((a{{1000}}){{1000}}){{{next(FRESH)}}}$"  # a new one each call: no cache helps
    return {"type": "object", "properties": {"s": {"type": "string", "pattern": pattern}}}


def big_enum(values: int, tag: str = "") -> dict:
    return {"type": "string", "enum": [f"value-{tag}-{i:06d}-xxxxxxxxxx" for i in range(values)]}


def _anyof_cycle() -> dict:
    defs = {"a": {"anyOf": [{"$ref": "#/$defs/b"}]}, "b": {"allOf": [{"$ref": "#/$defs/a"}]}}
    return {"$defs": defs, "$ref": "#/$defs/a"}


HOSTILE = {  # name -> (schema, what the refusal names)
    "3,000 $defs in a chain": (lambda: chain(3000), "at most 1,000 `$ref`s"),
    "1,000 $defs in a chain wrapped in objects": (lambda: chain(1000, True), "`$ref`s"),
    "900 $defs in a chain": (lambda: chain(900), "nested at most 64 deep"),
    "500 $defs in a chain wrapped in objects": (lambda: chain(500, True), "at most 64 deep"),
    "a pattern bomb": (pattern_bomb, "counted repetitions written out"),
    "another pattern bomb": (pattern_bomb, "counted repetitions written out"),
    "a 0.8 MB enum": (lambda: big_enum(30_000), "at most 262,144 characters"),
    "a required self-$ref": (
        lambda: {"type": "object", "properties": {"a": {"$ref": "#"}}, "required": ["a"]},
        "none at `#` (each of its documents must hold another",
    ),
    '{"$ref": "#"}': (lambda: {"$ref": "#"}, "none at `#` (each of its documents must hold"),
    "a $ref cycle through anyOf with no way out": (_anyof_cycle, "must hold another, or it"),
    "a required property that allows nothing": (
        lambda: {"type": "object", "properties": {"a": False}, "required": ["a"]},
        "or it allows none",
    ),
    "a remote $ref": (lambda: {"$ref": "https://example.com/s.json"}, "which is not local"),
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_schemas_are_refused_by_name(name):
    schema, named = HOSTILE[name]
    with pytest.raises(ValueError) as caught:
        runtime.GenerationConfig(json_schema=json.dumps(schema())).validate()
    message = str(caught.value)
    assert message.startswith("`json_schema` must be ") and named in message


@pytest.mark.timeout(60)
def test_json_nested_100_000_deep_is_refused():
    deep = '{"enum": ' + "[" * 100_000 + "]" * 100_000 + "}"
    with pytest.raises(ValueError, match="`json_schema` must be JSON nested at most 200 deep"):
        structured.check_schema(deep)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_serve_refuses_hostile_schemas_with_a_400_naming_response_format(name):
    schema = HOSTILE[name][0]()
    response_format = {"type": "json_schema", "json_schema": {"name": "s", "schema": schema}}
    body = {"model": "m", "messages": [{"role": "user", "content": "Hi"}]}
    with pytest.raises(RequestError) as caught:
        parse_chat({**body, "response_format": response_format})
    assert caught.value.status == 400 and caught.value.param == "response_format"
    assert str(caught.value).startswith("`response_format` must be ")


def _resident_mb() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096 / 2**20


@pytest.mark.timeout(60)
def test_pattern_bombs_keep_no_memory():
    """Seven bombs, each with a new count, leave this process's memory as it was (each once
    kept 150-190 MB): the limits refuse them before llguidance builds anything."""
    before = _resident_mb()
    for _ in range(7):
        with pytest.raises(ValueError, match="counted repetitions written out"):
            structured.check_schema(json.dumps(pattern_bomb()))
    assert _resident_mb() - before < 20


@pytest.mark.timeout(120)
def test_concurrent_big_enums_are_refused_and_smaller_ones_compile():
    """12 clients at once with 0.8 MB enums are all refused; 12 at once with 0.1 MB enums (each
    new) all compile, in the sandbox processes."""
    results: dict[str, list] = {"refused": [], "compiled": []}

    def check(schema: dict, kind: str):
        try:
            structured.check_schema(json.dumps(schema))
            results[kind].append("compiled")
        except ValueError as error:
            results[kind].append(str(error))

    asked = [(big_enum(30_000, str(i)), "refused") for i in range(12)]
    asked += [(big_enum(3_000, f"s{i}"), "compiled") for i in range(12)]
    threads = [threading.Thread(target=check, args=pair) for pair in asked]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=100)
    assert len(results["refused"]) == 12 and all(
        r.startswith("`json_schema` must be at most 262,144 characters") for r in results["refused"]
    )
    assert results["compiled"] == ["compiled"] * 12


CRASH = """
import json, sys
sys.path.insert(0, {root!r})
from runtime import schema_limits, structured
from tests.test_hostile_structured import chain
for name in ("MAX_REFS", "MAX_DEFS", "MAX_DEPTH"):  # lifted: llguidance sees the chain
    setattr(schema_limits, name, 10**6)
try:
    structured.check_schema(json.dumps(chain({length}, {wrapped})))
    print("compiled")
except ValueError as error:
    print(error)
"""


@pytest.mark.timeout(120)
@pytest.mark.parametrize("length, wrapped", [(3000, False), (1000, True)])
def test_a_schema_that_crashes_llguidance_past_the_limits_kills_only_its_sandbox(length, wrapped):
    child = subprocess.run(
        [sys.executable, "-c", CRASH.format(root=str(ROOT), length=length, wrapped=wrapped)],
        capture_output=True,
        text=True,
        timeout=100,
        cwd=ROOT,
    )
    assert child.returncode == 0, child.stderr[-2000:]
    assert child.stdout.startswith(
        "`json_schema` must be a JSON Schema llguidance compiles without crashing"
    )
    assert "its sandbox process failed: it ended (exit status -11)" in child.stdout


@pytest.mark.timeout(60)
def test_a_compile_past_the_deadline_is_refused_and_the_next_compiles(monkeypatch):
    """A 0.2 MB schema takes 17 ms here (sent, parsed and compiled in the sandbox); a faster
    machine did it in under 10 ms, so the deadline is one no round trip can meet."""
    monkeypatch.setattr(structured, "SCHEMA_SECONDS", 0.0005)
    with pytest.raises(ValueError, match="llguidance compiles within 0.0005 s"):
        structured.check_schema(json.dumps(big_enum(6_000, "late")))
    monkeypatch.setattr(structured, "SCHEMA_SECONDS", 5.0)
    structured.check_schema(json.dumps(big_enum(6_000, "in time")))


def test_the_compiled_cache_is_bounded_in_bytes(monkeypatch):
    """Matchers are charged the memory their compile took in the sandbox (tens of kB at least:
    the lexer and grammar), and the cache keeps to its budget, dropping the oldest."""
    tokenizer = Tokenizer.from_file(str(TOKENIZER))
    cache = structured.ByteCache(400_000)
    monkeypatch.setattr(structured, "_matchers", cache)
    schemas = [json.dumps(big_enum(40, f"c{i}")) for i in range(12)]
    for schema in schemas:
        structured.compiled(tokenizer, schema)
        assert cache.used <= cache.budget
    sizes = [size for _, size in cache.entries.values()]
    assert len(sizes) < len(schemas) and min(sizes) > 10_000
    assert cache.used == sum(sizes)
    key = structured._tokenizer_key(tokenizer)
    assert (key, "schema", schemas[0]) not in cache.entries
    assert (key, "schema", schemas[-1]) in cache.entries


def test_the_byte_cache_drops_the_least_recently_used_first():
    cache = structured.ByteCache(100)
    for key, size in (("a", 40), ("b", 40)):
        cache.put(key, key.upper(), size)
    assert cache.get("a") == "A"  # now "b" is the oldest
    cache.put("c", "C", 40)
    assert list(cache.entries) == ["a", "c"] and cache.used == 80
    cache.put("huge", "H", 101)  # larger than the budget: not kept
    assert cache.get("huge") is None and cache.used == 80


def test_recursive_schemas_with_a_way_out_are_kept():
    tree = {"type": "object", "properties": {"kids": {"type": "array", "items": {"$ref": "#"}}}}
    optional = {"type": "object", "properties": {"next": {"$ref": "#"}}}
    either = {"anyOf": [{"type": "null"}, {"type": "array", "minItems": 1, "items": {"$ref": "#"}}]}
    for schema in (tree, optional, either):
        assert schema_limits.check_limits(json.dumps(schema)) == schema
        structured.check_schema(json.dumps(schema))
