"""export.lean.gpt2: the lean GPT-2 graph matches PyTorch, decodes like `generate`, quantizes."""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from export.lean.gpt2 import build_gpt2_graph
from tests.manifest_fixtures import manifest_of

LAYERS, HEADS, WIDTH, VOCAB = 2, 4, 64, 300
HEAD_SIZE = WIDTH // HEADS
PROMPT_LENGTHS = (7, 3, 5)  # a batch of 3, left-padded to 7


def _tiny_model(**overrides) -> GPT2LMHeadModel:
    torch.manual_seed(0)
    # A large init std gives logits with clear winners, so greedy comparisons are not tie-breaks.
    config = GPT2Config(
        n_layer=LAYERS,
        n_embd=WIDTH,
        n_head=HEADS,
        vocab_size=VOCAB,
        n_positions=64,
        initializer_range=0.3,
        **overrides,
    )
    return GPT2LMHeadModel(config).eval()


@pytest.fixture(scope="module")
def model() -> GPT2LMHeadModel:
    return _tiny_model()


@pytest.fixture(scope="module")
def graph_path(model, tmp_path_factory):
    path = tmp_path_factory.mktemp("lean") / "model.onnx"
    build_gpt2_graph(model, path)
    return path


@pytest.fixture(scope="module")
def session(graph_path) -> ort.InferenceSession:
    return ort.InferenceSession(str(graph_path), providers=["CPUExecutionProvider"])


def _left_padded_batch(seed: int = 0):
    """input_ids, attention_mask, position_ids (B, T) as transformers builds them."""
    rng = np.random.default_rng(seed)
    length = max(PROMPT_LENGTHS)
    ids = np.zeros((len(PROMPT_LENGTHS), length), dtype=np.int64)
    mask = np.zeros_like(ids)
    for row, n in enumerate(PROMPT_LENGTHS):
        ids[row, length - n :] = rng.integers(1, VOCAB, n)
        mask[row, length - n :] = 1
    positions = np.cumsum(mask, axis=1) - 1
    positions = np.where(mask == 0, 1, positions)
    return ids, mask, positions


def _run(session, ids, mask, positions, past, logits_to_keep=0):
    """One graph call; `past` is a list of 2 × LAYERS arrays (N, H, P, D)."""
    feeds = {
        "input_ids": ids,
        "attention_mask": mask,
        "position_ids": positions,
        "logits_to_keep": np.array(logits_to_keep, dtype=np.int64),
    }
    for i in range(LAYERS):
        feeds[f"past_key_values.{i}.key"] = past[2 * i]
        feeds[f"past_key_values.{i}.value"] = past[2 * i + 1]
    names = ["logits"] + [f"present.{i}.{kind}" for i in range(LAYERS) for kind in ("key", "value")]
    logits, *present = session.run(names, feeds)
    return logits, present


def _empty_past(batch: int) -> list[np.ndarray]:
    return [np.zeros((batch, HEADS, 0, HEAD_SIZE), dtype=np.float32)] * (2 * LAYERS)


def _torch_past(cache) -> list[np.ndarray]:
    return [
        t.numpy() for layer in cache.layers for t in (layer.keys, layer.values)
    ]  # per layer key, value: (N, H, T, D)


def test_interface_matches_optimum_names_and_dtypes(session):
    inputs = {i.name: i for i in session.get_inputs()}
    outputs = {o.name: o for o in session.get_outputs()}
    past = [f"past_key_values.{i}.{kind}" for i in range(LAYERS) for kind in ("key", "value")]
    assert list(inputs) == ["input_ids", *past, "attention_mask", "position_ids", "logits_to_keep"]
    assert list(outputs) == ["logits"] + [
        f"present.{i}.{kind}" for i in range(LAYERS) for kind in ("key", "value")
    ]
    assert inputs["input_ids"].type == "tensor(int64)"
    assert inputs["attention_mask"].type == "tensor(int64)"
    assert inputs["past_key_values.0.key"].shape == [
        "batch_size",
        HEADS,
        "past_sequence_length",
        HEAD_SIZE,
    ]
    assert inputs["logits_to_keep"].type == "tensor(int64)"
    assert inputs["logits_to_keep"].shape == []
    assert outputs["logits"].shape == ["batch_size", "kept", VOCAB]


@pytest.mark.parametrize("keep", [1, 3, 7, 50])
def test_logits_to_keep_returns_the_last_positions(session, keep):
    ids, mask, positions = _left_padded_batch()
    everything, past = _run(session, ids, mask, positions, _empty_past(ids.shape[0]))
    kept, kept_past = _run(session, ids, mask, positions, _empty_past(ids.shape[0]), keep)
    assert kept.shape == (ids.shape[0], min(keep, ids.shape[1]), VOCAB)
    np.testing.assert_allclose(kept, everything[:, -keep:], atol=1e-5, rtol=0)
    for ours, full in zip(kept_past, past):  # the cache never depends on it
        np.testing.assert_array_equal(ours, full)


def test_prefill_and_cached_steps_match_pytorch(model, session):
    ids, mask, positions = _left_padded_batch()
    batch = ids.shape[0]
    logits, present = _run(session, ids, mask, positions, _empty_past(batch))
    with torch.no_grad():
        ref = model(
            input_ids=torch.from_numpy(ids),
            attention_mask=torch.from_numpy(mask),
            position_ids=torch.from_numpy(positions),
            use_cache=True,
        )
    real = mask.astype(bool)  # (B, T)
    assert logits.shape == (batch, ids.shape[1], VOCAB)
    np.testing.assert_allclose(logits[real], ref.logits.numpy()[real], atol=1e-4, rtol=0)
    assert np.ptp(logits[real], axis=-1).min() > 1.0  # the check is not vacuous

    rng = np.random.default_rng(1)
    cache = ref.past_key_values
    for _ in range(4):
        tokens = rng.integers(1, VOCAB, (batch, 1))  # (B, 1)
        mask = np.concatenate([mask, np.ones((batch, 1), dtype=np.int64)], axis=1)  # (B, T + 1)
        positions = positions[:, -1:] + 1  # (B, 1)
        logits, present = _run(session, tokens, mask, positions, present)
        with torch.no_grad():
            ref = model(
                input_ids=torch.from_numpy(tokens),
                attention_mask=torch.from_numpy(mask),
                position_ids=torch.from_numpy(positions),
                past_key_values=cache,
                use_cache=True,
            )
        cache = ref.past_key_values
        np.testing.assert_allclose(logits, ref.logits.numpy(), atol=1e-4, rtol=0)
        real = mask.astype(bool)  # (B, P + 1)
        for ours, theirs in zip(present, _torch_past(cache)):
            assert ours.shape == theirs.shape == (batch, HEADS, mask.shape[1], HEAD_SIZE)
            assert np.isfinite(ours).all()  # padding rows must never poison the cache
            # (B, H, T, D) -> (real positions, H, D): padded positions may differ from PyTorch.
            np.testing.assert_allclose(
                ours.transpose(0, 2, 1, 3)[real],
                theirs.transpose(0, 2, 1, 3)[real],
                atol=1e-4,
                rtol=0,
            )


def test_prefill_in_two_chunks_matches_one_call(model, session):
    """Several new tokens after a non-empty past: GroupQueryAttention allows it at batch 1."""
    ids, mask, positions = (x[:1] for x in _left_padded_batch(seed=2))  # (1, T), no padding
    split = 4
    _, past = _run(
        session, ids[:, :split], mask[:, :split], positions[:, :split], _empty_past(ids.shape[0])
    )
    logits, _ = _run(session, ids[:, split:], mask, positions[:, split:], past)
    with torch.no_grad():
        ref = model(
            input_ids=torch.from_numpy(ids),
            attention_mask=torch.from_numpy(mask),
            position_ids=torch.from_numpy(positions),
        ).logits.numpy()
    real = mask[:, split:].astype(bool)  # (B, T - split)
    np.testing.assert_allclose(logits[real], ref[:, split:][real], atol=1e-4, rtol=0)


def test_greedy_loop_matches_generate(model, session):
    ids, mask, positions = _left_padded_batch(seed=3)
    batch, new_tokens = ids.shape[0], 20
    with torch.no_grad():
        expected = model.generate(
            torch.from_numpy(ids),
            attention_mask=torch.from_numpy(mask),
            do_sample=False,
            max_new_tokens=new_tokens,
            min_new_tokens=new_tokens,
            pad_token_id=0,
        )[:, ids.shape[1] :].numpy()

    logits, past = _run(session, ids, mask, positions, _empty_past(batch))
    chosen = []
    for _ in range(new_tokens):
        tokens = logits[:, -1].argmax(axis=-1)[:, None]  # (B, 1)
        chosen.append(tokens)
        mask = np.concatenate([mask, np.ones((batch, 1), dtype=np.int64)], axis=1)  # (B, T + 1)
        positions = positions[:, -1:] + 1  # (B, 1)
        logits, past = _run(session, tokens, mask, positions, past)
    np.testing.assert_array_equal(np.concatenate(chosen, axis=1), expected)


def test_lm_head_is_one_matmul_and_graph_is_lean(graph_path):
    proto = onnx.load(str(graph_path))
    weights = {t.name: tuple(t.dims) for t in proto.graph.initializer}
    (head,) = [n for n in proto.graph.node if "logits" in n.output]
    assert head.op_type == "MatMul"
    assert weights[head.input[1]] == (WIDTH, VOCAB)
    ops = Counter(node.op_type for node in proto.graph.node)
    assert ops["GroupQueryAttention"] == LAYERS and ops["MatMul"] == 4 * LAYERS + 1
    # 9 per layer; 2 Gather and a SkipLN; 4 for the LM head (Neg, Unsqueeze, Slice, MatMul);
    # 14 make GroupQueryAttention's inputs from the mask
    assert len(proto.graph.node) == 9 * LAYERS + 3 + 4 + 14


@pytest.mark.parametrize("precision", ["int8", "int4"])
def test_quantizers_reach_every_projection(graph_path, tmp_path, precision):
    out = tmp_path / f"model_{precision}.onnx"
    if precision == "int8":
        from onnxruntime.quantization import QuantType, quantize_dynamic

        quantize_dynamic(graph_path, out, weight_type=QuantType.QInt8)
        quantized_op = "MatMulInteger"
    else:
        from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

        quantizer = MatMulNBitsQuantizer(
            onnx.load(str(graph_path)), block_size=32, is_symmetric=True, accuracy_level=4
        )
        quantizer.process()
        quantizer.model.save_model_to_file(str(out))
        quantized_op = "MatMulNBits"
    ops = [n.op_type for n in onnx.load(str(out)).graph.node]
    assert (
        ops.count(quantized_op) == 4 * LAYERS + 1
    )  # qkv, attn out, fc, mlp out per layer; LM head
    assert "MatMul" not in ops

    session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    ids, mask, positions = _left_padded_batch()
    logits, present = _run(session, ids, mask, positions, _empty_past(ids.shape[0]))
    assert logits.shape == (ids.shape[0], ids.shape[1], VOCAB)
    assert all(np.isfinite(p).all() for p in [logits, *present])


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"activation_function": "relu"}, "`activation_function` must be one of"),
        (
            {"scale_attn_by_inverse_layer_idx": True},
            "`scale_attn_by_inverse_layer_idx` must be False",
        ),
        ({"reorder_and_upcast_attn": True}, "`reorder_and_upcast_attn` must be False"),
        ({"add_cross_attention": True}, "`add_cross_attention` must be False"),
        ({"scale_attn_weights": False}, "`scale_attn_weights` must be True"),
    ],
)
def test_unsupported_configs_raise(override, message, tmp_path):
    with pytest.raises(ValueError, match=message):
        build_gpt2_graph(_tiny_model(**override), tmp_path / "model.onnx")
    assert not (tmp_path / "model.onnx").exists()


@pytest.mark.parametrize("headroom", [2, 128])  # 2: the buffers grow twice over 6 steps
def test_shared_buffer_cache_gives_the_same_logits_as_separate_tensors(
    session, monkeypatch, headroom
):
    """runtime.models binds one buffer as past and present; steps append in place."""
    from runtime import models

    monkeypatch.setattr(models, "_CACHE_HEADROOM", headroom)
    fields = {"num_heads": HEADS, "head_size": HEAD_SIZE, "vocab_size": VOCAB}
    separate = models.CausalLM(session, manifest_of(**fields))
    graphs = {"decoder": {"file": "model.onnx", "kv_cache": models.SHARED_BUFFER}}
    shared = models.CausalLM(session, manifest_of(graphs=graphs, **fields))
    assert shared.shared_cache and not separate.shared_cache
    ids, mask, _ = _left_padded_batch(seed=4)
    (logits_a, state_a), (logits_b, state_b) = (m.start(ids, mask) for m in (separate, shared))
    rng = np.random.default_rng(5)
    for step in range(6):
        np.testing.assert_allclose(logits_b, logits_a, atol=1e-5, rtol=0)
        if step == 3:  # beams reorder rows: fresh buffers, same values
            rows = np.array([2, 0, 0])
            state_a, state_b = separate.select(state_a, rows), shared.select(state_b, rows)
        tokens = rng.integers(1, VOCAB, ids.shape[0])
        logits_a, state_a = separate.step(tokens, state_a)
        logits_b, state_b = shared.step(tokens, state_b)
    assert state_b.past.capacity >= state_b.attention_mask.shape[1]
    assert (state_b.past.capacity > ids.shape[1] + headroom) == (headroom == 2)
    np.testing.assert_allclose(logits_b, logits_a, atol=1e-5, rtol=0)


def test_runtime_computes_the_lm_head_for_the_last_position_only(session):
    from runtime import models

    class Recording:
        """The session, recording the logits shape of every call."""

        def __init__(self, session):
            self.session, self.logits_shapes = session, []

        def __getattr__(self, name):
            return getattr(self.session, name)

        def run(self, outputs, feeds):
            values = self.session.run(outputs, feeds)
            self.logits_shapes.append(values[0].shape)
            return values

    manifest = manifest_of(num_heads=HEADS, head_size=HEAD_SIZE)
    recording = Recording(session)
    ids, mask, positions = _left_padded_batch()
    logits, _ = models.CausalLM(recording, manifest).start(ids, mask)
    assert recording.logits_shapes == [(ids.shape[0], 1, VOCAB)]
    everything, _ = _run(session, ids, mask, positions, _empty_past(ids.shape[0]))
    np.testing.assert_allclose(logits, everything[:, -1], atol=1e-5, rtol=0)
