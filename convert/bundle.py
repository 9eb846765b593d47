"""The lean Llama bundle that both torch-free importers write: convert/gguf.py (a GGUF file)
and convert/hf_checkpoint.py (a Hugging Face Llama / Qwen2 checkpoint).

Covers what the two share: preparing the output directory, the torch-free parity report (the
bundle's graph against an fp32 graph of the same weights and against its own full-sequence pass,
on a few prompts: max |Δlogit|, teacher-forced top-1 agreement, greedy continuations), the
manifest's common fields (`llama_manifest`: shape, graph, `batch_invariant` read from the graph
itself), the model card, sealing the bundle, and the lines the CLI prints. It does not read GGUF
files or checkpoints, or build graphs (convert/graph.py does).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx

from runtime.manifest import Manifest, Parity

from .gguf_read import GGUFModel
from .manifest import card_code, card_text, graph_entry, seal
from .quantize import batch_invariant

PARITY_PROMPTS = [
    "The capital of France is",
    "In the beginning God created",
    "def fibonacci(n):",
    "Numbers: 1, 2, 3, 4,",
]
PARITY_NEW_TOKENS = 16
BUNDLE_FILES = (
    "manifest.json",
    "model.onnx",
    "model.onnx.data",
    "model_lora.onnx",
    "tokenizer.json",
    "README.md",
)


def prepare_out_dir(out_dir: Path) -> None:
    """Create `out_dir`, or empty it when it holds only the files of a bundle of this kind."""
    if out_dir.exists():
        if not out_dir.is_dir():
            raise ValueError(f"`out_dir` must be a directory, got the file {out_dir}")
        existing = list(out_dir.iterdir())
        if any(path.name not in BUNDLE_FILES for path in existing):
            raise ValueError(
                f"`out_dir` must be new, empty or hold only bundle files {list(BUNDLE_FILES)}, "
                f"got {out_dir}"
            )
        for path in existing:
            path.unlink()
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError) as error:  # a file on the way
        raise ValueError(
            f"`out_dir` must be a directory we can create, got {out_dir}: {error.strerror}"
        ) from None


def parity_session(path: Path, threads: int = 2):
    """A plain CPU session of the graph at `path`, for the parity report."""
    from runtime.sessions import DEVICE_PROVIDERS, create_session

    return create_session(path, DEVICE_PROVIDERS["cpu"], threads=threads)


def _runtime_model(session, model: GGUFModel):
    from runtime.manifest import Graph
    from runtime.models import SHARED_BUFFER, CausalLM

    manifest = Manifest(
        name="parity",
        task="causal-lm",
        batch_invariant=True,
        graphs={"decoder": Graph(file="model.onnx", kv_cache=SHARED_BUFFER)},
        num_layers=model.layers,
        num_heads=model.kv_heads,
        head_size=model.head_size,
        vocab_size=model.vocab,
        context_length=model.context,
    )
    return CausalLM(session, manifest)


def full_pass_feeds(model: GGUFModel, ids: list[int]) -> dict[str, np.ndarray]:
    """The graph's inputs for one sequence in a single call with an empty cache, every
    position's logits kept."""
    steps = len(ids)
    feeds = {
        "input_ids": np.array([ids], dtype=np.int64),  # (1, T)
        "attention_mask": np.ones((1, steps), dtype=np.int64),
        "seqlens_k": np.array([steps - 1], dtype=np.int32),
        "total_sequence_length": np.array(steps, dtype=np.int32),
        "logits_to_keep": np.array(0, dtype=np.int64),
    }
    empty = np.zeros((1, model.kv_heads, 0, model.head_size), dtype=np.float32)
    for i in range(model.layers):
        feeds[f"past_key_values.{i}.key"] = feeds[f"past_key_values.{i}.value"] = empty
    return feeds


def full_logits(session, model: GGUFModel, ids: list[int]) -> np.ndarray:
    """Logits (T, V) of one sequence in a single call with an empty cache."""
    return session.run(["logits"], full_pass_feeds(model, ids))[0][0]


def greedy(session, model: GGUFModel, ids: list[int], new_tokens: int) -> tuple[list, np.ndarray]:
    """Greedy continuation through the runtime's cached decoding; and each step's logits (n, V)."""
    lm = _runtime_model(session, model)
    logits, state = lm.start(np.array([ids], dtype=np.int64), np.ones((1, len(ids)), np.int64))
    tokens, steps = [], []
    for _ in range(new_tokens):
        steps.append(logits[0])
        tokens.append(int(logits[0].argmax()))
        logits, state = lm.step(np.array([tokens[-1]]), state)
    return tokens, np.stack(steps)


def reference_greedy(model, ids: list[int], new_tokens: int) -> list[int]:
    """A transformers causal LM's greedy continuation of `ids` by `greedy`'s rule: the argmax at
    every step, end-of-sequence neither stopping nor banned (`generate`'s `min_new_tokens` would
    ban it, and compare unlike with like). torch is imported here only: the caller has it."""
    import torch

    tokens, past, step = [], None, torch.tensor([ids])
    with torch.no_grad():
        for _ in range(new_tokens):
            out = model(step, past_key_values=past, use_cache=True)
            past = out.past_key_values
            tokens.append(int(out.logits[0, -1].argmax()))
            step = torch.tensor([[tokens[-1]]])  # (1, 1)
    return tokens


def parity_report(graph: Path, reference: Path | None, model: GGUFModel, tokenizer) -> dict:
    """The bundle graph against `reference` (an fp32 graph of the same weights; None for an fp32
    bundle) and its cached decoding against its own full-sequence pass."""
    session = parity_session(graph)
    other = parity_session(reference) if reference is not None else None
    diffs, agree, total, cached, identical, scale = [], 0, 0, [], 0, 0.0
    for prompt in PARITY_PROMPTS:
        ids = tokenizer.encode(prompt).ids
        tokens, step_logits = greedy(session, model, ids, PARITY_NEW_TOKENS)
        sequence = ids + tokens
        ours = full_logits(session, model, sequence)  # (T, V)
        # The cached steps saw the same prefixes as the full pass's last positions.
        cached.append(float(np.abs(ours[len(ids) - 1 : -1] - step_logits).max()))
        scale = max(scale, float(np.abs(ours).max()))
        if other is None:
            continue
        theirs = full_logits(other, model, sequence)
        diffs.append(float(np.abs(ours - theirs).max()))
        agree += int((ours.argmax(-1) == theirs.argmax(-1)).sum())
        total += len(sequence)
        identical += greedy(other, model, ids, PARITY_NEW_TOKENS)[0] == tokens
    report = {
        "prompts": len(PARITY_PROMPTS),
        "new_tokens": PARITY_NEW_TOKENS,
        "max_abs_logit": scale,
        "cached_step_max_abs_diff": max(cached),
    }
    if other is not None:
        report.update(
            reference="an fp32 graph of the same weights, dequantized from the GGUF",
            max_abs_logit_diff=max(diffs),
            top1_agreement=agree / total,
            greedy_identical=f"{identical} / {len(PARITY_PROMPTS)}",
        )
    else:
        report["reference"] = "the graph's own full-sequence pass (fp32 bundle)"
    return report


def llama_manifest(model: GGUFModel, out_dir: Path, **fields) -> Manifest:
    """The manifest of the lean bundle in `out_dir` (model.onnx written) of `model`: the fields
    every such bundle has from the model and its graph, and `fields` (name, precision, special
    tokens, chat, export, …) from the importer."""
    graph = out_dir / "model.onnx"
    return Manifest(
        task="causal-lm",
        architecture=model.architecture,
        graphs={"decoder": graph_entry("model.onnx", graph)},
        # weight-only blocks: whether every row is computed alone is read from the graph
        batch_invariant=batch_invariant(onnx.load(str(graph))),
        num_layers=model.layers,
        num_heads=model.kv_heads,
        head_size=model.head_size,
        hidden_size=model.hidden,
        vocab_size=model.vocab,
        context_length=model.context,
        **fields,
    )


def write_bundle(out_dir: Path, manifest: Manifest, card: str) -> Manifest:
    """Write README.md (`card`), then seal the bundle: manifest.json with every file's checksum."""
    (out_dir / "README.md").write_text(card)
    return seal(out_dir, manifest)


def parity_lines(parity: Parity) -> list[str]:
    """The model card's parity section: the report against the fp32 graph (and transformers')."""
    if not parity:
        return ["Not measured (exported without the parity report)."]
    lines = [
        f"Reference: {parity.reference}; {parity.prompts} prompts, "
        f"{parity.new_tokens} greedy tokens each.",
        "",
        "| | |",
        "|---|---|",
        f"| largest abs logit (scale) | {parity.max_abs_logit:.4g} |",
        f"| cached steps vs full pass, max abs Δlogit | {parity.cached_step_max_abs_diff:.3g} |",
    ]
    if parity.max_abs_logit_diff is not None:
        lines += [
            f"| max abs Δlogit vs reference | {parity.max_abs_logit_diff:.4g} |",
            f"| teacher-forced top-1 agreement | {parity.top1_agreement:.4f} |",
            f"| greedy continuations identical | {parity.greedy_identical} |",
        ]
    theirs = parity.transformers
    if theirs:
        lines += [
            "",
            f"Against {theirs.reference}: max abs Δlogit {theirs.max_abs_logit_diff:.4g} "
            f"(logit scale {theirs.max_abs_logit:.4g}), teacher-forced top-1 agreement "
            f"{theirs.top1_agreement:.4f}, greedy continuations identical "
            f"{theirs.greedy_identical}.",
        ]
    return lines


def model_card(
    manifest: Manifest, origin: str, query_heads: int, weights: list[str], no_chat: str
) -> str:
    """README.md of a lean Llama bundle: `origin` (where it came from), the shape (with the
    model's `query_heads`), the `weights` section's lines, parity, chat (`no_chat` when the
    model has no template) and licence. What came from the file (its name, licence,
    architecture, token strings) is written as text, never as markup (`card_text`,
    `card_code`): a GGUF's metadata is the file author's."""
    lines = [
        f"# {card_text(manifest.name)}",
        "",
        origin,
        "",
        "| | |",
        "|---|---|",
        f"| architecture | {card_text(manifest.architecture)} |",
        f"| layers × KV heads × head size | {manifest.num_layers} × {manifest.num_heads} × "
        f"{manifest.head_size} ({query_heads} query heads) |",
        f"| hidden size | {manifest.hidden_size} |",
        f"| vocabulary | {manifest.vocab_size} |",
        f"| context length | {manifest.context_length} |",
        f"| precision | {manifest.precision} |",
        f"| licence | {card_text(manifest.license) if manifest.license else 'not stated'} |",
        "",
        "## Weights",
        "",
        *weights,
        "",
        "## Parity",
        "",
        *parity_lines(manifest.parity),
        "",
        "## Chat",
        "",
    ]
    chat = manifest.chat
    if chat is not None and chat.template:
        tokens = ", ".join(card_code(token) for token in chat.end_of_turn_tokens)
        lines += [f"End-of-turn tokens: {tokens}."]
    else:
        lines += [no_chat]
    lines += ["", "## Licence", "", card_text(manifest.license) or "Not stated.", ""]
    return "\n".join(lines)


def summary(manifest: Manifest, out_dir: str) -> str:
    """The CLI's lines about a written bundle."""
    size = sum(entry.size for entry in manifest.files.values())
    parity = manifest.parity
    lines = [
        f"wrote {manifest.name} ({manifest.architecture}, {manifest.precision}) to "
        f"{out_dir}: {len(manifest.files)} files, {size / 1e6:.1f} MB",
        f"weights: {manifest.export.quantization_report.summary}",
    ]
    if parity.max_abs_logit_diff is not None:
        lines.append(
            f"vs fp32 graph of the same weights: max |Δlogit| {parity.max_abs_logit_diff:.3g} "
            f"(scale {parity.max_abs_logit:.3g}), top-1 agreement "
            f"{parity.top1_agreement:.4f}, greedy identical {parity.greedy_identical}"
        )
    if parity:
        lines.append(
            f"cached steps vs full pass: max |Δlogit| {parity.cached_step_max_abs_diff:.3g}"
        )
    theirs = parity.transformers
    if theirs:
        lines.append(
            f"vs transformers: max |Δlogit| {theirs.max_abs_logit_diff:.3g} (scale "
            f"{theirs.max_abs_logit:.3g}), top-1 agreement {theirs.top1_agreement:.4f}, "
            f"greedy identical {theirs.greedy_identical}"
        )
    return "\n".join(lines)
