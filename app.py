"""Scriptorium's Gradio app: `python app.py [--models DIR] [--share] [--host H] [--port P]`.

It loads every bundle under models/ (and any `--models` directories) and assembles the tabs,
which live in ui/. This file only parses arguments and wires things together.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ui.registry import ModelRegistry

HERE = Path(__file__).resolve().parent


def build(registry: ModelRegistry):
    import gradio as gr

    from ui import generate_tab

    with gr.Blocks(title="Scriptorium") as demo:
        gr.Markdown("# Scriptorium\nTransformer text generators, exported to ONNX, side by side.")
        generate_tab.build(registry)
    return demo


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", action="append", default=[], help="extra model directory")
    parser.add_argument("--share", action="store_true", help="create a public share link")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=7860)
    args = parser.parse_args(argv)
    registry = ModelRegistry.discover([HERE / "models", *map(Path, args.models)])
    demo = build(registry)
    demo.queue(default_concurrency_limit=2, max_size=64)
    demo.launch(server_name=args.host, server_port=args.port, share=args.share)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
