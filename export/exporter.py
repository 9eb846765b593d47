"""`export_bundle`: a local Hugging Face checkpoint -> an ONNX model bundle (docs/bundle.md).

The steps, each shown as a progress step:

1. export   - optimum-onnx's `main_export` with KV cache: `model.onnx` for a causal LM (past may
              have length 0 on the first step), or encoder, decoder and decoder-with-past
              for seq2seq.
2. optimize - GPT-2, BART and mBART decoders are rebuilt as lean fused graphs with the same
              interface (export/lean/gpt2.py, export/lean/bart.py); other graphs (the seq2seq
              encoder, other architectures) go through onnxruntime's transformer optimizer
              where it has fusions for the architecture (convert/optimize.py). Either result is
              kept only if it loads and its logits agree with PyTorch at least as well as
              optimum's graphs (same argmax everywhere, max |Δlogit| within
              `OPTIMIZER_TOLERANCE` of the logit scale); otherwise the graphs before it are
              used and the reason is recorded.
3. quantize - int8 / int4 per graph (convert/quantize.py); seq2seq decoders are merged into
              `decoder_model_merged.onnx` after quantizing.
4. parity   - logits, greedy tokens (through `runtime.load`) and perplexity against PyTorch
              (export/parity.py). An fp32 bundle whose greedy tokens differ is an error.
5. write    - manifest.json (checksums of every file) and the README.md model card.

What optimum-onnx 0.1.0 writes, and so what bundles hold (graph inputs -> outputs):
- causal LM (GPT-2): one `model.onnx`, input_ids, past_key_values.{i}.key|value (batch, heads,
  past, head_size; past = 0 on the first step), attention_mask (batch, past + seq), position_ids
  -> logits, present.{i}.key|value. position_ids is an input for GPT-2, Llama, GPT-NeoX; OPT and
  BLOOM have none (the runtime reads the graph's inputs). GQA models cache num_key_value_heads.
- seq2seq (BART, T5, Marian): encoder_model.onnx input_ids, attention_mask -> last_hidden_state;
  decoder_model.onnx and decoder_with_past_model.onnx, which the bundle merges into
  decoder_model_merged.onnx: encoder_attention_mask, input_ids, encoder_hidden_states,
  past_key_values.{i}.decoder|encoder.key|value, use_cache_branch -> logits,
  present.{i}.decoder|encoder.key|value.

This module does not train, and it does not handle graphs over 2 GB (external data).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import shutil
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path

import onnx
from tqdm.auto import tqdm

from convert import manifest as bundle_manifest
from convert.hf_checkpoint import export_hf_llama, is_hf_llama
from convert.optimize import OPTIMIZER_MODEL_TYPES, optimize_graph
from convert.quantize import (
    INT4_FORMAT,
    INT8_FORMAT,
    INT8_NBITS_FORMAT,
    batch_invariant,
    check_int4_available,
    merge_decoder_pair,
    quantize_graph,
)
from runtime.manifest import Manifest, SpecialTokens

from .parity import OnnxModel, Reference, check_bundle, logit_parity

PRECISIONS = bundle_manifest.PRECISIONS
EMBEDDINGS_FILE = "embeddings.npy"
OPTIMUM_TASKS = {
    "causal-lm": "text-generation-with-past",
    "seq2seq": "text2text-generation-with-past",
}
WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)
# Bundle file of each graph role (docs/bundle.md).
BUNDLE_FILES = {"decoder": "model.onnx"}
SEQ2SEQ_BUNDLE_FILES = {"encoder": "encoder_model.onnx", "decoder": "decoder_model_merged.onnx"}
# optimum-onnx's file of each graph before merging.
OPTIMUM_FILES = {
    "causal-lm": {"decoder": "model.onnx"},
    "seq2seq": {
        "encoder": "encoder_model.onnx",
        "decoder": "decoder_model.onnx",
        "decoder_with_past": "decoder_with_past_model.onnx",
    },
}
# Optimized graphs may differ from PyTorch by up to twice the unoptimized graphs' max |Δlogit|, or
# by this fraction of the largest |logit|, whichever is larger.
OPTIMIZER_TOLERANCE = 1e-4
# Architectures with a lean decoder graph, and the fused operators each one's report counts.
LEAN_FUSED_OPS = {
    "gpt2": ("GroupQueryAttention", "SkipLayerNormalization", "FastGelu"),
    "bart": ("MultiHeadAttention", "SkipLayerNormalization", "BiasGelu"),
    "mbart": ("MultiHeadAttention", "SkipLayerNormalization", "BiasGelu"),
}
LEAN_ARCHITECTURES = tuple(LEAN_FUSED_OPS)
STEPS = ("export", "optimize", "quantize", "parity", "write")


class ParityError(RuntimeError):
    """The exported graphs do not reproduce the PyTorch model."""


class OptimumError(RuntimeError):
    """optimum-onnx failed to export the checkpoint; the message names the model and the cause."""


@dataclass
class Checkpoint:
    path: Path
    config: dict  # config.json
    generation: dict  # generation_config.json ({} if absent)
    architecture: str  # model_type
    task: str  # "causal-lm" or "seq2seq"


def supported_architectures() -> dict[str, list[str]]:
    """model_types optimum-onnx exports with KV cache, per bundle task."""
    import optimum.exporters.onnx.model_configs  # noqa: F401  (registers the ONNX configs)
    from optimum.exporters.tasks import TasksManager

    types = TasksManager._LIBRARY_TO_SUPPORTED_MODEL_TYPES["transformers"]
    return {
        task: sorted(t for t, exporters in types.items() if optimum in exporters.get("onnx", {}))
        for task, optimum in OPTIMUM_TASKS.items()
    }


def inspect_checkpoint(model_dir: Path) -> Checkpoint:
    """Check that `model_dir` is a checkpoint we can export; raise a clear error if not."""
    if not model_dir.is_dir():
        raise FileNotFoundError(f"model directory not found: {model_dir}")
    config_path = model_dir / "config.json"
    if not config_path.exists():
        raise FileNotFoundError(
            f"config.json missing in {model_dir}: not a Hugging Face checkpoint"
        )
    if not any((model_dir / name).exists() for name in WEIGHT_FILES):
        raise FileNotFoundError(
            f"no weights in {model_dir}: expected one of {', '.join(WEIGHT_FILES)}"
        )
    config = bundle_manifest.load_json(config_path, "model config")
    generation_path = model_dir / "generation_config.json"
    generation = (
        bundle_manifest.load_json(generation_path, "generation config")
        if generation_path.exists()
        else {}
    )
    task = "seq2seq" if config.get("is_encoder_decoder") else "causal-lm"
    architecture = config.get("model_type")
    supported = supported_architectures()
    if architecture not in supported[task]:
        raise ValueError(
            f"architecture {architecture!r} ({task}) is not supported: export needs a text "
            f"generator that optimum-onnx exports with a KV cache. Supported causal-lm: "
            f"{', '.join(supported['causal-lm'])}. Supported seq2seq: "
            f"{', '.join(supported['seq2seq'])}."
        )
    return Checkpoint(model_dir, config, generation, architecture, task)


@contextlib.contextmanager
def quiet():
    """Silence tracer warnings and info logs of torch/transformers/optimum (errors still show)."""
    import transformers

    names = ("optimum", "onnxruntime", "torch.onnx")
    saved = {name: logging.getLogger(name).level for name in names}
    verbosity = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()
    for name in names:
        logging.getLogger(name).setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        transformers.logging.set_verbosity(verbosity)
        for name, level in saved.items():
            logging.getLogger(name).setLevel(level)


def _load_tokenizer(model_dir: Path, target: Path):
    """Write the bundle's tokenizer.json; return the checkpoint's transformers tokenizer.

    tokenizer.json is copied when the checkpoint has one; otherwise transformers' fast tokenizer
    (converted from the slow one when possible, e.g. SentencePiece) is saved.
    """
    from transformers import AutoTokenizer

    try:
        with quiet():
            hf_tokenizer = AutoTokenizer.from_pretrained(model_dir)
    except Exception as error:  # transformers raises OSError, ValueError, TypeError, …
        raise FileNotFoundError(
            f"no usable tokenizer in {model_dir}: no tokenizer.json, and transformers could not "
            f"load one ({type(error).__name__}: {error})"
        ) from error
    source = model_dir / "tokenizer.json"
    if source.exists():
        shutil.copyfile(source, target)
    elif hf_tokenizer.is_fast:
        hf_tokenizer.backend_tokenizer.save(str(target))
    else:
        raise FileNotFoundError(
            f"no tokenizer.json in {model_dir}, and its {type(hf_tokenizer).__name__} has no "
            "fast (tokenizers) version to convert to"
        )
    return hf_tokenizer


def _check_out_dir(out_dir: Path, model_dir: Path) -> None:
    """Refuse an output path that is not new, empty, or a previous bundle (which is replaced)."""
    if out_dir.resolve() == model_dir.resolve():
        raise ValueError(f"output directory must differ from the model directory, got {out_dir}")
    if not out_dir.exists():
        return
    if not out_dir.is_dir():
        raise ValueError(f"output path exists and is not a directory: {out_dir}")
    entries = list(out_dir.iterdir())
    if entries and not (out_dir / "manifest.json").exists():
        raise ValueError(
            f"output directory {out_dir} is not empty and holds no bundle; "
            "choose a new or empty directory"
        )
    subdirs = [entry.name for entry in entries if entry.is_dir()]
    if subdirs:
        raise ValueError(f"output directory {out_dir} holds subdirectories: {subdirs}")


def _install(staging: Path, out_dir: Path) -> None:
    """Move the finished bundle from `staging` into `out_dir`, replacing a previous bundle."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for entry in out_dir.iterdir():
        entry.unlink()
    for entry in staging.iterdir():
        shutil.move(str(entry), out_dir / entry.name)


def _run_optimum(checkpoint: Checkpoint, target: Path) -> dict[str, Path]:
    from optimum.exporters.onnx import main_export

    try:
        with quiet():
            main_export(
                str(checkpoint.path),
                output=target,
                task=OPTIMUM_TASKS[checkpoint.task],
                do_validation=False,
                library_name="transformers",
            )
    except Exception as error:  # the tracer and the model raise anything; the user gets one line
        lines = str(error).strip().splitlines()
        raise OptimumError(
            f"optimum-onnx could not export {checkpoint.path.name} ({checkpoint.architecture}): "
            f"{type(error).__name__}: {lines[0] if lines else 'no message'}"
        ) from error
    large = sorted(p.name for p in target.iterdir() if p.suffix == ".onnx_data")
    if large:
        raise ValueError(f"graphs over 2 GB (external data {large}) are out of scope for bundles")
    return {role: target / name for role, name in OPTIMUM_FILES[checkpoint.task].items()}


def _check_layout(graphs: dict[str, Path], task: str, num_layers: int) -> None:
    """Raise unless optimum's decoder has the cache input/output names the bundle contract names."""
    decoder = bundle_manifest.graph_entry(
        "decoder", graphs["decoder_with_past" if task == "seq2seq" else "decoder"]
    )
    kinds = (".key", ".value") if task == "causal-lm" else (".decoder.key", ".decoder.value")
    expected = {"input_ids", "logits"}
    expected |= {f"past_key_values.{i}{k}" for i in range(num_layers) for k in kinds}
    expected |= {f"present.{i}{k}" for i in range(num_layers) for k in kinds}
    missing = sorted(expected - set(decoder.inputs) - set(decoder.outputs))
    if missing:
        raise ValueError(
            f"the exported decoder does not follow the bundle layout (docs/bundle.md): missing "
            f"{missing[:4]}; its inputs are {list(decoder.inputs[:8])}. This architecture's KV "
            "cache layout is not supported by the runtime."
        )


def _assemble(graphs: dict[str, Path], task: str, target: Path) -> dict[str, Path]:
    """Bundle-layout graphs in `target`: model.onnx, or encoder + merged decoder."""
    target.mkdir(parents=True, exist_ok=True)
    if task == "causal-lm":
        path = target / BUNDLE_FILES["decoder"]
        shutil.copyfile(graphs["decoder"], path)
        return {"decoder": path}
    encoder = target / SEQ2SEQ_BUNDLE_FILES["encoder"]
    shutil.copyfile(graphs["encoder"], encoder)
    decoder = target / SEQ2SEQ_BUNDLE_FILES["decoder"]
    merge_decoder_pair(graphs["decoder"], graphs["decoder_with_past"], decoder)
    return {"encoder": encoder, "decoder": decoder}


def _optimize(checkpoint, graphs, shape, ref, work: Path) -> tuple[dict[str, Path], dict]:
    """Optimized graphs if they pass the parity check, else the originals; plus a report.

    GPT-2, BART and mBART decoders get the lean fused graphs of export/lean/gpt2.py and
    export/lean/bart.py (attention fused, 9 to 15 nodes per layer); other architectures, configs
    the lean graphs do not cover, and the seq2seq encoder go through onnxruntime's transformer
    optimizer.
    """
    lean_note, parities = None, {}
    if checkpoint.architecture in LEAN_ARCHITECTURES:
        base, base_report = graphs, None
        if checkpoint.task == "seq2seq":  # no lean encoder: the optimizer serves it
            base, base_report = _ort_optimize(checkpoint, graphs, shape, ref, work, parities)
        lean, report = _lean(checkpoint, base, ref, work, parities)
        if lean is not None:
            if base_report:
                report["encoder"] = base_report["summary"]
            return lean, report
        lean_note = report["summary"]
        if base_report:
            base_report["lean_graph"] = lean_note
            return base, base_report
    optimized, report = _ort_optimize(checkpoint, graphs, shape, ref, work, parities)
    if lean_note:
        report["lean_graph"] = lean_note
    return optimized, report


def _parity(graphs: dict[str, Path], ref, target: Path, parities: dict | None) -> dict:
    """`logit_parity` of `graphs` assembled in `target`; `parities` keeps results by graph files,
    so one export checks each set of graphs once."""
    key = tuple(sorted((role, str(path)) for role, path in graphs.items()))
    if parities is not None and key in parities:
        return parities[key]
    with quiet():
        result = logit_parity(OnnxModel(_assemble(graphs, ref.task, target), ref.task), ref)
    if parities is not None:
        parities[key] = result
    return result


def worst_logit_diff(parity: dict) -> float:
    """max |Δlogit| of a parity report: a generation graph's worse of prefill and cached step
    (`logit_parity`), or a fill-mask graph's one pass (export/fill_mask.py's `parity`)."""
    if "max_abs_logit_diff" in parity:
        return parity["max_abs_logit_diff"]
    return max(parity["prefill_max_abs_diff"], parity["cached_step_max_abs_diff"])


def parity_holds(before: dict, after: dict) -> tuple[bool, float, float]:
    """Whether graphs with parity `after` match PyTorch at least as well as those with `before`:
    no lower argmax agreement, and max |Δlogit| within twice `before`'s or `OPTIMIZER_TOLERANCE`
    of the logit scale. Also returns both max |Δlogit| (after, before)."""
    worst, baseline = worst_logit_diff(after), worst_logit_diff(before)
    allowed = max(2 * baseline, OPTIMIZER_TOLERANCE * max(1.0, after["max_abs_logit"]))
    holds = after["argmax_agreement"] >= before["argmax_agreement"] and worst <= allowed
    return holds, worst, baseline


def _lean(
    checkpoint, graphs, ref, work: Path, parities: dict
) -> tuple[dict[str, Path] | None, dict]:
    """`graphs` with the lean decoder graph(s) in place of optimum's, if they build and match
    PyTorch as well as optimum's do."""
    target = work / "lean"
    target.mkdir(parents=True, exist_ok=True)
    lean = dict(graphs)
    try:
        if checkpoint.architecture == "gpt2":
            from .lean.gpt2 import build_gpt2_graph

            lean["decoder"] = target / "model.onnx"
            build_gpt2_graph(ref.model, lean["decoder"])
        else:
            from .lean.bart import build_bart_decoders

            lean["decoder"] = target / "decoder_model.onnx"
            lean["decoder_with_past"] = target / "decoder_with_past_model.onnx"
            build_bart_decoders(ref.model, lean["decoder"], lean["decoder_with_past"])
        before = _parity(graphs, ref, work / "a", parities)
        after = _parity(lean, ref, work / "b", parities)
    except ValueError as error:  # an option the lean graph does not reproduce
        return None, {"summary": f"not used: {error}"}
    holds, worst, baseline = parity_holds(before, after)
    if not holds:
        return None, {"summary": f"not used: max |Δlogit| {worst:.3g} (optimum {baseline:.3g})"}
    # The graph that runs every step: the causal LM's, or the seq2seq decoder with past.
    role = "decoder_with_past" if checkpoint.task == "seq2seq" else "decoder"
    optimum_nodes = onnx.load(str(graphs[role]), load_external_data=False).graph.node
    lean_nodes = onnx.load(str(lean[role]), load_external_data=False).graph.node
    fused_ops = LEAN_FUSED_OPS[checkpoint.architecture]
    return lean, {
        "applied": True,
        "graph": "lean",
        "fused": {op: sum(n.op_type == op for n in lean_nodes) for op in fused_ops},
        "nodes_before": len(optimum_nodes),
        "nodes_after": len(lean_nodes),
        "max_abs_logit_diff": {"unoptimized": baseline, "optimized": worst},
        "summary": f"yes, lean {checkpoint.architecture} graph ({', '.join(fused_ops)}): "
        f"{len(optimum_nodes)} → {len(lean_nodes)} nodes per step",
    }


def _ort_optimize(
    checkpoint, graphs, shape, ref, work: Path, parities: dict | None = None
) -> tuple[dict[str, Path], dict]:
    """onnxruntime's transformer optimizer, kept only if parity holds (`parities`: see
    `_parity`)."""
    architecture = checkpoint.architecture
    if architecture not in OPTIMIZER_MODEL_TYPES:
        summary = f"no (the optimizer has no fusions for {architecture})"
        return graphs, {"applied": False, "summary": summary}
    config = checkpoint.config
    query_heads = bundle_manifest.config_value(config, "num_attention_heads", "n_head", "num_heads")
    if checkpoint.task == "seq2seq":
        query_heads = bundle_manifest.config_value(
            config, "decoder_attention_heads", "num_heads", default=query_heads
        )
    optimized, fused, nodes = {}, {}, [0, 0]
    try:
        for role, path in graphs.items():
            target = work / "optimized" / path.name
            target.parent.mkdir(parents=True, exist_ok=True)
            info = optimize_graph(path, target, architecture, query_heads, shape["hidden_size"])
            optimized[role] = target
            nodes = [nodes[0] + info["nodes_before"], nodes[1] + info["nodes_after"]]
            for op, count in info["fused"].items():
                fused[op] = fused.get(op, 0) + count
        before = _parity(graphs, ref, work / "a", parities)
        after = _parity(optimized, ref, work / "b", parities)
    except Exception as error:  # optimizer bugs and graphs that fail to load come in many types
        reason = f"{type(error).__name__}: {str(error).splitlines()[0][:200]}"
        return graphs, {
            "applied": False,
            "model_type": OPTIMIZER_MODEL_TYPES[architecture],
            "fallback": reason,
            "summary": f"no (fell back to the unoptimized graphs: {reason})",
        }
    holds, worst, baseline = parity_holds(before, after)
    report = {
        "model_type": OPTIMIZER_MODEL_TYPES[architecture],
        "fused": fused,
        "nodes_before": nodes[0],
        "nodes_after": nodes[1],
        "max_abs_logit_diff": {"unoptimized": baseline, "optimized": worst},
    }
    if not holds:
        reason = (
            f"parity got worse: max |Δlogit| {worst:.3g} (unoptimized {baseline:.3g}), "
            f"argmax agreement {after['argmax_agreement']:.3f} "
            f"(unoptimized {before['argmax_agreement']:.3f})"
        )
        report.update(applied=False, fallback=reason, summary=f"no (fell back: {reason})")
        return graphs, report
    fused_text = ", ".join(f"{op} × {n}" for op, n in fused.items()) or "no fused operators"
    report.update(
        applied=True,
        summary=f"yes, model type {report['model_type']}: {fused_text}; "
        f"{nodes[0]} → {nodes[1]} nodes",
    )
    return optimized, report


def _quantize(graphs, precision, keep_lm_head, task, work: Path) -> tuple[dict[str, Path], dict]:
    """Quantized graphs and the report; a causal LM's int8 is weight-only MatMulNBits (each row
    computed alone, so continuous batching never changes a result), seq2seq keeps dynamic int8."""
    if precision == "fp32":
        return graphs, {"summary": "none (float32)"}
    weight_only = task == "causal-lm"
    quantized, per_graph = {}, {}
    for role, path in graphs.items():
        target = work / "quantized" / path.name
        target.parent.mkdir(parents=True, exist_ok=True)
        with quiet():
            per_graph[role] = quantize_graph(path, target, precision, keep_lm_head, weight_only)
        quantized[role] = target
    method = {
        "int8": f"weight-only int8 MatMulNBits ({INT8_NBITS_FORMAT})"
        if weight_only
        else f"dynamic int8 ({INT8_FORMAT}, MatMul)",
        "int4": f"weight-only int4 MatMulNBits ({INT4_FORMAT})",
    }[precision]
    head = "kept in float32" if keep_lm_head else "quantized"
    return quantized, {
        "method": method,
        "graphs": per_graph,
        "summary": f"{method}; LM head {head}",
    }


def _load_reference(
    checkpoint: Checkpoint, hf_tokenizer, special: dict, context_length: int
) -> Reference:
    import torch
    from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM

    auto = AutoModelForSeq2SeqLM if checkpoint.task == "seq2seq" else AutoModelForCausalLM
    with quiet():
        model = auto.from_pretrained(checkpoint.path, dtype=torch.float32).eval()
    return Reference(
        model=model,
        tokenizer=hf_tokenizer,
        task=checkpoint.task,
        special_tokens=special,
        context_length=context_length,
    )


def _load_controls(model_dir: Path, controls) -> dict:
    if controls is None:
        path = model_dir / bundle_manifest.CONTROLS_FILE
        return bundle_manifest.load_json(path, "controls") if path.exists() else {}
    if isinstance(controls, (str, Path)):
        path = Path(controls)
        if not path.exists():
            raise FileNotFoundError(f"controls file not found: {path}")
        return bundle_manifest.load_json(path, "controls")
    if not isinstance(controls, dict):
        raise ValueError(f"`controls` must be a dict, a JSON file path or None, got {controls!r}")
    return controls


def export_bundle(
    model_dir,
    out_dir,
    precision: str = "fp32",
    optimize: bool = True,
    name: str | None = None,
    controls: dict | str | Path | None = None,
    keep_lm_head: bool = False,
    progress: bool = True,
) -> Manifest:
    """Export the checkpoint in `model_dir` to a bundle in `out_dir`; return its manifest.

    precision: "fp32", "int8" (weight-only 8-bit MatMulNBits for a causal LM, dynamic for
        seq2seq) or "int4" (weight-only MatMulNBits).
    optimize: run onnxruntime's transformer optimizer (kept only if parity holds).
    name: display name; default `name` in scriptorium_card.json, else the directory name.
    controls: control tokens (docs/bundle.md) as a dict or JSON path; default
        MODEL_DIR/scriptorium_controls.json if present, else none.
    keep_lm_head: leave the LM head in float32 when quantizing.
    Raises FileNotFoundError / ValueError for unusable inputs and ParityError when an fp32
    export does not reproduce PyTorch's greedy tokens. A llama / qwen2 checkpoint is exported
    by `convert.hf_checkpoint.export_hf_llama` instead (the lean Llama graph, without optimum).
    """
    model_dir, out_dir = Path(model_dir), Path(out_dir)
    if precision not in PRECISIONS:
        raise ValueError(f"`precision` must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    if is_hf_llama(model_dir):  # the lean Llama graph, converted without torch
        if controls is not None:
            raise ValueError("`controls` is not supported for llama / qwen2 checkpoints")
        return export_hf_llama(model_dir, out_dir, precision, name=name, keep_lm_head=keep_lm_head)
    checkpoint = inspect_checkpoint(model_dir)
    if precision == "int4" or (precision == "int8" and checkpoint.task == "causal-lm"):
        check_int4_available()
    controls = _load_controls(model_dir, controls)
    card_path = model_dir / bundle_manifest.CARD_FILE
    card = bundle_manifest.load_json(card_path, "model card") if card_path.exists() else {}
    _check_out_dir(out_dir, model_dir)
    bar = tqdm(total=len(STEPS), desc="export", unit="step", disable=not progress)
    with tempfile.TemporaryDirectory(prefix="scriptorium-export-") as tmp, bar:
        # The bundle is built (and checked) in a staging directory and moved to `out_dir` only
        # when complete, so a failed export never leaves a half-written or broken bundle.
        work = Path(tmp)
        staging = work / "bundle"
        staging.mkdir()
        manifest = _export(
            checkpoint, staging, work, bar, precision, optimize, name, controls, card, keep_lm_head
        )
        _install(staging, out_dir)
    return manifest


def _export(
    checkpoint, staging, work, bar, precision, optimize, name, controls, card, keep_lm_head
) -> Manifest:
    from tokenizers import Tokenizer

    bar.set_postfix_str(STEPS[0])
    hf_tokenizer = _load_tokenizer(checkpoint.path, staging / "tokenizer.json")
    tokenizer = Tokenizer.from_file(str(staging / "tokenizer.json"))
    shape = bundle_manifest.model_shape(checkpoint.config, checkpoint.task)
    special = bundle_manifest.special_tokens(checkpoint.config, checkpoint.generation, hf_tokenizer)
    add_bos = checkpoint.task == "causal-lm" and bundle_manifest.add_bos_token(
        hf_tokenizer, tokenizer, special["bos_token_id"]
    )
    controls = bundle_manifest.check_controls(controls, tokenizer)
    graphs = _run_optimum(checkpoint, work / "optimum")
    _check_layout(graphs, checkpoint.task, shape["num_layers"])
    ref = _load_reference(checkpoint, hf_tokenizer, special, shape["context_length"])
    bar.update()

    bar.set_postfix_str(STEPS[1])
    if optimize:
        graphs, optimizer = _optimize(checkpoint, graphs, shape, ref, work)
    else:
        optimizer = {"applied": False, "summary": "no (--no-optimize)"}
    bar.update()

    bar.set_postfix_str(STEPS[2])
    graphs, quantization = _quantize(graphs, precision, keep_lm_head, checkpoint.task, work)
    final = _assemble(graphs, checkpoint.task, staging)
    manifest = Manifest(
        name=name or card.get("name") or checkpoint.path.name,
        task=checkpoint.task,
        architecture=checkpoint.architecture,
        precision=precision,
        batch_invariant=all(batch_invariant(onnx.load(str(p))) for p in final.values()),
        graphs={role: bundle_manifest.graph_entry(path.name, path) for role, path in final.items()},
        **shape,
        special_tokens=SpecialTokens(**special),
        add_bos_token=add_bos,
        controls=controls,
        generation_defaults=bundle_manifest.generation_defaults(checkpoint.generation),
        metrics=card.get("metrics", {}),
        training_data=card.get("training_data", {}),
        license=card.get("license", ""),
        embeddings=_write_embeddings(ref.model, staging / EMBEDDINGS_FILE),
        export={
            "source": checkpoint.path.name,
            "description": card.get("description", ""),
            "parameters": sum(p.numel() for p in ref.model.parameters()),
            "optimizer": optimizer,
            "quantization": quantization,
            "versions": versions(),
        },
    )
    bundle_manifest.write_bundle_metadata(staging, manifest)
    bar.update()

    bar.set_postfix_str(STEPS[3])
    with quiet():
        manifest = dataclasses.replace(manifest, parity=check_bundle(staging, final, ref, manifest))
    bar.update()

    bar.set_postfix_str(STEPS[4])
    greedy = manifest.parity.greedy
    if precision == "fp32" and greedy.identical_sequences != greedy.prompts:
        raise ParityError(
            f"fp32 export does not reproduce PyTorch's greedy tokens: "
            f"{greedy.identical_sequences} of {greedy.prompts} prompts identical "
            f"(first divergence at {greedy.first_divergence}); logits: "
            f"{manifest.parity.logits}"
        )
    manifest = bundle_manifest.write_bundle_metadata(staging, manifest)
    bar.update()
    return manifest


def _write_embeddings(model, path: Path) -> str:
    """The input token embeddings as float16 [vocab, hidden], for the app's Embeddings tab.

    The runtime cannot read ONNX initializers (it does not import onnx), so the table is stored
    beside the graphs; float16 halves its size and cosine similarities do not need more.
    """
    import numpy as np

    table = model.get_input_embeddings().weight.detach().float().numpy()  # (V, D)
    np.save(path, table.astype(np.float16))
    return path.name


def versions() -> dict:
    from importlib.metadata import version

    packages = ("torch", "transformers", "optimum-onnx", "onnx", "onnxruntime")
    return {package: version(package) for package in packages}
