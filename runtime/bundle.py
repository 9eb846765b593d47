"""Open a model directory: a Scriptorium bundle or a plain optimum-onnx export.

Covers reading `manifest.json`, verifying every file's sha256 before any session exists, and
inferring a manifest for an optimum export directory (docs/bundle.md is the contract). It does
not create inference sessions or run models.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from .chat import hf_chat_fields

SCHEMA_VERSION = 1
TASKS = ("causal-lm", "seq2seq", "hierarchical-lm", "fill-mask", "word-vectors")
HIERARCHICAL_ROLES = ["word_encoder", "sentence_encoder", "sentence_decoder", "word_decoder"]
GRAPH_ROLES = {
    "causal-lm": ["decoder"],
    "seq2seq": ["encoder", "decoder"],
    "hierarchical-lm": HIERARCHICAL_ROLES,
    "fill-mask": ["model"],
}


class BundleError(ValueError):
    """A model directory is missing something or is inconsistent."""


class ChecksumError(BundleError):
    """A bundle file's content does not match the sha256 recorded in its manifest."""


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_manifest(directory: str | Path, verify: bool = True) -> dict:
    """The manifest of `directory`, with checksums verified; inferred for optimum exports."""
    directory = Path(directory)
    if not directory.is_dir():
        raise FileNotFoundError(f"model directory not found: {directory}")
    manifest_path = directory / "manifest.json"
    if not manifest_path.exists():
        return infer_manifest(directory)
    try:
        manifest = json.loads(manifest_path.read_text())
    except json.JSONDecodeError as error:
        raise BundleError(f"{manifest_path} is not valid JSON: {error}") from error
    _check_manifest(manifest, manifest_path)
    if verify:
        verify_files(directory, manifest)
    return manifest


def _check_manifest(manifest: dict, path: Path) -> None:
    version = manifest.get("schema_version")
    if version != SCHEMA_VERSION:
        raise BundleError(f"{path}: `schema_version` must be {SCHEMA_VERSION}, got {version!r}")
    if manifest.get("task") not in TASKS:
        raise BundleError(f"{path}: `task` must be one of {TASKS}, got {manifest.get('task')!r}")
    if manifest["task"] == "word-vectors":
        required = ("name", "task", "files", "vectors", "vocab")
    elif manifest["task"] == "hierarchical-lm":
        required = ("name", "task", "files", "graphs", "num_layers")
    else:
        required = ("name", "task", "files", "graphs", "num_layers", "num_heads", "head_size")
    missing = [key for key in required if key not in manifest]
    if missing:
        raise BundleError(f"{path}: missing keys {missing}")
    for role in GRAPH_ROLES.get(manifest["task"], []):
        if role not in manifest["graphs"]:
            raise BundleError(f"{path}: `graphs` has no {role!r} graph for task {manifest['task']}")


def verify_files(directory: Path, manifest: dict) -> None:
    """Check that every file the manifest lists exists with its recorded sha256."""
    for name, entry in manifest["files"].items():
        path = directory / name
        if not path.exists():
            raise FileNotFoundError(f"bundle file missing: {path} (listed in manifest.json)")
        actual = sha256_of(path)
        if actual != entry["sha256"]:
            raise ChecksumError(
                f"checksum mismatch for {path}: manifest says sha256 {entry['sha256']}, "
                f"file has {actual}; the file is corrupted or was changed after export"
            )
    if manifest["task"] == "word-vectors":
        needed = [manifest["vectors"], manifest["vocab"]]
    elif manifest["task"] == "hierarchical-lm":
        needed = [graph["file"] for graph in manifest["graphs"].values()]
        needed.extend(manifest["initial_states"].values())
    else:
        needed = [graph["file"] for graph in manifest["graphs"].values()] + ["tokenizer.json"]
    for name in needed:
        if name not in manifest["files"]:
            raise BundleError(f"{directory}: {name} is used but not listed in manifest `files`")


def infer_manifest(directory: Path) -> dict:
    """A manifest for a plain optimum-onnx export directory (config.json + graphs + tokenizer),
    with its chat template and end-of-turn tokens when tokenizer_config.json has a template."""
    config_path = directory / "config.json"
    if not config_path.exists():
        raise FileNotFoundError(
            f"{directory} has neither manifest.json (a Scriptorium bundle) nor config.json "
            "(an optimum-onnx export)"
        )
    if not (directory / "tokenizer.json").exists():
        raise FileNotFoundError(f"tokenizer.json missing in {directory}")
    config = json.loads(config_path.read_text())
    generation = {}
    if (directory / "generation_config.json").exists():
        generation = json.loads((directory / "generation_config.json").read_text())
    seq2seq = bool(config.get("is_encoder_decoder"))
    if seq2seq:
        graphs = {"encoder": "encoder_model.onnx", "decoder": "decoder_model_merged.onnx"}
    else:
        graphs = {"decoder": "model.onnx"}
    for name in graphs.values():
        if not (directory / name).exists():
            raise FileNotFoundError(f"graph missing: {directory / name}")
    shape = _shape_from_config(config, seq2seq)

    def pick(key):
        return generation.get(key, config.get(key))

    return {
        "schema_version": SCHEMA_VERSION,
        "name": directory.name,
        "task": "seq2seq" if seq2seq else "causal-lm",
        "architecture": config.get("model_type", "unknown"),
        "precision": "int8" if "quantized" in directory.name else "fp32",
        # optimum's float graphs compute each row alone; its quantized ones are dynamic int8.
        "batch_invariant": "quantized" not in directory.name,
        "files": {},  # an optimum export records no checksums
        "graphs": {role: {"file": name} for role, name in graphs.items()},
        **shape,
        "special_tokens": {
            "bos_token_id": _first(pick("bos_token_id")),
            "eos_token_id": _first(pick("eos_token_id")),
            "pad_token_id": _first(pick("pad_token_id")),
            "decoder_start_token_id": _first(pick("decoder_start_token_id")),
        },
        "add_bos_token": False,
        "controls": {},
        "generation_defaults": {
            key: generation[key]
            for key in ("forced_bos_token_id", "forced_eos_token_id")
            if generation.get(key) is not None
        },
        **hf_chat_fields(directory),
        "inferred": True,
    }


def _first(value):
    return value[0] if isinstance(value, list) else value


def _shape_from_config(config: dict, seq2seq: bool) -> dict:
    """Layer/head sizes from a Hugging Face config, whatever the architecture calls them."""

    def get(*names, default=None):
        for name in names:
            if config.get(name) is not None:
                return config[name]
        return default

    hidden = get("hidden_size", "n_embd", "d_model")
    if seq2seq:
        layers = get("decoder_layers", "num_decoder_layers", "num_layers")
        heads = get("decoder_attention_heads", "num_heads", "num_attention_heads")
    else:
        layers = get("num_hidden_layers", "n_layer", "num_layers")
        heads = get("num_key_value_heads", "num_attention_heads", "n_head")
    head_size = get(
        "d_kv",
        "head_dim",
        default=hidden
        // get("num_attention_heads", "n_head", "decoder_attention_heads", "num_heads"),
    )
    return {
        "num_layers": layers,
        "num_heads": heads,
        "head_size": head_size,
        "hidden_size": hidden,
        "vocab_size": config.get("vocab_size"),
        "context_length": get("n_positions", "max_position_embeddings", default=512),
    }
