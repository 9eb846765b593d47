"""`scriptorium export|train|bench|study|app|serve …`: run one layer's command-line module.

Each subcommand module exposes `main(argv) -> int`; heavy imports (torch, gradio) happen only
inside the chosen subcommand, so `scriptorium --help` stays fast.
"""

from __future__ import annotations

import importlib
import sys

COMMANDS = {
    "export": ("export.cli", "turn a Hugging Face checkpoint into an ONNX model bundle"),
    "train": ("train.cli", "every training recipe: data, tokenizers, models, adapters"),
    "bench": ("bench.cli", "benchmarks against transformers and optimum-onnx"),
    "study": ("scriptorium.study_cli", "seed 000/001 studies: masking, probes, BERT, vectors"),
    "fetch": (
        "convert.flagship",
        "fetch and convert the flagship (smollm2), a GGUF or an hf:// model",
    ),
    "app": ("app", "start the Gradio app"),
    "serve": ("serve.cli", "serve the models with an OpenAI-compatible API (one process or Ray)"),
}


def usage() -> str:
    lines = ["usage: scriptorium COMMAND [ARGS…]", "", "commands:"]
    lines += [f"  {name:<8} {help_text}" for name, (_, help_text) in COMMANDS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return 0
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        print(f"unknown command {command!r}\n\n{usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(COMMANDS[command][0])
    return module.main(rest) or 0
