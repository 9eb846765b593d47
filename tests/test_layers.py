"""The layering of docs/DESIGN.md's package table, checked by parsing the source (nothing is
imported): no package imports one above it, no import cycle between packages or between the files
of one package, no source file over 800 lines. And the repository stands alone: no committed
source, doc or results file points to a file outside it (a machine's absolute path, a sibling
folder of the checkout), and every `docs/….md` it names exists.

Every `import` and `from … import` counts, at module level or inside a function: an import
deferred into a function is still a dependency. Imports of third-party packages are ignored.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
MAX_LINES = 800

# What each of our top-level packages (and app.py) may import of ours.
ALLOWED = {
    "runtime": set(),
    # the torch-free runtime owns the text contracts a model shares with its bundle
    # (runtime.hierarchical_text), so modeling may import runtime and nothing else of ours
    "modeling": {"runtime"},
    "study": {"runtime"},
    # the torch-free conversions (GGUF, the flagship) and bundle writing, which app, serve and
    # spaces use
    "convert": {"runtime"},
    "export": {"runtime", "modeling", "convert"},
    "train": {"export", "convert", "modeling", "study", "runtime"},
    "ui": {"runtime", "study"},
    "serve": {"runtime", "convert"},
    "bench": {"runtime", "modeling", "convert", "export", "train", "study", "serve"},
    "app": {"ui", "runtime", "convert"},
    "spaces": {"ui", "runtime", "convert"},
    # the `scriptorium` command dispatches to every subcommand's module
    "scriptorium": {
        "runtime",
        "modeling",
        "convert",
        "export",
        "train",
        "study",
        "ui",
        "serve",
        "bench",
    },
}
PACKAGES = tuple(ALLOWED)


def source_files() -> dict[str, Path]:
    """Dotted module name → file, for every .py file of our packages and app.py."""
    files = {"app": REPO / "app.py"}
    for package in PACKAGES:
        root = REPO / package
        if not root.is_dir():
            continue
        for path in sorted(root.rglob("*.py")):
            parts = path.relative_to(REPO).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            files[".".join(parts)] = path
    return files


FILES = source_files()


def imported_modules(module: str, path: Path) -> set[str]:
    """Our modules that `module` imports (absolute names; `from a import b` gives a.b when that
    is a module of ours, else a)."""
    is_package = path.name == "__init__.py"
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = module.split(".")
                base = parts if is_package else parts[:-1]
                base = base[: len(base) - (node.level - 1)]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module
            names = [f"{prefix}.{alias.name}" for alias in node.names]
            names = [name if name in FILES else prefix for name in names]
        else:
            continue
        for name in names:
            # the longest prefix of `name` that is one of our modules
            parts = name.split(".")
            for end in range(len(parts), 0, -1):
                candidate = ".".join(parts[:end])
                if candidate in FILES:
                    if candidate != module:
                        found.add(candidate)
                    break
    return found


IMPORTS = {module: imported_modules(module, path) for module, path in FILES.items()}


def top(module: str) -> str:
    return module.split(".")[0]


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of `graph` as a path that returns to its start, or None."""
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_the_parser_sees_every_kind_of_import():
    assert "convert.manifest" in IMPORTS["export.ngram_index"]  # from convert.manifest import …
    assert "modeling.hierarchical" in IMPORTS["export.hierarchical"]  # from modeling import x
    assert "export.exporter" in IMPORTS["export.fill_mask"]  # from .exporter import …
    assert "runtime" in IMPORTS["app"]  # import runtime
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


@pytest.mark.parametrize("package", PACKAGES)
def test_packages_import_only_the_layers_below_them(package):
    upward = sorted(
        f"{module} imports {imported}"
        for module, imports in IMPORTS.items()
        if top(module) == package
        for imported in imports
        if top(imported) != package and top(imported) not in ALLOWED[package]
    )
    assert not upward, f"{package} may import only {sorted(ALLOWED[package])}: {upward}"


def test_no_import_cycle_between_packages():
    graph: dict[str, set[str]] = {package: set() for package in PACKAGES}
    for module, imports in IMPORTS.items():
        graph[top(module)] |= {top(imported) for imported in imports} - {top(module)}
    assert find_cycle(graph) is None


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_cycle_between_the_files_of_a_package(package):
    graph = {
        module: {imported for imported in imports if top(imported) == package}
        for module, imports in IMPORTS.items()
        if top(module) == package
    }
    cycle = find_cycle(graph)
    assert cycle is None, f"import cycle: {' -> '.join(cycle)}"


def test_no_source_file_is_over_800_lines():
    long = {
        str(path.relative_to(REPO)): count
        for path in FILES.values()
        if (count := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert not long, f"split these by job (at most {MAX_LINES} lines): {long}"


# Committed files a reader follows references in: sources, docs, results, manifests, settings.
TEXT_SUFFIXES = {".py", ".md", ".json", ".jsonl", ".toml", ".txt", ".yaml", ".yml", ".cfg"}
# A path on one machine (a top-level work or home folder) or into a sibling folder of the
# checkout; a "/" inside a longer path or a URL does not start one. Spelled in parts so that this
# file does not itself name such a path.
SIBLING, MACHINE_ROOTS = r"\.\./" + "sha" + r"red\b", "|".join(["wo" + "rk", "ro" + "ot"])
OUTSIDE = re.compile(SIBLING + r"|(?<![\w.:/~-])/(?:" + MACHINE_ROOTS + ")/")
BARE_DESIGN = re.compile(r"(?<!docs/)\bDESIGN\.md")  # the design document is docs/DESIGN.md
DOC = re.compile(r"\bdocs/[\w./-]+?\.md\b")


def committed_text_files() -> list[Path]:
    """The text files git tracks (skips the test outside a git checkout)."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True, text=True
        ).stdout.split("\0")
    except (OSError, subprocess.CalledProcessError) as error:
        pytest.skip(f"not a git checkout: {error}")
    paths = (REPO / name for name in listed if name)
    return [path for path in paths if path.suffix in TEXT_SUFFIXES and path.is_file()]


def test_the_reference_checks_see_what_they_look_for():
    assert OUTSIDE.search("see " + "../" + "sha" + "red/SEEDS.md")
    assert OUTSIDE.search('"bundle": "' + "/wo" + 'rk/main/models/bible-lm/fp32"')
    assert OUTSIDE.search("`" + "/ro" + "ot/.cache/scriptorium/gguf`")
    assert not OUTSIDE.search("https://example.org/wo" + "rk/x, ~/.cache/scriptorium, /tmp/rw")
    assert BARE_DESIGN.search("(" + "DESIGN" + '.md, "Layers")')
    assert not BARE_DESIGN.search("(docs/" + "DESIGN" + '.md, "Layers")')
    assert DOC.findall("docs/bundle.md's table; docs/APP.md.") == ["docs/bundle.md", "docs/APP.md"]


def test_no_committed_file_refers_to_a_file_outside_the_repository():
    found = []
    for path in committed_text_files():
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            where = f"{path.relative_to(REPO)}:{number}"
            if match := OUTSIDE.search(line):
                found.append(f"{where}: {match.group()!r} (a path outside the repository)")
            if BARE_DESIGN.search(line):
                found.append(f"{where}: the design document without its folder (docs/)")
            for doc in DOC.findall(line):
                if not (REPO / doc).is_file():
                    found.append(f"{where}: {doc} does not exist")
    assert not found, "\n".join(found)


SERVE_PROTOCOL = "serve.protocol"  # the one module of serve/ that declares bodies (pydantic)
RANGE_ENDS = {0, 1}  # what a range means (>= 0, in (0, 1], non-empty), not a cap
BOUND_KEYWORDS = {"ge", "gt", "le", "lt", "min_length", "max_length"}


def test_serve_declares_bodies_in_its_protocol_module_and_takes_caps_from_request_caps():
    """Both serve routes' bodies are pydantic models in serve/protocol.py only, and every cap
    serve/ applies is runtime/request_caps.py's: no serve module names a `MAX_…` constant or
    bounds a field with a number of its own."""
    protocol = ast.parse(FILES[SERVE_PROTOCOL].read_text())
    models = {"BaseModel"}
    for node in protocol.body:  # a class is a model when a base is (bases come first)
        if isinstance(node, ast.ClassDef):
            if {ast.unparse(base).split(".")[-1] for base in node.bases} & models:
                models.add(node.name)
    found = []
    for module, path in FILES.items():
        if top(module) != "serve":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and module != SERVE_PROTOCOL:
                if {ast.unparse(base).split(".")[-1] for base in node.bases} & models:
                    found.append(f"{module}: body {node.name} outside {SERVE_PROTOCOL}")
            if isinstance(node, ast.Assign | ast.AnnAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    if isinstance(target, ast.Name) and target.id.startswith("MAX_"):
                        found.append(f"{module}: cap {target.id} outside runtime/request_caps.py")
            if isinstance(node, ast.keyword) and node.arg in BOUND_KEYWORDS:
                if isinstance(node.value, ast.Constant) and node.value.value not in RANGE_ENDS:
                    found.append(f"{module}: {node.arg}={node.value.value} is a cap of its own")
                if isinstance(node.value, ast.BinOp | ast.UnaryOp):
                    found.append(f"{module}: {node.arg}={ast.unparse(node.value)} is a cap")
    assert len(models) > 5 and not found, "\n".join(found)


MANIFEST_MODULE = "runtime.manifest"  # the one reader and writer of manifest.json
# a manifest read as a dict: `manifest[…]`, `manifest.get(…)`, `registry.manifest(name)[…]`
MANIFEST_AS_DICT = re.compile(r"\bmanifest(?:\([^()]*\))?(?:\[|\.get\()")
MANIFEST_JSON_LOAD = re.compile(r"json\.loads?\([^\n]*manifest")


def test_the_manifest_is_read_in_one_place():
    """manifest.json is parsed only by runtime/manifest.py (`Manifest.read`), and the modules
    read its typed fields, never `manifest[…]` or `manifest.get(…)`."""
    found = []
    for module, path in FILES.items():
        if module == MANIFEST_MODULE:
            continue
        text = path.read_text(encoding="utf-8")
        for pattern in (MANIFEST_JSON_LOAD, MANIFEST_AS_DICT):
            found += [f"{module}: {match.group()}" for match in pattern.finditer(text)]
    assert not found, found


# A decoding parameter that only reshapes the scores is named in its declaration
# (runtime/parameters.py), its GenerationConfig field (runtime/config.py) and where its operation
# runs (runtime/processors.py, runtime/sampling.py, wired in runtime/search.py; a model that
# cannot apply it refuses it by name): every front end derives it from the declaration. bench/ is
# left out, since a benchmark's settings are its experiment. Not counted: the parameters whose
# meaning many modules act on (token counts, beams, samples, the seed, and temperature and
# do_sample, which pick the mode), and top_p / top_k, whose names the app also uses as values
# (Chat's defaults, the decoding study's sweeps, the Masked LM tab's own top-k).
SCORE_PARAMETERS = (
    "repetition_penalty",
    "no_repeat_ngram_size",
    "min_p",
    "typical_p",
    "length_penalty",
    "early_stopping",
)
MOST_FILES_NAMING_A_PARAMETER = 5  # issue 35's target


@pytest.mark.parametrize("name", SCORE_PARAMETERS)
def test_few_files_name_a_decoding_parameter(name):
    word = re.compile(rf"\b{name}\b")
    naming = [
        module
        for module, path in FILES.items()
        if not module.startswith("bench") and word.search(path.read_text(encoding="utf-8"))
    ]
    assert len(naming) <= MOST_FILES_NAMING_A_PARAMETER, naming


def test_a_parameter_declared_once_reaches_the_app_and_both_api_routes():
    """Adding a decoding parameter is one declaration: declared (here before the front ends are
    imported, in a child process), it is an input of the app's decoding endpoints and a checked
    field of both API request bodies, in the OpenAPI schema, with the declared range."""
    code = """
import runtime.parameters as P
new = P.Parameter(
    "epsilon_cutoff", float, 0.0, "drop tokens below epsilon; 0.0 = off",
    valid=P.Range(0.0, 1.0), request_field="epsilon_cutoff",
    app=P.InApp("Epsilon cutoff", row=P.PENALTY_ROW, step=0.01),
)
P.PARAMETERS += (new,)
P.NAMED[new.name] = new
from serve import protocol
from ui import checks
assert "epsilon_cutoff" in checks.decoding_names(), checks.decoding_names()
chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
completion = {"model": "m", "prompt": "hi"}
for body, request in ((protocol.ChatBody, chat), (protocol.CompletionBody, completion)):
    field = body.model_json_schema()["properties"]["epsilon_cutoff"]
    assert "a number in [0, 1]" in str(field) and "'maximum': 1.0" in str(field), field
    assert protocol.parse_body(body, {**request, "epsilon_cutoff": 0.5}).epsilon_cutoff == 0.5
print("reached")
"""
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and done.stdout.strip() == "reached", done.stderr[-2000:]


# The decoding parameters serve/ gives a meaning of its own (the token limit per route,
# temperature 0 as greedy, the sequence cap on `n` × `num_beams`, the shape of
# `response_format`); it passes the others through.
SERVE_OWN_PARAMETERS = {
    "max_new_tokens",
    "max_tokens",
    "temperature",
    "do_sample",
    "num_return_sequences",
    "n",
    "num_beams",
    # OpenAI's `response_format` object (its `json_schema` member), whose shape serve checks
    "response_format",
    "json_schema",
}


def test_serve_names_no_decoding_parameter_it_only_passes_through():
    """serve/ takes the decoding parameters it passes to the runtime from runtime/parameters.py
    (their request fields, types and ranges), so no serve source names one of them."""
    declaration = ast.parse((REPO / "runtime" / "parameters.py").read_text(encoding="utf-8"))
    names = set()
    for node in ast.walk(declaration):
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "Parameter" and node.args:
            names.add(node.args[0].value)
        if isinstance(node, ast.keyword) and node.arg == "request_field":
            names.add(node.value.value)
    passed = names - SERVE_OWN_PARAMETERS - {None}
    naming = [
        f"{module}: {name}"
        for module, path in FILES.items()
        if top(module) == "serve"
        for name in sorted(passed)
        if re.search(rf"\b{name}\b", path.read_text(encoding="utf-8"))
    ]
    assert len(passed) >= 10 and not naming, naming


# What the app, serve and a Space import must load no torch: each module of convert/ (the
# flagship, the GGUF importer, the bundle writing), app.py and every module of ours it imports
# (deferred ones included), and serve's command line with its imports.
NO_TORCH_MODULES = sorted(
    {module for module in FILES if top(module) == "convert"}
    | {"app", "serve.cli"}
    | IMPORTS["app"]
    | IMPORTS["serve.cli"]
)
TORCH_PACKAGES = ("torch", "transformers", "optimum")


def test_convert_the_app_and_serve_import_no_torch():
    code = f"""
import importlib, sys
for module in {NO_TORCH_MODULES!r}:
    importlib.import_module(module)
print(sorted({{name.split(".")[0] for name in sys.modules}} & {set(TORCH_PACKAGES)!r}))
"""
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert len(NO_TORCH_MODULES) > 10 and done.stdout.strip() == "[]", done.stdout
