"""The GGUF importer (convert/gguf.py) against transformers loading the same GGUF file.

Tiny random Llama and Qwen2 GGUFs are written here (tests/gguf_models.py) in each supported type;
for each, the fp32 graph and the carried-over graph (MatMulNBits at accuracy levels 0 and 4) are
compared with transformers' dequantized model: max |Δlogit|, teacher-forced top-1 agreement, and
greedy continuations through `runtime.load`. Also: block decoding against `gguf.quants`, tokenizer
parity, the manifest, the CLI, and the errors. One slow test converts the real SmolLM2 file.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pytest

from convert.gguf import export_gguf
from convert.gguf_read import linear_from_blocks, read_gguf
from convert.gguf_tokenizer import build_tokenizer
from export.cli import main
from runtime import load
from runtime.bundle import LORA_FORMAT
from runtime.config import GenerationConfig
from tests.gguf_models import CORPUS, write_sentencepiece_gguf, write_tiny_gguf

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

PROMPT = "In the beginning God created the heaven"
NEW_TOKENS = 10
TEXTS = [
    *CORPUS,
    "Hello, world!  Two  spaces,\tand\n\nnewlines\r\n.",
    "naïve café 東京 emoji 🙂 ünïcödé",
    "digits 0 12 345 6789 3.14159 1,000,000",
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
    "   leading spaces and trailing   ",
]
# Quant types × what the carried-over graph at accuracy level 0 must reach: exact (same weights
# as transformers' dequantization) or re-quantized (Q5_0 -> Q8_0, close).
QUANTS = ["F32", "F16", "Q4_0", "Q4_1", "Q8_0", "Q4_K", "Q5_0"]


def reference(gguf_path: Path):
    return transformers.AutoModelForCausalLM.from_pretrained(
        str(gguf_path.parent), gguf_file=gguf_path.name, dtype=torch.float32
    ).eval()


@pytest.mark.parametrize("quant", ["Q4_0", "Q4_1", "Q8_0", "Q4_K"])
def test_blocks_decode_as_gguf_dequantizes(quant):
    from gguf import GGMLQuantizationType, quants

    rng = np.random.default_rng(1)
    weight = rng.standard_normal((48, 512)).astype(np.float32)
    if quant == "Q4_K":
        from tests.gguf_models import _q4_k_blocks

        data = _q4_k_blocks(rng, 48, 512)
    else:
        data = quants.quantize(weight, GGMLQuantizationType[quant])
    expected = quants.dequantize(data, GGMLQuantizationType[quant])
    linear = linear_from_blocks(quant, data, 48, 512)
    np.testing.assert_array_equal(linear.dequantized(), expected)
    assert linear.bits == (8 if quant == "Q8_0" else 4)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """(architecture, quant) -> (gguf path, {variant: bundle}, prompt ids, transformers logits of
    the prompt, transformers greedy continuation)."""
    cache = {}

    def make(architecture: str, quant: str):
        if (architecture, quant) not in cache:
            root = tmp_path_factory.mktemp(f"{architecture}-{quant}")
            path = write_tiny_gguf(root / "model.gguf", architecture, quant, tied=quant != "F16")
            bundles = {
                "fp32": dict(fp32=True),
                "level0": dict(accuracy_level=0),
                "level4": dict(accuracy_level=4),
            }
            for variant, options in bundles.items():
                bundles[variant] = root / variant
                export_gguf(path, root / variant, parity=False, **options)
            model = reference(path)
            prompt_ids = build_tokenizer(read_gguf(path).tokenizer).encode(PROMPT).ids
            ids = torch.tensor([prompt_ids])
            with torch.no_grad():
                logits = model(ids).logits[0].numpy()
                generated = model.generate(
                    ids,
                    max_new_tokens=NEW_TOKENS,
                    min_new_tokens=NEW_TOKENS,
                    do_sample=False,
                    pad_token_id=0,
                )[0, len(prompt_ids) :].tolist()
            cache[architecture, quant] = (path, bundles, prompt_ids, logits, generated)
        return cache[architecture, quant]

    return make


def _logits(bundle: Path, gguf_path: Path, ids: list[int]) -> np.ndarray:
    from convert.bundle import full_logits, parity_session

    return full_logits(parity_session(bundle / "model.onnx"), read_gguf(gguf_path), ids)


def _greedy(bundle: Path) -> list[int]:
    generator = load(bundle, threads=1)
    config = GenerationConfig(max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False)
    return generator.generate(PROMPT, config)[0].token_ids


@pytest.mark.parametrize("architecture", ["llama", "qwen2"])
@pytest.mark.parametrize("quant", QUANTS)
def test_logits_and_greedy_match_transformers(tiny, architecture, quant):
    path, bundles, ids, expected, generated = tiny(architecture, quant)
    scale = float(np.abs(expected).max())

    fp32 = _logits(bundles["fp32"], path, ids)
    assert np.abs(fp32 - expected).max() < 1e-3 * scale
    assert (fp32.argmax(-1) == expected.argmax(-1)).all()
    assert _greedy(bundles["fp32"]) == generated

    # Carried over with float activations: the very weights transformers dequantizes, unless the
    # type had to be re-quantized.
    level0 = _logits(bundles["level0"], path, ids)
    manifest = json.loads((bundles["level0"] / "manifest.json").read_text())
    notes = manifest["export"]["quantization"]["notes"]
    if quant == "Q5_0":
        assert notes and all("re-quantized to Q8_0" in note for note in notes)
        assert np.abs(level0 - expected).max() < 0.05 * scale
    else:
        assert notes == []
        assert np.abs(level0 - expected).max() < 1e-3 * scale
        assert _greedy(bundles["level0"]) == generated

    # int8 activations (accuracy level 4): close, not exact; a random tiny model's logits are
    # near-flat, so its top-1 may flip between near-ties: each pick is among the reference's top 5.
    level4 = _logits(bundles["level4"], path, ids)
    assert np.abs(level4 - expected).max() < 0.1 * scale
    top5 = np.argsort(-expected, axis=-1)[:, :5]  # (T, 5)
    assert all(pick in row for pick, row in zip(level4.argmax(-1), top5))


@pytest.mark.parametrize("architecture", ["llama", "qwen2"])
def test_mixed_types_match_transformers(tmp_path, architecture):
    """A Q4_K_M-like file: q, k, gate and LM head in Q4_K, v and up in Q8_0, down re-quantized
    from Q5_0, so q|k|v and gate|up cannot share one kernel."""
    overrides = {"attn_v": "Q8_0", "ffn_up": "Q8_0", "ffn_down": "Q5_0"}
    path = write_tiny_gguf(tmp_path / "mixed.gguf", architecture, "Q4_K", overrides=overrides)
    manifest = export_gguf(path, tmp_path / "bundle", accuracy_level=0, parity=False).to_json()
    assert set(manifest["export"]["quantization"]["storage"]) == {"Q4_K", "Q8_0", "Q5_0"}
    ids = build_tokenizer(read_gguf(path).tokenizer).encode(PROMPT).ids
    with torch.no_grad():
        expected = reference(path)(torch.tensor([ids])).logits[0].numpy()
    ours = _logits(tmp_path / "bundle", path, ids)
    assert np.abs(ours - expected).max() < 0.05 * np.abs(expected).max()
    assert (ours.argmax(-1) == expected.argmax(-1)).mean() >= 0.8


@pytest.mark.parametrize(
    ("architecture", "quant", "storage"),
    [
        ("llama", "Q4_1", "4-bit, block 32, default zero point, + per-block offsets"),
        ("qwen2", "Q4_0", "4-bit, block 32, default zero point"),
        ("llama", "Q8_0", "8-bit, block 32, default zero point"),
    ],
)
def test_manifest_card_and_parity_report(tmp_path, architecture, quant, storage):
    path = write_tiny_gguf(tmp_path / "tiny.gguf", architecture, quant)
    manifest = export_gguf(path, tmp_path / "bundle").to_json()
    assert manifest["task"] == "causal-lm" and manifest["architecture"] == architecture
    source = manifest["export"]["gguf"]
    assert source["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert source["metadata"]["general.architecture"] == architecture
    assert manifest["export"]["quantization"]["storage"][quant].endswith(storage)
    assert manifest["export"]["quantization"]["tied_embeddings"] is True
    assert manifest["num_heads"] == 2 and manifest["head_size"] == 64
    assert manifest["graphs"]["decoder"]["kv_cache"] == "shared-buffer"
    assert "seqlens_k" in manifest["graphs"]["decoder"]["inputs"]
    chat = manifest["chat"]
    assert "<|im_start|>" in chat["template"]
    assert chat["end_of_turn_token_ids"] == [2] and chat["end_of_turn_tokens"] == ["<|im_end|>"]
    parity = manifest["parity"]
    assert parity["top1_agreement"] >= 0.75
    assert parity["cached_step_max_abs_diff"] < 0.1 * parity["max_abs_logit"]
    card = (tmp_path / "bundle" / "README.md").read_text()
    assert source["sha256"] in card and "teacher-forced top-1 agreement" in card
    stored = json.loads((tmp_path / "bundle" / "manifest.json").read_text())
    files = {"model.onnx", "model.onnx.data", "model_lora.onnx", "tokenizer.json", "README.md"}
    assert set(stored["files"]) == files
    # The LoRA slot graph shares the plain graph's weights file: only small tensors of its own.
    assert stored["lora"]["file"] == "model_lora.onnx" and stored["lora"]["format"] == LORA_FORMAT
    assert (
        stored["files"]["model_lora.onnx"]["size"] < stored["files"]["model.onnx.data"]["size"] / 10
    )
    slots = stored["lora"]["slots"]
    assert len(slots) == 4 * 2  # q|k|v, o, gate|up, down per layer, fused here
    assert slots["lora.1.q_proj+k_proj+v_proj"]["parts"] == [
        ["q_proj", 256],
        ["k_proj", 128],
        ["v_proj", 128],
    ]
    assert not any(name.startswith("lora.") for name in stored["graphs"]["decoder"]["inputs"])
    # The bundle opens and generates through the runtime.
    out = load(tmp_path / "bundle", threads=1).generate(
        "In the beginning", GenerationConfig(max_new_tokens=4, do_sample=False)
    )
    assert len(out[0].token_ids) >= 1


@pytest.mark.parametrize("architecture", ["llama", "qwen2"])
def test_tokenizer_matches_transformers(tmp_path, architecture):
    path = write_tiny_gguf(tmp_path / "tiny.gguf", architecture, "F32")
    ours = build_tokenizer(read_gguf(path).tokenizer)
    theirs = transformers.AutoTokenizer.from_pretrained(str(tmp_path), gguf_file=path.name)
    for text in TEXTS:
        ids = ours.encode(text).ids
        assert ids == theirs.encode(text, add_special_tokens=False), text
        assert ours.decode(ids, skip_special_tokens=False) == text
    chat = ours.encode("<|im_start|>user\nhi<|im_end|>").ids
    assert chat[0] == 1 and chat[-1] == 2


def test_sentencepiece_tokenizer_matches_transformers(tmp_path):
    import gguf

    path = write_sentencepiece_gguf(tmp_path / "spm.gguf")
    reader = gguf.GGUFReader(str(path))
    fields = {k: f.contents() for k, f in reader.fields.items() if k.startswith("tokenizer.")}
    ours = build_tokenizer(fields)
    theirs = transformers.AutoTokenizer.from_pretrained(str(tmp_path), gguf_file=path.name)
    for text in TEXTS[:-2]:  # not the ChatML tokens, which this vocabulary lacks
        ids = ours.encode(text).ids
        assert ids == theirs.encode(text, add_special_tokens=False), text
        assert ours.decode(ids) == text
    assert ours.encode("🙂").ids[1:] == [ours.token_to_id(f"<0x{b:02X}>") for b in "🙂".encode()]


def test_smollm_pre_tokenizer_splits_digits(tmp_path):
    path = write_tiny_gguf(tmp_path / "tiny.gguf", "llama", "F32", pre="smollm")
    tokenizer = build_tokenizer(read_gguf(path).tokenizer)
    pieces = [tokenizer.decode([i]) for i in tokenizer.encode("year 2024 and 366").ids]
    assert [p for p in pieces if p.strip().isdigit()] == ["2", "0", "2", "4", "3", "6", "6"]


def test_unsupported_architecture(tmp_path):
    import gguf

    path = tmp_path / "phi.gguf"
    writer = gguf.GGUFWriter(str(path), "phi2")
    writer.add_block_count(1)
    writer.add_tensor("token_embd.weight", np.zeros((8, 32), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(ValueError, match="phi2") as refused:
        export_gguf(path, tmp_path / "bundle")
    # the refusal lists what is supported and where the table is
    assert "llama, qwen2, qwen3, gemma, gemma2" in str(refused.value)
    assert "docs/GGUF.md" in str(refused.value)
    assert main(["gguf", str(path), str(tmp_path / "bundle")]) == 2


def test_unsupported_tensor_type(tmp_path):
    path = write_tiny_gguf(tmp_path / "q8k.gguf", "llama", "Q8_K")
    with pytest.raises(ValueError, match="Q8_K"):
        export_gguf(path, tmp_path / "bundle", parity=False)


def test_unsupported_tokenizer_model(tmp_path):
    path = write_tiny_gguf(tmp_path / "bert.gguf", "llama", "F32", tokenizer_model="bert")
    with pytest.raises(ValueError, match="bert"):
        export_gguf(path, tmp_path / "bundle", parity=False)


def test_unknown_pre_tokenizer(tmp_path):
    path = write_tiny_gguf(tmp_path / "pre.gguf", "llama", "F32", pre="mystery")
    with pytest.raises(ValueError, match="mystery"):
        export_gguf(path, tmp_path / "bundle", parity=False)


@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_corrupted_file(tmp_path, damage):
    path = write_tiny_gguf(tmp_path / "tiny.gguf", "llama", "Q4_0")
    data = path.read_bytes()
    if damage == "garbage":
        path.write_bytes(b"GGUF" + bytes(range(256)) * 4)
    else:
        path.write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match="not a readable GGUF"):
        export_gguf(path, tmp_path / "bundle", parity=False)
    assert not (tmp_path / "bundle").exists()


def test_cli_writes_a_bundle(tmp_path, capsys):
    path = write_tiny_gguf(tmp_path / "tiny.gguf", "qwen2", "Q4_1")
    assert main(["gguf", str(path), str(tmp_path / "bundle"), "--fp32", "--no-parity"]) == 0
    assert "wrote tiny (qwen2, fp32)" in capsys.readouterr().out
    manifest = json.loads((tmp_path / "bundle" / "manifest.json").read_text())
    assert manifest["export"]["quantization"]["storage"] == {"Q4_1": "float32 MatMul (dequantized)"}


@pytest.mark.parametrize("architecture", ["llama", "qwen2"])
def test_left_padded_batch_matches_single_prompts(tmp_path, architecture):
    """Rows of different lengths share a batch (left padding, per-row positions for the rotary
    embedding) and each gets what it gets alone."""
    path = write_tiny_gguf(tmp_path / "tiny.gguf", architecture, "F32")
    export_gguf(path, tmp_path / "bundle", fp32=True, parity=False)
    generator = load(tmp_path / "bundle", threads=1)
    prompts = ["In the beginning God created the heaven and the earth", "Paris"]
    config = GenerationConfig(max_new_tokens=8, min_new_tokens=8, do_sample=False)
    together = [out.token_ids for out in generator.generate(prompts, config)]
    alone = [generator.generate(prompt, config)[0].token_ids for prompt in prompts]
    assert together == alone


def _call(session, model, ids, past, seqlens, total):
    """One graph call: logits (B, S, V) and the presents, with explicit per-row cache lengths."""
    feeds = {
        "input_ids": np.asarray(ids, dtype=np.int64),  # (B, S)
        "attention_mask": np.ones((len(ids), total), dtype=np.int64),  # (B, T): no padding
        "seqlens_k": np.asarray(seqlens, dtype=np.int32),  # (B,)
        "total_sequence_length": np.array(total, dtype=np.int32),
        "logits_to_keep": np.array(0, dtype=np.int64),
    }
    for i in range(model.layers):
        feeds[f"past_key_values.{i}.key"], feeds[f"past_key_values.{i}.value"] = past[
            2 * i : 2 * i + 2
        ]
    logits, *present = session.run(None, feeds)
    return logits, present


def test_rows_with_their_own_cache_lengths(tmp_path):
    """Continuous batching's need: one step over rows whose caches hold different lengths (each
    row's valid prefix first, `seqlens_k` per row) gives each row what it gets alone."""
    from convert.bundle import parity_session

    path = write_tiny_gguf(tmp_path / "tiny.gguf", "qwen2", "F32")
    export_gguf(path, tmp_path / "bundle", fp32=True, parity=False)
    model, session = read_gguf(path), parity_session(tmp_path / "bundle" / "model.onnx")
    empty = [np.zeros((1, model.kv_heads, 0, model.head_size), np.float32)] * (2 * model.layers)
    prompts, nexts = [[5, 6, 7, 8, 9, 10], [11, 12, 13]], [20, 21]
    alone, caches = [], []
    for prompt, token in zip(prompts, nexts):
        _, cache = _call(session, model, [prompt], empty, [len(prompt) - 1], len(prompt))
        logits, _ = _call(session, model, [[token]], cache, [len(prompt)], len(prompt) + 1)
        alone.append(logits[0, -1])
        caches.append(cache)
    longest = max(map(len, prompts))
    padded = [  # (2, H, longest, D): each row's cache first, zeros after
        np.concatenate(
            [np.pad(c[j], ((0, 0), (0, 0), (0, longest - c[j].shape[2]), (0, 0))) for c in caches]
        )
        for j in range(2 * model.layers)
    ]
    lengths = [len(p) for p in prompts]
    logits, _ = _call(session, model, [[t] for t in nexts], padded, lengths, longest + 1)
    np.testing.assert_allclose(logits[:, -1], np.stack(alone), atol=1e-4)


def test_import_is_torch_free(tmp_path):
    """The whole GGUF path, CLI included, runs without importing torch or transformers."""
    import subprocess
    import sys

    path = write_tiny_gguf(tmp_path / "tiny.gguf", "llama", "Q4_1")
    script = (
        "import sys\n"
        "from export.cli import main\n"
        f"assert main(['gguf', {str(path)!r}, {str(tmp_path / 'bundle')!r}]) == 0\n"
        "print(sorted(m for m in ('torch', 'transformers', 'optimum') if m in sys.modules))\n"
    )
    root = str(Path(__file__).resolve().parent.parent)
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        cwd=root,
        env={**os.environ, "PYTHONPATH": root},
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"


@pytest.mark.slow
def test_smollm2_real_file(tmp_path):
    """The real 93 MB Q4_1 file: int4 carried over against transformers' dequantized model."""
    from convert.bundle import full_logits, parity_session
    from convert.fetch import find_gguf

    path = find_gguf()
    if path is None:
        pytest.skip("the flagship GGUF is not on this machine: `scriptorium fetch smollm2`")
    export_gguf(path, tmp_path / "bundle", parity=False)
    generator = load(tmp_path / "bundle", threads=2)
    text = generator.generate(
        "The capital of France is", GenerationConfig(max_new_tokens=8, do_sample=False)
    )[0].text
    assert "Paris" in text
    model = reference(path)
    # the model's config spares the tokenizer a third reading of the 93 MB file (≈ 3 s each)
    tokenizer = transformers.AutoTokenizer.from_pretrained(
        str(path.parent), gguf_file=path.name, config=model.config
    )
    for text in TEXTS:
        assert generator.tokenizer.encode(text).ids == tokenizer.encode(
            text, add_special_tokens=False
        ), text
    session, gguf = parity_session(tmp_path / "bundle" / "model.onnx"), read_gguf(path)
    for prompt in ["The capital of France is", "<|im_start|>user\nName a fruit.<|im_end|>\n"]:
        ids = generator.tokenizer.encode(prompt).ids
        assert ids == tokenizer.encode(prompt, add_special_tokens=False)
        with torch.no_grad():
            expected = model(torch.tensor([ids])).logits[0].numpy()
        ours = full_logits(session, gguf, ids)
        assert (ours.argmax(-1) == expected.argmax(-1)).mean() >= 0.8
        assert np.abs(ours - expected).max() < 0.1 * np.abs(expected).max()
