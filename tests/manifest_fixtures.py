"""Small valid manifests (runtime.manifest.Manifest) for the tests of code that reads one: each
task's required fields filled with the least a manifest may hold, the fields a test names over
them, spelled as manifest.json spells them."""

from __future__ import annotations

from runtime.manifest import SCHEMA_VERSION, Manifest

TRANSFORMER = {"num_layers": 1, "num_heads": 1, "head_size": 8, "context_length": 64}
REQUIRED = {
    "causal-lm": {"graphs": {"decoder": {"file": "model.onnx"}}, **TRANSFORMER},
    "seq2seq": {
        "graphs": {"encoder": {"file": "encoder.onnx"}, "decoder": {"file": "decoder.onnx"}},
        **TRANSFORMER,
    },
    "fill-mask": {"graphs": {"model": {"file": "model.onnx"}}, **TRANSFORMER},
    "word-vectors": {"vectors": "vectors.npy", "vocab": "vocab.txt"},
}


def manifest_of(task: str = "causal-lm", **fields) -> Manifest:
    """A manifest of `task` named "m" with `fields` (JSON values) over its required ones."""
    document = {
        "schema_version": SCHEMA_VERSION,
        "name": "m",
        "task": task,
        "files": {},
        "batch_invariant": True,
        **REQUIRED[task],
        **fields,
    }
    return Manifest.from_json(document)
