"""OpenVINO as a benchmark peer, through optimum-intel: its int4 weight-compressed export of the
dequantized GGUF checkpoint, run by `OVModelForCausalLM` (OpenVINO's CPU plugin under
transformers' `generate`) in a child process of the peers' virtual environment
(bench/venv_peers.py).

`build(checkpoint, target, venv)` runs, once (cached in `target`):

    <venv>/bin/python -m optimum.commands.optimum_cli export openvino --model CHECKPOINT
        --task text-generation-with-past --weight-format int4 --group-size 32 TARGET

(that is `optimum-cli export openvino … --weight-format int4`: NNCF's data-free int4 weight
compression at optimum-intel's defaults but for the group size: the default, 128, does not
divide SmolLM2-135M's 576 input channels and NNCF refuses it, so groups of 32, the GGUF's and
onnxruntime-genai's block size. These are not the GGUF's Q4_1 blocks: the weights are Q4_1,
dequantized to float32, compressed again).

`Engine` is the child side: `OVModelForCausalLM.from_pretrained(TARGET)` with
`ov_config={"INFERENCE_NUM_THREADS": threads}` and torch at `threads` threads (for `generate`'s
own tensor work); everything else at OpenVINO's defaults for this CPU (its inference precision
and KV-cache precision hints included). Greedy: `do_sample=False`. `python -m
bench.openvino_peer MODEL_DIR THREADS SCRATCH` serves it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .venv_peers import run_in_venv, serve

MODULE = "bench.openvino_peer"
PACKAGE = "optimum.intel.openvino"
PRECISION = "int4"


def build(checkpoint: Path, target: Path, venv: Path) -> Path:
    """optimum-intel's int4 OpenVINO export of `checkpoint` in `target`, built once."""
    if not (target / "openvino_model.xml").exists():
        cli = ["-m", "optimum.commands.optimum_cli", "export", "openvino", "--model"]
        cli += [str(checkpoint), "--task", "text-generation-with-past"]
        run_in_venv(venv, [*cli, "--weight-format", "int4", "--group-size", "32", str(target)])
    return target


class Engine:
    """optimum-intel's OVModelForCausalLM on the export (bench/venv_peers.py's calls)."""

    def __init__(self, model_dir: Path, threads: int):
        import torch
        from optimum.intel import OVModelForCausalLM

        torch.set_num_threads(threads)
        self.torch = torch
        self.model = OVModelForCausalLM.from_pretrained(
            model_dir, ov_config={"INFERENCE_NUM_THREADS": str(threads)}
        )
        self.pad = self.model.config.eos_token_id

    def _generate(self, input_ids, attention_mask, **options):
        with self.torch.no_grad():
            return self.model.generate(
                input_ids=input_ids,
                attention_mask=attention_mask,
                do_sample=False,
                pad_token_id=self.pad,
                **options,
            )

    def generate(self, ids: list[int], new_tokens: int) -> list[int]:
        input_ids = self.torch.tensor([ids])
        out = self._generate(
            input_ids,
            self.torch.ones_like(input_ids),
            max_new_tokens=new_tokens,
            min_new_tokens=new_tokens,
        )
        return out[0, len(ids) :].tolist()

    def greedy(self, ids: list[int], max_new_tokens: int, stop_ids: list[int]) -> list[int]:
        input_ids = self.torch.tensor([ids])
        out = self._generate(
            input_ids,
            self.torch.ones_like(input_ids),
            max_new_tokens=max_new_tokens,
            eos_token_id=stop_ids,
        )
        return out[0, len(ids) :].tolist()

    def logits(self, ids: list[int]) -> np.ndarray:
        input_ids = self.torch.tensor([ids])
        with self.torch.no_grad():
            out = self.model(input_ids=input_ids, attention_mask=self.torch.ones_like(input_ids))
        return out.logits[0].float().numpy()  # (T, V)

    def batch(self, prompts: list[list[int]], new_tokens: int) -> dict:
        """All `prompts` in one `generate` call, left-padded (attention mask 0 on the padding);
        every row's greedy tokens and the logits each was chosen from."""
        width = max(map(len, prompts))
        input_ids = self.torch.tensor([[self.pad] * (width - len(p)) + p for p in prompts])
        mask = self.torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
        out = self._generate(
            input_ids,
            mask,
            max_new_tokens=new_tokens,
            min_new_tokens=new_tokens,
            output_logits=True,
            return_dict_in_generate=True,
        )
        return {
            "tokens": out.sequences[:, width:].tolist(),  # (B, new_tokens)
            "logits": self.torch.stack(out.logits, dim=1).float().numpy(),  # (B, new_tokens, V)
        }

    def versions(self) -> dict:
        from importlib.metadata import version

        return {name: version(name) for name in ("openvino", "optimum-intel", "nncf")}


if __name__ == "__main__":
    serve(Engine)
