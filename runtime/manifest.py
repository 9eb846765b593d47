"""The bundle manifest (manifest.json) as one typed, versioned model: `Manifest`.

Covers every field a bundle's manifest may hold (common ones, then each task's), the default of
each optional field, parsing a manifest.json (`Manifest.read`, `Manifest.from_json`) with the
migration of older schema versions, and writing one (`Manifest.write`, `Manifest.to_json`).
Every exporter builds a `Manifest` and writes it; every other module reads a manifest through
its typed fields and sections (`Control`, `GenerationDefaults`, `Parity`, `ExportInfo`, `Lora`,
`Adapter`, …), never by key (tests/test_manifest_access.py). A field of the wrong kind, a key a
section does not declare, a missing required field or an unknown schema version is a one-line
`ValueError` naming the field. To add a field: declare it on `Manifest` or its section with a
comment and its default (`_parse` reads it by its type, `_to_json` writes it) and say it in
docs/bundle.md.

It does not touch the bundle's other files: verifying checksums, finding an adapter's base and
inferring a manifest for an optimum export are runtime/bundle.py's; recording the files'
checksums when a bundle is sealed is convert/manifest.py's.

Schema versions: 1 wrote only the fields an exporter thought of (`batch_invariant` could be
missing); 2 writes every common field. A version 1 manifest reads with the defaults version 1
readers assumed (`migrate_v1`).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .parameters import PARAMETERS

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


# --- the typed sections ---------------------------------------------------------------------------
# Each section is a frozen dataclass read by `_parse` and written by `_to_json`, the module's one
# parser and one writer: a key the section does not declare is refused naming the field
# ("`generation_defaults` has unknown key `foo`"), a value of the wrong kind likewise, and an
# optional field that was not in the file is not written back. `Any` marks a report kept as the
# exporter wrote it (JSON values: numbers, strings, lists, objects), read only to show it.


class _Section:
    """A typed section: written back as the JSON object it was read from (`_to_json`)."""

    def to_json(self) -> dict:
        return _to_json(self)

    def __bool__(self) -> bool:
        """Whether the section holds anything (an exporter that wrote no parity report)."""
        return bool(self.to_json())


@dataclass(frozen=True)
class FileEntry(_Section):
    """One file of the bundle, as the runtime verifies it before creating any session."""

    sha256: str = ""  # hex digest of the file's bytes ("": an optimum export's, not recorded)
    size: int = 0  # bytes


@dataclass(frozen=True)
class Graph(_Section):
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
class ChatSection(_Section):
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
        return _parse(cls, chat, "chat")


@dataclass(frozen=True)
class MemorisationIndex(_Section):
    """The training data's sorted n-gram hashes (export/ngram_index.py, runtime/memorisation.py)."""

    file: str  # .npy of uint64 hashes, sorted
    n: int  # words per n-gram
    ngrams: int = 0  # how many hashes
    hash: str = ""  # how an n-gram is hashed, in words
    corpus: str = ""  # which text was indexed


@dataclass(frozen=True)
class Control(_Section):
    """One control (docs/bundle.md, "Controls"; runtime/text.py applies it): each value is a
    special token put before the prompt."""

    kind: str  # "choice" or "numeric" (the values are numbers, the nearest one is used)
    values: Mapping[str, str]  # value -> the special token's text
    description: str | None = _optional()  # what the control steers, for people


def _given(self) -> dict[str, Any]:
    """The fields this manifest gives, by `GenerationConfig` name."""
    return {
        f.name: getattr(self, f.name)
        for f in dataclasses.fields(self)
        if getattr(self, f.name) is not None
    }


# The GenerationConfig fields a model was meant to run with (runtime/config.py), None where not
# given: every decoding parameter runtime/parameters.py declares but a request's own JSON schema,
# then what a model fixes: stop strings, forced tokens (BART, Marian) and tokens never generated.
GenerationDefaults = dataclasses.make_dataclass(
    "GenerationDefaults",
    [
        (p.name, (Any if p.type is object else p.type) | None, _optional())
        for p in PARAMETERS
        if p.name != "json_schema"
    ]
    + [
        ("stop", tuple[str, ...] | None, _optional()),
        ("forced_bos_token_id", int | None, _optional()),
        ("forced_eos_token_id", int | None, _optional()),
        ("suppress_tokens", tuple[int, ...] | None, _optional()),
    ],
    bases=(_Section,),
    frozen=True,
    namespace={"given": _given, "__module__": __name__},
)


# The GenerationConfig fields a manifest may set: the decoding settings and what a model fixes
# (stop strings, forced and suppressed tokens), never a request's own (`json_schema`,
# `tool_calls`, `cache_salt`).
GENERATION_DEFAULT_FIELDS = tuple(f.name for f in dataclasses.fields(GenerationDefaults))


@dataclass(frozen=True)
class LoraSlot(_Section):
    """One LoRA slot of a GGUF import's slot graph (docs/GGUF.md): x·A·B added to the outputs
    of the modules it covers."""

    A: str  # the graph input of the (k, r) factor
    B: str  # the graph input of the (r, rows) factor
    k: int  # input width
    parts: tuple[tuple[str, int], ...]  # (module, output rows) in the order B's columns hold them


@dataclass(frozen=True)
class Lora(_Section):
    """A GGUF import's LoRA slot graph (convert/gguf.py), which adapter bundles run on."""

    file: str  # the slot graph's file in the bundle
    format: int  # its layout's version (runtime.bundle.LORA_FORMAT)
    slots: Mapping[str, LoraSlot]  # slot name ("lora.{layer}.{modules}") -> slot


@dataclass(frozen=True)
class AdapterBase(_Section):
    """The base model an adapter bundle was trained on, named by its GGUF file's sha256."""

    sha256: str  # of the base's GGUF file (the converted bundle records it: `export.gguf`)
    name: str | None = _optional()  # the base's display name
    file: str | None = _optional()  # the GGUF file's name
    architecture: str | None = _optional()
    # the base's LoRA slots, filled when the adapter is merged onto its base (never written)
    lora_slots: Mapping[str, LoraSlot] | None = _optional()


@dataclass(frozen=True)
class Adapter(_Section):
    """An adapter bundle's LoRA weights (train/adapter/, export/adapter.py): onnxruntime's
    adapter file over its base's LoRA slot graph."""

    base: AdapterBase
    file: str  # the onnxruntime adapter file in the bundle
    format: int | None = _optional()  # the adapter file's layout version
    rank: int | None = _optional()
    alpha: float | None = _optional()
    use_rslora: bool | None = _optional()
    scaling: float | None = _optional()  # alpha / rank (or / sqrt(rank)), folded into B
    targets: tuple[str, ...] | None = _optional()  # the modules adapted
    layers: tuple[int, ...] | None = _optional()  # the layers adapted


@dataclass(frozen=True)
class GgufHeads(_Section):
    """A GGUF model's attention heads, as its metadata gives them."""

    query_heads: int
    kv_heads: int


@dataclass(frozen=True)
class GgufSource(_Section):
    """The GGUF file a bundle was converted from (convert/gguf.py)."""

    file: str
    sha256: str  # adapters name their base by it
    size: int | None = _optional()
    metadata: Any = _optional()  # the file's metadata, as read (arrays summarised)
    metadata_summary: GgufHeads | None = _optional()
    tokenizer: Any = _optional()  # the tokenizer's model and pre-tokenizer


@dataclass(frozen=True)
class Quantization(_Section):
    """How a bundle's weights were quantized (the exporters', convert/quantize.py's and the GGUF
    and Hugging Face imports' reports)."""

    summary: str | None = _optional()  # one line for people
    method: str | None = _optional()  # the quantization scheme
    source: str | None = _optional()  # what was quantized (export/requantize.py: the fp32 graph)
    graphs: Any = _optional()  # role -> that graph's quantizer report
    accuracy_level: int | None = _optional()  # MatMulNBits' (0: float activations)
    head_accuracy_level: int | None = _optional()  # the LM head's, where it differs
    storage: Mapping[str, str] | None = _optional()  # GGUF tensor type -> how it is stored
    notes: tuple[str, ...] | None = _optional()
    tied_embeddings: bool | None = _optional()


@dataclass(frozen=True)
class HuggingFaceSource(_Section):
    """The Hugging Face checkpoint a bundle was exported from without torch
    (convert/hf_checkpoint.py)."""

    directory: str  # the checkpoint folder's name
    config_sha256: str  # of its config.json
    weights_sha256: Mapping[str, str] | None = _optional()  # weight file -> sha256
    weight_dtypes: tuple[str, ...] | None = _optional()
    config: Any = _optional()  # the config's fields the conversion read
    query_heads: int | None = _optional()
    kv_heads: int | None = _optional()
    qk_rows: str | None = _optional()  # how q and k rows were laid out for the rotary kernel


@dataclass(frozen=True)
class GraphSize(_Section):
    """A converted graph's size."""

    nodes: int
    weight_bytes: int


@dataclass(frozen=True)
class ExportInfo(_Section):
    """How a bundle was made. Every exporter fills the fields that apply to it."""

    source: str | None = _optional()  # "model", "gguf", "huggingface", "peft", a run folder …
    description: str | None = _optional()  # one line for people
    parameters: int | None = _optional()  # weights, counted
    autoencoder_source: str | None = _optional()  # hierarchical: the autoencoder's run
    model: Any = _optional()  # GRU seq2seq: the model's settings
    opset: int | None = _optional()  # the ONNX opset
    optimizer: Any = _optional()  # the graph optimizer's report (export/exporter.py)
    # how the weights were quantized, or per graph (role or file) its quantized operators' counts
    # (the hierarchical and GRU exporters')
    quantization: Quantization | Mapping[str, Mapping[str, int]] | None = _optional()
    versions: Mapping[str, str] | None = _optional()  # package -> version used
    peft_config: Any = _optional()  # an adapter's PEFT settings
    gguf: GgufSource | None = _optional()  # a GGUF import's source file
    huggingface: HuggingFaceSource | None = _optional()  # a Hugging Face checkpoint's source
    graph: GraphSize | None = _optional()  # a GGUF or Hugging Face import's graph

    @property
    def quantization_report(self) -> Quantization:
        """The quantization report (empty for a bundle that has none, or only operator counts)."""
        found = self.quantization
        return found if isinstance(found, Quantization) else Quantization()

    @property
    def optimizer_summary(self) -> str | None:
        """One line on what the graph optimizer did, when the report has one."""
        found = isinstance(self.optimizer, Mapping) and self.optimizer.get("summary")
        return found if isinstance(found, str) else None


@dataclass(frozen=True)
class LogitsParity(_Section):
    """A transformer export's logits against its reference, over the parity prompts."""

    prefill_max_abs_diff: float | None = _optional()
    cached_step_max_abs_diff: float | None = _optional()
    max_abs_logit: float | None = _optional()  # the reference's logit scale
    argmax_agreement: float | None = _optional()
    prompts: int | None = _optional()


@dataclass(frozen=True)
class GreedyParity(_Section):
    """Greedy generations through the bundle against the reference's."""

    prompts: int | None = _optional()
    sentences: int | None = _optional()  # hierarchical: the sentences decoded
    new_tokens: int | None = _optional()
    identical_sequences: int | None = _optional()
    token_agreement: float | None = _optional()
    first_divergence: tuple[int | None, ...] | None = _optional()  # per prompt; None: identical
    identical: int | None = _optional()  # hierarchical: of `compared`
    compared: int | None = _optional()
    max_abs_logit_diff: float | None = _optional()
    decoders: tuple[str, ...] | None = _optional()  # hierarchical: the decoders compared


@dataclass(frozen=True)
class PerplexityParity(_Section):
    """Perplexity of one text through the reference and the bundle."""

    tokens: int | None = _optional()
    pytorch: float | None = _optional()  # the reference when it is PyTorch
    fp32: float | None = _optional()  # the reference when it is the fp32 graph
    onnx: float | None = _optional()
    relative_change_pct: float | None = _optional()


@dataclass(frozen=True)
class MaskedParity(_Section):
    """A fill-mask graph against PyTorch on sentences with 15 % of their tokens masked."""

    sentences: int | None = _optional()
    masked_positions: int | None = _optional()
    max_abs_logit_diff: float | None = _optional()
    max_abs_logit: float | None = _optional()
    masked_argmax_agreement: float | None = _optional()
    argmax_agreement: float | None = _optional()
    min_hidden_cosine: float | None = _optional()  # of the last hidden states


@dataclass(frozen=True)
class Parity(_Section):
    """The export's parity report: how closely the bundle's graphs follow their reference. Each
    exporter fills its own fields; numbers are maxima over the report's prompts or sentences."""

    reference: str | None = _optional()  # what the bundle was compared with
    prompts: int | None = _optional()
    sentences: int | None = _optional()
    new_tokens: int | None = _optional()
    max_abs_logit: float | None = _optional()  # the reference's logit scale
    max_abs_logit_diff: float | None = _optional()
    cached_step_max_abs_diff: float | None = _optional()
    base_max_abs_logit_diff: float | None = _optional()  # adapters: the base's own diff
    top1_agreement: float | None = _optional()
    greedy_identical: str | None = _optional()  # "3 / 4"
    logits_max_abs_diff: float | None = _optional()  # GRU seq2seq
    attention_max_abs_diff: float | None = _optional()  # GRU seq2seq with attention
    logits: LogitsParity | None = _optional()  # transformer exports
    greedy: GreedyParity | None = _optional()
    fp32_greedy: GreedyParity | None = _optional()  # hierarchical int8: the fp32 graphs'
    perplexity: PerplexityParity | None = _optional()
    transformers: Parity | None = _optional()  # Hugging Face imports: against transformers
    unoptimized_fp32: MaskedParity | None = _optional()  # fill-mask: before optimization
    bundle: MaskedParity | None = _optional()  # fill-mask: the bundle's graph
    graphs_max_abs_diff: Mapping[str, float] | None = _optional()  # hierarchical: role -> diff
    gru_linear_before_reset: Mapping[str, tuple[int, ...]] | None = _optional()


@dataclass(frozen=True)
class Manifest:
    """A bundle's manifest.json. Sections are typed (`Control`, `GenerationDefaults`, `Parity`,
    `ExportInfo`, `Lora`, `Adapter`, …): a section given as its JSON object is parsed when the
    manifest is built, so exporters may pass either. `metrics` (name -> value) and
    `training_data` (copied from the training run's card) are JSON as written, shown, never
    interpreted. Never changed in place: build a changed manifest with `dataclasses.replace`.
    What passes the manifest on as JSON (serve's `/v1/models/{id}`) sends `to_json()`."""

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
    controls: Mapping[str, Control] = field(default_factory=dict)  # control name -> control
    # GenerationConfig fields the model was meant to run with
    generation_defaults: GenerationDefaults = field(default_factory=GenerationDefaults)
    parity: Parity = field(default_factory=Parity)  # the export's parity report
    metrics: Mapping[str, Any] = field(default_factory=dict)  # evaluation: name -> value
    training_data: Mapping[str, Any] = field(default_factory=dict)  # corpus, split, licence …
    license: str = ""  # the weights' licence ("": not stated)
    export: ExportInfo = field(default_factory=ExportInfo)  # how the bundle was made
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
    lora: Lora | None = _optional()  # a GGUF import's LoRA slot graph
    adapter: Adapter | None = _optional()  # an adapter bundle's weights and base

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
        hints = _hints(Manifest)
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is not None:  # None: not given
                object.__setattr__(self, f.name, _parse(hints[f.name], value, f.name))
        if self.task not in TASKS:
            raise ValueError(f"`task` must be one of {TASKS}, got {self.task!r}")
        corpus = self.training_data.get("corpus")
        if corpus is not None and not isinstance(corpus, str):
            raise _kind_error("training_data.corpus", "a string", corpus)
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

    # --- the training facts code reads from the free-form `training_data` ---------------------
    @property
    def corpus(self) -> str | None:
        """What the model was trained on (`training_data.corpus`), when stated."""
        return self._training_fact("corpus")

    @property
    def source_language(self) -> str | None:
        """A translator's source language (`training_data.source_language`), when stated."""
        return self._training_fact("source_language")

    @property
    def target_language(self) -> str | None:
        """A translator's target language (`training_data.target_language`), when stated."""
        return self._training_fact("target_language")

    @property
    def language_pair(self) -> str | None:
        """A language pair such as "en-es" (`training_data.pair`), when stated."""
        return self._training_fact("pair")

    def _training_fact(self, key: str) -> str | None:
        value = self.training_data.get(key)
        return None if value is None else str(value)

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
        if raw.get("adapter") is not None:
            missing = [key for key in ("name", "files") if key not in raw]
        else:
            missing = [key for key in ("name", "files", *_required(task)) if key not in raw]
        if missing:
            raise ValueError(f"missing keys {missing}")
        for key in NOT_NULL:
            if key in raw and raw[key] is None:
                _parse(_hints(cls)[key], None, key)  # raises, naming the field
        # null: the field's default, as older exporters wrote "not stated"
        given = {key: value for key, value in raw.items() if value is not None}
        chat = given.get("chat")
        if isinstance(chat, dict) and chat.get("template") is None:
            del given["chat"]  # a template of null: not a chat model
        return cls(**{"batch_invariant": False, **given, "schema_version": SCHEMA_VERSION})

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


# The fields a manifest.json may not hold as null (the others' null reads as their default).
NOT_NULL = ("name", "files", "graphs", "export")


def _parse(kind, value, where: str):
    """`value` (JSON, or already the typed value) as `kind`, a section's declared type; a
    `ValueError` naming the field `where` when it is not."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if kind is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arm in (arm for arm in args if arm is not type(None)):
            try:
                return _parse(arm, value, where)
            except ValueError as error:
                errors.append(error)
        raise errors[0]  # the first kind's reason: a section's names its unknown key
    if dataclasses.is_dataclass(kind):
        return value if isinstance(value, kind) else _parse_section(kind, value, where)
    if origin is Mapping or kind is Mapping:
        if not isinstance(value, Mapping):
            raise ValueError(f"`{where}` must be an object, got {type(value).__name__}")
        item = args[1] if args else Any
        return {key: _parse(item, entry, f"{where}.{key}") for key, entry in value.items()}
    if origin is tuple:
        if not isinstance(value, list | tuple):
            raise _kind_error(where, _describe(kind), value)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_parse(args[0], entry, f"{where}[{i}]") for i, entry in enumerate(value))
        if len(value) != len(args):
            raise _kind_error(where, _describe(kind), value)
        return tuple(
            _parse(arm, entry, f"{where}[{i}]") for i, (arm, entry) in enumerate(zip(args, value))
        )
    if not _is_kind(kind, value):
        raise _kind_error(where, _describe(kind), value)
    return value


def _parse_section(kind, value, where: str):
    if not isinstance(value, Mapping):
        raise ValueError(f"`{where}` must be an object, got {type(value).__name__}")
    fields = {f.name: f for f in dataclasses.fields(kind)}
    unknown = [key for key in value if key not in fields]
    if unknown:
        raise ValueError(f"`{where}` has unknown key `{unknown[0]}`")
    required = [
        name
        for name, f in fields.items()
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    missing = [f"{where}.{name}" for name in required if value.get(name) is None]
    if missing:
        raise ValueError(f"missing keys {missing}")
    hints = _hints(kind)
    return kind(
        **{key: _parse(hints[key], entry, f"{where}.{key}") for key, entry in value.items()}
    )


@functools.cache
def _hints(kind) -> dict:
    """A section's field types (its annotations, evaluated once)."""
    return typing.get_type_hints(kind)


def _is_kind(kind, value) -> bool:
    if kind is bool:
        return isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    return isinstance(value, kind)


def _describe(kind) -> str:
    """How an error names the kind a field must be."""
    names = {str: "a string", int: "an integer", float: "a number", bool: "true or false"}
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_describe(arm) for arm in args if arm is not type(None))
    if origin is tuple:
        return (
            f"a list of {_describe(args[0]).split(' ', 1)[1]}s"
            if args[-1] is Ellipsis
            else "a list"
        )
    return names.get(kind, "an object")
