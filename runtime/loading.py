"""`runtime.load` and bundle discovery: the one module that knows every task.

A model directory is a bundle (manifest.json), an optimum-onnx export (config.json), or a family
of bundles, one per precision (`models/bible-lm/int8`, `models/bible-lm/fp32`). `load` opens one
and returns the class its manifest's task names; `find_bundles` lists every model directory under
some roots (the app's registry, serve/ and spaces/ name models by it).

Does not cover: reading and verifying a manifest (runtime/bundle.py), sessions
(runtime/sessions.py), or what each model is for in the app (ui/registry.py).
"""

from __future__ import annotations

import os
from pathlib import Path

from .bundle import adapter_base, read_manifest
from .generator import Generator
from .hierarchical import HierarchicalGenerator
from .masked_lm import MaskedLM
from .word_vectors import WordVectors

PRECISION_PREFERENCE = ("int8", "fp32", "int4")


def load(
    path: str | os.PathLike,
    precision: str | None = None,
    providers: list[str] | None = None,
    threads: int | None = None,
    io_binding: bool | None = None,
    spinning: bool | None = None,
    batching: bool | None = None,
    base: str | os.PathLike | None = None,
    kv_budget: int | None = None,
) -> Generator | HierarchicalGenerator | MaskedLM | WordVectors:
    """Open a bundle (or an optimum-onnx export directory) and create its inference sessions.

    The manifest's task picks the class: a `Generator` for "causal-lm" and "seq2seq", a
    `runtime.hierarchical.HierarchicalGenerator` for "hierarchical-lm", a
    `runtime.masked_lm.MaskedLM` for "fill-mask", a `runtime.word_vectors.WordVectors` for
    "word-vectors".

    `path` may also be a directory of bundles, one per precision (`models/bible-lm/int8`, …):
    `precision` picks one, by default the first of int8, fp32, int4 that exists. Checksums are
    verified before any session is created. `providers` are onnxruntime execution providers in
    order of preference (e.g. `providers_for("cuda")`; default: CUDA when onnxruntime-gpu sees a
    GPU, else CPU); one this onnxruntime does not offer raises `ValueError`. `io_binding` keeps
    the KV cache on the device between steps and brings only the logits back to the host
    (default: on with CUDA, off on CPU where numpy arrays are already in place; docs/GPU.md).
    `spinning` lets onnxruntime's worker threads spin between operators instead of sleeping:
    faster decoding when one loop has the cores to itself, but spinning threads burn the cores
    that concurrent loops need. None (default): on exactly when an engine loop (`batching`) is
    the session's one caller (not for adapters, which share their base's session), off
    otherwise (docs/RUNTIME.md, "Spinning"). `batching` runs a causal LM's greedy and sampled
    generations (`generate`, `stream`, `chat`, `stream_chat`) in one engine loop that batches
    concurrent calls step by step (runtime/engine.py); each call's output is what it would be
    alone. None (default): on exactly for causal LMs whose manifest says `batch_invariant`; True:
    on, `ValueError` for a graph that is not batch-invariant (dynamic int8); False: off.
    `kv_budget` is the bytes of KV cache that engine's batch and its prefix cache may hold
    together (default `runtime.engine.MAX_CACHE_BYTES`; the app's and `scriptorium serve`'s
    `--kv-budget`).

    An adapter bundle (LoRA, docs/bundle.md "Adapter bundles") runs on its base: the bundle
    converted from the GGUF whose sha256 it names, found in the converted-GGUF cache, or `base`
    (a bundle directory). Every call of the returned `Generator` applies the adapter; adapters
    of one base share one session of it within the process.
    """
    directory = _pick_bundle(Path(path), precision)
    manifest = read_manifest(directory, base=base)
    if precision is not None and manifest.precision not in ("", precision):
        raise ValueError(
            f"`precision` must match the bundle's ({manifest.precision}), got {precision!r}"
        )
    if manifest.task == "hierarchical-lm":
        return HierarchicalGenerator(directory, manifest, threads=threads, providers=providers)
    if manifest.task == "word-vectors":
        return WordVectors.from_bundle(directory, manifest)
    if manifest.task == "fill-mask":
        return MaskedLM(directory, manifest, providers=providers, threads=threads)
    adapter = None
    if manifest.adapter is not None:
        adapter, directory = directory, adapter_base(directory, manifest, base)
    return Generator(
        directory,
        manifest,
        adapter_directory=adapter,
        providers=providers,
        threads=threads,
        io_binding=io_binding,
        spinning=spinning,
        batching=batching,
        kv_budget=kv_budget,
    )


def _pick_bundle(path: Path, precision: str | None) -> Path:
    if not path.is_dir():
        raise FileNotFoundError(f"model directory not found: {path}")
    if is_model(path):
        return path
    options = {p.name: p for p in sorted(path.iterdir()) if (p / "manifest.json").exists()}
    if not options:
        raise FileNotFoundError(f"{path} holds no model bundle (no manifest.json or config.json)")
    if precision is not None:
        if precision not in options:
            raise ValueError(
                f"`precision` must be one of {sorted(options)} for {path}, got {precision!r}"
            )
        return options[precision]
    for name in PRECISION_PREFERENCE:
        if name in options:
            return options[name]
    return next(iter(options.values()))


def is_model(path: Path) -> bool:
    """Whether `path` is one model: a bundle (manifest.json) or an optimum export (config.json)."""
    return (path / "manifest.json").exists() or (path / "config.json").exists()


def find_bundles(roots) -> list[tuple[str, Path, Path]]:
    """(display name, path relative to its root, path) of every model directory under `roots`.

    A root may itself be a model, hold models, or hold families of per-precision bundles; a
    family member's display name is "family (precision)".
    """
    found = []
    for root in map(Path, roots):
        if not root.is_dir():
            continue
        if is_model(root):
            found.append((root.name, Path(root.name), root))
            continue
        for path in sorted(p for p in root.iterdir() if p.is_dir()):
            if is_model(path):
                found.append((path.name, Path(path.name), path))
                continue
            for bundle in sorted(p for p in path.iterdir() if is_model(p)):
                found.append((f"{path.name} ({bundle.name})", Path(path.name, bundle.name), bundle))
    return found
