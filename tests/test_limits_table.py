"""No cap is written as a number outside the limits tables: runtime/request_caps.py (the app's
`Limits`, serve's `ServeLimits` and the API's field caps) and runtime/parameters.py (the decoding
parameters' ranges). Checked by parsing the front ends' source (ui/, serve/, app.py); nothing
is imported.

A cap is an upper limit on what a request may ask or a page may offer. A *cap literal* is a
number written in one of these places (a name bound to a number at the top of the same module
counts as that number):

- the upper bound of an input check: the fourth argument (or `high=`) of `checks.integer` /
  `checks.number`, `max_chars=` of `checks.text`, and a pydantic field's `le=` / `lt=` /
  `max_length=` (serve/protocol.py's request bodies);
- a widget's upper end: `maximum=`, or the second argument of `widgets.setting_slider`;
- serve's per-replica defaults: the default of a parameter or field named `concurrency`,
  `max_ongoing` or `max_ongoing_requests`, of `args.get("concurrency" | "max_ongoing", …)`, and
  of the `--concurrency` / `--max-ongoing` flags.

Lower bounds are not caps (a slider from 1, a count from 2 columns), nor are defaults a request
can change (a slider's starting value).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FRONT_ENDS = sorted(
    [*(REPO / "ui").rglob("*.py"), *(REPO / "serve").rglob("*.py"), REPO / "app.py"]
)
CHECKS = {"integer", "number"}
BOUND_KEYWORDS = {"high", "max_chars", "le", "lt", "max_length", "maximum"}
REPLICA_NAMES = {"concurrency", "max_ongoing", "max_ongoing_requests"}
REPLICA_FLAGS = {"--concurrency", "--max-ongoing"}


def _numeric_constants(source: ast.Module) -> set[str]:
    """Names bound at the module's top to an expression of numbers alone (`MAX = 2**31 - 1`)."""
    names = set()
    for node in source.body:
        targets = node.targets if isinstance(node, ast.Assign) else []
        if isinstance(node, ast.AnnAssign) and node.value is not None:
            targets = [node.target]
        if targets and _is_number(node.value, set()):
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
    return names


def _is_number(node: ast.expr, constants: set[str]) -> bool:
    """An expression of number literals (and names bound to them) alone."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, int | float) and not isinstance(node.value, bool)
    if isinstance(node, ast.Name):
        return node.id in constants
    if isinstance(node, ast.UnaryOp):
        return _is_number(node.operand, constants)
    if isinstance(node, ast.BinOp):
        return _is_number(node.left, constants) and _is_number(node.right, constants)
    return False


def _called(node: ast.Call) -> str:
    func = node.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def cap_literals(source: str) -> list[tuple[int, str]]:
    """(line, what) for every cap literal in `source` (a module's text)."""
    tree = ast.parse(source)
    constants = _numeric_constants(tree)
    found = []

    def check(value: ast.expr | None, what: str) -> None:
        if value is not None and _is_number(value, constants):
            found.append((value.lineno, f"{what} = {ast.unparse(value)}"))

    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = _called(node)
            if name in CHECKS and len(node.args) >= 4:
                check(node.args[3], f"{name}'s upper bound")
            if name == "setting_slider" and len(node.args) >= 2:
                check(node.args[1], "setting_slider's upper end")
            for keyword in node.keywords:
                if keyword.arg in BOUND_KEYWORDS:
                    check(keyword.value, f"{name}({keyword.arg}=)")
            first = node.args[0] if node.args else None
            if isinstance(first, ast.Constant):
                if name == "get" and first.value in REPLICA_NAMES and len(node.args) == 2:
                    check(node.args[1], f"get({first.value!r})'s default")
                if name == "add_argument" and first.value in REPLICA_FLAGS:
                    for keyword in node.keywords:
                        if keyword.arg == "default":
                            check(keyword.value, f"{first.value}'s default")
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            arguments = node.args.posonlyargs + node.args.args
            defaults = dict(
                zip(arguments[len(arguments) - len(node.args.defaults) :], node.args.defaults)
            )
            defaults |= {a: d for a, d in zip(node.args.kwonlyargs, node.args.kw_defaults) if d}
            for argument, default in defaults.items():
                if argument.arg in REPLICA_NAMES:
                    check(default, f"{node.name}({argument.arg}=)")
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            if node.target.id in REPLICA_NAMES:
                check(node.value, f"field {node.target.id}")
    return sorted(found)


@pytest.mark.parametrize("path", FRONT_ENDS, ids=lambda path: str(path.relative_to(REPO)))
def test_no_cap_is_written_outside_the_tables(path):
    assert cap_literals(path.read_text(encoding="utf-8")) == []


def test_a_planted_cap_is_found():
    planted = """
MAX_TOKENS = 2**8
def tab(seed, tokens, text, concurrency=4):
    seed = checks.integer("seed", seed, -1, 2**31 - 1)
    tokens = checks.integer("tokens", tokens, 1, MAX_TOKENS)
    text = checks.text("text", text, max_chars=checks.LIMITS.max_prompt_chars)
    slider = widgets.setting_slider(1, 20, value=5)
    number = widgets.setting_number(4, minimum=1, maximum=10)
    allowed = checks.integer("n", 3, 1, checks.LIMITS.max_columns)
    return int(args.get("max_ongoing", 64))
"""
    assert [what for _, what in cap_literals(planted)] == [
        "tab(concurrency=) = 4",
        "integer's upper bound = 2 ** 31 - 1",
        "integer's upper bound = MAX_TOKENS",
        "setting_slider's upper end = 20",
        "setting_number(maximum=) = 10",
        "get('max_ongoing')'s default = 64",
    ]
