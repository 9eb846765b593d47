"""Scriptorium's Gradio app: `python app.py [--models DIR | --backend URL] [--device D] [--share]`.

It finds every bundle under models/, the flagship SmolLM2-135M-Instruct (convert/flagship.py)
and any `--models` directories or GGUF files (converted once into a cache), or with `--backend` the
models of a `scriptorium serve` server, which then runs every generation (ui/remote.py). It
assembles the tabs, which live in ui/ (one module each), and serves them with a bounded queue,
behind a request-body limit, from a temporary folder of its own (ui/server.py). A file that
cannot be used (a model's manifest, a GGUF that does not convert, the votes database) never stops
it: each is logged in one line and listed on the Models tab, and the rest works. docs/APP.md
describes the tabs, their API endpoints and limits."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import runtime
from runtime.engine import parse_kv_budget
from ui.registry import ModelRegistry, reason

HERE = Path(__file__).resolve().parent
TITLE = "# Scriptorium\nTransformer text generators, exported to ONNX, served without torch."
FLAGSHIP = "the flagship"  # its entry among the models the app could not use


def build(registry: ModelRegistry, store=None, private_prefix_cache: bool | None = None):
    """The app's page for `registry`'s models; `store`: the arena's ui.votes.VoteStore (default:
    the one at `votes.default_path()`, opened and checked now); `private_prefix_cache`: salt each
    visitor's prefix cache (ui/visitor.py; None: `$SCRIPTORIUM_PRIVATE_PREFIX_CACHE`)."""
    import gradio as gr

    from convert.flagship import gguf_support
    from ui import (
        arena,
        chat_tab,
        compare_tab,
        embeddings_tab,
        generate_tab,
        links,
        masked_lm_tab,
        models_tab,
        paraphrase_tab,
        rewrite_tab,
        style,
        translate_tab,
        visitor,
        votes,
        widgets,
    )

    visitor.configure(private_prefix_cache)
    store = store or votes.VoteStore()
    problems = {**registry.problems}
    if store.problem:
        problems[f"votes database {store.path}"] = store.problem

    with gr.Blocks(title="Scriptorium") as demo:
        gr.Markdown(TITLE, elem_id="title")
        if not registry.names:
            gr.Markdown(models_tab.NO_MODELS, elem_classes="notice")
        links.notice()
        with gr.Tabs() as tabs:
            # first: with a chat model, or saying how to get the flagship when it is missing
            chat_tab.build(registry, missing=problems.get(FLAGSHIP))
            generate_tab.build(registry)
            compare_tab.build(registry)
            if registry.chat_models():  # the arena: a tab of its own, so that visitors find it
                with gr.Tab("Arena", id="arena") as arena_tab:
                    arena.build(registry, store=store, tab=arena_tab)
            rewrite_tab.build(registry)
            translate_tab.build(registry)
            paraphrase_tab.build(registry)
            embeddings_tab.build(registry)
            masked_lm_tab.build(registry)
            models_tab.build(registry, problems, gguf_support())
        links.attach(demo, tabs)
        demo.load(None, js=widgets.LIMIT_NOTES, api_visibility="private")  # runs in the page only
        demo.load(None, js=style.LABEL_MENU, api_visibility="private")
    return demo


# Deprecation warnings Gradio 6.17.3 itself causes on every request (its routes read Starlette's
# renamed HTTP_422 constant) and every table or chart it sends (pandas 3 options it still uses):
# not ours to fix, and newer Gradio, which the transformers pin keeps us from, no longer does.
UPSTREAM_WARNINGS = (
    "'HTTP_422_UNPROCESSABLE_ENTITY' is deprecated",
    "'future.no_silent_downcasting' is deprecated",
    "The copy keyword is deprecated",
)


def quiet_upstream_warnings() -> None:
    """Silence UPSTREAM_WARNINGS (raised inside gradio only), so the console shows what matters."""
    import warnings

    for message in UPSTREAM_WARNINGS:
        warnings.filterwarnings("ignore", message=message, module="gradio")


def usable_roots(models: list[str]) -> tuple[list[Path], dict[str, str]]:
    """The model directories to look in: the flagship's and each `--models` entry's (a GGUF is
    converted once into the cache, convert/flagship.py), and {entry: why} for each entry that
    could not be used, whatever it holds (one line each)."""
    from convert.flagship import MISSING_FLAGSHIP, model_roots, ships_flagship

    roots, unusable = [], {}
    for entry in [None, *models]:  # None: the flagship alone, unless models/ ships it (a Space)
        if entry is None and ships_flagship(HERE / "models"):
            continue
        try:
            found = model_roots(
                [] if entry is None else [entry], flagship=entry is None, faithful=entry is None
            )
        except Exception as error:  # a bad file must not stop the app: the Models tab says why
            unusable[entry or FLAGSHIP] = reason(error, entry)
            continue
        if entry is None and not found:  # nowhere to be had: the Chat tab says how to get it
            unusable[FLAGSHIP] = MISSING_FLAGSHIP
        roots += found
    return roots, unusable


def main(argv: list[str] | None = None) -> int:
    from ui import server
    from ui.checks import queue_settings
    from ui.style import launch_kwargs

    quiet_upstream_warnings()

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--models", action="append", default=[], help="extra model directory or GGUF file"
    )
    parser.add_argument(
        "--backend", default=None, help="a `scriptorium serve` URL, e.g. http://HOST:8000/v1"
    )
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda if available)")
    parser.add_argument("--share", action="store_true", help="create a public share link")
    parser.add_argument(
        "--private-prefix-cache",
        action="store_true",
        default=None,
        help="keep each visitor's prefix cache apart (default: $SCRIPTORIUM_PRIVATE_PREFIX_CACHE=1 "
        "turns it on; docs/APP.md)",
    )
    parser.add_argument(
        "--no-batching",
        dest="batching",
        action="store_false",
        help="one decode loop per generation (default: batch-invariant causal LMs batch "
        "concurrent generations step by step, runtime/engine.py)",
    )
    parser.add_argument(
        "--no-spinning",
        dest="spinning",
        action="store_false",
        help="no onnxruntime thread spins between operators (default: the sessions that an "
        "engine loop alone calls do; docs/RUNTIME.md, Spinning)",
    )
    parser.add_argument(
        "--kv-budget",
        default=None,
        help="KV cache of each batching model's batch and prefix cache, bytes or with K, M, G "
        "(default 2G; docs/APP.md)",
    )
    # None: Gradio's default (127.0.0.1:7860) unless GRADIO_SERVER_NAME/PORT say otherwise, as
    # on a Hugging Face Space, which sets GRADIO_SERVER_NAME=0.0.0.0.
    parser.add_argument("--host", default=None, help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=None, help="port to listen on (default 7860)")
    parser.add_argument(
        "--max-body-bytes",
        type=int,
        default=server.MAX_BODY_BYTES,
        help=f"largest request body (default {server.MAX_BODY_BYTES})",
    )
    args = parser.parse_args(argv)
    if args.max_body_bytes < 1:
        parser.error(f"`--max-body-bytes` must be >= 1, got {args.max_body_bytes}")
    try:
        kv_budget = parse_kv_budget(args.kv_budget)
    except ValueError as error:
        parser.error(str(error))
    server.private_temp_dir()
    sys.stderr = server.BoundedLines(sys.stderr)
    if args.backend:
        from ui.remote import RemoteRegistry

        registry = RemoteRegistry(args.backend)  # the server chooses its devices
    else:
        try:
            providers = runtime.providers_for(args.device)  # docs/GPU.md
        except ValueError as error:
            parser.error(str(error))
        roots, unusable = usable_roots(args.models)
        registry = ModelRegistry.discover(
            [HERE / "models", *roots],
            providers,
            batching=None if args.batching else False,
            spinning=None if args.spinning else False,
            kv_budget=kv_budget,
        )
        for name, why in unusable.items():
            registry.skip(name, why)
    demo = build(registry, private_prefix_cache=args.private_prefix_cache).queue(**queue_settings())
    demo.launch(
        server_name=args.host,
        server_port=args.port,
        share=args.share,
        prevent_thread_lock=True,
        **launch_kwargs(),
        **server.launch_settings(args.max_body_bytes),
    )
    registry.preload()  # after the page is up, so loading models does not delay it
    demo.block_thread()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
