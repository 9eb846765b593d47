"""The `bible-lm` recipe: a GPT-2 trained from scratch on the World English Bible, conditioned on
Bible-section control tokens (seed 000's genre tokens, seed 002's Bible model).

Training examples are passages: `<|bos|><|section|>` followed by consecutive verses of one chapter
(joined by a space) up to the context, and `<|eos|>` when the passage reaches the chapter's end.
Passages rather than single verses because a verse is about 30 tokens: a 128-token context then
holds about four verses, so the model learns to continue across verse boundaries (what the app's
prompt box asks of it) and batches carry no padding. Each epoch the first passage of every chapter
gets a random length, so passage boundaries move from epoch to epoch. The section token is dropped
from 10 % of passages (seed 000's feature dropout), so the model also generates without one. The
control token is never a prediction target. At generation time the runtime builds the same prefix:
BOS, then the chosen control token, then the prompt, tokenized as one string.

Evaluation: validation (and test) perplexity overall and per section; the conditioning check
(a TF-IDF + logistic-regression classifier trained on real training verses labels generated
samples, `samples_per_section` per section with fixed seeds and top-p 0.95 through the runtime);
memorisation (share of generated 8-grams found verbatim in the training text); sample outputs.

Does not cover: the verse table and split (train/data.py), the tokenizer (train/tokenizer.py),
the training loop (train/common.py).
"""

from __future__ import annotations

import math
import random
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import torch

from export.corpus import Chapter, chapters
from train import common, data, evaluate
from train.recipe import Recipe
from train.tokenizer import BOS, EN_VOCAB_SIZE, EOS, PAD

NAME = "bible-lm"
# Control value (what the app shows) per section label; the token comes from train/data.py.
SECTION_KEYS = {label: token.strip("<|>") for label, token in data.SECTIONS.items()}
SECTION_DROPOUT = 0.1  # share of training passages without a section token
SAMPLE_PROMPTS = (
    ("In the beginning", "law"),
    ("Jesus said to them,", "gospels"),
    ("Praise Yahweh,", "wisdom"),
    ("I saw a great beast", "apocalyptic"),
)


@dataclass(frozen=True)
class LMSize:
    layers: int  # transformer blocks
    width: int  # hidden size
    heads: int  # attention heads (head size = width / heads)
    context: int  # positions: tokens per passage, BOS and section token included
    batch_size: int  # passages per optimizer step
    epochs: float  # passes over the training passages; sets the step count
    lr: float  # peak learning rate
    warmup: int  # warm-up steps
    dropout: float  # residual, embedding and attention dropout
    steps: int = 0  # when > 0, a fixed step count instead of `epochs` (tiny mode)
    samples_per_section: int = 50  # generated samples per section for the conditioning check
    sample_tokens: int = 64  # new tokens per sample
    vocab_size: int = EN_VOCAB_SIZE  # tokenizer size when the recipe trains its own


# Sized for about an hour on this 2-core machine when it is not shared: 4 × 256 at context 128
# measured about 1,300 tokens/s (6 layers: about 1,000), and 3 epochs of the ~1.1M-token corpus
# is ~3.3M tokens. Context 128 rather than 256 nearly doubles the throughput (attention) and still
# holds about four verses. No dropout: the run sees each passage only three times, and dropout
# cost about 15 % of a step here.
FULL = LMSize(
    layers=4, width=256, heads=4, context=128, batch_size=32, epochs=3.0, lr=1e-3, warmup=60,
    dropout=0.0,
)  # fmt: skip
TINY = LMSize(
    layers=2, width=64, heads=4, context=128, batch_size=8, epochs=1.0, lr=3e-3, warmup=2,
    dropout=0.0, steps=8, samples_per_section=2, sample_tokens=12, vocab_size=512,
)  # fmt: skip


@dataclass
class Passage:
    ids: list[int]  # BOS, section token (unless dropped), verse tokens, EOS at a chapter's end
    section: str  # section label
    controls: int  # leading control tokens after BOS (0 or 1): never prediction targets


class EncodedChapter:
    """A chapter's verses as token ids: each verse alone (`first`, when it opens a passage) and
    with its joining space (`cont`, when it follows another verse)."""

    def __init__(self, chapter: Chapter, tokenizer):
        self.section = chapter.section
        self.first = [
            e.ids for e in tokenizer.encode_batch(chapter.verses, add_special_tokens=False)
        ]
        spaced = [" " + verse for verse in chapter.verses]
        self.cont = [e.ids for e in tokenizer.encode_batch(spaced, add_special_tokens=False)]


def passage_spans(first: list[int], cont: list[int], capacity: int, first_capacity: int):
    """(start, end) verse ranges: greedy packing under `capacity` tokens of verse text, the first
    passage under `first_capacity`. A passage always holds at least one verse.

    `first` / `cont` are the verse lengths alone / with the joining space.

    >>> passage_spans([5, 5, 5, 5], [6, 6, 6, 6], capacity=12, first_capacity=5)
    [(0, 1), (1, 3), (3, 4)]
    """
    spans, start, limit = [], 0, first_capacity
    while start < len(first):
        used, end = first[start], start + 1
        while end < len(first) and used + cont[end] <= limit:
            used += cont[end]
            end += 1
        spans.append((start, end))
        start, limit = end, capacity
    return spans


def make_passages(
    encoded: list[EncodedChapter],
    special: dict[str, int],
    context: int,
    rng: random.Random | None = None,
    section_dropout: float = 0.0,
) -> list[Passage]:
    """Passages of every chapter. With `rng`, the first passage of each chapter gets a random
    capacity (a quarter to all of the context) and the section token is dropped with probability
    `section_dropout`; without it, the packing is deterministic and every passage keeps it."""
    capacity = context - 3  # BOS + section token + EOS
    passages = []
    for chapter in encoded:
        first_lengths = [len(ids) for ids in chapter.first]
        cont_lengths = [len(ids) for ids in chapter.cont]
        first_capacity = rng.randint(capacity // 4, capacity) if rng else capacity
        spans = passage_spans(first_lengths, cont_lengths, capacity, first_capacity)
        for start, end in spans:
            text = list(chapter.first[start])
            for index in range(start + 1, end):
                text += chapter.cont[index]
            keep = rng is None or rng.random() >= section_dropout
            prefix = [special["bos"]] + ([special[chapter.section]] if keep else [])
            ids = prefix + text[:capacity]
            if end == len(chapter.first) and len(text) <= capacity:
                ids.append(special["eos"])
            passages.append(Passage(ids, chapter.section, int(keep)))
    return passages


def collate(passages: list[Passage], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-padded input_ids / attention_mask, and labels with padding and control tokens -100."""
    width = max(len(p.ids) for p in passages)
    input_ids = torch.full((len(passages), width), pad_id, dtype=torch.long)  # (B, T)
    mask = torch.zeros((len(passages), width), dtype=torch.long)  # (B, T)
    for row, passage in enumerate(passages):
        input_ids[row, : len(passage.ids)] = torch.tensor(passage.ids)
        mask[row, : len(passage.ids)] = 1
    labels = input_ids.masked_fill(mask == 0, -100)  # (B, T)
    for row, passage in enumerate(passages):
        labels[row, : 1 + passage.controls] = -100
    return {"input_ids": input_ids, "attention_mask": mask, "labels": labels}


def special_ids(tokenizer) -> dict[str, int]:
    """Token ids of bos/eos/pad and of each section label's control token."""
    ids = {"bos": BOS, "eos": EOS, "pad": PAD, **data.SECTIONS}
    out = {}
    for key, token in ids.items():
        token_id = tokenizer.token_to_id(token)
        if token_id is None:
            raise ValueError(f"the tokenizer lacks the special token {token!r}")
        out[key] = token_id
    return out


def with_bos_post_processor(tokenizer):
    """The tokenizer with a post-processor that puts BOS in front (what GPT-2 style export
    detects as `add_bos_token`; the runtime then prepends BOS itself to every prompt)."""
    from tokenizers import processors

    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", special_tokens=[(BOS, tokenizer.token_to_id(BOS))]
    )
    return tokenizer


def controls() -> dict:
    """The bundle's `section` control (docs/bundle.md)."""
    meaning = ", ".join(f"{key} = {label}" for label, key in SECTION_KEYS.items())
    return {
        "section": {
            "kind": "choice",
            "values": {key: data.SECTIONS[label] for label, key in SECTION_KEYS.items()},
            "description": f"Bible section the text is conditioned on ({meaning})",
        }
    }


class LMTask(common.Task):
    def __init__(
        self, train_chapters, val_chapters, special, size: LMSize, seed: int, val_passages: int = 64
    ):
        self.train_chapters = train_chapters
        self.special = special
        self.size = size
        self.seed = seed
        val = make_passages(val_chapters, special, size.context)
        random.Random(seed).shuffle(val)
        self.val_batches = [
            collate(val[i : i + size.batch_size], special["pad"])
            for i in range(0, min(len(val), val_passages), size.batch_size)
        ]

    def batches(self, epoch: int) -> list[dict]:
        rng = random.Random(self.seed * 1_000_003 + epoch)
        passages = make_passages(
            self.train_chapters, self.special, self.size.context, rng, SECTION_DROPOUT
        )
        rng.shuffle(passages)
        size = self.size.batch_size
        return [
            collate(passages[i : i + size], self.special["pad"])
            for i in range(0, len(passages) - size + 1, size)
        ]

    def validation_loss(self, model) -> float:
        nll, tokens = 0.0, 0
        model.eval()
        with torch.no_grad():
            for batch in self.val_batches:
                n = int((batch["labels"][:, 1:] != -100).sum())
                nll += float(model(**batch).loss) * n
                tokens += n
        return nll / max(tokens, 1)


def build_model(size: LMSize, vocab_size: int, special: dict, seed: int):
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(
        vocab_size=vocab_size,
        n_positions=size.context,
        n_embd=size.width,
        n_layer=size.layers,
        n_head=size.heads,
        n_inner=4 * size.width,
        activation_function="gelu_pytorch_tanh",  # = gelu_new, one fused kernel in torch
        resid_pdrop=size.dropout,
        embd_pdrop=size.dropout,
        attn_pdrop=size.dropout,
        bos_token_id=special["bos"],
        eos_token_id=special["eos"],
        pad_token_id=special["pad"],
    )
    torch.manual_seed(seed)
    return GPT2LMHeadModel(config)


def section_perplexity(model, encoded, special, size: LMSize) -> dict[str, float]:
    """Perplexity per section and overall ("overall") of deterministic passages, per token."""
    passages = make_passages(encoded, special, size.context)
    nll: dict[str, float] = defaultdict(float)
    count: dict[str, int] = defaultdict(int)
    model.eval()
    with torch.no_grad():
        for i in range(0, len(passages), size.batch_size):
            chunk = passages[i : i + size.batch_size]
            batch = collate(chunk, special["pad"])
            logits = model(
                input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]
            ).logits
            targets = batch["labels"][:, 1:]  # (B, T-1)
            losses = torch.nn.functional.cross_entropy(
                logits[:, :-1].transpose(1, 2), targets, ignore_index=-100, reduction="none"
            )  # (B, T-1)
            for row, passage in enumerate(chunk):
                valid = targets[row] != -100
                nll[passage.section] += float(losses[row][valid].sum())
                count[passage.section] += int(valid.sum())
    out = {label: math.exp(nll[label] / count[label]) for label in data.SECTIONS if count[label]}
    out["overall"] = math.exp(sum(nll.values()) / sum(count.values()))
    return out


class BibleLM(Recipe):
    """The recipe (train/recipe.py's contract): data, model, training task, evaluation and model
    card sections."""

    name = NAME
    task_kind = "causal-lm"

    def __init__(self, tiny: bool, verses: Path, tokenizer_dir: Path, out_dir: Path, seed: int):
        self.tiny = tiny
        self.size = TINY if tiny else FULL
        self.seed = seed
        self.rows = data.load_verses(verses)
        self.verses_path = verses
        self.tokenizer = with_bos_post_processor(
            common.load_or_train_tokenizer(
                self.rows, tokenizer_dir, out_dir, tiny, "en", self.size.vocab_size
            )
        )
        self.special = special_ids(self.tokenizer)
        self.train_chapters = chapters(self.rows, "train")
        self.encoded = {
            split: [EncodedChapter(c, self.tokenizer) for c in chapters(self.rows, split)]
            for split in data.SPLITS
        }

    def setup(self):
        task = LMTask(
            self.encoded["train"], self.encoded["validation"], self.special, self.size, self.seed
        )
        size = self.size
        per_epoch = len(task.batches(0))
        steps = size.steps or max(1, round(size.epochs * per_epoch))
        config = common.TrainConfig(
            steps=steps,
            lr=size.lr,
            warmup=size.warmup,
            beta2=0.95,
            log_every=1 if self.tiny else 10,
            eval_every=4 if self.tiny else 100,
            checkpoint_every=2 if self.tiny else 50,
            seed=self.seed,
        )
        model = build_model(size, self.tokenizer.get_vocab_size(), self.special, self.seed)
        return model, task, config

    def generation(self) -> dict:
        return {
            "bos_token_id": self.special["bos"],
            "eos_token_id": self.special["eos"],
            "pad_token_id": self.special["pad"],
            "do_sample": True,
            "top_p": 0.95,
            "top_k": 0,
            "temperature": 1.0,
            "max_new_tokens": 80,
        }

    def controls(self) -> dict:
        return controls()

    def training_data(self) -> dict:
        train_rows = [r for r in self.rows if r["split"] == "train" and r["web"]]
        return {
            "corpus": "World English Bible (SWORD module engWEB2015eb), training books including "
            "the deuterocanon",
            "verses": len(train_rows),
            "split": common.split_description(),
            "licence": "public domain",
        }

    def description(self) -> str:
        size = self.size
        return (
            f"GPT-2 ({size.layers} layers, width {size.width}, {size.heads} heads, context "
            f"{size.context}) trained from scratch on the World English Bible, conditioned on "
            "seven Bible-section control tokens (seed 000's genre tokens). Prompts are continued "
            "as Bible text in the chosen section's style."
        )

    # ---- evaluation ----------------------------------------------------------------------------

    def evaluate(self, model, bundle_dir: Path, progress: bool = True) -> dict:
        import runtime

        size = self.size
        result: dict = {"perplexity": {}}
        for split in ("validation", "test"):
            result["perplexity"][split] = section_perplexity(
                model, self.encoded[split], self.special, size
            )
        # Unbatched: the prompts of one call share one random generator, so a section's empty
        # prompts give different samples (the engine seeds each prompt alike: the same text).
        gen = runtime.load(bundle_dir, batching=False)
        samples: dict[str, list[str]] = {}
        keys = list(SECTION_KEYS.values())
        for index, key in enumerate(keys):
            config = runtime.GenerationConfig(
                max_new_tokens=size.sample_tokens,
                do_sample=True,
                top_p=0.95,
                top_k=0,
                temperature=1.0,
                seed=1000 + index,
            )
            outs = gen.generate([""] * size.samples_per_section, config, {"section": key})
            samples[key] = [out.text.strip() for out in outs]
        train_rows = [r for r in self.rows if r["split"] == "train" and r["web"]]
        classifier = evaluate.section_classifier(
            [r["web"] for r in train_rows],
            [SECTION_KEYS[r["section"]] for r in train_rows],
            seed=self.seed,
        )
        requested = [key for key in keys for _ in samples[key]]
        texts = [text for key in keys for text in samples[key]]
        predicted = list(classifier.predict(texts)) if texts else []
        result["conditioning"] = evaluate.accuracy_table(predicted, requested, keys)
        real = [r for r in self.rows if r["split"] == "validation" and r["web"]]
        result["classifier_on_real_validation_verses"] = evaluate.accuracy_table(
            list(classifier.predict([r["web"] for r in real])),
            [SECTION_KEYS[r["section"]] for r in real],
            keys,
        )["overall"]["accuracy"]
        training_text = [" ".join(c.verses) for c in self.train_chapters]
        result["memorised_8gram_share"] = evaluate.memorised_share(texts, training_text, 8)
        result["validation_8gram_share_in_training"] = evaluate.memorised_share(
            [" ".join(c.verses) for c in chapters(self.rows, "validation")], training_text, 8
        )
        result["sample_settings"] = {
            "do_sample": True,
            "top_p": 0.95,
            "top_k": 0,
            "temperature": 1.0,
            "max_new_tokens": size.sample_tokens,
            "seeds": "1000 + section index",
            "samples_per_section": size.samples_per_section,
        }
        result["samples"] = {key: samples[key][:3] for key in keys}
        prompted = []
        for seed, (prompt, key) in enumerate(SAMPLE_PROMPTS):
            config = runtime.GenerationConfig(
                max_new_tokens=min(48, size.context - 8),
                do_sample=True,
                top_p=0.95,
                top_k=0,
                seed=seed,
            )
            out = gen.generate(prompt, config, {"section": key})[0]
            prompted.append({"prompt": prompt, "section": key, "seed": seed, "text": out.text})
        result["prompted_samples"] = prompted
        return result

    def metrics(self, evaluation: dict) -> dict:
        """Flat metrics for the manifest."""
        ppl = evaluation["perplexity"]
        out = {"validation perplexity (per token)": round(ppl["validation"]["overall"], 2)}
        for label, key in SECTION_KEYS.items():
            if label in ppl["validation"]:
                out[f"validation perplexity: {key}"] = round(ppl["validation"][label], 2)
        out["test perplexity (per token)"] = round(ppl["test"]["overall"], 2)
        cond = evaluation["conditioning"]["overall"]
        out["section classifier accuracy on samples"] = round(cond["accuracy"], 3)
        out["section classifier chance"] = round(cond["chance"], 3)
        out["memorised 8-gram share of samples"] = round(evaluation["memorised_8gram_share"], 3)
        return out

    def card_sections(self, evaluation: dict) -> list[tuple[str, str]]:
        ppl = evaluation["perplexity"]
        rows = []
        for label in [*data.SECTIONS, "overall"]:
            rows.append([label, *(ppl[s].get(label, "—") for s in ("validation", "test"))])
        perplexity = (
            "Per token of this model's tokenizer, on passages of held-out books packed as in "
            "training (BOS and section token given, not scored). Validation has no Law or "
            "Apocalyptic book; test has no Apocalyptic book.\n\n"
            + common.markdown_table(["section", "validation", "test"], rows)
        )
        cond = evaluation["conditioning"]
        keys = list(SECTION_KEYS.values())
        table_rows = [
            [
                key,
                cond[key]["samples"],
                f"{100 * cond[key]['accuracy']:.0f} %",
                *(cond[key]["labelled_as"][k] for k in keys),
            ]
            for key in keys
        ]
        table_rows.append(
            [
                "overall",
                cond["overall"]["samples"],
                f"{100 * cond['overall']['accuracy']:.0f} %",
                *([""] * len(keys)),
            ]
        )
        settings = evaluation["sample_settings"]
        conditioning = (
            f"Seed 000's check: a TF-IDF (words and word pairs) + logistic-regression classifier "
            f"trained on real training verses labels {settings['samples_per_section']} samples "
            f"per requested section (top-p 0.95, temperature 1, {settings['max_new_tokens']} new "
            f"tokens, fixed seeds, generated by the runtime from the "
            f"{evaluation.get('evaluated_precision', 'int8')} bundle). "
            f"Chance is {100 * cond['overall']['chance']:.1f} %; the same classifier labels real "
            f"validation verses with {100 * evaluation['classifier_on_real_validation_verses']:.0f}"
            " % accuracy. Rows: requested section; columns: how the classifier labelled them.\n\n"
            + common.markdown_table(["requested", "samples", "accuracy", *keys], table_rows)
        )
        samples = [
            f"Decoding: sampling, top-p {settings['top_p']}, top-k off, temperature "
            f"{settings['temperature']}; prompted samples: 48 new tokens, seed as shown; "
            f"empty-prompt samples: the first of each section's conditioning samples "
            f"({settings['max_new_tokens']} new tokens, seed 1000 + section index).",
            "",
        ]
        for item in evaluation["prompted_samples"]:
            samples.append(
                f"- section `{item['section']}`, prompt *{item['prompt']}* (seed "
                f"{item['seed']}): {item['prompt']}{item['text']}"
            )
        for key, texts in evaluation["samples"].items():
            if texts:
                samples.append(f"- section `{key}`, empty prompt: {texts[0]}")
        weak = [
            f"{key} ({100 * cond[key]['accuracy']:.0f} %, most often labelled "
            f"{max((k for k in keys if k != key), key=cond[key]['labelled_as'].get)})"
            for key in keys
            if cond[key]["samples"] and cond[key]["accuracy"] < 1 / 3
        ]
        weak_line = (
            f"- Conditioning is weakest for {', '.join(weak)}: their samples borrow the "
            "vocabulary of neighbouring sections.\n"
            if weak
            else ""
        )
        limits = (
            f"- Memorisation: {100 * evaluation['memorised_8gram_share']:.1f} % of the word "
            f"8-grams in the conditioning samples occur verbatim in the training text (for "
            f"comparison, {100 * evaluation['validation_8gram_share_in_training']:.1f} % of a real "
            "held-out book's 8-grams do: the Bible quotes and repeats itself).\n"
            f"- Context of {self.size.context} tokens (about four verses): longer generations "
            "stop at the context.\n"
            "- A small model trained on one book for an hour: Bible vocabulary and phrasing, "
            "but often ungrammatical, with invented words, drifting sense and no coherence "
            "beyond a clause or two. Not a source of scripture.\n" + weak_line
        )
        return [
            ("Perplexity", perplexity),
            ("Conditioning check", conditioning),
            ("Samples", "\n".join(samples)),
            ("Known limits", limits),
        ]
