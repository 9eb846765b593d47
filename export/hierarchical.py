"""Export seed 003's hierarchical character-level model (modeling/hierarchical.py) to an ONNX bundle
with manifest task "hierarchical-lm" (docs/bundle.md, "hierarchical-lm bundles").

Graphs (torch.onnx TorchScript exporter, opset 17, every batch / length axis dynamic):
- `word_encoder`: chars [N, C] int64 → word_vectors [N, W]
- `sentence_encoder`: word_vectors [B, T, W], mask [B, T] bool → sentence_vectors [B, L, V]
- `sentence_decoder` (next sentence) and, when an autoencoder run is given, `autoencoder_decoder`
  (reconstruction, seed 003 §4.3): one word step. word_vector [B, W], sentence_vectors [B, L, V],
  state, position [B] int64 (Transformer only) → conditioning [B, P], new_state. The state is
  [L, B, H] for GRU layers and the growing array [L, B, t, D] for SARAh / Transformer layers;
  `<role>_initial_state.npy` holds each decoder's state before the first word (batch of one;
  learned for SARAh and Transformer, so the autoencoder's differs).
- `word_decoder`: one character step. previous_char [B] int64, hidden [B, P], conditioning [B, P]
  → logits [B, chars], new_hidden [B, P].

Checks written to the manifest's `parity`: every graph against PyTorch at several batch sizes and
lengths (max |Δ| per graph; this is also the test that no batch or state length was baked in), the
GRU nodes' `linear_before_reset` = 1 (PyTorch's GRU formula; ONNX's default 0 is a different
cell), and greedy next-sentence and reconstruction decoding through the runtime against the
PyTorch loop (`modeling.hierarchical.decode`): characters identical, max |Δlogit| recorded.
An export whose graphs differ from PyTorch by more than PARITY_TOLERANCE raises ParityError.

Does not cover: training (train/hierarchical/recipes.py), generation (runtime/hierarchical.py).
"""

from __future__ import annotations

import dataclasses
import shutil
import warnings
from pathlib import Path

import numpy as np
import onnx
import torch

from convert.manifest import seal
from export.exporter import ParityError
from modeling import hierarchical as model_definition
from runtime import hierarchical_text
from runtime.manifest import Graph, Manifest
from runtime.sessions import DEVICE_PROVIDERS, create_session

TASK = "hierarchical-lm"
OPSET = 17
PARITY_SENTENCES = (
    "In the beginning, God created the heavens and the earth.",
    "Jesus wept.",
    "Praise Yahweh, all you nations!",
    "The Lord is my shepherd; I shall not lack.",
)
PARITY_TOLERANCE = 1e-3  # largest |Δ| accepted between a graph and PyTorch (float32)


def check_graph_parity(diffs: dict[str, float]) -> None:
    """Raise export.ParityError (the exporter's) when a graph's max |Δ| (`graph_parity`)
    exceeds PARITY_TOLERANCE."""
    over = {role: diff for role, diff in diffs.items() if diff > PARITY_TOLERANCE}
    if over:
        raise ParityError(
            f"graphs differ from PyTorch by more than {PARITY_TOLERANCE}: "
            + ", ".join(f"{role} {diff:.3g}" for role, diff in over.items())
        )


class _WordEncoder(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, chars):
        return self.model.word_encoder(chars)


class _SentenceEncoder(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, word_vectors, mask):
        return self.model.sentence_encoder(word_vectors, mask)


class _DecoderStep(torch.nn.Module):
    def __init__(self, decoder):
        super().__init__()
        self.decoder = decoder

    def forward(self, word_vector, sentence_vectors, state, position):
        return self.decoder.step(word_vector, sentence_vectors, state, position)


class _WordDecoderStep(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, previous_char, hidden, conditioning):
        return self.model.word_decoder.step(previous_char, hidden, conditioning)


def _export(module, args, path: Path, inputs, outputs, axes) -> None:
    module.eval()  # the exporter restores the wrapper's mode afterwards, recursively
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module,
            args,
            str(path),
            input_names=inputs,
            output_names=outputs,
            dynamic_axes=axes,
            opset_version=OPSET,
            dynamo=False,
        )


def state_axes(kind: str) -> dict[int, str]:
    return {1: "batch"} if kind == "gru" else {1: "batch", 2: "words"}


def export_graphs(
    model: model_definition.HierarchicalLM, out: Path, autoencoder=None
) -> dict[str, str]:
    """Write the graphs and initial_state.npy into `out`; return {role: file}."""
    config = model.config
    batch, length = 2, 3
    chars = torch.randint(
        len(hierarchical_text.SPECIALS), config.n_chars, (batch, config.word_chars)
    )
    _export(
        _WordEncoder(model),
        (chars,),
        out / "word_encoder.onnx",
        ["chars"],
        ["word_vectors"],
        {"chars": {0: "words"}, "word_vectors": {0: "words"}},
    )
    vectors = torch.randn(batch, length, config.word_dim)
    mask = torch.ones(batch, length, dtype=torch.bool)
    _export(
        _SentenceEncoder(model),
        (vectors, mask),
        out / "sentence_encoder.onnx",
        ["word_vectors", "mask"],
        ["sentence_vectors"],
        {
            "word_vectors": {0: "batch", 1: "words"},
            "mask": {0: "batch", 1: "words"},
            "sentence_vectors": {0: "batch"},
        },
    )
    graphs = {"word_encoder": "word_encoder.onnx", "sentence_encoder": "sentence_encoder.onnx"}
    decoders = {"sentence_decoder": model}
    if autoencoder is not None:
        decoders["autoencoder_decoder"] = autoencoder
    axes = state_axes(config.kind)
    for role, source in decoders.items():
        state = source.sentence_decoder.initial_state(batch, vectors)
        if config.kind != "gru":
            state = torch.cat([state, torch.randn_like(state)], 2)  # a state with history
        _export(
            _DecoderStep(source.sentence_decoder),
            (
                vectors[:, 0],
                torch.randn(batch, config.layers, config.value_dim),
                state,
                torch.ones(batch, dtype=torch.long),
            ),
            out / f"{role}.onnx",
            ["word_vector", "sentence_vectors", "state", "position"],
            ["conditioning", "new_state"],
            {
                "word_vector": {0: "batch"},
                "sentence_vectors": {0: "batch"},
                "state": axes,
                "position": {0: "batch"},
                "conditioning": {0: "batch"},
                "new_state": axes,
            },
        )
        graphs[role] = f"{role}.onnx"
    _export(
        _WordDecoderStep(model),
        (
            chars[:, 0],
            torch.randn(batch, config.partial_dim),
            torch.randn(batch, config.partial_dim),
        ),
        out / "word_decoder.onnx",
        ["previous_char", "hidden", "conditioning"],
        ["logits", "new_hidden"],
        {
            "previous_char": {0: "batch"},
            "hidden": {0: "batch"},
            "conditioning": {0: "batch"},
            "logits": {0: "batch"},
            "new_hidden": {0: "batch"},
        },
    )
    graphs["word_decoder"] = "word_decoder.onnx"
    for role, source in decoders.items():
        initial = source.sentence_decoder.initial_state(1, vectors).detach().numpy()
        np.save(out / f"{role}_initial_state.npy", initial.astype(np.float32))
    return graphs


def gru_linear_before_reset(path: Path) -> list[int]:
    """`linear_before_reset` of every GRU node of a graph (PyTorch's cell needs 1)."""
    graph = onnx.load(str(path)).graph
    values = []
    for node in graph.node:
        if node.op_type == "GRU":
            attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
            values.append(int(attrs.get("linear_before_reset", 0)))
    return values


def _run(session, feeds):
    names = {i.name for i in session.get_inputs()}
    return session.run(None, {k: v for k, v in feeds.items() if k in names})


@torch.no_grad()
def graph_parity(model, out: Path, graphs: dict[str, str], decoders: dict) -> dict:
    """max |Δ| of each graph against PyTorch over batch sizes 1, 3, 7 and lengths 1, 4, 9."""
    config = model.config
    sessions = {
        role: create_session(out / f, DEVICE_PROVIDERS["cpu"]) for role, f in graphs.items()
    }
    generator = torch.Generator().manual_seed(0)
    worst = {role: 0.0 for role in graphs}
    for batch, length in ((1, 1), (3, 4), (7, 9)):
        chars = torch.randint(
            len(hierarchical_text.SPECIALS),
            config.n_chars,
            (batch, config.word_chars),
            generator=generator,
        )
        got = _run(sessions["word_encoder"], {"chars": chars.numpy()})[0]
        worst["word_encoder"] = max(worst["word_encoder"], _diff(got, model.word_encoder(chars)))
        words = torch.randn(batch, length, config.word_dim, generator=generator)
        mask = torch.ones(batch, length, dtype=torch.bool)
        mask[0, length // 2 + 1 :] = False
        got = _run(
            sessions["sentence_encoder"], {"word_vectors": words.numpy(), "mask": mask.numpy()}
        )[0]
        worst["sentence_encoder"] = max(
            worst["sentence_encoder"], _diff(got, model.sentence_encoder(words, mask))
        )
        sentence = torch.randn(batch, config.layers, config.value_dim, generator=generator)
        for role, source in decoders.items():
            state = source.sentence_decoder.initial_state(batch, words)
            for position in range(length):
                feeds = {
                    "word_vector": words[:, position].numpy(),
                    "sentence_vectors": sentence.numpy(),
                    "state": state.numpy(),
                    "position": np.full(batch, position, dtype=np.int64),
                }
                got_out, got_state = _run(sessions[role], feeds)
                want, state = source.sentence_decoder.step(
                    words[:, position], sentence, state, torch.full((batch,), position)
                )
                worst[role] = max(worst[role], _diff(got_out, want), _diff(got_state, state))
        hidden = torch.zeros(batch, config.partial_dim)
        conditioning = torch.randn(batch, config.partial_dim, generator=generator)
        for position in range(length):
            feeds = {
                "previous_char": chars[:, position].numpy(),
                "hidden": hidden.numpy(),
                "conditioning": conditioning.numpy(),
            }
            got_logits, got_hidden = _run(sessions["word_decoder"], feeds)
            logits, hidden = model.word_decoder.step(chars[:, position], hidden, conditioning)
            worst["word_decoder"] = max(
                worst["word_decoder"], _diff(got_logits, logits), _diff(got_hidden, hidden)
            )
    return {role: float(f"{value:.3g}") for role, value in worst.items()}


def _diff(got: np.ndarray, want: torch.Tensor) -> float:
    return float(np.abs(got - want.numpy()).max())


def greedy_parity(bundle: Path, model, autoencoder) -> dict:
    """Greedy decoding through the runtime vs the PyTorch loop on PARITY_SENTENCES."""
    from runtime.hierarchical import HierarchicalGenerator

    generator = HierarchicalGenerator.open(bundle)
    vocab = hierarchical_text.CharVocab(model.config.charset)
    report = {"sentences": len(PARITY_SENTENCES), "identical": 0, "max_abs_logit_diff": 0.0}
    for role, reference in (("sentence_decoder", model), ("autoencoder_decoder", autoencoder)):
        if reference is None:
            continue
        ours = generator.decode_batch(list(PARITY_SENTENCES), role=role, keep_logits=True)
        theirs = model_definition.decode(reference, vocab, list(PARITY_SENTENCES), keep_logits=True)
        for a, b in zip(ours, theirs):
            report["identical"] += int(a.text == b["text"])
            if a.text == b["text"]:
                diff = np.abs(np.stack(a.logits) - np.stack(b["logits"])).max()
                report["max_abs_logit_diff"] = max(report["max_abs_logit_diff"], float(diff))
        report.setdefault("decoders", []).append(role)
    report["compared"] = len(PARITY_SENTENCES) * len(report["decoders"])
    report["max_abs_logit_diff"] = float(f"{report['max_abs_logit_diff']:.3g}")
    return report


def export_bundle(
    run: Path, out: Path, name: str, autoencoder_run: Path | None = None, card: dict | None = None
) -> Manifest:
    """Export the run (and its autoencoder) into bundle directory `out`; return the manifest.

    `card` adds `description`, `metrics`, `training_data`, `license` and `readme` (the model
    card's Markdown, written to README.md)."""
    model = model_definition.load_run(run)
    autoencoder = model_definition.load_run(autoencoder_run) if autoencoder_run else None
    if autoencoder is not None:
        shared = [k for k in model.state_dict() if not k.startswith("sentence_decoder.")]
        changed = [
            k for k in shared if not torch.equal(model.state_dict()[k], autoencoder.state_dict()[k])
        ]
        if changed:
            raise ValueError(f"the autoencoder changed frozen weights: {changed[:3]}")
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    graphs = export_graphs(model, out, autoencoder)
    decoders = {"sentence_decoder": model}
    if autoencoder is not None:
        decoders["autoencoder_decoder"] = autoencoder
    diffs = graph_parity(model, out, graphs, decoders)
    check_graph_parity(diffs)
    parity = {
        "graphs_max_abs_diff": diffs,
        "gru_linear_before_reset": {
            role: gru_linear_before_reset(out / f)
            for role, f in graphs.items()
            if gru_linear_before_reset(out / f)
        },
    }
    card = card or {}
    config = model.config
    manifest = Manifest(
        name=name,
        task=TASK,
        architecture=f"hierarchical-{config.kind}",
        precision="fp32",
        batch_invariant=False,  # never batched across requests (runtime/hierarchical.py)
        graphs={
            role: Graph(
                file=f,
                inputs=tuple(i.name for i in onnx.load(str(out / f)).graph.input),
                outputs=tuple(o.name for o in onnx.load(str(out / f)).graph.output),
            )
            for role, f in graphs.items()
        },
        initial_states={role: f"{role}_initial_state.npy" for role in decoders},
        kind=config.kind,
        charset=tuple(config.charset),
        specials=tuple(hierarchical_text.SPECIALS),
        word_chars=config.word_chars,
        max_words=hierarchical_text.MAX_WORDS,
        num_layers=config.layers,
        value_size=config.value_dim,
        word_size=config.word_dim,
        partial_size=config.partial_dim,
        vocab_size=config.n_chars,
        generation_defaults={"max_new_tokens": 200, "do_sample": True, "temperature": 0.7},
        parity=parity,
        metrics=card.get("metrics", {}),
        training_data=card.get("training_data", {}),
        license=card.get("license", "Public domain: trained only on public-domain text"),
        export={
            "description": card.get("description", ""),
            "parameters": sum(p.numel() for p in model.parameters()),
            "source": str(run),
            "autoencoder_source": str(autoencoder_run or ""),
        },
    )
    _write(out, manifest, card.get("readme", f"# {name}\n"))
    parity = {**parity, "greedy": greedy_parity(out, model, autoencoder)}
    return _write(
        out, dataclasses.replace(manifest, parity=parity), card.get("readme", f"# {name}\n")
    )


def _write(out: Path, manifest: Manifest, readme: str) -> Manifest:
    (out / "README.md").write_text(readme)
    return seal(out, manifest)


def runtime_nits_per_char(bundle: Path, pairs, role: str = "sentence_decoder") -> float:
    """Teacher-forced nits per character of (source words, target words) pairs through the
    runtime (the training metric, measured on the exported graphs)."""
    from runtime.hierarchical import HierarchicalGenerator

    generator = HierarchicalGenerator.open(bundle)
    total = count = 0
    for source, target in pairs:
        vectors = generator.encode(["".join(source)])
        nits, chars = generator.teacher_forced_nits(target, vectors, role)
        total, count = total + nits, count + chars
    return total / count


def quantize_bundle(source: Path, out: Path) -> Manifest:
    """An int8 copy of bundle `source` in `out` (convert.quantize's dynamic int8 on every graph's
    MatMuls; GRU nodes stay float32); returns its manifest. `parity.greedy` is measured again on
    the int8 graphs against PyTorch (fp32's is kept as `parity.fp32_greedy`); the per-graph
    diffs are the fp32 export's."""
    from convert.quantize import quantize_graph

    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(source, out)
    fp32 = Manifest.read(source / "manifest.json")
    reports = {}
    for role, graph in fp32.graphs.items():
        reports[role] = quantize_graph(source / graph.file, out / graph.file, "int8", False)
    quantization = {role: r["ops"] for role, r in reports.items()}
    export = dataclasses.replace(fp32.export, quantization=quantization)
    model = model_definition.load_run(Path(export.source))
    autoencoder = (
        model_definition.load_run(Path(export.autoencoder_source))
        if export.autoencoder_source
        else None
    )
    parity = dataclasses.replace(fp32.parity, fp32_greedy=fp32.parity.greedy)
    manifest = dataclasses.replace(fp32, precision="int8", export=export, parity=parity)
    readme = (source / "README.md").read_text()
    _write(out, manifest, readme)
    parity = dataclasses.replace(parity, greedy=greedy_parity(out, model, autoencoder))
    return _write(out, dataclasses.replace(manifest, parity=parity), readme)
