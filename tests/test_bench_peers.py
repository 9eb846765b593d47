"""The harness of the peers in their own virtual environment (bench/venv_peers.py, bench/
peer_batch.py), with no peer installed: the child-process protocol (run here with this very
interpreter standing in for the peers' one, serving `Echo` from this module), a missing
environment skipped with its reason, and the batch comparison on given arrays.

`python -m tests.test_bench_peers MODEL_DIR THREADS SCRATCH` serves `Echo`, as
`python -m bench.ort_genai_peer …` serves onnxruntime-genai."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from bench import llm, peer_batch, venv_peers


class Echo:
    """An engine whose answers are functions of its requests, to check what crosses the pipe."""

    def __init__(self, model_dir: Path, threads: int):
        self.model_dir, self.threads = model_dir, threads

    def generate(self, ids: list[int], new_tokens: int) -> list[int]:
        print("noise on stdout must not break a reply")
        return [ids[-1] + step for step in range(new_tokens)]

    def logits(self, ids: list[int]) -> np.ndarray:
        return np.arange(len(ids) * 3, dtype=np.float32).reshape(len(ids), 3)  # (T, V)

    def versions(self) -> dict:
        return {"model_dir": self.model_dir.name, "threads": str(self.threads)}


@pytest.fixture
def venv(tmp_path):
    """A folder laid out as a virtual environment whose python is this interpreter."""
    (tmp_path / "venv" / "bin").mkdir(parents=True)
    (tmp_path / "venv" / "bin" / "python").symlink_to(sys.executable)
    return tmp_path / "venv"


def test_a_child_answers_values_arrays_and_errors(venv, tmp_path):
    child = venv_peers.PeerProcess(venv, "tests.test_bench_peers", tmp_path / "model", 3)
    try:
        assert child.call("versions") == {"model_dir": "model", "threads": "3"}
        assert child.call("generate", ids=[5, 7], new_tokens=3) == [7, 8, 9]
        logits = child.call("logits", ids=[1, 2])
        assert logits.dtype == np.float32 and logits.tolist() == [[0, 1, 2], [3, 4, 5]]
        assert not list(Path(child.scratch.name).iterdir())  # the array's file is removed
        with pytest.raises(RuntimeError, match="AttributeError"):
            child.call("batch", prompts=[[1]], new_tokens=2)
        assert child.call("generate", ids=[1], new_tokens=1) == [1]  # still serving
    finally:
        child.close()
    assert child.child.returncode == 0


def test_a_missing_environment_skips_the_peer_with_its_reason(tmp_path):
    for engine in llm.VENV_PEERS:
        assert engine in llm.ENGINES
        reason = llm.unavailable_peer(engine, tmp_path / "x.gguf", 2, tmp_path / "no-venv")
        assert reason and engine in reason and str(tmp_path / "no-venv") in reason


def test_a_module_the_environment_cannot_import_is_named(venv):
    reason = venv_peers.missing(venv, "no_such_module_here", "openvino")
    assert reason.startswith(f"openvino cannot be imported in {venv}")
    assert "no_such_module_here" in reason
    assert venv_peers.missing(venv, "json", "openvino") is None


@pytest.mark.parametrize(
    "row, identical, first, gap",
    [(0, True, None, 0.0), (1, False, 1, 2.5)],
)
def test_batch_comparison(row, identical, first, gap):
    logits = np.zeros((2, 3, 4), dtype=np.float32)  # (B, new_tokens, V)
    logits[1, 2, 0] = 2.5
    together = {"tokens": [[4, 5, 6], [4, 9, 6]], "logits": logits}
    alone = {"tokens": [[4, 5, 6]], "logits": np.zeros((1, 3, 4), dtype=np.float32)}
    assert peer_batch.compare(alone, together, row) == {
        "tokens_identical": identical,
        "first_difference": first,
        "max_abs_logit_diff": gap,
    }


def test_batch_comparison_without_logits():
    together = {"tokens": [[1, 2], [3, 4]], "logits": None}
    alone = {"tokens": [[3, 5]], "logits": None}
    assert peer_batch.compare(alone, together, 1) == {
        "tokens_identical": False,
        "first_difference": 1,
        "max_abs_logit_diff": None,
    }


if __name__ == "__main__":
    venv_peers.serve(Echo)
