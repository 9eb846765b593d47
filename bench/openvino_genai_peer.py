"""OpenVINO GenAI as a benchmark peer: OpenVINO's own C++ generation loop (`LLMPipeline`) on the
very int4 export that bench/openvino_peer.py builds, in a child process of the peers' virtual
environment (bench/venv_peers.py). optimum-intel's `generate` runs transformers' Python loop
around OpenVINO; this is the pipeline OpenVINO offers for serving LLMs.

`Engine` is the child side: `LLMPipeline(MODEL_DIR, "CPU", INFERENCE_NUM_THREADS=threads)`,
everything else at its defaults (its choice of backend and KV-cache precision included), greedy
(`do_sample=False`). It exposes no logits: `logits` is not offered (bench/fidelity.py does not
score it) and `batch` returns the tokens only. `python -m bench.openvino_genai_peer MODEL_DIR
THREADS SCRATCH` serves it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from . import openvino_peer
from .venv_peers import serve

MODULE = "bench.openvino_genai_peer"
PACKAGE = "openvino_genai"
PRECISION = "int4"


def build(checkpoint: Path, target: Path, venv: Path) -> Path:
    """bench/openvino_peer.py's export, in its own folder beside `target`; `target` is unused
    (the export, its tokenizer and detokenizer included, serves both engines)."""
    return openvino_peer.build(checkpoint, target.parent / f"openvino-{PRECISION}", venv)


class Engine:
    """OpenVINO GenAI's LLMPipeline on the export (bench/venv_peers.py's calls but `logits`)."""

    def __init__(self, model_dir: Path, threads: int):
        import openvino as ov
        import openvino_genai

        self.ov, self.genai = ov, openvino_genai
        self.pipe = openvino_genai.LLMPipeline(str(model_dir), "CPU", INFERENCE_NUM_THREADS=threads)

    def _generate(self, prompts: list[list[int]], pad: int, **options) -> list[list[int]]:
        """Greedy tokens for each of `prompts`, left-padded with `pad` under a 0 attention mask."""
        width = max(map(len, prompts))
        ids = np.array([[pad] * (width - len(p)) + p for p in prompts], dtype=np.int64)
        mask = np.array([[0] * (width - len(p)) + [1] * len(p) for p in prompts], dtype=np.int64)
        inputs = self.genai.TokenizedInputs(self.ov.Tensor(ids), self.ov.Tensor(mask))
        config = self.genai.GenerationConfig(do_sample=False, **options)
        return [list(map(int, tokens)) for tokens in self.pipe.generate(inputs, config).tokens]

    def generate(self, ids: list[int], new_tokens: int) -> list[int]:
        (out,) = self._generate([ids], 0, max_new_tokens=new_tokens, min_new_tokens=new_tokens)
        if len(out) != new_tokens:
            raise RuntimeError(f"OpenVINO GenAI made {len(out)} tokens, not {new_tokens}")
        return out

    def greedy(self, ids: list[int], max_new_tokens: int, stop_ids: list[int]) -> list[int]:
        (out,) = self._generate(
            [ids], 0, max_new_tokens=max_new_tokens, stop_token_ids=set(stop_ids)
        )
        return out

    def batch(self, prompts: list[list[int]], new_tokens: int) -> dict:
        """All `prompts` in one `generate` call (left-padded, attention mask 0 on the padding);
        every row's greedy tokens, no logits (the pipeline does not expose them)."""
        options = dict(max_new_tokens=new_tokens, min_new_tokens=new_tokens)
        return {"tokens": self._generate(prompts, 0, **options), "logits": None}

    def versions(self) -> dict:
        from importlib.metadata import version

        return {name: version(name) for name in ("openvino", "openvino-genai")}


if __name__ == "__main__":
    serve(Engine)
