"""Tiny random-weight Hugging Face checkpoints for tests.

`make_checkpoint(arch, out_dir, seed)` writes a directory that `AutoModel*.from_pretrained` and
`AutoTokenizer.from_pretrained` open: config.json, model.safetensors, generation_config.json, and a
byte-level BPE tokenizer (tokenizer.json + tokenizer_config.json + special_tokens_map.json) trained
on the fly on a few dozen built-in sentences, so its vocabulary matches the model's embedding rows.

The weights are random (deterministic given `seed`) but initialised with a large standard deviation
so that greedy decoding is not degenerate: the logits have clear winners (no near-ties that would
make ONNX-vs-PyTorch greedy comparisons flaky) and EOS is chosen for some prompts but not all.
`make_chat_checkpoint(out_dir, seed)` writes a tiny Llama chat model (a ChatML template, as
SmolLM2's). This module does not train anything and needs no network.
"""

from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import (
    BartConfig,
    BartForConditionalGeneration,
    GenerationConfig,
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    MarianConfig,
    MarianMTModel,
    PreTrainedTokenizerFast,
    T5Config,
    T5ForConditionalGeneration,
)

ARCHITECTURES = ("gpt2", "bart", "t5", "marian")

# Prompts of varied lengths, for generation and parity tests.
PROMPTS: list[str] = [
    "In the beginning",
    "The",
    "And the light shone in the darkness, and the darkness did not overcome it.",
    "Blessed are the meek,",
    "Once upon a time there was a small village by the sea",
    "He said to them,",
    "A river went out of the garden to water it, and from there it was parted",
    "Hello",
    "The quick brown fox jumps over the lazy dog while the farmer sleeps in the barn.",
    "What is the meaning of",
    "Let there be light",
    "She walked to the market in the morning and bought bread, fish, oil and a jar of honey for "
    "her mother, who was waiting at home.",
    "Why",
    "Give us this day our daily bread",
]

# Training text for the tokenizer: the prompts plus a few more plain sentences.
_CORPUS: list[str] = PROMPTS + [
    "The earth was formless and empty, and darkness was on the surface of the deep.",
    "God saw the light, and saw that it was good.",
    "The sun rises in the east and sets in the west.",
    "Children played in the streets until the evening bells rang.",
    "A wise man builds his house upon the rock.",
    "The rain fell and the winds blew and beat upon that house.",
    "They sailed across the sea for forty days and forty nights.",
    "Numbers: one, two, three, four, five, six, seven, eight, nine, ten.",
    "Where are you going? I am going home.",
    "The teacher opened the book and began to read aloud.",
    "Bread and wine were set upon the table.",
    "My brother lives in a small house near the mountains.",
    "The king sent messengers to every city of the land.",
    "Love is patient and kind.",
    "The shepherd counted his sheep at the gate.",
    "Every morning she wrote a letter to her friend.",
    "The old road runs through the forest to the river.",
    "We will meet again tomorrow at noon.",
    "Stars filled the sky above the quiet fields.",
    "Write the vision, and make it plain upon tables.",
]

# (special tokens in id order, vocabulary size to aim for) per architecture.
_SPECIALS = {
    "gpt2": ["<|endoftext|>"],
    "bart": ["<s>", "<pad>", "</s>", "<unk>", "<mask>"],
    "t5": ["<pad>", "</s>", "<unk>"],
    "marian": ["</s>", "<unk>", "<pad>"],
}
_VOCAB_TARGET = 512

# Per architecture: initialisation std, whether input and output embeddings are tied, and how the
# output layer is shaped so that greedy decoding is varied and ends with EOS for some prompts only:
# tied models scale the EOS row of the (shared) embedding, untied ones scale the whole LM head
# (wider logit gaps, same argmax) and add a bias to the EOS logit. Tuned on PROMPTS with seed 0.
_INIT = {
    "gpt2": {"std": 0.35, "tied": True, "eos_row_scale": 1.35},
    "t5": {"std": 0.1, "tied": False, "eos_row_scale": 1.75},
    "bart": {"std": 0.05, "tied": False, "head_scale": 10.0, "eos_bias": 4.0},
    "marian": {"std": 0.05, "tied": False, "head_scale": 10.0, "eos_bias": 8.0},
}


def _train_tokenizer(arch: str) -> Tokenizer:
    """Byte-level BPE with the architecture's special tokens and post-processor."""
    specials = _SPECIALS[arch]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=_VOCAB_TARGET,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_CORPUS, trainer=trainer)
    ids = {t: tok.token_to_id(t) for t in specials}
    if arch == "bart":  # <s> text </s>
        tok.post_processor = processors.TemplateProcessing(
            single="<s> $A </s>",
            pair="<s> $A </s> </s> $B </s>",
            special_tokens=[("<s>", ids["<s>"]), ("</s>", ids["</s>"])],
        )
    elif arch in ("t5", "marian"):  # text </s>
        tok.post_processor = processors.TemplateProcessing(
            single="$A </s>", pair="$A </s> $B </s>", special_tokens=[("</s>", ids["</s>"])]
        )
    else:  # gpt2 adds nothing
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return tok


def _hf_tokenizer(arch: str, tok: Tokenizer) -> PreTrainedTokenizerFast:
    if arch == "gpt2":
        special = {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>"}
        special["unk_token"] = "<|endoftext|>"
    elif arch == "bart":
        special = {
            "bos_token": "<s>",
            "eos_token": "</s>",
            "pad_token": "<pad>",
            "unk_token": "<unk>",
            "mask_token": "<mask>",
        }
    else:
        special = {"eos_token": "</s>", "pad_token": "<pad>", "unk_token": "<unk>"}
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        model_max_length=128,
        model_input_names=["input_ids", "attention_mask"],
        **special,
    )


def _build_model(
    arch: str, vocab_size: int, tok: Tokenizer, std: float, **extra
) -> torch.nn.Module:
    if arch == "gpt2":
        eos = tok.token_to_id("<|endoftext|>")
        config = GPT2Config(
            vocab_size=vocab_size,
            n_positions=128,
            n_embd=64,
            n_layer=2,
            n_head=4,
            n_inner=128,
            bos_token_id=eos,
            eos_token_id=eos,
            initializer_range=std,
            **extra,
        )
        return GPT2LMHeadModel(config)
    if arch == "bart":
        config = BartConfig(
            vocab_size=vocab_size,
            d_model=64,
            encoder_layers=2,
            decoder_layers=2,
            encoder_attention_heads=4,
            decoder_attention_heads=4,
            encoder_ffn_dim=128,
            decoder_ffn_dim=128,
            max_position_embeddings=128,
            bos_token_id=0,
            pad_token_id=1,
            eos_token_id=2,
            decoder_start_token_id=2,
            forced_eos_token_id=None,
            forced_bos_token_id=None,
            init_std=std,
            **extra,
        )
        return BartForConditionalGeneration(config)
    if arch == "t5":
        config = T5Config(
            vocab_size=vocab_size,
            d_model=64,
            d_kv=16,
            d_ff=128,
            num_layers=2,
            num_decoder_layers=2,
            num_heads=4,
            relative_attention_num_buckets=16,
            relative_attention_max_distance=64,
            pad_token_id=0,
            eos_token_id=1,
            decoder_start_token_id=0,
            initializer_factor=std * 10,
            **extra,
        )
        return T5ForConditionalGeneration(config)
    if arch == "marian":
        pad = tok.token_to_id("<pad>")
        config = MarianConfig(
            vocab_size=vocab_size,
            decoder_vocab_size=vocab_size,
            d_model=64,
            encoder_layers=2,
            decoder_layers=2,
            encoder_attention_heads=4,
            decoder_attention_heads=4,
            encoder_ffn_dim=128,
            decoder_ffn_dim=128,
            max_position_embeddings=128,
            pad_token_id=pad,
            eos_token_id=tok.token_to_id("</s>"),
            decoder_start_token_id=pad,
            forced_eos_token_id=None,
            init_std=std,
            **extra,
        )
        return MarianMTModel(config)
    raise ValueError(f"`arch` must be one of {', '.join(ARCHITECTURES)}, got {arch!r}")


def make_checkpoint(arch: str, out_dir: Path, seed: int = 0) -> Path:
    """Write a tiny random `arch` checkpoint with its tokenizer to `out_dir`; return `out_dir`.

    `arch` is one of "gpt2", "bart", "t5", "marian". Deterministic given `seed`.
    """
    if arch not in ARCHITECTURES:
        raise ValueError(f"`arch` must be one of {', '.join(ARCHITECTURES)}, got {arch!r}")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tok = _train_tokenizer(arch)
    init = _INIT[arch]
    torch.manual_seed(seed)
    model = _build_model(
        arch, tok.get_vocab_size(), tok, init["std"], tie_word_embeddings=init["tied"]
    ).eval()
    eos = model.config.eos_token_id
    with torch.no_grad():
        head = model.get_output_embeddings().weight  # (V, D)
        head[eos] *= init.get("eos_row_scale", 1.0)
        head *= init.get("head_scale", 1.0)
        if "eos_bias" in init:
            model.final_logits_bias[0, eos] += init["eos_bias"]  # (1, V) buffer of BART/Marian
    if arch == "bart" and not init["tied"]:
        # Untied BART loads its encoder and decoder embeddings by their own names, but they share
        # one tensor with `shared`, which saving would store once: give each its own copy.
        for emb in (model.model.encoder.embed_tokens, model.model.decoder.embed_tokens):
            emb.weight = torch.nn.Parameter(model.model.shared.weight.detach().clone())
    # A plain greedy generation config: no forced/bad tokens that a runtime would have to mirror.
    cfg = model.config
    model.generation_config = GenerationConfig(
        bos_token_id=cfg.bos_token_id,
        eos_token_id=cfg.eos_token_id,
        pad_token_id=cfg.pad_token_id if cfg.pad_token_id is not None else cfg.eos_token_id,
        decoder_start_token_id=getattr(cfg, "decoder_start_token_id", None),
    )
    model.save_pretrained(out_dir)
    _hf_tokenizer(arch, tok).save_pretrained(out_dir)
    return out_dir


# A tiny chat model: a Llama (as SmolLM2) with ChatML special tokens and template.
CHATML_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
CHAT_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]  # ids 0, 1, 2 (as SmolLM2)


def make_chat_checkpoint(out_dir: Path, seed: int = 0) -> Path:
    """Write a tiny random Llama chat checkpoint (ChatML template, <|im_end|> ends a turn, a
    128-token context) with its tokenizer to `out_dir`; return `out_dir`. Deterministic."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=_VOCAB_TARGET,
        special_tokens=CHAT_SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_CORPUS + ["system user assistant helpful"], trainer=trainer)
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=tok.get_vocab_size(),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
        initializer_range=0.3,
        tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():
        model.lm_head.weight[2] *= 1.6  # <|im_end|>: some replies end early, others run on
    model.generation_config = GenerationConfig(bos_token_id=1, eos_token_id=2, pad_token_id=0)
    model.save_pretrained(out_dir)
    PreTrainedTokenizerFast(
        tokenizer_object=tok,
        model_max_length=128,
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token="<|endoftext|>",
        chat_template=CHATML_TEMPLATE,
    ).save_pretrained(out_dir)
    return out_dir
