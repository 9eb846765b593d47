"""export/: tiny checkpoints -> bundles, checked against the bundle contract and PyTorch.

Each (architecture, precision) case is exported once (module-scoped fixture). The logits check is
computed here with onnxruntime directly — a batch of prompts of different lengths with attention
masks, prefill and one cached step — not by the exporter's own parity code.
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM, AutoTokenizer

import export
from convert.manifest import check_controls
from convert.optimize import op_counts
from export import cli, exporter
from runtime.manifest import SCHEMA_VERSION
from tests.tiny_models import PROMPTS

# (architecture, precision, how): "api" = export_bundle, "cli" = export.cli.main; gpt2 int8 is
# exported without the optimizer so the Gemm -> MatMul rewrite meets optimum's raw graph.
CASES = [
    ("gpt2", "fp32", "api"),
    ("gpt2", "int8", "no-optimize"),
    ("gpt2", "int4", "api"),
    ("bart", "fp32", "api"),
    ("bart", "int8", "api"),
    ("t5", "fp32", "api"),
    ("marian", "fp32", "cli"),
]
CONTRACT_KEYS = {
    "schema_version", "name", "task", "architecture", "precision", "files", "graphs",
    "num_layers", "num_heads", "head_size", "hidden_size", "vocab_size", "context_length",
    "special_tokens", "add_bos_token", "controls", "generation_defaults", "parity", "metrics",
    "training_data", "license",
}  # fmt: skip
CONTROLS = {
    "marker": {
        "kind": "choice",
        "values": {"end": "<|endoftext|>"},
        "description": "a control mapped to the only special token of the tiny tokenizer",
    }
}
CARD = {
    "name": "tiny-gpt2-card",
    "license": "CC0-1.0",
    "metrics": {"perplexity": 123.4},
    "training_data": {"corpus": "none (random weights)", "license": "n/a"},
}


@pytest.fixture(scope="module", params=CASES, ids=["-".join(case[:2]) for case in CASES])
def exported(request, tiny_checkpoint, tmp_path_factory):
    """(manifest, bundle dir, checkpoint dir, arch, precision) for one exported case."""
    arch, precision, how = request.param
    root = tmp_path_factory.mktemp(f"export-{arch}-{precision}")
    checkpoint = tiny_checkpoint(arch)
    if (arch, precision) == ("gpt2", "fp32"):  # controls and a model card from MODEL_DIR
        checkpoint = shutil.copytree(checkpoint, root / "checkpoint")
        (checkpoint / "scriptorium_controls.json").write_text(json.dumps(CONTROLS))
        (checkpoint / "scriptorium_card.json").write_text(json.dumps(CARD))
    out = root / "bundle"
    if how == "cli":
        assert cli.main([str(checkpoint), str(out), "--precision", precision]) == 0
        manifest = json.loads((out / "manifest.json").read_text())
    else:
        manifest = export.export_bundle(
            checkpoint, out, precision=precision, optimize=how != "no-optimize", progress=False
        ).to_json()
    return manifest, out, checkpoint, arch, precision


def sha256(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_files_and_checksums_match_manifest(exported):
    manifest, out, _, arch, _ = exported
    on_disk = {p.name for p in out.iterdir()} - {"manifest.json"}
    assert set(manifest["files"]) == on_disk
    for name, entry in manifest["files"].items():
        assert entry["sha256"] == sha256(out / name), name
        assert entry["size"] == (out / name).stat().st_size, name
    graphs = (
        {"model.onnx"} if arch == "gpt2" else {"encoder_model.onnx", "decoder_model_merged.onnx"}
    )
    # no .onnx_data, no leftovers
    assert on_disk == graphs | {"tokenizer.json", "README.md", "embeddings.npy"}
    assert dict(manifest) == json.loads((out / "manifest.json").read_text())


def test_input_embeddings_are_stored_for_the_app(exported):
    import numpy as np
    import torch
    from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM

    manifest, out, checkpoint, arch, _ = exported
    table = np.load(out / manifest["embeddings"])
    auto = AutoModelForCausalLM if arch == "gpt2" else AutoModelForSeq2SeqLM
    with torch.no_grad():
        reference = auto.from_pretrained(checkpoint).get_input_embeddings().weight.numpy()
    assert table.dtype == np.float16
    assert table.shape == (manifest["vocab_size"], manifest["hidden_size"])
    np.testing.assert_allclose(table.astype(np.float32), reference, rtol=1e-3, atol=1e-3)


def test_manifest_has_every_contract_key_with_config_values(exported):
    manifest, _, checkpoint, arch, precision = exported
    assert CONTRACT_KEYS <= set(manifest)
    config = json.loads((checkpoint / "config.json").read_text())
    assert manifest["schema_version"] == SCHEMA_VERSION
    assert manifest["precision"] == precision
    assert manifest["architecture"] == arch
    assert manifest["task"] == ("causal-lm" if arch == "gpt2" else "seq2seq")
    assert manifest["vocab_size"] == config["vocab_size"] == 512
    assert manifest["num_layers"] == 2 and manifest["num_heads"] == 4
    assert manifest["head_size"] == 16 and manifest["hidden_size"] == 64
    assert manifest["context_length"] == (512 if arch == "t5" else 128)
    special = manifest["special_tokens"]
    assert special["eos_token_id"] == config["eos_token_id"]
    if arch == "gpt2":
        assert special["decoder_start_token_id"] is None
        assert manifest["add_bos_token"] is False
    else:
        assert special["decoder_start_token_id"] == config["decoder_start_token_id"]


def test_graph_names_in_manifest_are_the_onnx_names(exported):
    manifest, out, _, arch, _ = exported
    roles = {"decoder"} if arch == "gpt2" else {"encoder", "decoder"}
    assert set(manifest["graphs"]) == roles
    for graph in manifest["graphs"].values():
        model = onnx.load(str(out / graph["file"]))
        assert graph["inputs"] == [node.name for node in model.graph.input]
        assert graph["outputs"] == [node.name for node in model.graph.output]
    decoder = manifest["graphs"]["decoder"]
    if arch == "gpt2":
        assert decoder["file"] == "model.onnx"
        assert {"input_ids", "attention_mask", "position_ids", "past_key_values.1.value"} <= set(
            decoder["inputs"]
        )
        assert decoder["outputs"] == ["logits"] + [
            f"present.{i}.{kv}" for i in range(2) for kv in ("key", "value")
        ]
    else:
        assert decoder["file"] == "decoder_model_merged.onnx"
        assert {"use_cache_branch", "encoder_hidden_states", "encoder_attention_mask"} <= set(
            decoder["inputs"]
        )
        assert "past_key_values.1.encoder.key" in decoder["inputs"]
        assert manifest["graphs"]["encoder"]["outputs"] == ["last_hidden_state"]


def _pad(rows, pad_id, left):
    width = max(map(len, rows))
    ids = np.full((len(rows), width), pad_id, np.int64)  # (B, T)
    mask = np.zeros((len(rows), width), np.int64)
    for i, row in enumerate(rows):
        span = slice(width - len(row), None) if left else slice(0, len(row))
        ids[i, span], mask[i, span] = row, 1
    return ids, mask


def _empty_past(session, batch):
    return {
        node.name: np.zeros((batch, node.shape[1], 0, node.shape[3]), np.float32)
        for node in session.get_inputs()
        if node.name.startswith("past_key_values")
    }


def _run(session, feeds):
    """Logits at every position (lean GPT-2 graphs take `logits_to_keep`; 0 keeps all)."""
    names = [node.name for node in session.get_outputs()]
    wanted = {node.name for node in session.get_inputs()}
    feeds = {"logits_to_keep": np.array(0, dtype=np.int64), **feeds}
    values = dict(zip(names, session.run(names, {k: v for k, v in feeds.items() if k in wanted})))
    past = {
        k.replace("present", "past_key_values", 1): v for k, v in values.items() if k != "logits"
    }
    return values["logits"], past


@torch.no_grad()
def _causal_logits(out, checkpoint, manifest):
    """(ONNX, PyTorch) logits at real positions for prefill and for one cached step."""
    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    model = AutoModelForCausalLM.from_pretrained(checkpoint).eval()
    session = ort.InferenceSession(str(out / "model.onnx"), providers=["CPUExecutionProvider"])
    rows = [tokenizer(p)["input_ids"] for p in PROMPTS[:6]]
    ids, mask = _pad(rows, manifest["special_tokens"]["pad_token_id"], left=True)
    positions = np.where(mask == 1, np.cumsum(mask, 1) - 1, 1)  # (B, T)
    theirs = model(
        input_ids=torch.tensor(ids),
        attention_mask=torch.tensor(mask),
        position_ids=torch.tensor(positions),
    )
    feeds = {"input_ids": ids, "attention_mask": mask, "position_ids": positions}
    ours, past = _run(session, {**feeds, **_empty_past(session, len(rows))})
    real = mask.astype(bool)
    pairs = [(ours[real], theirs.logits.numpy()[real])]

    nxt = theirs.logits[:, -1].argmax(-1, keepdim=True)  # (B, 1)
    mask2 = np.concatenate([mask, np.ones((len(rows), 1), np.int64)], 1)  # (B, T + 1)
    pos2 = positions[:, -1:] + 1  # (B, 1)
    theirs = model(
        input_ids=nxt,
        attention_mask=torch.tensor(mask2),
        position_ids=torch.tensor(pos2),
        past_key_values=theirs.past_key_values,
    )
    feeds = {"input_ids": nxt.numpy(), "attention_mask": mask2, "position_ids": pos2}
    ours, _ = _run(session, {**feeds, **past})
    pairs.append((ours, theirs.logits.numpy()))
    return pairs


@torch.no_grad()
def _seq2seq_logits(out, checkpoint, manifest):
    """(ONNX, PyTorch) logits for 3 teacher-forced decoder tokens, then one cached step."""
    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    model = AutoModelForSeq2SeqLM.from_pretrained(checkpoint).eval()
    encoder = ort.InferenceSession(
        str(out / "encoder_model.onnx"), providers=["CPUExecutionProvider"]
    )
    decoder = ort.InferenceSession(
        str(out / "decoder_model_merged.onnx"), providers=["CPUExecutionProvider"]
    )
    special = manifest["special_tokens"]
    rows = [tokenizer(p)["input_ids"] for p in PROMPTS[:6]]
    ids, mask = _pad(rows, special["pad_token_id"], left=False)
    dec = np.array([[special["decoder_start_token_id"], 17, 42]] * len(rows), np.int64)  # (B, 3)
    theirs = model(
        input_ids=torch.tensor(ids),
        attention_mask=torch.tensor(mask),
        decoder_input_ids=torch.tensor(dec),
    )
    (hidden,) = encoder.run(["last_hidden_state"], {"input_ids": ids, "attention_mask": mask})
    common = {"encoder_hidden_states": hidden, "encoder_attention_mask": mask}
    feeds = {"input_ids": dec, "use_cache_branch": np.array([False]), **common}
    ours, past = _run(decoder, {**feeds, **_empty_past(decoder, len(rows))})
    pairs = [(ours, theirs.logits.numpy())]

    nxt = theirs.logits[:, -1].argmax(-1, keepdim=True)  # (B, 1)
    theirs = model(
        encoder_outputs=(theirs.encoder_last_hidden_state,),
        attention_mask=torch.tensor(mask),
        decoder_input_ids=nxt,
        past_key_values=theirs.past_key_values,
    )
    feeds = {"input_ids": nxt.numpy(), "use_cache_branch": np.array([True]), **common}
    ours, _ = _run(decoder, {**feeds, **past})
    pairs.append((ours, theirs.logits.numpy()))
    return pairs


def test_fp32_logits_match_pytorch_for_prefill_and_cached_step(exported):
    manifest, out, checkpoint, arch, precision = exported
    if precision != "fp32":
        pytest.skip("exact logits are an fp32 property")
    compute = _causal_logits if arch == "gpt2" else _seq2seq_logits
    prefill, step = compute(out, checkpoint, manifest)
    np.testing.assert_allclose(prefill[0], prefill[1], atol=1e-4, rtol=0)
    np.testing.assert_allclose(step[0], step[1], atol=1e-4, rtol=0)


def test_parity_report_is_present_and_sane(exported):
    manifest, out, _, _, precision = exported
    parity = manifest["parity"]
    logits, greedy, ppl = parity["logits"], parity["greedy"], parity["perplexity"]
    assert greedy["prompts"] >= 3 and greedy["new_tokens"] == 32
    assert 0.0 <= greedy["token_agreement"] <= 1.0
    assert 0.0 <= logits["argmax_agreement"] <= 1.0
    assert ppl["tokens"] > 10 and ppl["pytorch"] > 1 and ppl["onnx"] > 1
    expected = 100 * (ppl["onnx"] / ppl["pytorch"] - 1)
    assert math.isclose(ppl["relative_change_pct"], expected, rel_tol=1e-9, abs_tol=1e-12)
    if precision == "fp32":
        assert greedy["identical_sequences"] == greedy["prompts"]
        assert greedy["token_agreement"] == 1.0 and logits["argmax_agreement"] == 1.0
        assert logits["prefill_max_abs_diff"] < 1e-4
        assert logits["cached_step_max_abs_diff"] < 1e-4
        assert abs(ppl["relative_change_pct"]) < 0.01
    else:  # quantized: measurably different from PyTorch, still finite
        assert 0 < logits["prefill_max_abs_diff"] < logits["max_abs_logit"]
        assert math.isfinite(ppl["relative_change_pct"])
    readme = (out / "README.md").read_text()
    assert "## Parity with PyTorch" in readme and manifest["precision"] in readme


def test_quantized_graphs_hold_quantized_ops(exported):
    manifest, out, _, _, precision = exported
    counts = [op_counts(onnx.load(str(out / g["file"]))) for g in manifest["graphs"].values()]
    matmul_nbits = sum(c["MatMulNBits"] for c in counts)
    int8_matmuls = sum(c["MatMulInteger"] + c["DynamicQuantizeMatMul"] for c in counts)
    reports = manifest["export"]["quantization"].get("graphs", {}).values()
    assert all(report["float_weight_matmuls"] == 0 for report in reports)  # LM head included
    weight_only = precision == "int4" or (precision, manifest["task"]) == ("int8", "causal-lm")
    if weight_only:  # a causal LM's int8 is 8-bit MatMulNBits: each row computed alone
        assert all(c["MatMulNBits"] > 0 for c in counts)  # every graph, the encoder included
        assert int8_matmuls == 0
    elif precision == "int8":  # seq2seq keeps dynamic int8, per-tensor activations
        assert all(c["MatMulInteger"] + c["DynamicQuantizeMatMul"] > 0 for c in counts)
        assert matmul_nbits == 0
    else:
        assert matmul_nbits == int8_matmuls == 0
    dynamic = sum(c["DynamicQuantizeLinear"] for c in counts)
    assert manifest["batch_invariant"] is (dynamic == 0)
    assert manifest["batch_invariant"] is (precision == "fp32" or weight_only)


def test_export_report_records_optimizer_and_quantization(exported):
    manifest, _, _, arch, precision = exported
    optimizer = manifest["export"]["optimizer"]
    if (arch, precision) == ("gpt2", "int8"):
        assert optimizer == {"applied": False, "summary": "no (--no-optimize)"}
        quantized = manifest["export"]["quantization"]["graphs"]["decoder"]
        assert quantized["gemm_rewritten"] == 8  # optimum's GPT-2: 4 Conv1D per layer
    else:
        assert optimizer["applied"], optimizer
        expected = {
            "gpt2": "SkipLayerNormalization",
            "bart": "SkipLayerNormalization",
            "marian": "SkipLayerNormalization",
            "t5": "SkipSimplifiedLayerNormalization",
        }
        assert optimizer["fused"][expected[arch]] > 0
        if arch == "gpt2":  # the lean graph: one fused attention node per layer
            assert optimizer["graph"] == "lean"
            assert optimizer["fused"]["GroupQueryAttention"] == 2
            assert manifest["graphs"]["decoder"]["kv_cache"] == "shared-buffer"
            assert optimizer["nodes_after"] < optimizer["nodes_before"] / 5
        if arch == "bart":  # lean decoders: self- and cross-attention fused in every layer
            assert optimizer["graph"] == "lean"
            assert optimizer["fused"]["MultiHeadAttention"] == 2 * 2
            assert optimizer["nodes_after"] < optimizer["nodes_before"] / 5
            assert optimizer["encoder"].startswith("yes")  # onnxruntime's optimizer
    assert manifest["export"]["parameters"] > 10_000


def test_controls_and_card_come_from_the_model_directory(exported):
    manifest, out, _, arch, precision = exported
    if (arch, precision) != ("gpt2", "fp32"):
        assert manifest["controls"] == {} and manifest["license"] == ""
        return
    assert manifest["controls"] == CONTROLS
    assert manifest["name"] == CARD["name"] and manifest["license"] == CARD["license"]
    assert manifest["metrics"] == CARD["metrics"]
    assert manifest["training_data"] == CARD["training_data"]
    readme = (out / "README.md").read_text()
    for text in ("tiny-gpt2-card", "CC0-1.0", "marker", "123.4", "108,032"):
        assert text in readme


def test_check_controls_rejects_tokens_the_tokenizer_does_not_know_as_special(tiny_checkpoint):
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(tiny_checkpoint("gpt2") / "tokenizer.json"))
    tokenizer.add_special_tokens(["<|law|>"])
    good = {"section": {"kind": "choice", "values": {"law": "<|law|>"}}}
    assert check_controls(good, tokenizer) == good
    with pytest.raises(ValueError, match="does not know as a special token"):
        check_controls({"section": {"kind": "choice", "values": {"law": "the"}}}, tokenizer)
    with pytest.raises(ValueError, match="`kind` must be one of choice, numeric"):
        check_controls({"section": {"kind": "list", "values": {"law": "<|law|>"}}}, tokenizer)
    with pytest.raises(ValueError, match="numeric values must be numbers"):
        check_controls({"ratio": {"kind": "numeric", "values": {"big": "<|law|>"}}}, tokenizer)


# ---- errors: all raised before any export work --------------------------------------------------


def test_missing_directory(tmp_path):
    with pytest.raises(FileNotFoundError, match="model directory not found"):
        export.export_bundle(tmp_path / "nope", tmp_path / "out")


def test_missing_config_and_weights(tmp_path, tiny_checkpoint):
    partial = shutil.copytree(tiny_checkpoint("gpt2"), tmp_path / "ckpt")
    (partial / "model.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match="no weights in"):
        export.export_bundle(partial, tmp_path / "out")
    (partial / "config.json").unlink()
    with pytest.raises(FileNotFoundError, match="config.json missing"):
        export.export_bundle(partial, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_missing_tokenizer(tmp_path, tiny_checkpoint):
    source = tiny_checkpoint("bart")
    bare = tmp_path / "ckpt"
    bare.mkdir()
    for name in ("config.json", "generation_config.json", "model.safetensors"):
        shutil.copy(source / name, bare / name)
    with pytest.raises(FileNotFoundError, match="no usable tokenizer"):
        export.export_bundle(bare, tmp_path / "out", progress=False)
    assert not (tmp_path / "out").exists()


def test_unsupported_architecture_is_named_with_the_supported_ones(tmp_path):
    from transformers import BertConfig

    BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2).save_pretrained(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"")
    with pytest.raises(ValueError, match=r"'bert' \(causal-lm\) is not supported.*gpt2.*marian"):
        export.export_bundle(tmp_path, tmp_path / "out")


def test_bad_precision_and_output_directory(tmp_path, tiny_checkpoint):
    with pytest.raises(ValueError, match="`precision` must be one of fp32, int8, int4, got 'int2'"):
        export.export_bundle(tiny_checkpoint("gpt2"), tmp_path / "out", precision="int2")
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("keep me")
    with pytest.raises(ValueError, match="not empty and holds no bundle"):
        export.export_bundle(tiny_checkpoint("gpt2"), tmp_path / "busy")
    assert (tmp_path / "busy" / "notes.txt").read_text() == "keep me"


def test_cli_reports_errors_with_exit_code_1(tmp_path, capsys):
    assert cli.main([str(tmp_path / "nope"), str(tmp_path / "out")]) == 1
    assert "model directory not found" in capsys.readouterr().err


def test_python_dash_m_export_help():
    result = subprocess.run(
        [sys.executable, "-m", "export", "--help"], capture_output=True, text=True, check=True
    )
    assert "--precision" in result.stdout and "--no-optimize" in result.stdout


def test_failed_fp32_parity_raises_and_leaves_no_bundle(tmp_path, tiny_checkpoint, monkeypatch):
    real = exporter.check_bundle

    def diverging(*args, **kwargs):
        report = real(*args, **kwargs)
        report["greedy"].update(identical_sequences=0, first_divergence=[3] * 4)
        return report

    monkeypatch.setattr(exporter, "check_bundle", diverging)
    with pytest.raises(export.ParityError, match="does not reproduce PyTorch's greedy tokens"):
        export.export_bundle(
            tiny_checkpoint("gpt2"), tmp_path / "out", optimize=False, progress=False
        )
    assert not (tmp_path / "out").exists()


def test_optimizer_failure_falls_back_to_unoptimized_graphs(tmp_path, monkeypatch, tiny_checkpoint):
    def broken(*args, **kwargs):
        raise RuntimeError("fusion exploded")

    monkeypatch.setattr(exporter, "optimize_graph", broken)
    checkpoint = exporter.inspect_checkpoint(tiny_checkpoint("gpt2"))
    graphs = {"decoder": tmp_path / "model.onnx"}
    kept, report = exporter._ort_optimize(checkpoint, graphs, {"hidden_size": 64}, None, tmp_path)
    assert kept is graphs
    assert report["applied"] is False and "fusion exploded" in report["fallback"]


@pytest.mark.parametrize(
    ("bundle", "ensure_ascii"),
    [("word2vec/cbow", True), ("paraphraser/int8", True), ("masked-lm-base/int8", False)],
)
def test_seal_rewrites_the_shipped_manifests_in_the_current_schema(bundle, ensure_ascii, tmp_path):
    from convert.manifest import seal
    from runtime.bundle import read_manifest
    from runtime.manifest import Manifest

    shipped = Path(__file__).resolve().parents[1] / "models" / bundle
    copy = tmp_path / "bundle"
    shutil.copytree(shipped, copy)
    seal(copy, ensure_ascii=ensure_ascii)
    expected = Manifest.read(shipped / "manifest.json").to_json()
    written = (copy / "manifest.json").read_text()
    assert written == json.dumps(expected, indent=2, ensure_ascii=ensure_ascii) + "\n"
    readme = copy / "README.md"
    readme.write_text(readme.read_text() + "\nOne more line.\n")
    manifest = seal(copy, ensure_ascii=ensure_ascii)
    digest = hashlib.sha256(readme.read_bytes()).hexdigest()
    assert manifest.files["README.md"].sha256 == digest
    assert read_manifest(copy).files == manifest.files  # the runtime's checksums agree
