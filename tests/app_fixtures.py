"""A tiny models/ tree for the app's tests, and a helper that serves the app on a free port.

`build_models_tree(root)` writes, from tests/tiny_models.py checkpoints exported by export/:

    root/tiny-lm/fp32, root/tiny-lm/int8   GPT-2, `section` control (law, gospels)
    root/tiny-rewriter/fp32                BART, `length` (short/normal/long), `length_ratio`
    root/tiny-translator/fp32              Marian, training_data languages en → es

Control tokens are added to each checkpoint's tokenizer as special tokens (and the embedding
matrix grows to match) before export, as the real models do; the export writes each bundle's
`embeddings.npy`. Graphs are exported without the ORT optimizer (quicker; the app does not care).
The tree is built once per test session (`functools.cache`). `build_chat_model(root)` exports
tests/tiny_models.py's tiny Llama chat checkpoint (ChatML, <|im_end|>, a 128-token context) with
optimum to `root/onnx`, which the app finds as a chat model (fixture `chat_model_dir`).
Test modules import the `models_tree` fixture from here (and list it in `__all__`, as it is
used by name only).
"""

from __future__ import annotations

import functools
import json
import socket
import threading
import time
from pathlib import Path

import pytest

SECTION = {"law": "<|law|>", "gospels": "<|gospels|>"}
LENGTH = {"short": "<short>", "normal": "<normal>", "long": "<long>"}
RATIOS = [f"{r / 10:.1f}" for r in range(1, 21)]  # 0.1 … 2.0, as 004's value tokens
LENGTH_RATIO = {value: f"<ratio_{value}>" for value in RATIOS}

# (family, architecture, controls, training_data, precisions)
MODELS = [
    (
        "tiny-lm",
        "gpt2",
        {"section": {"kind": "choice", "values": SECTION, "description": "Bible section"}},
        {"corpus": "tiny test sentences"},
        ("fp32", "int8"),
    ),
    (
        "tiny-rewriter",
        "bart",
        {
            "length": {"kind": "choice", "values": LENGTH},
            "length_ratio": {"kind": "numeric", "values": LENGTH_RATIO},
        },
        {"corpus": "tiny test sentences", "source_language": "en", "target_language": "en"},
        ("fp32",),
    ),
    (
        "tiny-translator",
        "marian",
        {},
        {"corpus": "tiny test sentences", "source_language": "en", "target_language": "es"},
        ("fp32",),
    ),
]


def _checkpoint_with_controls(arch: str, out_dir: Path, controls: dict, card: dict) -> Path:
    """A tiny checkpoint whose tokenizer knows the control tokens as special tokens."""
    from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM, AutoTokenizer

    from tests.tiny_models import make_checkpoint

    make_checkpoint(arch, out_dir)
    (out_dir / "scriptorium_card.json").write_text(json.dumps(card))
    tokens = [token for spec in controls.values() for token in spec["values"].values()]
    if not tokens:
        return out_dir
    tokenizer = AutoTokenizer.from_pretrained(out_dir)
    tokenizer.add_special_tokens({"additional_special_tokens": tokens})
    auto = AutoModelForCausalLM if arch == "gpt2" else AutoModelForSeq2SeqLM
    model = auto.from_pretrained(out_dir)
    model.resize_token_embeddings(len(tokenizer), mean_resizing=False)
    # Clones, so that tensors tied in memory (BART's encoder/decoder embeddings and `shared`)
    # are each saved under their own name, as the checkpoint had them.
    state = {key: value.detach().clone() for key, value in model.state_dict().items()}
    model.save_pretrained(out_dir, state_dict=state)
    tokenizer.save_pretrained(out_dir)
    return out_dir


@functools.cache
def build_models_tree(root: Path) -> Path:
    """Export the tiny model families under `root` (once per process); return `root`."""
    from export import export_bundle

    for family, arch, controls, training_data, precisions in MODELS:
        card = {"name": family, "training_data": training_data, "license": "MIT"}
        checkpoint = root.parent / f"{root.name}-checkpoints" / family
        _checkpoint_with_controls(arch, checkpoint, controls, card)
        for precision in precisions:
            bundle = root / family / precision
            export_bundle(
                checkpoint, bundle, precision, optimize=False, controls=controls, progress=False
            )
    return root


@pytest.fixture(scope="session")
def models_tree(tmp_path_factory) -> Path:
    """The tiny models tree, built once per session (import this fixture into a test module)."""
    return build_models_tree(tmp_path_factory.getbasetemp() / "app-models")


@functools.cache
def build_chat_model(root: Path) -> Path:
    """The tiny chat model's optimum export directory under `root` (once per process)."""
    from optimum.exporters.onnx import main_export

    from tests.tiny_models import make_chat_checkpoint

    checkpoint = make_chat_checkpoint(root / "checkpoint")
    main_export(
        str(checkpoint), output=root / "onnx", task="text-generation-with-past", do_validation=False
    )
    return root / "onnx"


@pytest.fixture(scope="session")
def chat_model_dir(tmp_path_factory) -> Path:
    """The tiny chat model's export directory, built once per session."""
    return build_chat_model(tmp_path_factory.getbasetemp() / "chat-model")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def serve_in_thread(specs, api_key=None):
    """The one-process server on a free port in a daemon thread: (base URL, gateway, stop)."""
    import uvicorn

    from serve import one_process

    gateway = one_process.build_gateway(specs, api_key=api_key)
    port = free_port()
    config = uvicorn.Config(
        one_process.http, host="127.0.0.1", port=port, timeout_graceful_shutdown=1
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)

    def stop():
        server.should_exit = True
        thread.join(timeout=10)

    return f"http://127.0.0.1:{port}/v1", gateway, stop


class SlowGenerator:
    """A `runtime.Generator` stand-in whose stream waits `delay` seconds per event.

    The tiny models generate a hundred tokens in a blink; tests that watch text grow, or press
    Stop mid-generation, need generation to take a while. Everything else is delegated. A test
    that needs no slowness sets `delay` to 0 for its own streams.
    """

    def __init__(self, generator, delay: float):
        self._generator = generator
        self.delay = delay
        self._lock = threading.Lock()
        self.events = 0  # stream events produced so far, over all streams
        self.open_streams = 0  # streams started and not yet finished or closed

    def __getattr__(self, name):
        return getattr(self._generator, name)

    def _count(self, attribute: str, change: int) -> None:
        with self._lock:
            setattr(self, attribute, getattr(self, attribute) + change)

    def stream(self, prompt, config=None, controls=None):
        return self._slowed(self._generator.stream(prompt, config, controls))

    def stream_chat(self, messages, config=None, controls=None):
        return self._slowed(self._generator.stream_chat(messages, config, controls))

    def _slowed(self, inner):
        self._count("open_streams", 1)
        try:
            for event in inner:
                time.sleep(self.delay)
                self._count("events", 1)
                yield event
        finally:
            inner.close()
            self._count("open_streams", -1)


def slow_load(path, threads=None, delay: float = 0.05) -> SlowGenerator:
    """`runtime.load` whose generator streams one event per `delay` seconds (a loader for
    serve.deployments.ModelSpec, so a test can stop a server-side generation midway)."""
    import runtime

    return SlowGenerator(runtime.load(path, threads=threads), delay)


def _tiny_chat_app(chat_model_dir, delay: float | None = None):
    """The app with the tiny chat model alone (streaming one event per `delay` seconds when
    given), served on a free local port: yields its URL."""
    import app
    import runtime
    from ui.registry import ModelRegistry

    registry = ModelRegistry({})
    model = runtime.load(chat_model_dir)
    registry.add(
        "tiny-chat", chat_model_dir, model if delay is None else SlowGenerator(model, delay)
    )
    demo = app.build(registry)
    yield serve(demo)
    demo.close()


@pytest.fixture(scope="module")
def chat_app_url(chat_model_dir):
    """The app with the tiny chat model alone, served on a free local port: its URL."""
    yield from _tiny_chat_app(chat_model_dir)


@pytest.fixture(scope="module")
def slow_chat_app_url(chat_model_dir):
    """`chat_app_url` with the model streaming one token per 0.4 s, so that speed figures are
    long enough to compare with a stopwatch."""
    yield from _tiny_chat_app(chat_model_dir, delay=0.4)


def serve(demo) -> str:
    """Launch `demo` (queue, look and light page as `python app.py` has them) on a free local
    port without blocking; return its URL. Stop it with `demo.close()`."""
    from ui import light_page
    from ui.checks import queue_settings
    from ui.style import launch_kwargs

    port = free_port()
    demo.queue(**queue_settings())
    demo.launch(
        server_name="127.0.0.1",
        server_port=port,
        prevent_thread_lock=True,
        quiet=True,
        app_kwargs={"middleware": light_page.middleware()},
        **launch_kwargs(),
    )
    return f"http://127.0.0.1:{port}/"


def registry_with_slow_model(root: Path, delay: float = 0.05):
    """The registry of the tree at `root`, plus "slow-lm (fp32)": tiny-lm fp32 streaming one
    event per `delay` seconds. Returns (registry, the SlowGenerator)."""
    import runtime
    from ui.registry import ModelRegistry

    registry = ModelRegistry.discover([root])
    path = registry.paths["tiny-lm (fp32)"]
    slow = SlowGenerator(runtime.load(path), delay)
    registry.add("slow-lm (fp32)", path, slow)
    return registry, slow
