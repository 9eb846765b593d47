"""runtime/alignment.py and ui/alignment_view.py: cross-attention read from the shipped rewriter's
bundle (its files untouched), rows that sum to 1, a copied verse attending along the diagonal, a
rewritten verse attending to the words it keeps, models with their own `cross_attention` (the
GRUs of runtime/recurrent.py) and those without attention, the heat map's cells and labels, and
what the Rewrite tab shows for each.
"""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import runtime
from runtime.alignment import Alignment, alignment, attention_graph
from runtime.bundle import sha256_of
from tests.manifest_fixtures import manifest_of
from ui import alignment_view, rewrite_tab
from ui.registry import ModelRegistry

REWRITER = Path(__file__).resolve().parents[1] / "models" / "rewriter" / "int8"
RATIO = {"length_ratio": 1.0}
GENESIS = "In the beginning God created the heaven and the earth."
JOHN = (
    "For God so loved the world, that he gave his only begotten Son, that whosoever believeth in "
    "him should not perish, but have everlasting life."
)


@pytest.fixture(scope="module")
def rewriter():
    if not (REWRITER / "manifest.json").exists():
        pytest.skip("the shipped rewriter is not in models/")
    return runtime.load(REWRITER)


def test_rows_sum_to_one_and_the_shape_matches_the_tokens(rewriter):
    output = rewriter.generate(JOHN, rewriter.config(num_beams=3), controls=RATIO)[0]
    found = alignment(rewriter, JOHN, output.text, RATIO)
    assert found.source_tokens[:2] == ("<|bos|>", "<ratio_1.0>")  # the prompt as generated
    assert found.source_tokens[-1] == found.output_tokens[-1] == "<|eos|>"
    assert len(found.source_tokens) == len(rewriter.encode_prompt(JOHN, RATIO))
    assert len(found.output_tokens) == len(output.token_ids)  # the generated tokens, EOS last
    assert found.weights.shape == (len(found.output_tokens), len(found.source_tokens))
    np.testing.assert_allclose(found.weights.sum(axis=1), 1.0, atol=1e-4)
    assert (found.weights >= 0).all()


def test_a_copied_verse_attends_along_the_diagonal(rewriter):
    """The rewriter keeps Genesis 1:1 word for word; teacher-forcing that copy, each output token
    looks hardest at its own source token (the source has two tokens in front: BOS and the
    ratio token), and most of each row's weight lies within one token of it."""
    config = rewriter.config(num_beams=5)
    assert rewriter.generate(GENESIS, config, controls=RATIO)[0].text.strip() == GENESIS
    found = alignment(rewriter, GENESIS, GENESIS, RATIO)
    rows, columns = found.weights.shape
    offset = columns - rows  # output token t is source token t + offset
    assert found.source_tokens[offset:] == found.output_tokens
    strongest = found.weights.argmax(axis=1)
    assert all(abs(column - (row + offset)) <= 1 for row, column in enumerate(strongest))
    band = [found.weights[t, t + offset - 1 : t + offset + 2].sum() for t in range(rows)]
    assert np.mean(band) > 0.6  # a uniform row would put 3 / 14 there


def test_a_rewritten_verse_attends_to_the_words_it_keeps(rewriter):
    """John 3:16 rewritten in modern wording: an output token found once in the source mostly
    has its strongest weight on (or beside) that source token."""
    output = rewriter.generate(JOHN, rewriter.config(num_beams=5), controls=RATIO)[0].text
    found = alignment(rewriter, JOHN, output, RATIO)
    kept = [
        (row, found.source_tokens.index(token))
        for row, token in enumerate(found.output_tokens)
        if found.source_tokens.count(token) == 1
    ]
    assert len(kept) >= 10
    near = [abs(found.weights[row].argmax() - column) <= 1 for row, column in kept]
    assert np.mean(near) >= 0.75


def test_the_bundle_files_are_left_as_they_are(rewriter):
    decoder = REWRITER / rewriter.manifest.graphs["decoder"].file
    before = sha256_of(decoder)
    graph = onnx.load_from_string(attention_graph(decoder))
    assert [o.name for o in graph.graph.output] == [f"cross_attention.{i}" for i in range(3)]
    assert not any(node.op_type == "If" for node in graph.graph.node)
    assert sha256_of(decoder) == before


class OwnAttention:
    """A model with its own `cross_attention`, as runtime/recurrent.py's GRUs have it."""

    def __init__(self, error: str | None = None):
        self.error = error
        self.calls = []

    def cross_attention(self, source_ids, source_mask, decoder_ids):
        if self.error:
            raise ValueError(self.error)
        self.calls.append((source_ids, source_mask, decoder_ids))
        weights = np.zeros((1, decoder_ids.shape[1], source_ids.shape[1]), dtype=np.float32)
        weights[..., -1] = 1.0  # (N, T, S): all on EOS
        return weights


def test_a_model_with_its_own_attention_gets_the_same_teacher_forced_inputs(rewriter):
    gen = copy.copy(rewriter)
    gen.model = OwnAttention()
    found = alignment(gen, "Jesus wept.", "Jesus wept.", RATIO)
    source_ids, source_mask, decoder_ids = gen.model.calls[0]
    assert source_ids.tolist() == [rewriter.encode_prompt("Jesus wept.", RATIO)]
    assert source_mask.tolist() == [[1] * source_ids.shape[1]]
    expected = [0, *rewriter.tokenizer.encode("Jesus wept.", add_special_tokens=False).ids]
    assert decoder_ids.tolist() == [expected]  # the start token, then the output
    assert found.output_tokens == ("Jesus", " wept", ".", "<|eos|>")
    assert found.weights[:, -1].tolist() == [1.0] * 4


def test_a_model_without_attention_says_so(rewriter):
    gen = copy.copy(rewriter)
    gen.model = OwnAttention(error="`model` has no attention: one context vector")
    with pytest.raises(ValueError, match="one context vector"):
        alignment(gen, "Jesus wept.", "Jesus wept.", RATIO)
    gen.model = object()
    with pytest.raises(ValueError, match="must have cross-attention"):
        alignment(gen, "Jesus wept.", "Jesus wept.", RATIO)
    with pytest.raises(ValueError, match="`output` must be non-empty"):
        alignment(rewriter, "Jesus wept.", "  ", RATIO)


def _decoder_file(path: Path, branch_nodes: list) -> Path:
    """A merged-decoder-shaped graph whose no-cache branch holds `branch_nodes` (x -> y)."""
    value = helper.make_tensor_value_info
    branch = helper.make_graph(branch_nodes, "no_past", [], [value("y", TensorProto.FLOAT, None)])
    cached = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])],
        "with_past",
        [],
        [value("y", TensorProto.FLOAT, None)],
    )
    node = helper.make_node(
        "If", ["use_cache_branch"], ["y"], then_branch=cached, else_branch=branch
    )
    graph = helper.make_graph(
        [node],
        "decoder",
        [value("use_cache_branch", TensorProto.BOOL, [1]), value("x", TensorProto.FLOAT, None)],
        [value("y", TensorProto.FLOAT, None)],
    )
    onnx.save(helper.make_model(graph), path)
    return path


def test_a_fused_attention_graph_is_refused(tmp_path):
    fused = _decoder_file(tmp_path / "fused.onnx", [helper.make_node("Identity", ["x"], ["y"])])
    with pytest.raises(ValueError, match="its attention is fused"):
        attention_graph(fused)
    softmax = helper.make_node(
        "Softmax", ["x"], ["y"], name="/model/decoder/layers.0/encoder_attn/Softmax"
    )
    exposed = _decoder_file(tmp_path / "exposed.onnx", [softmax])
    graph = onnx.load_from_string(attention_graph(exposed))
    assert [node.op_type for node in graph.graph.node] == ["Softmax", "ReduceMean"]


def test_heat_map_cells_keep_every_token_in_order():
    weights = np.array([[0.9, 0.08, 0.02], [0.01, 0.04, 0.95]])
    found = Alignment(("<|bos|>", " the", " the"), ("the", "the"), weights, "test")
    frame = alignment_view.cells(found)
    assert sorted(set(frame[alignment_view.SOURCE])) == ["1 <|bos|>", "2 the", "3 the"]
    assert sorted(set(frame[alignment_view.OUTPUT])) == ["1 the", "2 the"]
    drawn = {(s, o) for s, o in zip(frame[alignment_view.SOURCE], frame[alignment_view.OUTPUT])}
    assert ("3 the", "1 the") not in drawn  # 0.02: under the threshold, not a strongest cell
    assert ("2 the", "2 the") not in drawn  # 0.04 < 0.05 and column 2's strongest is 0.08
    assert ("1 <|bos|>", "2 the") not in drawn


def test_heat_map_caps_long_axes_and_says_so():
    tokens = tuple(f" w{i}" for i in range(55))
    weights = np.full((55, 55), 1 / 55)
    found = Alignment(tokens, tokens[:30], weights[:30], "test")
    frame = alignment_view.cells(found)
    assert frame[alignment_view.SOURCE].nunique() == alignment_view.MAX_TOKENS
    assert frame[alignment_view.SOURCE].iloc[0] == "01 w0"  # zero-padded: text order = order
    assert "15 source tokens left out" in alignment_view.caption("m", found)
    assert "output tokens" not in alignment_view.caption("m", found)


def test_the_model_line_says_how_the_model_attends_to_its_source():
    gru = alignment_view.model_line(manifest_of("seq2seq", architecture="gru"))
    assert gru.startswith("**No attention, no heat map**: a GRU encoder–decoder (Cho et al. 2014)")
    bart = alignment_view.model_line(manifest_of("seq2seq", architecture="bart"))
    assert "a transformer encoder–decoder (bart)" in bart and "(1 decoder layers × 1 heads" in bart
    decoder_only = alignment_view.model_line(manifest_of(architecture="gpt2"))
    assert decoder_only.startswith("**No source attention**: a decoder-only gpt2")


def test_the_rewrite_tab_shows_the_map_or_says_why_there_is_none(rewriter):
    registry = ModelRegistry({})
    registry.add("rewriter (int8)", REWRITER, rewriter)
    without = copy.copy(rewriter)
    without.model = OwnAttention(error="`model` has no attention (one context vector)")
    registry.add("no attention (int8)", REWRITER, without)
    shown = {"source": "Jesus wept.", "controls": RATIO, "text": "Jesus wept."}
    plot, line = rewrite_tab.attention_view(registry, shown | {"model": "rewriter (int8)"})
    assert plot["visible"] is True and len(plot["value"]) >= 4  # at least a cell per output row
    assert plot["caption"].startswith("rewriter (int8): each row is an output token")
    assert "3 decoder layers × 4 heads" in line and "No heat map" not in line
    plot, line = rewrite_tab.attention_view(registry, shown | {"model": "no attention (int8)"})
    assert plot["visible"] is False
    assert line.endswith("No heat map: `model` has no attention (one context vector).")
    plot, line = rewrite_tab.attention_view(registry, None)  # a failed run: the map hides
    assert plot["visible"] is False
