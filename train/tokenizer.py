"""Byte-level BPE tokenizers for the default models, trained on the training split only.

Covers: the tokenizer recipe of seed 002 (GPT-4 split pattern, 256 byte tokens + merges) built
with Hugging Face `tokenizers`, the special and control tokens the default models use, loading a
saved tokenizer.json into transformers, the measurements behind the vocabulary sizes, and
`python -m train.tokenizer`, which trains the two default tokenizers:

- `en`: World English Bible + KJV, for the LM (section tokens) and the KJV->WEB rewriter
  (length tokens);
- `en_es`: one joint English + Spanish vocabulary for the WEB->RV1909 translator, so a
  shared-vocabulary encoder-decoder (BART/Marian style) has one embedding table and the bundle
  one tokenizer.json.

Does not cover: the verse table and the split (train/data.py), or how a recipe places control
tokens in its inputs.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
from tqdm import tqdm

from train import data

# Seed 002's pre-tokenization (GPT-4's cl100k pattern): contractions, letters with an optional
# leading non-letter, numbers of at most three digits, punctuation runs, whitespace.
GPT4_SPLIT_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]++[\r\n]*"""
    r"""|\s*[\r\n]|\s+(?!\S)|\s+"""
)

BOS, EOS, PAD = "<|bos|>", "<|eos|>", "<|pad|>"
SPECIAL_TOKENS = (BOS, EOS, PAD)  # always ids 0, 1, 2

# Control tokens (callers pass the ones their model uses; docs/DESIGN.md, "Public surface").
SECTION_TOKENS = tuple(data.SECTIONS.values())
# Seed 004: category tokens (ratio < 0.95, 0.95-1.05, > 1.05) and value tokens 0.1 ... 2.0.
LENGTH_TOKENS = ("<short>", "<normal>", "<long>")
RATIO_TOKENS = tuple(f"<ratio_{step / 10:.1f}>" for step in range(1, 21))
EN_CONTROL_TOKENS = SECTION_TOKENS + LENGTH_TOKENS + RATIO_TOKENS

# Chosen sizes (docs/DATA.md has the measurements behind them).
EN_VOCAB_SIZE = 8_000
EN_ES_VOCAB_SIZE = 12_000
DEFAULT_DIR = Path("data/tokenizers")


def train_tokenizer(
    texts: Iterable[str],
    vocab_size: int,
    special_tokens: Sequence[str] = (),
    out_path: str | Path | None = None,
) -> Tokenizer:
    """Train a byte-level BPE tokenizer on `texts` and optionally save it as tokenizer.json.

    Ids: <|bos|> 0, <|eos|> 1, <|pad|> 2, then `special_tokens` in order (control tokens, each one
    id that is never split), then the 256 byte tokens, then merges up to `vocab_size`. Text is
    split with the GPT-4 pattern, then mapped to bytes, so every string round-trips:
    `tok.decode(tok.encode(s).ids) == s`.

    >>> tok = train_tokenizer(["In the beginning, God created the heavens."] * 10, 300, ["<|law|>"])
    >>> tok.encode("<|law|>In the beginning").tokens[:2], tok.token_to_id("<|law|>")
    (['<|law|>', 'In'], 3)
    """
    specials = list(dict.fromkeys([*SPECIAL_TOKENS, *special_tokens]))
    if vocab_size < len(specials) + 256:
        raise ValueError(
            f"`vocab_size` must be at least {len(specials) + 256} (special tokens + 256 bytes), "
            f"got {vocab_size}"
        )
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(GPT4_SPLIT_PATTERN), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    if out_path is not None:
        out_path = Path(out_path)
        out_path.parent.mkdir(parents=True, exist_ok=True)
        tokenizer.save(str(out_path))
    return tokenizer


def as_transformers(tokenizer_file: str | Path):
    """A saved tokenizer.json as transformers' PreTrainedTokenizerFast, special tokens set.

    Every added token other than bos/eos/pad becomes an additional special token, so
    `decode(..., skip_special_tokens=True)` drops control tokens too.
    """
    from transformers import PreTrainedTokenizerFast  # heavy import; only callers that need it

    controls = [
        token.content
        for token in Tokenizer.from_file(str(tokenizer_file)).get_added_tokens_decoder().values()
        if token.content not in SPECIAL_TOKENS
    ]
    return PreTrainedTokenizerFast(
        tokenizer_file=str(tokenizer_file),
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        additional_special_tokens=controls,
        clean_up_tokenization_spaces=False,
    )


def measure(tokenizer: Tokenizer, texts: Sequence[str]) -> dict[str, float]:
    """Tokens per whitespace-separated word, and mean / max tokens per text."""
    lengths = [len(encoding.ids) for encoding in tokenizer.encode_batch(list(texts))]
    words = sum(len(text.split()) for text in texts)
    return {
        "tokens_per_word": sum(lengths) / words,
        "mean_tokens": sum(lengths) / len(lengths),
        "max_tokens": max(lengths),
    }


def training_texts(rows: Sequence[dict], columns: Sequence[str]) -> list[str]:
    """Training-split verse texts of `columns`, for tokenizer training.

    Verses are taken from rows where every column has text, so a joint tokenizer sees its
    languages in the same proportion as the pairs it will encode.
    """
    return [
        row[column]
        for row in rows
        if row["split"] == "train" and all(row[c] for c in columns)
        for column in columns
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m train.tokenizer", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--verses", type=Path, default=data.DEFAULT_OUT, help="verse table TSV")
    parser.add_argument("--out-dir", type=Path, default=DEFAULT_DIR, help="where to save them")
    parser.add_argument(
        "--sizes",
        type=int,
        nargs="*",
        default=[],
        help="also train and measure these vocabulary sizes (not saved), e.g. 8000 12000 16000",
    )
    args = parser.parse_args(argv)
    rows = data.load_verses(args.verses)
    validation = [row for row in rows if row["split"] == "validation"]
    recipes = {  # name: (columns trained on, chosen size, control tokens)
        "en": (("web", "kjv"), EN_VOCAB_SIZE, EN_CONTROL_TOKENS),
        "en_es": (("web", "rv1909"), EN_ES_VOCAB_SIZE, ()),
        "es": (("rv1909",), None, ()),  # measured only: the two-tokenizer alternative
    }
    jobs = [
        (name, size, size == chosen)
        for name, (_, chosen, _) in recipes.items()
        for size in sorted({*args.sizes, *([chosen] if chosen else [])})
    ]
    print(f"{'tokenizer':<10}{'vocab':>7}  validation: tokens/word, mean tokens/verse (max)")
    for name, size, save in tqdm(jobs, desc="tokenizers", unit="tokenizer"):
        columns, _, controls = recipes[name]
        out_path = args.out_dir / f"{name}.json" if save else None
        tokenizer = train_tokenizer(training_texts(rows, columns), size, controls, out_path)
        cells = []
        for column in columns:
            stats = measure(tokenizer, [row[column] for row in validation if row[column]])
            cells.append(
                f"{column} {stats['tokens_per_word']:.3f}, "
                f"{stats['mean_tokens']:.1f} ({stats['max_tokens']})"
            )
        saved = f"  -> {out_path}" if out_path else ""
        tqdm.write(f"{name:<10}{size:>7}  " + "; ".join(cells) + saved)
    return 0


if __name__ == "__main__":
    sys.exit(main())
