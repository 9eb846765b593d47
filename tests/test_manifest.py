"""The typed manifest (runtime/manifest.py): every shipped bundle's manifest reads through the
migration of its schema version, round-trips through its JSON, and a manifest of an unknown
version or with a field of the wrong kind is refused with one line naming the field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runtime.bundle import BundleError, read_manifest
from runtime.manifest import (
    DEFAULT_CONTEXT_LENGTH,
    SCHEMA_VERSION,
    Control,
    FileEntry,
    Graph,
    Manifest,
    SpecialTokens,
)

REPO = Path(__file__).resolve().parents[1]
SHIPPED = sorted((REPO / "models").glob("**/manifest.json"))
MINIMAL = {
    "schema_version": 1,
    "name": "tiny",
    "task": "causal-lm",
    "files": {},
    "graphs": {"decoder": {"file": "model.onnx"}},
    "num_layers": 1,
    "num_heads": 1,
    "head_size": 4,
}


def test_every_shipped_bundle_is_found():
    assert len(SHIPPED) >= 13


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: str(p.parent.relative_to(REPO)))
def test_every_shipped_manifest_reads_and_round_trips(path):
    raw = json.loads(path.read_text())
    manifest = Manifest.read(path)
    assert manifest.schema_version == SCHEMA_VERSION
    assert (manifest.name, manifest.task) == (raw["name"], raw["task"])
    assert manifest.batch_invariant == raw.get("batch_invariant", False)
    assert set(manifest.files) == set(raw["files"])
    again = Manifest.from_json(json.loads(json.dumps(manifest.to_json())))
    assert again == manifest
    # every key a shipped manifest holds has its typed field, with the value as written
    document = manifest.to_json()
    changed = {key for key in raw if raw[key] != document[key]}
    assert changed <= {"schema_version", "special_tokens", "chat"}, changed


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: str(p.parent.relative_to(REPO)))
def test_every_shipped_bundle_opens_with_its_checksums(path):
    manifest = read_manifest(path.parent)
    assert manifest.name == json.loads(path.read_text())["name"]


def test_a_version_1_manifest_reads_with_the_defaults_version_1_assumed():
    manifest = Manifest.from_json(MINIMAL)
    assert manifest.batch_invariant is False
    assert manifest.context_length == DEFAULT_CONTEXT_LENGTH
    assert manifest.graphs == {"decoder": Graph(file="model.onnx")}
    assert manifest.special_tokens == SpecialTokens()
    assert manifest.to_json()["schema_version"] == SCHEMA_VERSION


def test_a_written_manifest_reads_back_the_same(tmp_path):
    manifest = Manifest(
        name="tiny",
        task="causal-lm",
        architecture="gpt2",
        precision="int8",
        batch_invariant=True,
        files={"model.onnx": FileEntry(sha256="ab" * 32, size=3)},
        graphs={"decoder": Graph("model.onnx", ("input_ids",), ("logits",), "shared-buffer", True)},
        num_layers=2,
        num_heads=2,
        head_size=8,
        context_length=64,
        special_tokens=SpecialTokens(bos_token_id=0, eos_token_id=1),
        controls={"section": {"kind": "choice", "values": {"law": "<|law|>"}}},
        stop=("[e:text]",),
        license="public domain",
    )
    written = manifest.write(tmp_path / "manifest.json", ensure_ascii=False)
    assert written == manifest == Manifest.read(tmp_path / "manifest.json")
    stored = json.loads((tmp_path / "manifest.json").read_text())
    assert stored["batch_invariant"] is True and stored["schema_version"] == SCHEMA_VERSION
    assert "mask_token" not in stored  # optional fields that are not set are not written


def test_a_builder_must_say_whether_the_bundle_batches():
    with pytest.raises(TypeError, match="batch_invariant"):
        Manifest(name="x", task="word-vectors", vectors="v.npy", vocab="vocab.txt")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"schema_version": 3}, r"`schema_version` must be one of \(1, 2\) \(this runtime reads"),
        ({"schema_version": "2"}, "`schema_version` must be one of"),
        ({"context_length": "long"}, "`context_length` must be an integer, got 'long'"),
        ({"batch_invariant": "yes"}, "`batch_invariant` must be true or false, got 'yes'"),
        ({"controls": 5}, "`controls` must be an object, got int"),
        ({"export": None}, "`export` must be an object, got NoneType"),
        ({"graphs": {"decoder": {"file": 5}}}, "`graphs.decoder.file` must be a string, got 5"),
        (
            {"graphs": {"decoder": {"file": "model.onnx", "one_row_steps": "yes"}}},
            "`graphs.decoder.one_row_steps` must be true or false, got 'yes'",
        ),
        ({"graphs": {"encoder": {"file": "e.onnx"}}}, "`graphs` has no 'decoder' graph"),
        ({"files": {"a": {"sha256": 5}}}, "`files.a.sha256` must be a string, got 5"),
        ({"special_tokens": {"eos_token_id": "2"}}, "`special_tokens.eos_token_id` must be an"),
        ({"chat": {"template": 5}}, "`chat.template` must be a string, got 5"),
        ({"stop": "[e:text]"}, r"`stop` must be a list of strings, got '\[e:text\]'"),
        ({"memorisation_index": {"file": "a.npy"}}, r"missing keys \['memorisation_index.n'\]"),
        ({"task": "translation"}, "`task` must be one of"),
        ({"num_heads": None}, r"missing keys \['num_heads'\]"),
        ({"novel": 1}, r"unknown keys \['novel'\]"),
    ],
)
def test_a_bad_manifest_is_one_line_naming_the_field(tmp_path, change, message):
    (tmp_path / "manifest.json").write_text(json.dumps({**MINIMAL, **change}))
    with pytest.raises(BundleError, match=message) as caught:
        read_manifest(tmp_path, verify=False)
    assert "\n" not in str(caught.value) and str(tmp_path) in str(caught.value)


def test_the_manifest_is_read_by_its_typed_fields_only():
    control = {"kind": "choice", "values": {"x": "<x>"}}
    manifest = Manifest.from_json({**MINIMAL, "controls": {"a": control}})
    assert manifest.controls == {"a": Control("choice", {"x": "<x>"})}
    assert manifest.embeddings is None and manifest.to_json()["controls"] == {"a": control}
    as_a_dict = [
        lambda: manifest["controls"],
        lambda: manifest.get("controls"),
        lambda: "graphs" in manifest,
        lambda: dict(manifest),
    ]
    for read in as_a_dict:
        with pytest.raises((TypeError, AttributeError)):
            read()
