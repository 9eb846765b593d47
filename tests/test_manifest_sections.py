"""runtime/manifest.py against the shipped bundles' manifests: each reads and writes back as the
same JSON (only a version 1 manifest's migration adds fields), and a manifest's sections refuse
keys they do not know, naming the field."""

import dataclasses
import json
from pathlib import Path

import pytest

from runtime.config import GenerationConfig
from runtime.manifest import GENERATION_DEFAULT_FIELDS, Manifest

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = sorted(ROOT.glob("models/**/manifest.json"))
# The fields schema version 2 writes for every manifest, which a version 1 file could lack
# (runtime/manifest.py `migrate_v1` and the common fields' defaults).
COMMON = {
    "schema_version",
    "batch_invariant",
    "license",
    "architecture",
    "precision",
    "graphs",
    "special_tokens",
    "controls",
    "generation_defaults",
    "parity",
    "metrics",
    "training_data",
    "export",
}


def test_every_shipped_bundle_has_a_manifest():
    assert len(SHIPPED) >= 10


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: str(p.parent.relative_to(ROOT)))
def test_a_shipped_manifest_reads_and_writes_back_as_the_same_json(path, tmp_path):
    raw = json.loads(path.read_text(encoding="utf-8"))
    manifest = Manifest.read(path)
    written = manifest.to_json()
    for key, value in raw.items():
        if key == "schema_version":
            continue
        if key == "special_tokens":  # version 1 wrote only the ids a model has
            assert {k: written[key][k] for k in value} == value
            continue
        assert written[key] == value, key
    assert set(written) - set(raw) <= COMMON
    if raw["schema_version"] == 2:
        assert written == raw
    # Written and read again, the manifest is the same, and so is its file.
    manifest.write(tmp_path / "manifest.json", ensure_ascii=False)
    again = Manifest.read(tmp_path / "manifest.json")
    assert again == manifest
    first = (tmp_path / "manifest.json").read_text(encoding="utf-8")
    again.write(tmp_path / "manifest.json", ensure_ascii=False)
    assert (tmp_path / "manifest.json").read_text(encoding="utf-8") == first


def _tiny(**fields) -> dict:
    return {
        "schema_version": 2,
        "name": "tiny",
        "task": "word-vectors",
        "files": {},
        "batch_invariant": True,
        "vectors": "vectors.npy",
        "vocab": "vocab.txt",
        **fields,
    }


def test_unknown_generation_defaults_are_refused_by_name():
    with pytest.raises(ValueError, match=r"^`generation_defaults` has unknown key `top_pp`$"):
        Manifest.from_json(_tiny(generation_defaults={"top_p": 0.9, "top_pp": 0.9}))
    with pytest.raises(ValueError, match=r"^`generation_defaults` has unknown key `foo`$"):
        GenerationConfig.from_dict({"temperature": 0.7, "foo": 1})
    known = Manifest.from_json(_tiny(generation_defaults={"top_p": 0.9, "stop": ["\n"]}))
    assert GenerationConfig.from_dict(known.generation_defaults.given()).top_p == 0.9


def test_generation_defaults_name_generation_config_fields():
    fields = {f.name for f in dataclasses.fields(GenerationConfig)}
    assert set(GENERATION_DEFAULT_FIELDS) <= fields
    # a request's own settings are not a model's defaults
    assert not {"json_schema", "tool_calls", "cache_salt"} & set(GENERATION_DEFAULT_FIELDS)
