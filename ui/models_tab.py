"""The Models tab: each model's card, key facts and parity report, and the benchmark tables.

Model cards are the bundles' README.md; facts and parity come from manifest.json; benchmark
tables are the "table" field (Markdown) of every bench/results/*.json. Endpoints:
`/model_info` → (card, facts, parity) and `/list_models` → every model with what it is for.
"""

from __future__ import annotations

import json
from pathlib import Path

import gradio as gr

from . import limits, widgets
from .registry import languages

NO_MODELS = (
    "**No models found.** Put model bundles under `models/` (one folder per model, or one per "
    "precision: `models/NAME/int8/manifest.json`) or start with `python app.py --models DIR`. "
    "`scriptorium export CHECKPOINT OUT_DIR` writes a bundle; docs/bundle.md describes it."
)
FACT_HEADERS = ["property", "value"]


def facts(manifest: dict) -> list[list]:
    """Key facts of a model as table rows."""
    export = manifest.get("export", {})
    size = sum(entry.get("size", 0) for entry in manifest.get("files", {}).values())
    pair = languages(manifest)
    controls = manifest.get("controls") or {}
    rows = [
        ["name", manifest.get("name")],
        ["task", manifest.get("task")],
        ["architecture", manifest.get("architecture", "?")],
        ["precision", manifest.get("precision", "?")],
        ["parameters", f"{export['parameters']:,}" if export.get("parameters") else "?"],
        ["bundle size", f"{size / 1e6:.1f} MB" if size else "?"],
        ["context length", manifest.get("context_length", "?")],
        ["vocabulary", manifest.get("vocab_size", "?")],
        [
            "controls",
            ", ".join(
                f"{name} ({len(spec.get('values', {}))} values)" for name, spec in controls.items()
            )
            or "none",
        ],
        ["languages", f"{pair[0]} → {pair[1]}" if pair else "not stated"],
        ["input embeddings", manifest.get("embeddings") or "not shipped"],
        ["licence", manifest.get("license") or "not stated"],
    ]
    return [[key, str(value)] for key, value in rows]


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
            "task": manifest["task"],
            "precision": manifest.get("precision"),
            "controls": {c: list(spec["values"]) for c, spec in registry.controls_of(name).items()},
            "languages": list(pair) if pair else None,
            "embeddings": bool(manifest.get("embeddings")),
            "tabs": [kind for kind, names in kinds.items() if name in names],
        }
    return out


def _flat(row: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in row.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key} "))
        else:
            out[f"{prefix}{key}"] = value
    return out


def results_table(results: list) -> str | None:
    """A Markdown table of a list of result rows (nested dicts become "outer inner" columns).

    >>> print(results_table([{"setting": "top-k 50", "us": {"ours": 166.2, "peer": 5332.0}}]))
    | setting | us ours | us peer |
    |---|---|---|
    | top-k 50 | 166 | 5,332 |
    """
    rows = [_flat(row) for row in results if isinstance(row, dict)]
    if not rows:
        return None
    columns = list(dict.fromkeys(key for row in rows for key in row))

    def cell(value):
        if isinstance(value, float):
            return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"
        return "" if value is None else str(value)

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(row.get(c)) for c in columns) + " |" for row in rows]
    return "\n".join(lines)


def benchmark_markdown(results_dir: Path) -> str:
    """Every bench/results/*.json under a heading naming it: its "table" (Markdown) if it has
    one, else its "results" rows as a table (with the "unit" it states)."""
    files = sorted(Path(results_dir).glob("*.json")) if Path(results_dir).is_dir() else []
    parts = []
    for path in files:
        try:
            result = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        if not isinstance(result, dict):
            continue
        table = result.get("table")
        if not isinstance(table, str) and isinstance(result.get("results"), list):
            table = results_table(result["results"])
            if table and result.get("unit"):
                table = f"{result['unit']}\n\n{table}"
        if isinstance(table, str):
            parts.append(f"#### {result.get('benchmark', path.stem)} (`{path.name}`)\n\n{table}")
    if not parts:
        return "No benchmark results yet: run `scriptorium bench …` to write bench/results/*.json."
    return "\n\n".join(parts)


def build(registry, results_dir: Path) -> None:
    names = registry.names
    with gr.Tab("Models", id="models"):
        if registry.problems:
            problems = "\n".join(f"- `{name}`: {why}" for name, why in registry.problems.items())
            gr.Markdown(f"**Unreadable model folders:**\n{problems}", elem_classes="notice")
        model = widgets.model_picker(names)
        with gr.Row():
            with gr.Column(scale=3):
                card = gr.Markdown(registry.card(model.value) if names else NO_MODELS)
            with gr.Column(scale=2):
                table = gr.Dataframe(
                    facts(registry.manifest(model.value)) if names else None,
                    headers=FACT_HEADERS,
                    label="Facts",
                    interactive=False,
                )
                parity = gr.JSON(
                    registry.manifest(model.value).get("parity") if names else None,
                    label="Parity report (ONNX vs PyTorch)",
                )
        gr.Markdown("### Benchmarks")
        gr.Markdown(benchmark_markdown(results_dir))

        @limits.shown_to_user
        def model_info(model):
            """The model card (Markdown), facts (table) and parity report (JSON)."""
            manifest = registry.manifest(model)
            return registry.card(model), facts(manifest), manifest.get("parity") or {}

        def list_models() -> dict:
            """Every installed model: task, precision, controls, languages, tabs it serves."""
            return model_list(registry)

        model.change(model_info, model, [card, table, parity], api_name="model_info")
        gr.api(list_models, api_name="list_models")
