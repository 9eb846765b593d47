"""CTranslate2 as a benchmark peer: the same checkpoint converted by its own converter, run by its
own int8 / fp32 CPU kernels, forced to produce exactly as many tokens as the other engines.

`convert(checkpoint, work, precision)` converts a Hugging Face checkpoint once (cached in `work`)
with `ctranslate2.converters.TransformersConverter`; "int8" is CTranslate2's int8 weights with
int8 GEMMs (its `compute_type="int8"`), "fp32" keeps float32. `generate_ids` (decoder-only, e.g.
GPT-2) and `translate_ids` (encoder-decoder, e.g. BART) run it on token ids, with EOS suppressed
until the requested length (`min_length` / `min_decoding_length`), as `min_new_tokens` does for
transformers and Scriptorium. Threads: `intra_threads` for the GEMMs, one inter-op worker, as the
onnxruntime sessions are configured.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

QUANTIZATION = {"int8": "int8", "fp32": "float32"}  # our precision name -> CTranslate2's


def convert(checkpoint: Path, work: Path, precision: str) -> Path:
    """The CTranslate2 model directory for `checkpoint` at `precision`, converted once."""
    import ctranslate2

    if precision not in QUANTIZATION:
        raise ValueError(f"`precision` must be one of {sorted(QUANTIZATION)}, got {precision!r}")
    target = work / f"ctranslate2-{precision}"
    if not (target / "model.bin").exists():
        source = _converter_source(checkpoint, work)
        converter = ctranslate2.converters.TransformersConverter(str(source))
        converter.convert(str(target), quantization=QUANTIZATION[precision], force=True)
        _name_unknown_token(target / "config.json")
    return target


def _name_unknown_token(config_path: Path) -> None:
    """CTranslate2 refuses to load a model whose config has no `unk_token` string; a tokenizer
    without one (the benchmarks' word-level tokenizers declare none) gets its EOS token, as
    GPT-2's own tokenizer has (`<|endoftext|>` is its unk, bos and eos). Inputs are token ids,
    so the unknown token is never produced."""
    config = json.loads(config_path.read_text())
    if config.get("unk_token") is None:
        config["unk_token"] = config["eos_token"]
        config_path.write_text(json.dumps(config, indent=2))


def _converter_source(checkpoint: Path, work: Path) -> Path:
    """`checkpoint`, or for BART a view of it whose config names its layer-norm placement.

    CTranslate2's BART loader reads `config.normalize_before`, which transformers' BartConfig no
    longer carries (BART normalises after each block: False). The view links every file of the
    checkpoint and adds that one key to config.json; the weights are the same files.
    """
    config = json.loads((checkpoint / "config.json").read_text())
    if config.get("model_type") != "bart" or "normalize_before" in config:
        return checkpoint
    view = work / "ctranslate2-source"
    view.mkdir(parents=True, exist_ok=True)
    for path in checkpoint.iterdir():
        link = view / path.name
        if path.name != "config.json" and not link.exists():
            os.symlink(path.resolve(), link)
    (view / "config.json").write_text(json.dumps({**config, "normalize_before": False}, indent=2))
    return view


def generator(model_dir: Path, precision: str, threads: int, seed: int = 0):
    """A CTranslate2 generator on the CPU; its sampling draws from `seed` (CTranslate2 seeds its
    worker threads' random generators when it creates them, so the seed is set here, not per call).
    """
    import ctranslate2

    ctranslate2.set_random_seed(seed)
    return ctranslate2.Generator(
        str(model_dir),
        device="cpu",
        compute_type=QUANTIZATION[precision],
        intra_threads=threads,
        inter_threads=1,
    )


def translator(model_dir: Path, precision: str, threads: int):
    import ctranslate2

    return ctranslate2.Translator(
        str(model_dir),
        device="cpu",
        compute_type=QUANTIZATION[precision],
        intra_threads=threads,
        inter_threads=1,
    )


def generate_ids(
    model,
    tokens: list[str],
    prompts: np.ndarray,
    new_tokens: int,
    do_sample: bool = False,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
) -> list[list[int]]:
    """Exactly `new_tokens` tokens after each prompt row of `prompts` (B, T), greedy or sampled
    (temperature, then top-k, then top-p); the prompt is not returned. `tokens` maps an id to
    its vocabulary string (CTranslate2 takes strings)."""
    sampling = {}
    if do_sample:
        sampling = dict(
            sampling_topk=top_k or 0,  # 0: the whole vocabulary
            sampling_topp=top_p,
            sampling_temperature=temperature,
        )
    results = model.generate_batch(
        [[tokens[int(t)] for t in row] for row in prompts],
        max_length=new_tokens,
        min_length=new_tokens,
        include_prompt_in_result=False,
        **sampling,
    )
    return [result.sequences_ids[0] for result in results]


def translate_ids(
    model,
    tokens: list[str],
    source: np.ndarray,
    new_tokens: int,
    num_beams: int = 1,
    exact_length: bool = True,
) -> list[list[int]]:
    """The best of `num_beams` beams for each source row of `source` (B, S) of token ids: exactly
    `new_tokens` tokens, or with `exact_length=False` at most that many, EOS included when the
    beam ended on it. `tokens` as for `generate_ids` (source and target share it).

    Forcing the length changes beam search's choices, not greedy's: CTranslate2 and transformers
    rank beams differently once EOS is barred (they agree when it is not; tests check both).
    """
    ids = {token: i for i, token in enumerate(tokens)}
    results = model.translate_batch(
        [[tokens[int(t)] for t in row] for row in source],
        beam_size=num_beams,
        max_decoding_length=new_tokens,
        min_decoding_length=new_tokens if exact_length else 0,
        return_end_token=not exact_length,
    )
    return [[ids[token] for token in result.hypotheses[0]] for result in results]


def vocabulary(model_dir: Path, side: str = "target") -> list[str]:
    """The converted model's vocabulary, id order (a translator's `source` or `target` side)."""
    for name in (f"{side}_vocabulary.json", "shared_vocabulary.json", "vocabulary.json"):
        if (model_dir / name).exists():
            return json.loads((model_dir / name).read_text())
    raise FileNotFoundError(f"{model_dir} holds no vocabulary file")
