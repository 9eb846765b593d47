"""A `tokenizers` tokenizer built from a GGUF file's `tokenizer.ggml.*` metadata (numpy-free,
torch-free).

Two vocabulary kinds, named by `tokenizer.ggml.model`:

- `gpt2`: byte-level BPE (SmolLM2, Qwen2, Llama 3): the vocabulary, the merges and the
  pre-tokenizer that `tokenizer.ggml.pre` names, with llama.cpp's splitting rules:
  `default`/`gpt2` (GPT-2's regex), `smollm` (every digit alone, then GPT-2's regex),
  `llama-bpe`/`llama3` (Llama 3's regex: digits in runs of up to 3), `qwen2` (Qwen2's regex,
  single digits, NFC-normalized).
- `llama`: SentencePiece-style BPE (Llama 2, TinyLlama): pieces with scores; merges are derived
  from the scores as transformers' converter does (a pair merges with the score of the piece it
  makes), `▁` for spaces, byte fallback through the `<0xNN>` pieces.

Token types follow llama.cpp: 3 (control) become special added tokens, 4 (user-defined) plain
added tokens matched whole. transformers' own GGUF loader approximates some of these rules (it
pre-tokenizes `smollm` and `llama-bpe` vocabularies with GPT-2's regex), so on digit runs its
tokens can differ from the original tokenizer's and from ours (docs/GGUF.md).

It does not read tensors or write files.
"""

from __future__ import annotations

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers

CONTROL, USER_DEFINED = 3, 4  # llama.cpp token types
LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
PRE_TOKENIZERS = ("default", "gpt2", "smollm", "llama-bpe", "llama3", "qwen2")


def _byte_level_pre(pre: str):
    """The pre-tokenizer (and normalizer, or None) for a `tokenizer.ggml.pre` name."""
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    gpt2 = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if pre in ("default", "gpt2"):
        return gpt2, None
    if pre == "smollm":
        return pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), gpt2]), None
    if pre in ("llama-bpe", "llama3"):
        split = pre_tokenizers.Split(Regex(LLAMA3_SPLIT), behavior="isolated", invert=False)
        return pre_tokenizers.Sequence([split, byte_level]), None
    if pre == "qwen2":
        split = pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated", invert=False)
        return pre_tokenizers.Sequence([split, byte_level]), normalizers.NFC()
    raise ValueError(f"`tokenizer.ggml.pre` must be one of {list(PRE_TOKENIZERS)}, got {pre!r}")


def _byte_level_bpe(fields: dict) -> Tokenizer:
    tokens = fields["tokenizer.ggml.tokens"]
    merges = [tuple(merge.split(" ", 1)) for merge in fields.get("tokenizer.ggml.merges") or []]
    pre = fields.get("tokenizer.ggml.pre", "default")
    pre_tokenizer, normalizer = _byte_level_pre(pre)
    vocab = {token: i for i, token in enumerate(tokens)}
    tokenizer = Tokenizer(models.BPE(vocab, merges, ignore_merges=pre in ("llama-bpe", "llama3")))
    tokenizer.pre_tokenizer = pre_tokenizer
    if normalizer is not None:
        tokenizer.normalizer = normalizer
    tokenizer.decoder = decoders.ByteLevel()
    return tokenizer


def _spm_merges(tokens: list[str], scores: list[float]) -> list[tuple[str, str]]:
    """Merges of a SentencePiece BPE vocabulary, ordered as transformers' GGUF converter orders
    them: every split of a piece into two pieces, ranked by the score of the piece they make
    (best first); splits of one piece by the scores of their parts (best first)."""
    score_of = dict(zip(tokens, scores))
    ranked = []
    for token, score in score_of.items():
        splits = [
            (token[:cut], token[cut:], score)
            for cut in range(1, len(token))
            if token[:cut] in score_of and token[cut:] in score_of
        ]
        splits.sort(key=lambda s: (score_of[s[0]], score_of[s[1]]), reverse=True)
        ranked.extend(splits)
    ranked.sort(key=lambda s: s[2], reverse=True)  # stable: ties keep the order above
    return [(left, right) for left, right, _ in ranked]


def _sentencepiece_bpe(fields: dict) -> Tokenizer:
    tokens = fields["tokenizer.ggml.tokens"]
    scores = fields.get("tokenizer.ggml.scores")
    if scores is None:
        raise ValueError("a `llama` (SentencePiece) GGUF vocabulary needs `tokenizer.ggml.scores`")
    unk = fields.get("tokenizer.ggml.unknown_token_id")
    vocab = {token: i for i, token in enumerate(tokens)}
    tokenizer = Tokenizer(
        models.BPE(
            vocab,
            _spm_merges(tokens, scores),
            unk_token=tokens[unk] if unk is not None else None,
            fuse_unk=True,
            byte_fallback=True,
        )
    )
    prefix = fields.get("tokenizer.ggml.add_space_prefix", True)
    steps = [normalizers.Prepend("▁")] if prefix else []
    tokenizer.normalizer = normalizers.Sequence([*steps, normalizers.Replace(" ", "▁")])
    steps = [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()]
    if prefix:
        steps.append(decoders.Strip(" ", 1, 0))
    tokenizer.decoder = decoders.Sequence(steps)
    return tokenizer


def build_tokenizer(fields: dict) -> Tokenizer:
    """The tokenizer of a GGUF file's `tokenizer.ggml.*` fields (lists as read by `gguf`, checked
    by convert/gguf_check.py). Raises ValueError for other vocabulary kinds, an unknown
    pre-tokenizer name, or a vocabulary that `tokenizers` refuses."""
    kind = fields.get("tokenizer.ggml.model")
    if "tokenizer.ggml.tokens" not in fields:
        raise ValueError("the GGUF file has no `tokenizer.ggml.tokens`: no tokenizer to build")
    builders = {"gpt2": _byte_level_bpe, "llama": _sentencepiece_bpe}
    if kind not in builders:
        raise ValueError(f"`tokenizer.ggml.model` must be 'gpt2' or 'llama', got {kind!r}")
    try:
        tokenizer = builders[kind](fields)
    except ValueError:
        raise
    except Exception as error:  # tokenizers raises plain Exception for a vocabulary it refuses
        raise ValueError(f"the GGUF's `{kind}` tokenizer cannot be built: {error}") from None
    tokens = fields["tokenizer.ggml.tokens"]
    types = fields.get("tokenizer.ggml.token_type") or [1] * len(tokens)
    specials = [
        AddedToken(token, special=True, normalized=False)
        for token, kind in zip(tokens, types)
        if kind == CONTROL
    ]
    added = [
        AddedToken(token, special=False, normalized=False)
        for token, kind in zip(tokens, types)
        if kind == USER_DEFINED
    ]
    tokenizer.add_special_tokens(specials)
    if added:
        tokenizer.add_tokens(added)
    return tokenizer
