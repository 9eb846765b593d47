"""The bundle manifest (manifest.json) as one typed, versioned model: `Manifest`.

Covers every field a bundle's manifest may hold (common ones, then each task's), the default of
each optional field, parsing a manifest.json (`Manifest.read`, `Manifest.from_json`) with the
migration of older schema versions, and writing one (`Manifest.write`, `Manifest.to_json`).
Every exporter builds a `Manifest` and writes it; the runtime reads only through here. A field
of the wrong kind, a missing required field or an unknown schema version is a one-line
`ValueError` naming the field. To add a field: declare it on `Manifest` with a comment and its
default, parse it in `Manifest.from_json`, and say it in docs/bundle.md.

It does not touch the bundle's other files: verifying checksums, finding an adapter's base and
inferring a manifest for an optimum export are runtime/bundle.py's; recording the files'
checksums when a bundle is sealed is convert/manifest.py's.

Schema versions: 1 wrote only the fields an exporter thought of (`batch_invariant` could be
missing); 2 writes every common field. A version 1 manifest reads with the defaults version 1
readers assumed (`migrate_v1`).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 2
READABLE_VERSIONS = (1, 2)
TASKS = ("causal-lm", "seq2seq", "hierarchical-lm", "fill-mask", "word-vectors")
HIERARCHICAL_ROLES = ("word_encoder", "sentence_encoder", "sentence_decoder", "word_decoder")
GRAPH_ROLES = {
    "causal-lm": ("decoder",),
    "seq2seq": ("encoder", "decoder"),
    "hierarchical-lm": HIERARCHICAL_ROLES,
    "fill-mask": ("model",),
}
# The context a causal LM or seq2seq model gets when its (version 1) manifest does not say.
DEFAULT_CONTEXT_LENGTH = 1024
TOKEN_TASKS = ("causal-lm", "seq2seq", "fill-mask")  # the tasks that need `context_length`
# The runtime.GenerationConfig fields a manifest's `generation_defaults` may set: the decoding
# settings and what a model fixes (stop strings, forced and suppressed tokens), not a request's
# own (`json_schema`, `tool_calls`, `cache_salt`).
GENERATION_DEFAULT_FIELDS = (
    "max_new_tokens",
    "min_new_tokens",
    "do_sample",
    "temperature",
    "top_k",
    "top_p",
    "min_p",
    "typical_p",
    "repetition_penalty",
    "no_repeat_ngram_size",
    "num_beams",
    "length_penalty",
    "early_stopping",
    "num_return_sequences",
    "seed",
    "stop",
    "forced_bos_token_id",
    "forced_eos_token_id",
    "suppress_tokens",
)


def _optional(default=None, **kwargs):
    """A field written to manifest.json only when it is not None."""
    return field(default=default, metadata={"optional": True}, **kwargs)


def _to_json(value):
    if dataclasses.is_dataclass(value):
        return {
            f.name: _to_json(getattr(value, f.name))
            for f in dataclasses.fields(value)
            if not (f.metadata.get("optional") and getattr(value, f.name) is None)
        }
    if isinstance(value, Mapping):
        return {key: _to_json(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_to_json(item) for item in value]
    return value


@dataclass(frozen=True)
class FileEntry:
    """One file of the bundle, as the runtime verifies it before creating any session."""

    sha256: str  # hex digest of the file's bytes
    size: int  # bytes


@dataclass(frozen=True)
class Graph:
    """One ONNX graph of the bundle, by role ("decoder", "encoder", "model", …)."""

    file: str  # file name in the bundle
    inputs: tuple[str, ...] = ()  # the graph's input names, as exported
    outputs: tuple[str, ...] = ()  # the graph's output names
    # "shared-buffer": past and present KV cache may be one preallocated buffer (lean
    # GroupQueryAttention graphs); "separate" or None: the runtime feeds the past back in
    kv_cache: str | None = _optional()
    # True: decode steps run one row per call (runtime/models.py): the graph's one-row kernels
    # (4-bit MatMulNBits with float activations) are its fast path and sum in another order than
    # its many-row ones, so every row takes the one-row kernel, alone or batched
    one_row_steps: bool | None = _optional()


@dataclass(frozen=True)
class SpecialTokens:
    bos_token_id: int | None = None
    eos_token_id: int | None = None
    pad_token_id: int | None = None
    decoder_start_token_id: int | None = None  # seq2seq: the decoder's first token


@dataclass(frozen=True)
class ChatSection:
    """A chat model's template (causal LMs; runtime/chat.py renders it in a sandbox)."""

    template: str  # the Jinja chat template, as transformers renders it
    # the special-token strings the template sees (bos_token, …); None: the strings of the
    # manifest's special token ids
    special_tokens: Mapping[str, str] | None = _optional()
    end_of_turn_token_ids: tuple[int, ...] = ()  # tokens that end a reply (none: the EOS token)
    end_of_turn_tokens: tuple[str | None, ...] = ()  # their text

    @classmethod
    def from_json(cls, chat: dict | None) -> ChatSection | None:
        """The section of a manifest's `chat` object; None when it has no template."""
        if not chat or chat.get("template") is None:
            return None
        template = chat["template"]
        if not isinstance(template, str):
            raise _kind_error("chat.template", "a string", template)
        ids = chat.get("end_of_turn_token_ids") or []
        if not isinstance(ids, list) or not all(
            isinstance(i, int) and not isinstance(i, bool) for i in ids
        ):
            raise _kind_error("chat.end_of_turn_token_ids", "a list of integers", ids)
        texts = chat.get("end_of_turn_tokens") or []
        if not isinstance(texts, list):
            raise _kind_error("chat.end_of_turn_tokens", "a list", texts)
        special = _object(chat, "special_tokens", None, name="chat.special_tokens")
        return cls(template, special, tuple(ids), tuple(texts))


@dataclass(frozen=True)
class MemorisationIndex:
    """The training data's sorted n-gram hashes (export/ngram_index.py, runtime/memorisation.py)."""

    file: str  # .npy of uint64 hashes, sorted
    n: int  # words per n-gram
    ngrams: int = 0  # how many hashes
    hash: str = ""  # how an n-gram is hashed, in words
    corpus: str = ""  # which text was indexed


@dataclass(frozen=True)
class Manifest:
    """A bundle's manifest.json. Free-form sections (`controls`, `generation_defaults`,
    `parity`, `metrics`, `training_data`, `export`, …) are the JSON objects as written, never
    changed in place: build a changed manifest with `dataclasses.replace`. Code reads the typed
    fields; what passes the manifest on as JSON (serve's `/v1/models/{id}`) sends `to_json()`."""

    # --- common to every task -----------------------------------------------------------------
    name: str  # display name
    task: str  # one of TASKS: picks the runtime class (runtime/loading.py)
    # every file of the bundle but manifest.json, with its checksum (filled when sealed)
    files: Mapping[str, FileEntry] = field(default_factory=dict)
    architecture: str = ""  # gpt2, llama, mbart, bert, hierarchical-sarah, word2vec …
    precision: str = ""  # fp32, int8, int4
    # whether every graph computes each row of a batch from that row alone (no per-tensor
    # activation quantization): only then may runtime/engine.py batch concurrent requests.
    # Every builder must state it; a version 1 manifest without it reads as False.
    batch_invariant: bool = field(kw_only=True)
    schema_version: int = SCHEMA_VERSION  # the version this manifest was written in
    graphs: Mapping[str, Graph] = field(default_factory=dict)  # role -> graph
    special_tokens: SpecialTokens = field(default_factory=SpecialTokens)
    # control name -> {"kind": "choice" | "numeric", "values": {value: token text}, …}
    # (docs/bundle.md, "Controls"; runtime/text.py applies them)
    controls: Mapping[str, Any] = field(default_factory=dict)
    # GenerationConfig fields the model was meant to run with (runtime.GenerationConfig names)
    generation_defaults: Mapping[str, Any] = field(default_factory=dict)
    parity: Mapping[str, Any] = field(default_factory=dict)  # the export's parity report
    metrics: Mapping[str, Any] = field(default_factory=dict)  # evaluation: name -> value
    training_data: Mapping[str, Any] = field(default_factory=dict)  # corpus, split, licence …
    license: str = ""  # the weights' licence ("": not stated)
    # how the bundle was made: source, description, parameters, optimizer, quantization, versions
    export: Mapping[str, Any] = field(default_factory=dict)
    embeddings: str | None = _optional()  # .npy of the input token embeddings [V, D], float16
    # True for a manifest the runtime inferred from a plain optimum export (no checksums)
    inferred: bool = _optional()

    # --- transformer LMs (causal-lm, seq2seq, fill-mask); hierarchical-lm: num_layers, vocab ----
    num_layers: int | None = _optional()  # decoder layers (the KV cache's)
    num_heads: int | None = _optional()  # KV heads
    head_size: int | None = _optional()
    hidden_size: int | None = _optional()
    vocab_size: int | None = _optional()
    # the longest prompt + output in tokens; required of TOKEN_TASKS (DEFAULT_CONTEXT_LENGTH
    # when a version 1 manifest omits it)
    context_length: int | None = _optional()
    add_bos_token: bool = _optional()  # causal LMs: prepend BOS to an encoded prompt

    # --- causal LMs ---------------------------------------------------------------------------
    prompt_prefix: str | None = _optional()  # text put before every prompt (after controls)
    stop: tuple[str, ...] | None = _optional()  # stop strings every generation ends at
    chat: ChatSection | None = _optional()  # a chat model's template
    memorisation_index: MemorisationIndex | None = _optional()
    # a GGUF import's LoRA slot graph: {"file", "format" (runtime.bundle.LORA_FORMAT), "slots":
    # {slot: {"A", "B", "k", "parts"}}} (convert/gguf.py)
    lora: Mapping[str, Any] | None = _optional()
    # an adapter bundle: {"base": {"name", "file", "sha256", …}, "file", "format", "rank",
    # "alpha", "scaling", "targets", "layers", …}; merged onto its base, `base.lora_slots` too
    adapter: Mapping[str, Any] | None = _optional()

    # --- fill-mask ----------------------------------------------------------------------------
    mask_token: str | None = _optional()
    mask_token_id: int | None = _optional()

    # --- hierarchical-lm (runtime/hierarchical.py) --------------------------------------------
    initial_states: Mapping[str, str] | None = _optional()  # decoder role -> .npy of its state
    kind: str | None = _optional()  # the sentence model's kind ("sarah", "gru")
    charset: tuple[str, ...] | None = _optional()  # the characters, in id order after specials
    specials: tuple[str, ...] | None = _optional()  # the special symbols, ids 0…
    word_chars: int | None = _optional()  # characters per word, at most
    max_words: int | None = _optional()  # words per sentence, at most
    value_size: int | None = _optional()
    word_size: int | None = _optional()
    partial_size: int | None = _optional()  # the word decoder's partial-word state width

    # --- word-vectors (runtime/word_vectors.py) -----------------------------------------------
    vectors: str | None = _optional()  # .npy [V, D]
    vocab: str | None = _optional()  # one word a line (with its count after a tab)
    vector_size: int | None = _optional()
    settings: Mapping[str, Any] | None = _optional()  # the trainer's settings (gensim)
    phrases: Mapping[str, Any] | None = _optional()  # phrase detection's settings
    restricted: Mapping[str, Any] | None = _optional()  # the vocabulary cut from a larger run
    train_seconds: float | None = _optional()

    def __post_init__(self):
        if self.task not in TASKS:
            raise ValueError(f"`task` must be one of {TASKS}, got {self.task!r}")
        if self.schema_version not in READABLE_VERSIONS:
            raise ValueError(
                f"`schema_version` must be one of {READABLE_VERSIONS}, got {self.schema_version!r}"
            )
        if self.adapter is not None:
            if self.task != "causal-lm":
                raise ValueError(f"an adapter's `task` must be causal-lm, got {self.task!r}")
            return
        missing = [key for key in _required(self.task) if getattr(self, key) is None]
        if missing:
            raise ValueError(f"missing keys {missing}")
        for role in GRAPH_ROLES.get(self.task, ()):
            if role not in self.graphs:
                raise ValueError(f"`graphs` has no {role!r} graph for task {self.task}")

    # --- reading ------------------------------------------------------------------------------
    @classmethod
    def read(cls, path: str | Path) -> Manifest:
        """The manifest in the file `path` (a bundle's manifest.json); `ValueError` naming the
        file and the field when it is not a manifest this runtime reads."""
        path = Path(path)
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise ValueError(f"{path} is not valid JSON: {error}") from error
        try:
            return cls.from_json(raw)
        except ValueError as error:
            raise ValueError(f"{path}: {error}") from error

    @classmethod
    def from_json(cls, raw) -> Manifest:
        """The manifest in a JSON document (a dict), migrated to this schema version."""
        if not isinstance(raw, dict):
            raise ValueError(f"must hold a JSON object, got {type(raw).__name__}")
        version = raw.get("schema_version")
        if version not in READABLE_VERSIONS or isinstance(version, bool):
            raise ValueError(
                f"`schema_version` must be one of {READABLE_VERSIONS} (this runtime reads "
                f"versions up to {SCHEMA_VERSION}), got {version!r:.80}"
            )
        if version == 1:
            raw = migrate_v1(raw)
        unknown = sorted(set(raw) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise ValueError(f"unknown keys {unknown[:5]}")
        task = raw.get("task")
        if task not in TASKS:
            raise ValueError(f"`task` must be one of {TASKS}, got {task!r:.80}")
        adapter = _object(raw, "adapter", None)
        if adapter is not None:
            missing = [key for key in ("name", "files") if key not in raw]
            missing += [f"adapter.{key}" for key in ("base", "file") if key not in adapter]
            if missing:
                raise ValueError(f"missing keys {missing}")
            if not isinstance(adapter["base"], dict) or "sha256" not in adapter["base"]:
                raise ValueError(
                    f"`adapter.base` must be an object with a `sha256`, got {adapter['base']!r:.80}"
                )
        else:
            missing = [key for key in ("name", "files", *_required(task)) if key not in raw]
            if missing:
                raise ValueError(f"missing keys {missing}")
        return cls(
            schema_version=SCHEMA_VERSION,
            name=_text(raw, "name", required=True),
            task=task,
            files={name: _file_entry(name, entry) for name, entry in _files(raw).items()},
            architecture=_text(raw, "architecture", ""),
            precision=_text(raw, "precision", ""),
            batch_invariant=_flag(raw, "batch_invariant", False),
            graphs=_graphs(raw),
            special_tokens=_special_tokens(raw),
            controls=_object(raw, "controls", {}),
            generation_defaults=_generation_defaults(raw),
            parity=_object(raw, "parity", {}),
            metrics=_object(raw, "metrics", {}),
            training_data=_object(raw, "training_data", {}),
            license=_text(raw, "license", ""),
            export=_object(raw, "export", {}, nullable=False),
            embeddings=_text(raw, "embeddings", None),
            inferred=_flag(raw, "inferred", None),
            num_layers=_integer(raw, "num_layers"),
            num_heads=_integer(raw, "num_heads"),
            head_size=_integer(raw, "head_size"),
            hidden_size=_integer(raw, "hidden_size"),
            vocab_size=_integer(raw, "vocab_size"),
            context_length=_integer(raw, "context_length"),
            add_bos_token=_flag(raw, "add_bos_token", None),
            prompt_prefix=_text(raw, "prompt_prefix", None),
            stop=_texts(raw, "stop"),
            chat=_chat(raw),
            memorisation_index=_memorisation_index(raw),
            lora=_object(raw, "lora", None),
            adapter=adapter,
            mask_token=_text(raw, "mask_token", None),
            mask_token_id=_integer(raw, "mask_token_id"),
            initial_states=_object(raw, "initial_states", None),
            kind=_text(raw, "kind", None),
            charset=_texts(raw, "charset"),
            specials=_texts(raw, "specials"),
            word_chars=_integer(raw, "word_chars"),
            max_words=_integer(raw, "max_words"),
            value_size=_integer(raw, "value_size"),
            word_size=_integer(raw, "word_size"),
            partial_size=_integer(raw, "partial_size"),
            vectors=_text(raw, "vectors", None),
            vocab=_text(raw, "vocab", None),
            vector_size=_integer(raw, "vector_size"),
            settings=_object(raw, "settings", None),
            phrases=_object(raw, "phrases", None),
            restricted=_object(raw, "restricted", None),
            train_seconds=_number(raw, "train_seconds"),
        )

    # --- writing ------------------------------------------------------------------------------
    def to_json(self) -> dict:
        """The JSON document of this manifest (this schema version; optional fields that are
        None left out)."""
        return _to_json(self)

    def write(self, path: str | Path, *, ensure_ascii: bool = True) -> Manifest:
        """Write this manifest to `path` (indent 2, trailing newline) after reading its JSON back
        (so no bundle is written that the runtime would refuse); return it. `ensure_ascii`
        False writes non-ASCII characters as they are."""
        document = self.to_json()
        text = json.dumps(document, indent=2, ensure_ascii=ensure_ascii, default=str)
        checked = Manifest.from_json(json.loads(text))
        Path(path).write_text(text + "\n", encoding="utf-8")
        return checked


def _required(task: str) -> tuple[str, ...]:
    """The fields a manifest of `task` (not an adapter's) must hold."""
    if task == "word-vectors":
        return ("vectors", "vocab")
    if task == "hierarchical-lm":
        return ("graphs", "num_layers")
    return ("graphs", "num_layers", "num_heads", "head_size", "context_length")


def migrate_v1(raw: dict) -> dict:
    """A version 1 manifest with the defaults that version 1 readers assumed written out:
    `batch_invariant` False, a null licence not stated, and a transformer's `context_length`
    DEFAULT_CONTEXT_LENGTH when it is missing."""
    migrated = dict(raw, schema_version=SCHEMA_VERSION)
    migrated.setdefault("batch_invariant", False)
    if migrated.get("license") is None:
        migrated["license"] = ""
    if migrated.get("task") in TOKEN_TASKS and "adapter" not in migrated:
        migrated["context_length"] = migrated.get("context_length") or DEFAULT_CONTEXT_LENGTH
    return migrated


def _kind_error(key: str, what: str, value) -> ValueError:
    return ValueError(f"`{key}` must be {what}, got {value!r:.80}")


def _text(raw: dict, key: str, default=None, required: bool = False, name: str | None = None):
    value = raw.get(key)
    if value is None and not required:
        return default
    if not isinstance(value, str):
        raise _kind_error(name or key, "a string", value)
    return value


def _texts(raw: dict, key: str) -> tuple[str, ...] | None:
    value = raw.get(key)
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise _kind_error(key, "a list of strings", value)
    return tuple(value)


def _integer(raw: dict, key: str, name: str | None = None) -> int | None:
    value = raw.get(key)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise _kind_error(name or key, "an integer", value)
    return value


def _number(raw: dict, key: str) -> float | None:
    value = raw.get(key)
    if value is None:
        return None
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise _kind_error(key, "a number", value)
    return value


def _flag(raw: dict, key: str, default):
    value = raw.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise _kind_error(key, "true or false", value)
    return value


def _object(raw: dict, key: str, default, nullable: bool = True, name: str | None = None):
    if key not in raw or (raw[key] is None and nullable):
        return default
    value = raw[key]
    if not isinstance(value, dict):
        raise ValueError(f"`{name or key}` must be an object, got {type(value).__name__}")
    return value


def _files(raw: dict) -> dict:
    return _object(raw, "files", {}, nullable=False)


def _file_entry(name: str, entry) -> FileEntry:
    if not isinstance(entry, dict):
        raise ValueError(f"`files.{name}` must be an object, got {entry!r:.80}")
    sha256 = _text(entry, "sha256", "", name=f"files.{name}.sha256")
    size = entry.get("size", 0)
    if not isinstance(size, int) or isinstance(size, bool):
        raise _kind_error(f"files.{name}.size", "an integer", size)
    return FileEntry(sha256=sha256, size=size)


def _graphs(raw: dict) -> dict[str, Graph]:
    graphs = _object(raw, "graphs", {}, nullable=False)
    parsed = {}
    for role, entry in graphs.items():
        where = f"graphs.{role}"
        if not isinstance(entry, dict):
            raise ValueError(f"`{where}` must be an object, got {entry!r:.80}")
        if not isinstance(entry.get("file"), str):
            raise _kind_error(f"{where}.file", "a string", entry.get("file"))
        names = {}
        for side in ("inputs", "outputs"):
            value = entry.get(side, [])
            if not isinstance(value, list) or not all(isinstance(n, str) for n in value):
                raise _kind_error(f"{where}.{side}", "a list of strings", value)
            names[side] = tuple(value)
        kv_cache = entry.get("kv_cache")
        if kv_cache is not None and not isinstance(kv_cache, str):
            raise _kind_error(f"{where}.kv_cache", "a string", kv_cache)
        one_row_steps = entry.get("one_row_steps")
        if one_row_steps is not None and not isinstance(one_row_steps, bool):
            raise _kind_error(f"{where}.one_row_steps", "true or false", one_row_steps)
        parsed[role] = Graph(
            file=entry["file"], kv_cache=kv_cache, one_row_steps=one_row_steps, **names
        )
    return parsed


def _special_tokens(raw: dict) -> SpecialTokens:
    tokens = _object(raw, "special_tokens", {})
    return SpecialTokens(
        **{
            f.name: _integer(tokens, f.name, f"special_tokens.{f.name}")
            for f in dataclasses.fields(SpecialTokens)
        }
    )


def _chat(raw: dict) -> ChatSection | None:
    return ChatSection.from_json(_object(raw, "chat", None))


def _generation_defaults(raw: dict) -> dict:
    defaults = _object(raw, "generation_defaults", {})
    unknown = [key for key in defaults if key not in GENERATION_DEFAULT_FIELDS]
    if unknown:
        raise ValueError(f"`generation_defaults` has unknown key `{unknown[0]}`")
    return defaults


def _memorisation_index(raw: dict) -> MemorisationIndex | None:
    entry = _object(raw, "memorisation_index", None)
    if entry is None:
        return None
    missing = [f"memorisation_index.{key}" for key in ("file", "n") if entry.get(key) is None]
    if missing:
        raise ValueError(f"missing keys {missing}")
    return MemorisationIndex(
        file=_text(entry, "file", name="memorisation_index.file"),
        n=_integer(entry, "n", "memorisation_index.n"),
        ngrams=_integer(entry, "ngrams", "memorisation_index.ngrams") or 0,
        hash=_text(entry, "hash", "", name="memorisation_index.hash"),
        corpus=_text(entry, "corpus", "", name="memorisation_index.corpus"),
    )
