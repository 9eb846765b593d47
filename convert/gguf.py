"""`scriptorium export gguf FILE.gguf OUT_DIR`: a GGUF file (the architectures of
convert/gguf_read.py's ARCHITECTURES) to a Scriptorium bundle, with numpy, onnx, onnxruntime
and tokenizers only (no torch, no transformers).

`export_gguf(gguf_path, out_dir)` writes model.onnx (convert/graph.py; quantized weights
carried over, or with `fp32` every weight dequantized), tokenizer.json
(convert/gguf_tokenizer.py), README.md and manifest.json: task causal-lm, the GGUF's scalar
metadata and sha256, the chat template and end-of-turn token ids, how each GGUF tensor type was
stored, and a parity report.

The parity report is torch-free (convert/bundle.py, shared with convert/hf_checkpoint.py):
the bundle's graph against an fp32 graph of the same weights (for a quantized bundle; what quantized
activations cost) and against its own full-sequence pass (the KV cache path), on a few prompts.
Parity against transformers loading the same GGUF lives in tests/test_gguf.py.

`main` prints one line for every refused input (the field, tensor or path and what was expected;
convert/gguf_check.py) and exits with 2, or 1 when the disk fails (full, read-only).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from runtime.bundle import LORA_FORMAT, sha256_of
from runtime.manifest import ChatSection, Lora, LoraSlot, Manifest, SpecialTokens

from .bundle import (
    llama_manifest,
    model_card,
    parity_report,
    prepare_out_dir,
    summary,
    write_bundle,
)
from .gguf_read import GGUFModel, read_gguf, supported_gguf
from .gguf_tokenizer import build_tokenizer
from .graph import ACCURACY_LEVEL, build_llama_graph, parameter_count
from .manifest import card_code

# The parity report's fp32 reference graph is built only up to this size of float32 weights
# (Qwen2.5-0.5B's 2 GB): onnxruntime holds all of it, which for a 1.7B model would be 6.8 GB
# beside the bundle (docs/GGUF.md, "Converter memory").
REFERENCE_BYTES = 2_100_000_000
LORA_GRAPH = "model_lora.onnx"  # the decoder with LoRA slots, for adapter bundles
# Tokens that end a chat turn when a chat template uses them (besides the GGUF's eos / eot ids).
TURN_ENDS = ("<|im_end|>", "<|eot_id|>", "<|end|>", "<|endoftext|>", "</s>", "<end_of_turn>")


def chat_info(model: GGUFModel, tokenizer) -> ChatSection | None:
    """The chat template and the ids of the tokens that end a turn (data for chat front ends)."""
    fields = model.tokenizer
    template = fields.get("chat_template")
    ids = [
        fields.get(f"tokenizer.ggml.{key}_token_id")
        for key in ("eos", "eot", "eom")
        if fields.get(f"tokenizer.ggml.{key}_token_id") is not None
    ]
    for token in TURN_ENDS:
        token_id = tokenizer.token_to_id(token)
        if template and token in template and token_id is not None:
            ids.append(token_id)
    ids = list(dict.fromkeys(int(i) for i in ids))
    if not template:
        return None
    return ChatSection(
        template,
        end_of_turn_token_ids=tuple(ids),
        end_of_turn_tokens=tuple(tokenizer.id_to_token(i) for i in ids),
    )


def lora_entry(path: Path, slots: dict[str, LoraSlot]) -> Lora:
    """The manifest's `lora` object: the slot graph's file and, per slot, its two input names,
    its input width and the modules it covers with their output rows (docs/GGUF.md)."""
    return Lora(file=path.name, format=LORA_FORMAT, slots=slots)


def _precision(storage: dict, fp32: bool) -> str:
    if fp32:
        return "fp32"
    text = " ".join(storage.values())
    return "int4" if "4-bit" in text else "int8" if "8-bit" in text else "fp32"


def _versions() -> dict:
    from importlib.metadata import version

    return {name: version(name) for name in ("gguf", "onnx", "onnxruntime", "tokenizers", "numpy")}


def _card(manifest: Manifest) -> str:
    """README.md of a GGUF bundle, from its manifest."""
    source, quant = manifest.export.gguf, manifest.export.quantization_report
    return model_card(
        manifest,
        origin=f"Imported from the GGUF file {card_code(source.file)} (sha256 "
        f"`{source.sha256}`) by "
        "`scriptorium export gguf`, without torch or transformers.",
        query_heads=source.metadata_summary.query_heads,
        weights=[
            f"MatMulNBits accuracy level: {quant.accuracy_level}"
            + (
                f", LM head {quant.head_accuracy_level}."
                if quant.head_accuracy_level not in (None, quant.accuracy_level)
                else "."
            ),
            "",
            *[f"- {kind}: {how}" for kind, how in (quant.storage or {}).items()],
            *[f"- note: {note}" for note in quant.notes or ()],
        ],
        no_chat="The GGUF has no chat template.",
    )


def os_error_line(error: OSError) -> str:
    """One line for a failed read or write: the path and what the system said."""
    reason = error.strerror or str(error)
    return f"{error.filename}: {reason}" if error.filename else reason


def export_gguf(
    gguf_path: str | Path,
    out_dir: str | Path,
    fp32: bool = False,
    accuracy_level: int = ACCURACY_LEVEL,
    name: str | None = None,
    parity: bool = True,
    lora_slots: bool = True,
    head_accuracy_level: int | None = None,
) -> Manifest:
    """Write the bundle of `gguf_path` to `out_dir`; returns its manifest. `fp32` dequantizes
    every weight; `accuracy_level` is MatMulNBits' (0 float activations, 4 int8), and
    `head_accuracy_level` the LM head's (None: the same); `parity=False`
    skips the parity report (and the fp32 reference graph it builds, which it leaves out for
    models over REFERENCE_BYTES of float32 weights); `lora_slots` also writes
    model_lora.onnx, the decoder with a zero-rank LoRA slot on every projection that adapter
    bundles fill (export/adapter.py), sharing model.onnx's weights file."""
    if accuracy_level not in (0, 1, 2, 3, 4):
        raise ValueError(f"`accuracy_level` must be one of 0-4, got {accuracy_level!r}")
    if head_accuracy_level not in (None, 0, 1, 2, 3, 4):
        raise ValueError(
            f"`head_accuracy_level` must be one of 0-4 or None, got {head_accuracy_level!r}"
        )
    gguf_path, out_dir = Path(gguf_path), Path(out_dir)
    model = read_gguf(gguf_path)
    tokenizer = build_tokenizer(model.tokenizer)
    prepare_out_dir(out_dir)
    tokenizer.save(str(out_dir / "tokenizer.json"))
    graph = build_llama_graph(
        model,
        out_dir / "model.onnx",
        fp32=fp32,
        accuracy_level=accuracy_level,
        lora_path=out_dir / LORA_GRAPH if lora_slots else None,
        head_accuracy_level=head_accuracy_level,
    )
    report = {}
    if parity:
        with tempfile.TemporaryDirectory() as scratch:
            reference = None
            small = 4 * parameter_count(model) <= REFERENCE_BYTES
            if not fp32 and small:
                reference = Path(scratch) / "reference.onnx"
                build_llama_graph(model, reference, fp32=True)
            report = parity_report(out_dir / "model.onnx", reference, model, tokenizer)
            if not fp32 and not small:
                report["reference"] = (
                    "the graph's own full-sequence pass; no fp32 reference graph, whose float32 "
                    f"weights would take over {REFERENCE_BYTES / 1e9:.1f} GB of memory"
                )
    fields = model.tokenizer
    special = SpecialTokens(
        bos_token_id=_token_id(fields, "bos_token_id"),
        eos_token_id=_token_id(fields, "eos_token_id"),
        pad_token_id=_token_id(fields, "padding_token_id"),
    )
    meta = model.metadata
    manifest = llama_manifest(
        model,
        out_dir,
        name=name or gguf_path.stem,
        precision=_precision(graph["storage"], fp32),
        special_tokens=special,
        add_bos_token=bool(fields.get("tokenizer.ggml.add_bos_token", False)),
        parity=report,
        license=meta.get("general.license") or "",
        chat=chat_info(model, tokenizer),
        lora=lora_entry(out_dir / LORA_GRAPH, graph["lora_slots"]) if lora_slots else None,
        export={
            "source": "gguf",
            "description": f"{model.architecture} model imported from a GGUF file",
            "gguf": {
                "file": gguf_path.name,
                "sha256": sha256_of(gguf_path),
                "size": gguf_path.stat().st_size,
                "metadata": meta,
                "metadata_summary": {"query_heads": model.heads, "kv_heads": model.kv_heads},
                "tokenizer": {
                    "model": fields.get("tokenizer.ggml.model"),
                    "pre": fields.get("tokenizer.ggml.pre"),
                },
            },
            "quantization": {
                "accuracy_level": graph["accuracy_level"],
                "head_accuracy_level": graph["head_accuracy_level"],
                "storage": graph["storage"],
                "notes": graph["notes"],
                "tied_embeddings": graph["tied_embeddings"],
                "summary": ", ".join(f"{k}: {v}" for k, v in graph["storage"].items()),
            },
            "graph": {"nodes": graph["nodes"], "weight_bytes": graph["weight_bytes"]},
            "versions": _versions(),
        },
    )
    return write_bundle(out_dir, manifest, _card(manifest))


def _token_id(fields: dict, key: str) -> int | None:
    value = fields.get(f"tokenizer.ggml.{key}")
    return None if value is None else int(value)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="scriptorium export gguf",
        description="Import a GGUF file as an ONNX model bundle, torch-free. " + supported_gguf(),
    )
    parser.add_argument("gguf_file", help="the .gguf file")
    parser.add_argument("out_dir", help="bundle directory to write (new, empty or a bundle)")
    parser.add_argument("--fp32", action="store_true", help="dequantize every weight to float32")
    parser.add_argument(
        "--accuracy-level",
        type=int,
        default=ACCURACY_LEVEL,
        help=f"MatMulNBits accuracy level: 0 float activations, 4 int8 (default {ACCURACY_LEVEL})",
    )
    parser.add_argument(
        "--head-accuracy-level",
        type=int,
        default=None,
        help="the LM head's MatMulNBits accuracy level (default: --accuracy-level); e.g. "
        "--accuracy-level 0 --head-accuracy-level 4: float activations in the layers, int8 in "
        "the head (docs/GGUF.md, 'accuracy_level')",
    )
    parser.add_argument("--name", help="display name (default: the file name without .gguf)")
    parser.add_argument("--no-parity", action="store_true", help="skip the parity report")
    args = parser.parse_args(argv)
    try:
        manifest = export_gguf(
            args.gguf_file,
            args.out_dir,
            fp32=args.fp32,
            accuracy_level=args.accuracy_level,
            head_accuracy_level=args.head_accuracy_level,
            name=args.name,
            parity=not args.no_parity,
        )
    except (FileNotFoundError, ValueError) as error:
        print(f"scriptorium export gguf: error: {error}", file=sys.stderr)
        return 2
    except OSError as error:  # the disk, not the input: full, read-only, failing
        print(f"scriptorium export gguf: error: {os_error_line(error)}", file=sys.stderr)
        return 1
    print(summary(manifest, args.out_dir))
    return 0
