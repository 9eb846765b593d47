"""Alignment: which source tokens a seq2seq model attended to while it produced each output
token, read from its cross-attention with the output teacher-forced (one call, no decoding).

    found = alignment(runtime.load("models/rewriter/int8"), source, output, controls)
    found.weights  # (T, S): one row per output token (EOS last), one column per source token

`alignment(gen, source, output, controls)` encodes the source exactly as the generator does
(control strings and the manifest's prompt prefix first, special tokens included), and the output
as generated text: its tokens, then EOS. Row t of the weights is the attention α over the source
while the model predicted output token t (the decoder's input is the start token and the output
before t), so every row sums to 1.

Where the weights come from:

- A model with its own `cross_attention(source_ids, source_mask, decoder_ids) -> (N, T, S)`
  (runtime/recurrent.py's GRU with attention) gives them directly; one without attention
  raises `ValueError` there, and that error is passed on.
- The runtime's `Seq2SeqLM` (an optimum-layout encoder + merged decoder with `use_cache_branch`)
  has no such output, and its bundle files are left as they are. At first use per loaded model,
  `seq2seq_cross_attention` builds a second graph in memory from the bundle's decoder file: the
  no-cache branch of its `If` node (the `else_branch`, which runs a whole target at once), cut
  down to what the cross-attention needs, returning each layer's encoder-attention `Softmax`
  output averaged over heads. It needs `onnx` (a base dependency), imported only then.

Which layers: the mean over all decoder layers. On 44 KJV verses of tests/fixtures/verses.tsv
rewritten by the shipped rewriter (655 output tokens that occur exactly once in their source),
the argmax of the row falls on that same source token for 85 % of them with the mean over the
three layers, 75 % with the last layer alone and 70 % with the first (88 % with the middle layer,
which cannot be named in advance for another model); the last layer also spreads its weight onto
neighbouring words and punctuation, so the mean shows alignment best.

Does not cover: decoder graphs whose attention is fused (export/lean/bart.py's
MultiHeadAttention exposes no probabilities: `ValueError`), causal LMs (no source), drawing the
weights (ui/alignment_view.py).
"""

from __future__ import annotations

import re
import threading
import weakref
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .models import Seq2SeqLM
from .sessions import create_session

CROSS_ATTENTION_SOFTMAX = "encoder_attn"  # optimum/transformers' name for BART-family blocks
NO_CACHE_BRANCH = "else_branch"  # `If(use_cache_branch)`: False runs the whole target at once
LAYERS_NOTE = "cross-attention averaged over heads and over every decoder layer"

_graphs: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # Seq2SeqLM -> AttentionGraph
_graphs_lock = threading.Lock()


@dataclass(frozen=True)
class Alignment:
    """Attention of each output token over the source tokens."""

    source_tokens: tuple[str, ...]  # the source as the model saw it, special tokens included
    output_tokens: tuple[str, ...]  # the output's tokens, then EOS
    weights: np.ndarray  # (T, S) float32: row t is α over the source for output token t
    method: str  # where the weights come from, in words


def alignment(gen, source: str, output: str, controls: dict | None = None) -> Alignment:
    """The alignment of `output` (text the model produced for `source` with `controls`) for a
    loaded seq2seq `runtime.Generator`, teacher-forced in one call.

    Raises ValueError for a model that is not seq2seq, has no attention, or whose decoder graph
    does not expose its attention probabilities, and for an empty output.
    """
    if gen.task != "seq2seq":
        raise ValueError(f"`model` must be a seq2seq model to align, got task {gen.task!r}")
    if not isinstance(output, str) or not output.strip():
        raise ValueError(f"`output` must be non-empty text, got {output!r}")
    source_ids = gen.encode_prompt(source, controls)
    output_ids = [*gen.tokenizer.encode(output, add_special_tokens=False).ids, gen.eos_token_id]
    start = gen.manifest.special_tokens.decoder_start_token_id
    sources = np.array([source_ids], dtype=np.int64)  # (1, S)
    decoder_ids = np.array([[start, *output_ids[:-1]]], dtype=np.int64)  # (1, T)
    model = gen.model
    if isinstance(model, Seq2SeqLM):
        decoder_file = gen.directory / gen.manifest.graphs["decoder"].file
        weights = seq2seq_cross_attention(
            model, decoder_file, sources, np.ones_like(sources), decoder_ids, gen.providers
        )
        method = LAYERS_NOTE
    elif hasattr(model, "cross_attention"):
        weights = model.cross_attention(sources, np.ones_like(sources), decoder_ids)
        method = "the model's attention weights"
    else:
        raise ValueError(f"`model` must have cross-attention to align, got {type(model).__name__}")
    return Alignment(
        source_tokens=tuple(_token_text(gen.tokenizer, i) for i in source_ids),
        output_tokens=tuple(_token_text(gen.tokenizer, i) for i in output_ids),
        weights=np.asarray(weights[0], dtype=np.float32),  # (T, S)
        method=method,
    )


def seq2seq_cross_attention(
    model: Seq2SeqLM,
    decoder_file: Path,
    source_ids: np.ndarray,
    source_mask: np.ndarray,
    decoder_ids: np.ndarray,
    providers: list[str] | None = None,
) -> np.ndarray:
    """Cross-attention weights (N, T, S) of `model` for right-padded sources (N, S) and decoder
    inputs (N, T) (the start token, then the target shifted right), averaged over heads and
    decoder layers. The attention graph is built from `decoder_file` (the bundle's merged
    decoder, which `model` runs) at the first call for `model` and kept while `model` lives."""
    with _graphs_lock:
        graph = _graphs.get(model)
        if graph is None:
            graph = _graphs[model] = AttentionGraph(decoder_file, providers)
    encoder_hidden = model._encode(source_ids, source_mask)  # (N, S, hidden), the model's own
    return graph.run(decoder_ids, encoder_hidden, source_mask).mean(axis=1)  # (N, T, S)


class AttentionGraph:
    """A session of the no-cache decoder branch returning each decoder layer's cross-attention
    probabilities averaged over heads."""

    def __init__(self, decoder_file: Path, providers: list[str] | None = None):
        self.session = create_session(attention_graph(decoder_file), providers)
        self.inputs = [node.name for node in self.session.get_inputs()]
        self.outputs = [node.name for node in self.session.get_outputs()]

    def run(self, decoder_ids, encoder_hidden, encoder_mask) -> np.ndarray:
        """(N, L, T, S): layer by layer, the head-averaged attention of each decoder position."""
        feeds = {
            "input_ids": decoder_ids.astype(np.int64),
            "encoder_hidden_states": encoder_hidden,
            "encoder_attention_mask": encoder_mask.astype(np.int64),
        }
        layers = self.session.run(self.outputs, {k: feeds[k] for k in self.inputs})
        return np.stack(layers, axis=1).astype(np.float32)  # (N, L, T, S)


def attention_graph(decoder_file: Path) -> bytes:
    """The serialized graph computing, from the merged decoder at `decoder_file`, each layer's
    cross-attention probabilities averaged over heads (outputs `cross_attention.{layer}`,
    (N, T, S) each, in layer order). The file is read, never written."""
    import onnx
    from onnx import helper

    decoder = onnx.load(str(decoder_file))
    branch = _no_cache_branch(decoder)
    softmaxes = sorted(
        (node for node in branch.node if _is_cross_attention_softmax(node)), key=_layer_of
    )
    if not softmaxes:
        raise ValueError(
            f"`model` must expose its cross-attention probabilities (Softmax nodes named "
            f"{CROSS_ATTENTION_SOFTMAX!r}), got a decoder graph without them: its attention is "
            "fused"
        )
    nodes = _needed_nodes(branch.node, [node.output[0] for node in softmaxes])
    head_axis = "cross_attention_head_axis"
    opset = next(o.version for o in decoder.opset_import if o.domain in ("", "ai.onnx"))
    outputs = []
    for softmax in softmaxes:  # (N, H, T, S) -> (N, T, S)
        name = f"cross_attention.{_layer_of(softmax)}"
        if opset >= 18:  # ReduceMean takes its axes as an input from opset 18 on
            mean = helper.make_node("ReduceMean", [softmax.output[0], head_axis], [name])
        else:
            mean = helper.make_node("ReduceMean", [softmax.output[0]], [name], axes=[1])
        mean.attribute.append(helper.make_attribute("keepdims", 0))
        nodes.append(mean)
        outputs.append(helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None))
    used = {name for node in nodes for name in node.input}
    initializers = [
        tensor
        for tensor in [*decoder.graph.initializer, *branch.initializer]
        if tensor.name in used
    ]
    if opset >= 18:
        axis = np.array([1], dtype=np.int64)
        initializers.append(onnx.numpy_helper.from_array(axis, head_axis))
    graph = helper.make_graph(
        nodes,
        "cross_attention",
        [value for value in decoder.graph.input if value.name in used],
        outputs,
        initializers,
    )
    model = helper.make_model(
        graph, opset_imports=decoder.opset_import, ir_version=decoder.ir_version
    )
    return model.SerializeToString()


def _no_cache_branch(decoder):
    """The `else_branch` graph of the merged decoder's `If(use_cache_branch)` node."""
    for node in decoder.graph.node:
        if node.op_type == "If":
            for attribute in node.attribute:
                if attribute.name == NO_CACHE_BRANCH:
                    return attribute.g
    raise ValueError(
        "`model` must have a merged decoder graph (an If node on `use_cache_branch`), got one "
        "without it"
    )


def _is_cross_attention_softmax(node) -> bool:
    return node.op_type == "Softmax" and CROSS_ATTENTION_SOFTMAX in node.name


def _layer_of(node) -> int:
    """The decoder layer of a node named like "/model/decoder/layers.2/encoder_attn/Softmax"."""
    found = re.search(r"layers\.(\d+)", node.name)
    if found is None:
        raise ValueError(f"`model` must name its decoder layers, got a node {node.name!r}")
    return int(found[1])


def _needed_nodes(nodes, outputs: list[str]) -> list:
    """The nodes `outputs` depend on, in their original (topological) order: the rest of the
    decoder (the later feed-forward blocks, the LM head) is left out."""
    producer = {name: node for node in nodes for name in node.output}
    needed, pending = set(), list(outputs)
    while pending:
        node = producer.get(pending.pop())
        if node is not None and id(node) not in needed:
            needed.add(id(node))
            pending.extend(name for name in node.input if name)
    return [node for node in nodes if id(node) in needed]


def _token_text(tokenizer, token_id: int) -> str:
    return tokenizer.decode([int(token_id)], skip_special_tokens=False)
