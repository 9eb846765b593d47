"""The one place that creates onnxruntime sessions: execution providers, threads, spinning, and
whether a session's outputs stay on its device (IO binding).

Every runtime class (`Generator`, `HierarchicalGenerator`, `MaskedLM`), the exporters' parity
checks and bench/ build their sessions here, so they agree on the options:

- providers: `available_providers(None)` is CUDA then CPU when onnxruntime-gpu sees a GPU, else
  CPU alone; a provider this onnxruntime does not offer raises `ValueError` (onnxruntime itself
  would only warn and silently run on CPU). `providers_for("cpu" | "cuda")` names them by device.
- threads: `intra_op_num_threads` (default: every core), one inter-op thread, every graph
  optimization on.
- spinning: whether worker threads spin between operators instead of sleeping (`runtime.load`'s
  docstring says when that pays).
- IO binding: `io_binding_for(session, requested)`, on by default with CUDA (docs/GPU.md).
- sharing: `shared_session` gives every caller in the process the same session of a graph
  (with the same settings) while any of them holds it: the LoRA slot graph that every adapter
  bundle of one base runs on (runtime/adapters.py).

Does not cover: running the graphs (runtime/models.py) or picking a bundle (runtime/loading.py).
"""

from __future__ import annotations

import os
import threading
import weakref
from pathlib import Path

import onnxruntime as ort

_shared: weakref.WeakValueDictionary = weakref.WeakValueDictionary()  # key -> live session
_shared_lock = threading.Lock()

DEVICE_PROVIDERS = {
    "cpu": ["CPUExecutionProvider"],
    # Operators CUDA lacks (e.g. fp32 GroupQueryAttention) fall back to the CPU provider.
    "cuda": ["CUDAExecutionProvider", "CPUExecutionProvider"],
}


def providers_for(device: str | None) -> list[str]:
    """The execution providers for `device` ("cpu" or "cuda"; None: `load`'s default), checked
    as `load` checks them.

    >>> providers_for("cpu")
    ['CPUExecutionProvider']
    """
    if device is None:
        return available_providers()
    if device not in DEVICE_PROVIDERS:
        raise ValueError(f"`device` must be one of {sorted(DEVICE_PROVIDERS)}, got {device!r}")
    return available_providers(DEVICE_PROVIDERS[device])


def available_providers(requested: list[str] | None = None) -> list[str]:
    """`requested` (in its order of preference) once onnxruntime is known to offer each one;
    by default CUDA then CPU when onnxruntime-gpu sees a GPU, else CPU alone.

    A provider this onnxruntime build does not offer raises `ValueError` naming those it does
    (onnxruntime itself would only warn and silently run on CPU).
    """
    offered = ort.get_available_providers()
    if requested is None:
        cuda = "CUDAExecutionProvider" in offered
        return list(DEVICE_PROVIDERS["cuda" if cuda else "cpu"])
    if isinstance(requested, str) or not requested:
        raise ValueError(f"`providers` must be a non-empty list of names, got {requested!r}")
    for provider in requested:
        if provider not in offered:
            raise ValueError(
                f"`providers` must name providers this onnxruntime offers ({offered}), "
                f"got {provider!r}"
            )
    return list(requested)


def session_options(threads: int | None = None, spinning: bool = False) -> ort.SessionOptions:
    """Options every session here is made with: `threads` intra-op threads (None: every core),
    one inter-op thread, all graph optimizations, worker threads spinning only if asked."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = threads or os.cpu_count() or 1
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "1" if spinning else "0")
    # Spinning threads wait for the next operator of a call, not for the next call: they stop
    # when a call returns, and leave the cores to whatever runs between calls.
    options.add_session_config_entry("session.force_spinning_stop", "1" if spinning else "0")
    return options


def create_session(
    model: str | os.PathLike | bytes,
    providers: list[str] | None = None,
    threads: int | None = None,
    spinning: bool = False,
    profile_prefix: str | os.PathLike | None = None,
    errors_only: bool = False,
) -> ort.InferenceSession:
    """A session for `model` (a graph file, or its serialized bytes) with `session_options`;
    `providers` are checked by `available_providers` (None: its default). `profile_prefix`
    turns onnxruntime's profiler on, writing its JSON under that file prefix. `errors_only`
    logs onnxruntime's errors but not its warnings (export/parity.py's reference graphs, whose
    unused-initializer warnings say nothing about the bundle)."""
    options = session_options(threads, spinning)
    if errors_only:
        options.log_severity_level = 3
    if profile_prefix is not None:
        options.enable_profiling = True
        options.profile_file_prefix = str(profile_prefix)
    source = model if isinstance(model, bytes) else str(Path(model))
    return ort.InferenceSession(
        source, sess_options=options, providers=available_providers(providers)
    )


def shared_session(
    model: str | os.PathLike,
    providers: list[str] | None = None,
    threads: int | None = None,
    spinning: bool = False,
) -> ort.InferenceSession:
    """The process's session of the graph file `model` with these settings, created on first use
    and kept while anything holds it.

    Made for LoRA slot graphs, whose slot inputs are initializers that are also graph inputs:
    onnxruntime warns about each one at creation, so these sessions log errors only.
    """
    providers = available_providers(providers)
    key = (str(Path(model).resolve()), tuple(providers), threads, bool(spinning))
    with _shared_lock:
        session = _shared.get(key)
        if session is None:
            options = session_options(threads, spinning)
            options.log_severity_level = 3  # errors only: see the docstring
            session = ort.InferenceSession(str(model), sess_options=options, providers=providers)
            _shared[key] = session
        return session


def io_binding_for(session: ort.InferenceSession, requested: bool | None) -> bool:
    """Whether `session`'s outputs should stay on its device between calls: `requested`, or by
    default yes exactly when the session runs on CUDA (on CPU numpy arrays are already in
    place)."""
    if requested is not None:
        return requested
    return "CUDAExecutionProvider" in session.get_providers()
