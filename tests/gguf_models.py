"""Tiny random Llama and Qwen2 GGUF files written with `gguf.GGUFWriter`, for the importer's tests.

`write_tiny_gguf(path, architecture, quant)` writes a 2-layer model (width 256, 4 query heads and 2
KV heads of 64, SwiGLU width 512) whose projections are in `quant` (F32, F16, Q4_0, Q4_1, Q8_0,
Q4_K, any type `gguf.quants` can quantize, or Q8_K as random bytes), with a byte-level BPE
tokenizer trained here on a few sentences (ChatML special tokens first) and a ChatML chat
template. gguf's quantizer has no Q4_K, so Q4_K blocks are built from random bytes with bounded
float16 scales.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content']"
    " + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\n' }}{% endif %}"
)
CORPUS = [
    "In the beginning God created the heaven and the earth.",
    "And the earth was without form, and void; and darkness was upon the face of the deep.",
    "The capital of France is Paris, and 2024 had 366 days.",
    "Über naïve café — 東京 and Zürich: 12345 numbers, tabs\tand  spaces.",
    "def main():\n    return 42\n",
]
WIDTH, INNER, HEADS, KV_HEADS, LAYERS = 256, 512, 4, 2, 2


def tiny_vocabulary(pre: str = "default") -> tuple[list[str], list[str], list[int]]:
    """tokens, merges ("a b") and llama.cpp token types (3 = control) of a small byte-level BPE."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(
        vocab_size=420,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(CORPUS * 3, trainer)
    model = json.loads(tokenizer.to_str())["model"]
    tokens = [t for t, _ in sorted(model["vocab"].items(), key=lambda item: item[1])]
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    types = [3 if t in SPECIALS else 1 for t in tokens]
    return tokens, merges, types


def _q4_k_blocks(rng: np.random.Generator, rows: int, cols: int) -> np.ndarray:
    blocks = rng.integers(0, 256, (rows, cols // 256, 144), dtype=np.uint8)
    d = (rng.uniform(0.5, 1.0, (rows, cols // 256)) * 2e-3).astype(np.float16)
    dmin = (rng.uniform(0.5, 1.0, (rows, cols // 256)) * 2e-3).astype(np.float16)
    blocks[..., 0:2] = d[..., None].view(np.uint8)
    blocks[..., 2:4] = dmin[..., None].view(np.uint8)
    return blocks.reshape(rows, -1)


def _add(writer, name: str, weight: np.ndarray, quant: str, rng, drop=()) -> None:
    """Add an (N, K) float32 weight as `quant` (nothing when `name` is in `drop`)."""
    from gguf import GGMLQuantizationType, quants

    if name in drop:
        return

    if quant == "F32" or weight.ndim == 1:
        writer.add_tensor(name, weight.astype(np.float32))
    elif quant == "F16":
        writer.add_tensor(name, weight.astype(np.float16))
    else:
        kind = GGMLQuantizationType[quant]
        if quant == "Q4_K":
            data = _q4_k_blocks(rng, *weight.shape)
        elif quant == "Q8_K":  # no quantizer nor dequantizer in gguf: raw bytes, for errors
            block, size = quants.GGML_QUANT_SIZES[kind]
            data = rng.integers(0, 256, (weight.shape[0], weight.shape[1] // block * size))
            data = data.astype(np.uint8)
        else:
            data = quants.quantize(weight.astype(np.float32), kind)
        writer.add_tensor(name, data, raw_shape=data.shape, raw_dtype=kind)


def write_tiny_gguf(
    path: Path,
    architecture: str = "llama",
    quant: str = "Q4_1",
    seed: int = 0,
    tied: bool = True,
    pre: str | None = None,
    tokenizer_model: str = "gpt2",
    overrides: dict[str, str] | None = None,
    metadata: dict | None = None,
    drop: tuple[str, ...] = (),
) -> Path:
    """Write a tiny random model; returns `path`. `overrides` gives some projections another type
    (e.g. {"attn_v": "Q8_0"}, as llama.cpp's mixed "_M" files do). `metadata` sets keys over the
    usual ones ({key: value}, or {key: (value, gguf.GGUFValueType)} to choose the stored type)
    and `drop` leaves tensors out, for hostile files (tests/test_hostile_gguf.py)."""
    overrides = overrides or {}

    def kind(projection: str) -> str:
        return overrides.get(projection, quant)

    import gguf

    rng = np.random.default_rng(seed)
    tokens, merges, types = tiny_vocabulary()
    vocab = len(tokens)
    writer = gguf.GGUFWriter(str(path), architecture)
    writer.add_name(f"tiny-{architecture}-{quant}")
    writer.add_block_count(LAYERS)
    writer.add_context_length(128)
    writer.add_embedding_length(WIDTH)
    writer.add_feed_forward_length(INNER)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_freq_base(10000.0)
    writer.add_rope_dimension_count(WIDTH // HEADS)
    writer.add_vocab_size(vocab)
    writer.add_tokenizer_model(tokenizer_model)
    writer.add_tokenizer_pre(pre or ("qwen2" if architecture == "qwen2" else "default"))
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    writer.add_bos_token_id(0)
    writer.add_eos_token_id(2)
    writer.add_add_bos_token(False)
    writer.add_chat_template(CHAT_TEMPLATE)

    def normal(*shape, scale=0.08):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    for key, value in (metadata or {}).items():
        value, vtype = (
            value if isinstance(value, tuple) else (value, gguf.GGUFValueType.get_type(value))
        )
        sub = gguf.GGUFValueType.get_type(value[0]) if vtype == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(key, value, vtype, sub_type=sub)

    head = WIDTH // HEADS
    _add(writer, "token_embd.weight", normal(vocab, WIDTH, scale=0.5), quant, rng, drop)
    for i in range(LAYERS):
        p = f"blk.{i}."
        _add(writer, p + "attn_norm.weight", 1 + normal(WIDTH, scale=0.1), quant, rng, drop)
        _add(writer, p + "attn_q.weight", normal(HEADS * head, WIDTH), kind("attn_q"), rng, drop)
        _add(writer, p + "attn_k.weight", normal(KV_HEADS * head, WIDTH), kind("attn_k"), rng, drop)
        _add(writer, p + "attn_v.weight", normal(KV_HEADS * head, WIDTH), kind("attn_v"), rng, drop)
        if architecture == "qwen2":
            for n, rows in (("q", HEADS), ("k", KV_HEADS), ("v", KV_HEADS)):
                _add(writer, p + f"attn_{n}.bias", normal(rows * head, scale=0.5), quant, rng, drop)
        _add(
            writer,
            p + "attn_output.weight",
            normal(WIDTH, HEADS * head),
            kind("attn_output"),
            rng,
            drop,
        )
        _add(writer, p + "ffn_norm.weight", 1 + normal(WIDTH, scale=0.1), quant, rng, drop)
        _add(writer, p + "ffn_gate.weight", normal(INNER, WIDTH), kind("ffn_gate"), rng, drop)
        _add(writer, p + "ffn_up.weight", normal(INNER, WIDTH), kind("ffn_up"), rng, drop)
        _add(writer, p + "ffn_down.weight", normal(WIDTH, INNER), kind("ffn_down"), rng, drop)
    _add(writer, "output_norm.weight", 1 + normal(WIDTH, scale=0.1), quant, rng, drop)
    if not tied:
        _add(writer, "output.weight", normal(vocab, WIDTH, scale=0.5), quant, rng, drop)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return Path(path)


def write_sentencepiece_gguf(path: Path) -> Path:
    """A GGUF holding only a SentencePiece-style (`llama`) vocabulary: `<unk>`, `<s>`, `</s>`,
    the 256 `<0xNN>` byte pieces, then pieces of a BPE trained here with `▁` for spaces, scored
    by rank; one tensor, no model (for tokenizer tests)."""
    import gguf
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    trainer = trainers.BpeTrainer(vocab_size=400, show_progress=False)
    tokenizer.train_from_iterator(CORPUS * 3, trainer)
    vocab = json.loads(tokenizer.to_str())["model"]["vocab"]
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{i:02X}>" for i in range(256)]
    types = [2, 3, 3] + [6] * 256  # unknown, control, byte
    pieces = [p for p, _ in sorted(vocab.items(), key=lambda item: item[1]) if p not in tokens]
    scores = [0.0] * len(tokens) + [-float(rank) for rank in range(len(pieces))]
    tokens, types = tokens + pieces, types + [1] * len(pieces)
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_scores(scores)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_unk_token_id(0)
    writer.add_tensor("token_embd.weight", np.zeros((len(tokens), 32), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return Path(path)
