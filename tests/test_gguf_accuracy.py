"""The GGUF importer's per-node accuracy levels (convert/gguf.py, `head_accuracy_level`): the
layers' MatMulNBits at one level and the LM head's at another, recorded in the manifest and the
model card, on a tiny random Q4_1 GGUF (tests/gguf_models.py)."""

import json

import numpy as np
import onnx
import pytest

from convert.bundle import full_logits, parity_session
from convert.gguf import export_gguf, main
from convert.gguf_read import read_gguf
from tests.gguf_models import write_tiny_gguf


def _levels(bundle) -> dict[str, int]:
    """MatMulNBits projection name (its output, or the offset Add's for Q4_1) -> its level."""
    graph = onnx.load(str(bundle / "model.onnx"), load_external_data=False).graph
    return {
        node.output[0].removesuffix(".nbits"): next(
            a.i for a in node.attribute if a.name == "accuracy_level"
        )
        for node in graph.node
        if node.op_type == "MatMulNBits"
    }


@pytest.fixture(scope="module")
def gguf(tmp_path_factory):
    return write_tiny_gguf(tmp_path_factory.mktemp("q4_1") / "model.gguf", "llama", "Q4_1")


@pytest.mark.parametrize("tied", [True, False])
def test_the_head_gets_its_own_accuracy_level(tmp_path, tied):
    path = write_tiny_gguf(tmp_path / "model.gguf", "llama", "Q4_1", tied=tied)
    bundle = tmp_path / "bundle"
    manifest = export_gguf(path, bundle, accuracy_level=0, head_accuracy_level=4, parity=False)
    levels = _levels(bundle)
    assert levels.pop("logits") == 4
    assert levels and set(levels.values()) == {0}  # every other projection
    quantization = manifest.export.quantization
    assert (quantization.accuracy_level, quantization.head_accuracy_level) == (0, 4)
    assert "MatMulNBits accuracy level: 0, LM head 4." in (bundle / "README.md").read_text()


def test_without_a_head_level_the_head_follows_the_layers(tmp_path, gguf):
    manifest = export_gguf(gguf, tmp_path / "bundle", accuracy_level=4, parity=False)
    assert set(_levels(tmp_path / "bundle").values()) == {4}
    assert manifest.export.quantization.head_accuracy_level == 4


def test_mixed_levels_are_level_0_up_to_the_head(tmp_path, gguf):
    """Layers at 0 and head at 4: the hidden states are level 0's, so its logits sit closer to
    level 0's than level 4 everywhere does (int8 activations in one projection, not in 31)."""
    ids = [1, 5, 9, 12, 20, 7]
    logits = {}
    for name, options in {
        "level0": dict(accuracy_level=0),
        "level4": dict(accuracy_level=4),
        "mixed": dict(accuracy_level=0, head_accuracy_level=4),
    }.items():
        export_gguf(gguf, tmp_path / name, parity=False, lora_slots=False, **options)
        session = parity_session(tmp_path / name / "model.onnx")
        logits[name] = full_logits(session, read_gguf(gguf), ids)
    mixed_error = np.abs(logits["mixed"] - logits["level0"]).max()
    assert 0 < mixed_error < np.abs(logits["level4"] - logits["level0"]).max()


def test_the_command_line_takes_the_head_level(tmp_path, gguf):
    out = tmp_path / "bundle"
    argv = [str(gguf), str(out), "--accuracy-level", "0", "--head-accuracy-level", "4"]
    assert main([*argv, "--no-parity"]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["export"]["quantization"]["head_accuracy_level"] == 4


@pytest.mark.parametrize("level", [5, -1, "4"])
def test_a_bad_head_level_is_refused(tmp_path, gguf, level):
    with pytest.raises(ValueError, match="`head_accuracy_level` must be one of 0-4 or None, got"):
        export_gguf(gguf, tmp_path / "bundle", head_accuracy_level=level, parity=False)
