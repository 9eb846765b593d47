"""Shipping a trained LoRA (train/adapter/finetune.py) as an adapter bundle in models/, measured.

    python -m train.adapter.ship --run checkpoints/adapter/bible --corpus bible \
        --out models/smollm2-bible

writes the bundle with export/adapter.py (controls built from the corpus's fields, the
memorisation index of its training text), then measures it through the runtime
(train/adapter/evaluation.py) beside the base and, for the Bible corpus, the from-scratch
`bible-lm`, and puts every number in the manifest's `metrics` and the model card, whichever way it
went.

Does not cover: training (train/adapter/finetune.py), the bundle format (export/adapter.py).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from collections import Counter
from pathlib import Path

from convert.manifest import seal
from export.corpus import load_verses
from runtime.manifest import Manifest
from runtime.parameters import ADAPTER_PRESET, PRESETS
from train import common, data

from . import evaluation as adapter_eval
from . import finetune as adapter

BIBLE_LM = Path("models/bible-lm/int8")
SAMPLES = 50  # generated samples per control value (seed 000's check; bible-lm used 50)
SAMPLE_TOKENS = 64
STOP = (adapter.TEXT_END,)  # a passage ends at its closing tag
AUTHORS_SHOWN = 10  # the treasury adapter's author picker: Spurgeon and the most quoted writers
# What an adapter's manifest recommends: the app's adapter preset (runtime/parameters.py), 96
# new tokens, and stopping at the passage's closing tag.
GENERATION_DEFAULTS = {
    "max_new_tokens": 96,
    **PRESETS[ADAPTER_PRESET],
    "top_k": 0,
    "stop": [adapter.TEXT_END],
}
CORPUS_NAMES = {
    "bible": "WEB and KJV training books",
    "treasury": "The Treasury of David (Spurgeon and the writers he quotes)",
}
DESCRIPTIONS = {
    "bible": (
        "SmolLM2-135M-Instruct fine-tuned with LoRA on the World English Bible and the King "
        "James Version (training books), in seed 000's metadata format: pick a translation, a "
        "book and a section, or any subset, and the model writes a passage in that style."
    ),
    "treasury": (
        "SmolLM2-135M-Instruct fine-tuned with LoRA on C. H. Spurgeon's Treasury of David: his "
        "exposition and the older writers he quotes, each paragraph under its writer's name "
        "(seed 000's metadata format): pick an author and a psalm."
    ),
}


def choice(description: str, values: dict) -> dict:
    return {"kind": "choice", "values": values, "description": description}


def bible_controls(rows: list[dict]) -> dict:
    books = list(dict.fromkeys(r["book"] for r in rows if r["split"] == "train"))
    return {
        "translation": choice(
            "King James (1611/1769) or World English Bible (modern) English",
            {name: adapter.field("translation", name) for name in ("KJV", "WEB")},
        ),
        "book": choice("Bible book (training books)", {b: adapter.field("book", b) for b in books}),
        "section": choice(
            "Bible section", {k: adapter.field("section", k) for k in adapter.SECTION_KEYS.values()}
        ),
    }


def treasury_controls(passages: list) -> dict:
    counts = Counter(p.fields["author"] for p in passages)
    authors = [adapter.SPURGEON] + [
        a for a, _ in counts.most_common(AUTHORS_SHOWN + 1) if a != adapter.SPURGEON
    ][: AUTHORS_SHOWN - 1]
    psalms = sorted({int(p.fields["psalm"]) for p in passages})
    return {
        "author": choice(
            "writer: Spurgeon, or one of the writers he quotes most",
            {a: adapter.field("author", a) for a in authors},
        ),
        "psalm": choice(
            "psalm commented on (training psalms)",
            {str(n): adapter.field("psalm", str(n)) for n in psalms},
        ),
    }


def bible_metrics(gen, base, rows: list[dict]) -> dict:
    """Bits per character on held-out test verses (WEB and KJV) for the base, the adapter (with
    translation and section, and with no field) and bible-lm; section and translation
    conditioning."""
    import runtime

    verses = adapter_eval.held_out_verses(rows, "test")
    scratch = runtime.load(BIBLE_LM)
    bpc: dict[str, dict] = {}
    for column, name in (("web", "WEB"), ("kjv", "KJV")):
        texts = [r[column] for r in verses]
        sections = [adapter.SECTION_KEYS[r["section"]] for r in verses]
        fields = [{"translation": name, "section": s} for s in sections]  # held-out books
        # are not among the book picker's values (they were never trained on)
        bpc[name] = {
            "base SmolLM2-135M-Instruct": adapter_eval.bits_per_character(base, texts),
            "adapter, no field": adapter_eval.bits_per_character(gen, texts),
            "adapter, translation + section": adapter_eval.bits_per_character(gen, texts, fields),
            "bible-lm (from scratch, WEB only), section token": adapter_eval.bits_per_character(
                scratch, texts, [{"section": s} for s in sections]
            ),
        }
    keys = list(adapter.SECTION_KEYS.values())
    section_samples = adapter_eval.generate_samples(
        gen, {k: {"section": k} for k in keys}, SAMPLES, SAMPLE_TOKENS, STOP
    )
    classifier = adapter_eval.section_classifier(rows, adapter.SECTION_KEYS.get)
    real = [r for r in rows if r["split"] == "validation" and r["web"]]
    translation_samples = adapter_eval.generate_samples(
        gen, {t: {"translation": t} for t in ("KJV", "WEB")}, SAMPLES, SAMPLE_TOKENS, STOP
    )
    translations = adapter_eval.translation_classifier(rows)
    real_pairs = [r for r in real if r["kjv"]]
    return {
        "held_out_verses": len(verses),
        "bits_per_character_test": bpc,
        "section_conditioning": adapter_eval.classify(section_samples, classifier),
        "section_classifier_on_real_validation_verses": adapter_eval.real_accuracy(
            classifier, [r["web"] for r in real], [adapter.SECTION_KEYS[r["section"]] for r in real]
        ),
        "translation_conditioning": adapter_eval.classify(translation_samples, translations),
        "translation_classifier_on_real_validation_verses": adapter_eval.real_accuracy(
            translations,
            [r["web"] for r in real_pairs] + [r["kjv"] for r in real_pairs],
            ["WEB"] * len(real_pairs) + ["KJV"] * len(real_pairs),
        ),
        "samples": {k: v[:2] for k, v in {**section_samples, **translation_samples}.items()},
    }


def treasury_metrics(gen, base, passages: dict, controls: dict) -> dict:
    """Bits per character on held-out psalms' passages for the base and the adapter; author
    conditioning among the author picker's writers."""
    from train import evaluate

    test = passages["test"][:300]
    texts = [p.text for p in test]
    shown = [a for a in controls["author"]["values"]]
    bpc = {
        "base SmolLM2-135M-Instruct": adapter_eval.bits_per_character(base, texts),
        "adapter, no field": adapter_eval.bits_per_character(gen, texts),
        "adapter, author + psalm": adapter_eval.bits_per_character(
            gen, texts, [_known(p.fields, controls) for p in test]
        ),
    }
    train = [p for p in passages["train"] if p.fields["author"] in shown]
    classifier = evaluate.section_classifier(
        [p.text for p in train], [p.fields["author"] for p in train]
    )
    samples = adapter_eval.generate_samples(
        gen, {a: {"author": a} for a in shown}, SAMPLES, SAMPLE_TOKENS, STOP
    )
    real = [p for p in passages["validation"] if p.fields["author"] in shown]
    return {
        "held_out_passages": len(test),
        "bits_per_character_test": bpc,
        "author_conditioning": adapter_eval.classify(samples, classifier),
        "author_classifier_on_real_validation_passages": adapter_eval.real_accuracy(
            classifier, [p.text for p in real], [p.fields["author"] for p in real]
        ),
        "samples": {k: v[:2] for k, v in samples.items()},
    }


def _known(fields: dict, controls: dict) -> dict:
    """The passage's fields that the pickers offer (a held-out psalm is not among them)."""
    return {k: v for k, v in fields.items() if v in controls[k]["values"]}


def ship(run: Path, corpus: str, out: Path, verses: Path) -> dict:
    import runtime
    from export.adapter import export_adapter, model_card

    training = common.read_json(run / "training.json")
    rows = load_verses(verses)
    if corpus == "bible":
        passages = adapter.corpus_passages("bible", verses)
        controls = bible_controls(rows)
        split_note = data.HELD_OUT
    else:
        lines = adapter.read_treasury()
        held_out = adapter.treasury_held_out(lines, verses)
        passages = adapter.treasury_passages(lines, held_out)
        controls = treasury_controls(passages["train"])
        split_note = {s: sorted(p) for s, p in held_out.items()}
    started = time.perf_counter()
    export_adapter(
        run / "adapter",
        None,
        out,
        name=out.name,
        controls=controls,
        prompt_prefix=adapter.TEXT_START,
        generation_defaults=GENERATION_DEFAULTS,
        training_data={**training, "corpus": CORPUS_NAMES[corpus], "held_out": split_note},
        license="Apache-2.0 (base model and this adapter); training text public domain",
        description=DESCRIPTIONS[corpus],
        training_texts=[p.text for p in passages["train"]],
        corpus=f"{corpus} training passages",
    )
    export_seconds = time.perf_counter() - started
    gen = runtime.load(out)
    base = runtime.load(gen.directory)
    if corpus == "bible":
        metrics = bible_metrics(gen, base, rows)
    else:
        metrics = treasury_metrics(gen, base, passages, controls)
    metrics["export_seconds"] = round(export_seconds, 1)
    manifest = dataclasses.replace(
        Manifest.read(out / "manifest.json"),
        metrics=metrics,
        stop=(adapter.TEXT_END,),  # every generation ends a passage at its closing tag
    )
    card = model_card(dataclasses.replace(manifest, metrics=headline_metrics(metrics)))
    (out / "README.md").write_text(card + "\n" + evaluation_markdown(corpus, metrics, training))
    return seal(out, manifest)


def headline_metrics(metrics: dict) -> dict:
    """The few numbers the card's summary table shows (the rest is in its sections below)."""
    out = {}
    for translation, row in metrics["bits_per_character_test"].items():
        if isinstance(row, dict):
            for model, value in row.items():
                out[f"bits/char, held-out {translation}: {model}"] = round(value, 4)
        else:
            out[f"bits/char, held-out: {translation}"] = round(row, 4)
    for key, table in metrics.items():
        if key.endswith("_conditioning"):
            out[key.replace("_", " ") + " (accuracy)"] = round(table["overall"]["accuracy"], 3)
    return out


def _pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def evaluation_markdown(corpus: str, metrics: dict, training: dict) -> str:
    """The card's measured sections: training, bits per character, conditioning, samples."""
    lines = ["## How it was trained", ""]
    lines += common.markdown_table(
        ["setting", "value"],
        [
            (
                "LoRA rank / alpha / dropout",
                "{rank} / {alpha} / {dropout}".format(**training["lora"]),
            ),
            ("adapted modules", ", ".join(training["target_modules"])),
            ("training passages", f"{training['train_passages']:,}"),
            ("steps × batch", f"{training['steps']} × {training['batch_size']}"),
            ("share of one epoch seen", f"{training['epochs']:.2f}"),
            ("tokens", f"{training['tokens']:,}"),
            ("peak lr (warm-up, cosine)", training["lr"]),
            ("training time (active)", f"{training['train_seconds'] / 60:.1f} min"),
        ],
    ).splitlines()
    lines += ["", "## Bits per character on held-out text", ""]
    bpc = metrics["bits_per_character_test"]
    if corpus == "bible":
        models = list(next(iter(bpc.values())))
        lines += [
            f"{metrics['held_out_verses']} verses of the test books, each scored alone with "
            "`gen.score` (the runtime), bits of the verse's tokens per character of the verse, "
            "so models with different tokenizers compare; each model gets the context it was "
            "trained with.",
            "",
        ]
        rows = [(m, *(f"{bpc[t][m]:.3f}" for t in bpc)) for m in models]
        lines += common.markdown_table(["model", *bpc], rows).splitlines()
    else:
        lines += [
            f"{metrics['held_out_passages']} passages of the held-out psalms, scored as above.",
            "",
        ]
        lines += common.markdown_table(
            ["model", "bits/char"], [(m, f"{v:.3f}") for m, v in bpc.items()]
        ).splitlines()
    for key, table in metrics.items():
        if not key.endswith("_conditioning"):
            continue
        what = key.removesuffix("_conditioning")
        real = next(v for k, v in metrics.items() if k.startswith(f"{what}_classifier_on_real"))
        lines += [
            "",
            f"## {what.capitalize()} conditioning (seed 000's check)",
            "",
            f"{SAMPLES} samples per requested {what} ({SAMPLE_TOKENS} new tokens, top-p 0.95, "
            f"temperature 1, fixed seeds, only that field set), labelled by a TF-IDF + "
            f"logistic-regression classifier trained on real training text. Chance "
            f"{_pct(table['overall']['chance'])}; the classifier labels real held-out text "
            f"with {_pct(real)} accuracy.",
            "",
        ]
        classes = [c for c in table if c != "overall"]
        rows = [
            (c, table[c]["samples"], _pct(table[c]["accuracy"]),
             *(table[c]["labelled_as"][o] for o in classes))
            for c in classes
        ]  # fmt: skip
        rows.append(("overall", table["overall"]["samples"], _pct(table["overall"]["accuracy"]),
                     *([""] * len(classes))))  # fmt: skip
        lines += common.markdown_table(
            ["requested", "samples", "accuracy", *classes], rows
        ).splitlines()
    lines += ["", "## Samples", ""]
    for name, texts in metrics["samples"].items():
        for text in texts:
            lines.append(f"- *{name}*: {text}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scriptorium train adapter ship", description=__doc__)
    parser.add_argument("--run", type=Path, required=True, help="train.adapter.finetune's --out")
    parser.add_argument("--corpus", choices=sorted(adapter.CORPUS_FIELDS), required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--verses", type=Path, default=Path("data/verses.tsv"))
    args = parser.parse_args(argv)
    manifest = ship(args.run, args.corpus, args.out, args.verses)
    print(json.dumps(manifest.metrics, indent=1, default=str)[:4000])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
