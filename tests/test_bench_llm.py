"""bench.llm on a tiny random Llama GGUF: every installed engine runs on the same token ids and the
same weights (the fp32 engines agree on their greedy tokens), missing peers are skipped with a
line saying so, and the JSON holds TTFT, decode speed and the roofline's byte count per engine.
No timing is asserted."""

from __future__ import annotations

import contextlib
import io
import json

import numpy as np
import pytest

from bench import llm
from tests.llm_fixtures import write_tiny_gguf

PROMPTS = (3, 9)
NEW_TOKENS = 4


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """(JSON written, printed output, GGUF path) of one run of the benchmark, with our runtime on
    optimum's export of the dequantized checkpoint (the bundle any importer must match)."""
    tmp = tmp_path_factory.mktemp("bench-llm")
    gguf = write_tiny_gguf(tmp / "tiny.Q4_1.gguf", "Q4_1")
    paths = llm.prepare(gguf, llm.work_dir(tmp / "work", gguf), ["optimum-onnx"])
    out = tmp / "llm.json"
    args = ["--gguf", str(gguf), "--bundle", str(paths["optimum"]), "--work", str(tmp / "work")]
    args += ["--new-tokens", str(NEW_TOKENS), "--prompt-tokens", *map(str, PROMPTS)]
    args += ["--repeats", "1", "--bandwidth-mb", "8", "--threads", "1", "--out", str(out)]
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert llm.main(args) == 0
    return json.loads(out.read_text()), printed.getvalue(), gguf


def test_every_engine_is_timed_or_skipped_with_a_reason(run):
    result, printed, _ = run
    assert result["loads"] == ["quiet"] and set(result["results"]) == {"quiet"}
    engines = {key.split("/")[0] for key in result["results"]["quiet"]}
    assert engines | set(result["skipped"]) == set(llm.ENGINES)
    for engine, reason in result["skipped"].items():
        assert f"skipped {engine}: {reason}" in printed
    expected = {"scriptorium/fp32", "scriptorium/fp32, no spinning", "transformers/fp32"}
    assert expected | {"optimum-onnx/fp32"} <= set(result["results"]["quiet"])
    for timings in result["results"]["quiet"].values():
        for n in PROMPTS:
            cell = timings[f"prompt_{n}"]
            assert cell["ttft_s"] > 0 and cell["total_s"] > 0
            assert cell["decode_tok_per_s"] is None or cell["decode_tok_per_s"] > 0
    assert result["prompt_tokens"] == list(PROMPTS) and result["new_tokens"] == NEW_TOKENS
    assert "| quiet | scriptorium | fp32 |" in result["table"] and result["table"] in printed


def test_fp32_engines_agree_on_the_same_weights(run):
    results = run[0]["results"]["quiet"]
    ours = results["scriptorium/fp32"]["greedy_first_8"]
    assert len(ours) == 8
    for peer in (
        "scriptorium/fp32, no spinning",
        "transformers/fp32",
        "optimum-onnx/fp32",
        "ctranslate2/fp32",
    ):
        if peer in results:
            assert results[peer]["greedy_first_8"] == ours, peer


def test_roofline_counts_each_weight_once_and_the_embedding_row(run):
    from gguf import GGUFReader

    roofline, gguf = run[0]["roofline"], run[2]
    assert roofline["bandwidth_gb_per_s"] > 0
    tensors = {t.name: int(np.prod(t.shape)) for t in GGUFReader(gguf).tensors}
    hidden = int(GGUFReader(gguf).tensors[0].shape[0])
    # optimum's fp32 graph: every GGUF weight once (the tied embedding as the LM head), one
    # embedding row more if the gather has its own copy of the table, and a few small constants
    expected = 4 * sum(tensors.values())
    counted = roofline["scriptorium"]["weight_bytes_per_token"]
    assert expected <= counted <= expected + 4 * hidden + 4096
    # keys and values: 2 layers x 2 KV heads x head size 16, float32
    assert roofline["scriptorium"]["kv_bytes_per_token_per_position"] == 2 * 2 * 2 * 16 * 4
    for n in PROMPTS:
        assert roofline["scriptorium"][f"prompt_{n}_tok_per_s"] > 0


def test_gguf_byte_count_for_llama_cpp(run):
    from gguf import GGUFReader

    gguf = run[2]
    count = llm.gguf_bytes_per_token(gguf)
    sizes = {t.name: int(t.n_bytes) for t in GGUFReader(gguf).tensors}
    # tied: no output.weight, so the token embedding is read whole as the output matrix
    assert count["weights"] == sum(sizes.values())
    assert count["kv_per_position"] == 2 * 2 * 2 * 16 * 2  # llama.cpp's float16 cache
    assert llm.gguf_type(gguf) == "Q4_1"


def test_default_bundle_is_the_gguf_converted_into_the_cache(run, tmp_path, monkeypatch):
    from convert import flagship

    gguf = run[2]
    monkeypatch.setenv("SCRIPTORIUM_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "llm.json"
    args = ["--gguf", str(gguf), "--engines", "scriptorium", "--work", str(tmp_path / "work")]
    args += ["--new-tokens", "3", "--prompt-tokens", "5", "--repeats", "1", "--threads", "1"]
    assert llm.main([*args, "--bandwidth-mb", "8", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    # recorded inside the cache, as results record paths (bench.common.portable)
    bundle = flagship.ensure_bundle(gguf).relative_to(tmp_path / "cache")
    assert result["bundle"] == f"<cache>/{bundle.as_posix()}"
    # the Q4_1 weights carried over to 4-bit MatMulNBits, with the runtime's defaults and without
    assert list(result["results"]["quiet"]) == ["scriptorium/int4", "scriptorium/int4, no spinning"]
    assert not (tmp_path / "work").exists()  # no peer needed a dequantized checkpoint


CRASHES = [
    (
        "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)",
        "peer crashed in a 2-token probe (signal 11) on this machine",
    ),
    ("raise SystemExit('no model')", "peer failed a 2-token probe (exit code 1: no model)"),
    ("pass", None),
]


@pytest.mark.parametrize("code,reason", CRASHES)
def test_a_peer_that_crashes_in_a_child_is_skipped_with_the_reason(code, reason):
    """llama-cpp-python 0.3.36 segfaults in `decode` on some CPUs: the benchmark probes it in a
    child process and skips it with the reason, instead of dying with it."""
    assert llm.child_crash([code], "peer") == reason


def test_contended_runs_measure_every_engine_under_each_load(run, tmp_path, monkeypatch):
    monkeypatch.setenv("SCRIPTORIUM_CACHE", str(tmp_path / "cache"))
    gguf = run[2]
    out = tmp_path / "llm.json"
    args = ["--gguf", str(gguf), "--engines", "scriptorium", "--contended", "--threads", "1"]
    args += ["--new-tokens", "3", "--prompt-tokens", "5", "--repeats", "1", "--bandwidth-mb", "8"]
    assert llm.main([*args, "--work", str(tmp_path / "work"), "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["loads"] == ["quiet", "busy", "mixed"]
    for load in result["loads"]:
        assert set(result["results"][load]) == {"scriptorium/int4", "scriptorium/int4, no spinning"}
        assert f"| {load} | scriptorium | int4 |" in result["table"]


def test_a_competing_load_runs_only_inside_its_block():
    from bench.load import competing

    for load in ("busy", "mixed"):
        with competing(load) as child:
            assert child.poll() is None  # running while the block runs
        assert child.poll() is not None  # and gone after it
    with pytest.raises(ValueError, match="`load` must be one of quiet, busy, mixed, got 'idle'"):
        with competing("idle"):
            pass
