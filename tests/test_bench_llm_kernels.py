"""bench.llm_kernels on a tiny random Q4_1 Llama GGUF: the kernel graphs cut from the bundle's
decoder compute exactly the decoder's own projections (with offsets) or its bare MatMulNBits
results (without), and one run of the benchmark times every row. No timing is asserted."""

from __future__ import annotations

import contextlib
import io
import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from bench import llm_kernels
from convert.gguf import export_gguf
from tests.llm_fixtures import write_tiny_gguf


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("llm-kernels")
    gguf = write_tiny_gguf(tmp / "tiny.Q4_1.gguf", "Q4_1")
    export_gguf(gguf, tmp / "bundle", accuracy_level=0, parity=False, lora_slots=False)
    return gguf, tmp / "bundle"


def _decoder_values(decoder: onnx.ModelProto, names: set[str]) -> dict[str, np.ndarray]:
    """The decoder's intermediate tensors `names` for one token with an empty cache."""
    model = onnx.ModelProto.FromString(decoder.SerializeToString())
    present = {o.name for o in model.graph.output}
    model.graph.output.extend(
        onnx.ValueInfoProto(name=name) for name in sorted(names) if name not in present
    )
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = {
        "input_ids": np.array([[7]], dtype=np.int64),  # (1, 1)
        "attention_mask": np.ones((1, 1), dtype=np.int64),
        "seqlens_k": np.array([0], dtype=np.int32),
        "total_sequence_length": np.array(1, dtype=np.int32),
        "logits_to_keep": np.array(1, dtype=np.int64),
    }
    for info in session.get_inputs():
        if info.name.startswith("past_key_values"):
            heads, size = info.shape[1], info.shape[3]
            feeds[info.name] = np.zeros((1, heads, 0, size), dtype=np.float32)
    outputs = [o.name for o in session.get_outputs() if o.name in names]
    return dict(zip(outputs, session.run(outputs, feeds)))


@pytest.mark.parametrize("offsets", [False, True])
def test_kernel_graph_computes_the_decoders_projections(bundle, offsets):
    decoder = onnx.load(str(bundle[1] / "model.onnx"))
    cut = llm_kernels.kernel_graph(decoder, offsets)
    projections = [n for n in decoder.graph.node if n.op_type == "MatMulNBits"]
    assert sum(n.op_type == "MatMulNBits" for n in cut.graph.node) == len(projections)
    # 2 layers x (q|k|v, o, gate|up, down) + the tied head, each with its own input
    assert len(projections) == 9 and len(cut.graph.input) == 9
    inputs = {i.name for i in cut.graph.input}
    results = {o.name for o in cut.graph.output}
    assert all(name.endswith(".nbits") for name in results) != offsets
    expected = _decoder_values(decoder, inputs | results)
    session = ort.InferenceSession(cut.SerializeToString(), providers=["CPUExecutionProvider"])
    got = dict(zip(sorted(results), session.run(sorted(results), {n: expected[n] for n in inputs})))
    for name in results:
        np.testing.assert_allclose(got[name], expected[name], rtol=1e-5, atol=1e-5)
    if offsets:  # the offsets matter: the bare kernels give other numbers
        bare = llm_kernels.kernel_graph(decoder, False)
        bare_session = ort.InferenceSession(
            bare.SerializeToString(), providers=["CPUExecutionProvider"]
        )
        (first,) = [o.name for o in bare.graph.output][:1]
        value = bare_session.run([first], {n: expected[n] for n in inputs})[0]
        assert np.abs(value - expected[first.removesuffix(".nbits")]).max() > 1e-3


def test_run_times_every_row(bundle, tmp_path):
    gguf, path = bundle
    out = tmp_path / "kernels.json"
    args = ["--gguf", str(gguf), "--bundle", str(path), "--repeats", "1", "--new-tokens", "3"]
    args += ["--threads", "1", "--out", str(out)]
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert llm_kernels.main(args) == 0
    result = json.loads(out.read_text())
    rows = set(result["seconds_per_token"])
    expected = {
        f"{v}, spinning {s}" for v in ("kernels", "kernels + offsets") for s in ("off", "on")
    }
    expected.add("scriptorium (whole decode step)")
    if not result["skipped"]:
        expected.add("llama.cpp (whole decode step)")
    assert rows == expected
    assert result["kernel_graph_nodes"]["kernels"] == 9
    assert result["kernel_graph_nodes"]["kernels + offsets"] > 9
    weights = result["weight_bytes_per_token"]
    assert 0 < weights["kernels"] < weights["kernels + offsets"]
    assert result["table"] in printed.getvalue()
