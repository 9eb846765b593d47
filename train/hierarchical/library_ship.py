"""Shipping the paraphraser trained on the library (issue 24): `ship --library-runs DIR` exports
DIR/<lm> (next sentence on train/library.py's paragraphs) and its autoencoder DIR/<ae> to
models/<--name>/<precision> (default models/paraphraser: it replaces the WEB model; another name
ships it beside), int8 when it is within 1 % of fp32 (train/hierarchical/ship.py's
rule), with a model card that sets its measures beside the WEB-trained paraphraser's.

The WEB-era results whose runs are gone (the sentence-encoder comparison, the Spurgeon style runs,
their figures) are carried from the bundle being replaced (`--previous`, default the current
models/paraphraser bundle); the card says they come from the WEB runs. That bundle's own measures
are carried too, and its everyday-sentence measures (study/paraphrase_quality.py) are measured
before it is overwritten, unless it already carries them (a library bundle shipped before carries
the WEB model's block). models/paraphraser-spurgeon is not touched: it stays the WEB-pretrained
fine-tune.

Measures (both models): teacher-forced next-verse and reconstruction nits/char on the WEB test
books; greedy reconstruction of the first 200 WEB test verses (exact share, BLEU, chrF, floor);
on study/everyday_sentences.txt the closest changed candidate's chrF to its source, the share of
sentences with a changed candidate, reconstruction there, and the hand-judged share that keeps
the meaning (`--judged` TSV for the new bundle; without it the card says it is not judged yet and
an unjudged TSV is written beside the runs for a person to fill).

Does not cover: the WEB ship (train/hierarchical/ship.py), the measures themselves
(study/paraphrase_quality.py), the library recipe (train/library.py).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from convert.manifest import seal
from export import hierarchical as hierarchical_export
from runtime.hierarchical import HierarchicalGenerator
from runtime.manifest import Manifest
from study import paraphrase_quality
from train import common
from train.hierarchical import recipes as hierarchical_training
from train.hierarchical.ship import (
    RECONSTRUCTION_SENTENCES,
    RECONSTRUCTION_VERSES,
    _precisions,
    check_shared_weights,
    reconstruction_quality,
    with_metrics,
)
from train.library import SOURCES, library_counts

WEB_JUDGED = paraphrase_quality.JUDGEMENTS_DIR / "paraphraser-web.tsv"
CARRIED_FIGURES = (
    "sentence_encoders.png",
    "loss-gru.png",
    "loss-transformer.png",
    "loss-sarah.png",
)
EVERYDAY_EXAMPLES = 8  # (source, closest changed candidate) rows shown on the card


def previous_bundle(models_dir: Path, previous: Path | None) -> Path:
    """The bundle being replaced: `previous`, else models_dir/paraphraser/{int8,fp32}."""
    candidates = (
        [previous] if previous else [models_dir / "paraphraser" / p for p in ("int8", "fp32")]
    )
    for bundle in candidates:
        if (bundle / "manifest.json").exists():
            return bundle
    raise ValueError(
        f"`--previous` must be a paraphraser bundle with the WEB runs' metrics, got none at "
        f"{', '.join(map(str, candidates))}"
    )


def everyday(generator, judged: Path | None) -> dict:
    """study.paraphrase_quality's everyday measures of `generator`, with the hand-judged share
    when `judged` is given (None otherwise); "pairs" kept for the card and the TSV."""
    result = paraphrase_quality.everyday_measures(generator)
    result["meaning_kept"] = (
        paraphrase_quality.meaning_kept(judged, result["pairs"]) if judged else None
    )
    return result


def web_model_block(bundle: Path, judged: Path | None) -> dict:
    """The WEB-trained paraphraser's measures, from the bundle being replaced: carried as they
    are when it is itself a library ship (its "web_model"), else read from its manifest and its
    everyday measures taken now."""
    metrics = Manifest.read(bundle / "manifest.json").metrics
    if "web_model" in metrics:
        return metrics["web_model"]
    measured = everyday(HierarchicalGenerator.open(bundle), judged)
    measured.pop("pairs")
    keys = ("kind", "test_nits_per_char", "steps", "autoencoder_test_nits_per_char")
    return {
        **{k: metrics[k] for k in keys},
        "autoencoder_reconstruction": metrics["autoencoder_reconstruction"],
        "sentence_encoders": metrics["sentence_encoders"],
        "spurgeon": metrics["spurgeon"],
        "everyday": measured,
    }


def _kept(measure: dict | None) -> str:
    if not measure:
        return "not judged yet"
    return f"{measure['share']:.0%} ({measure['kept']} of {measure['judged']})"


def comparison_table(new: dict, web: dict) -> str:
    """Both models' measures side by side (the card's main table)."""

    def row(label, pick):
        return (label, pick(new), pick(web))

    def recon(m):
        r = m["autoencoder_reconstruction"]
        return f"{r['exact_share']:.1%} / {r['bleu']} / {r['chrf']}"

    def everyday_recon(m):
        r = m["everyday"]["reconstruction"]
        return f"{r['exact_share']:.1%} / {r['bleu']} / {r['chrf']}"

    rows = [
        row("next-verse test nits/char (WEB test books)", lambda m: m["test_nits_per_char"]),
        row("reconstruction test nits/char", lambda m: m["autoencoder_test_nits_per_char"]),
        row("WEB test verses: greedy reconstruction exact / BLEU / chrF", recon),
        row(
            "everyday: closest changed candidate chrF to the source (mean sentence-level)",
            lambda m: m["everyday"]["chrf_mean"],
        ),
        row("everyday: the same, corpus chrF", lambda m: m["everyday"]["chrf_corpus"]),
        row(
            "everyday: sentences with a changed candidate",
            lambda m: f"{m['everyday']['changed_share']:.0%}",
        ),
        row("everyday: greedy reconstruction exact / BLEU / chrF", everyday_recon),
        row(
            "everyday: closest changed candidate keeps the meaning (judged by hand)",
            lambda m: _kept(m["everyday"]["meaning_kept"]),
        ),
    ]
    return common.markdown_table(("measure", "library model (this bundle)", "WEB model"), rows)


def data_section(library: Path, counts: dict, lm: dict, autoencoder: dict) -> str:
    table = common.markdown_table(
        ("source", "what", "paragraphs", "sentences", "words", "licence"),
        [
            (s, what, f"{c['paragraphs']:,}", f"{c['sentences']:,}", f"{c['words']:,}", licence)
            for s, c in counts.items()
            for what, licence in [SOURCES[s]]
        ]
        + [
            (
                "**total**",
                "",
                f"{sum(c['paragraphs'] for c in counts.values()):,}",
                f"{sum(c['sentences'] for c in counts.values()):,}",
                f"**{sum(c['words'] for c in counts.values()):,}**",
                "",
            )
        ],
    )
    return (
        f"## Training data: the library\n\n`{library.name}` (train/library.py, docs/DATA.md): "
        "clean sentences of the public-domain (and permissively licensed) English that Debian "
        "ships, held-out Bible books and Spurgeon Psalms kept out:\n\n"
        f"{table}\n\n"
        f"The language model trained on {lm['train_pairs']:,} pairs of consecutive sentences of "
        f"one paragraph that both fit the model (≤ 30 words of ≤ 19 characters, characters of the "
        f"WEB's set), the autoencoder on {autoencoder['train_pairs']:,} fitting sentences. "
        "Validation and test stay the held-out WEB verses (split "
        f"{common.split_description()}), so nits/char compare with the WEB model's.\n\n"
    )


def license_text(counts: dict) -> str:
    licences = sorted({SOURCES[s][1] for s in counts})
    return "Trained on the library's sources under their licences: " + "; ".join(
        f"{', '.join(s for s in counts if SOURCES[s][1] == lic)}: {lic}" for lic in licences
    )


def ship_library(args) -> int:
    """Export args.library_runs/<lm> + <ae> to models/<args.name>/<precision> with its card."""
    if args.library is None:
        raise ValueError("`--library` must name the library the runs trained on, got None")
    runs = args.library_runs
    lm_run, ae_run = runs / args.lm, runs / args.ae
    lm = common.read_json(lm_run / "result.json")
    autoencoder = common.read_json(ae_run / "result.json")
    check_shared_weights(lm_run, ae_run)
    previous = previous_bundle(args.models_dir, args.previous)
    web = web_model_block(previous, args.previous_judged)
    counts = library_counts(args.library)
    with tempfile.TemporaryDirectory() as carried:
        for figure in CARRIED_FIGURES:
            if (previous / figure).exists():
                shutil.copy(previous / figure, Path(carried) / figure)
        out = args.models_dir / args.name / "fp32"
        manifest = hierarchical_export.export_bundle(
            lm_run,
            out,
            args.name,
            ae_run,
            card={
                "metrics": {
                    "kind": lm["kind"],
                    "test_nits_per_char": lm["test_nits_per_char"],
                    "steps": lm["steps"],
                    "autoencoder_test_nits_per_char": autoencoder["test_nits_per_char"],
                    # carried from the WEB runs (the comparison and the Spurgeon runs)
                    "sentence_encoders": web["sentence_encoders"],
                    "spurgeon": web["spurgeon"],
                    "web_model": web,
                },
                "training_data": {
                    "corpus": f"the library ({args.library.name}, train/library.py): "
                    + ", ".join(counts),
                    "sources": {s: {**c, "licence": SOURCES[s][1]} for s, c in counts.items()},
                    "lm_pairs": lm["train_pairs"],
                    "autoencoder_sentences": autoencoder["train_pairs"],
                    "evaluation": "held-out WEB verses; split " + common.split_description(),
                },
                "license": license_text(counts),
            },
        )
        pairs, verse_rows = hierarchical_training.web_pairs(args.verses)
        precision_text, kept = _precisions(out, manifest, pairs["test"], "WEB test (next verse)")
        bundle, bundle_manifest = kept[0]
        generator = HierarchicalGenerator.open(bundle)
        test_verses = [
            "".join(words) for words, _ in hierarchical_training.verse_copies(verse_rows, "test")
        ]
        quality = reconstruction_quality(generator, test_verses[:RECONSTRUCTION_VERSES])
        measured = everyday(generator, args.judged)
        everyday_pairs = measured.pop("pairs")
        if args.judged is None:
            unjudged = runs / f"{args.lm}-everyday-unjudged.tsv"
            paraphrase_quality.write_unjudged(unjudged, everyday_pairs)
            print(f"wrote {unjudged}: judge it ({paraphrase_quality.JUDGING_RULE}), ship --judged")
        bundle_manifest = with_metrics(
            bundle_manifest, autoencoder_reconstruction=quality, everyday=measured
        )
        new = bundle_manifest.metrics
        readme = card(args, lm, autoencoder, web, new, counts, generator, everyday_pairs)
        readme += precision_text + _web_sections(web) + f"\n## Licence\n\n{license_text(counts)}.\n"
        for figure in CARRIED_FIGURES:
            if (Path(carried) / figure).exists():
                shutil.copy(Path(carried) / figure, bundle / figure)
    shutil.copy(lm_run / common.LOSS_PNG, bundle / "loss-shipped.png")
    shutil.copy(ae_run / common.LOSS_PNG, bundle / "loss-autoencoder.png")
    (bundle / "README.md").write_text(readme)
    seal(bundle, bundle_manifest)
    print(f"shipped {bundle}")
    return 0


def card(args, lm, autoencoder, web, new, counts, generator, everyday_pairs) -> str:
    """The card's Markdown up to the precision section."""
    rows = []
    for sentence in RECONSTRUCTION_SENTENCES:
        result = generator.reconstruction(sentence)
        rows.append((sentence, result.text, round(result.nits_per_char, 3)))
    examples = [
        (s, "(none changed)" if c is None else c.replace("|", "\\|")) for s, c in everyday_pairs
    ]
    manifest = generator.manifest
    greedy = manifest.parity.fp32_greedy or manifest.parity.greedy
    noise = lm.get("sentence_noise") or 0
    wdn = (
        f" with seed 003's WDN noise (std {noise} × the sentence vector's RMS, in training)"
        if noise
        else ""
    )
    web_model = f"the WEB-trained paraphraser ({web['steps']} steps on WEB verses)"
    relation = (
        f"It replaces {web_model}"
        if args.name == "paraphraser"
        else f"It ships beside {web_model}, models/paraphraser"
    )
    return (
        f"# {args.name}\n\nSeed 003's hierarchical character-level model with a "
        f"**{lm['kind']}** sentence encoder and decoder ({lm['steps']} steps), trained{wdn} to "
        "predict the next sentence of a paragraph of **the library** (train/library.py: Bibles, "
        "commentaries, dictionaries; about ten times the WEB), plus its autoencoder (the sentence "
        f"decoder fine-tuned {autoencoder['steps']} steps to reconstruct its input, everything "
        "else frozen) for unsupervised paraphrase. Task `hierarchical-lm`, run by "
        f"`runtime/hierarchical.py` (numpy + onnxruntime). {relation}; the measures of both stand "
        "side by side below.\n\n"
        f"Test nits/char (next WEB verse): **{lm['test_nits_per_char']}**; autoencoder "
        f"(reconstruction) test nits/char: **{autoencoder['test_nits_per_char']}**.\n\n"
        "## Measures, beside the WEB model\n\n"
        f"{comparison_table(new, web)}\n\n"
        f"WEB test verses: the first {RECONSTRUCTION_VERSES} test verses, sacreBLEU corpus BLEU "
        "and chrF of the greedy reconstruction against the verse (another verse of the list: "
        f"BLEU {new['autoencoder_reconstruction']['unrelated_bleu']}, chrF "
        f"{new['autoencoder_reconstruction']['unrelated_chrf']}). *Everyday*: the "
        f"{new['everyday']['sentences']} unseen everyday sentences of "
        "study/everyday_sentences.txt, paraphrased as the app does (40 candidates, temperature "
        "and noise weight from (0, 1), seed 0); the closest changed candidate is the best-ranked "
        "one whose text differs from the source (case and spaces ignored); chrF is sacreBLEU's "
        "(another sentence of the set scores "
        f"{new['everyday']['floor_chrf_mean']} mean, {new['everyday']['floor_chrf_corpus']} "
        "corpus). Meaning kept: the first 30 pairs judged by hand (study/judgements/) by this "
        f"rule: {paraphrase_quality.JUDGING_RULE}.\n\n"
        f"{data_section(args.library, counts, lm, autoencoder)}"
        "## Everyday sentences: closest changed candidate (first "
        f"{EVERYDAY_EXAMPLES})\n\n"
        + common.markdown_table(
            ("source", "closest changed candidate"), examples[:EVERYDAY_EXAMPLES]
        )
        + "\n\n## Parity with PyTorch\n\n"
        f"Greedy decoding (fp32 graphs): {greedy.identical} of {greedy.compared} sentences "
        f"identical, max |Δlogit| {greedy.max_abs_logit_diff}; per graph max |Δ| "
        f"{manifest.parity.graphs_max_abs_diff} (batch 1, 3, 7; lengths 1, 4, 9).\n\n"
        "## Reconstruction cost (seed 003, table 4.2)\n\n"
        + common.markdown_table(("sentence", "greedy reconstruction", "nits/char"), rows)
        + "\n\n## Training curves\n\n![language model](loss-shipped.png)\n"
        "![autoencoder](loss-autoencoder.png)\n\n"
    )


def _web_sections(web: dict) -> str:
    """The WEB runs' sentence-encoder comparison and Spurgeon numbers, carried."""
    encoders = common.markdown_table(
        ("sentence encoder", "parameters", "test nits/char"),
        [
            (k, f"{r['parameters']:,}", r["test_nits_per_char"])
            for k, r in web["sentence_encoders"].items()
        ],
    )
    spurgeon = ", ".join(f"{name} {value}" for name, value in web["spurgeon"].items())
    return (
        "## From the WEB runs: sentence encoders (seed 003, figure 3.2)\n\n"
        "Measured on the WEB verses (600 steps each, same schedule) before the library existed; "
        "carried from the WEB-trained paraphraser's card, not rerun on the library:\n\n"
        f"{encoders}\n\n![test nits per character against parameters](sentence_encoders.png)\n\n"
        "## From the WEB runs: style fine-tuning (Spurgeon)\n\n"
        f"Held-out Spurgeon nits/char of the WEB-pretrained model fine-tuned and of the same "
        f"architecture from scratch: {spurgeon}. models/paraphraser-spurgeon is that "
        "WEB-pretrained fine-tune, unchanged by this ship.\n"
    )
