"""The flagship's graph variants for the fidelity study (bench/fidelity.py), and a node-by-node
comparison of a graph with transformers on one prompt.

Each variant is the shipped converter's graph with one candidate source of divergence from
transformers' dequantized model changed, written as a bundle into a work folder (the shipped
converter and its defaults are untouched):

    shipped                 the flagship's bundle as `scriptorium fetch smollm2` converts it
    fp32                    every weight dequantized to float32 (`export_gguf(fp32=True)`)
    layers-level-0          the Q4_1 layers' MatMulNBits at accuracy level 0 (float activations);
                            the Q8_0 LM head at level 4
    head-float32            the LM head as a float32 MatMul over the dequantized Q8_0 table (what
                            level 0 computes, without onnxruntime's slow 8-bit level-0 path);
                            layers at level 4
    layers-level-0+head-float32   both
    q8-block-sums           level 4, with the Q4_1 offset path's block sums taken from the
                            activations quantized as llama.cpp's q8_1 does (per block of 32,
                            scale max|x| / 127, rounded), so that both terms of a Q4_1 product see
                            the same activations, as in llama.cpp

`node_errors` adds the embedding and every layer's attention output as graph outputs and compares
them, the rotary caches and the logits with transformers' on one prompt: it tells the error an
op adds (the fp32 graph's) from the error it inherits (the shipped graph's). This module does not
run chats or time anything (bench/fidelity.py does).
"""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HEAD = "logits"  # the output of the LM head's node
VARIANTS = {
    "shipped": "the flagship's bundle as converted (accuracy level 4 everywhere)",
    "fp32": "every weight dequantized to float32",
    "layers-level-0": "Q4_1 layers at level 0, Q8_0 head at level 4",
    "head-float32": "layers at level 4, LM head a float32 MatMul over the dequantized table",
    "layers-level-0+head-float32": "Q4_1 layers at level 0, float32 LM head",
    "q8-block-sums": "level 4; Q4_1 offset path's block sums from q8_1-quantized activations",
}


def build_variant(name: str, gguf: Path, shipped: Path, work: Path) -> Path:
    """The bundle of variant `name` (VARIANTS) of `gguf`, written under `work` (once per
    converter state: `shipped` is returned as is)."""
    if name not in VARIANTS:
        raise ValueError(f"`variant` must be one of {list(VARIANTS)}, got {name!r}")
    if name == "shipped":
        return shipped
    from convert.gguf import export_gguf
    from convert.manifest import graph_entry, seal
    from runtime.manifest import Manifest

    out = work / name
    if (out / "manifest.json").exists():
        return out
    staged = work / f".{name}-partial"
    shutil.rmtree(staged, ignore_errors=True)
    export_gguf(gguf, staged, fp32=name == "fp32", parity=False, lora_slots=False)
    if name != "fp32":
        path = staged / "model.onnx"
        model = onnx.load(str(path))
        if name.startswith("layers-level-0"):
            set_accuracy_level(model, 0, head=False)
        if name.endswith("head-float32"):
            float_head(model)
        if name == "q8-block-sums":
            quantized_block_sums(model)
        onnx.save(model, str(path))
        # the changed graph's own entry, as export reads it (float activations step one row
        # per call: `one_row_steps`, as the faithful conversion Chat opens on)
        manifest = Manifest.read(staged / "manifest.json")
        seal(staged, replace(manifest, graphs={"decoder": graph_entry("model.onnx", path)}))
    staged.rename(out)
    return out


def set_accuracy_level(model: onnx.ModelProto, level: int, head: bool) -> None:
    """Set MatMulNBits' accuracy level on the LM head (`head`) or on every other projection."""
    for node in model.graph.node:
        if node.op_type == "MatMulNBits" and (node.output[0] == HEAD) == head:
            for attribute in node.attribute:
                if attribute.name == "accuracy_level":
                    attribute.i = level


def _initializer(model: onnx.ModelProto, name: str) -> np.ndarray:
    return next(numpy_helper.to_array(t) for t in model.graph.initializer if t.name == name)


def float_head(model: onnx.ModelProto) -> None:
    """Replace the LM head's 8-bit MatMulNBits by a float32 MatMul over its dequantized blocks
    (the tied token table stays as it is for the embedding's Gather)."""
    node = next(n for n in model.graph.node if n.output[0] == HEAD)
    packed, scales = (_initializer(model, name) for name in node.input[1:3])
    weight = (packed.astype(np.float32) - 128.0) * scales[:, :, None]  # (V, K/32, 32)
    weight = weight.reshape(weight.shape[0], -1)  # (V, K)
    model.graph.initializer.append(numpy_helper.from_array(weight.T.copy(), "head.weight_t"))
    matmul = helper.make_node("MatMul", [node.input[0], "head.weight_t"], [HEAD], "head_float32")
    index = list(model.graph.node).index(node)
    model.graph.node.remove(node)
    model.graph.node.insert(index, matmul)


def quantized_block_sums(model: onnx.ModelProto) -> None:
    """Feed every offset path's ReduceSum the activations as llama.cpp's q8_1 quantizes them
    (d = max|x| / 127 per block of 32, q = round(x / d), x ≈ q·d) instead of the float ones."""
    graph = model.graph
    tiny = numpy_helper.from_array(np.array(1e-30, np.float32), "q8.tiny")
    levels = numpy_helper.from_array(np.array(127.0, np.float32), "q8.levels")
    graph.initializer.extend([tiny, levels])
    nodes = []
    for node in graph.node:
        if node.op_type == "ReduceSum" and node.output[0].endswith(".block_sums"):
            blocks = node.input[0]  # (B, S, K/32, 32)
            q = f"{blocks}.q8"
            nodes += [
                helper.make_node("Abs", [blocks], [f"{q}.abs"]),
                helper.make_node(
                    "ReduceMax", [f"{q}.abs"], [f"{q}.amax"], axes=[-1], keepdims=1
                ),  # (B, S, K/32, 1)
                helper.make_node("Div", [f"{q}.amax", "q8.levels"], [f"{q}.d"]),
                helper.make_node("Max", [f"{q}.d", "q8.tiny"], [f"{q}.d_safe"]),
                helper.make_node("Div", [blocks, f"{q}.d_safe"], [f"{q}.scaled"]),
                helper.make_node("Round", [f"{q}.scaled"], [f"{q}.codes"]),
                helper.make_node("Mul", [f"{q}.codes", f"{q}.d"], [q]),
            ]
            node.input[0] = q
        nodes.append(node)
    del graph.node[:]
    graph.node.extend(nodes)


# ---- node by node against transformers ------------------------------------------------------


def _with_outputs(bundle: Path, names: list[str], work: Path) -> Path:
    """A copy of the bundle's graph that also outputs `names` (float32 activations)."""
    model = onnx.load(str(bundle / "model.onnx"))
    model.graph.output.extend(
        helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in names
    )
    path = work / f"{bundle.name}-probe.onnx"
    onnx.save(model, str(path))
    return path


def transformers_nodes(hf_model, ids: list[int]) -> dict[str, np.ndarray]:
    """transformers' embedding, rotary cos and sin (first half), every layer's attention output
    (the o projection's input) and the logits, for one sequence."""
    import torch

    seen: dict[str, np.ndarray] = {}
    hooks = [
        hf_model.model.embed_tokens.register_forward_hook(
            lambda _m, _i, out: seen.__setitem__("embedding", out[0].numpy())
        ),
        hf_model.model.rotary_emb.register_forward_hook(
            lambda _m, _i, out: seen.update(cos=out[0][0].numpy(), sin=out[1][0].numpy())
        ),
    ]
    for i, layer in enumerate(hf_model.model.layers):
        hooks.append(
            layer.self_attn.o_proj.register_forward_pre_hook(
                lambda _m, args, i=i: seen.__setitem__(f"attention.{i}", args[0][0].numpy())
            )
        )
    with torch.no_grad():
        seen["logits"] = hf_model(torch.tensor([ids])).logits[0].numpy()
    for hook in hooks:
        hook.remove()
    half = seen["cos"].shape[-1] // 2  # transformers repeats the D/2 angles twice
    seen["cos"], seen["sin"] = seen["cos"][:, :half], seen["sin"][:, :half]  # (T, D/2)
    return seen


def node_errors(bundle: Path, gguf_model, reference: dict, ids: list[int], work: Path) -> dict:
    """Max |Δ| of the bundle's graph against `reference` (`transformers_nodes`) at each node,
    and the largest reference magnitude there (the scale)."""
    from convert.bundle import full_logits, full_pass_feeds, parity_session

    layers = gguf_model.layers
    names = ["x", *(f"blk.{i}.attn" for i in range(layers))]
    session = parity_session(_with_outputs(bundle, names, work))
    steps = len(ids)
    feeds = full_pass_feeds(gguf_model, ids)
    outputs = dict(zip(names, session.run(names, feeds)))
    ours = {"embedding": outputs["x"][0], "logits": full_logits(session, gguf_model, ids)}
    ours.update({f"attention.{i}": outputs[f"blk.{i}.attn"][0] for i in range(layers)})
    model = onnx.load(str(bundle / "model.onnx"), load_external_data=True)
    ours["cos"] = _initializer(model, "cos_cache")[:steps]
    ours["sin"] = _initializer(model, "sin_cache")[:steps]
    return {
        name: {
            "max_abs_diff": float(np.abs(ours[name] - reference[name]).max()),
            "scale": float(np.abs(reference[name]).max()),
        }
        for name in ours
    }
