"""`scriptorium export gguf FILE.gguf OUT_DIR`: a GGUF file (llama, qwen2) to a Scriptorium bundle,
with numpy, onnx, onnxruntime and tokenizers only (no torch, no transformers).

`export_gguf(gguf_path, out_dir)` writes model.onnx (export/lean_llama.py; quantized weights
carried over, or with `fp32` every weight dequantized), tokenizer.json (export/gguf_tokenizer.py),
README.md and manifest.json: task causal-lm, the GGUF's scalar metadata and sha256, the chat
template and end-of-turn token ids, how each GGUF tensor type was stored, and a parity report.

The parity report is torch-free: the bundle's graph against an fp32 graph of the same weights
(for a quantized bundle; what quantized activations cost) and against its own full-sequence pass
(the KV cache path), on a few prompts: max |Δlogit|, teacher-forced top-1 agreement, greedy
continuations. Parity against transformers loading the same GGUF lives in tests/test_gguf.py.

`main` prints one line for every refused input (the field, tensor or path and what was expected;
export/gguf_check.py) and exits with 2, or 1 when the disk fails (full, read-only).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx

from runtime.bundle import LORA_FORMAT

from .gguf_read import GGUFModel, read_gguf
from .gguf_tokenizer import build_tokenizer
from .lean_llama import ACCURACY_LEVEL, build_llama_graph
from .manifest import SCHEMA_VERSION, file_entries, graph_entry
from .quantize import batch_invariant

PARITY_PROMPTS = [
    "The capital of France is",
    "In the beginning God created",
    "def fibonacci(n):",
    "Numbers: 1, 2, 3, 4,",
]
PARITY_NEW_TOKENS = 16
BUNDLE_FILES = (
    "manifest.json",
    "model.onnx",
    "model.onnx.data",
    "model_lora.onnx",
    "tokenizer.json",
    "README.md",
)
LORA_GRAPH = "model_lora.onnx"  # the decoder with LoRA slots, for adapter bundles
# Tokens that end a chat turn when a chat template uses them (besides the GGUF's eos / eot ids).
TURN_ENDS = ("<|im_end|>", "<|eot_id|>", "<|end|>", "<|endoftext|>", "</s>", "<end_of_turn>")


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _session(path: Path, threads: int = 2):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(str(path), sess_options=options, providers=["CPUExecutionProvider"])


def _runtime_model(session, model: GGUFModel):
    from runtime.models import SHARED_BUFFER, CausalLM

    manifest = {
        "num_heads": model.kv_heads,
        "head_size": model.head_size,
        "vocab_size": model.vocab,
        "graphs": {"decoder": {"kv_cache": SHARED_BUFFER}},
    }
    return CausalLM(session, manifest)


def full_logits(session, model: GGUFModel, ids: list[int]) -> np.ndarray:
    """Logits (T, V) of one sequence in a single call with an empty cache."""
    steps = len(ids)
    feeds = {
        "input_ids": np.array([ids], dtype=np.int64),  # (1, T)
        "attention_mask": np.ones((1, steps), dtype=np.int64),
        "seqlens_k": np.array([steps - 1], dtype=np.int32),
        "total_sequence_length": np.array(steps, dtype=np.int32),
        "logits_to_keep": np.array(0, dtype=np.int64),
    }
    empty = np.zeros((1, model.kv_heads, 0, model.head_size), dtype=np.float32)
    for i in range(model.layers):
        feeds[f"past_key_values.{i}.key"] = feeds[f"past_key_values.{i}.value"] = empty
    return session.run(["logits"], feeds)[0][0]


def greedy(session, model: GGUFModel, ids: list[int], new_tokens: int) -> tuple[list, np.ndarray]:
    """Greedy continuation through the runtime's cached decoding; and each step's logits (n, V)."""
    lm = _runtime_model(session, model)
    logits, state = lm.start(np.array([ids], dtype=np.int64), np.ones((1, len(ids)), np.int64))
    tokens, steps = [], []
    for _ in range(new_tokens):
        steps.append(logits[0])
        tokens.append(int(logits[0].argmax()))
        logits, state = lm.step(np.array([tokens[-1]]), state)
    return tokens, np.stack(steps)


def parity_report(graph: Path, reference: Path | None, model: GGUFModel, tokenizer) -> dict:
    """The bundle graph against `reference` (an fp32 graph of the same weights; None for an fp32
    bundle) and its cached decoding against its own full-sequence pass."""
    session = _session(graph)
    other = _session(reference) if reference is not None else None
    diffs, agree, total, cached, identical, scale = [], 0, 0, [], 0, 0.0
    for prompt in PARITY_PROMPTS:
        ids = tokenizer.encode(prompt).ids
        tokens, step_logits = greedy(session, model, ids, PARITY_NEW_TOKENS)
        sequence = ids + tokens
        ours = full_logits(session, model, sequence)  # (T, V)
        # The cached steps saw the same prefixes as the full pass's last positions.
        cached.append(float(np.abs(ours[len(ids) - 1 : -1] - step_logits).max()))
        scale = max(scale, float(np.abs(ours).max()))
        if other is None:
            continue
        theirs = full_logits(other, model, sequence)
        diffs.append(float(np.abs(ours - theirs).max()))
        agree += int((ours.argmax(-1) == theirs.argmax(-1)).sum())
        total += len(sequence)
        identical += greedy(other, model, ids, PARITY_NEW_TOKENS)[0] == tokens
    report = {
        "prompts": len(PARITY_PROMPTS),
        "new_tokens": PARITY_NEW_TOKENS,
        "max_abs_logit": scale,
        "cached_step_max_abs_diff": max(cached),
    }
    if other is not None:
        report.update(
            reference="an fp32 graph of the same weights, dequantized from the GGUF",
            max_abs_logit_diff=max(diffs),
            top1_agreement=agree / total,
            greedy_identical=f"{identical} / {len(PARITY_PROMPTS)}",
        )
    else:
        report["reference"] = "the graph's own full-sequence pass (fp32 bundle)"
    return report


def chat_info(model: GGUFModel, tokenizer) -> dict:
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
    return {
        "template": template,
        "end_of_turn_token_ids": ids,
        "end_of_turn_tokens": [tokenizer.id_to_token(i) for i in ids],
    }


def lora_entry(path: Path, slots: dict) -> dict:
    """The manifest's `lora` object: the slot graph's file and, per slot, its two input names,
    its input width and the modules it covers with their output rows (docs/GGUF.md)."""
    return {"file": path.name, "format": LORA_FORMAT, "slots": slots}


def _precision(storage: dict, fp32: bool) -> str:
    if fp32:
        return "fp32"
    text = " ".join(storage.values())
    return "int4" if "4-bit" in text else "int8" if "8-bit" in text else "fp32"


def _versions() -> dict:
    from importlib.metadata import version

    return {name: version(name) for name in ("gguf", "onnx", "onnxruntime", "tokenizers", "numpy")}


def _parity_lines(parity: dict) -> list[str]:
    if not parity:
        return ["Not measured (exported without the parity report)."]
    lines = [
        f"Reference: {parity['reference']}; {parity['prompts']} prompts, "
        f"{parity['new_tokens']} greedy tokens each.",
        "",
        "| | |",
        "|---|---|",
        f"| largest abs logit (scale) | {parity['max_abs_logit']:.4g} |",
        f"| cached steps vs full pass, max abs Δlogit | {parity['cached_step_max_abs_diff']:.3g} |",
    ]
    if "max_abs_logit_diff" in parity:
        lines += [
            f"| max abs Δlogit vs reference | {parity['max_abs_logit_diff']:.4g} |",
            f"| teacher-forced top-1 agreement | {parity['top1_agreement']:.4f} |",
            f"| greedy continuations identical | {parity['greedy_identical']} |",
        ]
    return lines


def model_card(manifest: dict) -> str:
    """README.md of a GGUF bundle, from its manifest."""
    export, source = manifest["export"], manifest["export"]["gguf"]
    quant, parity = export["quantization"], manifest["parity"]
    lines = [
        f"# {manifest['name']}",
        "",
        f"Imported from the GGUF file `{source['file']}` (sha256 `{source['sha256']}`) by "
        "`scriptorium export gguf`, without torch or transformers.",
        "",
        "| | |",
        "|---|---|",
        f"| architecture | {manifest['architecture']} |",
        f"| layers × KV heads × head size | {manifest['num_layers']} × {manifest['num_heads']} × "
        f"{manifest['head_size']} ({source['metadata_summary']['query_heads']} query heads) |",
        f"| hidden size | {manifest['hidden_size']} |",
        f"| vocabulary | {manifest['vocab_size']} |",
        f"| context length | {manifest['context_length']} |",
        f"| precision | {manifest['precision']} |",
        f"| licence | {manifest.get('license') or 'not stated'} |",
        "",
        "## Weights",
        "",
        f"MatMulNBits accuracy level: {quant['accuracy_level']}.",
        "",
        *[f"- {kind}: {how}" for kind, how in quant["storage"].items()],
        *[f"- note: {note}" for note in quant["notes"]],
        "",
        "## Parity",
        "",
        *_parity_lines(parity),
    ]
    chat = manifest["chat"]
    lines += ["", "## Chat", ""]
    if chat["template"]:
        lines += [f"End-of-turn tokens: {', '.join(f'`{t}`' for t in chat['end_of_turn_tokens'])}."]
    else:
        lines += ["The GGUF has no chat template."]
    lines += ["", "## Licence", "", manifest.get("license") or "Not stated.", ""]
    return "\n".join(lines)


def os_error_line(error: OSError) -> str:
    """One line for a failed read or write: the path and what the system said."""
    reason = error.strerror or str(error)
    return f"{error.filename}: {reason}" if error.filename else reason


def _prepare(out_dir: Path) -> None:
    if out_dir.exists():
        if not out_dir.is_dir():
            raise ValueError(f"`out_dir` must be a directory, got the file {out_dir}")
        existing = list(out_dir.iterdir())
        if any(path.name not in BUNDLE_FILES for path in existing):
            raise ValueError(
                f"`out_dir` must be new, empty or hold only bundle files {list(BUNDLE_FILES)}, "
                f"got {out_dir}"
            )
        for path in existing:
            path.unlink()
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError) as error:  # a file on the way
        raise ValueError(
            f"`out_dir` must be a directory we can create, got {out_dir}: {error.strerror}"
        ) from None


def export_gguf(
    gguf_path: str | Path,
    out_dir: str | Path,
    fp32: bool = False,
    accuracy_level: int = ACCURACY_LEVEL,
    name: str | None = None,
    parity: bool = True,
    lora_slots: bool = True,
) -> dict:
    """Write the bundle of `gguf_path` to `out_dir`; returns its manifest. `fp32` dequantizes
    every weight; `accuracy_level` is MatMulNBits' (0 float activations, 4 int8); `parity=False`
    skips the parity report (and the fp32 reference graph it builds); `lora_slots` also writes
    model_lora.onnx, the decoder with a zero-rank LoRA slot on every projection that adapter
    bundles fill (export/adapter.py), sharing model.onnx's weights file."""
    if accuracy_level not in (0, 1, 2, 3, 4):
        raise ValueError(f"`accuracy_level` must be one of 0-4, got {accuracy_level!r}")
    gguf_path, out_dir = Path(gguf_path), Path(out_dir)
    model = read_gguf(gguf_path)
    tokenizer = build_tokenizer(model.tokenizer)
    _prepare(out_dir)
    tokenizer.save(str(out_dir / "tokenizer.json"))
    graph = build_llama_graph(
        model,
        out_dir / "model.onnx",
        fp32=fp32,
        accuracy_level=accuracy_level,
        lora_path=out_dir / LORA_GRAPH if lora_slots else None,
    )
    report = {}
    if parity:
        with tempfile.TemporaryDirectory() as scratch:
            reference = None
            if not fp32:
                reference = Path(scratch) / "reference.onnx"
                build_llama_graph(model, reference, fp32=True)
            report = parity_report(out_dir / "model.onnx", reference, model, tokenizer)
    fields = model.tokenizer
    special = {
        "bos_token_id": fields.get("tokenizer.ggml.bos_token_id"),
        "eos_token_id": fields.get("tokenizer.ggml.eos_token_id"),
        "pad_token_id": fields.get("tokenizer.ggml.padding_token_id"),
        "decoder_start_token_id": None,
    }
    meta = model.metadata
    manifest = {
        "schema_version": SCHEMA_VERSION,
        "name": name or gguf_path.stem,
        "task": "causal-lm",
        "architecture": model.architecture,
        "precision": _precision(graph["storage"], fp32),
        "graphs": {"decoder": graph_entry("model.onnx", out_dir / "model.onnx")},
        "batch_invariant": batch_invariant(onnx.load(str(out_dir / "model.onnx"))),
        "num_layers": model.layers,
        "num_heads": model.kv_heads,
        "head_size": model.head_size,
        "hidden_size": model.hidden,
        "vocab_size": model.vocab,
        "context_length": model.context,
        "special_tokens": {k: None if v is None else int(v) for k, v in special.items()},
        "add_bos_token": bool(fields.get("tokenizer.ggml.add_bos_token", False)),
        "controls": {},
        "generation_defaults": {},
        "parity": report,
        "metrics": {},
        "training_data": {},
        "license": meta.get("general.license"),
        "chat": chat_info(model, tokenizer),
        **({"lora": lora_entry(out_dir / LORA_GRAPH, graph["lora_slots"])} if lora_slots else {}),
        "export": {
            "source": "gguf",
            "description": f"{model.architecture} model imported from a GGUF file",
            "gguf": {
                "file": gguf_path.name,
                "sha256": sha256_file(gguf_path),
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
                "storage": graph["storage"],
                "notes": graph["notes"],
                "tied_embeddings": graph["tied_embeddings"],
                "summary": ", ".join(f"{k}: {v}" for k, v in graph["storage"].items()),
            },
            "graph": {"nodes": graph["nodes"], "weight_bytes": graph["weight_bytes"]},
            "versions": _versions(),
        },
    }
    (out_dir / "README.md").write_text(model_card(manifest))
    manifest["files"] = file_entries(out_dir)
    (out_dir / "manifest.json").write_text(json.dumps(manifest, indent=2, default=str) + "\n")
    return manifest


def summary(manifest: dict, out_dir: str) -> str:
    size = sum(entry["size"] for entry in manifest["files"].values())
    parity = manifest["parity"]
    lines = [
        f"wrote {manifest['name']} ({manifest['architecture']}, {manifest['precision']}) to "
        f"{out_dir}: {len(manifest['files'])} files, {size / 1e6:.1f} MB",
        f"weights: {manifest['export']['quantization']['summary']}",
    ]
    if "max_abs_logit_diff" in parity:
        lines.append(
            f"vs fp32 graph of the same weights: max |Δlogit| {parity['max_abs_logit_diff']:.3g} "
            f"(scale {parity['max_abs_logit']:.3g}), top-1 agreement "
            f"{parity['top1_agreement']:.4f}, greedy identical {parity['greedy_identical']}"
        )
    if parity:
        lines.append(
            f"cached steps vs full pass: max |Δlogit| {parity['cached_step_max_abs_diff']:.3g}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="scriptorium export gguf",
        description="Import a GGUF file (llama, qwen2) as an ONNX model bundle, torch-free.",
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
    parser.add_argument("--name", help="display name (default: the file name without .gguf)")
    parser.add_argument("--no-parity", action="store_true", help="skip the parity report")
    args = parser.parse_args(argv)
    try:
        manifest = export_gguf(
            args.gguf_file,
            args.out_dir,
            fp32=args.fp32,
            accuracy_level=args.accuracy_level,
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
