"""Scriptorium's runtime: load a model bundle and generate text (numpy, onnxruntime, tokenizers).

    >>> import runtime
    >>> runtime.GenerationConfig(max_new_tokens=8, do_sample=True, top_p=0.9, seed=0).mode
    'sample'

`runtime.load(path)` opens a bundle (docs/bundle.md) or an optimum-onnx export directory and
returns the class its task names: a `Generator` (`generate`, `stream`, `manifest`, `controls`)
for token models, or a `HierarchicalGenerator`, `MaskedLM` or `WordVectors`.

What is where: `loading` (`load`, `find_bundles`: the one module that knows every task);
`sessions` (the one place onnxruntime sessions are made: providers, threads, spinning, IO
binding); `manifest` (the typed, versioned manifest: its one reader); `bundle` (opening a
bundle, checksums); `outputs` (`GenerationOutput`, `StreamEvent`); `generator`, `models`,
`recurrent` (GRU encoder-decoders), `search`, `processors`, `sampling` (the top-k / top-p
kernels), `text`, `config` (token models); `parameters` (every decoding parameter, declared
once); `chat` (chat templates in a bounded sandbox, the chat methods); `alignment` (a seq2seq
model's attention over its source); `hierarchical`, `hierarchical_text`, `masked_lm`,
`word_vectors` (the other tasks); `structured` (output held to a JSON Schema); `scoring`
(`score`, `score_ids`: log-probabilities of given text); `memorisation`; `request_caps` (the
caps the app and serve put on a request); `text_generator` (`TextGenerator`, `ChatGenerator`,
`ServedGenerator`: what callers may call on a model that writes text).

Layer: the bottom one. runtime/ imports only numpy, onnxruntime, tokenizers, jinja2 (chat
templates), llguidance (`structured`: JSON Schema constrained decoding), onnx (`alignment`, at
first use) and the standard library, never torch, transformers or any other package of ours
(docs/DESIGN.md, "Layers").
"""

from . import sampling
from .bundle import BundleError, ChecksumError
from .config import GenerationConfig
from .generator import Generator
from .loading import load
from .outputs import GenerationOutput, Score, StreamEvent
from .sessions import providers_for
from .text_generator import ChatGenerator, ServedGenerator, TextGenerator

__all__ = [
    "BundleError",
    "ChecksumError",
    "GenerationConfig",
    "ChatGenerator",
    "GenerationOutput",
    "Generator",
    "ServedGenerator",
    "TextGenerator",
    "StreamEvent",
    "load",
    "providers_for",
    "Score",
    "sampling",
]
