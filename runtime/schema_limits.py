"""The limits a JSON Schema must keep before llguidance sees it, checked in a few milliseconds.

llguidance compiles a schema recursively and builds its regexes' automata as it goes, so a
client's schema could cost any amount of stack, time and memory (measured with llguidance 1.9.1:
a chain of 3,000 `$defs` each `$ref`-ing the next, or 1,000 wrapped in objects, overflows the
stack and kills the process; `^((a{1000}){1000}){3}$` takes 2.8 s and 214 MB). `check_limits`
parses a schema's text and raises a `ValueError` naming `json_schema` when it has:

- more than `MAX_CHARS` characters, or JSON nested deeper than `MAX_JSON_DEPTH`;
- more than `MAX_NODES` subschemas, `MAX_REFS` `$ref`s or `MAX_DEFS` definitions;
- a `$ref` that is not a local JSON pointer (`#` or `#/…`) to a subschema;
- subschemas nested deeper than `MAX_DEPTH`, each `$ref` followed counting as one level (a chain
  of definitions each `$ref`-ing the next nests as deep as it is long; a cycle is cut where it
  closes, as a compiler that remembers what it is compiling cuts it);
- no finite document at the root or at a `$ref`: `{"$ref": "#"}`, or a required property whose
  schema requires itself again (found as grammars find their unproductive symbols);
- a `pattern` (or a `patternProperties` name) longer than `MAX_PATTERN_SIZE` with every
  counted repetition written out (`(a{100}){100}` is 10,000), or patterns totalling more than
  `MAX_PATTERNS_SIZE` so.

It checks shape and cost, not meaning: whether llguidance supports the keywords is found by
compiling (runtime/structured.py, in a sandbox process: runtime/schema_sandbox.py).
"""

from __future__ import annotations

import json
import re
from urllib.parse import unquote

MAX_CHARS = 256 * 1024  # longest schema text, in characters
MAX_JSON_DEPTH = 200  # deepest nesting of JSON arrays and objects
MAX_NODES = 10_000  # subschemas
MAX_REFS = 1_000  # `$ref`s
MAX_DEFS = 1_000  # entries of `$defs` and `definitions`
MAX_DEPTH = 64  # subschemas nested, each `$ref` followed counting as a level (crash: ~1,000)
MAX_PATTERN_SIZE = 10_000  # one pattern with its repetitions written out (~0.2 s to compile)
MAX_PATTERNS_SIZE = 50_000  # all patterns of a schema so

# Keywords whose values are subschemas: a map of them, one, or a list of them.
SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
SCHEMA_ONE = ("additionalProperties", "items", "additionalItems", "contains", "propertyNames")
SCHEMA_ONE += ("not", "if", "then", "else", "unevaluatedProperties", "unevaluatedItems")
SCHEMA_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems", "items")
DEFINITIONS = ("$defs", "definitions")


def refusal(rule: str, got: str) -> ValueError:
    """The one error template, for `json_schema`."""
    return ValueError(f"`json_schema` must be {rule}, got {got}")


def check_limits(text: str) -> dict | bool:
    """The parsed schema of `text`; `ValueError` naming the first limit it breaks.

    >>> check_limits('{"type": "integer"}')
    {'type': 'integer'}
    >>> try:
    ...     check_limits('{"$ref": "#"}')
    ... except ValueError as error:
    ...     print(str(error).split(", got ")[1])
    none at `#` (each of its documents must hold another, or it allows none)
    """
    if len(text) > MAX_CHARS:
        raise refusal(f"at most {MAX_CHARS:,} characters", f"{len(text):,}")
    try:
        schema = json.loads(text)
    except json.JSONDecodeError as error:
        raise refusal(f"valid JSON ({error})", _shown(text)) from None
    except RecursionError:
        raise refusal(f"JSON nested at most {MAX_JSON_DEPTH} deep", "deeper") from None
    if not isinstance(schema, dict | bool):
        raise refusal("a JSON object (or true / false)", _shown(text))
    _check_json_depth(schema)
    nodes = _subschemas(schema)
    refs = {where: node["$ref"] for where, node in nodes.items() if _ref_of(node) is not None}
    defs = sum(len(_dict(_dict(node).get(key))) for node in nodes.values() for key in DEFINITIONS)
    counts = ((len(nodes), MAX_NODES, "subschemas"), (len(refs), MAX_REFS, "`$ref`s"))
    for count, most, what in (*counts, (defs, MAX_DEFS, "definitions")):
        if count > most:
            raise refusal(f"a schema of at most {most:,} {what}", f"{count:,}")
    targets = {where: _target(ref, where, nodes) for where, ref in refs.items()}
    _check_depth(nodes, targets)
    _check_finite(nodes, targets)
    _check_patterns(nodes)
    return schema


def _shown(text: str) -> str:
    return repr(text if len(text) <= 60 else f"{text[:60]}… ({len(text)} characters)")


def _dict(value) -> dict:
    return value if isinstance(value, dict) else {}


def _ref_of(node) -> str | None:
    return node.get("$ref") if isinstance(node, dict) else None


def _check_json_depth(value) -> None:
    """Refuse JSON nested deeper than MAX_JSON_DEPTH (iteratively: no recursion here)."""
    stack = [(value, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            raise refusal(f"JSON nested at most {MAX_JSON_DEPTH} deep", "deeper")
        items = value.values() if isinstance(value, dict) else value
        if isinstance(value, dict | list):
            stack.extend((item, depth + 1) for item in items if isinstance(item, dict | list))


def _escape(name: str) -> str:
    return name.replace("~", "~0").replace("/", "~1")


def _children(node) -> list[tuple[str, object]]:
    """(pointer suffix, subschema) of a schema's direct subschemas."""
    if not isinstance(node, dict):
        return []
    out = []
    for key in SCHEMA_MAPS:
        for name, child in _dict(node.get(key)).items():
            out.append((f"/{_escape(key)}/{_escape(name)}", child))
    for key in SCHEMA_ONE:
        if isinstance(node.get(key), dict | bool):
            out.append((f"/{_escape(key)}", node[key]))
    for key in SCHEMA_LISTS:
        if isinstance(node.get(key), list):
            out.extend((f"/{key}/{i}", child) for i, child in enumerate(node[key]))
    return [(suffix, child) for suffix, child in out if isinstance(child, dict | bool)]


def _subschemas(schema) -> dict[str, object]:
    """Every subschema by its JSON pointer ("" for the root), stopping past MAX_NODES."""
    nodes, stack = {}, [("", schema)]
    while stack and len(nodes) <= MAX_NODES:
        where, node = stack.pop()
        nodes[where] = node
        stack.extend((where + suffix, child) for suffix, child in _children(node))
    return nodes


def _target(ref, where: str, nodes: dict) -> str:
    """The pointer of the subschema a `$ref` names; `ValueError` when it names none."""
    local = isinstance(ref, str) and (ref == "#" or ref.startswith("#/"))
    pointer = unquote(ref[1:]) if local else None
    if pointer in nodes:
        return pointer
    raise refusal(
        "a schema whose `$ref`s are local JSON pointers ('#' or '#/…') to subschemas",
        f"{ref!r} at `#{where}`, which " + ("does not exist" if local else "is not local"),
    )


def _edges(nodes: dict, targets: dict) -> dict[str, list[str]]:
    edges = {where: [where + suffix for suffix, _ in _children(n)] for where, n in nodes.items()}
    for where, target in targets.items():
        edges[where].append(target)
    return edges


def _check_depth(nodes: dict, targets: dict) -> None:
    """Refuse subschemas nested deeper than MAX_DEPTH, `$ref`s followed, cycles cut."""
    edges, height, state = _edges(nodes, targets), {}, {}
    for start in nodes:
        if start in state:
            continue
        stack = [(start, iter(edges[start]))]
        state[start] = "open"
        while stack:
            where, pending = stack[-1]
            child = next(pending, None)
            if child is None:
                stack.pop()
                state[where] = "done"
                height[where] = 1 + max((height.get(c, 0) for c in edges[where]), default=0)
                if height[where] > MAX_DEPTH:
                    raise refusal(
                        f"a schema nested at most {MAX_DEPTH} deep (each `$ref` followed counts)",
                        f"deeper at `#{where}`",
                    )
            elif child not in state:  # an "open" child closes a cycle: cut there (height 0)
                state[child] = "open"
                stack.append((child, iter(edges[child])))


def _needs(node, where: str, targets: dict) -> list[list[str]]:
    """What a finite document of `node` needs: in each group, one subschema with one."""
    if node is False:
        return [[]]
    if not isinstance(node, dict):
        return []

    def each(key: str) -> list[str]:  # the subschemas of a list keyword, by pointer
        items = enumerate(_list(node.get(key)))
        return [f"{where}/{key}/{i}" for i, item in items if isinstance(item, dict | bool)]

    needs = [[targets[where]]] if where in targets else []
    needs += [[member] for member in each("allOf")]
    needs += [each(key) for key in ("anyOf", "oneOf") if each(key)]
    properties = _dict(node.get("properties"))
    for name in _list(node.get("required")):
        if isinstance(name, str) and isinstance(properties.get(name), dict | bool):
            needs.append([f"{where}/properties/{_escape(name)}"])
    least = node.get("minItems")
    if isinstance(least, int) and least > 0:
        needs += [[member] for member in each("prefixItems")[:least]]
        prefix = len(_list(node.get("prefixItems")))
        if least > prefix and isinstance(node.get("items"), dict | bool):
            needs.append([f"{where}/items"])
    return needs


def _list(value) -> list:
    return value if isinstance(value, list) else []


def _check_finite(nodes: dict, targets: dict) -> None:
    """Refuse a root or `$ref` with no finite document: the least fixed point of "has one"."""
    needs = {where: _needs(node, where, targets) for where, node in nodes.items()}
    unmet = {where: len(groups) for where, groups in needs.items()}
    waiting: dict[str, list[tuple[str, int]]] = {}  # subschema -> (needing one, its group)
    for where, groups in needs.items():
        for index, group in enumerate(groups):
            for member in group:
                waiting.setdefault(member, []).append((where, index))
    met: set[tuple[str, int]] = set()
    finite = [where for where, count in unmet.items() if count == 0]
    known = set(finite)
    while finite:
        for where, index in waiting.get(finite.pop(), ()):
            if (where, index) not in met:
                met.add((where, index))
                unmet[where] -= 1
                if unmet[where] == 0 and where not in known:
                    known.add(where)
                    finite.append(where)
    for where in ["", *targets.values()]:
        if where not in known:
            raise refusal(
                "a schema with a finite document at its root and at every `$ref`",
                f"none at `#{where}` (each of its documents must hold another, or it allows none)",
            )


# A regex's tokens: an escape, a character class, a group's start, its end, a repetition count.
_TOKEN = re.compile(r"\\.|\[\^?\]?(?:\\.|[^\]\\])*\]|\((?:\?[^)(:]*:?)?|\)|\{(\d+)(?:,(\d*))?\}")


def pattern_size(regex: str, most: int = MAX_PATTERN_SIZE) -> int:
    """The length of `regex` with every counted repetition written out (`{m,n}` as n copies,
    `{m,}` as m; `*`, `+`, `?` as one), stopping once past `most`.

    >>> pattern_size("^((a{1000}){1000}){3}$") > MAX_PATTERN_SIZE
    True
    >>> pattern_size(r"^\\d{4}-\\d{2}-\\d{2}$")
    12
    """
    stack, last, position = [0], 0, 0  # sizes of the open groups; the last atom's size
    while position < len(regex):
        match = _TOKEN.match(regex, position)
        token = match.group(0) if match else regex[position]
        position += len(token)
        if token.startswith("{") and match and match.group(1) is not None:
            count = int(match.group(2) or match.group(1)) if len(token) < 12 else most + 1
            stack[-1] += last * (max(count, 1) - 1)
            last *= max(count, 1)
        elif token.startswith("("):
            stack.append(0)
            last = 0
        elif token == ")" and len(stack) > 1:
            last = stack.pop()
            stack[-1] += last
        elif token not in "*+?|":
            last = 1
            stack[-1] += 1
        if sum(stack) > most:
            return sum(stack)
    return sum(stack)


def _check_patterns(nodes: dict) -> None:
    total = 0
    for where, node in nodes.items():
        patterns = list(_dict(_dict(node).get("patternProperties")))
        if isinstance(_dict(node).get("pattern"), str):
            patterns.append(node["pattern"])
        for pattern in patterns:
            size = pattern_size(pattern)
            if size > MAX_PATTERN_SIZE:
                raise refusal(
                    f"a schema whose patterns are at most {MAX_PATTERN_SIZE:,} characters with "
                    "their counted repetitions written out",
                    f"{_shown(pattern)} at `#{where}` ({size:,} or more)",
                )
            total += size
    if total > MAX_PATTERNS_SIZE:
        raise refusal(
            f"a schema whose patterns total at most {MAX_PATTERNS_SIZE:,} characters with their "
            "counted repetitions written out",
            f"{total:,}",
        )
