"""Tool calls: the constraint that makes a chat reply's function calls parse and validate, and the
reading of those calls back out of the reply's text.

A reply calls functions in one of two formats (`FORMATS`):

- "hermes": what Qwen2.5's (and Hermes') chat templates teach, one call per block:
  `<tool_call>\\n{"name": "get_weather", "arguments": {"city": "Paris"}}\\n</tool_call>`, blocks
  one per line, text allowed before the first;
- "json": a model whose template knows no tools writes one bare call,
  `{"name": "get_weather", "arguments": {"city": "Paris"}}` (the generic format llama.cpp
  falls back on; the caller tells the model about the functions, `generic_messages`).

`ToolCalls` (a `GenerationConfig.tool_calls`) holds the format, the JSON Schema of one call
(`call_schema`: the function's name as a constant, its `parameters` as the arguments' schema;
several functions: any of them), whether a call is required and whether several may follow one
another. Its `lark()` grammar is llguidance's: when a call is not required the reply is free text
until the model writes `<tool_call>` (a lazy lexeme, as llguidance's tool-calling docs do it);
from there, and from the start when it is required, only calls to the schema can follow, then
the end of the turn. The schema goes through runtime/structured.py's checks first (its limits,
then a compile in the sandbox process), and so does the whole grammar.

`read_calls(text, format)` reads a finished reply: its text before the calls and each call's
name and arguments (the arguments exactly as generated: JSON text); `partial_calls` reads one
still being written, for streaming. Neither checks the arguments against the schema: the
grammar did, token by token. Not covered here: rendering tools into a prompt (runtime/chat.py)
and the API's objects (serve/chat.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from .structured import JSON_OPTIONS, check_lark, check_schema

__all__ = ["FORMATS", "ToolCalls", "call_schema", "generic_messages", "partial_calls", "read_calls"]

FORMATS = ("hermes", "json")
OPEN, CLOSE = "<tool_call>", "</tool_call>"  # the hermes format's call block
NO_PARAMETERS = {"type": "object", "properties": {}, "additionalProperties": False}


def call_schema(functions: list[dict]) -> str:
    """The JSON Schema (text) of one call to any of `functions` ({"name", "parameters"} each;
    no `parameters`: no arguments), name first, as the templates write calls. A `parameters`
    with local `$ref`s (pydantic's nested models: `#/$defs/…`) moves whole into the root's
    `$defs` under the function's name, its `$ref`s pointing there.

    >>> json.loads(call_schema([{"name": "now"}]))["properties"]["name"]
    {'const': 'now'}
    >>> nested = {"type": "object", "properties": {"at": {"$ref": "#/$defs/Place"}},
    ...           "$defs": {"Place": {"type": "string"}}}
    >>> schema = json.loads(call_schema([{"name": "go", "parameters": nested}]))
    >>> schema["properties"]["arguments"], schema["$defs"]["go"]["properties"]["at"]
    ({'$ref': '#/$defs/go'}, {'$ref': '#/$defs/go/$defs/Place'})
    """
    calls, moved = [], {}
    for function in functions:
        name, arguments = function["name"], function.get("parameters") or NO_PARAMETERS
        if _has_ref(arguments):
            moved[name] = _refs_under(arguments, f"#/$defs/{name}")
            arguments = {"$ref": f"#/$defs/{name}"}
        calls.append(
            {
                "type": "object",
                "properties": {"name": {"const": name}, "arguments": arguments},
                "required": ["name", "arguments"],
                "additionalProperties": False,
            }
        )
    schema = calls[0] if len(calls) == 1 else {"anyOf": calls}
    return json.dumps({**schema, "$defs": moved} if moved else schema)


DATA_KEYWORDS = ("const", "enum", "default", "examples")  # values that are data, not schemas


def _has_ref(schema) -> bool:
    if isinstance(schema, dict):
        return any(
            (key == "$ref" and isinstance(value, str))
            or (key not in DATA_KEYWORDS and _has_ref(value))
            for key, value in schema.items()
        )
    return isinstance(schema, list) and any(_has_ref(item) for item in schema)


def _refs_under(schema, root: str):
    """`schema` with each local `$ref` ("#…") pointing under `root` ("#/$defs/name…")."""
    if isinstance(schema, dict):
        return {
            key: root + value[1:]
            if key == "$ref" and isinstance(value, str) and value.startswith("#")
            else value
            if key in DATA_KEYWORDS
            else _refs_under(value, root)
            for key, value in schema.items()
        }
    if isinstance(schema, list):
        return [_refs_under(item, root) for item in schema]
    return schema


@dataclass(frozen=True)
class ToolCalls:
    """The calls a reply may (or must) make; `check` before use (GenerationConfig does)."""

    format: str  # one of FORMATS: how the reply writes a call
    schema: str  # the JSON Schema of one call (`call_schema`)
    required: bool  # True: the reply is calls only; False: text, or text then calls
    parallel: bool  # True: one call or more; False: exactly one

    def check(self) -> None:
        """Raise ValueError unless the format is known, and the schema and the whole grammar
        compile within runtime/structured.py's limits."""
        if self.format not in FORMATS:
            raise ValueError(f"`tool_calls.format` must be one of {FORMATS}, got {self.format!r}")
        if self.format == "json" and (not self.required or self.parallel):
            raise ValueError(
                "`tool_calls` in the json format must be required and single (a bare call is "
                f"the whole reply), got required={self.required}, parallel={self.parallel}"
            )
        check_schema(self.schema)
        check_lark(self.lark())

    def lark(self) -> str:
        """llguidance's Lark grammar of the reply (the call schema inside it as `%json`)."""
        schema = {"x-guidance": JSON_OPTIONS, **json.loads(self.schema)}
        call = f"%json {json.dumps(schema)}"
        if self.format == "json":
            return f"%llguidance {{}}\nstart: {call}\n"
        more = f' ("\\n" {json.dumps(OPEN)} call)*' if self.parallel else ""
        body = f'call: "\\n" {call} {json.dumps(chr(10) + CLOSE)}\n'
        if self.required:
            return f"%llguidance {{}}\nstart: {json.dumps(OPEN)} call{more}\n{body}"
        return (
            f"%llguidance {{}}\nstart: TEXT | lead call{more}\n"
            f"lead[lazy]: TEXT {json.dumps(OPEN)}\n{body}TEXT: /(.|\\n)*/\n"
        )


# ---- reading calls back ----------------------------------------------------------------------


def read_calls(text: str, format: str) -> tuple[str | None, list[dict]] | None:
    """A finished reply's text before its calls (None when empty) and its calls, each
    {"name", "arguments"} (the arguments as JSON text); None when a call is unfinished (the
    reply ran out of tokens inside it). A reply without calls is all text.

    >>> read_calls('Hm.<tool_call>\\n{"name": "f", "arguments": {"a": 1}}\\n</tool_call>', "hermes")
    ('Hm.', [{'name': 'f', 'arguments': '{"a": 1}'}])
    """
    content, calls = partial_calls(text, format)
    closed = text.endswith(CLOSE if format == "hermes" else "}")
    if any(not call["done"] for call in calls) or (calls and not closed):
        return None  # cut inside a call, or after one, inside the next `<tool_call>`
    return content or None, [{"name": c["name"], "arguments": c["arguments"]} for c in calls]


def partial_calls(text: str, format: str) -> tuple[str, list[dict]]:
    """What a reply being written has made so far: its text before the calls (less a tail that
    may be the start of `<tool_call>`) and per call begun {"name" (None until written whole),
    "arguments" (its JSON text so far), "done"}. `text` follows `ToolCalls.lark()`'s grammar.

    >>> partial_calls('{"name": "f", "arguments": {"a": [1', "json")
    ('', [{'name': 'f', 'arguments': '{"a": [1', 'done': False}])
    """
    if format == "json":
        return "", [_partial_call(text)] if text else []
    start = text.find(OPEN)
    if start < 0:
        held = next((n for n in range(len(OPEN) - 1, 0, -1) if text.endswith(OPEN[:n])), 0)
        return text[: len(text) - held], []
    calls = []
    for block in text[start:].split(OPEN)[1:]:
        calls.append(_partial_call(block.removeprefix("\n")))
    return text[:start], calls


def _partial_call(text: str) -> dict:
    """One call's JSON text so far (`{"name": "f", "arguments": …}`, as the grammar lays it
    out): the name once written, the arguments' text so far, whether the call is whole."""
    head = '{"name": "'
    name_end = text.find('"', len(head))
    lead = '", "arguments": '
    if name_end < 0 or not text.startswith(lead, name_end):
        return {"name": None, "arguments": "", "done": False}
    arguments = text[name_end + len(lead) :]
    end = _object_end(arguments)
    if end is None:
        return {"name": text[len(head) : name_end], "arguments": arguments, "done": False}
    whole = arguments[end:].startswith("}")  # the call's own closing brace
    return {"name": text[len(head) : name_end], "arguments": arguments[:end], "done": whole}


def _object_end(text: str) -> int | None:
    """The length of the JSON object `text` starts with, once it is closed; None before."""
    depth, in_string, escaped = 0, False, False
    for index, char in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "{[":
            depth += 1
        elif char in "}]":
            depth -= 1
            if depth == 0:
                return index + 1
    return None


# ---- a template without tools ----------------------------------------------------------------


def generic_messages(messages: list[dict], tools: list[dict]) -> list[dict]:
    """A conversation with tools for a chat template that knows none: the functions described in
    the system message (the client's own, or a new first one), earlier calls as their JSON text
    and tool results as user turns, so that the template sees only system, user and assistant
    turns with text."""
    described = "\n".join(json.dumps(tool, ensure_ascii=False) for tool in tools)
    guide = (
        "You can call these functions:\n"
        f"{described}\n"
        'To call one, reply with only a JSON object: {"name": <function name>, "arguments": '
        "<an object of its arguments>}."
    )
    converted = []
    for message in messages:
        if message["role"] == "tool":
            converted.append(
                {"role": "user", "content": f"The function returned: {message['content']}"}
            )
        elif message.get("tool_calls"):
            calls = [
                json.dumps(call["function"], ensure_ascii=False) for call in message["tool_calls"]
            ]
            text = "\n".join(filter(None, [message["content"], *calls]))
            converted.append({"role": "assistant", "content": text})
        else:
            converted.append({"role": message["role"], "content": message["content"]})
    if converted[0]["role"] == "system":
        converted[0] = {"role": "system", "content": f"{converted[0]['content']}\n\n{guide}"}
    else:
        converted.insert(0, {"role": "system", "content": guide})
    return converted
