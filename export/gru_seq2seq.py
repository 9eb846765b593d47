"""Export seed 001's GRU encoder-decoders (modeling/gru_seq2seq.py) to "seq2seq" bundles whose
architecture is "gru" (single context vector) or "gru-attention" (Bahdanau attention), run by
runtime/recurrent.py.

Graphs (torch.onnx TorchScript exporter, opset 17, batch and source length dynamic):
- `encoder` (encoder_model.onnx): input_ids (N, S), attention_mask (N, S) -> hidden (N, H) and
  the decoder's memory: context (N, H_enc), or annotations (N, S, 2 H_enc) and keys (N, S, A).
  Run once per source.
- `decoder` (decoder_step.onnx): one step. input_ids (N,), hidden (N, H), the memory (and
  attention_mask for the attention model) -> logits (N, V), next_hidden (N, H) and, for the
  attention model, attention α (N, S).

int8 is onnxruntime's dynamic quantization (uint8 weights, one scale per tensor, as the other
seq2seq bundles) of every MatMul and Gather with a constant weight: the decoder cell, the
alignment MLP, the readout and the embedding tables; the encoders' ONNX GRU nodes stay float32
(onnxruntime has no quantized GRU). The step graph reads the tied embedding for both its input
lookup and its output layer from one table (`share_output_embedding`), so the bundle holds it
twice (encoder, decoder), not three times.

Parity, written to the manifest: teacher-forced logits and α of the bundle (through
runtime/recurrent.py) against PyTorch on PARITY_SENTENCES, at two batch sizes, and greedy
decoding through the runtime against `RecurrentSeq2Seq.greedy`. An fp32 export whose logits
differ by more than PARITY_TOLERANCE raises ParityError.

Does not cover: training (train/seq2seq/gru.py), decoding (runtime/recurrent.py,
runtime/search.py), evaluation on the test books (train/seq2seq/gru.py).
"""

from __future__ import annotations

import shutil
import tempfile
import warnings
from dataclasses import asdict
from pathlib import Path

import numpy as np
import onnx
import torch
from onnx import helper, numpy_helper

from convert.manifest import seal
from export.exporter import ParityError
from modeling import gru_seq2seq as model_definition
from runtime.manifest import ExportInfo, GenerationDefaults, Graph, Manifest, SpecialTokens
from runtime.recurrent import ATTENTION, SOURCE_MASK, RecurrentSeq2SeqLM
from runtime.sessions import create_session

OPSET = 17
ENCODER_FILE = "encoder_model.onnx"
DECODER_FILE = "decoder_step.onnx"
PRECISIONS = ("fp32", "int8")
CONTEXT_LENGTH = 128  # longest source in tokens (the rewriter's pair filter)
PARITY_SENTENCES = (
    "In the beginning God created the heaven and the earth.",
    "Jesus wept.",
    "And the LORD spake unto Moses, saying, Speak unto the children of Israel.",
    "The LORD is my shepherd; I shall not want.",
)
PARITY_TOLERANCE = 1e-3  # largest |Δlogit| accepted between the fp32 graphs and PyTorch
PARITY_NEW_TOKENS = 40
DESCRIPTIONS = {
    "gru": "GRU encoder-decoder with a single context vector (Cho et al. 2014): the encoder's "
    "final state initialises the decoder and is fed to it at every step",
    "gru-attention": "bidirectional GRU encoder and GRU decoder with Bahdanau additive attention "
    "(Bahdanau et al. 2015): a context vector per target token from the encoder's annotations",
}


class _Encoder(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask):
        hidden, *memory = self.model.encode(input_ids, attention_mask)
        named = zip(self.model.memory_names, memory)
        return hidden, *(value for name, value in named if name != SOURCE_MASK)


class _Step(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, hidden, *memory):
        return self.model.step(input_ids, hidden, *memory)


def graph_names(model) -> dict[str, list[str]]:
    """Input and output names of the two graphs (runtime/recurrent.py reads them)."""
    memory = list(model.memory_names)
    return {
        "encoder_inputs": ["input_ids", SOURCE_MASK],
        "encoder_outputs": ["hidden", *(n for n in memory if n != SOURCE_MASK)],
        "decoder_inputs": ["input_ids", "hidden", *memory],
        "decoder_outputs": [
            "logits",
            "next_hidden",
            *([ATTENTION] if model.config.attention else []),
        ],
    }


def export_graphs(model, out: Path) -> None:
    """Write the float32 encoder and step graphs of `model` into `out`."""
    names = graph_names(model)
    # Wrappers in eval mode: the exporter puts each wrapper back in the mode it found it in,
    # recursively, so a fresh (training-mode) wrapper would switch the model's dropout on.
    encoder, step = _Encoder(model).eval(), _Step(model).eval()
    source = torch.randint(3, model.config.vocab_size, (2, 7))  # (N, S)
    mask = torch.ones_like(source)
    mask[1, 5:] = 0
    with torch.no_grad():
        hidden, *memory = model.encode(source, mask)
    previous = torch.zeros(2, dtype=torch.long)  # (N,)
    axes = {"input_ids": {0: "batch", 1: "source"}, SOURCE_MASK: {0: "batch", 1: "source"}}
    step_axes = {"input_ids": {0: "batch"}, "hidden": {0: "batch"}, "next_hidden": {0: "batch"}}
    step_axes |= {"logits": {0: "batch"}, ATTENTION: {0: "batch", 1: "source"}}
    for name in names["encoder_outputs"][1:] + names["decoder_inputs"][2:]:
        step_axes[name] = {0: "batch", 1: "source"} if name != "context" else {0: "batch"}
    axes["hidden"] = {0: "batch"}
    axes |= {name: step_axes[name] for name in names["encoder_outputs"][1:]}
    with warnings.catch_warnings():
        # The exporter warns that a GRU's batch size might be fixed; parity checks it is not.
        warnings.simplefilter("ignore")
        torch.onnx.export(
            encoder,
            (source, mask),
            str(out / ENCODER_FILE),
            input_names=names["encoder_inputs"],
            output_names=names["encoder_outputs"],
            dynamic_axes=axes,
            opset_version=OPSET,
            dynamo=False,
        )
        torch.onnx.export(
            step,
            (previous, hidden, *memory),
            str(out / DECODER_FILE),
            input_names=names["decoder_inputs"],
            output_names=names["decoder_outputs"],
            dynamic_axes={
                n: step_axes[n] for n in names["decoder_inputs"] + names["decoder_outputs"]
            },
            opset_version=OPSET,
            dynamo=False,
        )
    graph = onnx.load(str(out / DECODER_FILE))
    share_output_embedding(graph, model.embed.weight.detach().numpy())
    onnx.save(graph, str(out / DECODER_FILE))


def share_output_embedding(graph: onnx.ModelProto, embedding: np.ndarray) -> None:
    """Make the step graph's input lookup read the output layer's table E^T (E, V) by columns
    (Gather on axis 1, then a transpose) instead of its own copy of E (V, E), in place.

    The exporter writes the tied table twice, E for the Gather and E^T for the output MatMul;
    quantized, each copy would cost V × E bytes. ValueError when the graph has no such pair."""
    initializers = {init.name: init for init in graph.graph.initializer}

    def holds(name: str, array: np.ndarray) -> bool:
        init = initializers.get(name)
        return (
            init is not None
            and tuple(init.dims) == array.shape
            and np.array_equal(numpy_helper.to_array(init), array)
        )

    lookup = next(
        (n for n in graph.graph.node if n.op_type == "Gather" and holds(n.input[0], embedding)),
        None,
    )
    output = next(
        (n for n in graph.graph.node if n.op_type == "MatMul" and holds(n.input[1], embedding.T)),
        None,
    )
    if lookup is None or output is None:
        raise ValueError(
            "`graph` must hold the tied embedding as a Gather table and an output MatMul weight, "
            "got a graph without that pair"
        )
    columns = lookup.output[0] + "_columns"  # (E, N)
    table = lookup.input[0]
    lookup.input[0] = output.input[1]
    del lookup.attribute[:]
    lookup.attribute.append(helper.make_attribute("axis", 1))
    rows = lookup.output[0]
    lookup.output[0] = columns
    position = list(graph.graph.node).index(lookup)
    graph.graph.node.insert(
        position + 1, helper.make_node("Transpose", [columns], [rows], perm=[1, 0])
    )
    if not any(table in node.input for node in graph.graph.node):
        graph.graph.initializer.remove(initializers[table])


def quantize(source: Path, target: Path) -> dict[str, int]:
    """onnxruntime's dynamic int8 of every MatMul and Gather with a constant weight; returns the
    count of each quantized operator in the result."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    from convert.quantize import INT8_PER_CHANNEL, INT8_WEIGHT_TYPE, QUANTIZED_OPS, gemm_to_matmul
    from convert.quantize import _quiet_quantizer_logs as quiet_quantizer_logs

    graph = onnx.load(str(source))
    gemm_to_matmul(graph)
    with quiet_quantizer_logs():
        quantize_dynamic(
            graph,
            str(target),
            op_types_to_quantize=["MatMul", "Gather"],
            per_channel=INT8_PER_CHANNEL,
            weight_type=QuantType[INT8_WEIGHT_TYPE],
            extra_options={"MatMulConstBOnly": True},
        )
    counts: dict[str, int] = {}
    for node in onnx.load(str(target)).graph.node:
        if node.op_type in QUANTIZED_OPS:
            counts[node.op_type] = counts.get(node.op_type, 0) + 1
    return counts


def _sources(tokenizer, sentences, pad_id: int) -> tuple[np.ndarray, np.ndarray]:
    """Right-padded source ids (N, S) and mask, encoded as the runtime encodes them."""
    encoded = [tokenizer.encode(s, add_special_tokens=True).ids for s in sentences]
    width = max(map(len, encoded))
    ids = np.full((len(encoded), width), pad_id, dtype=np.int64)
    mask = np.zeros((len(encoded), width), dtype=np.int64)
    for row, tokens in enumerate(encoded):
        ids[row, : len(tokens)], mask[row, : len(tokens)] = tokens, 1
    return ids, mask


def runtime_greedy(runner: RecurrentSeq2SeqLM, ids, mask, eos: int, steps: int) -> list[list[int]]:
    """Argmax decoding through runtime/recurrent.py, each row up to and including EOS."""
    logits, state = runner.start(ids, mask)
    outputs: list[list[int]] = [[] for _ in range(len(ids))]
    done = [False] * len(ids)
    for _ in range(steps):
        tokens = logits.argmax(-1)
        for row, token in enumerate(tokens.tolist()):
            if not done[row]:
                outputs[row].append(token)
                done[row] = token == eos
        if all(done):
            break
        logits, state = runner.step(tokens, state)
    return outputs


def check_parity(model, bundle: Path, tokenizer, sentences=PARITY_SENTENCES) -> dict:
    """The bundle's graphs against PyTorch (module docstring); returns the parity report."""
    config = model.config
    runner = RecurrentSeq2SeqLM(
        create_session(bundle / ENCODER_FILE, threads=1),
        create_session(bundle / DECODER_FILE, threads=1),
        config.bos_token_id,
    )
    ids, mask = _sources(tokenizer, sentences, config.pad_token_id)
    reference = model.greedy(torch.from_numpy(ids), torch.from_numpy(mask), PARITY_NEW_TOKENS)
    ours = runtime_greedy(runner, ids, mask, config.eos_token_id, PARITY_NEW_TOKENS)
    width = max(map(len, reference))
    decoder_ids = np.full((len(ids), width), config.pad_token_id, dtype=np.int64)  # (N, T)
    for row, tokens in enumerate(reference):
        decoder_ids[row, : len(tokens)] = [config.bos_token_id, *tokens[:-1]]
    logit_diff, alpha_diff = 0.0, 0.0
    for rows in (slice(0, len(ids)), slice(1, 2)):  # the batch, and one row alone
        with torch.no_grad():
            expected = model(
                torch.from_numpy(ids[rows]),
                torch.from_numpy(mask[rows]),
                torch.from_numpy(decoder_ids[rows]),
            )
        logits = runner.all_logits(ids[rows], mask[rows], decoder_ids[rows])
        logit_diff = max(logit_diff, float(np.abs(logits - expected.logits.numpy()).max()))
        if config.attention:
            alpha = runner.cross_attention(ids[rows], mask[rows], decoder_ids[rows])
            alpha_diff = max(alpha_diff, float(np.abs(alpha - expected.attention.numpy()).max()))
    agreement = [
        sum(a == b for a, b in zip(r, o)) / max(len(r), len(o)) for r, o in zip(reference, ours)
    ]
    report = {
        "reference": f"PyTorch {torch.__version__} float32 (modeling/gru_seq2seq.py)",
        "sentences": len(sentences),
        "logits_max_abs_diff": logit_diff,
        "greedy": {
            "new_tokens": PARITY_NEW_TOKENS,
            "identical_sequences": sum(r == o for r, o in zip(reference, ours)),
            "token_agreement": float(np.mean(agreement)),
        },
    }
    if config.attention:
        report["attention_max_abs_diff"] = alpha_diff
    return report


def export_bundle(
    run_dir: Path,
    out_dir: Path,
    precision: str = "int8",
    name: str | None = None,
    training_data: dict | None = None,
    metrics: dict | None = None,
):
    """The bundle of the finished run `run_dir` (train/seq2seq/gru.py) in `out_dir`, at
    `precision` ("fp32" or "int8"); returns its sealed manifest (convert.manifest.seal's)."""
    from tokenizers import Tokenizer

    if precision not in PRECISIONS:
        raise ValueError(f"`precision` must be one of {PRECISIONS}, got {precision!r}")
    run_dir, out_dir = Path(run_dir), Path(out_dir)
    model = model_definition.load(run_dir)
    config = model.config
    if out_dir.exists():
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True)
    quantization = {}
    with tempfile.TemporaryDirectory() as tmp:
        export_graphs(model, Path(tmp))
        for file in (ENCODER_FILE, DECODER_FILE):
            if precision == "int8":
                quantization[file] = quantize(Path(tmp) / file, out_dir / file)
            else:
                shutil.copyfile(Path(tmp) / file, out_dir / file)
    shutil.copyfile(run_dir / "tokenizer.json", out_dir / "tokenizer.json")
    tokenizer = Tokenizer.from_file(str(out_dir / "tokenizer.json"))
    parity = check_parity(model, out_dir, tokenizer)
    if precision == "fp32" and parity["logits_max_abs_diff"] > PARITY_TOLERANCE:
        raise ParityError(
            f"the graphs' logits differ from PyTorch by {parity['logits_max_abs_diff']:.3g} "
            f"(tolerance {PARITY_TOLERANCE})"
        )
    graphs = {}
    for role, file in (("encoder", ENCODER_FILE), ("decoder", DECODER_FILE)):
        graph = onnx.load(str(out_dir / file)).graph
        graphs[role] = Graph(
            file=file,
            inputs=tuple(node.name for node in graph.input),
            outputs=tuple(node.name for node in graph.output),
        )
    parameters = model_definition.count_parameters(model)
    manifest_name = name or f"rewriter-{config.architecture}"
    manifest = Manifest(
        name=manifest_name,
        task="seq2seq",
        architecture=config.architecture,
        precision=precision,
        # Dynamic int8 quantizes a whole batch's activations with one scale.
        batch_invariant=precision == "fp32",
        graphs=graphs,
        # The transformer-shaped sizes the schema asks of every seq2seq bundle: one decoder
        # layer, one attention "head" over the source, as wide as the decoder state.
        num_layers=1,
        num_heads=1,
        head_size=config.decoder_hidden,
        hidden_size=config.decoder_hidden,
        vocab_size=config.vocab_size,
        context_length=CONTEXT_LENGTH,
        special_tokens=SpecialTokens(
            bos_token_id=config.bos_token_id,
            eos_token_id=config.eos_token_id,
            pad_token_id=config.pad_token_id,
            decoder_start_token_id=config.bos_token_id,
        ),
        add_bos_token=False,
        generation_defaults=GenerationDefaults(max_new_tokens=CONTEXT_LENGTH - 1, num_beams=3),
        parity=parity,
        metrics=metrics or {},
        training_data=training_data or {},
        license="Public domain: weights trained only on public-domain Bible translations",
        export=ExportInfo(
            source=run_dir.name,
            description=DESCRIPTIONS[config.architecture],
            parameters=parameters,
            model=asdict(config),
            quantization=quantization,
            opset=OPSET,
        ),
    )
    card = model_card(
        f"{manifest_name} ({precision})",
        DESCRIPTIONS[config.architecture],
        parameters,
        parity,
        metrics or {},
    )
    (out_dir / "README.md").write_text(card)
    return seal(out_dir, manifest, ensure_ascii=False)


def model_card(title: str, description: str, parameters: int, parity: dict, metrics: dict) -> str:
    """A short README: what the model is, its size, parity and metrics."""
    greedy = parity["greedy"]
    lines = [
        f"# {title}",
        "",
        f"{description}; {parameters:,} parameters, trained from scratch to rewrite King James "
        "Version verses in the World English Bible's wording (seed 001, sections 6.1-6.4).",
        "",
        f"Parity against {parity['reference']} on {parity['sentences']} sentences: max "
        f"|Δlogit| {parity['logits_max_abs_diff']:.3g}; greedy decoding "
        f"{greedy['identical_sequences']} of {parity['sentences']} identical, token agreement "
        f"{greedy['token_agreement']:.3f}.",
    ]
    if metrics:
        lines += ["", "| metric | value |", "|---|---|"]
        lines += [f"| {key} | {value} |" for key, value in metrics.items()]
    return "\n".join(lines) + "\n"
