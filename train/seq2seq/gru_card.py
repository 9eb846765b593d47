"""The model card (README.md) of a shipped GRU rewriter (train/seq2seq/gru.py `--ship`), made
from its manifest and its evaluation (train/seq2seq/gru_eval.py's results plus the run's
training summary and greedy samples), so every number in it is a measured one.

Sections: what the model is and what seed 001 says to look for, the architecture and parameter
count, files and quantization, training (and what was scaled down from Bahdanau et al.), the
results and length-bucket tables, int8 against fp32, samples, then the closing sections every
card has (convert.manifest.card_closing: metrics, training data, licence).

Does not cover: computing the numbers (train/seq2seq/gru_eval.py), writing or sealing the
bundle (train/seq2seq/gru.py, export/gru_seq2seq.py).
"""

from __future__ import annotations

from convert.manifest import card_closing, card_table
from runtime.manifest import Manifest
from train.seq2seq import gru_eval

ROLE = {
    "context": (
        "Seed 001 (section 6.2) says that squeezing the whole source into one fixed-length "
        "context vector z = h_T gives a long-term dependency problem: the model becomes "
        "\u201cincapable of memory\u201d on long sentences. This is that model, the control of the "
        "comparison. What to look for: BLEU falling as the source grows, far more steeply than "
        "for rewriter-gru-attention (same data, same steps, the same parameter count), and "
        "outputs that stay fluent Bible English while losing what the source said."
    ),
    "attention": (
        "Seed 001 (sections 6.3-6.4) says attention lets the decoder \u201cmemorize longer "
        "sentences\u201d: instead of one context vector it builds a context vector c_i for every "
        "target token, a weighted sum of all the encoder's annotations. This is that model. "
        "What to look for: BLEU holding up on long sources where rewriter-gru (the same "
        "parameter count without attention) collapses, and the attention weights α, which the "
        "app's alignment view draws, lining each output word up with the KJV words it rewrites."
    ),
}
EQUATIONS = {
    "context": [
        "encoder: h_t = GRU(x_t, h_{t-1}), context z = h_T (one vector for the whole source)",
        "decoder: s_0 = tanh(W z); s_i = GRU(s_{i-1}, [y_{i-1}; z])",
    ],
    "attention": [
        "encoder: bidirectional GRU, annotations h_j = [→h_j; ←h_j]",
        "alignment: e_ij = v^T tanh(W s_{i-1} + U h_j), α_ij = softmax_j(e_ij), c_i = Σ_j α_ij h_j",
        "decoder: s_0 = tanh(W ←h_1); s_i = GRU(s_{i-1}, [y_{i-1}; c_i])",
    ],
}


def _system(results: dict, name: str, how: str) -> dict:
    return results["systems"][f"{name} {how}"]


def _trend(results: dict, system: str) -> str:
    """'a (first bucket) → b (last bucket)' in greedy BLEU."""
    by_length = results["systems"][system]["by_length"]
    first, last = list(by_length)[0], list(by_length)[-1]
    return (
        f"{by_length[first]['bleu']:.1f} on {first}-word sources → "
        f"{by_length[last]['bleu']:.1f} on {last}"
    )


def _architecture(manifest: Manifest, variant: str, evaluation: dict) -> str:
    model = manifest.export.model
    encoder = (
        f"bidirectional GRU, {model['encoder_hidden']} per direction"
        if model["attention"]
        else f"GRU, {model['encoder_hidden']}"
    )
    rows = [
        ("token embedding (shared by encoder and decoder, tied to the output layer)",
         f"{model['vocab_size']:,} × {model['embedding']}"),
        ("encoder", encoder),
        ("decoder GRU state s_i", model["decoder_hidden"]),
        ("alignment MLP", model["attention_size"] if model["attention"] else "none"),
        ("readout", f"t_i = tanh(R [s_i; y_{{i-1}}; {'c_i' if model['attention'] else 'z'}]), "
                    "logits = t_i E^T + b"),
        ("dropout (training only)", model["dropout"]),
    ]  # fmt: skip
    counts = {
        name: found["parameters"]
        for name, found in evaluation["systems"].items()
        if name.endswith("greedy")
    }
    matched = ", ".join(f"{name.removesuffix(' greedy')} {n:,}" for name, n in counts.items())
    return "\n".join(
        [
            *(f"- {line}" for line in EQUATIONS[variant]),
            "",
            *card_table(rows),
            "",
            f"{manifest.export.parameters:,} parameters. The two presets are matched "
            f"({matched}): the context model spends on a wider encoder and bridge what the "
            "attention model spends on its backward GRU and alignment MLP, so a difference "
            "between them is attention's, not size's.",
        ]
    )


def _files(manifest: Manifest) -> str:
    quantized = manifest.export.quantization or {}
    counts = "; ".join(
        f"`{file}`: " + ", ".join(f"{op} × {n}" for op, n in ops.items())
        for file, ops in quantized.items()
    )
    return "\n".join(
        [
            *(f"- `{role}`: `{graph.file}`" for role, graph in manifest.graphs.items()),
            "- `tokenizer.json` (the mBART rewriter's English 8,000-token BPE), "
            "`evaluation.json` (every number below), `loss.png`, `manifest.json` (checksums of "
            "every file)",
            "",
            "int8: onnxruntime's dynamic quantization (uint8 weights, one scale per tensor) of "
            f"every MatMul and Gather with a constant weight ({counts}); the encoder's ONNX GRU "
            "nodes stay float32 (onnxruntime has no quantized GRU). The decoder runs one step "
            "per token from a fixed-size state, so a step costs the same at every position.",
        ]
    )


def _training(summary: dict, training_pairs: int, default_steps: int) -> str:
    minutes = summary["train_seconds"] / 60
    threads = summary["threads"]
    where = f"on {threads} thread{'s' if threads > 1 else ''} " if threads else ""
    validation = list(summary["validation_losses"].items())[-3:]  # (step, loss)
    rows = [
        ("optimizer steps", f"{summary['steps']:,} of {summary['batch_size']} pairs"),
        ("epochs", f"{summary['epochs']} of {training_pairs:,} training pairs"),
        ("target tokens seen", f"{summary['target_tokens']:,}"),
        ("training time", f"{minutes:.0f} min {where}({summary['steps_per_second']:.2f} steps/s)"),
        ("training loss at the last logged step", f"{summary['final_train_loss']:.2f}"),
        ("validation loss (256 pairs) at steps " + ", ".join(f"{s:,}" for s, _ in validation),
         ", ".join(f"{loss:.2f}" for _, loss in validation)),
    ]  # fmt: skip
    still_falling = len(validation) > 1 and validation[-1][1] < validation[-2][1]
    return "\n".join(
        [
            "Scaled down from Bahdanau et al. (2015), whose RNNsearch had 1,000 hidden units per "
            "direction, 620-dimensional embeddings and 30,000-word vocabularies and trained for "
            "about five days per model on 348 M words of WMT'14 English-French (seed 001 gives "
            "no sizes). This project trains on a 2-core CPU shared with other work, so both "
            "models are about 2 M parameters (one 8,000-token vocabulary for source and target, "
            "embeddings tied to the output layer, GRUs of 128-256; the table above) and were "
            f"trained for {summary['steps']:,} steps instead of the recipe's default "
            f"{default_steps:,}. AdamW, peak learning rate {summary['lr']} after "
            f"{summary['warmup']} warm-up steps, cosine decay to a tenth; matrix products in "
            "bfloat16; seed 0.",
            "",
            *card_table(rows),
            "",
            (
                "The validation loss was still falling at the last evaluation (the curve "
                "below): the comparison is between two equally short runs, not two converged "
                "models."
                if still_falling
                else "The validation loss had stopped falling by the last evaluation (the "
                "curve below)."
            ),
            "",
            "![loss curve](loss.png)",
        ]
    )


def _samples(evaluation: dict) -> str:
    lines = [
        "The first long test verses (over 40 words), every system's output (the int8 bundles; "
        "the mBART rewriter with its defaults):",
        "",
    ]
    for sample in evaluation["samples"]:
        lines += [f"- **{sample['book']}** KJV: {sample['kjv']}", f"  - WEB: {sample['web']}"]
        lines += [f"  - {system}: {text}" for system, text in sample["outputs"].items()]
    return "\n".join(lines)


def _greedy_samples(evaluation: dict) -> str:
    lines = [
        "Greedy decoding (one verse at a time, at most 127 new tokens) of the first test-split "
        "verses of the committed fixture; tests/test_gru_seq2seq.py checks the bundle still "
        "writes exactly these:",
        "",
    ]
    for sample in evaluation["greedy_samples"]:
        lines += [f"- KJV: {sample['kjv']}", f"  - greedy: {sample['output']}"]
    return "\n".join(lines)


def card(manifest: Manifest, variant: str, evaluation: dict, default_steps: int) -> str:
    """README.md of the shipped bundle of `variant` ("context" or "attention"); `default_steps`:
    the recipe's own step budget, which the card compares the run's with."""
    name = manifest.name
    others = [n for n in evaluation["training"] if n != name]  # the other shipped GRU model
    summary = evaluation["training"][name]
    training_pairs = manifest.training_data["training pairs"]
    greedy, beam = _system(evaluation, name, "greedy"), _system(evaluation, name, "beam 3")
    copy = evaluation["systems"][gru_eval.COPY]
    header = card_table(
        [
            ("task", manifest.task),
            ("architecture", manifest.architecture),
            ("parameters", f"{manifest.export.parameters:,}"),
            ("precision", manifest.precision),
            ("vocabulary", manifest.vocab_size),
            ("context length", manifest.context_length),
            ("licence", manifest.license),
        ]
    )
    measured = (
        f"Measured on all {evaluation['test_pairs']:,} test pairs: BLEU {greedy['bleu']:.1f} "
        f"greedy, {beam['bleu']:.1f} beam 3, against {copy['bleu']:.1f} for copying the KJV "
        f"source; greedy BLEU by source length {_trend(evaluation, f'{name} greedy')}"
    )
    for other in others:
        measured += f" (for {other}: {_trend(evaluation, f'{other} greedy')})"
    parity = evaluation["int8_vs_fp32"][name]
    sections = [
        (
            None,
            "\n".join(
                [
                    f"# {name}",
                    "",
                    manifest.export.description[0].upper() + manifest.export.description[1:] + ".",
                    "",
                    *header,
                ]
            ),
        ),
        ("What seed 001 says, and what to look for", f"{ROLE[variant]}\n\n{measured}."),
        ("Architecture", _architecture(manifest, variant, evaluation)),
        ("Files", _files(manifest)),
        ("Training", _training(summary, training_pairs, default_steps)),
        (
            "Results on the whole test split",
            f"All {evaluation['test_pairs']:,} test pairs ({evaluation['split']}), through the "
            "runtime; sacreBLEU corpus BLEU and chrF against the WEB.\n\n"
            + gru_eval.results_table(evaluation),
        ),
        (
            "BLEU by source length",
            f"Corpus BLEU of the pairs in each bucket of {evaluation['length']}; pairs per "
            "bucket in the header.\n\n"
            + gru_eval.bucket_table(evaluation)
            + "\n\nThe same, less the copy baseline's BLEU in each bucket (the KJV is closer to "
            "the WEB in long verses, so raw BLEU rises with length for copying):\n\n"
            + gru_eval.bucket_table(evaluation, minus_copy=True)
            + "\n\nchrF by the same buckets:\n\n"
            + gru_eval.bucket_table(evaluation, "chrf"),
        ),
        (
            "int8 against fp32",
            f"This int8 bundle against an fp32 export of the same weights, on all "
            f"{parity['sources']:,} test sources (both decoding in the evaluation's batches); "
            "logits teacher-forced along the fp32 greedy output. The fp32 export matches PyTorch "
            f"to {parity['fp32_vs_pytorch_max_abs_logit_diff']:.2g} in max |Δlogit|. Greedy "
            "decoding is where int8 shows: a near-tie flips, and every later token of that "
            "verse follows the other branch; the BLEU rows show what that costs.\n\n"
            + gru_eval.parity_table(parity),
        ),
        ("Samples", _samples(evaluation)),
        ("Greedy samples", _greedy_samples(evaluation)),
    ]
    text = "\n\n".join(
        body if title is None else f"## {title}\n\n{body}" for title, body in sections
    )
    return text + "\n" + "\n".join(card_closing(manifest)) + "\n"
