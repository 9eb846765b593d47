"""Peers that live in their own virtual environment and run in a child process: onnxruntime-genai
(bench/ort_genai_peer.py), OpenVINO through optimum-intel (bench/openvino_peer.py) and OpenVINO
GenAI (bench/openvino_genai_peer.py).

They are never dependencies of the project: they are installed in `<work>/peers-venv` (by
default ~/.cache/scriptorium/bench/peers-venv, made with `--system-site-packages` so that it
reuses the project's torch and transformers to build the peers' models):

    python -m venv --system-site-packages ~/.cache/scriptorium/bench/peers-venv
    ~/.cache/scriptorium/bench/peers-venv/bin/pip install onnxruntime-genai openvino-genai \
        "optimum-intel[openvino]" "transformers==5.5.4" "huggingface-hub<1.22"

(versions and why those pins: docs/PEERS.md).

`PeerProcess` starts `<venv>/bin/python -m bench.<peer module> MODEL_DIR THREADS SCRATCH` in the
repository and talks to it one JSON line at a time: a request `{"op": NAME, **arguments}` on its
stdin, a reply `{"value": …}` (or `{"error": message}`) on its stdout. Arrays come back as .npy
files in a scratch folder of the parent's, named in the reply (`{"npy": path}`). The child side is
`serve(engine)`: it calls `engine.NAME(**arguments)`. Every peer engine offers the same calls:

    generate(ids, new_tokens)      exactly `new_tokens` greedy tokens after `ids` (end of sequence
                                   barred until then), as the speed runs of bench/llm.py need
    greedy(ids, max_new_tokens, stop_ids)   greedy tokens after `ids`, stopping after the first
                                   of `stop_ids` or at `max_new_tokens` (bench/fidelity.py)
    logits(ids)                    (T, V) float32 logits of every position of `ids` (teacher-forced;
                                   not offered by OpenVINO GenAI)
    batch(prompts, new_tokens)     the engine's own batched greedy generation of all `prompts` at
                                   once: {"tokens": B lists, "logits": (B, new_tokens, V) npy}
    versions()                     {package: version} of what the child runs

This module imports only the standard library and numpy at its top, as the child needs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
VENV = "peers-venv"


def venv_dir(work: Path) -> Path:
    """The peers' virtual environment under the benchmarks' `--work` folder."""
    return work.expanduser() / VENV


def missing(venv: Path, module: str, what: str) -> str | None:
    """Why `module` cannot be imported by the interpreter of `venv` (naming the peer `what`), or
    None when it can."""
    python = venv / "bin" / "python"
    if not python.exists():
        return f"{what} needs the peers' virtual environment {venv} (bench/venv_peers.py)"
    done = subprocess.run([python, "-c", f"import {module}"], capture_output=True, timeout=300)
    if done.returncode:
        last = done.stderr.decode(errors="replace").strip().splitlines()[-1:] or ["no message"]
        return f"{what} cannot be imported in {venv}: {last[0][:200]}"
    return None


def run_in_venv(venv: Path, args: list[str]) -> None:
    """Run `<venv>/bin/python ARGS…` in the repository at `nice -n 10`; raise if it fails."""
    subprocess.run(["nice", "-n", "10", venv / "bin" / "python", *args], cwd=REPO, check=True)


class PeerProcess:
    """A peer engine in a child process of the peers' interpreter (the module docstring's
    protocol); `call(op, **arguments)` returns its value, arrays as numpy arrays."""

    def __init__(self, venv: Path, module: str, model_dir: Path, threads: int):
        self.scratch = tempfile.TemporaryDirectory(prefix="peer-")
        self.child = subprocess.Popen(
            [
                venv / "bin" / "python",
                "-m",
                module,
                str(model_dir),
                str(threads),
                self.scratch.name,
            ],
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def call(self, op: str, **arguments):
        """Send one request and wait for its reply; a child's error is raised as RuntimeError."""
        self.child.stdin.write(json.dumps({"op": op, **arguments}) + "\n")
        self.child.stdin.flush()
        line = self.child.stdout.readline()
        if not line:
            raise RuntimeError(f"the peer process exited (code {self.child.wait()})")
        reply = json.loads(line)
        if "error" in reply:
            raise RuntimeError(reply["error"])
        return _arrays_loaded(reply["value"])

    def close(self) -> None:
        """End the child (it exits when its stdin closes) and remove the scratch folder."""
        self.child.stdin.close()
        self.child.wait(timeout=60)
        self.scratch.cleanup()


def _arrays_loaded(value):
    """`value` with every `{"npy": path}` replaced by that array (the file removed)."""
    if isinstance(value, dict) and set(value) == {"npy"}:
        array = np.load(value["npy"])
        Path(value["npy"]).unlink()
        return array
    if isinstance(value, dict):
        return {key: _arrays_loaded(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_arrays_loaded(item) for item in value]
    return value


def _arrays_saved(value, scratch: Path, counter: list[int]):
    """`value` with every numpy array saved under `scratch` and replaced by `{"npy": path}`."""
    if isinstance(value, np.ndarray):
        counter[0] += 1
        path = scratch / f"{counter[0]}.npy"
        np.save(path, value)
        return {"npy": str(path)}
    if isinstance(value, dict):
        return {key: _arrays_saved(item, scratch, counter) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_arrays_saved(item, scratch, counter) for item in value]
    return value


def serve(make_engine) -> None:
    """The child's loop: `make_engine(model_dir, threads)` from `sys.argv`, then one reply per
    request line until stdin closes. Errors are replied, not raised, so the parent sees them.
    Replies go to the original stdout; anything else written there (the peer libraries' own
    messages, from Python or C) is sent to stderr, so it cannot break a reply."""
    model_dir, threads, scratch = Path(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3])
    replies = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    engine = make_engine(model_dir, threads)
    counter = [0]
    for line in sys.stdin:
        request = json.loads(line)
        try:
            value = getattr(engine, request.pop("op"))(**request)
            reply = {"value": _arrays_saved(value, scratch, counter)}
        except Exception as error:  # noqa: BLE001 - every failure goes back to the parent
            reply = {"error": f"{type(error).__name__}: {error}"}
        replies.write(json.dumps(reply) + "\n")
        replies.flush()
