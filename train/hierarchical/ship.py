"""Shipping seed 003's hierarchical models: `ship` exports the chosen WEB run (+ autoencoder) and
the Spurgeon fine-tune to bundles under models/, measures fp32 against int8 through the runtime,
keeps the better-sized one that is close enough, and writes each bundle's model card (tables,
plots, reconstruction examples and their quality).

Does not cover: the model (modeling/hierarchical.py), training (train/hierarchical/recipes.py), the
command line (train/hierarchical/cli.py), the ONNX graphs and parity checks
(export/hierarchical.py).
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import torch

from convert.manifest import seal
from export import hierarchical as hierarchical_export
from modeling import hierarchical as model_definition
from runtime.hierarchical import HierarchicalGenerator
from runtime.manifest import Manifest
from study.paraphrase_quality import reconstruction_quality
from train import common
from train.hierarchical import recipes as hierarchical_training

RECONSTRUCTION_SENTENCES = (
    "Jesus wept.",
    "In the beginning, God created the heavens and the earth.",
    "The Lord is my shepherd; I shall not lack.",
    "Blessed are the poor in spirit, for theirs is the Kingdom of Heaven.",
    "Now faith is assurance of things hoped for, proof of things not seen.",
    "The cat sat on the mat and looked at the dog.",
)


RECONSTRUCTION_VERSES = 200  # test verses whose greedy reconstructions the card scores


def comparison_plot(results: dict, path: Path) -> None:
    """Seed 003's figure 3.2 for our runs: test nits/char against parameters, one point a kind."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.5))
    for kind, result in results.items():
        ax.scatter(result["parameters"] / 1e6, result["test_nits_per_char"], s=60)
        ax.annotate(
            kind,
            (result["parameters"] / 1e6, result["test_nits_per_char"]),
            textcoords="offset points",
            xytext=(6, 4),
        )
    ax.set_xlabel("parameters (millions)")
    ax.set_ylabel("test nits / character")
    ax.set_title("Sentence encoder kinds, same step budget")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def budget_note(results: dict, shipped: dict, best: str) -> str:
    """How the comparison's budget relates to the shipped run, for the card."""
    steps = {r["steps"] for r in results.values()}
    planned = {r.get("planned_steps", r["steps"]) for r in results.values()}
    note = f"All three kinds: {', '.join(map(str, sorted(steps)))} steps"
    if steps != planned:
        note += f" of the same {', '.join(map(str, sorted(planned)))}-step schedule"
    note += ", same data order, seed 0, batch 32, one thread."
    if shipped["steps"] not in steps:
        precision = "bfloat16 autocast" if shipped.get("bf16") else "float32"
        note += (
            f" The best kind at that budget, {best}, was then trained on its own "
            f"{shipped['steps']}-step schedule (same data order and seed, {precision}, "
            f"{shipped['train_seconds'] / 60:.0f} minutes): that run is the shipped model; the "
            "table compares the kinds at equal budget."
        )
    return note + "\n\n"


def check_shared_weights(lm_run: Path, autoencoder_run: Path) -> None:
    """The bundle stores one word encoder, sentence encoder and word decoder for both sentence
    decoders, so an autoencoder run must have changed nothing else of its language model."""
    lm, autoencoder = (
        model_definition.load_run(lm_run).state_dict(),
        model_definition.load_run(autoencoder_run).state_dict(),
    )
    changed = sorted(
        name
        for name, weights in lm.items()
        if not name.startswith("sentence_decoder.") and not torch.equal(weights, autoencoder[name])
    )
    if changed:
        raise ValueError(
            f"`{autoencoder_run}` must change only the sentence decoder of `{lm_run}`, got "
            f"{len(changed)} other changed tensors ({changed[0]}, …): was it trained with "
            "--train-encoder or from another run?"
        )


def comparison_run(runs: Path, kind: str) -> Path:
    """The run of `kind` in the three-way comparison: runs/compare/<kind> when the comparison
    was made at a shorter budget than the shipped run, else runs/lm-<kind>."""
    compare = runs / "compare" / kind
    return compare if compare.exists() else runs / f"lm-{kind}"


@dataclasses.dataclass(frozen=True)
class RunResults:
    """What the training runs under runs/ recorded, as `ship` reads it."""

    runs: Path  # the runs folder: lm-<kind>, compare/<kind>, ae, style-<name>, spurgeon.json
    compared: dict  # kind -> result.json of its comparison run, for the kinds that have one
    best: str  # the kind that ships
    shipped: dict  # result.json of runs/lm-<best>, the shipped run
    autoencoder: dict  # result.json of runs/ae
    style: dict  # "finetune" / "scratch" -> result.json of runs/style-<name>, those that exist
    corpus: dict  # runs/spurgeon.json (the Spurgeon slice), {} when no style run exists


def read_runs(runs: Path, ship_kind: str | None) -> RunResults:
    """Read every run's result.json, pick the kind to ship (`ship_kind`, else the lowest test
    nits/char) and check its autoencoder shares its weights."""
    compared = {
        k: common.read_json(run / "result.json")
        for k, run in ((k, comparison_run(runs, k)) for k in model_definition.KINDS)
        if (run / "result.json").exists()
    }
    best = ship_kind or min(compared, key=lambda k: compared[k]["test_nits_per_char"])
    shipped = common.read_json(runs / f"lm-{best}" / "result.json")
    autoencoder = common.read_json(runs / "ae" / "result.json")
    check_shared_weights(runs / f"lm-{best}", runs / "ae")
    style = {
        name: common.read_json(runs / f"style-{name}" / "result.json")
        for name in ("finetune", "scratch")
        if (runs / f"style-{name}" / "result.json").exists()
    }
    corpus = json.loads((runs / "spurgeon.json").read_text()) if style else {}
    return RunResults(runs, compared, best, shipped, autoencoder, style, corpus)


def ship(args) -> int:
    """Export the chosen WEB kind (+ autoencoder) to models/paraphraser/<precision> and the
    Spurgeon fine-tune to models/paraphraser-spurgeon/<precision>, each with its model card
    (int8 when it is within INT8_TOLERANCE of fp32, else fp32)."""
    recorded = read_runs(args.runs, args.ship_kind)
    sections = training_sections(recorded)
    ship_paraphraser(recorded, sections, args.models_dir, args.verses)
    if "finetune" in recorded.style:
        ship_spurgeon(recorded, sections, args.models_dir)
    return 0


def encoder_table(compared: dict) -> str:
    """The three-way comparison of sentence encoders, one row a kind."""
    return common.markdown_table(
        (
            "sentence encoder",
            "parameters",
            "test nits/char",
            "validation nits/char",
            "steps",
            "minutes (1 thread, shared host)",
        ),
        [
            (
                k,
                f"{r['parameters']:,}",
                r["test_nits_per_char"],
                r["validation_nits_per_char"],
                r["steps"],
                round(r["train_seconds"] / 60, 1),
            )
            for k, r in compared.items()
        ],
    )


def style_table(style: dict) -> str:
    """The Spurgeon runs' held-out cost, fine-tuned against from scratch."""
    if not style:
        return "Not trained."
    return common.markdown_table(
        ("Spurgeon model", "steps", "held-out Spurgeon nits/char"),
        [
            (
                "WEB-pretrained, fine-tuned" if n == "finetune" else "from scratch on the slice",
                r["steps"],
                r["test_nits_per_char"],
            )
            for n, r in style.items()
        ],
    )


def training_sections(recorded: RunResults) -> str:
    """The card sections both bundles share: training, the encoder comparison, the style runs."""
    best, shipped, compared = recorded.best, recorded.shipped, recorded.compared
    sections = (
        "## Training\n\n"
        f"Next-verse prediction on consecutive WEB verses ({compared[best]['train_pairs']:,} "
        "training pairs: both verses ≤ 30 words of ≤ 19 characters; train / validation / test "
        f"books as every Scriptorium model; split {common.split_description()}). Batch "
        f"{compared[best]['batch_size']}, AdamW, peak lr {compared[best]['lr']}, on a shared "
        f"2-core host ({shipped['threads']} torch thread(s) for the shipped run). Nits per "
        "character count every character of a target word, its end-of-word symbol and the "
        "end-of-sentence word. Sizes are seed 003's scaled down: docs/PARAPHRASE.md.\n\n"
        f"## Sentence encoders (seed 003, figure 3.2)\n\n{budget_note(compared, shipped, best)}"
        f"{encoder_table(compared)}\n\n"
        "![test nits per character against parameters](sentence_encoders.png)\n\n"
        + "".join(f"![{k} training curve](loss-{k}.png)\n" for k in compared)
        + f"\nThe shipped {best} model's curve ({shipped['steps']} steps):\n\n"
        "![shipped model training curve](loss-shipped.png)\n"
        + f"\n## Style fine-tuning: Spurgeon\n\n{style_table(recorded.style)}\n\n"
    )
    corpus = recorded.corpus
    if corpus:
        sections += (
            "Corpus: C. H. Spurgeon's own EXPOSITION sections of *The Treasury of David* (SWORD "
            f"TDavid), quoted writers dropped; {corpus['words']['train']:,} training words "
            f"(Psalms {corpus['psalms']['train'][0]}-{corpus['psalms']['train'][1]}), held-out "
            f"test Psalms {corpus['psalms']['test'][0]}-{corpus['psalms']['test'][1]} "
            f"({corpus['words']['test']:,} words).\n"
        )
    return sections


def ship_paraphraser(recorded: RunResults, sections: str, models_dir: Path, verses) -> None:
    """Export the shipped run with its autoencoder to models/paraphraser, keep the better
    precision, measure its reconstructions and write its card."""
    runs, best, shipped = recorded.runs, recorded.best, recorded.shipped
    out = models_dir / "paraphraser" / "fp32"
    manifest = hierarchical_export.export_bundle(
        runs / f"lm-{best}",
        out,
        "paraphraser",
        runs / "ae",
        card={
            "description": "",
            "metrics": {
                "sentence_encoders": {
                    k: {
                        "parameters": r["parameters"],
                        "test_nits_per_char": r["test_nits_per_char"],
                    }
                    for k, r in recorded.compared.items()
                },
                "kind": best,
                "test_nits_per_char": shipped["test_nits_per_char"],
                "steps": shipped["steps"],
                "autoencoder_test_nits_per_char": recorded.autoencoder["test_nits_per_char"],
                "spurgeon": {n: r["test_nits_per_char"] for n, r in recorded.style.items()},
            },
            "training_data": {
                "corpus": "World English Bible (WEB), consecutive verses",
                "split": common.split_description(),
            },
        },
    )
    pairs, verse_rows = hierarchical_training.web_pairs(verses)
    precision_text, kept = _precisions(out, manifest, pairs["test"], "WEB test (next verse)")
    test_verses = [
        "".join(words) for words, _ in hierarchical_training.verse_copies(verse_rows, "test")
    ]
    generator = HierarchicalGenerator.open(kept[0][0])
    reconstruction_text, quality = reconstruction_sections(generator, test_verses)
    kept = [(bundle, with_metrics(m, autoencoder_reconstruction=quality)) for bundle, m in kept]
    autoencoder, parity = recorded.autoencoder, manifest.parity
    readme = (
        f"# paraphraser\n\nSeed 003's hierarchical character-level model with a **{best}** "
        f"sentence encoder and decoder ({shipped['steps']} steps), trained to predict "
        "the next WEB verse, plus its autoencoder (the sentence decoder fine-tuned to reconstruct "
        "its input, everything else frozen) for unsupervised paraphrase. Task "
        "`hierarchical-lm`, run by `runtime/hierarchical.py` (numpy + onnxruntime).\n\n"
        f"Test nits/char (next verse): **{shipped['test_nits_per_char']}**; autoencoder "
        f"(reconstruction) test nits/char: **{autoencoder['test_nits_per_char']}** after "
        f"{autoencoder['steps']} steps.\n\n"
        "## Parity with PyTorch\n\n"
        f"Greedy decoding: {parity.greedy.identical} of "
        f"{parity.greedy.compared} sentences identical, max |Δlogit| "
        f"{parity.greedy.max_abs_logit_diff}; per graph max |Δ| "
        f"{parity.graphs_max_abs_diff} (batch 1, 3, 7; lengths 1, 4, 9).\n\n"
        + reconstruction_text
        + precision_text
        + sections
        + "\n## Licence\n\nPublic domain: trained only on public-domain text.\n"
    )
    for bundle, bundle_manifest in kept:
        _finish_bundle(bundle, bundle_manifest, readme, recorded.compared, runs)
        print(f"shipped {bundle}")


def reconstruction_sections(generator: HierarchicalGenerator, test_verses: list[str]):
    """The autoencoder's card sections: the cost of reconstructing RECONSTRUCTION_SENTENCES,
    the quality of the first RECONSTRUCTION_VERSES test verses' greedy reconstructions, and one
    paraphrase ranking. Returns (those sections, the quality metrics)."""
    rows = []
    for sentence in RECONSTRUCTION_SENTENCES:
        result = generator.reconstruction(sentence)
        rows.append((sentence, result.text, round(result.nits_per_char, 3)))
    reconstruction = common.markdown_table(("sentence", "greedy reconstruction", "nits/char"), rows)
    quality = reconstruction_quality(generator, test_verses[:RECONSTRUCTION_VERSES])
    exact_verses = ", ".join(f"“{text}” × {count}" for text, count in quality["exact"].items())
    examples = generator.paraphrase(RECONSTRUCTION_SENTENCES[1], 40, seed=0)[:4]
    example_rows = [
        (round(c.distance, 3), round(c.temperature, 2), round(c.noise, 2), c.text) for c in examples
    ]
    text = (
        f"## Reconstruction cost (seed 003, table 4.2)\n\n{reconstruction}\n\n"
        f"Over the first {quality['sentences']} test verses, the greedy reconstruction is the "
        f"verse exactly for {quality['exact_share']:.1%} of them ({exact_verses}); against the "
        f"verses themselves it scores BLEU {quality['bleu']} and chrF {quality['chrf']} "
        "(sacreBLEU; a copy scores 100; another verse of the same list scores BLEU "
        f"{quality['unrelated_bleu']}, chrF {quality['unrelated_chrf']}).\n\n"
        "## Paraphrase example (40 candidates, seed 0, closest 4)\n\n"
        + common.markdown_table(("distance", "T", "noise w", "candidate"), example_rows)
        + "\n\n"
    )
    return text, quality


def ship_spurgeon(recorded: RunResults, sections: str, models_dir: Path) -> None:
    """Export the Spurgeon fine-tune to models/paraphraser-spurgeon, keep the better precision
    and write its card."""
    style = recorded.style
    out = models_dir / "paraphraser-spurgeon" / "fp32"
    manifest = hierarchical_export.export_bundle(
        recorded.runs / "style-finetune",
        out,
        "paraphraser-spurgeon",
        card={
            "metrics": {
                "spurgeon_test_nits_per_char": style["finetune"]["test_nits_per_char"],
                "from_scratch_test_nits_per_char": style.get("scratch", {}).get(
                    "test_nits_per_char"
                ),
                "kind": recorded.best,
            },
            "training_data": {
                "corpus": "WEB (pretraining), then Spurgeon's Treasury of "
                "David exposition (fine-tuning)"
            },
        },
    )
    precision_text, kept = _precisions(out, manifest, recorded.corpus["test"], "held-out Spurgeon")
    readme = (
        "# paraphraser-spurgeon\n\nThe `paraphraser`'s next-sentence model (WEB-pretrained, "
        f"{recorded.best}) fine-tuned on C. H. Spurgeon's own exposition in *The Treasury of "
        "David*: the app's second style for the next sentence (Generate and Compare tabs). It has "
        "no autoencoder, so it does not paraphrase.\n\n"
        + precision_text
        + sections
        + "\n## Licence\n\nPublic domain text (WEB; Spurgeon, 1869-1885).\n"
    )
    for bundle, bundle_manifest in kept:
        _finish_bundle(bundle, bundle_manifest, readme, recorded.compared, recorded.runs)
        print(f"shipped {bundle}")


INT8_TOLERANCE = 0.01  # int8 ships instead of fp32 when its nits/char is at most 1 % worse


def with_metrics(manifest: Manifest, **metrics) -> Manifest:
    """`manifest` with `metrics` added to its own."""
    return dataclasses.replace(manifest, metrics={**manifest.metrics, **metrics})


def _precisions(fp32: Path, manifest: Manifest, pairs, what: str):
    """Quantize the fp32 bundle to int8 beside it and measure both through the runtime on
    `pairs` (teacher-forced nits/char); the int8 bundle replaces fp32 when it is within
    INT8_TOLERANCE. Returns (the card's section, [(bundle dir, manifest)] to finish)."""
    int8_dir = fp32.parent / "int8"
    int8_manifest = hierarchical_export.quantize_bundle(fp32, int8_dir)
    measured = {
        "fp32": round(hierarchical_export.runtime_nits_per_char(fp32, pairs), 4),
        "int8": round(hierarchical_export.runtime_nits_per_char(int8_dir, pairs), 4),
    }
    keep_int8 = measured["int8"] <= measured["fp32"] * (1 + INT8_TOLERANCE)
    manifest, int8_manifest = (
        with_metrics(m, runtime_nits_per_char={**measured, "pairs": what})
        for m in (manifest, int8_manifest)
    )
    shutil.rmtree(fp32 if keep_int8 else int8_dir)
    verdict = (
        "int8 ships (GRU weights, most of the model, stay float32, so it is only a little smaller)."
        if keep_int8
        else f"int8 is more than {INT8_TOLERANCE:.0%} worse, so fp32 ships."
    )
    section = (
        f"## Precision\n\nTeacher-forced nits/char through the runtime on {len(pairs)} {what} "
        f"pairs: fp32 {measured['fp32']}, int8 {measured['int8']} (dynamic int8 MatMuls; GRU "
        f"nodes stay float32): {verdict} Greedy decoding through the int8 graphs against PyTorch: "
        f"{int8_manifest.parity.greedy.identical} of "
        f"{int8_manifest.parity.greedy.compared} sentences identical.\n\n"
    )
    return section, [(int8_dir, int8_manifest)] if keep_int8 else [(fp32, manifest)]


def _finish_bundle(out: Path, manifest: Manifest, readme: str, results: dict, runs: Path) -> None:
    comparison_plot(results, out / "sentence_encoders.png")
    for kind in results:
        shutil.copy(comparison_run(runs, kind) / common.LOSS_PNG, out / f"loss-{kind}.png")
    shutil.copy(runs / f"lm-{manifest.kind}" / common.LOSS_PNG, out / "loss-shipped.png")
    (out / "README.md").write_text(readme)
    seal(out, manifest)
