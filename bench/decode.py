"""Decode speed of GPT-2 small (random weights): Scriptorium vs transformers, optimum, CTranslate2.

    python -m bench.decode [--threads 2] [--repeats 5] [--work DIR] [--out FILE]

One random-weight GPT-2 small (124M, GPT2Config() defaults, torch seed 0) is exported once to
Scriptorium bundles (fp32 / int8 / int4, through export/) and to optimum-onnx's own export (fp32,
plus onnxruntime's dynamic int8 quantization in export/'s int8 weight format), and converted by
CTranslate2's own converter (fp32, and its int8 weights with int8 GEMMs). Two scenarios, each
timed as the median of `--repeats` rounds in which every engine runs once: batch 1 with greedy
decoding, and batch 4 with sampling (temperature 0.8, top-k 50, top-p 0.95). Both use 32-token
prompts and exactly 128 new tokens (EOS is suppressed via min_new_tokens, for CTranslate2 via
min_length).
The "matmuls only" rows time the same model's weight MatMuls alone, once per token, at each
precision (bench/ceiling.py): the ceiling of any engine on onnxruntime's kernels on this machine.
"of ceiling" is Scriptorium's speed as a share of it.
Quality (perplexity change of int8/int4) is not measured here: random weights have no meaningful
perplexity, so `python -m bench.quality` measures it on the trained Bible LM.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import numpy as np

from . import ceiling, common, ct2_peer

PROMPT_TOKENS = 32
NEW_TOKENS = 128
CEILING = "matmuls only"  # bench/ceiling.py: no engine on onnxruntime's kernels decodes faster
SCENARIOS = {
    "batch 1, greedy": dict(batch=1, do_sample=False),
    "batch 4, sampling": dict(batch=4, do_sample=True, temperature=0.8, top_k=50, top_p=0.95),
}


def prepare(work: Path) -> dict[str, Path]:
    """Checkpoint, Scriptorium bundles, optimum-onnx exports and CTranslate2 conversions, built
    once and cached in `work`."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    from export import export_bundle

    paths = {"checkpoint": work / "checkpoint"}
    if not (paths["checkpoint"] / "config.json").exists():
        torch.manual_seed(0)
        config = GPT2Config(bos_token_id=0, eos_token_id=0)
        GPT2LMHeadModel(config).eval().save_pretrained(paths["checkpoint"])
        tokenizer = common.word_tokenizer(config.vocab_size, ["<|endoftext|>"])
        common.save_tokenizer(
            tokenizer, paths["checkpoint"], bos_token="<|endoftext|>", eos_token="<|endoftext|>"
        )
    for precision in ("fp32", "int8", "int4"):
        paths[precision] = work / common.cache_name("scriptorium", precision)
        if not (paths[precision] / "manifest.json").exists():
            export_bundle(paths["checkpoint"], paths[precision], precision=precision)
    paths["optimum-fp32"] = work / "optimum-fp32"
    if not (paths["optimum-fp32"] / "model.onnx").exists():
        from optimum.exporters.onnx import main_export

        main_export(
            str(paths["checkpoint"]),
            output=paths["optimum-fp32"],
            task="text-generation-with-past",
            do_validation=False,
        )
    paths["optimum-int8"] = work / common.cache_name("optimum", "int8")
    if not (paths["optimum-int8"] / "model.onnx").exists():
        shutil.copytree(paths["optimum-fp32"], paths["optimum-int8"], dirs_exist_ok=True)
        (paths["optimum-int8"] / "model.onnx").unlink()
        common.quantize_int8_like_export(
            paths["optimum-fp32"] / "model.onnx", paths["optimum-int8"] / "model.onnx"
        )
    for precision in ("fp32", "int8"):
        paths[f"ctranslate2-{precision}"] = ct2_peer.convert(paths["checkpoint"], work, precision)
    return paths


def runners(paths: dict[str, Path], threads: int, prompts: np.ndarray, settings: dict) -> dict:
    """name -> callable generating NEW_TOKENS tokens for `prompts` (B, PROMPT_TOKENS)."""
    import torch
    from optimum.onnxruntime import ORTModelForCausalLM
    from transformers import GPT2LMHeadModel

    import runtime
    from runtime.sessions import session_options

    batch = prompts.shape[0]
    sampling = {k: v for k, v in settings.items() if k != "batch"}
    hf_kwargs = dict(
        max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, pad_token_id=0, **sampling
    )
    input_ids = torch.tensor(prompts)
    mask = torch.ones_like(input_ids)

    def hf_runner(model):
        def run():
            torch.manual_seed(0)
            with torch.no_grad():
                out = model.generate(input_ids=input_ids, attention_mask=mask, **hf_kwargs)
            assert out.shape == (batch, PROMPT_TOKENS + NEW_TOKENS)

        return run

    common.set_torch_threads(threads)
    out = {
        ("transformers", "fp32"): hf_runner(
            GPT2LMHeadModel.from_pretrained(paths["checkpoint"]).eval()
        )
    }
    for precision in ("fp32", "int8"):
        model = ORTModelForCausalLM.from_pretrained(
            paths[f"optimum-{precision}"],
            use_cache=True,
            provider="CPUExecutionProvider",
            session_options=session_options(threads),
        )
        out[("optimum-onnx", precision)] = hf_runner(model)

    texts = [" ".join(f"t{i}" for i in row) for row in prompts]
    config = runtime.GenerationConfig(
        max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, seed=0, **sampling
    )
    for precision in ("fp32", "int8", "int4"):
        gen = runtime.load(paths[precision], threads=threads, spinning=common.RUNTIME_SPINNING)
        assert gen.encode_prompt(texts[0]) == prompts[0].tolist()

        def run(gen=gen):
            outs = gen.generate(texts, config)
            assert all(len(o.token_ids) == NEW_TOKENS for o in outs)

        out[("scriptorium", precision)] = run
    for precision in ("fp32", "int8"):
        model_dir = paths[f"ctranslate2-{precision}"]
        model = ct2_peer.generator(model_dir, precision, threads)
        tokens = ct2_peer.vocabulary(model_dir)

        def run(model=model, tokens=tokens):
            outs = ct2_peer.generate_ids(model, tokens, prompts, NEW_TOKENS, **sampling)
            assert all(len(o) == NEW_TOKENS for o in outs)

        out[("ctranslate2", precision)] = run
    for precision in ("fp32", "int8", "int4"):
        out[(CEILING, precision)] = ceiling.ceiling_runner(
            paths["checkpoint"], paths["checkpoint"].parent, precision, threads, batch, NEW_TOKENS
        )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--work", type=Path, default=common.DEFAULT_WORK)
    parser.add_argument("--out", type=Path, default=common.RESULTS / "decode.json")
    args = parser.parse_args(argv)

    paths = prepare(args.work.expanduser() / "gpt2-small")
    rng = np.random.default_rng(0)
    tok_per_s: dict[tuple[str, str], dict[str, float]] = {}
    for scenario, settings in SCENARIOS.items():
        prompts = rng.integers(1, 50257, size=(settings["batch"], PROMPT_TOKENS))
        runs = runners(paths, args.threads, prompts, settings)
        for key, seconds in common.interleaved_medians(runs, repeats=args.repeats).items():
            tok_per_s.setdefault(key, {})[scenario] = settings["batch"] * NEW_TOKENS / seconds
            print(f"{scenario:>18} {key[0]:>13} {key[1]}: {tok_per_s[key][scenario]:7.1f} tok/s")

    rows = []
    baseline = tok_per_s[("transformers", "fp32")]
    for (engine, precision), speeds in tok_per_s.items():
        row = [engine, precision]
        for scenario in SCENARIOS:
            row.append(speeds[scenario])
            row.append(f"{speeds[scenario] / baseline[scenario]:.2f}×")
            peer = tok_per_s.get(("optimum-onnx", precision)) or tok_per_s[("optimum-onnx", "int8")]
            ct2 = tok_per_s.get(("ctranslate2", precision)) or tok_per_s[("ctranslate2", "int8")]
            ceiling_speed = tok_per_s[(CEILING, precision)][scenario]
            ours = engine == "scriptorium"
            row.append(f"{speeds[scenario] / peer[scenario]:.2f}×" if ours else "")
            row.append(f"{speeds[scenario] / ct2[scenario]:.2f}×" if ours else "")
            row.append(f"{speeds[scenario] / ceiling_speed:.0%}" if ours else "")
        rows.append(row)
    header = ["engine", "precision"]
    for scenario in SCENARIOS:
        header += [
            f"{scenario} tok/s",
            "vs transformers",
            "vs optimum (same precision)",
            "vs ctranslate2 (same precision)",
            "of ceiling",
        ]
    table = common.markdown_table(header, rows)
    print(table)
    common.write_results(
        args.out,
        {
            "benchmark": "decode",
            "environment": common.environment(args.threads),
            "prompt_tokens": PROMPT_TOKENS,
            "new_tokens": NEW_TOKENS,
            "repeats": args.repeats,
            "tok_per_s": {f"{e}/{p}": v for (e, p), v in tok_per_s.items()},
            "table": table,
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
