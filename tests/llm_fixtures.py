"""A tiny random Llama GGUF for tests of the flagship cache and `bench llm`, written with gguf's
own writer: byte-level BPE vocabulary trained on the fixture verses, 2 layers, GQA, tied
embeddings, F32 or Q8_0/Q4_1 weights (llama.cpp's layout: 2-D tensors stored (rows, columns))."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

VERSES = Path(__file__).parent / "fixtures" / "verses.tsv"
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{{ message['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def _bpe(vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    with open(VERSES, newline="") as file:
        texts = [row["web"] for row in csv.DictReader(file, delimiter="\t")]
    tokenizer.train_from_iterator(texts, trainer)
    return tokenizer


def write_tiny_gguf(
    path: Path,
    quant: str = "F32",
    vocab_size: int = 512,
    hidden: int = 64,
    layers: int = 2,
    heads: int = 4,
    kv_heads: int = 2,
    ffn: int = 128,
    seed: int = 0,
) -> Path:
    """Write a random Llama GGUF with a BPE tokenizer at `path`; `quant` is F32, Q8_0 or Q4_1."""
    import json

    import gguf

    tokenizer = _bpe(vocab_size)
    state = json.loads(tokenizer.to_str())["model"]
    tokens = sorted(state["vocab"], key=state["vocab"].get)
    merges = [m if isinstance(m, str) else " ".join(m) for m in state["merges"]]
    types = [gguf.TokenType.CONTROL if t in SPECIALS else gguf.TokenType.NORMAL for t in tokens]

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("tiny-llama")
    writer.add_context_length(512)
    writer.add_embedding_length(hidden)
    writer.add_block_count(layers)
    writer.add_feed_forward_length(ffn)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_freq_base(10000.0)
    writer.add_rope_dimension_count(hidden // heads)
    writer.add_vocab_size(len(tokens))
    writer.add_file_type(getattr(gguf.LlamaFileType, f"MOSTLY_{quant}", gguf.LlamaFileType.ALL_F32))
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    writer.add_bos_token_id(tokens.index("<|im_start|>"))
    writer.add_eos_token_id(tokens.index("<|im_end|>"))
    writer.add_add_bos_token(False)
    writer.add_chat_template(CHAT_TEMPLATE)

    rng = np.random.default_rng(seed)
    head_size = hidden // heads

    def norm():  # not all ones: exporters would share equal initializers
        return (1 + rng.standard_normal(hidden) * 0.05).astype(np.float32)

    def weight(rows, columns):
        return (rng.standard_normal((rows, columns)) * 0.08).astype(np.float32)  # (out, in)

    def add(name, array):
        if quant == "F32" or array.ndim == 1:
            writer.add_tensor(name, array)
            return
        kind = getattr(gguf.GGMLQuantizationType, quant)
        writer.add_tensor(name, gguf.quants.quantize(array, kind), raw_dtype=kind)

    add("token_embd.weight", weight(len(tokens), hidden))
    for layer in range(layers):
        prefix = f"blk.{layer}."
        add(prefix + "attn_norm.weight", norm())
        add(prefix + "attn_q.weight", weight(heads * head_size, hidden))
        add(prefix + "attn_k.weight", weight(kv_heads * head_size, hidden))
        add(prefix + "attn_v.weight", weight(kv_heads * head_size, hidden))
        add(prefix + "attn_output.weight", weight(hidden, heads * head_size))
        add(prefix + "ffn_norm.weight", norm())
        add(prefix + "ffn_gate.weight", weight(ffn, hidden))
        add(prefix + "ffn_up.weight", weight(ffn, hidden))
        add(prefix + "ffn_down.weight", weight(hidden, ffn))
    add("output_norm.weight", norm())
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
