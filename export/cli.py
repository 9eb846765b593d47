"""`scriptorium export MODEL_DIR OUT_DIR [--precision fp32|int8|int4] [--no-optimize]
[--accuracy-level N] …`,
`scriptorium export gguf FILE.gguf OUT_DIR …` (convert/gguf.py) and `scriptorium export adapter
PEFT_DIR OUT_DIR [--base FILE.gguf] …` (export/adapter.py).

Parses arguments, runs `export_hf_llama` for a Llama / Qwen2 checkpoint (the lean graph, no
torch: convert/hf_checkpoint.py), `export_bundle` (another text generator) or, for a checkpoint
whose config names a `…ForMaskedLM` architecture, `export_fill_mask_bundle` (fp32 or int8), and
prints a short summary of the bundle and its parity report. Errors in the inputs (missing directory,
config, weights or tokenizer; an unsupported architecture; a failed fp32 parity check) print one
line and return exit code 1 (`export gguf` and `export adapter`: 2, and 1 for a failing disk).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from convert.hf_checkpoint import is_hf_llama
from runtime.manifest import Manifest


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    from convert.manifest import PRECISIONS

    parser = argparse.ArgumentParser(
        prog="scriptorium export",
        description="Export a local Hugging Face checkpoint to an ONNX model bundle.",
    )
    parser.add_argument("model_dir", help="checkpoint directory (config.json, weights, tokenizer)")
    parser.add_argument("out_dir", help="bundle directory to write (new, empty or a bundle)")
    parser.add_argument("--precision", choices=PRECISIONS, default="fp32")
    parser.add_argument(
        "--no-optimize", action="store_true", help="skip onnxruntime's transformer optimizer"
    )
    parser.add_argument("--name", help="display name (default: the model directory's name)")
    parser.add_argument(
        "--controls",
        help="JSON file of control tokens (default: MODEL_DIR/scriptorium_controls.json)",
    )
    parser.add_argument(
        "--keep-lm-head", action="store_true", help="leave the LM head in float32 when quantizing"
    )
    parser.add_argument(
        "--accuracy-level",
        type=int,
        help="llama / qwen2 int8 and int4: MatMulNBits accuracy level, 0 float activations, "
        "4 int8 (default 4)",
    )
    return parser.parse_args(argv)


def is_masked_lm(model_dir: str) -> bool:
    """Whether the checkpoint's config.json names a masked-LM architecture."""
    config = Path(model_dir) / "config.json"
    if not config.is_file():
        return False  # export_bundle names what is missing
    try:
        architectures = json.loads(config.read_text()).get("architectures") or []
    except (json.JSONDecodeError, AttributeError):
        return False
    return any(str(name).endswith("ForMaskedLM") for name in architectures)


def _headline(manifest: Manifest, out_dir: str) -> str:
    size = sum(entry.size for entry in manifest.files.values())
    return (
        f"wrote {manifest.name} ({manifest.task}, {manifest.architecture}, "
        f"{manifest.precision}) to {out_dir}: {len(manifest.files)} files, "
        f"{size / 1e6:.1f} MB"
    )


def fill_mask_summary(manifest: Manifest, out_dir: str) -> str:
    bundle = manifest.parity.bundle
    return "\n".join(
        [
            _headline(manifest, out_dir),
            f"mask token {manifest.mask_token!r}; against PyTorch on "
            f"{bundle.sentences} sentences: max |Δlogit| {bundle.max_abs_logit_diff:.3g} "
            f"(logit scale {bundle.max_abs_logit:.3g}), masked-position argmax agreement "
            f"{bundle.masked_argmax_agreement:.3f}",
        ]
    )


def summary(manifest: Manifest, out_dir: str) -> str:
    parity = manifest.parity
    logits, greedy, ppl = parity.logits, parity.greedy, parity.perplexity
    return "\n".join(
        [
            _headline(manifest, out_dir),
            f"optimizer: {manifest.export.optimizer_summary}",
            f"max |Δlogit| prefill {logits.prefill_max_abs_diff:.3g}, cached step "
            f"{logits.cached_step_max_abs_diff:.3g} (logit scale {logits.max_abs_logit:.3g})",
            f"greedy: {greedy.identical_sequences}/{greedy.prompts} identical sequences, "
            f"token agreement {greedy.token_agreement:.3f}",
            f"perplexity: {ppl.pytorch:.4g} -> {ppl.onnx:.4g} ({ppl.relative_change_pct:+.3f} %)",
        ]
    )


def _export_hf_llama(args: argparse.Namespace) -> int:
    """A Llama / Qwen2 checkpoint: the lean graph, torch-free (convert/hf_checkpoint.py)."""
    from convert.bundle import summary
    from convert.graph import ACCURACY_LEVEL
    from convert.hf_checkpoint import export_hf_llama

    level = ACCURACY_LEVEL if args.accuracy_level is None else args.accuracy_level
    try:
        if args.controls:
            raise ValueError("`--controls` is not supported for llama / qwen2 checkpoints")
        manifest = export_hf_llama(
            args.model_dir,
            args.out_dir,
            precision=args.precision,
            accuracy_level=level,
            name=args.name,
            keep_lm_head=args.keep_lm_head,
        )
    except (FileNotFoundError, ValueError) as error:
        print(f"scriptorium export: error: {error}", file=sys.stderr)
        return 1
    print(summary(manifest, args.out_dir))
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["gguf"]:
        from convert.gguf import main as gguf_main

        return gguf_main(argv[1:])
    if argv[:1] == ["adapter"]:
        from .adapter import main as adapter_main

        return adapter_main(argv[1:])
    args = parse_args(argv)
    if is_hf_llama(args.model_dir):
        return _export_hf_llama(args)
    if args.accuracy_level is not None:
        print(
            "scriptorium export: error: `--accuracy-level` is only supported for llama / qwen2 "
            f"checkpoints, got {args.model_dir}",
            file=sys.stderr,
        )
        return 1
    from .exporter import OptimumError, ParityError, export_bundle  # torch and transformers

    if is_masked_lm(args.model_dir):
        from .fill_mask import export_fill_mask_bundle

        try:
            manifest = export_fill_mask_bundle(
                args.model_dir,
                args.out_dir,
                args.precision,
                optimize=not args.no_optimize,
                name=args.name,
            )
        except (FileNotFoundError, ValueError) as error:
            print(f"scriptorium export: error: {error}", file=sys.stderr)
            return 1
        print(fill_mask_summary(manifest, args.out_dir))
        return 0
    try:
        manifest = export_bundle(
            args.model_dir,
            args.out_dir,
            precision=args.precision,
            optimize=not args.no_optimize,
            name=args.name,
            controls=args.controls,
            keep_lm_head=args.keep_lm_head,
        )
    except (FileNotFoundError, ValueError, ParityError, OptimumError) as error:
        print(f"scriptorium export: error: {error}", file=sys.stderr)
        return 1
    print(summary(manifest, args.out_dir))
    return 0
