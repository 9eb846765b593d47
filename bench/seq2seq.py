"""Seq2seq decode speed of BART-base (random weights): Scriptorium vs transformers, optimum, CT2;
with `--gru`, seed 001's GRU encoder-decoders: our runtime's decoder step vs PyTorch's loop.

    python -m bench.seq2seq [--threads 2] [--repeats 5] [--work DIR] [--out FILE]
    python -m bench.seq2seq --gru [--gru-run context=RUN attention=RUN] [--threads 2] …

One random-weight BART-base-shaped model (6+6 layers, d 768, 12 heads, vocab 50,265, torch seed
0) is exported once to Scriptorium bundles (fp32, int8), to optimum-onnx's own export (fp32) and
to CTranslate2 by its own converter (fp32, and its int8 weights with int8 GEMMs). A 32-token
source, exactly 64 new tokens (EOS suppressed via min_new_tokens, for CTranslate2 via
min_decoding_length), batch 1, greedy and beam search with 4 beams; tok/s counts the tokens of
the returned sequence. Medians of `--repeats` rounds in which every engine runs once.

`--gru`: each variant of modeling/gru_seq2seq.py (its preset with random weights, torch seed 0,
or a trained run folder given with `--gru-run`) exported to fp32 and int8 bundles; the same
32-token source, greedy, exactly 64 new tokens, batch 1: PyTorch's own loop (the one of
`RecurrentSeq2Seq.greedy`: encode, then step and argmax, EOS suppressed; `--threads` torch
threads) against `Generator.generate` on runtime/recurrent.py (`--threads` onnxruntime threads;
EOS suppressed via min_new_tokens).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from . import common, ct2_peer

SOURCE_TOKENS = 32
NEW_TOKENS = 64
MODES = {"greedy": dict(num_beams=1), "beam 4": dict(num_beams=4)}
SPECIALS = ["<s>", "<pad>", "</s>", "<unk>"]
GRU_VARIANTS = ("context", "attention")


def prepare(work: Path) -> dict[str, Path]:
    import torch
    from transformers import BartConfig, BartForConditionalGeneration

    from export import export_bundle

    paths = {"checkpoint": work / "checkpoint"}
    if not (paths["checkpoint"] / "config.json").exists():
        torch.manual_seed(0)
        config = BartConfig(
            vocab_size=50265,
            d_model=768,
            encoder_layers=6,
            decoder_layers=6,
            encoder_attention_heads=12,
            decoder_attention_heads=12,
            encoder_ffn_dim=3072,
            decoder_ffn_dim=3072,
            forced_eos_token_id=None,
        )
        BartForConditionalGeneration(config).eval().save_pretrained(paths["checkpoint"])
        tokenizer = common.word_tokenizer(config.vocab_size, SPECIALS)
        common.save_tokenizer(
            tokenizer,
            paths["checkpoint"],
            bos_token="<s>",
            pad_token="<pad>",
            eos_token="</s>",
            unk_token="<unk>",
        )
    for precision in ("fp32", "int8"):
        paths[precision] = work / common.cache_name("scriptorium", precision)
        if not (paths[precision] / "manifest.json").exists():
            export_bundle(paths["checkpoint"], paths[precision], precision=precision)
    paths["optimum-fp32"] = work / "optimum-fp32"
    if not (paths["optimum-fp32"] / "decoder_model_merged.onnx").exists():
        from optimum.exporters.onnx import main_export

        main_export(
            str(paths["checkpoint"]),
            output=paths["optimum-fp32"],
            task="text2text-generation-with-past",
            do_validation=False,
        )
    for precision in ("fp32", "int8"):
        paths[f"ctranslate2-{precision}"] = ct2_peer.convert(paths["checkpoint"], work, precision)
    return paths


def runners(paths: dict[str, Path], threads: int, source: np.ndarray, settings: dict) -> dict:
    import torch
    from optimum.onnxruntime import ORTModelForSeq2SeqLM
    from transformers import BartForConditionalGeneration

    import runtime
    from runtime.sessions import session_options

    hf_kwargs = dict(
        max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False, **settings
    )
    input_ids = torch.tensor(source)

    def hf_runner(model):
        def run():
            with torch.no_grad():
                out = model.generate(
                    input_ids=input_ids, attention_mask=torch.ones_like(input_ids), **hf_kwargs
                )
            assert out.shape[1] >= NEW_TOKENS

        return run

    common.set_torch_threads(threads)
    checkpoint = BartForConditionalGeneration.from_pretrained(paths["checkpoint"]).eval()
    out = {("transformers", "fp32"): hf_runner(checkpoint)}
    optimum = ORTModelForSeq2SeqLM.from_pretrained(
        paths["optimum-fp32"],
        use_cache=True,
        provider="CPUExecutionProvider",
        session_options=session_options(threads),
    )
    out[("optimum-onnx", "fp32")] = hf_runner(optimum)
    # The word tokenizer's post-processor adds nothing, so the source text is the ids spelled out.
    text = " ".join(f"t{i}" for i in source[0])
    config = runtime.GenerationConfig(
        max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, **settings
    )
    for precision in ("fp32", "int8"):
        gen = runtime.load(paths[precision], threads=threads, spinning=common.RUNTIME_SPINNING)
        assert gen.encode_prompt(text) == source[0].tolist()

        def run(gen=gen):
            outs = gen.generate(text, config)
            assert len(outs[0].token_ids) == NEW_TOKENS

        out[("scriptorium", precision)] = run
    for precision in ("fp32", "int8"):
        model_dir = paths[f"ctranslate2-{precision}"]
        model = ct2_peer.translator(model_dir, precision, threads)
        tokens = ct2_peer.vocabulary(model_dir, "source")

        def run(model=model, tokens=tokens):
            (ids,) = ct2_peer.translate_ids(
                model, tokens, source, NEW_TOKENS, num_beams=settings["num_beams"]
            )
            assert len(ids) == NEW_TOKENS

        out[("ctranslate2", precision)] = run
    return out


def prepare_gru(work: Path, variant: str, run: Path | None) -> dict[str, Path]:
    """The variant's run folder (`run`, or its preset with random weights made in `work`) and
    its fp32 and int8 bundles."""
    import shutil
    from dataclasses import replace

    import torch

    from export import gru_seq2seq as gru_export
    from modeling import gru_seq2seq as model_definition
    from train.seq2seq import gru as recipe

    paths = {"run": run or work / f"gru-{variant}-random"}
    if not (paths["run"] / model_definition.WEIGHTS_FILE).exists():
        special = recipe.special_ids(recipe.TOKENIZER)
        config = replace(
            model_definition.PRESETS[variant],
            bos_token_id=special["bos"],
            eos_token_id=special["eos"],
            pad_token_id=special["pad"],
        )
        torch.manual_seed(0)
        paths["run"].mkdir(parents=True, exist_ok=True)
        model_definition.save_config(config, paths["run"])
        torch.save(
            model_definition.build(config).state_dict(),
            paths["run"] / model_definition.WEIGHTS_FILE,
        )
        shutil.copyfile(recipe.TOKENIZER, paths["run"] / "tokenizer.json")
    for precision in ("fp32", "int8"):
        paths[precision] = work / f"gru-{variant}-{paths['run'].name}-{precision}"
        if not (paths[precision] / "manifest.json").exists():
            gru_export.export_bundle(paths["run"], paths[precision], precision)
    return paths


def gru_runners(paths: dict[str, Path], threads: int, source: np.ndarray) -> dict:
    import torch

    import runtime
    from modeling import gru_seq2seq as model_definition

    common.set_torch_threads(threads)
    model = model_definition.load(paths["run"])
    ids = torch.tensor(source)

    def pytorch():
        # RecurrentSeq2Seq.greedy's loop with EOS suppressed, as min_new_tokens does for ours:
        # a trained model would stop early on this random source.
        with torch.no_grad():
            hidden, *memory = model.encode(ids, torch.ones_like(ids))
            token = torch.full((1,), model.config.bos_token_id)
            for _ in range(NEW_TOKENS):
                logits, hidden, *_ = model.step(token, hidden, *memory)
                logits[:, model.config.eos_token_id] = -torch.inf
                token = logits.argmax(-1)

    out = {("pytorch", "fp32"): pytorch}
    config = runtime.GenerationConfig(
        max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, num_beams=1
    )
    for precision in ("fp32", "int8"):
        gen = runtime.load(paths[precision], threads=threads, spinning=common.RUNTIME_SPINNING)

        def run(gen=gen):
            (output,) = gen.generate([source[0].tolist()], config)
            assert len(output.token_ids) == NEW_TOKENS

        out[("scriptorium", precision)] = run
    return out


def gru_main(args) -> int:
    runs = dict(item.split("=", 1) for item in args.gru_run)
    unknown = sorted(set(runs) - set(GRU_VARIANTS))
    if unknown:
        raise ValueError(f"`--gru-run` variants must be in {GRU_VARIANTS}, got {unknown}")
    work = args.work.expanduser() / "gru-seq2seq"
    source = np.random.default_rng(0).integers(3, 8000, size=(1, SOURCE_TOKENS))
    rows, tok_per_s = [], {}
    for variant in GRU_VARIANTS:
        paths = prepare_gru(work, variant, Path(runs[variant]) if variant in runs else None)
        medians = common.interleaved_medians(
            gru_runners(paths, args.threads, source), repeats=args.repeats
        )
        baseline = NEW_TOKENS / medians[("pytorch", "fp32")]
        for (engine, precision), seconds in medians.items():
            speed = NEW_TOKENS / seconds
            tok_per_s[f"{variant}/{engine}/{precision}"] = speed
            rows.append([variant, engine, precision, speed, 1000 * seconds / NEW_TOKENS,
                         f"{speed / baseline:.2f}×"])  # fmt: skip
            print(f"{variant:>9} {engine:>11} {precision}: {speed:7.1f} tok/s")
    header = ["model", "engine", "precision", "greedy tok/s", "ms / token", "vs PyTorch"]
    table = common.markdown_table(header, rows)
    print(table)
    common.write_results(
        args.out or common.RESULTS / "seq2seq_gru.json",
        {
            "benchmark": "seq2seq-gru",
            "environment": common.environment(args.threads),
            # the run folder's name only: its path is this machine's
            "weights": {
                v: f"trained run {Path(runs[v]).name}" if v in runs else "random (torch seed 0)"
                for v in GRU_VARIANTS
            },
            "source_tokens": SOURCE_TOKENS,
            "new_tokens": NEW_TOKENS,
            "repeats": args.repeats,
            "tok_per_s": tok_per_s,
            "table": table,
        },
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--work", type=Path, default=common.DEFAULT_WORK)
    parser.add_argument("--out", type=Path, help="results file (default: bench/results/…)")
    parser.add_argument("--gru", action="store_true", help="the GRU models instead of BART")
    parser.add_argument("--gru-run", nargs="*", default=[], help="VARIANT=RUN_DIR (trained)")
    args = parser.parse_args(argv)
    if args.gru:
        return gru_main(args)

    paths = prepare(args.work.expanduser() / "bart-base")
    source = np.random.default_rng(0).integers(len(SPECIALS), 50265, size=(1, SOURCE_TOKENS))
    tok_per_s: dict[tuple[str, str], dict[str, float]] = {}
    for mode, settings in MODES.items():
        runs = runners(paths, args.threads, source, settings)
        for key, seconds in common.interleaved_medians(runs, repeats=args.repeats).items():
            tok_per_s.setdefault(key, {})[mode] = NEW_TOKENS / seconds
            print(f"{mode:>7} {key[0]:>13} {key[1]}: {tok_per_s[key][mode]:7.1f} tok/s")

    baseline, peer = tok_per_s[("transformers", "fp32")], tok_per_s[("optimum-onnx", "fp32")]
    rows = []
    for (engine, precision), speeds in tok_per_s.items():
        row = [engine, precision]
        ct2 = tok_per_s[("ctranslate2", precision)]
        for mode in MODES:
            row += [
                speeds[mode],
                f"{speeds[mode] / baseline[mode]:.2f}×",
                f"{speeds[mode] / peer[mode]:.2f}×",
                f"{speeds[mode] / ct2[mode]:.2f}×" if engine == "scriptorium" else "",
            ]
        rows.append(row)
    header = ["engine", "precision"]
    for mode in MODES:
        header += [
            f"{mode} tok/s",
            "vs transformers",
            "vs optimum fp32",
            "vs ctranslate2 (same precision)",
        ]
    table = common.markdown_table(header, rows)
    print(table)
    common.write_results(
        args.out or common.RESULTS / "seq2seq.json",
        {
            "benchmark": "seq2seq",
            "environment": common.environment(args.threads),
            "source_tokens": SOURCE_TOKENS,
            "new_tokens": NEW_TOKENS,
            "repeats": args.repeats,
            "tok_per_s": {f"{e}/{p}": v for (e, p), v in tok_per_s.items()},
            "table": table,
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
