"""The masked-LM recipes `masked-lm-base` and `masked-lm-large` (seed 000's BERT-Base against
BERT-Large), trained from scratch on the World English Bible's training books.

Model: transformers' `BertForMaskedLM`. Tokenizer: the project's English byte-level BPE
(data/tokenizers/en.json) with one added token, `<|mask|>`, which strips the space on its left
(as RoBERTa's `<mask>` does), so "the <|mask|> of God" masks the word " light" exactly as training
masks its token; the post-processor wraps text as `<|bos|> … <|eos|>` (BERT's [CLS] … [SEP]).

Training examples: consecutive verses of one chapter packed greedily up to the context (as the
Bible LM packs them, without section tokens), masked with BERT's recipe by transformers'
`DataCollatorForLanguageModeling`: 15 % of the non-special tokens are prediction targets; of
those 80 % become `<|mask|>`, 10 % a random token, 10 % stay. Masks are drawn afresh every epoch
from a seed fixed per epoch, so a resumed run sees the same batches.

Sizes (seed 000 compares 12 × 768 with 24 × 1024, 110M against 340M parameters, 3.1×): scaled to
two CPU cores, base is 4 layers × 128 and large 5 layers × 256 (deeper and wider, as in the
seed), heads of 64 dimensions as BERT's, feed-forward 4× the width. With the 8,001-token
vocabulary that is about 1.9M against 6.1M parameters (3.3×). Batches of 32 passages; for time,
large trains 250 steps against base's 700 (see SIZES), so it sees less text, as the seed
suspects of its BERT-Large ("underfitted").

Evaluation (`evaluate`, on the exported int8 bundle through the runtime): the masking-ratio study
(study/masking.py) on held-out verses, whose 15 % row gives the card's top-1 / top-5 metrics, on
all masked words and on the content words among them (nouns, verbs, adjectives by WordNet:
study/content_words.py; `--tiny` runs read its test fixture), the token-vector probes
(study/probes.py) and BERT-as-generator samples (study/bert_generation.py).
`python -m train.masked_lm plots` then draws both models' study into both shipped cards.

Does not cover: the training loop (train/common.py), the studies (study/), export (export/).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from convert.manifest import CARD_FILE
from export import corpus
from train import common, data, lm
from train.recipe import Recipe
from train.tokenizer import BOS, EN_VOCAB_SIZE, EOS, as_transformers

MASK = "<|mask|>"
# BERT's learned absolute positions left both sizes on the unigram plateau (base: validation loss
# 5.93 at step 600 and 5.60 at 2,200, filling "I am the <|mask|> of life" with "," and "said");
# with relative position embeddings (Shaw et al. 2018, a BertConfig option) base reached 5.00 at
# step 600 of the same recipe. A lower learning rate (3e-4) did worse (6.22 at 600).
POSITIONS = "relative_key"
MLM_PROBABILITY = 0.15
MASKING_PNG = "masking.png"
GENERATION_PROMPT = "In the beginning, God created the heavens and the earth. The earth was"
GENERATION_RIGHT = "and God saw that it was good."


@dataclass(frozen=True)
class MLMSize:
    layers: int
    width: int
    heads: int
    context: int  # positions, <|bos|> and <|eos|> included
    batch_size: int
    steps: int  # optimizer steps (a fixed budget: both models get the same number of passages)
    lr: float
    warmup: int
    bf16: bool = False  # bfloat16 autocast in training (fast on CPUs with AVX512-BF16)
    study_sentences: int = 300  # held-out verses of the masking-ratio study in the card
    study_repetitions: int = 3  # random maskings per verse and ratio
    everyday_repetitions: int = 10  # random maskings per unseen everyday sentence, at 15 % only
    vocab_size: int = EN_VOCAB_SIZE  # tokenizer size when the recipe trains its own (tiny)


# Both models get the same budget, 3,000 steps of 32 passages on the WEB (about 9 epochs of the
# ~1.15M training tokens, fresh masks each epoch; `--steps` sets another budget, as for the larger
# library corpus): BERT trained from scratch sits on a unigram plateau for its first thousands of
# steps (700 steps left base there). Measured on one quiet thread of this 2-core machine: base
# 0.52 s/step and large 1.61 s/step in fp32 with the MLM head run at masked positions only (1.18
# and 3.26 s/step with the head on every position), and large 0.99 s/step under bfloat16 autocast.
SIZES = {
    "masked-lm-base": MLMSize(
        layers=4, width=128, heads=2, context=128, batch_size=32, steps=3000, lr=1e-3,
        warmup=200, bf16=True,
    ),
    "masked-lm-large": MLMSize(
        layers=5, width=256, heads=4, context=128, batch_size=32, steps=3000, lr=8e-4,
        warmup=200, bf16=True,
    ),
}  # fmt: skip
TINY = {
    "masked-lm-base": MLMSize(
        layers=1, width=32, heads=2, context=128, batch_size=8, steps=4, lr=3e-3, warmup=1,
        study_sentences=6, study_repetitions=1, everyday_repetitions=1, vocab_size=400,
    ),
    "masked-lm-large": MLMSize(
        layers=2, width=64, heads=2, context=128, batch_size=8, steps=4, lr=3e-3, warmup=1,
        study_sentences=6, study_repetitions=1, everyday_repetitions=1, vocab_size=400,
    ),
}  # fmt: skip


def with_mask_token(tokenizer):
    """The tokenizer with `<|mask|>` added (left space stripped) and a `<|bos|> $A <|eos|>`
    post-processor."""
    from tokenizers import AddedToken, processors

    tokenizer.add_special_tokens([AddedToken(MASK, lstrip=True, special=True, normalized=False)])
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A {EOS}",
        special_tokens=[(t, tokenizer.token_to_id(t)) for t in (BOS, EOS)],
    )
    return tokenizer


def transformers_tokenizer(tokenizer, work_dir: Path):
    """The tokenizer as transformers' PreTrainedTokenizerFast with its mask token set."""
    path = work_dir / "tokenizer-mlm.json"
    tokenizer.save(str(path))
    fast = as_transformers(path)
    fast.mask_token = MASK
    return fast


def passages(encoded: list[lm.EncodedChapter], context: int, rng: random.Random | None):
    """Token ids of verse runs: greedy packing of each chapter under `context - 2` tokens; with
    `rng` the first passage of a chapter gets a random capacity, so boundaries move per epoch."""
    capacity = context - 2
    out = []
    for chapter in encoded:
        first = [len(ids) for ids in chapter.first]
        cont = [len(ids) for ids in chapter.cont]
        first_capacity = rng.randint(capacity // 4, capacity) if rng else capacity
        for start, end in lm.passage_spans(first, cont, capacity, first_capacity):
            ids = list(chapter.first[start])
            for index in range(start + 1, end):
                ids += chapter.cont[index]
            out.append(ids[:capacity])
    return out


class MLMTask(common.Task):
    def __init__(self, train, val, fast_tokenizer, size: MLMSize, seed: int, val_passages=64):
        from transformers import DataCollatorForLanguageModeling

        self.train = train
        self.size = size
        self.seed = seed
        self.bos, self.eos = fast_tokenizer.bos_token_id, fast_tokenizer.eos_token_id
        self.collator = DataCollatorForLanguageModeling(
            fast_tokenizer, mlm=True, mlm_probability=MLM_PROBABILITY, return_tensors="pt"
        )
        val_ids = passages(val, size.context, None)
        random.Random(seed).shuffle(val_ids)
        val_ids = val_ids[:val_passages]
        self.val_batches = self._collate_all(val_ids, seed=seed + 7)

    def _collate_all(self, ids: list[list[int]], seed: int) -> list[dict]:
        size = self.size.batch_size
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            return [
                self.collator([{"input_ids": [self.bos, *p, self.eos]} for p in ids[i : i + size]])
                for i in range(0, len(ids) - size + 1, size)
            ] or [self.collator([{"input_ids": [self.bos, *p, self.eos]} for p in ids])]

    def batches(self, epoch: int) -> list[dict]:
        rng = random.Random(self.seed * 1_000_003 + epoch)
        ids = passages(self.train, self.size.context, rng)
        rng.shuffle(ids)
        return self._collate_all(ids, seed=self.seed * 1_000_003 + epoch)

    def loss(self, model, batch: dict) -> torch.Tensor:
        """The training loss: `masked_cross_entropy`, under bfloat16 autocast when the size asks
        for it (1.6× faster per step on an AVX512-BF16 CPU; weights and optimizer stay fp32)."""
        with common.bf16_autocast(self.size.bf16):
            return masked_cross_entropy(model, batch)

    def validation_loss(self, model) -> float:
        nll, tokens = 0.0, 0
        model.eval()
        with torch.no_grad():
            for batch in self.val_batches:
                n = int((batch["labels"] != -100).sum())
                nll += float(masked_cross_entropy(model, batch)) * n
                tokens += n
        return nll / max(tokens, 1)


def masked_cross_entropy(model, batch: dict) -> torch.Tensor:
    """`model(**batch).loss` of a `BertForMaskedLM`, with the MLM head run only at the masked
    positions: the head's projection onto the vocabulary is most of a small model's work, and
    the loss ignores the other 85 % of its logits anyway."""
    inputs = {key: value for key, value in batch.items() if key != "labels"}
    hidden = model.bert(**inputs).last_hidden_state  # (B, T, H)
    targets = batch["labels"] != -100  # (B, T)
    logits = model.cls(hidden[targets])  # (N, V), N = masked positions in the batch
    return torch.nn.functional.cross_entropy(logits.float(), batch["labels"][targets])


def build_model(size: MLMSize, vocab_size: int, pad_id: int, seed: int):
    from transformers import BertConfig, BertForMaskedLM

    config = BertConfig(
        vocab_size=vocab_size,
        hidden_size=size.width,
        num_hidden_layers=size.layers,
        num_attention_heads=size.heads,
        intermediate_size=4 * size.width,
        max_position_embeddings=size.context,
        position_embedding_type=POSITIONS,
        type_vocab_size=1,
        pad_token_id=pad_id,
    )
    config._attn_implementation = "eager"  # PyTorch's fused kernel has no relative positions
    torch.manual_seed(seed)
    return BertForMaskedLM(config)


# Library records of one source are grouped until a group holds this many words, so that the
# passage packer fills the context with consecutive sentences (WordNet's synsets and many
# dictionary entries are one sentence long) and never mixes sources.
LIBRARY_GROUP_WORDS = 150


def library_chapters(path: Path) -> list[corpus.Chapter]:
    """train/library.py's paragraphs as the packer's "chapters" (sentences as verses): records
    of one source taken in order until LIBRARY_GROUP_WORDS words."""
    from train.library import load_library

    groups: list[corpus.Chapter] = []
    words = 0
    for record in load_library(path):
        if not groups or groups[-1].book != record["source"] or words >= LIBRARY_GROUP_WORDS:
            groups.append(corpus.Chapter(record["source"], len(groups), "", []))
            words = 0
        groups[-1].verses.extend(record["sentences"])
        words += sum(len(s.split()) for s in record["sentences"])
    return groups


def library_description(path: Path) -> dict:
    """The manifest's training_data for a run on the library: sources, sentences, licences."""
    from train.library import SOURCES, library_counts

    counts = {source: c["sentences"] for source, c in library_counts(path).items()}
    return {
        "corpus": f"the library (train/library.py, {path.name}): "
        + ", ".join(f"{SOURCES[s][0]} ({n:,} sentences)" for s, n in counts.items()),
        "sentences": sum(counts.values()),
        "split": common.split_description()
        + "; held-out books, Psalms and verses removed from every source",
        "licence": "; ".join(f"{s}: {SOURCES[s][1]}" for s in counts),
    }


def short_name(corpus: str) -> str:
    """A corpus description without its provenance.

    >>> short_name("the library (train/library.py, library.jsonl): World English Bible, …")
    'the library'
    """
    return corpus.split(" (")[0]


def init_description(run: Path) -> dict:
    """What the run a model starts from trained on (its card's training_data, written when the
    run was evaluated) and for how many steps."""
    card = run / common.MODEL_DIR / CARD_FILE
    if not card.exists():
        raise ValueError(
            f"`--init` must be an evaluated run (evaluate it with --eval-only first), got {run}"
        )
    training = common.read_json(run / "training.json")
    return {
        "run": str(run),
        "steps": training["steps"],
        "training_data": common.read_json(card)["training_data"],
    }


class MaskedLM(Recipe):
    """The recipe (train/cli.py's interface): data, model, task, evaluation, card sections."""

    task_kind = "fill-mask"

    def __init__(
        self,
        name: str,
        tiny: bool,
        verses: Path,
        tokenizer_dir: Path,
        out_dir: Path,
        seed: int,
        library: Path | None = None,
        steps: int | None = None,
        init: Path | None = None,
    ):
        self.name = name
        self.library = library  # train on train/library.py's corpus instead of the WEB
        self.init = init  # a run whose weights training starts from (e.g. one on the library)
        # what that run trained on, read now so that an unevaluated run is refused before
        # training rather than at export
        self.pretraining = init_description(init) if init is not None else None
        self.tiny = tiny
        self.size = (TINY if tiny else SIZES)[name]
        if steps is not None:  # another budget, e.g. for a larger corpus on a fixed time
            self.size = replace(self.size, steps=steps)
        self.seed = seed
        self.out_dir = out_dir
        self.rows = data.load_verses(verses)
        self.tokenizer = with_mask_token(
            common.load_or_train_tokenizer(
                self.rows, tokenizer_dir, out_dir, tiny, "en", self.size.vocab_size
            )
        )
        self.fast = transformers_tokenizer(self.tokenizer, out_dir)

    def encoded(self, split: str) -> list[lm.EncodedChapter]:
        """The split's chapters, tokenized; the library's groups for "train" when training on
        it (validation and the study stay on the held-out WEB verses)."""
        if split == "train" and self.library is not None:
            chapters = library_chapters(self.library)
        else:
            chapters = corpus.chapters(self.rows, split)
        return [lm.EncodedChapter(c, self.tokenizer) for c in chapters]

    def setup(self):
        # Text is tokenized here, not when the recipe is made: `train ship` needs none of it
        # (with --corpus, that would be the library's 8M words).
        task = MLMTask(
            self.encoded("train"), self.encoded("validation"), self.fast, self.size, self.seed
        )
        config = common.TrainConfig(
            steps=self.size.steps,
            lr=self.size.lr,
            warmup=self.size.warmup,
            log_every=1 if self.tiny else 10,
            eval_every=2 if self.tiny else 100,
            checkpoint_every=2 if self.tiny else 50,
            seed=self.seed,
        )
        model = build_model(
            self.size, self.tokenizer.get_vocab_size(), self.fast.pad_token_id, self.seed
        )
        if self.init is not None:  # its weights only: the optimizer and schedule start afresh
            path = self.init / common.CHECKPOINT
            saved = torch.load(path, map_location="cpu", weights_only=False)
            model.load_state_dict(saved["model"])
        return model, task, config

    def generation(self) -> dict:
        return {"pad_token_id": self.fast.pad_token_id}

    def controls(self) -> dict:
        return {}

    def training_data(self) -> dict:
        if self.library is not None:
            own = library_description(self.library)
        else:
            train_rows = [r for r in self.rows if r["split"] == "train" and r["web"]]
            own = {
                "corpus": "World English Bible (SWORD module engWEB2015eb), training books "
                "including the deuterocanon",
                "verses": len(train_rows),
                "split": common.split_description(),
                "licence": "public domain",
            }
        if self.init is None:
            return own
        before = self.pretraining
        return {
            # the pretraining and fine_tuning rows carry each stage's full description
            "corpus": f"{short_name(before['training_data']['corpus'])}, then "
            f"{short_name(own['corpus'])} ({before['steps']:,} steps, then {self.size.steps:,})",
            "pretraining": before,
            "fine_tuning": own,
            "split": own["split"],
            "licence": before["training_data"]["licence"],
        }

    def description(self) -> str:
        size = self.size
        library = (
            "train/library.py's English library (Bible training books, commentaries, "
            "dictionaries, WordNet glosses)"
        )
        if self.init is not None:
            corpus_name = f"{library}, then on the World English Bible"
        else:
            corpus_name = "the World English Bible" if self.library is None else library
        return (
            f"BERT masked language model ({size.layers} layers, width {size.width}, "
            f"{size.heads} heads, context {size.context}) trained from scratch on {corpus_name} "
            f"with BERT's masking (15 %, 80/10/10). Fills in `{MASK}` tokens and "
            "gives contextual token vectors; seed 000's "
            + ("BERT-Base" if self.name.endswith("base") else "BERT-Large")
            + " counterpart, scaled down to two CPU cores."
        )

    # ---- export and evaluation -----------------------------------------------------------------

    def finish_model_dir(self, model_dir: Path) -> None:
        """Name the mask token in the checkpoint's transformers tokenizer files."""
        fast = as_transformers(model_dir / "tokenizer.json")
        fast.mask_token = MASK
        fast.save_pretrained(str(model_dir))
        self.tokenizer.save(str(model_dir / "tokenizer.json"))  # ours, byte for byte

    def export(self, model_dir, out_dir, precision, name, progress=True, optimize=True):
        from export.fill_mask import export_fill_mask_bundle

        return export_fill_mask_bundle(model_dir, out_dir, precision, optimize=optimize, name=name)

    def evaluate(self, model, bundle_dir: Path, progress: bool = True) -> dict:
        """Through the runtime on the int8 bundle: the masking-ratio study on held-out verses,
        the same scoring at 15 % on study/everyday_sentences.txt (unseen everyday English), the
        token-vector probes and BERT-as-generator samples."""
        import runtime
        from study import bert_generation, masking, probes
        from study.content_words import FIXTURE_DIR, WORDNET_DIR, ContentWords
        from study.figures import masking_plot
        from study.paraphrase_quality import everyday_sentences

        gen = runtime.load(bundle_dir)
        sentences = masking.held_out_sentences(self.rows, self.size.study_sentences, self.seed)
        words = ContentWords.from_wordnet(FIXTURE_DIR if self.tiny else WORDNET_DIR)
        study = masking.masking_study(
            gen, sentences, repetitions=self.size.study_repetitions, content_words=words
        )
        masking_plot({self.name: study}).savefig(self.out_dir / MASKING_PNG, dpi=100)
        everyday = masking.masking_study(
            gen,
            everyday_sentences(),
            ratios=(MLM_PROBABILITY,),
            repetitions=self.size.everyday_repetitions,
            content_words=words,
        )
        pair = ("the king was tired so he went to sleep", "the queen was tired so he went to sleep")
        try:
            influence = probes.influence(gen, *pair)
        except ValueError:  # a tokenizer that splits "king" and "queen" differently (tiny runs)
            influence = {"ais": None, "average_similarity": None}
        return {
            "masking_study": study,
            "everyday_study": everyday,
            "probes": {
                "analogy": probes.analogy_table(gen),
                "word_order": probes.word_order(gen),
                "influence": {
                    "a": pair[0],
                    "b": pair[1],
                    "ais": influence["ais"],
                    "average_similarity": influence["average_similarity"],
                },
            },
            "generation": {
                "prompt": GENERATION_PROMPT,
                "right": GENERATION_RIGHT,
                "outputs": bert_generation.all_strategies(
                    gen, GENERATION_PROMPT, GENERATION_RIGHT, tokens=10
                ),
            },
        }

    def metrics(self, evaluation: dict) -> dict:
        """Top-1 / top-5 at the 15 % row of the masking study: all masked words, then (for an
        evaluation that scored them) the content words among them; the same on everyday
        sentences for an evaluation that has them."""
        texts = [("held-out verses", evaluation["masking_study"])]
        if "everyday_study" in evaluation:
            texts.append(("everyday sentences", evaluation["everyday_study"]))
        metrics = {}
        for text, study in texts:
            at = study["ratios"].index(MLM_PROBABILITY)
            parts = [("masked-word", study)]
            if "content" in study:
                parts.append(("content-word", study["content"]))
            for label, part in parts:
                for k in (1, 5):
                    key = f"{label} top-{k} accuracy at 15 % ({text})"
                    metrics[key] = round(part["accuracy"][str(k)][at], 3)
        return metrics

    def card_files(self, out: Path) -> list[Path]:
        return [out / MASKING_PNG]

    def card_sections(self, evaluation: dict) -> list[tuple[str, str]]:
        study = evaluation["masking_study"]
        content = study.get("content")  # absent from evaluations made before issue 24
        header = ["masked", *(f"top {k}" for k in study["top_k"]), "predictions"]
        rows = [
            [f"{100 * ratio:.0f} %", *(study["accuracy"][str(k)][i] for k in study["top_k"]),
             study["predictions"][i]]
            for i, ratio in enumerate(study["ratios"])
        ]  # fmt: skip
        if content is not None:
            header += ["content top 1", "content top 5", "content predictions"]
            for i, row in enumerate(rows):
                row += [content["accuracy"]["1"][i], content["accuracy"]["5"][i]]
                row.append(content["predictions"][i])
        masking = (
            f"Seed 000's study (figure 17) on {study['sentences']} held-out verses (validation "
            f"books), {study['repetitions']} random maskings per verse and ratio, through the "
            "runtime on the int8 bundle: n = round(ratio × words) whole words are masked; "
            "accuracy = share of masked words whose token is among the top k predictions."
            + (
                " The content columns score the same predictions over the masked words that "
                "are nouns, verbs or adjectives (WordNet 3.0 after its base-form rules, minus a "
                "fixed list of closed-class words: study/content_words.py)."
                if content is not None
                else ""
            )
            + "\n\n"
            + common.markdown_table(header, rows)
            + f"\n\n![masking study]({MASKING_PNG})"
            + everyday_text(evaluation.get("everyday_study"))
        )
        probe = evaluation["probes"]
        comparisons = list(next(iter(probe["analogy"].values())))
        table = common.markdown_table(
            ["comparison", *probe["analogy"]],
            [[c, *(probe["analogy"][ctx][c] for ctx in probe["analogy"])] for c in comparisons],
        )
        order = common.markdown_table(
            ["ordering", "cosine to the original"], [[k, v] for k, v in probe["word_order"].items()]
        )
        influence = probe["influence"]
        ais = (
            f"Average Influence Similarity between *{influence['a']}* and *{influence['b']}*: "
            f"{influence['ais']:.3f} (all-to-all average {influence['average_similarity']:.3f})."
            if influence["ais"] is not None
            else "Average Influence Similarity: not measured (the two words tokenize differently)."
        )
        probes_text = (
            "Cosines of last-layer vectors (seed 000, tables 2-4); contexts: the word alone, "
            "*The … went to sleep.*, *The … was weary, so he/she went to sleep.*\n\n"
            f"{table}\n\nWord order (seed 000, table 5), vector of *queen*:\n\n{order}\n\n{ais}"
        )
        generation = evaluation["generation"]
        lines = [
            f"Seed 000, section 4.3, greedy, 10 new tokens; prompt *{generation['prompt']}*, "
            f"right context *{generation['right']}* (strategies 2 and 3):",
            "",
        ]
        lines += [f"- {name}: {text}" for name, text in generation["outputs"].items()]
        text = "one book" if self.library is None else "Bible text, commentaries and dictionaries"
        limits = (
            f"- Trained from scratch on two CPU cores on {text}: predictions favour Bible "
            "words; it is a study model, not a general masked LM.\n"
            "- The mask token absorbs the space before it, as RoBERTa's does: write "
            f"`the {MASK} of God`.\n"
            "- Generating from it (above) is poor by design of the objective, as seed 000 found."
        )
        return [
            ("Masking-ratio study", masking),
            ("Token-vector probes", probes_text),
            ("BERT as a generator", "\n".join(lines)),
            ("Known limits", limits),
        ]


def everyday_text(everyday: dict | None) -> str:
    """The card's paragraph on study/everyday_sentences.txt (empty for evaluations without it)."""
    if everyday is None:
        return ""
    parts = [("all masked words", everyday)]
    if "content" in everyday:
        parts.append(("content words", everyday["content"]))
    cells = "; ".join(
        f"{label}: top 1 {100 * part['accuracy']['1'][0]:.1f} %, top 5 "
        f"{100 * part['accuracy']['5'][0]:.1f} % ({part['predictions'][0]:,} predictions)"
        for label, part in parts
    )
    return (
        f"\n\nOn {everyday['sentences']} unseen everyday sentences "
        f"(study/everyday_sentences.txt), {everyday['repetitions']} random maskings each at "
        f"15 %: {cells}."
    )


def size_of(run: Path) -> str:
    """The size a run trained, from its directory name: `checkpoints/masked-lm-large-library-web`
    is masked-lm-large."""
    sizes = [name for name in SIZES if run.name == name or run.name.startswith(name + "-")]
    if not sizes:
        raise ValueError(f"run name must start with one of {sorted(SIZES)}, got {run.name!r}")
    return sizes[0]


def refresh_study_plots(runs: list[Path], bundles: list[Path]) -> None:
    """Draw every run's masking study (its evaluation.json) in one figure, labelled by size, and
    put it, as masking.png, into each shipped bundle (its card shows that file), updating the
    checksums."""
    from convert.manifest import seal
    from study.figures import masking_plot

    results = {}
    for run in runs:
        evaluation = common.read_json(run / common.EVALUATION)
        results[size_of(run)] = evaluation["masking_study"]
    figure = masking_plot(results)
    for bundle in bundles:
        figure.savefig(bundle / MASKING_PNG, dpi=100)
        seal(bundle, ensure_ascii=False)


def main(argv: list[str] | None = None) -> int:
    """`python -m train.masked_lm plots [--runs RUN …]`: both shipped cards get the two models'
    study plot (runs named after their size, e.g. checkpoints/masked-lm-base-library-web)."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m train.masked_lm", description=main.__doc__)
    parser.add_argument("command", choices=["plots"])
    parser.add_argument(
        "--runs", type=Path, nargs="+", default=[Path("checkpoints") / n for n in SIZES]
    )
    parser.add_argument("--models-dir", type=Path, default=Path("models"))
    args = parser.parse_args(argv)
    bundles = [args.models_dir / size_of(run) / "int8" for run in args.runs]
    refresh_study_plots(args.runs, bundles)
    for bundle in bundles:
        print(f"updated {bundle / MASKING_PNG}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
