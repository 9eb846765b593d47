"""Scriptorium's runtime: load a model bundle and generate text (numpy, onnxruntime, tokenizers).

    >>> import runtime
    >>> runtime.GenerationConfig(max_new_tokens=8, do_sample=True, top_p=0.9, seed=0).mode
    'sample'

`runtime.load(path)` opens a bundle (docs/bundle.md) or an optimum-onnx export directory and
returns a `Generator` (`generate`, `stream`, `manifest`, `controls`). `runtime.sampling` holds
the top-k / top-p kernels. Nothing here imports torch or transformers.
"""

from . import sampling
from .bundle import BundleError, ChecksumError
from .config import GenerationConfig
from .generator import Generator
from .loading import load
from .outputs import GenerationOutput, StreamEvent
from .sessions import providers_for

__all__ = [
    "BundleError",
    "ChecksumError",
    "GenerationConfig",
    "GenerationOutput",
    "Generator",
    "StreamEvent",
    "load",
    "providers_for",
    "sampling",
]
