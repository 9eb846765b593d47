"""The app's models: say what each bundle is for, and keep one loaded Generator per bundle.

Bundles are found on disk by `runtime.loading.find_bundles` (a bundle, an optimum export, or a
family of bundles, one per precision: `models/bible-lm/int8`, `models/bible-lm/fp32`), which
gives each a display name "family (precision)". What a model is for is read from its manifest,
never from its name (docs/APP.md, "How models are chosen"):

- generation: causal LMs and seq2seq models (tasks "causal-lm", "seq2seq"); causal LMs first,
  those with controls before those without;
- rewriting: seq2seq models with a `length_ratio` or `length` control, or whose training_data
  names the same source and target language (a rewrite, not a translation: seed 001's GRUs,
  which have no length control); `length_ratio` first, then `length`, then those without;
- translation: seq2seq models, except those trained on one language to the same (they rewrite,
  and the Rewrite tab has them); those whose training_data names two different languages
  (`source_language`/`target_language`, or `pair` "en-es") first, English → Spanish first of all,
  then those that name no languages (they may translate; nothing says otherwise);
- embeddings: models whose manifest names an `embeddings` file;
- paraphrase: "hierarchical-lm" models with an `autoencoder_decoder` graph.
- masked LMs: task "fill-mask" (the Masked LM tab), base before large (fewer parameters first);
- word vectors: task "word-vectors" (static vectors, the Embeddings tab's word2vec section).
- chat: causal LMs whose manifest has a chat template (`runtime.chat.is_chat_manifest`, what
  `Generator.is_chat_model` says), for the Chat tab, the arena and the Paraphrase tab's row.
Within a kind, int8 comes before fp32 before int4 (fast first). Generators are loaded once and
shared by all users (sessions are thread-safe). A model whose manifest cannot be read or holds
fields of the wrong kind, whatever the file holds, is left out and kept in `problems` with the
reason (the Models tab lists them; `skip` also logs one line), so one bad file never stops the
app. This module builds no UI.
"""

from __future__ import annotations

import base64
import logging
import mimetypes
import re
import threading
from collections.abc import Mapping
from pathlib import Path

import numpy as np

import runtime
from runtime.bundle import read_manifest
from runtime.chat import is_chat_manifest
from runtime.loading import find_bundles
from runtime.manifest import Manifest
from runtime.masked_lm import MaskedLM
from runtime.text_generator import TextGenerator
from runtime.word_vectors import WordVectors, load_matrix

from . import safe_text
from .embeddings import EmbeddingSpace

PRECISION_ORDER = ("int8", "fp32", "int4")
PAIR = re.compile(r"^\s*([A-Za-z_]+)\s*(?:-|→|->|_|2)\s*([A-Za-z_]+)\s*$")
LENGTH_CONTROLS = ("length_ratio", "length")
GENERATION_TASKS = ("causal-lm", "seq2seq", "hierarchical-lm")
LOG = logging.getLogger("scriptorium.app")


def check_fields(manifest: Manifest) -> None:
    """ValueError unless the manifest's `generation_defaults` make a valid GenerationConfig (the
    manifest's parser checks each section's kinds; this checks the settings' ranges)."""
    try:  # the tabs start from these settings
        runtime.GenerationConfig.from_dict(manifest.generation_defaults.given()).validate()
    except (TypeError, ValueError) as error:
        raise ValueError(f"`generation_defaults`: {error}") from error


def reason(error: BaseException, path=None, limit: int = 300) -> str:
    """Why a file could not be used, on one line of at most `limit` characters, starting with
    `path` unless the message names it.

    >>> reason(TypeError("bad  thing"), "/m")
    '/m: TypeError: bad thing'
    """
    text = " ".join(str(error).split())
    if not isinstance(error, (ValueError, OSError)) or not text:
        text = f"{type(error).__name__}: {text}".rstrip(": ")
    if path is not None and str(path) not in text:
        text = f"{path}: {text}"
    return text if len(text) <= limit else text[: limit - 1] + "…"


def languages(manifest: Manifest) -> tuple[str, str] | None:
    """(source, target) language codes from the manifest's `training_data`, if it names them
    (`source_language` and `target_language`, or a `pair` such as "en-es")."""
    source, target = manifest.source_language, manifest.target_language
    if source and target:
        return source.lower(), target.lower()
    match = PAIR.match(manifest.language_pair or "")
    return (match[1].lower(), match[2].lower()) if match else None


MARKDOWN_IMAGE = re.compile(r"!\[([^\]]*)\]\(([^)\s]+)\)")


def inline_images(markdown: str, read) -> str:
    """`markdown` with each image whose target `read(target)` returns bytes for (a file of the
    bundle) replaced by a `data:` URI, so the card's images render wherever it is shown; other
    images (absolute URLs, missing files) are left as they are.

    >>> inline_images("![plot](a.png) ![web](https://x/y.png)", {"a.png": b"PNG"}.get)
    '![plot](data:image/png;base64,UE5H) ![web](https://x/y.png)'
    """

    def inline(match):
        alt, target = match.groups()
        kind = mimetypes.guess_type(target)[0]
        data = read(target) if kind and kind.startswith("image/") else None
        if data is None:
            return match.group(0)
        return f"![{alt}](data:{kind};base64,{base64.b64encode(data).decode()})"

    return MARKDOWN_IMAGE.sub(inline, markdown)


def _bundle_file(folder: Path, target: str) -> bytes | None:
    """The bytes of `target` if it names a file inside `folder` (no URL, no escaping it)."""
    if ":" in target or target.startswith("/"):
        return None
    path = (folder / target).resolve()
    if not path.is_file() or folder.resolve() not in path.parents:
        return None
    return path.read_bytes()


class ModelRegistry:
    def __init__(
        self,
        paths: dict[str, Path],
        providers: list[str] | None = None,
        batching: bool | None = None,
        spinning: bool | None = None,
        kv_budget: int | None = None,
    ):
        # onnxruntime execution providers every model is loaded with (None: runtime.load's default)
        self.providers = providers
        # runtime.load's `batching`: None batches concurrent requests of batch-invariant causal
        # LMs (runtime/engine.py), False never
        self.batching = batching
        # runtime.load's `spinning`: None spins the sessions that an engine loop alone calls,
        # False none (docs/RUNTIME.md, "Spinning")
        self.spinning = spinning
        # runtime.load's `kv_budget`: bytes of KV cache each engine's batch and prefix cache
        # hold together (the app's --kv-budget; None: runtime/engine.py's default)
        self.kv_budget = kv_budget
        self.paths: dict[str, Path] = {}  # display name -> bundle directory
        self.problems: dict[str, str] = {}  # display name (or file) -> why it is not offered
        self._manifests: dict[str, Manifest] = {}
        for name, path in paths.items():
            try:
                manifest = read_manifest(path, verify=False)
                check_fields(manifest)
            except Exception as error:  # whatever a file holds, the others are offered
                self.skip(name, reason(error, path))
                continue
            self._manifests[name] = manifest
            self.paths[name] = path
        # a TextGenerator, or a fill-mask / word-vectors model
        self._loaded: dict[str, TextGenerator | MaskedLM | WordVectors] = {}
        self._spaces: dict[tuple, object] = {}  # EmbeddingSpace or WordVectors per key
        self._lock = threading.Lock()

    @classmethod
    def discover(
        cls,
        roots,
        providers=None,
        batching: bool | None = None,
        spinning: bool | None = None,
        kv_budget: int | None = None,
    ) -> ModelRegistry:
        paths = {name: path for name, _, path in find_bundles(roots)}
        return cls(paths, providers, batching, spinning, kv_budget)

    def skip(self, name: str, why: str) -> None:
        """Leave `name` out, listed in `problems` with `why` (one line), and log that line."""
        self.problems[name] = why
        LOG.warning("model %s not offered: %s", name, why)

    def add(self, name: str, path: Path, generator: TextGenerator | None = None) -> None:
        """Offer the bundle at `path` as `name`, optionally with a generator already loaded
        (e.g. one wrapped for instrumentation) that `get` will return instead of loading."""
        self._manifests[name] = read_manifest(path, verify=False)
        self.paths[name] = Path(path)
        if generator is not None:
            self._loaded[name] = generator

    @property
    def names(self) -> list[str]:
        return list(self.paths)

    def manifest(self, name: str) -> Manifest:
        """The model's manifest, read without loading the model (checksums are checked on load)."""
        return self._manifests[self._check(name)]

    def card(self, name: str) -> str:
        """The bundle's README.md (its model card, with its images inlined), or a line saying
        it has none."""
        folder = self.paths[self._check(name)]
        path = folder / "README.md"
        if not path.exists():
            return self.no_card(name)
        try:
            text = path.read_text()
        except (OSError, ValueError) as error:  # a folder, unreadable, not UTF-8
            return f"*{name}'s model card (README.md) could not be read: {reason(error)}*"
        # whoever made the bundle wrote the card (or the GGUF importer, from a file's metadata)
        return safe_text.card(inline_images(text, lambda target: _bundle_file(folder, target)))

    @staticmethod
    def no_card(name: str) -> str:
        return f"*{name} has no model card (README.md).*"

    # ---- what each model is for ---------------------------------------------------------------

    def _ordered(self, names) -> list[str]:
        def rank(name):
            precision = self.manifest(name).precision
            return PRECISION_ORDER.index(precision) if precision in PRECISION_ORDER else 9

        return sorted(names, key=rank)

    def generators(self) -> list[str]:
        def rank(name):
            manifest = self.manifest(name)
            return (manifest.task != "causal-lm", not manifest.controls)

        found = [n for n in self.names if self.manifest(n).task in GENERATION_TASKS]
        return sorted(self._ordered(found), key=rank)

    def causal_lms(self) -> list[str]:
        return [n for n in self.generators() if self.manifest(n).task == "causal-lm"]

    def chat_models(self) -> list[str]:
        """Chat models, the base models before fine-tunes (adapters) so that tabs open on one,
        and conversions with float activations first among them: the flagship's faithful
        conversion agrees with the original model far more often (docs/GGUF.md)."""

        def rank(name):
            manifest = self.manifest(name)
            level = manifest.export.quantization_report.accuracy_level
            return (manifest.adapter is not None, level != 0)

        found = self._ordered(n for n in self.names if is_chat_manifest(self.manifest(n)))
        return sorted(found, key=rank)

    def masked_lms(self) -> list[str]:
        def size(name):
            return self.manifest(name).export.parameters or 0

        found = [n for n in self.names if self.manifest(n).task == "fill-mask"]
        return sorted(self._ordered(found), key=size)

    def word_vector_sets(self) -> list[str]:
        return [n for n in self.names if self.manifest(n).task == "word-vectors"]

    def length_controls(self, name: str) -> list[str]:
        """The model's length controls (`length_ratio`, `length`) in that order; none for a
        model that rewrites at the length it chooses."""
        return [control for control in LENGTH_CONTROLS if control in self.controls_of(name)]

    def _same_language(self, name: str) -> bool:
        pair = languages(self.manifest(name))
        return pair is not None and pair[0] == pair[1]

    def rewriters(self) -> list[str]:
        def rank(name):  # length_ratio, then length, then no length control
            controls = self.length_controls(name)
            return LENGTH_CONTROLS.index(controls[0]) if controls else len(LENGTH_CONTROLS)

        found = [
            n
            for n in self.names
            if self.manifest(n).task == "seq2seq"
            and (self.length_controls(n) or self._same_language(n))
        ]
        return sorted(self._ordered(found), key=rank)

    def translators(self) -> list[str]:
        def rank(name):
            pair = languages(self.manifest(name))
            return (pair is None, pair != ("en", "es"))

        found = [
            n
            for n in self.names
            if self.manifest(n).task == "seq2seq" and not self._same_language(n)
        ]
        return sorted(self._ordered(found), key=rank)

    def paraphrasers(self) -> list[str]:
        return self._ordered(
            n
            for n in self.names
            if self.manifest(n).task == "hierarchical-lm"
            and "autoencoder_decoder" in self.manifest(n).graphs
        )

    def with_embeddings(self) -> list[str]:
        return self._ordered(n for n in self.names if self.manifest(n).embeddings)

    def controls_of(self, name: str) -> Mapping:
        """The manifest's control specs ({name: {kind, values, …}}) without loading the model."""
        return self.manifest(name).controls

    # ---- loading ------------------------------------------------------------------------------

    def _check(self, name) -> str:
        if not self.paths:
            raise ValueError(
                "no models are installed: put a bundle under models/ or start the app with "
                "--models DIR"
            )
        if not isinstance(name, str) or name not in self.paths:
            raise ValueError(f"`model` must be one of {self.names}, got {name!r}")
        return name

    def get(self, name: str) -> TextGenerator | MaskedLM | WordVectors:
        """The loaded model for `name`: a `runtime.TextGenerator` (a runtime.Generator, or a
        runtime.hierarchical.HierarchicalGenerator), or for a "fill-mask" / "word-vectors"
        bundle a runtime.masked_lm.MaskedLM / runtime.word_vectors.WordVectors (loaded once,
        shared by all users)."""
        self._check(name)
        with self._lock:
            if name not in self._loaded:
                self._loaded[name] = self._load(name)
            return self._loaded[name]

    def _load(self, name: str) -> TextGenerator | MaskedLM | WordVectors:
        return runtime.load(
            self.paths[name],
            providers=self.providers,
            batching=self.batching,
            spinning=self.spinning,
            kv_budget=self.kv_budget,
        )

    def _embedding_matrix(self, name: str, gen) -> np.ndarray:
        return load_matrix(self.paths[name], gen.manifest)

    def embedding_space(self, name: str, leading_space: bool = True) -> EmbeddingSpace:
        """The model's input embeddings with its tokenizer (ValueError if it ships none)."""
        gen = self.get(name)
        key = (name, bool(leading_space))
        with self._lock:
            if key not in self._spaces:
                same = self._spaces.get((name, not leading_space))
                matrix = same.matrix if same else self._embedding_matrix(name, gen)
                self._spaces[key] = EmbeddingSpace(matrix, gen.tokenizer, bool(leading_space))
            return self._spaces[key]

    def word_space(self, name: str):
        """`name`'s words as runtime.word_vectors.WordVectors: a word-vectors bundle itself, or a
        model's input embeddings restricted to its " word" tokens (study.word_analogies)."""
        from study.word_analogies import from_embeddings

        gen = self.get(name)
        if self.manifest(name).task == "word-vectors":
            return gen
        key = (name, "words")
        with self._lock:
            if key not in self._spaces:
                matrix = load_matrix(self.paths[name], gen.manifest)
                self._spaces[key] = from_embeddings(matrix, gen.tokenizer, name)
            return self._spaces[key]

    def preload(self) -> threading.Thread:
        """Load every model in a background thread, so first requests rarely wait for it."""

        def load_all():
            for name in self.names:
                try:
                    self.get(name)
                except Exception:  # a broken bundle must not stop the others; its tab says why
                    continue

        thread = threading.Thread(target=load_all, name="preload-models", daemon=True)
        thread.start()
        return thread
