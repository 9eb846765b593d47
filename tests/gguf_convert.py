"""GGUF files as users get them: tiny random transformers checkpoints converted by llama.cpp's own
`convert_hf_to_gguf.py`, for the importer's per-architecture tests (tests/test_gguf_families.py).

`llama_cpp_source()` is the converter's folder (`vendor/llama.cpp` of the llama-cpp-python sdist
that bench/serve_peers.py builds its peer from): `$SCRIPTORIUM_LLAMA_CPP_SOURCE` when set, else the
sdist downloaded once by pip (sources only, no build) into
`~/.cache/scriptorium/llama-cpp-python/<version>/` and unpacked there; None when it cannot be had
(the tests then skip, saying so). `make_checkpoint(out_dir, model_type, **fields)` saves a tiny
model of any decoder family transformers has, beside tests/gguf_models.py's byte-level BPE
tokenizer and ChatML template; `convert(source, {checkpoint: {outtype: out}})` runs the converter
on them all in one subprocess with its own vendored `gguf-py`. The converter names a BPE
pre-tokenizer by hashing a sample text's tokens against a table of published tokenizers; a
tokenizer trained here is in no table, so the driver names it `gpt2` (GPT-2's regex, what our
tokenizer's ByteLevel splits by); and families whose converter reads a SentencePiece
`tokenizer.model` (gemma, gemma2, phi3) have the byte-level vocabulary written the `gpt2` way
instead (our checkpoints have no tokenizer.model; phi3's is the branch Phi-4's GPT2Tokenizer
takes).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.gguf_models import CHAT_TEMPLATE, CORPUS, SPECIALS

VERSION = "0.3.36"  # bench/serve_peers.py's PEER_VERSION
DRIVER = """
import json, runpy, sys
source, jobs = sys.argv[1], json.loads(sys.argv[2])
sys.path[:0] = [source, source + "/gguf-py"]
import conversion.base
model = conversion.base.TextModel
model.get_vocab_base_pre = lambda self, tokenizer: "gpt2"
model._set_vocab_sentencepiece = model._set_vocab_gpt2
import conversion.phi  # Phi-4's GPT2Tokenizer branch (Phi-3's reads a tokenizer.model)
conversion.phi.Phi3MiniModel.set_vocab = model._set_vocab_gpt2
for checkpoint, outputs in jobs:  # one process for every file: torch is imported once
    for outtype, out in outputs.items():
        sys.argv = ["convert_hf_to_gguf.py", checkpoint, "--outfile", out, "--outtype", outtype]
        runpy.run_path(source + "/convert_hf_to_gguf.py", run_name="__main__")
"""


def llama_cpp_source() -> Path | None:
    """The folder holding convert_hf_to_gguf.py and gguf-py, or None when it cannot be had."""
    if os.environ.get("SCRIPTORIUM_LLAMA_CPP_SOURCE"):
        source = Path(os.environ["SCRIPTORIUM_LLAMA_CPP_SOURCE"])
        return source if (source / "convert_hf_to_gguf.py").is_file() else None
    folder = Path.home() / ".cache" / "scriptorium" / "llama-cpp-python" / VERSION
    name = f"llama_cpp_python-{VERSION}"
    source = folder / name / "vendor" / "llama.cpp"
    if (source / "convert_hf_to_gguf.py").is_file():
        return source
    folder.mkdir(parents=True, exist_ok=True)
    download = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:"]
    done = subprocess.run(
        download + [f"llama-cpp-python=={VERSION}", "-d", str(folder)], capture_output=True
    )
    if done.returncode != 0:
        return None
    shutil.unpack_archive(folder / f"{name}.tar.gz", folder)
    return source if (source / "convert_hf_to_gguf.py").is_file() else None


def convert(source: Path, jobs: dict[Path, dict[str, Path]]) -> dict[Path, dict[str, Path]]:
    """Each checkpoint as GGUF files, {checkpoint: {outtype ("f32", "q8_0", …): path}}, all in
    one converter process; RuntimeError with the converter's last lines when it fails."""
    plan = [
        [str(checkpoint), {t: str(path) for t, path in out.items()}]
        for checkpoint, out in jobs.items()
    ]
    done = subprocess.run(
        [sys.executable, "-c", DRIVER, str(source), json.dumps(plan)],
        capture_output=True,
        text=True,
        env={**os.environ, "NO_LOCAL_GGUF": "1"},  # the driver puts gguf-py on the path itself
    )
    if done.returncode != 0:
        raise RuntimeError(f"convert_hf_to_gguf failed:\n{done.stderr[-3000:]}")
    return jobs


def tokenizer():
    """tests/gguf_models.py's byte-level BPE (ChatML specials first) as a tokenizers.Tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=420,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS * 3, trainer)
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return tok


def make_checkpoint(out_dir: Path, model_type: str, seed: int = 0, **fields) -> Path:
    """A tiny random `model_type` causal LM (2 layers, width 128, 4 query / 2 KV heads of 32, a
    64-token context; `fields` override config fields) with weights large enough for clear greedy
    winners, saved with its tokenizer (bos <|im_start|> 1, eos <|im_end|> 2)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedTokenizerFast

    tok = tokenizer()
    shape = {
        "vocab_size": tok.get_vocab_size(),
        "hidden_size": 128,
        "intermediate_size": 256,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "max_position_embeddings": 64,
        "rms_norm_eps": 1e-6,
        "initializer_range": 0.08,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "pad_token_id": 0,
    }
    config = AutoConfig.for_model(model_type, **{**shape, **fields})
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config).eval()
    with torch.no_grad():
        model.get_input_embeddings().weight.normal_(0.0, 0.5)
        for name, parameter in model.named_parameters():
            if "norm" in name and name.endswith("weight"):  # Gemma's (1 + w) norms start at 0
                base = 1.0 if parameter.mean() > 0.5 else 0.0
                parameter.copy_(base + 0.1 * torch.randn_like(parameter))
    model.save_pretrained(out_dir, safe_serialization=True)
    PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        chat_template=CHAT_TEMPLATE,
    ).save_pretrained(out_dir)
    return out_dir
