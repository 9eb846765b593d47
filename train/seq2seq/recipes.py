"""The encoder-decoder recipes: `Rewriter` (KJV -> WEB with seed 004's length-ratio tokens) and
`Translator` (WEB -> Reina-Valera 1909), and `PairRecipe`, what they share (data, model, task,
generation settings, evaluation through the runtime, the model card).

The input format, the length tokens, the model and the batches they train on are
train/seq2seq/bart.py's (its docstring describes both models); this module turns them into the
recipes train/cli.py runs.

Does not cover: the verse table and pair filters (train/data.py), tokenizers (train/tokenizer.py),
the training loop (train/common.py), metric definitions (train/evaluate.py).
"""

from __future__ import annotations

import random
from pathlib import Path

from train import common, data, evaluate
from train.recipe import Recipe
from train.seq2seq.bart import (
    BALANCE_FLOOR,
    BALANCED_SHARE,
    REWRITER_FULL,
    TARGET_RATIOS,
    TINY,
    TRANSLATOR_FULL,
    Example,
    Pair,
    Seq2SeqSize,
    Seq2SeqTask,
    balanced_draw,
    build_model,
    draw_kind,
    generate_all,
    length_controls,
    length_prefix,
    make_example,
    make_pairs,
    with_seq2seq_post_processor,
)
from train.tokenizer import BOS, EOS, PAD


class PairRecipe(Recipe):
    """Shared by the rewriter and the translator: data, model, task, generation settings."""

    name = ""
    task_kind = "seq2seq"
    source = target = tokenizer_name = ""
    source_language = target_language = ""  # ISO 639-1 codes, for the app's language pairs

    def __init__(self, tiny: bool, verses: Path, tokenizer_dir: Path, out_dir: Path, seed: int):
        self.tiny = tiny
        self.size = TINY if tiny else self.full_size()
        self.seed = seed
        self.rows = data.load_verses(verses)
        tokenizer = common.load_or_train_tokenizer(
            self.rows, tokenizer_dir, out_dir, tiny, self.tokenizer_name, self.size.vocab_size
        )
        self.tokenizer = with_seq2seq_post_processor(tokenizer)
        self.special = {
            "bos": tokenizer.token_to_id(BOS),
            "eos": tokenizer.token_to_id(EOS),
            "pad": tokenizer.token_to_id(PAD),
        }
        self.pairs = {
            split: make_pairs(
                self.rows, self.source, self.target, split, tokenizer, self.size.positions
            )
            for split in data.SPLITS
        }

    def full_size(self) -> Seq2SeqSize:
        raise NotImplementedError

    def example(self, pair: Pair, rng: random.Random) -> Example:
        return make_example(pair, "", self.tokenizer, self.special)

    def examples_per_epoch(self) -> int:
        return len(self.pairs["train"])

    def epoch_examples(self, rng: random.Random) -> list[Example]:
        """One epoch's training examples (unbatched): every training pair once."""
        return [self.example(pair, rng) for pair in self.pairs["train"]]

    def setup(self):
        size = self.size
        task = Seq2SeqTask(self, self.pairs["validation"])
        per_epoch = self.examples_per_epoch() // size.batch_size
        steps = size.steps or max(1, round(size.epochs * per_epoch))
        config = common.TrainConfig(
            steps=steps,
            lr=size.lr,
            warmup=size.warmup,
            log_every=1 if self.tiny else 10,
            eval_every=3 if self.tiny else 100,
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
            "decoder_start_token_id": self.special["bos"],
            "num_beams": 3,
            "max_new_tokens": self.size.max_new_tokens,
        }

    def eval_config(self):
        import runtime

        return runtime.GenerationConfig(
            num_beams=self.size.eval_beams, max_new_tokens=self.size.max_new_tokens
        )

    def test_pairs(self) -> list[Pair]:
        pairs = self.pairs["test"]
        if self.size.eval_pairs:
            pairs = random.Random(self.seed).sample(pairs, min(self.size.eval_pairs, len(pairs)))
        return pairs

    def training_data(self) -> dict:
        return {
            "corpus": f"{self.source.upper()} -> {self.target.upper()} verse pairs from the "
            "SWORD modules engKJV2006eb, engWEB2015eb, spaRV1909eb (canonical books)",
            "source_language": self.source_language,
            "target_language": self.target_language,
            "training pairs": len(self.pairs["train"]),
            "pair filter": f"{data.PAIR_BOUNDS}",
            "split": common.split_description(),
            "licence": "public domain",
        }

    def memorisation(self, outputs: list[str], references: list[str]) -> dict:
        training = [p.target for p in self.pairs["train"]]
        return {
            "output": evaluate.memorised_share(outputs, training, 8),
            "reference": evaluate.memorised_share(references, training, 8),
        }


class Rewriter(PairRecipe):
    name = "rewriter"
    source, target, tokenizer_name = "kjv", "web", "en"
    source_language = target_language = "en"

    def full_size(self) -> Seq2SeqSize:
        return REWRITER_FULL

    def example(self, pair: Pair, rng: random.Random) -> Example:
        prefix = length_prefix(pair.ratio, draw_kind(rng))
        return make_example(pair, prefix, self.tokenizer, self.special)

    def balanced_count(self) -> int:
        return round(BALANCED_SHARE * len(self.pairs["train"]))

    def examples_per_epoch(self) -> int:
        return len(self.pairs["train"]) + self.balanced_count()

    def epoch_examples(self, rng: random.Random) -> list[Example]:
        """Every training pair once with a random prefix kind, plus a ratio-balanced draw of
        pairs with their value token."""
        extra = balanced_draw(self.pairs["train"], self.balanced_count(), rng, BALANCE_FLOOR)
        return super().epoch_examples(rng) + [
            make_example(pair, length_prefix(pair.ratio, "value"), self.tokenizer, self.special)
            for pair in extra
        ]

    def controls(self) -> dict:
        return length_controls()

    def description(self) -> str:
        s = self.size
        return (
            f"mBART (pre-LayerNorm BART; {s.encoder_layers}+{s.decoder_layers} layers, width "
            f"{s.width}) trained from scratch to rewrite King James Version verses in the World "
            "English Bible's modern wording, with seed 004's length-ratio control tokens "
            "(category and value)."
        )

    def evaluate(self, model, bundle_dir: Path, progress: bool = True) -> dict:
        import runtime

        gen = runtime.load(bundle_dir)
        config = self.eval_config()
        pairs = self.test_pairs()
        sources = [p.source for p in pairs]
        refs = [p.target for p in pairs]

        def run(srcs, controls, desc):
            return generate_all(gen, srcs, controls, config, desc=desc, progress=progress)

        true_ratio = [p.ratio for p in pairs]
        true_category = [evaluate.length_category(r) for r in true_ratio]
        outputs = self.length_token_outputs(run, sources, true_ratio)
        sweep = random.Random(self.seed + 1).sample(
            range(len(pairs)), min(self.size.sweep_pairs, len(pairs))
        )
        values = self.ratio_sweep(run, [sources[i] for i in sweep])
        strategy1 = {
            key: evaluate.mean_length_ratio(sources, outputs[key], self.subword_count)
            for key in ("none", *evaluate.LENGTH_CATEGORIES)
        }
        strategy2 = self.scores_by_true_category(sources, refs, true_category, outputs)
        return {
            "test_pairs": len(pairs),
            "sweep_pairs": len(sweep),
            "decoding": {"num_beams": config.num_beams, "max_new_tokens": config.max_new_tokens},
            "true_ratio_mean": sum(true_ratio) / len(true_ratio),
            "strategy1": strategy1,
            "strategy1_values": values,
            "targets": length_targets(strategy1, values, strategy2["overall"]),
            "strategy2": strategy2,
            "memorisation": self.memorisation(outputs["none"], refs),
            "samples": self.rewrite_samples(pairs, outputs),
        }

    def subword_count(self, text: str) -> int:
        """`text`'s length in subwords (at least 1), the unit of the length ratios."""
        return max(1, len(self.tokenizer.encode(text, add_special_tokens=False).ids))

    def length_token_outputs(self, run, sources: list[str], true_ratio: list[float]) -> dict:
        """The rewrites of `sources` with no length token, with each category token, with the
        value token nearest the true ratio, and with the true category's token."""
        outputs = {"none": run(sources, {}, "no token")}
        for category in evaluate.LENGTH_CATEGORIES:
            outputs[category] = run(sources, {"length": category}, f"<{category}>")
        oracle_value = [{"length_ratio": evaluate.nearest_ratio_value(r)} for r in true_ratio]
        outputs["oracle value"] = run(sources, oracle_value, "true value token")
        outputs["oracle category"] = [
            outputs[evaluate.length_category(ratio)][i] for i, ratio in enumerate(true_ratio)
        ]
        return outputs

    def ratio_sweep(self, run, sweep_sources: list[str]) -> dict[str, float]:
        """The mean achieved length ratio of `sweep_sources` under each value token."""
        values = {}
        for value in evaluate.RATIO_VALUES:
            outs = run(sweep_sources, {"length_ratio": value}, f"<ratio_{value:.1f}>")
            values[f"{value:.1f}"] = evaluate.mean_length_ratio(
                sweep_sources, outs, self.subword_count
            )
        return values

    def scores_by_true_category(
        self, sources: list[str], refs: list[str], true_category: list[str], outputs: dict
    ) -> dict:
        """Seed 004's strategy 2: BLEU, chrF, ROUGE-2 recall and length ratio of the copy
        baseline and the rewrites, over all pairs and over each true length category."""

        def scores(hyps, indices):
            h = [hyps[i] for i in indices]
            r = [refs[i] for i in indices]
            s = [sources[i] for i in indices]
            out = evaluate.bleu_chrf(h, r)
            out["rouge2_recall"] = evaluate.mean_rouge2_recall(h, r)
            out["ratio"] = evaluate.mean_length_ratio(s, h, self.subword_count)
            return out

        groups = {"overall": list(range(len(sources)))}
        for category in evaluate.LENGTH_CATEGORIES:
            groups[category] = [i for i, c in enumerate(true_category) if c == category]
        systems = {
            "copy (KJV source)": sources,
            "no token": outputs["none"],
            "true category token": outputs["oracle category"],
            "true value token": outputs["oracle value"],
        }
        return {
            group: {
                "pairs": len(indices),
                **{name: scores(hyps, indices) for name, hyps in systems.items()},
            }
            for group, indices in groups.items()
            if indices
        }

    def rewrite_samples(self, pairs: list[Pair], outputs: dict) -> list[dict]:
        """Four test pairs with their rewrites, for the card."""
        return [
            {
                "reference": f"{pairs[i].book}",
                "kjv": pairs[i].source,
                "web": pairs[i].target,
                **{key: outputs[key][i] for key in ("none", *evaluate.LENGTH_CATEGORIES)},
            }
            for i in random.Random(self.seed + 2).sample(range(len(pairs)), min(4, len(pairs)))
        ]

    def value_token_limits(self, strategy1_values: dict[str, float]) -> str:
        """Where the value tokens work, and how rare the training pairs outside that range are."""
        achieved = {float(k): v for k, v in strategy1_values.items()}
        low, high = evaluate.responsive_range(achieved)
        train = [evaluate.nearest_ratio_value(p.ratio) for p in self.pairs["train"]]
        outside = sum(not low <= v <= high for v in train) / max(1, len(train))
        lowest, highest = min(achieved), max(achieved)
        return (
            f"Value tokens steer the length from {low:.1f} to {high:.1f} (achieved "
            f"{achieved[low]:.2f} to {achieved[high]:.2f}); beyond that range the achieved ratio "
            f"no longer follows the request (`<ratio_{lowest:.1f}>` gives "
            f"{achieved[lowest]:.2f}, `<ratio_{highest:.1f}>` {achieved[highest]:.2f}). Only "
            f"{100 * outside:.1f} % of the training pairs have a true ratio nearest a value "
            "outside that range."
        )

    def metrics(self, evaluation: dict) -> dict:
        s1, overall = evaluation["strategy1"], evaluation["strategy2"]["overall"]
        out = {f"LRsrc {k}": round(v, 3) for k, v in s1.items()}
        out["value tokens mean abs error (0.6-1.4)"] = round(
            evaluation["targets"]["value_mean_abs_error_0.6_1.4"], 3
        )
        for name in ("no token", "copy (KJV source)"):
            for metric in ("bleu", "chrf", "rouge2_recall"):
                out[f"{metric} {name}"] = round(overall[name][metric], 2)
        out["memorised 8-gram share (outputs)"] = round(evaluation["memorisation"]["output"], 3)
        return out

    def card_sections(self, evaluation: dict) -> list[tuple[str, str]]:
        s1, values = evaluation["strategy1"], evaluation["strategy1_values"]
        targets = evaluation["targets"]
        decoding = evaluation["decoding"]
        rows = [["no token (baseline)", s1["none"]]]
        rows += [[f"`<{c}>`", s1[c]] for c in evaluate.LENGTH_CATEGORIES]
        strategy1 = (
            f"Strategy 1 (seed 004): each token forced on every one of the "
            f"{evaluation['test_pairs']} test verses (beam {decoding['num_beams']}); LRsrc = mean "
            "of output subwords / source subwords. The true WEB/KJV ratio of the test verses "
            f"averages {evaluation['true_ratio_mean']:.3f}.\n\n"
            + common.markdown_table(["token", "LRsrc"], rows)
            + f"\n\nValue tokens on {evaluation['sweep_pairs']} test verses "
            f"(mean |achieved − requested| over 0.6–1.4: "
            f"{targets['value_mean_abs_error_0.6_1.4']:.3f}; monotone: "
            f"{targets['value_monotone_0.6_1.4']}):\n\n"
            + common.markdown_table(
                ["requested", "achieved LRsrc"], [[k, v] for k, v in values.items()]
            )
        )
        rows = []
        for group, entry in evaluation["strategy2"].items():
            for name, s in entry.items():
                if name == "pairs":
                    continue
                rows.append(
                    [
                        group,
                        entry["pairs"],
                        name,
                        s["bleu"],
                        s["chrf"],
                        s["rouge2_recall"],
                        s["ratio"],
                    ]
                )
        strategy2 = (
            "Strategy 2 (seed 004): test pairs grouped by their true ratio category; outputs "
            "with no token, with the pair's true category token and with its true value token, "
            "next to the copy baseline (the KJV source scored against the WEB reference). "
            "BLEU and chrF are sacreBLEU corpus scores; ROUGE-2 is the mean per-verse recall.\n\n"
            + common.markdown_table(
                ["true ratio", "pairs", "system", "BLEU", "chrF", "ROUGE-2 R", "LRsrc"], rows
            )
        )
        lines = [
            f"Decoding: beam {decoding['num_beams']}, at most "
            f"{decoding['max_new_tokens']} new tokens.",
            "",
        ]
        for s in evaluation["samples"]:
            lines += [f"- **{s['reference']}** KJV: {s['kjv']}", f"  - WEB: {s['web']}"]
            lines += [f"  - output, {k}: {s[k]}" for k in ("none", *evaluate.LENGTH_CATEGORIES)]
        mem = evaluation["memorisation"]
        limits = (
            f"- Memorisation: {100 * mem['output']:.1f} % of the word 8-grams of the test outputs "
            f"(no token) occur verbatim in the training targets; {100 * mem['reference']:.1f} % "
            "of the WEB references' 8-grams do too (the Bible repeats itself).\n"
            "- Trained on Bible verses only: other archaic English is out of domain.\n"
            f"- {self.value_token_limits(evaluation['strategy1_values'])}\n"
            "- Length tokens steer length, not meaning: to reach a shorter ratio the model drops "
            "words, to reach a longer one it repeats or adds them."
        )
        return [
            ("Length control (strategy 1)", strategy1),
            ("Quality per ratio group (strategy 2)", strategy2),
            ("Samples", "\n".join(lines)),
            ("Known limits", limits),
        ]


def length_targets(strategy1: dict, values: dict[str, float], overall: dict) -> dict:
    """Whether the rewriter meets seed 004's targets: category tokens order the lengths, `normal`
    keeps it, value tokens hit 0.6-1.4 (mean absolute error, monotone), and rewriting beats
    copying the source (`overall`: strategy 2's scores over all pairs)."""
    targets = [v for v in TARGET_RATIOS if f"{v:.1f}" in values]
    value_error = sum(abs(values[f"{v:.1f}"] - v) for v in targets) / len(targets)
    achieved = [values[f"{v:.1f}"] for v in targets]
    cats = [strategy1[c] for c in evaluate.LENGTH_CATEGORIES]
    copy, plain = overall["copy (KJV source)"], overall["no token"]
    return {
        "category_increasing": cats[0] < cats[1] < cats[2],
        "normal_within_0.05": abs(strategy1["normal"] - 1.0) <= 0.05,
        "value_mean_abs_error_0.6_1.4": value_error,
        "value_error_at_most_0.10": value_error <= 0.10,
        "value_monotone_0.6_1.4": all(a < b for a, b in zip(achieved, achieved[1:])),
        "beats_copy_bleu": plain["bleu"] > copy["bleu"],
        "beats_copy_chrf": plain["chrf"] > copy["chrf"],
    }


class Translator(PairRecipe):
    name = "translator"
    source, target, tokenizer_name = "web", "rv1909", "en_es"
    source_language, target_language = "en", "es"

    def full_size(self) -> Seq2SeqSize:
        return TRANSLATOR_FULL

    def controls(self) -> dict:
        return {}

    def description(self) -> str:
        s = self.size
        return (
            f"mBART (pre-LayerNorm BART; {s.encoder_layers}+{s.decoder_layers} layers, width "
            f"{s.width}) trained from scratch to translate World English Bible verses into the "
            "Spanish of the Reina-Valera 1909, with one joint English + Spanish vocabulary."
        )

    def evaluate(self, model, bundle_dir: Path, progress: bool = True) -> dict:
        import runtime

        gen = runtime.load(bundle_dir)
        config = self.eval_config()
        pairs = self.test_pairs()
        sources = [p.source for p in pairs]
        refs = [p.target for p in pairs]
        outputs = generate_all(gen, sources, {}, config, desc="translate", progress=progress)
        systems = {"model": outputs}
        if evaluate.apertium_available():
            systems["apertium eng-spa"] = evaluate.run_apertium(sources)
        books = sorted({p.book for p in pairs}, key=list(data.BOOKS).index)
        table = {}
        for name, hyps in systems.items():
            table[name] = {"overall": evaluate.bleu_chrf(hyps, refs)}
            for book in books:
                idx = [i for i, p in enumerate(pairs) if p.book == book]
                table[name][book] = evaluate.bleu_chrf(
                    [hyps[i] for i in idx], [refs[i] for i in idx]
                )
        model_scores = table["model"]["overall"]
        apertium = table.get("apertium eng-spa", {}).get("overall")
        chosen = random.Random(self.seed + 2).sample(range(len(pairs)), min(4, len(pairs)))
        samples = [
            {
                "reference": pairs[i].book,
                "web": sources[i],
                "rv1909": refs[i],
                "model": outputs[i],
                **({"apertium": systems["apertium eng-spa"][i]} if apertium else {}),
            }
            for i in chosen
        ]
        return {
            "test_pairs": len(pairs),
            "decoding": {"num_beams": config.num_beams, "max_new_tokens": config.max_new_tokens},
            "scores": table,
            "targets": {
                "beats_apertium_bleu": None
                if apertium is None
                else model_scores["bleu"] > apertium["bleu"],
                "beats_apertium_chrf": None
                if apertium is None
                else model_scores["chrf"] > apertium["chrf"],
            },
            "memorisation": self.memorisation(outputs, refs),
            "samples": samples,
        }

    def metrics(self, evaluation: dict) -> dict:
        out = {}
        for name, scores in evaluation["scores"].items():
            out[f"BLEU {name} (test)"] = round(scores["overall"]["bleu"], 2)
            out[f"chrF {name} (test)"] = round(scores["overall"]["chrf"], 2)
        out["memorised 8-gram share (outputs)"] = round(evaluation["memorisation"]["output"], 3)
        return out

    def card_sections(self, evaluation: dict) -> list[tuple[str, str]]:
        names = list(evaluation["scores"])
        groups = list(evaluation["scores"]["model"])
        rows = [
            [
                g,
                *(
                    x
                    for n in names
                    for x in (
                        evaluation["scores"][n][g]["bleu"],
                        evaluation["scores"][n][g]["chrf"],
                    )
                ),
            ]
            for g in groups
        ]
        header = ["test book", *(f"{m} {n}" for n in names for m in ("BLEU", "chrF"))]
        decoding = evaluation["decoding"]
        scores = (
            f"sacreBLEU (13a) and chrF against the Reina-Valera 1909 on the "
            f"{evaluation['test_pairs']} test verses (beam {decoding['num_beams']}), next to "
            "Debian's rule-based `apertium -u eng-spa` on the same WEB verses.\n\n"
            + common.markdown_table(header, rows)
        )
        lines = [f"Decoding: beam {decoding['num_beams']}.", ""]
        for s in evaluation["samples"]:
            lines += [
                f"- **{s['reference']}** WEB: {s['web']}",
                f"  - RV1909: {s['rv1909']}",
                f"  - model: {s['model']}",
            ]
            if "apertium" in s:
                lines.append(f"  - apertium: {s['apertium']}")
        mem = evaluation["memorisation"]
        limits = (
            f"- Memorisation: {100 * mem['output']:.1f} % of the word 8-grams of the test "
            f"translations occur verbatim in the training targets ({100 * mem['reference']:.1f} "
            "% of the RV1909 references' do).\n"
            "- Translates into 1909 Spanish with its spelling (á as a word, fué, vió): not "
            "modern Spanish. Trained on Bible verses only: other text is out of domain.\n"
            "- A 10M-parameter model trained for about an hour: it keeps the verse's frame "
            "but often loses or swaps content words, and a word it cannot translate can come out "
            "garbled or as one syllable repeated (see the samples)."
        )
        return [
            ("Translation quality", scores),
            ("Samples", "\n".join(lines)),
            ("Known limits", limits),
        ]
