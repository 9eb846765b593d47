"""The Models tab: each model's card, key facts and parity report, and a benchmark summary.

Model cards are the bundles' README.md (their images inlined by the registry); facts and parity
come from manifest.json; the benchmark summary (our speed against each peer, the sampling kernel,
quantization quality) is ui/benchmarks.json, which bench/app_summary.py writes from bench/results
(`python -m bench summary`): the app never reads bench/results. Endpoints:
`/model_info` → (card, facts, parity) and `/list_models` → every model with what it is for.
"""

from __future__ import annotations

import json
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
    parameters = manifest.export.parameters
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
                f"{name} ({len(spec.values)} values)" for name, spec in manifest.controls.items()
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
            "controls": {c: list(spec.values) for c, spec in registry.controls_of(name).items()},
            "languages": list(pair) if pair else None,
            "embeddings": bool(manifest.embeddings),
            "tabs": [kind for kind, names in kinds.items() if name in names],
        }
    return out


SUMMARY = Path(__file__).with_name("benchmarks.json")  # written by bench/app_summary.py
BENCHMARKS_DOC = "docs/BENCHMARKS.md"
NO_SUMMARY = (
    "No benchmark results yet: `python -m bench summary` writes them into ui/benchmarks.json from "
    "bench/results."
)


def read_summary(path: Path = SUMMARY) -> dict:
    """The benchmark summary bench/ wrote for the app (bench/app_summary.py); {} when the file is
    missing or unreadable."""
    try:
        summary = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return {}
    return summary if isinstance(summary, dict) else {}


def _table(headers: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def benchmark_summary(summary: dict) -> str:
    """The summary as Markdown: our decoding speed against each peer, the sampling kernel
    against each peer and what quantization does to perplexity; the full tables are in
    BENCHMARKS_DOC.

    >>> speed = [{"model": "seq2seq", "workload": "greedy", "peer": "hf fp32",
    ...           "peer_tok_s": 20.0, "ours_tok_s": 50.0}]
    >>> print(benchmark_summary({"speed": speed}).splitlines()[4])
    | seq2seq | greedy | hf fp32 | 20.0 | 50.0 | 2.50× |
    """
    parts = []
    speed = [
        [
            row["model"],
            row["workload"],
            row["peer"],
            f"{row['peer_tok_s']:.1f}",
            f"{row['ours_tok_s']:.1f}",
            f"{row['ours_tok_s'] / row['peer_tok_s']:.2f}×",
        ]
        for row in summary.get("speed") or []
    ]
    if speed:
        headers = ["model", "workload", "peer", "peer tok/s", "scriptorium tok/s", "speed-up"]
        parts.append(
            "**Decoding speed** (tokens/s, higher is better; scriptorium at the peer's "
            "precision)\n\n" + _table(headers, speed)
        )
    sampling = [
        [
            row["peer"],
            str(row["cases"]),
            f"{row['median']:.1f}×",
            f"{row['low']:.1f}× – {row['high']:.1f}×",
        ]
        for row in summary.get("sampling") or []
    ]
    if sampling:
        headers = ["peer", "cases", "median speed-up", "range"]
        parts.append(
            "**Sampling kernel** (one filter + draw step; the peer's time over ours)\n\n"
            + _table(headers, sampling)
        )
    quality = summary.get("quality") or {}
    perplexity = [
        [row["precision"], f"{row['perplexity']:.2f}", f"{row['change_pct']:+.2f}%"]
        for row in quality.get("rows") or []
    ]
    if perplexity:
        parts.append(
            f"**Quantization quality** (perplexity on the {quality['split']} books, lower is "
            "better)\n\n" + _table(["precision", "perplexity", "change vs fp32"], perplexity)
        )
    if not parts:
        return NO_SUMMARY
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
    registry,
    problems: dict[str, str] | None = None,
    gguf: str | None = None,
    summary: Path = SUMMARY,
) -> None:
    """The tab; `problems`: files other than models that the app could not use ({name: why}),
    listed with the registry's; `summary`: the benchmark summary's file."""
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
                    registry.manifest(model.value).parity.to_json() if names else None,
                    label="Parity report (ONNX vs PyTorch)",
                )
        if gguf:  # which GGUF files convert, where the importer is installed
            gr.Markdown(f"GGUF files load too (`--models FILE.gguf`): {gguf}.")
        gr.Markdown("### Benchmarks")
        gr.Markdown(benchmark_summary(read_summary(summary)), elem_id="benchmark-summary")

        @checks.shown_to_user
        def model_info(model):
            """The model card (Markdown), facts (table) and parity report (JSON)."""
            manifest = registry.manifest(model)
            return registry.card(model), facts(manifest), manifest.parity.to_json()

        def list_models() -> dict:
            """Every installed model: task, precision, controls, languages, tabs it serves."""
            return model_list(registry)

        model.change(model_info, model, [card, table, parity], api_name="model_info")
        if names:
            tab.select(registry.card, model, card, queue=False, api_visibility="private")
        gr.api(list_models, api_name="list_models")
