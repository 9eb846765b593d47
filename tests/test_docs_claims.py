"""docs/DESIGN.md's and docs/LAYOUT.md's concrete claims, checked against the code, so that the
map a newcomer reads cannot drift from the tree: the package table and the stack drawing against
tests/test_layers.py's ALLOWED and the packages on disk; every file, folder, module, function and
test they name; the "only place" claims (sessions, chat templates); the command-line wiring
(`scriptorium …`, `scriptorium bench …`, `python -m …` in every doc, every benchmark module wired
in bench/cli.py); and the runtime's list of third-party imports (docs/DESIGN.md, docs/STYLE.md,
runtime/__init__.py) against runtime/'s actual imports.

Everything is read with `ast` and regular expressions; nothing of ours is imported but the two
command tables (scriptorium/cli.py's and bench/cli.py's, plain dicts).
"""

from __future__ import annotations

import ast
import functools
import re
import sys

import pytest

from tests.test_layers import ALLOWED, FILES, IMPORTS, REPO, top

DOCS = REPO / "docs"
DESIGN = (REPO / "docs/DESIGN.md").read_text(encoding="utf-8")
LAYOUT = (REPO / "docs/LAYOUT.md").read_text(encoding="utf-8")
MAPS = {"docs/DESIGN.md": DESIGN, "docs/LAYOUT.md": LAYOUT}
EVERY_DOC = {
    str(path.relative_to(REPO)): path.read_text(encoding="utf-8")
    for path in [REPO / "README.md", *sorted(DOCS.glob("*.md"))]
}
OURS = tuple(ALLOWED) + ("tests",)


@functools.cache
def tree_of(module: str) -> ast.Module:
    """Module `module` of ours, parsed once for every test here."""
    return ast.parse(FILES[module].read_text(encoding="utf-8"))


def package_name(cell: str) -> str:
    """`runtime/` → runtime, `app.py` → app."""
    return cell.strip().strip("`").removesuffix("/").removesuffix(".py")


def allowed_list(text: str, package: str) -> set[str]:
    """A "may import" entry as a set: "nothing", "every package …", or names by commas."""
    text = text.strip()
    if text == "nothing":
        return set()
    if text.startswith(("every package", "any package")):
        return set(ALLOWED) - {package, "app", "spaces"}
    return {package_name(name) for name in text.split(",")}


def design_table() -> dict[str, set[str]]:
    """docs/DESIGN.md's Layers table: {package: what it may import}."""
    rows = re.search(
        r"\| package \| holds \| may import \(ours\) \|\n\|[-|]+\|\n((?:\|.*\n)+)", DESIGN
    )
    assert rows, "docs/DESIGN.md has no Layers table"
    table = {}
    for line in rows.group(1).splitlines():
        name, _, may = (cell.strip() for cell in line.strip("|").split(" | "))
        table[package_name(name)] = allowed_list(may, package_name(name))
    return table


def layout_stack() -> dict[str, set[str]]:
    """docs/LAYOUT.md's stack drawing: {package: what its arrow says it imports}."""
    block = re.search(r"```\n(app\.py.*?)```", LAYOUT, re.S)
    assert block, "docs/LAYOUT.md has no stack drawing"
    stack = {}
    for line in block.group(1).splitlines():
        name = package_name(line.split()[0])
        stack[name] = allowed_list(line.rsplit("->", 1)[1], name) if "->" in line else set()
    return stack


def packages_on_disk() -> set[str]:
    """Every top-level folder of the repository that holds Python source, and app.py."""
    folders = {
        path.parent.relative_to(REPO).parts[0]
        for path in REPO.glob("*/*.py")
        if not path.parent.name.startswith(".")
    }
    return (folders - {"tests"}) | {"app"}


def test_the_design_table_and_the_layout_stack_are_tests_layers_allowed():
    assert packages_on_disk() == set(ALLOWED)
    assert design_table() == ALLOWED
    assert layout_stack() == ALLOWED


# A path of ours: a package folder, then names; `ui/<name>_tab.py` (a pattern) does not match.
PATH = re.compile(r"(?<![\w./-])((?:" + "|".join(OURS) + r")/[\w./-]*\w|app\.py)(?:::(\w+))?")
# A dotted name of ours: `runtime.manifest.Manifest.read`, `ui.checks.queue_settings`.
DOTTED = re.compile(r"(?<![\w./-])((?:" + "|".join(ALLOWED) + r")(?:\.[A-Za-z_]\w*)+)")


def test_the_path_patterns_see_what_they_look_for():
    assert PATH.findall("`runtime/sessions.py`: the only place; see bench/results/*.json") == [
        ("runtime/sessions.py", ""),
        ("bench/results", ""),
    ]
    assert PATH.findall("`tests/test_x.py::test_y`, a `ui/<name>_tab.py`") == [
        ("tests/test_x.py", "test_y")
    ]
    assert DOTTED.findall("`runtime.load`, gen.runtime.x, in runtime. Then") == ["runtime.load"]


def defined_names(tree: ast.Module | ast.ClassDef) -> dict[str, ast.AST]:
    """The names a module or class body defines: functions, classes, assignments, imports and a
    module's `__all__` (names loaded on first use)."""
    names: dict[str, ast.AST] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names[node.name] = node
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for name in ast.walk(target):
                    if isinstance(name, ast.Name):
                        names[name.id] = node
            if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
                names.update({value: node for value in ast.literal_eval(node.value)})
        elif isinstance(node, ast.Import | ast.ImportFrom):
            for alias in node.names:
                names[(alias.asname or alias.name).split(".")[0]] = node
    return names


def resolves(dotted: str) -> bool:
    """Whether `dotted` is a module of ours, or a name one defines (and, on a class, its
    attribute)."""
    parts = dotted.split(".")
    for end in range(len(parts), 0, -1):
        module = ".".join(parts[:end])
        if module in FILES:
            break
    else:
        return False
    rest = parts[end:]
    if not rest:
        return True
    names = defined_names(tree_of(module))
    if rest[0] not in names:
        return False
    found = names[rest[0]]
    if len(rest) > 1 and isinstance(found, ast.ClassDef):
        return rest[1] in defined_names(found)
    return True


@pytest.mark.parametrize("doc", MAPS)
def test_every_file_module_and_name_the_maps_give_exists(doc):
    missing = []
    for path, test in PATH.findall(MAPS[doc]):
        target = REPO / path
        if not target.exists():
            missing.append(f"{path} does not exist")
        elif test and test not in defined_names(ast.parse(target.read_text(encoding="utf-8"))):
            missing.append(f"{path} has no {test}")
    missing += [
        f"{name} does not resolve"
        for name in DOTTED.findall(MAPS[doc])
        if not name.endswith(".py") and not resolves(name)
    ]
    assert not missing, f"{doc} names what the code does not have:\n" + "\n".join(missing)


def calls_named(name: str) -> list[str]:
    """Every module of ours (and the line) that calls something named `name`."""
    found = []
    for module in FILES:
        for node in ast.walk(tree_of(module)):
            if isinstance(node, ast.Call):
                called = node.func.attr if isinstance(node.func, ast.Attribute) else None
                called = called or (node.func.id if isinstance(node.func, ast.Name) else None)
                if called == name:
                    found.append(f"{module}:{node.lineno}")
    return found


# The exceptions docs/DESIGN.md names to "sessions are made only in runtime/sessions.py": none.
SESSION_EXCEPTIONS: set[str] = set()


def test_sessions_are_made_only_in_runtime_sessions():
    assert "Sessions themselves are made only in `runtime/sessions.py`" in DESIGN
    assert "with no exception" in " ".join(DESIGN.split()) and not SESSION_EXCEPTIONS
    assert "`runtime/sessions.py`: the only place" in LAYOUT
    made = [
        where
        for where in calls_named("InferenceSession")
        if not where.startswith("runtime.sessions:")
    ]
    assert not made, f"onnxruntime sessions made outside runtime/sessions.py: {made}"


def third_party(module: str) -> set[str]:
    """The top-level third-party packages `module` imports (anywhere in it)."""
    tree = tree_of(module)
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names.add(node.module.split(".")[0])
    return {name for name in names if name not in sys.stdlib_module_names and name not in ALLOWED}


def test_chat_templates_are_compiled_only_in_the_sandbox():
    """docs/DESIGN.md: templates are compiled and rendered only in runtime/template_sandbox.py,
    which imports only the standard library and jinja2."""
    assert "`runtime/template_sandbox.py`, which imports only\nthe standard library and jinja2" in (
        DESIGN
    )
    sandbox = "runtime.template_sandbox"
    assert third_party(sandbox) == {"jinja2"}
    assert not IMPORTS[sandbox], f"{sandbox} imports ours: {IMPORTS[sandbox]}"
    importing = sorted(module for module in FILES if "jinja2" in third_party(module))
    assert importing == [sandbox]


# "runtime/ imports only numpy, onnxruntime, … and the standard library", as each place says it.
RUNTIME_LIST = re.compile(r"runtime/ imports only (.*?) and the standard library")


def listed_packages(text: str) -> set[str]:
    """The package names of a "runtime/ imports only …" sentence (its asides in parentheses
    dropped)."""
    match = RUNTIME_LIST.search(" ".join(text.split()))
    assert match, "no 'runtime/ imports only … and the standard library' sentence"
    listed = match.group(1)
    while "(" in listed:
        listed = re.sub(r"\([^()]*\)", "", listed)
    return {name.strip() for name in listed.split(",")}


def test_the_runtime_list_parser_sees_every_name():
    text = "runtime/ imports only a, b (x, `y (z)`), c\n(w) and the standard library"
    assert listed_packages(text) == {"a", "b", "c"}


@pytest.mark.parametrize("where", ["docs/DESIGN.md", "docs/STYLE.md", "runtime/__init__.py"])
def test_the_runtime_third_party_list_is_what_runtime_imports(where):
    imported = set().union(*(third_party(m) for m in FILES if top(m) == "runtime"))
    assert imported >= {"numpy", "onnxruntime", "tokenizers"}
    assert listed_packages((REPO / where).read_text(encoding="utf-8")) == imported


def command_table(module: str, name: str) -> dict:
    """A module-level dict literal of ours (a command table), read without importing."""
    for node in tree_of(module).body:
        if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == name:
            return ast.literal_eval(node.value)
    raise AssertionError(f"{module} has no {name}")


COMMANDS = command_table("scriptorium.cli", "COMMANDS")
BENCHMARKS = command_table("bench.cli", "BENCHMARKS")


def has_main(module: str) -> bool:
    """Whether `module` defines `main(argv: list[str] | None = None) -> int`."""
    main = defined_names(tree_of(module)).get("main")
    return isinstance(main, ast.FunctionDef) and [a.arg for a in main.args.args] == ["argv"]


def test_every_scriptorium_command_the_docs_name_is_wired():
    named = set()
    for text in EVERY_DOC.values():
        for words in re.findall(r"`scriptorium ((?:[a-z-]+\|)*[a-z-]+)", text):
            named |= set(words.split("|"))
    assert named and named <= set(COMMANDS), named - set(COMMANDS)
    assert all(has_main(module) for module, _ in COMMANDS.values()), COMMANDS


def test_every_benchmark_the_docs_name_is_wired_and_every_benchmark_module_is():
    named = set()
    for text in EVERY_DOC.values():
        named |= set(re.findall(r"scriptorium bench ([a-z][a-z0-9-]*)", text))
    assert named <= set(BENCHMARKS) | {"all"}, named - set(BENCHMARKS)
    # docs/LAYOUT.md: "a `bench/<name>.py` with `main(argv)`, wired in `bench/cli.py`"
    assert "a `bench/<name>.py` with `main(argv)`, wired in `bench/cli.py`" in LAYOUT
    with_main = {m for m in FILES if top(m) == "bench" and m != "bench.cli" and has_main(m)}
    assert with_main == set(BENCHMARKS.values()), with_main ^ set(BENCHMARKS.values())


def test_every_python_dash_m_of_ours_the_docs_give_runs_a_module():
    missing = []
    for doc, text in EVERY_DOC.items():
        for module in re.findall(r"python -m ([a-z_][\w.]*\w)", text):
            if top(module) not in OURS:
                continue
            path = REPO / module.replace(".", "/")
            if not (path.with_suffix(".py").is_file() or (path / "__main__.py").is_file()):
                missing.append(f"{doc}: python -m {module}")
    assert not missing, missing


def test_the_scriptorium_command_imports_a_subcommand_only_when_it_runs():
    """docs/LAYOUT.md: `scriptorium/cli.py` imports a subcommand's module only when it runs."""
    assert "`scriptorium/cli.py` imports a subcommand's module only when it runs" in " ".join(
        LAYOUT.split()
    )
    tree = tree_of("scriptorium.cli")
    imported = {
        alias.name.split(".")[0]
        for node in tree.body
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    }
    assert imported <= {"annotations", "importlib", "sys"}, imported
