"""`export_fill_mask_bundle`: a BERT-style masked-LM checkpoint -> a "fill-mask" bundle.

Steps:

1. export   - optimum-onnx's `main_export` with task "fill-mask": `model.onnx`, inputs
              input_ids, attention_mask (and token_type_ids when the config has token types)
              -> logits (batch, sequence, vocab). The tensor the MLM head reads (the encoder's
              last hidden state) is then added as a second output, `last_hidden_state`
              (batch, sequence, hidden), so the runtime gets contextual token vectors from the
              same call.
2. optimize - onnxruntime's transformer optimizer with its "bert" fusions (Attention,
              SkipLayerNormalization, BiasGelu, EmbedLayerNormalization where they match); kept
              only if its logits agree with PyTorch as well as the unoptimized graph's do (same
              argmax agreement, max |Δlogit| within 2× or 1e-4 of the logit scale).
3. quantize - int8: dynamic int8 MatMul weights (convert/quantize.py).
4. parity   - against PyTorch on held-in sentences with 15 % of their tokens masked: max |Δlogit|,
              argmax agreement at masked positions, and the cosine of the last hidden states.
5. write    - tokenizer.json, embeddings.npy (input embeddings, float16), manifest.json (task
              "fill-mask", `mask_token`, `mask_token_id`), README.md.

Does not cover: generation models (export/exporter.py), training (train/masked_lm.py).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import numpy as np

from convert import manifest as bundle_manifest
from convert.manifest import seal
from convert.optimize import optimize_graph
from convert.quantize import INT8_FORMAT, batch_invariant, quantize_graph
from runtime.manifest import Manifest, SpecialTokens
from runtime.sessions import DEVICE_PROVIDERS, create_session

from .exporter import EMBEDDINGS_FILE, parity_holds, quiet, versions

HIDDEN_OUTPUT = "last_hidden_state"
PARITY_SENTENCES = (
    "In the beginning, God created the heavens and the earth.",
    "Jesus said to them, “I am the bread of life. He who comes to me will not be hungry.”",
    "The Lord is my shepherd; I shall lack nothing.",
    "Blessed are the poor in spirit, for theirs is the Kingdom of Heaven.",
    "The king said to the queen, “What is your request?”",
    "Then the man and his wife went out of the city to the mountain.",
)


def add_hidden_output(path: Path) -> None:
    """Expose the MLM head's input (the encoder's last hidden state) as `last_hidden_state`."""
    import onnx

    model = onnx.load(str(path))
    graph = model.graph
    head = next(
        (n for n in graph.node if n.op_type == "MatMul" and "cls/predictions/transform" in n.name),
        None,
    )
    if head is None:
        raise ValueError(f"{path}: no MLM head (cls/predictions/transform MatMul) found")
    hidden = head.input[0]
    graph.node.append(onnx.helper.make_node("Identity", [hidden], [HIDDEN_OUTPUT]))
    info = onnx.helper.make_tensor_value_info(
        HIDDEN_OUTPUT, onnx.TensorProto.FLOAT, ["batch_size", "sequence_length", None]
    )
    graph.output.append(info)
    onnx.save(model, str(path))


def _feeds(tokenizer, sentences, mask_id: int, names, context: int, seed: int = 0):
    """Encoded, padded sentences (cut to the context) with 15 % of their non-special tokens
    masked (fixed seed)."""
    rng = np.random.default_rng(seed)
    encoded = [tokenizer.encode(s).ids[:context] for s in sentences]
    width = max(map(len, encoded))
    ids = np.full((len(encoded), width), 0, dtype=np.int64)
    mask = np.zeros_like(ids)
    masked = np.zeros(ids.shape, dtype=bool)
    for row, tokens in enumerate(encoded):
        ids[row, : len(tokens)] = tokens
        mask[row, : len(tokens)] = 1
        inner = np.arange(1, len(tokens) - 1)
        chosen = rng.choice(inner, size=max(1, round(0.15 * len(inner))), replace=False)
        ids[row, chosen] = mask_id
        masked[row, chosen] = True
    feeds = {"input_ids": ids, "attention_mask": mask}
    if "token_type_ids" in names:
        feeds["token_type_ids"] = np.zeros_like(ids)
    return feeds, masked


def _with_two_token_types(model, model_dir: Path, work: Path) -> Path:
    """The checkpoint to export: `model_dir` itself, or, for a model with one token type, a copy
    with a second, identical token-type row (optimum's dummy inputs use token types 0 and 1;
    every type-0 input gives the same outputs as before)."""
    import copy

    import torch

    if model.config.type_vocab_size >= 2:
        return model_dir
    padded = copy.deepcopy(model)
    old = padded.bert.embeddings.token_type_embeddings
    new = torch.nn.Embedding(2, old.embedding_dim)
    with torch.no_grad():
        new.weight[:] = old.weight[0]
    padded.bert.embeddings.token_type_embeddings = new
    padded.config.type_vocab_size = 2
    padded.save_pretrained(str(work))
    for path in model_dir.iterdir():
        if path.is_file() and not (work / path.name).exists():
            shutil.copyfile(path, work / path.name)
    return work


def _session(path: Path):
    return create_session(path, DEVICE_PROVIDERS["cpu"], threads=1)


def parity(path: Path, model, tokenizer, mask_id: int) -> dict:
    """ONNX graph at `path` against the PyTorch `model` (see the module docstring, step 4)."""
    import torch

    session = _session(path)
    names = [i.name for i in session.get_inputs()]
    context = model.config.max_position_embeddings
    feeds, masked = _feeds(tokenizer, PARITY_SENTENCES, mask_id, names, context)
    logits, hidden = session.run(["logits", HIDDEN_OUTPUT], feeds)
    with torch.no_grad():
        out = model(**{k: torch.from_numpy(v) for k, v in feeds.items()}, output_hidden_states=True)
    ref_logits = out.logits.numpy()
    ref_hidden = out.hidden_states[-1].numpy()
    valid = feeds["attention_mask"].astype(bool)
    diff = np.abs(logits - ref_logits)[valid]
    a, b = hidden[valid], ref_hidden[valid]
    cosine = (a * b).sum(-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))
    return {
        "sentences": len(PARITY_SENTENCES),
        "masked_positions": int(masked.sum()),
        "max_abs_logit_diff": float(diff.max()),
        "max_abs_logit": float(np.abs(ref_logits[valid]).max()),
        "masked_argmax_agreement": float(
            (logits[masked].argmax(-1) == ref_logits[masked].argmax(-1)).mean()
        ),
        "argmax_agreement": float(
            (logits[valid].argmax(-1) == ref_logits[valid].argmax(-1)).mean()
        ),
        "min_hidden_cosine": float(cosine.min()),
    }


def _optimize(source: Path, target: Path, config: dict, before: dict, check) -> tuple[Path, dict]:
    """onnxruntime's transformer optimizer (model type bert) on `source`, kept only when
    `exporter.parity_holds` (the generation exporter's rule) for its parity `check`."""
    try:
        with quiet():
            info = optimize_graph(
                source,
                target,
                config.get("model_type", "bert"),
                config["num_attention_heads"],
                config["hidden_size"],
                model_type="bert",
            )
        after = check(target)
    except Exception as error:  # optimizer failures come in many types; fall back
        reason = f"{type(error).__name__}: {str(error).splitlines()[0][:200]}"
        return source, {"applied": False, "summary": f"no (fell back: {reason})"}
    holds = parity_holds(before, after)[0]
    fused = info["fused"]
    report = {
        "model_type": "bert",
        "fused": fused,
        "nodes_before": info["nodes_before"],
        "nodes_after": info["nodes_after"],
        "max_abs_logit_diff": {
            "unoptimized": before["max_abs_logit_diff"],
            "optimized": after["max_abs_logit_diff"],
        },
    }
    if not holds:
        report.update(applied=False, summary="no (fell back: parity got worse)")
        return source, report
    text = ", ".join(f"{op} × {n}" for op, n in fused.items()) or "no fused operators"
    report.update(
        applied=True,
        summary=f"yes, model type bert: {text}; {report['nodes_before']} → "
        f"{report['nodes_after']} nodes",
    )
    return target, report


def _load_masked_lm(model_dir: Path):
    """The checkpoint's config, model card ({} when it has none), transformers tokenizer,
    PyTorch model, `tokenizers` tokenizer and mask token id. Raises ValueError when its
    tokenizer has no mask token."""
    import torch
    from tokenizers import Tokenizer
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    config = bundle_manifest.load_json(model_dir / "config.json", "model config")
    card_path = model_dir / bundle_manifest.CARD_FILE
    card = bundle_manifest.load_json(card_path, "model card") if card_path.exists() else {}
    with quiet():
        hf_tokenizer = AutoTokenizer.from_pretrained(model_dir)
        model = AutoModelForMaskedLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    if hf_tokenizer.mask_token is None:
        raise ValueError(f"the tokenizer in {model_dir} has no mask token")
    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    mask_id = tokenizer.token_to_id(hf_tokenizer.mask_token)
    return config, card, hf_tokenizer, model, tokenizer, mask_id


def _export_graph(model, model_dir: Path, work: Path) -> Path:
    """optimum's fill-mask export of `model` under `work`, with the last hidden state added as
    a second output; returns the graph's path."""
    from optimum.exporters.onnx import main_export

    source = _with_two_token_types(model, model_dir, work / "source")
    with quiet():
        main_export(
            str(source),
            output=work / "optimum",
            task="fill-mask",
            do_validation=False,
            library_name="transformers",
        )
    graph = work / "optimum" / "model.onnx"
    add_hidden_output(graph)
    return graph


def _write_precision(graph: Path, target: Path, precision: str) -> dict:
    """Write `graph` at `precision` to `target` (int8: dynamic int8 MatMuls; fp32: a copy);
    returns the manifest's quantization entry."""
    if precision == "fp32":
        shutil.copyfile(graph, target)
        return {"summary": "none (float32)"}
    with quiet():
        quantized = quantize_graph(graph, target, "int8", False)
    return {
        "method": f"dynamic int8 ({INT8_FORMAT}, MatMul)",
        "graphs": {"model": quantized},
        "summary": f"dynamic int8 ({INT8_FORMAT}, MatMul); MLM head quantized",
    }


def export_fill_mask_bundle(
    model_dir, out_dir, precision: str = "int8", optimize: bool = True, name: str | None = None
) -> Manifest:
    """Export the masked-LM checkpoint in `model_dir` to a bundle in `out_dir`; return its
    manifest. `precision` is "fp32" or "int8". The checkpoint's tokenizer must have a mask
    token. Raises ValueError for a checkpoint that is not a masked LM."""
    import onnx

    model_dir, out_dir = Path(model_dir), Path(out_dir)
    if precision not in ("fp32", "int8"):
        raise ValueError(f"`precision` must be one of fp32, int8, got {precision!r}")
    config, card, hf_tokenizer, model, tokenizer, mask_id = _load_masked_lm(model_dir)
    with tempfile.TemporaryDirectory(prefix="scriptorium-fill-mask-") as tmp:
        work = Path(tmp)
        graph = _export_graph(model, model_dir, work)

        def check(path):
            return parity(path, model, tokenizer, mask_id)

        before = check(graph)
        if optimize:
            graph, optimizer = _optimize(graph, work / "optimized.onnx", config, before, check)
        else:
            optimizer = {"applied": False, "summary": "no (optimize=False)"}
        staging = work / "bundle"
        staging.mkdir()
        quantization = _write_precision(graph, staging / "model.onnx", precision)
        shutil.copyfile(model_dir / "tokenizer.json", staging / "tokenizer.json")
        table = model.get_input_embeddings().weight.detach().float().numpy()  # (V, D)
        np.save(staging / EMBEDDINGS_FILE, table.astype(np.float16))
        graph = staging / "model.onnx"
        manifest = Manifest(
            name=name or card.get("name") or model_dir.name,
            task="fill-mask",
            architecture=config.get("model_type"),
            precision=precision,
            batch_invariant=batch_invariant(onnx.load(str(graph))),
            graphs={"model": bundle_manifest.graph_entry("model.onnx", graph)},
            **bundle_manifest.model_shape(config, "causal-lm"),
            mask_token=hf_tokenizer.mask_token,
            mask_token_id=mask_id,
            special_tokens=SpecialTokens(
                bos_token_id=hf_tokenizer.bos_token_id,
                eos_token_id=hf_tokenizer.eos_token_id,
                pad_token_id=hf_tokenizer.pad_token_id,
            ),
            embeddings=EMBEDDINGS_FILE,
            parity={"unoptimized_fp32": before, "bundle": check(graph)},
            metrics=card.get("metrics", {}),
            training_data=card.get("training_data", {}),
            license=card.get("license", ""),
            export={
                "source": model_dir.name,
                "description": card.get("description", ""),
                "parameters": sum(p.numel() for p in model.parameters()),
                "optimizer": optimizer,
                "quantization": quantization,
                "versions": versions(),
            },
        )
        (staging / "README.md").write_text(model_card(manifest))
        manifest = seal(staging, manifest)
        if out_dir.exists():
            shutil.rmtree(out_dir)
        out_dir.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(staging, out_dir)
    return manifest


def model_card(manifest: Manifest) -> str:
    """README.md of a fill-mask bundle, from its manifest."""
    export = manifest.export
    bundle = manifest.parity.bundle
    rows = [
        ("task", f"fill-mask (mask token `{manifest.mask_token}`)"),
        ("architecture", manifest.architecture),
        ("parameters", f"{export.parameters:,}"),
        ("precision", manifest.precision),
        (
            "layers × heads × head size",
            f"{manifest.num_layers} × {manifest.num_heads} × {manifest.head_size}",
        ),
        ("hidden size", manifest.hidden_size),
        ("vocabulary", manifest.vocab_size),
        ("context length", manifest.context_length),
        ("licence", manifest.license or "not stated"),
    ]
    parity_rows = [
        ("masked positions compared", bundle.masked_positions),
        ("max abs Δlogit", bundle.max_abs_logit_diff),
        ("largest abs logit (scale)", bundle.max_abs_logit),
        ("argmax agreement at masked positions", bundle.masked_argmax_agreement),
        ("argmax agreement, all positions", bundle.argmax_agreement),
        ("smallest cosine of last hidden states", bundle.min_hidden_cosine),
    ]
    lines = [f"# {manifest.name}", "", export.description or "", ""]
    lines += bundle_manifest.card_table(rows)
    lines += [
        "",
        "## Files",
        "",
        "- `model.onnx`: input_ids, attention_mask, token_type_ids → logits, last_hidden_state",
        "- `embeddings.npy`: input token embeddings (float16), `tokenizer.json`, `manifest.json`",
        "",
        f"Optimized with onnxruntime's transformer optimizer: {export.optimizer_summary}.",
        f"Quantization: {export.quantization_report.summary}.",
        "",
        "## Parity with PyTorch",
        "",
        f"{bundle.sentences} Bible sentences with 15 % of their tokens masked, this bundle "
        "against the PyTorch checkpoint:",
        "",
        *bundle_manifest.card_table(parity_rows),
        "",
        "## Evaluation",
        "",
        *(
            bundle_manifest.card_table(list(manifest.metrics.items()))
            if manifest.metrics
            else ["None."]
        ),
        "",
        "## Training data",
        "",
        *bundle_manifest.card_table(list(manifest.training_data.items())),
        "",
    ]
    return "\n".join(lines)
