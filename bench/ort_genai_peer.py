"""onnxruntime-genai as a benchmark peer: its own model builder's int4 model of the dequantized
GGUF checkpoint, run by its own generation loop (`og.Generator`) in a child process of the peers'
virtual environment (bench/venv_peers.py).

`build(checkpoint, target, venv)` runs, once (cached in `target`):

    <venv>/bin/python -m onnxruntime_genai.models.builder -i CHECKPOINT -o TARGET -p int4 -e cpu
                                                          -c TARGET/cache

(the builder's defaults for int4 on CPU: its own round-to-nearest MatMulNBits blocks, which are
not the GGUF's Q4_1 blocks: the weights are Q4_1, dequantized to float32, quantized again).

`Engine` is the child side: `og.Model` of the built folder with the decoder session at `threads`
intra-op threads and one inter-op thread (a config overlay; nothing else changed), greedy search
(`do_sample=False`). `python -m bench.ort_genai_peer MODEL_DIR THREADS SCRATCH` serves it.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from .venv_peers import run_in_venv, serve

MODULE = "bench.ort_genai_peer"
PACKAGE = "onnxruntime_genai"
PRECISION = "int4"


def build(checkpoint: Path, target: Path, venv: Path) -> Path:
    """The builder's int4 CPU model of `checkpoint` in `target`, built once."""
    if not (target / "genai_config.json").exists():
        builder = ["-m", "onnxruntime_genai.models.builder", "-i", str(checkpoint)]
        builder += ["-o", str(target), "-p", "int4", "-e", "cpu", "-c", str(target / "cache")]
        run_in_venv(venv, builder)
    return target


class Engine:
    """onnxruntime-genai's Generator on the built model (bench/venv_peers.py's calls)."""

    def __init__(self, model_dir: Path, threads: int):
        import onnxruntime_genai as og

        self.og = og
        config = og.Config(str(model_dir))
        options = {"intra_op_num_threads": threads, "inter_op_num_threads": 1}
        config.overlay(json.dumps({"model": {"decoder": {"session_options": options}}}))
        self.model = og.Model(config)
        self.pad = json.loads((model_dir / "genai_config.json").read_text())["model"][
            "pad_token_id"
        ]

    def _generator(self, batch_size: int, max_length: int, min_length: int = 0):
        params = self.og.GeneratorParams(self.model)
        params.set_search_options(
            do_sample=False, batch_size=batch_size, max_length=max_length, min_length=min_length
        )
        return self.og.Generator(self.model, params)

    def generate(self, ids: list[int], new_tokens: int) -> list[int]:
        total = len(ids) + new_tokens
        generator = self._generator(1, total, min_length=total)  # no end of sequence before
        generator.append_tokens(np.array([ids], dtype=np.int32))
        out = []
        while not generator.is_done():
            generator.generate_next_token()
            out.append(int(generator.get_next_tokens()[0]))
        if len(out) != new_tokens:
            raise RuntimeError(f"onnxruntime-genai made {len(out)} tokens, not {new_tokens}")
        return out

    def greedy(self, ids: list[int], max_new_tokens: int, stop_ids: list[int]) -> list[int]:
        generator = self._generator(1, len(ids) + max_new_tokens)
        generator.append_tokens(np.array([ids], dtype=np.int32))
        out = []
        while not generator.is_done():
            generator.generate_next_token()
            out.append(int(generator.get_next_tokens()[0]))
            if out[-1] in stop_ids:
                break
        return out

    def logits(self, ids: list[int]) -> np.ndarray:
        """The model's logits output after one prefill of all `ids`: (T, V)."""
        generator = self._generator(1, len(ids) + 1)
        generator.append_tokens(np.array([ids], dtype=np.int32))
        return np.asarray(generator.get_output("logits"))[0].astype(np.float32)  # (T, V)

    def batch(self, prompts: list[list[int]], new_tokens: int) -> dict:
        """All `prompts` in one Generator of `batch_size` len(prompts), right-padded with the
        model's pad token, as its own `Tokenizer.encode_batch` pads (the generator masks pad
        positions; left padding changes the short rows' tokens); every row's greedy tokens and
        the logits each was chosen from (`get_logits`, before each step)."""
        width = max(map(len, prompts))
        padded = np.array([p + [self.pad] * (width - len(p)) for p in prompts], dtype=np.int32)
        total = width + new_tokens
        generator = self._generator(len(prompts), total, min_length=total)
        generator.append_tokens(padded)  # (B, width)
        tokens, logits = [], []
        while not generator.is_done():
            logits.append(np.asarray(generator.get_logits())[:, -1])  # (B, V)
            generator.generate_next_token()
            tokens.append(generator.get_next_tokens().astype(int))  # (B,)
        return {
            "tokens": np.stack(tokens, axis=1).tolist(),  # (B, new_tokens)
            "logits": np.stack(logits, axis=1).astype(np.float32),  # (B, new_tokens, V)
        }

    def versions(self) -> dict:
        from importlib.metadata import version

        return {name: version(name) for name in ("onnxruntime-genai",)}


if __name__ == "__main__":
    serve(Engine)
