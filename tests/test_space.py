"""spaces/: the Space front matter and requirements, `spaces/build.py` assembling a deployable
folder, and (marked slow) that folder installed into a fresh venv from its requirements.txt and
started with `python app.py`, answering a gradio_client request — without torch installed."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import time
import urllib.request
from importlib.metadata import requires, version
from pathlib import Path

import pytest

from runtime.bundle import read_manifest
from tests.app_fixtures import free_port, models_tree

__all__ = ["models_tree"]  # a session fixture, used by name
REPO = Path(__file__).resolve().parents[1]
FORBIDDEN = ("torch", "transformers", "optimum")
# Cut from the Space to shrink its install (docs/SPACE.md): the app draws Gradio's native plots.
LEFT_OUT = ("matplotlib",)


def requirement_names() -> list[str]:
    return [
        line.split("==")[0].strip().lower()
        for line in (REPO / "spaces" / "requirements.txt").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]


def third_party_imports(root: Path) -> set[str]:
    """Top-level modules that the Python files under `root` import (at any depth, lazy imports
    included), less the standard library and `root`'s own modules and packages."""
    own = {path.stem for path in root.iterdir() if path.is_dir() or path.suffix == ".py"}
    modules = set()
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                modules |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                modules.add(node.module.split(".")[0])
    return modules - set(sys.stdlib_module_names) - own


def front_matter(readme: Path) -> dict[str, str]:
    lines = readme.read_text().splitlines()
    assert lines[0] == "---", "README.md must start with the Space front matter"
    end = lines.index("---", 1)
    pairs = (line.split(":", 1) for line in lines[1:end] if ":" in line)
    return {key.strip(): value.strip().strip('"') for key, value in pairs}


def test_front_matter_and_requirements():
    meta = front_matter(REPO / "spaces" / "README.md")
    pinned = "gradio==" + meta["sdk_version"]
    assert meta["sdk"] == "gradio" and meta["sdk_version"] == version("gradio") == "6.17.3"
    assert f'"{pinned}"' in (REPO / "pyproject.toml").read_text()  # the Gradio we pin
    assert meta["app_file"] == "app.py" and meta["python_version"] == "3.11"
    assert meta["suggested_hardware"] == "cpu-basic"
    assert 0 < len(meta["short_description"]) <= 60  # the Hub's limit
    requirements = requirement_names()
    assert "gradio" in requirements and "onnxruntime" in requirements
    assert not set(requirements) & set(FORBIDDEN + LEFT_OUT)


@pytest.fixture(scope="module")
def space(models_tree, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("space") / "scriptorium"
    subprocess.run(
        [sys.executable, str(REPO / "spaces" / "build.py"), str(out), "--models", str(models_tree)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return out


def test_build_assembles_a_deployable_folder(space, models_tree):
    for name in ("app.py", "README.md", "requirements.txt", ".gitattributes"):
        assert (space / name).is_file()
    assert (space / "ui" / "generate_tab.py").is_file()
    assert (space / "runtime" / "generator.py").is_file()
    # the Models tab's benchmark summary, not bench/results (the app reads only its own file)
    assert (space / "ui" / "benchmarks.json").is_file() and not (space / "bench").exists()
    assert not list(space.rglob("__pycache__")) and not (space / "tests").exists()
    bundles = sorted(p.parent.relative_to(space / "models") for p in space.rglob("manifest.json"))
    assert [str(b) for b in bundles] == [
        "tiny-lm/fp32",
        "tiny-lm/int8",
        "tiny-rewriter/fp32",
        "tiny-translator/fp32",
    ]
    for bundle in bundles:
        read_manifest(space / "models" / bundle)  # every checksum still matches
    assert "*.onnx filter=lfs" in (space / ".gitattributes").read_text()
    code = "\n".join(p.read_text() for p in space.rglob("*.py"))
    assert "import torch" not in code and "import transformers" not in code


def test_the_space_code_imports_only_its_requirements_and_their_dependencies(space):
    installed = set(requirement_names())
    for name in requirement_names():
        for requirement in requires(name) or []:
            if "extra ==" not in requirement:
                installed.add(re.split(r"[ <>=~!;\[]", requirement, maxsplit=1)[0].lower())
    installed |= {name.replace("-", "_") for name in installed}  # huggingface-hub: huggingface_hub
    imported = third_party_imports(space)
    assert {"gradio", "pandas", "numpy", "onnxruntime"} <= imported  # the scan sees imports
    assert imported <= installed, imported - installed
    assert not imported & set(LEFT_OUT + FORBIDDEN)


def test_build_can_keep_one_precision_and_refuses_to_overwrite(models_tree, tmp_path):
    out = tmp_path / "int8-only"
    build = [
        sys.executable,
        str(REPO / "spaces" / "build.py"),
        str(out),
        "--models",
        str(models_tree),
        "--models",
        str(REPO / "models" / "word2vec"),  # a family with no int8 bundle is kept whole
        "--precision",
        "int8",
    ]
    subprocess.run(build, check=True, capture_output=True, timeout=300)
    shipped = sorted(p.parent.relative_to(out / "models") for p in out.rglob("manifest.json"))
    assert [str(p) for p in shipped] == [
        "cbow",
        "skipgram",
        "tiny-lm/int8",  # its fp32 sibling is dropped
        "tiny-rewriter/fp32",  # these families have no int8 bundle
        "tiny-translator/fp32",
    ]
    again = subprocess.run(build, capture_output=True, text=True, timeout=300)
    assert again.returncode != 0 and "not empty" in again.stderr


@pytest.mark.slow
def test_space_installs_in_a_fresh_venv_and_answers(space, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    install = subprocess.run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "-q",
            "--no-compile",
            "-r",
            str(space / "requirements.txt"),
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert install.returncode == 0, install.stderr[-3000:]
    for absent in ("torch", *LEFT_OUT):  # the Space runs without them
        found = subprocess.run(
            [str(python), "-c", f"import {absent}"], capture_output=True, timeout=120
        )
        assert found.returncode != 0, absent
    charts = subprocess.run(  # the charts and BLEU work with the Space's packages alone
        [
            str(python),
            "-c",
            "from ui import metrics, plots; "
            "row = dict(sweep='top-k', label='k = 0', bleu=1.0, self_bleu=2.0); "
            "print(len(plots.decoding_study([row]).value['data']), "
            "round(metrics.self_bleu(['a b c d', 'a b c e']), 1))",
        ],
        cwd=space,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert charts.stdout.split() == ["2", "59.5"], charts.stderr[-3000:]

    port = free_port()
    env = {**os.environ, "GRADIO_ANALYTICS_ENABLED": "False", "PYTHONPATH": ""}
    log = open(tmp_path / "app.log", "w")  # noqa: SIM115 (closed below, after the process)
    process = subprocess.Popen(
        [str(python), "app.py", "--port", str(port)],
        cwd=space,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        url = f"http://127.0.0.1:{port}/"
        deadline = time.monotonic() + 180
        while True:
            assert process.poll() is None, (tmp_path / "app.log").read_text()[-3000:]
            try:
                urllib.request.urlopen(url, timeout=5)
                break
            except OSError:
                assert time.monotonic() < deadline, "the app did not start"
                time.sleep(0.5)
        from gradio_client import Client

        client = Client(url, verbose=False)
        text, _, stats = client.predict(
            model="tiny-lm (int8)",
            prompt="In the beginning",
            max_new_tokens=8,
            seed=0,
            api_name="/generate",
        )
        assert text and "tokens" in stats
        translation = client.predict(
            model="tiny-translator (fp32)", text="Hello", max_new_tokens=8, api_name="/translate"
        )
        assert isinstance(translation, str)
    finally:
        process.terminate()
        process.wait(timeout=60)
        log.close()
