"""The fidelity study's metrics (bench/fidelity.py) on tiny inputs: replies cut at the end of the
turn, the common-prefix share and teacher-forced top-1 agreement; and its graph edits
(bench/fidelity_graphs.py) on a one-node graph, run through onnxruntime."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from bench.fidelity import CHATS, common_prefix_share, reply_tokens, top1_agreement
from bench.fidelity_graphs import quantized_block_sums, set_accuracy_level


@pytest.mark.parametrize(
    ("ids", "expected"),
    [
        ([5, 6, 7], [5, 6, 7]),  # no end of turn: cut at the limit only
        ([5, 6, 7, 8, 9], [5, 6, 7, 8]),
        ([5, 2, 7], [5, 2]),  # the end token is kept, what follows dropped
        ([5, 3, 7], [5, 2]),  # any end id is written as the first
        ([2], [2]),
    ],
)
def test_reply_tokens_cut_at_the_first_end_of_turn(ids, expected):
    assert reply_tokens(ids, (2, 3), limit=4) == expected


@pytest.mark.parametrize(
    ("reply", "reference", "share"),
    [
        ([1, 2, 3, 4], [1, 2, 3, 4], 1.0),
        ([1, 2, 9, 4], [1, 2, 3, 4], 0.5),
        ([9, 2, 3, 4], [1, 2, 3, 4], 0.0),
        ([1, 2], [1, 2, 3, 4], 0.5),  # stopped early
        ([1, 2, 3, 4, 5], [1, 2, 3, 4], 1.0),  # went on: the reference is all reproduced
    ],
)
def test_common_prefix_share(reply, reference, share):
    assert common_prefix_share(reply, reference) == share


def test_common_prefix_share_refuses_an_empty_reference():
    with pytest.raises(ValueError, match="`reference` must hold at least one token"):
        common_prefix_share([1], [])


def test_top1_agreement_counts_positions_with_the_same_argmax():
    reference = np.array([[0.0, 1.0, 0.0], [2.0, 0.0, 0.0], [0.0, 0.0, 3.0], [1.0, 0.0, 0.0]])
    ours = np.array([[0.0, 5.0, 0.0], [0.0, 2.0, 0.0], [0.0, 0.0, 1.0], [1.0, 0.5, 0.0]])
    assert top1_agreement(ours, reference) == 0.75
    assert top1_agreement(reference, reference) == 1.0


def test_top1_agreement_refuses_mismatched_positions():
    with pytest.raises(ValueError, match="`logits` must have the reference's positions"):
        top1_agreement(np.zeros((2, 3)), np.zeros((3, 3)))


def test_the_study_has_at_least_twenty_chats_some_multi_turn():
    assert len(CHATS) >= 20
    assert any(sum(m["role"] == "user" for m in chat) > 1 for chat in CHATS)


def _block_sums_graph() -> onnx.ModelProto:
    """x (1, 1, 2, 32) -> its per-block sums, and a MatMulNBits head named `logits`."""
    info = helper.make_tensor_value_info
    axes = numpy_helper.from_array(np.array([-1], np.int64), "axes")
    nodes = [helper.make_node("ReduceSum", ["x", "axes"], ["x.block_sums"], keepdims=0)]
    graph = helper.make_graph(
        nodes,
        "sums",
        [info("x", TensorProto.FLOAT, [1, 1, 2, 32])],
        [info("x.block_sums", TensorProto.FLOAT, [1, 1, 2])],
        [axes],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_quantized_block_sums_sum_the_q8_1_codes_times_their_scale():
    x = np.random.default_rng(0).standard_normal((1, 1, 2, 32)).astype(np.float32)
    x[0, 0, 1] = 0.0  # an all-zero block stays zero (no division by a zero scale)
    model = _block_sums_graph()
    quantized_block_sums(model)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (sums,) = session.run(None, {"x": x})
    d = np.abs(x).max(-1, keepdims=True) / 127  # (1, 1, 2, 1)
    codes = np.round(x / np.maximum(d, 1e-30))
    np.testing.assert_allclose(sums, (codes * d).sum(-1), rtol=1e-6, atol=1e-6)
    assert sums[0, 0, 1] == 0.0
    assert not np.allclose(sums[0, 0, 0], x[0, 0, 0].sum(), rtol=0, atol=1e-7)


def test_set_accuracy_level_splits_the_head_from_the_layers():
    nodes = [
        helper.make_node("MatMulNBits", ["a", "b", "c"], [name], accuracy_level=4)
        for name in ("blk.0.down", "logits")
    ]
    model = helper.make_model(helper.make_graph(nodes, "g", [], []))
    set_accuracy_level(model, 0, head=False)
    levels = {n.output[0]: n.attribute[0].i for n in model.graph.node}
    assert levels == {"blk.0.down": 0, "logits": 4}
    set_accuracy_level(model, 1, head=True)
    assert model.graph.node[1].attribute[0].i == 1


def test_the_level_0_variant_steps_one_row_per_call_as_the_faithful_conversion(tmp_path):
    """Its manifest is read from the changed graph, so it runs as Chat's faithful conversion
    runs (`one_row_steps`), not through the phantom row."""
    import runtime
    from bench.fidelity_graphs import build_variant
    from tests.llm_fixtures import write_tiny_gguf

    gguf = write_tiny_gguf(tmp_path / "tiny.Q4_1.gguf", "Q4_1")
    bundle = build_variant("layers-level-0", gguf, tmp_path / "shipped", tmp_path / "work")
    gen = runtime.load(bundle, batching=False)
    assert gen.manifest.graphs["decoder"].one_row_steps and gen.model.one_row_steps
    assert (
        len(
            gen.generate("In the beginning", runtime.GenerationConfig(max_new_tokens=3))[
                0
            ].token_ids
        )
        == 3
    )
