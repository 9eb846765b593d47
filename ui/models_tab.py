"""The Models tab: each model's card, key facts and parity report, and a benchmark summary.

Model cards are the bundles' README.md (their images inlined by the registry); facts and parity
come from manifest.json; the benchmark summary is computed from bench/results/{decode,seq2seq,
sampling,quality}.json: our speed against each peer and quantization quality. Endpoints:
`/model_info` → (card, facts, parity) and `/list_models` → every model with what it is for.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import gradio as gr

from runtime.manifest import Manifest

from . import checks, widgets
from .expectations import adapter_base
from .registry import languages
from .safe_text import literal

NO_MODELS = (
    "**No models found.** Put model bundles under `models/` (one folder per model, or one per "
    "precision: `models/NAME/int8/manifest.json`) or start with `python app.py --models DIR`. "
    "`scriptorium export CHECKPOINT OUT_DIR` writes a bundle; docs/bundle.md describes it."
)
FACT_HEADERS = ["property", "value"]


def facts(manifest: Manifest) -> list[list]:
    """Key facts of a model as table rows."""
    parameters = manifest.export.get("parameters")
    size = sum(entry.size for entry in manifest.files.values())
    pair = languages(manifest)
    rows = [
        ["name", manifest.name],
        ["task", manifest.task],
        ["architecture", manifest.architecture or "?"],
        ["precision", manifest.precision or "?"],
        ["parameters", f"{parameters:,}" if parameters else "?"],
        ["bundle size", f"{size / 1e6:.1f} MB" if size else "?"],
        ["context length", context(manifest)],
        ["vocabulary", manifest.vocab_size or "?"],
        [
            "controls",
            ", ".join(
                f"{name} ({len(spec.get('values', {}))} values)"
                for name, spec in manifest.controls.items()
            )
            or "none",
        ],
        ["languages", f"{pair[0]} → {pair[1]}" if pair else "not stated"],
        ["input embeddings", manifest.embeddings or "not shipped"],
        ["licence", manifest.license or "not stated"],
    ]
    return [[key, str(value)] for key, value in rows]


def context(manifest: Manifest) -> str:
    """How much text the model reads at once, as its manifest states it."""
    if manifest.task == "word-vectors":
        return "none (one vector per word)"
    if manifest.task == "hierarchical-lm" and manifest.max_words:
        return f"{manifest.max_words} words of at most {manifest.word_chars} characters"
    length = manifest.context_length
    return f"{length} tokens" if length else "not stated"


def default_model(registry) -> str | None:
    """The model the tab opens on: the first chat model that is no adapter (the flagship, which
    the page opens on), else the first int8 one, as every other tab defaults to int8."""
    chat = [n for n in registry.chat_models() if not adapter_base(registry.manifest(n))]
    int8 = [name for name in registry.names if registry.manifest(name).precision == "int8"]
    return (chat or int8 or registry.names or [None])[0]


def model_list(registry) -> dict:
    """{name: {task, precision, controls, languages, embeddings, used_by}} for every model."""
    kinds = {
        "generate": registry.generators(),
        "rewrite": registry.rewriters(),
        "translate": registry.translators(),
        "embeddings": registry.with_embeddings() + registry.word_vector_sets(),
        "masked-lm": registry.masked_lms(),
        "paraphrase": registry.paraphrasers(),
    }
    out = {}
    for name in registry.names:
        manifest = registry.manifest(name)
        pair = languages(manifest)
        out[name] = {
            "task": manifest.task,
            "precision": manifest.precision,
            "controls": {c: list(spec["values"]) for c, spec in registry.controls_of(name).items()},
            "languages": list(pair) if pair else None,
            "embeddings": bool(manifest.embeddings),
            "tabs": [kind for kind, names in kinds.items() if name in names],
        }
    return out


OURS = "scriptorium"
CEILING = "matmuls only"  # decode.json's bound (the graph's matmuls alone), not a peer
BENCHMARKS_DOC = "docs/BENCHMARKS.md"


def _read(results_dir: Path, name: str) -> dict | None:
    try:
        result = json.loads((Path(results_dir) / name).read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return result if isinstance(result, dict) else None


def speed_rows(result: dict) -> list[list[str]]:
    """[workload, peer, peer tok/s, ours tok/s, speed-up] for every peer and workload of a
    decode.json / seq2seq.json `tok_per_s` ({"engine/precision": {workload: tok/s}}); ours is
    scriptorium at the peer's precision, or at fp32 if it has no such precision.

    >>> speeds = {"hf/fp32": {"greedy": 20.0}, "scriptorium/fp32": {"greedy": 50.0}}
    >>> speed_rows({"tok_per_s": speeds})
    [['greedy', 'hf fp32', '20.0', '50.0', '2.50×']]
    """
    speeds = result.get("tok_per_s") or {}
    ours = {key.split("/")[1]: row for key, row in speeds.items() if key.split("/")[0] == OURS}
    rows = []
    for key, peer in speeds.items():
        engine, precision = key.split("/") if "/" in key else (key, "fp32")
        if engine in (OURS, CEILING):
            continue
        mine = ours.get(precision) or ours.get("fp32") or {}
        for workload, value in peer.items():
            if workload in mine and value:
                rows.append(
                    [
                        workload,
                        f"{engine} {precision}",
                        f"{value:.1f}",
                        f"{mine[workload]:.1f}",
                        f"{mine[workload] / value:.2f}×",
                    ]
                )
    return rows


def sampling_rows(result: dict) -> list[list[str]]:
    """[peer, cases, median speed-up, range] of sampling.json: its time per step over ours."""
    ratios: dict[str, list[float]] = {}
    for row in result.get("results") or []:
        times = row.get("us") or {}
        if not times.get(OURS):
            continue
        for peer, value in times.items():
            if peer != OURS and value:
                ratios.setdefault(peer, []).append(value / times[OURS])
    return [
        [
            peer,
            str(len(values)),
            f"{statistics.median(values):.1f}×",
            f"{min(values):.1f}× – {max(values):.1f}×",
        ]
        for peer, values in ratios.items()
    ]


def quality_rows(result: dict) -> list[list[str]]:
    """[precision, perplexity, change vs fp32] of quality.json."""
    perplexity, change = result.get("perplexity") or {}, result.get("change_pct") or {}
    return [
        [precision, f"{value:.2f}", f"{change.get(precision, 0.0):+.2f}%"]
        for precision, value in perplexity.items()
    ]


def _table(headers: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def benchmark_summary(results_dir: Path) -> str:
    """A short Markdown summary of bench/results: our decoding speed against each peer
    (decode.json, seq2seq.json), the sampling kernel against each peer (sampling.json) and
    what quantization does to perplexity (quality.json); the full tables are in BENCHMARKS_DOC.
    """
    parts = []
    titles = {"decode.json": "causal LM", "seq2seq.json": "seq2seq"}
    speed = []
    for name, title in titles.items():
        result = _read(results_dir, name)
        if result:
            speed += [[title, *row] for row in speed_rows(result)]
    if speed:
        headers = ["model", "workload", "peer", "peer tok/s", "scriptorium tok/s", "speed-up"]
        parts.append(
            "**Decoding speed** (tokens/s, higher is better; scriptorium at the peer's "
            "precision)\n\n" + _table(headers, speed)
        )
    sampling = _read(results_dir, "sampling.json")
    if sampling and sampling_rows(sampling):
        headers = ["peer", "cases", "median speed-up", "range"]
        parts.append(
            "**Sampling kernel** (one filter + draw step; the peer's time over ours)\n\n"
            + _table(headers, sampling_rows(sampling))
        )
    quality = _read(results_dir, "quality.json")
    if quality and quality_rows(quality):
        split = quality.get("split", "held-out")
        parts.append(
            f"**Quantization quality** (perplexity on the {split} books, lower is better)\n\n"
            + _table(["precision", "perplexity", "change vs fp32"], quality_rows(quality))
        )
    if not parts:
        return "No benchmark results yet: run `scriptorium bench …` to write bench/results/*.json."
    parts.append(
        f"Measured on a shared 2-core host. Every table, the setup and the notes: "
        f"`{BENCHMARKS_DOC}` in the repository."
    )
    return "\n\n".join(parts)


def problems_markdown(problems: dict[str, str]) -> str:
    """The files the app could not use ({name: why}) as a Markdown list, "" when there are none.

    Each line is shown as text (`safe_text.literal`): a reason may quote a file's content.

    >>> print(problems_markdown({"m": "`task` must be one of …"}))
    **Files the app could not use** (everything else works):
    - <code>m</code>\\: <code>task</code> must be one of …
    """
    if not problems:
        return ""
    rows = "\n".join(f"- {literal(f'`{name}`: {why}')}" for name, why in problems.items())
    return f"**Files the app could not use** (everything else works):\n{rows}"


def build(
    registry, results_dir: Path, problems: dict[str, str] | None = None, gguf: str | None = None
) -> None:
    """The tab; `problems`: files other than models that the app could not use ({name: why}),
    listed with the registry's."""
    names = registry.names
    with gr.Tab("Models", id="models") as tab:
        listed = problems_markdown({**registry.problems, **(problems or {})})
        if listed:
            gr.Markdown(listed, elem_classes="notice", elem_id="models-problems")
        model = widgets.model_picker(names, value=default_model(registry))
        with gr.Row():
            with gr.Column(scale=3):
                # sent when the tab opens, not with the page (a card weighs up to 190 KB)
                card = gr.Markdown("" if names else NO_MODELS)
            with gr.Column(scale=2):
                table = gr.Dataframe(
                    facts(registry.manifest(model.value)) if names else None,
                    headers=FACT_HEADERS,
                    label="Facts",
                    interactive=False,
                    wrap=True,  # a long licence or controls line shows in full
                    column_widths=["30%", "70%"],
                )
                parity = gr.JSON(
                    registry.manifest(model.value).parity if names else None,
                    label="Parity report (ONNX vs PyTorch)",
                )
        if gguf:  # which GGUF files convert, where the importer is installed
            gr.Markdown(f"GGUF files load too (`--models FILE.gguf`): {gguf}.")
        gr.Markdown("### Benchmarks")
        gr.Markdown(benchmark_summary(results_dir), elem_id="benchmark-summary")

        @checks.shown_to_user
        def model_info(model):
            """The model card (Markdown), facts (table) and parity report (JSON)."""
            manifest = registry.manifest(model)
            return registry.card(model), facts(manifest), manifest.parity

        def list_models() -> dict:
            """Every installed model: task, precision, controls, languages, tabs it serves."""
            return model_list(registry)

        model.change(model_info, model, [card, table, parity], api_name="model_info")
        if names:
            tab.select(registry.card, model, card, queue=False, api_visibility="private")
        gr.api(list_models, api_name="list_models")
