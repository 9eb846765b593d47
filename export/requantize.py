"""Quantize a causal-LM bundle from its fp32 sibling, without its checkpoint.

`requantize(fp32_dir, out_dir, precision)` copies the fp32 bundle's files (tokenizer, embeddings,
n-gram index, plots), quantizes its graph as `export_bundle` does (convert/quantize.py: a causal
LM's int8 is weight-only 8-bit MatMulNBits), and writes a manifest and model card whose parity
report compares the new graph with the fp32 graph, the reference it was made from (the fp32
bundle's own report gives its distance from PyTorch). It records `batch_invariant` from the graph.

The parity report has export/parity.py's shape and prompts: logits of the left-padded prompts
(prefill) and one cached step, greedy tokens through the runtime, and perplexity of a fixed text.
Everything runs through `runtime` on both bundles (unbatched), so nothing needs torch's model.

Does not cover: seq2seq bundles (their decoders are merged pairs: export them from the
checkpoint), recipe card sections (train/requantize.py re-evaluates those).
"""

from __future__ import annotations

import dataclasses
import math
import shutil
import tempfile
from pathlib import Path

import numpy as np
import onnx

import runtime
from convert import manifest as bundle_manifest
from convert.quantize import (
    INT4_FORMAT,
    INT8_NBITS_FORMAT,
    batch_invariant,
    check_int4_available,
    quantize_graph,
)
from runtime.bundle import read_manifest
from runtime.manifest import Manifest, Parity

PRECISIONS = ("int8", "int4")


def requantize(fp32_dir, out_dir, precision: str = "int8") -> Manifest:
    """Write the `precision` bundle of the fp32 causal-LM bundle `fp32_dir` to `out_dir`
    (replacing it); return its manifest. The model card is the manifest's (convert/manifest.py)."""
    fp32_dir, out_dir = Path(fp32_dir), Path(out_dir)
    if precision not in PRECISIONS:
        raise ValueError(f"`precision` must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    source = read_manifest(fp32_dir)
    if source.task != "causal-lm" or source.precision != "fp32":
        raise ValueError(
            f"`fp32_dir` must hold an fp32 causal-LM bundle, got a {source.precision} "
            f"{source.task} bundle in {fp32_dir}"
        )
    check_int4_available()
    with tempfile.TemporaryDirectory(prefix="scriptorium-requantize-") as tmp:
        staging = Path(tmp) / "bundle"
        graph_files = {graph.file for graph in source.graphs.values()}
        shutil.copytree(
            fp32_dir, staging, ignore=lambda _, names: [n for n in names if n in graph_files]
        )
        reports, graphs = {}, {}
        for role, graph in source.graphs.items():
            target = staging / graph.file
            reports[role] = quantize_graph(fp32_dir / graph.file, target, precision, False, True)
            graphs[role] = bundle_manifest.graph_entry(target.name, target)
        method = {
            "int8": f"weight-only int8 MatMulNBits ({INT8_NBITS_FORMAT})",
            "int4": f"weight-only int4 MatMulNBits ({INT4_FORMAT})",
        }[precision]
        quantization = {
            "method": method,
            "graphs": reports,
            "source": f"the fp32 bundle's graph ({fp32_dir.name}), not the checkpoint",
            "summary": f"{method}; LM head quantized; made from the fp32 bundle's graph",
        }
        manifest = dataclasses.replace(
            source,
            precision=precision,
            graphs=graphs,
            batch_invariant=all(
                batch_invariant(onnx.load(str(staging / g.file))) for g in graphs.values()
            ),
            export=dataclasses.replace(source.export, quantization=quantization),
        )
        bundle_manifest.write_bundle_metadata(staging, manifest)  # seal, so runtime.load opens it
        reference = runtime.load(fp32_dir, threads=1, batching=False)
        quantized = runtime.load(staging, threads=1, batching=False)
        parity = parity_against(quantized, reference, source.parity)
        manifest = dataclasses.replace(manifest, parity=parity)
        (staging / "README.md").write_text(bundle_manifest.model_card(manifest))
        manifest = bundle_manifest.seal(staging, manifest, ensure_ascii=False)
        if out_dir.exists():
            shutil.rmtree(out_dir)
        shutil.copytree(staging, out_dir)
    return manifest


def parity_against(gen, reference, reference_parity: Parity) -> dict:
    """export/parity.py's report for generator `gen` with generator `reference` (the fp32 graph)
    in PyTorch's place."""
    from .parity import GREEDY_NEW_TOKENS, PERPLEXITY_TEXT, PROMPTS

    plan = reference._plan(PROMPTS, runtime.GenerationConfig(max_new_tokens=1), None)
    ids, mask = plan.input_ids, plan.mask  # (B, T) left-padded, as generation feeds them
    keep = mask.astype(bool)
    expected = reference.model.all_logits(ids, mask)  # (B, T, V)
    logits = gen.model.all_logits(ids, mask)  # (B, T, V)
    tokens = expected[:, -1].argmax(-1)  # (B,) the reference's next tokens, fed to both
    step_expected, _ = reference.model.step(tokens, reference.model.start(ids, mask)[1])  # (B, V)
    step, _ = gen.model.step(tokens, gen.model.start(ids, mask)[1])  # (B, V)
    agree = (logits.argmax(-1) == expected.argmax(-1))[keep]
    step_agree = step.argmax(-1) == step_expected.argmax(-1)
    logit_report = {
        "prefill_max_abs_diff": float(np.abs(logits - expected)[keep].max()),
        "cached_step_max_abs_diff": float(np.abs(step - step_expected).max()),
        "max_abs_logit": float(np.abs(expected[keep]).max()),
        "argmax_agreement": float((agree.sum() + step_agree.sum()) / (agree.size + step.shape[0])),
        "prompts": len(PROMPTS),
    }
    greedy = runtime.GenerationConfig(
        max_new_tokens=GREEDY_NEW_TOKENS, min_new_tokens=GREEDY_NEW_TOKENS
    )
    identical, matched, total, divergence = 0, 0, 0, []
    for prompt in PROMPTS:
        ours = gen.generate(prompt, greedy)[0].token_ids
        theirs = reference.generate(prompt, greedy)[0].token_ids
        prefix = next(
            (i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), min(len(ours), len(theirs))
        )
        identical += ours == theirs
        matched += prefix
        total += max(len(ours), len(theirs))
        divergence.append(None if ours == theirs else prefix)
    ppl = {name: g.score(PERPLEXITY_TEXT) for name, g in (("fp32", reference), ("onnx", gen))}
    perplexity = {name: math.exp(-s.total / len(s.logprobs)) for name, s in ppl.items()}
    fp32_vs_pytorch = (reference_parity.logits or {}).get("prefill_max_abs_diff")
    against = f", itself within {fp32_vs_pytorch:.2g} of PyTorch" if fp32_vs_pytorch else ""
    return {
        "reference": f"the fp32 bundle's ONNX graph (float32{against})",
        "logits": logit_report,
        "greedy": {
            "prompts": len(PROMPTS),
            "new_tokens": GREEDY_NEW_TOKENS,
            "identical_sequences": identical,
            "token_agreement": matched / total,
            "first_divergence": divergence,
        },
        "perplexity": {
            "tokens": len(ppl["onnx"].logprobs),
            "fp32": perplexity["fp32"],
            "onnx": perplexity["onnx"],
            "relative_change_pct": 100.0 * (perplexity["onnx"] / perplexity["fp32"] - 1.0),
        },
    }
